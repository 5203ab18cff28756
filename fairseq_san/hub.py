"""The plugin's models from Python (``from_pretrained``): fairseq's hub interface, its keywords
checked whatever task the checkpoint was trained with.

Upstream behaviour corrected: fairseq's ``GeneratorHubInterface.generate`` sets each keyword of
``translate()``, ``sample()`` and ``generate()`` on its generation config unchecked and hands it
to the checkpoint's task. The plugin's tasks check it (``tasks.decoding.check_generation_args``);
fairseq's do not, and a ``transformer_san`` model trained with fairseq-train's default task
(``translation``) decoded a misspelt ``bema=1`` at the default beam, and ``san_decoding="static"``
with fairseq's generator. ``SANHubInterface`` checks the keywords before any task sees them and
refuses the plugin's decoding options where the task cannot honour them, and the generation
options that no generator it builds reads (``UNREAD_BY_HUB``: ``nbest``, which fairseq-generate
applies by slicing, returned every hypothesis of the beam; ``prefix_size`` and ``lm_path``
changed nothing), and names a sentence longer than the model's positions in its own words
(fairseq's message named a command-line flag, ``--skip-invalid-size-inputs-valid-test``). The
checks it shares with the command line name its keywords, not their flags (``keyword_spelling``:
``beam=0``, not ``--beam 0``).

``hub_loading.from_pretrained`` (the plugin's models', ``models.hub_model``) returns it, its own
keywords checked at load.
"""

import collections.abc
import contextlib
import copy
import enum
import functools
import inspect
import logging
import re
import threading
import typing
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple, Union

import torch
from fairseq import hub_utils
from fairseq.data import Dictionary
from fairseq.dataclass.configs import GenerationConfig
from fairseq.tasks.language_modeling import LanguageModelingTask
from omegaconf import DictConfig, open_dict

from fairseq_san import options
from fairseq_san.checkpoints import refuse_beyond_float16
from fairseq_san.errors import UsageError, first_line
from fairseq_san.fairseq_fixes.batch_tokens import OVER_MAX_TOKENS, SentenceOverMaxTokens
from fairseq_san.fairseq_fixes.last_batch import NOTHING_TO_BATCH
from fairseq_san.fairseq_fixes.one_line_errors import too_long_sentence
from fairseq_san.generation_options import check_no_alignment, check_no_constraints
from fairseq_san.tasks.decoding import (
    CALL_KEYWORD,
    REFINEMENT_OPTIONS,
    DecodingTask,
    check_generation_args,
    check_generation_value_types,
    is_min_len_assertion,
    min_len_above_max_len,
)

logger = logging.getLogger(__name__)

# How an option given in from_pretrained's generation_args is named in a message.
GIVEN_AS_GENERATION_ARGS = " (in from_pretrained's generation_args)"

# Why the hub would ignore a generation option that none of its generators reads (or fairseq's
# seed, which it never sets), and what to do instead: fairseq-generate, fairseq-interactive or
# other tasks' generators read these, and fairseq's hub decoded as without them. AT_BUILD's are
# read as the hub is built.
ITERATIVE_REFINEMENT = (
    "it is an option of fairseq's iterative refinement (--task translation_lev), not of these "
    "models: drop it"
)
SPEECH = (
    "it is an option of fairseq's speech tasks (speech_to_text, speech_to_speech), not of these "
    "models: drop it"
)
AT_BUILD = (
    "the hub applies it to the models as it builds them: give it to from_pretrained(..., "
    "generation_args={{'{key}': ...}})"
)
LM_FUSION = (
    "the hub fuses no language model: decode with fairseq-generate --lm-path LM --lm-weight W"
)
UNREAD_BY_HUB = {
    "nbest": "generate() returns every hypothesis of the beam, best first (translate() and "
    "sample() the best one): slice them, hypos[:N]",
    "prefix_size": "a language model continues the whole text it is given (give it only the "
    "prefix), and a translation model gets no target prefix here (fairseq-generate "
    "--prefix-size N takes one from the references)",
    "lm_path": LM_FUSION,
    "lm_weight": LM_FUSION,
    "replace_unk": "the hub replaces no unknown word (nor can fairseq 0.12: its generators "
    "return no per-word alignment): drop it",
    "sacrebleu": "it is how fairseq-generate scores BLEU, and the hub scores nothing: drop it",
    "no_early_stop": "fairseq reads it nowhere (deprecated): drop it",
    "no_seed_provided": "fairseq's commands set it for themselves: drop it",
    "seed": "the hub seeds no generator (fairseq's commands seed torch with --seed): call "
    "torch.manual_seed(N) before the call that samples",
    **dict.fromkeys(("no_beamable_mm", "retain_dropout", "retain_dropout_modules"), AT_BUILD),
    **dict.fromkeys(REFINEMENT_OPTIONS, ITERATIVE_REFINEMENT),
    **dict.fromkeys(("beam_mt", "max_len_a_mt", "max_len_b_mt", "lenpen_mt", "eos_token"), SPEECH),
}


# translate() or sample() of one text that skip_invalid_size_inputs left out: no text to return.
ONE_TEXT_LEFT_OUT = (
    "skip_invalid_size_inputs=True left out the one text given (too long for the model), and "
    "translate() and sample() of one text return its text: pass a list of texts ([text]) to get "
    "a shorter list, here [], or leave skip_invalid_size_inputs out to have the length refused"
)


