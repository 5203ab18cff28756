"""fairseq-train refuses a ``--restore-file`` or ``--finetune-from-model`` that is not there.

Upstream behaviour corrected: ``fairseq.checkpoint_utils.load_checkpoint`` treats a
``--restore-file`` other than its default (``checkpoint_last.pt`` in ``--save-dir``) that does
not exist as "No existing checkpoint found" and trains from scratch, so a mistyped path silently
throws away the run it meant to continue; a missing ``--finetune-from-model`` is a ``ValueError``
traceback. Either is now one line naming the flag (``UsageError``) before anything is trained.
So are ``--finetune-from-model`` with ``--restore-file`` or a ``--reset-*`` flag (fairseq's
``ValueError`` tracebacks, one printing the whole configuration), and a checkpoint whose
optimizer state is for other parameters than the model's (a run resumed with flags that build
another model, e.g. without ``--share-all-embeddings``: torch's "parameter group that doesn't
match" traceback; ``--reset-optimizer`` goes on in the new model), and a learning-rate
scheduler's state that this run's ``--lr-scheduler`` cannot read (``fixed``'s, resumed with
``inverse_sqrt``: fairseq's ``KeyError: 'best'`` traceback); a policy that shares more
than the checkpoint being resumed is refused before
(``models.checkpoint_policy.check_resumed_sharing``). A run resumed in the direction opposite
to its checkpoint's (``-s de -t en`` in the save dir of an En->De run: on joined dictionaries
fairseq trained on) is refused in one line
(``option_checks.check_resumed_language_pair``); so is a resume or fine-tune on data whose
dictionaries hold other words than the checkpoint records (``dictionary_words``). While the
``--finetune-from-model`` checkpoint loads, the plugin's models start from it under any policy
(``models.checkpoint_policy.fine_tuning``). A ``--finetune-from-model`` that fairseq does not read
(``--save-dir`` has a run to resume, which it resumes) is logged, naming what it resumes.
"""

import contextlib
import functools
import logging
import os
from typing import Optional

from fairseq_san import checkpoints
from fairseq_san.errors import UsageError
from fairseq_san.fairseq_fixes.dictionary_words import check_dictionaries
from fairseq_san.fairseq_fixes.wrapping import wrap_once
from fairseq_san.options import flag_of

logger = logging.getLogger(__name__)
DEFAULT_RESTORE_FILE = "checkpoint_last.pt"  # fairseq's default: SAVE_DIR/checkpoint_last.pt
RESETS = ("reset_optimizer", "reset_lr_scheduler", "reset_meters", "reset_dataloader")
# torch's error when an optimizer state has other parameter groups than the optimizer's.
OPTIMIZER_MISMATCH = "loaded state dict contains a parameter group that doesn't match the size"


def last_checkpoint(cfg, suffix: str) -> str:
    """``--save-dir``'s last checkpoint, which fairseq-train resumes from by default."""
    return os.path.join(cfg.save_dir, f"checkpoint_last{suffix}.pt")


def restore_path(cfg, suffix: str) -> str:
    """The file a ``--restore-file`` other than the default names (fairseq adds the suffix)."""
    return cfg.restore_file.replace(".pt", suffix + ".pt") if suffix else cfg.restore_file


def restore_advice(cfg, path: str) -> str:
    """What to pass for a ``--restore-file`` ``path`` that is not there: ``--save-dir``'s file of
    that name where it has one (fairseq reads a relative path from the working directory)."""
    in_save_dir = os.path.join(cfg.save_dir, path)
    if not os.path.isabs(path) and os.path.isfile(in_save_dir):
        return (f"fairseq reads it from the working directory, not --save-dir: pass "
                f"--restore-file {in_save_dir}")  # fmt: skip
    return f"leave the flag out to resume from --save-dir's {DEFAULT_RESTORE_FILE}"


def check_checkpoint_flags(cfg, suffix: str, starts_fine_tuning: bool) -> None:
    """UsageError for a restore or fine-tuning checkpoint that fairseq would look for in vain;
    ``starts_fine_tuning`` is ``fine_tunes(cfg, suffix)``, which the caller has asked."""
    restore = cfg.restore_file
    if restore != DEFAULT_RESTORE_FILE:
        path = restore_path(cfg, suffix)
        if not os.path.isfile(path):
            raise UsageError(
                f"--restore-file {path}: no such file (fairseq would train from scratch); "
                f"{restore_advice(cfg, path)}"
            )
    finetune = cfg.finetune_from_model
    if finetune and restore != DEFAULT_RESTORE_FILE:
        raise UsageError(
            f"--finetune-from-model {finetune} and --restore-file {restore} both name the "
            "checkpoint to start from: give one (--restore-file resumes a run, "
            "--finetune-from-model starts a new one from a checkpoint's weights)"
        )
    resets = [flag for flag in RESETS if getattr(cfg, flag, False)]
    if finetune and resets:
        raise UsageError(
            f"--finetune-from-model resets the optimizer, learning-rate scheduler, meters and "
            f"data loader itself: drop {' '.join(flag_of(flag) for flag in resets)}"
        )
    if starts_fine_tuning and not os.path.isfile(finetune):
        raise UsageError(f"--finetune-from-model {finetune}: no such file")


