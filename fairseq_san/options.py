"""The plugin's options, written once: the model's, the decoder's and the analysis's.

fairseq reads a model's options from argparse (``TransformerSANModel.add_args``) and a task's
from a dataclass (``TranslationSANConfig``); both are built from the tables here, and so are the
list of known ``san_*`` names (``option_names``), the benchmark's override keys and the help
texts. A new option is one new row. Pure Python: the benchmark's ``--help`` imports this.

How a checkpoint is decoded is one switch, ``--san-decoding`` (``DECODINGS``); the flags it
replaced (``--san-no-cache``, ``--san-fast-decoding``, ``--san-decoder static``) still work and
warn once (``deprecated_value``).
"""

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple

from fairseq_san.errors import UsageError
from fairseq_san.policy import KIND_TABLE, KINDS

logger = logging.getLogger(__name__)

# How fairseq-generate decodes: fairseq's SequenceGenerator and attention step; the same without
# the incremental cache (the paper's "Baseline-Cache"); the faster attention step
# (modules.decoding_attention); the static-shape decoder (static_decoding).
FAIRSEQ, NO_CACHE, FAST, STATIC = "fairseq", "no-cache", "fast", "static"
DECODINGS = (FAIRSEQ, NO_CACHE, FAST, STATIC)
# The decodings the model applies to itself (the others choose the generator: the task's job).
MODEL_DECODINGS = (FAIRSEQ, NO_CACHE, FAST)


def flag_of(name: str) -> str:
    """The command-line flag of an option or config field: ``max_len_a`` -> ``--max-len-a``."""
    return "--" + name.replace("_", "-")


def name_of(flag: str) -> str:
    """The option (argparse's dest, a config field) of a command-line flag: ``--max-len-a`` ->
    ``max_len_a`` (``flag_of``'s inverse)."""
    return flag[2:].replace("-", "_")


@dataclass(frozen=True)
class Option:
    """One option: its name (``san_x`` is the flag ``--san-x``), help, default and choices.

    ``alias_of`` marks a deprecated option: the (option, value) it stands for when it is set.
    """

    name: str
    help: str
    default: object = None
    choices: Optional[Tuple[str, ...]] = None
    metavar: Optional[str] = None
    alias_of: Optional[Tuple[str, str]] = None

    @property
    def flag(self) -> str:
        return flag_of(self.name)

    def is_set(self, value: object) -> bool:
        """Whether ``value`` of this option was given: neither left out (None) nor its default."""
        return value is not None and str(value) != str(self.default)

    def add_argument(self, parser) -> None:
        """Add to an argparse parser or group; the value stays None unless given (a switch:
        False), and fairseq's architecture functions fill the defaults, so that a checkpoint's
        own values win."""
        if self.default is False:
            parser.add_argument(self.flag, action="store_true", help=self.help)
        else:
            parser.add_argument(
                self.flag, choices=self.choices, metavar=self.metavar, help=self.help
            )


def fill_defaults(args, options: Tuple[Option, ...]) -> None:
    """Set each of ``options`` that ``args`` lacks or holds as None to its default (what a model's
    architecture function does: ``add_argument`` leaves an option not given None)."""
    for option in options:
        if getattr(args, option.name, None) is None:
            setattr(args, option.name, option.default)


def option_field(option: Option, help: str = ""):
    """The dataclass field of ``option`` (fairseq's task and model options are dataclass fields)."""
    return field(default=option.default, metadata={"help": help or option.help})


POLICY_OPTIONS = {
    kind: Option(
        f"san_{kind}_policy",
        f"block sizes for {KIND_TABLE[kind].title}, bottom-up, e.g. 1,5 "
        "(wins over --san-policy)",
        metavar="SIZES",
    )
    for kind in KINDS
}

# What a following layer of a block shares with the block's first layer: SAN's attention output
# A = S V (encoder-decoder attention, Eq. 5), its attention weights S with the layer's own V
# (Eq. 4), or cross-layer KV sharing (CLA: the leader's K and V, the layer's own Q).
OUTPUT, WEIGHTS, KV = "output", "weights", "kv"

MODEL_OPTIONS = (
    Option(
        "san_policy",
        'sharing policy: a JSON file or JSON text, e.g. {"decoder_self": [1, 5]}, block sizes '
        'bottom-up; a translation model takes "decoder_encdec" and "encoder_self" too (each key '
        'optional), a language model "decoder_self" only',
        metavar="FILE_OR_JSON",
    ),
    *POLICY_OPTIONS.values(),
    Option(
        "san_encdec_share",
        "encoder-decoder sharing: the attention output A = S V (Eq. 5, default) "
        "or only the weights S, each layer keeping its own V projection",
        default=OUTPUT,
        choices=(OUTPUT, WEIGHTS),
    ),
    Option(
        "decoder_self_attention_type",
        "decoder self-attention: dot-product (default) or the average attention network",
        default="dot",
        choices=("dot", "aan"),
    ),
    Option(
        "san_fast_decoding",
        "deprecated: --san-decoding fast",
        default=False,
        alias_of=("san_decoding", FAST),
    ),
    Option(
        "san_no_cache",
        "deprecated: --san-decoding no-cache",
        default=False,
        alias_of=("san_decoding", NO_CACHE),
    ),
)


