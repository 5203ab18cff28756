"""JS divergence between layers' attention weights (Xiao et al., IJCAI 2019, section 3.1).

Each head is a separate channel: JS is computed per head and query position
over the key distribution, then averaged. ``PairwiseJS`` streams the average
for every pair of layers over batches with memory independent of their number.
Values are in nats, so 0 <= JS <= ln 2. Weights are cast to float64 and each row renormalised
first: half-precision weights (fp16/bf16) sum to 1 only to within their rounding, which would
otherwise count as divergence (up to about 1e-3 nats a row in bfloat16).

The paper averages over heads and says nothing of positions; every valid query position counts
here. In decoder self-attention the first position sees only itself, so every layer gives it
the same distribution and its JS is 0. That scales each decoder_self JS by about 1 - 1/length
(length in tokens, end of sentence included) and so raises each similarity ln 2 - JS a little;
it is kept so that the analyses behind the committed policies stay reproducible.
"""

from typing import Optional

import torch
from torch import Tensor

from fairseq_san.policy import LN2


def js_divergence(p: Tensor, q: Tensor, dim: int = -1) -> Tensor:
    """JS(p, q) in nats over ``dim``, in float64, for broadcastable ``p`` and ``q``.

    Uses JS = (KL(p || m) + KL(q || m)) / 2 with m = (p + q) / 2 and
    0 * log 0 = 0, so zero-probability entries (e.g. padded keys) contribute
    nothing; rounding is clamped into [0, ln 2].
    """
    p = p.to(torch.float64)
    q = q.to(torch.float64)
    # Where p + q == 0 both are 0; any positive denominator then gives 0 * log 0 = 0.
    total = (p + q).clamp_min(torch.finfo(torch.float64).tiny)
    js = 0.5 * (torch.xlogy(p, 2.0 * p / total) + torch.xlogy(q, 2.0 * q / total)).sum(dim)
    return js.clamp(0.0, LN2)


# How far a real query's weights may sum from 1: bfloat16 weights round each entry to 2**-8 of it.
SUM_TOLERANCE = 1e-2


def check_distributions(attn: Tensor, keep: Tensor) -> None:
    """ValueError naming the first layer (from 1) whose weights at a real query position (``keep``,
    (B, 1, T)) are no distribution over the keys: not finite (a diverged model), negative, or
    summing to other than 1. Its JS would be NaN, or a wrong value clamped into [0, ln 2]."""
    sums = attn.sum(-1)  # (L, B, H, T); NaN where an entry is NaN or infinities cancel
    wrong = ~((sums - 1.0).abs() <= SUM_TOLERANCE) | (attn < 0).any(-1) | ~attn.isfinite().all(-1)
    layers = (wrong & keep).flatten(1).any(1)
    if layers.any():
        layer = int(layers.nonzero()[0]) + 1
        raise ValueError(
            f"the attention weights of layer {layer} are no distribution over the keys at a real "
            "query position (NaN, infinite or negative, or not summing to 1)"
        )


def renormalised(attn: Tensor) -> Tensor:
    """``attn`` with each row over the keys divided by its sum (rows of zeros stay zeros)."""
    return attn / attn.sum(-1, keepdim=True).clamp_min(torch.finfo(attn.dtype).tiny)


class PairwiseJS:
    """Streaming mean JS divergence between the attention weights of every pair of layers."""

    def __init__(self, num_layers: int) -> None:
        if not isinstance(num_layers, int) or isinstance(num_layers, bool) or num_layers < 1:
            raise ValueError(f"num_layers must be a positive int, got {num_layers!r}")
        self.num_layers = num_layers
        self._sums = torch.zeros(num_layers, num_layers, dtype=torch.float64)
        self._count = 0

    @property
    def count(self) -> int:
        """Number of (head, valid query position) channels accumulated per layer pair."""
        return self._count

    def update(self, attn: Tensor, query_mask: Optional[Tensor] = None) -> None:
        """Add one batch of attention probabilities.

        ``attn`` is (L, B, H, T, S): layers, batch, heads, queries, keys; each
        row sums to 1 over its valid keys and padded keys have probability 0 (a real query's
        row that does not is a ValueError: ``check_distributions``); rows are then renormalised.
        ``query_mask`` is a (B, T) bool tensor, True for real query positions;
        the others are ignored (their rows may hold anything). ``None`` counts all.
        """
        if attn.dim() != 5:
            raise ValueError(
                f"attn must be (L, B, H, T, S) with 5 dims, got shape {tuple(attn.shape)}"
            )
        num_layers, bsz, heads, tgt_len, _ = attn.shape
        if num_layers != self.num_layers:
            raise ValueError(f"attn has {num_layers} layers, expected num_layers={self.num_layers}")
        if query_mask is None:
            query_mask = torch.ones(bsz, tgt_len, dtype=torch.bool, device=attn.device)
        elif query_mask.shape != (bsz, tgt_len):
            raise ValueError(
                f"query_mask must be (B, T) = {(bsz, tgt_len)} to match attn, "
                f"got {tuple(query_mask.shape)}"
            )
        elif query_mask.dtype != torch.bool:
            raise ValueError(f"query_mask must be a bool tensor, got dtype {query_mask.dtype}")
        keep = query_mask.to(attn.device)[:, None, :]  # (B, 1, T), broadcast over heads
        attn = attn.to(torch.float64)
        check_distributions(attn, keep)
        attn = renormalised(attn)
        pairs = torch.triu_indices(num_layers, num_layers, offset=1)
        sums = [
            torch.where(keep, js_divergence(attn[i], attn[j]), 0.0).sum()
            for i, j in pairs.T.tolist()
        ]
        if sums:
            values = torch.stack(sums).cpu()
            self._sums[pairs[0], pairs[1]] += values
            self._sums[pairs[1], pairs[0]] += values
        self._count += heads * int(query_mask.sum())

    def matrix(self) -> list[list[float]]:
        """Symmetric L x L matrix of mean JS divergences in nats, 0 on the diagonal."""
        if self._count == 0:
            raise ValueError("PairwiseJS.matrix(): no query positions accumulated yet")
        return (self._sums / self._count).tolist()
