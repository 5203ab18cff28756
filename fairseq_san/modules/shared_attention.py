"""Shared attention (SAN, Xiao et al. 2019, section 3.2): fairseq's MultiheadAttention, computed
once per block of adjacent layers and reused by the layers above.

A block of layers m..m+pi-1 is served by one ``BlockShare``:

* ``BlockLeaderAttention`` (layer m) is fairseq's MultiheadAttention; it also publishes its
  weights S^m = s(Q^m, K^m) (Eq. 1 and 3) and its per-head context A^m = S^m V^m (Eq. 2) to
  the block.
* ``SharedWeightsAttention`` (a following layer) reuses S^m (Eq. 4) with its own V and output
  projections and has no q_proj/k_proj. Used for self-attention, and for encoder-decoder attention
  with ``--san-encdec-share weights`` (the paper's Table 4, "shared V: no").
* ``SharedContextAttention`` (a following encoder-decoder layer) reuses A^m (Eq. 5) and keeps only
  its own output projection.

The hand-off goes through the ``BlockShare`` object the model gives every module of a block, never
through another module's incremental state (which fairseq keys per module instance).
"""

import enum
import threading
from typing import Dict, Optional, Tuple

import torch
from fairseq import utils
from fairseq.modules import MultiheadAttention
from torch import Tensor

from fairseq_san.modules import IncrementalState
from fairseq_san.modules.decoding_attention import DecodingAttention


class AttentionRole(enum.Enum):
    """What an attention module computes in a sharing block (read by the static decoder's step).

    FULL: its own S and A (no sharing); LEADER: its own, published to the block (S^m and A^m,
    Eq. 1-3; for KV sharing, its keys and values);
    WEIGHTS: the block's S with its own V (Eq. 4); CONTEXT: the block's A (Eq. 5);
    KEYS_VALUES: its own queries over the block's keys and values (cross-layer KV sharing,
    ``modules.kv_shared_attention``).
    """

    FULL = "full"
    LEADER = "leader"
    WEIGHTS = "weights"
    CONTEXT = "context"
    KEYS_VALUES = "keys_values"


# The q/k/v projections a module of each role keeps (each keeps its output projection): what a
# shared module drops, what the static decoder's step copies and caches. A new role is a new row.
PROJECTIONS = ("q_proj", "k_proj", "v_proj")
KEPT_PROJECTIONS: Dict[AttentionRole, Tuple[str, ...]] = {
    AttentionRole.FULL: PROJECTIONS,
    AttentionRole.LEADER: PROJECTIONS,
    AttentionRole.WEIGHTS: ("v_proj",),
    AttentionRole.CONTEXT: (),
    AttentionRole.KEYS_VALUES: ("q_proj",),
}


# The roles of a block's following layers: each keeps other projections, so that a checkpoint's
# parameter names say which (``follower_role``).
FOLLOWER_ROLES = (AttentionRole.WEIGHTS, AttentionRole.CONTEXT, AttentionRole.KEYS_VALUES)


# The projection a block's first layer keeps and no following layer does (k_proj): where a
# checkpoint's blocks start.
LEADER_PROJECTION = next(
    name
    for name in KEPT_PROJECTIONS[AttentionRole.LEADER]
    if not any(name in KEPT_PROJECTIONS[role] for role in FOLLOWER_ROLES)
)


def follower_role(kept: Tuple[str, ...]) -> Optional[AttentionRole]:
    """The role of a following layer that keeps the projections ``kept`` (in ``PROJECTIONS``
    order), None for a combination no role keeps."""
    return next((role for role in FOLLOWER_ROLES if KEPT_PROJECTIONS[role] == kept), None)


def dropped_projections(role: AttentionRole) -> Tuple[str, ...]:
    """The q/k/v projections a module of ``role`` does not have."""
    return tuple(name for name in PROJECTIONS if name not in KEPT_PROJECTIONS[role])


def attention_role(module: MultiheadAttention) -> AttentionRole:
    """The role of a decoder attention module: its own, or FULL for fairseq's MultiheadAttention."""
    return getattr(module, "role", AttentionRole.FULL)


