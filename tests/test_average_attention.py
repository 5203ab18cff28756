"""Tests for the average attention network (Zhang et al., ACL 2018, Eq. 4-5): the module, and
in a ``transformer_san`` decoder (``--decoder-self-attention-type aan``)."""

from typing import List

import pytest
import torch
from torch import Tensor

from helpers import (
    AAN,
    build,
    decoder_logits,
    incremental_logits,
    make_dictionary,
    max_diff,
    source_batch,
    target_prefixes,
)
from fairseq_san.modules import IncrementalState
from fairseq_san.modules.average_attention import AverageAttention

T, B, C, FFN = 6, 4, 8, 16
ATOL = 1e-5
DICT = make_dictionary(24)


@pytest.fixture
def aan() -> AverageAttention:
    torch.manual_seed(0)
    return AverageAttention(C, FFN, dropout=0.1).eval()


def inputs(*shape: int, seed: int = 1) -> Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def naive(aan: AverageAttention, y: Tensor) -> Tensor:
    """Eq. 4-5 position by position: g_t = FFN(mean(y_1..y_t)); i_t * y_t + f_t * g_t."""
    out = []
    for t in range(y.size(0)):
        g = aan.fc2(torch.relu(aan.fc1(y[: t + 1].mean(dim=0))))
        i, f = torch.sigmoid(aan.gate(torch.cat([y[t], g], dim=-1))).chunk(2, dim=-1)
        out.append(i * y[t] + f * g)
    return torch.stack(out)


def decode(aan: AverageAttention, steps: Tensor, state: IncrementalState):
    """Feed ``steps`` (T x B x C) one position at a time; stack the outputs."""
    outs: List[Tensor] = [aan(step[None], incremental_state=state)[0] for step in steps]
    return torch.cat(outs)


def test_full_forward_matches_naive_equations(aan):
    y = inputs(T, B, C)
    out, weights = aan(y, y, y)
    assert weights is None
    assert out.shape == (T, B, C)
    torch.testing.assert_close(out, naive(aan, y), atol=ATOL, rtol=0)


def test_incremental_steps_match_full_forward(aan):
    y = inputs(T, B, C)
    torch.testing.assert_close(decode(aan, y, {}), aan(y)[0], atol=ATOL, rtol=0)


def test_incremental_chunks_match_full_forward(aan):
    y = inputs(T, B, C)
    state: IncrementalState = {}
    chunks = [aan(y[a:b], incremental_state=state)[0] for a, b in [(0, 2), (2, 3), (3, T)]]
    torch.testing.assert_close(torch.cat(chunks), aan(y)[0], atol=ATOL, rtol=0)


@pytest.mark.parametrize("order", [[2, 0, 3, 1], [0, 0, 2, 3]])
def test_reorder_incremental_state(aan, order):
    prefix, rest = inputs(3, B, C, seed=1), inputs(T - 3, B, C, seed=2)
    new_order = torch.tensor(order)
    state: IncrementalState = {}
    decode(aan, prefix, state)
    assert aan.reorder_incremental_state(state, new_order) is state
    continued = decode(aan, rest, state)
    expected = aan(torch.cat([prefix.index_select(1, new_order), rest]))[0][3:]
    torch.testing.assert_close(continued, expected, atol=ATOL, rtol=0)


def test_causal(aan):
    y = inputs(T, B, C)
    changed = y.clone()
    changed[3:] = inputs(T - 3, B, C, seed=3)
    torch.testing.assert_close(aan(changed)[0][:3], aan(y)[0][:3], atol=0, rtol=0)
    assert not torch.allclose(aan(changed)[0][3:], aan(y)[0][3:])


def test_float64_sums_in_float64(aan):
    """A float64 module (gradcheck, reference runs) averages in float64: its sums were cast to
    float32, 5e-4 off the equations for inputs near 1000."""
    aan = aan.double()
    y = inputs(T, B, C).double() * 100 + 1000
    state: IncrementalState = {}
    for out in (aan(y)[0], decode(aan, y, state)):
        assert out.dtype == torch.float64
        torch.testing.assert_close(out, naive(aan, y), atol=1e-9, rtol=0)
    assert state[next(iter(state))]["sum"].dtype == torch.float64


