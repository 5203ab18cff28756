"""numpy's arrays and scalars in a checkpoint, read as data through torch's safe loader.

fairseq's translation task keeps ``--eval-bleu``'s statistics as numpy arrays in the metrics of a
checkpoint's ``extra_state``, so torch's safe loader refused every checkpoint of such a run, to
resume it or to decode with it. Allowing numpy's own globals would make the constructors of
``ndarray`` and ``dtype`` callable from a pickle: an object array over any address, or 2**62
elements over one byte, is a segfault or a hang while the file loads (torch leaves them off its
list for that reason). Instead numpy's names stand for the classes here (``STAND_INS``), which
only record what the pickle says; ``numpy_restored`` then makes each record a numpy array or
scalar of numbers from its own bytes, their count checked against its shape and dtype, and
refuses anything else (``PickleRefused``).

A pickle may refer to one object many times: the walk visits each object once (a tuple of a
tuple of ... shared at every level took time doubling with each level), each record gives one
array however often it is referred to, and two records may not share their bytes (a file of
one megabyte asked for gigabytes of copies). The bytes are the pickle's own (``bytes``, or the
latin-1 text of numpy's pickles at protocol 2; not a ``bytearray``, which a pickle can make of
any size), so the arrays' bytes are the file's, each used once (short ones, up to SHAREABLE
bytes, may be shared).
"""

import argparse
import math
from typing import Any, Dict, List, Optional, Tuple

import numpy
import torch

from fairseq_san.pickled_fields import fields, shown

# The kinds of numpy dtype a checkpoint's arrays may have: booleans, integers, floats, complex.
NUMERIC_KINDS = "biufc"
MAX_DIMENSIONS = 32  # numpy's own limit is 64
BYTE_ORDERS = ("<", ">", "|", "=")
# Bytes that records may share: Python keeps one object of each short bytes value, so two
# arrays of one byte each may come with the same object; longer ones are each array's own.
SHAREABLE = 64
# Errors of numpy or Python that a record of another shape than numpy's can raise as it is
# restored (a record made without its __init__, text beyond latin-1, a shape that overflows).
MALFORMED = (TypeError, ValueError, AttributeError, OverflowError, UnicodeError)


class PickleRefused(ValueError):
    """A numpy value in a pickle that is not an array or a scalar of numbers from its bytes."""


class PickledDtype:
    """``numpy.dtype(code, align, copy)`` as numpy pickles a dtype, and the state it then gets
    (``(3, byte order, None, None, None, -1, -1, 0)`` for numbers), recorded."""

    __slots__ = ("code", "state")

    def __init__(self, code: object = None, align: object = False, copy: object = False) -> None:
        self.code = code
        self.state: object = None

    def __setstate__(self, state: object) -> None:
        self.state = state

    def restored(self) -> numpy.dtype:
        """The dtype of numbers that the code names, in the byte order of the state."""
        if not isinstance(self.code, str) or len(self.code) > 8:
            raise PickleRefused(f"a numpy dtype {shown(self.code)} that is no type code")
        dtype = numpy.dtype(self.code)
        if dtype.kind not in NUMERIC_KINDS or dtype.fields is not None or dtype.subdtype:
            raise PickleRefused(f"a numpy array of dtype {shown(self.code)}, not of numbers")
        state = self.state
        if state is None:
            return dtype
        if not (isinstance(state, tuple) and len(state) == 8 and state[2:5] == (None,) * 3
                and state[1] in BYTE_ORDERS):  # fmt: skip
            raise PickleRefused(f"a numpy dtype {shown(self.code)} with fields or another layout")
        return dtype.newbyteorder(state[1]) if state[1] in "<>" else dtype


