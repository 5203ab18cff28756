"""One-query attention products of a static step, torch.bmm against caches.bmm, at a step's shapes
and cache layouts: Q K^T (rows x heads products of 1 x 64 by 64 x L, the keys a view of a cache
slot) and S V (1 x L by L x 64), batch 16 at beams 4 and 20 (64 and 320 rows, 4 heads), L = 1..8;
microseconds a call, medians of 7 repeats of 200 calls, 2 threads.

    PYTHONPATH=. python docs/results/cpu-yardstick/small-products-2026-12-01/products.py
"""

import argparse
import statistics
import time

import torch

from fairseq_san.static_decoding.caches import bmm

HEADS, HEAD_DIM, POSITIONS = 4, 64, 32


def microseconds(function, calls: int = 200) -> float:
    for _ in range(20):
        function()
    runs = []
    for _ in range(7):
        start = time.perf_counter()
        for _ in range(calls):
            function()
        runs.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(runs)


def main() -> None:
    torch.set_num_threads(2)
    print("rows L | Q K^T: torch.bmm caches.bmm | S V: torch.bmm caches.bmm (us)")
    with torch.inference_mode():
        for rows in (64, 320):
            cache = torch.randn(2, rows, HEADS, POSITIONS, HEAD_DIM)
            for length in range(1, 9):
                keys = cache[0, :, :, :length].view(rows * HEADS, length, HEAD_DIM)
                values = cache[1, :, :, :length].view(rows * HEADS, length, HEAD_DIM)
                query = torch.randn(rows * HEADS, 1, HEAD_DIM)
                weights = torch.softmax(torch.randn(rows * HEADS, 1, length), dim=-1)
                times = [
                    microseconds(lambda: product(a, b))
                    for a, b in ((query, keys.transpose(1, 2)), (weights, values))
                    for product in (torch.bmm, bmm)
                ]
                print(f"{rows:4d} {length} | {times[0]:7.1f} {times[1]:7.1f} | "
                      f"{times[2]:7.1f} {times[3]:7.1f}")


if __name__ == "__main__":
    argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    ).parse_args()  # no arguments: --help prints the docstring
    main()
