"""The record of a learn-to-share run: the options ``RUN_DIR/run.json`` says it was made with.

A run directory holds trained iterations, the policies they were trained with and the policies
learned from them. Resuming it with other options would mix two experiments in one record (a
policy learned with one theta next to a model trained under another), so ``start_run`` compares
the options of every re-run with the recorded ones and refuses any difference, before anything
runs, once training has written a checkpoint (before that, a re-run simply replaces the record:
a first attempt that failed at once can be corrected). ``--extend`` changes only what leaves the
finished iterations valid: ``--max-iterations``. The data and references are compared by content
(``CONTENT``), not by path: a run dir restored on another machine, its data elsewhere, resumes.
The inputs are checked here too, so that a missing one is found before training, not after it.

One loop runs in a run directory at a time: ``RUN/.lock`` is locked (``flock``) on a file
descriptor that the recipe opened and keeps, so the lock lasts as long as the recipe or any
command it started (fairseq-train, which inherits the descriptor) runs, also when the recipe
itself was killed. A second loop is refused before it writes anything.
"""

import array
import errno
import fcntl
import filecmp
import hashlib
import os
import re
import shlex
import sys
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

from fairseq_san.cores import available_cores
from fairseq_san.errors import UsageError
from fairseq_san.fairseq_fixes.tokens_per_sample import check_tokens_per_sample
from fairseq_san.files import glob_in, read_json_if_there, write_json
from fairseq_san.options import SELF_SHARE
from fairseq_san.policy import LN2, write_policy

RECORD = "run.json"
LOCK = ".lock"
TRAIN_ARGS = "fairseq-train arguments after --"
EXTENDABLE = ("--max-iterations",)
CONTENT = ("--data", "--valid-ref")  # paths: the same content anywhere is the same option

Options = Dict[str, object]


class RunError(Exception):
    """A run that must not start, with the one line that says why and what to do."""


def record_path(run_dir: str) -> str:
    return os.path.join(run_dir, RECORD)


Problem = Tuple[str, Optional[str]]  # (error, dry-run note): no note where a dry run refuses it


def input_problem(options: Options) -> Optional[Problem]:
    """(error, dry-run note) for a missing data directory, binarized data or references (a
    language model's run, ``--lm``, has no references: its loop scores perplexity); no note for
    a path of the wrong kind (a file for --data, a folder for --valid-ref), which preparing the
    data would not change: a dry run refuses it too."""
    data = options["--data"]
    problem = path_kind_problem(data, options.get("--valid-ref"))
    if problem is not None:
        return problem, None
    if not os.path.isdir(data):
        return f"no data directory {data} (--data)", f"no data directory {data}"
    if options.get("--lm"):
        return lm_input_problem(data, options.get(TRAIN_ARGS) or [])
    return translation_input_problem(options)


def path_kind_problem(data: str, reference: Optional[str]) -> Optional[str]:
    """Why ``data`` or ``reference`` is a path of the wrong kind: a file for --data, a data path
    holding ':', a folder for --valid-ref."""
    if os.path.exists(data) and not os.path.isdir(data):
        return f"--data {data} is no folder: give the folder of fairseq-preprocess output"
    if ":" in data:  # fairseq trains on DIR1:DIR2 in turn (sharded data)
        return (
            f"--data {data} holds ':', which fairseq reads between two data folders: choose a "
            "path without one"
        )
    if reference is not None and os.path.isdir(reference):
        return (
            f"--valid-ref {reference} is a folder: give the file of the valid split's raw "
            "target sentences (DATA/text/valid.raw.TGT)"
        )
    return None


def lm_input_problem(data: str, train_args: Sequence[str]) -> Optional[Problem]:
    """``input_problem`` of a language model's run: ``data``'s binarized text, its valid split,
    and a sample that holds its longest valid sentence (``train_args``: the arguments after --;
    the recipe checks its own with them: lm-task-args --data)."""
    binarized = ("dict.txt", "train.idx")
    if not all(os.path.isfile(os.path.join(data, name)) for name in binarized):
        translation = binarized_pair(data) is not None  # preparing it makes no LM data
        return (
            f"{data} holds no fairseq-preprocess --only-source output (dict.txt, train.idx): "
            "run examples/lm/prepare.sh first (--data)",
            None if translation else f"no binarized data in {data}",
        )
    missing = no_valid_split(data, ("valid.idx",))
    if missing is not None:
        return missing
    problem = longest_sentence_problem(data, train_args)
    return None if problem is None else (problem, None)  # a dry run refuses it too


