"""A translation task decodes and trains the language pair it is given, or refuses.

Upstream behaviour corrected: fairseq's ``TranslationTask.setup_task`` reads the language pair
from the data's file names (``train.SRC-TGT.*``) whenever ``--source-lang`` or ``--target-lang``
is missing, and so ignored the one given alone: ``fairseq-generate -s de`` on En-De data decoded
En->De, ``-s xx`` of a language the data has not decoded too, and the hub's
``from_pretrained(..., source_lang='de')`` as well, silently. ``install()`` wraps it (the plugin's
``translation_san`` inherits it): a language given alone that is not the one the data's names
give is one line naming both. Where neither is given and the data is a language model's
(``dict.txt``), fairseq's "Could not infer language pair" is said as that (a translation
checkpoint given to fairseq-validate with a language model's data met it).
"""

import functools
from typing import Optional, Tuple

from fairseq.tasks.translation import TranslationTask

from fairseq_san.errors import UsageError
from fairseq_san.fairseq_fixes.one_line_errors import NO_LANGUAGE_PAIR
from fairseq_san.fairseq_fixes.wrapping import wrap_once
from fairseq_san.files import first_data_folder, language_model_data

SIDES = (("-s", "source_lang", "-t", "target_lang"), ("-t", "target_lang", "-s", "source_lang"))


def check_given_language_kept(
    given: Tuple[Optional[str], Optional[str]], read: Tuple[str, str], data: str
) -> None:
    """Refuse a pair ``read`` from the data's file names that is not the one language ``given``
    alone (source, target) asked for."""
    if (given[0] is None) == (given[1] is None):
        return  # both given (fairseq reads them), or neither (the data's pair is wanted)
    side = 0 if given[0] is not None else 1
    if given[side] == read[side]:
        return
    flag, keyword, other_flag, other_keyword = SIDES[side]
    raise UsageError(
        f"{flag} {given[side]} ({keyword}={given[side]!r}) without {other_flag}: fairseq reads "
        f"the language pair from the data's file names where one is missing ({read[0]}->"
        f"{read[1]} in {data}) and would have ignored {flag}; give {other_flag} too "
        f"({other_keyword})"
    )


def language_model_data_named(cfg, error: Exception) -> Optional[UsageError]:
    """fairseq's "Could not infer language pair" (``error``) said as what it is where the data's
    folder (the first of DATA1:DATA2...) holds a language model's ``dict.txt`` and no
    translation's dictionaries; None for another error or folder."""
    folder = first_data_folder(cfg.data) or ""
    if str(error) != NO_LANGUAGE_PAIR or not language_model_data(folder):
        return None
    task = getattr(cfg, "_name", None) or "translation"
    return UsageError(
        f"{folder} holds a language model's data (dict.txt), not a translation's (dict.SRC.txt, "
        f"dict.TGT.txt), and the task, {task} (--task, or the checkpoint's), translates: give a "
        "translation's binarized data, or a language model"
    )


def _keeping_the_given_language(setup_task):
    @functools.wraps(setup_task)
    def wrapper(cls, cfg, **kwargs):
        given = (cfg.source_lang, cfg.target_lang)
        try:
            task = setup_task(cls, cfg, **kwargs)
        except Exception as error:
            said = language_model_data_named(cfg, error)
            if said is None:
                raise
            raise said from error
        check_given_language_kept(given, (cfg.source_lang, cfg.target_lang), cfg.data)
        return task

    return wrapper


def install() -> None:
    """Wrap ``TranslationTask.setup_task`` (idempotent)."""
    wrap_once(TranslationTask, "setup_task", _keeping_the_given_language)
