"""ms per step of the static decoder's CPU step under torch.no_grad and under
torch.inference_mode: the same generator, one process, the two modes interleaved round after
round (8 rounds of 2 batches), medians and the per-round ratio.

    PYTHONPATH=. python docs/results/cpu-yardstick/inference-mode-2026-11-30/modes.py BEAM

The step timer's synthetic batch (fairseq-san-bench steps): transformer_san_small SAN {6}/{6},
random weights, vocabulary 8,000, batch 16, 20 tokens + EOS, --san-decoder-precision
bf16-full, 2 threads. ``decode`` is the generator's batch (generate without its choice of mode);
the n-best are read outside either mode, as generate does.
"""

import argparse
import statistics
import time

import torch

from fairseq_san.benchmark import step_timer
from fairseq_san.benchmark.machine import machine_info
from fairseq_san.benchmark.report import processor_line

BATCH, LENGTH, ROUNDS = 16, 20, 8
MODES = {"no_grad": torch.no_grad, "inference_mode": torch.inference_mode}


def main(beam: int) -> None:
    torch.set_num_threads(2)
    dictionary = step_timer.dictionary_of(8000)
    model = step_timer.build_model("transformer_san_small", step_timer.POLICIES["san-6-6"],
                                   dictionary)  # fmt: skip
    generator = step_timer.make_generator("static-bf16-full", model, dictionary, beam, LENGTH)
    samples = list(step_timer.batches(dictionary, 2, BATCH, 13))

    def run(mode: str) -> float:
        start = time.perf_counter()
        for sample in samples:
            with MODES[mode]():
                search = generator.decode(sample, None, None)
            search.hypotheses()
        return (time.perf_counter() - start) / (len(samples) * (LENGTH + 1)) * 1e3

    for mode in MODES:
        run(mode)  # warm-up
    times = {mode: [] for mode in MODES}
    for _ in range(ROUNDS):
        for mode in MODES:
            times[mode].append(run(mode))
    print(processor_line(machine_info(torch.device("cpu"))), torch.__version__)
    for mode, values in times.items():
        print(f"beam {beam} {mode}: median {statistics.median(values):.2f} ms/step "
              f"(range {min(values):.2f}-{max(values):.2f})")  # fmt: skip
    ratios = [a / b for a, b in zip(times["no_grad"], times["inference_mode"])]
    print(f"beam {beam} no_grad / inference_mode, per round: median "
          f"{statistics.median(ratios):.3f} (range {min(ratios):.3f}-{max(ratios):.3f})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("beam", type=int, metavar="BEAM")
    main(parser.parse_args().beam)
