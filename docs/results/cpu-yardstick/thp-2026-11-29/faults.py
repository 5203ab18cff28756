"""Page faults and ms per decoder step of fairseq's generator and the static decoder, random
weights (``fairseq-san-bench steps``' models), Multi30k's vocabulary size, 2 batches of 16
sentences of 13 tokens, 14 tokens + EOS each, after one untimed pass; 3 rounds, median ms.

    python docs/results/cpu-yardstick/thp-2026-11-29/faults.py BEAM DECODER[,DECODER...]
    THP_MEM_ALLOC_ENABLE=1 python .../faults.py 20 fairseq,static-bf16-full,static-int8

MALLOPT=1 first sets glibc's mmap and trim thresholds out of reach (freed memory kept, never
given back to the kernel), to tell the allocator's returns from torch's own page use."""

import argparse
import ctypes
import os
import resource
import statistics
import time

parser = argparse.ArgumentParser(
    description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
)
parser.add_argument("beam", type=int, metavar="BEAM")
parser.add_argument("decoders", metavar="DECODER[,DECODER...]")
args = parser.parse_args()

if os.environ.get("MALLOPT"):
    libc = ctypes.CDLL("libc.so.6")
    libc.mallopt(-3, 1 << 30)  # M_MMAP_THRESHOLD
    libc.mallopt(-1, 1 << 34)  # M_TRIM_THRESHOLD

import torch  # noqa: E402

from fairseq_san.benchmark import step_timer  # noqa: E402

torch.set_num_threads(2)
beam, decoders = args.beam, args.decoders.split(",")
dictionary = step_timer.dictionary_of(7796)
samples = list(step_timer.batches(dictionary, 2, 16, 13))
rows = []
for policy in ("baseline", "san-6-6"):
    model = step_timer.build_model("transformer_san_small", step_timer.POLICIES[policy], dictionary)
    for decoder in decoders:
        if policy == "baseline" and decoder != "fairseq":
            continue
        generator = step_timer.make_generator(decoder, model, dictionary, beam, 14)
        steps = len(samples) * 15
        with torch.no_grad():
            for sample in samples:
                generator.generate([model], sample)
            times, faults = [], resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            for _ in range(3):
                start = time.perf_counter()
                for sample in samples:
                    generator.generate([model], sample)
                times.append((time.perf_counter() - start) / steps * 1e3)
            faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / (3 * steps)
        rows.append(f"{policy} {decoder} {statistics.median(times):.2f} ms {faults:.0f} faults/step")
print(("MALLOPT " if os.environ.get("MALLOPT") else "") + " | ".join(rows))
