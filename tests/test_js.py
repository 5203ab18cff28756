"""Tests for the JS divergence between layers' attention weights (section 3.1)."""

import math

import pytest
import torch

from fairseq_san.js import LN2, PairwiseJS, js_divergence


def _random_dist(*shape: int, generator: torch.Generator) -> torch.Tensor:
    return torch.softmax(3.0 * torch.randn(*shape, generator=generator, dtype=torch.float64), -1)


def _random_attn(L, B, H, T, S, src_lens, generator):
    """(L, B, H, T, S) attention with keys beyond src_lens[b] at probability 0."""
    logits = 3.0 * torch.randn(L, B, H, T, S, generator=generator, dtype=torch.float64)
    key_pad = torch.arange(S)[None, :] >= torch.tensor(src_lens)[:, None]  # (B, S)
    logits = logits.masked_fill(key_pad[None, :, None, None, :], float("-inf"))
    return torch.softmax(logits, -1)


def _reference_matrix(attn: torch.Tensor, mask: torch.Tensor) -> list[list[float]]:
    """Mean JS over heads x valid queries, by explicit loops over positions."""
    L, B, H, T, _ = attn.shape
    out = [[0.0] * L for _ in range(L)]
    for i in range(L):
        for j in range(L):
            vals = [
                float(js_divergence(attn[i, b, h, t], attn[j, b, h, t]))
                for b in range(B)
                for h in range(H)
                for t in range(T)
                if mask[b, t]
            ]
            out[i][j] = sum(vals) / len(vals)
    return out


def test_js_symmetric_bounded_and_zero_on_identical():
    g = torch.Generator().manual_seed(0)
    p = _random_dist(50, 7, generator=g)
    q = _random_dist(50, 7, generator=g)
    js = js_divergence(p, q)
    assert js.shape == (50,)
    assert torch.allclose(js, js_divergence(q, p), atol=0, rtol=1e-12)
    assert bool(((js >= 0) & (js <= LN2)).all())
    assert bool((js > 0).all())
    assert torch.equal(js_divergence(p, p), torch.zeros(50, dtype=torch.float64))


def test_js_disjoint_supports_is_ln2():
    p = torch.tensor([0.5, 0.5, 0.0, 0.0])
    q = torch.tensor([0.0, 0.0, 0.25, 0.75])
    assert float(js_divergence(p, q)) == pytest.approx(math.log(2.0), abs=1e-12)


def test_js_of_weights_summing_over_one_by_rounding_stays_ln2():
    """float32 weights of disjoint supports that sum an ulp over 1 (a softmax's rounding) gave
    JS a little over ln 2 before clamping: the bound of JS in nats holds, not 1 (bits')."""
    p = torch.tensor([0.8622880578041077, 0.13771198689937592, 0.0, 0.0])
    q = torch.tensor([0.0, 0.0, 0.060243818908929825, 0.9397562146186829])
    assert float(js_divergence(p, q)) == LN2


def test_js_hand_computed_value():
    # m = [3/4, 1/4]; KL(p||m) = ln(4/3); KL(q||m) = (ln(2/3) + ln 2) / 2 = ln(4/3) / 2.
    # JS = (ln(4/3) + ln(4/3) / 2) / 2 = 3/4 ln(4/3).
    p = torch.tensor([1.0, 0.0])
    q = torch.tensor([0.5, 0.5])
    assert float(js_divergence(p, q)) == pytest.approx(0.75 * math.log(4.0 / 3.0), abs=1e-12)


def test_js_broadcast_and_dim():
    g = torch.Generator().manual_seed(1)
    p = _random_dist(4, 1, 6, generator=g)
    q = _random_dist(1, 3, 6, generator=g)
    js = js_divergence(p, q)
    assert js.shape == (4, 3)
    assert float(js[2, 1]) == pytest.approx(float(js_divergence(p[2, 0], q[0, 1])), abs=1e-14)
    # Distributions along dim 0 instead of the last dim.
    assert torch.allclose(js_divergence(p.transpose(0, 2), q.transpose(0, 2), dim=0), js.T)


def test_js_float32_input_is_finite_with_zeros():
    p = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float32)
    q = torch.tensor([0.0, 0.0, 1.0], dtype=torch.float16)
    js = js_divergence(p, q)
    assert torch.isfinite(js) and float(js) == pytest.approx(math.log(2.0))


def test_pairwise_matrix_symmetric_zero_diagonal_and_matches_reference():
    g = torch.Generator().manual_seed(2)
    attn = _random_attn(4, 2, 3, 5, 6, [6, 4], g)
    mask = torch.tensor([[True] * 5, [True, True, True, False, False]])
    acc = PairwiseJS(4)
    acc.update(attn, mask)
    m = acc.matrix()
    assert acc.count == 3 * 8
    for i in range(4):
        assert m[i][i] == 0.0
        for j in range(4):
            assert m[i][j] == m[j][i]
            assert 0.0 <= m[i][j] <= LN2
            if i != j:
                assert m[i][j] > 0.0
    ref = _reference_matrix(attn, mask)
    assert torch.allclose(torch.tensor(m), torch.tensor(ref), atol=1e-12)


