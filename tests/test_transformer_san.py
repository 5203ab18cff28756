"""Tests for the ``transformer_san`` model (Xiao et al., IJCAI 2019, section 3.2).

Covers: equivalence with fairseq's transformer when nothing is shared, incremental decoding
against the full teacher-forced pass for many policies, beam search with reordering against
prefix recomputation and against a beam search of our own, exact parameter counts, the policy
stored in the checkpoint arguments, bad input and the no-cache mode. The shared attention
modules, the fast decoding attention, the checkpoint's policy and AAN have test files of their
own (test_shared_attention.py, test_decoding_attention.py, test_checkpoint_policy.py,
test_average_attention.py).
"""

import argparse
import copy
import json
import math
import re
from typing import Dict, List

import pytest
import torch
from torch import Tensor

from fairseq.models.transformer import TransformerModel
from fairseq.modules import LayerDropModuleList
from helpers import (
    AAN,
    ATOL,
    BEAM_BATCH,
    POLICIES,
    StandInTask,
    assert_same_hypotheses,
    build,
    build_fairseq_transformer,
    build_lm,
    count_parameters,
    decoder_logits,
    generate,
    incremental_logits,
    make_dictionary,
    max_diff,
    parse_args,
    policy_argv,
    record_reorders,
    shrank,
    single_process_base_layers,
    source_batch,
    staggering_eos_bonus,
    target_prefixes,
)
from fairseq_san.models.transformer_san import TransformerSANModel
from fairseq_san.modules.shared_attention import SharedContextAttention, SharedWeightsAttention
from fairseq_san.policy import KINDS, PolicyError

DICT = make_dictionary(24)


# --- equivalence with fairseq's transformer ---------------------------------------------------


def test_no_sharing_equals_fairseq_transformer():
    baseline, _ = build_fairseq_transformer(dictionary=DICT, seed=3)
    san, _ = build(dictionary=DICT, seed=4)  # different init, then baseline's weights
    assert {k: v.shape for k, v in san.state_dict().items()} == {
        k: v.shape for k, v in baseline.state_dict().items()
    }
    assert max(max_diff(a, b) for a, b in zip(san.parameters(), baseline.parameters())) > 0.01
    san.load_state_dict(baseline.state_dict(), strict=True, model_cfg=None)

    src_tokens, src_lengths = source_batch(DICT, [7, 2, 5, 4], seed=1)
    assert src_tokens.eq(DICT.pad()).any()  # the batch has source padding
    prev = target_prefixes(DICT, 4, 6, seed=2)
    expected = decoder_logits(baseline, src_tokens, src_lengths, prev)
    actual = decoder_logits(san, src_tokens, src_lengths, prev)
    assert max_diff(expected, actual) <= ATOL

    src_tokens, src_lengths = source_batch(DICT, [6, 3, 8, 4], seed=5)
    kwargs = dict(beam=4, min_len=3, max_len_a=0, max_len_b=9)
    assert_same_hypotheses(
        generate(baseline, DICT, src_tokens, src_lengths, **kwargs),
        generate(san, DICT, src_tokens, src_lengths, **kwargs),
        atol=ATOL,
    )


@pytest.mark.parametrize("modules", ["TransformerDecoder", "TransformerEncoder,MultiheadAttention"])
def test_retain_dropout_modules_keep_fairseqs_dropouts(modules):
    """``--retain-dropout-modules`` (fairseq's text, matched as a substring) keeps the dropouts
    it keeps in fairseq's transformer: the decoder's was named after the plugin's class."""

    def kept(model) -> List[str]:
        cfg = argparse.Namespace(
            generation=argparse.Namespace(retain_dropout=True, retain_dropout_modules=modules)
        )
        model.prepare_for_inference_(cfg)
        return [name for name, module in model.named_modules()
                if getattr(module, "apply_during_inference", False)]  # fmt: skip

    baseline, _ = build_fairseq_transformer(dictionary=DICT)
    expected = kept(baseline)
    assert expected and kept(build(dictionary=DICT)[0]) == expected


@pytest.mark.parametrize(
    "modules, unknown",
    [("TransformerDecodr", "TransformerDecodr"), ("TransformerEncoder,Transformer", "Transformer"),
     (["TransformerDecoderLayer"], "TransformerDecoderLayer"), ("", "''")],
)  # fmt: skip
def test_retain_dropout_modules_that_name_no_dropout_are_refused(modules, unknown):
    """A misspelt ``--retain-dropout-modules`` name kept no dropout, silently: it is refused,
    naming the modules that have one."""
    from fairseq_san.errors import UsageError

    cfg = argparse.Namespace(
        generation=argparse.Namespace(retain_dropout=True, retain_dropout_modules=modules)
    )
    with pytest.raises(UsageError) as refused:
        build(AAN, dictionary=DICT)[0].prepare_for_inference_(cfg)
    assert str(refused.value) == (
        f"--retain-dropout-modules {unknown}: no dropout of this TransformerSANModel is named "
        "so, and fairseq would keep none for it; its modules with dropout are AverageAttention, "
        "MultiheadAttention, TransformerDecoder, TransformerDecoderLayerBase, TransformerEncoder, "
        "TransformerEncoderLayerBase"
    )


# --- modules and incremental decoding ---------------------------------------------------------


@pytest.mark.parametrize("name", list(POLICIES))
def test_incremental_decoding_equals_full_forward(name):
    model, _ = build(POLICIES[name], dictionary=DICT, seed=7)
    src_tokens, src_lengths = source_batch(DICT, [5, 3, 8, 2], seed=11)
    prev = target_prefixes(DICT, 4, 8, seed=12)
    full = decoder_logits(model, src_tokens, src_lengths, prev)
    state: Dict = {}
    steps = incremental_logits(model, src_tokens, src_lengths, prev, state)
    assert max_diff(full, steps) <= ATOL
    # Following self-attention layers cache their values only (no keys): their q/k are gone.
    for layer in model.decoder.layers:
        if isinstance(layer.self_attn, SharedWeightsAttention):
            cached = layer.self_attn._get_input_buffer(state)
            assert set(cached) == {"prev_value"}
            assert cached["prev_value"].shape[:3] == (4, 2, prev.size(1))
        if isinstance(layer.encoder_attn, SharedContextAttention):
            assert layer.encoder_attn._get_input_buffer(state) == {}


