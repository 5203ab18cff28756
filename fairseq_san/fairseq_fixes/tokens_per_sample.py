"""The language-modelling task refuses a ``--tokens-per-sample`` that no sample can be made of.

Upstream behaviour corrected: fairseq's ``language_modeling`` task (and ``language_modeling_san``,
which inherits it) takes any ``--tokens-per-sample``. 0 or less fails deep inside its datasets
(``ZeroDivisionError`` in ``TokenBlockDataset``, ``IndexError`` in ``batch_by_size``, or a
``RuntimeError`` from ``torch.arange`` where the model takes it as its number of positions;
fairseq-eval-lm takes ``--context-window`` from it first).
More than ``--max-target-positions`` makes samples longer than the model has positions:
fairseq-train drops every one of them from training with a warning and then fails with an
``IndexError``, or stops at the first validation sample with advice to skip it.

fairseq-eval-lm builds its batches with invalid inputs ignored, whatever the command line says:
a sample longer than the model's positions (``--tokens-per-sample`` 1024, its default, for a model
of 128 positions) is skipped with one warning among the log's lines, and the perplexity printed
is that of the rest (1.00 of no token when none is left).

``install()`` wraps ``LanguageModelingTask.__init__`` so that the task refuses either in one line
naming both options (``UsageError``) before any data is read, and
``LanguageModelingTask.eval_lm_dataloader`` so that fairseq-eval-lm refuses samples longer than
the model's positions before it evaluates any.
"""

import functools
from typing import Callable, Optional

import numpy as np

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


def check_samples_fit(dataset, positions: object, break_mode: str) -> None:
    """Refuse samples of ``dataset`` longer than the model's ``positions`` (an int for a language
    model), which fairseq-eval-lm would skip; ``break_mode`` is ``--sample-break-mode``."""
    if not isinstance(positions, int) or not hasattr(dataset, "sizes"):
        return
    longer = int(np.sum(np.asarray(dataset.sizes) > positions))
    if not longer:
        return
    fix = f"pass --tokens-per-sample {positions} or fewer (its default, 1024, is for models with "
    fix += "as many positions)"
    if break_mode == "eos":  # a sample is one sentence
        fix = "with --sample-break-mode eos a sample is a sentence: pass --sample-break-mode none"
        fix += f" (blocks of --tokens-per-sample, at most {positions})"
    raise UsageError(
        f"{longer} of the {len(dataset)} samples are longer than the model's {positions} "
        f"positions, and fairseq-eval-lm would skip them (the perplexity of the rest): {fix}"
    )


def _checking_samples(eval_lm_dataloader: Callable) -> Callable:
    """The task's ``eval_lm_dataloader``, after ``check_samples_fit``."""

    @functools.wraps(eval_lm_dataloader)
    def wrapper(self, dataset, *args, max_positions=None, **kwargs):
        check_samples_fit(dataset, max_positions, getattr(self.args, "sample_break_mode", None))
        return eval_lm_dataloader(self, dataset, *args, max_positions=max_positions, **kwargs)

    return wrapper


def install() -> None:
    """Check the language-modelling task's sample size when it is set up, and fairseq-eval-lm's
    samples against the model's positions (idempotent)."""
    from fairseq.tasks.language_modeling import LanguageModelingTask

    wrap_once(LanguageModelingTask, "__init__", _checking)
    wrap_once(LanguageModelingTask, "eval_lm_dataloader", _checking_samples)
