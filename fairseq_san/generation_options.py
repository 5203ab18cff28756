"""The generation options' values checked, wherever they come from: fairseq's command line
(``fairseq_fixes.command_options``, as it parses), the hub's keywords (``tasks.decoding``) and
the static decoder's own arguments. Pure Python.
"""

import argparse
import math
from typing import Callable, List, Optional

from fairseq_san.errors import UsageError, choice_problem
from fairseq_san.options import flag_of
from fairseq_san.policy import is_finite_number, is_number


# The search's real-valued options; NaN or infinity gives NaN scores printed as translations
# (the penalties), a traceback inside the generators (max_len_a, temperature) or an option
# silently off (sampling_topp, diversity_rate).
FINITE_SEARCH_NUMBERS = (
    "lenpen", "unkpen", "max_len_a", "temperature", "sampling_topp", "diversity_rate",
    "diverse_beam_strength", "lm_weight",
)


# fairseq's search strategies, one of which its generator runs: (option, test of its value that
# chooses it), as ``FairseqTask.build_generator`` counts them; two at once were its ValueError
# "Provided Search parameters are mutually exclusive." (a traceback, naming no option).
SEARCH_STRATEGIES = (
    ("sampling", bool),
    ("diverse_beam_groups", lambda value: is_number(value) and value > 0),
    ("match_source_len", bool),
    ("diversity_rate", lambda value: is_number(value) and value > 0),
)


# The searches fairseq's generator chooses before the constrained one (a diversity rate from
# above -1, its default), whose constraints were then its NotImplementedError "Target-side
# constraints were provided, but search method doesn't support them" (a traceback).
BEFORE_CONSTRAINTS = SEARCH_STRATEGIES[:-1] + (
    ("diversity_rate", lambda value: is_number(value) and value > -1),
)


# The searches fairseq's generator chooses before the prefix-constrained one (a
# ``prefix_allowed_tokens_fn``, an argument of ``build_generator`` and the hub's ``generate``):
# beside one of them the function was never called, and tokens it forbids were translated.
BEFORE_ALLOWED_TOKENS = BEFORE_CONSTRAINTS + (("constraints", bool),)


def check_allowed_tokens_searched(
    args: argparse.Namespace, prefix_allowed_tokens_fn: Optional[Callable]
) -> None:
    """Refuse a ``prefix_allowed_tokens_fn`` beside an option of ``BEFORE_ALLOWED_TOKENS``,
    naming the option: fairseq's generator runs that search, which ignores the function."""
    if prefix_allowed_tokens_fn is None:
        return
    for name, chooses in BEFORE_ALLOWED_TOKENS:
        value = getattr(args, name, None)
        if chooses(value):
            given = flag_of(name) if value is True else f"{flag_of(name)} {value}"
            raise UsageError(
                f"prefix_allowed_tokens_fn and {given} each choose a search, and "
                "fairseq's generator runs the other one, never calling the function: pass one "
                "of them"
            )


def check_one_search(args: argparse.Namespace) -> None:
    """Refuse two of ``SEARCH_STRATEGIES`` at once, or ``--constraints`` with one of
    ``BEFORE_CONSTRAINTS``, naming them."""
    chosen = [
        flag_of(name) for name, chooses in SEARCH_STRATEGIES if chooses(getattr(args, name, None))
    ]
    if getattr(args, "constraints", None):
        chosen = ["--constraints"] + [
            flag_of(name)
            for name, chooses in BEFORE_CONSTRAINTS
            if chooses(getattr(args, name, None))
        ]
    if len(chosen) > 1:
        raise UsageError(
            f"{' and '.join(chosen)} each choose a search, and fairseq's generator runs one: pass "
            "one of them"
        )


