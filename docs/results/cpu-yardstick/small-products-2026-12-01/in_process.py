"""The static step with ``caches.bmm`` (a broadcast product and a sum for one-query products below
torch's scalar-loop threshold) against the same step with torch.bmm everywhere: one process, one
generator, the two alternating decode by decode (ROUNDS rounds), on the step timer's synthetic
batch (transformer_san_small, vocabulary 8,000, batch 16, LENGTH tokens + EOS). Each step call is
timed; printed per side: the median ms of the whole decode's step calls per step, and of the step
calls at positions 1-5 (where the products are below the threshold: L = 2..6) and 6 on (the same
code either side: the control). This VM's speed wanders between and within processes; positions
1-5 against positions 6 on in the same decodes is the measure it leaves least noisy.

    PYTHONPATH=. python docs/results/cpu-yardstick/small-products-2026-12-01/in_process.py DECODER BEAM POLICY [LENGTH]
"""

import argparse
import statistics
import time

import torch

from fairseq_san.benchmark import step_timer
from fairseq_san.static_decoding import caches
from fairseq_san.static_decoding import step as step_module

ROUNDS = 30
FIRST, SMALL_UNTIL = 1, 6  # positions 1..5 attend over 2..6 positions: 64 x L < 400


def main(decoder: str, beam: int, policy: str, length: int = 14) -> None:
    torch.set_num_threads(2)
    dictionary = step_timer.dictionary_of(8000)
    sample = next(iter(step_timer.batches(dictionary, 1, 16, 16)))
    model = step_timer.build_model("transformer_san_small", step_timer.POLICIES[policy], dictionary)
    generator = step_timer.make_generator(decoder, model, dictionary, beam, length)
    sides = {"torch.bmm": torch.bmm, "caches.bmm": caches.bmm}  # caches.bmm calls torch.bmm
    seconds = {name: {"all": [], "small": [], "rest": []} for name in sides}
    calls = []
    forward = step_module.StaticDecoderStep.forward

    def timed_forward(self, tokens, step, *args, **kwargs):
        start = time.perf_counter()
        result = forward(self, tokens, step, *args, **kwargs)
        calls.append((step, time.perf_counter() - start))
        return result

    step_module.StaticDecoderStep.forward = timed_forward
    with torch.inference_mode():
        for _ in range(2):
            generator.generate(None, sample)
        for _ in range(ROUNDS):
            for name, function in sides.items():
                step_module.bmm = caches.bmm = function  # the layers' and Position.logits'
                calls.clear()
                generator.generate(None, sample)
                small = [s for step, s in calls if FIRST <= step < SMALL_UNTIL]
                rest = [s for step, s in calls if step >= SMALL_UNTIL]
                for part, times in (("all", [s for _, s in calls]), ("small", small), ("rest", rest)):
                    seconds[name][part].append(sum(times) / len(times) * 1e3)
    print(f"{decoder} beam {beam} {policy} length {length}, {ROUNDS} rounds, medians of ms a step:")
    for name, parts in seconds.items():
        small_over_rest = [a / b for a, b in zip(parts["small"], parts["rest"])]
        print(f"  {name:10s} all {statistics.median(parts['all']):6.2f}  positions 1-5 "
              f"{statistics.median(parts['small']):6.2f}  6 on {statistics.median(parts['rest']):6.2f}"
              f"  (1-5)/(6 on) {statistics.median(small_over_rest):.3f}")
    speedups = [a / b for a, b in zip(seconds["torch.bmm"]["all"], seconds["caches.bmm"]["all"])]
    print(f"  whole decode, torch.bmm / caches.bmm per round: median {statistics.median(speedups):.3f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("decoder", help="the decoder (static-int8, static-fp32, static-bf16-full)")
    parser.add_argument("beam", type=int, help="beam size")
    parser.add_argument("policy", help="the model (san-6-6, baseline)")
    parser.add_argument(
        "length", type=int, nargs="?", default=14, help="decoded length (default: 14)"
    )
    args = parser.parse_args()
    main(args.decoder, args.beam, args.policy, args.length)
