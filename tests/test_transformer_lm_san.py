"""``transformer_lm_san``: fairseq's transformer_lm with a decoder self-attention policy, shared
by attention weights (SAN) or by keys and values (CLA); with no policy it is transformer_lm."""

import argparse
import json
import re

import pytest
import torch

from helpers import (
    TINY_LM,
    StandInTask,
    attention_block,
    build_lm,
    count_parameters,
    make_dictionary,
    target_prefixes,
)
from fairseq_san.models.transformer_lm_san import TransformerLMSANModel
from fairseq_san.modules.kv_shared_attention import KVFollowerAttention, KVLeaderAttention
from fairseq_san.modules.shared_attention import SharedWeightsAttention
from fairseq_san.policy import PolicyError

DICT = make_dictionary(24)
DIM = 16  # TINY_LM's decoder-embed-dim


def logits(model, tokens):
    with torch.no_grad():
        return model(tokens)[0]


def incremental(model, tokens):
    """Logits of every position, one token at a time through the incremental state."""
    state, steps = {}, []
    with torch.no_grad():
        for end in range(1, tokens.size(1) + 1):
            steps.append(model.decoder(tokens[:, :end], incremental_state=state)[0])
    return torch.cat(steps, dim=1), state


def test_without_policy_it_is_fairseqs_transformer_lm():
    """fairseq's weights loaded into the plugin's model give fairseq's logits (built from other
    seeds, so that the load is what makes them equal)."""
    theirs, _ = build_lm(arch="transformer_lm", seed=1)
    ours, _ = build_lm(seed=2)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert not torch.equal(ours.decoder.layers[0].fc1.weight, theirs.decoder.layers[0].fc1.weight)
    ours.load_state_dict(theirs.state_dict())
    tokens = target_prefixes(DICT, 3, 7)
    torch.testing.assert_close(logits(ours, tokens), logits(theirs, tokens), atol=0, rtol=0)


def build_as_fairseq_train(arch: str, argv=(), seed: int = 1):
    """``arch`` built as fairseq-train builds it from its command line: parsed (the architecture
    function applied), converted to its configuration (a dataclass model, as fairseq's
    ``transformer_lm``, takes its dataclass's defaults for the fields not given), then built by
    fairseq's ``build_model`` as the task's does. In eval mode."""
    from fairseq import models
    from fairseq import options as fairseq_options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    parser = fairseq_options.get_training_parser()
    args = fairseq_options.parse_args_and_arch(
        parser, ["unused-data-dir", "--task", "language_modeling", "--arch", arch, *TINY_LM, *argv]
    )
    torch.manual_seed(seed)
    return models.build_model(convert_namespace_to_omegaconf(args).model, StandInTask(DICT)).eval()


# What base_lm_architecture sets that fairseq's dataclass defaults do not: pre-norm, and input and
# output widths the layers' (DIM).
NAMED_ARCHITECTURE = ["--decoder-normalize-before", "--decoder-input-dim", str(DIM),
                      "--decoder-output-dim", str(DIM)]  # fmt: skip


@pytest.mark.parametrize(
    "argv", [[], ["--character-embeddings", "--character-filters", "[(1, 4), (2, 8)]"]],
)  # fmt: skip
def test_it_is_fairseqs_transformer_lm_as_its_named_architectures_build_it(argv):
    """fairseq-train's bare ``--arch transformer_lm`` takes its dataclass's defaults (post-norm,
    input and output widths 512); the plugin's, as fairseq's named architectures, those of
    ``base_lm_architecture``: fairseq's given them as flags is the same model (same shapes, and
    fairseq's weights give its logits). --character-embeddings failed (AttributeError:
    'character_filters', a field base_lm_architecture leaves unset)."""
    theirs = build_as_fairseq_train("transformer_lm", [*NAMED_ARCHITECTURE, *argv], seed=1)
    ours = build_as_fairseq_train("transformer_lm_san", argv, seed=2)
    shapes = {key: value.shape for key, value in theirs.state_dict().items()}
    assert {key: value.shape for key, value in ours.state_dict().items()} == shapes
    assert ours.decoder.embed_dim == DIM and ours.decoder.output_embed_dim == DIM
    ours.load_state_dict(theirs.state_dict())
    tokens = target_prefixes(DICT, 3, 7)
    torch.testing.assert_close(logits(ours, tokens), logits(theirs, tokens), atol=0, rtol=0)


