"""Is torchao's int8 (``quantize_`` with ``Int8DynamicActivationInt8WeightConfig``) as fast as
the static decoder's int8 (torch.ao's deprecated dynamic quantized linear, fbgemm)?

    python docs/results/static-compile/torchao_int8.py [--threads 1] [--beam 4] [--rounds 5]

Random-weight SAN {6}/{6} ``transformer_san_small`` (``fairseq-san-bench steps``'s model and
batches), batch 16, fixed length 14. Four steps timed interleaved, round after round: the eager
fp32 step (packed weights), int8 as shipped (torch.ao), torchao int8 eager, torchao int8 under
torch.compile (inductor, frozen weights; the fixed layout). Prints ms per step (median over
rounds) and whether each agrees with torch.ao's int8 on the best hypotheses.
"""

import argparse
import statistics

import torch
from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_

from fairseq_san.benchmark import step_timer
from fairseq_san.static_decoding import StaticSequenceGenerator
from fairseq_san.static_decoding.execution import compiled
from fairseq_san.static_decoding.step import StaticDecoderStep

LENGTH = 14


def torchao_generator(model, dictionary, execution: str, **settings) -> StaticSequenceGenerator:
    """A generator whose step's linear layers are torchao int8 (eager, or compiled)."""
    generator = StaticSequenceGenerator([model], dictionary, execution=execution, **settings)
    step = StaticDecoderStep(model.decoder)
    quantize_(step, Int8DynamicActivationInt8WeightConfig())
    generator.step = step
    generator.run_step = compiled(step) if execution == "compile" else step
    return generator


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dictionary = step_timer.dictionary_of(8000)
    samples = list(step_timer.batches(dictionary, 2, 16, 16))
    policy = step_timer.POLICIES["san-6-6"]
    model = step_timer.build_model("transformer_san_small", policy, dictionary)
    settings = dict(beam_size=args.beam, min_len=LENGTH, max_len_a=0, max_len_b=LENGTH)
    generators = {
        "fp32 (packed, eager)": StaticSequenceGenerator([model], dictionary, **settings),
        "int8 torch.ao (shipped)": StaticSequenceGenerator(
            [model], dictionary, precision="int8", **settings
        ),
        "int8 torchao eager": torchao_generator(model, dictionary, "eager", **settings),
        "int8 torchao compiled": torchao_generator(model, dictionary, "compile", **settings),
    }
    with torch.no_grad():
        best = {
            name: [nbest[0]["tokens"].tolist() for nbest in generator.generate(None, samples[0])]
            for name, generator in generators.items()
        }
    times = step_timer.time_rounds(generators, samples, args.rounds, 2 * (LENGTH + 1))
    reference = best["int8 torch.ao (shipped)"]
    print(f"SAN {{6}}/{{6}} transformer_san_small, beam {args.beam}, batch 16, L={LENGTH}, "
          f"{args.threads} threads, {args.rounds} rounds; ms per step (median)")  # fmt: skip
    for name, values in times.items():
        same = sum(a == b for a, b in zip(best[name], reference))
        print(f"{name:24s} {statistics.median(values):7.2f} ms/step  "
              f"best = torch.ao int8: {same}/{len(reference)}")  # fmt: skip


if __name__ == "__main__":
    main()
