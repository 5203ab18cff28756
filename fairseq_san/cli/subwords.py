"""``fairseq-san-spm``: a joint sentencepiece model for the recipes (train, encode, decode).

The paper uses a joint BPE vocabulary shared by source and target; ``train`` learns one
sentencepiece model on the concatenation of both sides. ``decode`` turns pieces back into text
(a file of hypotheses decoded without it; the recipes let fairseq-generate do it,
``--post-process sentencepiece``).
"""

import argparse
import functools
import itertools
import logging
import os
import re
import shutil
import stat
import sys
import tempfile
from typing import Callable, List, Optional, Tuple

from fairseq_san.cli import (
    log_progress,
    positive_int,
    quiet_when_output_closes,
    said_when_interrupted,
)
from fairseq_san.errors import UsageError, file_error, utf8_text
from fairseq_san.files import (
    STDOUT,
    file_given_twice,
    line_text,
    output_problem,
    read_from,
    standard_input,
    write_whole,
    written_to,
)
from fairseq_san.scoring import SENTENCEPIECE_MARK

logger = logging.getLogger(__name__)

# sentencepiece's errors (RuntimeError, C++ source lines and all) said as the command's options.
SENTENCEPIECE_ERRORS = {
    re.compile(r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)"):
        "--vocab-size {0}: this text has too few distinct pieces for it; {1} at most",
    re.compile(r"could not parse ModelProto from (.*)"):
        "{0} is not a sentencepiece model: give --model the .model file that train wrote",
    re.compile(r"unk is not defined"):  # an empty file
        "{inputs} is not a sentencepiece model: give --model the .model file that train wrote",
    re.compile(r"Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)"):
        "--vocab-size {0}: this text needs at least {1}, a piece for each of its characters",
    re.compile(r"\[!sentences_\.empty\(\)\]|\[\(all_chars_count\) > \(0\)\]"):
        "no sentence to learn subwords from in {inputs}",
    re.compile(r'NOT_FOUND: "(.*)": (.*)'): "{0}: {1}",
    re.compile(r'cannot parse "(\d+)" as int'):
        "--vocab-size {0}: more than sentencepiece takes (2147483647 at most)",
}  # fmt: skip


def sentencepiece_problem(error: Exception, inputs: List[str]) -> str:
    """sentencepiece's ``error`` in the command's words where ``SENTENCEPIECE_ERRORS`` has them
    (``inputs``: the files it read, named where it found no sentence in them)."""
    for pattern, said in SENTENCEPIECE_ERRORS.items():
        found = pattern.search(str(error))
        if found:
            return said.format(*found.groups(), inputs=", ".join(inputs))
    return str(error)


def train(
    inputs: List[str], model_prefix: str, vocab_size: int, model_type: str, force: bool = False
) -> None:
    import sentencepiece as spm

    check_training_text(inputs)
    for output in (f"{model_prefix}.model", f"{model_prefix}.vocab"):
        problem = output_problem(output, "the model", inputs)  # an input: the text it learns
        if problem:  # sentencepiece would say so after it trained
            raise UsageError(f"--model-prefix {model_prefix}: {problem}")
    if not force:  # after: an input among them is said as one
        check_no_model(model_prefix)

    folder = os.path.dirname(os.path.abspath(model_prefix))
    try:
        temporary = tempfile.TemporaryDirectory(dir=folder, prefix=".fairseq-san-spm-")
    except OSError as err:  # named the temporary folder, never given
        raise UsageError(f"--model-prefix {model_prefix}: cannot write in {folder}: "
                         f"{err.strerror}") from None  # fmt: skip
    logger.info(
        "learning a %s model of %d pieces from %s (sentencepiece says nothing until it ends: "
        "minutes on a large corpus)", model_type, vocab_size, ", ".join(inputs),
    )  # fmt: skip
    with temporary as work:
        trained = os.path.join(work, "spm")
        spm.SentencePieceTrainer.train(
            input=",".join(inputs),
            model_prefix=trained,
            vocab_size=vocab_size,
            model_type=model_type,
            character_coverage=1.0,
            bos_id=-1,
            eos_id=-1,
            pad_id=-1,
            unk_id=0,
            max_sentence_length=MAX_SENTENCE_BYTES,
            minloglevel=2,
        )
        check_written_whole(trained, model_prefix)
        for extension in ("model", "vocab"):
            copy = functools.partial(shutil.copyfile, f"{trained}.{extension}")
            write_whole(f"{model_prefix}.{extension}", copy)
    logger.info("wrote %s.model and %s.vocab", model_prefix, model_prefix)


