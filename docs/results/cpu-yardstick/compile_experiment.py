"""Is torch.compile (inductor, frozen weights) faster than the eager static decoder step on the CPU?

    python docs/results/cpu-yardstick/compile_experiment.py [baseline|san-6-6]

Random-weight transformer_san_small (``fairseq-san-bench steps``'s models and batches), beam 4,
batch 16, fixed length 14; the eager step with its packed linear layers against the same step
compiled with ``torch.compile(dynamic=True)`` and inductor's freezing and weight prepacking. Prints
the compile time, whether the best hypotheses agree, and the median ms per step over 5 rounds.
"""

import argparse
import statistics
import time

import torch
import torch._inductor.config as inductor_config

from fairseq_san.benchmark import step_timer as speed
from fairseq_san.static_decoding import StaticSequenceGenerator
from fairseq_san.static_decoding.step import StaticDecoderStep

LENGTH, ROUNDS = 14, 5


class CompiledStep(torch.nn.Module):
    """The generator's view of a step: the plain step's attributes, the compiled forward."""

    def __init__(self, step: StaticDecoderStep) -> None:
        super().__init__()
        self.plain, self.compiled = step, torch.compile(step, dynamic=True)

    def __getattr__(self, name):
        if name in ("plain", "compiled", "training") or name.startswith("_"):
            return super().__getattr__(name)
        return getattr(self.plain, name)

    def forward(self, *args, **kwargs):
        return self.compiled(*args, **kwargs)


def main(policy: str) -> None:
    torch.set_num_threads(2)
    inductor_config.freezing = True
    inductor_config.cpp.weight_prepack = True
    dictionary = speed.dictionary_of(8000)
    samples = list(speed.batches(dictionary, 2, 16, 16))
    model = speed.build_model("transformer_san_small", speed.POLICIES[policy], dictionary)
    settings = dict(beam_size=4, min_len=LENGTH, max_len_a=0, max_len_b=LENGTH)
    eager = StaticSequenceGenerator([model], dictionary, **settings)
    compiled = StaticSequenceGenerator([model], dictionary, **settings)
    compiled.step = CompiledStep(StaticDecoderStep(model.decoder))
    with torch.no_grad():
        start = time.time()
        out_compiled = compiled.generate(None, samples[0])
        print(f"compile and first batch: {time.time() - start:.0f} s")
        out_eager = eager.generate(None, samples[0])
        same = all(a[0]["tokens"].equal(b[0]["tokens"]) for a, b in zip(out_compiled, out_eager))
        print(f"same best hypotheses: {same}")
        times = {"eager (packed)": [], "torch.compile": []}
        for _ in range(ROUNDS):
            for name, generator in zip(times, (eager, compiled)):
                start = time.perf_counter()
                for sample in samples:
                    generator.generate(None, sample)
                steps = len(samples) * (LENGTH + 1)
                times[name].append((time.perf_counter() - start) / steps * 1e3)
    for name, values in times.items():
        print(f"{policy} {name}: {statistics.median(values):.2f} ms/step")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("policy", nargs="?", default="baseline", choices=sorted(speed.POLICIES))
    main(parser.parse_args().policy)