class PickledArray:
    """``numpy.ndarray`` as numpy pickles an array: ``_reconstruct(ndarray, (0,), b'b')``, then
    ``(version, shape, dtype, Fortran order, data)`` given by the pickle's BUILD, recorded. Called
    by numpy's name ``ndarray`` (its constructor, over a buffer of the pickle's choosing), it
    records arguments that ``restored`` refuses."""

    __slots__ = ("made_with", "state")

    def __init__(self, *made_with: object) -> None:
        self.made_with = made_with
        self.state: object = None

    def __setstate__(self, state: object) -> None:
        self.state = state

    def data(self) -> object:
        """What the state gives as the array's bytes (None for a state of another shape)."""
        return self.state[4] if isinstance(self.state, tuple) and len(self.state) == 5 else None

    def restored(self) -> numpy.ndarray:
        """The array, a copy of its own bytes."""
        if not self.made_with or self.made_with[0] is not PickledArray or self.state is None:
            raise PickleRefused("a numpy array made otherwise than numpy pickles arrays")
        if not (isinstance(self.state, tuple) and len(self.state) == 5):
            raise PickleRefused("a numpy array whose state is not numpy's")
        _, shape, dtype, fortran, data = self.state
        if not (isinstance(shape, tuple) and len(shape) <= MAX_DIMENSIONS
                and all(type(size) is int and size >= 0 for size in shape)):  # fmt: skip
            raise PickleRefused(f"a numpy array of shape {shown(shape)}")
        if not isinstance(dtype, PickledDtype) or type(fortran) is not bool:
            raise PickleRefused("a numpy array whose state is not numpy's")
        numbers = PickledDtype.restored(dtype)
        values = numpy.frombuffer(own_bytes(data, numbers, shape), numbers)
        return values.reshape(shape, order="F" if fortran else "C").copy(order="K")


class PickledScalar:
    """numpy's ``scalar(dtype, data)``, as numpy pickles a scalar (``numpy.float64(1.5)``); a
    pickle's BUILD on it is refused (numpy's pickles give a scalar none)."""

    __slots__ = ("dtype", "made")

    def __init__(self, dtype: object = None, data: object = None) -> None:
        self.dtype = dtype
        self.made = data

    def __setstate__(self, state: object) -> None:
        self.dtype = None  # refused by restored()

    def data(self) -> object:
        """What the pickle gave as the scalar's bytes."""
        return self.made

    def restored(self) -> numpy.generic:
        if not isinstance(self.dtype, PickledDtype):
            raise PickleRefused("a numpy scalar whose dtype is not numpy's")
        dtype = PickledDtype.restored(self.dtype)
        return numpy.frombuffer(own_bytes(self.made, dtype, ()), dtype)[0].copy()


def own_bytes(data: object, dtype: numpy.dtype, shape: Tuple[int, ...]) -> bytes:
    """``data``, the bytes of ``shape`` values of ``dtype`` exactly (numpy's pickles at protocol 2
    give them as text of latin-1 characters)."""
    if isinstance(data, str):
        data = data.encode("latin-1")
    if type(data) is not bytes:
        raise PickleRefused("a numpy array whose data are no bytes of the file")
    if len(data) != math.prod(shape) * dtype.itemsize:
        raise PickleRefused(
            f"a numpy array of shape {shown(shape)} and dtype {dtype} over {len(data)} bytes"
        )
    return data


def empty_bytes(*arguments: object) -> bytes:
    """``bytes()``, as pickle's protocol 2 (torch.save's) writes an empty bytes value: the data of
    an empty numpy array (other bytes come as latin-1 text). Any argument is refused:
    ``bytes(2**40)`` would allocate a terabyte as the file loads."""
    if arguments:
        raise PickleRefused(
            f"builtins.bytes{shown(arguments)}: a pickle of numpy's data calls it without arguments"
        )
    return b""


# What torch's safe loader gets for numpy's names, in numpy 2 (numpy._core) and 1 (numpy.core),
# and for the name pickles give an empty array's bytes.
STAND_INS: List[Tuple[object, str]] = [
    (PickledArray, "numpy.ndarray"),
    (PickledDtype, "numpy.dtype"),
    *[(PickledArray, f"numpy.{package}.multiarray._reconstruct") for package in ("_core", "core")],
    *[(PickledScalar, f"numpy.{package}.multiarray.scalar") for package in ("_core", "core")],
    (empty_bytes, "builtins.bytes"),
]
RECORDS = (PickledArray, PickledScalar, PickledDtype)


