"""A faster incremental-decoding path for fairseq's MultiheadAttention (``--san-decoding fast``).

Beam search calls every decoder attention once per step with one query per hypothesis. fairseq's
MultiheadAttention spends most of that call on bookkeeping: three projections where one would do,
a chain of shape checks and masks, and, for encoder-decoder attention, keys and values held per
hypothesis and reordered at every step although the hypotheses of a sentence share them. This
module keeps fairseq's cache layout (``prev_key``/``prev_value`` as (batch, heads, len, head_dim),
``prev_key_padding_mask``) and its ``reorder_incremental_state``, and replaces only the step:

* self-attention: one fused q/k/v projection, the new key/value appended to the cache, and
  torch's fused ``scaled_dot_product_attention`` when no weights are asked for;
* encoder-decoder attention: keys/values projected once per source sentence (fairseq's beamable
  layout, ``set_beam_size``), and the hypotheses of a sentence attend in one batched matmul.

The output is the same computation as fairseq's, in a different order of floating-point
operations. Training, and any call the fast path does not cover, run fairseq's own forward.
"""

from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq.modules import MultiheadAttention
from torch import Tensor

from fairseq_san.modules import IncrementalState, weights_key


class DecodingAttention(MultiheadAttention):
    """fairseq's MultiheadAttention plus a fast incremental path, used when ``fast_decoding``."""

    fast_decoding: bool = False

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._fused: Optional[Tuple[tuple, Tensor, Tensor]] = None

    def forward(
        self,
        query: Tensor,
        key: Optional[Tensor],
        value: Optional[Tensor],
        key_padding_mask: Optional[Tensor] = None,
        incremental_state: Optional[IncrementalState] = None,
        need_weights: bool = True,
        static_kv: bool = False,
        attn_mask: Optional[Tensor] = None,
        before_softmax: bool = False,
        need_head_weights: bool = False,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        """The fast step for a decoding step it covers, else fairseq's forward (its beam as the
        pass needs it: ``_beam``)."""
        if self.training:  # fairseq's optimizer will write the weights through .data, unseen
            self._fused = None
        if self._takes_fast_path(query, incremental_state, attn_mask, key_padding_mask):
            if self.encoder_decoder_attention and static_kv:
                return self._encoder_step(
                    query, key, key_padding_mask, incremental_state,
                    need_weights or need_head_weights, before_softmax, need_head_weights,
                )  # fmt: skip
            if self.self_attention and not self._has_prev_padding(incremental_state):
                return self._self_step(
                    query, incremental_state, need_weights or need_head_weights,
                    before_softmax, need_head_weights,
                )  # fmt: skip
        beam, self.beam_size = self.beam_size, self._beam(incremental_state)
        try:
            return super().forward(
                query,
                key,
                value,
                key_padding_mask=key_padding_mask,
                incremental_state=incremental_state,
                need_weights=need_weights,
                static_kv=static_kv,
                attn_mask=attn_mask,
                before_softmax=before_softmax,
                need_head_weights=need_head_weights,
            )
        finally:
            self.beam_size = beam

    def _beam(self, incremental_state: Optional[IncrementalState]) -> int:
        """The generator's beam (``set_beam_size``) in a decoding step, 1 in a full-sequence pass.

        fairseq's forward reads ``beam_size`` whatever the pass and keeps every k-th row of the
        encoder output; a training or scoring pass after the generator was built (fairseq-train
        ``--eval-bleu``) has one row per sentence, and would attend to other sentences' keys."""
        return self.beam_size if incremental_state is not None else 1

    def _takes_fast_path(
        self,
        query: Tensor,
        incremental_state: Optional[IncrementalState],
        attn_mask: Optional[Tensor],
        key_padding_mask: Optional[Tensor],
    ) -> bool:
        """One decoding step in eval mode, with nothing the fast path does not implement
        (attention dropout kept at inference, ``--retain-dropout``, among them)."""
        return (
            self.fast_decoding
            and incremental_state is not None
            and not self.training
            and not self.dropout_module.apply_during_inference
            and query.size(0) == 1
            and attn_mask is None
            and self.bias_k is None
            and not self.add_zero_attn
            and not self.onnx_trace
            and (key_padding_mask is None or self.encoder_decoder_attention)
        )

    def _has_prev_padding(self, incremental_state: Optional[IncrementalState]) -> bool:
        """Whether the cached keys carry a padding mask (the fast self-attention step has none)."""
        return self._get_input_buffer(incremental_state).get("prev_key_padding_mask") is not None

    # --- self-attention ----------------------------------------------------------------------

    def _fused_projection(self) -> Tuple[Tensor, Tensor]:
        """[W_q; W_k; W_v] and their biases, rebuilt only when a projection changed (in place,
        ``weights_key``) or the module trained (``forward``)."""
        params = [getattr(self, f"{n}_proj").weight for n in "qkv"]
        params += [getattr(self, f"{n}_proj").bias for n in "qkv"]
        if any(p is None for p in params):
            raise ValueError("fast decoding needs q/k/v projections with biases")
        key = weights_key(params)
        if self._fused is None or self._fused[0] != key:
            self._fused = (key, torch.cat(params[:3]).detach(), torch.cat(params[3:]).detach())
        return self._fused[1], self._fused[2]

    def _self_step(
        self,
        query: Tensor,
        incremental_state: Optional[IncrementalState],
        need_weights: bool,
        before_softmax: bool,
        need_head_weights: bool,
    ):
        """One step of self-attention: q, k and v in one fused projection, the new key and value
        appended to the cache, attention over them (S = Softmax(QK^T / sqrt(d_k)), A = SV: paper
        Eqs. 1-2; scaled_dot_product_attention where no weights are asked for)."""
        hypotheses = query.size(1)
        weight, bias = self._fused_projection()
        q, k, v = F.linear(query, weight, bias).split(self.embed_dim, dim=-1)
        q = self._heads(q * self.scaling, hypotheses)  # (hyps, heads, 1, head_dim)
        saved = self._get_input_buffer(incremental_state)
        keys = self._append(saved.get("prev_key"), self._heads(k, hypotheses))
        values = self._append(saved.get("prev_value"), self._heads(v, hypotheses))
        saved.update(prev_key=keys, prev_value=values, prev_key_padding_mask=None)
        self._set_input_buffer(incremental_state, saved)
        if before_softmax:  # fairseq's layout: (hyps * heads, 1, len) and (hyps * heads, len, d)
            logits = torch.matmul(q, keys.transpose(2, 3))
            return logits.view(-1, 1, keys.size(2)), values.view(-1, values.size(2), self.head_dim)
        if not need_weights:
            context = F.scaled_dot_product_attention(q, keys, values, scale=1.0)
            return self._project_out(context, hypotheses), None
        weights = torch.softmax(torch.matmul(q, keys.transpose(2, 3)), dim=-1)
        context = torch.matmul(weights, values)
        return self._project_out(context, hypotheses), self._fairseq_weights(
            weights.transpose(0, 1), need_head_weights
        )

    def _heads(self, x: Tensor, batch: int) -> Tensor:
        """(1, batch, embed) -> (batch, heads, 1, head_dim)."""
        return x.view(batch, self.num_heads, 1, self.head_dim)

    @staticmethod
    def _append(cache: Optional[Tensor], step: Tensor) -> Tensor:
        return step.contiguous() if cache is None else torch.cat([cache, step], dim=2)

    def _project_out(self, context: Tensor, hypotheses: int) -> Tensor:
        """Per-head context, hypothesis-major then head ((hyps, heads, 1, d) or
        (sentences, beam, heads, d)) -> output projection of (1, hyps, embed)."""
        return self.out_proj(context.reshape(1, hypotheses, self.embed_dim))

    def _fairseq_weights(self, per_head: Tensor, need_head_weights: bool) -> Tensor:
        """(heads, batch, tgt, src) as fairseq returns them: per head, or averaged over heads."""
        return per_head if need_head_weights else per_head.mean(dim=0)

    # --- encoder-decoder attention -----------------------------------------------------------

    def _encoder_step(
        self,
        query: Tensor,
        key: Optional[Tensor],
        key_padding_mask: Optional[Tensor],
        incremental_state: Optional[IncrementalState],
        need_weights: bool,
        before_softmax: bool,
        need_head_weights: bool,
    ):
        """One step of encoder-decoder attention (paper Eqs. 1-2): keys and values projected once
        per source sentence at the first step (cached), every hypothesis of a sentence attending
        over them."""
        hypotheses = query.size(1)
        saved = self._get_input_buffer(incremental_state)
        if saved.get("prev_key") is None:
            saved = self._project_sentences(key, key_padding_mask, hypotheses, incremental_state)
            self._set_input_buffer(incremental_state, saved)
        keys, values = saved["prev_key"], saved["prev_value"]  # (sentences, heads, src, d)
        sentences, src_len = keys.size(0), keys.size(2)
        beam = hypotheses // sentences
        q = self.q_proj(query) * self.scaling
        q = q.view(sentences, beam, self.num_heads, self.head_dim).transpose(1, 2)
        logits = torch.matmul(q, keys.transpose(2, 3))  # (sentences, heads, beam, src)
        padding = saved.get("prev_key_padding_mask")
        if padding is not None:
            logits = logits.masked_fill(padding.view(sentences, 1, 1, src_len), float("-inf"))
        if before_softmax:  # fairseq's beamable layout: per hypothesis, values per sentence
            logits = logits.transpose(1, 2).reshape(hypotheses * self.num_heads, 1, src_len)
            return logits, values.reshape(-1, src_len, self.head_dim)
        weights = torch.softmax(logits, dim=-1)
        context = torch.matmul(weights, values).transpose(1, 2)  # (sentences, beam, heads, d)
        out = self._project_out(context, hypotheses)
        if not need_weights:
            return out, None
        per_head = weights.permute(1, 0, 2, 3).reshape(self.num_heads, hypotheses, 1, src_len)
        return out, self._fairseq_weights(per_head, need_head_weights)

    def _one_per_sentence(
        self,
        states: Optional[Tensor],
        hypotheses: int,
        incremental_state: Optional[IncrementalState],
    ) -> Optional[Tensor]:
        """Encoder states (src, hyps, embed) once per source sentence when beam search shares
        them (``set_beam_size``), as fairseq's beamable attention does."""
        beam = self._beam(incremental_state)
        if states is None or beam == 1 or states.size(1) != hypotheses:
            return states
        return states[:, ::beam]

    def _project_sentences(
        self,
        key: Optional[Tensor],
        key_padding_mask: Optional[Tensor],
        hypotheses: int,
        incremental_state: IncrementalState,
    ) -> Dict[str, Optional[Tensor]]:
        """Keys/values of the encoder output, once per source sentence (first step only)."""
        if key is None:
            raise RuntimeError("encoder-decoder attention: first step without the encoder output")
        if key_padding_mask is not None and key.size(1) == hypotheses:
            key_padding_mask = key_padding_mask[:: self._beam(incremental_state)]
        key = self._one_per_sentence(key, hypotheses, incremental_state)
        src_len, sentences = key.size(0), key.size(1)

        def per_head(x: Tensor) -> Tensor:
            return x.view(src_len, sentences, self.num_heads, self.head_dim).permute(1, 2, 0, 3)

        return {
            "prev_key": per_head(self.k_proj(key)).contiguous(),
            "prev_value": per_head(self.v_proj(key)).contiguous(),
            "prev_key_padding_mask": key_padding_mask,
        }