@pytest.mark.parametrize("share", ["weights", "kv"])
def test_followers_drop_exactly_two_projections(share):
    base, _ = build_lm()
    shared, _ = build_lm(["--san-decoder-self-policy", "1,3,2", "--san-self-share", share])
    followers = 3  # layers 2, 3 and 5 (0-based) follow their block's first layer
    assert count_parameters(base) - count_parameters(shared) == followers * 2 * (DIM * DIM + DIM)
    dropped = {"weights": ("q_proj", "k_proj"), "kv": ("k_proj", "v_proj")}[share]
    for index in (2, 3, 5):
        names = dict(shared.decoder.layers[index].self_attn.named_children())
        assert not set(dropped) & set(names)


def test_a_share_left_unset_is_san_attention_weights():
    """``san_self_share`` None (an override or a keyword set to None) means its default, as the
    architecture function fills every option left unset."""
    _, args = build_lm(["--san-decoder-self-policy", "3,3"])
    args.san_self_share = None
    model = TransformerLMSANModel.build_model(args, StandInTask(DICT))
    assert model.self_share == "weights"
    assert isinstance(model.decoder.layers[1].self_attn, SharedWeightsAttention)


@pytest.mark.parametrize("share", ["weights", "kv"])
def test_incremental_decoding_equals_the_full_forward(share):
    model, _ = build_lm(["--san-decoder-self-policy", "2,4", "--san-self-share", share])
    tokens = target_prefixes(DICT, 2, 6)
    steps, _ = incremental(model, tokens)
    torch.testing.assert_close(steps, logits(model, tokens), atol=1e-5, rtol=0)


def test_kv_followers_keep_no_cache_and_san_followers_only_values():
    tokens = target_prefixes(DICT, 2, 5)
    kv, _ = build_lm(["--san-decoder-self-policy", "3,3", "--san-self-share", "kv"])
    san, _ = build_lm(["--san-decoder-self-policy", "3,3"])
    _, kv_state = incremental(kv, tokens)
    _, san_state = incremental(san, tokens)

    def cached(model, state, index):
        module = model.decoder.layers[index].self_attn
        buffer = module.get_incremental_state(state, "attn_state") or {}
        return sorted(name for name, value in buffer.items() if value is not None)

    assert isinstance(kv.decoder.layers[1].self_attn, KVFollowerAttention)
    assert isinstance(kv.decoder.layers[3].self_attn, KVLeaderAttention)
    assert isinstance(san.decoder.layers[1].self_attn, SharedWeightsAttention)
    assert cached(kv, kv_state, 0) == ["prev_key", "prev_value"]
    assert cached(kv, kv_state, 1) == []
    assert cached(san, san_state, 1) == ["prev_value"]


def test_kv_followers_use_the_leaders_keys_and_values():
    """Layer 1 of block {2}: its own queries over layer 0's K, V (CLA), checked by hand."""
    model, _ = build_lm(["--san-decoder-self-policy", "2,1,1,1,1", "--san-self-share", "kv"])
    tokens = target_prefixes(DICT, 1, 4)
    seen = {}
    layers = model.decoder.layers
    layers[0].self_attn.register_forward_hook(
        lambda m, a, kw, o: seen.update(x0=kw["query"]), with_kwargs=True
    )
    layers[1].self_attn.register_forward_hook(
        lambda m, a, kw, o: seen.update(x1=kw["query"], out1=o[0]), with_kwargs=True
    )
    logits(model, tokens)
    leader, follower = layers[0].self_attn, layers[1].self_attn
    q = follower.q_proj(seen["x1"]) * follower.scaling
    k, v = leader.k_proj(seen["x0"]), leader.v_proj(seen["x0"])
    heads, d = follower.num_heads, follower.head_dim
    q, k, v = (t.view(4, heads, d).transpose(0, 1) for t in (q, k, v))
    mask = torch.triu(torch.full((4, 4), float("-inf")), 1)
    context = torch.softmax(q @ k.transpose(1, 2) + mask, -1) @ v
    expected = follower.out_proj(context.transpose(0, 1).reshape(4, 1, heads * d))
    torch.testing.assert_close(seen["out1"], expected, atol=1e-5, rtol=0)


