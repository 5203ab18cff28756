"""``--print-alignment`` of fairseq's generator for sentences with fewer hypotheses than the beam
(``--constraints``).

Upstream behaviour corrected: ``SequenceGeneratorWithAlignment.generate`` reads each sentence's
hypotheses as ``beam`` of them (``finalized[i // beam][i % beam]``). fairseq's constrained
search can finish a sentence with fewer, so fairseq-interactive ``--constraints
--print-alignment`` (``--san-decoding fairseq`` or ``fast``) ended in an ``IndexError``
traceback (the static decoder aligned them). And where ``--prefix-size`` forced a sentence's
end (a reference shorter than the prefix), fairseq's ``replicate_first_beam`` gave every row of
its beam the first hypothesis' tokens and scores but not its attention: its other hypotheses,
the best one among them, were aligned by the attention of the rows they replaced (another
source word, silently). ``install()`` replaces ``generate``: the same search, then the same
alignment of each hypothesis found, however many a sentence has, those of such a sentence from
one pass over them (``forward_align``, as the static decoder aligns).
"""

import functools
from typing import Dict, List, Optional

import torch
from torch import Tensor

from fairseq_san.fairseq_fixes.wrapping import wrap_once


def _each_hypothesis(generate):
    """fairseq's ``generate`` (replaced) aligning every hypothesis its search found."""

    @functools.wraps(generate)
    @torch.no_grad()
    def aligned(self, models, sample, **kwargs) -> List[List[Dict[str, Tensor]]]:
        from fairseq.data.data_utils import collate_tokens
        from fairseq.sequence_generator import SequenceGenerator

        finalized = SequenceGenerator._generate(self, sample, **kwargs)
        found = [(row, hypothesis) for row, nbest in enumerate(finalized) for hypothesis in nbest]
        net_input = sample["net_input"]
        rows = torch.tensor([row for row, _ in found], device=net_input["src_tokens"].device)
        tokens = [hypothesis["tokens"] for _, hypothesis in found]
        sources = net_input["src_tokens"].index_select(0, rows)
        attention = [hypothesis["attention"].transpose(1, 0) for _, hypothesis in found]
        forced = _forced_ends(kwargs.get("prefix_tokens"), rows, self.eos)
        full_context = any(getattr(m, "full_context_alignment", False) for m in self.model.models)
        realigned = torch.ones_like(forced) if full_context else forced
        if bool(realigned.any()):
            previous = collate_tokens(
                tokens, self.pad, self.eos, self.left_pad_target, move_eos_to_beginning=True
            )
            lengths = net_input["src_lengths"].index_select(0, rows)
            forward = self.model.forward_align(sources, lengths, previous)
            for index in realigned.nonzero().flatten().tolist():
                attention[index] = forward[index, : len(tokens[index])]
            for index in forced.nonzero().flatten().tolist():
                found[index][1]["attention"] = attention[index].transpose(1, 0).clone()
        sources = sources.cpu()
        targets = collate_tokens(tokens, self.pad, self.eos, self.left_pad_target).cpu()
        for index, (_, hypothesis) in enumerate(found):
            hypothesis["alignment"] = self.extract_alignment(
                attention[index].cpu(), sources[index], targets[index], self.pad, self.eos
            )
        return finalized

    return aligned


def _forced_ends(prefix_tokens: Optional[Tensor], rows: Tensor, eos: int) -> Tensor:
    """Per hypothesis (of sentence ``rows``), whether its sentence's forced prefix holds EOS."""
    if prefix_tokens is None:
        return torch.zeros_like(rows, dtype=torch.bool)
    return prefix_tokens.eq(eos).any(dim=1).index_select(0, rows)


def install() -> None:
    """Replace ``SequenceGeneratorWithAlignment.generate`` (idempotent)."""
    from fairseq.sequence_generator import SequenceGeneratorWithAlignment

    wrap_once(SequenceGeneratorWithAlignment, "generate", _each_hypothesis)
