"""The README's "best over CTranslate2 int8" column, as the benchmark computes every other ratio:
the median of the per-repeat ratios (repeat i of one system over repeat i of the other, timed
interleaved), not the ratio of the two medians. "Best" is SAN {6}/{6}'s static decoder at int8
or bf16-full, whichever reads faster over fairseq's baseline in that run and beam. Runs made
before commit 0c155f4 counted CTranslate2 15 tokens for the 14 steps it decoded: its speed there
is divided by 15/14 (the correction the yardstick's page states).

    python docs/results/cpu-yardstick/over_ctranslate2.py > docs/results/cpu-yardstick/over-ctranslate2.txt
"""

import argparse
import json
import os
from typing import Dict, List

from fairseq_san.benchmark.timing import median, per_repeat_ratios

HERE = os.path.dirname(os.path.abspath(__file__))
# The runs of each row of the README's table, as its links name them.
ROWS = {
    "AMD EPYC, AVX-512, 2026-11-27/28": [
        "encoder-2026-11-27/all", "encoder-2026-11-27/run2/all", "final-2026-11-27/all",
        "rerun-2026-11-28/all",
    ],
    "AMD EPYC Zen 4, 2026-11-29": [
        "avx512-2026-11-29/all", "avx512-2026-11-29/run2/all", "thp-2026-11-29/default-1",
        "thp-2026-11-29/default-2", "thp-2026-11-29/thp-1", "thp-2026-11-29/thp-2",
    ],
    "Zen 4 after the top-k (05c39b5)": [
        "topk-2026-11-29/yardstick/all", "topk-2026-11-29/yardstick-2/all",
    ],
    "Zen 4 in torch.inference_mode (256726c)": ["inference-mode-2026-11-30/yardstick/all"],
    "Zen 4, freed memory kept (5901ee1)": [
        "host-memory-2026-11-30/yardstick/all", "host-memory-2026-11-30/yardstick-2/all",
        "host-memory-2026-11-30/yardstick-pairs/after-1/all",
        "host-memory-2026-11-30/yardstick-pairs/after-2/all",
    ],
    "Zen 4, the code before it in the same pairs (53503cb)": [
        "host-memory-2026-11-30/yardstick-pairs/before-1/all",
        "host-memory-2026-11-30/yardstick-pairs/before-2/all",
    ],
    "Zen 4, log-probabilities in blocks, memory kept (dde5128)": [
        "log-probs-2026-12-01/yardstick/all",
        "log-probs-2026-12-01/yardstick-2/all",
        "log-probs-2026-12-01/yardstick-pairs/after-1/all",
        "log-probs-2026-12-01/yardstick-pairs/after-2/all",
    ],
    "Zen 4, the code before it in the same pairs (b325e6a)": [
        "log-probs-2026-12-01/yardstick-pairs/before-1/all",
        "log-probs-2026-12-01/yardstick-pairs/before-2/all",
    ],
    "Zen 4, one-query products below torch's bmm loop (3634613)": [
        "small-products-2026-12-01/yardstick/all",
        "small-products-2026-12-01/yardstick-2/all",
    ],
    "Zen 4, the same step code, two reruns at a session's end (12c81e8)": [
        "rerun-2026-12-01/all", "rerun-2026-12-01/run2/all",
    ],
    "Zen 4, two reruns at the next session's end (78b6b6b)": [
        "rerun-2026-12-02/all", "rerun-2026-12-02/run2/all",
    ],
    "Intel Ice Lake, AVX-512 without AVX512-BF16 (8059694, 3f8eb97)": [
        "icelake-2026-12-04/all", "icelake-2026-12-04/run2/all",
    ],
    "Intel family 6 model 207, AVX512-BF16 without AMX (aacbac6)": [
        "emerald-2026-12-04/all", "emerald-2026-12-04/run2/all",
    ],
    "AMD EPYC, AVX2 only": ["avx2-2026-11-28/all", "avx2-2026-11-29/all"],
}  # fmt: skip
BEST = ("san-6-6-static-int8", "san-6-6-static-bf16-full")
CT2_INT8 = "baseline (CTranslate2 int8)"
FIXED_REPORT = "CTranslate2: 15 tokens"  # in the reports of runs made with 0c155f4's fix
EOS_CORRECTION = 15 / 14


def setting(results: Dict, system: str, beam: int) -> Dict:
    return results["systems"][system]["settings"][f"beam{beam}_fixed"]


def over_ctranslate2(folder: str, beam: int) -> Dict[str, float]:
    """The best static row of one run over CTranslate2 int8: per-repeat median, ratio of medians."""
    with open(os.path.join(HERE, folder, "results.json"), encoding="utf-8") as handle:
        results = json.load(handle)
    with open(os.path.join(HERE, folder, "results.md"), encoding="utf-8") as handle:
        correction = 1.0 if FIXED_REPORT in handle.read() else EOS_CORRECTION
    present = [name for name in BEST if name in results["systems"]]
    best = max(present, key=lambda name: setting(results, name, beam)["ratio_to_baseline"])
    ours = setting(results, best, beam)["tokens_per_second_repeats"]
    theirs = setting(results, CT2_INT8, beam)["tokens_per_second_repeats"]
    return {
        "best": best,
        "median_of_ratios": median(per_repeat_ratios(ours, theirs)) * correction,
        "ratio_of_medians": median(ours) / median(theirs) * correction,
        "corrected": correction != 1.0,
    }


def beams_of(folder: str) -> List[int]:
    """The beams (4, 20) a run timed at fixed lengths (the yardstick's pairs: 20 only)."""
    with open(os.path.join(HERE, folder, "results.json"), encoding="utf-8") as handle:
        settings = json.load(handle)["systems"][CT2_INT8]["settings"]
    return [beam for beam in (4, 20) if f"beam{beam}_fixed" in settings]


def main() -> None:
    for row, folders in ROWS.items():
        print(f"## {row}")
        ranges: Dict[int, List[float]] = {4: [], 20: []}
        for folder in folders:
            cells = []
            for beam in beams_of(folder):
                found = over_ctranslate2(folder, beam)
                ranges[beam].append(found["median_of_ratios"])
                precision = found["best"].replace("san-6-6-static-", "")
                cells.append(f"beam {beam}: {found['median_of_ratios']:.2f} (ratio of medians "
                             f"{found['ratio_of_medians']:.2f}; {precision})")  # fmt: skip
            note = ", x 15/14" if found["corrected"] else ""
            print(f"- {folder}{note}: " + "; ".join(cells))
        print("range, beam 4 / beam 20: " + " / ".join(
            f"{min(values):.2f}-{max(values):.2f}" if values else "-"
            for values in ranges.values()))  # fmt: skip
        print()


if __name__ == "__main__":
    argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    ).parse_args()  # no arguments: --help prints the docstring
    main()
