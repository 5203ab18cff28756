"""fairseq's list options of integers (``--update-freq``) read as the command line gives them.

Upstream behaviour corrected: fairseq's parser reads a list option's text as a literal and
converts each item with ``int``: a fraction was truncated (``--update-freq 2.9`` accumulated 2
batches, without a word), and an infinity (``--update-freq 1e309``) failed with an
``OverflowError`` traceback, which argparse does not catch. ``install()`` has each refused as a
value argparse cannot convert: one line naming the option and what it reads
(``one_line_errors.value_said``).
"""

import functools
import math
from typing import Callable

from fairseq.dataclass import utils

from fairseq_san.fairseq_fixes.wrapping import wrap_once


def exact(item: object, item_type: Callable) -> object:
    """``item_type(item)``, refusing (``ValueError``) a float that ``int`` would truncate."""
    if item_type is int and isinstance(item, float) and not (
        math.isfinite(item) and item.is_integer()
    ):
        raise ValueError(f"{item!r} is not an integer")
    return item_type(item)


def converting_exactly(eval_str_list: Callable) -> Callable:
    """fairseq's ``eval_str_list`` whose items are converted by ``exact``."""

    @functools.wraps(eval_str_list)
    def wrapped(x, x_type=float):
        return eval_str_list(x, functools.partial(exact, item_type=x_type))

    return wrapped


def install() -> None:
    """Convert the items of fairseq's list options exactly (idempotent)."""
    wrap_once(utils, "eval_str_list", converting_exactly)
