"""fairseq-san-policy: learn a sharing policy from layer JS divergences.

Reads the pairwise JS divergence matrices of a trained model's attention
layers (a JSON object with one square matrix per attention kind; other keys
are ignored) and applies the block search of section 3.3 with one threshold
theta per kind. Kinds without a theta are not shared; a theta for a kind the
analysis has no attention of (null: a language model's encoder-decoder and
encoder attention) is ignored, with a warning. Several files are averaged
first: the policy one seed's model learns may not be another's.

    fairseq-san-policy js.json --theta-decoder-self 0.5 \\
        --theta-decoder-encdec 0.5 -o policy.json

It prints the policy in the paper's notation, then as JSON; ``-o -`` prints the JSON alone on
standard output, the rest on standard error (``-o - | jq``, ``-o - > policy.json``). A JS_JSON
of ``-`` is read from standard input (``zcat js.json.gz | fairseq-san-policy - ...``).

``--explain`` also prints, per kind, the range of theta that learns the same blocks and the
policies just beyond it: a policy learned at a theta near an end of its range is a small change
of the JS matrix away from its neighbour. ``--map W`` prints every policy learned for theta within
W of each kind's theta, with its range: where a theta in the middle of a wide range lies.
"""

import argparse
import difflib
import json
import math
import os
import sys
from typing import Optional

from fairseq_san.cli import analysis_file, quiet_when_output_closes, said_when_interrupted
from fairseq_san.files import (
    DASH,
    file_given_twice,
    listed,
    output_problem,
    read_from,
    read_json,
    same_bytes,
    standard_input,
)
from fairseq_san.options import flag_of
from fairseq_san.policy import (
    KIND_TABLE,
    KINDS,
    Blocks,
    PolicyError,
    LN2,
    ThetaRange,
    bits_note,
    blocks_beyond,
    checkpoint_folder,
    dump_policy,
    format_blocks,
    format_policy,
    learn_policy,
    mean_js,
    policy_segments,
    range_shown,
    same_recorded,
    shown_where_learned,
    theta_ranges,
    unrecorded_note,
    write_policy,
)


PROG = "fairseq-san-policy"

# What a kind's theta flag (``--theta-KIND``) says beyond the threshold, where it says more than
# THETA_FLAG: decoder self-attention's is required where the analysis has it (``main``).
THETA_FLAG = {"help": "default: not shared"}
THETA_FLAGS = {
    "decoder_self": {"help": "required, but for an AAN decoder's analysis (it has none); larger "
                     "asks more of a block"},
    "decoder_encdec": {"help": "default: not shared; a language model has none"},
}


def add_theta_flags(parser: argparse.ArgumentParser) -> None:
    """One threshold flag per attention kind (``KIND_TABLE``), in [0, ln 2]."""
    for kind in KINDS:
        options = dict(THETA_FLAGS.get(kind, THETA_FLAG))
        options["help"] = f"threshold for {KIND_TABLE[kind].title}, in [0, ln 2]; {options['help']}"
        parser.add_argument(flag_of(f"theta_{kind}"), type=float, metavar="T", **options)


def given_thetas(args: argparse.Namespace) -> dict[str, Optional[float]]:
    """``add_theta_flags``' values by kind (None: not given); -0 read as 0 (``--explain`` said
    "at theta -0")."""
    values = {kind: getattr(args, f"theta_{kind}") for kind in KINDS}
    return {kind: None if value is None else value or 0.0 for kind, value in values.items()}


def input_file(path: str) -> str:
    """The file that JS_JSON ``path`` names: standard input for "-" (``zcat js.json.gz |
    fairseq-san-policy - ...``), else ``analysis_file``."""
    return analysis_file(read_from(path))


