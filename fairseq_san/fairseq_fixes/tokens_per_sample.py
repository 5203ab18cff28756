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

fairseq-eval-lm takes ``--context-window`` from ``--tokens-per-sample`` before it sets up the
task, so a window as large as the sample size was refused naming a size the user never gave:
``--tokens-per-sample 0`` for ``--context-window 8 --tokens-per-sample 8`` (and -4 for a window
of 4 beside a size of 0).

With ``--add-bos-token`` each sample is fed after a start token that its size leaves out: a
sample as long as the model's positions passed every check and was one token too long for them
(an ``IndexError`` with learned positions, in training, fairseq-validate and fairseq-eval-lm).
The sizes now count it, and so does the check of ``--tokens-per-sample``. fairseq's own language
models (``transformer_lm``, ``lstm_lm``) take ``--tokens-per-sample`` as their positions, which
leaves none for the start token: with ``--sample-break-mode none`` (every block that long) training
skipped every block with a warning and validation refused only at the end of the first epoch.

``install()`` wraps ``LanguageModelingTask.__init__`` so that the task refuses either in one line
naming both options (``UsageError``) before any data is read, and
``LanguageModelingTask.build_model`` so that fairseq-train refuses a model without a position for
the start token before any update (``check_start_position``), and
``LanguageModelingTask.eval_lm_dataloader`` so that fairseq-eval-lm refuses samples longer than
the model's positions before it evaluates any, and ``filter_indices_by_size`` so that the other
commands refuse them naming the fix (fairseq's "Size of sample #22 is invalid" advised skipping
one, where at the default --tokens-per-sample every one was too long). When fairseq-eval-lm is
the running command, its ``main`` is wrapped too, so that a ``--context-window`` that leaves no
token to score is refused naming the sizes given (``check_context_window``), before ``main``
takes one from the other.
"""

import functools
from argparse import Namespace
from typing import Callable, Optional

from fairseq_san.errors import UsageError
from fairseq_san.fairseq_fixes.wrapping import running_command, wrap_once


def check_tokens_per_sample(tokens: int, positions: Optional[int], start: int = 0) -> None:
    """Refuse ``--tokens-per-sample`` ``tokens`` below 1 or, after ``start`` start tokens (1 with
    ``--add-bos-token``), above ``--max-target-positions`` ``positions`` (None: not given, the
    model then takes ``tokens`` as its positions, and one more for a start token)."""
    if tokens < 1:
        raise UsageError(f"--tokens-per-sample {tokens}: must be at least 1")
    if positions is not None and tokens + start > positions:
        with_start = f" and --add-bos-token's start token ({tokens + start} in all)" * start
        # Left out, the positions follow --tokens-per-sample: fairseq's own language models then
        # have none for the start token (``check_start_position``).
        raised = "leave --max-target-positions out (it then follows --tokens-per-sample)"
        if start:
            raised = f"pass --max-target-positions {tokens + start}"
        raise UsageError(
            f"--tokens-per-sample {tokens}{with_start} is more than --max-target-positions "
            f"{positions}, the model's positions: no sample that long fits the model; lower "
            f"--tokens-per-sample to at most {positions - start}, or {raised}"
        )


def start_tokens(task_cfg: object) -> int:
    """The tokens before each sample that its size leaves out: 1 with ``--add-bos-token``."""
    return int(bool(getattr(task_cfg, "add_bos_token", False)))


def _checking(init: Callable) -> Callable:
    """The task's ``__init__``, after ``check_tokens_per_sample`` of its config."""

    @functools.wraps(init)
    def wrapper(self, args, *rest, **kwargs):
        positions = getattr(args, "max_target_positions", None)
        check_tokens_per_sample(args.tokens_per_sample, positions, start_tokens(args))
        init(self, args, *rest, **kwargs)

    return wrapper


def check_start_position(tokens: int, positions: object, break_mode: object, start: int) -> None:
    """Refuse a model of ``positions`` (``max_positions()``) that has none for the ``start``
    tokens (``start_tokens``) before blocks of ``--tokens-per-sample`` ``tokens``, where every
    block is that long (``--sample-break-mode none``): training would skip every one of them."""
    if not start or break_mode not in (None, "none") or not isinstance(positions, int):
        return
    if tokens + start > positions:
        raise UsageError(
            f"--tokens-per-sample {tokens} and --add-bos-token's start token make samples of "
            f"{tokens + start} tokens, more than the model's {positions} positions (fairseq's "
            "language models take --tokens-per-sample as their positions): with "
            "--sample-break-mode none every sample is that long, and training would skip them "
            f"all; pass --max-target-positions {tokens + start}, or --tokens-per-sample "
            f"{positions - start} with --max-target-positions {positions}"
        )