class BlockShare:
    """What the first layer of a sharing block hands to the following layers in one forward pass.

    SAN's leader publishes S^m with shape (batch * heads, tgt_len, src_len), after softmax and
    before dropout, and A^m = dropout(S^m) V^m with shape (batch * heads, tgt_len, head_dim); a
    KV-sharing leader (``modules.kv_shared_attention``) its keys, values and padding mask. The
    last follower releases them so that no activation outlives the forward pass. Each thread
    has its own hand-off: forward passes of one model in two threads (the hub's calls) read
    each other's (an error, or the other batch's attention).
    """

    def __init__(self) -> None:
        self._forward = threading.local()

    def publish(self, *shared: Optional[Tensor]) -> None:
        """Hand ``shared`` to the block's following layers (the leader, once per forward)."""
        self._forward.shared = shared

    def read(self, release: bool) -> tuple:
        """What the leader published; ``release``: the block's last follower lets it go."""
        shared = getattr(self._forward, "shared", None)
        if shared is None:
            raise RuntimeError(
                "shared attention used before its block's first layer ran; "
                "layers of a sharing block must run bottom-up in one forward pass"
            )
        if release:
            self._forward.shared = None
        return shared

    def __deepcopy__(self, _memo: dict) -> "BlockShare":
        """A new hand-off (a copied model's forward passes are its own)."""
        return BlockShare()

    def __getstate__(self) -> dict:
        return {}  # nothing published outlives a forward pass

    def __setstate__(self, state: dict) -> None:
        self.__init__()


def unfused_static_kv(static_kv: bool, incremental_state: Optional[IncrementalState]) -> bool:
    """``static_kv`` that keeps fairseq's MultiheadAttention off its fused path.

    The fused path (``F.multi_head_attention_forward``, taken without incremental state and
    without static_kv) returns neither logits nor per-head weights (fairseq issue 3365). Without
    incremental state static_kv changes nothing but the path taken, so it is set then.
    """
    return static_kv or incremental_state is None


def attention_kwargs(attention: MultiheadAttention) -> dict:
    """Constructor arguments that rebuild a module shaped like ``attention`` (a shared module
    refuses its extra key/value bias or zero attention: the block's S would not cover them)."""
    return dict(
        embed_dim=attention.embed_dim,
        num_heads=attention.num_heads,
        kdim=attention.kdim,
        vdim=attention.vdim,
        dropout=attention.dropout_module.p,
        bias=attention.out_proj.bias is not None,
        add_bias_kv=attention.bias_k is not None,
        add_zero_attn=attention.add_zero_attn,
        self_attention=attention.self_attention,
        encoder_decoder_attention=attention.encoder_decoder_attention,
    )


