"""fairseq-san-bench: decoding speed, quality, cache size and step profile of SAN systems.

    fairseq-san-bench --data DATA --subset test \\
        --system base=ckpt/base.pt \\
        --system base-nocache='ckpt/base.pt:{"san_decoding": "no-cache"}' \\
        --system san=ckpt/san.pt \\
        --system aan+san=ckpt/aan_san.pt \\
        --baseline base --beams 1 4 8 12 16 20 --batch-size 16 --repeats 3 --out-dir bench/

Writes OUT_DIR/results.json, results.md, speed_vs_beam.png and speed_vs_bleu.png. What is
measured and how: see ``fairseq_san.benchmark``. Every default comes from
``fairseq_san.benchmark.config`` (an option's destination is the field it sets).

    fairseq-san-bench steps [--arch transformer_san_small] [--beam 4] [--profile] ...

times one decoder step of fairseq's generator and of the static decoder at each precision on
random-weight models, with no data (``fairseq_san.benchmark.step_timer``).
"""

import argparse
import dataclasses
import shlex
import sys
from typing import Dict, List, Optional

from fairseq_san import options
from fairseq_san.benchmark.config import MODES, BenchmarkConfig, DecodeOptions, field_defaults
from fairseq_san.benchmark.config import check_paths, check_values, parse_system
from fairseq_san.cli import (
    DefaultsHelpFormatter,
    exiting_on_termination,
    log_progress,
    quiet_when_output_closes,
    said_when_interrupted,
)

PROG = "fairseq-san-bench"


def option_defaults() -> Dict:
    """Every option's default: the default of the config field that is its destination."""
    defaults = {**field_defaults(BenchmarkConfig), **field_defaults(DecodeOptions)}
    del defaults["decode"], defaults["command"]  # not options: built from the others
    return defaults


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Benchmark the decoding of SAN translation systems (Xiao et al. 2019, Figure "
        "4, Table 6) on translation data (fairseq-preprocess with a source and a target language; "
        "language models are refused): "
        "speed at several beam sizes with natural and fixed output lengths, BLEU/chrF, "
        "parameters, decoding-cache size and a per-step profile. Each engine (fairseq, "
        "CTranslate2) decodes in a process of its own. 'fairseq-san-bench steps --help': the "
        "per-step timer on random weights.",
        formatter_class=DefaultsHelpFormatter,
    )
    add_input_options(parser.add_argument_group("what is decoded"))
    add_decoding_options(parser.add_argument_group("how it is decoded"))
    add_report_options(parser.add_argument_group("what is measured and written"))
    parser.set_defaults(**option_defaults())
    return parser


def given_path(text: str) -> str:
    """A path argument, refused where empty (an unset variable): --out-dir "" wrote the results
    into the working folder, --references "" read as the option left out."""
    if not text:
        raise argparse.ArgumentTypeError("is empty: name a path")
    return text


def spm_model_argument(text: str) -> str:
    """--spm's value: a path (``given_path``), or "" for 'none' (tokens joined by spaces)."""
    return "" if text == "none" else given_path(text)


def add_input_options(group: argparse._ArgumentGroup) -> None:
    """The data, the systems and the references."""
    group.add_argument(
        "--data", required=True,
        help="fairseq-binarized translation data directory (fairseq-preprocess --source-lang "
        "SRC --target-lang TGT; not a language model's --only-source data)",
    )  # fmt: skip
    group.add_argument("--subset", help="subset to decode (test, test1, valid)")
    group.add_argument(
        "--system", dest="systems", action="append", required=True, metavar="NAME=CKPT[:JSON]",
        help="a system: a checkpoint and optional model overrides as a JSON object, e.g. "
        "'nocache=base.pt:{\"san_decoding\": \"no-cache\"}' or "
        "'policy=base.pt:{\"san_policy\": \"{\\\"decoder_self\\\": [1, 5]}\"}'; the keys "
        f"{options.DECODING.name} ({', '.join(options.DECODINGS)}) and "
        f"{options.DECODER_PRECISION.name} (its choices: docs/usage.md, the static decoder) "
        "choose how it is decoded, "
        "e.g. 'static=base.pt:{\"san_decoding\": \"static\"}'; repeat the flag",
    )  # fmt: skip
    group.add_argument("--baseline", help="name of the reference system (default: the first)")
    group.add_argument("--max-sentences", type=int, help="decode only the first N sentences")
    group.add_argument(
        "--spm", dest="spm_model", metavar="MODEL", type=spm_model_argument,
        help="sentencepiece model that detokenizes hypotheses (default: DATA/spm.model if it "
        "exists; 'none': join the tokens with spaces)",
    )  # fmt: skip
    group.add_argument(
        "--references", metavar="FILE", type=given_path,
        help="raw reference file, gzip-compressed or not, a pipe too (default: "
        "DATA/text/SUBSET.raw.TGT if it exists and hypotheses are detokenized, else the binarized "
        "targets detokenized like the hypotheses; refused without a sentencepiece model)",
    )  # fmt: skip
    group.add_argument(
        "--no-ctranslate2", dest="ctranslate2", action="store_false",
        help="do not add the baseline converted to CTranslate2 (skipped anyway when "
        "ctranslate2 is not installed)",
    )  # fmt: skip


