"""``--san-decoding``: which generator a task builds, and the static decoder's options.

``translation_san`` and ``language_modeling_san`` inherit ``DecodingTask``: ``fairseq`` (and, for
translation, the model's own ``no-cache`` and ``fast``) keeps fairseq's SequenceGenerator;
``static`` builds the task's static decoder (``static_decoding``) with ``--san-decoder-precision``
and ``--san-decoder-execution``.
"""

import logging
import re
import typing
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import torch
from fairseq.data import Dictionary
from fairseq.search import DiverseBeamSearch
from fairseq.sequence_scorer import SequenceScorer
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.dataclass.configs import GenerationConfig
from omegaconf import DictConfig
from torch import Tensor, nn

from fairseq_san import options
from fairseq_san.errors import UsageError, choice_problem, nearest_key_hint
from fairseq_san.generation_options import (
    check_allowed_tokens_searched,
    check_alignment_kind,
    check_constraints_kind,
    check_diverse_beam_groups,
    check_length_penalty,
    check_search_numbers,
    exhausted_ngrams,
    is_integer,
    min_len_above_positions,
    PrefixEndsUnfinished,
    prefix_ends_before_source_length,
    prefix_past_source_length,
    scores_beyond_floats,
    unfinished_prefix_ends,
    unmet_constraints,
    whole_targets_forced,
)
from fairseq_san.options import option_field
from fairseq_san.policy import is_number
from fairseq_san.static_decoding.beam_search import LiveAtMaxLen
from fairseq_san.static_decoding.execution import offered_executions
from fairseq_san.static_decoding.precision import PRECISIONS, precision_help

logger = logging.getLogger(__name__)


@dataclass
class StaticDecoderConfig(FairseqDataclass):
    """The options of ``--san-decoding static``, in the config of every task that offers it."""

    san_decoder_precision: ChoiceEnum(list(PRECISIONS)) = option_field(
        options.DECODER_PRECISION, help=precision_help()
    )
    san_decoder_execution: Optional[ChoiceEnum(offered_executions())] = option_field(
        options.DECODER_EXECUTION
    )


def set_beam_sizes(models: Sequence, beam_size: int) -> None:
    """Tell each model the generator's beam, 1 included: fairseq's SequenceGenerator does only
    above 1, so a model that decoded with beam k before (the hub, the benchmark) would keep k,
    and ``--san-decoding fast`` would take every k-th encoder row for a sentence's."""
    for model in models:
        if hasattr(model, "set_beam_size"):
            model.set_beam_size(beam_size)


def check_capped_beam_groups(generator: object, beam_asked: int) -> None:
    """Refuse diverse beam search's groups where they do not divide the beam that fairseq's
    generator capped (at the target dictionary's entries but one): its search failed at the
    first step with a message naming no number; the static decoder checks the same."""
    search = getattr(generator, "search", None)
    if isinstance(search, DiverseBeamSearch):
        check_diverse_beam_groups(generator.beam_size, search.num_groups, given=beam_asked)


def applied_decoding(models: Sequence, asked: str) -> str:
    """The decoding the models apply: ``asked``, or another that a model's own options chose
    (``--model-overrides "{'san_decoding': 'no-cache'}"`` beside ``--san-decoding fairseq``),
    said so, and fairseq's for an ensemble's models that are none of the plugin's (``foreign``):
    the log named ``asked`` whatever the model did."""
    own = sorted({getattr(model, "decoding", asked) for model in models} - {asked})
    said = asked if not own else (
        f"{', '.join(own)} (the model's own options: --model-overrides or the checkpoint)"
    )
    others = sorted({type(model).__name__ for model in foreign(models)})
    if asked == options.FAIRSEQ or not others:
        return said
    return f"{said}; fairseq for {', '.join(others)}, none of the plugin's models"


def foreign(models: Sequence) -> List[nn.Module]:
    """The models that are none of the plugin's, which decode only as fairseq does."""
    return [model for model in models if not hasattr(model, "set_decoding")]


