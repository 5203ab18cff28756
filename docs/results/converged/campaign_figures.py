"""The paper's Figure 2 at convergence, drawn from the collected analyses (after collect).

    python docs/results/converged/campaign_figures.py RESULTS

* ``RESULTS/figure2.png``: the JS divergence between the decoder's layers of every pair's converged
  baseline (``PAIR/loop/iter0``), self-attention and encoder-decoder attention, a row per pair;
* ``RESULTS/PAIR/loop/figure2-loop.png``: the same for every analysed iteration of that pair's
  learn-to-share loop, where it has more than one, showing how each retrained model's attention
  moved.
* ``RESULTS/theta-policies.png``: the policy each seed of a pair's "baseline" system (the run
  dirs named as ``campaign_summary.py`` reads them: ``loop/iter0`` is seed 1, ``baseline-s<k>``
  seed k) learns as theta varies around the loop's (Eq. 6 on its analysis), and that of the mean
  of a pair's seeds' analyses: how near each learned policy lies to another.

Each Figure 2 panel outlines in red the blocks that the loop learned from it
(``iter<k+1>/policy.json``, Eq. 6 with the campaign's thetas), and all panels of a figure share
one grey scale.
"""

import argparse
import json
import os
import sys
from typing import List, Optional, Sequence, Tuple

from campaign_summary import system_names, trained_iterations
from fairseq_san.errors import PREFIX, UsageError
from fairseq_san.files import read_json
from fairseq_san.loop.stopping import policy_path
from fairseq_san.plots import DECODER_PANELS, HeatmapPanel, PolicyBar, js_heatmap_grid, policy_map
from fairseq_san.policy import (
    PolicyError,
    check_js,
    format_blocks,
    load_policy,
    mean_js,
    policy_segments,
)

LOOP = "loop"  # seed 1's learn-to-share loop of a pair, whose iteration 0 is the baseline
PAIRS_FIGURE = "figure2.png"
LOOP_FIGURE = "figure2-loop.png"
THETA_FIGURE = "theta-policies.png"
# The thetas a loop learns with (its run.json option), and the span of theta the map shows: for
# self-attention the paper's tuned range (section 4.1) and where {6} ends; for encoder-decoder
# attention where the policies learned at 0.5 change.
THETA_OPTIONS = {"decoder_self": "--theta-self", "decoder_encdec": "--theta-encdec"}
THETA_SPANS = {"decoder_self": (0.3, 0.52), "decoder_encdec": (0.44, 0.56)}
FIRST_PAIR = "en-de"  # the campaign's main pair leads the figure; the others follow by name

Row = Tuple[str, List[HeatmapPanel]]


def analysis_path(run_dir: str, iteration: int) -> str:
    """``RUN_DIR/iter<k>/analysis/js.json``: the JS matrices of iteration k's best checkpoint."""
    return os.path.join(run_dir, f"iter{iteration}", "analysis", "js.json")


def analysed_iterations(run_dir: str) -> List[int]:
    """The iterations 0, 1, ... of a loop that have an analysis, up to the first without one."""
    iterations = []
    while os.path.exists(analysis_path(run_dir, len(iterations))):
        iterations.append(len(iterations))
    return iterations


def _policy(run_dir: str, iteration: int) -> Optional[dict]:
    """The policy iteration ``iteration`` is trained with; None where there is none yet."""
    path = policy_path(run_dir, iteration)
    return load_policy(path) if os.path.exists(path) else None


def iteration_row(run_dir: str, iteration: int, label: str) -> Row:
    """The decoder panels of one analysed iteration, the policy learned from it outlined."""
    path = analysis_path(run_dir, iteration)
    analysis = read_json(path, "analysis")
    learned = _policy(run_dir, iteration + 1)
    panels = []
    for kind, name in DECODER_PANELS:
        try:
            matrix = check_js(analysis.get(kind))
        except PolicyError as err:
            raise UsageError(f'analysis "{path}", {kind}: {err}') from None
        blocks = None if learned is None else learned.get(kind)
        caption = name if learned is None else f"{name}: learned {format_blocks(blocks)}"
        panels.append((caption, matrix, blocks))
    return label, panels


def pair_order(results: str) -> List[str]:
    """The pairs whose loop analysed its baseline: En->De first, then the others by name."""
    pairs = [
        name for name in sorted(os.listdir(results))
        if os.path.exists(analysis_path(os.path.join(results, name, LOOP), 0))
    ]  # fmt: skip
    return sorted(pairs, key=lambda pair: pair != FIRST_PAIR)


def pairs_rows(results: str, pairs: Sequence[str]) -> List[Row]:
    """A row per pair: its converged baseline (``PAIR/loop/iter0``)."""
    return [
        iteration_row(os.path.join(results, pair, LOOP), 0, f"{pair} baseline") for pair in pairs
    ]


