"""The benchmark's outputs: results.json, and results.md with one function per table."""

import math
from typing import Callable, Dict, List, Optional, Sequence

from fairseq_san.benchmark.config import CTRANSLATE2, FIXED, NATURAL, STATIC
from fairseq_san.benchmark.meters import PARTS
from fairseq_san.static_decoding.precision import PRECISIONS


def markdown_report(results: Dict) -> str:
    """results.md: the header, the main table, speed, BLEU and profile tables, the notes."""
    config = results["config"]
    sections = [header(results), main_table(results)]
    sections += [speed_table(results, mode) for mode in config["modes"]]
    sections += [ctranslate2_table(results, mode) for mode in config["modes"]]
    if NATURAL in config["modes"]:
        sections.append(bleu_table(results))
    sections += [profile_table(results, mode) for mode in config["modes"]]
    if results.get("notes"):
        sections.append("\n".join(["## Notes", ""] + [f"- {note}" for note in results["notes"]]))
    return "\n\n".join(section for section in sections if section) + "\n"


def fixed_lengths_said(config: Dict, ctranslate2: bool) -> str:
    """The header's sentence on fixed lengths ("" without them); CTranslate2's count of tokens
    where it has a row."""
    if FIXED not in config["modes"]:
        return ""
    length = config["fixed_length"]
    engine = (
        f"CTranslate2: {length + 1} tokens, the same decoder steps: it emits no EOS at its length "
        "limit; "
        if ctranslate2
        else ""
    )
    return (
        f" Fixed lengths: every hypothesis {length} tokens + eos ({engine}mean reference length "
        f"{config['mean_reference_length']:.1f})."
    )


def timed_repeats(repeats: int) -> str:
    """How the speeds were timed: medians of ``repeats`` passes, or, for fewer than 3, said to
    be no medians (a speed of one or two passes is not the benchmark's figure)."""
    if repeats >= 3:
        return f"{repeats} timed repeats, medians"
    timed = "1 timed repeat" if repeats == 1 else f"{repeats} timed repeats"
    return f"{timed}: no medians, speeds not comparable"


def header(results: Dict) -> str:
    """Title, command, what was decoded and how, the machine, the scores' signatures."""
    config, machine = results["config"], results["machine"]
    ctranslate2 = any(s.get("kind") == CTRANSLATE2 for s in results["systems"].values())
    fixed = fixed_lengths_said(config, ctranslate2)
    gpu = f" ({machine['gpu']})" if machine.get("gpu") else ""
    return "\n\n".join([
        "# SAN decoding benchmark",
        f"`{results['command']}`",
        f"{config['subset']} of `{config['data']}`: {config['sentences']} sentences, batches of "
        f"{config['batch_size']}, {timed_repeats(config['repeats'])} (the systems interleaved; "
        f"{config.get('isolation', 'one process')}), baseline **{results['baseline']}**." + fixed,
        f"Processor: {processor_line(machine)}; threads per engine: {machine['torch_threads']}; "
        f"device {machine['device']}{gpu}; torch {machine['torch']}, fairseq "
        f"{machine['fairseq']}{ctranslate2_version(results)}; {machine['date']}; load average "
        f"at start {machine.get('load_average')}" + huge_pages_clause(machine) + ".",
        f"BLEU: `{results.get('bleu_signature') or '-'}`; "
        f"chrF: `{results.get('chrf_signature') or '-'}`; references: {config['references']}.",
    ])  # fmt: skip


def ctranslate2_version(results: Dict) -> str:
    """``, CTranslate2 4.8.5`` where CTranslate2 rows were decoded (its speed is its version's),
    else ""."""
    version = results.get("ctranslate2", {}).get("version")
    return f", CTranslate2 {version}" if version else ""


def huge_pages_clause(machine: Dict) -> str:
    """``; large CPU buffers: THP_MEM_ALLOC_ENABLE=1, ...`` (machine.huge_pages), for reports that
    recorded it (since 2026-11-29)."""
    return f"; large CPU buffers: {machine['huge_pages']}" if machine.get("huge_pages") else ""


def processor_line(machine: Dict) -> str:
    """``AMD EPYC (family 25, model 17, stepping 1, 2596 MHz; avx2, avx512f, ...; torch kernels
    AVX512)``."""
    identity = f"{machine['cpu_identity']}; " if machine.get("cpu_identity") else ""
    flags = ", ".join(machine.get("cpu_flags") or []) or "no AVX flags"
    capability = machine.get("torch_cpu_capability")
    kernels = f"; torch kernels {capability}" if capability else ""
    return f"{machine['cpu']} ({identity}{flags}{kernels})"


