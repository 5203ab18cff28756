"""A fairseq task copied or unpickled (``copy.deepcopy`` of a hub model, whose task it holds).

Upstream behaviour corrected: ``fairseq.tasks.fairseq_task.StatefulContainer.__getattr__``, the
task's ``state``, reads ``self._state``, which a copy being rebuilt has not yet: it called itself
until Python's RecursionError (``copy.deepcopy(hub)``: "maximum recursion depth exceeded").
``install()`` makes such a container's missing ``_state`` or ``_factories`` an AttributeError,
as any object's missing attribute is, and the copy is rebuilt.
"""

import functools
from typing import Any, Callable

from fairseq.tasks.fairseq_task import StatefulContainer

from fairseq_san.fairseq_fixes.wrapping import wrap_once

# The container's own attributes, which ``__init__`` sets and ``__getattr__`` reads.
OWN_ATTRIBUTES = ("_state", "_factories")


def own_attributes_missing(getattr_: Callable) -> Callable:
    """``StatefulContainer.__getattr__``, an AttributeError for its own attributes before they
    are set (it looked them up through itself)."""

    @functools.wraps(getattr_)
    def __getattr__(self, name: str) -> Any:
        if name in OWN_ATTRIBUTES:  # not set yet: a copy being rebuilt
            raise AttributeError(f"{type(self).__name__} has no {name} yet")
        return getattr_(self, name)

    return __getattr__


def install() -> None:
    """A task's state copies (idempotent)."""
    wrap_once(StatefulContainer, "__getattr__", own_attributes_missing)
