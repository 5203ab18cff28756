"""Loading fairseq checkpoints with torch's safe loader, and one line when one cannot be loaded.

torch >= 2.6 loads with ``weights_only=True`` by default: only tensors, containers and the
globals on its allow-list are unpickled, so unpickling a checkpoint cannot run code. A fairseq checkpoint
(fairseq's ``--arch transformer`` as well as ours) needs exactly one global beyond torch's set,
``argparse.Namespace`` (its ``cfg.model``); ``allow_fairseq_checkpoints()``, run when the plugin
registers with fairseq, allows it, so that no command needs ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1``,
which switches the safe loader off for the whole process.

It also wraps ``fairseq.checkpoint_utils.load_checkpoint_to_cpu``, through which every fairseq
command (generate, validate, interactive, train's ``--restore-file``, the hub's
``from_pretrained``) and our benchmark load checkpoints, and ``load_model_ensemble_and_task``,
which refuses a missing file before reading it: a file that cannot be loaded because it is
missing, a directory, empty, truncated (not a complete ``torch.save`` archive) or holds a global
outside the allow-list raises ``CheckpointError``, one line naming the file and the problem, which the
plugin prints as ``fairseq-san: error: ...``. Other failures propagate unchanged. A loaded
checkpoint whose configuration holds a string that fairseq would ``eval()`` and that is not a
literal is refused there too, before any model is built
(``fairseq_san.fairseq_fixes.literal_eval``): the safe loader lets such strings through.

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
from fairseq_san.fairseq_fixes.literal_eval import refuse_code_in

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
    if os.path.isdir(path):
        return "it is a directory; a checkpoint is a file (for example DIR/checkpoint_best.pt)"
    if not os.path.exists(path):
        return "no such file" if isinstance(error, OSError) else None
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
def explained(*paths: str) -> Iterator[None]:
    """Turn a failure to load ``paths`` into a CheckpointError when one of the files explains it."""
    try:
        yield
    except CheckpointError:
        raise
    except Exception as error:
        for path in paths:
            problem = problem_with(path, error)
            if problem is not None:
                raise CheckpointError(f"cannot load checkpoint {path}: {problem}") from error
        raise


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
            state = load_checkpoint_to_cpu(path, *args, **kwargs)
        refuse_code_in(path, state)
        return state

    wrapper.explains_failures = True
    return wrapper


def _explaining_ensemble(load_model_ensemble_and_task):
    """fairseq's ensemble loader (generate, interactive, validate, the hub), which checks that
    each file exists before ``load_checkpoint_to_cpu`` reads it, explaining a missing one."""

    @functools.wraps(load_model_ensemble_and_task)
    def wrapper(filenames, *args, **kwargs):
        with explained(*filenames):
            return load_model_ensemble_and_task(filenames, *args, **kwargs)

    wrapper.explains_failures = True
    return wrapper


def allow_fairseq_checkpoints() -> None:
    """Let torch's safe loader load fairseq checkpoints; explain failures (idempotent)."""
    from fairseq import checkpoint_utils  # here: importing fairseq is what runs this

    allow_fairseq_globals()
    for name, explaining in (
        ("load_checkpoint_to_cpu", _explaining),
        ("load_model_ensemble_and_task", _explaining_ensemble),
    ):
        load = getattr(checkpoint_utils, name)
        if not getattr(load, "explains_failures", False):
            setattr(checkpoint_utils, name, explaining(load))
