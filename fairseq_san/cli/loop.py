"""``fairseq-san-loop``: the decisions and the record of the learn-to-share loop (paper Figure 3).

``examples/learn_to_share.sh`` runs fairseq's commands; this command answers its questions:

* ``show POLICY``: the policy in the paper's notation, e.g. ``decoder_self {1,5}``;
* ``same-policy A B``: exit 0 when two policy files share alike (the loop's stopping rule);
* ``summary RUN_DIR``: the table of all iterations (policy, parameters, validation loss, BLEU,
  training time) as ``RUN_DIR/loop.md``, also printed;
* ``start RUN_DIR OPTIONS -- TRAIN_ARGS``: check the recipe's inputs and the options recorded in
  ``RUN_DIR/run.json`` before anything runs (see ``run_record``).
* ``converged RESULTS_DIR``: the converged-model campaign's summary.json and summary.md
  (``docs/results/converged/run.sh``; fairseq_san/converged_summary.py);
* ``train-log LOG...``: training logs (``--log-format json``) side by side: updates, wall time,
  updates/s, tokens/s, why each stopped, validation loss.
"""

import argparse
import glob
import json
import os
import re
import sys
from typing import Dict, List, Optional

from fairseq_san.cli.run_record import TRAIN_ARGS, RunError, start_run
from fairseq_san import converged_summary
from fairseq_san.errors import UsageError
from fairseq_san.policy import format_policy, load_policy

ITERATION_DIR = re.compile(r"iter(\d+)$")


def same_policy(first: str, second: str) -> bool:
    return load_policy(first) == load_policy(second)


def iteration_dirs(run_dir: str) -> List[str]:
    """``RUN_DIR/iter<k>`` folders that hold a trained model, in iteration order."""
    found = [
        path
        for path in glob.glob(os.path.join(run_dir, "iter*"))
        if ITERATION_DIR.search(path) and os.path.exists(best_checkpoint(path))
    ]
    return sorted(found, key=lambda path: int(ITERATION_DIR.search(path).group(1)))


def best_checkpoint(iteration_dir: str) -> str:
    return os.path.join(iteration_dir, "checkpoints", "checkpoint_best.pt")


def checkpoint_facts(path: str) -> Dict[str, object]:
    """Parameters, best validation loss, updates and training seconds stored in a checkpoint."""
    from fairseq_san.checkpoints import load_state

    state = load_state(path)
    extra = state.get("extra_state", {})
    return {
        "parameters": parameter_count(state),
        "valid_loss": as_number(extra.get("best")),
        "num_updates": state["optimizer_history"][-1].get("num_updates"),
        "train_seconds": as_number(extra.get("previous_training_time")),
    }


# Embeddings fairseq ties when the model flag is set. A checkpoint saved from a GPU holds each as
# its own copy (fairseq moves the state dict to the CPU tensor by tensor), so storages alone
# would count a tied embedding three times.
TIED_EMBEDDINGS = {
    "share_all_embeddings": ("decoder.embed_tokens.weight", "decoder.output_projection.weight"),
    "share_decoder_input_output_embed": ("decoder.output_projection.weight",),
}


def parameter_count(state: Dict) -> int:
    """Numbers in a checkpoint's model, each tied or shared tensor counted once."""
    cfg = state.get("cfg")
    flags = cfg.get("model") if cfg is not None else state.get("args")
    tied = {
        key for flag, keys in TIED_EMBEDDINGS.items() if getattr(flags, flag, False) for key in keys
    }
    storages = {
        tensor.data_ptr(): tensor.numel()
        for key, tensor in state["model"].items()
        if key not in tied
    }
    return sum(storages.values())


def as_number(value) -> Optional[float]:
    """A plain float for a value fairseq may store as a 0-d tensor (after distributed training)."""
    return None if value is None else float(value)


def read_json(path: str) -> Optional[dict]:
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def iteration_row(iteration_dir: str) -> Dict[str, object]:
    facts = checkpoint_facts(best_checkpoint(iteration_dir))
    score = read_json(os.path.join(iteration_dir, "valid.json")) or {}
    iteration = int(ITERATION_DIR.search(iteration_dir).group(1))
    learned = os.path.join(os.path.dirname(iteration_dir), f"iter{iteration + 1}", "policy.json")
    return {
        "iteration": iteration,
        "policy": format_policy(load_policy(os.path.join(iteration_dir, "policy.json"))),
        "learned": format_policy(load_policy(learned)) if os.path.exists(learned) else "-",
        "bleu": score.get("bleu"),
        "chrf": score.get("chrf"),
        "signature": score.get("bleu_signature"),
        **facts,
    }


