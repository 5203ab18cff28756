"""The systems ``examples/multi30k/test_bleu.sh`` scores, checked before it decodes any
(``fairseq-san-loop test-systems``).

A system is ``NAME=CHECKPOINT[:OVERRIDES]``, read as the benchmark reads one
(``benchmark.config.split_system``): OVERRIDES start at the first ``:{`` (or ``: {``). A
checkpoint's path holding ``:`` is refused: fairseq-generate reads it between the checkpoints of
an ensemble.
OVERRIDES are fairseq's ``--model-overrides``, a Python literal, passed on as given.
NAME is the folder of OUT_DIR whose splits are replaced, so it is a folder name: ``..`` would
replace OUT_DIR/../test.

Each refusal is one line named after the recipe, with its exit status: 2 for bad usage, 1 for a
file that is not there.
"""

import glob
import os
import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

from fairseq_san.benchmark.config import split_system
from fairseq_san.errors import RecipeError, UsageError
from fairseq_san.files import glob_in, read_as_an_option
from fairseq_san.loop.decode_key import binarized
from fairseq_san.loop.run_record import subword_nmt_piece
from fairseq_san.options import DECODER_OPTIONS, DECODING, MODEL_DECODINGS, current_flag

RECIPE = "test_bleu.sh"  # whose questions these are: its refusals are named after it
USAGE, MISSING = 2, 1  # exit statuses
SPLITS = ("test", "test1")  # what test_bleu.sh decodes, where DATA has their references
NO_OVERRIDES = "{}"


class SystemsError(RecipeError):
    """What stops test_bleu.sh before it decodes anything: the line that says why, and the exit
    status (``USAGE`` or ``MISSING``)."""

    def __init__(self, message: str, status: int):
        super().__init__(RECIPE, message, status)


@dataclass(frozen=True)
class System:
    """One system to score: the folder of its splits, its checkpoint, its overrides."""

    name: str
    checkpoint: str
    overrides: str = NO_OVERRIDES  # fairseq's --model-overrides, a Python literal dict

    def line(self, split: str, reference: str) -> str:
        """``NAME<tab>SPLIT<tab>REFERENCE<tab>CHECKPOINT<tab>OVERRIDES``, what the recipe reads
        to score ``split`` against ``reference``."""
        return "\t".join((self.name, split, reference, self.checkpoint, self.overrides))


def check_data(data: str, target: str) -> Dict[str, str]:
    """DATA is prepare.sh's output (sentencepiece pieces: test_bleu.sh detokenizes them) and
    translates into ``target``: else German would be scored against English references
    (En->De data has both). Its dictionaries' files by side
    (``dictionary_sizes`` reads them)."""
    for name, given in (("DATA", data), ("TGT", target)):  # "no data directory " named neither
        if not given:
            raise SystemsError(f"{name} is empty (an unset variable?): name one", USAGE)
    if ":" in data:  # fairseq-generate would read the directory before it
        raise SystemsError(
            f"DATA {data} holds ':', which fairseq reads between two data directories: give a "
            "path without one (a link to it)", USAGE,
        )  # fmt: skip
    if any(separator in data for separator in "\t\n\r"):  # test-systems' lines hold its path
        raise SystemsError(
            f"DATA {data!r} holds a tab or line break: give a path without one (a link to it)",
            USAGE,
        )
    if not os.path.isdir(data):
        raise SystemsError(f"no data directory {data}", MISSING)
    reference = f"{data}/text/test.raw.{target}"
    if not os.path.isfile(reference):
        raise SystemsError(f"no {reference} (run prepare.sh)", MISSING)
    lang = glob.escape(target)
    found = glob_in(data, f"test.*-{lang}.{lang}.idx")
    if not found:
        raise SystemsError(
            f"{data} does not translate into '{target}' (no test.SRC-{target}.{target}.idx): "
            "TGT is the target language of the pair",
            MISSING,
        )
    source = os.path.basename(found[0]).split(".")[1].split("-")[0]
    dictionaries = {side: os.path.join(data, f"dict.{language}.txt")
                    for side, language in (("source", source), ("target", target))}  # fmt: skip
    check_sentencepiece_pieces(dictionaries["target"])
    return dictionaries


def scored_splits(data: str, target: str) -> Dict[str, str]:
    """The splits test_bleu.sh scores (``SPLITS``, those with references), each with its
    references, each checked to be binarized on the target side: a missing test1 failed after
    the systems before had been decoded."""
    splits = {}
    for split in SPLITS:
        reference = f"{data}/text/{split}.raw.{target}"
        if not os.path.isfile(reference):
            continue
        if not binarized(data, split, target):
            raise SystemsError(
                f"{data}: no binarized split '{split}' ({split}.*-{target}.{target}.bin) beside "
                f"its references {reference}: run prepare.sh again", MISSING,
            )  # fmt: skip
        splits[split] = reference
    return splits


