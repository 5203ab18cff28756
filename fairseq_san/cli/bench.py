"""fairseq-san-bench: decoding speed, quality, cache size and step profile of SAN systems.

    fairseq-san-bench --data DATA --subset test \\
        --system base=ckpt/base.pt \\
        --system base-nocache='ckpt/base.pt:{"san_no_cache": true}' \\
        --system san=ckpt/san.pt \\
        --system aan+san=ckpt/aan_san.pt \\
        --baseline base --beams 1 4 8 12 16 20 --batch-size 16 --repeats 3 --out-dir bench/

Writes OUT_DIR/results.json, results.md, speed_vs_beam.png and speed_vs_bleu.png. What is
measured and how: see ``fairseq_san.benchmark``.
"""

import argparse
import logging
import shlex
import sys
from typing import List, Optional

PROG = "fairseq-san-bench"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Benchmark the decoding of SAN systems (Xiao et al. 2019, Figure 4, Table 6) "
        "in one process: speed at several beam sizes with natural and fixed output lengths, "
        "BLEU/chrF, parameters, decoding-cache size and a per-step profile.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--data", required=True, help="fairseq-binarized data directory")
    parser.add_argument("--subset", default="test", help="subset to decode (test, test1, valid)")
    parser.add_argument(
        "--system", dest="systems", action="append", required=True, metavar="NAME=CKPT[:JSON]",
        help="a system: a checkpoint and optional model overrides as a JSON object, e.g. "
        "'nocache=base.pt:{\"san_no_cache\": true}' or "
        "'policy=base.pt:{\"san_policy\": \"{\\\"decoder_self\\\": [1, 5]}\"}'; repeat the flag",
    )  # fmt: skip
    parser.add_argument("--baseline", help="name of the reference system (default: the first)")
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 4, 8, 12, 16, 20])
    parser.add_argument("--batch-size", type=int, default=16, help="sentences per batch")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per system (>= 3)")
    parser.add_argument("--out-dir", required=True, help="where the results are written")
    parser.add_argument("--max-sentences", type=int, help="decode only the first N sentences")
    device = parser.add_mutually_exclusive_group()
    device.add_argument("--cpu", action="store_true", help="decode on the CPU even with a GPU")
    device.add_argument("--gpu", action="store_true", help="decode on the GPU (fail without one)")
    parser.add_argument("--fp16", action="store_true", help="half precision (GPU)")
    parser.add_argument(
        "--threads", type=int, help="torch CPU threads (default: torch's own choice)"
    )
    parser.add_argument(
        "--modes", nargs="+", choices=["natural", "fixed"], default=["natural", "fixed"],
        help="natural output lengths, and/or every hypothesis forced to --fixed-length tokens",
    )  # fmt: skip
    parser.add_argument(
        "--fixed-length", type=int, metavar="L",
        help="output length of the fixed mode (default: the mean reference length)",
    )  # fmt: skip
    parser.add_argument(
        "--cache-beams", type=int, nargs="*", default=[4, 20],
        help="beam sizes whose decoding-cache peak the table shows (measured also when not in "
        "--beams)",
    )  # fmt: skip
    parser.add_argument(
        "--table-beam", type=int, default=4,
        help="beam size of the main table and the profile (the first of --beams if not there)",
    )  # fmt: skip
    parser.add_argument("--no-profile", action="store_true", help="skip the per-step profile")
    parser.add_argument(
        "--spm", metavar="MODEL",
        help="sentencepiece model that detokenizes hypotheses (default: DATA/spm.model if it "
        "exists; 'none': join the tokens with spaces)",
    )  # fmt: skip
    parser.add_argument(
        "--references", metavar="FILE",
        help="raw reference file (default: DATA/text/SUBSET.raw.TGT if it exists, else the "
        "binarized targets detokenized like the hypotheses)",
    )  # fmt: skip
    parser.add_argument(
        "--max-len-a", type=float, default=0.0, help="natural lengths: at most a*x+b tokens"
    )
    parser.add_argument(
        "--max-len-b", type=int, default=200, help="natural lengths: at most a*x+b tokens"
    )
    parser.add_argument("--lenpen", type=float, default=1.0, help="length penalty")
    parser.add_argument(
        "--no-ctranslate2", action="store_true",
        help="do not add the baseline converted to CTranslate2 (skipped anyway when "
        "ctranslate2 is not installed)",
    )  # fmt: skip
    return parser


def main(argv: Optional[List[str]] = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1 (3 or more for stable medians)")
    logging.basicConfig(
        format="%(asctime)s | %(levelname)s | %(name)s | %(message)s",
        level=logging.INFO,
        stream=sys.stderr,
    )
    if args.repeats < 3:
        logging.getLogger(PROG).warning("--repeats %d: medians need 3 or more", args.repeats)
    from fairseq_san import benchmark

    try:
        systems = [benchmark.parse_system(text) for text in args.systems]
    except ValueError as err:
        parser.error(str(err))
    config = benchmark.BenchmarkConfig(
        data=args.data,
        subset=args.subset,
        systems=systems,
        baseline=args.baseline,
        beams=args.beams,
        batch_size=args.batch_size,
        repeats=args.repeats,
        out_dir=args.out_dir,
        max_sentences=args.max_sentences,
        device="cpu" if args.cpu else "cuda" if args.gpu else "auto",
        fp16=args.fp16,
        modes=args.modes,
        fixed_length=args.fixed_length,
        cache_beams=args.cache_beams,
        table_beam=args.table_beam,
        profile=not args.no_profile,
        spm_model="" if args.spm == "none" else args.spm,
        references=args.references,
        decode=benchmark.DecodeOptions(args.max_len_a, args.max_len_b, args.lenpen),
        threads=args.threads,
        ctranslate2=not args.no_ctranslate2,
        command=shlex.join([PROG, *argv]),
    )
    try:
        results = benchmark.run_benchmark(config)
    except (ValueError, OSError) as err:
        sys.exit(f"{PROG}: error: {err}")
    print(benchmark.markdown_report(results), end="")


if __name__ == "__main__":
    main()