def _kv_block(dropout: float = 0.0):
    """fairseq's self-attention, a KV leader of its weights and a follower of its Q and output."""
    reference, leader, follower, _ = attention_block(
        KVLeaderAttention, KVFollowerAttention, dropout, follower_keeps=("q_", "out_")
    )
    return reference, leader, follower


# Sentence 1 left-padded by 2: its queries see padded keys under the causal mask.
PADDING = torch.tensor([[False] * 5, [True, True, False, False, False]])
CAUSAL = torch.triu(torch.full((5, 5), float("-inf")), 1)


def test_a_kv_leader_is_fairseqs_self_attention_and_a_follower_of_its_q_the_same():
    """Padding and causal masks, dropout in training (the same draws), before_softmax: the
    leader computes what fairseq's attention does; a follower with the leader's Q and output
    projections computes it again from the block's K, V and padding."""
    reference, leader, follower = _kv_block(dropout=0.5)
    x = torch.randn(5, 2, 16)
    masks = dict(key_padding_mask=PADDING, attn_mask=CAUSAL)
    torch.manual_seed(1)  # an incremental state keeps fairseq off its fused path
    expected, _ = reference.train()(x, x, x, incremental_state={}, **masks)
    torch.manual_seed(1)
    actual, _ = leader.train()(x, x, x, **masks)
    torch.testing.assert_close(actual[2:], expected[2:])  # sentence 1's queries 0, 1: pads only
    leader.eval()
    leader(x, x, x, **masks)
    followed, _ = follower.eval()(x, x, x, **masks)
    torch.testing.assert_close(followed[2:], leader(x, x, x, **masks)[0][2:])
    before = reference.eval()(x, x, x, incremental_state={}, before_softmax=True, **masks)
    for a, b in zip(leader(x, x, x, before_softmax=True, **masks), before):
        torch.testing.assert_close(a, b)


def test_a_kv_leaders_incremental_steps_keep_the_padding_of_earlier_steps():
    """Step by step (one query and its padding flag a step) as the full forward: the cached
    padding mask keeps a left-padded sentence's early keys hidden from its later queries."""
    _, leader, _ = _kv_block()
    x = torch.randn(5, 2, 16)
    full, _ = leader.eval()(x, x, x, key_padding_mask=PADDING, attn_mask=CAUSAL)
    state = {}
    steps = []
    for t in range(5):
        step = x[t : t + 1]
        padding = PADDING[:, t : t + 1]
        steps.append(leader(step, step, step, key_padding_mask=padding, incremental_state=state)[0])
    torch.testing.assert_close(torch.cat(steps)[2:], full[2:])


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--san-policy", '{"decoder_encdec": [3, 3]}'], 'policy key "decoder_encdec" is for encoder-decoder models'),
        (["--san-policy", '{"encoder_self": [6]}'], 'policy key "encoder_self" is for encoder-decoder models'),
        (["--san-decoder-self-policy", "2,2"], "sums to 4 but the decoder has 6 layers"),
    ],
)
def test_bad_policies_are_refused(argv, message):
    with pytest.raises(PolicyError, match=message):
        build_lm(argv)


@pytest.mark.parametrize(
    "override, value, message",
    [
        ("san_encoder_self_policy", "6", "san_encoder_self_policy '6' is an option of "
         "transformer_san"),
        ("decoder_self_attention_type", "aan", "decoder_self_attention_type 'aan' is an option of"),
        ("san_fast_decoding", True, "san_fast_decoding True is an option of transformer_san"),
        ("san_self_share", "KV", "san_self_share 'KV' (from the checkpoint, --model-overrides or "
         "a keyword argument) is not valid; valid values: weights, kv"),
    ],
)  # fmt: skip
def test_overrides_the_language_model_would_ignore_or_fail_on_are_refused(override, value, message):
    """--model-overrides (or a hub keyword) sets options the parser never checked: a translation
    model's option would be ignored, a value outside san_self_share's choices a KeyError."""
    from fairseq_san.errors import UsageError

    _, args = build_lm(["--san-decoder-self-policy", "3,3"])
    setattr(args, override, value)
    with pytest.raises(UsageError, match=re.escape(message)):
        TransformerLMSANModel.build_model(args, StandInTask(DICT))


