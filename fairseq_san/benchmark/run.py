"""The benchmark from end to end: check, start the workers, time, measure, profile, report."""

import importlib.util
import json
import logging
import math
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from fairseq_san.benchmark.config import FAIRSEQ, FIXED, NATURAL, BenchmarkConfig, Setting
from fairseq_san.benchmark.config import check_config
from fairseq_san.benchmark.data import Batches, TextSide
from fairseq_san.benchmark.fairseq_system import check_translation, load_checkpoint_task
from fairseq_san.benchmark.machine import choose_device, machine_info, matmul_peak
from fairseq_san.benchmark.plots import plot_speed_vs_beam, plot_speed_vs_bleu
from fairseq_san.benchmark.report import markdown_report
from fairseq_san.benchmark.timing import median, time_left, time_setting
from fairseq_san.benchmark.workers import WorkerPool
from fairseq_san.files import write_text

logger = logging.getLogger("fairseq_san.benchmark")

UNDETOKENIZED = (
    "no sentencepiece model (--spm, DATA/spm.model): BLEU and chrF are scored on the target "
    "dictionary's tokens as they are, comparable within this run only"
)


def run_benchmark(config: BenchmarkConfig) -> Dict:
    """Decode, time, score and profile every system; write results.{json,md} and the plots."""
    baseline = check_config(config)
    check_translation(config)  # before anything is made or loaded: language models refused
    if config.repeats < 3:
        logger.warning("--repeats %d: medians need 3 or more", config.repeats)
    if config.threads:
        torch.set_num_threads(config.threads)  # the workers take the same count
    device = choose_device(config.device, config.fp16)
    out_dir = writable_out_dir(Path(config.out_dir))  # else every measurement is lost at the end
    machine = machine_info(device)  # before decoding: the load average of the machine as found

    # Every checkpoint's overrides are checked before anything is measured; the first one's task
    # gives the batches' ids, the references and the detokenizer (workers collate the same).
    tasks = [load_checkpoint_task(spec, config.data, device) for spec in config.systems]
    check_one_direction(config, tasks)
    check_beams_fit(config, len(tasks[0].target_dictionary))
    if config.profile:
        machine["matmul_peak_gflops"] = matmul_peak(device)  # at the workers' thread count
    batches = Batches(tasks[0], config.subset, config.batch_size, torch.device("cpu"),
                      config.max_sentences)  # fmt: skip
    if not batches.ids:
        raise ValueError(f"subset {config.subset} is empty")
    if NATURAL in config.modes:
        check_natural_lengths(batches, config)
    text = TextSide(config, tasks[0], batches)
    fixed_length = config.fixed_length or max(1, round(batches.mean_target_length()))
    del tasks

    logger.info("loading %d system(s) in worker processes", len(config.systems))
    with WorkerPool(config, baseline, device) as pool:
        assert set(pool.sentences.values()) == {len(batches.ids)}, pool.sentences
        check_source_lengths(pool.systems, batches.longest_source(), config.subset)
        if FIXED in config.modes:
            check_fixed_length(pool.systems, fixed_length)
        machine["torch_threads"] = pool.torch_threads
        notes = _skip_notes(pool, config, text)
        systems = _time_settings(pool, baseline, config, text, fixed_length)
        fairseq_names = [name for name in pool.names if pool.engine(name) == FAIRSEQ]
        cache_mode = FIXED if FIXED in config.modes else NATURAL
        _measure_caches(pool, fairseq_names, systems, config, cache_mode, fixed_length)
        # The beam of the main table and of the profile: --table-beam when it was timed.
        profile_beam = config.table_beam if config.table_beam in config.beams else config.beams[0]
        if config.profile:
            _profile(pool, fairseq_names, systems, config, profile_beam, fixed_length)
        for name in pool.names:
            systems[name]["process"] = pool.process(name)

    results = {
        "command": config.command,
        "machine": machine,
        "config": config_record(config, batches, text, fixed_length, cache_mode, profile_beam),
        "baseline": baseline,
        "bleu_signature": text.signatures.get("bleu_signature"),
        "chrf_signature": text.signatures.get("chrf_signature"),
        "systems": systems,
        "ctranslate2": pool.ctranslate2,
        "notes": notes,
    }
    write_results(results, out_dir)
    logger.info("wrote the results in %s", out_dir)
    return results


