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
from campaign_summary import (  # noqa: E402
    TEST_SPLITS,
    paired_bootstrap,
    reference_file,
    hypotheses_file,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pair", help="a language pair collected here, e.g. en-de")
    parser.add_argument("other", help="the run dir compared against, e.g. san-s2")
    parser.add_argument("system", help="the run dir tested, e.g. san-mean-s2")
    parser.add_argument("--data-root", default="data-bin", help="where multi30k.PAIR/text lies")
    parser.add_argument("--results", default=os.path.dirname(os.path.abspath(__file__)),
                        help="the collected results (default: this folder)")
    args = parser.parse_args()
    from fairseq_san.scoring import read_generate_output, read_lines

    here = os.path.join(args.results, args.pair)
    for split, test_set in TEST_SPLITS.items():
        runs = (args.other, args.system)
        paths = [hypotheses_file(os.path.join(here, run), 0, split) for run in runs]
        reference = reference_file(args.data_root, args.pair, split)
        if not all(os.path.exists(path) for path in paths + [reference]):
            print(f"{test_set}: no hypotheses or reference", file=sys.stderr)
            continue
        hyps = [read_generate_output(path) for path in paths]
        result = paired_bootstrap(hyps[0], hyps[1], read_lines(reference), name=args.system)
        print(json.dumps({"test_set": test_set, "against": args.other, **result}))


if __name__ == "__main__":
    main()
