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
"""

import functools

from torch import Tensor

from fairseq_san.fairseq_fixes.wrapping import wrap_once


def _generated_slots_only(no_repeat_ngram):
    @functools.wraps(no_repeat_ngram)
    def wrapper(self, tokens: Tensor, lprobs: Tensor, bsz: int, beam_size: int, step: int):
        return no_repeat_ngram(self, tokens[:, : step + 1], lprobs, bsz, beam_size, step)

    return wrapper


def install() -> None:
    """Wrap ``NGramRepeatBlock._no_repeat_ngram`` (idempotent)."""
    from fairseq.ngram_repeat_block import NGramRepeatBlock

    wrap_once(NGramRepeatBlock, "_no_repeat_ngram", _generated_slots_only)
