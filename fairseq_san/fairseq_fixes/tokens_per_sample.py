"""The language-modelling task refuses a ``--tokens-per-sample`` that no sample can be made of.

Upstream behaviour corrected: fairseq's ``language_modeling`` task (and ``language_modeling_san``,
which inherits it) takes any ``--tokens-per-sample``. 0 or less fails deep inside its datasets
(``ZeroDivisionError`` in ``TokenBlockDataset``, ``IndexError`` in ``batch_by_size``, or a
``RuntimeError`` from ``torch.arange`` where the model takes it as its number of positions;
fairseq-eval-lm takes ``--context-window`` from it first).
More than ``--max-target-positions`` makes samples longer than the model has positions:
fairseq-train drops every one of them from training with a warning and then fails with an
``IndexError``, or stops at the first validation sample with advice to skip it.

``install()`` wraps ``LanguageModelingTask.__init__`` so that the task refuses either in one line
naming both options (``UsageError``) before any data is read.
"""

import functools
from typing import Callable, Optional

from fairseq_san.errors import UsageError
from fairseq_san.fairseq_fixes.wrapping import wrap_once


def check_tokens_per_sample(tokens: int, positions: Optional[int]) -> None:
    """Refuse ``--tokens-per-sample`` ``tokens`` below 1 or above ``--max-target-positions``
    ``positions`` (None: not given, the model then takes ``tokens`` as its positions)."""
    if tokens < 1:
        raise UsageError(
            f"--tokens-per-sample {tokens}: must be at least 1 (fairseq-eval-lm counts it after "
            "taking --context-window from it)"
        )
    if positions is not None and tokens > positions:
        raise UsageError(
            f"--tokens-per-sample {tokens} is more than --max-target-positions {positions}, the "
            "model's positions: no sample that long fits the model; lower --tokens-per-sample to "
            f"at most {positions}, or leave --max-target-positions out (it then follows "
            "--tokens-per-sample)"
        )


def _checking(init: Callable) -> Callable:
    """The task's ``__init__``, after ``check_tokens_per_sample`` of its config."""

    @functools.wraps(init)
    def wrapper(self, args, *rest, **kwargs):
        check_tokens_per_sample(args.tokens_per_sample, getattr(args, "max_target_positions", None))
        init(self, args, *rest, **kwargs)

    return wrapper


def install() -> None:
    """Check the language-modelling task's sample size when it is set up (idempotent)."""
    from fairseq.tasks.language_modeling import LanguageModelingTask

    wrap_once(LanguageModelingTask, "__init__", _checking)
