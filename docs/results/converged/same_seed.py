"""Two systems of one pair against each other on the test sets: sacreBLEU's paired bootstrap of
SYSTEM against OTHER (run dirs collected here, each ``RUN`` for its iteration 0 or
``RUN:ITERATION``), as summary.json's tests against a baseline. For two policies trained with
one seed (``san-mean-s2`` against ``san-s2``), which summary.json does not pair, or a loop's
iterations (``loop:0 loop:1``).

    python docs/results/converged/same_seed.py en-de san-s2 san-mean-s2 --data-root data-bin
"""

import argparse
import json
import os
import sys
from typing import Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from campaign_summary import TEST_SPLITS, paired_test  # noqa: E402

from fairseq_san.errors import UsageError  # noqa: E402


def run_iteration(results: str, pair: str, system: str) -> Tuple[str, int]:
    """(run dir, iteration) of ``RUN`` (iteration 0) or ``RUN:ITERATION``."""
    run, _, iteration = system.partition(":")
    if iteration and not iteration.isdigit():
        raise argparse.ArgumentTypeError(f"{system}: give RUN or RUN:ITERATION, e.g. loop:1")
    return os.path.join(results, pair, run), int(iteration or 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pair", help="a language pair collected here, e.g. en-de")
    parser.add_argument("other", help="the run dir compared against, e.g. san-s2 or loop:0")
    parser.add_argument("system", help="the run dir tested, e.g. san-mean-s2 or loop:1")
    parser.add_argument("--data-root", default="data-bin", help="where multi30k.PAIR/text lies")
    parser.add_argument("--results", default=os.path.dirname(os.path.abspath(__file__)),
                        help="the collected results (default: this folder)")
    args = parser.parse_args()
    try:
        runs = [run_iteration(args.results, args.pair, run) for run in (args.other, args.system)]
    except argparse.ArgumentTypeError as err:
        parser.error(str(err))
    for split, test_set in TEST_SPLITS.items():
        try:
            result = paired_test(args.pair, runs, split, args.data_root, args.system)
        except UsageError as err:  # hypotheses without their reference
            parser.error(str(err))
        if result is None:
            print(f"{test_set}: no hypotheses", file=sys.stderr)
            continue
        print(json.dumps({"test_set": test_set, "against": args.other, **result}))


if __name__ == "__main__":
    main()