@pytest.mark.parametrize(
    "argv", [POLICIES["self15-encdec33-enc24"], POLICIES["self15-encdec33-weights"], AAN + ["--san-decoder-encdec-policy", "3,3"]],
    ids=["san-output", "san-weights", "aan-encdec33"],
)
@pytest.mark.parametrize("same_source", [False, True], ids=["beam-groups", "any-permutation"])
def test_reorder_incremental_state(argv, same_source):
    """After a few cached steps, reorder the hypotheses and continue: the outputs must be those
    of the full forward pass on the reordered prefixes (followers' cached values included)."""
    model, _ = build(argv, dictionary=DICT, seed=21)
    if same_source:
        # One source for all rows: any permutation (as across beams of one sentence).
        src_tokens, src_lengths = source_batch(DICT, [5], seed=1)
        src_tokens, src_lengths = src_tokens.repeat(6, 1), src_lengths.repeat(6)
        new_order = torch.tensor([5, 3, 0, 0, 4, 2])
    else:
        # Two sentences, three "beams" each; reordering within each sentence like beam search.
        src_tokens, src_lengths = source_batch(DICT, [6, 3], seed=1)
        src_tokens = src_tokens.repeat_interleave(3, dim=0)
        src_lengths = src_lengths.repeat_interleave(3)
        new_order = torch.tensor([2, 2, 0, 4, 5, 3])
    prev = target_prefixes(DICT, 6, 4, seed=2)
    continuation = target_prefixes(DICT, 6, 5, seed=3)[:, 1:]
    assert prev[new_order].tolist() != prev.tolist()

    state: Dict = {}
    with torch.no_grad():
        encoder_out = model.encoder(src_tokens, src_lengths=src_lengths)
        for t in range(prev.size(1)):
            model.decoder(prev[:, : t + 1], encoder_out=encoder_out, incremental_state=state)
        model.decoder.reorder_incremental_state_scripting(state, new_order)
        encoder_out = model.encoder.reorder_encoder_out(encoder_out, new_order)
        tokens = torch.cat([prev[new_order], continuation], dim=1)
        steps = [
            model.decoder(tokens[:, : t + 1], encoder_out=encoder_out, incremental_state=state)[0]
            for t in range(prev.size(1), tokens.size(1))
        ]
    full = decoder_logits(model, src_tokens[new_order], src_lengths[new_order], tokens)
    assert max_diff(full[:, prev.size(1) :], torch.cat(steps, dim=1)) <= ATOL


# --- beam search ------------------------------------------------------------------------------

BEAM_KWARGS = dict(min_len=4, max_len_a=0, max_len_b=10)
BEAM_MODELS = {
    "baseline": [],
    "self15-encdec33": POLICIES["self15-encdec33-enc24"],
    "self222-encdec6-weights": POLICIES["self222-encdec6-weights"],
    "aan": AAN,
    "aan-encdec33": AAN + ["--san-decoder-encdec-policy", "3,3"],
}


@pytest.mark.parametrize("early_eos", [False, True], ids=["long", "early-eos"])
@pytest.mark.parametrize("name", list(BEAM_MODELS))
def test_beam_search_equals_prefix_recomputation(name, early_eos):
    model, _ = build(BEAM_MODELS[name], dictionary=DICT, seed=31)
    src_tokens, src_lengths = source_batch(DICT, BEAM_BATCH, seed=32)
    if early_eos:
        staggering_eos_bonus(model, src_tokens, src_lengths, beam=4, **BEAM_KWARGS)
    orders = record_reorders(model)
    cached = generate(model, DICT, src_tokens, src_lengths, beam=4, **BEAM_KWARGS)
    # The beams were really reordered (a hypothesis moved to another slot) at several steps.
    beam_slots = torch.arange(orders[0].numel()) if orders else None
    reordered_steps = sum(
        1
        for order in orders
        if order.numel() == len(BEAM_BATCH) * 4 and not torch.equal(order, beam_slots)
    )
    assert reordered_steps >= 3
    assert shrank(orders, len(BEAM_BATCH) * 4) == early_eos
    model.decoder.recompute_prefix = True
    recomputed = generate(model, DICT, src_tokens, src_lengths, beam=4, **BEAM_KWARGS)
    assert_same_hypotheses(recomputed, cached)
    assert all(len(nbest) == 4 for nbest in cached)
    lengths = {len(h["tokens"]) for nbest in cached for h in nbest}
    assert min(lengths) >= BEAM_KWARGS["min_len"] + 1 and max(lengths) <= 11


