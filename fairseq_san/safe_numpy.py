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
"""

import argparse
import math
from typing import Any, List, Tuple

import numpy

# The kinds of numpy dtype a checkpoint's arrays may have: booleans, integers, floats, complex.
NUMERIC_KINDS = "biufc"
MAX_DIMENSIONS = 32  # numpy's own limit is 64
BYTE_ORDERS = ("<", ">", "|", "=")


class PickleRefused(ValueError):
    """A numpy value in a pickle that is not an array or a scalar of numbers from its bytes."""


class PickledDtype:
    """``numpy.dtype(code, align, copy)`` as numpy pickles a dtype, and the state it then gets
    (``(3, byte order, None, None, None, -1, -1, 0)`` for numbers), recorded."""

    def __init__(self, code: object = None, align: object = False, copy: object = False) -> None:
        self.code = code
        self.state: object = None

    def __setstate__(self, state: object) -> None:
        self.state = state

    def restored(self) -> numpy.dtype:
        """The dtype of numbers that the code names, in the byte order of the state."""
        if not isinstance(self.code, str) or len(self.code) > 8:
            raise PickleRefused(f"a numpy dtype {self.code!r} that is no type code")
        try:
            dtype = numpy.dtype(self.code)
        except TypeError:
            raise PickleRefused(f"a numpy dtype {self.code!r} that is no type code") from None
        if dtype.kind not in NUMERIC_KINDS or dtype.fields is not None or dtype.subdtype:
            raise PickleRefused(f"a numpy array of dtype {self.code!r}, not of numbers")
        state = self.state
        if state is None:
            return dtype
        if not (isinstance(state, tuple) and len(state) == 8 and state[2:5] == (None,) * 3
                and state[1] in BYTE_ORDERS):  # fmt: skip
            raise PickleRefused(f"a numpy dtype {self.code!r} with fields or another layout")
        return dtype.newbyteorder(state[1]) if state[1] in "<>" else dtype


class PickledArray:
    """``numpy.ndarray`` as numpy pickles an array: ``_reconstruct(ndarray, (0,), b'b')``, then
    ``(version, shape, dtype, Fortran order, data)`` given by the pickle's BUILD, recorded. Called
    by numpy's name ``ndarray`` (its constructor, over a buffer of the pickle's choosing), it
    records arguments that ``restored`` refuses."""

    def __init__(self, *made_with: object) -> None:
        self.made_with = made_with
        self.state: object = None

    def __setstate__(self, state: object) -> None:
        self.state = state

    def restored(self) -> numpy.ndarray:
        """The array, a copy of its own bytes."""
        if not self.made_with or self.made_with[0] is not PickledArray or self.state is None:
            raise PickleRefused("a numpy array made otherwise than numpy pickles arrays")
        if not (isinstance(self.state, tuple) and len(self.state) == 5):
            raise PickleRefused("a numpy array whose state is not numpy's")
        _, shape, dtype, fortran, data = self.state
        if not (isinstance(shape, tuple) and len(shape) <= MAX_DIMENSIONS
                and all(type(size) is int and size >= 0 for size in shape)):  # fmt: skip
            raise PickleRefused(f"a numpy array of shape {shape!r}")
        if not isinstance(dtype, PickledDtype) or type(fortran) is not bool:
            raise PickleRefused("a numpy array whose state is not numpy's")
        numbers = dtype.restored()
        values = numpy.frombuffer(own_bytes(data, numbers, shape), numbers)
        return values.reshape(shape, order="F" if fortran else "C").copy(order="K")


class PickledScalar:
    """numpy's ``scalar(dtype, data)``, as numpy pickles a scalar (``numpy.float64(1.5)``)."""

    def __init__(self, dtype: object = None, data: object = None) -> None:
        self.dtype = dtype
        self.data = data

    def restored(self) -> numpy.generic:
        if not isinstance(self.dtype, PickledDtype):
            raise PickleRefused("a numpy scalar whose dtype is not numpy's")
        dtype = self.dtype.restored()
        return numpy.frombuffer(own_bytes(self.data, dtype, ()), dtype)[0].copy()


def own_bytes(data: object, dtype: numpy.dtype, shape: Tuple[int, ...]) -> bytes:
    """``data``, the bytes of ``shape`` values of ``dtype`` exactly (numpy's pickles at protocol 2
    give them as text of latin-1 characters)."""
    if isinstance(data, str):
        data = data.encode("latin-1")
    if not isinstance(data, (bytes, bytearray)):
        raise PickleRefused("a numpy array whose data are no bytes")
    if len(data) != math.prod(shape) * dtype.itemsize:
        raise PickleRefused(
            f"a numpy array of shape {shape} and dtype {dtype} over {len(data)} bytes"
        )
    return bytes(data)


# What torch's safe loader gets for numpy's names, in numpy 2 (numpy._core) and 1 (numpy.core).
STAND_INS: List[Tuple[type, str]] = [
    (PickledArray, "numpy.ndarray"),
    (PickledDtype, "numpy.dtype"),
    *[(PickledArray, f"numpy.{package}.multiarray._reconstruct") for package in ("_core", "core")],
    *[(PickledScalar, f"numpy.{package}.multiarray.scalar") for package in ("_core", "core")],
]
RECORDS = (PickledArray, PickledScalar, PickledDtype)


def numpy_restored(value: Any) -> Any:
    """``value`` (a loaded pickle) with each numpy record in its dicts, lists, tuples and
    namespaces made numpy's array, scalar or dtype; PickleRefused for a record that is not one of
    numbers. Containers are changed in place (tuples made anew); each is visited once."""
    return _restored(value, set())


def _restored(value: Any, seen: set) -> Any:
    if isinstance(value, RECORDS):
        return value.restored()
    if id(value) in seen:
        return value
    if isinstance(value, dict):
        seen.add(id(value))
        for key, item in value.items():
            value[key] = _restored(item, seen)
    elif isinstance(value, list):
        seen.add(id(value))
        value[:] = [_restored(item, seen) for item in value]
    elif type(value) is tuple:
        return tuple(_restored(item, seen) for item in value)
    elif isinstance(value, argparse.Namespace):
        seen.add(id(value))
        for name, item in vars(value).items():
            setattr(value, name, _restored(item, seen))
    return value