def has_aan_decoder(arch: str, train_args: Sequence[str] = ()) -> bool:
    """Whether a translation model of ``arch`` trained with ``train_args`` (fairseq-train's
    words) has an AAN decoder, whose self-attention has no weights to share: the last
    --decoder-self-attention-type given, else the architecture's (``transformer_aan_*``)."""
    flag = flag_of("decoder_self_attention_type")
    chosen = "aan" if arch.startswith("transformer_aan") else "dot"
    for at, word in enumerate(train_args):
        if word == flag and at + 1 < len(train_args):
            chosen = train_args[at + 1]
        elif word.startswith(flag + "="):
            chosen = word.split("=", 1)[1]
    return chosen == "aan"


# How a following layer of a decoder self-attention block shares with the block's first layer:
# SAN's attention weights S (own V), or cross-layer KV sharing.
SELF_SHARE = Option(
    "san_self_share",
    "decoder self-attention sharing of a block's following layers: the attention weights S of "
    "its first layer, each layer keeping its own V (weights, SAN) or the first layer's keys and "
    "values, each layer keeping its own queries (kv, cross-layer KV sharing as in CLA)",
    default=WEIGHTS,
    choices=(WEIGHTS, KV),
)
SHARE_NAMES = {WEIGHTS: "SAN attention weights", KV: "cross-layer KV sharing"}
# The options of the decoder-only language model (transformer_lm_san): one policy kind.
LM_KIND = "decoder_self"
LM_OPTIONS = (MODEL_OPTIONS[0], POLICY_OPTIONS[LM_KIND], SELF_SHARE)
# The options that make the plugin's models what they are (the decodings' deprecated aliases
# left out): fairseq's own models read none of them.
MODEL_OPTION_NAMES = tuple(
    option.name for option in MODEL_OPTIONS + (SELF_SHARE,) if option.alias_of is None
)

DECODING = Option(
    "san_decoding",
    "how to decode: fairseq (fairseq's SequenceGenerator), no-cache (the same without the "
    "incremental cache, recomputing the prefix at every step: the paper's Baseline-Cache), "
    "fast (a faster attention step, same output: encoder-decoder keys/values once per source "
    "sentence, fused q/k/v projection and attention kernel) or static (the static-shape decoder, "
    "fairseq_san.static_decoding: same translations, less per-step overhead)",
    default=FAIRSEQ,
    choices=DECODINGS,
)
# A language model (language_modeling_san) has no model decodings: fairseq's generator or static.
LM_DECODING = Option(
    "san_decoding",
    "how to generate: fairseq (fairseq's SequenceGenerator, the prompt fed one token per step) "
    "or static (the static-shape decoder, fairseq_san.static_decoding: the prompt prefilled in "
    "one pass, the same greedy output)",
    default=FAIRSEQ,
    choices=(FAIRSEQ, STATIC),
)
# Its choices and help come from the table of precisions (static_decoding.precision).
DECODER_PRECISION = Option(
    "san_decoder_precision", "--san-decoding static: the precision of the step", default="fp32"
)
# Its choices come from the table of executions (static_decoding.execution); None: the device's.
DECODER_EXECUTION = Option(
    "san_decoder_execution",
    "--san-decoding static: how the step runs: eager (in the device's cache layout), fixed "
    "(position as a tensor, masked caches), graph (CUDA graphs, GPU only) or compile-graph (the "
    "step compiled by inductor inside the graphs: faster steps, 20-30 s of compilation per "
    "batch shape and length bucket on first use); default: graph on a GPU, eager on the CPU",
)
DECODER_OPTIONS = (
    DECODING,
    Option(
        "san_decoder",
        "deprecated: --san-decoding static",
        default=FAIRSEQ,
        choices=(FAIRSEQ, STATIC),
        alias_of=("san_decoding", STATIC),
    ),
    DECODER_PRECISION,
    DECODER_EXECUTION,
)

# The static decoder's own options: another decoding would accept and ignore them.
STATIC_DECODER_OPTIONS = (DECODER_PRECISION, DECODER_EXECUTION)

ANALYSIS_OPTIONS = (
    Option(
        "san_analysis_dir",
        "fairseq-validate only: write the JS divergence between the attention weights of every "
        "pair of layers (js.json), heatmaps and sample attention here",
    ),
    Option(
        "san_analysis_max_sentences",
        "analyse only sentences 0..N-1 of the subset (the loss covers all)",
    ),
    Option(
        "san_analysis_save_sentences", "save the attention weights of sentences 0..K-1 as .npz", 4
    ),
    Option(
        "san_analysis_log_interval",
        "log analysis progress every N analysed batches (0: never)",
        100,
    ),
)

