"""Average attention network (AAN; Zhang, Xiong and Su, ACL 2018).

A drop-in for the decoder self-attention sub-layer: position ``t`` sees the average
of the inputs ``y_1 .. y_t`` passed through a position-wise FFN (the paper's average layer),
mixed with ``y_t`` by an input and a forget gate (its gating layer). The surrounding fairseq
layer applies dropout, the residual connection and layer norm as it does for attention output.
The paper's text was not at hand to check its equation numbers, so layers are named instead.
Checked against the authors' code (bzhangGo/transformer-aan, ``transformer_decoder``): the same
average, FFN, gates, residual and post-norm; two choices differ from it: the FFN's inner width
is the model's (as in OpenNMT-py; theirs is the layer FFN's, and their released recipe turns
the FFN off), and under ``--decoder-normalize-before`` fairseq's layer normalises the input
before averaging (theirs averages the raw input and normalises the average).
Decoding keeps only a running sum and a position count per hypothesis (the paper's
dynamic-programming decoding), so each step costs O(1) in the target length.
"""

from typing import Callable, Dict, Optional, Tuple

import torch
from torch import Tensor, nn

from fairseq import utils
from fairseq.incremental_decoding_utils import with_incremental_state
from fairseq.modules import FairseqDropout
from fairseq.modules.quant_noise import quant_noise

from fairseq_san.modules import IncrementalState


def running_sum_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype of the running sums of inputs of ``dtype``: float32 at least (fp16/bf16 would
    round them away); float64 keeps its own."""
    return torch.promote_types(dtype, torch.float32)


def gated_average(
    module: nn.Module,
    y: Tensor,
    average: Tensor,
    dropout: Optional[Callable[[Tensor], Tensor]] = None,
) -> Tensor:
    """The average and gating layers given the average of y_1..y_t: an FFN of it, mixed with
    y_t by the input and forget gates. ``module`` has ``fc1``, ``fc2``, ``gate`` and
    ``activation_fn``: this module, or the static decoder's step, which holds copies of them it
    may cast."""
    hidden = module.activation_fn(module.fc1(average))
    g = module.fc2(hidden if dropout is None else dropout(hidden))  # the average layer
    i, f = torch.sigmoid(module.gate(torch.cat([y, g], dim=-1))).chunk(2, dim=-1)
    return i * y + f * g  # the gating layer


@with_incremental_state
class AverageAttention(nn.Module):
    """Cumulative average + FFN (the average layer) and input/forget gates (the gating layer).

    ``_get_input_buffer`` mirrors MultiheadAttention's (fairseq's TransformerDecoderLayerBase
    calls it on its self-attention), ``num_heads`` and ``head_dim`` its shape (one "head" of
    the model's width: what the static decoder's step reads). ``q_noise`` and ``qn_block_size``
    are MultiheadAttention's too: ``--quant-noise-pq`` on each of its projections.
    """

    def __init__(
        self,
        embed_dim: int,
        ffn_embed_dim: int,
        dropout: float = 0.0,
        q_noise: float = 0.0,
        qn_block_size: int = 8,
    ):
        super().__init__()
        self.embed_dim = embed_dim
        self.num_heads = 1
        self.head_dim = embed_dim

        def linear(in_features: int, out_features: int) -> nn.Module:
            return quant_noise(nn.Linear(in_features, out_features), q_noise, qn_block_size)

        self.fc1 = linear(embed_dim, ffn_embed_dim)
        self.fc2 = linear(ffn_embed_dim, embed_dim)
        self.activation_fn = utils.get_activation_fn("relu")  # AAN's FFN (Zhang et al., 2018)
        self.dropout_module = FairseqDropout(dropout, module_name=self.__class__.__name__)
        self.gate = linear(2 * embed_dim, 2 * embed_dim)

    def forward(
        self,
        query: Tensor,
        key: Optional[Tensor] = None,
        value: Optional[Tensor] = None,
        key_padding_mask: Optional[Tensor] = None,
        incremental_state: Optional[IncrementalState] = None,
        need_weights: bool = False,
        attn_mask: Optional[Tensor] = None,
        **unused,
    ) -> Tuple[Tensor, None]:
        """Gated average of ``query`` (T x B x C) over its prefixes; returns (T x B x C, None).

        The average is causal by construction, so ``attn_mask`` is not needed; ``key``
        and ``value`` are ``query`` in self-attention. ``key_padding_mask`` (B x T, True
        at pads) removes pads from the sums and counts. With ``incremental_state`` the
        T new positions continue the sequence already seen by this hypothesis.
        """
        y = query
        keep = y.new_ones(y.shape[:2] + (1,), dtype=running_sum_dtype(y.dtype))
        if key_padding_mask is not None:
            keep = keep.masked_fill(key_padding_mask.transpose(0, 1).unsqueeze(-1), 0.0)
        sums = (y.to(keep.dtype) * keep).cumsum(dim=0)
        counts = keep.cumsum(dim=0)
        if incremental_state is not None:
            state = self._get_input_buffer(incremental_state)
            if state:
                sums = sums + state["sum"]
                counts = counts + state["count"]
            self._set_input_buffer(incremental_state, {"sum": sums[-1], "count": counts[-1]})
        average = (sums / counts.clamp(min=1.0)).type_as(y)
        return gated_average(self, y, average, self.dropout_module), None

    def reorder_incremental_state(
        self, incremental_state: IncrementalState, new_order: Tensor
    ) -> IncrementalState:
        """Select each hypothesis's running sum and count by ``new_order`` (beam search)."""
        state = self._get_input_buffer(incremental_state)
        if state:
            self._set_input_buffer(
                incremental_state,
                {name: t.index_select(0, new_order) for name, t in state.items()},
            )
        return incremental_state

    def _get_input_buffer(
        self, incremental_state: Optional[IncrementalState]
    ) -> Dict[str, Optional[Tensor]]:
        """Running sum (B x C, float32 or float64) and position count (B x 1), or {} at first."""
        return self.get_incremental_state(incremental_state, "average") or {}

    def _set_input_buffer(
        self, incremental_state: IncrementalState, buffer: Dict[str, Optional[Tensor]]
    ) -> IncrementalState:
        return self.set_incremental_state(incremental_state, "average", buffer)