def _checking_start_position(build_model: Callable) -> Callable:
    """The task's ``build_model``, after ``check_start_position`` of a model built to train (not
    ``from_checkpoint``: its positions are the checkpoint's, and the samples' checks name the
    fix); the signature names ``from_checkpoint``, which fairseq passes only where it sees it."""

    @functools.wraps(build_model)
    def wrapper(self, args, from_checkpoint: bool = False):
        model = build_model(self, args, from_checkpoint=from_checkpoint)
        if not from_checkpoint:
            break_mode = getattr(self.args, "sample_break_mode", None)
            check_start_position(
                self.args.tokens_per_sample, model.max_positions(), break_mode,
                start_tokens(self.args),
            )  # fmt: skip
        return model

    return wrapper


def check_context_window(
    window: int, tokens: int, positions: Optional[int], start: int = 0
) -> None:
    """Refuse fairseq-eval-lm's ``--tokens-per-sample`` ``tokens`` below 1 or, after ``start``
    start tokens, above ``--max-target-positions`` ``positions`` (a sample with its context is
    that long), or a ``--context-window`` ``window`` that leaves none of them to score, naming
    the sizes given."""
    check_tokens_per_sample(tokens, positions, start)
    if window < 0:  # fairseq reads it as no context
        raise UsageError(f"--context-window {window}: it must be 0 (no context) or more")
    if window >= tokens:
        raise UsageError(
            f"--context-window {window} leaves no tokens of --tokens-per-sample {tokens} to score: "
            "fairseq-eval-lm scores tokens-per-sample minus context-window tokens per sample; "
            "pass a --context-window below --tokens-per-sample"
        )


def _checking_window(main: Callable) -> Callable:
    """fairseq-eval-lm's ``main``, after ``check_context_window`` of its config (before ``main``
    takes the window from the sample size)."""

    @functools.wraps(main)
    def wrapper(cfg, **kwargs):
        if isinstance(cfg, Namespace):
            from fairseq.dataclass.utils import convert_namespace_to_omegaconf

            cfg = convert_namespace_to_omegaconf(cfg)
        task = cfg.task
        positions = getattr(task, "max_target_positions", None)
        window = cfg.eval_lm.context_window
        check_context_window(window, task.tokens_per_sample, positions, start_tokens(task))
        return main(cfg, **kwargs)

    return wrapper


def check_samples_fit(
    dataset,
    positions: object,
    break_mode: str,
    context_window: int = 0,
    block: int = 0,
    start: int = 0,
    consequence: str = ", and fairseq-eval-lm would skip them (the perplexity of the rest)",
) -> None:
    """Refuse samples of ``dataset`` longer than the model's ``positions`` (an int for a language
    model), which fairseq-eval-lm would skip (``consequence``, said after the count);
    ``break_mode`` is ``--sample-break-mode``. With a ``--context-window`` C a sample is fed
    after up to C tokens of the ones before it, no more than fill ``block`` + C (``block``:
    ``--tokens-per-sample`` after eval-lm took C from it; ``LMContextWindowDataset``):
    positions fairseq never checks. ``start``: the start tokens
    that the sizes count (``_sized_with_start_tokens``), for the message."""
    import numpy as np  # here: fairseq-san-loop's checks import this module (run_record)

    if not isinstance(positions, int) or not hasattr(dataset, "sizes"):
        return
    sizes = np.asarray(dataset.sizes)
    if context_window:
        sizes = np.maximum(sizes, np.minimum(sizes + context_window, block + context_window))
    longer = int(np.sum(sizes > positions))
    if not longer:
        return
    raise UsageError(
        f"{longer} of the {len(dataset)} samples are longer than the model's {positions} "
        f"positions{context_said(context_window)}{consequence}: "
        f"{samples_fix(positions, break_mode, context_window, start, block)}"
    )


def context_said(context_window: int) -> str:
    """How the context window lengthens a sample, for ``check_samples_fit``'s message."""
    if not context_window:
        return ""
    return f" with the --context-window {context_window} tokens of context before each"


def samples_fix(
    positions: int, break_mode: str, context_window: int, start: int = 0, block: int = 0
) -> str:
    """What makes every sample fit ``positions``, for ``check_samples_fit``'s message; ``start``:
    the start tokens before each sample (``start_tokens``), which its size counts; ``block``:
    ``--tokens-per-sample`` (less the context window): with ``complete`` or ``complete_doc``, a
    block that fits leaves sentences longer than it, each a sample of its own."""
    most = positions - start
    if break_mode == "eos":  # a sample is one sentence
        return sentences_fix("eos a sample is a sentence", most, context_window)
    if break_mode in ("complete", "complete_doc") and 0 < block + context_window <= most:
        said = f"{break_mode} a sentence longer than --tokens-per-sample is a sample of its own"
        return sentences_fix(said, most, context_window)
    fix = f"pass --tokens-per-sample {most} or fewer ("
    if context_window:
        return fix + "with --context-window, it counts the context)"
    if start:
        return fix + "the position of --add-bos-token's start token is one of the model's)"
    return fix + "its default, 1024, is for models with as many positions)"


