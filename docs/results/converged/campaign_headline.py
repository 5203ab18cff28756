"""The README's headline table from converged rows: ``docs/results/converged/headline.md``.

Rendered from summary.json (``campaign_summary.py``) once the ``en-de`` slice is collected (En->De
has both a baseline and a learned-policy SAN): per pair, baseline and SAN with test BLEU as the
mean and sample standard deviation over seeds (``statistics.stdev``), SAN minus baseline with the
95% interval of sacreBLEU's paired bootstrap for every seed (against the baseline of the same seed),
SAN minus baseline over seeds (the exact permutation test's 95% interval: the training's spread),
one verdict, the learned policy, params, and the GPU decoding speed of SAN (``san-fast``)
relative to the baseline from the ``bench`` slice (beam 4, natural lengths, batch 16), where it
was collected.
"""

import json
import os
import statistics
from typing import Dict, List, Optional, Sequence

from fairseq_san.policy import format_policy

HEADLINE = "headline.md"
# The bench slice's table that the headline's speed comes from, and its systems.
BENCH_RESULTS = os.path.join("en-de", "bench", "batch16", "results.json")
BENCH_SETTING = "beam4_natural"
BENCH_SAN = "san-fast"


def bleu_cell(rows: Sequence[dict], test_set: str) -> str:
    """``37.12 ± 0.41 (3 seeds)``, or one seed's BLEU, or ``-``."""
    bleus = [row["test"][test_set]["bleu"] for row in rows if test_set in row["test"]]
    if not bleus:
        return "-"
    if len(bleus) == 1:
        return f"{bleus[0]:.2f}"
    return f"{statistics.mean(bleus):.2f} ± {statistics.stdev(bleus):.2f} ({len(bleus)} seeds)"


def verdict(tests: Sequence[dict]) -> str:
    """The verdict of every seed and test set when they all agree, else "inconclusive"; "no test"
    without any."""
    verdicts = {test["verdict"] for test in tests}
    if not verdicts:
        return "no test"
    return verdicts.pop() if len(verdicts) == 1 else "inconclusive"


def difference_cell(tests: Sequence[dict]) -> str:
    """Mean SAN-minus-baseline BLEU over seeds, then each seed's 95% paired-bootstrap interval."""
    if not tests:
        return "-"
    mean = statistics.mean(test["difference"] for test in tests)
    intervals = "; ".join(
        f"s{test['seed']} [{test['interval_95'][0]:+.2f}, {test['interval_95'][1]:+.2f}]"
        for test in sorted(tests, key=lambda test: test["seed"])
    )
    return f"{mean:+.2f} ({intervals})"


def seed_cell(tests: Sequence[dict]) -> str:
    """The difference of the seeds' mean BLEU, the permutation test's 95% interval and p."""
    if not tests:
        return "-"
    (test,) = tests
    interval = test["interval_95"]
    shown = f"[{interval[0]:+.2f}, {interval[1]:+.2f}]" if interval else "(too few seeds for 95%)"
    return f"{test['difference']:+.2f} {shown}, p = {test['p_value']:.2f}"


def bench_speed(results_dir: str) -> Optional[float]:
    """SAN's GPU decoding speed relative to the baseline (``BENCH_RESULTS``), where collected."""
    path = os.path.join(results_dir, BENCH_RESULTS)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as handle:
        systems = json.load(handle)["systems"]
    setting = systems.get(BENCH_SAN, {}).get("settings", {}).get(BENCH_SETTING, {})
    return setting.get("ratio_to_baseline")


def headline_rows(
    summary: Dict, pair: str, test_sets: Sequence[str], speed: Optional[float]
) -> List[str]:
    """The baseline and SAN rows of one pair (none when the pair lacks either)."""
    rows = summary["pairs"][pair]
    by_system = {
        name: [row for row in rows if row["system"] == name] for name in ("baseline", "san")
    }
    if not all(by_system.values()):
        return []
    tests = [
        test for test in summary["paired_bootstrap"].get(pair, [])
        if test["system"] == "san" and test["baseline_seed"] == test["seed"]
    ]  # fmt: skip
    over_seeds = [test for test in summary["seed_tests"].get(pair, []) if test["system"] == "san"]
    lines = []
    for name, runs in by_system.items():
        first = min(runs, key=lambda row: row["seed"])
        policy = format_policy(first["policy"]) if name == "san" else "none"
        cells = [pair, name, policy, f"{first['params']:,}" if first["params"] else "-"]
        cells += [bleu_cell(runs, test_set) for test_set in test_sets]
        for test_set in test_sets:
            of_set = [test for test in tests if test["test_set"] == test_set]
            cells.append(difference_cell(of_set) if name == "san" else "")
        for test_set in test_sets:
            of_set = [test for test in over_seeds if test["test_set"] == test_set]
            cells.append(seed_cell(of_set) if name == "san" else "")
        cells.append(verdict(tests) if name == "san" else "")
        cells.append(f"{speed:.2f}x" if name == "san" and speed and pair == "en-de" else "")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def headline_table(summary: Dict, results_dir: str, test_sets: Sequence[str]) -> Optional[str]:
    """The markdown table, or None until En->De has a baseline and a SAN row."""
    if "en-de" not in summary["pairs"] or not headline_rows(summary, "en-de", test_sets, None):
        return None
    speed = bench_speed(results_dir)
    years = [test_set.split("_")[1] for test_set in test_sets]
    header = ["pair", "system", "policy", "params"] + [f"test BLEU {year}" for year in years]
    header += [
        f"SAN − baseline {year} (mean of same seeds; 95% paired bootstrap)" for year in years
    ]
    header += [f"SAN − baseline over seeds {year} (permutation test)" for year in years]
    header += ["verdict", "GPU speed vs baseline"]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for pair in summary["pairs"]:
        lines += headline_rows(summary, pair, list(test_sets), speed)
    return "\n".join(lines) + "\n"


def write_headline(summary: Dict, results_dir: str, test_sets: Sequence[str]) -> Optional[str]:
    """Write ``RESULTS/headline.md`` once the en-de slice is collected; its path, else None."""
    table = headline_table(summary, results_dir, test_sets)
    if table is None:
        return None
    path = os.path.join(results_dir, HEADLINE)
    with open(path, "w", encoding="utf-8") as out:
        out.write(
            "# Converged models: the README's headline table\n\n"
            "Test BLEU: sacreBLEU, detokenized, cased; mean ± sample standard deviation over "
            "seeds. SAN − baseline: the mean of the same-seed differences, each seed's 95% "
            "paired-bootstrap interval in brackets (the pairs' budgets: see results.md). Over "
            "seeds: the difference of the mean BLEU of SAN's and the baseline's seeds, with the "
            "interval of the exact two-sided permutation test of their scores (inverted in steps "
            "of 0.01 BLEU, 95% nominal: with few splits its attained level is lower, 1/35 for 3 "
            "against 4 seeds; it assumes a shift of location) and its p. "
            "Verdict: the paired-bootstrap verdicts of every seed and test set where all agree, "
            "else inconclusive. "
            f"Speed: `{BENCH_SAN}` against the baseline, GPU, beam 4, natural lengths, batch 16 "
            "(bench slice).\n\n" + table
        )
    return path