def test_pairwise_identical_layers_give_zero():
    g = torch.Generator().manual_seed(3)
    layer = _random_attn(1, 2, 4, 3, 5, [5, 2], g)
    attn = layer.expand(3, -1, -1, -1, -1).float()
    acc = PairwiseJS(3)
    acc.update(attn)
    assert acc.matrix() == [[0.0] * 3 for _ in range(3)]
    assert acc.count == 2 * 4 * 3


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_weights_give_the_js_of_their_float32_counterparts(dtype):
    """A leader's fp16/bf16 weights round 1/3 or 1/7, so their rows sum to 1 only to within
    ~1e-3: that mass counted as divergence (1e-4 nats here). Each row is renormalised first."""

    def uniform(keys: range) -> torch.Tensor:
        row = torch.zeros(9)
        row[list(keys)] = 1.0 / len(keys)
        return row

    first = torch.stack([uniform(range(3)), uniform(range(7))])
    second = torch.stack([uniform(range(2, 9)), uniform(range(3))])
    attn = torch.stack([first, second])[:, None, None]  # (L=2, B=1, H=1, T=2, S=9)
    full, half = PairwiseJS(2), PairwiseJS(2)
    full.update(attn)
    half.update(attn.to(dtype))
    assert half.matrix()[0][1] == pytest.approx(full.matrix()[0][1], abs=1e-7)


def test_streamed_equals_all_in_memory():
    g = torch.Generator().manual_seed(4)
    L, H = 3, 2
    batches = []  # (attn, mask) with different B, T, S per batch
    for B, T, S in [(2, 3, 4), (3, 5, 2), (1, 4, 7)]:
        src_lens = torch.randint(1, S + 1, (B,), generator=g).tolist()
        tgt_lens = torch.randint(1, T + 1, (B,), generator=g).tolist()
        attn = _random_attn(L, B, H, T, S, src_lens, g)
        mask = torch.arange(T)[None, :] < torch.tensor(tgt_lens)[:, None]
        batches.append((attn, mask))

    streamed = PairwiseJS(L)
    for attn, mask in batches:
        streamed.update(attn, mask)

    # All in memory: pad every batch to the largest T and S, then concatenate on B.
    T_max = max(a.shape[3] for a, _ in batches)
    S_max = max(a.shape[4] for a, _ in batches)
    all_attn = torch.cat(
        [
            torch.nn.functional.pad(a, (0, S_max - a.shape[4], 0, T_max - a.shape[3]))
            for a, _ in batches
        ],
        dim=1,
    )
    all_mask = torch.cat(
        [torch.nn.functional.pad(m, (0, T_max - m.shape[1]), value=False) for _, m in batches]
    )
    whole = PairwiseJS(L)
    whole.update(all_attn, all_mask)

    assert streamed.count == whole.count == H * int(all_mask.sum())
    assert torch.allclose(torch.tensor(streamed.matrix()), torch.tensor(whole.matrix()), atol=1e-12)


def test_masked_query_positions_are_ignored():
    g = torch.Generator().manual_seed(5)
    attn = _random_attn(3, 2, 2, 4, 5, [5, 3], g)
    mask = torch.tensor([[True, True, False, True], [True, False, False, False]])
    base = PairwiseJS(3)
    base.update(attn, mask)

    # Garbage in the padded query rows, and one of them a valid but different distribution.
    changed = attn.masked_fill(~mask[None, :, None, :, None], float("nan"))
    changed[0, 0, :, 2] = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0])
    other = PairwiseJS(3)
    other.update(changed, mask)
    assert other.matrix() == base.matrix()
    assert other.count == base.count == 2 * 4


def test_bad_shapes_raise():
    acc = PairwiseJS(3)
    with pytest.raises(ValueError, match="layers"):
        acc.update(torch.rand(2, 1, 1, 2, 2))
    with pytest.raises(ValueError, match="5 dims"):
        acc.update(torch.rand(3, 1, 2, 2))
    with pytest.raises(ValueError, match="query_mask"):
        acc.update(torch.rand(3, 2, 1, 4, 2), torch.ones(4, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="bool"):
        acc.update(torch.rand(3, 2, 1, 4, 2), torch.ones(2, 4))
    with pytest.raises(ValueError, match="no query positions"):
        acc.matrix()
    with pytest.raises(ValueError, match="num_layers"):
        PairwiseJS(0)
    with pytest.raises(ValueError, match="num_layers"):  # was a TypeError from torch.zeros
        PairwiseJS(True)
    assert acc.count == 0


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -0.5, 3.0, 0.0, 0.21])
def test_weights_that_are_no_distribution_at_a_real_query_are_refused(value):
    """A diverged model's NaN reached js.json (written as bare NaN, which the loop then took as a
    finished analysis); negative weights gave NaN, weights summing to 3 or 0 a JS clamped to ln 2
    or halved, and rows summing to 1.05 (5 keys of 0.21) are renormalised only within bfloat16's
    rounding. The layer is named; the same value at a padded query position is ignored."""
    g = torch.Generator().manual_seed(6)
    attn = _random_attn(3, 2, 2, 4, 5, [5, 3], g)
    mask = torch.tensor([[True, True, True, True], [True, True, False, False]])
    ignored = attn.clone()
    ignored[1, 1, 0, 3] = value
    acc = PairwiseJS(3)
    acc.update(ignored, mask)
    broken = attn.clone()
    broken[1, 1, 0, 1] = value
    with pytest.raises(ValueError, match="layer 2 are no distribution over the keys"):
        PairwiseJS(3).update(broken, mask)


def test_negative_weights_summing_to_one_are_refused():
    """A row with a negative weight that still sums to 1 gave a NaN JS: it is named too."""
    attn = _random_attn(2, 1, 1, 2, 3, [3], torch.Generator().manual_seed(7))
    attn[1, 0, 0, 1] = torch.tensor([1.5, -0.5, 0.0], dtype=attn.dtype)
    with pytest.raises(ValueError, match="layer 2 are no distribution over the keys"):
        PairwiseJS(2).update(attn)
