"""fairseq's datasets that name ``np.compat.long`` work on numpy 2 with the plugin
(fairseq_san/fairseq_fixes/numpy2.py): language-model blocks with ``--sample-break-mode eos`` and
translation with ``--num-batch-buckets``."""

import numpy as np
import torch

import helpers  # noqa: F401  (imports fairseq, then the plugin)
from fairseq.data import LanguagePairDataset, TokenBlockDataset
from helpers import make_dictionary

SENTENCES = [[5, 6, 7, 2], [8, 9, 2], [10, 11, 12, 13, 2]]


def test_numpy_itself_is_left_alone():
    assert np.__version__.startswith("2.")  # the case the fix is for
    assert not hasattr(np, "compat")


def test_language_model_blocks_break_at_eos():
    sentences = [torch.tensor(s) for s in SENTENCES]
    blocks = TokenBlockDataset(
        sentences, [len(s) for s in SENTENCES], block_size=None, pad=1, eos=2, break_mode="eos"
    )
    assert [blocks[i].tolist() for i in range(len(blocks))] == SENTENCES


def test_translation_with_batch_buckets():
    """The buckets are the "lower" percentiles fairseq asks for with numpy 1.x's ``interpolation``
    (numpy 2's ``method``): lengths 3, 4, 6, 10, 11 in 3 buckets pad to 4, 6 and 11, where the
    default (linear) percentiles would be 4.67, 8.67 and 11."""
    dictionary = make_dictionary()
    sentences = [torch.tensor([5] * (length - 1) + [2]) for length in (3, 4, 6, 10, 11)]
    sizes = np.array([len(s) for s in sentences])
    dataset = LanguagePairDataset(
        sentences, sizes, dictionary, sentences, sizes, dictionary, num_buckets=3
    )
    assert list(dataset.src.buckets) == [4, 6, 11]
    assert dataset.bucketed_num_tokens.tolist() == [4, 4, 6, 11, 11]
    assert dataset.bucketed_num_tokens.dtype.kind == "i"