def check_no_model(model_prefix: str) -> None:
    """Refuse to write over a model that is there (as fairseq-preprocess refuses a dictionary):
    the text it encoded, and the dictionary and models made of that text, are of its pieces,
    and a model learned again (other text, another --vocab-size) replaced it without a word."""
    there = [name for name in (f"{model_prefix}.model", f"{model_prefix}.vocab")
             if os.path.lexists(name)]  # fmt: skip
    if there:
        raise UsageError(
            f"--model-prefix {model_prefix}: {there[0]} exists (text encoded with it would not "
            "match a new model): give --force to learn it again, or another prefix"
        )


def check_written_whole(trained: str, model_prefix: str) -> None:
    """UsageError where sentencepiece wrote ``trained``'s model or vocabulary incompletely: it
    does not say so (a full disk left a truncated PREFIX.model in place of the last one, exit 0,
    and encode called it "not the .model file that train wrote")."""
    import sentencepiece as spm

    try:
        pieces = spm.SentencePieceProcessor(model_file=f"{trained}.model").get_piece_size()
    except (RuntimeError, OSError):  # a model cut short parses as none
        pieces = None
    with open(f"{trained}.vocab", encoding="utf-8", errors="replace") as vocabulary:
        lines = sum(1 for _ in vocabulary)
    if pieces is None or lines != pieces:
        raise UsageError(
            f"--model-prefix {model_prefix}: sentencepiece could not write the model whole (a "
            "full disk?): nothing written"
        )


def check_training_text(inputs: List[str]) -> None:
    """Refuse a file given twice (one side twice for both), a name holding "," (sentencepiece
    reads its inputs as one comma-separated list: ``x,y.en`` was read as ``x`` and ``y.en``), a
    file with no sentence (sentencepiece says
    ``INTERNAL: ... !sentences_.empty()``), and inputs with none it learns from
    (``check_sentence_lengths``). Only regular files are looked into: sentencepiece reads each
    input itself, and what was read of a pipe (``<(cat train.en train.de)``) would be missing
    from the text it learns from."""
    if sum(map(standard_input, inputs)) > 1:  # named by the file it was redirected from, or a pipe
        raise UsageError("standard input is given twice: it holds one file; give each side once")
    twice = file_given_twice(inputs)
    if twice is not None:  # train.en train.en for train.en train.de: a model of one side
        raise UsageError(
            f"the inputs name {twice} twice: a joint model learns from each side once "
            "(train.en train.de): give each file once"
        )
    read: List[Tuple[str, int, int]] = []  # each file read: (path, too long, sentences)
    for path in inputs:
        if "," in path:
            raise UsageError(
                f"{path}: sentencepiece reads a name holding ',' as two files: rename it, or "
                "give a link to it under a name without one"
            )
        mode = os.stat(path).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):  # a folder fails here, as one
            continue
        with utf8_text(path), open(path, encoding="utf-8", newline="\n") as lines:
            sentences = [line_text(line) for line in lines if line.strip()]
        check_line_ends(path, sentences)
        if not sentences:
            raise UsageError(f"{path} has no sentence to learn subwords from")
        read.append((path, count_too_long(sentences), len(sentences)))
    check_sentence_lengths(read, every_input_read=len(read) == len(inputs))


def check_line_ends(path: str, sentences: List[str]) -> None:
    """Refuse text whose lines end in a bare carriage return (classic Mac text): sentencepiece
    ends a line at "\\n" only, read the file as one line too long to learn from and left it
    out without a word (the vocabulary learned from the other inputs alone)."""
    returns = sum(sentence.count("\r") for sentence in sentences)
    if returns and returns >= len(sentences):
        raise UsageError(
            f"{path}: its lines end in a carriage return alone (\\r, classic Mac text), and "
            "sentencepiece ends a line at \\n only: convert them first (tr '\\r' '\\n')"
        )