def translation_input_problem(options: Options) -> Optional[Problem]:
    """``input_problem`` of a translation run: one binarized pair with its valid split, one
    dictionary, text that ``--post-process`` reads, valid sentences the model takes
    (``positions_problem``) and the valid split's references."""
    data = options["--data"]
    pairs = binarized_pairs(data)
    if not pairs:
        language_model = os.path.isfile(os.path.join(data, "dict.txt"))  # preparing makes none
        return (
            f"{data} holds no fairseq-preprocess output (train.SRC-TGT.LANG.idx): run "
            "examples/multi30k/prepare.sh or fairseq-preprocess first (--data)"
            + (" (it holds a language model's data: examples/learn_to_share_lm.sh trains on it)"
               if language_model else ""),
            None if language_model else f"no binarized data in {data}",
        )  # fmt: skip
    if len(pairs) > 1:  # fairseq takes one in the folder's listing order, the recipe another
        return (
            f"{data} holds the binarized pairs {', '.join(pairs)}, and fairseq-train would take "
            "one of them by the folder's listing order: give a folder with one pair",
            None,
        )
    pair = pairs[0]
    if len(pair.split("-")) != 2:  # fairseq-train: "Could not infer language pair"
        return (
            f"{data} holds the binarized pair {pair}, which fairseq cannot read as SRC-TGT: a "
            "language code holds '-'; binarize with codes without one (pt_BR, not pt-BR)",
            None,
        )
    problem = no_valid_split(data, tuple(f"valid.{pair}.{language}.idx"
                                         for language in pair.split("-")))  # fmt: skip
    if problem is not None:
        return problem
    differing = differing_dictionaries(data, pair)
    if differing:
        return (
            f"{data}: {' and '.join(differing)} differ, and the recipe ties the source and target "
            "embeddings (--share-all-embeddings): binarize with fairseq-preprocess "
            "--joined-dictionary (examples/multi30k/prepare.sh does)",
            f"separate dictionaries in {data}",
        )
    dictionary = os.path.join(data, f"dict.{pair.split('-', 1)[1]}.txt")
    piece = subword_nmt_piece(dictionary)
    if piece is not None and (options.get("--post-process") or "sentencepiece") == "sentencepiece":
        return (
            f"{dictionary} holds subword-nmt pieces ('{piece}'), and --post-process "
            "sentencepiece (the default) deletes every space of such text: the validation "
            "translations' BLEU would be near 0; pass --post-process subword_nmt",
            None,
        )
    problem = positions_problem(data, pair, options.get(TRAIN_ARGS) or [])
    if problem is not None:
        return problem, None  # a dry run refuses it too
    return valid_ref_problem(data, pair, options.get("--valid-ref"))


def valid_ref_problem(data: str, pair: str, reference: Optional[str]) -> Optional[Problem]:
    """``input_problem`` of a translation run's ``--valid-ref``: given, a file, and the target
    side of ``data``'s valid split of language ``pair`` (``reference_problem``)."""
    if reference is None:  # the recipes pass their default: fairseq-san-loop start by hand
        return (
            "no --valid-ref: a translation run scores its validation BLEU against the raw target "
            "side of the valid split (examples/multi30k/prepare.sh writes DATA/text/valid.raw.TGT)",
            "no validation references (--valid-ref)",
        )
    if not os.path.isfile(reference):
        return (
            f"no validation references {reference}: run examples/multi30k/prepare.sh, or pass "
            "--valid-ref FILE (the raw target side of the valid split)",
            f"no validation references {reference}",
        )
    problem = reference_problem(data, pair, reference)
    return None if problem is None else (problem, problem)


# fairseq's binarized index (``MMapIndexedDataset.Index``): its magic, then a version (8 bytes)
# and a dtype code (1 byte) before the number of sentences (8 bytes, little-endian), then each
# sentence's size (int32, its end of sentence counted).
INDEX_MAGIC = b"MMIDIDX\x00\x00"
INDEX_COUNT_AT = len(INDEX_MAGIC) + 8 + 1
INDEX_SIZES_AT = INDEX_COUNT_AT + 8


def index_sizes(path: str) -> Optional[List[int]]:
    """Each sentence's size in tokens (its end counted) from fairseq's mmap index ``path``; None
    where there is no index in that format to read them from."""
    try:
        with open(path, "rb") as index:
            header = index.read(INDEX_SIZES_AT)
            if not header.startswith(INDEX_MAGIC) or len(header) < INDEX_SIZES_AT:
                return None
            count = int.from_bytes(header[INDEX_COUNT_AT : INDEX_COUNT_AT + 8], "little")
            sizes = array.array("i", index.read(4 * count))
    except (OSError, ValueError):  # ValueError: fewer bytes than the count says
        return None
    return sizes.tolist() if len(sizes) == count else None


def split_size(data: str, pair: str, split: str = "valid") -> Optional[int]:
    """The number of sentences of ``split``'s target side in ``data``, from its index; None where
    there is no index in fairseq's mmap format to read it from."""
    target = pair.split("-", 1)[1]
    sizes = index_sizes(os.path.join(data, f"{split}.{pair}.{target}.idx"))
    return None if sizes is None else len(sizes)


# fairseq's --sample-break-mode values that keep a sentence whole: one longer than
# --tokens-per-sample is a sample of its own.
WHOLE_SENTENCES = ("eos", "complete", "complete_doc")


