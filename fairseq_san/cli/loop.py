"""``fairseq-san-loop``: the decisions and the record of the learn-to-share loop (paper Figure 3).

``examples/learn_to_share.sh`` runs fairseq's commands; this command answers its questions:

* ``show POLICY [--run-dir RUN_DIR]``: the policy in the paper's notation, e.g.
  ``decoder_self {1,5}``, of the kinds the run's model has;
* ``settled RUN_DIR K``: exit 0, saying why, when the loop stops after iteration K: the policy K
  learned is not new (``fairseq_san.loop.stopping``); exit 1 while it still changes; exit 2 when
  K has learned none (``RUN_DIR/iter<K+1>/policy.json``);
* ``summary RUN_DIR``: the table of all iterations (policy, parameters, validation loss, BLEU,
  training time) as ``RUN_DIR/loop.md`` (its rows as ``loop.json``), also printed
  (``fairseq_san.loop.summary``);
* ``options RECIPE ARGS...``: the recipe's command line parsed with its option list, printed as
  shell assignments for the recipe to eval (``fairseq_san.loop.recipe_options``);
* ``start RUN_DIR OPTIONS -- TRAIN_ARGS``: check the recipe's inputs, lock the run dir
  (``--lock-fd``: one loop per run dir) and check the options recorded in ``RUN_DIR/run.json``
  before anything runs (see ``fairseq_san.loop.run_record``);
* ``test-systems DATA TGT NAME=CHECKPOINT[:OVERRIDES]... [--batch-size N]``: the systems that
  ``examples/multi30k/test_bleu.sh`` scores, after the checks it makes before decoding any (the
  data and its splits, the batch size, each NAME and checkpoint), a line for each system and
  split it scores (test, and test1 where DATA has its references): NAME, SPLIT, its REFERENCE,
  CHECKPOINT and OVERRIDES (``{}`` if none), tab-separated
  (``fairseq_san.loop.bleu_systems``); a refusal is one line
  ``test_bleu.sh: ...``, exit 2 (usage) or 1 (a missing file);
* ``decode-key CHECKPOINT DATA SPLIT -- GENERATE_ARGS``: what a decoded split was made from, one
  line that ``examples/multi30k/test_bleu.sh`` keeps beside it (``fairseq_san.loop.decode_key``);
* ``perplexity LOG -o valid.json``: a language model's validation perplexity from the output of
  ``fairseq-eval-lm`` (``examples/learn_to_share_lm.sh``; ``fairseq_san.loop.perplexity``);
* ``lm-task-args [--data DATA] -- TRAIN_ARGS``: the language-modelling task's options among
  fairseq-train's arguments, shell-quoted on one line, for the recipe's ``fairseq-eval-lm``
  (which builds its task from its command line, not from the checkpoint;
  ``fairseq_san.loop.perplexity``); with ``--data``, refused (exit 2) where a sample is shorter
  than DATA's longest valid sentence, which fairseq-train stops at;
* ``train-log LOG...``: training logs (``--log-format json``) side by side: updates, wall time,
  updates/s, tokens/s, why each stopped, validation loss;
* ``wmt14-check corpora ORIG | prepared PREPARED | gpus N``: what
  ``examples/wmt14_en_de/run.sh`` checks before it prepares, binarizes or downloads
  (``fairseq_san.loop.prepared_data``); a refusal is one line ``run.sh: ...``, exit 1;
* ``multi30k-check vocab-size N | raw-files LANG... | unfinished OUT | ready OUT FILE WHAT
  LANG...``: what the prepare.sh recipes check (VOCAB_SIZE, printed as its number; MULTI30K_DIR's
  raw files; an unfinished or a finished OUT_DIR; ``fairseq_san.loop.prepared_data``); a refusal
  is one line ``prepare.sh: ...``, exit 2 (usage) or 1;
* ``user-dir``: the plugin's folder, what the recipes give fairseq's ``--user-dir``;
* ``log-tail LOG``: the last lines of a fairseq command's log that failed, without the
  configuration fairseq prints first (one line of kilobytes that buried the error after it).
"""

import argparse
import json
import os
import re
import shlex
import sys
from typing import Dict, List, Optional