@pytest.mark.parametrize("legacy", [False, True], ids=["task cfg", "legacy task args"])
@pytest.mark.parametrize(
    "decoding, message",
    [("static", "san_decoding 'static' is a model option here (--model-overrides or the "
      "checkpoint), which does not choose the decoder: this command decodes with 'fairseq'. Pass "
      "--san-decoding static on the command line (with --task language_modeling_san) instead"),
     ("fast", "san_decoding 'fast' (from the checkpoint, --model-overrides or a keyword argument) "
      "is not valid; valid values: fairseq, static (give a valid one as --san-decoding on the "
      "command line, with --task language_modeling_san)")],
)  # fmt: skip
def test_a_decoding_in_the_language_models_overrides_is_refused(legacy, decoding, message):
    """fairseq-generate builds the generator from its own task: the language model ignored
    ``--model-overrides "{'san_decoding': 'static'}"`` (the translation model refused it), and
    under fairseq's ``--task language_modeling``, a legacy task whose options are its ``args``,
    it still did."""
    from fairseq_san.errors import UsageError
    from fairseq_san.tasks.language_modeling_san import LanguageModelingSANConfig

    _, args = build_lm(["--san-decoder-self-policy", "3,3"])
    args.san_decoding = decoding
    task = StandInTask(DICT)
    if legacy:
        task.args = argparse.Namespace(task="language_modeling")
    else:
        task.cfg = LanguageModelingSANConfig()
    with pytest.raises(UsageError) as refused:
        TransformerLMSANModel.build_model(args, task)
    assert str(refused.value) == message


def test_analysis_of_a_model_whose_task_cannot_analyse_is_refused():
    """fairseq-validate --san-analysis-dir on a language model trained with --task
    language_modeling: that task has no analysis and would write nothing; one error names the
    override that switches the task."""
    from fairseq_san.errors import UsageError

    _, args = build_lm(["--san-decoder-self-policy", "3,3"])
    args.san_analysis_dir = "analysis"
    with pytest.raises(UsageError, match="--san-analysis-dir needs the task language_modeling_san"):
        TransformerLMSANModel.build_model(args, StandInTask(DICT))


@pytest.mark.parametrize("trained, loaded", [("weights", "kv"), ("kv", "weights")])
def test_a_checkpoint_shared_the_other_way_is_refused(trained, loaded):
    source, _ = build_lm(["--san-decoder-self-policy", "3,3", "--san-self-share", trained])
    target, _ = build_lm(["--san-decoder-self-policy", "3,3", "--san-self-share", loaded])
    with pytest.raises(PolicyError, match=f"trained with .*--san-self-share {trained}\\), this model"
                       ) as refused:  # fmt: skip
        target.load_state_dict(source.state_dict())
    assert str(refused.value).endswith(  # decoding takes no --san-* flag: what decoding needs
        f"""To continue training it, pass --san-policy '{{"decoder_self": [3, 3]}}' """
        f"--san-self-share {trained}; to decode it, leave san_self_share out of --model-overrides."
    )