def longest_sentence_problem(data: str, train_args: Sequence[str]) -> Optional[str]:
    """Why fairseq-train would stop at a language model's longest valid sentence: longer (its
    end counted) than the ``--tokens-per-sample`` of ``train_args`` (the recipe's, then those
    after --: the last wins), whole sentences kept (``WHOLE_SENTENCES``; the recipe's ``eos``),
    and not cut to it (``valid_shortened``). fairseq-train said so after the run dir was made,
    naming --skip-invalid-size-inputs-valid-test, which the loop refuses. Other modes train on
    blocks, but the analysis reads whole sentences (``analysed_sentence_problem``). The model's
    positions are checked first (``sentence_positions_problem``), so that no advice given here
    leads to that refusal."""
    given = train_arg(train_args, "--tokens-per-sample", "")
    mode = train_arg(train_args, "--sample-break-mode", "eos")
    sizes = None if valid_shortened(train_args) else index_sizes(os.path.join(data, "valid.idx"))
    if not sizes:
        return None
    problem = sentence_positions_problem(data, max(sizes), train_args)
    if problem is not None or not given.isdigit() or max(sizes) <= int(given):
        return problem
    if mode not in WHOLE_SENTENCES:
        return analysed_sentence_problem(data, max(sizes), given, mode, train_args)
    return (
        f"--tokens-per-sample {given}: the longest valid sentence of {data} has {max(sizes)} "
        "tokens with its end, and fairseq-train stops at one longer than a sample "
        f"(--sample-break-mode {mode}; the loop analyses and scores every valid sentence): pass "
        f"--tokens-per-sample {max(sizes)} or more after --"
    )


def sentence_positions_problem(
    data: str, longest: int, train_args: Sequence[str]
) -> Optional[str]:
    """Why a language model of ``train_args``' ``--max-target-positions`` cannot read ``data``'s
    longest valid sentence, ``longest`` tokens with its end (and ``--add-bos-token``'s start
    token before it), whatever its ``--tokens-per-sample``: the loop analyses and scores each
    valid sentence whole. Lowering --tokens-per-sample to the positions, as their own check
    advises, led here."""
    start = int("--add-bos-token" in train_args)
    positions = train_arg(train_args, "--max-target-positions", "")
    if not positions.isdigit() or longest + start <= int(positions):
        return None
    with_start = " and the start token of --add-bos-token" * start
    return (
        f"--max-target-positions {positions}: the longest valid sentence of {data} has {longest} "
        f"tokens with its end{with_start}, more than the model's positions hold (the loop "
        f"analyses and scores every valid sentence whole): pass --max-target-positions "
        f"{longest + start} or more after --, or leave it out (it then follows "
        "--tokens-per-sample)"
    )


def analysed_sentence_problem(
    data: str, longest: int, given: str, mode: str, train_args: Sequence[str]
) -> Optional[str]:
    """Why the loop's analysis would stop at ``data``'s longest valid sentence, ``longest`` tokens
    with its end, where ``--sample-break-mode`` ``mode`` trains on blocks: fairseq-validate reads
    each valid sentence whole (the recipe's ``eos``), and the model's positions do not hold it:
    ``--tokens-per-sample`` ``given`` where no ``--max-target-positions`` is given (those given
    ``sentence_positions_problem`` checks), ``--add-bos-token``'s start token before it. The loop
    stopped after training its iteration 0, telling to pass the ``--sample-break-mode none``
    that was given."""
    if train_arg(train_args, "--max-target-positions", "").isdigit():
        return None  # sentence_positions_problem found that they hold it
    start = int("--add-bos-token" in train_args)
    return (
        f"--tokens-per-sample {given}: the longest valid sentence of {data} has {longest} tokens "
        f"with its end, more than the model's positions hold (--sample-break-mode {mode} trains "
        "on blocks, but the loop analyses each valid sentence whole, with --sample-break-mode "
        f"eos): pass --tokens-per-sample {longest} or more after --, or --max-target-positions "
        f"{longest + start} or more"
    )


def sample_positions_problem(train_args: Sequence[str]) -> Optional[str]:
    """Why a language model's task would refuse ``train_args``' ``--tokens-per-sample`` (the
    recipe's, then those after --: the last wins) where they give ``--max-target-positions``:
    a sample longer than the model's positions (``check_tokens_per_sample``), refused once the
    run dir was made."""
    tokens = train_arg(train_args, "--tokens-per-sample", "")
    positions = train_arg(train_args, "--max-target-positions", "")
    if not tokens.isdigit() or not positions.isdigit():
        return None
    try:
        check_tokens_per_sample(int(tokens), int(positions), int("--add-bos-token" in train_args))
    except UsageError as error:
        return str(error)
    return None


# A translation model's limits on a sentence's length (fairseq-train's flags), by the side of a
# language pair they limit (0: the source, 1: the target).
POSITION_FLAGS = {"--max-source-positions": 0, "--max-target-positions": 1}


def positions_problem(data: str, pair: str, train_args: Sequence[str]) -> Optional[str]:
    """Why fairseq-train would stop at ``data``'s longest valid sentence of a side of ``pair``:
    longer (its end counted) than the ``--max-source-positions`` or ``--max-target-positions`` of
    ``train_args`` (the arguments after --; the last wins). fairseq-train said so at its first
    validation, after the run dir was made, naming --skip-invalid-size-inputs-valid-test, which
    the loop refuses (and fairseq-generate, which scores the valid split, cuts no source to
    ``--truncate-source``)."""
    for flag, side in POSITION_FLAGS.items():
        given = train_arg(train_args, flag, "")
        if not given.isdigit():
            continue
        language = pair.split("-", 1)[side]
        sizes = index_sizes(os.path.join(data, f"valid.{pair}.{language}.idx"))
        if sizes and max(sizes) > int(given):
            return (
                f"{flag} {given}: the longest valid sentence of {data} ({language}) has "
                f"{max(sizes)} tokens with its end, and fairseq-train stops at one longer than "
                "the model takes (the loop analyses and scores every valid sentence): pass "
                f"{flag} {max(sizes)} or more after --"
            )
    return None