def check_search_numbers(args: argparse.Namespace) -> None:
    """Refuse ``--beam`` or ``--nbest`` below 1 (a traceback far inside the generators), more
    n-best than the beam keeps (fewer would be printed), any of ``FINITE_SEARCH_NUMBERS`` that
    is not a finite number, sampling's top-k or top-p without ``--sampling`` (fairseq asserted),
    a ``--max-len-b`` or ``--min-len`` that is no count (the hub's
    ``max_len_b=inf``: an OverflowError), an n-gram blocking size of 1 or below 0
    (``check_ngram_size``), a diverse beam strength without the groups that read it, groups that
    do not divide the beam, two search strategies at once (``check_one_search``), a
    ``--prefix-size`` below 0 (it forced no prefix) and an option the generator ignores beside
    another (``check_read_beside``)."""
    beam, nbest = getattr(args, "beam", 1), getattr(args, "nbest", 1)
    for flag, value in (("--beam", beam), ("--nbest", nbest)):
        if not is_integer(value) or value < 1:  # the hub's keywords are not parsed: "4", 4.5
            raise UsageError(f"{flag} {value!r}: it must be an integer of at least 1")
    if nbest > beam:
        raise UsageError(
            f"--nbest {nbest} is more than --beam {beam}: the search keeps {beam} hypotheses "
            "per sentence (with --sampling, --beam samples); pass --beam at least --nbest"
        )
    for flag in FINITE_SEARCH_NUMBERS:
        value = getattr(args, flag, 0.0)
        if value is not None and not is_finite_number(value):
            raise UsageError(f"{flag_of(flag)} {value!r}: it must be a finite number")
    check_temperature(getattr(args, "temperature", 1.0))
    topk, topp = getattr(args, "sampling_topk", -1), getattr(args, "sampling_topp", -1.0)
    if not is_integer(topk) or (topk != -1 and topk < 1):
        raise UsageError(
            f"--sampling-topk {topk!r}: it must be an integer of at least 1 (-1, the default, "
            "samples from every token)"
        )
    if topp != -1 and not 0 < topp <= 1:
        raise UsageError(
            f"--sampling-topp {topp}: it must be in (0, 1] (-1, the default, samples from every "
            "token)"
        )
    for flag, value in (("--sampling-topk", topk), ("--sampling-topp", topp)):
        if value > 0 and not getattr(args, "sampling", False):  # fairseq's assertion
            raise UsageError(
                f"{flag} {value} is read by sampling only: pass --sampling too, or leave it out"
            )
    check_ngram_size(getattr(args, "no_repeat_ngram_size", 0))
    counts = (("max_len_b", 200), ("min_len", 1), ("prefix_size", 0))
    for flag, default in counts:  # the hub's: inf, 2.5, "10"; --prefix-size -1 forced none
        value = getattr(args, flag, default)
        if not is_integer(value) or value < 0:
            raise UsageError(f"{flag_of(flag)} {value!r}: it must be an integer of at least 0")
    groups = getattr(args, "diverse_beam_groups", -1)
    strength = getattr(args, "diverse_beam_strength", 0.5)
    if strength is not None and strength != 0.5 and not (is_integer(groups) and groups > 0):
        raise UsageError(
            f"--diverse-beam-strength {strength} is read only by diverse beam search: pass "
            "--diverse-beam-groups G as well (the search ignored it)"
        )
    if topk > 0 and topp > 0:
        raise UsageError(
            f"--sampling-topk {topk} and --sampling-topp {topp}: fairseq's sampling keeps the "
            "top-p tokens and ignores top-k; pass one"
        )
    check_diverse_beam_groups(beam, groups)
    check_one_search(args)
    check_read_beside(args)


# Options that fairseq's generators ignore beside another: (option, its default, where it is
# ignored: the other option and the test of its value, said as "with --other"; why).
MATCH_SOURCE_LEN = ("match_source_len", bool, "with --match-source-len")
WHY_MATCHED = "each output is as long as its source"
IGNORED_BESIDE = (
    ("lenpen", 1.0, ("unnormalized", bool, "with --unnormalized"),
     "the length penalty divides normalized scores only"),
    ("max_len_a", 0.0, MATCH_SOURCE_LEN, WHY_MATCHED),
    ("max_len_b", 200, MATCH_SOURCE_LEN, WHY_MATCHED),
    ("lm_weight", 0.0, ("lm_path", lambda path: not path, "without --lm-path"),
     "there is no language model to fuse"),
    ("retain_dropout_modules", None, ("retain_dropout", lambda on: not on,
                                      "without --retain-dropout"),
     "fairseq keeps dropout at inference only with --retain-dropout"),
)  # fmt: skip
# fairseq-generate --score-reference scores each reference whole, in one teacher-forced pass
# (SequenceScorer takes no generation option; --beam only names the run in its log): the options
# that change a search's scores, and those that steer or limit it, each with its default and why
# it would be ignored.
TEACHER_FORCED = "the references are scored in one teacher-forced pass, as the model scores them"
SCORED_WHOLE = "the references are scored whole, one per sentence, with no search"
SCORE_CHANGES = (("temperature", 1.0), ("lenpen", 1.0), ("unkpen", 0.0), ("unnormalized", False),
                 ("lm_path", None))
