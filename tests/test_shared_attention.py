"""Tests for shared attention (``fairseq_san.modules.shared_attention``, paper section 3.2).

An independent re-implementation of the SAN equations (Eqs. 4-6) against the model's forward
pass, the modules a policy replaces, and fairseq's quant-noise kept on shared attention.
"""

from typing import Dict, List, Optional, Sequence

import pytest
import torch

from helpers import (
    ATOL,
    POLICIES,
    attention_block,
    build,
    decoder_logits,
    make_dictionary,
    max_diff,
    policy_argv,
    reference_forward,
    source_batch,
    target_prefixes,
)
from fairseq_san.modules.shared_attention import (
    BlockLeaderAttention,
    SharedContextAttention,
    SharedWeightsAttention,
)

DICT = make_dictionary(24)


def blocks_of(text: Optional[str]) -> Optional[List[int]]:
    return None if text is None else [int(v) for v in text.split(",")]


def policy_of(argv: Sequence[str]) -> Dict[str, List[int]]:
    flags = {
        "--san-decoder-self-policy": "decoder_self",
        "--san-decoder-encdec-policy": "decoder_encdec",
        "--san-encoder-self-policy": "encoder_self",
    }
    return {flags[a]: blocks_of(b) for a, b in zip(argv, argv[1:]) if a in flags}


@pytest.mark.parametrize(
    "name",
    ["self15-encdec33-enc24", "self222-encdec6-weights", "self33-encdec15",
     "self33-encdec15-prenorm"],
)  # fmt: skip
def test_forward_matches_paper_equations(name):
    argv = POLICIES[name]
    model, _ = build(argv, dictionary=DICT, seed=5)
    share = "weights" if "weights" in argv else "output"
    src_tokens, src_lengths = source_batch(DICT, [6, 2, 5], seed=3)
    prev = target_prefixes(DICT, 3, 7, seed=4)
    expected = reference_forward(model, src_tokens, src_lengths, prev, policy_of(argv), share)
    actual = decoder_logits(model, src_tokens, src_lengths, prev)
    assert max_diff(expected, actual) <= ATOL


def test_sharing_changes_the_computation():
    """Sharing is not a no-op: the same weights give other logits with a policy than without
    (so the equality checks of this file can tell sharing from no sharing)."""
    shared, _ = build(POLICIES["self15-encdec33-enc24"], dictionary=DICT, seed=6)
    unshared6, _ = build(["--encoder-layers", "6"], dictionary=DICT, seed=5)
    shared.load_state_dict(unshared6.state_dict(), strict=True, model_cfg=None)
    src_tokens, src_lengths = source_batch(DICT, [6, 2, 5], seed=3)
    prev = target_prefixes(DICT, 3, 7, seed=4)
    assert max_diff(
        decoder_logits(unshared6, src_tokens, src_lengths, prev),
        decoder_logits(shared, src_tokens, src_lengths, prev),
    ) > 1e-2
    # ... and the reference implementation follows the policy it is given.
    assert max_diff(
        reference_forward(unshared6, src_tokens, src_lengths, prev, {}),
        decoder_logits(unshared6, src_tokens, src_lengths, prev),
    ) <= ATOL


def test_policy_replaces_the_right_modules():
    model, args = build(POLICIES["self15-encdec33-enc24"], dictionary=DICT)
    dec, enc = model.decoder.layers, model.encoder.layers
    assert [type(layer.self_attn) for layer in dec] == [
        type(dec[0].self_attn),
        BlockLeaderAttention,
        *[SharedWeightsAttention] * 4,
    ]
    assert type(dec[0].self_attn).__name__ == "MultiheadAttention"
    assert [type(layer.encoder_attn) for layer in dec] == [
        BlockLeaderAttention,
        SharedContextAttention,
        SharedContextAttention,
    ] * 2
    assert [type(layer.self_attn) for layer in enc] == [
        BlockLeaderAttention,
        SharedWeightsAttention,
        BlockLeaderAttention,
        *[SharedWeightsAttention] * 3,
    ]
    # One block object per block, shared by its leader and followers.
    assert dec[1].self_attn.block is dec[5].self_attn.block
    assert dec[0].encoder_attn.block is dec[2].encoder_attn.block
    assert dec[2].encoder_attn.block is not dec[3].encoder_attn.block
    for layer in dec[2:]:
        assert not hasattr(layer.self_attn, "q_proj") and not hasattr(layer.self_attn, "k_proj")
    assert not any(hasattr(dec[1].encoder_attn, p) for p in ("q_proj", "k_proj", "v_proj"))