def valid_shortened(train_args: Sequence[str]) -> bool:
    """Whether ``train_args``' ``--shorten-method`` cuts the valid split's sentences to
    ``--tokens-per-sample`` (``--shorten-data-split-list``: empty for every split)."""
    if train_arg(train_args, "--shorten-method", "none") == "none":
        return False
    splits = train_arg(train_args, "--shorten-data-split-list", "")
    return not splits or "valid" in splits.split(",")


def line_count(path: str) -> int:
    with open(path, "rb") as text:
        return sum(1 for _ in text)


def reference_problem(data: str, pair: str, reference: str) -> Optional[str]:
    """Why ``reference`` cannot be the valid split's references: another number of lines than
    its sentences, or its source side. Found only after iteration 0 had trained, the run could
    not then take another --valid-ref."""
    size = split_size(data, pair)
    lines = line_count(reference)
    if size is not None and lines != size:
        return (
            f"--valid-ref {reference} has {lines} lines, the valid split of {data} {size} "
            "sentences: give the raw target side of the valid split"
        )
    source = os.path.join(data, "text", f"valid.raw.{pair.split('-', 1)[0]}")
    if os.path.isfile(source) and filecmp.cmp(source, reference, shallow=False):
        return (
            f"--valid-ref {reference} is the source side of the valid split ({source}): give "
            f"the target side, valid.raw.{pair.split('-', 1)[1]}"
        )
    return None


def binarized_pairs(data: str) -> List[str]:
    """The language pairs (``en-de``) of fairseq's binarized translation data in ``data``
    (``train.SRC-TGT.LANG.idx``), in name order."""
    names = glob_in(data, "train.*-*.*.idx")
    return sorted({os.path.basename(name).split(".")[1] for name in names})


def binarized_pair(data: str) -> Optional[str]:
    """The language pair of ``data``'s binarized translation data (the first in name order
    where there are several: ``input_problem`` refuses them), or None."""
    pairs = binarized_pairs(data)
    return pairs[0] if pairs else None


def no_valid_split(data: str, names: Tuple[str, ...]) -> Optional[Problem]:
    """(error, dry-run note) where ``data`` lacks one of the valid split's index files
    ``names``, or one holds no sentence: the loop's analysis and scores read it, and
    fairseq-train failed on its missing "valid" after the run dir was made (on an empty one,
    the translation loop said its references were the source side: both sides are empty)."""
    missing = [name for name in names if not os.path.isfile(os.path.join(data, name))]
    empty = [name for name in names if index_sizes(os.path.join(data, name)) == []]
    if not missing and not empty:
        return None
    said = f"{data} holds no valid split ({missing[0]})" if missing else (
        f"{data} holds an empty valid split ({empty[0]})"
    )  # fmt: skip
    return (
        f"{said}: the loop validates, analyses and scores on it; binarize one with "
        "fairseq-preprocess --validpref",
        None,
    )


def differing_dictionaries(data: str, pair: str) -> Optional[Tuple[str, str]]:
    """The dictionaries of language ``pair`` ("en-de") in ``data`` when they differ (data
    binarized without ``--joined-dictionary``), else None."""
    names = tuple(f"dict.{language}.txt" for language in pair.split("-"))
    paths = [os.path.join(data, name) for name in names]
    if not all(os.path.isfile(path) for path in paths):
        return None
    return None if filecmp.cmp(*paths, shallow=False) else names


# A subword-nmt piece: a word's part, its "@@" joining it to the next.
SUBWORD_NMT_PIECE = re.compile(r"\w@@$")


def subword_nmt_piece(dictionary: str) -> Optional[str]:
    """The first subword-nmt piece ("Ma@@") of the fairseq dictionary file ``dictionary``; None
    where it holds none, or is not there."""
    if not os.path.isfile(dictionary):
        return None
    with open(dictionary, encoding="utf-8", errors="replace") as lines:
        words = (line.split(maxsplit=1)[0] for line in lines if line.strip())
        return next((word for word in words if SUBWORD_NMT_PIECE.search(word)), None)


def is_theta(text: str) -> bool:
    """A sharing threshold: a number in [0, ln 2] (``fairseq-san-policy``'s range)."""
    try:
        return 0.0 <= float(text) <= LN2
    except ValueError:
        return False


def is_count(low: int) -> Callable[[str], bool]:
    """Whether a text is a whole number of at least ``low``."""
    return lambda text: re.fullmatch(r"\s*[0-9]+\s*", text) is not None and int(text) >= low


# fairseq-generate's --post-process values (fairseq.data.data_utils.post_process; a test reads
# fairseq's source and fails when it accepts one missing here). Checked here, in pure Python: an
# unknown one would fail only after iteration 0's training and analysis.
POST_PROCESS = ("sentencepiece", "wordpiece", "letter", "silence", "_EOW", "subword_nmt", "@@ ",
                "@@", "none")  # fmt: skip


