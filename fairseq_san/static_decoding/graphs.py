"""The fixed-layout step as CUDA graphs: captured once per (rows, length bucket), then replayed.

On a GPU a decoder step is bound by kernel launches (measured on an H200: ~6 ms per step at batch
16 for ~0.1 ms of arithmetic); a replayed graph launches the whole step at once. Two captures:

* ``GraphedSearchStep`` (beam and greedy search, translation's and a language model's after its
  longest prompt): one position whole, the decoder step (and a fused ``--lm-path`` model's step,
  added to it: ``fusion.FusedLanguageModel``), beam
  search's ``advance`` with the position as a device tensor and the caches' reordering, so that
  a position is one replay and one host sync (reading whether every sentence is done). Measured
  on an H100 before it (docs/results/gpu-steps): with the step alone captured, the eager beam
  search around each replay launched about 85 kernels and synchronised about 4 times per step,
  and set the step's time;
* ``GraphedStep`` (translation's position 0, on one row per sentence, never compiled, and
  positions whose search needs the host's position: fairseq's own searches (sampling, diverse
  beam search), a language model's prompt forcing): the decoder step alone, called like the
  step.

Per key (``graph_key``: the rows, the length bucket, the temperature and the addresses of every
tensor the capture reads besides the weights, so a graph is only ever replayed on the memory it
was captured on) each:

1. copies the cache's mutable state (a step adds to AAN's running sums: running it twice at one
   position is not the same as once), runs the step ``warmup`` times on a side stream (what
   CUDA graph capture needs), restoring the state after each run;
2. captures one step reading static token and position buffers, and restores the state (the
   beam search's too, for ``GraphedSearchStep``);
3. replays it at every later call with that key: copy the tokens and the position into the
   static buffers, replay, return the static output.

Capture needs address-stable state: the generator keeps one cache (and one beam search) per
shape across batches (``fixed_address``: reordering copies back into the same memory), for its
``KEPT_SHAPES`` shapes used last, within ``KEPT_MEMORY`` of the GPU's memory; freeing one frees
the graphs that read it (``forget_memory``). A capture that fails is logged and its key runs
eagerly, and so does every later key (``until_one_fails``): slower, never wrong.

The capture itself is a function argument (``capture_cuda_graph`` on a GPU), so that the
bookkeeping around it runs in the CPU tests with a stand-in that records the operators of one
run of the body and replays them on the same tensors, without the Python around them.
"""

import logging
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

import torch
from torch import Tensor, nn

from fairseq_san.errors import first_line
from fairseq_san.static_decoding.beam_search import TensorBeamSearch
from fairseq_san.static_decoding.caches import DecoderCache
from fairseq_san.static_decoding.fusion import FusedLanguageModel

logger = logging.getLogger(__name__)

# capture(body, warmup, restore) -> replay: runs ``body`` ``warmup`` times (``restore`` after
# each), records it, and returns what replays the recording.
Capture = Callable[[Callable[[], None], int, Callable[[], None]], Callable[[], None]]


def capture_cuda_graph(
    body: Callable[[], None], warmup: int, restore: Callable[[], None]
) -> Callable[[], None]:
    """``body`` warmed up on a side stream, then captured as one CUDA graph; its ``replay``.

    The capture refuses only this thread's operations that it cannot record
    (``capture_error_mode="thread_local"``): fairseq's data loader pins memory in threads of its
    own while the generator captures, and CUDA's default mode would invalidate the capture for
    those (pytorch/pytorch#146924). Where warm-up or capture raises, the caller's stream is
    current again and has waited for the side stream, so its eager fall-back runs after every
    kernel of the warm-up (``torch.cuda.graph`` leaves its capture stream current when ending
    the capture fails)."""
    current = torch.cuda.current_stream()
    stream = torch.cuda.Stream()
    stream.wait_stream(current)
    try:
        with torch.cuda.stream(stream):
            for _ in range(warmup):
                body()
                restore()
    finally:
        current.wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            body()
    finally:
        torch.cuda.set_stream(current)
    return graph.replay


