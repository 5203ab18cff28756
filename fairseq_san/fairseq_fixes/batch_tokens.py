"""A sentence longer than a batch's ``--max-tokens`` is one line naming its subset and length.

Upstream behaviour corrected: fairseq batches whole sentences, and where one is longer than
``--max-tokens`` (or ``--max-tokens-valid``) its batching asserts "Sentences lengths should not
exceed max_tokens=20", naming neither the subset nor how long its sentences are, so the value
to pass was found by trial. ``install()`` wraps ``FairseqTask.get_batch_iterator`` when a command
that batches a binarized subset runs (fairseq-train, -validate, -generate, -eval-lm): the error
names the subset, its longest sentence and its length (of those batched: with
``--skip-invalid-size-inputs-valid-test``, within the positions). The hub words its own
(``hub.sentence_over_max_tokens``, also from a ``SentenceOverMaxTokens`` where a command
imported in the same process installed this fix), and fairseq-interactive's are its input
lines, no subset.

And fairseq-train skips the training sentences longer than ``--max-tokens`` (the positions it
batches within are cut to it): where that was every one, ``last_batch``'s "no sentence to
batch" advised the model's positions and ``--skip-invalid-size-inputs-valid-test``, neither of
which the user gave; the error names ``--max-tokens`` and the shortest sentence's length.
"""

import functools
import inspect
import re
from typing import Optional, Tuple, Union

import numpy as np

from fairseq_san.errors import UsageError
from fairseq_san.fairseq_fixes.last_batch import NOTHING_TO_BATCH
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


def subset_named(task, dataset) -> str:
    """``dataset`` as a message names it: the subset that ``task`` loaded as it (or that
    ``--context-window`` wrapped, sentence for sentence), else "the data"."""
    from fairseq.data import LMContextWindowDataset

    if isinstance(dataset, LMContextWindowDataset):  # fairseq-eval-lm --context-window's
        dataset = dataset.dataset
    datasets = getattr(task, "datasets", {})
    subset = next((split for split, loaded in datasets.items() if loaded is dataset), None)
    return f"subset {subset}" if subset is not None else "the data"


class SentenceOverMaxTokens(UsageError):
    """A sentence longer than a batch's ``limit`` of tokens (the hub words its own from it)."""

    def __init__(self, message: str, limit: int) -> None:
        super().__init__(message)
        self.limit = limit


def sentence_over_max_tokens(
    task, dataset, limit: int, indices: np.ndarray
) -> SentenceOverMaxTokens:
    """The error for ``dataset``, whose longest sentence of ``indices`` (those batched) is more
    than ``limit`` tokens."""
    index, tokens = longest_sentence(dataset, indices)
    named = subset_named(task, dataset)
    return SentenceOverMaxTokens(
        f"sentence {index} of {named} is {tokens} tokens long (its longest), and a batch holds "
        f"at most {limit} (--max-tokens; --max-tokens-valid in validation): fairseq batches "
        f"whole sentences; pass {tokens} or more",
        limit,
    )


def every_sentence_over_max_tokens(
    task, dataset, max_tokens: Optional[int], max_positions: Union[int, tuple, None]
) -> Optional[UsageError]:
    """The error for a subset none of whose sentences fairseq batched because each is longer than
    ``max_tokens``, to which its ``max_positions`` were cut (fairseq-train's training subset);
    None where the positions are the model's own, or a sentence is within them."""
    limits = np.atleast_1d(np.array(max_positions, dtype=object))
    if max_tokens is None or len(dataset) == 0 or any(limit != max_tokens for limit in limits):
        return None
    shortest = min(int(dataset.num_tokens(index)) for index in range(len(dataset)))
    if shortest <= max_tokens:
        return None
    named = subset_named(task, dataset)
    return UsageError(
        f"every sentence of {named} is longer than --max-tokens {max_tokens} (the shortest is "
        f"{shortest} tokens), and fairseq-train skips the training sentences longer than a batch "
        f"holds: pass {shortest} or more (fairseq batches whole sentences)"
    )


def _naming_the_longest_sentence(get_batch_iterator):
    signature = inspect.signature(get_batch_iterator)

    @functools.wraps(get_batch_iterator)
    def wrapper(*args, **kwargs):
        try:
            return get_batch_iterator(*args, **kwargs)
        except UsageError as error:
            if str(error) != NOTHING_TO_BATCH:
                raise
            given = bound(signature, args, kwargs)
            over = every_sentence_over_max_tokens(
                given["self"], given["dataset"], given["max_tokens"], given["max_positions"]
            )
            if over is None:
                raise
            raise over from None
        except AssertionError as error:
            found = OVER_MAX_TOKENS.search(str(error))
            if not found:
                raise
            given = bound(signature, args, kwargs)
            dataset = given["dataset"]
            indices = batched_indices(
                dataset, given["max_positions"], given["ignore_invalid_inputs"]
            )
            raise sentence_over_max_tokens(
                given["self"], dataset, int(found.group(1)), indices
            ) from None

    return wrapper


def bound(signature: inspect.Signature, args: tuple, kwargs: dict) -> dict:
    """The arguments of a call of ``get_batch_iterator``, its defaults included, by name."""
    call = signature.bind(*args, **kwargs)
    call.apply_defaults()
    return call.arguments


def install() -> None:
    """Wrap the tasks' ``get_batch_iterator`` when a command of ``BATCHING_COMMANDS`` runs
    (idempotent)."""
    from fairseq.tasks import FairseqTask

    if any(running_command(f"fairseq_cli.{name}") for name in BATCHING_COMMANDS):
        wrap_once(FairseqTask, "get_batch_iterator", _naming_the_longest_sentence)
