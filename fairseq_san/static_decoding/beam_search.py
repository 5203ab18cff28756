"""Beam search on tensors with the semantics of fairseq's ``SequenceGenerator`` + ``BeamSearch``
(or ``Sampling``), prefix tokens included.

Per step, as fairseq does: pad is never chosen, the unknown-word penalty is subtracted, EOS is
forbidden before ``min_len`` and forced at ``max_len``; the top 2 x beam candidates (beam x
vocabulary, or the first beam only at step 0) are ranked by cumulative log-probability; EOS
candidates among the top ``beam`` are finished, with score (cumulative log-probability) /
length ** lenpen, in candidate order, until a sentence has ``beam`` finished hypotheses (it is
then done); the first ``beam`` non-EOS candidates continue. At the end each sentence's finished
hypotheses are sorted by score (fairseq's n-best).

With ``sampling`` (fairseq's ``--sampling``, ``--sampling-topk``, ``--sampling-topp``) the
candidates are one token per hypothesis drawn from its distribution (restricted to the top k, or
to the smallest set whose probability exceeds p), at step 0 ``beam`` tokens drawn from the first
hypothesis; the rest is the same. With ``prefix`` tokens (a language model's prompt) a
hypothesis must take its prefix token at each step where it has one (not padding) and the step
is below ``max_len``; EOS is then allowed before ``min_len``, as fairseq does.

What differs is the bookkeeping, not the result:

* a done sentence keeps its rows in the batch (masked: its candidates are never finished again),
  so shapes never change during a batch and no cache is compacted;
* finished hypotheses are written into per-sentence tensors with one scatter per step, with no
  Python loop over hypotheses or sentences;
* a continuing hypothesis takes its parent's row when it is the parent's first continuation, and
  the row of a hypothesis that did not continue otherwise (``place_children``). Which row holds
  which hypothesis does not change the search (candidates are ranked by score, and fairseq's
  ``cands_to_ignore`` is indexed by rank), but the decoder's caches then copy only the rows of
  the hypotheses that moved (caches.py), not all of them;
* tokens and scores (small) are reordered by one gather each into preallocated buffers.
"""

import math
from dataclasses import dataclass
from typing import Dict, List, Optional

import torch
from torch import Tensor

from fairseq_san.static_decoding.caches import Reorderable


@dataclass
class SearchSettings:
    """The options of fairseq's SequenceGenerator that the search honours."""

    beam: int
    min_len: int
    max_len: int  # the last step is max_len: at most max_len tokens, then EOS
    len_penalty: float
    normalize_scores: bool
    unk_penalty: float
    pad: int
    unk: int
    eos: int
    sampling: bool = False
    sampling_topk: int = -1
    sampling_topp: float = -1.0