# The recipe's thresholds, by the attention kind each learns (fairseq-san-policy's --theta-KIND).
THETA_OPTIONS = {
    "decoder_self": "--theta-self",
    "decoder_encdec": "--theta-encdec",
    "encoder_self": "--theta-encoder",
}
# The recipe's options that are numbers ("0.60" is the run's "0.6", "0100" its "100"), checked
# before anything runs: what each must be and how that is checked (an empty one is unset).
AT_LEAST_ONE = ("a whole number of at least 1", is_count(1))
NUMBERS = {
    **dict.fromkeys(THETA_OPTIONS.values(), ("a number in [0, ln 2 = 0.6931]", is_theta)),
    "--updates": AT_LEAST_ONE,
    "--max-iterations": AT_LEAST_ONE,
    "--warm-updates": AT_LEAST_ONE,
    "--cpu-ranks": ("a whole number (0: one process)", is_count(0)),
    "--analysis-sentences": AT_LEAST_ONE,
}
# Every option checked before anything runs: the numbers, and the options of a few words.
CHECKED = {
    **NUMBERS,
    "--self-share": ("weights (SAN) or kv (CLA)", SELF_SHARE.choices.__contains__),
    "--post-process": (
        "one that fairseq-generate knows (sentencepiece, subword_nmt, none, ...)",
        POST_PROCESS.__contains__,
    ),
}
# Options read only with another one (the recipe computes --warm-updates from --updates anyway).
READ_WITH = {"--warm-updates": "--warm-start"}
# fairseq-train's option to skip valid sentences longer than the model takes: the loop's
# analysis and scores read every valid sentence, and failed on those after training.
SKIP_INVALID_VALID = "--skip-invalid-size-inputs-valid-test"


def check_values(options: Options) -> None:
    """RunError naming the first checked option that is not what the recipe's help says."""
    for option, (what, fits) in CHECKED.items():
        value = options.get(option)
        if option in READ_WITH and not options.get(READ_WITH[option]):
            continue
        if value is not None and not fits(str(value)):
            raise RunError(f"{option} {value}: must be {what}")
    if SKIP_INVALID_VALID in (options.get(TRAIN_ARGS) or []):
        raise RunError(
            f"{SKIP_INVALID_VALID} (after --): the loop's attention analysis and scores read every "
            "valid sentence, and would fail on those training skipped; let the model take them "
            "(--tokens-per-sample for a language model, --max-source-positions and "
            "--max-target-positions for translation)"
        )
    check_cpu_ranks(options)


def check_cpu_ranks(options: Options) -> None:
    """RunError for what fairseq-san-cpu-ranks would refuse at the first training, after the run
    dir is made: more ranks than cores, and arguments after -- that its ranks cannot take."""
    from fairseq_san.cli.cpu_ranks import command_arguments_problem

    ranks, cores = int(options.get("--cpu-ranks") or 0), available_cores()
    if ranks > cores:
        raise RunError(f"--cpu-ranks {ranks}: more ranks than the {cores} CPU cores here")
    problem = ranks and command_arguments_problem(["fairseq-train", *options.get(TRAIN_ARGS, [])])
    if problem:
        raise RunError(f"--cpu-ranks {ranks} (fairseq-san-cpu-ranks): {problem}")


def check_run_dir(run_dir: str) -> None:
    """Refuse a run dir that exists and is not a directory, or under a file (mkdir and the lock
    would fail on it, naming neither the option nor the cause)."""
    if os.path.exists(run_dir) and not os.path.isdir(run_dir):
        raise RunError(f"{run_dir} is a file; --run-dir names a directory (made when missing)")
    parent = os.path.dirname(os.path.abspath(run_dir))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise RunError(
            f"--run-dir {run_dir}: {parent} is a file, so no directory can be made there"
        )


def check_no_path_separator(run_dir: str) -> None:
    """Refuse a translation run dir holding ':': the loop scores each iteration with
    fairseq-generate --path RUN/iterK/checkpoints/checkpoint_best.pt, which reads ':' between
    the checkpoints of an ensemble and failed after iteration 0 had trained, at every rerun."""
    if ":" in run_dir:
        raise RunError(
            f"--run-dir {run_dir} holds ':', which fairseq-generate reads between two checkpoints "
            "(an ensemble): choose a path without one"
        )


def check_no_file_links(run_dir: str) -> None:
    """RunError naming a symbolic link in ``run_dir`` to a file or to nothing: the loop writes its
    steps' files in place (policies, scores, logs), so through such a link (a run dir received
    from elsewhere) it wrote wherever the link pointed. A link to a folder (checkpoints on another
    disk) is followed; ``RUN/last`` is the loop's own."""
    own = os.path.join(run_dir, "last")
    for folder, folders, files in os.walk(run_dir):
        for name in files + folders:
            path = os.path.join(folder, name)
            if os.path.islink(path) and not os.path.isdir(path) and path != own:
                raise RunError(
                    f"{path} is a symbolic link to {os.readlink(path)}: the loop writes its run "
                    "dir's files in place, and would write there; replace it with the file"
                )


def check_inputs(options: Options, dry_run: bool) -> None:
    """The inputs exist; a dry run (a recipe read before its data exist) only notes it."""
    problem = input_problem(options)
    if problem is None:
        return
    error, note = problem
    if not dry_run or note is None:
        raise RunError(error)
    print(f"(dry run: {note} yet)", file=sys.stderr)


def shown(name: str, value: object) -> str:
    """An option as the recipe's command line spells it."""
    if value is None or value is False:
        return f"no {name}"
    if value is True:
        return name
    if isinstance(value, list):
        return f"{name}: {shlex.join(value) or '(none)'}"
    return f"{name} {value}"