def add_decoding_options(group: argparse._ArgumentGroup) -> None:
    """Beams, batches, output lengths and the device."""
    group.add_argument("--beams", type=int, nargs="+", help="beam sizes to time")
    group.add_argument("--batch-size", type=int, help="sentences per batch")
    group.add_argument(
        "--modes", nargs="+", choices=MODES,
        help="natural output lengths, and/or every hypothesis forced to --fixed-length tokens",
    )  # fmt: skip
    group.add_argument(
        "--fixed-length", type=int, metavar="L",
        help="output length of the fixed mode (default: the mean reference length)",
    )  # fmt: skip
    group.add_argument("--max-len-a", type=float, help="natural lengths: at most a*x+b tokens")
    group.add_argument("--max-len-b", type=int, help="natural lengths: at most a*x+b tokens")
    group.add_argument("--lenpen", type=float, help="length penalty")
    device = group.add_mutually_exclusive_group()
    device.add_argument(
        "--cpu", dest="device", action="store_const", const="cpu",
        help="decode on the CPU even with a GPU (default: the GPU where there is one)",
    )  # fmt: skip
    device.add_argument(
        "--gpu", dest="device", action="store_const", const="cuda",
        help="decode on the GPU (fail without one)",
    )  # fmt: skip
    group.add_argument("--fp16", action="store_true", help="half precision (GPU)")
    group.add_argument(
        "--threads", type=int, help="torch and CTranslate2 CPU threads (default: torch's choice)"
    )


def add_report_options(group: argparse._ArgumentGroup) -> None:
    """Repeats, the tables' beams, the profile and the output directory."""
    group.add_argument(
        "--repeats", type=int, help="timed passes per system (3 or more for stable medians)"
    )
    group.add_argument("--out-dir", required=True, type=given_path,
                       help="where the results are written")  # fmt: skip
    group.add_argument(
        "--cache-beams", type=int, nargs="*",
        help="beam sizes whose decoding-cache peak the table shows (measured also when not in "
        "--beams)",
    )  # fmt: skip
    group.add_argument(
        "--table-beam", type=int,
        help="beam size of the main table and the profile (the first of --beams if not there)",
    )  # fmt: skip
    group.add_argument(
        "--no-profile", dest="profile", action="store_false", help="skip the per-step profile"
    )


def config_from_args(args: argparse.Namespace, command: str) -> BenchmarkConfig:
    """The BenchmarkConfig of parsed arguments: each option's destination is a field's name."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(BenchmarkConfig)
              if hasattr(args, f.name)}  # fmt: skip
    values["systems"] = [parse_system(text) for text in args.systems]
    values["decode"] = DecodeOptions(
        **{f.name: getattr(args, f.name) for f in dataclasses.fields(DecodeOptions)}
    )
    return BenchmarkConfig(**values, command=command)


@said_when_interrupted  # the workers end quietly; no results are written
def main(argv: Optional[List[str]] = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["steps"]:  # the step timer: random weights, no data (benchmark.step_timer)
        from fairseq_san.benchmark import step_timer

        step_timer.main(argv[1:])
        return
    parser = build_parser()
    args = parser.parse_args(argv)
    try:  # a bad value is a usage error (exit 2), as argparse's own
        config = config_from_args(args, shlex.join([PROG, *argv]))
        check_values(config)
    except ValueError as err:
        parser.error(str(err))
    from fairseq_san.benchmark.machine import choose_device  # torch: not for --help

    try:  # the files the options name and the device, before fairseq's import logs anything
        check_paths(config)
        choose_device(config.device, config.fp16)
    except ValueError as err:
        sys.exit(f"{PROG}: error: {err}")
    log_progress()
    from fairseq_san.benchmark.report import markdown_report
    from fairseq_san.benchmark.run import run_benchmark
    from fairseq_san.benchmark.workers import WorkerDied

    try:
        with exiting_on_termination():  # a SIGTERM stops the workers too
            results = run_benchmark(config)
    except (ValueError, OSError, WorkerDied) as err:
        sys.exit(f"{PROG}: error: {err}")
    print_report(markdown_report(results))


@quiet_when_output_closes  # the workers have ended: standard output is the one pipe left
def print_report(report: str) -> None:
    """The results' tables on standard output, as the last thing the benchmark does."""
    print(report, end="")


if __name__ == "__main__":
    main()