class BlockMemberAttention(DecodingAttention):
    """fairseq's MultiheadAttention wired to a sharing block, minus the projections its ``role``
    does not keep (``KEPT_PROJECTIONS``).

    ``BlockLeaderAttention`` takes the fast decoding path of ``DecodingAttention`` when it is on
    (the KV-sharing modules have a forward of their own).
    """

    role: AttentionRole

    def __init__(self, block: BlockShare, releases_block: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        if self.bias_k is not None or self.add_zero_attn:
            raise ValueError("shared attention does not support add_bias_kv or add_zero_attn")
        for name in dropped_projections(self.role):
            delattr(self, name)
        self.block = block
        self.releases_block = releases_block

    def _merge_heads(self, context: Tensor, tgt_len: int, bsz: int) -> Tensor:
        """(batch * heads, tgt, head_dim) -> output projection of (tgt, batch, embed)."""
        merged = context.transpose(0, 1).contiguous().view(tgt_len, bsz, self.embed_dim)
        return self.out_proj(merged)

    def _weighted_values(self, weights: Tensor, values: Tensor) -> Tensor:
        """Eq. 2 per head: S V. With fast decoding (``set_beam_size``) encoder-decoder values hold
        one row per source sentence and the weights one per hypothesis."""
        if weights.size(0) == values.size(0):
            return torch.bmm(weights, values)
        sentences = values.size(0) // self.num_heads
        tgt_len, src_len = weights.size(1), weights.size(2)
        # (sentences, beam, heads, tgt, src) -> (sentences, heads, beam * tgt, src): one matmul
        # per sentence and head for all its hypotheses.
        per_sentence = weights.view(sentences, -1, self.num_heads, tgt_len, src_len).transpose(1, 2)
        beam = per_sentence.size(2)
        context = torch.matmul(
            per_sentence.reshape(sentences, self.num_heads, beam * tgt_len, src_len),
            values.view(sentences, self.num_heads, src_len, values.size(2)),
        )
        context = context.view(sentences, self.num_heads, beam, tgt_len, -1).transpose(1, 2)
        return context.reshape(-1, tgt_len, values.size(2))

    def _split_heads(self, x: Tensor) -> Tensor:
        """(len, batch, embed) -> (batch * heads, len, head_dim)."""
        return x.contiguous().view(x.size(0), -1, self.head_dim).transpose(0, 1)

    def _returned_weights(
        self, weights: Tensor, bsz: int, need_weights: bool, need_head_weights: bool
    ) -> Optional[Tensor]:
        """The weights in fairseq's layout: per head (heads, batch, tgt, src) or averaged."""
        if not (need_weights or need_head_weights):
            return None
        per_head = weights.view(bsz, self.num_heads, weights.size(1), weights.size(2))
        return self._fairseq_weights(per_head.transpose(1, 0), need_head_weights)


class BlockLeaderAttention(BlockMemberAttention):
    """The first layer of a block: fairseq's attention, plus S^m and A^m published to the block."""

    role = AttentionRole.LEADER

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
        """fairseq's attention, its S^m and A^m computed here from its logits and values and
        published to the block; fairseq's signature and outputs."""
        tgt_len, bsz, _ = query.size()
        logits, values = super().forward(
            query,
            key,
            value,
            key_padding_mask=key_padding_mask,
            incremental_state=incremental_state,
            static_kv=unfused_static_kv(static_kv, incremental_state),
            attn_mask=attn_mask,
            before_softmax=True,
        )
        weights = utils.softmax(logits, dim=-1).type_as(logits)  # Eq. 1 and 3: S^m
        if key_padding_mask is not None:  # a row of padding only: 0, as torch's attention gives
            weights = torch.nan_to_num(weights, nan=0.0)
        context = self._weighted_values(self.dropout_module(weights), values)  # Eq. 2: A^m
        self.block.publish(weights, context)
        if before_softmax:  # fairseq's contract: the logits and values; the block has S^m, A^m
            return logits, values
        returned = self._returned_weights(weights, bsz, need_weights, need_head_weights)
        return self._merge_heads(context, tgt_len, bsz), returned


class _FollowerAttention(BlockMemberAttention):
    """A following layer of a block: its output comes from the block's S^m and A^m."""

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
        """The block's S^m and A^m through this layer's own projections (``_context``), in
        fairseq's signature and outputs."""
        if before_softmax:
            raise NotImplementedError(
                "a following layer of a sharing block reuses its first layer's attention weights "
                "S^m: it has no logits of its own to return (before_softmax)"
            )
        tgt_len, bsz, _ = query.size()
        weights, context = self.block.read(release=self.releases_block)
        context = self._context(weights, context, query, value, incremental_state, static_kv)
        returned = self._returned_weights(weights, bsz, need_weights, need_head_weights)
        return self._merge_heads(context, tgt_len, bsz), returned

    def _context(
        self,
        weights: Tensor,
        context: Tensor,
        query: Tensor,
        value: Optional[Tensor],
        incremental_state: Optional[IncrementalState],
        static_kv: bool,
    ) -> Tensor:
        """This layer's per-head context, before its output projection."""
        raise NotImplementedError


class SharedWeightsAttention(_FollowerAttention):
    """A following layer that reuses S^m (Eq. 4): only its own V and output projections.

    In incremental decoding a self-attention layer caches its values only (no keys); an
    encoder-decoder layer caches the values of the encoder output, once per sentence with
    ``--san-decoding fast`` (else once per hypothesis, as fairseq's).
    """

    role = AttentionRole.WEIGHTS

    def _context(
        self,
        weights: Tensor,
        context: Tensor,
        query: Tensor,
        value: Optional[Tensor],
        incremental_state: Optional[IncrementalState],
        static_kv: bool,
    ) -> Tensor:
        source = query
        if not self.self_attention:
            source = self._one_per_sentence(value, query.size(1), incremental_state)
        values = self._values(source, incremental_state, static_kv)
        return self._weighted_values(self.dropout_module(weights), values)  # Eq. 2, S^m of Eq. 4

    def _values(
        self,
        source: Optional[Tensor],
        incremental_state: Optional[IncrementalState],
        static_kv: bool,
    ) -> Tensor:
        """This layer's V, extended by (self-attention) or read from (static) the cache."""
        if incremental_state is None:
            return self._split_heads(self.v_proj(source))
        saved = self._get_input_buffer(incremental_state)
        cached = saved.get("prev_value")
        if static_kv and cached is not None:
            return cached.view(-1, cached.size(2), self.head_dim)
        values = self._split_heads(self.v_proj(source))
        if cached is not None:
            values = torch.cat([cached.view(-1, cached.size(2), self.head_dim), values], dim=1)
        saved["prev_value"] = values.view(-1, self.num_heads, values.size(1), self.head_dim)
        self._set_input_buffer(incremental_state, saved)
        return values


class SharedContextAttention(_FollowerAttention):
    """A following encoder-decoder layer that reuses A^m = S^m V (Eq. 5).

    It keeps only its output projection: no q, k or v projections, and it caches nothing.
    """

    role = AttentionRole.CONTEXT

    def _context(
        self,
        weights: Tensor,
        context: Tensor,
        query: Tensor,
        value: Optional[Tensor],
        incremental_state: Optional[IncrementalState],
        static_kv: bool,
    ) -> Tensor:
        return context
