"""A dictionary file fairseq cannot read is one line naming it.

Upstream behaviour corrected: ``fairseq.data.Dictionary.add_from_file`` raises a ``ValueError``
("Incorrect dictionary format, expected '<token> <cnt> [flags]'") for a line without a count, a
``RuntimeError`` for a word given twice and a bare ``Exception`` for text that is not UTF-8,
none naming the file: every command that loads the data's dictionaries (train, generate,
validate, interactive, the hub) ended in a traceback. ``install()`` wraps it so that each is a
``UsageError`` naming the file, which the plugin prints in one line.
"""

import functools

from fairseq_san.errors import UsageError
from fairseq_san.fairseq_fixes.wrapping import wrap_once


def _naming_the_file(add_from_file):
    @functools.wraps(add_from_file)
    def wrapper(self, f):
        if not isinstance(f, str):  # fairseq calls itself again with the opened file
            return add_from_file(self, f)
        try:
            return add_from_file(self, f)
        except (FileNotFoundError, IsADirectoryError):
            raise
        except Exception as error:  # ValueError, RuntimeError, and fairseq's bare Exception
            reason = " ".join(str(error).split()) or type(error).__name__  # one line
            raise UsageError(
                f"dictionary {f} cannot be read: {reason[:200]} (give the dict.*.txt that "
                "fairseq-preprocess wrote)"
            ) from None

    return wrapper


def install() -> None:
    """Name the file in a dictionary's read errors (idempotent)."""
    from fairseq.data import Dictionary

    wrap_once(Dictionary, "add_from_file", _naming_the_file)