SEARCH_STEERS = (("max_len_a", 0.0), ("max_len_b", 200), ("min_len", 1), ("prefix_size", 0),
                 ("no_repeat_ngram_size", 0), ("nbest", 1), ("sampling", False),
                 ("diverse_beam_groups", -1), ("diversity_rate", -1.0), ("match_source_len", False))
SCORED_REFERENCES_IGNORE = ((SCORE_CHANGES, TEACHER_FORCED), (SEARCH_STEERS, SCORED_WHOLE))


def check_read_beside(args: argparse.Namespace) -> None:
    """Refuse an option of ``IGNORED_BESIDE`` set where the generator ignores it: the output as
    if it were not given, without a word."""
    for name, default, (other, ignores, beside), why in IGNORED_BESIDE:
        value = getattr(args, name, default)
        if value is not None and value != default and ignores(getattr(args, other, None)):
            raise UsageError(
                f"{flag_of(name)} {value} {beside}: {why}, so it would be ignored; leave it out"
            )


def check_scored_as_asked(args: argparse.Namespace, weight_given: bool) -> None:
    """Refuse on fairseq-generate's command line what it would score otherwise than asked:
    ``--score-reference`` beside an option of ``SCORED_REFERENCES_IGNORE`` (``check_searchless``),
    and ``--lm-path`` without ``--lm-weight`` (``weight_given``: fairseq's default 0 ran the
    language model at every step and fused it at weight 0). The hub sets neither itself:
    ``score()`` scores with the generation options it was loaded with."""
    if getattr(args, "score_reference", False):
        check_searchless(args)
    if getattr(args, "lm_path", None) and not weight_given:
        raise UsageError(
            f"--lm-path {args.lm_path} without --lm-weight: fairseq's default weight, 0, would "
            "run the language model and fuse it changing nothing; pass --lm-weight W (e.g. 0.2)"
        )


def check_searchless(args: argparse.Namespace) -> None:
    """Refuse an option of ``SCORED_REFERENCES_IGNORE`` away from its default, which
    ``--score-reference`` ignores: the references' scores are the model's own (a temperature of
    2 scored at 1), one hypothesis per sentence (--nbest 2 printed one), whole (--max-len-b 2 and
    --prefix-size 3 changed nothing)."""
    for ignored, why in SCORED_REFERENCES_IGNORE:
        for name, default in ignored:
            value = getattr(args, name, default)
            if value != default:
                given = flag_of(name) if value is True else f"{flag_of(name)} {value}"
                raise UsageError(
                    f"{given} with --score-reference: {why}, so it would be ignored; leave it out"
                )


def check_diverse_beam_groups(beam: int, groups: object, given: Optional[int] = None) -> None:
    """Refuse diverse beam search's groups where they do not divide the beam (fairseq's search
    failed at a batch's first step, a traceback through the hub); ``given``: the beam asked for,
    where the generator capped it at the target dictionary's entries less padding."""
    if is_integer(groups) and groups > 0 and beam % groups:
        said = f"--beam {beam}"
        if given is not None and given != beam:
            said = f"--beam {given}, capped at {beam} (the target dictionary's entries but one),"
        raise UsageError(
            f"{said} is not a multiple of --diverse-beam-groups {groups}: diverse beam "
            "search splits the beam into groups of equal size"
        )


def unmet_constraints(max_len: int) -> UsageError:
    """The error for a sentence whose ``--constraints`` were not all met within its ``max_len``
    output tokens: the search forbids the end of sentence until they are, and fairseq's
    generator then failed its assertion ``step < max_len`` (a traceback)."""
    return UsageError(
        f"--constraints: a sentence's constraints were not all met within its {max_len} output "
        "tokens (the end of sentence waits for them): raise --max-len-a or --max-len-b, or give "
        "it fewer or shorter constraints"
    )


class PrefixEndsUnfinished(UsageError):
    """``unfinished_prefix_ends``'s error, which a task words again for the tokens it forces (a
    language model's prompts) and for every such sentence of its batch."""


