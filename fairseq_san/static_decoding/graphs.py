"""The fixed-layout step as CUDA graphs: captured once per (rows, length bucket), then replayed.

On a GPU a decoder step is bound by kernel launches (measured on an H200: ~6 ms per step at batch 16 for
~0.1 ms of arithmetic); a replayed graph launches the whole step at once. ``GraphedStep`` is
called like the step. Per key (``graph_key``: the rows, the length bucket, the temperature and
the addresses of every tensor the step reads besides its weights, so a graph is only ever
replayed on the memory it was captured on) it:

1. copies the cache's mutable state (a step adds to AAN's running sums: running it twice at one
   position is not the same as once), runs the step ``warmup`` times on a side stream (what
   CUDA graph capture needs), restoring the state after each run;
2. captures one step reading static token and position buffers, and restores the state;
3. replays it at every later call with that key: copy the tokens and the position into the
   static buffers, replay, return the static output.

Capture needs an address-stable cache: the generator keeps one per shape across batches (a
``fixed_address`` cache, whose reordering copies back into the same memory). Beam search stays
eager around the replay (its one host sync per step detects finished sentences). A capture that
fails is logged once per key and that key runs eagerly: slower, never wrong.

The capture itself is a function argument (``capture_cuda_graph`` on a GPU), so that the
bookkeeping around it runs in the CPU tests with a stand-in that replays by calling again.
"""

import logging
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

import torch
from torch import Tensor, nn

from fairseq_san.static_decoding.caches import DecoderCache

logger = logging.getLogger(__name__)

# capture(body, warmup, restore) -> replay: runs ``body`` ``warmup`` times (``restore`` after
# each), records it, and returns what replays the recording.
Capture = Callable[[Callable[[], None], int, Callable[[], None]], Callable[[], None]]


def capture_cuda_graph(body: Callable[[], None], warmup: int, restore: Callable[[], None]):
    """``body`` warmed up on a side stream, then captured as one CUDA graph; its ``replay``."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            body()
            restore()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()
    return graph.replay


def mutable_state(cache: DecoderCache) -> List[Tensor]:
    """The tensors of ``cache`` that a step writes (self-attention slots, AAN sums)."""
    return [s.tensor for s in (cache.self_attention, cache.sums) if s is not None]


def read_state(cache: DecoderCache) -> List[Tensor]:
    """Every tensor of ``cache`` that a step reads."""
    padding = [] if cache.source_padding is None else [cache.source_padding]
    return mutable_state(cache) + list(cache.encoder) + padding


def graph_key(
    step: nn.Module, tokens: Tensor, cache: DecoderCache, length: int, temperature: float
) -> Tuple:
    """What a captured step depends on besides the values of its inputs (module doc); the
    step's position table too, which a longer batch replaces (``StaticDecoderStep.prepare``)."""
    tensors = read_state(cache) + [step.positions]
    memory = tuple((t.data_ptr(), tuple(t.shape), t.dtype) for t in tensors)
    return (tokens.size(0), length, temperature, memory)


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
        saved = [t.clone() for t in mutable_state(cache)]
        outputs: List[Tensor] = []

        def body() -> None:
            outputs[:] = [self.step(static_tokens, static_index, cache, temperature, length)]

        def restore() -> None:
            for tensor, copy in zip(mutable_state(cache), saved):
                tensor.copy_(copy)

        try:
            run = self.capture(body, self.warmup, restore)
        except RuntimeError as error:
            logger.warning(
                "CUDA graph capture of the static decoder step failed for %d rows, %d positions "
                "(%s); this shape runs eagerly",
                tokens.size(0), length, str(error).splitlines()[0] if str(error) else error,
            )  # fmt: skip
            restore()
            return None
        restore()
        return Replay(static_tokens, static_index, outputs, run)
