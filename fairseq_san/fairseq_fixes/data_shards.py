"""Sharded data (``fairseq-train DATA1:DATA2:...``, one folder an epoch in turn) is checked when a
run starts, not an epoch later.

Upstream behaviour corrected: fairseq reads the dictionaries of the first folder alone and every
shard's token ids by them, so a shard binarized with other dictionaries trained (or was decoded)
on other words, silently: a translation or language-modelling task set up on shards refuses, in
one line (``check_shard_dictionaries``), a shard whose dictionary file holds other words than the
first folder's (a shard without the file is not checked). And fairseq-train loads shard K's
training split at epoch K only: a shard without it stopped the run there ("Dataset not found"),
after the epochs before it had trained, hours on real data; the trainer's first training batches
are now refused, in one line (``check_shard_splits``), while any shard lacks the split.
"""

import functools
import os
from typing import List

from fairseq_san.errors import UsageError
from fairseq_san.fairseq_fixes.dictionary_words import (
    dictionary_file,
    file_words,
    first_difference,
    task_dictionaries,
    task_option,
)
from fairseq_san.fairseq_fixes.wrapping import wrap_once


# How a shard of no name is shown: fairseq splits "DATA1:" into DATA1 and "".
EMPTY_NAME = "no name: DATA ends in ':' or holds '::'"


def shard_folders(task) -> List[str]:
    """The folders of the task's data, as fairseq splits it (``os.pathsep``); one for unsharded."""
    from fairseq import utils

    data = task_option(task, "data")
    return utils.split_paths(data) if isinstance(data, str) else []


def check_shard_dictionaries(task) -> None:
    """Refuse a data shard (DATA2, DATA3... of the task's data) whose dictionary file holds other
    words than the first folder's, whose dictionaries fairseq reads every shard's ids by."""
    folders = shard_folders(task)
    if len(folders) < 2:  # one folder: no shard to compare
        return
    for name in task_dictionaries(task):
        file = dictionary_file(name, task)
        first = file_words(os.path.join(folders[0], file))
        if first is None:  # not a file fairseq-preprocess named: nothing to compare with
            continue
        for number, folder in enumerate(folders[1:], start=2):
            path = os.path.join(folder, file)
            words = file_words(path) if os.path.isfile(path) else None
            if words is not None and words != first:
                where = first_difference(first, words, ("the first's", "the shard's"))
                raise UsageError(
                    f"data shard {number} ({folder}): its {file} holds other words than the "
                    f"first folder's ({folders[0]}), {where}; fairseq "
                    "reads every shard by the first folder's dictionaries: binarize each shard "
                    "with fairseq-preprocess --srcdict/--tgtdict (--srcdict for a language "
                    "model's) of the first folder's dictionaries"
                )


def split_prefixes(task, split: str) -> List[str]:
    """The names fairseq's task reads ``split`` by in a data folder (any one will do): a
    translation's source side in either direction of its pair, a language model's split."""
    source, target = task_option(task, "source_lang"), task_option(task, "target_lang")
    if source and target:
        return [f"{split}.{source}-{target}.{source}", f"{split}.{target}-{source}.{source}"]
    return [split]


def check_shard_splits(task, split: str) -> None:
    """Refuse data shards of which one lacks the training ``split``: fairseq-train would stop at
    the epoch that reads it."""
    from fairseq.data import indexed_dataset

    folders = shard_folders(task)
    if len(folders) < 2:
        return
    implementation, prefixes = task_option(task, "dataset_impl"), split_prefixes(task, split)
    # --dataset-impl raw reads the text file itself: ".bin and .idx" named files it never reads
    files = prefixes[0] if implementation == "raw" else f"{prefixes[0]}.bin and .idx"
    for number, folder in enumerate(folders, start=1):
        if not any(indexed_dataset.dataset_exists(os.path.join(folder, prefix), implementation)
                   for prefix in prefixes):  # fmt: skip
            raise UsageError(
                f"data shard {number} ({folder or EMPTY_NAME}) holds no {split} split ({files}): "
                f"fairseq-train reads shard {number} at epoch {number} and would stop there; "
                "binarize the split into every shard of DATA, or leave that folder out"
            )


def _checking_the_shards(setup_task):
    """A task's ``setup_task``, refusing shards of other dictionaries than the first folder's."""

    @functools.wraps(setup_task)
    def wrapper(cls, *args, **kwargs):
        task = setup_task(cls, *args, **kwargs)
        check_shard_dictionaries(task)
        return task

    return wrapper


def _checking_the_splits(get_train_iterator):
    """The trainer's ``get_train_iterator``, refusing shards without the training split."""

    @functools.wraps(get_train_iterator)
    def wrapper(self, *args, **kwargs):
        from fairseq.tasks.language_modeling import LanguageModelingTask
        from fairseq.tasks.translation import TranslationTask

        if isinstance(self.task, (TranslationTask, LanguageModelingTask)):
            check_shard_splits(self.task, self.cfg.dataset.train_subset)
        return get_train_iterator(self, *args, **kwargs)

    return wrapper


def install() -> None:
    """Check a translation's and a language model's shards' dictionaries at task setup, and
    that every shard holds the training split when fairseq-train asks for its batches."""
    from fairseq.tasks.language_modeling import LanguageModelingTask
    from fairseq.tasks.translation import TranslationTask
    from fairseq.trainer import Trainer

    for task_class in (TranslationTask, LanguageModelingTask):
        wrap_once(task_class, "setup_task", _checking_the_shards)
    wrap_once(Trainer, "get_train_iterator", _checking_the_splits)
