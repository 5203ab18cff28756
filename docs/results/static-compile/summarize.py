"""The tables of results.md from the logs (RUN-REPEAT.log) of a folder (logs/, cpu-path/): per
run and row, the median over repeats of the step timer's ms/step and of its speed-up over the
run's first row (fairseq).

    python docs/results/static-compile/summarize.py [logs|cpu-path]
"""

import argparse
import re
import statistics
from collections import defaultdict
from pathlib import Path

ROW = re.compile(r"^(.+?)\s+([\d.]+) ms/step(?:\s+([\d.]+)x)?")


def main(logs: str) -> None:
    runs = defaultdict(lambda: defaultdict(list))  # run -> row -> [(ms, ratio)]
    folder = Path(__file__).parent / logs
    for log in sorted(folder.glob("*-[0-9]*.log")):
        run = log.stem.rsplit("-", 1)[0]
        for line in log.read_text().splitlines():
            match = ROW.match(line)
            if match and "warm-up" not in line:
                ratio = float(match.group(3)) if match.group(3) else None
                runs[run][match.group(1).strip()].append((float(match.group(2)), ratio))
    print("| run | row | repeats | ms/step (median) | per repeat | speed-up over fairseq |")
    print("| --- | --- | ---: | ---: | --- | ---: |")
    for run, rows in runs.items():
        for row, values in rows.items():
            ms = [v[0] for v in values]
            ratios = [v[1] for v in values if v[1] is not None]
            ratio = f"{statistics.median(ratios):.2f}x" if ratios else "-"
            each = " / ".join(f"{v:.1f}" for v in ms)
            print(f"| {run} | {row} | {len(ms)} | {statistics.median(ms):.2f} | {each} | {ratio} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("logs", nargs="?", default="logs", metavar="FOLDER",
                        help="the folder beside this script (default: %(default)s)")  # fmt: skip
    main(parser.parse_args().logs)
