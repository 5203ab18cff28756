"""``fairseq-san-average``: one checkpoint whose parameters are the mean of several checkpoints'.

What fairseq's ``scripts/average_checkpoints.py`` computes, with its options: ``--inputs`` names
checkpoint files, or one folder whose newest N checkpoints ``--num-update-checkpoints N``
(``checkpoint_E_U.pt``, written by ``--save-interval-updates``) or ``--num-epoch-checkpoints N``
(``checkpointE.pt``) choose, at most ``--checkpoint-upper-bound`` updates or epochs. The average
keeps the other fields (configuration, optimizer state, ...) of the first checkpoint: the newest,
of a folder; a checkpoint of another model is refused, by its parameters' names and shapes or by
a configuration that changes what they compute (``MEANING_KEYS``), and one that fairseq's loaders
refuse for an omegaconf interpolation in its configuration. Half-precision parameters
(float16, as fairseq's script does, and bfloat16) are averaged and written in float32, integer
ones rounded down as fairseq's script does; a boolean tensor (a mask) is kept where every
checkpoint holds the same, and a parameter holding a NaN or an infinity is refused (a diverged
training's checkpoint would make every mean one). Unlike fairseq's script, each checkpoint is
read with torch's safe loader (``fairseq_san.checkpoints.load_state``): on torch >= 2.6 that
script refuses every fairseq checkpoint, and with the safe loader switched off, reading one could
run code.
"""

import argparse
import functools
import logging
import os
import re
import sys
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

from fairseq_san import files
from fairseq_san.cli import (
    log_progress,
    positive_int,
    quiet_when_output_closes,
    said_when_interrupted,
)
from fairseq_san.errors import UsageError, first_line
from fairseq_san.files import DASH, input_at, written_to
from fairseq_san.options import MODEL_OPTION_NAMES

if TYPE_CHECKING:  # torch is imported when checkpoints are read, not for --help
    from torch import Tensor, dtype

PROG = "fairseq-san-average"
logger = logging.getLogger(__name__)

# The checkpoints a folder holds, as fairseq names them (the regexes of its script); group 1 is
# the number that orders them.
NAMES = {
    "update": (re.compile(r"checkpoint_\d+_(\d+)\.pt"), "checkpoint_<epoch>_<updates>.pt"),
    "epoch": (re.compile(r"checkpoint(\d+)\.pt"), "checkpoint<epoch>.pt"),
}


def newest_checkpoints(folder: str, count: int, kind: str, upper_bound: Optional[int]) -> List[str]:
    """The ``count`` newest checkpoints of ``kind`` ("update" or "epoch") in ``folder``, newest
    first, none beyond ``upper_bound`` updates or epochs (fairseq's ``last_n_checkpoints``)."""
    pattern, form = NAMES[kind]
    try:
        names = os.listdir(folder)
    except OSError as err:
        raise UsageError(f"--inputs {folder}: cannot list it: {err.strerror or err}") from None
    found = sorted(
        ((int(match.group(1)), name) for name in names if (match := pattern.fullmatch(name))),
        reverse=True,
    )
    bound = "" if upper_bound is None else f" of at most {upper_bound} {kind}s"
    kept = [name for number, name in found if upper_bound is None or number <= upper_bound]
    if not kept:
        raise UsageError(
            f"--inputs {folder} has no {form} checkpoint{bound}"
            + (" (fairseq-train --save-interval-updates writes them)" if kind == "update" else "")
        )
    if len(kept) < count:
        raise UsageError(
            f"--inputs {folder} has {len(kept)} {form} checkpoint(s){bound}, fewer than the "
            f"{count} to average: {', '.join(kept)}"
        )
    return [os.path.join(folder, name) for name in kept[:count]]


def named_files(paths: List[str]) -> List[str]:
    """``paths``, the checkpoint files ``--inputs`` names, each named once: a folder, a file named
    twice or a copy of another refused."""
    folders = [path for path in paths if os.path.isdir(path)]
    if folders:
        raise UsageError(
            f"--inputs {folders[0]} is a folder: give --num-update-checkpoints N or "
            "--num-epoch-checkpoints N to average its newest N checkpoints, or name the files"
        )
    twice = files.file_given_twice(paths)
    if twice is not None:
        raise UsageError(f"--inputs names {twice} twice: each checkpoint counts once")
    copies = files.same_bytes([path for path in paths if os.path.isfile(path)])
    if copies is not None:  # checkpoint_last.pt beside the checkpoint it copies
        raise UsageError(
            f"--inputs {copies[0]} and {copies[1]} hold the same bytes (fairseq-train's "
            "checkpoint_last.pt copies the last checkpoint it saved): one checkpoint would "
            "count twice; leave one out"
        )
    return paths


