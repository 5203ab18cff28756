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
batch; in the sliced layout, once at most half of a batch's sentences are live, the done ones
leave it (``keep_sentences``), as they leave fairseq's batch, so that a long output does not pay
for the rows of finished ones.

Two layouts, one step (``fixed`` below; step.py reads the cache only through ``Position``):

* sliced (the CPU's default, the faster there): the position is a Python int, a step attends over
  the positions written so far (a narrowed view), and beam search's reordering copies the moved
  rows one by one (one host sync per step to find them);
* fixed (GPU; torch.compile and CUDA graphs): the position is a device tensor, each attention
  writes its slot with ``index_put_`` and attends over a whole length bucket (``length_bucket``)
  with a mask, and the reordering is one gather of whole rows (their positions up to the
  bucket) into a spare buffer, with no host sync: the step's shapes and control flow depend on
  the bucket only, not the position.
  The encoder state is padded to its length bucket too (``pad_source``), with a mask.
  Its caches start zeroed, so that masked positions hold no NaN that a zero weight could not hide.
"""

import math
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from fairseq_san.modules.average_attention import running_sum_dtype


class Reorderable:
    """A tensor with one row per hypothesis along ``dim``, that follows beam search's reordering.

    With ``length_dim``, only the positions written so far are moved; the positions after them
    hold stale values that are overwritten before they are read. Buffers start uninitialised
    (filling the cache costs more than a step): callers fill ``tensor`` where it is read first.
    """

    def __init__(
        self,
        shape: Sequence[int],
        dtype: torch.dtype,
        device: Union[str, torch.device],
        dim: int = 0,
        length_dim: Optional[int] = None,
        fixed_address: bool = False,
        memory: Optional["KeptMemory"] = None,
    ) -> None:
        if memory is None:
            self.tensor = torch.empty(shape, dtype=dtype, device=device)
        else:
            self.tensor = memory.take(shape, dtype, device)
        self._spare: Optional[Tensor] = None  # allocated by the first ``reorder``
        self.dim, self.length_dim = dim, length_dim
        # A captured CUDA graph reads the tensor it was captured with: ``reorder`` copies back.
        self.fixed_address = fixed_address

    def _written(self, tensor: Tensor, length: Optional[int]) -> Tensor:
        return tensor if length is None else tensor.narrow(self.length_dim, 0, length)

    def reorder(self, order: Tensor, length: Optional[int] = None) -> None:
        """Row i becomes row ``order[i]``, for any ``order``: one gather into a spare buffer of
        the positions ``:length`` (all without ``length_dim``), no allocation after the first
        call, no host sync (then one copy back with ``fixed_address``). The positions after
        ``length`` are not written yet: they stay as they are, zero in both buffers (a masked
        position must hold no NaN), so a short output does not move the longest one's cache."""
        if self._spare is None:
            self._spare = torch.zeros_like(self.tensor)
        written, spare = self._written(self.tensor, length), self._written(self._spare, length)
        torch.index_select(written, self.dim, order, out=spare)
        if self.fixed_address:
            written.copy_(spare)
        else:
            self.tensor, self._spare = self._spare, self.tensor

    def keep_rows(self, rows: Tensor, length: Optional[int] = None) -> None:
        """Only ``rows`` stay, in that order, in a new tensor (the positions ``:length`` copied,
        the others written before they are read). Not with ``fixed_address``: a captured graph
        reads the memory it was captured on."""
        if self.fixed_address:
            raise ValueError("a fixed-address tensor keeps all its rows")
        shape = list(self.tensor.shape)
        shape[self.dim] = rows.numel()
        kept = self.tensor.new_empty(shape)
        self._written(kept, length).copy_(
            self._written(self.tensor, length).index_select(self.dim, rows)
        )
        self.tensor, self._spare = kept, None

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


class KeptMemory:
    """The memory of one batch's tensor (its self-attention state, its steps' log-probabilities),
    kept for the next batches (executions without CUDA graphs): at beam 20 such a tensor is tens
    of megabytes, which the C library maps anew for each batch (each step, for log-probabilities)
    and the kernel faults in page by page as it is written (SAN {6}/{6} at batch 16: about 600
    faults a step for its state; docs/results/cpu-yardstick/log-probs-2026-12-01). A larger batch
    takes new memory, a quarter more than it needs, so that the slightly longer outputs of the
    batches after it (fairseq sorts them by source length) fit in it too."""

    HEADROOM = 1.25

    def __init__(self) -> None:
        self.memory: Optional[Tensor] = None

    def take(
        self, shape: Sequence[int], dtype: torch.dtype, device: Union[str, torch.device]
    ) -> Tensor:
        """An uninitialised tensor of ``shape`` at the start of the kept memory (a batch holds it
        until the next batch takes it)."""
        size = math.prod(shape)
        held = self.memory
        if not (
            held is not None
            and held.numel() >= size
            and held.dtype == dtype
            and held.device == torch.device(device)
            and held.is_inference() == torch.is_inference_mode_enabled()
        ):
            held = self.memory = torch.empty(int(size * self.HEADROOM), dtype=dtype, device=device)
        return held[:size].view(shape)


def sentence_rows(sentences: Tensor, per_sentence: int) -> Tensor:
    """The rows of ``sentences`` (indices) in a tensor of ``per_sentence`` rows per sentence
    (hypotheses: the beam; encoder states: the heads), sentence-major."""
    offsets = torch.arange(per_sentence, device=sentences.device)
    return (sentences.unsqueeze(1) * per_sentence + offsets).view(-1)


# Lengths a fixed-layout step attends over: a short output does not pay for the longest one, and
# a compiled or captured step exists once per bucket. Longer: multiples of the last one.
LENGTH_BUCKETS = (32, 64, 128, 256)


def length_bucket(positions: int, buckets: Sequence[int] = LENGTH_BUCKETS) -> int:
    """The smallest bucket holding ``positions`` positions (a multiple of the largest beyond)."""
    if positions < 1:
        raise ValueError(f"a step attends over at least one position, not {positions}")
    for bucket in buckets:
        if positions <= bucket:
            return bucket
    return math.ceil(positions / buckets[-1]) * buckets[-1]


def pad_source(encoder_out: Tensor, padding: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    """The encoder output (source, sentences, embed) zero-padded to its length bucket, and its
    padding mask (sentences, bucket), True at padding: the fixed layout's encoder state, whose
    shape then depends on the bucket only (one compiled or captured step for many batches)."""
    source, sentences, embed = encoder_out.shape
    bucket = length_bucket(source)
    padded = encoder_out.new_zeros(bucket, sentences, embed)
    padded[:source] = encoder_out
    mask = torch.ones(sentences, bucket, dtype=torch.bool, device=encoder_out.device)
    mask[:, :source] = False if padding is None else padding
    return padded, mask


# ATen's CPU bmm multiplies matrices of fewer multiply-adds than this (m x k x n) in a scalar loop
# (``baddbmm_cpu_kernel``), not in a BLAS batch: a step's attention over its first positions.
SMALL_PRODUCT = 400


def bmm(a: Tensor, b: Tensor) -> Tensor:
    """``torch.bmm(a, b)`` for (batch, m, k) by (batch, k, n). One query (m = 1) on the CPU in
    float32 below SMALL_PRODUCT is a broadcast product and a sum instead: torch's scalar loop
    took 1.3-3.5x as long at a beam-20 step's shapes and cache layouts (1,280 products of 1 x 64
    by 64 x L, or 1 x L by L x 64, for L <= 6: docs/results/cpu-yardstick/
    small-products-2026-12-01)."""
    m, k = a.shape[1:]
    small = m == 1 and k * b.size(2) < SMALL_PRODUCT
    if small and a.device.type == "cpu" and a.dtype == torch.float32:
        return (a.transpose(1, 2) * b).sum(1, keepdim=True)
    return torch.bmm(a, b)


@dataclass
class Position:
    """Where a step writes its cache slot and how far it attends (see module doc).

    Sliced: ``index`` is an int and the step attends over ``length = index + span`` positions;
    ``span`` > 1 is a prompt's prefill (``Position.prefill``: positions ``index..index+span-1`` at
    once, ``mask`` (span, length) causal). Fixed: ``index`` is a (1,) long tensor on the device
    and the step attends over ``length`` positions (a bucket), ``mask`` (length,) adding -inf
    after ``index``.
    """

    index: Union[int, Tensor]
    length: int
    mask: Optional[Tensor] = None
    span: int = 1

    @classmethod
    def at(cls, index: Union[int, Tensor], length: Optional[int], dtype: torch.dtype) -> "Position":
        """The position ``index``: sliced for an int, fixed over ``length`` for a tensor."""
        if isinstance(index, int):
            return cls(index, index + 1)
        after = torch.arange(length, device=index.device) > index
        mask = torch.zeros(length, dtype=dtype, device=index.device).masked_fill_(after, -math.inf)
        return cls(index, length, mask)

    @classmethod
    def prefill(cls, span: int, dtype: torch.dtype, device: torch.device) -> "Position":
        """Positions 0..span-1 at once (sliced, on either layout's cache): position i attends over
        0..i (a causal mask), as fairseq's decoder does over a whole prompt."""
        later = torch.arange(span, device=device) > torch.arange(span, device=device).view(-1, 1)
        mask = torch.zeros(span, span, dtype=dtype, device=device).masked_fill_(later, -math.inf)
        return cls(0, span, mask, span)

    def embedding(self, table: Tensor) -> Tensor:
        """The rows of a position table (positions, embed) for the positions of this step."""
        return table[self.index] if self.span == 1 else table[self.index : self.index + self.span]

    def write(self, cache: "DecoderCache", first: int, new: Tensor) -> None:
        """Store ``new`` (slots, rows, heads, span, head_dim) at these positions of the slots
        ``first``.. of the cache's self-attention (slots, rows, heads, positions, head_dim).
        Fixed: one ``index_put_`` on the whole tensor (torch.compile does it in place; through a
        view of it, it copies it) at the cache's ``slot_axes``, so that a step launches no kernel
        to build its indices."""
        states = cache.self_attention.tensor
        if isinstance(self.index, int):
            states[first : first + new.size(0), :, :, self.index : self.index + self.span] = new
            return
        slots, rows, heads = cache.slot_axes
        where = (slots[first : first + new.size(0)], rows, heads, self.index)
        states.index_put_(where, new.squeeze(3))

    def read(self, slot: Tensor) -> Tensor:
        """The attended positions of a cache slot (rows, heads, positions, head_dim) as the
        (rows * heads, length, head_dim) view that torch.bmm takes without a copy."""
        rows, heads, _, head_dim = slot.shape
        return slot[:, :, : self.length].view(rows * heads, self.length, head_dim)

    def logits(self, query: Tensor, keys: Tensor) -> Tensor:
        """``query @ keys^T`` (batch, span, length), masked (fixed layout, prefill)."""
        if self.mask is None:
            return bmm(query, keys.transpose(1, 2))
        return torch.baddbmm(self.mask, query, keys.transpose(1, 2))

    def count(self) -> Union[int, Tensor]:
        """The number of positions up to this one (AAN's average)."""
        return self.index + 1


@dataclass
class DecoderCache:
    """Everything a decoder step reads and writes besides the weights (see module doc).

    ``self_attention`` is (slots, hypotheses, heads, max positions, head_dim) or None when the
    decoder has no dot-product self-attention; ``sums`` is (hypotheses, AAN layers, embed) or None;
    ``encoder`` holds per-sentence (sentences * heads, source length, head_dim) keys/values in the
    order the step's modules registered them; ``sentences`` is the number of source sentences;
    ``source_padding`` is (sentences, 1, 1, source length),
    True at padding, or None when the batch has none; ``fixed``: the layout (module doc).
    """

    self_attention: Optional[Reorderable]
    sums: Optional[Reorderable]
    encoder: List[Tensor] = field(default_factory=list)
    sentences: int = 0
    source_padding: Optional[Tensor] = None
    fixed: bool = False
    # Where a CPU step writes its log-probabilities (rows, vocabulary), float32; None: a new
    # tensor at each step. A generator that reads each step's before the next gives it one, so
    # that a step's result is not memory mapped anew and faulted in (step.py).
    log_probs: Optional[Tensor] = None
    slot_axes: Optional[Tuple[Tensor, Tensor, Tensor]] = field(init=False, default=None)
    # ``first_step``'s cache and its (sentences, positions), kept for the next batch of a cache
    # kept per shape (its memory is what a captured position 0 reads).
    first: Optional[Tuple[Tuple[int, int], "DecoderCache"]] = field(
        init=False, default=None, repr=False
    )
    # Whether a batch's encoder state is held (``hold_encoder``): a decoder without encoder
    # keys or values holds an empty list, and its padding mask too must be copied, not replaced.
    holds_encoder: bool = field(init=False, default=False, repr=False)

    def __post_init__(self) -> None:
        """The fixed layout's write indices (``slot_axes``), made with the cache."""
        if self.fixed and self.self_attention is not None:
            self.slot_axes = slot_axes(self.self_attention.tensor)

    def reset(self) -> None:
        """Zero what a batch wrote (self-attention slots, AAN sums), as when allocated: a cache
        kept for its shape starts the next batch clean (a masked position must hold no NaN)."""
        for state in (self.self_attention, self.sums):
            if state is not None:
                state.tensor.zero_()

    def hold_encoder(self, encoder: List[Tensor], source_padding: Optional[Tensor]) -> None:
        """Take a batch's encoder state: copied into the tensors this cache already holds when it
        is reused for another batch of its shape (a captured step reads their memory), else held
        as given."""
        if not self.holds_encoder:
            self.encoder, self.source_padding = encoder, source_padding
            self.holds_encoder = True
            return
        padding = [] if source_padding is None else [(self.source_padding, source_padding)]
        for held, new in list(zip(self.encoder, encoder)) + padding:
            held.copy_(new)

    def reorder(self, order: Tensor, written: int) -> None:
        """Follow beam search: row i takes row ``order[i]``'s state (``written`` positions).
        ``order`` is beam search's placement (see ``Reorderable.copy_rows``); the fixed layout
        gathers whole rows instead (no host sync; ``written``: a captured position's bucket)."""
        for state, length in ((self.self_attention, written), (self.sums, None)):
            if state is not None and self.fixed:
                state.reorder(order, length)
            elif state is not None:
                state.copy_rows(order, length)

    def keep_sentences(self, sentences: Tensor, beam: int, written: int) -> None:
        """Only ``sentences`` (indices, in order) stay: their hypotheses' rows (``written``
        positions of self-attention) and their encoder state (the sliced layout only)."""
        rows = sentence_rows(sentences, beam)
        if self.self_attention is not None:
            self.self_attention.keep_rows(rows, written)
        if self.sums is not None:
            self.sums.keep_rows(rows)
        if self.encoder:
            heads = self.encoder[0].size(0) // self.sentences
            per_head = sentence_rows(sentences, heads)
            self.encoder = [state.index_select(0, per_head) for state in self.encoder]
        if self.source_padding is not None:
            self.source_padding = self.source_padding.index_select(0, sentences)
        self.sentences = sentences.numel()

    def follow(self, order: Tensor, written: int, beam: int) -> None:
        """``reorder`` where beam search moves hypotheses between rows: with one hypothesis per
        sentence (``beam`` 1) each stays in its row and nothing moves."""
        if beam > 1:
            self.reorder(order, written)

    def first_step(self, positions: int = 1) -> "DecoderCache":
        """A cache for positions 0..positions-1 with one row per sentence (all its hypotheses are
        the same there: position 0, a language model's prompt), sharing this one's encoder state;
        ``spread`` copies it back to every row. The one of the last call when its shape is the
        same, reset."""
        shape = (self.sentences, positions)
        if self.first is not None and self.first[0] == shape:
            kept = self.first[1]
            kept.reset()
            return kept
        self.first = (shape, self._first_step(positions))
        return self.first[1]

    def _first_step(self, positions: int) -> "DecoderCache":
        self_attention = sums = None
        if self.self_attention is not None:
            shape = list(self.self_attention.tensor.shape)
            shape[1], shape[3] = self.sentences, positions
            self_attention = _like(self.self_attention, shape)
        if self.sums is not None:
            shape = [self.sentences] + list(self.sums.tensor.shape[1:])
            sums = _like(self.sums, shape)
            sums.tensor.zero_()
        return DecoderCache(
            self_attention, sums, self.encoder, self.sentences, self.source_padding, self.fixed
        )

    def spread(self, first: "DecoderCache") -> None:
        """Every hypothesis of a sentence takes the state of ``first``'s row for it (its
        positions)."""
        if self.self_attention is not None:
            beam = self.self_attention.tensor.size(1) // self.sentences
            rows = first.self_attention.tensor.repeat_interleave(beam, dim=1)
            self.self_attention.tensor[:, :, :, : rows.size(3)] = rows
        if self.sums is not None:
            beam = self.sums.tensor.size(0) // self.sentences
            self.sums.tensor.copy_(first.sums.tensor.repeat_interleave(beam, dim=0))


def _like(reorderable: Reorderable, shape: List[int]) -> Reorderable:
    """An empty Reorderable of ``shape`` with the dtype, device and dimensions of another."""
    tensor = reorderable.tensor
    return Reorderable(shape, tensor.dtype, tensor.device, reorderable.dim, reorderable.length_dim)


def allocate_cache(
    hypotheses: int,
    positions: int,
    self_slots: int,
    heads: int,
    aan_layers: int,
    embed_dim: int,
    dtype: torch.dtype,
    device: torch.device,
    fixed: bool = False,
    fixed_address: bool = False,
    memory: Optional[KeptMemory] = None,
) -> DecoderCache:
    """An empty cache for ``hypotheses`` rows and outputs of up to ``positions`` tokens, in the
    sliced or ``fixed`` layout (module doc; ``fixed_address``: see Reorderable), its
    self-attention state in ``memory`` where given."""
    self_attention = None
    if self_slots:
        shape = (self_slots, hypotheses, heads, positions, embed_dim // heads)
        self_attention = Reorderable(shape, dtype, device, 1, 3, fixed_address, memory)
        if fixed:
            self_attention.tensor.zero_()
    sums = None  # the AAN layers' running sums, in the module's dtype for them
    if aan_layers:
        shape = (hypotheses, aan_layers, embed_dim)
        sums = Reorderable(shape, running_sum_dtype(dtype), device, fixed_address=fixed_address)
        sums.tensor.zero_()
    return DecoderCache(self_attention, sums, fixed=fixed)


def slot_axes(states: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    """The slot, row and head indices of self-attention ``states`` (slots, rows, heads, ...),
    shaped to broadcast against each other: the fixed layout's ``Position.write``, made once per
    cache rather than at every step (on a GPU each would be a kernel of the captured graph)."""
    slots, rows, heads = (torch.arange(n, device=states.device) for n in states.shape[:3])
    return slots.view(-1, 1, 1), rows.view(1, -1, 1), heads.view(1, 1, -1)