def _skip_notes(pool: WorkerPool, config: BenchmarkConfig, text: TextSide) -> List[str]:
    """The report's notes on what could not be measured as asked (each also logged)."""
    notes = []
    if pool.ctranslate2.get("note"):
        notes.append("CTranslate2 row: " + pool.ctranslate2["note"])
        logger.warning("CTranslate2 row skipped: %s", pool.ctranslate2["note"])
    if NATURAL in config.modes and text.spm_model is None:
        notes.append(UNDETOKENIZED)
        logger.warning(UNDETOKENIZED)
    return notes


def _time_settings(
    pool: WorkerPool, baseline: str, config: BenchmarkConfig, text: TextSide, fixed_length: int
) -> Dict[str, Dict]:
    """Every system's record, with its runs at each (beam, mode) setting under ``settings``;
    each setting logged with its place in the grid and the time the rest will take."""
    systems = {name: {**info, "settings": {}} for name, info in pool.systems.items()}
    grid = [(beam, mode) for beam in config.beams for mode in config.modes]
    started = time.monotonic()
    for done, (beam, mode) in enumerate(grid):
        left = time_left(started, done, len(grid))
        logger.info("setting %d/%d: beam %d, %s lengths: warm-up%s", done + 1, len(grid), beam,
                    mode, f" ({left} to time)" if left else "")  # fmt: skip
        setting = Setting.of(beam, mode, fixed_length)
        runs = time_setting(pool, pool.names, baseline, setting, config, text)
        for name, run in runs.items():
            systems[name]["settings"][setting.key] = run
    return systems


def check_one_direction(config: BenchmarkConfig, tasks: Sequence) -> None:
    """ValueError for a system whose task translates another pair than the first system's: every
    worker batches the first task's sources and the report scores against its references (a
    De->En system was fed English and scored against German, exit 0)."""
    pairs = [(task.cfg.source_lang, task.cfg.target_lang) for task in tasks]
    for spec, pair in zip(config.systems, pairs):
        if pair != pairs[0]:
            raise ValueError(
                f"system {spec.name} translates {pair[0]}->{pair[1]}, and system "
                f"{config.systems[0].name} {pairs[0][0]}->{pairs[0][1]}: every system is fed the "
                "first one's sources and scored against its references; benchmark one direction "
                "per run"
            )


def check_beams_fit(config: BenchmarkConfig, target_entries: int) -> None:
    """ValueError for a beam above the target dictionary's entries minus one: fairseq's search
    and the static decoder keep no more hypotheses, so the report named a beam no system
    decoded with (CTranslate2's did), and its ratios compared two beams."""
    for flag, beams in (("--beams", config.beams), ("--cache-beams", config.cache_beams)):
        too_wide = [beam for beam in beams if beam > target_entries - 1]
        if too_wide:
            raise ValueError(
                f"{flag} {too_wide[0]}: fairseq's search keeps at most the target dictionary's "
                f"entries minus 1 hypotheses ({target_entries - 1}); give beams up to that"
            )


def check_fixed_length(systems: Dict[str, Dict], length: int) -> None:
    """ValueError unless every system can decode ``length`` tokens and EOS (its
    ``max_output_tokens``; CTranslate2's rows have none of their own: the baseline's)."""
    over = first_over_its_limit(systems, "max_output_tokens", length)
    if over is not None:
        name, limit = over
        raise ValueError(
            f"fixed length {length}: system {name} decodes at most {limit} tokens (its "
            f"max_target_positions {limit + 1} less one): give a smaller --fixed-length"
        )