def contrast(name: str, was: object, now: object) -> str:
    """``--theta-self 0, not 0.3``: the recorded value, then the new one; of the fairseq-train
    arguments, those that differ (``train_args_contrast``)."""
    if isinstance(was, str) and isinstance(now, str):
        return f"{name} {was}, not {now}"
    if name == TRAIN_ARGS and isinstance(was, list) and isinstance(now, list):
        return f"{name}: {train_args_contrast(was, now)}"
    return f"{shown(name, was)}, not {shown(name, now)}"


def train_args_contrast(was: Sequence[str], now: Sequence[str]) -> str:
    """``--dropout 0.3, not 0.1; no --seed, not --seed 2``: each fairseq-train flag whose words
    differ (its last given, as argparse reads it): both lists in full buried the one option that
    changed."""
    before, after = flag_values(was), flag_values(now)
    return "; ".join(
        f"{shown_flag(flag, before.get(flag))}, not {shown_flag(flag, after.get(flag))}"
        for flag in dict.fromkeys([*before, *after])
        if before.get(flag) != after.get(flag)
    )


# fairseq-train's options with a second long spelling (its dataclasses' argparse_alias), by that
# spelling: both set one option, whose last value wins, so "--batch-size 8 --max-sentences 16"
# and the same flags in another order were one run, trained with a batch of 16 and of 8.
TRAIN_ALIASES = {
    "--max-sentences": "--batch-size",
    "--max-sentences-valid": "--batch-size-valid",
    "--combine-val": "--combine-valid-subsets",
    "--nval": "--max-valid-steps",
    "--save-async": "--write-checkpoints-asynchronously",
    "--local_rank": "--device-id",
}


def flag_values(words: Sequence[str]) -> Dict[str, List[str]]:
    """{flag: the words after its last occurrence, up to the next flag} of fairseq-train's
    arguments (``--flag=V`` as ``--flag V``, an alias as its option: ``TRAIN_ALIASES``); words
    before any flag under ""."""
    values: Dict[str, List[str]] = {}
    flag = ""
    for word in flags_apart(words):
        if word.startswith("--"):
            flag = TRAIN_ALIASES.get(word, word)
            values[flag] = []
        else:
            values.setdefault(flag, []).append(word)
    return values


def shown_flag(flag: str, words: Optional[List[str]]) -> str:
    """A fairseq-train flag as given (``--seed 2``, ``--cpu``; an alias by its option's name,
    ``--batch-size`` for ``--max-sentences``: ``TRAIN_ALIASES``), or ``no --seed``."""
    if words is None:
        return f"no {flag}"
    return shlex.join([flag, *words]) if flag else shlex.join(words)


def digest(path: str) -> str:
    """sha256 of a file's bytes (references under another name are the same references), or of
    a data directory's dictionaries (a translation's ``dict.LANG.txt``, a language model's
    ``dict.txt``), index files and sentences (names and bytes: the vocabulary, every sentence's
    length and its tokens), what identifies binarized data wherever it is."""
    if os.path.isfile(path):
        return file_sha256(path)
    files = data_files(path) + sentence_files(path)
    if not files:  # the digest of nothing would match any other missing data
        raise FileNotFoundError(f"{path}: no such file, nor a data directory (dict*.txt)")
    return files_sha256(files)


def data_files(data: str) -> List[str]:
    """A data directory's ``dict.txt``, ``dict.LANG.txt`` and index files, in name order."""
    return sorted(glob_in(data, "dict.txt")) + translation_data_files(data)


def translation_data_files(data: str) -> List[str]:
    """A data directory's ``dict.LANG.txt`` and index files, in name order."""
    return sorted(glob_in(data, "dict.*.txt")) + sorted(glob_in(data, "*.idx"))


def sentence_files(data: str) -> List[str]:
    """A data directory's binarized sentences (``*.bin``), in name order."""
    return sorted(glob_in(data, "*.bin"))


def recorded_digests(path: str) -> Tuple[str, ...]:
    """The digests of ``path`` that a record may hold: ``digest``'s, and those of records made
    before it counted the sentences (2026-12-01) and, for a language model's data, ``dict.txt``
    (2026-11-30), or, for a file, before its name was left out (2026-12-04), which resume (and
    are recorded anew: ``start_run``)."""
    if os.path.isfile(path):
        return (digest(path), files_sha256([path]))
    older = [files_sha256(data_files(path))]
    if os.path.isfile(os.path.join(path, "dict.txt")):
        older.append(files_sha256(translation_data_files(path)))
    return (digest(path), *older)


def files_sha256(files: List[str]) -> str:
    """sha256 of ``files``' names and bytes, in the order given."""
    sha = hashlib.sha256()
    for name in files:
        sha.update(os.path.basename(name).encode() + b"\0")
        hash_bytes(sha, name)
    return sha.hexdigest()


def hash_bytes(sha, path: str) -> None:
    """Feed a file's bytes to ``sha``, 1 MiB at a time (``hashlib.file_digest`` needs Python
    3.11; the plugin installs on older ones). A pipe, device or socket is an OSError naming it:
    a pipe (a checkpoint given as one, a data folder's ``.bin``) was read until killed."""
    if os.path.exists(path) and not os.path.isfile(path) and not os.path.isdir(path):
        raise OSError(errno.EINVAL, "a pipe, device or socket, not a regular file", path)
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            sha.update(chunk)


