"""``fairseq-san-score``: sacrebleu BLEU/chrF of fairseq-generate output against raw references.

Run fairseq-generate with ``--post-process sentencepiece`` so that its ``D-`` lines hold
detokenized text (output that still holds subword pieces is refused); the references are the raw
(untokenized) files. With ``--nbest N`` the first, best hypothesis of each sentence is scored.
References that are not the decoded subset's (most of the output's detokenized ``T-`` lines read
otherwise, or some as a nearby line: a line added or lost) are refused; so is
``fairseq-generate --score-reference`` output where it holds the command's log (its
configuration says so), and where it does not, a file whose every hypothesis is
its reference token for token is scored with a warning (that output prints the references as
hypotheses). With ``--baseline`` another system's output of the same subset is
compared with it by sacreBLEU's paired bootstrap: the BLEU difference, its 95% interval and a
verdict (better or worse only where the interval excludes 0). Several outputs on either side are
a system's seeds: each is compared with the baseline's of its place (a single baseline with every
seed), and the seeds' BLEU by the exact permutation test (``scoring.seed_comparison``), whose
interval holds the spread of training (one run spreads by about 1 BLEU at small budgets), which a
bootstrap on one pair of models does not see.
"""

import argparse
import sys
from typing import Dict, List, Optional, Tuple

from fairseq_san.cli import quiet_when_output_closes, said_when_interrupted
from fairseq_san.errors import file_error
from fairseq_san.files import (
    DASH,
    file_given_twice,
    listed,
    output_problem,
    read_from,
    standard_input,
    write_json,
    written_to,
)
from fairseq_san.scoring import (
    MAX_EXACT_SPLITS,
    SAMPLED_SPLITS,
    GenerateOutput,
    check_normalization_kept,
    check_plain_references,
    check_references,
    check_spaces_kept,
    compatibility_note,
    corpus_scores,
    count_mismatch_cause,
    paired_bootstrap,
    read_generate,
    read_lines,
    seed_comparison,
)


# The fewest resamples of the paired bootstrap with one beyond each end of the 95% interval.
MIN_BOOTSTRAP_SAMPLES = 40


