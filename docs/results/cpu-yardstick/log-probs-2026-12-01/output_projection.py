"""The int8 output projection and log-softmax of a beam-20 step (320 rows x 256 -> 7,796, as
SAN {6}/{6} at batch 16 on Multi30k), whole or in blocks of rows written into one buffer: ms and
page faults a call, in this process's state of glibc ("default") or with its mmap and trim
thresholds raised first ("kept": nothing freed goes back to the kernel).

    python docs/results/cpu-yardstick/log-probs-2026-12-01/output_projection.py default|kept
"""

import argparse
import ctypes
import resource
import time
import warnings

import torch
from torch import nn
from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

ROWS, EMBED, VOCABULARY = 320, 256, 7796
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3


def faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def report(name, function, calls=100) -> None:
    """ms and page faults per call of ``function``, after 10 warm-up calls."""
    for _ in range(10):
        function()
    start, before = time.perf_counter(), faults()
    for _ in range(calls):
        function()
    seconds = (time.perf_counter() - start) / calls
    print(f"{name:34s} {seconds * 1e3:6.2f} ms {(faults() - before) / calls:7.0f} faults")


def main(mode: str) -> None:
    if mode == "kept":
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(M_MMAP_THRESHOLD, 1 << 30)
        libc.mallopt(M_TRIM_THRESHOLD, 1 << 31)
    torch.set_num_threads(2)
    warnings.filterwarnings("ignore")
    linear = nn.Sequential(nn.Linear(EMBED, VOCABULARY))
    qconfig = {nn.Linear: per_channel_dynamic_qconfig}
    projection = quantize_dynamic(linear, qconfig, dtype=torch.qint8)[0]
    x = torch.randn(ROWS, EMBED)
    out = torch.empty(ROWS, VOCABULARY)

    def whole():
        return torch.log_softmax(projection(x), -1, dtype=torch.float32)

    def blocks(rows, fresh):
        def run():
            result = torch.empty(ROWS, VOCABULARY) if fresh else out
            for start in range(0, ROWS, rows):
                torch.log_softmax(projection(x[start : start + rows]), -1, out=result[start : start + rows])
            return result
        return run

    for _ in range(2):
        report("int8 product alone", lambda: projection(x))
        report("int8 product + log-softmax, whole", whole)
        for rows in (32, 64, 160):
            report(f"blocks of {rows} rows, kept buffer", blocks(rows, fresh=False))
            report(f"blocks of {rows} rows, new buffer", blocks(rows, fresh=True))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "mode", help="'kept': glibc keeps freed memory (mallopt); else its defaults"
    )
    args = parser.parse_args()
    main(args.mode)