def check_decoding_applied(models: Sequence, decoding: str) -> None:
    """Refuse a model decoding (``no-cache``, ``fast``) that no model of ``models`` applies (each
    is none of the plugin's): fairseq's generator decoded as with ``fairseq``, and the log named
    ``decoding``. An ensemble with a plugin model decodes (``applied_decoding`` says how)."""
    if decoding != options.FAIRSEQ and len(foreign(models)) == len(models):
        raise UsageError(decoding_not_applied(models[0], decoding))


def decoding_not_applied(model: object, decoding: str) -> str:
    """The error for a model decoding (``no-cache``, ``fast``) asked of ``model``, which is none
    of the plugin's and cannot apply it."""
    return (
        f"--san-decoding {decoding}: the model ({type(model).__name__}) is none of the "
        "plugin's models, which alone apply it: decode with --san-decoding fairseq or "
        "--san-decoding static"
    )


# How a keyword of the hub's calls is named in a message.
CALL_KEYWORD = "a keyword of translate(), sample() or generate()"


def check_generation_args(args) -> None:
    """Refuse a generation option that no generator reads and search numbers that no search can
    follow (``check_search_numbers``, which the command line ran as it parsed). Only the hub's
    ``translate()``/``generate()`` keywords reach here unparsed: fairseq sets each on its
    generation config, so a misspelt one (``bema=1``) was ignored, a model's option
    (``san_policy``) too, and ``lenpen=nan`` gave NaN scores."""
    if isinstance(args, DictConfig):
        check_generation_keys(args.keys(), CALL_KEYWORD, plugin_option_misplaced)
    check_search_numbers(args)
    check_alignment_kind(getattr(args, "print_alignment", None))
    check_constraints_kind(getattr(args, "constraints", None))


def check_generation_keys(
    keys: Iterable[str], where: str, misplaced: Callable[[options.Option], str]
) -> None:
    """Refuse a key that names no generation option (``where`` says what it was given as),
    naming the nearest; a plugin option that is not a decoder's with ``misplaced``'s words."""
    known = set(GenerationConfig.__dataclass_fields__) | set(options.DECODER_OPTION_NAMES)
    for key in keys:
        if key in options.OPTIONS and key not in known:
            raise UsageError(misplaced(options.OPTIONS[key]))
        if key not in known:
            raise UsageError(
                f"unknown generation option '{key}' ({where}): "
                + nearest_key_hint(key, known, fallback="see fairseq's GenerationConfig")
            )


# What a GenerationConfig field of each type takes, as a message says it, and the test of a value.
VALUE_KINDS = {
    bool: ("True or False", lambda value: isinstance(value, bool)),
    int: ("an integer", is_integer),
    float: ("a number", is_number),
    str: ("a text", lambda value: isinstance(value, str)),
}


def field_kind(field_type: Any) -> Tuple[Optional[type], bool]:
    """The base type of a GenerationConfig field's type and whether it is Optional; None for a
    type this check leaves alone (``Any``, a choice, whose check names the choices)."""
    arguments = typing.get_args(field_type)
    optional = typing.get_origin(field_type) is typing.Union and type(None) in arguments
    base = next(a for a in arguments if a is not type(None)) if optional else field_type
    return (base if base in VALUE_KINDS else None), optional  # a ChoiceEnum's: where it is read


def check_generation_value_types(keywords: Dict[str, Any], where: str) -> None:
    """Refuse a keyword (``where`` says what it was given as) whose value its GenerationConfig
    field cannot take. fairseq set the hub's keywords on the config unchecked: ``sampling=
    'False'`` sampled and ``unnormalized='False'`` left scores unnormalized (a text is true),
    and ``lenpen=None`` failed deep inside the search."""
    fields = GenerationConfig.__dataclass_fields__
    for key, value in keywords.items():
        if key not in fields:
            continue
        base, optional = field_kind(fields[key].type)
        if base is None or (value is None and optional):
            continue
        takes, accepts = VALUE_KINDS[base]
        if value is None or not accepts(value):
            default = fields[key].default
            raise UsageError(
                f"{key}={value!r} ({where}): it takes {takes} (leave it out for fairseq's "
                f"default, {default!r})"
            )