# A flag in a message of a check the hub shares with the command line, with its value, unless it
# follows a command's name (the message speaks of that command).
FLAG_IN_MESSAGE = re.compile(
    r"(?P<command>fairseq-[a-z-]+(?:'s)? )?--(?P<flag>[a-z][a-z0-9]*(?:-[a-z0-9]+)*)"
    r"(?P<value> (?:'[^']*'|[^\s,:;()]+))?"
)
# The hub's own spelling of a generation option it takes otherwise than as a keyword.
HUB_SPELLING = {"prefix_size": "inference_step_args['prefix_tokens']"}


def keyword_spelling(message: str, given: Dict[str, Any]) -> str:
    """``message``, its flags of generation options spelt as the hub's keywords: ``--beam 0:``
    as ``beam=0:``, ``--san-decoding static`` as ``san_decoding='static'`` (a value as ``given``
    holds it, a number, or one of the option's choices), a switch as ``sampling=True``, any
    other (a flag before a word of the sentence) as its name. The checks shared with the command
    line named flags to a Python user."""

    def spelt(match: "re.Match") -> str:
        key = match.group("flag").replace("-", "_")
        after = match.group("value") or ""
        if match.group("command") or not is_generation_keyword(key):
            return match.group(0)
        if key in HUB_SPELLING:
            return HUB_SPELLING[key] + after
        value = after[1:]
        if key in given and value.strip("'") == str(given[key]):  # "--print-alignment 'True'"
            return f"{key}={given[key]!r}"
        if is_switch(key):  # what follows it is a word of the sentence
            return f"{key}=True{after}"
        if reads_as_number(value):
            return f"{key}={value}"
        if value in keyword_choices(key):
            return f"{key}={value!r}"
        return key + after

    return FLAG_IN_MESSAGE.sub(spelt, message)


def is_generation_keyword(key: str) -> bool:
    """Whether the hub's calls take ``key``: a generation option of fairseq's or the plugin's."""
    return key in GenerationConfig.__dataclass_fields__ or key in options.OPTIONS


