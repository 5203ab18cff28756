"""Tests for the ``transformer_san`` model (Xiao et al., IJCAI 2019, section 3.2).

Covers: equivalence with fairseq's transformer when nothing is shared, an independent
re-implementation of the SAN equations (Eqs. 4-6), incremental decoding against the full
teacher-forced pass for many policies, beam search with reordering against prefix
recomputation and against a beam search of our own, exact parameter counts, the policy stored in
the checkpoint arguments, decode-time policies, bad input, AAN and the no-cache mode.
"""

import copy
import json
import math
from collections import OrderedDict
from typing import Dict, List, Optional, Sequence

import pytest
import torch
from torch import Tensor

from fairseq.models.transformer import TransformerModel
from fairseq.modules import LayerDropModuleList, MultiheadAttention
from helpers import (
    StandInTask,
    assert_same_hypotheses,
    build,
    build_fairseq_transformer,
    count_parameters,
    generate,
    make_dictionary,
    parse_args,
    source_batch,
    target_prefixes,
)
from fairseq_san.models.transformer_san import TransformerSANModel
from fairseq_san.modules.average_attention import AverageAttention
from fairseq_san.modules.decoding_attention import DecodingAttention
from fairseq_san.modules.shared_attention import (
    BlockLeaderAttention,
    SharedContextAttention,
    SharedWeightsAttention,
)
from fairseq_san.policy import KINDS, PolicyError

ATOL = 1e-5
DICT = make_dictionary(24)


def policy_argv(
    decoder_self: Optional[str] = None,
    decoder_encdec: Optional[str] = None,
    encoder_self: Optional[str] = None,
    share: Optional[str] = None,
) -> List[str]:
    argv = []
    if decoder_self:
        argv += ["--san-decoder-self-policy", decoder_self]
    if decoder_encdec:
        argv += ["--san-decoder-encdec-policy", decoder_encdec]
    if encoder_self:
        argv += ["--san-encoder-self-policy", encoder_self, "--encoder-layers", "6"]
    if share:
        argv += ["--san-encdec-share", share]
    return argv


# Every block list appears for decoder self- and encoder-decoder attention; [2,4] for the encoder;
# two configurations share encoder-decoder weights only (Table 4, "shared V: no").
POLICIES = {
    "self15-encdec33-enc24": policy_argv("1,5", "3,3", "2,4"),
    "self33-encdec15": policy_argv("3,3", "1,5"),
    "self222-encdec6-weights": policy_argv("2,2,2", "6", share="weights"),
    "self6-encdec111111": policy_argv("6", "1,1,1,1,1,1"),
    "self111111-encdec222-weights": policy_argv("1,1,1,1,1,1", "2,2,2", share="weights"),
    "self15-encdec33-weights": policy_argv("1,5", "3,3", share="weights"),
    "self33-encdec15-prenorm": policy_argv("3,3", "1,5", "2,4")
    + ["--encoder-normalize-before", "--decoder-normalize-before"],
}
AAN = ["--decoder-self-attention-type", "aan"]


def decoder_logits(model, src_tokens, src_lengths, prev) -> Tensor:
    with torch.no_grad():
        return model(src_tokens, src_lengths, prev)[0]


def incremental_logits(model, src_tokens, src_lengths, prev, state=None) -> Tensor:
    """Decoder outputs computed one token at a time with an incremental state."""
    state = {} if state is None else state
    with torch.no_grad():
        encoder_out = model.encoder(src_tokens, src_lengths=src_lengths)
        steps = [
            model.decoder(prev[:, : t + 1], encoder_out=encoder_out, incremental_state=state)[0]
            for t in range(prev.size(1))
        ]
    assert all(step.size(1) == 1 for step in steps)
    return torch.cat(steps, dim=1)


def max_diff(a: Tensor, b: Tensor) -> float:
    assert a.shape == b.shape
    return (a - b).abs().max().item()


# --- an independent implementation of the SAN equations ---------------------------------------


