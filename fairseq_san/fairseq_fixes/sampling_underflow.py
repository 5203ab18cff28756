"""fairseq's sampling (``--sampling``) where every token a hypothesis may take has a probability
below float's smallest.

Upstream behaviour corrected: ``Sampling.step`` draws from the exponentials of the
log-probabilities, which are 0 below about e^-104: at a low ``--temperature`` (the
log-probabilities divided by it) a forced token (a language model's prompt, a prefix) that the
model did not favour has such a probability, as has the end of sentence where it alone is
allowed (at the maximum length). Such a row has no probability left, and torch's multinomial
failed for the whole batch ("invalid multinomial distribution (sum of probabilities <= 0)"):
the hub's ``sample("...", sampling=True, temperature=0.001)``, fairseq-generate and
fairseq-interactive, with fairseq's decoder and the static one (it calls the same step).
``install()`` wraps the step: such a row is drawn from its log-probabilities less their
maximum (the same distribution, its largest probability 1), and its score is given back the
maximum (the model's log-probability). Other rows are drawn as before. With
``--sampling-topp`` such a row is shifted to a whole probability below p instead: its tokens'
mass is that far below p, and the nucleus holds them all, as fairseq's (whose probabilities are
not renormalised after masking) would hold them in exact arithmetic; shifted to a largest
probability of 1, the nucleus held the largest token alone.
"""

import functools
import math
from typing import Callable

import torch
from torch import Tensor

from fairseq_san.fairseq_fixes.wrapping import wrap_once

# Below this log-probability a float32 probability is 0 (e^-103.97 is the smallest subnormal).
UNDERFLOW = -100.0


def underflow_shift(lprobs: Tensor) -> Tensor:
    """(sentences, beam): the largest log-probability of each row of ``lprobs`` (sentences,
    beam, vocabulary) whose tokens' probabilities are all (near) 0 but not all -inf; 0
    elsewhere."""
    largest = lprobs.max(dim=-1).values
    vanishing = torch.isfinite(largest) & largest.lt(UNDERFLOW)
    return torch.where(vanishing, largest, torch.zeros_like(largest))


def nucleus_shift(lprobs: Tensor, shift: Tensor, topp: float) -> Tensor:
    """``underflow_shift``'s ``shift`` for a nucleus ``topp``: each row it moves is moved to a
    whole probability of ``topp`` / 2 instead, all of it inside the nucleus, as its mass is."""
    whole = torch.logsumexp(lprobs, dim=-1) + math.log(2 / topp)
    return torch.where(shift.ne(0), whole, shift)


def _drawn_within_float(step: Callable) -> Callable:
    @functools.wraps(step)
    def wrapper(self, step_number: int, lprobs: Tensor, scores: Tensor, *args, **kwargs):
        shift = underflow_shift(lprobs)
        if not bool(shift.ne(0).any()):  # the usual step: no sum over the vocabulary added
            return step(self, step_number, lprobs, scores, *args, **kwargs)
        if self.sampling_topp > 0:
            shift = nucleus_shift(lprobs, shift, self.sampling_topp)
        shifted = lprobs - shift.unsqueeze(-1)
        drawn, tokens, beams = step(self, step_number, shifted, scores, *args, **kwargs)
        return drawn + shift.gather(1, beams), tokens, beams

    return wrapper


def install() -> None:
    """Wrap ``Sampling.step`` (idempotent)."""
    from fairseq.search import Sampling

    wrap_once(Sampling, "step", _drawn_within_float)
