"""The decoder's state during beam search, allocated once per batch for the longest output.

* Self-attention: one tensor ``(slots, hypotheses, heads, positions, head_dim)`` whose slots are
  the keys and values of every self-attention module that has its own (fairseq's attention and
  SAN block leaders) and the values only of the modules that reuse a block's weights S (Eq. 4).
  A step writes its position; a slot is contiguous, so attention is a plain batched matmul over
  (hypotheses x heads); beam reordering is one ``index_select`` of the whole tensor into a second,
  preallocated one, whatever the number of layers.
* AAN: the running sum of each hypothesis' inputs, one row per AAN layer, reordered the same way.
* Encoder-decoder attention: keys and values projected once per source sentence (not per
  hypothesis), so they are never reordered; SAN followers that reuse the context A (Eq. 5) have
  none.

Finished sentences keep their rows (beam search masks them), so every shape stays fixed during a
batch: what a captured (CUDA graph) step needs.
"""

from dataclasses import dataclass, field
from typing import List, Optional

import torch
from torch import Tensor


class Reorderable:
    """A tensor with one row per hypothesis along ``dim``, gathered by beam search into a spare.

    With ``length_dim``, only the positions written so far are gathered; the positions after them
    hold stale values that are overwritten before they are read. Both buffers start uninitialised
    (filling 2 x the cache costs more than a step): callers fill ``tensor`` where it is read first.
    """

    def __init__(
        self, shape, dtype, device, dim: int = 0, length_dim: Optional[int] = None
    ) -> None:
        self.tensor = torch.empty(shape, dtype=dtype, device=device)
        self._spare = torch.empty_like(self.tensor)
        self.dim, self.length_dim = dim, length_dim

    def reorder(self, order: Tensor, length: Optional[int] = None) -> None:
        """Row i becomes row ``order[i]`` (positions ``:length``): one gather, no allocation."""
        source, target = self.tensor, self._spare
        if length is not None:
            source = source.narrow(self.length_dim, 0, length)
            target = target.narrow(self.length_dim, 0, length)
        torch.index_select(source, self.dim, order, out=target)
        self.tensor, self._spare = self._spare, self.tensor


@dataclass
class DecoderCache:
    """Everything a decoder step reads and writes besides the weights (see module doc).

    ``self_attention`` is (slots, hypotheses, heads, max positions, head_dim) or None when the
    decoder has no dot-product self-attention; ``sums`` is (hypotheses, AAN layers, embed) or None;
    ``encoder`` holds per-sentence (sentences * heads, source length, head_dim) keys/values in the
    order the step's modules registered them; ``sentences`` is the number of source sentences;
    ``source_padding`` is (sentences, 1, 1, source length),
    True at padding, or None when the batch has none.
    """

    self_attention: Optional[Reorderable]
    sums: Optional[Reorderable]
    encoder: List[Tensor] = field(default_factory=list)
    sentences: int = 0
    source_padding: Optional[Tensor] = None

    def reorder(self, order: Tensor, written: int) -> None:
        """Follow beam search: row i takes row ``order[i]``'s state (``written`` positions)."""
        if self.self_attention is not None:
            self.self_attention.reorder(order, written)
        if self.sums is not None:
            self.sums.reorder(order)


def allocate_cache(
    hypotheses: int,
    positions: int,
    self_slots: int,
    heads: int,
    aan_layers: int,
    embed_dim: int,
    dtype: torch.dtype,
    device: torch.device,
) -> DecoderCache:
    """An empty cache for ``hypotheses`` rows and outputs of up to ``positions`` tokens."""
    self_attention = (
        Reorderable(
            (self_slots, hypotheses, heads, positions, embed_dim // heads),
            dtype,
            device,
            dim=1,
            length_dim=3,
        )
        if self_slots
        else None
    )
    # fairseq's AAN keeps its running sums in float32 whatever the model's precision.
    sums = None
    if aan_layers:
        sums = Reorderable((hypotheses, aan_layers, embed_dim), torch.float32, device)
        sums.tensor.zero_()
    return DecoderCache(self_attention, sums)
