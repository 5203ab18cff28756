"""How the generator runs its step: eagerly (sliced or fixed layout), compiled, or as CUDA graphs.

The rows of ``EXECUTIONS`` (read by the generator, its tests and the step timer):

* ``eager``: the step as written, in the device's faster layout (caches.py): sliced on the CPU
  (row copies and length slicing), fixed on a GPU (no host sync in the step or the reordering);
* ``fixed``: eager in the fixed layout on any device (what ``compile`` and ``graph`` run);
* ``compile``: torch.compile of the fixed-layout step (``fullgraph=True``, static shapes: one
  compilation per (rows, length bucket, source bucket), none across positions); its linear
  layers are left to the compiler (inductor packs frozen weights itself), not packed by
  ``precision.py``; not offered on the command line (slower than ``eager`` where measured),
  reached by the step timer, the benchmark's overrides and the tests;
* ``graph``: the fixed-layout step captured as one CUDA graph per (rows, length bucket) and
  replayed (graphs.py), on caches kept per shape across batches; CUDA only, the default there;
* ``compile-graph``: the compiled step captured as CUDA graphs: a captured position on a GPU is
  hundreds of small dependent kernels, 45-65x its arithmetic bound, and inductor fuses the
  elementwise work, layer norms and residual adds into fewer kernels: on an H200 a step 1.14x
  (baseline) and 1.24x (SAN) faster than ``graph`` (docs/results/gpu-steps), for 20-30 s of
  compilation per (rows, length bucket) on first use (translation's position 0 is captured
  uncompiled: one step a batch does not repay that); offered, not the default.
"""

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple, Union

import torch
from torch import nn

from fairseq_san.static_decoding.errors import StaticDecoderError


@dataclass(frozen=True)
class Execution:
    """A way to run the step (module doc): its cache layout (None: the device's own), whether
    precision.py packs its linear layers (not for a compiled step), the devices it runs on,
    whether the step is compiled and whether it replays CUDA graphs (on caches kept across
    batches); whether the command line offers it."""

    name: str
    fixed: Optional[bool]
    devices: Tuple[str, ...]
    compiles: bool = False
    graphs: bool = False
    offered: bool = True  # a choice of --san-decoder-execution (compile: slower, measured only)

    @property
    def pack(self) -> bool:
        """Whether precision.py packs the linear layers: not for the compiler (inductor packs
        frozen weights itself)."""
        return not self.compiles

    def fixed_layout(self, device: torch.device) -> bool:
        """Whether the step runs in the fixed layout on ``device``."""
        return device.type != "cpu" if self.fixed is None else self.fixed


EXECUTIONS: Dict[str, Execution] = {
    row.name: row
    for row in (
        Execution("eager", None, ("cpu", "cuda")),
        Execution("fixed", True, ("cpu", "cuda")),
        Execution("compile", True, ("cpu",), compiles=True, offered=False),
        Execution("graph", True, ("cuda",), graphs=True),
        Execution("compile-graph", True, ("cuda",), compiles=True, graphs=True),
    )
}  # fmt: skip


def offered_executions() -> List[str]:
    """The choices of ``--san-decoder-execution``: the rows offered (not ``compile``, slower than
    the eager step where measured: docs/results/static-compile)."""
    return [name for name, row in EXECUTIONS.items() if row.offered]


def executions_on(device_type: str, offered_only: bool = True) -> List[str]:
    """The rows that run on ``device_type`` (``cpu``, ``cuda``): the offered ones, or all of them
    (the benchmark's overrides reach ``compile`` too)."""
    return [
        name for name, row in EXECUTIONS.items()
        if device_type in row.devices and (row.offered or not offered_only)
    ]  # fmt: skip


def execution_for(name: Optional[str], device: torch.device) -> Execution:
    """The row ``name`` (None: ``graph`` on a GPU, ``eager`` elsewhere); StaticDecoderError for a
    name not in the table or a device the row does not run on."""
    name = name or ("graph" if device.type == "cuda" else "eager")
    row = EXECUTIONS.get(name)
    if row is None or device.type not in row.devices:
        here = executions_on(device.type)
        on = f" on {device.type.upper()}"
        raise StaticDecoderError(
            f"the execution {name!r}{on if row else ''}",
            f"choose --san-decoder-execution {' or '.join(here)}{on}",
        )
    return row


# Compilations of the step a process may make: one per (rows, length bucket, source bucket), so
# a run meets a few per batch size it decodes. Dynamo's default limit (8) is an error under
# ``fullgraph=True``, met on an H100 by 128 natural-length test sentences at batch 16 and beam 4
# (docs/results/gpu-steps).
COMPILED_SHAPES = 1024


def compiled(step: nn.Module, backend: Union[str, Callable] = "inductor") -> Callable:
    """``step`` compiled whole (``fullgraph=True``: a graph break is an error, not a silent
    fall-back) for static shapes; with inductor, its weights frozen and prepacked (MKL/oneDNN).

    Freezing and dynamo's recompilation limits are global settings (``torch.compile(options=...)``
    reaches neither: with freezing unset inductor's output code multiplies the plain weights),
    set here for the process; the limits only ever raised, to ``COMPILED_SHAPES``."""
    from torch._dynamo import config as dynamo_config  # here: a slow import, rarely needed

    for limit in ("recompile_limit", "accumulated_recompile_limit"):
        setattr(dynamo_config, limit, max(getattr(dynamo_config, limit), COMPILED_SHAPES))
    if backend == "inductor":
        import torch._inductor.config as inductor_config  # here: a slow import, rarely needed

        inductor_config.freezing = True
        inductor_config.cpp.weight_prepack = True
    return torch.compile(step, fullgraph=True, dynamic=False, backend=backend)
