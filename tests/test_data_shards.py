"""Sharded data (DATA1:DATA2:..., ``fairseq_fixes.data_shards``): every shard is read by the
first folder's dictionaries and holds the training split, or the run is refused before it trains."""

import os
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Sequence

import pytest

from helpers import run_cli, train_argv


def other_words_shard(data: Path, shard: Path, names: Sequence[str]) -> Path:
    """``data`` copied as ``shard``, its dictionary files ``names`` holding their words in the
    reverse order: a shard binarized with other dictionaries of as many entries."""
    shutil.copytree(data, shard)
    for name in names:
        lines = (shard / name).read_text().splitlines(keepends=True)
        (shard / name).write_text("".join(reversed(lines)))
    return shard


def test_a_data_shard_of_other_dictionaries_is_refused_in_one_line(binarized_corpus, tmp_path):
    """fairseq reads every shard of DATA1:DATA2 by DATA1's dictionaries: a shard binarized with
    others trained on other words than its own, silently."""
    shard = other_words_shard(binarized_corpus, tmp_path / "shard", ["dict.src.txt"])
    data = f"{binarized_corpus}{os.pathsep}{shard}"
    argv = train_argv(data, tmp_path / "run", 3, ["--task", "translation_san"])
    result = run_cli("fairseq-train", *argv)
    words = Path(binarized_corpus, "dict.src.txt").read_text().split()[::2]
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == (
        f"fairseq-san: error: data shard 2 ({shard}): its dict.src.txt holds other words than "
        f"the first folder's ({binarized_corpus}), first at index 4: {words[0]!r} in the "
        f"first's, {words[-1]!r} in the shard's; fairseq reads every shard by the first "
        "folder's dictionaries: binarize each shard with fairseq-preprocess --srcdict/--tgtdict "
        "(--srcdict for a language model's) of the first folder's dictionaries"
    )
    assert not (tmp_path / "run" / "checkpoint_last.pt").exists()


def test_language_model_shards_are_checked_and_shards_of_the_same_words_pass(tmp_path):
    """A language model's dict.txt too; a shard of the same words, or without a dictionary file,
    is not refused."""
    from fairseq.data import Dictionary

    from fairseq_san.errors import UsageError
    from fairseq_san.fairseq_fixes.data_shards import check_shard_dictionaries

    first = tmp_path / "first"
    first.mkdir()
    (first / "dict.txt").write_text("".join(f"w{i} {10 - i}\n" for i in range(6)))
    same = Path(shutil.copytree(first, tmp_path / "same"))
    (tmp_path / "bare").mkdir()
    other = other_words_shard(first, tmp_path / "other", ["dict.txt"])
    dictionary = Dictionary.load(str(first / "dict.txt"))

    def task(*folders: Path) -> SimpleNamespace:
        data = os.pathsep.join(str(folder) for folder in folders)
        return SimpleNamespace(args=SimpleNamespace(data=data), source_dictionary=dictionary,
                               target_dictionary=dictionary)  # fmt: skip

    check_shard_dictionaries(task(first, same, tmp_path / "bare"))
    with pytest.raises(UsageError, match=r"^data shard 3 \(.*other\): its dict.txt holds other"):
        check_shard_dictionaries(task(first, same, other))


def test_a_shard_without_the_training_split_is_refused_before_training(binarized_corpus, tmp_path):
    """fairseq-train loads shard K's training split at epoch K: a shard without it stopped the run
    there ("Dataset not found: train"), after the epochs before it had trained."""
    shard = Path(shutil.copytree(binarized_corpus, tmp_path / "shard"))
    for path in shard.glob("train.*"):
        path.unlink()
    data = f"{binarized_corpus}{os.pathsep}{shard}"
    result = run_cli("fairseq-train", *train_argv(data, tmp_path / "run", 12))  # epoch 1: 4
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == (
        f"fairseq-san: error: data shard 2 ({shard}) holds no train split "
        "(train.src-tgt.src.bin and .idx): fairseq-train reads shard 2 at epoch 2 and would stop "
        "there; binarize the split into every shard of DATA, or leave that folder out"
    )
    assert not (tmp_path / "run" / "checkpoint_last.pt").exists()


