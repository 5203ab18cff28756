"""Command-line entry points of fairseq-san."""

import argparse
import contextlib
import errno
import functools
import logging
import os
import signal
import sys
import threading
from typing import Callable, Iterator, List, TypeVar

from fairseq_san.errors import OutputError

Result = TypeVar("Result")

# fairseq's log format (fairseq_cli.train's), for the commands with a progress log.
LOG_FORMAT = "%(asctime)s | %(levelname)s | %(name)s | %(message)s"
LOG_DATE_FORMAT = "%Y-%m-%d %H:%M:%S"


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's "(default: X)" after an option's help, except where there is no value to show:
    a switch (it takes no value), no default, or a help that names its own."""

    def _get_help_string(self, action: argparse.Action) -> str:
        help = action.help or ""
        if action.nargs == 0 or action.default is None or "default:" in help:
            return help
        return super()._get_help_string(action)


def log_progress() -> None:
    """Log INFO and above to standard error in fairseq's format, timestamps and all (the
    commands that can run for minutes: fairseq-san-bench, -average, -spm train)."""
    logging.basicConfig(
        format=LOG_FORMAT, datefmt=LOG_DATE_FORMAT, level=logging.INFO, stream=sys.stderr
    )


class _CheckedOutput:
    """Standard output as a command writes it: a failed write or flush raised as OutputError,
    told apart from the command's errors of the file system. A command started with it closed
    (``>&-``; Python's ``sys.stdout`` is then None) fails at its first write, as coreutils' do:
    it was an AttributeError traceback."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        if self._stream is None:
            raise OutputError(OSError(errno.EBADF, os.strerror(errno.EBADF)))
        return self._checked(self._stream.write, text)

    def flush(self) -> None:
        if self._stream is not None:  # closed: nothing was written
            self._checked(self._stream.flush)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)

    @staticmethod
    def _checked(call: Callable[..., Result], *args) -> Result:
        try:
            return call(*args)
        except OSError as err:
            raise OutputError(err) from None


def drop_unwritten_output() -> None:
    """Point standard output at /dev/null: Python flushes it again at exit, which would fail
    again (the Python docs' recipe, "Note on SIGPIPE"). Also for fairseq's commands
    (``fairseq_fixes.one_line_errors``). Not where it started closed: Python writes none."""
    if sys.__stdout__ is None:
        return
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
        except BrokenPipeError:  # a write that is not through sys.stdout's
            drop_unwritten_output()
            sys.exit(128 + signal.SIGPIPE)
        except OutputError as err:
            drop_unwritten_output()
            if err.closed:
                sys.exit(128 + signal.SIGPIPE)
            sys.exit(f"{command_name()}: error: cannot write the standard output: {err.strerror}")
        finally:
            sys.stdout = stdout

    return run


def command_name() -> str:
    """The running command's name, argparse's default prog."""
    return os.path.basename(sys.argv[0])


def said_when_interrupted(main: Callable[..., Result]) -> Callable[..., Result]:
    """``main`` of a command, ending on an interrupt (Ctrl-C) with one line, ``PROG:
    interrupted``, and the status a shell gives a command killed by SIGINT, not a traceback of
    wherever it was; what it started is stopped on the way (``finally`` blocks)."""

    @functools.wraps(main)
    def run(*args, **kwargs) -> Result:
        with interrupts_counted() as interrupts:
            try:
                return main(*args, **kwargs)
            except KeyboardInterrupt:
                pass
            except Exception:  # an interrupt that a library turned into another error
                if not interrupts:
                    raise
        print(f"{command_name()}: interrupted", file=sys.stderr)
        sys.exit(128 + signal.SIGINT)

    return run


@contextlib.contextmanager
def interrupts_counted() -> Iterator[List[int]]:
    """A list of the interrupts (SIGINT) received meanwhile, each raised as KeyboardInterrupt as
    Python's own handler does: one that reached an import inside (numpy's, under fairseq's) ended
    in a RecursionError traceback of some 90 lines, status 1. Python's handler only, in the main
    thread (the one that may set it)."""
    interrupts: List[int] = []
    if threading.current_thread() is not threading.main_thread() or (
        signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield interrupts
        return

    def counted(signum: int, frame) -> None:
        interrupts.append(signum)
        signal.default_int_handler(signum, frame)

    signal.signal(signal.SIGINT, counted)
    try:
        yield interrupts
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


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


def integer_from(minimum: int, what: str) -> Callable[[str], int]:
    """An argparse type: an integer of at least ``minimum``, else "TEXT is not WHAT" (for a word
    too: argparse's own message named the type function, "invalid positive_int value")."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(f"{text} is not {what}")
        return value

    return parse


positive_int = integer_from(1, "a positive integer")


def analysis_file(path: str) -> str:
    """``path``, or the js.json in it where it is an analysis folder (``--san-analysis-dir``)."""
    return os.path.join(path, "js.json") if os.path.isdir(path) else path
