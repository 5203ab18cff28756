"""Operators per decoded position of the static decoder's fixed layout, counted on the CPU.

On a GPU a captured position replays one kernel per operator that computes something (views,
reshapes and empty allocations launch none), so the number of such operators per position is
what a replay costs in launches, and what SAN removes. This counts them with torch.profiler on
the CPU (the fixed layout runs the same operators on either device; the CPU's packed linear
layers show as ``mkldnn::`` operators, counted as one each), as the difference between decoding
2L and L positions, per position:

    python docs/results/gpu-steps/kernels_per_position.py [--length 10] [--top 12]
"""

import argparse
import collections
from typing import Counter, Dict

import torch
from torch.profiler import ProfilerActivity, profile

from fairseq.data import Dictionary
from fairseq_san.benchmark.step_timer import (
    POLICIES,
    batches,
    build_model,
    dictionary_of,
    make_generator,
)

# Operators that launch no kernel: views, shape queries and allocations without a fill.
NO_KERNEL = {
    "aten::" + name
    for name in (
        "view as_strided reshape _reshape_alias _unsafe_view select slice expand expand_as "
        "unsqueeze squeeze permute transpose t detach alias empty empty_like empty_strided "
        "unflatten flatten lift_fresh resolve_conj resolve_neg contiguous split chunk narrow "
        "unbind view_as result_type size stride dim to _to_copy item _local_scalar_dense "
        "is_nonzero type_as"
    ).split()
}


def kernel_ops(prof) -> Counter:
    """Top-level ``aten::`` operators (not called by another one) that launch a kernel, and the
    packed linear layers (``precision.PackedLinear``: one matmul each, as ``aten::linear`` on a
    GPU)."""
    counts: Counter = collections.Counter()
    for event in prof.events():
        parent = event.cpu_parent
        top_level = parent is None or not parent.name.startswith("aten::")
        if event.name.startswith("aten::") and top_level and event.name not in NO_KERNEL:
            counts[event.name] += 1
        elif event.name == "mkldnn::_linear_pointwise" and top_level:
            counts["linear (packed)"] += 1
    return counts


def per_position(policy: str, length: int, dictionary: Dictionary) -> Dict[str, float]:
    """Operators per position of SAN ``policy`` (random weights, beam 4, batch 16)."""
    model = build_model("transformer_san_small", POLICIES[policy], dictionary)
    sample = next(batches(dictionary, 1, 16, 16))
    counts = {}
    with torch.no_grad():
        for positions in (length, 2 * length):
            generator = make_generator("static-fp32-fixed", model, dictionary, 4, positions)
            generator.generate(None, sample)  # warm-up
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                generator.generate(None, sample)
            counts[positions] = kernel_ops(prof)
    names = set(counts[length]) | set(counts[2 * length])
    return {name: (counts[2 * length][name] - counts[length][name]) / length for name in names}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--length", type=int, default=10)
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dictionary = dictionary_of(8000)
    for policy in POLICIES:
        ops = per_position(policy, args.length, dictionary)
        print(f"{policy}: {sum(ops.values()):.0f} kernel-launching operators per position")
        for name, count in sorted(ops.items(), key=lambda item: -item[1])[: args.top]:
            print(f"    {name:28s} {count:6.1f}")


if __name__ == "__main__":
    main()
