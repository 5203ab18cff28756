"""The record of the converged-model campaign (issue 11): ``docs/results/converged/summary.json``.

``docs/results/converged/run.sh`` trains one learn-to-share run dir per pair and system
(``RESULTS/<pair>/<run dir>/iter<k>/``, fairseq's JSON training log in ``train.log``, test BLEU
of the newest iteration in ``test-bleu/iter<k>/{test,test1}/score.json``). This reads them back:

* ``read_train_log``: what a reader needs to see that a system converged: parameters, updates,
  epochs, training wall time, why it stopped, the validation-loss curve (issue 11 item 2);
* ``campaign_systems``: one row per pair and system in the schema of issue 11 item 7 (first
  "baseline", the learned-policy SAN "san", other systems by their run dir's name);
* ``seed_statistics`` and ``paired_bootstrap``: mean and standard deviation over seeds, and
  sacreBLEU's paired bootstrap for SAN minus baseline with a verdict (item 4);
* ``budget_statement``: whether a pair's baseline and SAN compare at equal updates or equal
  wall time (item 6).

Run dir names: ``loop`` is the pair's learn-to-share loop (iteration 0 "baseline", its newest
iteration "san", iterations between them "san-iter<k>"); ``warm`` is the loop with warm start
(its newest iteration is "san-warm", counted with the iteration it started from); ``NAME-s<N>``
is system NAME trained with seed N; any other name is a system of that name, seed 1.
"""

import json
import math
import os
import re
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq_san.errors import UsageError
from fairseq_san.policy import format_policy

PAIR_DIR = re.compile(r"^[a-z]{2}-[a-z]{2}$")
ITERATION = re.compile(r"^iter(\d+)$")
SEED_SUFFIX = re.compile(r"^(.+)-s(\d+)$")
# fairseq's JSON progress bar: "<time> | INFO | <tag> | {...}"
RECORD = re.compile(r"\| INFO \| (train_inner|train|valid) \| (\{.*\})\s*$")
PARAMS = re.compile(r"num\. (?:shared )?model params: ([\d,]+)")
DONE = re.compile(r"done training in ([\d.]+) seconds")
STOPS = (
    ("early stop since valid performance", "patience"),
    ("Stopping training due to cumulative_training_time", "wall cap"),
    ("Stopping training due to num_updates", "max update"),
)
CUMULATIVE = re.compile(r"cumulative_training_time: ([\d.]+) >")
# test_bleu.sh's split folders and the names of the Multi30k test sets.
TEST_SPLITS = {"test": "test_2016_flickr", "test1": "test_2017_flickr"}
CURVE_POINTS = 5


def read_train_log(path: str) -> Dict[str, object]:
    """Facts of one fairseq-train log written with ``--log-format json`` (resumed runs append).

    ``wall_s`` is fairseq's own clock: the largest of its wall meter, the cumulative training
    time at a wall-cap stop, and "done training in"; ``stop`` says what ended the training
    ("patience", "wall cap", "max update", or "unknown" for a run that was killed).
    """
    params = updates = epochs = None
    walls: List[float] = []
    curve: List[Tuple[int, float]] = []
    ups: List[float] = []
    wps: List[float] = []
    stop = "unknown"
    with open(path, encoding="utf-8", errors="replace") as lines:
        for number, line in enumerate(lines, 1):
            found = PARAMS.search(line)
            if found and params is None:
                params = int(found.group(1).replace(",", ""))
            for marker, reason in STOPS:
                if marker in line:
                    stop = reason
            for pattern in (DONE, CUMULATIVE):
                found = pattern.search(line)
                if found:
                    seconds = float(found.group(1))
                    walls.append(seconds * 3600 if pattern is CUMULATIVE else seconds)
            found = RECORD.search(line)
            if not found:
                continue
            tag = found.group(1)
            try:
                record = json.loads(found.group(2))
                epochs = record.get("epoch", epochs)
                if tag == "valid":
                    point = (int(float(record["valid_num_updates"])), float(record["valid_loss"]))
                    curve.append(point)
                    updates = max(updates or 0, point[0])
                    continue
                prefix = "" if tag == "train_inner" else "train_"
                updates = max(updates or 0, int(float(record[f"{prefix}num_updates"])))
                walls.append(float(record[f"{prefix}wall"]))
                if tag == "train_inner":
                    ups.append(float(record["ups"]))
                    wps.append(float(record["wps"]))
            except (ValueError, KeyError, TypeError, AttributeError) as err:
                raise UsageError(
                    f"{path} line {number}: not a fairseq-train {tag} record "
                    f"(--log-format json): {type(err).__name__}: {err}"
                ) from None
    best = min(curve, key=lambda point: point[1]) if curve else (None, None)
    return {
        "params": params,
        "updates": updates,
        "epochs": epochs,
        "wall_s": max(walls) if walls else None,
        "stop": stop,
        "best_valid_loss": best[1],
        "best_updates": best[0],
        "valid_curve": curve,
        "updates_per_s": sum(ups) / len(ups) if ups else None,
        "tokens_per_s": sum(wps) / len(wps) if wps else None,
    }


