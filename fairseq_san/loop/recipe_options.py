"""The learn-to-share recipes' options: one list per recipe, parsed here for the shell.

``examples/learn_to_share.sh`` and ``examples/learn_to_share_lm.sh`` hand their command line to
``fairseq-san-loop options RECIPE ARGS...``, which parses it with the recipe's list below and
prints shell assignments for the recipe to ``eval``: one variable per option (``--theta-self``
is ``THETA_SELF``; a switch is 1 or 0), ``START_OPTIONS``, the options that make a run what it
is, as ``fairseq-san-loop start`` records them in ``RUN/run.json`` (``recorded``),
``LAUNCHER_WORDS`` (``--launcher`` as a shell splits it), ``ANALYSIS_ARGS`` (fairseq-validate's
limit of ``--analysis-sentences``), the translation loop's ``POLICY_THETAS`` and ``set --`` with
the fairseq-train arguments after ``--``. The same list gives ``RECIPE --help`` and the options
``start`` accepts, so an option is added in one place. What one option cannot say alone is
refused here, before anything runs: the other recipe's model (``ARCHITECTURES``), and an
option that another makes unread (``--warm-updates`` without ``--warm-start``, ``--launcher``
beside ``--cpu-ranks``), and, after ``--``, a fairseq-train option the recipe sets itself
(``SET_BY_THE_RECIPE``: the policy, the checkpoints' folder, the model, the task).
"""

import argparse
import os
import re
import shlex
import shutil
import sys
from dataclasses import dataclass
from typing import Dict, List, NoReturn, Optional, Sequence, Tuple

from fairseq_san.errors import nearest_key_hint
from fairseq_san.files import read_as_an_option
from fairseq_san.loop.run_record import binarized_pair, flags_apart, is_count, train_arg
from fairseq_san.options import OPTIONS, POLICY_OPTIONS, SELF_SHARE, has_aan_decoder, name_of
from fairseq_san.ranks import nccl_ranks_problem

LOOP = "learn_to_share.sh"
LM_LOOP = "learn_to_share_lm.sh"


@dataclass(frozen=True)
class RecipeOption:
    """One option of a recipe: ``metavar`` empty for a switch; ``recorded`` when it makes a run
    what it is (a re-run may not change it: ``fairseq_san.loop.run_record``)."""

    flag: str
    default: str
    help: str
    metavar: str = ""
    recorded: bool = True

    @property
    def variable(self) -> str:
        """The recipe's shell variable: ``--theta-self`` -> ``THETA_SELF``."""
        return self.flag[2:].upper().replace("-", "_")


REQUIRED = ("--data", "--run-dir")
# fairseq-san-loop start's own switches, passed on when set (not recorded: they change no result).
START_SWITCHES = ("--extend", "--dry-run")


def _required(flag: str, metavar: str, help: str) -> RecipeOption:
    return RecipeOption(flag, "", help, metavar, recorded=flag == "--data")


def _switch(flag: str, help: str, recorded: bool = False) -> RecipeOption:
    return RecipeOption(flag, "0", help, recorded=recorded)


EXTEND = _switch("--extend", "allow a re-run to change --max-iterations (the only option it may "
                 "change)")  # fmt: skip
MAX_ITERATIONS = RecipeOption("--max-iterations", "3", "stop after K trained iterations even if "
                              "the policy still changes", "K")  # fmt: skip
THETA_SELF = RecipeOption("--theta-self", "0.4", "theta for decoder self-attention", "T")
# The analysis's share of the validation set (fairseq-validate's --san-analysis-max-sentences):
# both recipes take it; a large validation set's analysis costs less, from less evidence.
ANALYSIS_SENTENCES = RecipeOption("--analysis-sentences", "", "analyse the attention of "
                                  "validation sentences 0..N-1 only (default: every one)", "N")
DRY_RUN = _switch("--dry-run", "print the commands of the first iteration with steps left "
                  "instead of running them; writes nothing")  # fmt: skip
