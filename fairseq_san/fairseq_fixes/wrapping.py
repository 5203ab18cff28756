"""How a fix changes a function of fairseq: it wraps it, once per process."""

import sys
from types import ModuleType
from typing import Callable, Optional


def wrap_once(owner: object, name: str, wrap: Callable[[Callable], Callable]) -> None:
    """Replace ``owner.name`` with ``wrap(owner.name)``, unless ``wrap`` already did: installing a
    fix again (``fairseq_fixes.install`` runs whenever the plugin registers) must not wrap twice."""
    current = getattr(owner, name)
    if getattr(current, "wrapped_by", None) is wrap:
        return
    wrapped = wrap(current)
    wrapped.wrapped_by = wrap
    setattr(owner, name, wrapped)


def running_command(module_name: str) -> Optional[ModuleType]:
    """The module of a fairseq command (``fairseq_cli.eval_lm``) if this process imported it, also
    where it runs as ``__main__`` (``python -m fairseq_cli.eval_lm``: its functions are looked up
    there, not in a module of that name)."""
    main = sys.modules.get("__main__")
    if getattr(getattr(main, "__spec__", None), "name", None) == module_name:
        return main
    return sys.modules.get(module_name)


def wrap_classmethod_once(owner: type, name: str, wrap: Callable[[Callable], Callable]) -> None:
    """``wrap_once`` for a classmethod of ``owner``: its function is wrapped, and stays a
    classmethod that subclasses inherit."""
    current = owner.__dict__[name].__func__
    if getattr(current, "wrapped_by", None) is wrap:
        return
    wrapped = wrap(current)
    wrapped.wrapped_by = wrap
    setattr(owner, name, classmethod(wrapped))