def check_present(paths: List[str], what: str) -> None:
    """Refuse an ``--inputs`` path that is not there (``what``: "file" or "folder"), before
    fairseq is imported: it was found after its progress lines and warnings, seconds later."""
    missing = next((path for path in paths if not os.path.exists(path)), None)
    if missing is not None:
        raise UsageError(f"--inputs {missing}: no such {what}")


def input_paths(args: argparse.Namespace) -> List[str]:
    """The checkpoints to average: the files ``--inputs`` names, or the newest N of its folder."""
    if args.num_update_checkpoints is None and args.num_epoch_checkpoints is None:
        check_present(args.inputs, "file")
        return named_files(args.inputs)
    kind = "update" if args.num_update_checkpoints is not None else "epoch"
    count = args.num_update_checkpoints or args.num_epoch_checkpoints
    if len(args.inputs) == 1:
        check_present(args.inputs, "folder")
    if len(args.inputs) != 1 or not os.path.isdir(args.inputs[0]):
        raise UsageError(
            f"--num-{kind}-checkpoints averages the newest checkpoints of one folder: give "
            f"--inputs DIR, not {' '.join(args.inputs)}"
        )
    return newest_checkpoints(args.inputs[0], count, kind, args.checkpoint_upper_bound)


def output_problem(output: str, inputs: List[str]) -> Optional[str]:
    """Why the average cannot be written to ``output`` (``--output``), checked before any
    checkpoint is read; None if it can."""
    if output == DASH and sys.stdout.isatty():  # megabytes of a zip archive on the screen
        return "standard output is a terminal, and a checkpoint is binary: redirect it (> FILE)"
    output = written_to(output)
    temporary = files.temporary_path(os.path.realpath(output))  # save's, files.write_whole's
    named = input_at(temporary, inputs)
    if named:
        return (
            f"is written through {temporary} first, which is the input {named}: write the "
            "average to another file"
        )
    return files.output_problem(output, "the average", inputs)


def model_parameters(path: str, state: object) -> Dict[str, "Tensor"]:
    """The model parameters of checkpoint ``path``'s contents ``state``, refused in one line
    when ``state`` is no fairseq checkpoint (or holds an interpolation fairseq's loaders refuse)."""
    import torch

    from fairseq_san.checkpoints import (
        CheckpointError, content_problem, interpolation_in, tensor_problem,
    )

    model = state.get("model") if isinstance(state, dict) else None
    if not isinstance(model, dict) or not all(isinstance(v, torch.Tensor) for v in model.values()):
        problem = content_problem(path) or "its 'model' is not a dict of tensors"
        raise CheckpointError(f"cannot average checkpoint {path}: {problem}")
    for name, tensor in model.items():  # a sparse or meta one failed inside torch's sum
        problem = tensor_problem(tensor)
        if problem is not None:
            raise CheckpointError(
                f"cannot average checkpoint {path}: its {name} is {problem}; fairseq-train "
                "saves dense real-valued tensors"
            )
    problem = interpolation_in(state)  # fairseq's loaders refuse it, and so the average
    if problem is not None:
        raise CheckpointError(f"cannot average checkpoint {path}: {problem}")
    return model


def summed(tensor: "Tensor") -> "Tensor":
    """``tensor`` as the average sums it: half precision in float32, as fairseq's script does."""
    import torch

    return tensor.float() if tensor.dtype in (torch.float16, torch.bfloat16) else tensor


def layout(parameters: Dict[str, "Tensor"]) -> Dict[str, Tuple[Tuple[int, ...], "dtype"]]:
    """Each parameter's shape and the data type it is summed in, by name."""
    return {name: (tuple(t.shape), summed(t).dtype) for name, t in parameters.items()}


def layout_mismatch(
    reference: Dict[str, Tuple[Tuple[int, ...], "dtype"]], parameters: Dict[str, "Tensor"]
) -> Optional[str]:
    """How ``parameters`` differ from ``reference``'s names, shapes and data types (half
    precision counted as float32), or None if they do not: an integer tensor summed with a float
    one failed in the sum or became float, by the checkpoints' order."""
    missing = [name for name in reference if name not in parameters]
    extra = [name for name in parameters if name not in reference]
    for names, what in ((missing, "lacks"), (extra, "has an extra")):
        if names:
            more = f" (and {len(names) - 1} more)" if len(names) > 1 else ""
            return f"it {what} parameter {names[0]}{more}"
    for name, (shape, summed_as) in layout(parameters).items():
        if shape != reference[name][0]:
            return f"its {name} has shape {shape}, not {reference[name][0]}"
        if summed_as != reference[name][1]:
            return f"its {name} is of data type {summed_as}, not {reference[name][1]}"
    return None