# How each iteration's fairseq-train starts: from scratch or from the last model, in one process
# or several. Both recipes take them (examples/learn_to_share_loop.sh reads them).
STARTS = (
    _switch("--warm-start", "iteration k+1 fine-tunes iteration k's model (unused projections "
            "dropped, a new leader's from its old leader's)", recorded=True),
    RecipeOption("--warm-updates", "", "updates of a warm-started iteration, with --warm-start "
                 "(default: updates / 2)", "N"),
    RecipeOption("--cpu-ranks", "0", "train with N CPU processes, one per rank (gloo, "
                 "legacy_ddp)", "N"),
    RecipeOption("--launcher", "", "prefix for fairseq-train, e.g. \"torchrun "
                 "--nproc_per_node 8\" (not with --cpu-ranks N)", "CMD"),
)  # fmt: skip

RECIPE_OPTIONS: Dict[str, Tuple[RecipeOption, ...]] = {
    LOOP: (
        _required("--data", "DATA", "the binarized data (examples/multi30k/prepare.sh)"),
        _required("--run-dir", "RUN", "where the loop's iterations are written; resumed if it "
                  "exists"),  # fmt: skip
        RecipeOption("--valid-ref", "", "raw validation references (default: "
                     "DATA/text/valid.raw.TGT)", "FILE"),  # fmt: skip
        RecipeOption("--arch", "transformer_san_small", "model architecture", "A"),
        THETA_SELF,
        RecipeOption("--theta-encdec", "0.5", "theta for encoder-decoder attention", "T"),
        RecipeOption("--theta-encoder", "", "theta for encoder self-attention (unset: the encoder "
                     "is not shared)", "T"),  # fmt: skip
        RecipeOption("--updates", "3000", "training updates per iteration", "N"),
        MAX_ITERATIONS,
        ANALYSIS_SENTENCES,
        *STARTS,
        RecipeOption("--post-process", "sentencepiece", "how fairseq-generate detokenizes, e.g. "
                     "subword_nmt", "P"),  # fmt: skip
        RecipeOption("--decode-batch-size", "16", "sentences per batch of the validation BLEU's "
                     "decoding (on a GPU, 128 takes about an eighth of the time); not recorded: "
                     "another value for a run dir changes no policy, but the validation scores "
                     "decoded with it may differ a little (fairseq's length limit reads a batch's "
                     "longest source)", "N", recorded=False),  # fmt: skip
        EXTEND,
        DRY_RUN,
    ),
    LM_LOOP: (
        _required("--data", "DATA", "the binarized text (examples/lm/prepare.sh)"),
        _required("--run-dir", "RUN", "where the loop's iterations are written; resumed if it "
                  "exists"),  # fmt: skip
        RecipeOption("--arch", "transformer_lm_san_small", "model architecture", "A"),
        THETA_SELF,
        RecipeOption("--self-share", "weights", "what a block's following layers share: weights "
                     "(SAN) or kv (CLA)", "S"),  # fmt: skip
        RecipeOption("--updates", "20000", "training updates per iteration at most (--patience 5 "
                     "stops a converged one sooner: about 2,000 updates on Multi30k)", "N"),
        MAX_ITERATIONS,
        ANALYSIS_SENTENCES,
        *STARTS,
        EXTEND,
        DRY_RUN,
    ),
}


# The plugin's named architectures, by the recipe that trains them, and what each recipe's model
# is. fairseq's ARCH_MODEL_REGISTRY holds them once fairseq is imported (seconds, with torch), so
# they are listed here, in pure Python; a test fails when the registry differs. The other
# recipe's model would fail only inside fairseq-train (unrecognized arguments), its run dir made.
ARCHITECTURES: Dict[str, Tuple[str, ...]] = {
    LOOP: ("transformer_san", "transformer_san_base", "transformer_san_small",
           "transformer_aan_base", "transformer_aan_small"),
    LM_LOOP: ("transformer_lm_san", "transformer_lm_san_small"),
}  # fmt: skip
MODEL_KIND = {LOOP: "a translation model", LM_LOOP: "a language model"}

