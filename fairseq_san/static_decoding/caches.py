"""The decoder's state during beam search, allocated once per batch for the longest output.

* Self-attention: one tensor ``(slots, hypotheses, heads, positions, head_dim)`` whose slots are
  the keys and values of every self-attention module that has its own (fairseq's attention and
  SAN block leaders) and the values only of the modules that reuse a block's weights S (Eq. 4).
  A step writes its position; a slot is contiguous, so attention is a plain batched matmul over
  (hypotheses x heads). Beam search places each continuing hypothesis in its parent's row where it
  can (beam_search.py), so following it copies only the rows of the other hypotheses, in place,
  one copy per row whatever the number of layers.
* Position 0: every hypothesis of a sentence is the same, so the step runs on one row per
  sentence (``first_step``) and its state is then copied to the sentence's rows (``spread``).
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
    """A tensor with one row per hypothesis along ``dim``, that follows beam search's reordering.

    With ``length_dim``, only the positions written so far are moved; the positions after them
    hold stale values that are overwritten before they are read. Buffers start uninitialised
    (filling the cache costs more than a step): callers fill ``tensor`` where it is read first.
    """

    def __init__(
        self, shape, dtype, device, dim: int = 0, length_dim: Optional[int] = None
    ) -> None:
        self.tensor = torch.empty(shape, dtype=dtype, device=device)
        self._spare: Optional[Tensor] = None  # allocated by the first ``reorder``
        self.dim, self.length_dim = dim, length_dim

    def _written(self, tensor: Tensor, length: Optional[int]) -> Tensor:
        return tensor if length is None else tensor.narrow(self.length_dim, 0, length)

    def reorder(self, order: Tensor) -> None:
        """Row i becomes row ``order[i]``, for any ``order``: one gather of the whole (contiguous)
        tensor into a spare buffer, no allocation after the first call. For small tensors."""
        if self._spare is None:
            self._spare = torch.empty_like(self.tensor)
        torch.index_select(self.tensor, self.dim, order, out=self._spare)
        self.tensor, self._spare = self._spare, self.tensor

    def copy_rows(self, order: Tensor, length: Optional[int] = None) -> None:
        """Row i becomes row ``order[i]`` (positions ``:length``), in place, copying only the
        rows with ``order[i] != i``. Valid when no row so copied is the source of another, as
        with beam search's placement (every source row ``j`` keeps its state: ``order[j] == j``)."""
        moved = order.ne(torch.arange(order.numel(), device=order.device)).nonzero().view(-1)
        written = self._written(self.tensor, length)
        # One copy per moved row: index_select/index_copy_ along a middle dimension of a narrowed
        # tensor measured 5-13x slower (they copy slice by slice, and all of it twice).
        for row, source in zip(moved.tolist(), order[moved].tolist()):
            written.select(self.dim, row).copy_(written.select(self.dim, source))


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
        """Follow beam search: row i takes row ``order[i]``'s state (``written`` positions).
        ``order`` is beam search's placement (see ``Reorderable.copy_rows``)."""
        if self.self_attention is not None:
            self.self_attention.copy_rows(order, written)
        if self.sums is not None:
            self.sums.copy_rows(order)

    def first_step(self) -> "DecoderCache":
        """A cache for position 0 with one row per sentence (all its hypotheses are the same
        there), sharing this one's encoder state; ``spread`` copies it back to every row."""
        first = DecoderCache(None, None, self.encoder, self.sentences, self.source_padding)
        if self.self_attention is not None:
            shape = list(self.self_attention.tensor.shape)
            shape[1], shape[3] = self.sentences, 1
            first.self_attention = _like(self.self_attention, shape)
        if self.sums is not None:
            shape = [self.sentences] + list(self.sums.tensor.shape[1:])
            first.sums = _like(self.sums, shape)
            first.sums.tensor.zero_()
        return first

    def spread(self, first: "DecoderCache") -> None:
        """Every hypothesis of a sentence takes the state of ``first``'s row for it (position 0)."""
        if self.self_attention is not None:
            beam = self.self_attention.tensor.size(1) // self.sentences
            rows = first.self_attention.tensor.repeat_interleave(beam, dim=1)
            self.self_attention.tensor[:, :, :, :1] = rows
        if self.sums is not None:
            beam = self.sums.tensor.size(0) // self.sentences
            self.sums.tensor.copy_(first.sums.tensor.repeat_interleave(beam, dim=0))


def _like(reorderable: Reorderable, shape: List[int]) -> Reorderable:
    """An empty Reorderable of ``shape`` with the dtype, device and dimensions of another."""
    tensor = reorderable.tensor
    return Reorderable(
        shape, tensor.dtype, tensor.device, reorderable.dim, reorderable.length_dim
    )


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