def file_sha256(path: str) -> str:
    """sha256 of a file's bytes."""
    sha = hashlib.sha256()
    hash_bytes(sha, path)
    return sha.hexdigest()


def digests(options: Options) -> Dict[str, str]:
    return {name: digest(options[name]) for name in CONTENT if options.get(name)}


def differences(
    recorded: Options, options: Options, content: Dict[str, str], defaults: Options
) -> List[str]:
    """The options that differ; a ``CONTENT`` path where its content does (wherever it is: data
    binarized again in the same folder differs), and an option the record lacks or holds as None
    (written before the recipe had it: a recipe records every option it has) only where it is
    not at its default now (``defaults``)."""
    return [
        name for name in options if differs(name, recorded, options, content, defaults)
    ]  # fmt: skip


def differs(
    name: str, recorded: Options, options: Options, content: Dict[str, str], defaults: Options
) -> bool:
    """Whether option ``name`` differs from its record (see ``differences``)."""
    now = options[name]
    if now is None and recorded.get(name) is None:
        return False  # not given, then and now (``start`` run by hand leaves options out)
    switch = READ_WITH.get(name)
    if switch and not options.get(switch) and not recorded.get(switch):
        return False  # unread then and now (a record made before the recipe had it holds None)
    if content.get(name) and now:
        return content[name] not in recorded_digests(now)
    if recorded.get(name) is None and name in defaults:
        return not same_value(name, now, defaults[name])
    return not same_value(name, recorded.get(name), now)


def same_value(name: str, was: object, now: object) -> bool:
    """Whether two values of option ``name`` are the same: as numbers for ``NUMBERS``, as
    fairseq-train reads them for ``TRAIN_ARGS`` (each flag's last value, in any order: a rerun
    that gave the same flags in another order was refused as another run)."""
    if name in NUMBERS and isinstance(was, str) and isinstance(now, str):
        try:
            return float(was) == float(now)
        except ValueError:
            pass
    if name == TRAIN_ARGS and isinstance(was, list) and isinstance(now, list):
        return flag_values(was) == flag_values(now)
    return was == now


def flags_apart(words: Sequence[str]) -> List[str]:
    """fairseq-train's arguments with ``--flag=V`` spelt ``--flag V``, as its parser reads both:
    a rerun that spelt one the other way was refused as another run."""
    apart = []
    for word in words:
        flag, equals, value = word.partition("=")
        apart += [flag, value] if word.startswith("--") and equals else [word]
    return apart


def train_arg(
    words: Sequence[str], flag: Union[str, Tuple[str, ...]], default: Optional[str]
) -> Optional[str]:
    """The value of ``flag`` (or of any of a tuple of one option's spellings) among ``words``
    (``--flag V`` or ``--flag=V``; the last given, as argparse reads it), else ``default``."""
    spellings = (flag,) if isinstance(flag, str) else flag
    apart = flags_apart(words)
    given = [apart[at + 1] for at, word in enumerate(apart[:-1]) if word in spellings]
    return given[-1] if given else default


def compare(
    run_dir: str,
    recorded: Options,
    options: Options,
    content: Dict[str, str],
    extend: bool,
    defaults: Options,
) -> List[str]:
    """The options that change (only ``EXTENDABLE`` ones, with ``extend``); else RunError."""
    check_same_recipe(run_dir, recorded, options)
    changed = differences(recorded, options, content, defaults)
    if not changed:
        return []
    fixed = [name for name in changed if name not in EXTENDABLE]
    if not fixed:  # below the iterations trained, --extend would refuse it too: not advised
        check_not_below_trained(run_dir, options)
        if extend:
            return changed
    refused = fixed if extend else changed
    what = "; ".join(
        f"{name} {options[name]} as it was then (its content has changed since)"
        if recorded.get(name) == options[name]
        else contrast(name, recorded.get(name), options[name])
        for name in refused
    )
    advice = "start a new run with another --run-dir"
    if extend:
        advice += f" (--extend changes only {', '.join(EXTENDABLE)})"
    elif not fixed:
        advice = f"pass --extend to change {', '.join(changed)}, or {advice}"
    raise RunError(f"{run_dir} was made with {what} ({record_path(run_dir)}): {advice}")


def check_same_recipe(run_dir: str, recorded: Options, options: Options) -> None:
    """RunError for a run dir of the other recipe: its every option differed, listed one by one,
    and a translation run was never said to be one."""
    was_lm, is_lm = bool(recorded.get("--lm")), bool(options.get("--lm"))
    if was_lm != is_lm:
        made = "a language model's run (learn_to_share_lm.sh)" if was_lm else (
            "a translation run (learn_to_share.sh)")
        raise RunError(f"{run_dir} is {made} ({record_path(run_dir)}): resume it with that "
                       "recipe, or start a new run with another --run-dir")  # fmt: skip


# An iteration's folder, RUN_DIR/iter<k>.
ITERATION_DIR = re.compile(r"iter(\d+)$")


def check_not_below_trained(run_dir: str, options: Options) -> None:
    """RunError for a --max-iterations below the iterations ``run_dir`` has trained or begun to
    train (a checkpoint written, no ``trained`` mark: a run stopped inside a training): the loop
    would stop before them, its summary and ``RUN/last`` no longer the run's."""
    trained = len(glob_in(run_dir, "iter*", "trained"))
    begun = iterations_begun(run_dir)
    wanted = int(str(options["--max-iterations"]))
    if wanted < max(trained, begun):
        unfinished = ""
        if begun > trained:
            unfinished = f" and begun iteration {begun - 1} (its checkpoints)"
        raise RunError(
            f"--max-iterations {wanted}: {run_dir} has trained {trained} iterations already"
            f"{unfinished}; --extend raises the limit (start a new run with another --run-dir "
            "for fewer)"
        )


