"""The globals that a ``torch.save`` file's pickles name, read from their opcodes, nothing run.

torch's safe loader (``weights_only``) calls the functions on its own allow-list with whatever
arguments the file gives, and one of them makes memory of any size: ``builtins.bytearray``, whose
call ``bytearray(2_000_000_000)`` filled 2 GB as a file of 1.2 KB loaded. torch's own list takes
precedence over any stand-in the plugin could give it (as ``safe_numpy`` does for ``bytes``), so
the plugin reads the names first: fairseq checkpoints hold no bytearray, and a file whose pickle
names one is refused before torch reads it (``checkpoints.refuse_before_reading``).

The pickles are found as ``torch.load`` finds them: a file that starts as a zip archive is read
with torch's own archive reader (``data.pkl``), any other as torch's legacy format, whose first
``LEGACY_PICKLES`` pickles torch unpickles before it reads raw storage bytes. A plain pickle
(``pickle.dump``, not ``torch.save``) is told apart by its first pickle (``first_pickle``).
"""

import _compat_pickle
import io
import itertools
import pickletools
from typing import BinaryIO, Iterator, NamedTuple, Optional, Set

import torch

# What makes memory of the size its argument asks for, and why a fairseq checkpoint never names it.
ALLOCATING = {
    "builtins.bytearray": "a bytearray of any size the file asks for (fairseq saves none)",
}
# torch.load's test for its zip format (torch.serialization._is_zipfile): the first bytes only.
ZIP_MAGIC = b"PK\x03\x04"
# What every pickle of protocol 2 or later starts with: the PROTO opcode, then the protocol.
PROTO = 0x80
# torch's legacy format: magic number, protocol, system information, the saved object, the keys
# of its storages; the storages' raw bytes follow.
LEGACY_PICKLES = 5


def allocating_globals_in(path: str) -> Set[str]:
    """The names in ``ALLOCATING`` that the pickles of the file at ``path`` call on."""
    return globals_in(path) & set(ALLOCATING)


def globals_in(path: str) -> Set[str]:
    """``module.name`` of every GLOBAL in the pickles that ``torch.load`` reads from ``path``,
    Python 2's names mapped to Python 3's as torch maps them. A pickle that cannot be read on
    gives the names before the point where torch's loader fails too."""
    found: Set[str] = set()
    for pickled in pickles_in(path):
        try:
            for opcode, argument, _ in pickletools.genops(pickled):
                if opcode.name == "GLOBAL":
                    found.add(python3_name(*argument.split(" ", 1)))
        except ValueError:  # not a pickle, or not one to its end: torch.load explains it
            break
    return found


def pickles_in(path: str) -> Iterator[BinaryIO]:
    """The streams that ``torch.load`` unpickles from ``path``, in its order (the same stream,
    read on, for each pickle of the legacy format)."""
    with open(path, "rb") as file:
        if file.read(len(ZIP_MAGIC)) == ZIP_MAGIC:
            try:
                record = torch._C.PyTorchFileReader(path).get_record("data.pkl")
            except RuntimeError:  # no archive of torch's layout: torch.load explains it
                return
            yield io.BytesIO(record)
            return
        file.seek(0)
        for _ in range(LEGACY_PICKLES):
            yield file


def python3_name(module: str, name: str) -> str:
    """``module.name`` as Python 3 (and torch's safe loader) reads a Python 2 pickle's GLOBAL."""
    if (module, name) in _compat_pickle.NAME_MAPPING:
        module, name = _compat_pickle.NAME_MAPPING[(module, name)]
    else:
        module = _compat_pickle.IMPORT_MAPPING.get(module, module)
    return f"{module}.{name}"


class PickleStart(NamedTuple):
    """A file's first pickle: its protocol, and whether it is torch's magic number (the
    legacy ``torch.save`` format) rather than a plain pickle's object (``pickle.dump``)."""

    protocol: int
    torch_legacy: bool


def first_pickle(path: str) -> Optional[PickleStart]:
    """The first pickle of the file at ``path``; None for any other file (a zip archive, text,
    a damaged pickle, a pickle of protocol 0 or 1)."""
    with open(path, "rb") as file:
        head = file.read(2)
        if len(head) < 2 or head[0] != PROTO:
            return None
        file.seek(0)
        try:  # PROTO, FRAME (protocol 4 and later), the magic number
            first = [argument for _, argument, _ in itertools.islice(pickletools.genops(file), 3)]
        except ValueError:  # not a pickle: torch.load explains it
            return None
    return PickleStart(head[1], torch.serialization.MAGIC_NUMBER in first)
