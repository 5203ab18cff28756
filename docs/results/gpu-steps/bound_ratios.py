"""What SAN can gain at the arithmetic bound: per decoder position, the matrix-multiply GFLOP and
the decoder's weight bytes of the baseline and of SAN policies (``fairseq-san-bench steps``'s
``position_bound``: fairseq's generator on random weights), and their ratios, for the small and
base architectures at Multi30k's vocabulary (8,000) and a WMT-sized one (32,000).

    python docs/results/gpu-steps/bound_ratios.py > docs/results/gpu-steps/bound-ratios.txt

Batch 16, beam 4 (64 hypotheses), 40 positions, sources of 30 tokens; the device's peaks do not
enter the ratios (here 1 GFLOP/s and 1 GB/s stand in).
"""

import argparse

from fairseq_san.benchmark import step_timer

POLICIES = {
    "baseline": [],
    "{6}/{6}": ["--san-decoder-self-policy", "6", "--san-decoder-encdec-policy", "6"],
    "{6}/{2,2,2}": ["--san-decoder-self-policy", "6", "--san-decoder-encdec-policy", "2,2,2"],
    "{6}/{3,3}": ["--san-decoder-self-policy", "6", "--san-decoder-encdec-policy", "3,3"],
}


def main() -> None:
    print("| architecture | vocabulary | policy | GFLOP / position | decoder weights, MB | "
          "baseline / policy, FLOP | baseline / policy, bytes |")  # fmt: skip
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: |")
    for vocabulary in (8000, 32000):
        dictionary = step_timer.dictionary_of(vocabulary)
        sample = next(step_timer.batches(dictionary, 1, 16, 30))
        for arch in ("transformer_san_small", "transformer_san_base"):
            bounds = {
                name: step_timer.position_bound(
                    step_timer.build_model(arch, flags, dictionary), dictionary, sample, 4, 40,
                    peak_gflops=1.0, bandwidth_gbs=1.0,
                )  # fmt: skip
                for name, flags in POLICIES.items()
            }
            base = bounds["baseline"]
            for name, bound in bounds.items():
                print(f"| {arch} | {vocabulary:,} | {name} | {bound.gflop:.3f} | "
                      f"{bound.weight_mb:.1f} | {base.gflop / bound.gflop:.3f} | "
                      f"{base.weight_mb / bound.weight_mb:.3f} |")  # fmt: skip


if __name__ == "__main__":
    argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    ).parse_args()  # no arguments: --help prints the docstring
    main()