def unfinished_prefix_ends(sentences: List[int], beam: int) -> PrefixEndsUnfinished:
    """The error for sentences whose forced prefix begins with the end of sentence (an empty
    target with ``--prefix-size``): above beam 1 the search cannot finish them (at position 0
    it ranks one row: one hypothesis ends, the others stay at -inf; a later EOS ends every
    hypothesis), and fairseq's generator failed its assertion ``step < max_len``."""
    return PrefixEndsUnfinished(
        f"--prefix-size: the prefix of sentence {', '.join(map(str, sentences))} forces its end "
        f"(EOS), which beam search at --beam {beam} cannot finish: use --beam 1, or leave out "
        "sentences whose target is empty"
    )


def prefix_ends_before_source_length(sentences: List[int]) -> UsageError:
    """The error for sentences whose forced prefix holds the end of sentence under
    ``--match-source-len``, which forbids it before the source's length: no hypothesis of theirs
    can finish (fairseq's generator failed its assertion ``step < max_len``; the static decoder
    said to use beam 1, which fails alike)."""
    return UsageError(
        f"--prefix-size: the prefix of sentence {', '.join(map(str, sentences))} holds its end "
        "(EOS) before its source's length, where --match-source-len forbids it: no hypothesis of "
        "it can finish; leave out --match-source-len, or pass a smaller --prefix-size"
    )


def prefix_past_source_length(sentences: List[int]) -> UsageError:
    """The error for sentences whose forced prefix holds more tokens before its end of sentence
    (all of it, where it holds none) than their source's length, where ``--match-source-len``
    ends each hypothesis: its search freed the end of sentence there, and the hypothesis ended
    with its prefix cut short (its full prefix was scored -inf, printed beside it where a longer
    source shared the batch: the n-best hung on the batch); both decoders alike."""
    return UsageError(
        f"--prefix-size: the prefix of sentence {', '.join(map(str, sentences))} is longer than "
        "its source's length, where --match-source-len ends the output: no hypothesis of it can "
        "hold its prefix; leave out --match-source-len, or pass a smaller --prefix-size"
    )


def whole_targets_forced(sentences: List[int]) -> str:
    """The warning for sentences whose forced prefix holds their whole target, its end of
    sentence included (a target no longer than ``--prefix-size``): fairseq's generator returns
    the target as the hypothesis, which fairseq-generate then scores as a translation."""
    return (
        f"--prefix-size: the prefix of sentence {', '.join(map(str, sentences))} holds its whole "
        "target (its end of sentence included), which the search forces: its hypothesis is its "
        "reference, and the BLEU score counts it as translated; pass a smaller --prefix-size "
        "(said of the first batch with such sentences only)"
    )


def min_len_above_positions(min_len: int, positions: int) -> UsageError:
    """The error for a ``--min-len`` above the longest output that the decoder's ``positions``
    hold: raising ``--max-len-b`` (the advice for a batch's length limit) cannot help there."""
    return UsageError(
        f"--min-len {min_len} is above the longest output the model's {positions} positions hold "
        f"({positions - 1} tokens, then the end of sentence; with --lm-path, the fewer of the two "
        f"models' positions): lower --min-len to at most {positions - 1}"
    )


def exhausted_ngrams(size: int, min_len: int) -> UsageError:
    """The error for a sentence left with no token to choose: ``--no-repeat-ngram-size`` had
    blocked every continuation while ``--min-len`` held the end of sentence back (a small target
    dictionary runs out first); fairseq's generator failed its assertion ``step < max_len``, its
    sampling inside torch's multinomial."""
    return UsageError(
        f"--no-repeat-ngram-size {size} with --min-len {min_len}: a sentence had no token left "
        f"to choose (each continuation repeated a {size}-gram, and the end of sentence waits for "
        "--min-len; a small target dictionary runs out first): lower --min-len, or raise "
        "--no-repeat-ngram-size"
    )


def scores_beyond_floats(temperature: float) -> UsageError:
    """The error for a sentence left with no token to choose at a ``temperature`` below 1: the
    model's scores divided by it (``--temperature 1e-38``) overflow floats (32-bit; 16-bit with
    --fp16), their log-probabilities are NaN, which the search drops; fairseq's generator failed
    its assertion ``step < max_len``, the static decoder at its maximum length (tracebacks)."""
    return UsageError(
        f"--temperature {temperature}: a sentence had no token left to choose (the model's scores "
        "divided by it went beyond floats' range, 16-bit ones with --fp16, and the search drops "
        "them): pass a larger --temperature"
    )