def test_a_checkpoint_that_shares_more_is_refused_and_one_that_shares_less_loads():
    more, _ = build_lm(["--san-decoder-self-policy", "6"], seed=1)
    less, _ = build_lm(["--san-decoder-self-policy", "3,3"], seed=2)
    with pytest.raises(PolicyError) as refused:
        less.load_state_dict(more.state_dict())
    assert str(refused.value) == (
        "the checkpoint was trained with more attention sharing (decoder_self {6}) than this "
        "model (decoder_self {3,3}): it has no projections for decoder.layers.3.self_attn. To "
        """continue training it, pass --san-policy '{"decoder_self": [6]}' --san-self-share """
        "weights; to train this policy from it, start a new run with --finetune-from-model; to "
        "decode it, use a policy that shares at least as much as the checkpoint's."
    )
    source = less.state_dict()
    more.load_state_dict(dict(source))  # decoding with more sharing drops projections
    kept = more.state_dict()
    assert set(source) - set(kept) == {
        f"decoder.layers.3.self_attn.{p}_proj.{w}" for p in "qk" for w in ("weight", "bias")
    }  # layer 4 led a block of 3,3; under {6} it follows layer 1
    for key, value in kept.items():
        assert torch.equal(value, source[key]), key


def test_a_checkpoint_whose_blocks_moved_is_refused_as_such():
    """{3,3} -> {4,2}: neither shares more; it was said as "more attention sharing"."""
    trained, _ = build_lm(["--san-decoder-self-policy", "3,3"], seed=1)
    moved, _ = build_lm(["--san-decoder-self-policy", "4,2"], seed=2)
    with pytest.raises(PolicyError) as refused:
        moved.load_state_dict(trained.state_dict())
    assert str(refused.value).startswith(
        "the checkpoint's attention sharing (decoder_self {3,3}) and this model's (decoder_self "
        "{4,2}) have blocks with other borders: it has no projections for "
        "decoder.layers.4.self_attn, which followed a block's first layer in the checkpoint."
    )
    assert "start a new run with --finetune-from-model" in str(refused.value)


def test_the_resolved_policy_is_kept_in_the_arguments_for_the_checkpoint():
    _, args = build_lm(["--san-policy", '{"decoder_self": [3, 3]}', "--san-self-share", "kv"])
    assert json.loads(args.san_policy)["decoder_self"] == [3, 3]
    assert args.san_decoder_self_policy is None and args.san_self_share == "kv"
    rebuilt, _ = build_lm(["--san-policy", args.san_policy, "--san-self-share", "kv"])
    assert isinstance(rebuilt.decoder.layers[4].self_attn, KVFollowerAttention)


def test_pruned_layers_load_as_into_fairseqs_transformer_lm():
    """``--model-overrides "{'decoder_layers_to_keep': '0,2,4'}"``: fairseq prunes the checkpoint
    as it loads it; the plugin checked the whole checkpoint first (6 layers for a model of 3) and
    refused it as another architecture."""
    trained, _ = build_lm(arch="transformer_lm", seed=1)
    pruned = {}
    for arch in ("transformer_lm", "transformer_lm_san"):
        model, args = build_lm(["--decoder-layers-to-keep", "0,2,4"], arch=arch, seed=2)
        model.load_state_dict(dict(trained.state_dict()), model_cfg=args)
        pruned[arch] = model
    assert len(pruned["transformer_lm_san"].decoder.layers) == 3
    assert torch.equal(pruned["transformer_lm_san"].decoder.layers[1].fc1.weight,
                       trained.decoder.layers[2].fc1.weight)  # fmt: skip
    tokens = target_prefixes(DICT, 3, 7)
    torch.testing.assert_close(
        logits(pruned["transformer_lm_san"], tokens), logits(pruned["transformer_lm"], tokens),
        atol=0, rtol=0,
    )  # fmt: skip


def test_pruning_layers_of_a_sharing_model_is_refused():
    """The policy's blocks count the layers before pruning: "policy [2, 4] sums to 6 but there
    are 3 layers" came from deep inside the build, naming neither."""
    with pytest.raises(PolicyError) as refused:
        build_lm(["--san-decoder-self-policy", "2,4", "--decoder-layers-to-keep", "0,2,4"])
    assert str(refused.value) == (
        "decoder_self sharing cannot be combined with --decoder-layers-to-keep: pruning layers may "
        "drop a block's first layer, and the policy's blocks count the layers before pruning"
    )


UNUSED_KV = "--san-self-share kv has no effect: this model shares no decoder self-attention"


