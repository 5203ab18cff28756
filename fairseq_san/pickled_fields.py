"""The fields of what a checkpoint's pickle holds, each object visited once, names cut short.

A pickle may refer to one object as often as it likes: a configuration of lists of lists ...
shared at every level is a kilobyte on disk and more paths than can be walked, and a key of a
megabyte shared above many values makes their dotted names gigabytes. The plugin's checks of a
received checkpoint (strings fairseq would evaluate, interpolations, numpy values) read its fields
here: every dict, list, tuple and namespace once, every name at most ``NAME_CHARS`` long.
"""

import reprlib
from argparse import Namespace
from collections.abc import Mapping
from typing import Any, Iterator, Optional, Tuple

from omegaconf import DictConfig, OmegaConf

NAME_CHARS = 200
# How a pickle's value is shown in a name or a message: never built whole (a tuple of a thousand
# references to one megabyte string would be a gigabyte of text).
SHOWN = reprlib.Repr()
for _limit in ("maxtuple", "maxlist", "maxdict", "maxset", "maxfrozenset", "maxdeque", "maxarray"):
    setattr(SHOWN, _limit, 4)
SHOWN.maxlevel, SHOWN.maxstring, SHOWN.maxother, SHOWN.maxlong = 2, 40, 40, 40


def shown(value: object) -> str:
    """``value`` as a few dozen characters at most."""
    return SHOWN.repr(value)


def fields(node: Any, name: str = "") -> Iterator[Tuple[str, Any, Any]]:
    """(dotted name, key, value) of every value below ``node``'s mappings, namespaces, lists and
    tuples (``key``: its key or index), depth first in order; a container that the walk met
    before is not entered again. An omegaconf configuration (fairseq's ``cfg``) is read as the
    plain containers it holds, unresolved."""
    if isinstance(node, DictConfig):
        node = OmegaConf.to_container(node, resolve=False)
    seen = set()
    pending = [(name, None, node)]
    while pending:
        name, key, value = pending.pop()
        yield name, key, value
        children = value if not isinstance(value, Namespace) else vars(value)
        if not isinstance(children, (Mapping, list, tuple)) or id(children) in seen:
            continue
        seen.add(id(children))
        items = children.items() if isinstance(children, Mapping) else enumerate(children)
        below = [(child_name(name, item_key, isinstance(children, Mapping)), item_key, item)
                 for item_key, item in items]  # fmt: skip
        pending.extend(reversed(below))


def shared_container(node: Any, name: str = "") -> Optional[str]:
    """The name of the first non-empty dict, list or tuple below ``node`` (through dicts, lists
    and tuples: what omegaconf copies into a configuration) that is held at a second place, or
    None. omegaconf copies a shared one at every place: lists of lists shared at 40 levels, a
    kilobyte of pickle, would be 2**40 nodes. One inside itself is left to omegaconf, which
    refuses it (a RecursionError); empty ones are skipped (Python keeps one empty tuple)."""
    seen, open_ = set(), set()  # visited; being visited (the containers above the current one)
    pending = [(name, node, False)]
    while pending:
        name, value, leaving = pending.pop()
        if leaving:
            open_.discard(id(value))
            continue
        if not isinstance(value, (dict, list, tuple)) or not value or id(value) in open_:
            continue
        if id(value) in seen:
            return name
        seen.add(id(value))
        open_.add(id(value))
        pending.append((name, value, True))
        mapping = isinstance(value, dict)
        items = list(value.items() if mapping else enumerate(value))
        below = [(child_name(name, key, mapping), item, False) for key, item in items]
        pending.extend(reversed(below))
    return None


def child_name(parent: str, key: Any, mapping: bool) -> str:
    """``parent.key`` (or ``parent[index]``), at most NAME_CHARS characters."""
    part = (key[:NAME_CHARS] if isinstance(key, str) else shown(key)) if mapping else f"[{key}]"
    joined = f"{parent}.{part}" if mapping and parent else (parent + part if parent else part)
    return joined[:NAME_CHARS]
