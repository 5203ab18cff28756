"""Command-line entry points of fairseq-san."""

import argparse
import functools
import os
import signal
import sys
from typing import Callable, TypeVar

Result = TypeVar("Result")

# fairseq's log format, for the commands with a progress log (fairseq-san-bench, -average).
LOG_FORMAT = "%(asctime)s | %(levelname)s | %(name)s | %(message)s"


def quiet_when_output_closes(main: Callable[..., Result]) -> Callable[..., Result]:
    """``main`` of a command that prints its results, ending quietly when the program reading
    them stops (``fairseq-san-policy JS ... --map 0.1 | head -2``) with the status a shell gives
    a command killed by SIGPIPE, as Unix tools do, instead of a BrokenPipeError traceback. Only
    for commands whose one pipe is their output (not the benchmark, whose workers talk through
    pipes)."""

    @functools.wraps(main)
    def run(*args, **kwargs) -> Result:
        try:
            result = main(*args, **kwargs)
            sys.stdout.flush()
            return result
        except BrokenPipeError:
            # Python flushes stdout again at exit: point it at /dev/null (the Python docs'
            # recipe, "Note on SIGPIPE").
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(128 + signal.SIGPIPE)

    return run


def positive_int(text: str) -> int:
    """argparse type: an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def analysis_file(path: str) -> str:
    """``path``, or the js.json in it where it is an analysis folder (``--san-analysis-dir``)."""
    return os.path.join(path, "js.json") if os.path.isdir(path) else path