def check_sentencepiece_pieces(dictionary: str) -> None:
    """Refuse a target dictionary of subword-nmt pieces ("Ma@@"): test_bleu.sh detokenizes with
    sentencepiece, as prepare.sh segments, which drops every space and keeps each "@@": its
    output was decoded whole, then refused as having other references than its own."""
    piece = subword_nmt_piece(dictionary)  # none of a missing one: the checkpoint's check
    if piece is not None:
        raise SystemsError(
            f"{dictionary} holds subword-nmt pieces ('{piece}'): test_bleu.sh detokenizes with "
            "sentencepiece, as prepare.sh segments; score subword-nmt output with "
            "fairseq-generate --post-process subword_nmt and fairseq-san-score",
            USAGE,
        )


def check_out_dir(out: str) -> None:
    """OUT_DIR, where each system's folder is made: not empty (an unset "$OUT" wrote each system
    under /), a file (mkdir failed naming neither the option nor the cause) nor a name starting
    with '-' (rm and mkdir read it as an option)."""
    if not out:
        raise SystemsError("OUT_DIR is empty (an unset variable?): name a folder", USAGE)
    problem = read_as_an_option(out)
    if problem:
        raise SystemsError(f"OUT_DIR {out} {problem}", USAGE)
    if os.path.exists(out) and not os.path.isdir(out):
        raise SystemsError(f"OUT_DIR {out} is a file: give a folder (made when missing)", USAGE)


# fairseq's largest --batch-size (option_ranges), and more than bash's arithmetic, which
# test_bleu.sh reads DECODE_BATCH_SIZE with ("08" is 8 there, as it is to fairseq), would wrap.
LARGEST_BATCH_SIZE = 2**31 - 1


def check_batch_size(value: str) -> None:
    """DECODE_BATCH_SIZE, as the shell gives it: a positive decimal integer, leading zeros
    allowed (as VOCAB_SIZE and the recipes' --decode-batch-size take them)."""
    if not re.fullmatch(r"0*[1-9][0-9]*", value):
        raise SystemsError(
            f"DECODE_BATCH_SIZE must be a positive integer, not '{value}'", USAGE
        )
    if int(value) > LARGEST_BATCH_SIZE:
        raise SystemsError(
            f"DECODE_BATCH_SIZE {value}: at most {LARGEST_BATCH_SIZE} (fairseq's --batch-size)",
            USAGE,
        )


def is_folder_name(name: str) -> bool:
    """Whether ``name`` names a folder of OUT_DIR itself (not empty, '.', '..', no '/')."""
    return bool(name) and "/" not in name and name not in (".", "..")


def parse_bleu_system(spec: str) -> System:
    """``NAME=CHECKPOINT[:OVERRIDES]`` as a System; SystemsError for a NAME that is no folder
    name or a field that the recipe could not read back from one line."""
    try:
        name, checkpoint, overrides = split_system(spec)
    except ValueError:
        name = ""  # no "=", NAME or CHECKPOINT
    if not is_folder_name(name):
        raise SystemsError(
            f"'{spec}': give NAME=CHECKPOINT, NAME a folder name (not empty, '.' or '..', no '/')",
            USAGE,
        )
    if re.search(r"[\t\n]", spec):  # the recipe reads one line a system, tab-separated
        raise SystemsError(f"{spec!r}: NAME=CHECKPOINT[:OVERRIDES] must hold no tab or line break",
                           USAGE)  # fmt: skip
    if overrides is not None:
        check_overrides(name, overrides)
    return System(name, checkpoint, NO_OVERRIDES if overrides is None else overrides)


def check_overrides(name: str, overrides: str) -> None:
    """OVERRIDES a literal dict, as fairseq-generate reads ``--model-overrides`` (the plugin's
    literal-only evaluation): else the systems before this one were decoded for nothing."""
    from fairseq_san.fairseq_fixes.literal_eval import NotALiteral, evaluate

    try:
        value = evaluate(overrides)
    except NotALiteral as error:
        raise SystemsError(f"{name}: {error}", USAGE) from None
    if not isinstance(value, dict):
        raise SystemsError(f"{name}: OVERRIDES {overrides} is not a dict", USAGE)
    check_no_decoder_choice(name, value)


def check_no_decoder_choice(name: str, overrides: dict) -> None:
    """No override that chooses the decoder (the static one, its precision or execution):
    fairseq-generate takes those from its command line, which test_bleu.sh fixes, and refused
    them only when it reached this system, after the systems before it were decoded."""
    for option in DECODER_OPTIONS:
        given = overrides.get(option.name)
        if not option.is_set(given) or (option is DECODING and str(given) in MODEL_DECODINGS):
            continue
        flag, meant = current_flag(option, given)
        raise SystemsError(
            f"{name}: OVERRIDES set {option.name} '{given}', which chooses the decoder: "
            f"{RECIPE} decodes with fairseq's generator; score that decoder with fairseq-generate "
            f"--task translation_san {flag} {meant} and fairseq-san-score",
            USAGE,
        )