def _read_json(path: str) -> Optional[dict]:
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def trained_iterations(run_dir: str) -> List[int]:
    """Iterations of a run dir that have a training log, in order."""
    found = []
    for name in os.listdir(run_dir):
        match = ITERATION.match(name)
        if match and os.path.exists(os.path.join(run_dir, name, "train.log")):
            found.append(int(match.group(1)))
    return sorted(found)


def test_scores(run_dir: str, iteration: int) -> Dict[str, Dict[str, object]]:
    """{test set: {bleu, chrf, signature}} of test_bleu.sh's scores for one iteration."""
    scores = {}
    for split, name in TEST_SPLITS.items():
        path = os.path.join(run_dir, "test-bleu", f"iter{iteration}", split, "score.json")
        score = _read_json(path)
        if score is not None:
            scores[name] = {
                "bleu": score["bleu"],
                "chrf": score["chrf"],
                "signature": score["bleu_signature"],
            }
    return scores


def system_names(run_name: str, iterations: Sequence[int]) -> List[Tuple[str, int, int]]:
    """(system, seed, iteration) of the systems a run dir holds, by the rules of the module doc."""
    if run_name in ("loop", "warm") and not iterations:
        return []
    if run_name == "loop":
        named = [("baseline", 1, iterations[0])]
        named += [(f"san-iter{k}", 1, k) for k in iterations[1:-1]]
        return named + ([("san", 1, iterations[-1])] if len(iterations) > 1 else [])
    if run_name == "warm":
        return [("san-warm", 1, iterations[-1])] if len(iterations) > 1 else []
    match = SEED_SUFFIX.match(run_name)
    name, seed = (match.group(1), int(match.group(2))) if match else (run_name, 1)
    return [(name, seed, iterations[-1])] if iterations else []


def system_row(run_dir: str, system: str, seed: int, iteration: int) -> Tuple[dict, dict]:
    """(summary.json entry, training report) of one system."""
    iteration_dir = os.path.join(run_dir, f"iter{iteration}")
    log = read_train_log(os.path.join(iteration_dir, "train.log"))
    updates, wall = log["updates"], log["wall_s"]
    training = {
        "run_dir": run_dir,
        "iteration": iteration,
        "epochs": log["epochs"],
        "stop": log["stop"],
        "best_updates": log["best_updates"],
        "updates_per_s": log["updates_per_s"],
        "tokens_per_s": log["tokens_per_s"],
        "valid_curve_last": log["valid_curve"][-CURVE_POINTS:],
    }
    if system == "san-warm":  # warm start: count the iteration it started from too
        start = read_train_log(os.path.join(run_dir, f"iter{iteration - 1}", "train.log"))
        training["warm_start_from"] = {"updates": start["updates"], "wall_s": start["wall_s"]}
        updates = (updates or 0) + (start["updates"] or 0)
        wall = (wall or 0) + (start["wall_s"] or 0)
    row = {
        "system": system,
        "seed": seed,
        "policy": _read_json(os.path.join(iteration_dir, "policy.json")),
        "params": log["params"],
        "updates": updates,
        "wall_s": wall,
        "best_valid_loss": log["best_valid_loss"],
        "test": test_scores(run_dir, iteration),
    }
    return row, training