def iterations_begun(run_dir: str) -> int:
    """How many iterations have written a checkpoint: the newest such iteration, plus one."""
    checkpoints = glob_in(run_dir, "iter*", "checkpoints", "*.pt")
    folders = {os.path.dirname(os.path.dirname(path)) for path in checkpoints}
    numbers = [int(match.group(1)) for match in map(ITERATION_DIR.search, folders) if match]
    return max(numbers, default=-1) + 1


def read_record(run_dir: str) -> Optional[Tuple[Options, Dict[str, str]]]:
    """The recorded options and the content digests of their paths (none in older records)."""
    path = record_path(run_dir)
    fix = "restore it, or start a new run with another --run-dir"
    record = read_json_if_there(path, "run record", RunError, fix)
    if record is None:
        return None
    options, content = record.get("options"), record.get("content", {})
    if not isinstance(options, dict) or not isinstance(content, dict):
        raise RunError(f"{path} is not a run record (its options or content are no objects): {fix}")
    return options, content


def recorded_thetas(options: Options) -> Dict[str, Optional[float]]:
    """The thresholds the loop learns each kind's policy with; None (unset) is not shared. A
    recorded value that is no threshold (a record edited by hand) is a RunError."""
    for option in THETA_OPTIONS.values():
        value = options.get(option)
        if value and not is_theta(str(value)):
            raise RunError(f"{RECORD} records {option} {value!r}, which is no threshold: a record "
                           "the recipe did not write; delete it and rerun the recipe")  # fmt: skip
    return {
        kind: float(options[option]) if options.get(option) else None
        for kind, option in THETA_OPTIONS.items()
    }


def write_record(
    run_dir: str, options: Options, content: Optional[Dict[str, str]] = None
) -> None:
    """Write run.json, with ``content`` (``digests(options)``, computed here where not given),
    through a temporary file: a stopped write leaves the old record."""
    record = {"options": options, "content": digests(options) if content is None else content}
    write_json(record_path(run_dir), record, replace_link=True)


def started(run_dir: str) -> bool:
    """Whether training has written anything: until then a re-run may change every option."""
    return bool(glob_in(run_dir, "iter*", "trained")
                + glob_in(run_dir, "iter*", "checkpoints", "*.pt"))  # fmt: skip


def lock_run(run_dir: str, fd: int) -> None:
    """Lock ``RUN/.lock``, open on ``fd``, for as long as any process keeps ``fd`` open (a flock
    belongs to the open file, which the recipe's commands inherit); RunError if it is locked."""
    path = os.path.join(run_dir, LOCK)
    try:
        opened = os.fstat(fd)
    except OSError:  # "[Errno 9] Bad file descriptor"
        raise RunError(f"--lock-fd {fd}: no file is open on it; the recipes open {path} on "
                       f"it first (exec {fd}>>{path})") from None  # fmt: skip
    if not os.path.exists(path) or not os.path.samestat(opened, os.stat(path)):
        raise RunError(f"file descriptor {fd} is not open on {path}")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise RunError(
            f"{run_dir} is in use by another learn-to-share loop or a command it started that "
            f"still runs, e.g. fairseq-train ({path} is locked; `fuser -v {path}` shows them): "
            "wait for it to end or stop it; two loops would train into the same checkpoints"
        ) from None


def start_run(
    run_dir: str,
    options: Options,
    extend: bool = False,
    dry_run: bool = False,
    lock_fd: Optional[int] = None,
    defaults: Optional[Options] = None,
) -> None:
    """Check the inputs; lock ``run_dir`` on ``lock_fd`` (see ``lock_run``); check its record
    (``defaults``: the recipe's options' defaults, for a record made before it had one);
    record the options and P_0 (not in a dry run). Raises RunError, with the line to print,
    where the run must not go on."""
    check_values(options)
    check_inputs(options, dry_run)
    if lock_fd is not None:
        lock_run(run_dir, lock_fd)
    check_no_file_links(run_dir)
    recorded, content = read_record(run_dir) or (None, {})
    if recorded is not None and started(run_dir):
        changed = compare(run_dir, recorded, options, content, extend, defaults or {})
        if changed and not dry_run:
            print(f"fairseq-san-loop: extending {run_dir}: "
                  f"{' '.join(shown(name, options[name]) for name in changed)}",
                  file=sys.stderr)  # fmt: skip
    elif recorded is None and started(run_dir):
        doing = "a real run records these" if dry_run else "recording these"
        print(f"fairseq-san-loop: {run_dir} has no {RECORD} (made before runs recorded their "
              f"options): {doing}", file=sys.stderr)  # fmt: skip
    if dry_run:
        return
    first = os.path.join(run_dir, "iter0", "policy.json")
    os.makedirs(os.path.dirname(first), exist_ok=True)
    if not os.path.exists(first):
        write_policy({}, first)  # P_0: nothing shared
    current = digests(options)  # an older record's digest is recorded anew
    if recorded != options or content != current:
        write_record(run_dir, options, current)