def dictionary_sizes(dictionaries: Dict[str, str]) -> Dict[str, int]:
    """The entries of the data's dictionaries that are there (side -> DATA/dict.LANG.txt), as
    fairseq loads them: read once, for every system."""
    from fairseq.data import Dictionary

    return {side: len(Dictionary.load(path)) for side, path in dictionaries.items()
            if os.path.isfile(path)}  # fmt: skip


def check_translation_model(system: System, dictionary_entries: Dict[str, int]) -> None:
    """A language model's checkpoint refused (its configuration read, not built), one trained
    with other dictionaries than the data's (``dictionary_entries``: side -> entries), and
    OVERRIDES that its fairseq-generate would refuse (``check_overrides_for``): each failed only
    when its turn to decode came, after the systems before it had been decoded; so did a file
    that is no checkpoint (one cut short)."""
    from fairseq.checkpoint_utils import load_checkpoint_to_cpu

    from fairseq_san.checkpoints import CheckpointError, language_model_in

    try:
        state = load_checkpoint_to_cpu(system.checkpoint)  # its configuration as fairseq's
    except CheckpointError as err:
        raise SystemsError(f"{system.name}: {err}", USAGE) from None
    model = language_model_in(state)
    if model is not None:
        raise SystemsError(
            f"{system.name}: {system.checkpoint} is a language model ({model}): {RECIPE} "
            "scores translation models (a language model's perplexity: fairseq-eval-lm)",
            USAGE,
        )
    check_dictionaries_of(system, state, dictionary_entries)
    check_overrides_for(system, state)


def check_dictionaries_of(system: System, state: dict, dictionary_entries: Dict[str, int]) -> None:
    """Refuse a checkpoint whose embeddings have other rows than the data's dictionaries have
    entries (``checkpoints.vocabulary_mismatch``, what fairseq-generate says as it loads it)."""
    from fairseq_san.checkpoints import EMBEDDINGS, vocabulary_mismatch

    weights = state.get("model") or {}
    sizes = {
        side: (len(weights[key]), dictionary_entries[side])
        for side, key in EMBEDDINGS.items()
        if key in weights and side in dictionary_entries
    }
    mismatch = vocabulary_mismatch(sizes)
    if mismatch is not None:
        raise SystemsError(f"{system.name}: {system.checkpoint}: {mismatch}", USAGE)


def check_overrides_for(system: System, state: dict) -> None:
    """OVERRIDES checked against the checkpoint as fairseq-generate's ``--model-overrides``
    are (``model_overrides.check_overrides``: a key nothing reads, a value its option cannot
    take), and a ``san_policy`` it names read (a file that is not there, or no policy) and
    checked against the model's layers."""
    from fairseq_san.fairseq_fixes.literal_eval import evaluate
    from fairseq_san.fairseq_fixes.model_overrides import check_overrides
    from fairseq_san.policy import KIND_TABLE, load_policy, validate_blocks

    overrides, model = evaluate(system.overrides), state["cfg"].model
    try:
        check_overrides(state["cfg"], overrides, source="in OVERRIDES")
        if overrides.get("san_policy") is not None:
            for kind, blocks in load_policy(overrides["san_policy"]).items():
                layers = getattr(model, f"{KIND_TABLE[kind].stack}_layers", None)
                if layers is not None:
                    validate_blocks(blocks, layers, kind)
    except (UsageError, ValueError) as error:
        raise SystemsError(f"{system.name}: {error}", USAGE) from None


def scoring_lines(
    data: str, target: str, specs: Sequence[str], batch_size: str, out_dir: Optional[str] = None
) -> List[str]:
    """What test_bleu.sh decodes and scores, a line per system and split (``System.line``), each
    system's splits in turn, after every check it makes before decoding: the data (its splits
    binarized: ``scored_splits``), OUT_DIR, the batch size, then each system (its NAME, once;
    its OVERRIDES, a literal dict; its checkpoint, a translation model's of the data's
    dictionaries), in that order."""
    dictionary_entries = dictionary_sizes(check_data(data, target))
    splits = scored_splits(data, target)
    if out_dir is not None:
        check_out_dir(out_dir)
    check_batch_size(batch_size)
    systems = []
    for spec in specs:
        system = parse_bleu_system(spec)
        if system.name in (earlier.name for earlier in systems):
            raise SystemsError(
                f"{system.name}: two systems of that NAME (each writes OUT_DIR/NAME)", USAGE
            )
        if ":" in system.checkpoint:  # fairseq-generate would load the path before it
            raise SystemsError(
                f"{system.name}: CHECKPOINT {system.checkpoint} holds ':', which fairseq-generate "
                "reads between two checkpoints (an ensemble): give a path without one (a link "
                "to it)", USAGE,
            )  # fmt: skip
        if not os.path.isfile(system.checkpoint):
            raise SystemsError(f"{system.name}: no checkpoint {system.checkpoint}", MISSING)
        check_translation_model(system, dictionary_entries)
        systems.append(system)
    return [system.line(split, reference)
            for system in systems for split, reference in splits.items()]  # fmt: skip