def main_table(results: Dict) -> str:
    """Quality, size, speed at the table beam and cache size of every system."""
    config, systems = results["config"], results["systems"]
    beam, modes, cache_mode = config["table_beam"], config["modes"], config["cache_mode"]
    header_cells = ["system", "decoder", "precision", "BLEU", "chrF", "= base", "= fairseq",
                    "params"]  # fmt: skip
    for mode in modes:
        header_cells += [f"tok/s b{beam} {mode}", "x base"]
    header_cells += [f"cache b{b} ({cache_mode})" for b in config["cache_beams"]]
    lines = [
        f"## Beam {beam}",
        "",
        "`= base`: the sentences whose best hypothesis (natural lengths) reads as the "
        "baseline's; `= fairseq` (static decoder rows): as fairseq's decoder's, for the same "
        "checkpoint and model overrides.",
        "",
        _row(header_cells),
        _row(["---"] * len(header_cells)),
    ]
    for name, system in systems.items():
        natural = setting_run(system, beam, NATURAL)
        cells = [*_identity(name, system), _fmt(natural.get("bleu"), ".2f"),
                 _fmt(natural.get("chrf"), ".2f"),
                 _percent(natural.get("agreement_with_baseline")),
                 _percent(natural.get("agreement_with_fairseq"))]  # fmt: skip
        cells.append(str(system["params"]) if system.get("params") is not None else "-")
        for mode in modes:
            run = setting_run(system, beam, mode)
            cells += [_fmt(run.get("tokens_per_second")), _fmt(run.get("ratio_to_baseline"), ".2f")]
        for b in config["cache_beams"]:
            cells.append(_bytes(setting_run(system, b, cache_mode).get("cache_bytes")))
        lines.append(_row(cells))
    return "\n".join(lines)


def beam_table(results: Dict, title: str, cell: Callable[[Dict], str], mode: str) -> str:
    """A table of one length mode: a row per system, a column per beam size, each cell
    ``cell(the system's record of that setting)``."""
    beams = results["config"]["beams"]
    lines = [
        f"## {title}",
        "",
        _row(["system", "decoder", "precision"] + [f"beam {b}" for b in beams]),
        _row(["---"] * (3 + len(beams))),
    ]
    for name, system in results["systems"].items():
        cells = _identity(name, system) + [cell(setting_run(system, b, mode)) for b in beams]
        lines.append(_row(cells))
    return "\n".join(lines)


def speed_table(results: Dict, mode: str) -> str:
    """Tokens/s (and the ratio to the baseline) at every beam size, in one length mode."""

    def speed(run: Dict) -> str:
        return f"{_fmt(run.get('tokens_per_second'))} ({_fmt(run.get('ratio_to_baseline'), '.2f')})"

    title = f"Speed vs beam ({mode} lengths): tokens/s (x baseline)"
    return beam_table(results, title, speed, mode)


def ctranslate2_table(results: Dict, mode: str) -> str:
    """Each system's speed-up over each CTranslate2 row at every beam size (the median of the
    per-repeat ratios, as over the baseline); empty without CTranslate2 rows."""
    references = [name for name, s in results["systems"].items() if s.get("kind") == CTRANSLATE2]
    if not references:
        return ""

    def over(run: Dict) -> str:
        ratios = run.get("ratio_to", {})
        return " / ".join(_fmt(ratios.get(reference), ".2f") for reference in references)

    title = (
        f"Speed over CTranslate2 ({mode} lengths): x {' / x '.join(references)} (median of the "
        "per-repeat ratios)"
    )
    return beam_table(results, title, over, mode)


def bleu_table(results: Dict) -> str:
    """BLEU at every beam size (natural lengths), each row with its decoder and precision."""

    def bleu(run: Dict) -> str:
        return _fmt(run.get("bleu"), ".2f")

    return beam_table(results, "BLEU vs beam", bleu, NATURAL)


def profile_table(results: Dict, mode: str) -> str:
    """Where the time of a decoder step goes, and the FLOPs per token, per fairseq system."""
    config, systems = results["config"], results["systems"]
    profiled = {
        name: system["profile"][mode]
        for name, system in systems.items()
        if mode in system.get("profile", {})
    }
    if not profiled:
        return ""
    lines = [
        f"## Decoder step profile (beam {config['profile_beam']}, {mode} lengths)",
        "",
        "Shares of the decoder step; the last columns split the whole decode.",
        "",
        "| system | decoder | precision | ms/step "
        "| self-attn | enc-dec attn | FFN | output proj | rest "
        "| encoder | cache reorder | search+other | hook overhead "
        "| MFLOP/token | compute x base | GFLOP/s | of peak |",
        "|" + " --- |" * 17,
    ]
    peaks = results["machine"].get("matmul_peak_gflops") or {}
    base = profiled.get(results["baseline"])
    for name, prof in profiled.items():
        system = systems[name]
        peak = peaks.get(peak_precision(system.get("precision", "")))
        lines.append(_profile_row(name, system, prof, base, mode, peak))
    static = any(systems[name].get("decoder") == STATIC for name in profiled)
    return "\n".join(lines + _profile_notes(base, peaks, static))