@said_when_interrupted
@quiet_when_output_closes
def main(argv: Optional[List[str]] = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_arguments(parser, args)
    args.reference = read_from(args.reference)
    args.generate_output = [read_from(path) for path in args.generate_output]
    args.baseline = args.baseline and [read_from(path) for path in args.baseline]
    try:
        scores, lines = scored(args)
    except OSError as err:  # a missing file, a folder
        parser.error(file_error(err))
    except ValueError as err:
        parser.error(str(err))
    print("\n".join(lines), file=sys.stderr if args.output == DASH else sys.stdout)
    if args.output:
        try:
            write_json(written_to(args.output), scores)
        except OSError as err:  # a folder that takes no new file (read-only, /proc)
            parser.error(f"-o {args.output}: cannot write it: {err.strerror}")


def check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``parser.error`` for arguments that no score is made of, before any file is read: standard
    input given twice, an output that is an input, too few resamples, a seed given twice."""
    inputs = [args.reference, *args.generate_output, *(args.baseline or [])]
    if sum(map(standard_input, inputs)) > 1:  # "- --reference /dev/stdin" too
        parser.error("standard input is given twice: it holds one file")
    to_file = args.output not in (None, DASH)
    problem = to_file and output_problem(args.output, "the scores", inputs)
    if problem:
        parser.error(f"-o {args.output}: {problem}")
    if args.bootstrap_samples < MIN_BOOTSTRAP_SAMPLES:  # 1 gave an "interval" of one resample
        parser.error(
            f"--bootstrap-samples {args.bootstrap_samples}: a 95% interval needs at least "
            f"{MIN_BOOTSTRAP_SAMPLES} resamples, 2.5% of them beyond each end (sacreBLEU's "
            "default: 1000)"
        )
    for side, outputs in (("", args.generate_output), ("--baseline ", args.baseline or [])):
        twice = file_given_twice(outputs)
        if twice is not None:  # the seeds' permutation test would count it as two runs
            parser.error(f"{side}{twice} is given twice: give each seed's output once")
    seeds = args.generate_output + (args.baseline or [])
    both = file_given_twice(seeds) if len(seeds) > 2 else None  # one against itself: a check
    if both is not None:  # the permutation test would count one run as both systems' seed
        parser.error(f"{both} is both a seed of the system and of the --baseline: give each "
                     "run on one side")  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fairseq-san-score", description=__doc__.splitlines()[0])
    parser.add_argument(
        "generate_output", nargs="+",
        help="fairseq-generate's stdout, saved to a file (may be gzip-compressed; '-': standard "
        "input); several: one system's seeds",
    )  # fmt: skip
    parser.add_argument(
        "--reference", required=True,
        help="raw reference text, one per line (may be gzip-compressed; '-': standard input)",
    )  # fmt: skip
    parser.add_argument(
        "--baseline", metavar="GENERATE_OUTPUT", nargs="+",
        help="another system's fairseq-generate output of the same subset (several: its seeds): "
        "compared by sacreBLEU's paired bootstrap (seed by seed, in the order given; one baseline: "
        "with each seed) and, with several seeds, by the permutation test of the seeds' BLEU "
        f"(exact up to {MAX_EXACT_SPLITS:,} splits of them, else a seeded sample of "
        f"{SAMPLED_SPLITS:,})",
    )  # fmt: skip
    parser.add_argument(
        "--bootstrap-samples", type=int, default=1000, metavar="N",
        help="resamples of the paired bootstrap (default: 1000, sacreBLEU's)",
    )  # fmt: skip
    parser.add_argument(
        "-o", "--output",
        help="also write the scores as JSON here; '-': to standard output alone (the lines that "
        "say them go to standard error)",
    )  # fmt: skip
    return parser


def scored(args: argparse.Namespace) -> Tuple[Dict[str, object], List[str]]:
    """(the JSON, the printed lines) of the outputs ``args`` names: one file's scores as before;
    with ``--baseline``, the paired bootstrap of each seed against the baseline's of its place;
    with several seeds on either side, each file's scores and the seeds' permutation test."""
    paths = args.generate_output + (args.baseline or [])
    references = read_lines(args.reference)
    check_plain_references(args.reference, references)
    generated = {path: read_generate(path, len(references)) for path in paths}
    for path, output in generated.items():
        if output.hypotheses_are_targets:
            warn_of_references_as_hypotheses(path, len(output.hypotheses))
    systems, baselines = (
        [checked_hypotheses(path, generated[path], args.reference, references) for path in side]
        for side in (args.generate_output, args.baseline or [])
    )
    check_no_copies(paths, systems + baselines, len(systems))
    files = [
        {"file": path, **corpus_scores(hypotheses, references)}
        for path, hypotheses in zip(paths, systems + baselines)
    ]
    several = len(systems) > 1 or len(baselines) > 1
    scores, lines = files_report(files, len(systems)) if several else file_report(files[0])
    pairs = seed_pairs(len(systems), len(baselines))
    if pairs and len(references) < 2:  # each resample that sentence: an interval of a point
        raise ValueError(
            "a paired bootstrap resamples the test set's sentences, and one sentence gives every "
            "resample the same: score a test set of several sentences, or leave out --baseline"
        )
    try:
        tests = [
            paired_bootstrap(baselines[b], systems[s], references, args.bootstrap_samples,
                             name=args.generate_output[s])
            for s, b in pairs
        ]  # fmt: skip
    except (MemoryError, OverflowError):  # the resamples: a matrix of samples x sentences
        raise ValueError(
            f"--bootstrap-samples {args.bootstrap_samples}: too many resamples of this test set "
            "for this machine's memory; lower it (sacreBLEU's default: 1000)"
        ) from None
    lines += [comparison_line(test, args.baseline[b], args.bootstrap_samples)
              for test, (_, b) in zip(tests, pairs)]  # fmt: skip
    lines += unpaired_lines(args, pairs)
    if tests:
        scores["paired_bootstrap"] = tests if several else tests[0]
    if several and baselines:
        bleus = [file["bleu"] for file in files]
        scores["seeds"] = seed_comparison(bleus[: len(systems)], bleus[len(systems) :])
        lines.append(seeds_line(scores["seeds"]))
    return scores, lines


def warn_of_references_as_hypotheses(path: str, sentences: int) -> None:
    """Say that every hypothesis in ``path`` is its sentence's reference: the output of
    fairseq-generate --score-reference (which prints the references as hypotheses) scores as a
    perfect translation; a model that translates every sentence right is rarer."""
    print(
        f"fairseq-san-score: warning: {path}: each of the {sentences:,} hypotheses is its "
        "sentence's reference, token for token (its H- line is its T- line): is it "
        "fairseq-generate --score-reference output? That prints the references as hypotheses",
        file=sys.stderr,
    )


def check_no_copies(paths: List[str], hypotheses: List[List[str]], systems: int) -> None:
    """ValueError naming two outputs whose hypotheses are the same, sentence for sentence: one
    run given as two seeds under two names (a copy, its gzip-compressed copy), which the seeds'
    permutation test counted as two runs. One system's output against one baseline's is a check
    of its own and taken."""
    if len(paths) == 2 and systems == 1:
        return
    seen: Dict[Tuple[str, ...], str] = {}
    for path, lines in zip(paths, hypotheses):
        earlier = seen.setdefault(tuple(lines), path)
        if earlier != path:
            raise ValueError(
                f"{earlier} and {path} hold the same hypotheses, sentence for sentence: one run "
                "given twice (a copy?); give each seed's output once"
            )


def seed_pairs(systems: int, baselines: int) -> List[Tuple[int, int]]:
    """(system, baseline) of each paired bootstrap: each seed against the baseline's of its
    place, or every seed against a single baseline."""
    if baselines == 1:
        return [(system, 0) for system in range(systems)]
    return [(seed, seed) for seed in range(min(systems, baselines))]


def unpaired_lines(args: argparse.Namespace, pairs: List[Tuple[int, int]]) -> List[str]:
    """A line naming the outputs no paired bootstrap compares (a side with more seeds: only the
    permutation test of the seeds sees them)."""
    if not args.baseline:
        return []
    unpaired = args.generate_output[len(pairs) :] + args.baseline[len(pairs) :]
    if not unpaired:
        return []
    return [f"no paired bootstrap for {listed(unpaired)}: no seed of its place on the other side"]


def file_report(scores: Dict[str, object]) -> Tuple[Dict[str, object], List[str]]:
    """One output's JSON and lines: BLEU and chrF, each with its signature."""
    lines = [f"BLEU = {scores['bleu']:.2f}  {scores['bleu_signature']}",
             f"chrF = {scores['chrf']:.2f}  {scores['chrf_signature']}"]  # fmt: skip
    return dict(scores), lines


def files_report(
    files: List[Dict[str, object]], systems: int
) -> Tuple[Dict[str, object], List[str]]:
    """Several outputs' JSON (the first ``systems`` the system's seeds, the rest the baseline's)
    and lines: each file's BLEU and chrF, then the signatures."""
    lines = [f"{file['file']}: BLEU = {file['bleu']:.2f}  chrF = {file['chrf']:.2f}"
             for file in files]  # fmt: skip
    lines += [f"BLEU {files[0]['bleu_signature']}", f"chrF {files[0]['chrf_signature']}"]
    return {"systems": files[:systems], "baselines": files[systems:]}, lines


def checked_hypotheses(
    output: str, generated: GenerateOutput, reference: str, references: List[str]
) -> List[str]:
    """The best hypothesis of each sentence of fairseq-generate's ``output`` (read as
    ``generated``), checked against the references: as many, most of its ``T-`` lines with
    their spaces (``check_spaces_kept``) and reading as theirs (``check_references``), in
    their Unicode normalization (``check_normalization_kept``; NFKC's differences are warned
    of: ``compatibility_note``)."""
    if len(generated.hypotheses) != len(references):
        raise ValueError(
            f"{output}: {len(generated.hypotheses)} hypotheses but {len(references)} references: "
            + count_mismatch_cause(len(generated.hypotheses), references)
        )
    check_spaces_kept(output, generated.targets, references)
    check_references(output, generated.targets, reference, references)
    check_normalization_kept(output, generated.targets, reference, references)
    note = compatibility_note(output, generated.targets, reference, references)
    if note is not None:
        print(f"fairseq-san-score: warning: {note}", file=sys.stderr)
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


def seeds_line(test: Dict[str, object]) -> str:
    """The seeds' permutation test in one line."""
    interval = test["interval_95"]
    said = (
        f"95% interval {interval[0]:+.2f} to {interval[1]:+.2f}" if interval
        else "too few seeds for a 95% interval"
    )  # fmt: skip
    kind = "exact permutation test" if test["exact"] else "permutation test, random splits"
    return (
        f"over seeds ({test['seeds']} against {test['against_seeds']}, {kind}): "
        f"mean BLEU difference {test['difference']:+.2f} ({said}, p = {test['p_value']:.4f} over "
        f"{test['splits']:,} splits)"
    )


if __name__ == "__main__":
    sys.exit(main())
