"""Tests for the policy read back from a checkpoint (``fairseq_san.models.checkpoint_policy``):
a decode-time policy may share more than the checkpoint, never less; a fine-tuned model may have
any policy.
"""

from collections import OrderedDict

import pytest
import torch

from helpers import (
    ATOL,
    build,
    build_fairseq_transformer,
    build_lm,
    decoder_logits,
    make_dictionary,
    max_diff,
    policy_argv,
    reference_forward,
    source_batch,
    target_prefixes,
)
from fairseq_san.fairseq_fixes.shared_checkpoints import plugin_checkpoint_problem
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


@pytest.mark.parametrize("share", ["output", "weights"])
def test_a_pre_norm_decoders_following_layers_have_no_query_norm(share):
    """A pre-norm decoder layer normalizes its encoder-decoder attention's input, the query only;
    a following layer ignores its query, so its norm got no gradient (fairseq's DDP stopped) and
    was counted among the parameters. The model has none there; a checkpoint that has (trained
    sharing less, or before the norms were dropped) loads, and computes what it computed."""
    argv = ["--decoder-normalize-before", "--san-encdec-share", share]
    unshared, _ = build(argv, dictionary=DICT, seed=53)
    shared, _ = build([*argv, *policy_argv(None, "3,3")], dictionary=DICT, seed=54)
    norms = {f"decoder.layers.{i}.encoder_attn_layer_norm.{w}" for i in (1, 2, 4, 5)
             for w in ("weight", "bias")}  # fmt: skip
    assert norms <= set(unshared.state_dict()) and not norms & set(shared.state_dict())
    src_tokens, src_lengths = source_batch(DICT, [5, 2], seed=1)
    prev = target_prefixes(DICT, 2, 6, seed=2)
    shared(src_tokens, src_lengths, prev)[0].pow(2).mean().backward()
    assert [name for name, p in shared.named_parameters() if p.grad is None] == []
    with torch.no_grad():
        for name in norms:  # not the leaders' norms: they would change the output if read
            unshared.state_dict()[name].add_(1.0)
    shared.load_state_dict(OrderedDict(unshared.state_dict()), strict=True, model_cfg=None)
    rebuilt, _ = build([*argv, *policy_argv(None, "3,3")], dictionary=DICT, seed=55)
    without = OrderedDict((k, v) for k, v in unshared.state_dict().items() if k not in norms)
    rebuilt.load_state_dict(without, strict=True, model_cfg=None)
    assert torch.equal(decoder_logits(shared, src_tokens, src_lengths, prev),
                       decoder_logits(rebuilt, src_tokens, src_lengths, prev))  # fmt: skip


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
def test_decode_time_policy_may_share_more_never_less(trained, requested, loads, caplog):
    """A checkpoint runs under a policy exactly when each trained block lies inside a requested
    block: only the first layer of a block has the projections that compute S. Decoding so logs
    nothing of fine-tuning (its dropped projections are fine-tuning's news alone)."""
    checkpoint, _ = build(policy_argv(trained), dictionary=DICT)
    model, _ = build(policy_argv(requested), dictionary=DICT)
    if loads:
        with caplog.at_level("INFO", logger="fairseq_san.models.checkpoint_policy"):
            model.load_state_dict(checkpoint.state_dict(), strict=True, model_cfg=None)
        assert caplog.messages == []
    else:
        moved = (trained, requested) == ("3,3", "2,2,2")  # layer 3 led no block of the checkpoint
        said = "blocks with other borders" if moved else "more attention sharing"
        with pytest.raises(PolicyError, match=said):
            model.load_state_dict(checkpoint.state_dict(), strict=True, model_cfg=None)