def loop_rows(run_dir: str) -> List[Row]:
    """A row per analysed iteration of a loop, labelled with the policy it was trained with."""
    rows = []
    for iteration in analysed_iterations(run_dir):
        trained = _policy(run_dir, iteration) if iteration else None
        if trained is None:
            label = f"iteration {iteration}: baseline"
        else:
            blocks = "/".join(format_blocks(trained.get(kind)) for kind, _ in DECODER_PANELS)
            label = f"iteration {iteration}: {blocks}"
        rows.append(iteration_row(run_dir, iteration, label))
    return rows


def baseline_seeds(results: str, pair: str) -> List[Tuple[int, dict]]:
    """(seed, analysis) of every seed of a pair's "baseline" system that has one, by seed."""
    found = {}
    for name in os.listdir(os.path.join(results, pair)):
        run_dir = os.path.join(results, pair, name)
        if not os.path.isdir(run_dir):
            continue
        for system, seed, iteration in system_names(name, trained_iterations(run_dir)):
            if system == "baseline" and os.path.exists(analysis_path(run_dir, iteration)):
                found[seed] = read_json(analysis_path(run_dir, iteration), "analysis")
    return sorted(found.items())


def loop_thetas(results: str, pairs: Sequence[str]) -> dict:
    """{kind: theta} the pairs' loops learned with (their run.json), one value per kind."""
    found = {}
    for pair in pairs:
        with open(os.path.join(results, pair, LOOP, "run.json"), encoding="utf-8") as handle:
            options = json.load(handle)["options"]
        for kind, option in THETA_OPTIONS.items():
            found.setdefault(kind, set()).add(float(options[option]))
    several = {kind: sorted(thetas) for kind, thetas in found.items() if len(thetas) > 1}
    if several:
        raise UsageError(f"the loops learned with different thetas: {several}")
    return {kind: thetas.pop() for kind, thetas in found.items()}


def seed_analyses(results: str, pairs: Sequence[str]) -> List[Tuple[str, dict]]:
    """(bar name, analysis) of every baseline seed of every pair, and of the mean of a pair's
    seeds where it has several."""
    analyses = []
    for pair in pairs:
        seeds = [(f"{pair} seed {k}", analysis) for k, analysis in baseline_seeds(results, pair)]
        analyses += seeds
        if len(seeds) > 1:
            names = [name for name, _ in seeds]
            mean = mean_js([analysis for _, analysis in seeds], names)
            analyses.append((f"{pair} mean of {len(seeds)} seeds", mean))
    return analyses


def theta_bars(analyses: Sequence[Tuple[str, dict]], kind: str) -> List[PolicyBar]:
    """A bar per analysis: the policies of ``kind`` learned over ``THETA_SPANS[kind]``."""
    low, high = THETA_SPANS[kind]
    bars = []
    for name, analysis in analyses:
        segments = policy_segments(check_js(analysis.get(kind)), low, high)
        bars.append((name, [(s.low, s.high, s.blocks) for s in segments]))
    return bars


def write_theta_map(results: str, pairs: Sequence[str], path: str) -> None:
    """The policies each baseline learns as theta varies, a panel per decoder kind."""
    used = loop_thetas(results, pairs)
    analyses = seed_analyses(results, pairs)
    panels = [(name, used[kind], theta_bars(analyses, kind)) for kind, name in DECODER_PANELS]
    policy_map(panels, path, "The decoder's sharing policy each converged baseline learns against "
               "theta (Eq. 6 on its analysis)")  # fmt: skip


def write_figures(results: str) -> List[str]:
    """Figure 2 of every pair's baseline, and of every loop with more than one analysed iteration;
    the paths written."""
    pairs = pair_order(results)
    if not pairs:
        expected = analysis_path(os.path.join("PAIR", LOOP), 0)
        raise UsageError(f"no pair in {results} has a baseline analysis ({expected})")
    written = [os.path.join(results, PAIRS_FIGURE)]
    title = "JS divergence between decoder layers of the converged baselines"
    js_heatmap_grid(pairs_rows(results, pairs), written[0], title=title)
    for pair in pairs:
        run_dir = os.path.join(results, pair, LOOP)
        rows = loop_rows(run_dir)
        if len(rows) > 1:
            written.append(os.path.join(run_dir, LOOP_FIGURE))
            js_heatmap_grid(rows, written[-1], title=f"{pair}: the learn-to-share loop, seed 1")
    written.append(os.path.join(results, THETA_FIGURE))
    write_theta_map(results, pairs, written[-1])
    return written


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="campaign_figures.py",
        description="draw the paper's Figure 2 from the converged campaign's analyses",
    )
    parser.add_argument("results", help="the collected results (docs/results/converged)")
    args = parser.parse_args(argv)
    try:
        for path in write_figures(args.results):
            print(path)
    except (UsageError, OSError) as err:
        print(f"{PREFIX}{err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
