"""A text input that is not UTF-8 is one line naming it.

Upstream behaviour corrected: fairseq reads fairseq-preprocess's inputs in chunks
(``file_chunker_utils``), and where a chunk's first line does not decode it steps back a byte at
a time, to find where a character split between two chunks begins; bytes that are no UTF-8 at
all took it back past the file's start: "ValueError: negative seek position -1", a traceback
naming no file. Such bytes further on were a ``UnicodeDecodeError`` traceback, naming no file
either. ``install()`` wraps that read and the chunk's lines so that both are a ``UsageError``
naming the file.
"""

import contextlib
import functools
from typing import Callable, Iterator

from fairseq_san.errors import UsageError
from fairseq_san.fairseq_fixes.wrapping import wrap_once


def not_utf8(fd) -> UsageError:
    """The error of text file ``fd`` holding bytes that are no UTF-8."""
    return UsageError(
        f"{getattr(fd, 'name', 'an input')} is not UTF-8 text: fairseq reads its inputs as "
        "UTF-8; convert it (iconv -f ENCODING -t UTF-8)"
    )


@contextlib.contextmanager
def named_when_undecodable(fd) -> Iterator[None]:
    """Raise ``not_utf8(fd)`` for fairseq's errors of reading ``fd``'s bytes that are no UTF-8:
    a ``UnicodeDecodeError``, or its search for a character's start gone before the file's."""
    try:
        yield
    except ValueError as error:  # UnicodeDecodeError is one
        if not isinstance(error, UnicodeDecodeError) and "negative seek position" not in str(error):
            raise
        raise not_utf8(fd) from None


def _naming_the_file(safe_readline: Callable) -> Callable:
    @functools.wraps(safe_readline)
    def wrapper(fd):
        with named_when_undecodable(fd):
            return safe_readline(fd)

    return wrapper


def _naming_the_file_of_each_line(iterate: Callable) -> Callable:
    @functools.wraps(iterate)
    def wrapper(self) -> Iterator[str]:
        with named_when_undecodable(self._fd):
            yield from iterate(self)

    return wrapper


def install() -> None:
    """Name the file in a non-UTF-8 input's read errors (idempotent)."""
    from fairseq import file_chunker_utils

    wrap_once(file_chunker_utils, "_safe_readline", _naming_the_file)
    wrap_once(file_chunker_utils.ChunkLineIterator, "__iter__", _naming_the_file_of_each_line)
