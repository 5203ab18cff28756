"""fairseq's numeric options checked against the values they can take, as a command parses them.

Upstream behaviour corrected: fairseq's parser takes any number for these options, and a value
out of range failed far from the cause or trained another run than the one asked for:

* a traceback deep inside fairseq, numpy or torch: ``--update-freq 0``, ``--log-interval 0``,
  and ``--save-interval 0`` or ``--validate-interval 0`` (at the end of the first epoch)
  (division by zero), ``--warmup-updates 0`` or below with ``--lr-scheduler inverse_sqrt``,
  ``--encoder-embed-dim 0`` (the positional embedding), ``--decoder-output-dim 0`` or ``abc``
  (a ZeroDivisionError, a ValueError: fairseq keeps it as text), ``--seed -1``,
  ``--num-workers -1``, ``--dropout 1.5`` and ``--attention-dropout 2`` (at the first update),
  fairseq-preprocess's ``--workers 0`` or ``-1``, ``--adaptive-softmax-factor 0`` (a
  ZeroDivisionError as the model is built), ``--adam-betas
  '(0.9, 1.5)'`` ("math domain error"), and betas that are no pair of numbers, on every rank
  (``--adam-betas '(0.9,)'``: an IndexError in the optimizer; ``'(0.9, 0.98'``: fairseq's
  ``eval`` of it); ``--batch-size-valid nan`` (or ``inf``, ``abc``: fairseq keeps it as text and
  reads it back as a literal, a traceback), ``--seed 4294967295`` (numpy's "Seed must be between
  0 and 2**32 - 1" at the first epoch: fairseq seeds it with the seed plus the epoch);
* a hang: ``--num-workers 2147483648`` started worker processes until it was killed;
* silently another run: ``--lr -1`` and ``--max-epoch -1`` trained nothing and exited 0,
  ``--label-smoothing`` outside [0, 1) and ``--weight-decay -1`` trained towards other targets,
  ``--activation-dropout -1`` trained without dropout;
* a number beyond what fairseq computes with: ``--lr inf`` or ``--weight-decay inf`` (NaN
  gradients, a traceback at the first update), ``--max-tokens 9223372036854775808`` (an
  ``OverflowError`` from numpy: fairseq holds counts in 64-bit integers; ``--num-shards`` beyond
  them, a ValueError from ``islice``), ``--required-batch-size-multiple 2147483648`` (an
  ``OverflowError``: fairseq's batching holds it in 32 bits);
* ``--adam-eps 0`` or ``nan`` (NaN gradients, a traceback) or below 0, ``--momentum nan`` or
  ``inf`` (the same) or below 0, ``--clip-norm`` and ``--stop-time-hours`` below 0 or nan (no
  clipping, no time limit, without a word; inf is no limit, as their 0 is);
* ``--fp16``'s loss scaling: ``--fp16-init-scale 0`` or ``--fp16-scale-window 0`` (a
  ZeroDivisionError at the first update), ``--min-loss-scale`` of 0, below or nan (the scale fell
  to 0: a ZeroDivisionError) or inf (training stopped at the first overflow),
  ``--threshold-loss-scale inf`` (every update skipped) or nan (no threshold, without a word),
  ``--fp16-scale-tolerance nan`` or above 1 (the scale never lowered: every update skipped).

``check_option_ranges`` refuses each in one line naming the flag and its range (or, for the
betas, their form); the command-line
checks (``command_options.check_parsed``) call it for every command, each option checked where
the command has it. Batch sizes are here too: fairseq reads -1 as no limit at all, and 0 fails
deep inside its batching.
"""

import argparse
import contextlib
import math
from dataclasses import dataclass, replace
from typing import Iterable, List

from fairseq_san.errors import UsageError
from fairseq_san.fairseq_fixes.literal_eval import NotALiteral, evaluate
from fairseq_san.options import flag_of
from fairseq_san.policy import is_finite_number, is_number


# The largest count fairseq can take: it holds counts in 64-bit integers (numpy's, torch's).
LARGEST_COUNT = 2**63 - 1


