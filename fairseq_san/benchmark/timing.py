"""The clock, the result of one pass over the subset, and the timing loop of one setting.

The loop runs in the parent process and drives the systems through their workers (``workers``):
each pass runs alone, in the process of its system's engine, while the other workers wait on
their pipes.
"""

import logging
import math
import statistics
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence

from fairseq_san.benchmark.config import CTRANSLATE2, FAIRSEQ, NATURAL, BenchmarkConfig, Setting
from fairseq_san.benchmark.config import fairseq_twins

if TYPE_CHECKING:  # for the annotations only: the workers import timing (through their systems)
    import torch

    from fairseq_san.benchmark.data import TextSide
    from fairseq_san.benchmark.workers import WorkerPool

logger = logging.getLogger("fairseq_san.benchmark")


def clock(device: "torch.device") -> float:
    """perf_counter after the device (a torch.device) has finished its queued work."""
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)
    return time.perf_counter()


@dataclass
class PassResult:
    """One pass over the subset: wall time of the generate calls and what was generated."""

    seconds: float
    tokens: int
    sentences: int
    hypotheses: Optional[Dict[int, List[int]]] = None  # sample id -> best hypothesis tokens
    cache_bytes: Optional[int] = None
    cache_tensor_bytes: Optional[int] = None

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else float("nan")


def median(values: Sequence[float]) -> float:
    """The median of the values that are not NaN (NaN when none is)."""
    values = [v for v in values if not math.isnan(v)]
    return statistics.median(values) if values else float("nan")


def time_setting(
    pool: "WorkerPool", names: Sequence[str], baseline: str, setting: Setting,
    config: BenchmarkConfig, text: "TextSide",
) -> Dict[str, Dict]:  # fmt: skip
    """Warm-up pass (also scores, cache peak, agreement with the baseline and, for a static
    decoder system, with fairseq's decoding of the same model: ``config.fairseq_twins``), then
    ``repeats`` interleaved timed passes.

    ``pool`` runs a system's method in its worker (``WorkerPool.call``); ``text`` scores the
    warm-up hypotheses (``data.TextSide``).
    """
    runs = _warm_up(pool, names, baseline, setting, config, text)
    _timed_repeats(pool, names, setting, config, runs)
    _add_speeds(runs, baseline, [name for name in names if pool.engine(name) == CTRANSLATE2])
    return runs


def _warm_up(
    pool: "WorkerPool", names: Sequence[str], baseline: str, setting: Setting,
    config: BenchmarkConfig, text: "TextSide",
) -> Dict[str, Dict]:  # fmt: skip
    """Each system's record from its warm-up pass: scores and cache peak, and its hypotheses'
    agreement with the baseline's and (a static decoder system) with its fairseq twin's."""
    runs: Dict[str, Dict] = {}
    hypotheses: Dict[str, Dict[int, List[int]]] = {}
    for name in names:
        warm = pool.call(
            name, "decode", setting, config.decode,
            keep_hypotheses=setting.mode == NATURAL,
            measure_cache=pool.engine(name) == FAIRSEQ,
        )  # fmt: skip
        runs[name] = _run_record(setting, warm)
        if warm.hypotheses is not None:
            runs[name].update(text.score(warm.hypotheses))
            hypotheses[name] = warm.hypotheses
    for name, ours in hypotheses.items():
        runs[name]["agreement_with_baseline"] = text.agreement(ours, hypotheses[baseline])
    for name, twin in fairseq_twins(config.systems).items():
        if name in hypotheses and twin in hypotheses:
            agreement = text.agreement(hypotheses[name], hypotheses[twin])
            runs[name]["agreement_with_fairseq"] = agreement
    return runs


def _timed_repeats(
    pool: "WorkerPool", names: Sequence[str], setting: Setting, config: BenchmarkConfig,
    runs: Dict[str, Dict],
) -> None:  # fmt: skip
    """``config.repeats`` timed passes of every system, interleaved (A B C ... A B C ...), each
    appended to its ``runs`` record."""
    for repeat in range(config.repeats):
        for name in names:
            timed = pool.call(name, "decode", setting, config.decode)
            runs[name]["seconds"].append(timed.seconds)
            runs[name]["tokens_per_second_repeats"].append(timed.tokens_per_second)
        logger.info(
            "beam %d, %s lengths, repeat %d/%d: %s", setting.beam, setting.mode, repeat + 1,
            config.repeats, ", ".join(
                f"{name} {run['tokens_per_second_repeats'][-1]:.1f} tok/s"
                for name, run in runs.items()
            ),
        )  # fmt: skip


def time_left(started: float, done: int, total: int) -> str:
    """An estimate of the time the ``total - done`` passes left take, from the ``done`` ones
    since ``started`` (``time.monotonic``): "about 3 min left"; "" before the first is done."""
    if not done:
        return ""
    seconds = (time.monotonic() - started) / done * (total - done)
    said = f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"
    return f"about {said} left"


def _add_speeds(runs: Dict[str, Dict], baseline: str, references: Sequence[str]) -> None:
    """Each run's median speed, its ratio to the baseline and to each CTranslate2 row of
    ``references`` (``ratio_to``): medians of the per-repeat ratios."""
    base = runs[baseline]["tokens_per_second_repeats"]
    for run in runs.values():
        speeds = run["tokens_per_second_repeats"]
        run["tokens_per_second"] = median(speeds)
        run["ratio_repeats"] = per_repeat_ratios(speeds, base)
        run["ratio_to_baseline"] = median(run["ratio_repeats"])
    for reference in references:
        theirs = runs[reference]["tokens_per_second_repeats"]
        for run in runs.values():
            ratios = per_repeat_ratios(run["tokens_per_second_repeats"], theirs)
            run.setdefault("ratio_to", {})[reference] = median(ratios)


def per_repeat_ratios(speeds: Sequence[float], reference: Sequence[float]) -> List[float]:
    """Repeat i of one system over repeat i of another, timed side by side (interleaved): the
    ratios whose median is a speed-up (not the ratio of the two medians, which pairs passes
    timed apart)."""
    return [a / b if b > 0 else float("nan") for a, b in zip(speeds, reference)]


def _run_record(setting: Setting, warm: PassResult) -> Dict:
    """The record of one system in one setting, from its warm-up pass; timings come next."""
    run = {
        "beam": setting.beam,
        "mode": setting.mode,
        "length": setting.length,
        "sentences": warm.sentences,
        "tokens": warm.tokens,
        "warmup_seconds": warm.seconds,
        "seconds": [],
        "tokens_per_second_repeats": [],
    }
    if warm.cache_bytes is not None:
        run["cache_bytes"] = warm.cache_bytes
        run["cache_tensor_bytes"] = warm.cache_tensor_bytes
    return run