TASKS = {LOOP: "translation_san", LM_LOOP: "language_modeling_san"}  # what each recipe trains
# fairseq-train's options that a recipe sets itself, with what it sets and how to change that.
# After --, where fairseq takes an option's last value, one would override the recipe's while its
# record says otherwise (loop.md naming the policy that was not the one trained).
POLICY_SET = ("each iteration's policy: P_0 shares nothing, then the learned one", "leave it out")
# The translation loop's language pair is its data's only one: fairseq-train took another from
# after --, and the iteration's validation BLEU, whose fairseq-generate reads none of it, failed.
PAIR_SET = ("the language pair, --data's only one, which every step reads from it",
            "give a --data folder of the pair to train")  # fmt: skip
LANGUAGE_PAIR_SET = {flag: PAIR_SET for flag in ("--source-lang", "-s", "--target-lang", "-t")}
SET_BY_THE_RECIPE: Dict[str, Dict[str, Tuple[str, str]]] = {
    recipe: {
        **{option.flag: POLICY_SET for option in (OPTIONS["san_policy"], *POLICY_OPTIONS.values())},
        # another plugin's folder: fairseq-train knew neither the task nor the model
        "--user-dir": ("the plugin, fairseq_san, which every step loads", "leave it out"),
        "--save-dir": ("each iteration's checkpoints, under --run-dir", "leave it out"),
        "--arch": ("the model, from its own --arch", "give --arch before --"),
        "-a": ("the model, from its own --arch", "give --arch before --"),  # fairseq's --arch
        "--max-update": ("each iteration's updates, from --updates (--warm-updates)",
                         "give --updates before --"),  # fmt: skip
        "--task": (f"{TASKS[recipe]}, which its analysis and scoring need", "leave it out"),
        **({SELF_SHARE.flag: ("from its own --self-share", "give --self-share before --")}
           if recipe == LM_LOOP else LANGUAGE_PAIR_SET),  # fmt: skip
    }
    for recipe in (LOOP, LM_LOOP)
}


# fairseq-train's options that the plugin refuses beside sharing the attention named
# (models/option_checks.py): the loop learns sharing, so its iteration 0 trained and iteration 1
# stopped. A LayerDrop of 0 drops nothing.
NO_SHARING_BESIDE = {
    "--encoder-layerdrop": "the encoder's attention",
    "--decoder-layerdrop": "the decoder's attention",
    "--encoder-layers-to-keep": "the encoder's attention",
    "--decoder-layers-to-keep": "the decoder's attention",
    "--checkpoint-activations": "any attention", "--offload-activations": "any attention",
    "--cross-self-attention": "decoder self-attention",
}  # fmt: skip


def recipe_defaults(recipe: str) -> Dict[str, str]:
    """``recipe``'s options that have a default, with it (as the run record holds values)."""
    return {option.flag: option.default for option in RECIPE_OPTIONS[recipe] if option.default}


def recorded_options() -> List[RecipeOption]:
    """The options that ``RUN/run.json`` records: the translation loop's, then the language
    model's own, in the recipes' order."""
    found: Dict[str, RecipeOption] = {}
    for recipe in (LOOP, LM_LOOP):
        for option in RECIPE_OPTIONS[recipe]:
            if option.recorded:
                found.setdefault(option.flag, option)
    return list(found.values())


