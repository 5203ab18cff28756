"""Command-line entry points of fairseq-san."""

import argparse
import contextlib
import functools
import logging
import os
import signal
import sys
from typing import Callable, Iterator, TypeVar

Result = TypeVar("Result")

# fairseq's log format (fairseq_cli.train's), for the commands with a progress log.
LOG_FORMAT = "%(asctime)s | %(levelname)s | %(name)s | %(message)s"
LOG_DATE_FORMAT = "%Y-%m-%d %H:%M:%S"


def log_progress() -> None:
    """Log INFO and above to standard error in fairseq's format, timestamps and all (the
    commands that can run for minutes: fairseq-san-bench, -average, -spm train)."""
    logging.basicConfig(
        format=LOG_FORMAT, datefmt=LOG_DATE_FORMAT, level=logging.INFO, stream=sys.stderr
    )


class OutputError(OSError):
    """A write to standard output failed for a reason other than a closed pipe (a full disk,
    ``> /dev/full``)."""


class _CheckedOutput:
    """Standard output as a command writes it: a failed write or flush raised as OutputError,
    told apart from the command's other errors of the file system; a closed pipe stays a
    BrokenPipeError."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return self._checked(self._stream.write, text)

    def flush(self) -> None:
        self._checked(self._stream.flush)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)

    @staticmethod
    def _checked(call: Callable[..., Result], *args) -> Result:
        try:
            return call(*args)
        except BrokenPipeError:
            raise
        except OSError as err:
            raise OutputError(err.errno, err.strerror) from None


def drop_unwritten_output() -> None:
    """Point standard output at /dev/null: Python flushes it again at exit, which would fail
    again (the Python docs' recipe, "Note on SIGPIPE"). Also for fairseq's commands
    (``fairseq_fixes.one_line_errors``)."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def quiet_when_output_closes(main: Callable[..., Result]) -> Callable[..., Result]:
    """``main`` of a command that prints its results, ending quietly when the program reading
    them stops (``fairseq-san-policy JS ... --map 0.1 | head -2``) with the status a shell gives
    a command killed by SIGPIPE, as Unix tools do, instead of a BrokenPipeError traceback; an
    output that cannot be written (``> /dev/full``) is one line and status 1, as coreutils' are.
    Only where the one pipe is the output (the benchmark's report, not its run: its workers talk
    through pipes)."""

    @functools.wraps(main)
    def run(*args, **kwargs) -> Result:
        stdout = sys.stdout
        sys.stdout = _CheckedOutput(stdout)
        try:
            result = main(*args, **kwargs)
            sys.stdout.flush()
            return result
        except BrokenPipeError:
            drop_unwritten_output()
            sys.exit(128 + signal.SIGPIPE)
        except OutputError as err:
            drop_unwritten_output()
            prog = os.path.basename(sys.argv[0])  # argparse's default prog, the command's name
            sys.exit(f"{prog}: error: cannot write the standard output: {err.strerror}")
        finally:
            sys.stdout = stdout

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
