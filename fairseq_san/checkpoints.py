"""Loading fairseq checkpoints with torch's safe loader, and one line when one cannot be loaded.

torch >= 2.6 loads with ``weights_only=True`` by default: only tensors, containers and the
globals on its allow-list are unpickled, so a checkpoint cannot run code. A fairseq checkpoint
(fairseq's ``--arch transformer`` as well as ours) needs exactly one global beyond torch's set,
``argparse.Namespace`` (its ``cfg.model``); ``allow_fairseq_checkpoints()``, run when the plugin
registers with fairseq, allows it, so that no command needs ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1``,
which switches the safe loader off for the whole process.

It also wraps ``fairseq.checkpoint_utils.load_checkpoint_to_cpu``, through which every fairseq
command (generate, validate, interactive, train's ``--restore-file``, the hub's
``from_pretrained``) and our benchmark load checkpoints: a file that cannot be loaded because it
is empty, truncated (not a complete ``torch.save`` archive) or holds a global outside the
allow-list raises ``CheckpointError``, one line naming the file and the problem, which the
plugin prints as ``fairseq-san: error: ...``. Other failures propagate unchanged.

Checkpoints made with the plugin carry its name and version (``PLUGIN``) in ``cfg.model.plugin``
(``stamp``), so that a checkpoint says what it needs to be loaded. fairseq's own error cannot
say it: loading a SAN checkpoint without the plugin first fails in torch's safe loader (nothing
allowed ``argparse.Namespace``), and where the file is read (the safe loader off, or a fairseq
that loads with ``weights_only=False``) ``fairseq.models.build_model`` formats its "Could not
infer model type" message with ``str.format`` over the model config's text, whose ``'{}'``
values (fairseq's ``eval_bleu_args``, ``optimizer_overrides``) raise ``IndexError: Replacement
index 1 out of range`` before anything is printed. The README's troubleshooting explains both.
"""

import argparse
import contextlib
import functools
import os
import pickle
import zipfile
from typing import Iterator, Optional

import torch

import fairseq_san
from fairseq_san.errors import UsageError

FAIRSEQ_GLOBALS = [argparse.Namespace]
PLUGIN = f"fairseq-san {fairseq_san.__version__}"


class CheckpointError(UsageError):
    """A checkpoint that cannot be loaded, said in one line."""


def stamp(args) -> None:
    """Record the plugin in a model's (argparse) configuration, which fairseq saves as cfg.model."""
    if isinstance(args, argparse.Namespace):
        args.plugin = PLUGIN


def problem_with(path: str, error: Exception) -> Optional[str]:
    """Why loading the file at ``path`` failed with ``error``, or None if the file does not say."""
    if not os.path.isfile(path):
        return None
    if os.path.getsize(path) == 0:
        return "the file is empty (0 bytes; was saving it interrupted?)"
    if not zipfile.is_zipfile(path):
        return "the file is not a complete torch.save archive (truncated, or not a checkpoint)"
    if not isinstance(error, pickle.UnpicklingError):
        return None
    unsafe = torch.serialization.get_unsafe_globals_in_checkpoint(path)
    if unsafe:
        return (
            f"it contains {', '.join(unsafe)}, which torch's safe loader (weights_only) refuses; "
            "fairseq checkpoints need only argparse.Namespace, which fairseq-san allows. Load it "
            "only if you trust its source, with TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1"
        )
    return None


@contextlib.contextmanager
def explained(path: str) -> Iterator[None]:
    """Turn a failure to load ``path`` into a CheckpointError when the file itself explains it."""
    try:
        yield
    except CheckpointError:
        raise
    except Exception as error:
        problem = problem_with(path, error)
        if problem is None:
            raise
        raise CheckpointError(f"cannot load checkpoint {path}: {problem}") from error


def allow_fairseq_globals() -> None:
    """Add what fairseq checkpoints need to torch's safe loader's allow-list (idempotent)."""
    missing = [g for g in FAIRSEQ_GLOBALS if g not in torch.serialization.get_safe_globals()]
    torch.serialization.add_safe_globals(missing)


def load_state(path: str) -> dict:
    """A checkpoint's contents on the CPU, with torch's safe loader (memory-mapped if possible)."""
    allow_fairseq_globals()
    with explained(path):
        return torch.load(path, map_location="cpu", mmap=zipfile.is_zipfile(path))


def _explaining(load_checkpoint_to_cpu):
    @functools.wraps(load_checkpoint_to_cpu)
    def wrapper(path, *args, **kwargs):
        with explained(path):
            return load_checkpoint_to_cpu(path, *args, **kwargs)

    wrapper.explains_failures = True
    return wrapper


def allow_fairseq_checkpoints() -> None:
    """Let torch's safe loader load fairseq checkpoints; explain failures (idempotent)."""
    from fairseq import checkpoint_utils  # here: importing fairseq is what runs this

    allow_fairseq_globals()
    if not getattr(checkpoint_utils.load_checkpoint_to_cpu, "explains_failures", False):
        checkpoint_utils.load_checkpoint_to_cpu = _explaining(
            checkpoint_utils.load_checkpoint_to_cpu
        )
