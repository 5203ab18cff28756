"""torch.bmm at a decoder step's self-attention shapes (320 hypotheses x 4 heads, head size 64,
L positions attended) over a cache slot's narrowed view (rows * heads, L, 64 of a tensor with
room for 64 positions: the batch stride is 64 x 64, not L x 64) against a contiguous copy of
it, the copy included: Q K^T and weights x V, bfloat16 and float32, 2 threads.

    python docs/results/cpu-yardstick/profile-2026-11-30/bmm_layouts.py
"""

import argparse
import time

import torch

ROWS, HEADS, ROOM, HEAD = 320, 4, 64, 64


def microseconds(function, calls: int = 400) -> float:
    for _ in range(20):
        function()
    start = time.perf_counter()
    for _ in range(calls):
        function()
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    torch.set_num_threads(2)
    for dtype in (torch.bfloat16, torch.float32):
        for length in (5, 20, 60):
            slot = torch.randn(ROWS, HEADS, ROOM, HEAD).to(dtype)
            keys = slot[:, :, :length].view(ROWS * HEADS, length, HEAD)  # the step's view
            query = torch.randn(ROWS * HEADS, 1, HEAD).to(dtype)
            weights = torch.softmax(torch.randn(ROWS * HEADS, 1, length), -1).to(dtype)
            times = {
                "QK^T view": lambda: torch.bmm(query, keys.transpose(1, 2)),
                "QK^T copy": lambda: torch.bmm(query, keys.contiguous().transpose(1, 2)),
                "SV view": lambda: torch.bmm(weights, keys),
                "SV copy": lambda: torch.bmm(weights, keys.contiguous()),
                "copy alone": lambda: keys.contiguous(),
            }
            shown = "  ".join(f"{name} {microseconds(f):.0f}" for name, f in times.items())
            print(f"{str(dtype)[6:]:8s} L={length:2d} (us): {shown}")


if __name__ == "__main__":
    argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    ).parse_args()  # no arguments: --help prints the docstring
    main()
