"""fairseq-train holds its ``--save-dir`` for the whole run: a second run on that folder is refused.

Upstream behaviour corrected: fairseq-train takes no lock on ``--save-dir``. Two runs given one
folder both resumed from and saved to its ``checkpoint_last.pt`` through one temporary file
(``checkpoint_last.pt.tmp``): one died with "checkpoint_last.pt.tmp: No such file or directory"
(the other had renamed it), or both finished "normally" with checkpoints that mix their saves,
silently. Now rank 0 (fairseq's master, which saves; other ranks do not) locks ``LOCK`` in the
folder (``flock``) before it reads the checkpoint it resumes from, for as long as its process
lives, and writes its pid there; a second run is one line naming the folder and that pid.
``--no-save`` runs write nothing and take no lock. A flock belongs to the open file: the system
releases it however the process ends (exit, crash, kill), so a lock file left behind blocks no
one. A forked child (the data loader's ``--num-workers``, 1 by default) shares that open file:
it closes its copy at once, or a run started just after a SIGKILL was refused for the seconds the
orphaned workers outlive it, naming a pid that is gone. The learn-to-share loop's fairseq-train
holds its run folder's ``RUN/.lock`` besides (``loop.run_record``): another file.
"""

import fcntl
import functools
import logging
import os
from typing import Dict

from fairseq_san.errors import UsageError
from fairseq_san.fairseq_fixes.wrapping import wrap_once

logger = logging.getLogger(__name__)

LOCK = ".fairseq-train.lock"
_held: Dict[str, int] = {}  # folder (its real path) -> the descriptor of its lock, kept open


def _release_in_child() -> None:
    """Close, in a forked child, its copies of the lock descriptors: the lock is the parent's."""
    for fd in _held.values():
        os.close(fd)
    _held.clear()


os.register_at_fork(after_in_child=_release_in_child)


def lock_save_dir(save_dir: str) -> None:
    """Lock ``save_dir``'s ``LOCK`` for the rest of this process (again: nothing), writing its
    pid there; UsageError where another process holds it."""
    folder = os.path.realpath(save_dir)
    if folder in _held:
        return
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, LOCK)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
        os.close(fd)
        pid = f", pid {holder}" if holder.isdigit() else ""
        raise UsageError(
            f"--save-dir {save_dir} is in use by another fairseq-train ({path} is locked{pid}): "
            "two runs would save over each other's checkpoints; wait for it to end or stop it, "
            "or give this run another --save-dir"
        ) from None
    except OSError as error:  # a file system without locks (some network ones): run unlocked
        os.close(fd)
        logger.warning(f"--save-dir {save_dir} cannot be locked ({error}): not held")
        return
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    _held[folder] = fd


def _locking(load_checkpoint):
    @functools.wraps(load_checkpoint)
    def wrapper(cfg, trainer, **passthrough_args):
        from fairseq.distributed import utils as distributed_utils

        # A program's partial config (fairseq's tests') may lack no_save, which fairseq's
        # load_checkpoint never reads, or hold no save_dir: nothing to lock then.
        saving = not getattr(cfg, "no_save", False) and getattr(cfg, "save_dir", None)
        if saving and distributed_utils.is_master(trainer.cfg.distributed_training):
            lock_save_dir(cfg.save_dir)
        return load_checkpoint(cfg, trainer, **passthrough_args)

    return wrapper


def install() -> None:
    """Lock fairseq-train's ``--save-dir`` before it loads its checkpoint (idempotent)."""
    from fairseq import checkpoint_utils

    wrap_once(checkpoint_utils, "load_checkpoint", _locking)