def fine_tunes(cfg, suffix: str = "") -> bool:
    """Whether fairseq-train starts from ``--finetune-from-model``: given, no run to resume
    (``--save-dir``'s ``checkpoint_last.pt``) and no ``--continue-once`` (which fairseq prefers)."""
    first_launch = not os.path.exists(last_checkpoint(cfg, suffix))
    first_launch = first_launch and getattr(cfg, "continue_once", None) is None
    return bool(cfg.finetune_from_model) and first_launch


def resumed_checkpoint(cfg, suffix: str) -> Optional[str]:
    """The checkpoint fairseq-train resumes from when it does not fine-tune: ``--restore-file``,
    else ``--save-dir``'s last one, else ``--continue-once`` (on a first launch); None if none."""
    if cfg.restore_file != DEFAULT_RESTORE_FILE:
        return restore_path(cfg, suffix)
    last = last_checkpoint(cfg, suffix)
    return last if os.path.isfile(last) else getattr(cfg, "continue_once", None)


def check_start(path: str, task, restarts: bool, fine_tuning: bool) -> None:
    """The checkpoint ``path`` the run resumes or fine-tunes from, checked (its configuration read
    memory-mapped: its weights are read once, by fairseq): its dictionaries' words
    (``dictionary_words.check_dictionaries``) and, for a resume,
    ``option_checks.check_resumed_language_pair``."""
    from fairseq_san.models.option_checks import check_resumed_language_pair

    if task is None or not os.path.isfile(path):
        return  # nothing to resume (fairseq says so of a --continue-once that is not there)
    state = checkpoints.load_state(path)
    check_dictionaries(path, state, task)
    if not fine_tuning:
        stored = checkpoints.stored_value(state, "model", checkpoints.LANGUAGE_PAIR)
        check_resumed_language_pair(path, stored, task, restarts)


def _reading_another_schedulers_state(load_state_dict):
    """A scheduler's ``load_state_dict`` that reads the best loss fairseq's schedulers save
    (``fixed`` and ``manual`` save their learning rate instead), refusing a state without it."""

    @functools.wraps(load_state_dict)
    def wrapper(self, state_dict):
        if "best" not in state_dict:
            name = getattr(self.cfg, "_name", type(self).__name__)
            raise UsageError(
                f"the checkpoint's learning-rate scheduler state ({', '.join(sorted(state_dict))}) "
                f"is of another --lr-scheduler than {name} (fixed or manual: they save their "
                "learning rate, not the best loss): resume with the training's "
                "--lr-scheduler, or pass --reset-lr-scheduler to start this one anew"
            )
        return load_state_dict(self, state_dict)

    return wrapper


def _checking(load_checkpoint):
    @functools.wraps(load_checkpoint)
    def wrapper(cfg, trainer, **passthrough_args):
        from fairseq_san.models.checkpoint_policy import fine_tuning, resuming

        suffix = trainer.checkpoint_suffix or ""
        starts_fine_tuning = fine_tunes(cfg, suffix)
        check_checkpoint_flags(cfg, suffix, starts_fine_tuning)
        resumed = None if starts_fine_tuning else resumed_checkpoint(cfg, suffix)
        if cfg.finetune_from_model and resumed is not None:
            logger.info("--finetune-from-model %s is not read: this run resumes %s (fairseq "
                        "fine-tunes only where --save-dir holds no checkpoint_last.pt)",
                        cfg.finetune_from_model, resumed)  # fmt: skip
        # --reset-dataloader or --reset-meters alone resume a run (fairseq advises the first after
        # a change of data); a new optimizer starts a new one from the checkpoint's weights.
        restarts = bool(getattr(cfg, "reset_optimizer", False))
        start = cfg.finetune_from_model if starts_fine_tuning else resumed
        if start is not None:
            check_start(start, getattr(trainer, "task", None), restarts, starts_fine_tuning)
        if starts_fine_tuning:
            loading = fine_tuning()
        elif resumed is not None:
            loading = resuming(resumed, restarts)
        else:
            loading = contextlib.nullcontext()
        try:
            with loading:
                return load_checkpoint(cfg, trainer, **passthrough_args)
        except ValueError as err:
            if OPTIMIZER_MISMATCH not in str(err):
                raise
            raise UsageError(
                "the checkpoint's optimizer state is for other parameters than this model's: "
                "this run's flags build another model than the training's (its "
                "--share-all-embeddings or --share-decoder-input-output-embed, sizes or sharing "
                "policy): pass the training's flags to resume it; --reset-optimizer would go on "
                "with its weights in this model, with a new optimizer"
            ) from None

    return wrapper


def install() -> None:
    """Check fairseq-train's checkpoint flags, and the pair and words of the checkpoint it starts
    from, before it loads; refuse a scheduler's state that its schedulers cannot read
    (idempotent)."""
    from fairseq import checkpoint_utils
    from fairseq.optim.lr_scheduler.fairseq_lr_scheduler import FairseqLRScheduler
    from fairseq.optim.lr_scheduler.reduce_lr_on_plateau import ReduceLROnPlateauLRSchedule

    wrap_once(checkpoint_utils, "load_checkpoint", _checking)
    for scheduler in (FairseqLRScheduler, ReduceLROnPlateauLRSchedule):
        wrap_once(scheduler, "load_state_dict", _reading_another_schedulers_state)
