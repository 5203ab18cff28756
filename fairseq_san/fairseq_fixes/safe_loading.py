"""fairseq's checkpoints through torch's safe loader, explained in one line, with no code run.

Upstream behaviour corrected: ``fairseq.checkpoint_utils.load_checkpoint_to_cpu`` calls
``torch.load`` without ``weights_only``; since torch 2.6 (pytorch/pytorch#137602) that means the
safe loader, which refuses every fairseq checkpoint: its ``cfg.model`` is an
``argparse.Namespace``, not on torch's allow-list. ``install()`` allows exactly that global, and
numpy's names as stand-ins that record arrays and scalars as data (``fairseq_san.safe_numpy``: the
translation task's BLEU statistics of ``--eval-bleu``, kept in the checkpoint's metrics, are numpy
arrays; such a checkpoint could neither resume nor decode), so no command needs
``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1``, which would switch the safe loader off for the whole
process.

It also wraps ``load_checkpoint_to_cpu``, through which every fairseq command (generate,
validate, interactive, train's ``--restore-file`` and ``--finetune-from-model``, the hub's
``from_pretrained``) and our benchmark load checkpoints, and ``load_model_ensemble_and_task``,
which refuses a missing file before reading it: a file that cannot be loaded is one line naming
it (``fairseq_san.checkpoints.explained``), and a loaded checkpoint whose configuration holds a
string that fairseq would ``eval()`` and that is not a literal is refused before any model is
built (``literal_eval.refuse_code_in``): the safe loader lets such strings through; so is one
whose stored ``san_policy`` names a file (``checkpoints.refuse_policy_file_in``) or that stores
a folder for the analysis to write to (``checkpoints.refuse_analysis_dir_in``) or BLEU
validation options that are no JSON (``checkpoints.refuse_eval_bleu_args_in``); the
pretrained-embedding files it names are not read (``checkpoints.drop_embedding_files_in``: its
weights replace them), and one whose configuration holds an omegaconf interpolation
(``checkpoints.refuse_interpolations_in``: fairseq saves its configuration resolved; an override
holding one is named first, ``namespace_overrides.check_no_interpolated_override``), asks for
more layers than its weights hold (``checkpoints.refuse_layers_beyond_weights_in``: fairseq
builds them all first) or wider ones, or a width or number of positions that no memory holds
(``checkpoints.refuse_sizes_beyond_weights_in``), holds a value a plugin model's option would not
take (``checkpoints.refuse_stored_values_in``) or weights that are no tensors
(``checkpoints.refuse_weights_that_are_not_in``) is refused, as is, before torch reads it, a
file whose pickle calls what makes memory of any size (``checkpoints.refuse_before_reading``:
torch's own allow-list has ``bytearray``). Where the safe loader would not be used
(torch before 2.6, or ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`` set), no checkpoint is read at all
(``checkpoints.check_safe_loading``), by either of fairseq's readers (``load_ema_from_checkpoint``,
for ``--ema-seed-model``, calls ``torch.load`` itself).
"""

import argparse
import functools
from typing import List

import torch

from fairseq_san.checkpoints import (
    CheckpointError,
    SharedConfiguration,
    VocabularyMismatch,
    check_safe_loading,
    drop_embedding_files_in,
    explained,
    numpy_restored_in,
    refuse_analysis_dir_in,
    refuse_before_reading,
    refuse_eval_bleu_args_in,
    refuse_interpolations_in,
    refuse_layers_beyond_weights_in,
    refuse_malformed_in,
    refuse_non_finite_weights_in,
    refuse_sizes_beyond_weights_in,
    refuse_stored_values_in,
    refuse_policy_file_in,
    refuse_weights_that_are_not_in,
)
from fairseq_san.errors import UsageError
from fairseq_san.fairseq_fixes.literal_eval import refuse_code_in
from fairseq_san.fairseq_fixes.namespace_overrides import check_no_interpolated_override
from fairseq_san.fairseq_fixes.wrapping import wrap_once
from fairseq_san.pickled_fields import shared_container
from fairseq_san.safe_numpy import STAND_INS

def fairseq_globals() -> List[object]:
    """What fairseq's checkpoints hold beyond tensors and Python's containers: the
    ``argparse.Namespace`` of ``cfg.model``, and numpy's arrays and scalars (``--eval-bleu``'s
    statistics), whose names stand for records that ``safe_numpy.numpy_restored`` makes numpy's
    values of numbers after loading (numpy's own constructors would run from the pickle)."""
    return [argparse.Namespace, *STAND_INS]


def allow_fairseq_globals() -> None:
    """Add what fairseq checkpoints need to torch's safe loader's allow-list (idempotent)."""
    allowed = torch.serialization.get_safe_globals()
    torch.serialization.add_safe_globals([g for g in fairseq_globals() if g not in allowed])


