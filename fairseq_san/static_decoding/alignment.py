"""``--print-alignment`` for the static decoder: each hypothesis' attention over its source, from
one teacher-forced pass of the model's decoder over the batch's n-best (the attention of its
alignment layer, by default its last, averaged over heads, as fairseq's
``EnsembleModelWithAlignment.forward_align`` reads it), then fairseq's hard or soft alignment of
it, as ``SequenceGeneratorWithAlignment`` gives them.

fairseq's generator records that attention at every step of its search; the static step does
not compute it (with SAN the alignment layer may reuse an earlier layer's weights), so a batch
that prints alignments pays one more pass of the decoder (the output projection skipped), at
the precision of the model's weights (fp32: the same attention as fairseq's to rounding,
whatever ``--san-decoder-precision`` searched), over the encoder output the search used where
the search ran the model's own encoder (fp32), else over the model's encoder's, run once.
"""

from typing import Dict, List, Optional

import torch
from fairseq import utils
from fairseq.data import data_utils
from torch import Tensor, nn

# Hypotheses a teacher-forced pass takes (about a batch of 64 sentences at beam 1, of 16 at 4).
ROWS_PER_PASS = 64
# fairseq's functions from attention to alignment, by --print-alignment's choice.
EXTRACTORS = {"hard": utils.extract_hard_alignment, "soft": utils.extract_soft_alignment}


def add_alignments(
    model: nn.Module,
    sample: Dict[str, Dict[str, Tensor]],
    nbests: List[List[Dict[str, Tensor]]],
    kind: str,
    pad: int,
    eos: int,
    encoder_out: Optional[Dict] = None,
) -> None:
    """Give every hypothesis of ``nbests`` (per sentence of ``sample``) its ``attention``
    (source x target) and its ``alignment`` of ``kind`` (hard or soft), in place: the
    hypotheses by length, ``ROWS_PER_PASS`` a pass, so that a pass pads its rows to lengths
    alike (one pass over a batch padded every row to the longest output). ``encoder_out``: the
    model's encoder's output for ``sample`` where the caller has it (else computed here)."""
    found = [
        (sentence, hypothesis) for sentence, nbest in enumerate(nbests) for hypothesis in nbest
    ]
    found.sort(key=lambda pair: len(pair[1]["tokens"]))
    if encoder_out is None:
        encoder_out = model.encoder.forward_torchscript(sample["net_input"])
    src_tokens = sample["net_input"]["src_tokens"]
    for start in range(0, len(found), ROWS_PER_PASS):
        sentences, hypotheses = zip(*found[start : start + ROWS_PER_PASS])
        rows = torch.tensor(sentences, device=src_tokens.device)
        tokens = [hypothesis["tokens"] for hypothesis in hypotheses]
        attention = decoder_attention(model, encoder_out, rows, tokens, pad, eos)
        sources = src_tokens.index_select(0, rows).cpu()
        targets = data_utils.collate_tokens(tokens, pad, eos).cpu()
        for row, hypothesis in enumerate(hypotheses):
            length = len(hypothesis["tokens"])
            hypothesis["attention"] = attention[row, :length].t().clone()
            hypothesis["alignment"] = EXTRACTORS[kind](
                attention[row], sources[row], targets[row], pad, eos
            )


def decoder_attention(
    model: nn.Module, encoder_out: Dict, rows: Tensor, tokens: List[Tensor], pad: int, eos: int
) -> Tensor:
    """The alignment layer's attention (hypotheses, target, source) of the decoder fed
    ``tokens`` (teacher-forced, EOS first) over the encoder's output for sentences ``rows``."""
    previous = data_utils.collate_tokens(tokens, pad, eos, move_eos_to_beginning=True)
    encoder_out = model.encoder.reorder_encoder_out(encoder_out, rows)
    _, extra = model.decoder(previous.to(rows.device), encoder_out=encoder_out, features_only=True)
    return extra["attn"][0].float().cpu()