# A checkpoint's model configuration that changes what parameters of the same names and shapes
# compute: checkpoints that differ here are of two models (the reverse direction, another
# activation, policy or normalization, a language model's start token), whose mean is neither.
MEANING_KEYS = (
    "arch", "_name", "language_pair", "add_bos_token", "activation_fn",
    "encoder_normalize_before", "decoder_normalize_before", "encoder_attention_heads",
    "decoder_attention_heads",
    "share_all_embeddings", "share_decoder_input_output_embed", "no_scale_embedding",
    "layernorm_embedding", "no_token_positional_embeddings", "encoder_learned_pos",
    "decoder_learned_pos", "cross_self_attention", *MODEL_OPTION_NAMES,
)  # fmt: skip


def configuration_mismatch(reference: dict, state: dict) -> Optional[str]:
    """The first of ``MEANING_KEYS`` that checkpoint ``state`` records otherwise than
    ``reference`` (its value and the reference's), or None: the parameters' layout alone let an
    En->De and a De->En model, or a ReLU and a GELU one, be averaged under the first's
    configuration. A key that one of them does not hold (saved by a version before the key was
    recorded: a run resumed across an upgrade) is not compared: it was refused as another run."""
    from fairseq_san.checkpoints import stored_holds, stored_value

    for key in MEANING_KEYS:
        if not all(stored_holds(saved, "model", key) for saved in (reference, state)):
            continue
        value, wanted = stored_value(state, "model", key), stored_value(reference, "model", key)
        if value != wanted:
            return f"its {key} is {value!r}, not {wanted!r}"
    return None


def record_mismatch(reference: dict, state: dict) -> Optional[str]:
    """The first dictionary whose words checkpoint ``state`` records otherwise than ``reference``
    (``dictionary_words.recorded_dictionaries``), said; None where they agree or one has none."""
    from fairseq_san.fairseq_fixes.dictionary_words import (
        dictionary_named,
        recorded_dictionaries,
        same_words,
    )

    wanted, record = recorded_dictionaries(reference), recorded_dictionaries(state)
    if wanted is None or record is None:
        return None
    other = next((name for name in sorted(set(wanted) | set(record)) if not isinstance(
        wanted.get(name), dict) or not same_words(record.get(name), wanted[name])), None)
    return None if other is None else f"its {dictionary_named(other)}'s record holds other words"


def dictionary_mismatch(reference: dict, state: dict) -> Optional[str]:
    """Where checkpoint ``state`` was trained on data whose dictionary holds other words than
    ``reference``'s, of as many (a shuffled dictionary: the same layout, each id another word):
    which, by the checkpoints' records of their words (``record_mismatch``) or, without them, by
    the ``dict*.txt`` beside the data their tasks record; None where they agree or cannot be
    read here."""
    from fairseq_san.checkpoints import stored_value
    from fairseq_san.fairseq_fixes.dictionary_words import file_words

    recorded = record_mismatch(reference, state)
    if recorded is not None:
        return recorded
    folders = [stored_value(saved, "task", "data") for saved in (reference, state)]
    if not all(isinstance(folder, str) and folder for folder in folders):
        return None
    wanted, data = (files.first_data_folder(folder) for folder in folders)
    if os.path.normpath(wanted) == os.path.normpath(data):
        return None
    for name in sorted(os.listdir(wanted)) if os.path.isdir(wanted) else []:
        if name.startswith("dict") and name.endswith(".txt"):
            mine, theirs = (os.path.join(folder, name) for folder in (data, wanted))
            words = file_words(mine)
            if words is not None and words != file_words(theirs):
                return f"its dictionary {mine} holds other words than {theirs}"
    return None


def add_to_sums(sums: Dict[str, "Tensor"], parameters: Dict[str, "Tensor"], path: str,
                first_path: str) -> None:  # fmt: skip
    """Add checkpoint ``path``'s ``parameters`` to ``sums``. A boolean tensor (a mask) is kept,
    not summed (a mean of booleans is none): it must be that of the first checkpoint."""
    import torch

    from fairseq_san.checkpoints import CheckpointError

    for name, tensor in parameters.items():
        tensor = summed(tensor)
        if name not in sums:
            sums[name] = tensor.clone()  # a copy: shared with others, or mapped from the file
        elif tensor.dtype != torch.bool:
            sums[name] += tensor
        elif not torch.equal(sums[name], tensor):
            raise CheckpointError(
                f"checkpoint {path}: its boolean {name} differs from that of {first_path}, and a "
                "mean of booleans is none: average checkpoints whose boolean tensors agree"
            )