class RecipeParser(argparse.ArgumentParser):
    """argparse with the recipe's name and one line for an error (exit 2), as the recipes had."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {message} ({self.prog} --help lists the options)", file=sys.stderr)
        sys.exit(2)


def recipe_parser(recipe: str) -> RecipeParser:
    parser = RecipeParser(
        prog=recipe, allow_abbrev=False,
        usage=f"examples/{recipe} --data DATA --run-dir RUN [options] [-- fairseq-train args]",
        epilog="Everything after -- goes to fairseq-train and wins over the recipe's defaults.",
    )  # fmt: skip
    for option in RECIPE_OPTIONS[recipe]:
        if not option.metavar:
            parser.add_argument(option.flag, action="store_true", help=option.help)
        else:
            shown = f" ({option.default})" if option.default and option.default != "0" else ""
            # a required one is checked after the parse (check_required), unknown options first;
            # a path without one (--valid-ref) is None when not given, "" when given empty
            unset = option.flag in REQUIRED or (option.flag in PATHS and not option.default)
            default = None if unset else option.default
            parser.add_argument(
                option.flag, default=default, metavar=option.metavar, help=option.help + shown
            )
    return parser


def check_required(parser: RecipeParser, args: argparse.Namespace) -> None:
    """Refuse a required option left out or empty, once argparse has named any unknown option
    (``--bogus`` was left unnamed behind "the following arguments are required")."""
    missing = [flag for flag in REQUIRED if getattr(args, name_of(flag)) is None]
    if missing:
        parser.error(f"the following arguments are required: {', '.join(missing)}")
    for flag in REQUIRED:  # an empty one read as none: a traceback, or the run at "/"
        if getattr(args, name_of(flag)) == "":
            parser.error(f"{flag} is empty: name a folder")


def default_valid_ref(data: str) -> str:
    """DATA/text/valid.raw.TGT, TGT read from fairseq's binarized names (train.SRC-TGT.LANG.idx);
    DATA/text/valid.raw. when there are none (``start`` then names what is missing)."""
    pair = binarized_pair(data) or "-"
    return os.path.join(data, "text", f"valid.raw.{pair.split('-', 1)[1]}")


def split_at_dashes(argv: Sequence[str]) -> Tuple[List[str], List[str]]:
    """(the recipe's own arguments, fairseq-train's: those after the first ``--``)."""
    argv = list(argv)
    if "--" not in argv:
        return argv, []
    return argv[: argv.index("--")], argv[argv.index("--") + 1 :]


def default_of(recipe: str, flag: str) -> str:
    """The default of one of the recipe's options."""
    return next(option.default for option in RECIPE_OPTIONS[recipe] if option.flag == flag)


def refuse(recipe: str, message: str) -> NoReturn:
    """One line naming the problem and the fix, and exit 2 (argparse's status for a bad option)."""
    print(f"{recipe}: {message}", file=sys.stderr)
    sys.exit(2)


def check_architecture(recipe: str, arch: str) -> None:
    """Refuse the other recipe's model and any other that the recipe's own list
    (``ARCHITECTURES``) lacks: fairseq-train would refuse it after the run dir was made, with a
    hundred lines of usage and choices (and fairseq's own models take no sharing policy)."""
    for other, names in ARCHITECTURES.items():
        if other != recipe and arch in names:
            refuse(recipe, f"--arch {arch} is {MODEL_KIND[other]}: train it with "
                   f"examples/{other} ({recipe} trains {MODEL_KIND[recipe]}, e.g. "
                   f"--arch {default_of(recipe, '--arch')})")  # fmt: skip
    if arch not in ARCHITECTURES[recipe]:
        refuse(recipe, f"--arch {arch}: not one of the plugin's models that {recipe} trains; "
               + nearest_key_hint(arch, ARCHITECTURES[recipe]))  # fmt: skip


def check_unread(recipe: str, values: Dict[str, str]) -> None:
    """Refuse an option that another one leaves unread (the recipe would ignore it silently):
    --warm-updates without --warm-start, --launcher with --cpu-ranks N (N CPU processes win)."""
    if values.get("WARM_UPDATES") and values.get("WARM_START") == "0":
        refuse(recipe, f"--warm-updates {values['WARM_UPDATES']} without --warm-start: it sets "
               "a warm-started iteration's updates; add --warm-start, or drop --warm-updates "
               "(--updates sets each iteration's)")  # fmt: skip
    # --cpu-ranks 0, the default, is one process; a value that is no count is refused by
    # fairseq-san-loop start, naming it.
    if values.get("LAUNCHER") and is_count(1)(values.get("CPU_RANKS", "")):
        refuse(recipe, f"--launcher {shlex.quote(values['LAUNCHER'])} and --cpu-ranks "
               f"{values['CPU_RANKS']} both say how fairseq-train starts (--cpu-ranks would "
               "win, the launcher unused): give one")  # fmt: skip


# The recipe's options that bash computes with: decimal counts given to the shell ("010" is 10, as
# Python and the run record read it; bash read 8, and "08" was its error, the loop not run).
COUNTS = ("--updates", "--max-iterations", "--warm-updates", "--cpu-ranks", "--decode-batch-size",
          "--analysis-sentences")  # fmt: skip