def reference_beam_search(
    model, src: Tensor, beam: int, min_len: int, max_len: int, pad: int, eos: int
) -> List[Dict[str, Tensor]]:
    """A plain beam search over one sentence that calls the model's full forward pass on the
    whole prefix at every step (no incremental state), following fairseq's rules: 2 x beam
    candidates, a hypothesis ending in eos among the best ``beam`` candidates is finished,
    scores normalised by length, eos forbidden before ``min_len`` and forced at ``max_len``."""
    hyps: List[List[int]] = [[eos]]
    cumulative: List[List[float]] = [[]]
    finished: List[Dict[str, Tensor]] = []
    src_tokens, src_lengths = src[None], torch.tensor([src.numel()])
    with torch.no_grad():
        for step in range(max_len + 1):
            n = len(hyps)
            logits = model(src_tokens.expand(n, -1), src_lengths.expand(n), torch.tensor(hyps))
            lprobs = model.get_normalized_probs(logits, log_probs=True)[:, -1].clone()
            lprobs[:, pad] = -math.inf
            if step >= max_len:
                keep = lprobs[:, eos].clone()
                lprobs[:] = -math.inf
                lprobs[:, eos] = keep
            if step < min_len:
                lprobs[:, eos] = -math.inf
            totals = lprobs + torch.tensor([c[-1] if c else 0.0 for c in cumulative])[:, None]
            vocab = totals.size(1)
            flat = totals.view(-1)
            scores, indices = flat.topk(min(2 * beam, flat.numel() - 1))
            candidates = [
                (float(s), int(i) // vocab, int(i) % vocab) for s, i in zip(scores, indices)
            ]
            for score, source, token in candidates[:beam]:
                if token == eos and score != -math.inf and len(finished) < beam:
                    positional = cumulative[source] + [score]
                    positional = [positional[0]] + [
                        b - a for a, b in zip(positional, positional[1:])
                    ]
                    finished.append(
                        {
                            "tokens": torch.tensor(hyps[source][1:] + [eos]),
                            "score": torch.tensor(score / (step + 1)),
                            "positional_scores": torch.tensor(positional),
                        }
                    )
            if len(finished) == beam or step == max_len:
                break
            active = [
                c for c in candidates if not (c[2] == eos and c[0] != -math.inf)
            ][:beam]
            hyps = [hyps[source] + [token] for _, source, token in active]
            cumulative = [cumulative[source] + [score] for score, source, _ in active]
    return sorted(finished, key=lambda h: -float(h["score"]))


@pytest.mark.parametrize("early_eos", [False, True], ids=["long", "early-eos"])
@pytest.mark.parametrize("beam", [1, 4])
@pytest.mark.parametrize("name", ["self15-encdec33", "self222-encdec6-weights", "aan-encdec33"])
def test_sequence_generator_equals_own_full_forward_beam_search(name, beam, early_eos):
    """Not circular: our own search with the model's full forward pass, sentence by sentence
    (no padding, no incremental state, no fairseq generator code)."""
    model, _ = build(BEAM_MODELS[name], dictionary=DICT, seed=41)
    src_tokens, src_lengths = source_batch(DICT, BEAM_BATCH, seed=42)
    if early_eos:
        staggering_eos_bonus(model, src_tokens, src_lengths, beam=beam, **BEAM_KWARGS)
    fairseq_nbest = generate(model, DICT, src_tokens, src_lengths, beam=beam, **BEAM_KWARGS)
    ours = [
        reference_beam_search(
            model,
            row[row.ne(DICT.pad())],
            beam,
            BEAM_KWARGS["min_len"],
            BEAM_KWARGS["max_len_b"],
            DICT.pad(),
            DICT.eos(),
        )
        for row in src_tokens
    ]
    assert_same_hypotheses(ours, fairseq_nbest)


# --- parameter counts -------------------------------------------------------------------------

E, FFN, V, LAYERS = 256, 1024, 1000, 6
LINEAR = E * E + E  # one q/k/v/out projection: weight + bias
SMALL = ["--share-all-embeddings"]  # one 1000 x 256 embedding for source, target and output


def expected_parameters(self_followers: int = 0, encdec_followers: int = 0, share="output"):
    """transformer_san_small with --share-all-embeddings and a 1000-symbol joined dictionary.

    Sinusoidal positions have no parameters; post-norm, so no final layer norms.
    """
    attention = 4 * LINEAR
    ffn = (E * FFN + FFN) + (FFN * E + E)
    layer_norm = 2 * E
    encoder_layer = attention + ffn + 2 * layer_norm
    decoder_layer = 2 * attention + ffn + 3 * layer_norm
    total = V * E + LAYERS * encoder_layer + LAYERS * decoder_layer
    # A following self-attention layer has no q_proj/k_proj (Eq. 5); a following
    # encoder-decoder layer has no q/k/v in output mode (Eq. 6), no q/k in weights mode.
    dropped = self_followers * 2 + encdec_followers * (3 if share == "output" else 2)
    return total - dropped * LINEAR


@pytest.mark.parametrize(
    "argv, followers",
    [
        (["--san-decoder-self-policy", "1,5", "--san-decoder-encdec-policy", "3,3"], (4, 4, "output")),
        (
            ["--san-decoder-self-policy", "1,5", "--san-decoder-encdec-policy", "3,3",
             "--san-encdec-share", "weights"],
            (4, 4, "weights"),
        ),
        (["--san-decoder-self-policy", "6", "--san-decoder-encdec-policy", "6"], (5, 5, "output")),
        (["--san-encoder-self-policy", "2,4"], (0, 0, "output")),
    ],
    ids=["self15-encdec33", "self15-encdec33-weights", "self6-encdec6", "enc24"],  # none: below
)  # fmt: skip
def test_parameter_counts_transformer_san_small(argv, followers):
    dictionary = make_dictionary(V)
    model, _ = build(SMALL + argv, arch="transformer_san_small", dictionary=dictionary, tiny=False)
    assert model.encoder.embed_tokens is model.decoder.embed_tokens
    expected = expected_parameters(*followers)
    if "--san-encoder-self-policy" in argv:
        expected -= 4 * 2 * LINEAR  # {2,4}: 1 + 3 following encoder layers without q/k
    print(f"transformer_san_small {' '.join(argv)}: {count_parameters(model):,}")
    assert count_parameters(model) == expected


def test_parameter_count_no_sharing_equals_fairseq_transformer():
    dictionary = make_dictionary(V)
    dims = ["--encoder-embed-dim", "256", "--decoder-embed-dim", "256",
            "--encoder-ffn-embed-dim", "1024", "--decoder-ffn-embed-dim", "1024",
            "--encoder-attention-heads", "4", "--decoder-attention-heads", "4"]  # fmt: skip
    args = parse_args("transformer", dims + SMALL)
    baseline = TransformerModel.build_model(args, StandInTask(dictionary))
    san, _ = build(SMALL, arch="transformer_san_small", dictionary=dictionary, tiny=False)
    assert count_parameters(baseline) == count_parameters(san) == expected_parameters()


# --- the policy in the checkpoint arguments ---------------------------------------------------


def test_policy_is_stored_in_args_and_rebuilds_the_same_model(tmp_path):
    policy_file = tmp_path / "policy.json"
    policy_file.write_text(json.dumps({"decoder_encdec": [2, 4], "encoder_self": [6]}))
    argv = [
        "--san-policy", str(policy_file),
        "--san-decoder-self-policy", "1,5",
        "--san-decoder-encdec-policy", "3,3",  # wins over the file's [2, 4]
        "--encoder-layers", "6",
    ]  # fmt: skip
    model, args = build(argv, dictionary=DICT)
    assert json.loads(args.san_policy) == {
        "decoder_self": [1, 5],
        "decoder_encdec": [3, 3],
        "encoder_self": [6],
    }
    assert args.san_decoder_self_policy is None
    assert args.san_decoder_encdec_policy is None
    assert args.san_encoder_self_policy is None

    saved = copy.deepcopy(args)
    policy_file.unlink()  # the checkpoint must not need the file any more
    torch.manual_seed(0)
    rebuilt = TransformerSANModel.build_model(saved, StandInTask(DICT))
    assert saved.san_policy == args.san_policy
    assert [type(m) for m in rebuilt.modules()] == [type(m) for m in model.modules()]
    assert {k: v.shape for k, v in rebuilt.state_dict().items()} == {
        k: v.shape for k, v in model.state_dict().items()
    }
    rebuilt.load_state_dict(model.state_dict(), strict=True, model_cfg=None)
    rebuilt.eval()
    src_tokens, src_lengths = source_batch(DICT, [4, 6], seed=1)
    prev = target_prefixes(DICT, 2, 5, seed=2)
    assert max_diff(
        decoder_logits(model, src_tokens, src_lengths, prev),
        decoder_logits(rebuilt, src_tokens, src_lengths, prev),
    ) <= ATOL


def test_no_policy_is_stored_as_explicit_nulls():
    _, args = build(dictionary=DICT)
    assert json.loads(args.san_policy) == {kind: None for kind in KINDS}


# --- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--san-decoder-self-policy", "2,3"], "sums to 5 but the decoder has 6 layers"),
        (["--san-decoder-encdec-policy", "3,4"], "sums to 7 but the decoder has 6 layers"),
        (["--san-encoder-self-policy", "1,2"], "sums to 3 but the encoder has 2 layers"),
        (["--san-decoder-self-policy", "0,6"], "block sizes must be positive integers"),
        (["--san-decoder-self-policy=-1,7"], "block sizes must be positive integers"),
        (["--san-decoder-self-policy", "1.5,4.5"], "block sizes must be positive integers"),
        (["--san-decoder-encdec-policy", "three,three"], "block sizes must be positive integers"),
        (["--san-policy", '{"decoder_cross": [3, 3]}'], 'unknown key "decoder_cross"'),
        (["--san-policy", '{"decoder_self": [1, 5]'], "malformed JSON"),
        (["--san-policy", '{"decoder_self": [1.0, 5]}'], "block sizes must be positive integers"),
        (["--san-policy", '{"decoder_self": []}'], "needs at least one block"),
        (AAN + ["--san-decoder-self-policy", "1,5"], "cannot be combined with --decoder-self-attention-type aan"),
        (["--arch", "transformer_aan_small"] + ["--san-policy", '{"decoder_self": [6]}'],
         "a decoder_self sharing policy cannot be combined with --arch transformer_aan_small (the "
         "average attention network in the decoder): AAN has no attention weights to share"),
        (["--san-decoder-self-policy", "1,5", "--decoder-layerdrop", "0.1"], "LayerDrop"),
        (["--san-encoder-self-policy", "2", "--encoder-layerdrop", "0.2"], "LayerDrop"),
        (["--san-decoder-encdec-policy", "6", "--decoder-layerdrop", "0.2"], "LayerDrop"),
        (["--san-decoder-self-policy", "3,3", "--decoder-layers-to-keep", "0,2,4"],
         "decoder_self sharing cannot be combined with --decoder-layers-to-keep: pruning layers"),
        (["--san-encoder-self-policy", "2", "--encoder-layers-to-keep", "0"],
         "encoder_self sharing cannot be combined with --encoder-layers-to-keep: pruning layers"),
        (["--san-decoder-self-policy", "1,1,1,1,1,1", "--decoder-layers-to-keep", "0,2,4"],
         "decoder_self sharing cannot be combined with --decoder-layers-to-keep: pruning layers"),
        (["--arch", "transformer_aan_small", "--cross-self-attention"],  # the architecture's AAN
         "--cross-self-attention cannot be combined with --arch transformer_aan_small"),
        (AAN + ["--cross-self-attention"],
         "--cross-self-attention cannot be combined with --decoder-self-attention-type aan"),
    ],
)  # fmt: skip
def test_bad_policy_input(argv, message):
    arch = "transformer_san"
    if argv[0] == "--arch":
        arch, argv = argv[1], argv[2:]
    with pytest.raises(PolicyError) as error:
        build(argv, arch=arch, dictionary=DICT)
    assert message in str(error.value)


