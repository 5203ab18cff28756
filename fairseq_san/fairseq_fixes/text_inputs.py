"""A text input that is not UTF-8 is one line naming it.

Upstream behaviour corrected: fairseq reads fairseq-preprocess's inputs in chunks
(``file_chunker_utils``), and where a line does not decode it steps back a byte at a time, to
find where a character split between two chunks begins; bytes that are no UTF-8 at all took it
back past the file's start: "ValueError: negative seek position -1", a traceback naming no file.
``install()`` wraps that read so that this is a ``UsageError`` naming the file.
"""

import functools
from typing import Callable

from fairseq_san.errors import UsageError
from fairseq_san.fairseq_fixes.wrapping import wrap_once


def _naming_the_file(safe_readline: Callable) -> Callable:
    @functools.wraps(safe_readline)
    def wrapper(fd):
        try:
            return safe_readline(fd)
        except ValueError as error:
            if "negative seek position" not in str(error):
                raise
            raise UsageError(
                f"{getattr(fd, 'name', 'an input')} is not UTF-8 text: fairseq reads its inputs "
                "as UTF-8; convert it (iconv -f ENCODING -t UTF-8)"
            ) from None

    return wrapper


def install() -> None:
    """Name the file in a non-UTF-8 input's read error (idempotent)."""
    from fairseq import file_chunker_utils

    wrap_once(file_chunker_utils, "_safe_readline", _naming_the_file)