def test_left_padding_is_left_out_of_the_average(aan):
    y = inputs(T, B, C)
    padded = torch.cat([inputs(2, B, C, seed=4), y])
    mask = torch.zeros(B, T + 2, dtype=torch.bool)
    mask[:, :2] = True
    out = aan(padded, key_padding_mask=mask)[0]
    torch.testing.assert_close(out[2:], aan(y)[0], atol=ATOL, rtol=0)
    # The pads average nothing (0 / 0): not NaN, which the next layer's sums (0 x NaN) spread.
    assert out[:2].isfinite().all()


def test_training_drops_out_the_ffns_hidden_layer():
    """Eq. 4 in training: dropout on the FFN's hidden layer, with the draws of one dropout."""
    torch.manual_seed(0)
    aan = AverageAttention(C, FFN, dropout=0.5).train()
    y = inputs(T, B, C)
    torch.manual_seed(2)
    out = aan(y)[0]
    average = y.cumsum(0) / torch.arange(1, T + 1).view(T, 1, 1)
    torch.manual_seed(2)
    g = aan.fc2(torch.nn.functional.dropout(torch.relu(aan.fc1(average)), 0.5, training=True))
    i, f = torch.sigmoid(aan.gate(torch.cat([y, g], dim=-1))).chunk(2, dim=-1)
    torch.testing.assert_close(out, i * y + f * g, atol=ATOL, rtol=0)


def test_drop_in_for_fairseq_decoder_layer_self_attention():
    from fairseq.models.transformer import TransformerConfig
    from fairseq.modules.transformer_layer import TransformerDecoderLayerBase

    class AANDecoderLayer(TransformerDecoderLayerBase):
        def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
            return AverageAttention(embed_dim, cfg.decoder.ffn_embed_dim, cfg.dropout)

    cfg = TransformerConfig()
    cfg.decoder.embed_dim, cfg.decoder.ffn_embed_dim, cfg.decoder.attention_heads = C, FFN, 2
    torch.manual_seed(0)
    layer = AANDecoderLayer(cfg, no_encoder_attn=True).eval()
    x = inputs(T, B, C)
    future = torch.triu(torch.full((T, T), float("-inf")), 1)
    full = layer(x, self_attn_mask=future)[0]
    state: IncrementalState = {}
    steps = torch.cat([layer(x[t : t + 1], incremental_state=state)[0] for t in range(T)])
    torch.testing.assert_close(steps, full, atol=ATOL, rtol=0)


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


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_layer_is_aan_under_layerdrop(seed):
    """A model is built in training mode, where iterating fairseq's LayerDrop list skips layers
    at random: with --decoder-layerdrop, some layers kept dot-product attention (and trained
    so)."""
    model, _ = build(AAN + ["--decoder-layerdrop", "0.5"], dictionary=DICT, seed=seed)
    layers = model.decoder.layers
    assert all(isinstance(layers[i].self_attn, AverageAttention) for i in range(len(layers)))


def test_aan_ffn_dropout_follows_activation_dropout():
    """AAN's FFN dropout is the layer FFN's (Zhang et al.'s relu_dropout), not attention's."""
    argv = AAN + ["--dropout", "0.1", "--attention-dropout", "0.2", "--activation-dropout", "0.3"]
    model, _ = build(argv, dictionary=DICT)
    for layer in model.decoder.layers:
        assert layer.self_attn.dropout_module.p == layer.activation_dropout_module.p == 0.3


def test_aan_projections_take_quant_noise():
    """``--quant-noise-pq`` reached the attention that AAN replaces, and none of AAN's own
    projections: they trained without it, silently. In training each drops weight blocks."""
    model, _ = build(AAN + ["--quant-noise-pq", "0.5"], dictionary=DICT)
    model.train()
    aan = model.decoder.layers[0].self_attn
    for projection in (aan.fc1, aan.fc2, aan.gate):
        x = inputs(3, projection.in_features)
        plain = torch.nn.functional.linear(x, projection.weight, projection.bias)
        torch.manual_seed(0)
        assert max_diff(projection(x), plain) > 1e-3  # blocks of the weight dropped
    model.eval()
    assert max_diff(aan.gate(x), torch.nn.functional.linear(x, aan.gate.weight, aan.gate.bias)) == 0
