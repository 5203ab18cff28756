"""Per run of bench.sh: SAN {6}/{6} static int8 and bf16-full over CTranslate2 int8 (the report's
median of the per-repeat ratios) and tok/s of every system, fairseq's baseline over CTranslate2
int8 (tok/s; the control of the change: fairseq shares the static rows' worker); then the medians
of each tree.

    python docs/results/cpu-yardstick/log-probs-2026-12-01/summary.py OUT
"""

import argparse
import importlib.util
import pathlib
import re
import statistics
from typing import Dict, List

HERE = pathlib.Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location(
    "host_memory_summary", HERE.parent / "host-memory-2026-11-30" / "summary.py"
)
host_memory = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(host_memory)
CT2 = "baseline (CTranslate2 int8)"


def run_figures(run: pathlib.Path) -> Dict[str, float]:
    """The ratios and tok/s of one run."""
    text = (run / "results.md").read_text()
    over = host_memory.first_numbers(host_memory.table(text, "## Speed over CTranslate2"))
    speed = host_memory.first_numbers(host_memory.table(text, "## Speed vs beam"))
    tokens = {name: float(value.split()[0]) for name, value in speed.items()}
    return {
        "int8 / CT2 int8": float(over["int8"].split("/")[1]),
        "bf16-full / CT2 int8": float(over["bf16-full"].split("/")[1]),
        "fairseq / CT2 int8": tokens["baseline"] / tokens[CT2],
        **{f"{name} tok/s": value for name, value in tokens.items()},
    }


def main(out: pathlib.Path) -> None:
    trees: Dict[str, List[Dict[str, float]]] = {}
    for run in sorted(path for path in out.iterdir() if (path / "results.md").exists()):
        figures = run_figures(run)
        trees.setdefault(re.sub(r"-\d+$", "", run.name), []).append(figures)
        print(f"{run.name}: " + ", ".join(f"{k} {v:.2f}" for k, v in figures.items()))
    print("medians:")
    for tree, runs in trees.items():
        keys = runs[0].keys()
        print(f"{tree} ({len(runs)} runs): " + ", ".join(
            f"{k} {statistics.median(r[k] for r in runs):.2f}" for k in keys))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=pathlib.Path, help="bench.sh's output folder (its runs)")
    args = parser.parse_args()
    main(args.out)