def test_pruned_layers_load_as_the_layers_kept():
    """``--encoder-layers-to-keep 1 --decoder-layers-to-keep 0,2,4`` (no policy) builds and loads
    a whole checkpoint pruned, as the same layers renamed load into a model of those sizes:
    fairseq's transformer failed on the parsed list (``'list' object has no attribute
    'split'``)."""
    trained, _ = build_fairseq_transformer(dictionary=DICT, seed=1)
    state = dict(trained.state_dict())
    pruned, args = build(["--encoder-layers-to-keep", "1", "--decoder-layers-to-keep", "0,2,4"],
                         dictionary=DICT, seed=2)  # fmt: skip
    pruned.load_state_dict(dict(state), model_cfg=args)
    kept = {"encoder.layers.1.": "encoder.layers.0.", **{
        f"decoder.layers.{old}.": f"decoder.layers.{new}." for new, old in enumerate((0, 2, 4))
    }}  # fmt: skip
    renamed = {}
    for key, value in state.items():
        prefix = next((old for old in kept if key.startswith(old)), None)
        if prefix is not None:
            renamed[kept[prefix] + key[len(prefix):]] = value
        elif ".layers." not in key:
            renamed[key] = value
    small, _ = build(["--encoder-layers", "1", "--decoder-layers", "3"], dictionary=DICT, seed=3)
    small.load_state_dict(renamed)
    assert (len(pruned.encoder.layers), len(pruned.decoder.layers)) == (1, 3)
    src_tokens, src_lengths = source_batch(DICT, [5, 3])
    prev = target_prefixes(DICT, 2, 4)
    torch.testing.assert_close(decoder_logits(pruned, src_tokens, src_lengths, prev),
                               decoder_logits(small, src_tokens, src_lengths, prev),
                               atol=0, rtol=0)  # fmt: skip


def test_layers_to_keep_of_one_stack_leave_the_other_whole():
    """fairseq's pruning dropped every layer of the stack given no layers to keep (the encoder's,
    for ``--decoder-layers-to-keep`` alone), which then failed as another architecture; a model
    trained with the option stores its kept layers and was pruned again as it loaded; a layer the
    checkpoint has not was a missing layer."""
    from fairseq_san.errors import UsageError
    from fairseq_san.models.san_model import kept_layers

    trained, _ = build_fairseq_transformer(dictionary=DICT, seed=1)
    pruned, args = build(["--decoder-layers-to-keep", "1,3"], dictionary=DICT, seed=2)
    pruned.load_state_dict(dict(trained.state_dict()), model_cfg=args)
    assert torch.equal(pruned.encoder.layers[1].fc1.weight, trained.encoder.layers[1].fc1.weight)
    assert torch.equal(pruned.decoder.layers[1].fc1.weight, trained.decoder.layers[3].fc1.weight)
    again, args = build(["--decoder-layers-to-keep", "1,3"], dictionary=DICT, seed=3)
    again.load_state_dict(dict(pruned.state_dict()), model_cfg=args)  # stored pruned
    assert torch.equal(again.decoder.layers[1].fc1.weight, trained.decoder.layers[3].fc1.weight)
    for bad in ("-1", "0,0"):  # every layer pruned; a layer twice
        with pytest.raises(UsageError) as refused:
            build([f"--decoder-layers-to-keep={bad}"], dictionary=DICT)
        assert str(refused.value) == (
            f"--decoder-layers-to-keep {bad}: give distinct layer numbers from 0, e.g. 0,2,4"
        )
    with pytest.raises(UsageError, match=r"^--decoder-layers-to-keep a: give distinct layer"):
        kept_layers("decoder", "a")  # --model-overrides text: int() deep in fairseq's pruning
    beyond, args = build(["--decoder-layers-to-keep", "0,6"], dictionary=DICT)
    with pytest.raises(UsageError) as refused:
        beyond.load_state_dict(dict(trained.state_dict()), model_cfg=args)
    assert str(refused.value) == (
        "--decoder-layers-to-keep 0,6: the checkpoint has 6 decoder layers, 0 to 5"
    )


def test_layers_to_keep_at_decoding_are_told_from_a_stack_stored_pruned():
    """A stack holding as many layers as ``--decoder-layers-to-keep`` names was taken as stored
    pruned: a 2-layer checkpoint given ``0,5`` decoded both its layers without a word. A model
    records the layers its training kept; a checkpoint made before that record is taken as
    stored pruned by the count alone."""
    from fairseq_san.errors import UsageError
    from fairseq_san.models.transformer_san import TransformerSANModel

    trained, args = build(["--decoder-layers", "2"], dictionary=DICT, seed=1)
    assert args.training_layers_to_keep == {"encoder": None, "decoder": None}
    overridden = copy.deepcopy(args)  # the checkpoint's configuration, --model-overrides applied
    overridden.decoder_layers_to_keep = "0,5"
    model = TransformerSANModel.build_model(overridden, StandInTask(DICT))
    with pytest.raises(UsageError) as refused:
        model.load_state_dict(dict(trained.state_dict()), model_cfg=overridden)
    assert str(refused.value) == (
        "--decoder-layers-to-keep 0,5: the checkpoint has 2 decoder layers, 0 to 1"
    )
    overridden.training_layers_to_keep = "0,5"  # --model-overrides, no mapping of stacks
    with pytest.raises(UsageError, match=r"^training_layers_to_keep '0,5' \(from the checkpoint, "):
        TransformerSANModel.build_model(overridden, StandInTask(DICT)).load_state_dict(
            dict(trained.state_dict()), model_cfg=overridden
        )
    del overridden.training_layers_to_keep  # a checkpoint made before the record
    model = TransformerSANModel.build_model(overridden, StandInTask(DICT))
    model.load_state_dict(dict(trained.state_dict()), model_cfg=overridden)


def test_attention_heads_that_do_not_divide_the_embedding_are_one_error():
    """fairseq's MultiheadAttention asserted it ("embed_dim must be divisible by num_heads") or
    divided by zero: a traceback from fairseq-train."""
    from fairseq_san.errors import UsageError

    said = "--decoder-attention-heads 3 does not divide --decoder-embed-dim"
    with pytest.raises(UsageError, match=said):
        build(["--decoder-attention-heads", "3"], dictionary=DICT)
    with pytest.raises(UsageError, match="--encoder-attention-heads 0: it must be an integer of"):
        build(["--encoder-attention-heads", "0"], dictionary=DICT)
    with pytest.raises(UsageError, match=said):
        build_lm(["--decoder-attention-heads", "3"], dictionary=DICT)


