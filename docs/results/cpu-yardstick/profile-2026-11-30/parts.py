"""Wall time of the parts of a static decode's step, inside whole decodes (the step timer's
synthetic batch: transformer_san_small SAN {6}/{6}, vocabulary 8,000, batch 16, 20 tokens),
per step: each decoder layer, the output projection, the log-softmax, beam search's ``advance``
and the caches' reordering (``follow``), with timers around the calls (torch.profiler inflates
small operators several times).

    PYTHONPATH=. python docs/results/cpu-yardstick/profile-2026-11-30/parts.py DECODER BEAM
"""

import argparse
import collections
import time

import torch

from fairseq_san.benchmark import step_timer
from fairseq_san.static_decoding import beam_search, caches, step as step_module

DECODES, POSITIONS = 5, 21


def timed(function, seconds, label):
    """``function`` with its wall time added up under ``label``."""

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        result = function(*args, **kwargs)
        seconds[label] += time.perf_counter() - start
        return result

    return wrapper


def main(decoder: str, beam: int) -> None:
    torch.set_num_threads(2)
    dictionary = step_timer.dictionary_of(8000)
    sample = next(iter(step_timer.batches(dictionary, 1, 16, 16)))
    model = step_timer.build_model("transformer_san_small", step_timer.POLICIES["san-6-6"], dictionary)
    generator = step_timer.make_generator(decoder, model, dictionary, beam, 20)
    seconds = collections.defaultdict(float)
    for owner, name, label in (
        (beam_search.TensorBeamSearch, "advance", "beam search advance"),
        (caches.DecoderCache, "follow", "caches follow"),
        (step_module.StaticDecoderStep, "forward", "step (all below)"),
        (torch, "log_softmax", "  log_softmax"),
    ):
        setattr(owner, name, timed(getattr(owner, name), seconds, label))
    step = generator.step
    for i, layer in enumerate(step.layers):
        layer.forward = timed(layer.forward, seconds, f"  layer {i}")
    projection = step.output_projection
    projection.forward = timed(projection.forward, seconds, "  output projection")
    with torch.no_grad():
        for _ in range(2):
            generator.generate(None, sample)
        seconds.clear()
        start = time.perf_counter()
        for _ in range(DECODES):
            generator.generate(None, sample)
        total = time.perf_counter() - start
    steps = DECODES * POSITIONS
    print(f"{decoder} beam {beam}: {total / steps * 1e3:.2f} ms a step")
    for label, value in sorted(seconds.items(), key=lambda item: -item[1]):
        print(f"  {label:24s} {value / steps * 1e3:.3f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("decoder", help="the decoder (static-int8, static-fp32, static-bf16-full)")
    parser.add_argument("beam", type=int, help="beam size")
    args = parser.parse_args()
    main(args.decoder, args.beam)
