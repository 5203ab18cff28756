"""A checkpoint loaded by a distributed fairseq-train reaches every rank through the safe loader.

Upstream behaviour corrected: a distributed fairseq-train that starts from a checkpoint (resuming
from ``checkpoint_last.pt``, ``--restore-file``, ``--finetune-from-model``: a warm-started
iteration of the recipes) reads it on rank 0 and sends it to the other ranks with
``distributed.utils.broadcast_object``, whose ``_broadcast_object_slow`` pickles it with
``torch.save`` and reads it with ``torch.load``: torch's safe loader since torch 2.6, which
refuses two things fairseq put in it, the configuration as omegaconf's ``DictConfig`` and the
tensors' ``_TensorPlaceholder``. Every rank but 0 failed ("Weights only load failed"), and with it
the job, on the GPU (nccl) as on the CPU (``fairseq-san-cpu-ranks``). The configuration now
travels as the plain container that fairseq saves in checkpoints, made a ``DictConfig`` again on
arrival, and ``_TensorPlaceholder`` (an index) is allowed while the ranks read it: the safe loader
stays on, and no rank runs code it receives. numpy's values (``--eval-bleu``'s statistics) arrive
as the records of ``fairseq_san.safe_numpy`` and are made numpy's again.
"""

import functools
from typing import Any

import torch
from omegaconf import OmegaConf

from fairseq_san.fairseq_fixes.wrapping import wrap_once
from fairseq_san.safe_numpy import numpy_restored

# The key of the dict that stands for a configuration in transit (fairseq sends no such key).
CONFIG_KEY = "__fairseq_san_omegaconf__"


def plain(obj: Any) -> Any:
    """``obj`` with every omegaconf configuration in it replaced by ``{CONFIG_KEY: container}``."""
    if OmegaConf.is_config(obj):
        return {CONFIG_KEY: OmegaConf.to_container(obj, enum_to_str=True)}
    if isinstance(obj, dict):
        return {key: plain(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(plain(value) for value in obj)
    return obj


def restored(obj: Any) -> Any:
    """``obj`` with the configurations that ``plain`` replaced made ``DictConfig``s again, as
    ``checkpoint_utils.load_checkpoint_to_cpu`` makes them (a model's options may be an
    ``argparse.Namespace`` in them)."""
    if isinstance(obj, dict):
        if set(obj) == {CONFIG_KEY}:
            return OmegaConf.create(obj[CONFIG_KEY], flags={"allow_objects": True})
        return {key: restored(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(restored(value) for value in obj)
    return obj


def _through_safe_loader(broadcast_object_slow):
    from fairseq.distributed.utils import _TensorPlaceholder

    @functools.wraps(broadcast_object_slow)
    def wrapper(obj, src_rank, group, dist_device):
        with torch.serialization.safe_globals([_TensorPlaceholder]):
            received = broadcast_object_slow(plain(obj), src_rank, group, dist_device)
        return restored(numpy_restored(received))

    return wrapper


def install() -> None:
    """Send configurations as plain containers; let the receiving ranks read placeholders."""
    from fairseq.distributed import utils

    wrap_once(utils, "_broadcast_object_slow", _through_safe_loader)