class Restoring:
    """One walk of a loaded pickle: what each object visited became (by id: a pickle refers to
    an object as often as it likes), and whose bytes the restored records took."""

    def __init__(self) -> None:
        self.became: Dict[int, Any] = {}
        self.kept: List[Any] = []  # the objects of became's ids, alive while the walk lasts
        self.bytes_of: Dict[int, int] = {}  # id of a record's data -> id of the record

    def restored(self, value: Any) -> Any:
        if id(value) in self.became:
            return self.became[id(value)]
        if isinstance(value, RECORDS):
            return self.remember(value, self.record(value))
        if isinstance(value, dict):
            self.remember(value, value)  # before its items: a cycle comes back to it
            for key in value:
                if holds_record(key):
                    raise PickleRefused("a numpy value as a key of a dict")
                value[key] = self.restored(value[key])
        elif isinstance(value, list):
            self.remember(value, value)
            value[:] = [self.restored(item) for item in value]
        elif type(value) is tuple:
            return self.remember(value, tuple(self.restored(item) for item in value))
        elif isinstance(value, argparse.Namespace) or has_attributes(value):
            self.remember(value, value)  # a namespace, or a tensor the pickle gave attributes
            attributes = vars(value)  # their names are the pickle's
            for name in attributes:
                attributes[name] = self.restored(attributes[name])
        elif isinstance(value, (set, frozenset)) and holds_record(value):
            raise PickleRefused("a numpy value in a set")
        return value

    def remember(self, value: Any, became: Any) -> Any:
        self.became[id(value)] = became
        self.kept.append(value)
        return became

    def record(self, record: Any) -> Any:
        """The numpy value of ``record``; PickleRefused for one of another shape than numpy's,
        or whose bytes (more than SHAREABLE) another record took."""
        try:
            data = None if isinstance(record, PickledDtype) else type(record).data(record)
            if isinstance(data, (bytes, str)) and len(data) > SHAREABLE:
                if self.bytes_of.setdefault(id(data), id(record)) != id(record):
                    raise PickleRefused("two numpy arrays over the same bytes")
            return type(record).restored(record)
        except PickleRefused:
            raise
        except MALFORMED as error:
            raise PickleRefused(f"a numpy value numpy would not write ({shown(error)})") from None


def has_attributes(value: Any) -> bool:
    """Whether ``value`` is a tensor with attributes of its own (a pickle's BUILD can set them;
    torch.save of a state dict writes none), which may hold records like a namespace's."""
    return isinstance(value, torch.Tensor) and bool(value.__dict__)


def holds_record(value: Any) -> bool:
    """Whether ``value`` (a set's item or a dict's key, or a set) is or holds, through tuples and
    frozensets (what a set or a key can hold), a record: one there cannot be made numpy's (an
    array is not hashable) and would stay a record. Each container is looked into once."""
    seen, pending = set(), [value]
    while pending:
        item = pending.pop()
        if isinstance(item, RECORDS):
            return True
        if isinstance(item, (tuple, set, frozenset)) and id(item) not in seen:
            seen.add(id(item))
            pending.extend(item)
    return False


def numpy_restored(value: Any) -> Any:
    """``value`` (a loaded pickle) with each numpy record in its dicts, lists, tuples,
    namespaces and tensors' attributes made numpy's array, scalar or dtype; PickleRefused for a
    record that is not one of numbers, or one in a set or a dict's key (inside its tuples too).
    Containers are changed in place (tuples made anew); each object is visited once."""
    return Restoring().restored(value)


def numpy_field(value: Any, where: str = "") -> Optional[str]:
    """The first field of ``value`` (dicts, lists, tuples, namespaces) that holds a numpy value or
    a record of one, named like ``model.dropout``; None where none does."""
    for name, _, item in fields(value, where):
        if isinstance(item, (*RECORDS, numpy.ndarray, numpy.generic)):
            return name or "itself"
    return None