# The recipe's paths, which the commands it runs take as arguments.
PATHS = ("--data", "--run-dir", "--valid-ref")


def check_no_leading_dash(recipe: str, args: argparse.Namespace) -> None:
    """Refuse a path that starts with '-': the commands the recipe runs read it as an option
    (fairseq-san-loop printed its usage, missing the run dir)."""
    for flag in PATHS:
        value = getattr(args, name_of(flag), "") or ""
        problem = read_as_an_option(value)
        if problem:
            refuse(recipe, f"{flag} {value} {problem}")


def check_not_emptied(recipe: str, args: argparse.Namespace) -> None:
    """Refuse an empty value for an option that has a default (``--theta-self ""``): the run
    record reads an empty value as unset, and the recipe failed later, after training (an empty
    theta) or inside fairseq-train, with the run dir made; and for a path (``--valid-ref
    "$REF"`` with REF unset scored against the default's references, silently)."""
    for option in RECIPE_OPTIONS[recipe]:
        defaulted = bool(option.metavar and option.default)
        if (defaulted or option.flag in PATHS) and getattr(args, option.variable.lower()) == "":
            default = f" ({option.default})" if defaulted else ""
            refuse(recipe, f"{option.flag} is empty: give {option.metavar}, or leave the option "
                   f"out for its default{default}")  # fmt: skip


def option_named(word: str) -> str:
    """The option a fairseq-train argument names: ``--flag=V`` as ``--flag``, and a short one
    with its value attached, ``-aV`` or ``-a=V``, as ``-a`` (argparse reads ``-aX`` as ``-a X``:
    ``-atransformer_aan_small`` trained another model than the record's, unrefused)."""
    if word.startswith("--") or not word.startswith("-"):
        return word.split("=", 1)[0]
    return word[:2]


def check_train_args(recipe: str, train_args: Sequence[str]) -> None:
    """Refuse, after --, a fairseq-train option that the recipe sets itself
    (``SET_BY_THE_RECIPE``): it would win over the recipe's, unrecorded."""
    for word in train_args:
        flag = option_named(word)
        if flag in SET_BY_THE_RECIPE[recipe]:
            what, fix = SET_BY_THE_RECIPE[recipe][flag]
            refuse(recipe, f"{flag} after --: the recipe sets it itself ({what}), and fairseq "
                   f"would take the value after -- instead, unrecorded: {fix}")  # fmt: skip


def check_sharing_allowed(
    recipe: str, train_args: Sequence[str], values: Dict[str, str]
) -> None:
    """Refuse, after --, an option that fairseq-train refuses beside sharing the attention that
    the loop learns to share (``NO_SHARING_BESIDE``): iteration 0 trained, then iteration 1
    stopped at its policy. A LayerDrop whose last value (fairseq's) is 0 drops nothing. The
    first refused in the command line's order is named."""
    for flag in dict.fromkeys(flags_apart(train_args)):
        shared = NO_SHARING_BESIDE.get(flag)
        if shared is None:
            continue
        if flag.startswith("--encoder-") and not values.get("THETA_ENCODER"):
            continue  # the loop shares the encoder's attention only with --theta-encoder
        if flag.endswith("-layerdrop") and is_zero(train_arg(train_args, flag, "")):
            continue
        refuse(recipe, f"{flag} after --: fairseq-train refuses it beside sharing {shared}, "
               "which the loop learns (iteration 0 would train, then iteration 1 stop at its "
               "policy): leave it out")  # fmt: skip


def check_warm_start_kept(
    recipe: str, train_args: Sequence[str], values: Dict[str, str]
) -> None:
    """Refuse ``--finetune-from-model`` after -- with --warm-start: each warm-started iteration
    fine-tunes the one before it, which the recipe gives fairseq-train, and fairseq took the
    value after -- instead: every iteration restarted from that model, its record saying
    otherwise."""
    given = any(word.split("=", 1)[0] == "--finetune-from-model" for word in train_args)
    if given and values.get("WARM_START") == "1":
        refuse(recipe, "--finetune-from-model after -- with --warm-start: each warm-started "
               "iteration fine-tunes the one before it (the recipe gives fairseq-train its "
               "model), and fairseq would take yours instead, unrecorded: "
               "give one of them")  # fmt: skip


