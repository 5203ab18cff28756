"""The language-model table's systems and where each one's checkpoints are: one home for run.sh
(which trains, evaluates and times them) and table.py (which tabulates them).

    python docs/results/lm-multi30k/systems.py names                     # the systems, in order
    python docs/results/lm-multi30k/systems.py checkpoint RUNS NAME SEED  # its best checkpoint
"""

import argparse
import os

SYSTEMS = ("baseline", "san-learned", "san-iteration2", "san-uniform6", "kv-learned",
           "kv-iteration2", "kv-cla2")  # fmt: skip
# Seed 1 of these is an iteration of a loop (its run dir under RUNS, its iteration).
LOOP_ITERATIONS = {
    "baseline": ("loop", "iter0"),
    "san-learned": ("loop", "iter1"),
    "san-iteration2": ("loop", "iter2"),
    "kv-iteration2": ("loop-kv", "iter2"),
}


def run_dir(runs: str, name: str, seed: int) -> str:
    """Where a system's seed trained: a loop's iteration, or RUNS/NAME-sSEED."""
    if seed == 1 and name in LOOP_ITERATIONS:
        return os.path.join(runs, *LOOP_ITERATIONS[name])
    return os.path.join(runs, f"{name}-s{seed}")


def checkpoint(runs: str, name: str, seed: int) -> str:
    """Its best checkpoint: a loop iteration keeps its checkpoints in checkpoints/."""
    loop = seed == 1 and name in LOOP_ITERATIONS
    return os.path.join(run_dir(runs, name, seed), *(("checkpoints",) if loop else ()),
                        "checkpoint_best.pt")  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="names|checkpoint")
    commands.add_parser("names", help="the systems, in order")
    best = commands.add_parser("checkpoint", help="a system's best checkpoint")
    best.add_argument("runs", metavar="RUNS")
    best.add_argument("name", metavar="NAME")
    best.add_argument("seed", type=int, metavar="SEED")
    args = parser.parse_args()
    if args.command == "names":
        print(" ".join(SYSTEMS))
    else:
        print(checkpoint(args.runs, args.name, args.seed))
