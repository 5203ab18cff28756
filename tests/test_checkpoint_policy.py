"""Tests for the policy read back from a checkpoint (``fairseq_san.models.checkpoint_policy``):
a decode-time policy may share more than the checkpoint, never less.
"""

from collections import OrderedDict

import pytest
import torch

from helpers import (
    ATOL,
    build,
    decoder_logits,
    make_dictionary,
    max_diff,
    policy_argv,
    reference_forward,
    source_batch,
    target_prefixes,
)
from fairseq_san.policy import PolicyError

DICT = make_dictionary(24)


def test_decode_time_policy_drops_unused_projections():
    unshared, _ = build(dictionary=DICT, seed=51)
    source = unshared.state_dict()
    shared, _ = build(policy_argv("1,5", "3,3"), dictionary=DICT, seed=52)
    state_dict = OrderedDict((k, v.clone()) for k, v in source.items())
    shared.load_state_dict(state_dict, strict=True, model_cfg=None)

    kept = shared.state_dict()
    dropped = set(source) - set(kept)
    expected_dropped = {
        f"decoder.layers.{i}.self_attn.{p}_proj.{w}"
        for i in (2, 3, 4, 5) for p in "qk" for w in ("weight", "bias")
    } | {
        f"decoder.layers.{i}.encoder_attn.{p}_proj.{w}"
        for i in (1, 2, 4, 5) for p in "qkv" for w in ("weight", "bias")
    }  # fmt: skip
    assert dropped == expected_dropped
    assert set(kept) <= set(source)
    for key, value in kept.items():
        assert torch.equal(value, source[key]), key

    # The loaded model computes the SAN equations with the checkpoint's weights.
    src_tokens, src_lengths = source_batch(DICT, [5, 2], seed=1)
    prev = target_prefixes(DICT, 2, 6, seed=2)
    expected = reference_forward(
        shared, src_tokens, src_lengths, prev, {"decoder_self": [1, 5], "decoder_encdec": [3, 3]}
    )
    assert max_diff(expected, decoder_logits(shared, src_tokens, src_lengths, prev)) <= ATOL


def test_decode_time_policy_sharing_less_than_the_checkpoint_fails():
    more, _ = build(["--san-decoder-self-policy", "6"], dictionary=DICT)
    less, _ = build(["--san-decoder-self-policy", "1,5"], dictionary=DICT)
    with pytest.raises(PolicyError) as error:
        less.load_state_dict(more.state_dict(), strict=True, model_cfg=None)
    message = str(error.value)
    assert "decoder.layers.1.self_attn" in message
    assert "more attention sharing" in message
    for layer in (0, 2, 3, 4, 5):
        assert f"decoder.layers.{layer}.self_attn" not in message


def test_a_policy_whose_blocks_moved_is_named_as_such_not_as_sharing_less():
    """{3,3} -> {4,2} (what the loop may learn next, warm-started from the last iteration):
    both share four layers, but layer 5 led no block in the checkpoint; it was called "more
    attention sharing", and the advice to decode with at least as much could not help."""
    trained, _ = build(["--san-decoder-self-policy", "3,3"], dictionary=DICT)
    moved, _ = build(["--san-decoder-self-policy", "4,2"], dictionary=DICT)
    with pytest.raises(PolicyError) as error:
        moved.load_state_dict(trained.state_dict(), strict=True, model_cfg=None)
    assert str(error.value).startswith(
        "the checkpoint's attention sharing (decoder_self {3,3}  decoder_encdec none  "
        "encoder_self none) and this model's (decoder_self {4,2}  decoder_encdec none  "
        "encoder_self none) have blocks with other borders: it has no projections for "
        "decoder.layers.4.self_attn, which followed a block's first layer in the checkpoint."
    )


@pytest.mark.parametrize(
    "trained, requested, loads",
    [
        (None, None, True),
        (None, "1,5", True),
        (None, "6", True),
        ("1,5", "6", True),
        ("1,5", "1,5", True),
        ("2,2,2", "2,4", True),
        ("1,1,1,1,1,1", None, True),
        ("6", "1,5", False),
        ("3,3", "2,2,2", False),
        ("1,5", None, False),
        ("2,4", "2,2,2", False),
    ],
)
def test_decode_time_policy_may_share_more_never_less(trained, requested, loads):
    """A checkpoint runs under a policy exactly when each trained block lies inside a requested
    block: only the first layer of a block has the projections that compute S."""
    checkpoint, _ = build(policy_argv(trained), dictionary=DICT)
    model, _ = build(policy_argv(requested), dictionary=DICT)
    if loads:
        model.load_state_dict(checkpoint.state_dict(), strict=True, model_cfg=None)
    else:
        moved = (trained, requested) == ("3,3", "2,2,2")  # layer 3 led no block of the checkpoint
        said = "blocks with other borders" if moved else "more attention sharing"
        with pytest.raises(PolicyError, match=said):
            model.load_state_dict(checkpoint.state_dict(), strict=True, model_cfg=None)


@pytest.mark.parametrize(
    "trained, said",
    [
        (["--decoder-layers", "3"], "the checkpoint has 3 decoder layers, this model 6 "
                                    "(--decoder-layers): it was trained with another architecture"),
        (["--decoder-ffn-embed-dim", "48"], "the checkpoint's decoder.layers.0.fc1.weight has shape "
                                            "(48, 16), this model's (32, 16): it was trained with "
                                            "another architecture"),
    ],
)  # fmt: skip
def test_a_checkpoint_of_another_size_is_named_by_its_first_difference(trained, said):
    """fairseq listed every missing key or mismatched shape in a traceback."""
    from fairseq_san.errors import UsageError

    other, _ = build(trained, dictionary=DICT)
    model, _ = build(dictionary=DICT)
    with pytest.raises(UsageError) as error:
        model.load_state_dict(other.state_dict(), strict=True, model_cfg=None)
    assert str(error.value).startswith(said), str(error.value)


def test_a_language_models_checkpoint_of_another_size_is_named():
    from helpers import build_lm

    from fairseq_san.errors import UsageError

    other, _ = build_lm(["--decoder-layers", "4"], dictionary=DICT)
    model, _ = build_lm(dictionary=DICT)
    with pytest.raises(UsageError, match="the checkpoint has 4 decoder layers, this model 6"):
        model.load_state_dict(other.state_dict(), strict=True, model_cfg=None)
