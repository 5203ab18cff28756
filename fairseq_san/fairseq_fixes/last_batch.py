"""Every sentence of a subset in some batch, whatever ``--required-batch-size-multiple`` is.

fairseq main (and fairseq-fixed, which we install) drops the last batch of
``fairseq.data.data_utils.batch_by_size`` when its size is not a multiple of
``--required-batch-size-multiple`` (default 8): ``if bsz_mult > 1 and len(b[-1]) % bsz_mult !=
0: b = b[:-1]``. The line came with data2vec 2.0 (commit d871f61, December 2022) without a word
of explanation; fairseq 0.12.2 kept that batch, and data2vec 2.0's own audio and image configs
set the multiple to 1 anyway (fairseq issue 5036 reports the loss). Every command batches through
this function (``FairseqDataset.batch_by_size`` via ``FairseqTask.get_batch_iterator``), so a
Multi30k valid set of 1,014 sentences was decoded, scored and validated as 1,008, silently.

Where the fix lives: the plugin cannot change fairseq's source, and a task hook would cover only
``--task translation_san``, not ``--task translation`` models decoded with ``--user-dir
fairseq_san``. So ``install()``, run when the plugin registers with fairseq, wraps
``data_utils.batch_by_size`` once for the process. The wrapper calls fairseq's function and
appends the batch it dropped, which is exactly the indices after the last one it returned (the
batches are consecutive runs of the ordered indices); fairseq's other batches, still multiples
of the required size, are unchanged. It applies to training too: nothing in translation needs
the drop, and there it loses the same batch every epoch (the longest sentences, since translation
batches are built once over length-sorted indices), as silently as in evaluation. Fixed-shape
batching (``fixed_shapes``) never drops and is left alone. No indices at all (every sentence
filtered out by ``--skip-invalid-size-inputs-valid-test``, or an empty subset) are one line
saying so: the drop failed on them with an ``IndexError`` (and without it fairseq-generate
divides by zero sentences).
"""

import functools
import inspect

import numpy as np

from fairseq_san.errors import UsageError
from fairseq_san.fairseq_fixes.wrapping import wrap_once

NOTHING_TO_BATCH = (
    "no sentence to batch: the subset is empty, or every sentence is longer than the model's "
    "positions and was skipped (--skip-invalid-size-inputs-valid-test); raise "
    "--max-source-positions/--max-target-positions to the model's, or for a language model pass "
    "--sample-break-mode eos or a --tokens-per-sample within its positions"
)


def keeping_last_batch(batch_by_size):
    """``batch_by_size`` (fairseq's signature) plus the last batch that it drops, if any."""
    signature = inspect.signature(batch_by_size)

    @functools.wraps(batch_by_size)
    def wrapper(*args, **kwargs):
        call = signature.bind(*args, **kwargs)
        call.apply_defaults()
        indices = call.arguments["indices"]
        if not isinstance(indices, np.ndarray):  # an iterator would be consumed by fairseq
            indices = np.fromiter(indices, dtype=np.int64, count=-1)
            call.arguments["indices"] = indices
        if len(indices) == 0:  # fairseq's drop reads b[-1] of no batches: an IndexError
            raise UsageError(NOTHING_TO_BATCH)
        batches = batch_by_size(*call.args, **call.kwargs)
        covered = sum(len(batch) for batch in batches)
        if call.arguments["fixed_shapes"] is None and covered < len(indices):
            batches = list(batches) + [indices[covered:].astype(np.int64)]
        return batches

    return wrapper


def install() -> None:
    """Make fairseq's ``batch_by_size`` keep its last batch, for this process (idempotent)."""
    from fairseq.data import data_utils  # here: importing fairseq is what runs this

    wrap_once(data_utils, "batch_by_size", keeping_last_batch)
