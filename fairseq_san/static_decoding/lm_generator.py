"""``StaticLMGenerator``: the static decoder for a decoder-only language model (``transformer_lm``,
``transformer_lm_san``), a drop-in for fairseq's SequenceGenerator as the language modelling task
calls it (the prompt as prefix tokens).

Per batch: the prompt's positions that every sentence has are prefilled in one pass (``prefill``:
all their keys and values, and the log-probabilities after each prompt token, at once), then one
step per position as in translation (``StaticSequenceGenerator``), where a longer prompt's tokens
are forced. fairseq's generator feeds a prompt one token per step; the tokens and scores are the
same. Search: greedy (``--beam 1``), beam search, sampling (``--sampling``, top-k, top-p;
drawn by fairseq's own ``Sampling`` from torch's generator, so ``--seed`` fixes them) or
fairseq's diverse searches (``--diverse-beam-groups``, ``--diversity-rate``), with
fairseq's rules (``beam_search.py``); in the sliced layout done prompts leave the batch after the
prefill, as in translation. With CUDA graphs a position after the longest prompt is one captured
position (step, search, reordering), as in translation; a ragged prompt's forced positions and
fairseq's own searches, which take the host's position, replay the step alone.

Caches (``caches.py``): keys and values for a layer with its own (no sharing, a block's first
layer), values only for a SAN follower (it reuses the block's attention weights S), nothing for a
cross-layer KV follower (it attends over the block's keys and values with its own queries).
"""

from typing import Dict, Optional

import torch
from torch import Tensor

from fairseq_san.generation_options import check_no_alignment
from fairseq_san.static_decoding.beam_search import TensorBeamSearch
from fairseq_san.static_decoding.generator import StaticSequenceGenerator


class StaticLMGenerator(StaticSequenceGenerator):
    """Continuations of prompts by a language model (see module doc)."""

    needs_encoder = False

    def checked_alignment(self, kind: Optional[str]) -> None:
        """A language model prints no alignment (``check_no_alignment``)."""
        check_no_alignment(kind)

    def build_from_weights(self) -> None:
        """The translation generator's, refusing a model the prefill cannot run (when it is
        built, before any batch)."""
        super().build_from_weights()
        self.step.check_prefill()

    def decode(
        self,
        sample: Dict[str, Dict[str, Tensor]],
        prefix_tokens: Optional[Tensor],
        bos_token: Optional[int],
        constraints: Optional[Tensor] = None,
    ) -> TensorBeamSearch:
        """fairseq's ``SequenceGenerator.generate`` for a language model, to the end of the batch:
        per prompt (the rows of ``prefix_tokens``, padded on the right), its n-best continuations,
        the prompt included, in the search returned; ``constraints`` as in translation."""
        batch = self._start(sample, prefix_tokens, bos_token, constraints)
        search, cache, index, max_len = batch.search, batch.cache, batch.index, batch.max_len
        known = self._known_positions(prefix_tokens, max_len)
        # Positions 0..known: the start token and the prompt tokens every sentence has, in one
        # pass on one row per sentence (its hypotheses are all the same there).
        prompt = torch.full((cache.sentences, 1), batch.bos, dtype=torch.long, device=batch.device)
        if known:
            prompt = torch.cat([prompt, prefix_tokens[:, :known]], dim=1)
        first = cache.first_step(known + 1)
        prefilled = self.step.prefill(prompt, first, self.temperature)
        cache.spread(first)
        fused = None if self.fused_lm is None else self.fused_lm.shared_positions(prompt)
        for position in range(known + 1):  # every row of a sentence holds the same prompt
            lprobs = self._rows(prefilled[:, position], position)
            if fused is not None:
                lprobs = self.fused_lm.fuse(lprobs, self._rows(fused[:, position], position))
            if search.advance(position, lprobs) is None:
                return search
        for position in range(known + 1, max_len + 1):
            search.release_prefix(position)  # past the longest prompt: captured with CUDA graphs
            if self._position(search, position, index, cache):
                break
        return search

    def _known_positions(self, prefix_tokens: Optional[Tensor], max_len: int) -> int:
        """How many prompt tokens every sentence has (no padding), up to ``max_len`` (fairseq
        forces prefix tokens below it only)."""
        if prefix_tokens is None or prefix_tokens.size(1) == 0:
            return 0
        padding = prefix_tokens.eq(self.pad).any(dim=0)
        width = int(padding.long().argmax()) if bool(padding.any()) else prefix_tokens.size(1)
        return min(width, max_len)

    def _rows(self, lprobs: Tensor, position: int) -> Tensor:
        """Prefilled log-probabilities (sentences, vocabulary) as the search takes them at
        ``position``: one row per sentence at 0, one per hypothesis after."""
        if position == 0 or self.beam_size == 1:
            return lprobs.clone()
        return lprobs.repeat_interleave(self.beam_size, dim=0)


# What ``--san-decoding static`` calls for a language model (``StaticSequenceGenerator.build``).
build_static_lm_generator = StaticLMGenerator.build