def check_searches_fit_vocabulary(args, entries: int) -> None:
    """Refuse ``--sampling-topk`` above the target dictionary's ``entries``, and
    ``--diversity-rate`` or ``--constraints`` where twice the beam is above them: those searches
    take the 2 x beam best tokens of a hypothesis. fairseq's failed inside torch's topk
    ("selected index k out of range"). Both generators cap the beam at the entries but one
    (fairseq's ``SequenceGenerator``): ``--nbest`` above that is refused (fewer hypotheses were
    printed than asked, without a word), a beam above it is logged."""
    check_beam_fits_vocabulary(args, entries)
    topk = getattr(args, "sampling_topk", -1)
    if getattr(args, "sampling", False) and topk > entries:
        raise UsageError(
            f"--sampling-topk {topk} is more than the target dictionary's {entries} entries: "
            f"pass at most {entries} (or -1, sampling from all of them)"
        )
    beam, rate = getattr(args, "beam", 5), getattr(args, "diversity_rate", -1.0)
    chosen = (("--diversity-rate", rate is not None and rate > 0),
              ("--constraints", bool(getattr(args, "constraints", None))))  # fmt: skip
    for flag, searched in chosen:
        if searched and 2 * beam > entries:
            raise UsageError(
                f"{flag} with --beam {beam}: its search takes the 2 x beam best tokens of "
                f"each hypothesis, more than the target dictionary's {entries} entries: pass "
                f"--beam {entries // 2} or less"
            )


def check_beam_fits_vocabulary(args, entries: int) -> None:
    """``check_searches_fit_vocabulary``'s check of the beam and ``--nbest`` against the
    hypotheses that the generators keep: the target dictionary's ``entries`` but one."""
    kept, beam, nbest = entries - 1, getattr(args, "beam", 5), getattr(args, "nbest", 1)
    if nbest > kept:
        raise UsageError(
            f"--nbest {nbest}: the search keeps at most the target dictionary's {entries} entries "
            f"but one, {kept} hypotheses per sentence: pass --nbest {kept} or less"
        )
    if beam > kept:
        logger.warning(
            "beam %d is capped at %d, the target dictionary's %d entries but one, as fairseq's "
            "search caps it: %d hypotheses per sentence", beam, kept, entries, kept
        )


def check_scoring(args, decoding: str) -> None:
    """Refuse a decoding of the model with ``--score-reference``: fairseq scores the references
    in one teacher-forced pass, which decodes nothing (the static decoder refuses it too)."""
    model_decoding = decoding in options.MODEL_DECODINGS and decoding != options.FAIRSEQ
    if getattr(args, "score_reference", False) and model_decoding:
        raise UsageError(
            f"--san-decoding {decoding} with --score-reference: scoring the references is one "
            "teacher-forced pass, which decodes nothing; drop --san-decoding"
        )


# The options of fairseq's iterative refinement generator (non-autoregressive models, --task
# translation_lev), with their defaults. A left-to-right model's generator ignores them, and
# fairseq-generate fails on two of them after the first batch: it reads the hypotheses'
# refinement history (--retain-iter-history, KeyError: 'history') and steps (--print-step).
REFINEMENT_OPTIONS = {
    name: GenerationConfig.__dataclass_fields__[name].default
    for name in (
        "iter_decode_eos_penalty", "iter_decode_max_iter", "iter_decode_force_max_iter",
        "iter_decode_with_beam", "iter_decode_with_external_reranker", "retain_iter_history",
        "print_step", "decoding_format",
    )
}  # fmt: skip


