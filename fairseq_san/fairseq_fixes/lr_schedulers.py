"""fairseq's learning-rate schedulers' options, checked as fairseq-train parses them.

Upstream behaviour corrected: each scheduler checks its options as it is built, after the data
and the model are loaded, and failed on what it cannot schedule with a traceback:

* ``polynomial_decay`` without ``--total-num-update`` (hydra's "Error merging override
  lr_scheduler.total_num_update=null": fairseq does not take it from ``--max-update`` on the
  command line), or with one of 0 or below (a bare ``AssertionError``);
* ``tri_stage`` without ``--phase-ratio`` or its three step counts ("please specify steps or
  phase_ratio"), with no decay stage (a ``ZeroDivisionError``), ratios whose sum, in floating
  point, is not exactly 1 ("phase ratios must add up to 1") or without ``--max-update``, and a
  ``--final-lr-scale`` of 0 or below ("math domain error");
* ``cosine`` without ``--lr-period-updates`` or a ``--max-update`` above ``--warmup-updates``
  (an ``AssertionError``, or a ``ZeroDivisionError`` at the first update);
* ``triangular`` with a ``--lr-period-updates`` below 2 (a ``ZeroDivisionError``) or a
  ``--max-lr`` not above ``--lr``, ``step`` with a ``--min-lr`` not below ``--lr`` or a decay
  fairseq asserts against (bare ``AssertionError``);
* more than one ``--lr`` (one an epoch, which ``fixed`` and ``polynomial_decay`` take) with a
  scheduler of ``ONE_LR``: a ``ValueError`` traceback, or for ``step`` the first alone, silently;
* a scheduler's number (``FINITE``, ``--total-num-update``) given as nan or inf: a learning rate
  of NaN or infinity, trained silently (``--final-lr-scale nan``), or a traceback at the first
  update (``--lr-period-updates nan``) or as the scheduler is built (``--max-lr nan``).

``check_lr_scheduler`` refuses each in one line naming the option and what to pass;
``command_options.check_training`` calls it.
"""

import argparse
import math
from typing import Callable, Dict, List, Optional

from fairseq_san.errors import UsageError
from fairseq_san.fairseq_fixes.option_ranges import shown_value
from fairseq_san.options import flag_of
from fairseq_san.policy import is_finite_number, is_number

# Schedulers that schedule from one learning rate: more than one --lr is refused.
ONE_LR = ("cosine", "inverse_sqrt", "reduce_lr_on_plateau", "step", "tri_stage", "triangular")
# The schedulers' numbers (argparse dests), each refused as nan or inf.
FINITE = (
    "end_learning_rate", "final_lr_scale", "init_lr_scale", "lr_decay", "lr_period_updates",
    "lr_shrink", "lr_threshold", "max_lr", "min_lr", "power", "t_mult", "warmup_init_lr",
)  # fmt: skip


def check_lr_scheduler(args: argparse.Namespace) -> None:
    """Refuse ``--lr-scheduler`` options the scheduler would fail on (``SCHEDULER_CHECKS``), and
    more than one ``--lr`` for a scheduler of ``ONE_LR``, and a number of ``FINITE`` that is
    nan or inf."""
    for name in FINITE:
        value = getattr(args, name, None)
        if is_number(value) and not is_finite_number(value):
            raise UsageError(f"{flag_of(name)} {value}: it must be a finite number")
    scheduler = getattr(args, "lr_scheduler", None)
    lrs = getattr(args, "lr", None) or []
    if scheduler in ONE_LR and len(lrs) > 1:
        raise UsageError(
            f"--lr {','.join(map(shown_value, lrs))}: --lr-scheduler {scheduler} schedules from "
            "one learning rate; give one, or --lr-scheduler fixed (or polynomial_decay) for one "
            "an epoch"
        )
    check = SCHEDULER_CHECKS.get(scheduler)
    if check is not None:
        check(args)


def total_updates(args: argparse.Namespace) -> Optional[float]:
    """``--total-num-update`` as a number (fairseq's parser keeps it as text), None where it is
    not given."""
    value = args.total_num_update
    try:
        total = None if value is None else float(value)
    except ValueError:
        total = math.nan
    if total is not None and not math.isfinite(total):
        raise UsageError(f"--total-num-update {value!r}: it must be a finite number")
    return total


def check_polynomial_decay(args: argparse.Namespace) -> None:
    """Refuse polynomial_decay without a ``--total-num-update`` above 0."""
    total = total_updates(args)
    if total is None:
        example = args.max_update if args.max_update > 0 else 100000
        raise UsageError(
            "--lr-scheduler polynomial_decay needs --total-num-update, the updates over which it "
            f"decays the learning rate (fairseq does not take --max-update for it): e.g. "
            f"--total-num-update {example}"
        )
    if total <= 0:
        raise UsageError(f"--total-num-update {shown_value(total)}: it must be greater than 0")