def _order(row: dict) -> Tuple[int, str, int]:
    rank = {"baseline": 0, "san": 1}.get(row["system"], 2)
    return rank, row["system"], row["seed"]


def campaign_systems(results_dir: str) -> Dict[str, List[Tuple[dict, dict]]]:
    """{pair: [(summary entry, training report), ...]}: baseline first, then san, then others."""
    pairs = {}
    for pair in sorted(os.listdir(results_dir)):
        pair_dir = os.path.join(results_dir, pair)
        if not (PAIR_DIR.match(pair) and os.path.isdir(pair_dir)):
            continue
        rows = []
        for run_name in sorted(os.listdir(pair_dir)):
            run_dir = os.path.join(pair_dir, run_name)
            if os.path.isdir(run_dir):
                for system, seed, iteration in system_names(run_name, trained_iterations(run_dir)):
                    rows.append(system_row(run_dir, system, seed, iteration))
        if rows:
            pairs[pair] = sorted(rows, key=lambda pair_row: _order(pair_row[0]))
    return pairs


def seed_statistics(rows: Sequence[dict]) -> Dict[str, Dict[str, dict]]:
    """{system: {test set: {n, mean, std, bleu}}} for systems trained with several seeds."""
    by_system: Dict[str, List[dict]] = {}
    for row in rows:
        by_system.setdefault(row["system"], []).append(row)
    stats = {}
    for system, runs in by_system.items():
        if len(runs) < 2:
            continue
        stats[system] = {}
        for test_set in TEST_SPLITS.values():
            bleus = [run["test"][test_set]["bleu"] for run in runs if test_set in run["test"]]
            if len(bleus) < 2:
                continue
            mean = sum(bleus) / len(bleus)
            std = math.sqrt(sum((b - mean) ** 2 for b in bleus) / (len(bleus) - 1))
            stats[system][test_set] = {
                "n": len(bleus), "mean": round(mean, 2), "std": round(std, 2), "bleu": bleus
            }  # fmt: skip
    return stats


def paired_bootstrap(
    baseline: Sequence[str], system: Sequence[str], references: Sequence[str], samples: int = 1000
) -> Dict[str, object]:
    """sacreBLEU's paired bootstrap (``--paired-bs``) of ``system`` against ``baseline``, plus the
    95% interval of the BLEU difference over the same resamples, and a verdict: "san better" or
    "san worse" only when that interval excludes 0, else "inconclusive"."""
    import numpy as np
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    metric = BLEU()
    test = PairedTest(
        [("baseline", list(baseline)), ("san", list(system))], {"BLEU": metric}, [list(references)],
        test_type="bs", n_samples=samples,
    )  # fmt: skip
    signatures, results = test()
    base, other = results["BLEU"]
    # The difference's interval: sacreBLEU resamples with SACREBLEU_SEED (12345) and keeps only
    # each system's interval; the same resamples of both systems give the difference's.
    seed = int(os.environ.get("SACREBLEU_SEED", "12345"))
    indices = np.random.default_rng(seed).choice(len(baseline), size=(samples, len(baseline)))
    stats = [
        np.array(metric._extract_corpus_statistics(list(hyps), [list(references)]), dtype="float32")
        for hyps in (baseline, system)
    ]
    differences = np.sort([
        metric._compute_score_from_stats(stats[1][rows].sum(0)).score
        - metric._compute_score_from_stats(stats[0][rows].sum(0)).score
        for rows in indices
    ])  # fmt: skip
    low, high = float(np.percentile(differences, 2.5)), float(np.percentile(differences, 97.5))
    verdict = "san better" if low > 0 else "san worse" if high < 0 else "inconclusive"
    return {
        "baseline_bleu": round(base.score, 2),
        "san_bleu": round(other.score, 2),
        "difference": round(other.score - base.score, 2),
        "interval_95": [round(low, 2), round(high, 2)],
        "p_value": round(other.p_value, 4),
        "verdict": verdict,
        "signature": str(signatures["BLEU"]),
    }


