"""How a fix changes a function of fairseq: it wraps it, once per process."""

from typing import Callable


def wrap_once(owner: object, name: str, wrap: Callable[[Callable], Callable]) -> None:
    """Replace ``owner.name`` with ``wrap(owner.name)``, unless ``wrap`` already did: installing a
    fix again (``fairseq_fixes.install`` runs whenever the plugin registers) must not wrap twice."""
    current = getattr(owner, name)
    if getattr(current, "wrapped_by", None) is wrap:
        return
    wrapped = wrap(current)
    wrapped.wrapped_by = wrap
    setattr(owner, name, wrapped)
