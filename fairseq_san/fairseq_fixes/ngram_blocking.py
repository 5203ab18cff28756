"""fairseq's ``--no-repeat-ngram-size`` without its CUDA extension (every CPU, and every GPU
where fairseq was installed without building it, as from a wheel).

Upstream behaviour corrected: ``SequenceGenerator`` hands ``NGramRepeatBlock`` its whole token
buffer (every hypothesis's ``max_len + 2`` slots), and the Python path
(``NGramRepeatBlock._no_repeat_ngram``) took the n-gram to match from the buffer's last slots,
padding that no generated n-gram starts with: it blocked nothing, and fairseq-generate,
fairseq-interactive and the hub repeated n-grams as if the option were not given (fairseq issue
#5206). ``install()`` hands it the slots filled so far, as the CUDA extension reads them (up to
``step``): the n-gram that ends at ``step`` is matched against every earlier one, and the token
that followed each match is blocked.

Blocking that works exposed another upstream fault, in sampling (``--sampling``): fairseq's
generator keeps the hypotheses that sampled the end of sentence going, ignored, and at the
maximum length forces the end of sentence on every row, which blocking takes away where the
n-gram it ends repeats one of the hypothesis's (it holds an end of sentence already). Such a row
has no token left, and ``Sampling.step`` failed in torch's multinomial for the whole batch
(``invalid multinomial distribution``; the GPU's CUDA blocker fails alike). ``install()`` wraps
the step: a row with no token left draws the end of sentence scored -inf, which the search
never takes for an output (a live sentence left so still fails where the generator checks it:
``--min-len``'s error).
"""

import functools
import math

import torch
from torch import Tensor

from fairseq_san.fairseq_fixes.wrapping import wrap_once


def _generated_slots_only(no_repeat_ngram):
    @functools.wraps(no_repeat_ngram)
    def wrapper(self, tokens: Tensor, lprobs: Tensor, bsz: int, beam_size: int, step: int):
        return no_repeat_ngram(self, tokens[:, : step + 1], lprobs, bsz, beam_size, step)

    return wrapper


def _rows_left_no_token_end(step):
    """``Sampling.step`` where rows of ``lprobs`` (sentences, beam, vocabulary) have no token
    left: they draw the end of sentence, its score -inf (no output)."""

    @functools.wraps(step)
    def wrapper(self, step_number: int, lprobs: Tensor, scores: Tensor, *args, **kwargs):
        left_none = lprobs.isneginf().all(dim=-1)
        if not left_none.any():
            return step(self, step_number, lprobs, scores, *args, **kwargs)
        lprobs = lprobs.clone()
        lprobs[:, :, self.eos] = torch.where(left_none, 0.0, lprobs[:, :, self.eos])
        drawn, tokens, beams = step(self, step_number, lprobs, scores, *args, **kwargs)
        return drawn.masked_fill(left_none.gather(1, beams), -math.inf), tokens, beams

    return wrapper


def install() -> None:
    """Wrap ``NGramRepeatBlock._no_repeat_ngram`` and ``Sampling.step`` (idempotent)."""
    from fairseq.ngram_repeat_block import NGramRepeatBlock
    from fairseq.search import Sampling

    wrap_once(NGramRepeatBlock, "_no_repeat_ngram", _generated_slots_only)
    wrap_once(Sampling, "step", _rows_left_no_token_end)
