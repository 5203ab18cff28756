"""fairseq's diverse beam search (``--diverse-beam-groups``) on batches whose sentence ids are not
their positions, and with hypotheses that end.

Upstream behaviour corrected: ``DiverseBeamSearch.step`` keeps the overlap between its groups per
sentence of the batch (``group_overlap``, one row per position at the batch's first step) and
looks rows up by ``original_batch_idxs``, which ``SequenceGenerator`` fills with the sample's
sentence ids (``sample["id"]``): the corpus's ids, not positions in the batch. fairseq-generate
failed at the second step of any batch holding a sentence id at least the batch's size
("IndexError: index 264 is out of bounds for dimension 0 with size 128"): every batch but a
first one in corpus order, with fairseq's decoder (``--san-decoding fairseq`` and ``fast``) and
the hub; where no id was that large, the rows read were those of other sentences than their own.
``install()`` wraps the step: the ids are mapped to the positions they held at the batch's first
step.

And since fairseq PR #5069 the step hands the generator ``beam`` candidates (its default
``candidate_multiple=1``), not twice as many: a hypothesis that ended with eos found no spare
candidate to take its place, went on as one of the beam, and was finished again with tokens
after its eos, scored over them. ``install()`` wraps the step a second time: a finished
hypothesis gets no new candidates and holds its own place (which the generator skips), and each
group's best live candidates fill the group's other places.
"""

import functools
import math
from typing import Optional, Tuple

import torch
from torch import Tensor

from fairseq_san.fairseq_fixes.wrapping import wrap_once


def positions_of(ids: Tensor, first_step_ids: Tensor) -> Tensor:
    """The position each of ``ids`` held among the batch's ``first_step_ids`` (unique ids)."""
    order = torch.argsort(first_step_ids)
    return order[torch.searchsorted(first_step_ids[order], ids)]


def _by_position(step):
    @functools.wraps(step)
    def wrapper(
        self, step_number, lprobs, scores, prev_output_tokens=None,
        original_batch_idxs: Optional[Tensor] = None,
    ):  # fmt: skip
        if original_batch_idxs is not None:
            if step_number == 0:
                self.first_step_ids = original_batch_idxs.clone()
            original_batch_idxs = positions_of(original_batch_idxs, self.first_step_ids)
        return step(self, step_number, lprobs, scores, prev_output_tokens, original_batch_idxs)

    return wrapper


Candidates = Tuple[Tensor, Tensor, Tensor]  # scores, tokens, beams: (sentences, beam) each


def keep_finished_places(
    found: Candidates, finished: Tensor, held: Candidates, groups: int
) -> Candidates:
    """The candidates ``found`` (place ``c * groups + g`` holds group g's c-th best) with each
    ``finished`` hypothesis's place ``held`` by it, and each group's best candidates at the
    group's other places, in their order."""
    sentences, beam = finished.size()
    open_first = torch.argsort(finished.int().view(sentences, -1, groups), dim=1, stable=True)
    placed = []
    for candidates, kept in zip(found, held):
        grouped = candidates.view(sentences, -1, groups)
        ranked = torch.empty_like(grouped).scatter_(1, open_first, grouped).view(sentences, beam)
        placed.append(torch.where(finished, kept, ranked))
    return placed[0], placed[1], placed[2]


def _finished_keep_their_places(step):
    @functools.wraps(step)
    def wrapper(
        self, step_number, lprobs, scores, prev_output_tokens=None,
        original_batch_idxs: Optional[Tensor] = None,
    ):  # fmt: skip
        if step_number == 0 or prev_output_tokens is None:
            return step(self, step_number, lprobs, scores, prev_output_tokens, original_batch_idxs)
        sentences, beam, _ = lprobs.size()
        last_scores = scores[:, :, -1]
        finished = prev_output_tokens[:, -1].eq(self.eos).view(sentences, beam)
        finished &= last_scores.ne(-math.inf)
        lprobs = lprobs.masked_fill(finished.unsqueeze(2), -math.inf)
        found = step(self, step_number, lprobs, scores, prev_output_tokens, original_batch_idxs)
        own = torch.arange(beam, device=lprobs.device).expand(sentences, -1)
        held = (last_scores, torch.full_like(own, self.eos), own)
        return keep_finished_places(found, finished, held, self.num_groups)

    return wrapper


def install() -> None:
    """Wrap ``DiverseBeamSearch.step`` (idempotent)."""
    from fairseq.search import DiverseBeamSearch

    wrap_once(DiverseBeamSearch, "step", _by_position)
    wrap_once(DiverseBeamSearch, "step", _finished_keep_their_places)