def test_quant_noise_is_kept_on_shared_attention():
    """--quant-noise-pq puts a forward pre-hook (fairseq.modules.quant_noise) on every attention
    projection. Replacing a layer's attention for sharing must keep it on the projections that
    remain, or the shared layers silently train without quantization noise."""
    argv = ["--quant-noise-pq", "0.1", "--quant-noise-pq-block-size", "8", "--encoder-layers", "6"]
    unshared, _ = build(argv, dictionary=DICT)
    shared, _ = build(argv + policy_argv("1,5", "3,3", "2,4"), dictionary=DICT)

    def hooks(model):
        counts = {}
        for name, module in model.named_modules():
            if name.endswith(("q_proj", "k_proj", "v_proj", "out_proj")):
                counts[name] = len(module._forward_pre_hooks)
        return counts

    expected = hooks(unshared)
    assert set(expected.values()) == {1}
    actual = hooks(shared)
    assert set(actual) < set(expected)
    missing = sorted(name for name, count in actual.items() if count != 1)
    assert not missing, f"projections without quant noise: {missing}"


def test_each_module_a_policy_places_carries_its_role():
    """The role the static decoder's step reads is set on the module, block by block."""
    from fairseq_san.modules.shared_attention import AttentionRole, attention_role

    model, _ = build(policy_argv("1,5", "3,3"), dictionary=DICT)
    F, L, W, C = (AttentionRole.FULL, AttentionRole.LEADER, AttentionRole.WEIGHTS,
                  AttentionRole.CONTEXT)  # fmt: skip
    layers = model.decoder.layers
    assert [attention_role(layer.self_attn) for layer in layers] == [F, L, W, W, W, W]
    assert [attention_role(layer.encoder_attn) for layer in layers] == [L, C, C, L, C, C]



def test_before_softmax_gives_the_leaders_logits_and_refuses_a_follower():
    """fairseq's before_softmax returns (logits, values): the block's first layer computes them as
    fairseq does (and still hands S^m, A^m on); a following layer has none."""
    from fairseq.modules import MultiheadAttention

    from fairseq_san.modules.shared_attention import BlockShare

    torch.manual_seed(0)
    block = BlockShare()
    reference = MultiheadAttention(16, 4, self_attention=True).eval()
    leader = BlockLeaderAttention(block=block, embed_dim=16, num_heads=4, self_attention=True)
    leader.load_state_dict(reference.state_dict())
    leader.eval()
    x = torch.randn(5, 2, 16)
    # An incremental state keeps fairseq off its fused path, which ignores before_softmax.
    expected = reference(x, x, x, before_softmax=True, incremental_state={})
    actual = leader(x, x, x, before_softmax=True)
    for a, b in zip(expected, actual):
        torch.testing.assert_close(a, b)
    assert block.read(release=False) is not None
    follower = SharedWeightsAttention(block=block, embed_dim=16, num_heads=4, self_attention=True)
    with pytest.raises(NotImplementedError, match="no logits of its own"):
        follower(x, x, x, before_softmax=True)


def _leader_and_follower(dropout: float = 0.0):
    """fairseq's attention and a block of a leader (its weights) and a last follower."""
    return attention_block(BlockLeaderAttention, SharedWeightsAttention, dropout)


def test_a_training_leader_is_fairseqs_attention_and_hands_on_undropped_weights():
    """With dropout in training the leader's output is fairseq's (dropout on S^m before V, the
    same draws), and the block gets S^m itself: a following layer drops out its own copy."""
    reference, leader, _, block = _leader_and_follower(dropout=0.5)
    x = torch.randn(5, 2, 16)
    torch.manual_seed(1)  # an incremental state keeps fairseq off its fused path
    expected, weights = reference.train()(x, x, x, incremental_state={}, need_head_weights=True)
    torch.manual_seed(1)
    actual, _ = leader.train()(x, x, x, need_head_weights=True)
    torch.testing.assert_close(actual, expected)
    published, _ = block.read(release=True)
    torch.testing.assert_close(published, weights.transpose(0, 1).reshape(8, 5, 5))


def test_the_last_follower_releases_the_block():
    """No S^m outlives the forward pass: after the block's last layer, reading it is an error."""
    _, leader, follower, block = _leader_and_follower()
    x = torch.randn(5, 2, 16)
    leader(x, x, x)
    follower(x, x, x)
    with pytest.raises(RuntimeError, match="before its block's first layer ran"):
        block.read(release=False)


def test_a_query_of_padding_only_gets_zero_weights_not_nan():
    """A sentence whose keys are all padding (a left-padded target's first query) has a NaN
    softmax row: the block's S^m there is 0, and no NaN reaches the outputs."""
    _, leader, follower, _ = _leader_and_follower()
    x = torch.randn(5, 2, 16)
    padding = torch.tensor([[False] * 5, [True] * 5])
    _, weights = leader.eval()(x, x, x, key_padding_mask=padding, need_head_weights=True)
    out, _ = follower.eval()(x, x, x, key_padding_mask=padding)
    assert weights[:, 1].abs().sum() == 0 and weights[:, 0].sum(-1).allclose(torch.ones(4, 5))
    assert out.isfinite().all()