def reference_leaders(blocks: Optional[Sequence[int]], num_layers: int) -> List[int]:
    """Layer whose attention weights each layer uses: the first of its block."""
    if blocks is None:
        return list(range(num_layers))
    leaders = []
    for size in blocks:
        leaders += [len(leaders)] * size
    return leaders


def _heads(mha, x: Tensor) -> Tensor:
    """(len, batch, embed) -> (batch * heads, len, head_dim)."""
    return x.contiguous().view(x.size(0), -1, mha.head_dim).transpose(0, 1)


def _weights(mha, query: Tensor, key: Tensor, mask: Optional[Tensor], key_pad: Optional[Tensor]):
    """Eq. 1: S = softmax(Q K^T / sqrt(d_k)), with an additive mask and key padding."""
    q = _heads(mha, mha.q_proj(query) * mha.head_dim**-0.5)
    k = _heads(mha, mha.k_proj(key))
    logits = torch.bmm(q, k.transpose(1, 2))
    if mask is not None:
        logits = logits + mask
    if key_pad is not None:
        bsz = key_pad.size(0)
        logits = logits.view(bsz, -1, logits.size(1), logits.size(2))
        logits = logits.masked_fill(key_pad[:, None, None, :], float("-inf"))
        logits = logits.view(-1, logits.size(2), logits.size(3))
    return torch.softmax(logits, dim=-1)


def _output(mha, context: Tensor, length: int, bsz: int) -> Tensor:
    merged = context.transpose(0, 1).contiguous().view(length, bsz, mha.embed_dim)
    return mha.out_proj(merged)


def _ffn(layer, x: Tensor) -> Tensor:
    return layer.fc2(torch.relu(layer.fc1(x)))


def reference_forward(model, src_tokens, src_lengths, prev, policy: Dict, share: str = "output"):
    """The model's logits recomputed from its parameters with the equations of section 3.2.

    Post-norm layers (fairseq's default). A following layer of a self-attention block uses the
    leader's S with its own V (Eq. 5); a following encoder-decoder layer uses the leader's
    A = S V (Eq. 6), or with ``share="weights"`` the leader's S with its own V.
    """
    encoder, decoder = model.encoder, model.decoder
    assert decoder.layer_norm is None and encoder.layer_norm is None  # post-norm
    with torch.no_grad():
        # Encoder.
        pad = src_tokens.eq(encoder.padding_idx)
        x = encoder.embed_scale * encoder.embed_tokens(src_tokens)
        x = x + encoder.embed_positions(src_tokens)
        x = (x * (1 - pad.unsqueeze(-1).type_as(x))).transpose(0, 1)
        leaders = reference_leaders(policy.get("encoder_self"), len(encoder.layers))
        shared = {}
        for index, layer in enumerate(encoder.layers):
            attn = layer.self_attn
            if leaders[index] == index:
                shared[index] = _weights(attn, x, x, None, pad)
            context = torch.bmm(shared[leaders[index]], _heads(attn, attn.v_proj(x)))
            x = layer.self_attn_layer_norm(x + _output(attn, context, x.size(0), x.size(1)))
            x = layer.final_layer_norm(x + _ffn(layer, x))
        enc = x

        # Decoder.
        length, bsz = prev.size(1), prev.size(0)
        causal = torch.triu(torch.full((length, length), float("-inf")), 1)
        y = decoder.embed_scale * decoder.embed_tokens(prev) + decoder.embed_positions(prev)
        y = y.transpose(0, 1)
        self_leaders = reference_leaders(policy.get("decoder_self"), len(decoder.layers))
        cross_leaders = reference_leaders(policy.get("decoder_encdec"), len(decoder.layers))
        self_s, cross_s, cross_a = {}, {}, {}
        for index, layer in enumerate(decoder.layers):
            attn = layer.self_attn
            if self_leaders[index] == index:
                self_s[index] = _weights(attn, y, y, causal, None)
            context = torch.bmm(self_s[self_leaders[index]], _heads(attn, attn.v_proj(y)))
            y = layer.self_attn_layer_norm(y + _output(attn, context, length, bsz))

            attn = layer.encoder_attn
            leader = cross_leaders[index]
            if leader == index:
                cross_s[index] = _weights(attn, y, enc, None, pad)
                cross_a[index] = torch.bmm(cross_s[index], _heads(attn, attn.v_proj(enc)))
                context = cross_a[index]
            elif share == "output":
                context = cross_a[leader]  # Eq. 6: A^{m+i} = A^m
            else:
                context = torch.bmm(cross_s[leader], _heads(attn, attn.v_proj(enc)))
            y = layer.encoder_attn_layer_norm(y + _output(attn, context, length, bsz))
            y = layer.final_layer_norm(y + _ffn(layer, y))
        return decoder.output_layer(y.transpose(0, 1))


