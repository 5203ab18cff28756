"""A sentence longer than a batch's ``--max-tokens`` is one line naming its subset and length.

Upstream behaviour corrected: fairseq batches whole sentences, and where one is longer than
``--max-tokens`` (or ``--max-tokens-valid``) its batching asserts "Sentences lengths should not
exceed max_tokens=20", naming neither the subset nor how long its sentences are, so the value
to pass was found by trial. ``install()`` wraps ``FairseqTask.get_batch_iterator`` when a command
that batches a binarized subset runs (fairseq-train, -validate, -generate, -eval-lm): the error
names the subset, its longest sentence and its length (of those batched: with
``--skip-invalid-size-inputs-valid-test``, within the positions). The hub words its own
(``hub.sentence_over_max_tokens``), and fairseq-interactive's are its input lines, no subset.
"""

import functools
import inspect
import re
from typing import Optional, Tuple

import numpy as np

from fairseq_san.errors import UsageError
from fairseq_san.fairseq_fixes.wrapping import running_command, wrap_once

# fairseq's batching's assertion for a sentence longer than a batch's --max-tokens.
OVER_MAX_TOKENS = re.compile(r"Sentences lengths should not exceed max_tokens=(\d+)")
BATCHING_COMMANDS = ("train", "validate", "generate", "eval_lm")


def batched_indices(dataset, max_positions, skip_invalid: bool) -> np.ndarray:
    """The indices of ``dataset``'s sentences that fairseq batches: all, or with
    ``--skip-invalid-size-inputs-valid-test`` those within ``max_positions``."""
    indices = np.arange(len(dataset))
    if skip_invalid and max_positions is not None:
        indices, _ = dataset.filter_indices_by_size(indices, max_positions)
    return indices


def longest_sentence(dataset, indices: np.ndarray) -> Tuple[int, int]:
    """(index, tokens) of the longest of ``dataset``'s sentences ``indices``, as fairseq batches
    them."""
    try:
        lengths = dataset.num_tokens_vec(indices)
    except NotImplementedError:  # FairseqDataset's default
        lengths = None
    if lengths is None:
        lengths = np.array([dataset.num_tokens(index) for index in indices])
    index = int(np.argmax(lengths))
    return int(indices[index]), int(lengths[index])


def subset_of(task, dataset) -> Optional[str]:
    """The name of the subset that ``task`` loaded as ``dataset`` (or that ``--context-window``
    wrapped, sentence for sentence), None where it loaded none."""
    from fairseq.data import LMContextWindowDataset

    if isinstance(dataset, LMContextWindowDataset):  # fairseq-eval-lm --context-window's
        dataset = dataset.dataset
    datasets = getattr(task, "datasets", {})
    return next((split for split, loaded in datasets.items() if loaded is dataset), None)


def sentence_over_max_tokens(task, dataset, limit: int, indices: np.ndarray) -> UsageError:
    """The error for ``dataset``, whose longest sentence of ``indices`` (those batched) is more
    than ``limit`` tokens."""
    index, tokens = longest_sentence(dataset, indices)
    subset = subset_of(task, dataset)
    named = f"subset {subset}" if subset is not None else "the data"
    return UsageError(
        f"sentence {index} of {named} is {tokens} tokens long (its longest), and a batch holds "
        f"at most {limit} (--max-tokens; --max-tokens-valid in validation): fairseq batches "
        f"whole sentences; pass {tokens} or more"
    )


def _naming_the_longest_sentence(get_batch_iterator):
    signature = inspect.signature(get_batch_iterator)

    @functools.wraps(get_batch_iterator)
    def wrapper(*args, **kwargs):
        try:
            return get_batch_iterator(*args, **kwargs)
        except AssertionError as error:
            found = OVER_MAX_TOKENS.search(str(error))
            if not found:
                raise
            call = signature.bind(*args, **kwargs)
            call.apply_defaults()
            given = call.arguments
            dataset = given["dataset"]
            indices = batched_indices(
                dataset, given["max_positions"], given["ignore_invalid_inputs"]
            )
            raise sentence_over_max_tokens(
                given["self"], dataset, int(found.group(1)), indices
            ) from None

    return wrapper


def install() -> None:
    """Wrap the tasks' ``get_batch_iterator`` when a command of ``BATCHING_COMMANDS`` runs
    (idempotent)."""
    from fairseq.tasks import FairseqTask

    if any(running_command(f"fairseq_cli.{name}") for name in BATCHING_COMMANDS):
        wrap_once(FairseqTask, "get_batch_iterator", _naming_the_longest_sentence)