def _profile_row(
    name: str, system: Dict, prof: Dict, base: Optional[Dict], mode: str, peak: Optional[float]
) -> str:
    """One system's row of the profile table: shares of the step, of the decode, and FLOPs."""
    step, whole = prof["decoder_step_share"], prof["generate_share"]
    compute = _compute_cells(prof, base, setting_run(system, prof["beam"], mode), peak)
    identity = _identity(name, system)
    if prof.get("eager_in_place_of"):  # a graph-replaying or compiled step calls no hook
        identity[1] += f" (profiled eager, fixed layout; timed {prof['eager_in_place_of']})"
    cells = [
        *identity,
        _fmt(prof["ms_per_step"], ".3f"),
        *(f"{_fmt(100 * step[part], '.1f')}%" for part in (*PARTS, "rest")),
        *(
            f"{_fmt(100 * whole[part], '.1f')}%"
            for part in ("encoder", "cache_reorder", "search_and_other")
        ),
        _times(prof.get("overhead")),  # none for a compiled or graph-replaying step
        *compute,
    ]
    return "| " + " | ".join(cells) + " |"


def _profile_notes(base: Optional[Dict], peaks: Dict, static: bool) -> List[str]:
    """The paragraphs under the profile table: the baseline's attention share, what ``of peak``
    divides by, and how static rows are timed."""
    lines = []
    if base:
        lines += [
            "",
            f"Baseline: attention is {_fmt(100 * base['attention_share_of_decode'], '.1f')}% "
            f"of the decode; attention in decoder layers 2..N, the most any sharing can "
            f"remove, is {_fmt(100 * base['removable_share_of_decode'], '.1f')}% "
            f"(speed-up at most {_fmt(base['max_speedup_from_sharing'], '.2f')}x).",
            "MFLOP/token counts the matrix multiplies of decoding one batch (torch's "
            "FlopCounterMode); `compute x base` is the speed-up if every system ran at the "
            "baseline's FLOP rate, the bound for decoding-engine work that keeps the model.",
        ]
    if peaks:
        lines += [
            "",
            "`of peak`: the GFLOP/s achieved over the arithmetic bound of the row's precision, "
            "one large matrix product at the engines' thread count (GFLOP/s: "
            + ", ".join(f"{name} {_fmt(value, '.0f')}" for name, value in peaks.items())
            + "). A step's products are small (batch x beam rows), so it reaches less of it.",
        ]
    if static:
        lines += [
            "",
            "Static rows: the same hooks time the static decoder's step modules; it projects "
            "the encoder-decoder keys/values once per batch before the first step (in "
            "search+other; fairseq does it in the first step's enc-dec attn). Their MFLOP/token "
            "is counted at fp32 (the same multiplies at every precision; torch does not count "
            "int8's). A row that replays CUDA graphs or compiles its step is profiled eager in "
            "the same cache layout (a replayed graph calls no hook): its shares are that eager "
            "step's, and it has no hook overhead.",
        ]
    return lines


def _identity(name: str, system: Dict) -> List[str]:
    """A row's first cells: the system, its decoder (fairseq, static, ctranslate2), precision."""
    return [name, system.get("decoder", "-"), system.get("precision", "-")]


def setting_run(system: Dict, beam: int, mode: str) -> Dict:
    """A system's record of one setting (empty when it was not run)."""
    return system["settings"].get(f"beam{beam}_{mode}", {})


def peak_precision(precision: str) -> str:
    """The ``matmul_peak`` key that bounds a row of ``precision``: the static decoder's from its
    table of precisions (bf16-full: bf16), another engine's its own name."""
    row = PRECISIONS.get(precision)
    return row.peak if row is not None else precision


def _compute_cells(
    prof: Dict, base: Optional[Dict], timed: Dict, peak: Optional[float] = None
) -> List[str]:
    """MFLOP per output token, the baseline's over this system's, the FLOP rate achieved and
    its share of the precision's ``peak`` GFLOP/s."""
    compute = prof.get("compute") or {}
    mflop = compute.get("mflop_per_token")
    base_mflop = ((base or {}).get("compute") or {}).get("mflop_per_token")
    ratio = base_mflop / mflop if mflop and base_mflop else None
    tokens_per_second = timed.get("tokens_per_second")
    rate = mflop * tokens_per_second / 1000 if mflop and tokens_per_second else None
    share = f"{_fmt(100 * rate / peak, '.0f')}%" if rate and peak else "-"
    return [_fmt(mflop, ".1f"), _fmt(ratio, ".2f"), _fmt(rate, ".1f"), share]


def _fmt(value, spec: str = ".1f") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, spec)


def _percent(share: Optional[float]) -> str:
    return "-" if share is None else f"{100 * share:.1f}%"


def _times(factor: Optional[float]) -> str:
    return "-" if factor is None else f"{factor:.2f}x"


def _bytes(value: Optional[int]) -> str:
    if value is None:
        return "-"
    for unit, size in (("MiB", 2**20), ("KiB", 2**10)):
        if value >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value} B"


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"