@pytest.mark.parametrize(
    "policy, warned",
    [([], True), (["--san-decoder-self-policy", "1,1,1,1,1,1"], True),
     (["--san-decoder-self-policy", "2,4"], False)],
)  # fmt: skip
def test_kv_sharing_without_a_policy_is_a_warning(policy, warned, caplog):
    """``--san-self-share kv`` with no block of 2 or more layers changes nothing: said, as
    ``--san-encdec-share weights`` is for a translation model; not for a checkpoint's model (its
    arguments, saved, rebuild it to decode)."""
    _, args = build_lm(["--san-self-share", "kv", *policy])
    assert (UNUSED_KV in caplog.text) == warned
    caplog.clear()
    TransformerLMSANModel.build_model(args, StandInTask(DICT))
    build_lm(policy)  # SAN's weights, the default
    assert UNUSED_KV not in caplog.text


ADAPTIVE_SOFTMAX = ["--criterion", "adaptive_loss", "--ddp-backend", "legacy_ddp",
                    "--adaptive-softmax-cutoff"]  # fmt: skip


@pytest.mark.parametrize(
    "argv, said",
    [(["--adaptive-input", "--adaptive-input-cutoff", "10,30"],
      "--adaptive-input-cutoff 10,30: the bands' ends must increase from above 0 to at most the "
      "dictionary's size, 24 words"),
     ([*ADAPTIVE_SOFTMAX, "12,8"], "--adaptive-softmax-cutoff 12,8: the bands' ends must increase"),
     (["--adaptive-input", "--adaptive-input-cutoff", "10,20", "--adaptive-input-factor", "8"],
      "--adaptive-input-cutoff makes 3 bands, and the last is 16 // 8^2 = 0 wide"),
     ([*ADAPTIVE_SOFTMAX, "10,20", "--adaptive-softmax-factor", "8"],
      "--adaptive-softmax-cutoff makes 3 bands, and the last is 16 // 8^2 = 0 wide")],
)  # fmt: skip
def test_adaptive_bands_beyond_the_dictionary_are_one_line(argv, said):
    """Adaptive bands that do not increase up to at most the dictionary's size: fairseq's
    "AssertionError: cannot specify cutoff larger than vocab size", or an embedding of negative
    size, as the model was built; a last band 0 wide: a ZeroDivisionError (adaptive input), or a
    model whose last band's words were untrainable (adaptive softmax, silently)."""
    from fairseq_san.errors import UsageError

    with pytest.raises(UsageError, match=re.escape(said)):
        build_lm(argv, dictionary=DICT)


def test_a_checkpoint_with_a_band_0_wide_still_builds_with_a_warning(caplog):
    """A checkpoint trained with an adaptive softmax whose last band is 0 wide (before the check)
    decodes as it was trained: warned, not refused as a new training is."""
    from fairseq_san.errors import UsageError

    argv = [*ADAPTIVE_SOFTMAX, "10,20", "--adaptive-softmax-factor", "8"]
    _, args = build_lm([*ADAPTIVE_SOFTMAX, "10,20"], dictionary=DICT)
    trained = argparse.Namespace(**{**vars(args), "adaptive_softmax_factor": 8.0})
    assert trained.plugin  # stamped as a checkpoint's configuration is
    TransformerLMSANModel.build_model(trained, StandInTask(DICT))
    assert "makes 3 bands, and the last is 16 // 8^2 = 0 wide" in caplog.text
    with pytest.raises(UsageError, match="0 wide"):
        build_lm(argv, dictionary=DICT)


def test_tied_adaptive_bands_written_with_spaces_are_the_same_bands():
    """``--adaptive-input-cutoff "10, 20"`` with ``--adaptive-softmax-cutoff 10,20`` names the
    same bands, and the tied model shares them: fairseq compared the two as text and asserted
    (``AssertionError: 10,20 != 10, 20``)."""
    argv = ["--adaptive-input", "--adaptive-input-cutoff", "10, 20", *ADAPTIVE_SOFTMAX, "10,20",
            "--tie-adaptive-weights"]  # fmt: skip
    model, _ = build_lm(argv, dictionary=DICT)
    tail = model.decoder.adaptive_softmax.tail[0]
    assert tail[-1].weight is model.decoder.embed_tokens.embeddings[1][0].weight