def _explaining(load_checkpoint_to_cpu):
    @functools.wraps(load_checkpoint_to_cpu)
    def wrapper(path, arg_overrides=None, *args, **kwargs):
        check_safe_loading()
        if arg_overrides is not None and not isinstance(arg_overrides, dict):
            raise UsageError(  # fairseq would fail on its .items() deep inside
                f"--model-overrides {arg_overrides!r}: must be a dict, e.g. \"{{'beam': 4}}\""
            )
        check_no_interpolated_override(arg_overrides or {})  # else blamed on the checkpoint
        refuse_before_reading(path)
        with explained(path):
            state = load_checkpoint_to_cpu(path, arg_overrides, *args, **kwargs)
        state = numpy_restored_in(path, state)
        refuse_malformed_in(path, state)
        refuse_code_in(path, state)
        refuse_interpolations_in(path, state)
        refuse_layers_beyond_weights_in(path, state)
        refuse_sizes_beyond_weights_in(path, state)
        refuse_stored_values_in(path, state)
        refuse_weights_that_are_not_in(path, state)
        refuse_non_finite_weights_in(path, state)
        refuse_policy_file_in(path, state, arg_overrides)
        refuse_analysis_dir_in(path, state, arg_overrides)
        refuse_eval_bleu_args_in(path, state)
        drop_embedding_files_in(path, state, arg_overrides)
        return state

    return wrapper


def _explaining_ensemble(load_model_ensemble_and_task):
    """fairseq's ensemble loader (generate, interactive, validate, the hub), which checks that
    each file exists before ``load_checkpoint_to_cpu`` reads it, explaining a missing one; a
    checkpoint of other dictionaries is named."""

    @functools.wraps(load_model_ensemble_and_task)
    def wrapper(filenames, *args, **kwargs):
        try:
            with explained(*filenames):
                return load_model_ensemble_and_task(filenames, *args, **kwargs)
        except VocabularyMismatch as error:  # the model that raised it does not know its file
            raise VocabularyMismatch(f"checkpoint {', '.join(filenames)}: {error}") from None

    return wrapper


def _loading_ema_safely(load_ema_from_checkpoint):
    """fairseq's other reader of checkpoints, ``load_ema_from_checkpoint`` (fairseq-train
    ``--store-ema --ema-seed-model FILE``), refused where the safe loader would not be used: it
    calls ``torch.load`` itself, so with ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`` set the file ran
    the code it named; a file it cannot load is one line naming it, and so is a checkpoint
    trained without ``--store-ema`` (a ``KeyError: 'ema'`` traceback)."""

    @functools.wraps(load_ema_from_checkpoint)
    def wrapper(path, *args, **kwargs):
        check_safe_loading()
        refuse_before_reading(path)
        with explained(path):
            try:
                return load_ema_from_checkpoint(path, *args, **kwargs)
            except (KeyError, ValueError) as error:
                if not holds_no_ema(error):
                    raise
                raise CheckpointError(
                    f"--ema-seed-model {path}: the checkpoint holds no EMA weights (it was "
                    "trained without --store-ema); start from its weights with "
                    "--finetune-from-model instead"
                ) from None

    return wrapper


def holds_no_ema(error: Exception) -> bool:
    """Whether ``load_ema_from_checkpoint`` failed for want of EMA weights: no
    ``extra_state['ema']`` (a KeyError), or an empty one (fairseq's ValueError)."""
    if isinstance(error, KeyError):
        return error.args in (("ema",), ("extra_state",))
    return "does not contain ema model weights" in str(error)


def _refusing_shared_containers(omegaconf: type) -> type:
    """The OmegaConf of ``checkpoint_utils`` (where ``load_checkpoint_to_cpu`` makes a loaded
    checkpoint's configuration one), whose ``create`` first refuses a configuration holding one
    dict, list or tuple at two places (``pickled_fields.shared_container``): omegaconf copies it
    at every place, so lists of lists shared at 40 levels, a kilobyte, hung fairseq's loader."""

    class CheckedOmegaConf(omegaconf):
        @staticmethod
        def create(*args, **kwargs):
            second_place = shared_container(args[0], "cfg") if args else None
            if second_place is not None:
                raise SharedConfiguration(second_place)
            return omegaconf.create(*args, **kwargs)

    return CheckedOmegaConf


def _refusing_shared_arguments(upgrade_state_dict):
    """fairseq's upgrade of a checkpoint saved before its dataclass configurations (``args``, no
    ``cfg``), which first refuses arguments holding one dict, list or tuple at two places, as
    ``_refusing_shared_containers`` does for ``cfg``: the upgrade writes every argument out as
    text (``convert_namespace_to_omegaconf``), a shared list 18 levels deep in a 1 MB file
    took longer than 300 s."""

    @functools.wraps(upgrade_state_dict)
    def wrapper(state, *args, **kwargs):
        arguments = state.get("args") if isinstance(state, dict) else None
        if isinstance(arguments, argparse.Namespace):
            second_place = shared_container(vars(arguments), "args")
            if second_place is not None:
                raise SharedConfiguration(second_place)
        return upgrade_state_dict(state, *args, **kwargs)

    return wrapper


def install() -> None:
    """Let torch's safe loader load fairseq checkpoints; explain failures (idempotent)."""
    from fairseq import checkpoint_utils  # here: importing fairseq is what runs this

    allow_fairseq_globals()
    wrap_once(checkpoint_utils, "OmegaConf", _refusing_shared_containers)
    wrap_once(checkpoint_utils, "_upgrade_state_dict", _refusing_shared_arguments)
    wrap_once(checkpoint_utils, "load_checkpoint_to_cpu", _explaining)
    wrap_once(checkpoint_utils, "load_model_ensemble_and_task", _explaining_ensemble)
    wrap_once(checkpoint_utils, "load_ema_from_checkpoint", _loading_ema_safely)