def blocks_of(text: Optional[str]) -> Optional[List[int]]:
    return None if text is None else [int(v) for v in text.split(",")]


def policy_of(argv: Sequence[str]) -> Dict[str, List[int]]:
    flags = {
        "--san-decoder-self-policy": "decoder_self",
        "--san-decoder-encdec-policy": "decoder_encdec",
        "--san-encoder-self-policy": "encoder_self",
    }
    return {flags[a]: blocks_of(b) for a, b in zip(argv, argv[1:]) if a in flags}


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


# --- the SAN equations, computed independently ------------------------------------------------


@pytest.mark.parametrize(
    "name", ["self15-encdec33-enc24", "self222-encdec6-weights", "self33-encdec15"]
)
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


# --- modules and incremental decoding ---------------------------------------------------------


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

BEAM_BATCH = [6, 3, 8, 4, 5]  # source lengths; left-padded batch as fairseq builds it
BEAM_KWARGS = dict(min_len=4, max_len_a=0, max_len_b=10)
BEAM_MODELS = {
    "baseline": [],
    "self15-encdec33": POLICIES["self15-encdec33-enc24"],
    "self222-encdec6-weights": POLICIES["self222-encdec6-weights"],
    "aan": AAN,
    "aan-encdec33": AAN + ["--san-decoder-encdec-policy", "3,3"],
}


def favour_eos(model, bonus: float):
    """Add ``bonus`` to the eos logit so that untrained models finish some sentences early;
    returns the hook handle (None for no bonus)."""
    if not bonus:
        return None
    eos = model.decoder.dictionary.eos()

    def hook(module, inputs, logits):
        logits = logits.clone()
        logits[..., eos] += bonus
        return logits

    return model.decoder.output_projection.register_forward_hook(hook)


EOS_BONUSES = (1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0)


def staggering_eos_bonus(model, src_tokens, src_lengths, beam: int, **kwargs) -> float:
    """The first eos bonus with which beam search removes finished sentences from its batch
    while others go on (sentences finishing at different steps); installed on ``model``."""
    for bonus in EOS_BONUSES:
        handle = favour_eos(model, bonus)
        orders = record_reorders(model)
        generate(model, DICT, src_tokens, src_lengths, beam=beam, **kwargs)
        del model.decoder.reorder_incremental_state_scripting  # back to the class method
        if orders and shrank(orders, src_tokens.size(0) * beam):
            return bonus
        handle.remove()
    raise AssertionError("no eos bonus makes sentences finish at different steps")


def shrank(orders: List[Tensor], full: int) -> bool:
    """Whether beam search removed finished sentences from its batch at some step."""
    return min(order.numel() for order in orders) < full


