"""fairseq's ``--min-len`` for the sentences whose prefix ends before a batch's longest.

Upstream behaviour corrected: ``SequenceGenerator`` keeps the end of sentence from hypotheses
before ``min_len`` only at steps past the batch's longest prefix (a language model's prompt,
``--prefix-size``'s reference tokens): at the earlier steps it forces each sentence's prefix
token and applies no ``min_len``, also to a sentence whose shorter prefix has ended (padding at
that step), which then ended where ``min_len`` forbade it. A prompt's output depended on the
prompts batched with it (the hub's ``sample(["tok3", "tok4 tok5 tok6 tok7"], min_len=8)`` gave
``tok3`` alone). ``install()`` wraps ``_prefix_tokens``: before ``min_len``, the hypotheses
without a prefix token at the step get no end of sentence; the wrapper stays TorchScript's to
compile (``torch.jit.script`` of a generator failed with "undefined value torch").
"""

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
    """The wrapper; it calls fairseq's ``prefix_tokens_step`` as a method of the generator
    (``_fairseq_prefix_tokens``), as TorchScript calls it, not from its closure."""

    def _prefix_tokens(self, step: int, lprobs, scores, tokens, prefix_tokens, beam_size: int):
        """fairseq's ``_prefix_tokens`` (``_fairseq_prefix_tokens``), then ``block_early_eos``:
        a method TorchScript compiles (``torch.jit.script`` of a generator, as fairseq's export
        does), so no ``__wrapped__`` (TorchScript compiled fairseq's source in this module)."""
        lprobs, tokens, scores = self._fairseq_prefix_tokens(
            step, lprobs, scores, tokens, prefix_tokens, beam_size
        )
        if step < self.min_len:
            block_early_eos(lprobs, prefix_tokens[:, step], beam_size, self.pad, self.eos)
        return lprobs, tokens, scores

    return _prefix_tokens


def install() -> None:
    """Wrap ``SequenceGenerator._prefix_tokens`` (idempotent), keeping fairseq's as
    ``_fairseq_prefix_tokens`` for the wrapper to call."""
    from fairseq.sequence_generator import SequenceGenerator

    if not hasattr(SequenceGenerator, "_fairseq_prefix_tokens"):
        fairseqs = SequenceGenerator._prefix_tokens
        # TorchScript names a method it compiles by its function's name: one name, one method.
        fairseqs.__name__ = "_fairseq_prefix_tokens"
        fairseqs.__qualname__ = "SequenceGenerator._fairseq_prefix_tokens"
        SequenceGenerator._fairseq_prefix_tokens = fairseqs
    wrap_once(SequenceGenerator, "_prefix_tokens", _min_len_after_prefix)