def build_parser() -> argparse.ArgumentParser:
    """Command-line options; one theta flag per attention kind."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Learn a SAN sharing policy (Xiao et al. 2019, section 3.3) "
        "from pairwise JS divergences between layers.",
    )
    parser.add_argument(
        "js_json",
        metavar="JS_JSON",
        nargs="+",
        help="JSON object with a layer-by-layer JS divergence matrix per kind "
        f"({', '.join(KINDS)}), or the --san-analysis-dir that holds it (js.json); several (say, "
        "the analyses of several seeds) are averaged element-wise before the policy is learned; "
        "'-': read from standard input",
    )
    add_theta_flags(parser)
    parser.add_argument(
        "-o", "--output", metavar="FILE",
        help="write the policy JSON here; '-': to standard output alone (what else it prints, "
        "to standard error)",
    )  # fmt: skip
    parser.add_argument(
        "--explain", action="store_true",
        help="also print, per kind, the range of theta that learns the same blocks and the "
        "policies just beyond it",
    )
    parser.add_argument(
        "--map", type=float, metavar="W",
        help="also print, per kind, every policy learned for theta within W of its theta "
        "(within [0, ln 2]), each with its range of theta",
    )
    return parser


def explanation(
    kind: str, blocks: Blocks, theta: float, same: ThetaRange, js: list[list[float]]
) -> str:
    """One kind's line of ``--explain``: the range of theta that learns ``blocks``, the policies
    just beyond it, and the block of layers (1-based) whose sim sets each end: passed over
    inside the range, it is taken at the low end; taken inside, it is not above the high end."""
    below, above = blocks_beyond(js, same)
    line = f"{kind}: {format_blocks(blocks)} at theta {theta:g}, the same for theta in {same}"
    beyond = []
    if below is not None:
        first, last = same.low_block
        at = shown_where_learned(js, same.low, below, up=False)
        beyond.append(f"{format_blocks(below)} at {at} (layers {first + 1}-{last + 1} one block)")
    if above is not None:
        first, last = same.high_block
        at = shown_where_learned(js, math.nextafter(same.high, LN2), above, up=True)
        beyond.append(f"{format_blocks(above)} at {at} (layers {first + 1}-{last + 1} no longer "
                      "one block)")  # fmt: skip
    return f"{line}; {', '.join(beyond)}" if beyond else line


def policy_map_line(kind: str, theta: float, width: float, js: list[list[float]]) -> str:
    """One kind's line of ``--map``: the policies learned as theta runs over theta +- width, in
    order, each with its range of theta; the one learned at ``theta`` marked."""
    # theta +- width rounded off its float noise (0.4 - 0.1 is 0.30000000000000004, whose range
    # was shown from 0.3001 under a header of 0.3000)
    low, high = max(round(theta - width, 12), 0.0), min(round(theta + width, 12), LN2)
    parts, shown = [], []
    for index, segment in enumerate(policy_segments(js, low, high)):
        shown.append(range_shown(segment.low, segment.high, low_closed=index == 0))
        part = f"{format_blocks(segment.blocks)} {shown[-1]}"
        if (index == 0 and theta == low) or segment.low < theta <= segment.high:
            part += f" (at {theta:g})"
        parts.append(part)
    # the ends as the ranges show them, rounded inwards (theta ln 2 - 0.05 read 0.6431 above a
    # first range [0.6432, ...])
    return f"{kind}, theta {shown[0].low}-{shown[-1].high}: {'; '.join(parts)}"


def check_no_misspelt_kind(analysis: dict, path: str) -> None:
    """PolicyError for a key that is no kind but reads like one ("decoder_selff"): it was taken
    for a kind without a matrix, whose policy is "none". The analysis' own other keys
    (checkpoint, num_updates, ...) are like no kind."""
    for key in analysis:
        meant = difflib.get_close_matches(key.lower().replace("-", "_"), KINDS, n=1, cutoff=0.8)
        if key not in KINDS and meant:
            raise PolicyError(f'{path}: unknown key "{key}": did you mean "{meant[0]}"?')


def training_of(analysis: dict) -> Optional[str]:
    """What tells an analysis' training apart, as far as it records it: its seed and the folder
    of its checkpoint (a save dir holds one training's checkpoints; older analyses record no
    seed, and two systems of one seed train in two folders); None where it records neither."""
    said = []
    if analysis.get("seed") is not None:
        said.append(f"seed {json.dumps(analysis['seed'])}")
    folder = checkpoint_folder(analysis)
    if folder is not None:
        said.append(f"checkpoints in {folder}")
    return ", ".join(said) or None


def check_one_step_per_training(analyses: list, paths: list[str]) -> None:
    """PolicyError naming two analyses of one training (``training_of``) at different training
    steps: their mean mixes one model's attention early and late in training
    (``fairseq-san-policy analysis/step*/``, the series fairseq-san-plot-js takes), where the
    mean is meant to be over seeds; and two at one step of a training that records its
    checkpoints' folder: one model (checkpoint_last.pt and the checkpoint it copies, or one
    analysed twice, with --fp16), counted twice in the mean."""
    first_of_training: dict = {}
    for analysis, path in zip(analyses, paths):
        training, steps = training_of(analysis), analysis.get("num_updates")
        if training is None or steps is None:
            continue
        earlier = first_of_training.setdefault(training, (path, steps))
        if not same_recorded(earlier[1], steps):  # a NaN step too
            raise PolicyError(
                f"{earlier[0]} (step {earlier[1]}) and {path} (step {steps}) are checkpoints of "
                f"one training ({training}): average the analyses of several seeds' models, one "
                "checkpoint each"
            )
        if earlier[0] != path and checkpoint_folder(analysis) is not None:
            raise PolicyError(
                f"{earlier[0]} and {path} are analyses of one model (step {steps} of one "
                f"training: {training}): give each model's analysis once"
            )


def check_some_matrix(analysis: dict, path: str) -> None:
    """PolicyError for an analysis with no JS matrix (every kind null or missing): a policy file
    given for an analysis learned "no sharing" without a word; and for a kind that is neither a
    matrix nor null (text, a dict), which read as missing."""
    for kind in KINDS:
        value = analysis.get(kind)
        if value is not None and not isinstance(value, list):
            raise PolicyError(
                f"{path}: {kind} is {type(value).__name__} {value!r:.40}, not a JS matrix (a "
                "list of rows) or null"
            )
    if not any(isinstance(analysis.get(kind), list) for kind in KINDS):
        raise PolicyError(
            f"{path}: no JS matrix (keys {', '.join(KINDS)} null or missing): give the js.json "
            "that fairseq-validate --san-analysis-dir writes"
        )


def warn_of_bits(js_by_kind: dict) -> None:
    """A note on stderr where a (checked) JS value is above ln 2, the largest in nats (what the
    analysis writes): values in bits (up to 1) then meet thresholds in nats."""
    for kind, rows in js_by_kind.items():
        note = bits_note(rows, kind, "values in bits would meet thresholds in nats")
        if note is not None:
            print(f"{PROG}: note: {note}", file=sys.stderr)


# Why an analysis has no matrix of a kind, said with its ignored theta (else: no encoder).
WHO_HAS_NONE = {"decoder_self": "; an AAN decoder has no self-attention weights"}


def check_decoder_self_theta(js_by_kind: dict, thetas: dict) -> None:
    """PolicyError where the analysis has decoder self-attention and ``--theta-decoder-self`` is
    not given: every model but an AAN has it, and the paper's policies share it."""
    if thetas["decoder_self"] is None and js_by_kind.get("decoder_self") is not None:
        raise PolicyError(
            "--theta-decoder-self is required: the analysis has decoder self-attention (only an "
            "AAN decoder's has none)"
        )


