"""How much of a static decoder step are its linear layers, and what does that leave possible?

    python docs/results/cpu-yardstick/linear_share.py [--rounds 5] [--beam 4]

``fairseq-san-bench steps``'s random-weight transformer_san_small and batches (batch 16, 20
positions, 2 threads): fairseq's generator (baseline and SAN {6}/{6}) and the static decoder of
SAN {6}/{6} at fp32 and int8, interleaved round after round in this process. Every linear layer
of the static step (packed fp32 or torch's dynamic int8) is timed call by call, so each step
splits into its linear layers and the rest (attention, layer norms, beam search: the glue). A
step cannot take less than its linear layers: fairseq's baseline ms per step over them is the
most the static decoder could gain over it with no glue at all. (The int8 row's layers include
its encoder's, quantized copies run once per batch; at fp32 the encoder is the model's own.)
"""

import argparse
import statistics
import time
from collections import defaultdict
from typing import Dict, List

import torch
from torch.ao.nn.quantized import dynamic as quantized_dynamic

from fairseq_san.benchmark import step_timer
from fairseq_san.benchmark.machine import processor
from fairseq_san.static_decoding.precision import PackedLinear

LENGTH, BATCH, BATCHES = 20, 16, 2
SYSTEMS = [("baseline", "fairseq"), ("san-6-6", "fairseq"), ("san-6-6", "static-fp32"),
           ("san-6-6", "static-int8")]  # fmt: skip


class LinearClock:
    """Seconds spent in the linear layers since the last reset."""

    seconds = 0.0


def timed(layer: type) -> None:
    """Add the time of every call of ``layer`` to ``LinearClock.seconds``."""
    forward = layer.forward

    def timed_forward(self, x):
        start = time.perf_counter()
        y = forward(self, x)
        LinearClock.seconds += time.perf_counter() - start
        return y

    layer.forward = timed_forward


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--beam", type=int, default=4)
    args = parser.parse_args()
    torch.set_num_threads(2)
    timed(PackedLinear)
    timed(quantized_dynamic.Linear)
    dictionary = step_timer.dictionary_of(8000)
    samples = list(step_timer.batches(dictionary, BATCHES, BATCH, 16))
    models = {p: step_timer.build_model("transformer_san_small", step_timer.POLICIES[p], dictionary)
              for p in ("baseline", "san-6-6")}  # fmt: skip
    generators = {(p, d): step_timer.make_generator(d, models[p], dictionary, args.beam, LENGTH)
                  for p, d in SYSTEMS}  # fmt: skip
    steps = BATCHES * (LENGTH + 1)
    total: Dict[tuple, List[float]] = defaultdict(list)
    linear: Dict[tuple, List[float]] = defaultdict(list)
    with torch.no_grad():
        for generator in generators.values():
            generator.generate(None, samples[0])  # warm-up
        for _ in range(args.rounds):
            for system, generator in generators.items():
                LinearClock.seconds = 0.0
                start = time.perf_counter()
                for sample in samples:
                    generator.generate(None, sample)
                total[system].append((time.perf_counter() - start) / steps * 1e3)
                linear[system].append(LinearClock.seconds / steps * 1e3)
    report(args, total, linear)


def report(args, total: Dict[tuple, List[float]], linear: Dict[tuple, List[float]]) -> None:
    name, _, identity = processor()
    print(f"{name} ({identity}), torch {torch.__version__} ({torch.backends.cpu.get_cpu_capability()}), "
          f"2 threads; beam {args.beam}, batch {BATCH}, {LENGTH} positions, {args.rounds} rounds, "
          "medians; ms per step")  # fmt: skip
    print("| policy | decoder | step | linear layers | the rest | x fairseq baseline | "
          "at most, with no rest |")  # fmt: skip
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    base = statistics.median(total[("baseline", "fairseq")])
    for system in SYSTEMS:
        step, layers = statistics.median(total[system]), statistics.median(linear[system])
        if system[1].startswith("static"):
            parts = [f"{layers:.2f}", f"{step - layers:.2f}", f"{base / step:.2f}x",
                     f"{base / layers:.2f}x"]  # fmt: skip
        else:
            parts = ["-", "-", f"{base / step:.2f}x", "-"]
        print(f"| {system[0]} | {system[1]} | {step:.2f} | " + " | ".join(parts) + " |")


if __name__ == "__main__":
    main()
