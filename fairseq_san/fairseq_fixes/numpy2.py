"""fairseq's datasets on numpy 2: ``np.compat.long`` and ``np.percentile(interpolation=)``.

Upstream behaviour corrected: ``fairseq.data.token_block_dataset`` (``--sample-break-mode eos``
in language modelling) and ``language_pair_dataset`` (``--num-batch-buckets``) name the dtype
``np.compat.long``, which numpy 2.0 removed with ``numpy.compat`` (NEP 52); ``data_utils``'s
``get_buckets`` (``--num-batch-buckets``) calls ``np.percentile(..., interpolation=)``, renamed
``method=`` in numpy 1.22 and removed in 2.x. ``install()`` gives those modules a numpy with both
(``compat.long`` is Python's ``int``, as in numpy 1.x); numpy itself is left alone.
"""

import importlib
import types

import numpy as np

MODULES = (
    "fairseq.data.token_block_dataset",
    "fairseq.data.language_pair_dataset",
    "fairseq.data.data_utils",
)


def percentile(a, q, *args, interpolation=None, **kwargs):
    """``np.percentile`` that also takes numpy 1.x's ``interpolation`` keyword."""
    if interpolation is not None:
        kwargs["method"] = interpolation
    return np.percentile(a, q, *args, **kwargs)


class Numpy1Names(types.ModuleType):
    """numpy (its namespace copied, so lookups stay direct), plus the names numpy 2 removed."""

    def __init__(self) -> None:
        super().__init__("numpy")
        self.__dict__.update(vars(np))
        self.compat = types.SimpleNamespace(long=int)
        self.percentile = percentile


def install() -> None:
    """Give fairseq's modules that use numpy 1.x names a numpy that has them (idempotent)."""
    if hasattr(np, "compat"):
        return  # numpy 1.x
    for name in MODULES:
        module = importlib.import_module(name)
        if not isinstance(module.np, Numpy1Names):
            module.np = Numpy1Names()