def summary_table(rows: List[Dict[str, object]]) -> str:
    """Markdown table of the loop, one row per iteration."""

    def shown(value, fmt="{}"):
        return "-" if value is None else fmt.format(value)

    lines = [
        "| iter | trained with policy | params | updates | train time | valid loss | "
        "valid BLEU | valid chrF | learned policy |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for row in rows:
        minutes = None if row["train_seconds"] is None else row["train_seconds"] / 60
        lines.append(
            f"| {row['iteration']} | {row['policy']} | {row['parameters']:,} | "
            f"{shown(row['num_updates'])} | {shown(minutes, '{:.0f} min')} | "
            f"{shown(row['valid_loss'], '{:.3f}')} | {shown(row['bleu'], '{:.2f}')} | "
            f"{shown(row['chrf'], '{:.2f}')} | {row['learned']} |"
        )
    signatures = sorted({row["signature"] for row in rows if row["signature"]})
    lines += ["", "Train time is fairseq's training clock stored in the checkpoint; a warm-started "
              "iteration's includes the iteration it started from."]
    lines += [""] + [f"BLEU signature: `{signature}`" for signature in signatures]
    return "\n".join(lines) + "\n"


def write_summary(run_dir: str) -> str:
    rows = [iteration_row(path) for path in iteration_dirs(run_dir)]
    if not rows:
        raise FileNotFoundError(f"no trained iteration (iter*/checkpoints/checkpoint_best.pt) in {run_dir}")
    table = f"# Learn to share: {run_dir}\n\n" + summary_table(rows)
    with open(os.path.join(run_dir, "loop.md"), "w", encoding="utf-8") as out:
        out.write(table)
    with open(os.path.join(run_dir, "loop.json"), "w", encoding="utf-8") as out:
        json.dump(rows, out, indent=2)
    return table


# learn_to_share.sh's options that make a run what it is, as it spells them; paths are absolute.
RUN_OPTIONS = (
    "--data", "--valid-ref", "--arch", "--theta-self", "--theta-encdec", "--theta-encoder",
    "--updates", "--max-iterations", "--warm-start", "--warm-updates", "--cpu-ranks",
    "--launcher", "--post-process",
)  # fmt: skip


def add_start_parser(commands) -> None:
    start = commands.add_parser(
        "start", help="check the inputs and RUN_DIR/run.json, record the options (-- TRAIN_ARGS)"
    )
    start.add_argument("run_dir")
    for option in RUN_OPTIONS:
        if option == "--warm-start":
            start.add_argument(option, action="store_true")
        else:
            start.add_argument(option, default="", help="empty: not set")
    start.add_argument("--extend", action="store_true", help="allow a new --max-iterations")
    start.add_argument("--dry-run", action="store_true", help="check only; write nothing")


def run_options(args: argparse.Namespace, train_args: List[str]) -> Dict[str, object]:
    """{option: value} of the run: None for an empty value, absolute paths."""
    options = {}
    for option in RUN_OPTIONS:
        value = getattr(args, option[2:].replace("-", "_"))
        if option in ("--data", "--valid-ref") and value:
            value = os.path.abspath(value)
        options[option] = None if value == "" else value
    options[TRAIN_ARGS] = train_args
    return options


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="fairseq-san-loop", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    same = commands.add_parser("same-policy", help="exit 0 when two policy files are equal")
    same.add_argument("first")
    same.add_argument("second")
    show = commands.add_parser("show", help="print a policy file in the paper's notation")
    show.add_argument("policy")
    summary = commands.add_parser("summary", help="write RUN_DIR/loop.md and loop.json")
    summary.add_argument("run_dir")
    add_start_parser(commands)
    converged = commands.add_parser(
        "converged", help="write the converged campaign's summary.json and summary.md"
    )
    converged.add_argument("results_dir", help="PAIR/RUN_DIR/iter*/ folders (docs/results/converged)")
    converged.add_argument("--data-root", default="data-bin",
                           help="prepare.sh's folders, for the references of the paired test (%(default)s)")
    converged.add_argument("-o", "--output", help="summary.json to write (RESULTS_DIR/summary.json)")
    train_log = commands.add_parser("train-log", help="training logs side by side, as a table")
    train_log.add_argument("logs", nargs="+", help="fairseq-train logs written with --log-format json")
    train_log.add_argument("-o", "--output", help="also write the table here")
    argv = list(sys.argv[1:] if argv is None else argv)
    train_args: List[str] = []
    if argv[:1] == ["start"] and "--" in argv:
        argv, train_args = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
    args = parser.parse_args(argv)
    try:
        if args.command == "show":
            print(format_policy(load_policy(args.policy)))
            return 0
        if args.command == "same-policy":
            return 0 if same_policy(args.first, args.second) else 1
        if args.command == "start":
            start_run(args.run_dir, run_options(args, train_args), args.extend, args.dry_run)
            return 0
        if args.command == "converged":
            output = args.output or os.path.join(args.results_dir, "summary.json")
            summary = converged_summary.write_summary(args.results_dir, args.data_root, output)
            print(converged_summary.summary_markdown(summary), end="")
            return 0
        if args.command == "train-log":
            table = converged_summary.train_log_table(args.logs)
            if args.output:
                with open(args.output, "w", encoding="utf-8") as out:
                    out.write(table)
            print(table, end="")
            return 0
        print(write_summary(args.run_dir), end="")
        return 0
    except RunError as err:
        print(f"fairseq-san-loop: error: {err}", file=sys.stderr)
        return 2
    except (UsageError, OSError) as err:  # UsageError: a PolicyError, a malformed log
        parser.error(str(err))


if __name__ == "__main__":
    sys.exit(main())