def reads_as_number(text: str) -> bool:
    """Whether ``text`` is a number as Python's float() reads it (``nan``, ``inf`` too)."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def is_switch(key: str) -> bool:
    """Whether generation keyword ``key`` is one of fairseq's switches (``sampling``): a flag
    without a value, which the hub takes as ``key=True``."""
    return key in GenerationConfig.__dataclass_fields__ and (
        GenerationConfig.__dataclass_fields__[key].type is bool
    )


def keyword_choices(key: str) -> Tuple[str, ...]:
    """The values generation keyword ``key`` chooses among (its ChoiceEnum's, or the plugin
    option's choices); none for another kind."""
    if key in options.OPTIONS:
        return options.OPTIONS[key].choices or ()
    kind = GenerationConfig.__dataclass_fields__[key].type
    for base in typing.get_args(kind) or (kind,):
        if isinstance(base, type) and issubclass(base, enum.Enum):
            return tuple(str(member.value) for member in base)
    return ()


@contextlib.contextmanager
def keywords_spelt(given: Dict[str, Any]):
    """Re-raise a UsageError of a check shared with the command line in the hub's words
    (``keyword_spelling``, the keywords ``given``)."""
    try:
        yield
    except SentenceOverMaxTokens:  # the hub words its own (sentence_over_max_tokens)
        raise
    except UsageError as error:
        raise UsageError(keyword_spelling(str(error), given)) from None


def check_cuda(call: str, leave_out: str) -> None:
    """Refuse ``call`` (moving a hub model to a GPU) in one line where torch sees no CUDA
    device, saying to leave ``leave_out`` out."""
    if not torch.cuda.is_available():
        why = "is a CPU-only build" if torch.version.cuda is None else "sees no CUDA device"
        raise UsageError(
            f"{call} on a hub model: this torch ({torch.__version__}) {why}; decode on the CPU "
            f"(leave {leave_out} out), or on a machine with a GPU and a CUDA build of torch"
        )


def check_in_order(sentences: Any, name: str, takes: str) -> None:
    """Refuse a dict or a set as ``sentences`` (given as ``name`` to a call that ``takes`` a
    list): the outputs are a list in the inputs' order, and fairseq decoded a dict's keys (its
    values unread) and a set in an order of its own, without a word."""
    if isinstance(sentences, (collections.abc.Mapping, collections.abc.Set)):
        instead = (
            "a dict's values: list(d.values())"
            if isinstance(sentences, collections.abc.Mapping)
            else "a set has none: make it a list"
        )
        raise TypeError(
            f"{name} is {type(sentences).__name__} {sentences!r:.40}: {takes}, whose outputs "
            f"follow its order ({instead})"
        )


def checked_texts(sentences: Any) -> Union[str, List[str]]:
    """``sentences``, a text or a list of its texts: a TypeError naming an item that is no text
    (sentencepiece said "Input must be str or bytes", of no item), or ``sentences`` where it is
    neither, or a dict or a set (``check_in_order``). Any other iterable is read once, into the
    list: a generator that the check had read translated to ``[]``. Bytes are read as UTF-8
    (fairseq's tokenizers without a bpe failed on them: "cannot use a string pattern on a
    bytes-like object")."""
    if isinstance(sentences, str):
        return sentences
    if isinstance(sentences, bytes) or not isinstance(sentences, Iterable):
        raise TypeError(
            f"sentences is {type(sentences).__name__} {sentences!r:.40}: translate(), sample() "
            "and score() take a text (str) or a list of texts"
        )
    check_in_order(sentences, "sentences", "translate(), sample() and score() take a list")
    texts = list(sentences)
    for index, sentence in enumerate(texts):
        if not isinstance(sentence, (str, bytes)):
            raise TypeError(
                f"sentence {index} is {type(sentence).__name__} {sentence!r:.40}, not text: "
                "translate(), sample() and score() take a text or a list of texts"
            )
        if isinstance(sentence, bytes):
            try:
                texts[index] = sentence.decode("utf-8")
            except UnicodeDecodeError as err:
                raise UsageError(
                    f"sentence {index} is bytes that are not UTF-8 ({err.reason}): give text"
                ) from None
    return texts


def checked_token_ids(sentences: Any, dictionary: Dictionary) -> List["torch.Tensor"]:
    """``sentences`` as a list (a generator is read once), after refusing what ``generate()``
    cannot decode: no list of sentences (None, a 0-d tensor: "iteration over a 0-d tensor"), an
    item that is no 1-D tensor of token ids, one of no token, an id outside ``dictionary``
    (fairseq failed deep inside: "'list' object has no attribute 'numel'", an IndexError,
    "cannot reshape tensor of 0 elements")."""
    if (
        isinstance(sentences, (str, bytes))
        or not isinstance(sentences, Iterable)
        or (torch.is_tensor(sentences) and sentences.dim() == 0)
    ):
        raise TypeError(
            f"tokenized_sentences is {type(sentences).__name__} {sentences!r:.40}: generate() "
            "takes a list of 1-D torch.long tensors of token ids (encode() makes them), or one"
        )
    check_in_order(sentences, "tokenized_sentences", "generate() takes a list")
    sentences = list(sentences)
    for index, tokens in enumerate(sentences):
        if not (torch.is_tensor(tokens) and tokens.dim() == 1 and tokens.dtype == torch.long):
            raise TypeError(
                f"sentence {index} is {type(tokens).__name__} {tokens!r:.40}: generate() takes "
                "a list of 1-D torch.long tensors of token ids (encode() makes them)"
            )
        if tokens.numel() == 0:
            raise UsageError(
                f"sentence {index} holds no token: encode() ends each with the end of sentence"
            )
        outside = tokens[(tokens < 0) | (tokens >= len(dictionary))]
        if outside.numel():
            raise UsageError(
                f"sentence {index} holds token id {int(outside[0])}, outside the model's "
                f"dictionary (0..{len(dictionary) - 1}): encode() the text with this model"
            )
    return sentences


# inference_step's keywords that hold a row for each sentence.
SENTENCE_ROWS = ("prefix_tokens", "constraints")


def sentence_rows(step_args: Dict[str, Any], sentences: int, dictionary: Dictionary) -> dict:
    """``step_args``' tensors of a row per sentence (``SENTENCE_ROWS``), checked: 2-D torch.long
    with a row for each of ``sentences``, a prefix's and the constraints' ids in the target
    ``dictionary`` (fairseq failed deep inside the search, or gave each row to another
    sentence)."""
    rows = {}
    for key in SENTENCE_ROWS:
        value = step_args.get(key)
        if value is None:
            continue
        given = f"inference_step_args['{key}']"
        if not (torch.is_tensor(value) and value.dim() == 2 and value.dtype == torch.long):
            raise TypeError(
                f"{given} is {type(value).__name__} {value!r:.40}: pass a 2-D torch.long tensor, "
                "a row for each sentence"
            )
        if len(value) != sentences:
            raise UsageError(
                f"{given} has {len(value)} rows for {sentences} sentences: give a row for each "
                "sentence, in their order"
            )
        ids = value if key == "prefix_tokens" else value[:, 1:]  # a packed row: its count first
        outside = id_outside(ids, len(dictionary))
        if outside is not None:  # fairseq's search failed on them: an IndexError
            raise UsageError(
                f"{given} holds token id {outside}, outside the model's target dictionary "
                f"(0..{len(dictionary) - 1})"
            )
        rows[key] = value
    return rows


def check_no_prompt_beside_prefix(
    sentences: List[torch.Tensor], rows: Dict[str, torch.Tensor], dictionary: Dictionary
) -> None:
    """Refuse a language model's ``prefix_tokens`` beside a sentence that holds a prompt: fairseq's
    language-modelling task forces them in place of the prompt, which it dropped without a word
    (``generate([encode("tok1 tok2")], inference_step_args={'prefix_tokens': ...})`` continued
    the prefix alone)."""
    if "prefix_tokens" not in rows:
        return
    for index, tokens in enumerate(sentences):
        if tokens.ne(dictionary.eos()).any():
            raise UsageError(
                f"inference_step_args['prefix_tokens'] beside sentence {index}, which holds a "
                "prompt: a language model's prefix tokens take the prompt's place, and the "
                "prompt would be ignored; give the prefix as the text (a language model "
                "continues the text it is given), or the sentences empty (encode(''))"
            )


def id_outside(ids: torch.Tensor, entries: int) -> Optional[int]:
    """The first of ``ids`` that is no id of a dictionary of ``entries`` (below 0, or not below
    ``entries``), or None."""
    outside = ids[(ids < 0) | (ids >= entries)]
    return int(outside.flatten()[0]) if outside.numel() else None


def checked_allowed_tokens(allowed_tokens: Callable, entries: int) -> Callable:
    """``prefix_allowed_tokens_fn`` whose every answer is checked: ids of the target dictionary's
    ``entries`` (fairseq's search failed on another: an IndexError), not None (which allowed
    every token, without a word)."""

    @functools.wraps(allowed_tokens)
    def checked(batch_id: int, tokens: torch.Tensor):
        ids = allowed_tokens(batch_id, tokens)
        if ids is None:
            raise UsageError(
                "prefix_allowed_tokens_fn returned None: return the allowed token ids (all of "
                "them: list(range(len(hub.tgt_dict))))"
            )
        outside = id_outside(torch.as_tensor(ids), entries)
        if outside is not None:
            raise UsageError(
                f"prefix_allowed_tokens_fn returned token id {outside}, outside the model's "
                f"target dictionary (0..{entries - 1})"
            )
        return ids

    return checked


# The dtypes of token ids that decode() takes.
INTEGER_TYPES = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)