def check_no_refinement_options(args) -> None:
    """Refuse an option of iterative refinement (``REFINEMENT_OPTIONS``) set away from its
    default: these models decode left to right."""
    for name, default in REFINEMENT_OPTIONS.items():
        value = getattr(args, name, default)
        if value != default:
            raise UsageError(
                f"{options.flag_of(name)} is an option of fairseq's iterative refinement of "
                "non-autoregressive models (--task translation_lev); this model decodes left to "
                "right, without it: drop it"
            )


def check_choice(option: options.Option, value: str) -> None:
    """Refuse a value outside ``option``'s choices: the command line's parser checks them, the
    hub's keywords (``translate(..., san_decoding=...)``) reach the task unchecked."""
    if value not in option.choices:
        raise UsageError(invalid_choice(option, value))


def invalid_choice(
    option: options.Option, value: str, choices: Optional[Sequence[str]] = None
) -> str:
    """The error for keyword ``value`` outside ``option``'s choices (or the task's own
    ``choices``: a language model's decodings are fewer), in ``choice_problem``'s words."""
    choices = option.choices if choices is None else choices
    return choice_problem(f"{option.name}={value!r}", value, choices)


def plugin_option_misplaced(option: options.Option) -> str:
    """Why a plugin option that is no decoder's does nothing as a keyword of ``translate()``,
    and where it goes."""
    if option.alias_of is not None:
        target, value = option.alias_of
        return f"{option.name} is deprecated: pass {target}='{value}'"
    if option in options.ANALYSIS_OPTIONS:
        return (
            f"{option.name} is an option of the attention analysis, which runs in "
            "fairseq-validate only: translate(), sample() and generate() would ignore it"
        )
    return (
        f"{option.name} is an option of the model, which translate(), sample() and generate() "
        f"cannot change: give it to from_pretrained(..., {option.name}=...)"
    )


def blocked_ngram_size(generator: object) -> int:
    """The n-gram size that ``generator`` blocks (``--no-repeat-ngram-size``; 0: none):
    fairseq's generator keeps an ``NGramRepeatBlock``, the static decoder the number."""
    blocker = getattr(generator, "repeat_ngram_blocker", None)
    if blocker is not None:
        return blocker.no_repeat_ngram_size
    return getattr(generator, "no_repeat_ngram_size", 0) or 0


def is_min_len_assertion(error: AssertionError) -> bool:
    """Whether ``error`` is fairseq's generator's assertion that ``--min-len`` is at most a
    batch's longest output ("min_len cannot be larger than max_len, please adjust these!")."""
    return str(error).startswith("min_len cannot be larger than max_len")


def min_len_above_max_len(settings: object, positions: Optional[int] = None) -> UsageError:
    """The error for fairseq's generator's assertion that ``--min-len`` is at most a batch's
    longest output, of ``settings`` (a generator or the generation config: ``min_len``,
    ``max_len_a``, ``max_len_b``, ``match_source_len``) and the decoder's ``positions`` (by
    default the generator's ``max_len``): the command line's ``one_line_errors`` said only that,
    the hub raised it."""
    positions = getattr(settings, "max_len", None) if positions is None else positions
    if getattr(settings, "match_source_len", False):  # the length limit is the source's
        return UsageError(
            f"--min-len {settings.min_len} is above the longest source of a batch, the longest "
            "output --match-source-len allows: lower --min-len"
        )
    if positions is not None and settings.min_len > positions - 1:
        return min_len_above_positions(settings.min_len, positions)
    return UsageError(
        f"--min-len {settings.min_len} is above the longest output of a batch (--max-len-a "
        f"{settings.max_len_a} x its source length + --max-len-b {settings.max_len_b}, at most "
        "the model's positions - 1): lower --min-len or raise --max-len-b"
    )


def check_ngrams_left_tokens(generator: object) -> None:
    """Where ``generator`` blocks n-grams and holds the end of sentence back for ``--min-len``,
    the search that failed had no token left to choose (``exhausted_ngrams``): raise that."""
    size, min_len = blocked_ngram_size(generator), getattr(generator, "min_len", 1)
    if size and min_len > 1:
        raise exhausted_ngrams(size, min_len) from None


