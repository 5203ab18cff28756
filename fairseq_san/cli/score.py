"""``fairseq-san-score``: sacrebleu BLEU/chrF of fairseq-generate output against raw references.

Run fairseq-generate with ``--post-process sentencepiece`` so that its ``D-`` lines hold
detokenized text (output that still holds subword pieces is refused); the references are the raw
(untokenized) files. With ``--nbest N`` the first, best hypothesis of each sentence is scored.
References that are not the decoded subset's (most of the output's detokenized ``T-`` lines read
otherwise) are refused.
"""

import argparse
import sys
from typing import List, Optional

from fairseq_san.cli import quiet_when_output_closes
from fairseq_san.errors import file_error
from fairseq_san.files import output_problem, write_json
from fairseq_san.scoring import (
    check_references,
    corpus_scores,
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
    parser.add_argument("-o", "--output", help="also write the scores as JSON here")
    args = parser.parse_args(argv)
    problem = args.output and output_problem(args.output, "the JSON file")
    if problem:
        parser.error(f"-o {args.output}: {problem}")
    try:
        output = read_generate(args.generate_output)
        references = read_lines(args.reference)
        if len(output.hypotheses) == len(references):  # else corpus_scores says what differs
            check_references(args.generate_output, output.targets, args.reference, references)
        scores = corpus_scores(output.hypotheses, references)
    except OSError as err:  # a missing file, a folder
        parser.error(file_error(err))
    except ValueError as err:
        parser.error(str(err))
    print(f"BLEU = {scores['bleu']:.2f}  {scores['bleu_signature']}")
    print(f"chrF = {scores['chrf']:.2f}  {scores['chrf_signature']}")
    if args.output:
        try:
            write_json(args.output, scores)
        except OSError as err:  # a folder that takes no new file (read-only, /proc)
            parser.error(f"-o {args.output}: cannot write it: {err.strerror}")


if __name__ == "__main__":
    sys.exit(main())