def until_one_fails(capture: Capture) -> Capture:
    """``capture``, refusing every capture after one failed (a generator's runners share it): a
    failed CUDA capture leaves the device in a state that another is better not built on, and
    the same step would fail again; the generator then runs eagerly, slower, never wrong."""
    failures: List[str] = []

    def capture_unless_one_failed(
        body: Callable[[], None], warmup: int, restore: Callable[[], None]
    ) -> Callable[[], None]:
        if failures:
            raise RuntimeError(f"an earlier capture failed: {failures[0]}")
        try:
            return capture(body, warmup, restore)
        except RuntimeError as error:
            failures.append(first_line(error))
            raise

    return capture_unless_one_failed


def mutable_state(cache: DecoderCache) -> List[Tensor]:
    """The tensors of ``cache`` that a step writes (self-attention slots, AAN sums)."""
    return [s.tensor for s in (cache.self_attention, cache.sums) if s is not None]


def read_state(cache: DecoderCache) -> List[Tensor]:
    """Every tensor of ``cache`` that a step reads."""
    padding = [] if cache.source_padding is None else [cache.source_padding]
    return mutable_state(cache) + list(cache.encoder) + padding


def graph_key(
    step: nn.Module,
    tokens: Tensor,
    cache: DecoderCache,
    length: int,
    temperature: float,
    also: Tuple[Tensor, ...] = (),
) -> Tuple:
    """What a captured step depends on besides the values of its inputs (module doc); the
    step's position table too, which a longer batch replaces (``StaticDecoderStep.prepare``);
    ``also``: other tensors the capture reads (a beam search's)."""
    tensors = read_state(cache) + [step.positions, *also]
    memory = tuple((t.data_ptr(), tuple(t.shape), t.dtype) for t in tensors)
    return (tokens.size(0), length, temperature, memory)


def capture_or_none(
    capture: Capture, warmup: int, body: Callable[[], None], state: List[Tensor], what: str
) -> Optional[Callable[[], None]]:
    """``capture`` of ``body``, with ``state`` (what it writes) restored after the warm-up runs
    and the capture; None, logged, where capture fails (``what``: the shape, for the log)."""
    saved = [t.clone() for t in state]

    def restore() -> None:
        for tensor, copy in zip(state, saved):
            tensor.copy_(copy)

    try:
        run = capture(body, warmup, restore)
    except RuntimeError as error:
        logger.warning(
            "CUDA graph capture of the static decoder step failed for %s (%s); this shape runs "
            "eagerly", what, first_line(error),
        )  # fmt: skip
        run = None
    restore()
    return run


def held_memory(cache: DecoderCache) -> List[Tensor]:
    """Every tensor of ``cache`` that a captured step reads, its first-step cache's included."""
    first = [] if cache.first is None else read_state(cache.first[1])
    return read_state(cache) + first


def forget_memory(replays: Dict[Tuple, object], freed: List[Tensor]) -> None:
    """Drop the replays whose key (``graph_key``) reads one of ``freed``: memory about to be
    freed, which a graph would go on reading; the others keep their graphs."""
    addresses = {tensor.data_ptr() for tensor in freed}
    for key in [key for key in replays if any(read[0] in addresses for read in key[-1])]:
        del replays[key]


@dataclass
class Replay:
    """A captured step: its static inputs (tokens, position), its output (``outputs[0]``: the
    static output of a graph; what the stand-in's call returned in the tests) and the replay."""

    tokens: Tensor
    index: Tensor
    outputs: List[Tensor]
    run: Callable[[], None]

    def __call__(self, tokens: Tensor, index: Tensor) -> Tensor:
        self.tokens.copy_(tokens)
        self.index.copy_(index)
        self.run()
        return self.outputs[0]