def is_zero(value: str) -> bool:
    """Whether ``value`` is a number equal to 0."""
    try:
        return float(value) == 0
    except ValueError:
        return False


def parse_recipe_args(recipe: str, argv: Sequence[str]) -> Tuple[Dict[str, str], List[str]]:
    """({shell variable: value}, fairseq-train arguments) of a recipe's command line; one line
    and exit 2 for an unknown option, a missing one, a bad --decode-batch-size, the other
    recipe's --arch or an option that another leaves unread."""
    own, train_args = split_at_dashes(argv)
    parser = recipe_parser(recipe)
    args = parser.parse_args(own)
    check_required(parser, args)
    check_no_leading_dash(recipe, args)
    check_not_emptied(recipe, args)
    values = {}
    for option in RECIPE_OPTIONS[recipe]:
        value = getattr(args, name_of(option.flag))
        value = "" if value is None else value  # a path left out (--valid-ref): its default below
        values[option.variable] = str(int(value)) if isinstance(value, bool) else value
        if option.flag in COUNTS and is_count(0)(value):
            values[option.variable] = str(int(value))  # bash reads "010" as octal 8
    batch_size = values.get("DECODE_BATCH_SIZE")
    if batch_size is not None and not re.fullmatch(r"[1-9][0-9]*", batch_size):
        refuse(recipe, f"--decode-batch-size takes a positive integer, not '{batch_size}'")
    check_architecture(recipe, values["ARCH"])
    check_unread(recipe, values)
    check_train_args(recipe, train_args)
    check_sharing_allowed(recipe, train_args, values)
    check_warm_start_kept(recipe, train_args, values)
    check_theta_read(recipe, own, values, train_args)
    check_launcher_ranks(recipe, values, train_args)
    check_launcher_command(recipe, values)
    if "WARM_UPDATES" in values and not values["WARM_UPDATES"]:
        updates = values["UPDATES"].strip()
        # half of --updates, at least 1 (--updates 1 made it 0, refused as if the user gave it)
        values["WARM_UPDATES"] = str(max(1, int(updates) // 2)) if updates.isdigit() else updates
    if "VALID_REF" in values and not values["VALID_REF"]:
        values["VALID_REF"] = default_valid_ref(values["DATA"])
    return values, train_args


def launcher_words(recipe: str, values: Dict[str, str]) -> List[str]:
    """--launcher's words as a shell splits them, quotes kept ("torchrun --rdzv-conf 'a=b c'"):
    the recipe read them split at every space."""
    try:
        return shlex.split(values["LAUNCHER"])
    except ValueError as error:
        refuse(recipe, f"--launcher {values['LAUNCHER']}: {error}")


# torchrun as a module of python (``python -u -m torch.distributed.run``).
TORCHRUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")


def runs_torchrun(words: Sequence[str]) -> bool:
    """Whether the launcher is torchrun itself, or python running its module: its ranks start
    on this machine (``srun torchrun ...`` starts them on others)."""
    if not words:
        return False
    command = os.path.basename(words[0])
    if command == "torchrun":
        return True
    if not command.startswith("python") or "-m" not in words:
        return False
    at = words.index("-m") + 1
    return at < len(words) and words[at] in TORCHRUN_MODULES


def launched_ranks(words: Sequence[str]) -> Optional[str]:
    """The ``--nproc_per_node`` of a torchrun launcher (``runs_torchrun``), whose ranks start
    on this machine: its last one, either spelling (``--nproc-per-node``), as torchrun reads it
    (the launcher's last word: fairseq-train, which the recipe puts after it); None where it
    gives none (one rank), and for another launcher."""
    if not runs_torchrun(words):
        return None
    return train_arg([*words, "fairseq-train"], ("--nproc_per_node", "--nproc-per-node"), None)


# torchrun's words for --nproc_per_node (torch.distributed.run.determine_local_world_size) that
# count a kind of device here: each of its GPUs, each core of the process's affinity (os's count,
# as torchrun's), the GPUs where there are any, else the cores.
DEVICE_WORDS = ("gpu", "cpu", "auto")


def counted_ranks(value: str) -> int:
    """``--nproc_per_node VALUE`` as torchrun reads a number (``int``); 0 for another word."""
    try:
        return int(value)
    except ValueError:
        return 0


def ranks_started(value: str) -> int:
    """The ranks torchrun starts here for ``--nproc_per_node VALUE``, a number or one of
    ``DEVICE_WORDS``."""
    if value not in DEVICE_WORDS:
        return counted_ranks(value)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    gpus = cuda_devices() if value != "cpu" else 0
    return gpus if value == "gpu" else gpus or cores or 1


def cuda_devices() -> int:
    """The GPUs torch sees here (imported only when a launcher's ranks need counting)."""
    import torch

    return torch.cuda.device_count()


def check_launcher_ranks(recipe: str, values: Dict[str, str], train_args: Sequence[str]) -> None:
    """Refuse, before anything starts, a torchrun --launcher whose --nproc_per_node torchrun
    cannot start (no number, or under one rank: its traceback, after the run dir was made), and
    one that starts ranks on a machine without GPUs (fairseq-train refuses them, with --cpu too;
    ``cpu`` and ``auto`` count the cores there, ``gpu`` none), or more than it has GPUs with NCCL
    (fairseq's default backend): each rank was refused in one line, and torchrun then printed its
    own ChildFailedError traceback after them. A dry run is planned for another machine: its
    devices are not counted."""
    value = launched_ranks(launcher_words(recipe, values)) if values.get("LAUNCHER") else None
    if value is None:
        return
    launcher = f"--launcher {shlex.quote(values['LAUNCHER'])}"
    if value not in DEVICE_WORDS and counted_ranks(value) < 1:
        refuse(recipe, f"{launcher}: --nproc_per_node {value}: torchrun takes a number of ranks "
               f"of at least 1, or one of {', '.join(DEVICE_WORDS)}")  # fmt: skip
    if values.get("DRY_RUN") == "1":
        return
    ranks = ranks_started(value)
    if ranks < 1:  # gpu, and there is none
        refuse(recipe, f"{launcher}: --nproc_per_node {value} starts one rank per GPU, and this "
               "machine has no GPU; on CPUs, give --cpu-ranks N instead")  # fmt: skip
    if ranks < 2:
        return
    here = cuda_devices()
    if here == 0:
        refuse(recipe, f"{launcher} starts {ranks} ranks, and this machine has no GPU "
               "(fairseq-train puts each rank on one); on CPUs, give --cpu-ranks "
               f"{ranks} instead")  # fmt: skip
    nccl = train_arg(train_args, "--distributed-backend", "nccl") == "nccl"
    if ranks > here and nccl and "--cpu" not in train_args:
        refuse(recipe, f"{launcher} starts {nccl_ranks_problem(ranks, here)} (after --)")


def check_launcher_command(recipe: str, values: Dict[str, str]) -> None:
    """Refuse, before the run dir is made, a --launcher whose command is not found here: bash
    said "command not found" at the first training (exit 127), after run.json was written (a
    dry run is planned for another machine: not checked); fairseq-san-cpu-ranks as the
    launcher, for ``--cpu-ranks``, which gives it the iteration's folder for its ranks' logs;
    and torch.distributed.launch giving fairseq-train an option it has not
    (``passes_local_rank``)."""
    if not values.get("LAUNCHER"):
        return
    words = launcher_words(recipe, values)
    launcher = shlex.quote(values["LAUNCHER"])
    if words and os.path.basename(words[0]) == "fairseq-san-cpu-ranks":  # no --log-dir given it
        refuse(recipe, f"--launcher {launcher}: pass --cpu-ranks N instead (it writes each "
               "rank's log into the iteration's folder; this launcher would write them where "
               "the recipe was started)")  # fmt: skip
    if words and values.get("DRY_RUN") != "1" and shutil.which(words[0]) is None:
        refuse(recipe, f"--launcher {launcher}: command not found: {words[0]}")
    if passes_local_rank(words):
        refuse(recipe, f"--launcher {launcher}: torch.distributed.launch gives fairseq-train "
               "--local-rank, which it has not (it reads --local_rank): add --use-env, or use "
               "torchrun")  # fmt: skip


def passes_local_rank(words: Sequence[str]) -> bool:
    """Whether the launcher runs torch.distributed.launch without ``--use-env`` (either
    spelling), which gives each rank ``--local-rank=R``: every rank refused the option, then
    torchrun's ChildFailedError traceback (torchrun itself gives it nothing)."""
    if not runs_torchrun(words) or "torch.distributed.launch" not in words:
        return False
    return not {"--use-env", "--use_env"} & set(words)


def start_options(recipe: str, values: Dict[str, str]) -> List[str]:
    """The recorded options and ``START_SWITCHES`` as ``fairseq-san-loop start`` takes them (a
    switch only when set; ``--lm`` for a language model's loop)."""
    words = ["--lm"] if recipe == LM_LOOP else []
    for option in RECIPE_OPTIONS[recipe]:
        if not (option.recorded or option.flag in START_SWITCHES):
            continue
        value = values[option.variable]
        if not option.metavar:
            words += [option.flag] if value == "1" else []
        else:
            words.append(f"{option.flag}={value}")
    return words


def check_theta_read(
    recipe: str, own: Sequence[str], values: Dict[str, str], train_args: Sequence[str]
) -> None:
    """Refuse ``--theta-self`` for an AAN decoder, which has no self-attention weights to share:
    fairseq-san-policy ignored it, with a warning at every iteration."""
    given = any(word == "--theta-self" or word.startswith("--theta-self=") for word in own)
    if given and recipe == LOOP and has_aan_decoder(values["ARCH"], train_args):
        refuse(recipe, f"--theta-self {values['THETA_SELF']}: an AAN decoder (--arch "
               f"{values['ARCH']}) has no self-attention weights to share; "
               "leave it out")  # fmt: skip


def policy_thetas(values: Dict[str, str], train_args: Sequence[str]) -> List[str]:
    """fairseq-san-policy's thresholds for the translation loop (Eq. 6): decoder self-attention's
    but for an AAN decoder (it has no self-attention weights: the tool warned at every iteration
    that it ignored the threshold), encoder-decoder attention's, the encoder's where given."""
    aan = has_aan_decoder(values["ARCH"], train_args)
    thetas = [] if aan else ["--theta-decoder-self", values["THETA_SELF"]]
    thetas += ["--theta-decoder-encdec", values["THETA_ENCDEC"]]
    if values["THETA_ENCODER"]:
        thetas += ["--theta-encoder-self", values["THETA_ENCODER"]]
    return thetas


def analysis_args(values: Dict[str, str]) -> List[str]:
    """fairseq-validate's options that limit the analysis to ``--analysis-sentences`` (none: the
    whole validation set)."""
    limit = values["ANALYSIS_SENTENCES"]
    return ["--san-analysis-max-sentences", limit] if limit else []


def shell_assignments(recipe: str, argv: Sequence[str]) -> str:
    """What the recipe evals: its variables, START_OPTIONS and ``set --`` the train arguments;
    for ``--help``, the help and ``exit 0``."""
    own, _ = split_at_dashes(argv)
    if "--help" in own or "-h" in own:
        return f"printf '%s' {shlex.quote(recipe_parser(recipe).format_help())}\nexit 0\n"
    values, train_args = parse_recipe_args(recipe, argv)
    lines = [f"{name}={shlex.quote(value)}" for name, value in values.items()]
    lines.append(f"START_OPTIONS=({' '.join(map(shlex.quote, start_options(recipe, values)))})")
    lines.append(f"ANALYSIS_ARGS=({' '.join(map(shlex.quote, analysis_args(values)))})")
    if recipe == LOOP:
        thetas = policy_thetas(values, train_args)
        lines.append(f"POLICY_THETAS=({' '.join(map(shlex.quote, thetas))})")
    if "LAUNCHER" in values:
        words = launcher_words(recipe, values)
        lines.append(f"LAUNCHER_WORDS=({' '.join(map(shlex.quote, words))})")
    lines.append(f"set -- {' '.join(map(shlex.quote, train_args))}")
    return "\n".join(lines) + "\n"