@pytest.mark.parametrize(
    "trained, said",
    [
        # fine-tuning a model trained with --decoder-layers-to-keep named --decoder-layers only
        (["--decoder-layers", "3"], "the checkpoint has 3 decoder layers, this model 6 "
                                    "(--decoder-layers; a model trained with "
                                    "--decoder-layers-to-keep holds the layers it kept): it was "
                                    "trained with another architecture"),
        (["--encoder-layers", "7"], "the checkpoint has 7 encoder layers, this model 2 "
                                    "(--encoder-layers): it was trained with another architecture"),
        (["--decoder-ffn-embed-dim", "48"], "the checkpoint's decoder.layers.0.fc1.weight has shape "
                                            "(48, 16), this model's (32, 16): it was trained with "
                                            "another architecture"),
        # torch's "Missing key(s) in state_dict: ..." with every key, a traceback from loading
        (["--decoder-normalize-before"], "the checkpoint has decoder.layer_norm.weight (and 1 "
                                         "more), which this model has not: it was trained with "
                                         "other layer options"),
        (["--layernorm-embedding"], "the checkpoint has encoder.layernorm_embedding.weight (and 3 "
                                    "more), which this model has not: it was trained with other "
                                    "layer options"),
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


def test_a_checkpoint_without_a_layer_of_the_model_is_named():
    """``--model-overrides "{'decoder_learned_pos': True}"`` on a model trained without: torch's
    list of missing keys in a traceback."""
    from fairseq_san.errors import UsageError

    other, _ = build(dictionary=DICT)
    model, _ = build(["--decoder-learned-pos"], dictionary=DICT)
    with pytest.raises(UsageError) as error:
        model.load_state_dict(other.state_dict(), strict=True, model_cfg=None)
    assert str(error.value).startswith(
        "the checkpoint lacks decoder.embed_positions.weight, which this model has: it was "
        "trained with other layer options (--encoder-normalize-before, --decoder-normalize-before"
    ), str(error.value)


def test_a_language_models_checkpoint_of_another_size_is_named():
    from fairseq_san.errors import UsageError

    other, _ = build_lm(["--decoder-layers", "4"], dictionary=DICT)
    model, _ = build_lm(dictionary=DICT)
    with pytest.raises(UsageError, match="the checkpoint has 4 decoder layers, this model 6"):
        model.load_state_dict(other.state_dict(), strict=True, model_cfg=None)


# --- fine-tuning (--finetune-from-model, the loop's --warm-start) under another policy -----------


def fine_tune(model, checkpoint) -> dict:
    """Load ``checkpoint``'s parameters into ``model`` as fairseq-train's --finetune-from-model
    does (``fairseq_fixes.restore_file`` marks that load); the state dict loaded."""
    from fairseq_san.models.checkpoint_policy import fine_tuning

    state_dict = OrderedDict((key, value.clone()) for key, value in checkpoint.state_dict().items())
    with fine_tuning():
        model.load_state_dict(state_dict, strict=True, model_cfg=None)
    return checkpoint.state_dict()


def test_fine_tuning_starts_a_moved_blocks_leader_from_the_projections_it_used(caplog):
    """{3,3} -> {4,2}, what the warm-started loop may learn next: layer 5 (index 4) followed
    layer 4's block and used its S (Eq. 4); it now leads a block and starts from those q/k.
    Layer 4 led a block and now follows one: the log names the trained projections dropped (they
    went without a word). Loading the same checkpoint to decode or resume is still refused (tests
    above)."""
    trained, _ = build(policy_argv("3,3", "2,2,2"), dictionary=DICT, seed=61)
    model, _ = build(policy_argv("4,2", "2,4"), dictionary=DICT, seed=62)
    with caplog.at_level("INFO", logger="fairseq_san.models.checkpoint_policy"):
        source = fine_tune(model, trained)
    loaded = model.state_dict()
    for proj in ("q_proj", "k_proj"):
        for param in ("weight", "bias"):
            new = f"decoder.layers.4.self_attn.{proj}.{param}"
            assert torch.equal(loaded[new], source[f"decoder.layers.3.self_attn.{proj}.{param}"])
    assert set(loaded) - set(source) == {
        f"decoder.layers.4.self_attn.{p}_proj.{w}" for p in "qk" for w in ("weight", "bias")
    }
    for key in set(loaded) & set(source):
        assert torch.equal(loaded[key], source[key]), key
    assert caplog.messages == [
        "fine-tuning from a checkpoint that shared otherwise: decoder.layers.4.self_attn starts with "
        "decoder.layers.3.self_attn's q_proj, k_proj",
        "fine-tuning from a checkpoint that shared otherwise: decoder.layers.3.self_attn drops its "
        "trained q_proj, k_proj (this policy shares that attention)",
        "fine-tuning from a checkpoint that shared otherwise: decoder.layers.4.encoder_attn drops "
        "its trained q_proj, k_proj, v_proj (this policy shares that attention)",
    ]


def test_fine_tuning_a_pre_norm_decoder_names_the_query_norm_it_drops(caplog):
    """A pre-norm layer that led a block and now follows one drops its encoder-decoder query norm
    beside its projections (``transformer_san.drop_unused_query_norms``): said with them."""
    norm = ["--decoder-normalize-before"]
    trained, _ = build([*norm, *policy_argv("3,3", "2,2,2")], dictionary=DICT, seed=61)
    model, _ = build([*norm, *policy_argv("4,2", "2,4")], dictionary=DICT, seed=62)
    with caplog.at_level("INFO", logger="fairseq_san.models.checkpoint_policy"):
        fine_tune(model, trained)
    assert caplog.messages[-1] == (
        "fine-tuning from a checkpoint that shared otherwise: decoder.layers.4.encoder_attn drops "
        "its trained q_proj, k_proj, v_proj, encoder_attn_layer_norm (this policy shares that "
        "attention)"
    )


def test_fine_tuning_across_decoder_self_attention_types_says_so():
    """Fine-tuning a dot-product checkpoint as AAN was refused with the words for resuming and
    decoding ("To continue training it, pass ...; to decode it, leave ... out of
    --model-overrides"), neither of which the user did."""
    from fairseq_san.errors import UsageError

    trained, _ = build(dictionary=DICT, seed=65)
    model, _ = build(["--decoder-self-attention-type", "aan"], dictionary=DICT, seed=66)
    with pytest.raises(UsageError) as refused:
        fine_tune(model, trained)
    assert str(refused.value) == (
        "the checkpoint's decoder self-attention is dot (dot-product attention) but this model's "
        "is aan (the average attention network), whose parameters are others: "
        "--finetune-from-model starts from a checkpoint of the same attention type; fine-tune it "
        "with --decoder-self-attention-type dot (a sharing policy of its own is fine), or train "
        "this model from scratch"
    )


def test_fine_tuning_aan_into_aan_san_names_only_the_attention_type():
    """Warm-starting AAN+SAN from an AAN checkpoint without --decoder-self-attention-type aan
    was told to pass --san-policy '{}' (the checkpoint's policy), which drops the encoder-decoder
    policy the user asked for; fine-tuning into another policy is allowed."""
    from fairseq_san.errors import UsageError

    trained, _ = build(["--decoder-self-attention-type", "aan"], dictionary=DICT, seed=65)
    model, _ = build(["--san-decoder-encdec-policy", "3,3"], dictionary=DICT, seed=66)
    with pytest.raises(UsageError) as refused:
        fine_tune(model, trained)
    message = str(refused.value)
    assert "--san-policy" not in message
    assert "fine-tune it with --decoder-self-attention-type aan (a sharing policy" in message


@pytest.mark.parametrize("norm", [[], ["--decoder-normalize-before"]], ids=["post", "pre"])
@pytest.mark.parametrize(
    "trained, requested",
    [("6", "1,5"), ("3,3", "2,2,2"), ("1,5", None), ("2,4", "2,2,2"), ("6", "1,1,1,1,1,1")],
)
def test_fine_tuning_loads_a_checkpoint_under_any_policy(trained, requested, norm):
    """Each pair that cannot decode (sharing less, or moved blocks) can be fine-tuned from: every
    layer's projections come from its block's leader in the checkpoint, and so does a pre-norm
    layer's query norm, which a following layer had not."""
    from fairseq_san import policy as san_policy

    checkpoint, _ = build([*norm, *policy_argv(trained, trained)], dictionary=DICT, seed=63)
    model, _ = build([*norm, *policy_argv(requested, requested)], dictionary=DICT, seed=64)
    source = fine_tune(model, checkpoint)
    blocks = [int(size) for size in trained.split(",")]
    leaders = san_policy.block_leaders(blocks, 6)
    for key, value in model.state_dict().items():
        layer = key.split(".")[2] if key.startswith("decoder.layers.") else None
        if key in source:
            assert torch.equal(value, source[key]), key
        else:
            assert layer is not None, key
            leader_key = key.replace(f"layers.{layer}.", f"layers.{leaders[int(layer)]}.", 1)
            assert torch.equal(value, source[leader_key]), key


def test_fine_tuning_from_shared_context_to_shared_weights_starts_v_from_the_leader():
    """--san-encdec-share output -> weights: the following layers had no V (they reused A^m,
    Eq. 5); under Eq. 4 each needs its own and starts from the leader's."""
    checkpoint, _ = build(["--san-decoder-encdec-policy", "3,3"], dictionary=DICT, seed=65)
    model, _ = build(
        ["--san-decoder-encdec-policy", "3,3", "--san-encdec-share", "weights"],
        dictionary=DICT,
        seed=66,
    )
    source = fine_tune(model, checkpoint)
    loaded = model.state_dict()
    for layer, leader in ((1, 0), (2, 0), (4, 3), (5, 3)):
        for param in ("weight", "bias"):
            key = f"decoder.layers.{layer}.encoder_attn.v_proj.{param}"
            assert key not in source
            assert torch.equal(loaded[key], source[key.replace(f".{layer}.", f".{leader}.")])


@pytest.mark.parametrize("trained_share, requested_share", [("kv", "weights"), ("weights", "kv")])
def test_fine_tuning_a_language_model_may_change_what_its_layers_share(
    trained_share, requested_share
):
    """K/V sharing keeps each follower's Q, S sharing its V: the one lacking starts from the
    leader's (decoding refuses the other kind of sharing: test_transformer_lm_san.py)."""
    from helpers import build_lm

    policy = ["--san-decoder-self-policy", "2,4"]
    checkpoint, _ = build_lm([*policy, "--san-self-share", trained_share], dictionary=DICT)
    model, _ = build_lm([*policy, "--san-self-share", requested_share], dictionary=DICT, seed=2)
    source = fine_tune(model, checkpoint)
    needed = "v_proj" if requested_share == "weights" else "q_proj"
    loaded = model.state_dict()
    for layer, leader in ((1, 0), (3, 2), (4, 2), (5, 2)):
        key = f"decoder.layers.{layer}.self_attn.{needed}.weight"
        assert key not in source
        assert torch.equal(loaded[key], source[key.replace(f".{layer}.", f".{leader}.")])


def test_fine_tuning_still_refuses_a_checkpoint_of_another_model():
    from fairseq_san.checkpoints import VocabularyMismatch

    checkpoint, _ = build(policy_argv("6", "6"), dictionary=make_dictionary(30))
    model, _ = build(policy_argv("1,5", None), dictionary=DICT)
    with pytest.raises(VocabularyMismatch, match="other dictionaries"):
        fine_tune(model, checkpoint)


@pytest.mark.parametrize(
    "last_exists, continue_once, fine_tunes",
    [(False, None, True), (True, None, False), (False, "other.pt", False)],
)
def test_only_the_finetune_checkpoints_load_starts_from_its_blocks(
    tmp_path, last_exists, continue_once, fine_tunes
):
    """fairseq loads --finetune-from-model only on a first launch (no checkpoint_last.pt in
    --save-dir, no --continue-once); resuming the run must match its own policy again."""
    from types import SimpleNamespace

    from fairseq_san.fairseq_fixes.restore_file import _checking
    from fairseq_san.models.checkpoint_policy import is_fine_tuning

    (tmp_path / "start.pt").write_bytes(b"")
    if last_exists:
        (tmp_path / "checkpoint_last.pt").write_bytes(b"")
    cfg = SimpleNamespace(restore_file="checkpoint_last.pt", save_dir=str(tmp_path),
                          finetune_from_model=str(tmp_path / "start.pt"),
                          continue_once=continue_once)  # fmt: skip
    loading = _checking(lambda cfg, trainer: is_fine_tuning())
    seen = loading(cfg, SimpleNamespace(checkpoint_suffix=""))
    assert seen is fine_tunes
    assert not is_fine_tuning()


def test_fine_tuning_moves_an_encoder_block_as_a_decoder_one():
    """Encoder self-attention {3,3} -> {4,2}: layer 5 (index 4) followed layer 4's block; it
    starts with layer 4's q/k and keeps its own V (Eq. 4 shares S, not V)."""
    checkpoint, _ = build(policy_argv(None, None, "3,3"), dictionary=DICT, seed=67)
    model, _ = build(policy_argv(None, None, "4,2"), dictionary=DICT, seed=68)
    source = fine_tune(model, checkpoint)
    loaded = model.state_dict()
    assert set(loaded) - set(source) == {
        f"encoder.layers.4.self_attn.{p}_proj.{w}" for p in "qk" for w in ("weight", "bias")
    }
    for proj in ("q_proj", "k_proj"):
        key = f"encoder.layers.4.self_attn.{proj}.weight"
        assert torch.equal(loaded[key], source[key.replace(".4.", ".3.")])
    assert torch.equal(loaded["encoder.layers.4.self_attn.v_proj.weight"],
                       source["encoder.layers.4.self_attn.v_proj.weight"])  # fmt: skip


def test_a_state_dict_with_no_decoder_layers_is_no_plugin_checkpoint():
    """fairseq's own model failing to load another model's state dict (RoBERTa's
    encoder.sentence_encoder.layers.N, an encoder-only model): the plugin's explanation raised
    KeyError: 'decoder' in place of fairseq's error listing the keys."""
    model = build_fairseq_transformer([], dictionary=make_dictionary())[0]
    roberta = {"encoder.sentence_encoder.layers.0.self_attn.k_proj.weight": torch.zeros(1)}
    assert plugin_checkpoint_problem(model, roberta) is None


@pytest.mark.parametrize(
    "argv, lm, share",
    [
        (["--san-decoder-encdec-policy", "3,3"], False, "output"),
        (["--san-decoder-encdec-policy", "3,3", "--san-encdec-share", "weights"], False, "weights"),
        (["--san-decoder-self-policy", "2,4"], True, "weights"),
        (["--san-decoder-self-policy", "2,4", "--san-self-share", "kv"], True, "kv"),
    ],
)  # fmt: skip
def test_what_following_layers_shared_is_read_from_the_projections_they_kept(argv, lm, share):
    """Each role of a following layer keeps other projections (KEPT_PROJECTIONS): a checkpoint
    says how its blocks shared; projections no role keeps are no SAN checkpoint."""
    from fairseq_san.errors import UsageError
    from fairseq_san.models.checkpoint_policy import followers_share

    model = (build_lm if lm else build)(argv, dictionary=DICT)[0]
    attention = "self_attn" if lm else "encoder_attn"
    state = model.state_dict()
    assert followers_share(state, [2, 4] if lm else [3, 3], attention) == share
    follower = 4  # a follower of the model's own blocks, given all three: no role keeps them
    for name in ("q_proj", "k_proj", "v_proj"):
        state.setdefault(f"decoder.layers.{follower}.{attention}.{name}.weight", torch.zeros(1))
    with pytest.raises(UsageError, match="keep the projections q_proj, k_proj, v_proj, which no"):
        followers_share(state, [2, 4] if lm else [3, 3], attention)