def check_tri_stage(args: argparse.Namespace) -> None:
    """Refuse tri_stage without its stages' lengths, with no decay stage, or a
    ``--final-lr-scale`` of 0 or below."""
    if args.final_lr_scale <= 0:
        raise UsageError(
            f"--final-lr-scale {shown_value(args.final_lr_scale)}: it must be greater than 0 "
            "(--lr-scheduler tri_stage decays by its logarithm)"
        )
    ratio = args.phase_ratio
    if ratio is not None:
        check_phase_ratio(list(ratio), args.max_update)
        return
    steps = [args.warmup_steps, args.hold_steps, args.decay_steps]
    if sum(steps) <= 0:
        raise UsageError(
            "--lr-scheduler tri_stage needs its stages' lengths: --phase-ratio '(0.1, 0.4, 0.5)' "
            "with --max-update N, or --warmup-steps, --hold-steps and --decay-steps"
        )
    if args.decay_steps <= 0:
        raise UsageError(
            f"--decay-steps {args.decay_steps}: --lr-scheduler tri_stage divides by it; give one "
            "of at least 1"
        )


def check_phase_ratio(ratio: List[float], max_update: int) -> None:
    """Refuse tri_stage's ``--phase-ratio`` unless it is three numbers that fairseq's float sum
    makes exactly 1, and ``--max-update`` that leaves its decay stage at least one update."""
    said = f"--phase-ratio '({', '.join(map(shown_value, ratio))})'"
    if len(ratio) != 3 or not all(map(is_number, ratio)):
        raise UsageError(f"{said}: it must be three numbers, e.g. '(0.1, 0.4, 0.5)'")
    if sum(ratio) != 1:
        raise UsageError(
            f"{said}: fairseq asserts that the ratios add up to exactly 1, and in floating point "
            f"they add up to {sum(ratio)!r}: e.g. '(0.1, 0.4, 0.5)'"
        )
    if max_update <= 0:
        raise UsageError(f"{said} is a share of --max-update, which is not given: add it")
    if int(max_update * ratio[2]) <= 0:
        raise UsageError(
            f"{said} with --max-update {max_update} leaves the decay stage no update (--lr-"
            "scheduler tri_stage divides by its length): give a larger last ratio or --max-update"
        )


def check_cosine(args: argparse.Namespace) -> None:
    """Refuse cosine without a period: ``--lr-period-updates``, or the updates after the warm-up."""
    if args.lr_period_updates > 0 or args.max_update > args.warmup_updates:
        return
    if args.max_update <= 0:
        said = "--max-update is not given"
    else:
        said = f"--max-update {args.max_update} is not above --warmup-updates {args.warmup_updates}"
    raise UsageError(
        f"--lr-scheduler cosine needs --lr-period-updates N, or a --max-update above "
        f"--warmup-updates (the period is then the updates after the warm-up), and {said}"
    )


def check_triangular(args: argparse.Namespace) -> None:
    """Refuse triangular with a half-period of no update, or no rate above ``--lr`` to cycle to."""
    if args.lr_period_updates < 2:
        raise UsageError(
            f"--lr-period-updates {shown_value(args.lr_period_updates)}: --lr-scheduler "
            "triangular divides by half of it; give one of at least 2"
        )
    if args.max_lr <= args.lr[0]:
        raise UsageError(
            f"--max-lr {shown_value(args.max_lr)} is not above --lr {shown_value(args.lr[0])}: "
            "--lr-scheduler triangular cycles between them; give a higher --max-lr"
        )


def check_step(args: argparse.Namespace) -> None:
    """Refuse step with what fairseq asserts against: its period, its decay, its ``--min-lr``."""
    if args.lr_deacy_period <= 0:  # fairseq's spelling
        raise UsageError(f"--lr-deacy-period {args.lr_deacy_period}: it must be at least 1")
    if not 0 <= args.lr_decay <= 1:
        raise UsageError(f"--lr-decay {shown_value(args.lr_decay)}: it must be in [0, 1]")
    if not 0 <= args.min_lr < args.lr[0]:
        raise UsageError(
            f"--min-lr {shown_value(args.min_lr)}: --lr-scheduler step decays from --lr "
            f"{shown_value(args.lr[0])} towards it, and it must be at least 0 and below --lr"
        )


# What each scheduler's options must hold (the others' fairseq checks in its parser).
SCHEDULER_CHECKS: Dict[str, Callable[[argparse.Namespace], None]] = {
    "cosine": check_cosine,
    "polynomial_decay": check_polynomial_decay,
    "step": check_step,
    "tri_stage": check_tri_stage,
    "triangular": check_triangular,
}
