"""An input that holds the padding symbol is refused, not read as padding.

Upstream behaviour corrected: fairseq-interactive's lines and the hub's inputs are encoded with
the dictionary, which reads a typed ``<pad>`` as its padding symbol; fairseq then treats that
position as padding, not as a word: a translation's source lost it (masked out), a language
model's prompt left it free and generated there, and a text to score had it left out of its
score, each without a word. ``install()`` wraps ``build_dataset_for_inference`` of fairseq's
translation and language-modelling tasks (the plugin's inherit them) so that such an input is
one line.
"""

import functools
from typing import List

from torch import Tensor

from fairseq_san.errors import UsageError
from fairseq_san.fairseq_fixes.wrapping import wrap_once


def check_no_padding_symbol(inputs: List[Tensor], dictionary) -> None:
    """Refuse an input (a source sentence, a prompt, a text to score) that holds the
    dictionary's padding symbol."""
    pad = dictionary.pad()
    if any(tokens.eq(pad).any() for tokens in inputs):
        raise UsageError(
            f"an input holds {dictionary[pad]}, the dictionary's padding symbol, which fairseq "
            "reads as padding and not as a word (left out, or generated in): write it otherwise"
        )


def _refusing_the_padding_symbol(build_dataset_for_inference):
    @functools.wraps(build_dataset_for_inference)
    def wrapper(self, src_tokens, src_lengths, *args, **kwargs):
        check_no_padding_symbol(src_tokens, self.source_dictionary)
        return build_dataset_for_inference(self, src_tokens, src_lengths, *args, **kwargs)

    return wrapper


def install() -> None:
    """Wrap the inference datasets of fairseq's translation and language-modelling tasks
    (idempotent)."""
    from fairseq.tasks.language_modeling import LanguageModelingTask
    from fairseq.tasks.translation import TranslationTask

    for task in (TranslationTask, LanguageModelingTask):
        wrap_once(task, "build_dataset_for_inference", _refusing_the_padding_symbol)
