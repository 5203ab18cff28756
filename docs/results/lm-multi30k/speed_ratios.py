"""The language models' speed-ups by the project's rule: the median over the interleaved rounds
of the per-round ratio (round r of a system over round r of the reference, timed side by side),
not the ratio of the best passes that table.py's speed columns give. Each round's file holds
one timed pass of a system (``speed/NAME-DECODING-bBATCH-rROUND.json``).

    python docs/results/lm-multi30k/speed_ratios.py docs/results/lm-multi30k/speed \
        docs/results/lm-multi30k/kv-loop-speed/speed > docs/results/lm-multi30k/speed-ratios.txt
"""

import glob
import json
import os
import re
import sys
from typing import Dict, Tuple

from fairseq_san.benchmark.timing import median, per_repeat_ratios

PASS = re.compile(r"(.+)-(fairseq|static)-b(\d+)-r(\d+)\.json$")


def passes(folder: str) -> Dict[Tuple[str, str, int, int], float]:
    """{(system, decoding, batch, round): tokens per second}."""
    found = {}
    for path in glob.glob(os.path.join(folder, "*.json")):
        name, decoding, batch, round_ = PASS.match(os.path.basename(path)).groups()
        with open(path, encoding="utf-8") as handle:
            speed = json.load(handle)["tokens_per_second"]
        found[(name, decoding, int(batch), int(round_))] = speed
    return found


def median_ratio(speeds: Dict, system: Tuple[str, str, int], reference: Tuple[str, str, int]):
    """The median over rounds of system / reference, and the per-round ratios."""
    rounds = sorted({key[3] for key in speeds if key[:3] == system})
    ratios = per_repeat_ratios([speeds[(*system, r)] for r in rounds],
                               [speeds[(*reference, r)] for r in rounds])  # fmt: skip
    return median(ratios), ratios


def main(folders) -> None:
    for folder in folders:
        speeds = passes(folder)
        print(f"## {folder}")
        for decoding in ("static", "fairseq"):
            for batch in (1, 16):
                for name in sorted({key[0] for key in speeds}):
                    ratio, rounds = median_ratio(
                        speeds, (name, decoding, batch), ("baseline", decoding, batch)
                    )
                    line = f"{decoding} b{batch} {name}: x baseline {ratio:.2f} " + str(
                        [round(r, 2) for r in rounds]
                    )
                    if decoding == "static":
                        over, _ = median_ratio(
                            speeds, (name, decoding, batch), (name, "fairseq", batch)
                        )
                        line += f"; x fairseq's generator {over:.2f}"
                    print(line)
        print()


if __name__ == "__main__":
    main(sys.argv[1:])