def test_layers_whose_weights_exceed_the_machines_memory_are_one_error(monkeypatch):
    """--encoder-layers 2147483648 (in range) built layers until the command was killed; refused
    before the first is built, for both models, by their feed-forward weights alone (here on a
    machine of 100,000 bytes: TINY's layer has 2 x 16 x 32 of them, 4,096 bytes)."""
    from fairseq_san.errors import UsageError
    from fairseq_san.models import option_checks

    monkeypatch.setattr(option_checks, "machine_memory", lambda: 100_000)
    build(["--encoder-layers", "24"], dictionary=DICT)  # 98,304 bytes
    said = r"^--encoder-layers 25 of --encoder-embed-dim 16: their feed-forward weights alone take "
    with pytest.raises(UsageError, match=said + r"[\d,]+ GiB, more than this machine's [\d,]+ GiB"):
        build(["--encoder-layers", "25"], dictionary=DICT)
    with pytest.raises(UsageError, match=r"^--decoder-layers 25 of --decoder-embed-dim 16"):
        build_lm(["--decoder-layers", "25"], dictionary=DICT)


def test_an_aan_architecture_is_told_by_what_it_sets_not_by_its_name(monkeypatch):
    """An architecture of one's own on top of ``transformer_aan_small`` is named as what made the
    decoder AAN; one whose name merely starts like it is not."""
    from fairseq.models import ARCH_CONFIG_REGISTRY

    from fairseq_san.models.option_checks import aan_flag

    registry = ARCH_CONFIG_REGISTRY
    monkeypatch.setitem(registry, "my_aan", registry["transformer_aan_small"])
    monkeypatch.setitem(registry, "transformer_aan_x", registry["transformer_san"])
    assert aan_flag(argparse.Namespace(arch="my_aan")).startswith("--arch my_aan (the average")
    said = aan_flag(argparse.Namespace(arch="transformer_aan_x"))
    assert said == "--decoder-self-attention-type aan"


@pytest.mark.parametrize(
    "argv",
    [["--san-decoder-self-policy", "2,4", "--encoder-layerdrop", "0.2"],
     ["--san-encoder-self-policy", "2", "--decoder-layerdrop", "0.2"],
     ["--san-encoder-self-policy", "1,1", "--encoder-layerdrop", "0.2"],
     ["--san-decoder-self-policy", "1,1,1,1,1,1", "--checkpoint-activations"],
     ["--san-decoder-encdec-policy", "1,1,1,1,1,1", "--decoder-layerdrop", "0.2"]],
)  # fmt: skip
def test_layerdrop_of_the_other_stack_goes_with_sharing(argv):
    """LayerDrop skips layers of its own stack only: the other stack's blocks keep their first
    layer (it was refused, 'LayerDrop may skip the first layer of a block'). A policy of one-layer
    blocks (what a theta near ln 2 learns) shares nothing: it was refused as sharing."""
    build(argv, dictionary=DICT)


@pytest.mark.parametrize(
    "trained",
    [["--decoder-layerdrop", "0.2"], ["--encoder-layerdrop", "0.2"],
     ["--checkpoint-activations"], ["--offload-activations"]],
)  # fmt: skip
def test_checkpoint_of_training_only_options_decodes_under_more_sharing(trained):
    """A checkpoint trained with LayerDrop or activation checkpointing (and no sharing) decodes
    under a policy that shares its layers (``--model-overrides``): the options act in training
    only, so its model is built without them and decodes as the same weights under that policy
    built without them. It was refused ('decoder_encdec sharing cannot be combined with
    --decoder-layerdrop'), naming a flag the decoding command never had."""
    checkpoint, args = build(trained, dictionary=DICT, seed=41)
    args = copy.deepcopy(args)  # the checkpoint's configuration, stamped, and the overrides
    args.san_encoder_self_policy, args.san_decoder_encdec_policy = "2", "2,4"
    model = TransformerSANModel.build_model(args, StandInTask(DICT)).eval()
    model.load_state_dict(checkpoint.state_dict())
    assert not args.decoder_layerdrop and not args.encoder_layerdrop
    assert not args.checkpoint_activations and not args.offload_activations
    assert type(model.decoder.layers) is torch.nn.ModuleList  # no layer dropped in training
    expected, _ = build(["--san-encoder-self-policy", "2", "--san-decoder-encdec-policy", "2,4"],
                        dictionary=DICT, seed=42)  # fmt: skip
    expected.load_state_dict(checkpoint.state_dict())
    src_tokens, src_lengths = source_batch(DICT, [5, 3], seed=1)
    prev = target_prefixes(DICT, 2, 6, seed=2)
    logits = decoder_logits(model, src_tokens, src_lengths, prev)
    assert max_diff(logits, decoder_logits(expected, src_tokens, src_lengths, prev)) <= ATOL
    assert max_diff(logits, decoder_logits(checkpoint, src_tokens, src_lengths, prev)) > 0.01


def test_bad_policy_files(tmp_path):
    missing = tmp_path / "missing.json"
    with pytest.raises(PolicyError) as error:
        build(["--san-policy", str(missing)], dictionary=DICT)
    assert "not found" in str(error.value) and str(missing) in str(error.value)

    broken = tmp_path / "broken.json"
    broken.write_text('{"decoder_self": [1, 5],\n "decoder_encdec": [3 3]}')
    with pytest.raises(PolicyError) as error:
        build(["--san-policy", str(broken)], dictionary=DICT)
    assert "malformed JSON at line 2" in str(error.value) and str(broken) in str(error.value)

    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps({"decoder_self": [6], "encoder_encdec": [2]}))
    with pytest.raises(PolicyError) as error:
        build(["--san-policy", str(unknown)], dictionary=DICT)
    assert 'unknown key "encoder_encdec"' in str(error.value)

    wrong_sum = tmp_path / "wrong_sum.json"
    wrong_sum.write_text(json.dumps({"decoder_encdec": [2, 2]}))
    with pytest.raises(PolicyError) as error:
        build(["--san-policy", str(wrong_sum)], dictionary=DICT)
    assert "decoder_encdec policy [2, 2] sums to 4 but the decoder has 6 layers" in str(error.value)


def test_layerdrop_without_sharing_is_fairseqs_layerdrop():
    """Without sharing, LayerDrop works as in fairseq: in training the same layers are skipped."""
    argv = ["--encoder-layerdrop", "0.5", "--decoder-layerdrop", "0.5", "--dropout", "0"]
    san, _ = build(argv, dictionary=DICT, seed=8)
    baseline, _ = build_fairseq_transformer(argv, dictionary=DICT, seed=8)
    for stack in (san.encoder, san.decoder):
        assert isinstance(stack.layers, LayerDropModuleList) and stack.layers.p == 0.5
    src_tokens, src_lengths = source_batch(DICT, [5, 3], seed=1)
    prev = target_prefixes(DICT, 2, 6, seed=2)
    all_layers = decoder_logits(san, src_tokens, src_lengths, prev)
    outputs = []
    for model in (san.train(), baseline.train()):  # dropout is 0: only layers are dropped
        torch.manual_seed(3)
        outputs.append(decoder_logits(model, src_tokens, src_lengths, prev))
    assert max_diff(outputs[0], outputs[1]) <= ATOL
    assert max_diff(outputs[0], all_layers) > 0.01


