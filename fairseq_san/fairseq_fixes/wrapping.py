"""How a fix changes a function of fairseq: it wraps it, once per process."""

import inspect
import sys
from types import ModuleType
from typing import Callable, Optional


def wrap_once(owner: object, name: str, wrap: Callable[[Callable], Callable]) -> None:
    """Replace ``owner.name`` with ``wrap(owner.name)``, unless ``wrap`` already did: installing a
    fix again (``fairseq_fixes.install`` runs whenever the plugin registers) must not wrap twice.
    A class's classmethod has its function wrapped, and stays a classmethod that subclasses
    inherit. Two fixes may wrap the same function: ``wrap`` is looked for among all its wrappers
    (``functools.wraps``' ``__wrapped__``), not the outermost only."""
    static = inspect.getattr_static(owner, name, None)
    is_classmethod = isinstance(static, classmethod)
    current = static.__func__ if is_classmethod else getattr(owner, name)
    if wrapped_by(current, wrap):
        return
    wrapped = wrap(current)
    wrapped.wrapped_by = wrap
    setattr(owner, name, classmethod(wrapped) if is_classmethod else wrapped)


def wrapped_by(function: Callable, wrap: Callable[[Callable], Callable]) -> bool:
    """Whether ``wrap`` made ``function`` or a function it wraps (``__wrapped__``)."""
    while function is not None:
        if getattr(function, "wrapped_by", None) is wrap:
            return True
        function = getattr(function, "__wrapped__", None)
    return False


def running_command(module_name: str) -> Optional[ModuleType]:
    """The module of a fairseq command (``fairseq_cli.eval_lm``) if this process imported it, also
    where it runs as ``__main__`` (``python -m fairseq_cli.eval_lm``: its functions are looked up
    there, not in a module of that name)."""
    main = sys.modules.get("__main__")
    if getattr(getattr(main, "__spec__", None), "name", None) == module_name:
        return main
    return sys.modules.get(module_name)
