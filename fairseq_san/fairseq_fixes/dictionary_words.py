"""A checkpoint goes on with the words of the dictionaries it was trained on, or is refused.

Upstream behaviour corrected: fairseq (and the plugin's ``checkpoints.vocabulary_mismatch``)
compares a checkpoint's embeddings with the data's dictionaries by their size only, and
fairseq-preprocess pads every dictionary to a multiple of 8 entries: a model trained on one data
folder and resumed, fine-tuned or decoded on another whose dictionaries hold other words in as
many entries trained on, or decoded nonsense (BLEU 0), without a word. Every checkpoint
fairseq-train saves with the plugin loaded, fairseq's own models' too, now records in its
``extra_state`` (``DICTIONARIES_STATE``, plain ints and strings) each dictionary's entries, the
sha256 of its words in their order (not their counts: a dict.txt rebuilt with other counts and
the same words in the same order is the same vocabulary) and its file (``dictionaries_record``).
A run that resumes or fine-tunes it (``restore_file``) and fairseq's ensemble loader (generate,
interactive, validate, eval-lm, the hub, fairseq-san-bench) refuse, in one line
(``check_dictionaries``), data whose dictionaries differ from the record, naming the first word
that differs where the training's dictionary file is still there; fairseq-san-average refuses
checkpoints of different records. A checkpoint without the record (older ones, fairseq's own
without the plugin) loads as before.

Sharded data (DATA1:DATA2:...) has the same flaw, checked by ``data_shards``.
"""

import contextvars
import functools
import hashlib
import os
from typing import Dict, List, Optional, Tuple

from fairseq_san.checkpoints import VOCABULARY_ADVICE, VocabularyMismatch
from fairseq_san.fairseq_fixes.wrapping import wrap_once
from fairseq_san.files import first_data_folder
from fairseq_san.pickled_fields import shown

# extra_state's key: {name: {"entries": N, "sha256": HEX, "file": PATH}} per task dictionary
DICTIONARIES_STATE = "fairseq_san_dictionaries"
# What says a dictionary's words in its record (its "file" only names where they were read).
WORDS_KEYS = ("entries", "sha256")
# The largest training dictionary file read to name the first word that differs (a record may
# name any file).
MAX_DICTIONARY_BYTES = 64 * 2**20
# A language model's one dictionary (its task's source and target are the same object).
ONE_DICTIONARY = "dictionary"
# (path, record) of each checkpoint the ensemble loader reads; None outside one.
_LOADED: contextvars.ContextVar[Optional[List[Tuple[str, Optional[dict]]]]] = (
    contextvars.ContextVar("fairseq_san_loaded_dictionaries", default=None)
)


def digest(symbols: List[str]) -> str:
    """The sha256 (hex) of a dictionary's words joined by newlines, in their order (their ids)."""
    return hashlib.sha256("\n".join(symbols).encode("utf-8")).hexdigest()


def task_dictionary(task, side: str):
    """The task's ``source_dictionary`` or ``target_dictionary``, None where it has none."""
    try:
        return getattr(task, f"{side}_dictionary", None)
    except NotImplementedError:  # FairseqTask's own, for a task without dictionaries
        return None


def task_dictionaries(task) -> Dict[str, object]:
    """The task's dictionaries by name: ``source`` and ``target``, or a language model's one."""
    source, target = task_dictionary(task, "source"), task_dictionary(task, "target")
    if source is target:
        return {} if source is None else {ONE_DICTIONARY: source}
    return {side: d for side, d in (("source", source), ("target", target)) if d is not None}


def dictionaries_record(task) -> Dict[str, dict]:
    """What a checkpoint records of the task's dictionaries: each one's entries, ``digest`` and
    file (in the task's first data folder, as given)."""
    data = first_data_folder(task_option(task, "data")) or ""
    return {
        name: {"entries": len(d), "sha256": digest(d.symbols),
               "file": os.path.join(data, dictionary_file(name, task))}
        for name, d in task_dictionaries(task).items()
    }  # fmt: skip


def same_words(saved: object, ours: dict) -> bool:
    """Whether a recorded dictionary (``saved``) holds the words of ``ours`` (the file aside)."""
    return isinstance(saved, dict) and all(saved.get(key) == ours.get(key) for key in WORDS_KEYS)


def recorded_dictionaries(state: object) -> Optional[dict]:
    """A loaded checkpoint's record of its dictionaries, None where it has none."""
    extra = state.get("extra_state") if isinstance(state, dict) else None
    record = extra.get(DICTIONARIES_STATE) if isinstance(extra, dict) else None
    return record if isinstance(record, dict) else None


def dictionary_named(name: str) -> str:
    """A recorded dictionary ``name`` in words: ``dictionary`` for a language model's one,
    ``source dictionary`` for a pair's."""
    return "dictionary" if name == ONE_DICTIONARY else f"{name} dictionary"


def dictionary_file(name: str, task) -> str:
    """The data folder's file of the dictionary ``name`` (fairseq-preprocess's names)."""
    if name == ONE_DICTIONARY:
        return "dict.txt"
    return f"dict.{task_option(task, f'{name}_lang') or name}.txt"


