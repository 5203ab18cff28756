"""Per run of pairs.sh: SAN {6}/{6} static int8 and bf16-full over CTranslate2 int8 at its beam
(the report's median of the per-repeat ratios), tok/s, and the page faults of the fairseq worker
(the worker with the most CPU time); then the medians of each code.

    python docs/results/cpu-yardstick/host-memory-2026-11-30/summary.py OUT
"""

import argparse
import pathlib
import re
import statistics
from typing import Dict, Tuple

SYSTEMS = ("baseline", "int8", "bf16-full", "baseline (CTranslate2 int8)")


def table(text: str, heading: str) -> str:
    """The text of the report's table under ``heading`` (up to the next heading)."""
    return text.split(heading)[1].split("\n## ")[0]


def first_numbers(section: str) -> Dict[str, str]:
    """system -> the first figure of its row (the column of the run's one beam)."""
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if cells[0] in SYSTEMS and len(cells) >= 4:
            rows[cells[0]] = cells[3]
    return rows


def worker_faults(samples: pathlib.Path) -> int:
    """The most page faults sampled of the worker that used the most CPU time."""
    rows = [line.split() for line in samples.read_text().splitlines()]
    rows = [tuple(map(int, row)) for row in rows if len(row) == 3]
    busiest = max(rows, key=lambda row: row[2])[0]
    return max(faults for pid, faults, _ in rows if pid == busiest)


def run_summary(run: pathlib.Path) -> Tuple[Dict[str, float], Dict[str, float], int]:
    """(ratios over CTranslate2 int8, tok/s, worker page faults) of one run."""
    text = (run / "results.md").read_text()
    over = first_numbers(table(text, "## Speed over CTranslate2"))
    speed = first_numbers(table(text, "## Speed vs beam"))
    ratios = {name: float(value.split("/")[1]) for name, value in over.items()}
    tokens = {name: float(value.split()[0]) for name, value in speed.items()}
    return ratios, tokens, worker_faults(run.parent / f"{run.name}.faults")


def main(out: pathlib.Path) -> None:
    codes: Dict[str, list] = {}
    for run in sorted(path for path in out.glob("pair-*") if (path / "results.md").exists()):
        ratios, tokens, faults = run_summary(run)
        codes.setdefault(re.sub(r"-\d+$", "", run.name), []).append((ratios, faults))
        print(
            f"{run.name}: over CTranslate2 int8: int8 {ratios['int8']:.2f}, bf16-full "
            f"{ratios['bf16-full']:.2f}; tok/s int8 {tokens['int8']:.0f}, bf16-full "
            f"{tokens['bf16-full']:.0f}, fairseq {tokens['baseline']:.0f}, CTranslate2 int8 "
            f"{tokens['baseline (CTranslate2 int8)']:.0f}; fairseq worker's page faults {faults:,}"
        )
    for code, runs in codes.items():
        print(
            f"{code}, medians of {len(runs)} runs: over CTranslate2 int8: int8 "
            f"{statistics.median(r[0]['int8'] for r in runs):.2f}, bf16-full "
            f"{statistics.median(r[0]['bf16-full'] for r in runs):.2f}; page faults "
            f"{statistics.median(r[1] for r in runs):,.0f}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=pathlib.Path, help="pairs.sh's output folder (its pair-* runs)")
    args = parser.parse_args()
    main(args.out)