def divide(total: "Tensor", count: int) -> None:
    """``total`` made the mean of ``count`` checkpoints' values in place: rounded down for
    integers, as fairseq's script does; a boolean tensor, kept not summed, as it is."""
    import torch

    if total.is_floating_point():
        total.div_(count)
    elif total.dtype != torch.bool:
        total.floor_divide_(count)


def average(paths: List[str]) -> dict:
    """The first checkpoint of ``paths``, its model's parameters replaced by their mean over all
    of them (fairseq's ``average_checkpoints``); each is read with torch's safe loader."""
    from fairseq_san.checkpoints import CheckpointError, load_state, non_finite_weight

    first, reference, sums = None, {}, {}
    for index, path in enumerate(paths, 1):
        logger.info("reading checkpoint %d/%d: %s", index, len(paths), path)
        state = load_state(path)
        parameters = model_parameters(path, state)
        if first is None:
            first, reference = state, layout(parameters)
        mismatch = (layout_mismatch(reference, parameters) or configuration_mismatch(first, state)
                    or dictionary_mismatch(first, state))  # fmt: skip
        if mismatch:
            raise CheckpointError(
                f"checkpoint {path} is not of the model of {paths[0]}: {mismatch}; average "
                "checkpoints of one training run"
            )
        broken = non_finite_weight(parameters)
        if broken is not None:
            raise CheckpointError(
                f"checkpoint {path}: its {broken} holds NaN or infinite values (the training "
                "diverged?), which every mean would take: leave it out of the average"
            )
        add_to_sums(sums, parameters, path, paths[0])
    for total in sums.values():
        divide(total, len(paths))
    first["model"] = {name: sums[name] for name in reference}
    return first


def torch_save(state: dict, name: str) -> None:
    """``torch.save`` into ``name`` through a Python file, so that a failed write is the OSError
    that says why (torch's own writer said "[enforce fail at inline_container.cc:672] .
    unexpected pos 44672 vs 44564" on a full disk)."""
    import torch

    with open(name, "wb") as handle:
        try:
            torch.save(state, handle)
        except RuntimeError as err:
            if isinstance(err.__context__, OSError):  # the file's write failed: the cause
                raise err.__context__ from None
            raise


def save(state: dict, output: str) -> None:
    """Write ``state`` to ``output`` whole or not at all (``files.write_whole``: a link's target
    written, a device or a pipe written through, not replaced by a rename)."""
    try:
        files.write_whole(output, functools.partial(torch_save, state))
    except (OSError, RuntimeError) as err:  # a read-only folder; torch's writer failed
        reason = getattr(err, "strerror", None) or first_line(err)
        raise UsageError(f"cannot write {output}: {reason}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument(
        "--inputs", required=True, nargs="+", metavar="PATH",
        help="checkpoint files, or with --num-*-checkpoints one folder of them",
    )  # fmt: skip
    parser.add_argument("--output", required=True, metavar="FILE",
                        help="the averaged checkpoint ('-': standard output)")  # fmt: skip
    newest = parser.add_mutually_exclusive_group()
    for kind, (_, form) in NAMES.items():  # --num-update-checkpoints, --num-epoch-checkpoints
        newest.add_argument(f"--num-{kind}-checkpoints", type=positive_int, metavar="N",
                            help=f"average the N newest {form} of the --inputs folder")  # fmt: skip
    parser.add_argument(
        "--checkpoint-upper-bound", type=int, metavar="K",
        help="with --num-*-checkpoints: only checkpoints of at most K updates (or epochs)",
    )  # fmt: skip
    return parser


@said_when_interrupted
@quiet_when_output_closes
def main(argv: Optional[List[str]] = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.checkpoint_upper_bound is not None and not (
        args.num_update_checkpoints or args.num_epoch_checkpoints
    ):
        parser.error("--checkpoint-upper-bound needs --num-update-checkpoints or "
                     "--num-epoch-checkpoints")  # fmt: skip
    log_progress()
    try:
        paths = input_paths(args)
        problem = output_problem(args.output, paths)
        if problem:
            raise UsageError(f"--output {args.output or repr(args.output)}: {problem}")
        logger.info("averaging %d checkpoint(s): %s", len(paths), ", ".join(paths))
        save(average(paths), written_to(args.output))
    except UsageError as err:  # a CheckpointError among them
        sys.exit(f"{PROG}: error: {err}")
    logger.info("wrote %s, the average of %d checkpoint(s)", args.output, len(paths))


if __name__ == "__main__":
    main()