def as_token_ids(tokens: Any) -> Optional[torch.Tensor]:
    """``tokens`` as a tensor of integer ids (a list or tuple of ints too), or None for another
    kind."""
    if isinstance(tokens, (list, tuple)):
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in tokens):
            return None
        tokens = torch.tensor(tokens, dtype=torch.long)
    return tokens if torch.is_tensor(tokens) and tokens.dtype in INTEGER_TYPES else None


def check_switch(name: str, value: Any) -> None:
    """TypeError for a switch of the hub's calls that is no bool: fairseq took any value for
    its truth (the text "False" is true, "no" too: ``verbose='no'`` logged every sentence)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name}={value!r}: pass True or False")


def check_generate_arguments(
    skip_invalid_size_inputs: Any,
    inference_step_args: Any,
    prefix_allowed_tokens_fn: Any,
    step_keywords: List[str],
) -> None:
    """Refuse ``generate()``'s own arguments that fairseq used unchecked: a
    ``skip_invalid_size_inputs`` that is no bool (the text "False" is true: sentences were left
    out), ``inference_step_args`` that are no dict or name what the task's ``inference_step``
    (taking ``step_keywords``) does not take, a ``prefix_allowed_tokens_fn`` that cannot be
    called (TypeErrors deep inside the search)."""
    check_switch("skip_invalid_size_inputs", skip_invalid_size_inputs)
    if inference_step_args is not None:
        if not isinstance(inference_step_args, dict):
            raise TypeError(
                f"inference_step_args={inference_step_args!r:.40}: pass a dict of the task's "
                f"inference_step keywords ({', '.join(step_keywords)})"
            )
        unknown = sorted(set(inference_step_args) - set(step_keywords))
        if unknown:
            raise UsageError(
                f"inference_step_args={{'{unknown[0]}': ...}}: the task's inference_step takes "
                f"{', '.join(step_keywords)}"
            )
    if prefix_allowed_tokens_fn is not None and not callable(prefix_allowed_tokens_fn):
        raise TypeError(
            f"prefix_allowed_tokens_fn={prefix_allowed_tokens_fn!r:.40}: pass a function of "
            "(batch id, prefix tokens) returning the allowed token ids, or None"
        )


def sentence_over_max_tokens(
    error: Exception, sentences: Any, added: int = 0
) -> Optional[UsageError]:
    """The error naming the first of ``sentences`` longer than a batch holds, where ``error`` is
    fairseq's assertion that one is (the hub batches by the checkpoint's training --max-tokens)
    or the command line's words for it (``SentenceOverMaxTokens``, where a fairseq command was
    imported in this process), else None. ``added``: the tokens the batching adds to each
    (``scored_start_tokens``), which fairseq asserted of (a traceback) and the advice missed."""
    found = OVER_MAX_TOKENS.search(str(error))
    if isinstance(error, SentenceOverMaxTokens):
        limit = error.limit
    elif found:
        limit = int(found.group(1))
    else:
        return None
    lengths = [len(tokens) + added for tokens in sentences]
    over = [(index, length) for index, length in enumerate(lengths) if length > limit]
    if not over:
        return None
    index, length = over[0]
    included = "its end of sentence included"
    if added:
        included = (
            "its end of sentence and the start token </s> after <s> of --add-bos-token included"
        )
    return UsageError(
        f"sentence {index} is {length} tokens long ({included}), and a batch "
        f"holds at most {limit} (max_tokens, by default the training's --max-tokens): load the "
        f"model with from_pretrained(..., max_tokens={length}) or more"
    )


def scored_start_tokens(task: Any) -> int:
    """The tokens the task's batching adds to each sentence of this thread's call (the plugin
    language model's ``added_start_tokens``; none for another task)."""
    added = getattr(task, "added_start_tokens", None)
    return added() if added is not None else 0


def sentence_too_long(index: int, length: int, max_positions: Any) -> UsageError:
    """The error for sentence ``index`` of ``length`` tokens, more than a model of
    ``max_positions`` (a translation model's: source, target) reads."""
    limit = max_positions[0] if isinstance(max_positions, tuple) else max_positions
    return UsageError(
        f"sentence {index} is {length} tokens long (its end of sentence included), and the "
        f"model reads at most {limit}: shorten or split it, or pass "
        "skip_invalid_size_inputs=True to leave such sentences out (fairseq then returns no "
        "item for them, and the list is shorter than the sentences)"
    )


def no_hypothesis_problem(decoded: List[list], skipped: bool) -> Optional[str]:
    """The first sentence that a ``prefix_allowed_tokens_fn`` left no hypothesis (fairseq's
    search drops those it gives no allowed token), said; None if each has one. Its n-best list
    came back empty, as where the function forbids a token of a language model's prompt or of
    forced ``prefix_tokens``, which the search must take. ``skipped``: sentences left out
    (``skip_invalid_size_inputs``), which shift the indices."""
    empty = [index for index, hypotheses in enumerate(decoded) if not hypotheses]
    if not empty:
        return None
    named = "a sentence" if skipped else f"sentence {empty[0]}"
    return (
        f"{named} (of {len(empty)} with no hypothesis): prefix_allowed_tokens_fn left it none; "
        "it must allow each token of a prompt or of prefix_tokens at its position, and the end "
        "of sentence by the maximum length"
    )


class SANHubInterface(hub_utils.GeneratorHubInterface):
    """fairseq's hub interface, refusing a generation keyword that no generator would follow
    (``check_read_by_hub``, ``check_generation_args``), and decoding with the beam of
    ``from_pretrained``'s ``generation_args`` where a call gives none (fairseq's calls always
    passed their own default, 5 or 1, over it)."""

    loaded_beam: Optional[int] = None  # from_pretrained's generation_args['beam'], if given

    def __init__(self, cfg, task, models):
        super().__init__(cfg, task, models)
        # While generate() runs, in its own thread (calls in threads of their own share the
        # hub): the inference_step_args it gives fairseq's, and their tensors of a row per
        # sentence (``sentence_rows``), which each batch takes its sentences' rows of.
        self.calls = threading.local()

    def __deepcopy__(self, memo: Dict[int, Any]) -> "SANHubInterface":
        """A copy of the hub, its models and task copied, with calls of its own (``calls``:
        copying the thread's record failed, "cannot pickle '_thread._local' object")."""
        copied = type(self).__new__(type(self))
        memo[id(self)] = copied
        for key, value in vars(self).items():
            if key != "calls":
                vars(copied)[key] = copy.deepcopy(value, memo)
        copied.calls = threading.local()
        return copied

    def __copy__(self) -> "SANHubInterface":
        """A shallow copy (its models and task shared), with calls of its own; ``copy.copy``
        would otherwise take the pickle's way, which ``__reduce_ex__`` refuses."""
        copied = type(self).__new__(type(self))
        vars(copied).update(vars(self))
        copied.calls = threading.local()
        return copied

    def __reduce_ex__(self, protocol: int) -> Any:
        """Refused in one line: pickle (``torch.save``, a process pool) failed inside the hub's
        objects ("Can't pickle local object 'BaseFairseqModel.make_generation_fast_.<locals>.
        train'"), and fairseq's configuration holds enums that no pickle finds again."""
        raise TypeError(
            f"cannot pickle a hub model ({type(self).__name__}): fairseq's generation-ready models "
            "and configuration do not pickle; copy.deepcopy(hub) copies it in this process, and "
            "another process loads the checkpoint itself with from_pretrained (to save weights: "
            "torch.save(hub.models[0].state_dict(), PATH))"
        )

    def beam_or_default(self, beam: Optional[int], default: int) -> int:
        """The call's ``beam``, else the one the model was loaded with, else fairseq's default
        for the call."""
        if beam is not None:
            return beam
        return self.loaded_beam if self.loaded_beam is not None else default

    def train(self, mode: bool = True) -> "SANHubInterface":
        """``nn.Module.train``, refused in one line for training: fairseq's hub prepared its
        models for generation (``make_generation_fast_``), and their ``train()`` raised "cannot
        train after make_generation_fast" from inside torch; ``train(False)`` (``eval()``) runs."""
        if mode:
            raise UsageError(
                "train() on a hub model: fairseq's hub prepared it for generation "
                "(make_generation_fast_), which cannot be undone; to train it, give the checkpoint "
                "to fairseq-train (--finetune-from-model or --restore-file); for dropout while "
                "decoding, from_pretrained(..., generation_args={'retain_dropout': True})"
            )
        return super().train(mode)

    def cuda(self, device: Optional[Union[int, torch.device]] = None) -> "SANHubInterface":
        """``nn.Module.cuda``, refused in one line where torch sees no CUDA device: torch failed
        inside itself ("Torch not compiled with CUDA enabled", an AssertionError of a CPU-only
        build; a RuntimeError without a driver)."""
        check_cuda("cuda()", ".cuda()")
        return super().cuda(device)

    def half(self) -> "SANHubInterface":
        """``nn.Module.half``, refusing a weight beyond float16's range (``refuse_beyond_float16``;
        torch converts the hub's models without their own ``half()``): it became infinite, and
        every translation failed inside fairseq's beam search."""
        for model in self.models:
            refuse_beyond_float16(model.state_dict().items(), "half()", "keep it in float32")
        return super().half()

    def to(self, *args, **kwargs) -> "SANHubInterface":
        """``nn.Module.to``, a device that torch cannot use refused in one line, as ``cuda()``
        refuses it: torch failed inside itself (``to('cuda')``: "Torch not compiled with CUDA
        enabled", an AssertionError; ``to('gpu')``: a RuntimeError listing every device type)."""
        try:
            device = torch._C._nn._parse_to(*args, **kwargs)[0]  # as nn.Module.to reads them
        except (RuntimeError, TypeError) as error:
            raise UsageError(f"to() on a hub model: {first_line(error)}") from None
        if device is not None and device.type == "cuda":
            check_cuda(f"to({str(device)!r})", f".to({str(device)!r})")
        return super().to(*args, **kwargs)

    def encode(self, sentence: Union[str, bytes]) -> torch.LongTensor:
        """fairseq's ``encode`` of one text (bytes read as UTF-8), a TypeError for anything else:
        a list of texts failed inside the tokenizer ("sequence item 0: expected str instance")."""
        if not isinstance(sentence, (str, bytes)):
            raise TypeError(
                f"encode() takes one text (str), not {type(sentence).__name__} "
                f"{sentence!r:.40} (several texts: [hub.encode(text) for text in texts])"
            )
        return super().encode(checked_texts([sentence])[0])

    def decode(self, tokens: Union[torch.Tensor, List[int]]) -> str:
        """fairseq's ``decode`` of token ids of the target dictionary: a TypeError for no ids (a
        text failed inside fairseq: "'<' not supported"), a UsageError for an id outside the
        dictionary (fairseq decoded it as ``<unk>``, without a word)."""
        ids = as_token_ids(tokens)
        if ids is None:
            raise TypeError(
                f"decode() takes token ids (a torch.long tensor or a list of ints), not "
                f"{type(tokens).__name__} {tokens!r:.40}"
            )
        outside = id_outside(ids, len(self.tgt_dict))
        if outside is not None:
            raise UsageError(
                f"decode() of token id {outside}, outside the model's target dictionary "
                f"(0..{len(self.tgt_dict) - 1})"
            )
        return super().decode(tokens)

    def translate(self, sentences, beam: Optional[int] = None, verbose: bool = False, **kwargs):
        """fairseq's ``translate`` (beam 5 unless given here or at load)."""
        return super().translate(sentences, self.beam_or_default(beam, 5), verbose, **kwargs)

    def sample(self, sentences, beam: Optional[int] = None, verbose: bool = False, **kwargs):
        """fairseq's ``sample`` (beam 1 unless given here or at load), of a text or a list of
        texts (``checked_texts``); one text that ``skip_invalid_size_inputs`` left out is
        refused in one line (fairseq's took the first of no sample: an IndexError)."""
        texts = checked_texts(sentences)
        if isinstance(texts, str):
            samples = self.sample([texts], beam, verbose, **kwargs)
            if not samples:
                raise UsageError(ONE_TEXT_LEFT_OUT)
            return samples[0]
        outer, self.calls.best_wanted = getattr(self.calls, "best_wanted", False), True
        try:  # generate() refuses a sentence left no hypothesis (it has no best)
            return super().sample(texts, self.beam_or_default(beam, 1), verbose, **kwargs)
        finally:
            self.calls.best_wanted = outer

    def generate(
        self,
        tokenized_sentences,
        beam: Optional[int] = None,
        verbose: bool = False,
        skip_invalid_size_inputs: bool = False,
        inference_step_args: Optional[dict] = None,
        prefix_allowed_tokens_fn: Optional[Callable] = None,
        **kwargs,
    ):
        """fairseq's ``generate`` (beam 5 unless given here or at load), after its keywords
        (``kwargs``: the generation config's) are checked; ``inference_step_args``' tensors of a
        row per sentence (``prefix_tokens``, ``constraints``) given to each sentence (fairseq's
        batches, sorted by length, each had the whole tensor: row i went to another sentence,
        and a 1-D sentence's were dropped)."""
        if torch.is_tensor(tokenized_sentences) and tokenized_sentences.dim() == 1:
            decoded = self.generate([tokenized_sentences], beam, verbose, skip_invalid_size_inputs,
                                    inference_step_args, prefix_allowed_tokens_fn, **kwargs)
            return decoded[0] if decoded else []  # left out (skip_invalid_size_inputs)
        beam = self.beam_or_default(beam, 5)
        check_switch("verbose", verbose)
        check_generate_arguments(
            skip_invalid_size_inputs,
            inference_step_args,
            prefix_allowed_tokens_fn,
            self.inference_step_keywords(),
        )
        check_read_by_hub(kwargs)
        check_generation_value_types(kwargs, CALL_KEYWORD)
        given = {**kwargs, "beam": beam}  # how the call spelt each, for its refusals
        with keywords_spelt(given):
            self.check_call(kwargs, inference_step_args)
        config = self.generation_config(beam, kwargs)
        if verbose and getattr(config, "print_alignment", None) == "soft":  # fairseq: ValueError
            raise UsageError(
                "print_alignment='soft' with verbose=True: fairseq's hub logs hard alignments "
                "only (source-target pairs); leave verbose out, or pass print_alignment='hard'"
            )
        with keywords_spelt(given):
            check_generation_args(config)
        self.check_plugin_keywords(kwargs)
        tokenized_sentences = checked_token_ids(tokenized_sentences, self.task.source_dictionary)
        if not tokenized_sentences:  # an empty list, generator or 2-D tensor of no row
            return []  # nothing to decode (fairseq's batching failed on no sentence)
        if prefix_allowed_tokens_fn is not None:
            entries = len(self.task.target_dictionary)
            prefix_allowed_tokens_fn = checked_allowed_tokens(prefix_allowed_tokens_fn, entries)
        step_args = dict(inference_step_args or {})  # the dict fairseq gives every batch
        rows = sentence_rows(step_args, len(tokenized_sentences), self.task.target_dictionary)
        if isinstance(self.task, LanguageModelingTask):
            check_no_prompt_beside_prefix(tokenized_sentences, rows, self.task.source_dictionary)
        outer_rows = getattr(self.calls, "batch_rows", None)  # a call made inside a call
        self.calls.batch_rows = (step_args, rows)
        try:
            with keywords_spelt(given):  # the task's checks, as it builds its generator
                decoded = super().generate(
                    tokenized_sentences,
                    beam,
                    verbose,
                    skip_invalid_size_inputs,
                    step_args,
                    prefix_allowed_tokens_fn,
                    **kwargs,
                )
        except AssertionError as error:  # fairseq's task (the plugin's say it themselves)
            if is_min_len_assertion(error):
                positions = min(model.max_decoder_positions() for model in self.models)
                problem = str(min_len_above_max_len(config, positions))
                raise UsageError(keyword_spelling(problem, given)) from None
            added = scored_start_tokens(self.task)
            over_batch = sentence_over_max_tokens(error, tokenized_sentences, added)
            if over_batch is not None:
                raise over_batch from None
            raise
        except UsageError as error:  # every sentence skipped: none left to batch
            if skip_invalid_size_inputs and str(error) == NOTHING_TO_BATCH:
                return []
            added = scored_start_tokens(self.task)
            over_batch = sentence_over_max_tokens(error, tokenized_sentences, added)
            if over_batch is not None:
                raise over_batch from None
            raise
        except Exception as error:  # fairseq's batching
            index = too_long_sentence(error)
            if index is None:
                raise
            length, limit = len(tokenized_sentences[index]), self.max_positions
            raise sentence_too_long(index, length, limit) from None
        finally:
            self.calls.batch_rows = outer_rows
        problem = None
        if prefix_allowed_tokens_fn is not None:
            problem = no_hypothesis_problem(decoded, skip_invalid_size_inputs)
        if problem is not None and getattr(self.calls, "best_wanted", False):
            raise UsageError(  # fairseq's sample() failed on the empty list: an IndexError
                f"{problem}; translate() and sample() return each sentence's best hypothesis: "
                "generate() returns the n-best lists, empty for such a sentence"
            )
        if problem is not None:
            logger.warning(problem)
        return decoded

    def _build_batches(self, tokens, skip_invalid_size_inputs: bool):
        """fairseq's batches, each with its sentences' rows (by the batch's ``id``) of the
        per-sentence tensors of the ``inference_step_args`` that fairseq's ``generate`` gives
        its task's ``inference_step`` with it (this thread's ``calls.batch_rows``)."""
        step_args, rows = getattr(self.calls, "batch_rows", None) or ({}, {})
        if hasattr(self.task, "skipping_too_long"):  # a plugin language model's prompts
            self.task.skipping_too_long = skip_invalid_size_inputs
        for batch in super()._build_batches(tokens, skip_invalid_size_inputs):
            for key, tensor in rows.items():
                ids = batch["id"].to(tensor.device)  # the rows may be on the GPU already
                step_args[key] = tensor.index_select(0, ids).to(self.device)
            yield batch

    def score(self, sentences, replace_newline_with_eos: bool = False, **kwargs):
        """fairseq's ``score`` (a language model's), of a text or a list of texts
        (``checked_texts``), refusing a search's keyword: it scores the sentences as they are
        and ignored ``lenpen``, ``temperature``, ``beam``. It scores with fairseq's scorer
        whatever decoder the hub was loaded with (``scoring_keywords``)."""
        check_switch("replace_newline_with_eos", replace_newline_with_eos)
        if kwargs.get("skip_invalid_size_inputs"):  # ignored: a long sentence was refused
            raise UsageError(
                "skip_invalid_size_inputs=True: score() scores every sentence given (one longer "
                "than the model's positions is refused): leave those sentences out"
            )
        for key, value in kwargs.items():
            searches = key in GenerationConfig.__dataclass_fields__
            if key == "beam" or searches or key in options.DECODER_OPTION_NAMES:
                raise UsageError(
                    f"{key}={value!r} would be ignored: score() scores the sentences as they are, "
                    "by no search: drop it"
                )
        texts = checked_texts(sentences)
        if isinstance(texts, str):  # fairseq's would call this one again with the keywords added
            return self.score([texts], replace_newline_with_eos, **kwargs)[0]
        return super().score(texts, replace_newline_with_eos=replace_newline_with_eos,
                             **kwargs, **self.scoring_keywords())  # fmt: skip

    def scoring_keywords(self) -> Dict[str, Any]:
        """The decoder options that make the task score with fairseq's scorer (one teacher-forced
        pass): a hub loaded with ``san_decoding='static'`` (and its precision) refused
        ``score()``, naming ``score_reference``, which the user never gave."""
        if not isinstance(self.task, DecodingTask):
            return {}
        execution = getattr(self.task.cfg, options.DECODER_EXECUTION.name, None)
        if options.DECODER_EXECUTION.is_set(execution):
            raise UsageError(
                f"score() scores with fairseq's scorer, and this hub was loaded with "
                f"{options.DECODER_EXECUTION.name}={str(execution)!r}, an option of the static "
                "decoder only: score with a hub loaded without it"
            )
        return {options.DECODING.name: options.FAIRSEQ,
                options.DECODER_PRECISION.name: options.DECODER_PRECISION.default}  # fmt: skip

    def inference_step_keywords(self) -> List[str]:
        """The keywords the task's ``inference_step`` takes besides the generator, the models and
        the batch (``prefix_tokens``, ``constraints``)."""
        parameters = inspect.signature(self.task.inference_step).parameters
        return [name for name in parameters if name not in ("generator", "models", "sample")]

    def check_call(self, keywords: Dict[str, Any], inference_step_args: Optional[dict]) -> None:
        """Refuse keywords that the hub reads but cannot follow here (fairseq failed on them
        deep inside: a TypeError, an IndexError)."""
        language_model = isinstance(self.task, LanguageModelingTask)
        if language_model:  # fairseq's own language_modeling task too
            check_no_alignment(keywords.get("print_alignment"))
            packed = (inference_step_args or {}).get("constraints")
            check_no_constraints(keywords.get("constraints") or packed is not None)
        if keywords.get("score_reference") and not language_model:
            raise UsageError(
                "score_reference=True (score() sets it): the hub gives a translation model's "
                "scorer no reference to score; score translations with fairseq-generate "
                "--score-reference (score() scores texts with a language model)"
            )
        representation = keywords.get("constraints", self.cfg.generation.get("constraints"))
        tokens_given = (inference_step_args or {}).get("constraints") is not None
        if representation and not tokens_given:
            raise UsageError(
                f"constraints={representation!r}: constrained decoding needs the "
                "constraint tokens, inference_step_args={'constraints': ...} (a row for each "
                "sentence: fairseq.token_generation_constraints.pack_constraints)"
            )
        if tokens_given and not representation:
            raise UsageError(
                "inference_step_args={'constraints': ...} needs constraints='ordered' or "
                "'unordered' (the search that meets them)"
            )

    def generation_config(self, beam: int, keywords: Dict[str, Any]) -> DictConfig:
        """The generation config fairseq's ``generate`` builds from ``beam`` and ``keywords``."""
        config = copy.deepcopy(self.cfg.generation)
        with open_dict(config):
            config.beam = beam
            for key, value in keywords.items():
                setattr(config, key, value)
        return config

    def check_plugin_keywords(self, keywords: Dict[str, Any], given_as: str = "") -> None:
        """Refuse a plugin's decoding option for a checkpoint of fairseq's own task, whose
        generator would ignore it; ``given_as`` says where it was given, after it."""
        if isinstance(self.task, DecodingTask):
            return
        for key, value in keywords.items():
            if key in options.DECODER_OPTION_NAMES and options.OPTIONS[key].is_set(value):
                plugin_task = (
                    "language_modeling_san"
                    if isinstance(self.task, LanguageModelingTask)
                    else "translation_san"
                )
                raise UsageError(
                    f"{key}={value!r}{given_as} is an option of the task {plugin_task}, and this "
                    f"model's task is {registered_name(self.task)}, whose generator would ignore "
                    f"it: load it with from_pretrained(..., task={{'_name': '{plugin_task}'}})"
                )

    def check_loaded_generation_args(self, generation_args: Dict[str, Any]) -> None:
        """Refuse, once the model is loaded, ``from_pretrained``'s ``generation_args`` that no
        search can follow (fairseq has set them on the generation config) or that this task's
        generator would ignore: fairseq's decoded with them, or failed at ``translate()``."""
        with keywords_spelt(generation_args):
            check_generation_args(self.cfg.generation)
        self.check_plugin_keywords(generation_args, GIVEN_AS_GENERATION_ARGS)


def registered_name(task: object) -> str:
    """The name fairseq registered ``task``'s class under: the loaded task's (an ensemble's is
    its first checkpoint's, its configuration its last's)."""
    from fairseq.tasks import TASK_REGISTRY

    return next((name for name, kind in TASK_REGISTRY.items() if kind is type(task)),
                type(task).__name__)  # fmt: skip


def check_read_by_hub(keywords: Dict[str, Any], given_as: str = "", at_build: bool = False) -> None:
    """Refuse a generation keyword that no generator the hub builds reads (``UNREAD_BY_HUB``):
    fairseq's hub set it on the generation config and decoded as without it. ``given_as`` says
    where it was given, after it; ``at_build``: ``from_pretrained``'s ``generation_args``, which
    the hub also applies to the models as it builds them (``AT_BUILD``)."""
    for key, value in keywords.items():
        why = unread_by_hub(key, at_build)
        if why is not None:
            raise UsageError(f"{key}={value!r}{given_as} would be ignored: {why}")


def unread_by_hub(key: str, at_build: bool) -> Optional[str]:
    """Why the hub would ignore generation option ``key`` and what to do instead
    (``UNREAD_BY_HUB``), or None where a generator it builds reads it (``at_build``: also those
    the hub applies to the models as it builds them)."""
    why = UNREAD_BY_HUB.get(key)
    if why is None or (at_build and why is AT_BUILD):
        return None
    return why.format(key=key)