# --- no-cache mode ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [[], policy_argv("1,5", "3,3"), AAN],
    ids=["baseline", "san-self15-encdec33", "aan"],
)
def test_no_cache_mode_gives_the_same_translations(argv):
    cached, args = build(argv, dictionary=DICT, seed=71)
    assert not args.san_no_cache and not cached.decoder.recompute_prefix
    uncached, args = build(argv + ["--san-no-cache"], dictionary=DICT, seed=72)
    assert args.san_no_cache and uncached.decoder.recompute_prefix
    uncached.load_state_dict(cached.state_dict(), strict=True, model_cfg=None)

    src_tokens, src_lengths = source_batch(DICT, BEAM_BATCH, seed=73)
    expected = generate(cached, DICT, src_tokens, src_lengths, beam=4, **BEAM_KWARGS)
    actual = generate(uncached, DICT, src_tokens, src_lengths, beam=4, **BEAM_KWARGS)
    assert_same_hypotheses(expected, actual, atol=ATOL)

    # The uncached model really keeps no incremental state.
    state: Dict = {}
    prev = target_prefixes(DICT, len(BEAM_BATCH), 3, seed=74)
    with torch.no_grad():
        encoder_out = uncached.encoder(src_tokens, src_lengths=src_lengths)
        for t in range(prev.size(1)):
            uncached.decoder(prev[:, : t + 1], encoder_out=encoder_out, incremental_state=state)
    assert state == {}


# --- activation checkpointing -----------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--checkpoint-activations", "--offload-activations"])
def test_sharing_with_activation_checkpointing_is_refused(flag):
    """fairseq's --checkpoint-activations (and --offload-activations, which turns it on)
    recomputes each layer in backward, top layer first, so a following layer would run again
    before its block's leader: refused at build time with a PolicyError naming the flag the user
    gave (as for LayerDrop), not a crash in the middle of the first backward pass."""
    with pytest.raises(PolicyError, match=f"decoder_self sharing cannot be combined with {flag}: "
                       "activation checkpointing recomputes layers top-down"):  # fmt: skip
        build(policy_argv("1,5", "3,3") + [flag], dictionary=DICT)


# --- other fairseq transformer options combined with sharing ----------------------------------


def test_cross_self_attention_with_shared_self_attention_is_refused():
    """With --cross-self-attention the decoder's self-attention attends over the encoder output
    and the target prefix (key = value = [encoder_out; x]), which a shared block's S does not
    cover: a decoder_self policy is refused with a PolicyError. Encoder-decoder sharing is not
    affected: it decodes as its full forward pass does."""
    with pytest.raises(PolicyError, match="decoder_self sharing cannot be combined with "
                       "--cross-self-attention: its keys include the encoder output"):  # fmt: skip
        build(["--cross-self-attention", "--san-decoder-self-policy", "1,5"], dictionary=DICT)
    argv = ["--cross-self-attention", "--san-decoder-encdec-policy", "3,3"]
    model, _ = build(argv, dictionary=DICT, seed=91)
    src_tokens, src_lengths = source_batch(DICT, [4, 6], seed=92)
    prev = target_prefixes(DICT, 2, 5, seed=93)
    full = decoder_logits(model, src_tokens, src_lengths, prev)
    assert max_diff(full, incremental_logits(model, src_tokens, src_lengths, prev)) <= ATOL


@pytest.mark.parametrize(
    "argv, said",
    [(policy_argv("3,3"), "decoder_self sharing cannot be combined with --base-layers: "),
     (policy_argv(decoder_encdec="1,1,1,1,1,1"), "decoder_encdec sharing cannot be combined "),
     (AAN, "--base-layers cannot be combined with --decoder-self-attention-type aan: ")],
)  # fmt: skip
def test_base_layers_with_a_decoder_policy_or_aan_are_refused(argv, said, monkeypatch):
    """fairseq inserts --base-layers' BASE layers, which have no attention, among the decoder's:
    a policy summing to --decoder-layers was refused as "policy [3, 3] sums to 6 but there are 7
    layers", and AAN failed on the layer's missing 'self_attn'. Without them the model is
    fairseq's, BASE layer included."""
    single_process_base_layers(monkeypatch)
    with pytest.raises(PolicyError, match=f"^{re.escape(said)}"):
        build(["--base-layers", "1", *argv], dictionary=DICT)
    baseline, _ = build_fairseq_transformer(["--base-layers", "1"], dictionary=DICT, seed=3)
    san, _ = build(["--base-layers", "1", "--san-encoder-self-policy", "2"], dictionary=DICT)
    assert type(san.decoder.layers[3]).__name__ == "BaseLayer"
    san.load_state_dict(baseline.state_dict(), strict=True, model_cfg=None)


def test_encdec_policy_without_cross_attention_is_a_policy_error():
    """--no-cross-attention leaves the decoder layers without encoder-decoder attention, so a
    decoder_encdec policy has nothing to share: a clear PolicyError, not an AttributeError."""
    with pytest.raises(PolicyError) as error:
        build(["--no-cross-attention", "--san-decoder-encdec-policy", "3,3"], dictionary=DICT)
    assert "decoder_encdec" in str(error.value)


def test_diverse_beam_search_decodes_a_batch_whatever_its_sentence_ids():
    """fairseq's DiverseBeamSearch looked its groups' overlap up by the sentences' ids as if they
    were positions in the batch: an IndexError at the second step where an id reached the batch's
    size (fairseq-generate's batches, the hub's). The n-best lists must not depend on the ids."""
    from fairseq.search import DiverseBeamSearch
    from fairseq.sequence_generator import SequenceGenerator

    model, _ = build(["--san-decoder-self-policy", "2,4"], dictionary=DICT, seed=3)
    src_tokens, src_lengths = source_batch(DICT, [5, 3, 7, 2])

    def decode(sentence_ids):
        sample = {"id": torch.tensor(sentence_ids),
                  "net_input": {"src_tokens": src_tokens, "src_lengths": src_lengths}}  # fmt: skip
        search = DiverseBeamSearch(DICT, num_groups=2, diversity_strength=2.0)
        generator = SequenceGenerator([model], DICT, beam_size=4, max_len_b=8,
                                      search_strategy=search)  # fmt: skip
        with torch.no_grad():
            return generator.generate([model], sample)

    assert_same_hypotheses(decode([0, 1, 2, 3]), decode([264, 7, 1013, 3]))


def eos_prone_model(eos_weight: float) -> TransformerSANModel:
    """A tiny model whose hypotheses end at several steps, more of them the larger
    ``eos_weight`` (sharper distributions, in the weights: both decoders decode them)."""
    model, _ = build(["--san-decoder-self-policy", "2,4"], dictionary=DICT, seed=3)
    weight = model.decoder.output_projection.weight.data
    weight *= 3
    direction = torch.randn(weight.size(1), generator=torch.Generator().manual_seed(0))
    weight[DICT.eos()] += eos_weight * direction
    return model


def eos_prone_sample(seed: int = 0) -> Dict:
    """The batch that ``eos_prone_model``'s hypotheses end in at several steps (its words drawn
    with ``seed``)."""
    src_tokens, src_lengths = source_batch(DICT, [5, 3, 7, 2], seed=seed)
    return {"id": torch.arange(4),
            "net_input": {"src_tokens": src_tokens, "src_lengths": src_lengths}}  # fmt: skip