def warn_of_ignored_thetas(js_by_kind: dict, thetas: dict, paths: list[str]) -> None:
    """A warning on stderr for each theta given for a kind of attention the analysis has none of
    (null: a language model has no encoder-decoder or encoder attention, an AAN decoder no
    self-attention weights), which is therefore ignored."""
    for kind, theta in thetas.items():
        if theta is None or kind not in js_by_kind or js_by_kind[kind] is not None:
            continue
        title = KIND_TABLE[kind].title
        model = WHO_HAS_NONE.get(kind, "; a language model has no encoder")
        print(
            f"{PROG}: warning: {flag_of(f'theta_{kind}')} {theta:g} is ignored: the analysis has "
            f"no {title} ({kind} is null in {listed(paths)}{model})",
            file=sys.stderr,
        )


@said_when_interrupted
@quiet_when_output_closes
def main(argv: Optional[list[str]] = None) -> None:
    """Learn, print and optionally write the policy; bad input exits with status 2."""
    parser = build_parser()
    args = parser.parse_args(argv)
    thetas = given_thetas(args)
    if args.map is not None and not args.map > 0:
        parser.error(f"--map {args.map}: the width must be positive")
    if sum(map(standard_input, args.js_json)) > 1:  # "- /dev/stdin" too
        parser.error("standard input is given twice: it holds one analysis")
    paths = [input_file(path) for path in args.js_json]
    twice = file_given_twice(paths)
    if twice is not None:  # the mean of several analyses would count it twice
        parser.error(f"{twice} is given twice: give each analysis once")
    copies = same_bytes([path for path in paths if os.path.isfile(path)])
    if copies is not None:
        parser.error(f"{copies[0]} and {copies[1]} hold the same analysis (a copy): give each "
                     "analysis once")  # fmt: skip
    to_file = args.output is not None and args.output != DASH
    problem = to_file and output_problem(args.output, "the policy", paths)
    if problem:
        parser.error(f"-o {args.output}: {problem}")
    try:
        analyses = [read_json(path, "JS file", PolicyError, streamed=True) for path in paths]
        for analysis, path in zip(analyses, paths):
            check_no_misspelt_kind(analysis, path)
            check_some_matrix(analysis, path)
        check_one_step_per_training(analyses, paths)
        js_by_kind = mean_js(analyses, paths)  # of one: its matrices, checked naming the file
        note = unrecorded_note(analyses, paths)
        if note is not None:
            print(f"{PROG}: warning: {note}", file=sys.stderr)
        check_decoder_self_theta(js_by_kind, thetas)
        policy = learn_policy(js_by_kind, thetas)
        warn_of_ignored_thetas(js_by_kind, thetas, paths)
        warn_of_bits({kind: js_by_kind[kind] for kind in policy})  # the matrices checked
        ranges = theta_ranges(js_by_kind, thetas) if args.explain else {}
        if to_file:
            write_policy(policy, args.output)
    except PolicyError as err:
        parser.error(str(err))
    report = sys.stderr if args.output == DASH else sys.stdout  # the JSON alone on stdout
    print(format_policy(policy), file=report)
    for kind, same in ranges.items():
        print(explanation(kind, policy[kind], thetas[kind], same, js_by_kind[kind]), file=report)
    if args.map is not None:
        for kind in policy:
            print(policy_map_line(kind, thetas[kind], args.map, js_by_kind[kind]), file=report)
    print(dump_policy(policy), end="")
    if to_file:
        print(f"wrote {args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
