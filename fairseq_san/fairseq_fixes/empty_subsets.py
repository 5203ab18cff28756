"""A binarized subset that holds no sentence is one line naming it.

Upstream behaviour corrected: fairseq-preprocess writes an empty ``.bin`` file for an input of no
lines, and fairseq's ``MMapIndexedDataset`` (the default ``--dataset-impl mmap``) maps it with
numpy, which fails ("ValueError: cannot mmap an empty file", then an ``AttributeError`` as the
half-built dataset is deleted): every command that loads such a subset (fairseq-train's
validation, -generate, -validate and its analysis, -eval-lm) ended in a traceback naming no file.
``install()`` wraps ``indexed_dataset.make_dataset``: such a subset is a ``UsageError`` naming it.
"""

import functools
import os

from fairseq_san.errors import UsageError
from fairseq_san.fairseq_fixes.wrapping import wrap_once


def check_not_empty(prefix: str) -> None:
    """Refuse the binarized data ``prefix``.bin/.idx where the data file is empty: every
    sentence holds at least its end-of-sentence token, so it holds no sentence."""
    data = prefix + ".bin"
    if os.path.isfile(prefix + ".idx") and os.path.isfile(data) and not os.path.getsize(data):
        raise UsageError(
            f"{data} holds no sentence (fairseq-preprocess wrote it from an empty file): give "
            "that subset sentences, or name another (--valid-subset, --gen-subset)"
        )


def _refusing_empty(make_dataset):
    @functools.wraps(make_dataset)
    def wrapper(path, impl, *args, **kwargs):
        if impl == "mmap":
            check_not_empty(path)
        return make_dataset(path, impl, *args, **kwargs)

    return wrapper


def install() -> None:
    """Wrap ``indexed_dataset.make_dataset`` (idempotent)."""
    from fairseq.data import indexed_dataset

    wrap_once(indexed_dataset, "make_dataset", _refusing_empty)