def test_shards_of_a_split_in_either_direction_or_of_a_language_model_pass(tmp_path):
    """A translation shard binarized as the reverse pair (train.tgt-src.*) is read by fairseq
    too; a language model's split is train.bin/.idx; one folder is not checked."""
    from fairseq_san.errors import UsageError
    from fairseq_san.fairseq_fixes.data_shards import check_shard_splits

    def folder(name: str, *files: str) -> Path:
        (tmp_path / name).mkdir()
        for file in files:
            (tmp_path / name / file).write_bytes(b"")
        return tmp_path / name

    pair = [f"train.src-tgt.{lang}.{ext}" for lang in ("src", "tgt") for ext in ("bin", "idx")]
    first, reverse = folder("first", *pair), folder("reverse", "train.tgt-src.src.bin",
                                                     "train.tgt-src.src.idx")  # fmt: skip
    lm, bare = folder("lm", "train.bin", "train.idx"), folder("bare", "train.bin")

    def task(*folders: Path, **languages: str) -> SimpleNamespace:
        data = os.pathsep.join(str(path) for path in folders)
        return SimpleNamespace(cfg=SimpleNamespace(data=data, dataset_impl=None, **languages))

    languages = {"source_lang": "src", "target_lang": "tgt"}
    check_shard_splits(task(first, reverse, **languages), "train")
    check_shard_splits(task(lm, lm), "train")
    check_shard_splits(task(bare), "train")
    with pytest.raises(UsageError, match=r"^data shard 3 \(.*bare\) holds no train split \(train\."
                       r"bin and \.idx\)"):  # fmt: skip
        check_shard_splits(task(lm, lm, bare), "train")
    with pytest.raises(UsageError, match=r"^data shard 2 \(no name: DATA ends in ':' or holds "
                       r"'::'\) holds no train split"):  # fmt: skip
        check_shard_splits(task(lm, ""), "train")  # "LM:": it showed "data shard 2 ()"


def test_raw_text_shards_are_named_by_their_text_files(tmp_path):
    """--dataset-impl raw reads train.src-tgt.src itself: a shard holding it passes, and one
    without it was said to lack "train.src-tgt.src.bin and .idx", files raw data never has."""
    from fairseq_san.errors import UsageError
    from fairseq_san.fairseq_fixes.data_shards import check_shard_splits

    first, bare = tmp_path / "first", tmp_path / "bare"
    for folder in (first, bare):
        folder.mkdir()
    for lang in ("src", "tgt"):
        (first / f"train.src-tgt.{lang}").write_text("a b\n")
    data = os.pathsep.join(str(path) for path in (first, first, bare))
    task = SimpleNamespace(cfg=SimpleNamespace(data=data, dataset_impl="raw", source_lang="src",
                                               target_lang="tgt"))  # fmt: skip
    with pytest.raises(UsageError) as refused:
        check_shard_splits(task, "train")
    assert str(refused.value).startswith(
        f"data shard 3 ({bare}) holds no train split (train.src-tgt.src): fairseq-train reads "
    )


def test_the_trainer_checks_its_train_subset_of_translation_and_language_models(tmp_path):
    """fairseq-train --train-subset big reads big.* from each shard: the trainer's check looks
    for that split, not "train"; a task of another kind (its own files) is not checked."""
    from fairseq.tasks.fairseq_task import FairseqTask
    from fairseq.tasks.language_modeling import LanguageModelingTask
    from fairseq.tasks.translation import TranslationTask

    from fairseq_san.errors import UsageError
    from fairseq_san.fairseq_fixes.data_shards import _checking_the_splits

    for name in ("first", "second"):
        (tmp_path / name).mkdir()
        for ext in ("bin", "idx"):
            (tmp_path / name / f"big.{ext}").write_bytes(b"")
    data = os.pathsep.join(str(tmp_path / name) for name in ("first", "second"))
    get_train_iterator = _checking_the_splits(lambda trainer, epoch: f"epoch {epoch}")

    def trainer(task_class: type, subset: str) -> SimpleNamespace:
        task = task_class.__new__(task_class)
        task.cfg = SimpleNamespace(data=data, dataset_impl=None)
        dataset = SimpleNamespace(train_subset=subset)
        return SimpleNamespace(task=task, cfg=SimpleNamespace(dataset=dataset))

    assert get_train_iterator(trainer(LanguageModelingTask, "big"), 2) == "epoch 2"
    assert get_train_iterator(trainer(FairseqTask, "train"), 2) == "epoch 2"
    for task_class in (LanguageModelingTask, TranslationTask):
        with pytest.raises(UsageError, match=r"^data shard 1 \(.*first\) holds no train split"):
            get_train_iterator(trainer(task_class, "train"), 1)