# --print-alignment's choices (fairseq's): the alignment drawn from a hypothesis' attention.
ALIGNMENT_KINDS = ("hard", "soft")


def check_alignment_kind(kind: object) -> None:
    """Refuse a ``--print-alignment`` other than hard or soft (None or False: no alignment): the
    hub's ``print_alignment=True`` failed inside fairseq's generator (``AttributeError``)."""
    if kind and kind not in ALIGNMENT_KINDS:
        raise UsageError(choice_problem(f"--print-alignment {str(kind)!r}", kind, ALIGNMENT_KINDS))


# --constraints' choices (fairseq's): the order in which a hypothesis must take them.
CONSTRAINT_ORDERS = ("ordered", "unordered")


def check_constraints_kind(kind: object) -> None:
    """Refuse a ``--constraints`` other than ordered or unordered (None or False: none): the
    hub's ``constraints='sideways'`` (or True) failed inside fairseq's search (``NameError``)."""
    if kind and kind not in CONSTRAINT_ORDERS:
        raise UsageError(choice_problem(f"--constraints {str(kind)!r}", kind, CONSTRAINT_ORDERS))


def check_no_alignment(print_alignment: object) -> None:
    """Refuse ``--print-alignment`` for a language model (fairseq's generator failed inside its
    alignment pass)."""
    if print_alignment:
        raise UsageError("--print-alignment: a language model has no source to align its output to")


def check_no_constraints(constraints: object) -> None:
    """Refuse ``--constraints`` for a language model: fairseq's language-modelling task drops
    them from its prompts (fairseq-interactive failed in its search: "'NoneType' object is not
    iterable") and its ``inference_step`` refuses them (the hub: NotImplementedError)."""
    if constraints:
        raise UsageError(
            "--constraints: a language model decodes no constraints (fairseq's language-modelling "
            "task refuses them); leave --constraints out"
        )


def check_ngram_size(size: object) -> None:
    """Refuse a ``--no-repeat-ngram-size`` that is not 0 (off) or at least 2: below 0 fairseq
    turns the blocking off without a word, and 1 blocked nothing on the CPU and, with fairseq's
    CUDA extension, every token of the prefix, the sentence's start too (the end-of-sentence
    symbol): each translation ran to its maximum length."""
    if size is not None and not (is_integer(size) and (size == 0 or size >= 2)):
        raise UsageError(
            f"--no-repeat-ngram-size {size!r}: it must be 0 (no blocking) or an integer of at "
            "least 2 (1 would block the end of sentence too: the search counts the sentence's "
            "start, that symbol, as a generated token)"
        )


# The largest 32-bit float: the generators divide their float32 scores by length ** lenpen.
FLOAT32_MAX = 3.4028234663852886e38


def check_length_penalty(args: argparse.Namespace, max_len: int) -> None:
    """Refuse a ``--lenpen`` that takes length ** lenpen, an output's score's divisor, out of
    32-bit floats' range for the longest output: ``--max-len-b`` + 1 tokens where
    ``--max-len-a`` is 0, else ``max_len`` (the generator's, the model's positions; 0: none).
    fairseq's generator failed with an OverflowError ("Numerical result out of range", a
    traceback), or divided scores into 0 or infinity without a word."""
    lenpen, length_a = getattr(args, "lenpen", 1.0), getattr(args, "max_len_a", 0)
    if not is_finite_number(lenpen) or getattr(args, "unnormalized", False):
        return
    if length_a == 0 and not getattr(args, "match_source_len", False):
        max_len = min(getattr(args, "max_len_b", 200) + 1, max_len)
    if max_len < 2:
        return
    largest = math.log(FLOAT32_MAX) / math.log(max_len)
    if abs(lenpen) > largest:
        raise UsageError(
            f"--lenpen {lenpen}: a score is divided by its output's length ** lenpen, beyond "
            f"32-bit floats for outputs of up to {max_len} tokens: pass one between "
            f"-{largest:.4g} and {largest:.4g}"
        )


def check_temperature(temperature: float) -> None:
    """Refuse a temperature of 0 or less (fairseq's generator asserts it: a traceback)."""
    if temperature <= 0:
        raise UsageError(
            f"--temperature {temperature}: it must be greater than 0 (greedy decoding is --beam 1 "
            "without --sampling)"
        )


def is_integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