def record_reorders(model) -> List[Tensor]:
    """Record the new_order of every reorder_incremental_state_scripting call on ``model``."""
    orders: List[Tensor] = []
    original = model.decoder.reorder_incremental_state_scripting

    def recording(incremental_state, new_order):
        orders.append(new_order.clone())
        return original(incremental_state, new_order)

    model.decoder.reorder_incremental_state_scripting = recording
    return orders


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
        ([], (0, 0, "output")),
        (["--san-decoder-self-policy", "1,5", "--san-decoder-encdec-policy", "3,3"], (4, 4, "output")),
        (
            ["--san-decoder-self-policy", "1,5", "--san-decoder-encdec-policy", "3,3",
             "--san-encdec-share", "weights"],
            (4, 4, "weights"),
        ),
        (["--san-decoder-self-policy", "6", "--san-decoder-encdec-policy", "6"], (5, 5, "output")),
        (["--san-encoder-self-policy", "2,4"], (0, 0, "output")),
    ],
    ids=["no-sharing", "self15-encdec33", "self15-encdec33-weights", "self6-encdec6", "enc24"],
)  # fmt: skip
def test_parameter_counts_transformer_san_small(argv, followers):
    dictionary = make_dictionary(V)
    model, _ = build(SMALL + argv, arch="transformer_san_small", dictionary=dictionary, tiny=False)
    assert model.encoder.embed_tokens is model.decoder.embed_tokens
    expected = expected_parameters(*followers)
    if "--san-encoder-self-policy" in argv:
        expected -= 4 * 2 * LINEAR  # {2,4}: 1 + 3 following encoder layers without q/k
    print(f"transformer_san_small {' '.join(argv) or '(no sharing)'}: {count_parameters(model):,}")
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


# --- decode-time policy -----------------------------------------------------------------------


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
        with pytest.raises(PolicyError, match="more attention sharing"):
            model.load_state_dict(checkpoint.state_dict(), strict=True, model_cfg=None)


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
        (["--arch", "transformer_aan_small"] + ["--san-policy", '{"decoder_self": [6]}'], "aan"),
        (["--san-decoder-self-policy", "1,5", "--decoder-layerdrop", "0.1"], "LayerDrop"),
        (["--san-encoder-self-policy", "2", "--encoder-layerdrop", "0.2"], "LayerDrop"),
    ],
)  # fmt: skip
def test_bad_policy_input(argv, message):
    arch = "transformer_san"
    if argv[0] == "--arch":
        arch, argv = argv[1], argv[2:]
    with pytest.raises(PolicyError) as error:
        build(argv, arch=arch, dictionary=DICT)
    assert message in str(error.value)


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


# --- average attention network ----------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, arch",
    [
        ([], "transformer_aan_small"),
        (AAN, "transformer_san"),
        (AAN + ["--san-decoder-encdec-policy", "3,3"], "transformer_san"),
        (AAN + ["--san-decoder-encdec-policy", "1,5", "--san-encdec-share", "weights"], "transformer_san"),
    ],
    ids=["aan-small-arch", "aan-flag", "aan-encdec33", "aan-encdec15-weights"],
)  # fmt: skip
def test_aan_incremental_equals_full_forward(argv, arch):
    model, args = build(argv, arch=arch, dictionary=DICT, seed=61)
    assert args.decoder_self_attention_type == "aan"
    assert all(isinstance(layer.self_attn, AverageAttention) for layer in model.decoder.layers)
    assert model.decoder.embed_dim == 16  # the tiny sizes win over the arch defaults
    src_tokens, src_lengths = source_batch(DICT, [5, 3, 8], seed=62)
    prev = target_prefixes(DICT, 3, 9, seed=63)
    full = decoder_logits(model, src_tokens, src_lengths, prev)
    assert max_diff(full, incremental_logits(model, src_tokens, src_lengths, prev)) <= ATOL