class TensorBeamSearch:
    """State of one batch: live hypotheses (sentences x beam rows) and finished ones."""

    def __init__(
        self,
        settings: SearchSettings,
        sentences: int,
        bos: int,
        device,
        prefix: Optional[Tensor] = None,
    ) -> None:
        self.settings = s = settings
        rows, width = sentences * s.beam, s.max_len + 1
        self.sentences = sentences
        # bos + tokens + eos; cumulative scores.
        self.tokens = Reorderable((rows, width + 1), torch.long, device)
        self.tokens.tensor.fill_(s.pad)
        self.tokens.tensor[:, 0] = bos
        self.scores = Reorderable((rows, width), torch.float32, device)
        self.scores.tensor.zero_()
        self.ignore = torch.zeros(sentences, s.beam, dtype=torch.bool, device=device)
        self.row_offsets = torch.arange(sentences, device=device).unsqueeze(1) * s.beam
        self.candidate_offsets = torch.arange(2 * s.beam, device=device)
        self.earlier = torch.ones(s.beam, s.beam, dtype=torch.bool, device=device).tril(-1)
        # Finished hypotheses, slot j of sentence i = the j-th fairseq finalized for it.
        self.final_tokens = torch.full((sentences, s.beam, width), s.pad, device=device)
        self.final_positional = torch.zeros(sentences, s.beam, width, device=device)
        self.final_scores = torch.zeros(sentences, s.beam, device=device)
        self.final_lengths = torch.zeros(sentences, s.beam, dtype=torch.long, device=device)
        self.final_count = torch.zeros(sentences, dtype=torch.long, device=device)
        self.done = torch.zeros(sentences, dtype=torch.bool, device=device)
        # The row (within its sentence) of fairseq's j-th hypothesis (place_children).
        self.beam_rows = torch.arange(s.beam, device=device).repeat(sentences, 1)
        # Forced tokens per sentence (sentences, width), padding where none.
        self.prefix = prefix

    def last_tokens(self, step: int) -> Tensor:
        """The input of step ``step``: each hypothesis' latest token (bos at step 0)."""
        return self.tokens.tensor[:, step]

    def advance(self, step: int, lprobs: Tensor) -> Optional[Tensor]:
        """Take the step's log-probabilities (rows, vocabulary; at step 0, rows may also be one per
        sentence); return the order in which the decoder's caches must be reordered, or None when
        every sentence is done."""
        s = self.settings
        lprobs = self._constrain(step, lprobs)
        if s.sampling:
            cand_scores, cand_rows, cand_tokens = self._sample(step, lprobs)
        else:
            cand_scores, cand_rows, cand_tokens = self._best(step, lprobs)

        eos = cand_tokens.eq(s.eos) & cand_scores.ne(-math.inf)
        eos[:, : s.beam] &= ~self.ignore
        eos &= ~self.done.unsqueeze(1)
        finishing = eos[:, : s.beam]
        if finishing.any():
            self._finish(step, finishing, cand_rows[:, : s.beam], cand_scores[:, : s.beam])
            if bool(self.done.all()):
                return None
        if step >= s.max_len:
            raise RuntimeError(f"beam search reached max_len {s.max_len} with live sentences")

        # The first `beam` candidates that are not EOS continue (fairseq's active_mask).
        eos[:, : s.beam] |= self.ignore
        rank = eos.long() * (2 * s.beam) + self.candidate_offsets[: eos.size(1)]
        rank, active = torch.topk(rank, k=s.beam, dim=1, largest=False)
        self.ignore = rank.ge(2 * s.beam)
        parents = torch.gather(cand_rows, 1, active) - self.row_offsets
        rows = place_children(parents, self.earlier)
        self.beam_rows = rows
        order = torch.empty_like(parents).scatter_(1, rows, parents + self.row_offsets).view(-1)
        self.tokens.reorder(order)
        self.tokens.tensor[:, step + 1] = placed(cand_tokens, active, rows)
        self.scores.reorder(order)
        self.scores.tensor[:, step] = placed(cand_scores, active, rows)
        return order

    def _best(self, step: int, lprobs: Tensor):
        """Beam search's candidates (fairseq's BeamSearch): the 2 x beam best continuations of
        each sentence; their cumulative scores, rows and tokens, (sentences, 2 x beam) each."""
        vocab = lprobs.size(1)
        flat = self._continuations(step, lprobs)
        k = min(2 * self.settings.beam, flat.size(1) - 1)
        cand_scores, cand_flat = torch.topk(flat, k)
        if bool(cand_scores.isnan().any()):  # topk ranks NaN first: none there, none anywhere
            cand_scores, cand_flat = torch.topk(flat.nan_to_num_(nan=-math.inf), k)
        cand_rows = torch.div(cand_flat, vocab, rounding_mode="trunc") + self.row_offsets
        return cand_scores, cand_rows, cand_flat.fmod(vocab)

    def _sample(self, step: int, lprobs: Tensor):
        """Sampling's candidates (fairseq's Sampling): one token drawn per hypothesis, in
        fairseq's order of hypotheses (``beam`` from the first one at step 0); their cumulative
        scores, rows and tokens, (sentences, beam) each."""
        s = self.settings
        lprobs = lprobs.nan_to_num_(nan=-math.inf).view(self.sentences, -1, lprobs.size(1))
        lprobs = lprobs[:, :1] if step == 0 else lprobs.gather(1, self._beam_index(lprobs))
        probs, choices = restricted_probabilities(lprobs, s.sampling_topk, s.sampling_topp)
        if step == 0:
            drawn = torch.multinomial(probs.view(self.sentences, -1), s.beam, replacement=True)
            probs, beams = probs.expand(-1, s.beam, -1), torch.zeros_like(drawn)
        else:
            drawn = torch.multinomial(probs.view(-1, probs.size(2)), 1, replacement=True)
            drawn = drawn.view(self.sentences, s.beam)
            beams = torch.arange(s.beam, device=drawn.device).expand_as(drawn)
        scores = probs.gather(2, drawn.unsqueeze(2)).squeeze(2).log()
        tokens = drawn
        if choices is not None:  # column -> vocabulary index
            tokens = choices.expand_as(probs).gather(2, drawn.unsqueeze(2)).squeeze(2)
        rows = self.beam_rows.gather(1, beams)
        if step > 0:
            scores += self.scores.tensor[:, step - 1].view(self.sentences, s.beam).gather(1, rows)
        return scores, rows + self.row_offsets, tokens

    def _beam_index(self, lprobs: Tensor) -> Tensor:
        """Where fairseq's hypotheses are among the rows of ``lprobs`` (sentences, beam, vocab)."""
        return self.beam_rows.unsqueeze(2).expand(-1, -1, lprobs.size(2))

    def _continuations(self, step: int, lprobs: Tensor) -> Tensor:
        """The score of every continuation of each sentence, (sentences, beam x vocabulary):
        ``lprobs`` (constrained) summed with the hypotheses' scores, in place."""
        s = self.settings
        lprobs = lprobs.view(self.sentences, -1, lprobs.size(1))
        if step == 0:  # all beams are the same hypothesis: only the first one (or only one given)
            lprobs = lprobs[:, :1]
        else:
            lprobs.add_(self.scores.tensor[:, step - 1].view(self.sentences, s.beam, 1))
        return lprobs.reshape(self.sentences, -1)

    def _constrain(self, step: int, lprobs: Tensor) -> Tensor:
        """fairseq's per-step rules on the log-probabilities (in place). fairseq first turns NaN
        into -inf: ``advance`` does it last, and only when a NaN is among the candidates (the
        result is the same, without a pass over every score at every step)."""
        s = self.settings
        lprobs[:, s.pad] = -math.inf
        if s.unk_penalty:
            lprobs[:, s.unk] -= s.unk_penalty
        if step >= s.max_len:
            lprobs[:, : s.eos] = -math.inf
            lprobs[:, s.eos + 1 :] = -math.inf
        if self.prefix is not None and step < min(self.prefix.size(1), s.max_len):
            self._force_prefix(step, lprobs)
        elif step < s.min_len:
            lprobs[:, s.eos] = -math.inf
        return lprobs

    def _force_prefix(self, step: int, lprobs: Tensor) -> None:
        """Every hypothesis with a prefix token at ``step`` keeps only its log-probability."""
        tokens = self.prefix[:, step]
        if lprobs.size(0) != tokens.size(0):  # one row per hypothesis, not per sentence
            tokens = tokens.repeat_interleave(self.settings.beam)
        column = tokens.unsqueeze(1)
        kept = lprobs.gather(1, column)  # padding (no prefix token there) is already -inf
        lprobs.masked_fill_(tokens.ne(self.settings.pad).unsqueeze(1), -math.inf)
        lprobs.scatter_(1, column, kept)

    def _finish(self, step: int, finishing: Tensor, rows: Tensor, scores: Tensor) -> None:
        """Store the EOS candidates ``finishing`` (sentences, beam) of live sentences, in candidate
        order, while their sentence has fewer than ``beam`` finished; mark sentences done."""
        s = self.settings
        slot = self.final_count.unsqueeze(1) + finishing.long().cumsum(dim=1) - 1
        accept = finishing & slot.lt(s.beam)
        sentence, candidate = accept.nonzero(as_tuple=True)
        slot, row, eos_score = slot[accept], rows[accept], scores[accept]
        length = step + 1
        tokens = self.tokens.tensor[row, 1 : length + 1]
        tokens[:, step] = s.eos
        self.final_tokens[sentence, slot, :length] = tokens
        cumulative = self.scores.tensor[row, :length]
        cumulative[:, step] = eos_score
        positional = cumulative.clone()
        positional[:, 1:] = cumulative[:, 1:] - cumulative[:, :-1]
        self.final_positional[sentence, slot, :length] = positional
        if s.normalize_scores:
            eos_score = eos_score / length**s.len_penalty
        self.final_scores[sentence, slot] = eos_score
        self.final_lengths[sentence, slot] = length
        self.final_count += accept.sum(dim=1)
        complete = self.final_count.eq(s.beam) | (step == s.max_len)
        self.done |= finishing.any(dim=1) & complete

    def hypotheses(self) -> List[List[Dict[str, Tensor]]]:
        """fairseq's output: per sentence, its finished hypotheses by descending score."""
        results = []
        counts = self.final_count.tolist()
        for sentence, count in enumerate(counts):
            scores = self.final_scores[sentence, :count].clone()
            _, ranked = torch.sort(scores, descending=True)
            nbest = []
            for slot in ranked.tolist():
                length = int(self.final_lengths[sentence, slot])
                nbest.append(
                    {
                        "tokens": self.final_tokens[sentence, slot, :length],
                        "score": self.final_scores[sentence, slot],
                        "attention": torch.empty(0),
                        "alignment": torch.empty(0),
                        "positional_scores": self.final_positional[sentence, slot, :length],
                    }
                )
            results.append(nbest)
        return results