def check_temperature_scored(generator: object, models: Sequence[torch.nn.Module]) -> None:
    """Where ``generator`` decodes at a temperature below 1 with ``models`` of finite weights,
    the search that failed at its maximum length had scores beyond floats' range
    (``scores_beyond_floats``): raise that. Weights that are not finite fail at any
    temperature, and keep fairseq's error."""
    temperature = getattr(generator, "temperature", 1.0)
    if is_number(temperature) and temperature < 1 and all(
        bool(torch.isfinite(weight).all()) for model in models for weight in model.parameters()
    ):
        raise scores_beyond_floats(temperature) from None


def repeated_ngram(tokens: List[int], size: int) -> Optional[Tuple[int, ...]]:
    """The first n-gram of ``size`` tokens that stands earlier in ``tokens`` too (None: none)."""
    seen = set()
    for start in range(len(tokens) - size + 1):
        ngram = tuple(tokens[start : start + size])
        if ngram in seen:
            return ngram
        seen.add(ngram)
    return None


def check_forced_ngrams(
    forced: Tensor, size: int, start: int, dictionary: Dictionary, ids: Optional[Tensor]
) -> None:
    """Refuse forced tokens (a row per sentence after the ``start`` token, padded on the right)
    that repeat an n-gram of ``size`` tokens, the start token counted: both generators force
    them, then block the repeated n-gram's last token, which leaves the sentence no token to
    take (fairseq's generator then fails at the output's maximum length: an AssertionError)."""
    if not size:
        return
    for row, tokens in enumerate(forced.tolist()):
        tokens = [start] + [token for token in tokens if token != dictionary.pad()]
        repeated = repeated_ngram(tokens, size)
        if repeated is None:
            continue
        longest = size
        while repeated_ngram(tokens, longest + 1) is not None:
            longest += 1
        name = f"sample {int(ids[row])}" if ids is not None else f"row {row} of the batch"
        raise UsageError(
            f"--no-repeat-ngram-size {size} would block the forced tokens of {name} (its "
            f"prefix, or a language model's prompt): they repeat the {size}-gram "
            f"\"{dictionary.string(torch.tensor(repeated))}\", whose forced token gets no "
            f"probability (the search then fails); pass --no-repeat-ngram-size {longest + 1} or "
            "more, or 0 (no blocking)"
        )


def precision_said(precision: object, model: nn.Module) -> str:
    """The static decoder's ``precision`` as the log names it: fp32 decodes the model in its
    own dtype, which is half precision after fairseq's ``--fp16``/``--bf16`` conversion."""
    dtype = next(model.parameters()).dtype
    if str(precision) != "fp32" or dtype == torch.float32:
        return str(precision)
    return f"fp32: the model's own, {str(dtype).replace('torch.', '')}"


def sentences_where(rows: Tensor, ids: Optional[Tensor]) -> List[int]:
    """The ``ids`` (as the command's output numbers sentences; None: the batch's rows) of a
    batch's sentences where ``rows`` (a mask) holds."""
    chosen = rows.nonzero().view(-1)
    return (ids[chosen] if ids is not None else chosen).tolist()


def sentences_with_eos(tokens: Optional[Tensor], eos: int, ids: Optional[Tensor]) -> List[int]:
    """The ``ids`` (``sentences_where``) of the sentences whose ``tokens`` (forced ones, a row
    each) hold the end of sentence ``eos``."""
    if tokens is None:
        return []
    return sentences_where(tokens.eq(eos).any(dim=1), ids)


def forced_starts(forced: Optional[Tensor], eos: int, ids: Optional[Tensor]) -> List[int]:
    """The ``ids`` (``sentences_where``) of the sentences whose ``forced`` tokens begin with the
    end of sentence ``eos``, which the search cannot finish above beam 1."""
    return sentences_with_eos(None if forced is None else forced[:, :1], eos, ids)