def test_aan_ffn_dropout_follows_activation_dropout():
    """AAN's FFN dropout is the layer FFN's (Zhang et al.'s relu_dropout), not attention's."""
    argv = AAN + ["--dropout", "0.1", "--attention-dropout", "0.2", "--activation-dropout", "0.3"]
    model, _ = build(argv, dictionary=DICT)
    for layer in model.decoder.layers:
        assert layer.self_attn.dropout_module.p == layer.activation_dropout_module.p == 0.3


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
def test_sharing_with_activation_checkpointing_is_rejected_or_exact(flag):
    """fairseq's --checkpoint-activations recomputes each layer in backward, top layer first, so a
    following layer runs again before its block's leader. Sharing must then either be refused
    with a PolicyError at build time (as for LayerDrop) or give the gradients of the model
    without checkpointing; crashing in the middle of the first backward pass is neither."""
    argv = policy_argv("1,5", "3,3") + ["--dropout", "0", "--attention-dropout", "0"]
    try:
        checkpointed, _ = build(argv + [flag], dictionary=DICT, seed=81)
    except PolicyError as error:
        assert "activation" in str(error)
        return
    plain, _ = build(argv, dictionary=DICT, seed=81)
    plain.load_state_dict(checkpointed.state_dict(), strict=True, model_cfg=None)
    src_tokens, src_lengths = source_batch(DICT, [4, 6], seed=82)
    prev = target_prefixes(DICT, 2, 5, seed=83)
    for model in (checkpointed, plain):
        model.train()
        model(src_tokens, src_lengths, prev)[0].logsumexp(-1).sum().backward()
    for (name, a), (_, b) in zip(checkpointed.named_parameters(), plain.named_parameters()):
        assert a.grad is not None, name
        torch.testing.assert_close(a.grad, b.grad, atol=1e-5, rtol=1e-4, msg=name)


# --- other fairseq transformer options combined with sharing ----------------------------------


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


def test_cross_self_attention_with_shared_self_attention():
    """With --cross-self-attention the decoder's self-attention attends over the encoder output
    and the target prefix (key = value = [encoder_out; x]). A decoder_self policy must then either
    be refused with a PolicyError or decode correctly (incremental == full)."""
    argv = ["--cross-self-attention", "--san-decoder-self-policy", "1,5"]
    try:
        model, _ = build(argv, dictionary=DICT, seed=91)
    except PolicyError as error:
        assert "cross" in str(error)
        return
    src_tokens, src_lengths = source_batch(DICT, [4, 6], seed=92)
    prev = target_prefixes(DICT, 2, 5, seed=93)
    full = decoder_logits(model, src_tokens, src_lengths, prev)
    assert max_diff(full, incremental_logits(model, src_tokens, src_lengths, prev)) <= ATOL


def test_encdec_policy_without_cross_attention_is_a_policy_error():
    """--no-cross-attention leaves the decoder layers without encoder-decoder attention, so a
    decoder_encdec policy has nothing to share: a clear PolicyError, not an AttributeError."""
    with pytest.raises(PolicyError) as error:
        build(["--no-cross-attention", "--san-decoder-encdec-policy", "3,3"], dictionary=DICT)
    assert "decoder_encdec" in str(error.value)


# --- fast decoding -------------------------------------------------------------------------


def count_fast_steps(model) -> Dict[str, int]:
    """Count the fast self-attention and encoder-decoder steps the model's modules take."""
    counts = {"_self_step": 0, "_encoder_step": 0}
    for module in model.decoder.modules():
        if isinstance(module, DecodingAttention):
            for name in counts:
                method = getattr(module, name)

                def counted(*args, _method=method, _name=name, **kwargs):
                    counts[_name] += 1
                    return _method(*args, **kwargs)

                setattr(module, name, counted)
    return counts