def sentences_fix(said: str, most: int, context_window: int) -> str:
    """``samples_fix``'s advice where whole sentences are too long (``said`` after the break
    mode): blocks of ``--tokens-per-sample``, at most ``most``."""
    fix = f"with --sample-break-mode {said}: pass --sample-break-mode none"
    fix += f" (blocks of --tokens-per-sample, at most {most})"
    return fix + (", or a smaller --context-window" if context_window else "")


def _checking_samples(eval_lm_dataloader: Callable) -> Callable:
    """The task's ``eval_lm_dataloader``, after ``check_samples_fit``."""

    @functools.wraps(eval_lm_dataloader)
    def wrapper(self, dataset, *args, max_positions=None, context_window=0, **kwargs):
        break_mode = getattr(self.args, "sample_break_mode", None)
        block = self.args.tokens_per_sample
        start = start_tokens(self.args)
        check_samples_fit(dataset, max_positions, break_mode, context_window, block, start)
        return eval_lm_dataloader(
            self, dataset, *args, max_positions=max_positions, context_window=context_window,
            **kwargs,
        )  # fmt: skip

    return wrapper


def _checking_filtered(filter_indices_by_size: Callable) -> Callable:
    """The task's ``filter_indices_by_size`` (fairseq-generate's, fairseq-validate's, training's
    validation), after ``check_samples_fit`` of a loaded split that is not to skip invalid
    inputs: fairseq's "Size of sample #22 is invalid" advised skipping it, where at the default
    --tokens-per-sample (1024) for a model of 128 positions every sample was too long, and
    skipping them left nothing to batch."""

    @functools.wraps(filter_indices_by_size)
    def wrapper(self, indices, dataset, max_positions=None, ignore_invalid_inputs=False):
        split = any(dataset is loaded for loaded in self.datasets.values())  # not typed prompts
        if split and not ignore_invalid_inputs:
            break_mode = getattr(self.args, "sample_break_mode", None)
            check_samples_fit(
                dataset, max_positions, break_mode, block=self.args.tokens_per_sample,
                start=start_tokens(self.args), consequence="",
            )  # fmt: skip
        return filter_indices_by_size(self, indices, dataset, max_positions, ignore_invalid_inputs)

    return wrapper


def _sized_with_start_tokens(load_dataset: Callable) -> Callable:
    """The task's ``load_dataset``, its samples' sizes counting ``--add-bos-token``'s start token,
    which fairseq's ``MonolingualDataset`` puts before each sample after it measured them: every
    check of sizes against the model's positions (training's filter, fairseq-validate's refusal,
    ``check_samples_fit``) let through a sample as long as the positions, one token too long
    (``IndexError`` with learned positions; sinusoidal ones extended themselves silently).
    ``--max-tokens`` counts it too, as the batches fed hold it: a training batch may hold fewer
    samples than fairseq's (other batches, other losses, from the same seed)."""

    @functools.wraps(load_dataset)
    def wrapper(self, split, *args, **kwargs):
        import numpy as np

        loaded = load_dataset(self, split, *args, **kwargs)
        start = start_tokens(self.args)
        if start and split in self.datasets:
            self.datasets[split].sizes = np.asarray(self.datasets[split].sizes) + start
        return loaded

    return wrapper


def install() -> None:
    """Check the language-modelling task's sample size when it is set up, a model built to train
    for a position for ``--add-bos-token``'s start token, fairseq-eval-lm's
    samples against the model's positions, and its context window when it runs; count the start
    token in the sizes of the samples it loads (idempotent)."""
    from fairseq.tasks.language_modeling import LanguageModelingTask

    wrap_once(LanguageModelingTask, "__init__", _checking)
    wrap_once(LanguageModelingTask, "build_model", _checking_start_position)
    wrap_once(LanguageModelingTask, "eval_lm_dataloader", _checking_samples)
    wrap_once(LanguageModelingTask, "filter_indices_by_size", _checking_filtered)
    wrap_once(LanguageModelingTask, "load_dataset", _sized_with_start_tokens)
    eval_lm = running_command("fairseq_cli.eval_lm")
    if getattr(eval_lm, "main", None) is not None:
        wrap_once(eval_lm, "main", _checking_window)
