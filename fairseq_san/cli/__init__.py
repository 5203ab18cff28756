"""Command-line entry points of fairseq-san."""

import argparse
import contextlib
import functools
import os
import signal
import sys
from typing import Callable, Iterator, TypeVar

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


def _exit_on_signal(signum: int, frame) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def exiting_on_termination() -> Iterator[None]:
    """SIGTERM and SIGHUP end this process as an interrupt does, through ``finally`` blocks, so
    that the processes it started are stopped (fairseq-san-cpu-ranks' ranks were left running,
    holding the run's lock; the benchmark's workers went on decoding)."""
    previous = {sig: signal.signal(sig, _exit_on_signal) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def positive_int(text: str) -> int:
    """argparse type: an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def analysis_file(path: str) -> str:
    """``path``, or the js.json in it where it is an analysis folder (``--san-analysis-dir``)."""
    return os.path.join(path, "js.json") if os.path.isdir(path) else path
