"""fairseq's ``language_modeling`` task names prompts that hold the end of sentence.

Upstream behaviour corrected: fairseq-generate prompts a language model with each whole sample
(or its first ``--prefix-size`` tokens), and samples hold sentence ends (the blocks of
``--sample-break-mode none``, the default). fairseq's generator forces a prompt's end of
sentence and ends the hypothesis there, without a word; above beam 1 a prompt that begins with
it failed a batch at its maximum length (``AssertionError: 15 < 15``) or at the first forced
token (a message-less ``AssertionError``), a traceback. ``language_modeling_san`` said both in
one line (``DecodingTask.inference_step``); fairseq's own task, the plugin loaded, now says the
same: ``install()`` wraps ``LanguageModelingTask.inference_step`` (the plugin's tasks check for
themselves) and ``build_dataset_for_inference``, whose prompts are typed, not samples.
"""

import functools
import logging
from typing import Callable, Optional

from torch import Tensor

from fairseq_san.fairseq_fixes.wrapping import wrap_once

logger = logging.getLogger(__name__)


def _naming_prompt_ends(inference_step: Callable) -> Callable:
    """The task's ``inference_step``, its assertion at a prompt that begins with the end of
    sentence one line (``prompt_ends_refused``), and the first batch whose prompts hold one named
    in a warning (``prompt_ends_warning``)."""
    from fairseq.sequence_scorer import SequenceScorer

    from fairseq_san.tasks.decoding import DecodingTask, forced_starts, sentences_with_eos
    from fairseq_san.tasks.language_modeling_san import (
        forced_prompts,
        prompt_ends_refused,
        prompt_ends_warning,
        prompt_start_token,
    )

    @functools.wraps(inference_step)
    def wrapper(
        self, generator, models, sample, prefix_tokens: Optional[Tensor] = None, constraints=None
    ):
        if isinstance(self, DecodingTask) or isinstance(generator, SequenceScorer):
            return inference_step(self, generator, models, sample, prefix_tokens, constraints)
        start = prompt_start_token(self.source_dictionary, self.args)
        forced = forced_prompts(sample, prefix_tokens, start)
        eos, ids = self.source_dictionary.eos(), sample.get("id")
        whole_samples = not getattr(self, "typed_prompts", False)
        prefix = prefix_tokens is not None
        try:
            hypotheses = inference_step(self, generator, models, sample, prefix_tokens, constraints)
        except AssertionError:
            started = forced_starts(forced, eos, ids)
            if started:
                beam = getattr(generator, "beam_size", 1)
                raise prompt_ends_refused(started, beam, whole_samples, prefix) from None
            raise
        ended = sentences_with_eos(forced, eos, ids)
        if ended and not getattr(self, "forced_ends_said", False):
            logger.warning(prompt_ends_warning(ended, whole_samples, prefix))
            self.forced_ends_said = True
        return hypotheses

    return wrapper


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
    """Wrap ``LanguageModelingTask.inference_step`` and ``build_dataset_for_inference``
    (idempotent)."""
    from fairseq.tasks.language_modeling import LanguageModelingTask

    wrap_once(LanguageModelingTask, "inference_step", _naming_prompt_ends)
    wrap_once(LanguageModelingTask, "build_dataset_for_inference", _typed_prompts)
