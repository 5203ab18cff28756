"""Attention modules: shared (SAN) and average (AAN) attention."""

from typing import Dict, Optional

from torch import Tensor

# What fairseq passes a decoder module as ``incremental_state``: module key -> named cache tensors.
IncrementalState = Dict[str, Dict[str, Optional[Tensor]]]