import fairseq_san
from fairseq_san.cli import (
    integer_from,
    positive_int,
    quiet_when_output_closes,
    said_when_interrupted,
)
from fairseq_san.errors import RecipeError, UsageError, file_error
from fairseq_san.files import DASH, output_problem, read_from, write_text
from fairseq_san.loop import prepared_data
from fairseq_san.loop.bleu_systems import scoring_lines
from fairseq_san.loop.decode_key import decode_key
from fairseq_san.loop.perplexity import read_perplexity, task_arguments, write_perplexity
from fairseq_san.loop.recipe_options import (
    LM_LOOP,
    LOOP,
    RECIPE_OPTIONS,
    recipe_defaults,
    recorded_options,
    shell_assignments,
    split_at_dashes,
)
from fairseq_san.loop.run_record import (
    TRAIN_ARGS,
    RunError,
    check_inputs,
    check_no_path_separator,
    check_run_dir,
    check_values,
    longest_sentence_problem,
    path_kind_problem,
    sample_positions_problem,
    start_run,
)
from fairseq_san.loop.stopping import loop_stop, policy_path
from fairseq_san.loop.summary import model_kinds, write_summary
from fairseq_san.loop.train_log import train_log_table
from fairseq_san.options import name_of
from fairseq_san.policy import KINDS, format_policy, load_policy


# The recipes' options that make a run what it is, as they spell them; paths are absolute. A
# language model's loop (learn_to_share_lm.sh, --lm) records its own besides the shared ones.
RUN_OPTIONS = tuple(option.flag for option in RECIPE_OPTIONS[LOOP] if option.recorded)
LM_RUN_OPTIONS = tuple(
    option.flag for option in recorded_options() if option.flag not in RUN_OPTIONS
)


def add_start_parser(commands: argparse._SubParsersAction) -> None:
    start = commands.add_parser(
        "start", help="check the inputs and RUN_DIR/run.json, record the options (-- TRAIN_ARGS)"
    )
    start.add_argument("run_dir")
    for option in recorded_options():
        if not option.metavar:
            start.add_argument(option.flag, action="store_true", help=option.help)
        elif option.flag == "--data":  # every run has data (a traceback without it)
            start.add_argument(option.flag, required=True, help=option.help)
        else:
            start.add_argument(option.flag, default="", help=f"{option.help}; empty: not set")
    start.add_argument("--lm", action="store_true",
                       help="a language model's run (learn_to_share_lm.sh): no --valid-ref")
    start.add_argument("--extend", action="store_true", help="allow a new --max-iterations")
    start.add_argument("--dry-run", action="store_true", help="check only; write nothing")
    start.add_argument("--check-inputs", action="store_true",
                       help="check the values, --data and --valid-ref only (exit 2 if bad or "
                       "missing); write nothing, lock nothing")  # fmt: skip
    start.add_argument("--lock-fd", type=int, metavar="FD",
                       help="lock RUN_DIR/.lock, open on this file descriptor, for the whole run")
    start.set_defaults(run=run_start)


def run_options(args: argparse.Namespace, train_args: List[str]) -> Dict[str, object]:
    """{option: value} of the run: None for an empty value, absolute paths; a language model's
    run records ``--lm`` and its own options (a translation run's record has neither)."""
    options: Dict[str, object] = {"--lm": True} if args.lm else {}
    for option in RUN_OPTIONS + (LM_RUN_OPTIONS if args.lm else ()):
        value = getattr(args, name_of(option))
        if option in ("--data", "--valid-ref") and value:
            value = os.path.abspath(value)
        options[option] = None if value == "" else value
    options[TRAIN_ARGS] = train_args
    return options


def run_show(args: argparse.Namespace, after: List[str]) -> int:
    """The policy in the paper's notation, its kinds the run's model's where --run-dir names it
    (a language model's run: decoder self-attention alone, not two kinds it lacks as "none")."""
    if args.run_dir is not None and not os.path.isdir(args.run_dir):  # every kind, silently
        raise UsageError(f"--run-dir {args.run_dir}: no such run directory")
    kinds = KINDS if args.run_dir is None else model_kinds(args.run_dir)
    print(format_policy(load_policy(args.policy), kinds))
    return 0


def run_settled(args: argparse.Namespace, after: List[str]) -> int:
    """Exit 0, saying why, when the loop stops after iteration K; 1 while its policy changes;
    2 (a UsageError) when there is no run or K has learned no policy."""
    if not os.path.isdir(args.run_dir):  # exit 1 alone would read "not settled"
        raise UsageError(f"{args.run_dir}: no such run directory")
    learned = policy_path(args.run_dir, args.iteration + 1)
    # nor would it say this: "the policy is new"; a folder there is load_policy's to name (it
    # was said to be no policy learned)
    if not os.path.exists(learned):
        raise UsageError(
            f"{learned}: iteration {args.iteration} has learned no policy yet "
            "(fairseq-san-policy writes it)"
        )
    stop = loop_stop(args.run_dir, args.iteration)
    if stop is not None:
        print(f"== {stop}")
    return 1 if stop is None else 0