@pytest.mark.parametrize(
    "argv",
    [[], policy_argv("1,5", "3,3", "2,4"), policy_argv("2,2,2", "1,5", share="weights"),
     AAN + ["--san-decoder-encdec-policy", "3,3"]],
    ids=["baseline", "san-output", "san-weights", "aan-encdec33"],
)  # fmt: skip
def test_fast_decoding_gives_the_same_translations(argv):
    """--san-fast-decoding keeps the encoder-decoder keys/values once per sentence and fuses the
    self-attention step; the n-best lists (sentences finishing at different steps, so the batch
    shrinks) must be those of the plain model, and the fast path must really have run."""
    plain, _ = build(argv, dictionary=DICT, seed=101)
    fast, args = build(argv + ["--san-fast-decoding"], dictionary=DICT, seed=102)
    assert args.san_fast_decoding
    fast.load_state_dict(plain.state_dict(), strict=True, model_cfg=None)
    src_tokens, src_lengths = source_batch(DICT, BEAM_BATCH, seed=103)
    kwargs = dict(beam=4, min_len=1, max_len_a=0, max_len_b=10)
    favour_eos(fast, staggering_eos_bonus(plain, src_tokens, src_lengths, **kwargs))
    expected = generate(plain, DICT, src_tokens, src_lengths, **kwargs)
    orders = record_reorders(fast)
    steps = count_fast_steps(fast)
    actual = generate(fast, DICT, src_tokens, src_lengths, **kwargs)
    assert_same_hypotheses(expected, actual, atol=ATOL)
    assert shrank(orders, len(BEAM_BATCH) * 4)
    assert steps["_encoder_step"] > 0
    assert (steps["_self_step"] > 0) == ("aan" not in argv)
    assert any(getattr(m, "beam_size", 1) == 4 for m in fast.decoder.modules())


def test_fast_decoding_keeps_the_state_dict_and_trains_like_fairseq():
    """The flag changes no parameter, and outside incremental decoding nothing changes at all."""
    plain, _ = build([], dictionary=DICT, seed=101)
    fast, _ = build(["--san-fast-decoding"], dictionary=DICT, seed=102)
    assert plain.state_dict().keys() == fast.state_dict().keys()
    fast.load_state_dict(plain.state_dict(), strict=True, model_cfg=None)
    assert isinstance(fast.decoder.layers[0].self_attn, DecodingAttention)
    src_tokens, src_lengths = source_batch(DICT, [5, 3], seed=7)
    prev = source_batch(DICT, [4, 4], seed=8)[0]
    plain.eval(), fast.eval()
    with torch.no_grad():
        expected = plain(src_tokens, src_lengths, prev)[0]
        actual = fast(src_tokens, src_lengths, prev)[0]
    assert torch.equal(expected, actual)


@pytest.mark.parametrize("need_head_weights", [False, True])
@pytest.mark.parametrize("beam", [1, 3])
def test_fast_attention_step_equals_fairseq_step(beam, need_head_weights):
    """One module, several steps with a reorder in between: the fast step's output and returned
    weights equal fairseq's, for self-attention and for encoder-decoder attention."""
    torch.manual_seed(0)
    sentences, embed, heads, src_len = 2, 16, 4, 5
    hypotheses = sentences * beam
    encoder_out = torch.randn(src_len, sentences, embed).repeat_interleave(beam, dim=1)
    padding = torch.zeros(sentences, src_len, dtype=torch.bool)
    padding[1, -2:] = True
    padding = padding.repeat_interleave(beam, dim=0)
    order = torch.arange(hypotheses).view(sentences, beam).flip(1).reshape(-1)
    for kind in ("self_attention", "encoder_decoder_attention"):
        reference = MultiheadAttention(embed, heads, **{kind: True}).eval()
        fast = DecodingAttention(embed, heads, **{kind: True}).eval()
        fast.load_state_dict(reference.state_dict())
        fast.fast_decoding = True
        fast.set_beam_size(beam)
        states = ({}, {})
        for step in range(3):
            query = torch.randn(1, hypotheses, embed)
            extra = dict(key=encoder_out, value=encoder_out, key_padding_mask=padding,
                         static_kv=True) if kind != "self_attention" else dict(key=query, value=query)
            outputs = [
                module(query, incremental_state=state, need_weights=True,
                       need_head_weights=need_head_weights, **extra)
                for module, state in zip((reference, fast), states)
            ]  # fmt: skip
            for expected, actual in zip(*outputs):
                assert torch.allclose(expected, actual, atol=1e-6), (kind, step)
            for module, state in zip((reference, fast), states):
                module.reorder_incremental_state(state, order)
