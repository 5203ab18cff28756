"""Every sentence of a subset is evaluated when the plugin is loaded (fairseq_fixes/last_batch.py).

fairseq main drops a last batch whose size is not a multiple of --required-batch-size-multiple
(default 8). On 13 sentences, --batch-size 4 makes batches 4, 4, 4, 1 (fairseq alone decodes 12)
and --max-tokens 1000 makes 8, 5 (fairseq alone decodes 8). fairseq-generate, fairseq-validate
and fairseq-train's validation all batch through ``FairseqTask.get_batch_iterator``; the
in-process tests check that path for both tasks, the slow ones fairseq-generate itself.
"""

import re

import numpy as np
import pytest
import torch

import helpers  # noqa: F401  (imports fairseq, then the plugin)
from fairseq.data import LanguagePairDataset, data_utils
from fairseq.tasks.translation import TranslationConfig, TranslationTask
from fairseq_san.tasks.translation_san import TranslationSANConfig, TranslationSANTask
from helpers import make_dictionary, run_cli, train_argv, write_corpus

SENTENCES = 13  # not a multiple of fairseq's default --required-batch-size-multiple (8)
BATCHINGS = {"batch-size 4": ["--batch-size", "4"], "max-tokens": ["--max-tokens", "1000"]}
TASKS = {"translation": (TranslationTask, TranslationConfig),
         "translation_san": (TranslationSANTask, TranslationSANConfig)}  # fmt: skip


def tiny_dataset(dictionary, sentences: int = SENTENCES) -> LanguagePairDataset:
    generator = torch.Generator().manual_seed(0)
    lengths = torch.randint(3, 9, (sentences,), generator=generator).tolist()
    tokens = [
        torch.cat([torch.randint(dictionary.nspecial, len(dictionary), (n,), generator=generator),
                   torch.tensor([dictionary.eos()])])
        for n in lengths
    ]  # fmt: skip
    sizes = np.array([len(t) for t in tokens])
    return LanguagePairDataset(tokens, sizes, dictionary, tokens, sizes, dictionary)


@pytest.mark.parametrize("task_name", sorted(TASKS))
@pytest.mark.parametrize(
    "limits", [{"max_sentences": 4}, {"max_tokens": 1000}], ids=["batch-size 4", "max-tokens"]
)
def test_batch_iterator_yields_every_sentence(task_name, limits):
    task_class, config_class = TASKS[task_name]
    dictionary = make_dictionary()
    task = task_class(config_class(), dictionary, dictionary)
    iterator = task.get_batch_iterator(
        tiny_dataset(dictionary), required_batch_size_multiple=8, **limits
    ).next_epoch_itr(shuffle=False)
    ids = sorted(i for batch in iterator for i in batch["id"].tolist())
    assert ids == list(range(SENTENCES))


def test_full_batches_keep_the_multiple_and_the_order():
    """Only the remainder is added back: fairseq's batches are unchanged, in order."""
    sizes = np.arange(1, SENTENCES + 1)
    batches = data_utils.batch_by_size(
        np.arange(SENTENCES), lambda i: sizes[i], num_tokens_vec=sizes, max_tokens=1000,
        required_batch_size_multiple=8,
    )  # fmt: skip
    assert [b.tolist() for b in batches] == [list(range(8)), list(range(8, SENTENCES))]


def test_no_sentence_to_batch_is_one_usage_error():
    """Every sentence skipped (--skip-invalid-size-inputs-valid-test): fairseq's drop of the last
    batch read b[-1] of none, an IndexError (and fairseq-generate then divided by 0 sentences)."""
    from fairseq_san.errors import UsageError

    with pytest.raises(UsageError, match="^no sentence to batch: the subset is empty, or every "):
        data_utils.batch_by_size(
            np.arange(0), lambda i: 1, num_tokens_vec=np.arange(0), max_tokens=1000,
            required_batch_size_multiple=8,
        )  # fmt: skip


# --- fairseq-generate ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def thirteen(binarized_corpus, tmp_path_factory):
    """(data dir whose test split has 13 sentences, a tiny checkpoint trained on the corpus)."""
    root = tmp_path_factory.mktemp("thirteen")
    raw = write_corpus(root / "raw", seed=1)
    for side in ("src", "tgt"):
        lines = (raw / f"test.{side}").read_text().splitlines(keepends=True)
        (raw / f"test.{side}").write_text("".join(lines[:SENTENCES]))
    result = run_cli(
        "fairseq-preprocess", "--source-lang", "src", "--target-lang", "tgt",
        "--testpref", str(raw / "test"), "--destdir", str(root / "data-bin"),
        "--srcdict", str(binarized_corpus / "dict.src.txt"),
        "--tgtdict", str(binarized_corpus / "dict.tgt.txt"), "--workers", "1",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    save = root / "checkpoints"
    result = run_cli(
        "fairseq-train", *train_argv(binarized_corpus, save, 5, ["--task", "translation_san"])
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return root / "data-bin", save / "checkpoint_last.pt"


@pytest.mark.slow
@pytest.mark.parametrize("task", ["translation", "translation_san"])
@pytest.mark.parametrize("batching", sorted(BATCHINGS))
def test_generate_decodes_every_sentence(thirteen, task, batching):
    data, checkpoint = thirteen
    result = run_cli(
        "fairseq-generate", str(data), "--user-dir", "fairseq_san", "--task", task,
        "--path", str(checkpoint), "--gen-subset", "test", "--beam", "2", "--cpu",
        *BATCHINGS[batching],
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    ids = sorted(int(i) for i in re.findall(r"^H-(\d+)\t", result.stdout, re.M))
    assert ids == list(range(SENTENCES))
    assert f"Translated {SENTENCES} sentences" in result.stderr