def budget_statement(baseline: Tuple[dict, dict], san: Tuple[dict, dict]) -> str:
    """Which budget a baseline-vs-SAN comparison holds equal (issue 11 item 6), in one sentence."""
    (base, base_training), (other, other_training) = baseline, san
    stops = {base_training["stop"], other_training["stop"]}
    facts = (
        f"baseline {base['updates']} updates in {_shown(base['wall_s'], '{:.0f} s')}, "
        f"SAN {other['updates']} updates in {_shown(other['wall_s'], '{:.0f} s')}"
    )
    if stops == {"max update"}:
        return f"equal updates (both stopped at --max-update; {facts}): not equal wall time"
    if stops == {"wall cap"}:
        return f"equal wall time (both stopped at the wall cap; {facts}): not equal updates"
    if stops == {"patience"}:
        return (
            f"each trained to its own validation plateau (patience; {facts}): "
            "neither equal updates nor equal wall time"
        )
    stopped = f"baseline: {base_training['stop']}, SAN: {other_training['stop']}"
    return f"mixed stopping ({stopped}; {facts})"


def reference_file(data_root: str, pair: str, split: str) -> str:
    return os.path.join(data_root, f"multi30k.{pair}", "text", f"{split}.raw.{pair.split('-')[1]}")


def significance(
    pair: str, rows: Sequence[Tuple[dict, dict]], data_root: str
) -> List[Dict[str, object]]:
    """The paired bootstrap of san against baseline for every seed both have, on each test set
    whose hypotheses and references are at hand."""
    from fairseq_san.scoring import read_generate_output, read_lines

    found = {(row["system"], row["seed"]): training for row, training in rows}
    tests = []
    for (system, seed), training in sorted(found.items()):
        if system != "baseline" or ("san", seed) not in found:
            continue
        san = found[("san", seed)]
        for split, test_set in TEST_SPLITS.items():
            paths = [
                os.path.join(run["run_dir"], "test-bleu", f"iter{run['iteration']}", split)
                for run in (training, san)
            ]
            paths = [os.path.join(path, f"generate-{split}.txt") for path in paths]
            reference = reference_file(data_root, pair, split)
            if not all(os.path.exists(path) for path in paths + [reference]):
                continue
            hyps = [read_generate_output(path) for path in paths]
            result = paired_bootstrap(hyps[0], hyps[1], read_lines(reference))
            tests.append({"seed": seed, "test_set": test_set, **result})
    return tests


def build_summary(results_dir: str, data_root: str) -> Dict[str, object]:
    """summary.json: ``pairs`` in issue 11's schema, then the training report, seed statistics,
    paired tests and budget statements that the schema's rows do not hold."""
    systems = campaign_systems(results_dir)
    entries = {pair: [row for row, _ in rows] for pair, rows in systems.items()}
    summary: Dict[str, object] = {"pairs": entries}
    summary["training"] = {pair: [report for _, report in rows] for pair, rows in systems.items()}
    summary["seeds"] = {pair: seed_statistics(rows) for pair, rows in entries.items()}
    summary["paired_bootstrap"] = {
        pair: significance(pair, rows, data_root) for pair, rows in systems.items()
    }
    budgets = {}
    for pair, rows in systems.items():
        first = {row["system"]: (row, training) for row, training in rows if row["seed"] == 1}
        if "baseline" in first and "san" in first:
            budgets[pair] = budget_statement(first["baseline"], first["san"])
    summary["budget"] = budgets
    return summary


