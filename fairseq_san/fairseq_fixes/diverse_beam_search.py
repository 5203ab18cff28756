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
group's best live candidates fill the group's other places. So a group searches on one narrower
for each of its hypotheses that ended, and gives beam / groups of the n-best, as the paper's
groups do (and fairseq's PR means: no group dropped).

The generator continues the candidates that do not end first, then those that do
(``active_hypos``): after a hypothesis ended, each one after it moved up a place, and the step
read a place's group from its number (place ``c * groups + g``: group g's), so hypotheses
changed groups, each group penalised for other groups' tokens than those before it, and a
finished hypothesis's place was held in the wrong group. ``install()`` wraps
``update_constraints``, where the generator tells the search which candidate each place
continues, to remember each place's group, and the step a third time to see each group's
hypotheses at its places. A search built by hand with ``candidate_multiple`` 2 is refused: the
generator continues the first ``beam`` of its candidates that do not end, whichever groups they
come from. And one group is beam search (the paper's G = 1): its step is ``BeamSearch``'s, whose
spare candidates take the places of hypotheses that end (one group narrowed at each end).
"""

import functools
import math
from typing import Optional, Tuple

import torch
from torch import Tensor

from fairseq_san.errors import UsageError
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


def ended(search, scores: Tensor, prev_output_tokens: Tensor) -> Tensor:
    """Which hypotheses ended at the last step (sentences, beam): eos last, and not padding's."""
    sentences, beam, _ = scores.size()
    finished = prev_output_tokens[:, -1].eq(search.eos).view(sentences, beam)
    return finished & scores[:, :, -1].ne(-math.inf)


def _finished_keep_their_places(step):
    @functools.wraps(step)
    def wrapper(
        self, step_number, lprobs, scores, prev_output_tokens=None,
        original_batch_idxs: Optional[Tensor] = None,
    ):  # fmt: skip
        if step_number == 0 or prev_output_tokens is None:
            return step(self, step_number, lprobs, scores, prev_output_tokens, original_batch_idxs)
        sentences, beam, _ = lprobs.size()
        finished = ended(self, scores, prev_output_tokens)
        lprobs = lprobs.masked_fill(finished.unsqueeze(2), -math.inf)
        found = step(self, step_number, lprobs, scores, prev_output_tokens, original_batch_idxs)
        own = torch.arange(beam, device=lprobs.device).expand(sentences, -1)
        held = (scores[:, :, -1], torch.full_like(own, self.eos), own)
        return keep_finished_places(found, finished, held, self.num_groups)

    return wrapper


def in_groups(slot_groups: Tensor, groups: int) -> Tensor:
    """The slots in the step's order (``c * groups + g``: group g's c-th slot), from each slot's
    group (``slot_groups``: sentences, beam; ``beam / groups`` slots of each group)."""
    sentences, beam = slot_groups.size()
    by_group = torch.argsort(slot_groups, dim=1, stable=True)
    return by_group.view(sentences, groups, -1).transpose(1, 2).reshape(sentences, beam)


def generator_places(slots: Tensor, finished: Tensor) -> Tensor:
    """Which of the step's candidates (in the order of ``slots``, from ``in_groups``) to give the
    generator at each place: a ``finished`` slot's own at the slot's place (where the generator
    ignores one), the others in the step's order at the other places."""
    held = torch.argsort(slots, dim=1)  # where each slot's candidate is in the step's order
    live_first = torch.argsort(finished.gather(1, slots).int(), dim=1, stable=True)
    open_first = torch.argsort(finished.int(), dim=1, stable=True)
    places = torch.empty_like(slots).scatter_(1, open_first, live_first)
    return torch.where(finished, held, places)


def _remember_groups(update):
    @functools.wraps(update)
    def wrapper(self, active_hypos: Tensor):
        update(self, active_hypos)
        if self.num_groups > 1:  # one group is beam search's (_one_group_is_beam_search)
            self.slot_groups = self.candidate_groups.gather(1, active_hypos)

    return wrapper


def _forget_pruned(prune):
    @functools.wraps(prune)
    def wrapper(self, batch_idxs: Tensor):
        prune(self, batch_idxs)
        if self.num_groups > 1:
            self.candidate_groups = self.candidate_groups[batch_idxs]

    return wrapper


def check_candidates(search) -> None:
    """Refuse a search built with ``candidate_multiple`` other than 1 (by hand: fairseq's task
    builds it with 1): the generator continues the first ``beam`` of its candidates that do not
    end, whichever groups they come from."""
    if search.candidate_multiple != 1:
        raise UsageError(
            f"DiverseBeamSearch(candidate_multiple={search.candidate_multiple}): fairseq's "
            "generator continues the first beam of its candidates, which mixes the groups; "
            "build it with candidate_multiple=1 (fairseq's default)"
        )


def _each_group_at_its_places(step):
    @functools.wraps(step)
    def wrapper(
        self, step_number, lprobs, scores, prev_output_tokens=None,
        original_batch_idxs: Optional[Tensor] = None,
    ):  # fmt: skip
        check_candidates(self)
        sentences, beam, _ = lprobs.size()
        self.candidate_groups = torch.arange(beam, device=lprobs.device).expand(sentences, -1)
        self.candidate_groups = self.candidate_groups % self.num_groups
        if step_number == 0:  # fairseq's order, until the generator's update_constraints
            self.slot_groups = self.candidate_groups
        if step_number == 0 or prev_output_tokens is None:
            return step(self, step_number, lprobs, scores, prev_output_tokens, original_batch_idxs)
        slots = in_groups(self.slot_groups, self.num_groups)
        finished = ended(self, scores, prev_output_tokens)
        lprobs, scores = (t.gather(1, slots.unsqueeze(2).expand_as(t)) for t in (lprobs, scores))
        tokens = prev_output_tokens.view(sentences, beam, -1)
        tokens = tokens.gather(1, slots.unsqueeze(2).expand_as(tokens)).flatten(0, 1)
        found = step(self, step_number, lprobs, scores, tokens, original_batch_idxs)
        places = generator_places(slots, finished)
        self.candidate_groups = self.candidate_groups.gather(1, places)
        found_scores, found_tokens, beams = (t.gather(1, places) for t in found)
        return found_scores, found_tokens, slots.gather(1, beams)

    return wrapper


def _one_group_is_beam_search(step):
    @functools.wraps(step)
    def wrapper(
        self, step_number, lprobs, scores, prev_output_tokens=None,
        original_batch_idxs: Optional[Tensor] = None,
    ):  # fmt: skip
        if self.num_groups == 1:  # BeamSearch's 2 x beam candidates, spares for those that end
            return self.beam.step(step_number, lprobs, scores, prev_output_tokens)
        return step(self, step_number, lprobs, scores, prev_output_tokens, original_batch_idxs)

    return wrapper


def install() -> None:
    """Wrap ``DiverseBeamSearch.step`` and ``update_constraints`` (idempotent)."""
    from fairseq.search import DiverseBeamSearch

    wrap_once(DiverseBeamSearch, "step", _by_position)
    wrap_once(DiverseBeamSearch, "step", _finished_keep_their_places)
    wrap_once(DiverseBeamSearch, "step", _each_group_at_its_places)
    wrap_once(DiverseBeamSearch, "step", _one_group_is_beam_search)
    wrap_once(DiverseBeamSearch, "update_constraints", _remember_groups)
    wrap_once(DiverseBeamSearch, "prune_sentences", _forget_pruned)