def check_source_lengths(systems: Dict[str, Dict], longest: int, subset: str) -> None:
    """ValueError unless every system reads the subset's longest source (``longest`` tokens with
    EOS; its ``max_source_tokens``): the encoder's positions failed inside a worker, a traceback
    from torch's embedding, after every system had loaded."""
    over = first_over_its_limit(systems, "max_source_tokens", longest)
    if over is not None:
        name, limit = over
        raise ValueError(
            f"system {name} reads at most {limit} source tokens (its max_source_positions), "
            f"and the longest sentence of --subset {subset} has {longest} with its EOS: "
            "benchmark it on shorter sentences, or a model with more positions"
        )


def first_over_its_limit(
    systems: Dict[str, Dict], limit_key: str, needed: int
) -> Optional[Tuple[str, int]]:
    """(name, limit) of the first system whose ``limit_key`` (a count of tokens) is below
    ``needed``, or None; systems without one (CTranslate2's rows) are not checked."""
    for name, info in systems.items():
        limit = info.get(limit_key)
        if limit is not None and needed > limit:
            return name, limit
    return None


def config_record(
    config: BenchmarkConfig, batches: Batches, text: TextSide, fixed_length: int,
    cache_mode: str, profile_beam: int,
) -> Dict:
    """results.json's ``config``: the benchmark's configuration as it ran (the data as read, the
    lengths and beams chosen)."""
    return {
        "data": config.data,
        "subset": config.subset,
        "sentences": len(batches.ids),
        "batch_size": config.batch_size,
        "beams": list(config.beams),
        "repeats": config.repeats,
        "modes": list(config.modes),
        "fixed_length": fixed_length,
        "mean_reference_length": batches.mean_target_length(),
        "cache_beams": list(config.cache_beams),
        "cache_mode": cache_mode,
        "table_beam": profile_beam,
        "profile_beam": profile_beam,
        "max_len_a": config.decode.max_len_a,
        "max_len_b": config.decode.max_len_b,
        "lenpen": config.decode.lenpen,
        "fp16": config.fp16,
        "spm_model": text.spm_model,
        "references": text.references_source,
        "isolation": "each engine in a worker process of its own",
    }


def _measure_caches(pool, names, systems, config, mode: str, fixed_length: int) -> None:
    """Cache peaks at the beams of --cache-beams outside the speed grid: one untimed pass each."""
    for beam in config.cache_beams:
        setting = Setting.of(beam, mode, fixed_length)
        for name in names:
            if setting.key not in systems[name]["settings"]:
                logger.info("cache peak: beam %d, %s lengths: %s", beam, mode, name)
                measured = pool.call(name, "decode", setting, config.decode, measure_cache=True)
                systems[name]["settings"][setting.key] = {
                    "beam": beam, "mode": mode, "length": setting.length,
                    "cache_bytes": measured.cache_bytes,
                    "cache_tensor_bytes": measured.cache_tensor_bytes,
                }  # fmt: skip


def _profile(pool, names, systems, config, beam: int, fixed_length: int) -> None:
    """One profiled pass and one FLOP count per fairseq system and length mode."""
    for mode in config.modes:
        setting = Setting.of(beam, mode, fixed_length)
        logger.info("profile: beam %d, %s lengths", beam, mode)
        for name in names:
            summary = pool.call(name, "profile", setting, config.decode)
            timed = systems[name]["settings"][setting.key]["seconds"]
            if summary["eager_in_place_of"] is None:  # else not the hooks' cost alone
                summary["overhead"] = summary["generate_seconds"] / median(timed)
            summary["compute"] = pool.call(name, "count_flops", setting, config.decode)
            systems[name].setdefault("profile", {})[mode] = {"beam": beam, **summary}


# What a benchmark writes into --out-dir (the figures only where matplotlib is installed).
RESULTS_JSON, RESULTS_MD = RESULT_FILES = ("results.json", "results.md")
SPEED_VS_BEAM, SPEED_VS_BLEU = FIGURES = ("speed_vs_beam.png", "speed_vs_bleu.png")


