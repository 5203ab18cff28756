"""The data a recipe prepares, checked before it is binarized or reused, as
``fairseq-san-loop wmt14-check`` and ``multi30k-check`` answer the recipes: WMT14's corpora, its
preparation and the GPUs it trains on (``examples/wmt14_en_de/run.sh``), and Multi30k's raw files
and finished folders (``examples/multi30k/prepare.sh``, ``examples/lm/prepare.sh``). A refusal is
a ``RecipeError``: one line named after the recipe."""

import gzip
import os
import re
import subprocess
from typing import Iterator, List, Optional, Sequence, Tuple

from fairseq_san.errors import RecipeError

WMT14, PREPARE = "run.sh", "prepare.sh"  # whose refusals these are
USAGE, MISSING = 2, 1  # exit statuses
# What fairseq's prepare-wmt14en2de.sh --icml17 reads from WMT14's archives (under WORK_DIR/orig).
WMT14_CORPORA = (
    "training/europarl-v7.de-en", "commoncrawl.de-en", "training/news-commentary-v9.de-en"
)  # fmt: skip
WMT14_LANGUAGES = ("en", "de")
WMT14_TEST_SGM = (
    "test-full/newstest2014-deen-src.en.sgm", "test-full/newstest2014-deen-ref.de.sgm"
)  # fmt: skip
WMT14_SPLITS = ("train", "valid", "test")
PREPARATION_FAILED = "is missing or empty: the preparation failed (its output above)"
# Multi30k's second test set, compared with a finished folder's text where it has it.
TEST_2017 = "test_2017_flickr:test1"
CHUNK = 1 << 20


def has_text(path: str) -> bool:
    """Whether ``path`` is a file with something in it."""
    return os.path.isfile(path) and os.path.getsize(path) > 0


def line_count(path: str) -> int:
    """The lines of ``path`` as fairseq reads them: its newlines, and a last line without one
    (``wc -l`` leaves it out: "a\nb" beside "x\ny\n" passed as parallel, "a\nb\n" beside
    "x\ny" was refused, 2 lines against 1)."""
    lines, last = 0, b"\n"
    with open(path, "rb") as text:
        for chunk in iter(lambda: text.read(CHUNK), b""):
            lines, last = lines + chunk.count(b"\n"), chunk[-1:]
    return lines + (last != b"\n")


def check_wmt14_corpora(orig: str) -> None:
    """Every file fairseq's preparation script reads, unpacked into ``orig``: it goes on
    without one it cannot read (CommonCrawl, half of WMT14's pairs, was dropped)."""
    files = [f"{corpus}.{lang}" for corpus in WMT14_CORPORA for lang in WMT14_LANGUAGES]
    for name in files + list(WMT14_TEST_SGM):
        if not has_text(f"{orig}/{name}"):
            raise RecipeError(
                WMT14, f"{orig}/{name} is missing or empty after unpacking its archive", MISSING
            )


def check_wmt14_prepared(prepared: str) -> None:
    """What the preparation script left in ``prepared``, whole and parallel: it exits 0
    whatever failed."""
    if not has_text(f"{prepared}/code"):
        raise RecipeError(WMT14, f"{prepared}/code (the BPE codes) {PREPARATION_FAILED}", MISSING)
    for split in WMT14_SPLITS:
        source, target = f"{prepared}/{split}.en", f"{prepared}/{split}.de"
        if not (has_text(source) and has_text(target)):
            raise RecipeError(WMT14, f"{source} or .de {PREPARATION_FAILED}", MISSING)
        lines_source, lines_target = line_count(source), line_count(target)
        if lines_source != lines_target:
            raise RecipeError(
                WMT14,
                f"{source} has {lines_source} lines, {split}.de {lines_target}: "
                "not a parallel corpus",
                MISSING,
            )


def gpu_count() -> int:
    """The GPUs ``nvidia-smi -L`` lists; 0 where it is missing or fails."""
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    except OSError:
        return 0
    if listed.returncode != 0:
        return 0
    return sum(line.startswith("GPU ") for line in listed.stdout.splitlines())


def check_wmt14_gpus(gpus: int) -> None:
    """A machine with the ``gpus`` GPUs of the recipe's fairseq-train, before hours of downloads
    and preparation (fairseq-train refused --distributed-world-size 8 only then)."""
    found = gpu_count()
    if found < gpus:
        raise RecipeError(
            WMT14,
            f"this machine has {found} GPUs, and the recipe trains on {gpus} "
            f"(--distributed-world-size {gpus}): run it on such a machine, or --dry-run to print "
            "its commands",
            MISSING,
        )


def vocab_size(given: str) -> int:
    """VOCAB_SIZE as its number: "08000" is 8000; a word, 0, or more than 10 digits (bash's
    arithmetic wrapped them round) refused before any text is written."""
    if re.fullmatch(r"0*[0-9]{1,10}", given) and int(given) > 0:
        return int(given)
    raise RecipeError(
        PREPARE,
        f"VOCAB_SIZE={given}: give a positive whole number of pieces (at most 2147483647)",
        USAGE,
    )


def split_pairs(splits: str) -> Iterator[Tuple[str, str]]:
    """(raw name, fairseq split) of each "RAW:SPLIT" of the recipe's ``$splits``."""
    for pair in splits.split():
        raw, _, split = pair.partition(":")
        yield raw, split