# The longest sentence, in bytes, that sentencepiece learns from (its max_sentence_length, given
# to the trainer): it leaves longer ones out, said only in the log the command silences.
MAX_SENTENCE_BYTES = 4192


def count_too_long(sentences: List[str]) -> int:
    """How many of ``sentences`` sentencepiece leaves out: those over ``MAX_SENTENCE_BYTES``."""
    return sum(len(sentence.encode("utf-8")) > MAX_SENTENCE_BYTES for sentence in sentences)


def check_sentence_lengths(read: List[Tuple[str, int, int]], every_input_read: bool) -> None:
    """Refuse inputs whose every sentence is longer than ``MAX_SENTENCE_BYTES`` (sentencepiece
    found "no sentence" in them; ``read``: each file's path, its sentences too long, its
    sentences), and say how many it leaves out of each file where others remain to learn from."""
    if every_input_read and all(too_long == total for _, too_long, total in read):
        paths = [path for path, _, _ in read]
        raise UsageError(
            f"{', '.join(paths)}: every sentence is longer than {MAX_SENTENCE_BYTES:,} bytes, "
            "and sentencepiece learns from none longer (its max_sentence_length): split "
            f"{'its' if len(paths) == 1 else 'their'} lines into sentences"
        )
    for path, too_long, total in read:
        if too_long:
            print(
                f"fairseq-san-spm: warning: {too_long:,} of the {total:,} sentences of {path} are "
                f"longer than {MAX_SENTENCE_BYTES:,} bytes: sentencepiece leaves them out of what "
                "it learns from",
                file=sys.stderr,
            )


def model_prefix(text: str) -> str:
    """argparse type: a prefix that ends in a file name (``data/spm``): ``data/`` would write the
    hidden files ``data/.model`` and ``data/.vocab``."""
    if os.path.basename(text) in ("", os.curdir, os.pardir):
        raise argparse.ArgumentTypeError(
            f"{text} names a folder: add a file name, e.g. {os.path.join(text, 'spm')}"
        )
    return text


def load_model(model: str, source: str, target: str):
    """The sentencepiece processor of ``model``, once ``target`` is known to be writable and none
    of the inputs (the model was replaced by the encoded text); a model that is no file (a
    folder, /dev/null) refused in the command's words, not sentencepiece's."""
    import sentencepiece as spm

    problem = target != STDOUT and output_problem(target, "the output file", [source, model])
    if problem:
        raise UsageError(f"{target or repr(target)}: {problem}")
    if os.path.exists(model) and not os.path.isfile(model):
        raise UsageError(f"--model {model} is not a file: give the .model file that train wrote")
    return spm.SentencePieceProcessor(model_file=model)


def encode(model: str, source: str, target: str) -> None:
    processor = load_model(model, source, target)
    rewrite_lines(source, target, lambda line: " ".join(processor.encode(line, out_type=str)))


def decode(model: str, source: str, target: str) -> None:
    processor = load_model(model, source, target)
    numbers = itertools.count(1)
    first_word_marked = marks_first_word(processor)

    def text_of(line: str) -> str:
        number = next(numbers)
        check_pieces(source, number, line, first_word_marked)
        pieces = line.split()
        check_known(model, processor, source, number, pieces)
        return processor.decode(pieces)

    rewrite_lines(source, target, text_of)


def marks_first_word(processor) -> bool:
    """Whether the model marks a line's first word too (sentencepiece's default dummy prefix):
    one trained with ``--add_dummy_prefix false`` writes a one-word line without "\u2581"."""
    return SENTENCEPIECE_MARK in processor.encode("a", out_type=str)[0]


def check_pieces(source: str, number: int, line: str, first_word_marked: bool) -> None:
    """Refuse a line holding a tab: fairseq-generate's whole ``H-`` line, which decoding (it
    deletes every space before it turns each "\u2581" into one) made "H-0-0.5 Ein ...";
    and one of several pieces without a word's start among them: text decoded already (the
    recipes' ``D-`` lines, ``--post-process sentencepiece``), which decoding glued into one word
    ("einhundläuft"); only of a model that marks a line's first word (``marks_first_word``: a
    one-word line of another model's pieces was refused)."""
    if "\t" in line:
        raise UsageError(
            f"{source}, line {number}, holds a tab: give the pieces alone (of fairseq-generate's "
            "H- lines, the third field: cut -f3)"
        )
    pieces = len(line.split())
    if pieces > 1 and first_word_marked and SENTENCEPIECE_MARK not in line:
        raise UsageError(
            f"{source}, line {number}, is no sentencepiece pieces: none of its {pieces} pieces "
            f"holds '{SENTENCEPIECE_MARK}' (a word's start), and decoding would glue them into one "
            "word; is it decoded text already (fairseq-generate's D- lines, with --post-process "
            "sentencepiece)?"
        )