def task_option(task, name: str) -> object:
    """A task's option ``name``: in its ``cfg``, or a legacy task's ``args`` (language
    modelling's)."""
    holder = getattr(task, "cfg", None) or getattr(task, "args", None)
    return getattr(holder, name, None)


def file_words(path: str) -> Optional[List[str]]:
    """The words of fairseq dictionary file ``path`` in their order (their ids), as fairseq's
    ``Dictionary.load`` reads them, or None where it cannot be read (``dictionary_files`` makes
    each of its failures a UsageError, a ValueError)."""
    from fairseq.data import Dictionary

    try:
        return Dictionary.load(path).symbols
    except (OSError, ValueError, RuntimeError):
        return None


def trained_words(saved: dict) -> Optional[List[str]]:
    """The words of the training's dictionary file that ``saved`` records, if it is still there
    and holds them, else None (an unreadable file names nothing: the record alone is said)."""
    path = recorded_file(saved)
    if not os.path.isfile(path) or os.path.getsize(path) > MAX_DICTIONARY_BYTES:
        return None
    symbols = file_words(path)
    return symbols if symbols is not None and digest(symbols) == saved.get("sha256") else None


def recorded_file(saved: dict) -> str:
    """The dictionary file a record names, as one line ("?" for none: a checkpoint may hold
    anything there)."""
    path = saved.get("file")
    return path if isinstance(path, str) and path.isprintable() and path else "?"


def first_difference(
    trained: List[str], data: List[str], names: Tuple[str, str] = ("the training's", "the data's")
) -> str:
    """Where two dictionaries' words first differ: the index and both words (in ``names``)."""
    shorter = min(len(trained), len(data))
    index = next((i for i, pair in enumerate(zip(trained, data)) if pair[0] != pair[1]), shorter)
    theirs, ours = (words[index] if index < len(words) else None for words in (trained, data))
    return f"first at index {index}: {theirs!r} in {names[0]}, {ours!r} in {names[1]}"


def words_mismatch(record: dict, task, ours: dict) -> Optional[str]:
    """The first of the task's dictionaries (``ours``: their ``dictionaries_record``) whose words
    differ from the checkpoint's ``record``, said; None where all agree."""
    for name, saved in record.items():
        if name not in ours or not isinstance(saved, dict) or same_words(saved, ours[name]):
            continue
        words = trained_words(saved)
        where = (first_difference(words, task_dictionaries(task)[name].symbols) if words
                 else f"{shown(saved.get('entries'))} entries, the data's {ours[name]['entries']}")
        return (f"its {dictionary_named(name)} ({recorded_file(saved)}) holds other words than "
                f"the data's {ours[name]['file']}, {where}")  # fmt: skip
    return None


def check_dictionaries(path: str, state: object, task) -> None:
    """Refuse checkpoint ``path`` (its loaded ``state``) for ``task`` where the task's
    dictionaries hold other words than those it records (none recorded: nothing to check)."""
    record = recorded_dictionaries(state)
    if record is not None:
        check_record(path, record, task, dictionaries_record(task))


def check_record(path: str, record: dict, task, ours: dict) -> None:
    """``check_dictionaries`` of a checkpoint's ``record``, the task's dictionaries being
    ``ours`` (``dictionaries_record``)."""
    mismatch = words_mismatch(record, task, ours)
    if mismatch is not None:
        raise VocabularyMismatch(
            f"checkpoint {path} was trained with other dictionaries than the data's: {mismatch}; "
            f"{VOCABULARY_ADVICE}"
        )


def _noting_the_record(load_checkpoint_to_cpu):
    """fairseq's checkpoint reader, noting the record of a checkpoint the ensemble loader reads."""

    @functools.wraps(load_checkpoint_to_cpu)
    def wrapper(path, *args, **kwargs):
        state = load_checkpoint_to_cpu(path, *args, **kwargs)
        noted = _LOADED.get()
        if noted is not None:
            noted.append((path, recorded_dictionaries(state)))
        return state

    return wrapper


def _checking_the_words(load_model_ensemble_and_task):
    """fairseq's ensemble loader, refusing a checkpoint whose record of its dictionaries the
    task's do not match (the task's hashed once for all of them)."""

    @functools.wraps(load_model_ensemble_and_task)
    def wrapper(filenames, *args, **kwargs):
        noted = []
        token = _LOADED.set(noted)
        try:
            loaded = load_model_ensemble_and_task(filenames, *args, **kwargs)
        finally:
            _LOADED.reset(token)
        given = kwargs.get("state")  # a state the caller read (fairseq-san-bench)
        if given is not None:
            noted = [(filenames[0], recorded_dictionaries(given))]
        recorded = [(path, record) for path, record in noted if record is not None]
        ours = dictionaries_record(loaded[-1]) if recorded else {}
        for path, record in recorded:
            check_record(path, record, loaded[-1], ours)
        return loaded

    return wrapper


def install() -> None:
    """Check the words of every checkpoint fairseq's ensemble loader reads (idempotent); the
    record is saved by ``resumed_training`` and checked at a resume by ``restore_file``."""
    from fairseq import checkpoint_utils

    wrap_once(checkpoint_utils, "load_checkpoint_to_cpu", _noting_the_record)
    wrap_once(checkpoint_utils, "load_model_ensemble_and_task", _checking_the_words)