class GraphedStep(nn.Module):
    """The fixed-layout step, captured per key and replayed (module doc); called like the step."""

    def __init__(
        self, step: nn.Module, capture: Capture = capture_cuda_graph, warmup: int = 2
    ) -> None:
        super().__init__()
        self.step, self.capture, self.warmup = step, capture, warmup
        self.replays: Dict[Tuple, Optional[Replay]] = {}  # None: capture failed, run eagerly

    def forward(
        self,
        tokens: Tensor,
        index: Tensor,
        cache: DecoderCache,
        temperature: float = 1.0,
        length: Optional[int] = None,
    ) -> Tensor:
        key = graph_key(self.step, tokens, cache, length, temperature)
        if key not in self.replays:
            self.replays[key] = self._capture(tokens, index, cache, temperature, length)
        replay = self.replays[key]
        if replay is None:
            return self.step(tokens, index, cache, temperature, length)
        return replay(tokens, index)

    def _capture(self, tokens, index, cache, temperature, length) -> Optional[Replay]:
        """A Replay of the step for this key, or None (logged) where capture fails."""
        static_tokens, static_index = tokens.clone(), index.clone()
        outputs: List[Tensor] = []

        def body() -> None:
            outputs[:] = [self.step(static_tokens, static_index, cache, temperature, length)]

        what = f"{tokens.size(0)} rows, {length} positions"
        run = capture_or_none(self.capture, self.warmup, body, mutable_state(cache), what)
        return None if run is None else Replay(static_tokens, static_index, outputs, run)


def advance_position(
    step: nn.Module,
    search: TensorBeamSearch,
    index: Tensor,
    cache: DecoderCache,
    temperature: float,
    length: int,
    fused: Optional[FusedLanguageModel] = None,
) -> None:
    """One position of beam search on the device, with no host sync: the decoder step at
    ``index`` (a (1,) tensor) and the ``fused`` language model's added to it, ``advance``, and
    the caches following the hypotheses."""
    tokens = search.last_tokens(index)
    lprobs = step(tokens, index, cache, temperature, length)
    caches = [cache]
    if fused is not None:
        lprobs = fused.fuse(lprobs, fused.position(tokens, index, length))
        caches.append(fused.cache)
    order = search.advance(index, lprobs)
    for each in caches:
        each.follow(order, length, search.settings.beam)


def fused_memory(fused: Optional[FusedLanguageModel]) -> Tuple[List[Tensor], List[Tensor]]:
    """(what a captured position reads, what it writes) of the ``fused`` language model: its
    step's position table and its batch's cache; nothing without one."""
    if fused is None:
        return [], []
    return read_state(fused.cache) + [fused.step.positions], mutable_state(fused.cache)


class GraphedSearchStep:
    """``advance_position`` captured per key and replayed (module doc): the caller reads
    ``search.done`` after each call, the one host sync of a position."""

    def __init__(self, step: nn.Module, capture: Capture = capture_cuda_graph, warmup: int = 2):
        self.step, self.capture, self.warmup = step, capture, warmup
        # Per key: the static position buffer and the replay; None: capture failed, run eagerly.
        self.replays: Dict[Tuple, Optional[Tuple[Tensor, Callable[[], None]]]] = {}

    def __call__(self, search: TensorBeamSearch, index: Tensor, cache: DecoderCache,
                 temperature: float, length: int,
                 fused: Optional[FusedLanguageModel] = None) -> None:  # fmt: skip
        """``advance_position`` with these arguments: replayed, or captured first."""
        tokens = search.tokens.tensor
        also = tuple(search.state() + fused_memory(fused)[0])
        key = graph_key(self.step, tokens, cache, length, temperature, also)
        if key not in self.replays:
            self.replays[key] = self._capture(search, index, cache, temperature, length, fused)
        replay = self.replays[key]
        if replay is None:
            advance_position(self.step, search, index, cache, temperature, length, fused)
            return
        static_index, run = replay
        static_index.copy_(index)
        run()

    def _capture(self, search, index, cache, temperature, length, fused):
        """(static position, replay) for this key, or None (logged) where capture fails."""
        static_index = index.clone()

        def body() -> None:
            advance_position(self.step, search, static_index, cache, temperature, length, fused)

        state = mutable_state(cache) + search.state() + fused_memory(fused)[1]
        searched = "beam search" if fused is None else "beam search and the fused language model"
        what = f"{search.tokens.tensor.size(0)} rows, {length} positions (with {searched})"
        run = capture_or_none(self.capture, self.warmup, body, state, what)
        return None if run is None else (static_index, run)
