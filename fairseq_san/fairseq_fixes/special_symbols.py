"""An input that holds the dictionary's special symbols is refused, not read as them.

Upstream behaviour corrected: fairseq-interactive's lines and the hub's inputs are encoded with
the dictionary, which reads a typed ``<pad>`` as its padding symbol: fairseq then treats that
position as padding, not as a word: a translation's source lost it (masked out), a language
model's prompt left it free and generated there, and a text to score had it left out of its
score, each without a word. A translation's source also reads a typed ``</s>`` as its end of
sentence and ``<s>`` as its beginning: the source ended there, and the ``S-`` line, decoded
without them, hid it. (A language model's prompt that holds the end of sentence is said by its
task: the search forces it, and the hypothesis ends there.) ``install()`` wraps
``build_dataset_for_inference`` of fairseq's translation and language-modelling tasks (the
plugin's inherit them) so that such an input is one line.
"""

import functools
from typing import List

from torch import Tensor

from fairseq_san.errors import UsageError
from fairseq_san.fairseq_fixes.wrapping import wrap_once


def check_no_special_symbol(inputs: List[Tensor], dictionary, sentence_ends: bool) -> None:
    """Refuse an input (a source sentence, a prompt, a text to score) that holds the
    dictionary's padding symbol or, with ``sentence_ends`` (a translation's source), its
    beginning-of-sentence symbol or its end of sentence before its last token (where encoding
    puts it)."""
    pad, bos, eos = dictionary.pad(), dictionary.bos(), dictionary.eos()
    for tokens in inputs:
        if tokens.eq(pad).any():
            raise UsageError(
                f"an input holds {dictionary[pad]}, the dictionary's padding symbol, which "
                "fairseq reads as padding and not as a word (left out, or generated in): write "
                "it otherwise"
            )
        if sentence_ends and (tokens.eq(bos).any() or tokens[:-1].eq(eos).any()):
            symbol, meaning = (bos, "beginning") if tokens.eq(bos).any() else (eos, "end")
            raise UsageError(
                f"an input holds {dictionary[symbol]}, the dictionary's {meaning}-of-sentence "
                f"symbol, which fairseq reads as a sentence's {meaning} there and not as a word: "
                "write it otherwise"
            )


def _refusing_special_symbols(build_dataset_for_inference):
    from fairseq.tasks.translation import TranslationTask

    @functools.wraps(build_dataset_for_inference)
    def wrapper(self, src_tokens, src_lengths, *args, **kwargs):
        sources = isinstance(self, TranslationTask)
        check_no_special_symbol(src_tokens, self.source_dictionary, sentence_ends=sources)
        return build_dataset_for_inference(self, src_tokens, src_lengths, *args, **kwargs)

    return wrapper


def install() -> None:
    """Wrap the inference datasets of fairseq's translation and language-modelling tasks
    (idempotent)."""
    from fairseq.tasks.language_modeling import LanguageModelingTask
    from fairseq.tasks.translation import TranslationTask

    for task in (TranslationTask, LanguageModelingTask):
        wrap_once(task, "build_dataset_for_inference", _refusing_special_symbols)