def test_diverse_beam_search_returns_no_hypothesis_past_its_end():
    """fairseq's DiverseBeamSearch gives its generator ``beam`` candidates, which ignores a
    finished hypothesis by its place, where beam search's candidates come from any hypothesis of
    their group: a finished one went on after its end and was finished again ([21, 21, 2, 2]).
    Every hypothesis must end at its only end of sentence, ``beam`` of them a sentence, scored as
    fairseq finishes a hypothesis (its positional scores' average), the same in both decoders."""
    from fairseq.search import DiverseBeamSearch
    from fairseq.sequence_generator import SequenceGenerator

    from fairseq_san.static_decoding import StaticSequenceGenerator

    model, sample = eos_prone_model(3), eos_prone_sample()
    nbests = []
    for generator_class in (SequenceGenerator, StaticSequenceGenerator):
        search = DiverseBeamSearch(DICT, num_groups=2, diversity_strength=0.5)
        generator = generator_class([model], DICT, beam_size=4, max_len_b=10,
                                    search_strategy=search)  # fmt: skip
        with torch.no_grad():
            nbests.append(generator.generate([model], sample))
    assert_same_hypotheses(*nbests)
    assert [len(nbest) for nbest in nbests[0]] == [4] * 4
    hypotheses = [hypothesis for nbest in nbests[0] for hypothesis in nbest]
    assert [h["tokens"].tolist() for h in hypotheses if h["tokens"].eq(DICT.eos()).sum() > 1] == []
    for hypothesis in hypotheses:
        average = hypothesis["positional_scores"].mean().item()
        assert hypothesis["score"].item() == pytest.approx(average, abs=1e-5)


@pytest.mark.parametrize("eos_weight, seed, pruned", [(6, 0, False), (8, 2, True)],
                         ids=["sentences ending together", "sentences ending first"])