def run_summary(args: argparse.Namespace, after: List[str]) -> int:
    print(write_summary(args.run_dir), end="")
    return 0


def check_not_empty(args: argparse.Namespace) -> None:
    """UsageError for an empty RUN_DIR or --data, which the recipes' option parser refuses: ''
    made the current folder the run dir, its record written there, and --data '' a traceback."""
    for name, value in (("RUN_DIR", args.run_dir), ("--data", args.data)):
        if value == "":
            raise UsageError(f"{name} is empty: name a folder")


def run_start(args: argparse.Namespace, after: List[str]) -> int:
    """Check the values and inputs only (--check-inputs: what the recipes run before they make
    the run dir and its lock, so a refused run leaves nothing), or lock the run dir and record its
    options."""
    check_not_empty(args)
    options = run_options(args, after)
    check_run_dir(args.run_dir)
    if not args.lm:  # a language model's loop scores with fairseq-eval-lm, which reads no ':'
        check_no_path_separator(args.run_dir)
    if args.check_inputs:
        check_values(options)
        check_inputs(options, dry_run=False)
    else:
        defaults = recipe_defaults(LM_LOOP if args.lm else LOOP)
        start_run(args.run_dir, options, args.extend, args.dry_run, args.lock_fd, defaults)
    return 0


def run_decode_key(args: argparse.Namespace, after: List[str]) -> int:
    print(decode_key(args.checkpoint, args.data, args.split, after))
    return 0


def run_test_systems(args: argparse.Namespace, after: List[str]) -> int:
    lines = scoring_lines(args.data, args.target, args.systems, args.batch_size, args.out_dir)
    print("".join(line + "\n" for line in lines), end="")
    return 0


def check_output(output: str, inputs: List[str], what: str) -> None:
    """UsageError where ``-o output`` cannot be written, said before any input is read: it is an
    input (the log it was made from was replaced), or ``files.output_problem``'s reasons."""
    problem = output_problem(output, what, inputs)
    if problem:
        raise UsageError(f"-o {output} {problem}")


def run_perplexity(args: argparse.Namespace, after: List[str]) -> int:
    log = read_from(args.log)
    to_file = args.output != DASH  # "-": standard output, where the JSON is printed
    if to_file:
        check_output(args.output, [log], "the JSON file")
    print(json.dumps(write_perplexity(log, args.output) if to_file else read_perplexity(log)))
    return 0


def run_lm_task_args(args: argparse.Namespace, after: List[str]) -> int:
    if args.data is not None and not os.path.isdir(args.data):  # checked nothing, silently
        sharded = ":" in args.data and path_kind_problem(args.data, None)  # DATA1:DATA2, as start
        raise UsageError(sharded or f"no data directory {args.data} (--data)")
    problem = None if args.data is None else longest_sentence_problem(args.data, after)
    problem = problem or sample_positions_problem(after)  # whose advice then fits the data
    if problem is not None:
        raise UsageError(problem)
    print(shlex.join(task_arguments(after)))
    return 0


def run_train_log(args: argparse.Namespace, after: List[str]) -> int:
    logs = [read_from(path) for path in args.logs]
    to_file = args.output not in (None, DASH)  # "-": standard output, where it is printed
    if to_file:
        check_output(args.output, logs, "the table")
    table = train_log_table(logs)
    if to_file:
        write_text(args.output, table)  # whole or not at all, as the loop's other files
    print(table, end="")
    return 0


def run_user_dir(args: argparse.Namespace, after: List[str]) -> int:
    print(os.path.dirname(os.path.abspath(fairseq_san.__file__)))
    return 0


# argparse type: an iteration of the loop, 0 or more (-1 exited 1, read as "not settled").
iteration = integer_from(0, "an iteration number (0, 1, ...)")