def restricted_probabilities(lprobs: Tensor, topk: int, topp: float):
    """The probabilities sampling draws from (fairseq's Sampling): the top ``topk``, or the smallest
    set whose mass exceeds ``topp`` (Holtzman et al., 2019; the others 0), or all; with the
    vocabulary index of each column, or None when the columns are the vocabulary."""
    if topp > 0:
        probs, order = lprobs.exp().sort(dim=2, descending=True)
        within = probs.cumsum(dim=2).lt(topp)
        last = within.sum(dim=2, keepdim=True).clamp_(max=probs.size(2) - 1)
        within.scatter_(2, last, True)  # one more word: the mass then exceeds p
        width = int(last.max()) + 1
        return probs[:, :, :width].masked_fill(~within[:, :, :width], 0), order[:, :, :width]
    if topk > 0:
        lprobs, choices = lprobs.topk(topk)
        return lprobs.exp(), choices
    return lprobs.exp(), None


def place_children(parents: Tensor, earlier: Tensor) -> Tensor:
    """The row (within its sentence) of each continuing hypothesis, given ``parents`` (sentences,
    beam): the row of its parent for the first hypothesis continuing a parent, in rank order, and
    the rows of the parents without continuation, in increasing order, for the others.
    ``earlier`` is (beam, beam), True below the diagonal. Every parent row keeps its own state."""
    repeated = (parents.unsqueeze(2) == parents.unsqueeze(1)) & earlier
    first = ~repeated.any(dim=2)
    is_parent = torch.zeros_like(first).scatter_(1, parents, True)
    free_rows = torch.sort(is_parent.to(torch.uint8), dim=1, stable=True).indices
    rank = (~first).long().cumsum(dim=1) - 1
    return torch.where(first, parents, free_rows.gather(1, rank.clamp(min=0)))


def placed(candidates: Tensor, active: Tensor, rows: Tensor) -> Tensor:
    """The ``active`` entries of ``candidates`` (sentences, 2 x beam), each at its row, flat."""
    return torch.empty_like(active, dtype=candidates.dtype).scatter_(
        1, rows, torch.gather(candidates, 1, active)
    ).view(-1)
