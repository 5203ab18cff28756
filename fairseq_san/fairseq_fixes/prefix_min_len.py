"""fairseq's ``--min-len`` for the sentences whose prefix ends before a batch's longest.

Upstream behaviour corrected: ``SequenceGenerator`` keeps the end of sentence from hypotheses
before ``min_len`` only at steps past the batch's longest prefix (a language model's prompt,
``--prefix-size``'s reference tokens): at the earlier steps it forces each sentence's prefix
token and applies no ``min_len``, also to a sentence whose shorter prefix has ended (padding at
that step), which then ended where ``min_len`` forbade it. A prompt's output depended on the
prompts batched with it (the hub's ``sample(["tok3", "tok4 tok5 tok6 tok7"], min_len=8)`` gave
``tok3`` alone). ``install()`` wraps ``_prefix_tokens``: before ``min_len``, the hypotheses
without a prefix token at the step get no end of sentence.
"""

import functools
import math
from typing import Callable

from torch import Tensor

from fairseq_san.fairseq_fixes.wrapping import wrap_once


def block_early_eos(
    lprobs: Tensor, prefix_column: Tensor, beam: int, pad: int, eos: int
) -> None:
    """No end of sentence (in place) in the rows of ``lprobs`` (one per hypothesis) whose
    sentence has no prefix token, ``pad`` in ``prefix_column`` (one per sentence), at the step;
    masked, not indexed by the mask: no host sync in a decoder's step (the static one's too)."""
    lprobs[:, eos].masked_fill_(prefix_column.eq(pad).repeat_interleave(beam), -math.inf)


def _min_len_after_prefix(prefix_tokens_step: Callable) -> Callable:
    @functools.wraps(prefix_tokens_step)
    def wrapper(self, step: int, lprobs, scores, tokens, prefix_tokens, beam_size: int):
        lprobs, tokens, scores = prefix_tokens_step(
            self, step, lprobs, scores, tokens, prefix_tokens, beam_size
        )
        if step < self.min_len:
            block_early_eos(lprobs, prefix_tokens[:, step], beam_size, self.pad, self.eos)
        return lprobs, tokens, scores

    return wrapper


def install() -> None:
    """Wrap ``SequenceGenerator._prefix_tokens`` (idempotent)."""
    from fairseq.sequence_generator import SequenceGenerator

    wrap_once(SequenceGenerator, "_prefix_tokens", _min_len_after_prefix)