def build_parser() -> argparse.ArgumentParser:
    """The subcommands, each with the function that runs it (``run``)."""
    parser = argparse.ArgumentParser(prog="fairseq-san-loop", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    add_run_dir_parsers(commands)
    add_start_parser(commands)
    add_recipe_step_parsers(commands)
    add_prepared_data_parsers(commands)
    return parser


def add_run_dir_parsers(commands: argparse._SubParsersAction) -> None:
    """The subcommands that read a run and its policies: settled, show, summary, options."""
    settled = commands.add_parser(
        "settled", help="exit 0, saying why, when the policy iteration K learned is not new"
    )
    settled.add_argument("run_dir")
    settled.add_argument("iteration", type=iteration, metavar="K")
    settled.set_defaults(run=run_settled)
    show = commands.add_parser("show", help="print a policy file in the paper's notation")
    show.add_argument("policy")
    show.add_argument(
        "--run-dir",
        help="the loop's run: only the attention kinds its model has (a language model's run, "
        "learn_to_share_lm.sh: decoder_self)",
    )
    show.set_defaults(run=run_show)
    summary = commands.add_parser("summary", help="write RUN_DIR/loop.md and loop.json")
    summary.add_argument("run_dir")
    summary.set_defaults(run=run_summary)
    # Only its errors reach argparse: main hands a recipe's whole command line to the recipe's own.
    recipe = commands.add_parser("options", help="a recipe's command line as shell assignments")
    recipe.add_argument("recipe", choices=list(RECIPE_OPTIONS))
    recipe.add_argument("args", nargs=argparse.REMAINDER, help="the recipe's arguments")


def add_recipe_step_parsers(commands: argparse._SubParsersAction) -> None:
    """The subcommands of the recipes' other steps: decode-key, test-systems, train-log,
    perplexity, lm-task-args, user-dir, log-tail."""
    key = commands.add_parser("decode-key", help="print what a decoded split was made from")
    key.add_argument("checkpoint")
    key.add_argument("data", help="the binarized data directory")
    key.add_argument("split")
    key.set_defaults(run=run_decode_key)
    systems = commands.add_parser(
        "test-systems",
        help="check test_bleu.sh's inputs; print a line for each system and split it scores"
    )
    systems.add_argument("data", help="the binarized data directory (prepare.sh's output)")
    systems.add_argument("target", metavar="tgt", help="its target language")
    systems.add_argument("systems", nargs="+", metavar="NAME=CHECKPOINT[:OVERRIDES]")
    systems.add_argument("--batch-size", default="16", metavar="N",
                         help="test_bleu.sh's DECODE_BATCH_SIZE, checked (default: %(default)s)")
    systems.add_argument("--out-dir", metavar="OUT", help="test_bleu.sh's OUT_DIR, checked")
    systems.set_defaults(run=run_test_systems)
    train_log = commands.add_parser("train-log", help="training logs side by side, as a table")
    train_log.add_argument(
        "logs", nargs="+",
        help="fairseq-train logs written with --log-format json ('-': standard input)",
    )  # fmt: skip
    train_log.add_argument(
        "-o", "--output",
        help="also write the table here ('-': standard output, where it is printed)",
    )  # fmt: skip
    train_log.set_defaults(run=run_train_log)
    perplexity = commands.add_parser("perplexity", help="fairseq-eval-lm's perplexity as JSON")
    perplexity.add_argument("log", help="the output of fairseq-eval-lm ('-': standard input)")
    perplexity.add_argument(
        "-o", "--output", required=True,
        help="write the JSON here ('-': standard output, where it is printed)",
    )  # fmt: skip
    perplexity.set_defaults(run=run_perplexity)
    task_args = commands.add_parser(
        "lm-task-args", help="the language-modelling task's options among fairseq-train's "
        "arguments (after --), for fairseq-eval-lm"
    )  # fmt: skip
    task_args.add_argument("--data", help="refuse a sample shorter than its longest valid sentence")
    task_args.set_defaults(run=run_lm_task_args)
    user_dir = commands.add_parser("user-dir", help="print the folder fairseq's --user-dir takes")
    user_dir.set_defaults(run=run_user_dir)
    log_tail = commands.add_parser(
        "log-tail", help="the last lines of a failed command's log, its configuration left out"
    )
    log_tail.add_argument("log", help="the command's output")
    log_tail.add_argument("-n", "--lines", type=positive_int, default=5,
                          help="(default: %(default)s)")  # fmt: skip
    log_tail.set_defaults(run=run_log_tail)


# The configuration fairseq's commands log as they start, a dict's text, kilobytes on one line,
# in either of fairseq's log formats (an error of the plugin's may quote "{'_name': ...}" too).
FAIRSEQ_CONFIGURATION = re.compile(r"(^INFO:fairseq_cli\.\w+:| \| fairseq_cli\.\w+ \| )\{'_name': ")


def run_log_tail(args: argparse.Namespace, after: List[str]) -> int:
    with open(args.log, encoding="utf-8", errors="replace") as log:
        kept = [line for line in log if not FAIRSEQ_CONFIGURATION.search(line)]
    print("".join(kept[-args.lines:]), end="")
    return 0


def run_wmt14_check(args: argparse.Namespace, after: List[str]) -> int:
    if args.check == "gpus":
        prepared_data.check_wmt14_gpus(args.gpus)
    elif args.check == "corpora":
        prepared_data.check_wmt14_corpora(args.orig)
    else:
        prepared_data.check_wmt14_prepared(args.prepared)
    return 0


def run_multi30k_check(args: argparse.Namespace, after: List[str]) -> int:
    if args.check == "vocab-size":
        print(prepared_data.vocab_size(args.vocab_size))
    elif args.check == "raw-files":
        prepared_data.check_raw_files(args.multi30k_dir, args.splits, args.languages)
    elif args.check == "unfinished":
        prepared_data.check_unfinished(args.out)
    else:
        vocab = prepared_data.vocab_size(args.vocab_size) if args.vocab_size else None
        prepared_data.check_ready(args.out, args.file, args.what, vocab, args.multi30k_dir,
                                  args.splits, args.languages)  # fmt: skip
    return 0


def add_prepared_data_parsers(commands: argparse._SubParsersAction) -> None:
    """The checks of the data the recipes prepare: wmt14-check, multi30k-check."""
    wmt14 = commands.add_parser("wmt14-check", help="examples/wmt14_en_de/run.sh's checks")
    wmt14.set_defaults(run=run_wmt14_check)
    checks = wmt14.add_subparsers(dest="check", required=True)
    corpora = checks.add_parser("corpora", help="every file its preparation reads")
    corpora.add_argument("orig", help="where the archives were unpacked")
    prepared = checks.add_parser("prepared", help="what its preparation wrote, whole and parallel")
    prepared.add_argument("prepared", help="the preparation's folder")
    gpus = checks.add_parser("gpus", help="a machine with the GPUs of its fairseq-train")
    gpus.add_argument("gpus", type=positive_int)
    multi30k = commands.add_parser("multi30k-check", help="the prepare.sh recipes' checks")
    multi30k.set_defaults(run=run_multi30k_check)
    checks = multi30k.add_subparsers(dest="check", required=True)
    vocab = checks.add_parser("vocab-size", help="print VOCAB_SIZE as its number")
    vocab.add_argument("vocab_size")
    unfinished = checks.add_parser("unfinished", help="an OUT_DIR without .done")
    unfinished.add_argument("out")
    raw_files = checks.add_parser("raw-files", help="every split's raw file in MULTI30K_DIR")
    ready = checks.add_parser("ready", help="a finished OUT_DIR holds the data asked for")
    ready.add_argument("out")
    ready.add_argument("file", help="the file that only OUT_DIR's kind of data has")
    ready.add_argument("what", help="that kind of data, in words")
    ready.add_argument("--vocab-size", default="", help="VOCAB_SIZE, where given")
    for parser in (raw_files, ready):
        parser.add_argument("languages", nargs="+", metavar="LANG")
        parser.add_argument("--multi30k-dir", default="", help="MULTI30K_DIR; empty: not set")
        parser.add_argument("--splits", required=True,
                            help="the recipe's $splits: RAW_NAME:SPLIT, space-separated")


# The subcommands whose arguments after -- are another command's (fairseq-train's, or
# fairseq-generate's).
PASS_THROUGH = ("start", "decode-key", "lm-task-args")


@said_when_interrupted
@quiet_when_output_closes
def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["options"] and argv[1:2] and argv[1] in RECIPE_OPTIONS:
        print(shell_assignments(argv[1], argv[2:]), end="")  # its whole command line, -- and all
        return 0
    after: List[str] = []
    if argv[:1] and argv[0] in PASS_THROUGH:
        argv, after = split_at_dashes(argv)
    args = parser.parse_args(argv)
    try:
        return args.run(args, after)
    except RecipeError as err:  # a recipe's own refusals, named after it
        print(f"{err.recipe}: {err}", file=sys.stderr)
        return err.status
    except BrokenPipeError:  # quiet_when_output_closes says it
        raise
    except (RunError, UsageError, OSError) as err:  # a PolicyError, a CheckpointError, a log
        said = file_error(err) if isinstance(err, OSError) else str(err)
        # one line: no usage text
        print(f"fairseq-san-loop: error: {said}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
