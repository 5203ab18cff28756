"""Our loading of checkpoints: one line naming the file when one cannot be loaded; the plugin's stamp.

A file that cannot be loaded because it is missing, a directory, empty, truncated (not a complete
``torch.save`` archive) or holds a global outside torch's safe allow-list raises
``CheckpointError`` (``explained``), one line naming the file and the problem, which the plugin
prints as ``fairseq-san: error: ...``; other failures propagate unchanged. fairseq's own loaders
get the same explanations from ``fairseq_san.fairseq_fixes.safe_loading``. ``load_state`` is the
plugin's own loader (the loop's summary), with torch's safe loader.

Checkpoints made with the plugin carry its name and version (``PLUGIN``) in ``cfg.model.plugin``
(``stamp``), so that a checkpoint says what it needs to be loaded. fairseq's own error cannot
say it: loading a SAN checkpoint without the plugin first fails in torch's safe loader (nothing
allowed ``argparse.Namespace``), and where the file is read (the safe loader off, or a fairseq
that loads with ``weights_only=False``) ``fairseq.models.build_model`` formats its "Could not
infer model type" message with ``str.format`` over the model config's text, whose ``'{}'``
values (fairseq's ``eval_bleu_args``, ``optimizer_overrides``) raise ``IndexError: Replacement
index 1 out of range`` before anything is printed. docs/troubleshooting.md explains both.
"""

import argparse
import contextlib
import os
import pickle
import zipfile
from typing import Iterator, Optional

import torch

import fairseq_san
from fairseq_san.errors import UsageError

PLUGIN = f"fairseq-san {fairseq_san.__version__}"


class CheckpointError(UsageError):
    """A checkpoint that cannot be loaded, said in one line."""


class VocabularyMismatch(UsageError):
    """A checkpoint trained with other dictionaries than the data's (fairseq's loader, which
    knows the file, adds its path: ``fairseq_fixes.safe_loading``)."""


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


def load_state(path: str) -> dict:
    """A checkpoint's contents on the CPU, with torch's safe loader (memory-mapped if possible)."""
    from fairseq_san.fairseq_fixes.safe_loading import allow_fairseq_globals

    allow_fairseq_globals()
    with explained(path):
        return torch.load(path, map_location="cpu", mmap=zipfile.is_zipfile(path))