def check_known(model: str, processor, source: str, number: int, pieces: List[str]) -> None:
    """Refuse a piece that begins a word and that ``model`` has not: a piece of another model,
    which sentencepiece decoded as it is ("\u2581Ein\u2581Mann"), without a word. Pieces that
    encode writes for characters the model has not ("\u03a9") never hold "\u2581"."""
    unknown = processor.unk_id()
    for piece in pieces:
        if SENTENCEPIECE_MARK in piece and processor.piece_to_id(piece) == unknown:
            raise UsageError(
                f"{source}, line {number}, holds the piece {piece}, which --model {model} has "
                "not: give the model that encoded the text"
            )


def rewrite_lines(source: str, target: str, convert: Callable[[str], str]) -> None:
    """Write ``convert`` of every line of ``source`` to ``target`` (checked by ``load_model``),
    whole or not at all (``files.write_whole``): a line that is no UTF-8 left the lines before
    it as the output. A line ends at a newline only (``files.line_text``), so that the output
    has the input's line count, which its other side's file shares; a UTF-8 byte-order mark at
    its start is dropped (decode read it as part of the first piece: "\ufeff\u2581Ein")."""
    # opened before the output: write_whole names the output in an error inside ``write``
    with utf8_text(source), open(source, encoding="utf-8-sig", newline="\n") as lines:

        def write(name: str) -> None:
            with open(name, "w", encoding="utf-8") as out:
                for line in lines:
                    out.write(convert(line_text(line)) + "\n")

        write_whole(target, write)


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="fairseq-san-spm", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    learn = commands.add_parser("train", help="learn a joint model from raw text files")
    learn.add_argument(
        "inputs", nargs="+", help="raw text files, one sentence per line ('-': standard input)"
    )
    learn.add_argument(
        "--model-prefix", required=True, type=model_prefix,
        help="writes PREFIX.model and PREFIX.vocab",
    )  # fmt: skip
    learn.add_argument("--vocab-size", type=positive_int, default=8000,
                       help="pieces in the joint vocabulary (default: 8000)")  # fmt: skip
    learn.add_argument("--model-type", default="bpe", choices=["bpe", "unigram"],
                       help="sentencepiece's model type (default: bpe)")  # fmt: skip
    learn.add_argument(
        "--force", action="store_true",
        help="write over PREFIX.model and PREFIX.vocab where they exist (refused without it: the "
        "text encoded with them would not match the new model)",
    )  # fmt: skip
    for name, text in (("encode", "raw text -> pieces"), ("decode", "pieces -> raw text")):
        sub = commands.add_parser(name, help=text)
        sub.add_argument("--model", required=True, help="the .model file written by train")
        sub.add_argument("source", help="input file ('-': standard input)")
        sub.add_argument("target", help="output file ('-': standard output)")
    return parser.parse_args(argv)


@said_when_interrupted
@quiet_when_output_closes
def main(argv: Optional[List[str]] = None) -> None:
    args = parse_args(argv)
    log_progress()
    try:
        if args.command == "train":
            inputs = [read_from(path) for path in args.inputs]
            train(inputs, args.model_prefix, args.vocab_size, args.model_type, args.force)
        else:
            rewrite = encode if args.command == "encode" else decode
            rewrite(args.model, read_from(args.source), written_to(args.target))
    except OSError as err:
        sys.exit(f"fairseq-san-spm: error: {file_error(err)}")
    except (RuntimeError, ValueError) as err:  # sentencepiece's
        inputs = args.inputs if args.command == "train" else [args.model]
        sys.exit(f"fairseq-san-spm: error: {sentencepiece_problem(err, inputs)}")
    except UsageError as err:
        sys.exit(f"fairseq-san-spm: error: {err}")


if __name__ == "__main__":
    main()
