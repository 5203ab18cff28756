"""fairseq's own ``language_modeling`` and ``translation`` tasks check the searches against the
target dictionary and the output's length, as the plugin's tasks do.

Upstream behaviour corrected: fairseq's generator takes ``--sampling-topk`` above the target
dictionary's entries (fairseq-generate failed inside torch's topk: "selected index k out of
range", or "Overflow when unpacking long long" beyond 64 bits, a traceback), and so the 2 x beam
best tokens of ``--diversity-rate`` and ``--constraints``; it caps the beam at the entries but one
and printed fewer hypotheses than ``--nbest`` asked, without a word; a ``--lenpen`` whose power
of the longest output's length leaves 32-bit floats failed with an OverflowError (``--lenpen
1e30``) or scored silently 0 or infinity. ``install()`` wraps both tasks' ``build_generator``
with ``tasks.decoding.check_searches_fit_vocabulary`` and
``generation_options.check_length_penalty`` (the plugin's tasks check for themselves), for the
command line and the hub alike.
"""

import functools
from typing import Callable

from fairseq_san.fairseq_fixes.wrapping import wrap_once


def _fitting_the_vocabulary(build_generator: Callable) -> Callable:
    from fairseq_san.generation_options import check_length_penalty
    from fairseq_san.tasks.decoding import DecodingTask, check_searches_fit_vocabulary

    @functools.wraps(build_generator)
    def wrapper(self, models, args, *rest, **keywords):
        if isinstance(self, DecodingTask):  # the plugin's tasks check for themselves
            return build_generator(self, models, args, *rest, **keywords)
        check_searches_fit_vocabulary(args, len(self.target_dictionary))
        generator = build_generator(self, models, args, *rest, **keywords)
        check_length_penalty(args, getattr(generator, "max_len", 0))
        return generator

    return wrapper


def install() -> None:
    """Wrap fairseq's ``language_modeling`` and ``translation`` tasks' ``build_generator``
    (idempotent)."""
    from fairseq.tasks.language_modeling import LanguageModelingTask
    from fairseq.tasks.translation import TranslationTask

    wrap_once(LanguageModelingTask, "build_generator", _fitting_the_vocabulary)
    wrap_once(TranslationTask, "build_generator", _fitting_the_vocabulary)
