"""Cross-layer KV sharing for decoder self-attention (Cross-Layer Attention, Brandon et al. 2024),
the comparison system of SAN's shared attention weights (``--san-self-share kv``).

A block of layers m..m+pi-1 is served by one ``BlockShare`` (``modules.shared_attention``):

* ``KVLeaderAttention`` (layer m) is self-attention with its own Q, K and V; it publishes its
  keys and values (the cached prefix included) to the block.
* ``KVFollowerAttention`` (a following layer) keeps its own Q and output projections and attends
  over the leader's K and V: it has no k_proj/v_proj and, in incremental decoding, no cache.

SAN's followers (``modules.shared_attention.SharedWeightsAttention``) reuse S^m and keep their
own V, so they cache V; KV followers cache nothing, but compute their own Q K^T.
"""

from typing import Optional, Tuple

import torch
from fairseq import utils
from torch import Tensor

from fairseq_san.modules import IncrementalState
from fairseq_san.modules.shared_attention import AttentionRole, BlockMemberAttention, BlockShare

# (keys, values) as (batch * heads, len, head_dim) and the key padding mask (batch, len) or None.
KeysValues = Tuple[Tensor, Tensor, Optional[Tensor]]


class _KVAttention(BlockMemberAttention):
    """Scaled dot-product self-attention of this layer's queries over a block's keys and values."""

    def __init__(self, block: BlockShare, releases_block: bool = False, **kwargs) -> None:
        super().__init__(block, releases_block, **kwargs)
        if not self.self_attention:
            raise ValueError("KV sharing is for self-attention only")

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
        """Paper Eqs. 1-2 with this layer's Q and the block's K and V: S = Softmax(QK^T /
        sqrt(d_k)), A = SV, in fairseq's MultiheadAttention's signature and outputs."""
        tgt_len, bsz, _ = query.size()
        keys, values, padding = self._keys_values(query, key_padding_mask, incremental_state)
        queries = self._split_heads(self.q_proj(query) * self.scaling)
        logits = torch.bmm(queries, keys.transpose(1, 2))
        if attn_mask is not None:
            logits = logits + attn_mask.unsqueeze(0)
        if padding is not None:
            src_len = keys.size(1)
            logits = logits.view(bsz, self.num_heads, tgt_len, src_len)
            logits = logits.masked_fill(padding.view(bsz, 1, 1, src_len).bool(), float("-inf"))
            logits = logits.view(bsz * self.num_heads, tgt_len, src_len)
        if before_softmax:
            return logits, values
        weights = utils.softmax(logits, dim=-1).type_as(logits)
        context = torch.bmm(self.dropout_module(weights), values)
        returned = self._returned_weights(weights, bsz, need_weights, need_head_weights)
        return self._merge_heads(context, tgt_len, bsz), returned

    def _keys_values(
        self,
        query: Tensor,
        key_padding_mask: Optional[Tensor],
        incremental_state: Optional[IncrementalState],
    ) -> KeysValues:
        """The keys and values this layer's queries attend over, with their padding mask."""
        raise NotImplementedError


class KVLeaderAttention(_KVAttention):
    """The first layer of a KV-sharing block: its own K and V (cached), published to the block."""

    role = AttentionRole.LEADER

    def _keys_values(
        self,
        query: Tensor,
        key_padding_mask: Optional[Tensor],
        incremental_state: Optional[IncrementalState],
    ) -> KeysValues:
        """Its own keys and values of ``query`` (appended to the cached ones when decoding)."""
        keys = self._split_heads(self.k_proj(query))
        values = self._split_heads(self.v_proj(query))
        padding = key_padding_mask
        if incremental_state is not None:
            saved = self._get_input_buffer(incremental_state)
            bsz = query.size(1)
            if saved.get("prev_key") is not None:
                keys = torch.cat([saved["prev_key"].view(keys.size(0), -1, self.head_dim), keys], 1)
                values = torch.cat(
                    [saved["prev_value"].view(values.size(0), -1, self.head_dim), values], 1
                )
            padding = self._append_prev_key_padding_mask(
                key_padding_mask,
                saved.get("prev_key_padding_mask"),
                bsz,
                keys.size(1),
                static_kv=False,
            )
            saved["prev_key"] = keys.view(bsz, self.num_heads, -1, self.head_dim)
            saved["prev_value"] = values.view(bsz, self.num_heads, -1, self.head_dim)
            saved["prev_key_padding_mask"] = padding
            self._set_input_buffer(incremental_state, saved)
        self.block.publish(keys, values, padding)
        return keys, values, padding


class KVFollowerAttention(_KVAttention):
    """A following layer: its own queries over the block's K and V; no K/V projections, no cache."""

    role = AttentionRole.KEYS_VALUES

    def _keys_values(
        self,
        query: Tensor,
        key_padding_mask: Optional[Tensor],
        incremental_state: Optional[IncrementalState],
    ) -> KeysValues:
        return self.block.read(release=self.releases_block)
