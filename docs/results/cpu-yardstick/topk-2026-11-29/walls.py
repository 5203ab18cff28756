"""Wall-clock time of torch.topk and torch.log_softmax inside whole static decodes (the step
timer's synthetic batch: transformer_san_small SAN {6}/{6}, vocabulary 8,000, batch 16, L=20),
per step, with the minor page faults (getrusage) of the whole decode and of those calls.

    PYTHONPATH=TREE python docs/results/cpu-yardstick/topk-2026-11-29/walls.py DECODER BEAM

torch.profiler inflated these small operators 4-15x against wall clocks (cpu-yardstick/thp's
profile), hence timers around the calls themselves. A diagnosis: two warm-up decodes, five timed.
"""

import argparse
import collections
import resource
import time

import torch

from fairseq_san.benchmark import step_timer

DECODES, POSITIONS = 5, 21


def timed(name, function, seconds, faults, calls):
    """``function`` with its wall time, page faults and calls added up under ``name``."""

    def wrapper(*args, **kwargs):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        start = time.perf_counter()
        result = function(*args, **kwargs)
        seconds[name] += time.perf_counter() - start
        faults[name] += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
        calls[name] += 1
        return result

    return wrapper


def main(decoder: str, beam: int) -> None:
    torch.set_num_threads(2)
    dictionary = step_timer.dictionary_of(8000)
    sample = next(iter(step_timer.batches(dictionary, 1, 16, 16)))
    model = step_timer.build_model("transformer_san_small", step_timer.POLICIES["san-6-6"], dictionary)
    generator = step_timer.make_generator(decoder, model, dictionary, beam, 20)
    seconds, faults, calls = (collections.defaultdict(float) for _ in range(3))
    for name in ("log_softmax", "topk"):
        setattr(torch, name, timed(name, getattr(torch, name), seconds, faults, calls))
    with torch.no_grad():
        for _ in range(2):
            generator.generate(None, sample)
        for table in (seconds, faults, calls):
            table.clear()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        start = time.perf_counter()
        for _ in range(DECODES):
            generator.generate(None, sample)
        total = time.perf_counter() - start
    steps = DECODES * POSITIONS
    whole = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / steps
    print(f"{decoder} beam {beam}: {total / steps * 1e3:.2f} ms a step, {whole:.0f} faults a step")
    for name in seconds:
        print(f"  torch.{name:12s} {seconds[name] / steps * 1e3:.3f} ms a step, "
              f"{faults[name] / steps:.0f} faults, {calls[name] / steps:.1f} calls")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("decoder", help="the decoder (static-int8, static-fp32, static-bf16-full)")
    parser.add_argument("beam", type=int, help="beam size")
    args = parser.parse_args()
    main(args.decoder, args.beam)
