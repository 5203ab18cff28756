"""``fairseq-san-score``: sacrebleu BLEU/chrF of fairseq-generate output against raw references.

Run fairseq-generate with ``--post-process sentencepiece`` so that its ``D-`` lines hold
detokenized text (output that still holds subword pieces is refused); the references are the raw
(untokenized) files. With ``--nbest N`` the first, best hypothesis of each sentence is scored.
References that are not the decoded subset's (most of the output's detokenized ``T-`` lines read
otherwise) are refused. With ``--baseline`` another system's output of the same subset is
compared with it by sacreBLEU's paired bootstrap: the BLEU difference, its 95% interval and a
verdict (better or worse only where the interval excludes 0), the test a claim of one system
over another needs (one training run spreads by about 1 BLEU).
"""

import argparse
import sys
from typing import Dict, List, Optional

from fairseq_san.cli import quiet_when_output_closes
from fairseq_san.errors import file_error
from fairseq_san.files import output_problem, write_json
from fairseq_san.scoring import (
    GenerateOutput,
    check_references,
    corpus_scores,
    count_mismatch_cause,
    paired_bootstrap,
    read_generate,
    read_lines,
)


@quiet_when_output_closes
def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(prog="fairseq-san-score", description=__doc__.splitlines()[0])
    parser.add_argument(
        "generate_output", help="fairseq-generate's stdout, saved to a file (may be gzip-compressed)"
    )
    parser.add_argument(
        "--reference", required=True, help="raw reference text, one per line (may be gzip-compressed)"
    )
    parser.add_argument(
        "--baseline", metavar="GENERATE_OUTPUT",
        help="another system's fairseq-generate output of the same subset: compare the two by "
        "sacreBLEU's paired bootstrap",
    )  # fmt: skip
    parser.add_argument(
        "--bootstrap-samples", type=int, default=1000, metavar="N",
        help="resamples of the paired bootstrap (default: 1000, sacreBLEU's)",
    )  # fmt: skip
    parser.add_argument("-o", "--output", help="also write the scores as JSON here")
    args = parser.parse_args(argv)
    problem = args.output and output_problem(args.output, "the JSON file")
    if problem:
        parser.error(f"-o {args.output}: {problem}")
    if args.bootstrap_samples < 1:
        parser.error(f"--bootstrap-samples {args.bootstrap_samples}: must be at least 1")
    try:
        generated = read_generate(args.generate_output)
        references = read_lines(args.reference)
        hypotheses = checked_hypotheses(args.generate_output, generated, args.reference, references)
        scores = corpus_scores(hypotheses, references)
        if args.baseline is not None:
            baseline = checked_hypotheses(
                args.baseline, read_generate(args.baseline), args.reference, references
            )
            scores["paired_bootstrap"] = paired_bootstrap(
                baseline, hypotheses, references, args.bootstrap_samples, name=args.generate_output
            )
    except OSError as err:  # a missing file, a folder
        parser.error(file_error(err))
    except ValueError as err:
        parser.error(str(err))
    print(f"BLEU = {scores['bleu']:.2f}  {scores['bleu_signature']}")
    print(f"chrF = {scores['chrf']:.2f}  {scores['chrf_signature']}")
    if args.baseline is not None:
        print(comparison_line(scores["paired_bootstrap"], args.baseline, args.bootstrap_samples))
    if args.output:
        try:
            write_json(args.output, scores)
        except OSError as err:  # a folder that takes no new file (read-only, /proc)
            parser.error(f"-o {args.output}: cannot write it: {err.strerror}")


def checked_hypotheses(
    output: str, generated: GenerateOutput, reference: str, references: List[str]
) -> List[str]:
    """The best hypothesis of each sentence of fairseq-generate's ``output`` (read as
    ``generated``), checked against the references: as many, and most of its ``T-`` lines reading
    as theirs (``check_references``)."""
    if len(generated.hypotheses) != len(references):
        raise ValueError(
            f"{output}: {len(generated.hypotheses)} hypotheses but {len(references)} references: "
            + count_mismatch_cause(len(generated.hypotheses), references)
        )
    check_references(output, generated.targets, reference, references)
    return generated.hypotheses


def comparison_line(test: Dict[str, object], baseline: str, samples: int) -> str:
    """The paired bootstrap's result in one line: both BLEUs, the difference, its interval, p."""
    low, high = test["interval_95"]
    return (
        f"against --baseline {baseline} (paired bootstrap, {samples} samples): BLEU "
        f"{test['system_bleu']:.2f} vs {test['baseline_bleu']:.2f}, difference "
        f"{test['difference']:+.2f} (95% interval {low:+.2f} to {high:+.2f}, p = "
        f"{test['p_value']:.4f}): {test['verdict']}"
    )


if __name__ == "__main__":
    sys.exit(main())
