"""The benchmark's figures (paper Figure 4), drawn by ``fairseq_san.plots.speed_curves``."""

from pathlib import Path
from typing import Dict

from fairseq_san import plots
from fairseq_san.benchmark.config import NATURAL
from fairseq_san.benchmark.report import setting_run


def measured_on(results: Dict) -> str:
    """The figures' title: what was decoded, in which batches, on which device (``test of
    data-bin/multi30k.en-de: 64 sentences, batches of 16; NVIDIA H200``), as results.md heads."""
    config, machine = results["config"], results["machine"]
    device = machine.get("gpu") or f"{machine['cpu']}, {machine['torch_threads']} threads"
    return (f"{config['subset']} of {config['data']}: {config['sentences']} sentences, batches "
            f"of {config['batch_size']}; {device}")  # fmt: skip


def plot_speed_vs_beam(results: Dict, path: Path) -> None:
    """Paper Figure 4 (left): tokens/s against beam size, one panel per length mode."""
    beams = results["config"]["beams"]
    panels = {}
    for mode in results["config"]["modes"]:
        series = {}
        for name, system in results["systems"].items():
            points = [(b, setting_run(system, b, mode).get("tokens_per_second"), "") for b in beams]
            series[name] = [p for p in points if p[1] is not None]
        panels[f"speed vs beam size ({mode} lengths)"] = series
    plots.speed_curves(panels, "beam size", str(path), measured_on(results), xticks=beams)


def plot_speed_vs_bleu(results: Dict, path: Path) -> None:
    """Paper Figure 4 (right): tokens/s against BLEU, one point per beam size (natural lengths)."""
    series = {}
    for name, system in results["systems"].items():
        runs = [(b, setting_run(system, b, NATURAL)) for b in results["config"]["beams"]]
        series[name] = [
            (run["bleu"], run["tokens_per_second"], f"b{b}")
            for b, run in runs
            if run.get("bleu") is not None and run.get("tokens_per_second") is not None
        ]
    panels = {"speed vs BLEU (natural lengths)": series}
    plots.speed_curves(panels, "BLEU", str(path), measured_on(results))