def test_diverse_beam_search_keeps_each_hypothesis_in_its_group(eos_weight, seed, pruned):
    """fairseq's generator continues the candidates that do not end, then those that do: after
    a hypothesis ended, those after it moved up a place, and the step reads a place's group from
    its number, so they changed groups (penalised for the wrong groups' tokens) and a group's
    candidates extended other groups' hypotheses. Each group's beam / groups candidates must
    extend its own hypotheses (a hypothesis's group: its first token's), in both decoders, which
    agree; also where sentences end at the first steps and the generator drops them from the
    batch while the others search on (each place's group must follow its sentence)."""
    from fairseq.search import DiverseBeamSearch
    from fairseq.sequence_generator import SequenceGenerator

    from fairseq_san.static_decoding import StaticSequenceGenerator

    class GroupsChecked(DiverseBeamSearch):
        """Follows each hypothesis's group (its first token's place's: c * groups + g is group
        g's) and counts the steps where a group's candidates were not beam / groups."""

        strays = pruned = 0

        def step(self, step, lprobs, scores, prev_output_tokens=None, original_batch_idxs=None):
            found = super().step(step, lprobs, scores, prev_output_tokens, original_batch_idxs)
            beam = found[2].size(1)
            self.found_groups = torch.arange(beam).expand_as(found[2]) % self.num_groups
            if step > 0:
                self.found_groups = self.groups.gather(1, found[2])
                sizes = torch.nn.functional.one_hot(self.found_groups, self.num_groups).sum(1)
                self.strays += int(sizes.ne(beam // self.num_groups).any(1).sum())
            return found

        def prune_sentences(self, batch_idxs):
            super().prune_sentences(batch_idxs)
            self.found_groups = self.found_groups[batch_idxs]
            self.pruned += 1

        def update_constraints(self, active_hypos):
            super().update_constraints(active_hypos)
            self.groups = self.found_groups.gather(1, active_hypos)

    model, sample = eos_prone_model(eos_weight), eos_prone_sample(seed)
    nbests = []
    for generator_class in (SequenceGenerator, StaticSequenceGenerator):
        search = GroupsChecked(DICT, num_groups=2, diversity_strength=0.5)
        generator = generator_class([model], DICT, beam_size=4, max_len_b=10,
                                    search_strategy=search)  # fmt: skip
        with torch.no_grad():
            nbests.append(generator.generate([model], sample))
        assert (search.strays, search.pruned > 0) == (0, pruned), generator_class.__name__
    assert_same_hypotheses(*nbests)
    assert [len(nbest) for nbest in nbests[0]] == [4] * 4


def test_one_diverse_beam_group_is_beam_search():
    """--diverse-beam-groups 1 (any strength) is beam search, as in the paper: fairseq's diverse
    step gave one candidate a place, so each hypothesis that ended left the beam one narrower
    (other n-best lists than beam search's); in both decoders."""
    from fairseq.search import DiverseBeamSearch
    from fairseq.sequence_generator import SequenceGenerator

    from fairseq_san.static_decoding import StaticSequenceGenerator

    model, sample = eos_prone_model(6), eos_prone_sample()
    for generator_class in (SequenceGenerator, StaticSequenceGenerator):
        nbests = []
        for search in (None, DiverseBeamSearch(DICT, num_groups=1, diversity_strength=0.5)):
            generator = generator_class([model], DICT, beam_size=4, max_len_b=10,
                                        search_strategy=search)  # fmt: skip
            with torch.no_grad():
                nbests.append(generator.generate([model], sample))
        assert_same_hypotheses(*nbests)


def test_diverse_beam_search_refuses_twice_the_candidates():
    """A DiverseBeamSearch built with candidate_multiple=2 (fairseq's 'backwards compatible'
    setting) hands the generator 2 x beam candidates, the first beam of which continue whatever
    their groups: refused in one line, where the wrapped step failed with a shape mismatch."""
    from fairseq.search import DiverseBeamSearch
    from fairseq.sequence_generator import SequenceGenerator

    from fairseq_san.errors import UsageError

    model, sample = eos_prone_model(3), eos_prone_sample()
    search = DiverseBeamSearch(DICT, num_groups=2, diversity_strength=0.5, candidate_multiple=2)
    generator = SequenceGenerator([model], DICT, beam_size=4, search_strategy=search)
    with pytest.raises(UsageError, match=r"^DiverseBeamSearch\(candidate_multiple=2\): fairseq's "
                       "generator continues the first beam of its candidates, which mixes the "
                       r"groups; build it with candidate_multiple=1 \(fairseq's default\)$"):
        with torch.no_grad():
            generator.generate([model], sample)


def test_prefix_constrained_search_returns_no_hypothesis_past_its_end():
    """fairseq's PrefixConstrainedBeamSearch gave its generator ``beam`` candidates, not the 2 x
    ``beam`` it continues the best non-finished of: a finished candidate continued as well and
    came back with tokens after its end of sentence ([6, 2, 2]). Every hypothesis must end at its
    only end of sentence, and the restriction hold."""
    from fairseq.search import PrefixConstrainedBeamSearch
    from fairseq.sequence_generator import SequenceGenerator

    eos = DICT.eos()
    hypotheses = []
    for seed in range(4):
        model, _ = build(["--san-decoder-self-policy", "2,4"], dictionary=DICT, seed=seed)
        src_tokens, src_lengths = source_batch(DICT, [5, 3, 7, 2], seed=seed)
        sample = {"id": torch.arange(4),
                  "net_input": {"src_tokens": src_tokens, "src_lengths": src_lengths}}  # fmt: skip
        search = PrefixConstrainedBeamSearch(DICT, lambda batch_id, tokens: [5, 6, eos])
        generator = SequenceGenerator([model], DICT, beam_size=2, max_len_b=8,
                                      search_strategy=search)  # fmt: skip
        with torch.no_grad():
            nbests = generator.generate([model], sample)
        hypotheses += [hypothesis["tokens"].tolist() for nbest in nbests for hypothesis in nbest]
    assert len(hypotheses) == 4 * 4 * 2  # seeds x sentences x beam
    assert [tokens for tokens in hypotheses if tokens.index(eos) != len(tokens) - 1] == []
    assert {token for tokens in hypotheses for token in tokens} <= {5, 6, eos}


def repeated_bigrams(tokens: List[int]) -> int:
    """How many of a hypothesis's bigrams stand earlier in it too."""
    bigrams = list(zip(tokens, tokens[1:]))
    return len(bigrams) - len(set(bigrams))


def test_no_repeat_ngram_size_blocks_repeated_bigrams_without_the_cuda_extension():
    """fairseq's Python n-gram blocking (no CUDA extension: every CPU) matched the n-gram from
    the end of the token buffer, padding, and blocked nothing: translations repeated bigrams with
    --no-repeat-ngram-size 2 as without it (fairseq issue #5206)."""
    from fairseq.ngram_repeat_block import NGramRepeatBlock

    eos, pad = DICT.eos(), DICT.pad()
    buffer = torch.tensor([[eos, 5, 6, 7, 5, pad, pad, pad]])  # step 4: 5 was followed by 6
    lprobs = NGramRepeatBlock(2, use_extension=False)(buffer, torch.zeros(1, len(DICT)), 1, 1, 4)
    assert lprobs[0].isinf().nonzero().flatten().tolist() == [6]

    model, _ = build(["--san-decoder-self-policy", "2,4"], dictionary=DICT, seed=7)
    src_tokens, src_lengths = source_batch(DICT, [5, 3, 7, 2], seed=8)

    def repeats(**kwargs) -> List[int]:
        nbest = generate(model, DICT, src_tokens, src_lengths, beam=4, max_len_b=16, **kwargs)
        return [repeated_bigrams(hypo["tokens"].tolist()) for hypos in nbest for hypo in hypos]

    assert sum(repeats()) > 0  # the model repeats bigrams: the blocking has something to do
    assert repeats(no_repeat_ngram_size=2) == [0] * 16


def test_sampling_takes_no_output_from_a_row_blocking_left_no_token():
    """At the maximum length fairseq's generator forces the end of sentence on every row, also
    on hypotheses that sampled it before and go on, ignored; n-gram blocking takes it away where
    the n-gram it ends repeats theirs, and Sampling.step failed in torch's multinomial for the
    whole batch ("invalid multinomial distribution"). Such a row draws EOS, scored -inf."""
    from fairseq.search import Sampling

    torch.manual_seed(0)
    lprobs = torch.log_softmax(torch.randn(2, 3, len(DICT)), dim=-1)
    lprobs[1, 2] = -math.inf  # sentence 1's third hypothesis: no token left
    drawn, tokens, beams = Sampling(DICT).step(2, lprobs, torch.zeros(2, 3, 4))
    assert tokens[1, 2] == DICT.eos() and drawn[1, 2] == -math.inf
    assert int(drawn.isfinite().sum()) == 5 and beams.tolist() == [[0, 1, 2]] * 2


@pytest.mark.parametrize("step", [0, 2])
def test_sampling_draws_a_row_whose_probabilities_are_all_below_floats_smallest(step):
    """A forced token the model did not favour, at a low temperature (the log-probabilities
    divided by it): every probability of its row is 0 in float, and torch's multinomial failed
    for the whole batch ("invalid multinomial distribution"). It is drawn, scored with its
    log-probability; the other rows as before."""
    from fairseq.search import Sampling

    torch.manual_seed(0)
    lprobs = torch.log_softmax(torch.randn(2, 3, len(DICT)), dim=-1)
    lprobs[0] = -math.inf
    lprobs[0, :, 7] = -632.0  # sentence 0: forced to token 7, far below e^-104
    drawn, tokens, beams = Sampling(DICT).step(step, lprobs, torch.zeros(2, 3, 4))
    assert tokens[0].tolist() == [7, 7, 7] and drawn[0].tolist() == [-632.0] * 3
    parents = lprobs[1].index_select(0, beams[1])  # sentence 1: scored as drawn
    assert torch.allclose(drawn[1], parents.gather(1, tokens[1:].t()).squeeze(1))


@pytest.mark.parametrize("topp", [0.9, 0.5, 1.0])
def test_top_p_sampling_keeps_every_token_of_a_row_below_floats_smallest(topp):
    """Such a row's tokens hold far less than p together, so fairseq's nucleus (``--sampling-topp``,
    probabilities not renormalised after masking) holds them all; the row shifted to a largest
    probability of 1 held its largest token alone, and sampled nothing else (shifted to a whole
    probability of 1, so did a p below its largest token's share, 62%)."""
    from fairseq.search import Sampling

    torch.manual_seed(0)
    lprobs = torch.full((1, 50, len(DICT)), -math.inf)
    lprobs[0, :, 7], lprobs[0, :, 9] = -200.0, -200.5  # both below e^-104, 62% and 38%
    drawn, tokens, _ = Sampling(DICT, sampling_topp=topp).step(2, lprobs, torch.zeros(1, 50, 4))
    assert set(tokens[0].tolist()) == {7, 9}
    assert drawn[0].tolist() == [-200.0 if t == 7 else -200.5 for t in tokens[0].tolist()]


def test_a_scripted_generator_keeps_min_len_after_a_shorter_prefix():
    """fairseq exports its SequenceGenerator with ``torch.jit.script`` (its own test does): the
    min_len fix (``fairseq_fixes.prefix_min_len``) failed to compile ("undefined value torch"),
    and the scripted generator keeps it as the eager one does."""
    from fairseq.sequence_generator import SequenceGenerator

    from fairseq_san.fairseq_fixes import prefix_min_len

    prefix_min_len.install()  # again: idempotent
    model = build_fairseq_transformer(dictionary=DICT)[0]
    projection = model.decoder.output_projection  # EOS the likeliest: only min_len holds it
    projection.bias = torch.nn.Parameter(torch.zeros(projection.out_features))
    projection.bias.data[DICT.eos()] = 50.0
    src_tokens, src_lengths = source_batch(DICT, [5, 3], seed=1)
    prefix = torch.tensor([[7, DICT.pad(), DICT.pad()], [8, 9, 10]])
    sample = {"net_input": {"src_tokens": src_tokens, "src_lengths": src_lengths}}
    generator = SequenceGenerator([model], DICT, beam_size=2, min_len=6, max_len_b=10)
    eager = generator.generate([model], sample, prefix_tokens=prefix)
    scripted = torch.jit.script(generator)(sample, prefix_tokens=prefix)
    # EOS at the first step min_len allows: 6 tokens, then EOS
    assert all(len(hypo["tokens"]) == 7 for hypos in scripted for hypo in hypos)
    assert_same_hypotheses(eager, scripted, ATOL)
    generator.min_len = 1  # below the prefix: EOS after its one token
    assert len(generator.generate([model], sample, prefix_tokens=prefix)[0][0]["tokens"]) == 2
