"""Whether two checkpoints hold the same model, weight for weight (results.md: the loops'
iterations that repeat a system of the tables, trained with the same seed and recipe).

    python docs/results/lm-multi30k/same_models.py CHECKPOINT_A CHECKPOINT_B [A B ...]

One line per pair: "same" when both models have the same tensors and every one is equal, else
"different" with the first tensor that differs.
"""

import sys
from typing import List, Optional

import torch

from fairseq_san.checkpoints import load_state


def first_difference(first: str, second: str) -> Optional[str]:
    """The name of the first model tensor that differs (or is in one checkpoint only); None."""
    a, b = load_state(first)["model"], load_state(second)["model"]
    for name in sorted(set(a) | set(b)):
        if name not in a or name not in b or not torch.equal(a[name], b[name]):
            return name
    return None


def main(paths: List[str]) -> None:
    if not paths or len(paths) % 2:
        sys.exit(f"usage: {__doc__.split(chr(10))[3].strip()}")
    for first, second in zip(paths[::2], paths[1::2]):
        differs = first_difference(first, second)
        verdict = "same" if differs is None else f"different (first: {differs})"
        print(f"{first} {second}: {verdict}")


if __name__ == "__main__":
    main(sys.argv[1:])