@dataclass(frozen=True)
class Range:
    """The values an option can take: ``low`` to ``high``, each end in or out (``*_open``); an
    unbounded one takes infinity only where it is ``unbounded_at_inf`` (no limit), an integer
    one no count above ``LARGEST_COUNT``."""

    low: float
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False
    integer: bool = False
    note: str = ""
    unbounded_at_inf: bool = False

    def holds(self, value: object) -> bool:
        if not is_number(value) or (self.integer and not is_whole(value)):
            return False
        if beyond_computed(value) and not (self.unbounded_at_inf and value == math.inf):
            return False
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below

    def said(self) -> str:
        """The range in words: "an integer of at least 1", "in [0, 1)", "greater than 0"."""
        low, high = shown_value(self.low), shown_value(self.high)
        if self.high < math.inf:
            opening, closing = "(" if self.low_open else "[", ")" if self.high_open else "]"
            text = f"in {opening}{low}, {high}{closing}"
            text = f"an integer {text}" if self.integer else text
        elif self.low_open:
            text = f"greater than {low}"
        else:
            text = f"an integer of at least {low}" if self.integer else f"at least {low}"
        return text + (f" ({self.note})" if self.note else "")

    def said_for(self, value: object) -> str:
        """The range in words (``said``), and, where it has no upper end and ``value`` is beyond
        what fairseq computes with (``beyond_computed``), the limit it misses: ", and finite",
        ", at most ..."."""
        if self.high < math.inf or not beyond_computed(value):
            return self.said()
        if isinstance(value, int):
            return f"{self.said()}, at most {LARGEST_COUNT} (fairseq holds it in a 64-bit integer)"
        return f"{self.said()}, and finite"


POSITIVE_INTEGER = Range(1, integer=True)
COUNT = Range(0, integer=True)


def most_processes() -> int:
    """The processes this user may run at once: the soft ``RLIMIT_NPROC`` and Linux's process
    ids (``pid_max``), the smaller; ``LARGEST_COUNT`` where neither is known."""
    limits = []
    with contextlib.suppress(ImportError, OSError, ValueError):
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NPROC)[0]
        limits += [soft] if soft != resource.RLIM_INFINITY else []
    with contextlib.suppress(OSError, ValueError), open("/proc/sys/kernel/pid_max") as ids:
        limits.append(int(ids.read()))
    return min(limits, default=LARGEST_COUNT)


# Processes of their own (the data loader's workers, fairseq-preprocess's), asked of the system
# once: 2147483648 of them started processes until the command was killed.
PROCESSES = Range(
    0, most_processes(), integer=True, note="the processes this machine lets one user run"
)
PROBABILITY = Range(0, 1)
UNLIMITED_AT_0 = Range(0, integer=True, note="0: no limit")

# fairseq's options (argparse dests) and their ranges. An option given as a list (--lr 0.1,0.01,
# --update-freq 1,2) is checked value by value.
OPTION_RANGES = {
    **dict.fromkeys(
        ("max_tokens", "batch_size", "max_tokens_valid", "batch_size_valid", "update_freq",
         "log_interval", "encoder_embed_dim", "decoder_embed_dim", "encoder_ffn_embed_dim",
         "decoder_ffn_embed_dim", "encoder_attention_heads", "decoder_attention_heads",
         "softmax_batch", "save_interval", "validate_interval", "num_shards",
         "decoder_output_dim"),
        POSITIVE_INTEGER,
    ),
    **dict.fromkeys(("warmup_updates", "encoder_layers", "decoder_layers"), COUNT),
    # each data loader worker is a process (more than the processors is allowed: torch only
    # warns above them)
    "num_workers": PROCESSES,
    # fairseq-preprocess's processes: 0 divided by zero, -1 was an IndexError
    "workers": replace(PROCESSES, low=1),
    **dict.fromkeys(("max_epoch", "max_update"), UNLIMITED_AT_0),
    **dict.fromkeys(
        ("dropout", "attention_dropout", "activation_dropout", "relu_dropout",
         "encoder_layerdrop", "decoder_layerdrop"),
        PROBABILITY,
    ),
    # fairseq seeds numpy with the seed plus the epoch (numpy_seed(seed + epoch)), which numpy
    # takes below 2**32: a seed of 4294967295 was a ValueError at the first epoch
    "seed": Range(
        0, 2**31 - 1, integer=True, note="fairseq seeds numpy with it plus the epoch, below 2**32"
    ),
    # a count of positions beyond a 64-bit integer failed in fairseq-train: "OverflowError: int
    # too big to convert", a traceback
    **dict.fromkeys(
        ("max_source_positions", "max_target_positions", "tokens_per_sample"),
        Range(1, 2**31 - 1, integer=True),
    ),
    # fairseq's batching (batch_by_size) holds it in a 32-bit integer: "OverflowError: value too
    # large to convert to int32_t", a traceback
    "required_batch_size_multiple": Range(1, 2**31 - 1, integer=True),
    "lr": Range(0, low_open=True),
    # an adaptive band is the one before it divided by the factor (0: a ZeroDivisionError)
    **dict.fromkeys(("adaptive_softmax_factor", "adaptive_input_factor"), Range(0, low_open=True)),
    "weight_decay": Range(0),
    "adam_eps": Range(0, low_open=True),
    "momentum": Range(0),
    "clip_norm": Range(0, note="0: no clipping", unbounded_at_inf=True),
    "stop_time_hours": Range(0, note="0: no limit", unbounded_at_inf=True),
    "label_smoothing": Range(0, 1, high_open=True),
    **dict.fromkeys(("adam_betas", "adamax_betas"), Range(0, 1, high_open=True)),
    # --fp16's dynamic loss scaler (DynamicLossScaler): an initial scale or a window of 0 divided
    # by zero at the first update; a --min-loss-scale of 0, below or nan let the scale fall to 0
    # (a ZeroDivisionError), inf stopped training at the first overflow; a threshold of inf held
    # the scale there and one of nan or 0 or below was none; a tolerance of nan or above 1 never
    # lowered the scale: every update after an overflow was skipped
    **dict.fromkeys(("fp16_init_scale", "fp16_scale_window"), POSITIVE_INTEGER),
    **dict.fromkeys(("min_loss_scale", "threshold_loss_scale"), Range(0, low_open=True)),
    "fp16_scale_tolerance": PROBABILITY,
}  # fmt: skip
# The options fairseq's optimizers evaluate and unpack as two numbers (beta1, beta2).
PAIRS = ("adam_betas", "adamax_betas")
# The options fairseq's parser keeps as text (their default is another option's value) and reads
# back as one literal number: 'nan', 'inf' or 'abc' was a traceback as fairseq-train read them
# (a translation model's --decoder-output-dim: int()'s ValueError; 0, a ZeroDivisionError).
TEXT_NUMBERS = ("max_tokens_valid", "batch_size_valid", "decoder_output_dim")
# Layer counts for most models; fconv's and fconv_lm's are text, their layers' specifications
# ("[(512, 3)] * 20": widths and kernels, no count), which these ranges do not describe.
LAYER_COUNTS = ("encoder_layers", "decoder_layers")
# --lr-scheduler inverse_sqrt divides by the warm-up's length.
INVERSE_SQRT_WARMUP = Range(1, integer=True, note="--lr-scheduler inverse_sqrt divides by it")


