"""GFLOP/s of the static decoder's packed bfloat16 linear layers (oneDNN, weights packed once, as
``precision.PackedLinear``) at a beam-20 step's shapes (320 hypotheses of transformer_san_small)
and at a large square one (what these 2 threads reach at best), against float32.

    python docs/results/cpu-yardstick/profile-2026-11-30/gemm_rates.py
"""

import argparse
import time

import torch

SHAPES = {  # rows, inputs, outputs
    "V / out projection 320x256->256": (320, 256, 256),
    "FFN fc1 320x256->1024": (320, 256, 1024),
    "FFN fc2 320x1024->256": (320, 1024, 256),
    "output projection 320x256->8000": (320, 256, 8000),
    "square 2048x2048->2048": (2048, 2048, 2048),
}


def gflops(rows: int, inputs: int, outputs: int, dtype: torch.dtype, calls: int = 30) -> float:
    x = torch.randn(rows, inputs).to(dtype)
    weight = torch.randn(outputs, inputs).to(dtype)
    packed = torch.ops.mkldnn._reorder_linear_weight(weight)
    bias = torch.zeros(outputs).to(dtype)

    def run():
        return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")

    for _ in range(5):
        run()
    start = time.perf_counter()
    for _ in range(calls):
        run()
    seconds = (time.perf_counter() - start) / calls
    return 2 * rows * inputs * outputs / seconds / 1e9


def main() -> None:
    torch.set_num_threads(2)
    for name, shape in SHAPES.items():
        rates = "  ".join(f"{label} {gflops(*shape, dtype):.0f}"
                          for label, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)))
        print(f"{name:34s} GFLOP/s: {rates}")


if __name__ == "__main__":
    argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    ).parse_args()  # no arguments: --help prints the docstring
    main()
