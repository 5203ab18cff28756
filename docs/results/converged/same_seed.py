"""Two systems of one pair against each other on the test sets: sacreBLEU's paired bootstrap of
SYSTEM against OTHER (run dirs collected here), as summary.json's tests against a baseline. For
two policies trained with one seed (``san-mean-s2`` against ``san-s2``), which summary.json does
not pair.

    python docs/results/converged/same_seed.py en-de san-s2 san-mean-s2 --data-root data-bin
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from campaign_summary import TEST_SPLITS, paired_test  # noqa: E402

from fairseq_san.errors import UsageError  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pair", help="a language pair collected here, e.g. en-de")
    parser.add_argument("other", help="the run dir compared against, e.g. san-s2")
    parser.add_argument("system", help="the run dir tested, e.g. san-mean-s2")
    parser.add_argument("--data-root", default="data-bin", help="where multi30k.PAIR/text lies")
    parser.add_argument("--results", default=os.path.dirname(os.path.abspath(__file__)),
                        help="the collected results (default: this folder)")
    args = parser.parse_args()
    runs = [(os.path.join(args.results, args.pair, run), 0) for run in (args.other, args.system)]
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
