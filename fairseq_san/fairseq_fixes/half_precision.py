"""fairseq-train refuses ``--fp16``, ``--bf16`` or ``--amp`` where it would train on the CPU.

Upstream behaviour corrected: fairseq's trainer builds its fp16 optimizer for CUDA and takes
``--bf16`` for a TPU's, so on a machine without CUDA (or with ``--cpu``) ``--fp16`` fails with
torch's ``AssertionError: Torch not compiled with CUDA enabled`` and ``--bf16`` with
``AttributeError: 'NoneType' object has no attribute 'xla_device'``, tracebacks after the data
and the model are loaded. The GPU recipe's preset trains with ``--fp16``: copied to a CPU, it
met them. ``--memory-efficient-fp16`` does train on the CPU and is left alone; ``--bf16`` is
refused without torch_xla (fairseq sets ``--tpu`` with it), naming the flag given
(``--memory-efficient-bf16`` sets it too). ``--amp`` on the CPU trained in fp32 without a word
(its GradScaler's warning aside), each update several times slower.

``install()`` wraps ``Trainer.__init__``: the flag is one line (``UsageError``) before the
trainer is built.
"""

import functools
import importlib.util
from typing import Callable

from fairseq_san.errors import UsageError
from fairseq_san.fairseq_fixes.wrapping import wrap_once


def check_half_precision(common, cuda: bool, xla: bool) -> None:
    """Refuse ``--fp16`` (but ``--memory-efficient-fp16``) without a GPU (``cuda``: CUDA is there
    and ``--cpu`` is not given), and ``--bf16``, which fairseq trains on a TPU only, without
    torch_xla (``xla``)."""
    if common.fp16 and not common.memory_efficient_fp16 and not (cuda and not common.cpu):
        raise UsageError(
            "--fp16: fairseq-train's fp16 training needs a GPU, and this run is on the CPU; leave "
            "the flag out (fp32)"
        )
    if common.bf16 and not xla:
        flag = "--memory-efficient-bf16" if common.memory_efficient_bf16 else "--bf16"
        raise UsageError(
            f"{flag}: fairseq-train trains in bf16 on a TPU only (it sets --tpu), and this "
            "machine has no torch_xla; leave the flag out (fp32), or pass --fp16 on a GPU"
        )
    if getattr(common, "amp", False) and not (cuda and not common.cpu):
        raise UsageError(
            "--amp: fairseq's automatic mixed precision casts on a GPU, and this run is on the "
            "CPU, where it would train in fp32 (each update slower, through a loss scaler); "
            "leave the flag out"
        )


def _checking(init: Callable) -> Callable:
    @functools.wraps(init)
    def wrapper(self, cfg, *args, **kwargs):
        import torch

        xla = importlib.util.find_spec("torch_xla") is not None
        check_half_precision(cfg.common, torch.cuda.is_available(), xla)
        init(self, cfg, *args, **kwargs)

    return wrapper


def install() -> None:
    """Check the trainer's precision flags before it is built (idempotent)."""
    from fairseq.trainer import Trainer

    wrap_once(Trainer, "__init__", _checking)
