"""fairseq-train refuses a ``--restore-file`` or ``--finetune-from-model`` that is not there.

Upstream behaviour corrected: ``fairseq.checkpoint_utils.load_checkpoint`` treats a
``--restore-file`` other than its default (``checkpoint_last.pt`` in ``--save-dir``) that does
not exist as "No existing checkpoint found" and trains from scratch, so a mistyped path silently
throws away the run it meant to continue; a missing ``--finetune-from-model`` is a ``ValueError``
traceback. Either is now one line naming the flag (``UsageError``) before anything is trained.
"""

import functools
import os

from fairseq_san.errors import UsageError
from fairseq_san.fairseq_fixes.wrapping import wrap_once

DEFAULT_RESTORE_FILE = "checkpoint_last.pt"  # fairseq's default: SAVE_DIR/checkpoint_last.pt


def check_checkpoint_flags(cfg, suffix: str = "") -> None:
    """UsageError for a restore or fine-tuning checkpoint that fairseq would look for in vain."""
    restore = cfg.restore_file
    if restore != DEFAULT_RESTORE_FILE:
        path = restore.replace(".pt", suffix + ".pt") if suffix else restore
        if not os.path.isfile(path):
            raise UsageError(
                f"--restore-file {path}: no such file (fairseq would train from scratch); leave "
                f"the flag out to resume from --save-dir's {DEFAULT_RESTORE_FILE}"
            )
    last = os.path.join(cfg.save_dir, f"checkpoint_last{suffix}.pt")
    finetune = cfg.finetune_from_model
    if finetune and restore == DEFAULT_RESTORE_FILE and not os.path.exists(last):
        if not os.path.isfile(finetune):
            raise UsageError(f"--finetune-from-model {finetune}: no such file")


def _checking(load_checkpoint):
    @functools.wraps(load_checkpoint)
    def wrapper(cfg, trainer, **passthrough_args):
        check_checkpoint_flags(cfg, trainer.checkpoint_suffix or "")
        return load_checkpoint(cfg, trainer, **passthrough_args)

    return wrapper


def install() -> None:
    """Check fairseq-train's checkpoint flags before it loads (idempotent)."""
    from fairseq import checkpoint_utils

    wrap_once(checkpoint_utils, "load_checkpoint", _checking)
