"""Attention modules, each a subclass of fairseq's where one exists.

* ``shared_attention.py``: a block's first layer computes S and A, its other layers reuse S (Eq.
  4) or A (Eq. 5); the roles that say which;
* ``kv_shared_attention.py``: a language model's blocks sharing keys and values (CLA);
* ``decoding_attention.py``: the faster incremental step of beam search (``--san-decoding fast``);
* ``average_attention.py``: the average attention network (AAN, Zhang et al. 2018).
"""

from typing import Dict, Iterable, Optional

from torch import Tensor, nn

# What fairseq passes a decoder module as ``incremental_state``: module key -> named cache tensors.
IncrementalState = Dict[str, Dict[str, Optional[Tensor]]]


# The attribute in which ``training_forwards`` counts a module's passes in training mode.
TRAINING_FORWARDS = "_fairseq_san_training_forwards"


def weights_key(tensors: Iterable[Tensor]) -> tuple:
    """What identifies the values of ``tensors`` as they are now, for a copy made of them (fused,
    converted) to be made again when they change: each one's memory, dtype, device and count of
    in-place writes (torch's optimizers, ``load_state_dict``); an inference tensor, which counts
    none (``torch.inference_mode``), by the rest only. fairseq's optimizers write through
    ``.data``, which no count sees: a copy kept across training follows ``training_forwards``
    too."""
    return tuple(
        (t.data_ptr(), t.dtype, t.device, None if t.is_inference() else t._version)
        for t in tensors
    )


def training_forwards(module: nn.Module) -> int:
    """How many passes ``module`` has run in training mode since this was first asked for it (a
    forward pre-hook counts them from then): fairseq's optimizers (Adam, the fp16 optimizers'
    copy back) write the weights through ``.data``, which ``weights_key`` cannot see, so a copy
    of the weights kept across fairseq-train's updates is made again after any of them."""
    if not hasattr(module, TRAINING_FORWARDS):
        setattr(module, TRAINING_FORWARDS, 0)
        module.register_forward_pre_hook(_count_training_forward)
    return getattr(module, TRAINING_FORWARDS)


def _count_training_forward(module: nn.Module, _inputs: tuple) -> None:
    if module.training:
        setattr(module, TRAINING_FORWARDS, getattr(module, TRAINING_FORWARDS) + 1)
