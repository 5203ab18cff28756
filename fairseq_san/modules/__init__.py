"""Attention modules, each a subclass of fairseq's where one exists.

* ``shared_attention.py``: a block's first layer computes S and A, its other layers reuse S (Eq.
  4) or A (Eq. 5); the roles that say which;
* ``kv_shared_attention.py``: a language model's blocks sharing keys and values (CLA);
* ``decoding_attention.py``: the faster incremental step of beam search (``--san-decoding fast``);
* ``average_attention.py``: the average attention network (AAN, Zhang et al. 2018).
"""

from typing import Dict, Optional

from torch import Tensor

# What fairseq passes a decoder module as ``incremental_state``: module key -> named cache tensors.
IncrementalState = Dict[str, Dict[str, Optional[Tensor]]]