def writable_out_dir(out_dir: Path) -> Path:
    """``out_dir``, made where missing; ValueError for one the results cannot be written to (it
    cannot be made, is read-only, or one of their names is a folder there), before anything is
    decoded."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"--out-dir {out_dir}: cannot make it ({err.strerror})") from None
    for name in RESULT_FILES + FIGURES:
        if (out_dir / name).is_dir():
            raise ValueError(f"--out-dir {out_dir}: {name} there is a folder, where the results go")
    try:
        with tempfile.NamedTemporaryFile(dir=out_dir):
            pass
    except OSError as err:
        raise ValueError(f"--out-dir {out_dir}: cannot write there ({err.strerror})") from None
    return out_dir


def check_natural_lengths(batches: Batches, config: BenchmarkConfig) -> None:
    """ValueError where --max-len-a/-b allow no token for a batch (fairseq asserts "min_len
    cannot be larger than max_len" inside the worker): int(a * x + b) >= 1 for the longest
    source x of every batch, as fairseq's SequenceGenerator computes it; and where a * x + b
    is beyond a float for the longest source of all (--max-len-a 1e308: an OverflowError
    traceback, here and in each engine's int(a*x+b))."""
    a, b = config.decode.max_len_a, config.decode.max_len_b
    longest = [int(sample["net_input"]["src_lengths"].max()) for sample in batches.samples]
    if not math.isfinite(a * max(longest) + b):
        raise ValueError(
            f"--max-len-a {a} --max-len-b {b}: a*x+b is beyond a float for a source of "
            f"{max(longest)} tokens; give a smaller --max-len-a (a model decodes at most its "
            "positions anyway)"
        )
    narrowest = min(longest)
    if int(a * narrowest + b) < 1:
        raise ValueError(
            f"--max-len-a {a} --max-len-b {b}: natural lengths allow no token for a batch whose "
            f"longest source has {narrowest} tokens (int(a*x+b) = {int(a * narrowest + b)}); "
            "give a larger --max-len-b"
        )


def write_results(results: Dict, out_dir: Path) -> None:
    """results.json (strict JSON), results.md and the figures in ``out_dir``: speed against
    beam, and against BLEU where natural lengths were decoded (fixed ones have no BLEU); the
    figures only where matplotlib is installed (the offline bundle for GPU machines leaves it
    out). The results are written whole or not at all, and so is each figure (a figure that
    cannot be written is a ValueError naming it); an earlier run's figures are removed, and so
    are its results where these cannot be written (a full disk left a new results.json beside
    the earlier run's results.md, with a bare OSError)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in FIGURES:
        (out_dir / name).unlink(missing_ok=True)
    text = json.dumps(finite(results), indent=2, allow_nan=False) + "\n"
    try:
        write_text(str(out_dir / RESULTS_JSON), text)
        write_text(str(out_dir / RESULTS_MD), markdown_report(results))
    except OSError as err:
        for name in RESULT_FILES:
            (out_dir / name).unlink(missing_ok=True)
        raise ValueError(
            f"cannot write {err.filename}: {err.strerror or err} (no results written in {out_dir})"
        ) from None
    if importlib.util.find_spec("matplotlib") is None:
        logger.warning("figures not drawn: matplotlib is not installed (results.json has the data)")
        return
    try:
        plot_speed_vs_beam(results, out_dir / SPEED_VS_BEAM)
        if NATURAL in results["config"]["modes"]:
            plot_speed_vs_bleu(results, out_dir / SPEED_VS_BLEU)
    except OSError as err:  # a full disk: the figure is not written, the results are
        raise ValueError(
            f"cannot write {err.filename}: {err.strerror or err} ({RESULTS_JSON} and "
            f"{RESULTS_MD} are written in {out_dir})"
        ) from None


def finite(value):
    """``value`` with NaN and infinities replaced by None (strict JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value