class DecodingTask:
    """A fairseq task mixin: ``build_generator`` by ``--san-decoding`` (see module doc). The task
    names its static decoder's builder (``static_generator``)."""

    # The task's --san-decoding (a language model's offers fewer decodings: options.LM_DECODING).
    decoding_switch: options.Option = options.DECODING
    # The device a static decoder decodes on where the model is not there yet, None where it is
    # (``TranslationSANTask.build_model``: fairseq-train's --eval-bleu generator).
    decoding_device: Optional[torch.device] = None
    # Whether a batch's forced tokens that hold the end of sentence were named (once a task).
    forced_ends_said: bool = False
    # fairseq-interactive's ids of the batch it decodes, as its output numbers them (S-N): the
    # samples it builds hold none (set by ``fairseq_fixes.interactive_input``).
    interactive_ids: Optional[Tensor] = None

    def static_generator(self) -> Callable:
        """``build_static_generator`` or its language-model counterpart (imported when needed:
        the static decoder imports fairseq's transformer, which must be able to import the
        plugin's tasks first)."""
        raise NotImplementedError

    def build_generator(
        self,
        models,
        args,
        seq_gen_cls=None,
        extra_gen_cls_kwargs=None,
        prefix_allowed_tokens_fn=None,
    ):
        """fairseq's generator on the models set to ``--san-decoding``, or the static decoder.

        ``args`` (the generation options) may carry ``san_decoding`` (or the deprecated
        ``san_decoder``), ``san_decoder_precision`` and ``san_decoder_execution`` themselves
        (the benchmark sets ``san_decoding``); otherwise the task's options decide.
        """
        if getattr(self, "analysing", False):  # the analysis runs in valid_step only
            raise UsageError(
                "--san-analysis-dir is for fairseq-validate: a command that decodes would "
                "ignore it"
            )
        check_generation_args(args)
        check_allowed_tokens_searched(
            args, prefix_allowed_tokens_fn or getattr(args, "prefix_allowed_tokens_fn", None)
        )
        check_no_refinement_options(args)
        decoding = self.decoding(args)
        self.check_decoder_options(args, decoding)
        check_scoring(args, decoding)
        check_searches_fit_vocabulary(args, len(self.target_dictionary))
        if decoding != options.STATIC:
            check_decoding_applied(models, decoding)
            for model in models:
                if hasattr(model, "set_decoding"):
                    model.set_decoding(decoding)
            generator = super().build_generator(
                models, args, seq_gen_cls, extra_gen_cls_kwargs, prefix_allowed_tokens_fn
            )
            check_capped_beam_groups(generator, getattr(args, "beam", 1))
            check_length_penalty(args, getattr(generator, "max_len", 0))
            set_beam_sizes(models, getattr(generator, "beam_size", 1))
            logger.info(
                "SAN decoding: %s (%s)", applied_decoding(models, decoding),
                type(generator).__name__,
            )  # fmt: skip
            return generator
        generator = self.static_generator()(
            self,
            models,
            args,
            self.decoding_option(args, options.DECODER_PRECISION),
            seq_gen_cls,
            extra_gen_cls_kwargs,
            prefix_allowed_tokens_fn,
            self.decoding_option(args, options.DECODER_EXECUTION),
            device=self.decoding_device,
        )
        check_length_penalty(args, getattr(generator, "max_len", 0))
        logger.info(
            "SAN decoding: static (%s, precision %s, execution %s)", type(generator).__name__,
            precision_said(generator.precision, models[0]), generator.execution.name,
        )  # fmt: skip
        return generator

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        """fairseq's, after ``check_forced_ngrams`` (and, with --match-source-len,
        ``check_forced_past_source_length``) of the tokens the generator forces; fairseq's
        generator's assertion at the maximum length, where constraints held the end of sentence
        back, forced tokens began with it or n-gram blocking left no token, as one line
        (``unmet_constraints``, ``forced_ends_refused``, ``check_ngrams_left_tokens``); so too
        its message-less assertion at the first forced token (rows of a batch whose forced
        tokens begin with the end of sentence beside rows whose do not) and sampling from no
        token. Forced tokens that hold the end of sentence (the search ends their hypotheses
        there) are named in a warning, the first batch's (``forced_ends_warning``); not where
        ``--score-reference`` scores the targets, which forces nothing."""
        if isinstance(generator, SequenceScorer):
            return super().inference_step(generator, models, sample, prefix_tokens, constraints)
        forced = self.forced_tokens(sample, prefix_tokens)
        if forced is not None:
            size = blocked_ngram_size(generator)
            start, ids = self.start_token(), self.output_ids(sample)
            check_forced_ngrams(forced, size, start, self.target_dictionary, ids)
            self.check_forced_past_source_length(generator, sample, forced)
        try:
            hypotheses = super().inference_step(
                generator, models, sample, prefix_tokens, constraints
            )
        except AssertionError as error:
            if is_min_len_assertion(error):
                raise min_len_above_max_len(generator) from None
            at_max_len = re.fullmatch(r"(\d+) < \1", str(error))
            if at_max_len is not None and constraints is not None:
                raise unmet_constraints(int(at_max_len.group(1))) from None
            # at the maximum length, or (a message-less assertion) at the first forced token;
            # --match-source-len first: no beam, 1 neither, finishes an end it forbids
            self.check_forced_ends_of_source_length(generator, sample, forced)
            self.check_forced_starts(generator, sample, forced, prefix_tokens)
            if at_max_len is not None:
                check_ngrams_left_tokens(generator)
                check_temperature_scored(generator, models)
            raise
        except PrefixEndsUnfinished:  # the static search's own check, worded by the task
            self.check_forced_ends_of_source_length(generator, sample, forced)
            self.check_forced_starts(generator, sample, forced, prefix_tokens)
            raise
        except RuntimeError as error:
            if "invalid multinomial distribution" in str(error):  # sampling from no token
                check_ngrams_left_tokens(generator)
            if "invalid multinomial distribution" in str(error) or isinstance(error, LiveAtMaxLen):
                check_temperature_scored(generator, models)
            raise
        ended = self.rows_with_eos(sample, forced)
        if ended and not self.forced_ends_said:
            logger.warning(self.forced_ends_warning(ended, prefix_tokens))
            self.forced_ends_said = True
        return hypotheses

    def check_forced_starts(
        self, generator, sample: dict, forced: Optional[Tensor], prefix_tokens: Optional[Tensor]
    ) -> None:
        """Refuse the batch's sentences whose forced tokens begin with the end of sentence,
        which the search (above beam 1) cannot finish (``forced_ends_refused``)."""
        started = forced_starts(forced, self.target_dictionary.eos(), self.output_ids(sample))
        if started:
            beam = getattr(generator, "beam_size", 1)
            raise self.forced_ends_refused(started, beam, prefix_tokens) from None

    def check_forced_ends_of_source_length(
        self, generator, sample: dict, forced: Optional[Tensor]
    ) -> None:
        """Refuse, under ``--match-source-len``, the batch's sentences whose forced tokens hold
        the end of sentence before their source's length, which it forbids there
        (``prefix_ends_before_source_length``)."""
        if forced is None or not getattr(generator, "match_source_len", False):
            return
        held, before_end = self.forced_before_end(forced)
        source_lengths = sample["net_input"]["src_lengths"].to(forced.device)
        ended = self.ids_of(sample, held & (before_end < source_lengths))
        if ended:
            raise prefix_ends_before_source_length(ended) from None

    def check_forced_past_source_length(self, generator, sample: dict, forced: Tensor) -> None:
        """Refuse, under ``--match-source-len``, the batch's sentences whose forced tokens before
        their end of sentence (all, where they hold none) outnumber their source's length, where
        it ends each output (``prefix_past_source_length``)."""
        if not getattr(generator, "match_source_len", False):
            return
        _, before_end = self.forced_before_end(forced)
        source_lengths = sample["net_input"]["src_lengths"].to(forced.device)
        longer = self.ids_of(sample, before_end > source_lengths)
        if longer:
            raise prefix_past_source_length(longer)

    def forced_before_end(self, forced: Tensor) -> Tuple[Tensor, Tensor]:
        """(a mask of the rows whose forced tokens hold the end of sentence, the forced tokens
        before it in each row: all of them, padding left out, where it holds none)."""
        dictionary = self.target_dictionary
        ends = forced.eq(dictionary.eos())
        held = ends.any(dim=1)
        tokens = forced.ne(dictionary.pad()).sum(dim=1)
        return held, torch.where(held, ends.long().argmax(dim=1), tokens)

    def rows_with_eos(self, sample: dict, tokens: Optional[Tensor]) -> List[int]:
        """``sentences_with_eos`` of the sample."""
        return sentences_with_eos(tokens, self.target_dictionary.eos(), self.output_ids(sample))

    def ids_of(self, sample: dict, rows: Tensor) -> List[int]:
        """``sentences_where`` of the sample."""
        return sentences_where(rows, self.output_ids(sample))

    def output_ids(self, sample: dict) -> Optional[Tensor]:
        """The sample's sentence ids as the command's output numbers them (fairseq-interactive's
        samples hold none: ``interactive_ids``), None where they are not known."""
        return sample.get("id", self.interactive_ids)

    def forced_ends_refused(
        self, sentences: List[int], beam: int, prefix_tokens: Optional[Tensor]
    ) -> UsageError:
        """The error for ``sentences`` whose forced tokens begin with the end of sentence: here
        ``--prefix-size``'s, of an empty target (``unfinished_prefix_ends``)."""
        return unfinished_prefix_ends(sentences, beam)

    def forced_ends_warning(self, sentences: List[int], prefix_tokens: Optional[Tensor]) -> str:
        """The warning for ``sentences`` whose forced tokens hold the end of sentence: here
        ``--prefix-size``'s, of a whole target (``whole_targets_forced``)."""
        return whole_targets_forced(sentences)

    def forced_tokens(self, sample: dict, prefix_tokens: Optional[Tensor]) -> Optional[Tensor]:
        """The tokens the generator forces after the start token, padded on the right:
        fairseq-generate's ``--prefix-size`` (a language model's prompts: its task's own)."""
        return prefix_tokens

    def start_token(self) -> int:
        """The token before the forced ones (fairseq's generator starts with EOS)."""
        return self.target_dictionary.eos()

    def decoding(self, args) -> str:
        """``--san-decoding`` of the generation options, else of the task; ``fairseq`` there
        gives way to the deprecated ``--san-decoder static``, and another decoding beside it is
        refused."""
        decoding = str(self.decoding_option(args, self.decoding_switch))
        legacy = self.decoding_option(args, options.OPTIONS["san_decoder"])
        check_choice(self.decoding_switch, decoding)
        check_choice(options.OPTIONS["san_decoder"], str(legacy))
        return options.chosen_decoding(decoding, legacy)

    def check_decoder_options(self, args, decoding: str) -> None:
        """Refuse the static decoder's options with another decoding: they would be accepted and
        ignored; and an execution that the command line does not offer (the hub's keyword took
        ``compile``, measured slower than eager, and compiled it again at every call)."""
        value = partial(self.decoding_option, args)
        option = options.misplaced_static_option(decoding, lambda o: o.is_set(value(o)))
        if option is not None:
            raise UsageError(options.misplaced_static_refusal(option, value(option), decoding))
        execution = self.decoding_option(args, options.DECODER_EXECUTION)
        if options.DECODER_EXECUTION.is_set(execution) and execution not in offered_executions():
            given = f"{options.DECODER_EXECUTION.flag} {execution}"
            raise UsageError(choice_problem(given, execution, offered_executions()))

    def decoding_option(self, args, option: options.Option) -> object:
        """``option`` of the generation options, else of the task's config, else its default (a
        task built from a checkpoint saved before the option existed, by the hub, lacks it)."""
        value = getattr(args, option.name, None)
        return value if value is not None else getattr(self.cfg, option.name, option.default)
