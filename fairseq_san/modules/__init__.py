"""Attention modules, each a subclass of fairseq's where one exists.

* ``shared_attention.py``: a block's first layer computes S and A, its other layers reuse S (Eq.
  4) or A (Eq. 5); the roles that say which;
* ``kv_shared_attention.py``: a language model's blocks sharing keys and values (CLA);
* ``decoding_attention.py``: the faster incremental step of beam search (``--san-decoding fast``);
* ``average_attention.py``: the average attention network (AAN, Zhang et al. 2018).
"""

from typing import Dict, Iterable, Optional

from torch import Tensor

# What fairseq passes a decoder module as ``incremental_state``: module key -> named cache tensors.
IncrementalState = Dict[str, Dict[str, Optional[Tensor]]]


def weights_key(tensors: Iterable[Tensor]) -> tuple:
    """What identifies the values of ``tensors`` as they are now, for a copy made of them (fused,
    converted) to be made again when they change: each one's memory, dtype, device and count of
    in-place writes (an optimizer's step, ``load_state_dict``); an inference tensor, which counts
    none (``torch.inference_mode``), by the rest only."""
    return tuple(
        (t.data_ptr(), t.dtype, t.device, None if t.is_inference() else t._version)
        for t in tensors
    )