def check_multi30k_dir(multi30k_dir: str) -> None:
    """MULTI30K_DIR, where set, a directory."""
    if multi30k_dir and not os.path.isdir(multi30k_dir):
        raise RecipeError(PREPARE, f"MULTI30K_DIR={multi30k_dir}: no such directory", MISSING)


def check_raw_text(path: str) -> None:
    """``path`` unpacks whole to some text: an empty split was prepared "done" (the loop then
    refused its valid split, naming another cause), a broken file stopped the recipe halfway, in
    gzip's words."""
    try:
        with gzip.open(path, "rb") as unpacked:
            found = bool(unpacked.read(1))
            while unpacked.read(CHUNK):
                pass
    except (OSError, EOFError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else error
        raise RecipeError(PREPARE, f"{path} is no whole gzip file ({reason})", MISSING)
    if not found:
        raise RecipeError(PREPARE, f"{path} holds no sentence: every split needs some", MISSING)


def check_raw_files(multi30k_dir: str, splits: str, languages: Sequence[str]) -> None:
    """Every split's raw file in MULTI30K_DIR (where set), whole and not empty, before anything
    is written."""
    check_multi30k_dir(multi30k_dir)
    if not multi30k_dir:
        return
    for raw, _ in split_pairs(splits):
        for lang in languages:
            path = f"{multi30k_dir}/{raw}.{lang}.gz"
            if not os.path.isfile(path):
                raise RecipeError(PREPARE, f"no {path}", MISSING)
            check_raw_text(path)


def check_unfinished(out: str) -> None:
    """An OUT without .done holds no dictionary but one that binarize moved in (its
    .binarized: a run stopped before .done): another is other data, which fairseq-preprocess
    would refuse to write over."""
    if not os.path.isdir(out) or os.path.isfile(f"{out}/.binarized"):
        return
    found = sorted(name for name in os.listdir(out) if re.fullmatch(r"dict.*\.txt", name))
    if found:
        raise RecipeError(
            PREPARE,
            f"{out} holds binarized data ({out}/{found[0]}) that prepare.sh did not finish: "
            "choose another OUT_DIR",
            MISSING,
        )


def vocabulary_pieces(out: str) -> Optional[int]:
    """The pieces of OUT's sentencepiece vocabulary, or None where it has none."""
    try:
        return line_count(f"{out}/spm.vocab")
    except OSError:
        return None


def same_text(raw: str, kept: str) -> bool:
    """Whether the gzipped ``raw`` file unpacks to ``kept``'s bytes (False where it is broken)."""
    try:
        with gzip.open(raw, "rb") as unpacked, open(kept, "rb") as text:
            while True:
                chunk = unpacked.read(CHUNK)
                if chunk != text.read(len(chunk) or 1):
                    return False
                if not chunk:
                    return True
    except (OSError, EOFError):
        return False


def check_same_raw(out: str, multi30k_dir: str, splits: str, languages: Sequence[str]) -> None:
    """A finished OUT holds the text of MULTI30K_DIR (where set) in OUT/text/SPLIT.raw.LANG:
    one prepared from other files was "ready", and the run went on with other data."""
    check_multi30k_dir(multi30k_dir)  # a typo was "ready": nothing to compare with
    if not multi30k_dir:
        return
    compared = False
    for raw_name, split in split_pairs(f"{splits} {TEST_2017}"):
        for lang in languages:
            raw, kept = f"{multi30k_dir}/{raw_name}.{lang}.gz", f"{out}/text/{split}.raw.{lang}"
            if not (os.path.isfile(raw) and os.path.isfile(kept)):
                continue
            compared = True
            if not same_text(raw, kept):
                raise RecipeError(
                    PREPARE,
                    f"{out} was prepared from other text than MULTI30K_DIR={multi30k_dir} ({raw} "
                    f"is not {kept}): choose another OUT_DIR",
                    MISSING,
                )
    if not compared:  # an empty or wrong folder was "ready" too
        raise RecipeError(
            PREPARE,
            f"MULTI30K_DIR={multi30k_dir} holds none of {out}'s raw files (SPLIT.LANG.gz): "
            "check MULTI30K_DIR",
            MISSING,
        )


def check_ready(
    out: str, file: str, what: str, vocab: Optional[int], multi30k_dir: str, splits: str,
    languages: List[str],
) -> None:  # fmt: skip
    """A finished OUT holds ``what`` (its ``file``), of ``vocab`` pieces where given, prepared
    from MULTI30K_DIR's text where set; else the run would go on with other data than asked for."""
    if not os.path.isfile(f"{out}/{file}"):
        raise RecipeError(
            PREPARE, f"{out} holds other data than {what} (no {file}): choose another OUT_DIR",
            MISSING,
        )  # fmt: skip
    pieces = vocabulary_pieces(out)
    if vocab is not None and pieces != vocab:
        raise RecipeError(
            PREPARE,
            f"{out} holds a vocabulary of {'unknown' if pieces is None else pieces} pieces, not "
            f"VOCAB_SIZE={vocab}: choose another OUT_DIR",
            MISSING,
        )
    check_same_raw(out, multi30k_dir, splits, languages)
