"""fairseq's own ``language_modeling`` and ``translation`` tasks name forced tokens that hold the
end of sentence, as the plugin's tasks do.

Upstream behaviour corrected: fairseq's generator forces a language model's prompts (each whole
sample, or its first ``--prefix-size`` tokens; samples hold sentence ends: the blocks of
``--sample-break-mode none``, the default) and a translation's ``--prefix-size`` tokens of its
target, and ends a hypothesis at a forced end of sentence, without a word. Above beam 1 forced
tokens that begin with it (a prompt that starts with ``</s>``, an empty target) failed a batch at
its maximum length (``AssertionError: 15 < 15``) or at the first forced token (a message-less
``AssertionError``), a traceback. ``language_modeling_san`` and ``translation_san`` said both in
one line (``DecodingTask.inference_step``); fairseq's own tasks, the plugin loaded, now say the
same: ``install()`` wraps ``LanguageModelingTask.inference_step`` and
``TranslationTask.inference_step`` (the plugin's tasks check for themselves), and the language
model's ``build_dataset_for_inference``, whose prompts are typed, not samples.
"""

import functools
import logging
from typing import Callable, List, NamedTuple, Optional

from torch import Tensor

from fairseq_san.errors import UsageError
from fairseq_san.fairseq_fixes.wrapping import wrap_once

logger = logging.getLogger(__name__)


class ForcedEnds(NamedTuple):
    """A task's forced tokens (a row each, padded on the right; None: none) and its words for
    those that begin with (``refused``: sentences, beam) or hold (``warning``) the end of
    sentence ``eos``."""

    forced: Optional[Tensor]
    eos: int
    refused: Callable[[List[int], int], UsageError]
    warning: Callable[[List[int]], str]


def prompts_forced(task, sample: dict, prefix_tokens: Optional[Tensor]) -> ForcedEnds:
    """A language model's prompts, in ``language_modeling_san``'s words."""
    from fairseq_san.tasks.language_modeling_san import (
        forced_prompts,
        prompt_ends_refused,
        prompt_ends_warning,
        prompt_start_token,
    )

    whole_samples = not getattr(task, "typed_prompts", False)
    prefix = prefix_tokens is not None
    start = prompt_start_token(task.source_dictionary, task.args)
    return ForcedEnds(
        forced_prompts(sample, prefix_tokens, start),
        task.source_dictionary.eos(),
        lambda sentences, beam: prompt_ends_refused(sentences, beam, whole_samples, prefix),
        lambda sentences: prompt_ends_warning(sentences, whole_samples, prefix),
    )


def prefixes_forced(task, sample: dict, prefix_tokens: Optional[Tensor]) -> ForcedEnds:
    """A translation's ``--prefix-size`` tokens, in ``translation_san``'s words."""
    from fairseq_san.generation_options import unfinished_prefix_ends, whole_targets_forced

    eos = task.target_dictionary.eos()
    return ForcedEnds(prefix_tokens, eos, unfinished_prefix_ends, whole_targets_forced)


def naming_forced_ends(
    inference_step: Callable, forced_of: Callable[..., ForcedEnds]
) -> Callable:
    """The task's ``inference_step``, its assertion at forced tokens that begin with the end of
    sentence one line, and the first batch whose forced tokens hold one named in a warning
    (``forced_of``: the task's tokens and words)."""
    from fairseq.sequence_scorer import SequenceScorer

    from fairseq_san.tasks.decoding import DecodingTask, forced_starts, sentences_with_eos

    @functools.wraps(inference_step)
    def wrapper(
        self, generator, models, sample, prefix_tokens: Optional[Tensor] = None, constraints=None
    ):
        if isinstance(self, DecodingTask) or isinstance(generator, SequenceScorer):
            return inference_step(self, generator, models, sample, prefix_tokens, constraints)
        ends = forced_of(self, sample, prefix_tokens)
        ids = sample.get("id")
        try:
            hypotheses = inference_step(self, generator, models, sample, prefix_tokens, constraints)
        except AssertionError:
            started = forced_starts(ends.forced, ends.eos, ids)
            if started:
                raise ends.refused(started, getattr(generator, "beam_size", 1)) from None
            raise
        ended = sentences_with_eos(ends.forced, ends.eos, ids)
        if ended and not getattr(self, "forced_ends_said", False):
            logger.warning(ends.warning(ended))
            self.forced_ends_said = True
        return hypotheses

    return wrapper


def _naming_prompt_ends(inference_step: Callable) -> Callable:
    return naming_forced_ends(inference_step, prompts_forced)


def _naming_prefix_ends(inference_step: Callable) -> Callable:
    return naming_forced_ends(inference_step, prefixes_forced)


def _typed_prompts(build_dataset_for_inference: Callable) -> Callable:
    """The task's ``build_dataset_for_inference`` (fairseq-interactive's and the hub's prompts),
    after which its prompts are typed ones (the messages' wording)."""
    from fairseq_san.tasks.decoding import DecodingTask

    @functools.wraps(build_dataset_for_inference)
    def wrapper(self, *args, **kwargs):
        dataset = build_dataset_for_inference(self, *args, **kwargs)
        if not isinstance(self, DecodingTask):  # the plugin's tasks keep their own
            self.typed_prompts = True
        return dataset

    return wrapper


def install() -> None:
    """Wrap fairseq's ``language_modeling`` and ``translation`` tasks' ``inference_step``, and
    the former's ``build_dataset_for_inference`` (idempotent)."""
    from fairseq.tasks.language_modeling import LanguageModelingTask
    from fairseq.tasks.translation import TranslationTask

    wrap_once(LanguageModelingTask, "inference_step", _naming_prompt_ends)
    wrap_once(LanguageModelingTask, "build_dataset_for_inference", _typed_prompts)
    wrap_once(TranslationTask, "inference_step", _naming_prefix_ends)