def given_values(value: object) -> List[object]:
    """The numbers an option's parsed ``value`` holds: one, a list's, or a literal string's
    (fairseq's parser keeps ``--adam-betas`` and the validation batch sizes as text)."""
    if isinstance(value, str):
        try:
            value = evaluate(value)
        except (NotALiteral, SyntaxError, ValueError):  # literal_eval's fix says why, in one line
            return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def text_number(value: object) -> object:
    """The number a ``TEXT_NUMBERS`` option's text is as a literal; else the text itself, which no
    ``Range`` holds ('nan', 'abc', '[1]')."""
    if not isinstance(value, str):
        return value
    try:
        number = evaluate(value)
    except (NotALiteral, SyntaxError, ValueError):
        return value
    return number if is_number(number) else value


def is_pair(value: object) -> bool:
    """Whether ``value``, or the literal it is as text, is two numbers (a tuple or a list)."""
    values = given_values(value)
    return len(values) == 2 and all(map(is_number, values))


def out_of_range(values: Iterable[object], valid: Range) -> List[object]:
    return [value for value in values if not valid.holds(value)]


def check_option_ranges(args: argparse.Namespace) -> None:
    """Refuse a value of ``PAIRS`` that is no pair of numbers, a value of ``OPTION_RANGES``
    outside its range, naming the flag, the value given and the range; and a warm-up below 1
    update with ``--lr-scheduler inverse_sqrt``."""
    for name in PAIRS:
        value = getattr(args, name, None)
        if value is not None and not is_pair(value):
            raise UsageError(
                f"{flag_of(name)} {value!r}: it must be a pair of numbers, e.g. '(0.9, 0.98)'"
            )
    for name, valid in OPTION_RANGES.items():
        value = getattr(args, name, None)
        if name == "warmup_updates" and getattr(args, "lr_scheduler", None) == "inverse_sqrt":
            valid = INVERSE_SQRT_WARMUP
        if value is None or isinstance(value, bool):
            continue
        if name in LAYER_COUNTS and isinstance(value, str):
            continue
        values = [text_number(value)] if name in TEXT_NUMBERS else given_values(value)
        bad = out_of_range(values, valid)
        if bad:
            said = valid.said_for(bad[0])
            raise UsageError(f"{flag_of(name)} {shown_value(bad[0])}: it must be {said}")


def beyond_computed(value: object) -> bool:
    """Whether ``value`` is a number fairseq cannot compute with: NaN, infinity, or an integer
    above ``LARGEST_COUNT``."""
    return is_number(value) and (
        not is_finite_number(value) or (isinstance(value, int) and value > LARGEST_COUNT)
    )


def is_whole(value: float) -> bool:
    return is_finite_number(value) and value == int(value)


def shown_value(value: object) -> str:
    """A number as the command line would give it: 0, not 0.0; 1e-05 as Python writes it."""
    return str(int(value)) if is_number(value) and is_whole(value) else str(value)
