"""``FusedLanguageModel``: fairseq-generate's ``--lm-path`` model in the static decoder (shallow
fusion: ``--lm-weight`` times its log-probabilities added to the decoded model's before the search
chooses, as fairseq's SequenceGenerator adds them).

fairseq's generator runs the language model over each hypothesis' whole prefix at every position
(no incremental state), so a fused position costs a pass over every token decoded so far; on
Multi30k's test that pass took more than half of the decoding time (docs/results/
static-lm-fusion-2026-12-01). Here the language model is a ``StaticDecoderStep`` of its own, one
token per hypothesis and position, with a cache (``DecoderCache``) that follows beam search as the
decoded model's does: the same reorders, the same done sentences leaving the batch, the same
layout. The positions every hypothesis of a sentence shares (the start token; a language model's
known prompt tokens) run once per sentence, as the decoded model's first step does. With CUDA
graphs its step is captured in the decoded model's position (``graphs.GraphedSearchStep``), on a
cache kept with the decoded model's for the batch's shape (a captured graph reads its memory).
"""

from typing import Dict, Optional, Tuple, Union

import torch
from torch import Tensor, nn

from fairseq_san.static_decoding.caches import DecoderCache, KeptMemory
from fairseq_san.static_decoding.precision import apply_precision
from fairseq_san.static_decoding.step import StaticDecoderStep


class FusedLanguageModel:
    """The ``--lm-path`` model's step, its weight and its cache for the batch being decoded."""

    def __init__(self, model: nn.Module, weight: float, precision: str) -> None:
        """The step from ``model``'s decoder at the decoded model's ``precision`` (eager, its
        linear layers packed where the device allows), or StaticDecoderError naming what the
        step cannot reproduce in it."""
        step = StaticDecoderStep(model.decoder, owner="the --lm-path language model")
        self.step = apply_precision(step, precision)
        self.weight = weight
        self.cache: Optional[DecoderCache] = None
        # With CUDA graphs, the caches kept with the decoded model's, under its cache's key.
        self.kept: Dict[Tuple, DecoderCache] = {}
        # Else the memory of a batch's self-attention state and log-probabilities, kept for the
        # next one, as the decoded model's (``KeptMemory``).
        self._memory, self._log_probs_memory = KeptMemory(), KeptMemory()

    def start(
        self, sentences: int, beam: int, positions: int, fixed: bool, table: int,
        device: torch.device, keep_as: Optional[Tuple] = None,
    ) -> None:  # fmt: skip
        """An empty cache for a batch of ``sentences`` x ``beam`` hypotheses and ``positions``
        positions in the decoded model's layout (``fixed``), the step's position table holding
        ``table`` positions, or as many as the language model has. ``keep_as``: with CUDA
        graphs, the key of the decoded model's cache kept for the batch's shape: this one is kept
        with it (at a fixed address), reset."""
        cache = self.kept.get(keep_as) if keep_as is not None else None
        if cache is not None:
            cache.reset()
        else:
            kept = keep_as is not None
            cache = self.step.empty_cache(
                sentences * beam, positions, device, fixed, fixed_address=kept,
                memory=None if kept else self._memory,
                log_probs_memory=None if kept else self._log_probs_memory,
            )  # fmt: skip
            if kept:
                self.kept[keep_as] = cache
        cache.sentences = sentences
        self.step.prepare(None, None, cache, table)
        self.cache = cache

    def shared_positions(self, tokens: Tensor) -> Tensor:
        """Log-probabilities (sentences, span, vocabulary) after each of ``tokens`` (sentences,
        span): the positions 0..span-1 that every hypothesis of a sentence shares, one row per
        sentence, one position at a time (any decoder, AAN's included); then every hypothesis
        takes its sentence's state."""
        span = tokens.size(1)
        first = self.cache.first_step(span)
        lprobs = [self.step(tokens[:, position], position, first) for position in range(span)]
        self.cache.spread(first)
        return torch.stack(lprobs, dim=1)

    def position(self, tokens: Tensor, at: Union[int, Tensor], length: Optional[int]) -> Tensor:
        """Log-probabilities (hypotheses, vocabulary) after ``tokens`` (hypotheses,) at the
        position the decoded model's step took: ``at`` an int (sliced layout), or the (1,) device
        tensor holding it, attending over ``length`` positions (fixed)."""
        return self.step(tokens, at, self.cache, 1.0, length)

    def fuse(self, lprobs: Tensor, lm_lprobs: Tensor) -> Tensor:
        """fairseq's arithmetic: the decoded model's ``lprobs`` plus the language model's times
        ``--lm-weight``, row by row."""
        return lprobs + (lm_lprobs * self.weight).to(lprobs.dtype)
