"""fairseq's prefix-constrained beam search (``task.build_generator``'s
``prefix_allowed_tokens_fn``, the hub's) with the candidates fairseq's generator counts on.

Upstream behaviour corrected: ``PrefixConstrainedBeamSearch.step`` returns the ``beam`` best
candidates of a sentence, where ``BeamSearch`` returns 2 x ``beam``. ``SequenceGenerator``
finishes the end-of-sentence candidates among them and continues the ``beam`` best of the rest:
with fewer than ``beam`` left, a finished candidate continued too, and came back with more tokens
after its end (``[6, 2, 2]``, ranked above ``[6, 2]`` with its extra step in its average; with
fairseq's decoder and the static one alike). ``install()`` replaces the step: the allowed tokens'
mask (fairseq's ``apply_mask``), then ``BeamSearch``'s step, with its 2 x ``beam`` candidates.
"""

import functools
from typing import Callable, Optional

from torch import Tensor

from fairseq_san.fairseq_fixes.wrapping import wrap_once


def _masked_beam_search(step: Callable) -> Callable:
    """A step in place of fairseq's ``step``: its mask of the allowed tokens, then beam search's
    2 x ``beam`` best candidates."""
    from fairseq.search import BeamSearch

    @functools.wraps(step)
    def wrapper(
        self, step_number: int, lprobs: Tensor, scores: Optional[Tensor],
        prev_output_tokens: Optional[Tensor] = None,
        original_batch_idxs: Optional[Tensor] = None,
    ):  # fmt: skip
        sentences, beam, vocabulary = lprobs.size()
        flat = lprobs.view(sentences * beam, 1, vocabulary)
        mask = self.apply_mask(flat, prev_output_tokens, original_batch_idxs)
        allowed = lprobs + mask.view(sentences, beam, vocabulary)
        return BeamSearch.step(self, step_number, allowed, scores)

    return wrapper


def install() -> None:
    """Replace ``PrefixConstrainedBeamSearch.step`` (idempotent)."""
    from fairseq.search import PrefixConstrainedBeamSearch

    wrap_once(PrefixConstrainedBeamSearch, "step", _masked_beam_search)