def _shown(value, fmt: str = "{}") -> str:
    return "-" if value is None else fmt.format(value)


def summary_markdown(summary: Dict[str, object]) -> str:
    """The human report of summary.json: per pair, one row per system, then its statements."""
    lines = ["# Converged models: summary", ""]
    for pair, rows in summary["pairs"].items():
        lines += [
            f"## {pair}", "",
            "| system | seed | policy | params | updates | epochs | wall | stop | "
            "best valid loss | valid loss, last points (updates: loss) | test 2016 BLEU | "
            "test 2017 BLEU |",
            "| --- | ---: | --- | ---: | ---: | ---: | ---: | --- | ---: | --- | ---: | ---: |",
        ]  # fmt: skip
        for row, training in zip(rows, summary["training"][pair]):
            policy = format_policy(row["policy"]) if row["policy"] is not None else "-"
            curve = ", ".join(f"{u}: {loss:.3f}" for u, loss in training["valid_curve_last"])
            bleu = [
                _shown(row["test"].get(test_set, {}).get("bleu"), "{:.2f}")
                for test_set in TEST_SPLITS.values()
            ]
            lines.append(
                f"| {row['system']} | {row['seed']} | {policy} | {_shown(row['params'], '{:,}')} | "
                f"{_shown(row['updates'])} | {_shown(training['epochs'])} | "
                f"{_shown(row['wall_s'], '{:.0f} s')} | {training['stop']} | "
                f"{_shown(row['best_valid_loss'], '{:.3f}')} | {curve} | {bleu[0]} | {bleu[1]} |"
            )
        lines.append("")
        for system, sets in summary["seeds"].get(pair, {}).items():
            for test_set, stat in sets.items():
                lines.append(
                    f"- {system}, {test_set}: mean BLEU {stat['mean']:.2f}, std {stat['std']:.2f} "
                    f"over {stat['n']} seeds"
                )
        for test in summary["paired_bootstrap"].get(pair, []):
            lines.append(
                f"- SAN minus baseline, seed {test['seed']}, {test['test_set']}: "
                f"{test['difference']:+.2f} BLEU, 95% interval {test['interval_95']}, "
                f"p = {test['p_value']}: **{test['verdict']}** (`{test['signature']}`)"
            )
        if pair in summary["budget"]:
            lines.append(f"- Budget: {summary['budget'][pair]}.")
        lines.append("")
    return "\n".join(lines)


def write_summary(results_dir: str, data_root: str, output: str) -> Dict[str, object]:
    """Write summary.json (``output``) and summary.md beside it."""
    summary = build_summary(results_dir, data_root)
    if not summary["pairs"]:
        raise FileNotFoundError(f"no trained run dir (PAIR/RUN/iter*/train.log) in {results_dir}")
    with open(output, "w", encoding="utf-8") as out:
        json.dump(summary, out, indent=1)
        out.write("\n")
    with open(os.path.splitext(output)[0] + ".md", "w", encoding="utf-8") as out:
        out.write(summary_markdown(summary))
    return summary


def train_log_table(paths: Sequence[str]) -> str:
    """A markdown table of training logs side by side (run.sh's batch-size sweep)."""
    lines = [
        "| log | params | updates | wall | updates/s | tokens/s | stop | best valid loss | "
        "last valid loss |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |",
    ]
    for path in paths:
        log = read_train_log(path)
        last = log["valid_curve"][-1][1] if log["valid_curve"] else None
        lines.append(
            f"| {path} | {_shown(log['params'], '{:,}')} | {_shown(log['updates'])} | "
            f"{_shown(log['wall_s'], '{:.0f} s')} | {_shown(log['updates_per_s'], '{:.2f}')} | "
            f"{_shown(log['tokens_per_s'], '{:.0f}')} | {log['stop']} | "
            f"{_shown(log['best_valid_loss'], '{:.3f}')} | {_shown(last, '{:.3f}')} |"
        )
    return "\n".join(lines) + "\n"
