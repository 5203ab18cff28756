"""Beam search on tensors with the semantics of fairseq's ``SequenceGenerator`` + ``BeamSearch``.

Per step, as fairseq does: pad is never chosen, the unknown-word penalty is subtracted, EOS is
forbidden before ``min_len`` and forced at ``max_len``; the top 2 x beam candidates (beam x
vocabulary, or the first beam only at step 0) are ranked by cumulative log-probability; EOS
candidates among the top ``beam`` are finished, with score (cumulative log-probability) /
length ** lenpen, in candidate order, until a sentence has ``beam`` finished hypotheses (it is
then done); the first ``beam`` non-EOS candidates continue. At the end each sentence's finished
hypotheses are sorted by score (fairseq's n-best).

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


class TensorBeamSearch:
    """State of one batch: live hypotheses (sentences x beam rows) and finished ones."""

    def __init__(self, settings: SearchSettings, sentences: int, bos: int, device) -> None:
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

    def last_tokens(self, step: int) -> Tensor:
        """The input of step ``step``: each hypothesis' latest token (bos at step 0)."""
        return self.tokens.tensor[:, step]

    def advance(self, step: int, lprobs: Tensor) -> Optional[Tensor]:
        """Take the step's log-probabilities (rows, vocabulary; at step 0, rows may also be one per
        sentence); return the order in which the decoder's caches must be reordered, or None when
        every sentence is done."""
        s = self.settings
        vocab = lprobs.size(1)
        flat = self._continuations(step, lprobs)
        k = min(2 * s.beam, flat.size(1) - 1)
        cand_scores, cand_flat = torch.topk(flat, k)
        if bool(cand_scores.isnan().any()):  # topk ranks NaN first: none there, none anywhere
            cand_scores, cand_flat = torch.topk(flat.nan_to_num_(nan=-math.inf), k)
        cand_rows = torch.div(cand_flat, vocab, rounding_mode="trunc") + self.row_offsets
        cand_tokens = cand_flat.fmod(vocab)

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
        order = torch.empty_like(parents).scatter_(1, rows, parents + self.row_offsets).view(-1)
        self.tokens.reorder(order)
        self.tokens.tensor[:, step + 1] = placed(cand_tokens, active, rows)
        self.scores.reorder(order)
        self.scores.tensor[:, step] = placed(cand_scores, active, rows)
        return order

    def _continuations(self, step: int, lprobs: Tensor) -> Tensor:
        """The score of every continuation of each sentence, (sentences, beam x vocabulary):
        ``lprobs`` constrained and summed with the hypotheses' scores, in place."""
        s = self.settings
        lprobs = self._constrain(step, lprobs)
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
        if step < s.min_len:
            lprobs[:, s.eos] = -math.inf
        return lprobs

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