# The options a task's generator reads from the generation config (the hub's keywords, a
# benchmark system's overrides).
DECODER_OPTION_NAMES = tuple(option.name for option in DECODER_OPTIONS)

OPTIONS: Dict[str, Option] = {
    option.name: option
    for option in MODEL_OPTIONS + (SELF_SHARE,) + DECODER_OPTIONS + ANALYSIS_OPTIONS
}


def option_names() -> Tuple[str, ...]:
    """The plugin's ``san_*`` names: the model's options and the task's."""
    return tuple(sorted(name for name in OPTIONS if name.startswith("san_")))


def current_flag(option: Option, value: object) -> Tuple[str, object]:
    """The flag and value that say ``option`` = ``value`` today: a deprecated option's
    replacement (``san_decoder`` static: ``--san-decoding static``), else its own flag."""
    if option.alias_of is None:
        return option.flag, value
    target, meant = option.alias_of
    return OPTIONS[target].flag, meant


_warned = set()


def deprecated_value(name: str, value: object) -> Optional[str]:
    """The value of ``san_decoding`` that the deprecated option ``name`` set to ``value`` stands
    for (logged once per process), or None when it is not set."""
    option = OPTIONS[name]
    flag, meant = current_flag(option, value)
    if not (value is True or str(value) == meant):
        return None
    if name not in _warned:
        _warned.add(name)
        logger.warning(
            "%s is deprecated: use %s %s (it means the same)",
            option.flag if value is True else f"{option.flag} {value}",
            flag,
            meant,
        )
    return meant


# The model options that ask for a decoding: san_decoding, and the deprecated keys of checkpoints
# saved before it.
DECODING_KEYS = ("san_decoding", "san_no_cache", "san_fast_decoding")


def asked_decoding(values: Mapping[str, object]) -> str:
    """The decoding that a model's options ``values`` (``DECODING_KEYS``, from a checkpoint or
    ``--model-overrides``) ask for: ``san_decoding``, else what a deprecated key set means
    (``san_no_cache``: no-cache), else fairseq."""
    decoding = str(values.get("san_decoding") or FAIRSEQ)
    for name in DECODING_KEYS[1:]:
        meant = deprecated_value(name, values.get(name))
        if meant is not None and decoding == FAIRSEQ:
            decoding = meant
    return decoding


def chosen_decoding(decoding: str, legacy: object) -> str:
    """What ``san_decoding`` and the deprecated ``san_decoder`` (``legacy``) choose together:
    the default ``fairseq`` gives way to ``san_decoder`` static (warned once); another decoding
    beside it is refused."""
    if decoding == FAIRSEQ:
        return deprecated_value("san_decoder", legacy) or decoding
    if str(legacy) == STATIC and decoding != STATIC:
        raise UsageError(
            f"--san-decoding {decoding} and --san-decoder static (deprecated: --san-decoding "
            "static) choose two decoders: pass --san-decoding alone"
        )
    return decoding


def misplaced_static_option(decoding: str, given: Callable[[Option], bool]) -> Optional[Option]:
    """The first of ``STATIC_DECODER_OPTIONS`` that was ``given`` where ``decoding`` (the one
    chosen, ``chosen_decoding``) is not static; None where there is none. Its caller words the
    refusal: a command-line flag, a benchmark override."""
    if decoding == STATIC:
        return None
    return next((option for option in STATIC_DECODER_OPTIONS if given(option)), None)


def flag_spelt(option: Option, value: object) -> str:
    """``option`` as a command line gives it: its flag, with ``value`` unless None."""
    return option.flag if value is None else f"{option.flag} {value}"


def misplaced_static_refusal(
    option: Option,
    value: object,
    decoding: str,
    spelt: Callable[[Option, object], str] = flag_spelt,
) -> str:
    """The one wording of the refusal of ``misplaced_static_option``: ``option`` given as
    ``value`` where ``decoding`` decodes, each option ``spelt`` as its caller takes it, with a
    value or alone (None): a command-line flag, a benchmark override."""
    static = spelt(DECODING, STATIC)
    return (
        f"{spelt(option, value)} is an option of {static}, not of {spelt(DECODING, decoding)}, "
        f"which decodes here: add {static}, or drop {spelt(option, None)}"
    )


def cutoffs_read(text: object) -> Any:
    """The list of bands fairseq reads from an adaptive cutoff option's ``text``
    (``utils.eval_str_list``, literals only under the plugin), or ``text`` itself where it reads
    none (None where unset; else fairseq's to refuse, as it builds the model)."""
    from fairseq import utils

    try:
        return utils.eval_str_list(text, type=int)
    except (TypeError, ValueError):
        return text
