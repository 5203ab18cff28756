"""The record of the converged-model campaign: ``docs/results/converged/summary.json``.

``docs/results/converged/run.sh`` trains one learn-to-share run dir per pair and system
(``RESULTS/<pair>/<run dir>/iter<k>/``, fairseq's JSON training log in ``train.log``, test BLEU
of the newest iteration in ``test-bleu/iter<k>/{test,test1}/score.json``). This reads them back:

* ``read_train_log``: what a reader needs to see that a system converged: parameters, updates,
  epochs, training wall time, why it stopped, the validation-loss curve;
* ``campaign_systems``: one row per pair and system in the campaign's schema (first
  "baseline", the learned-policy SAN "san", other systems by their run dir's name);
* ``seed_statistics`` and ``paired_bootstrap``: mean and standard deviation over seeds, and
  sacreBLEU's paired bootstrap (``fairseq_san.scoring``, ``fairseq-san-score --baseline``'s) of
  every other system (SAN, uniform, the tables' rows) minus the
  baseline of its seed (and, where that one trained for other updates, minus every baseline that
  trained for as many: ``pairings``), with a verdict;
* ``seed_tests``: SAN (and every system of several seeds) minus the baseline over seeds, and a
  SAN of another policy minus SAN, the exact permutation test of the seeds' test BLEU and its
  95% interval, so that the training's spread, which a paired bootstrap on one pair of models
  does not see, has its own interval;
* ``budget_statement``: whether a pair's baseline and SAN compare at equal updates or equal
  wall time;
* ``loop_ends``: a loop whose newest policy another run dir trained with its recipe and learned
  back (``stand_in``) ends there: that run is the loop's next iteration.

Run dir names: ``loop`` is the pair's learn-to-share loop (iteration 0 "baseline", iteration 1
"san", the SAN of the policy the baseline learned, later iterations "san-iter<k>", run while the
loop's policy still changes); ``loop-X`` is another loop of the same
pair, whose systems end in "-X" ("baseline-X", "san-X": a slice's own baseline and SAN);
``warm`` is the loop with warm start (its newest iteration is "san-warm", counted with the
iteration it started from); ``NAME-s<N>`` is system NAME trained with seed N; any other name is a
system of that name, seed 1. A system's held-out hypotheses are in ``PAIR/LABEL/heldout/``
(``system_label``), its slice's provenance in ``provenance/`` (``converged_slices``).
"""

import argparse
import json
import os
import re
import statistics
import sys
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

from campaign_headline import write_headline
from fairseq_san.errors import PREFIX, UsageError, file_error
from fairseq_san.files import glob_in
from fairseq_san.loop.run_record import TRAIN_ARGS, read_record
from fairseq_san.loop.stopping import loop_stop, policy_path
from fairseq_san.loop.summary import (
    SCORE_FIELDS,
    field_problem,
    format_theta_ranges,
    learned_theta_ranges,
    read_json,
    shown,
)
from fairseq_san.loop.train_log import read_train_log
from fairseq_san.policy import Policy, format_policy, load_policy
from fairseq_san.scoring import paired_bootstrap, seed_comparison

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

PAIR_DIR = re.compile(r"^[a-z]{2}-[a-z]{2}$")
LOOP = re.compile(r"^loop(?:-(.+))?$")
ITERATION = re.compile(r"^iter(\d+)$")
SEED_SUFFIX = re.compile(r"^(.+)-s(\d+)$")
DONE = re.compile(r"^done\.iter(\d+)$")  # run.sh's marker: iteration k trained, tested, translated
# test_bleu.sh's split folders and the names of the Multi30k test sets.
TEST_SPLITS = {"test": "test_2016_flickr", "test1": "test_2017_flickr"}
CURVE_POINTS = 5
# What run.json records that two run dirs of one recipe may differ in: how far a loop goes, and
# where the data lies on each machine (its content's digests are compared instead).
NOT_RECIPE = ("--max-iterations", "--data", "--valid-ref")


def trained_iterations(run_dir: str) -> List[int]:
    """Iterations of a run dir that have a training log, in order."""
    found = []
    for name in os.listdir(run_dir):
        match = ITERATION.match(name)
        if match and os.path.exists(os.path.join(run_dir, name, "train.log")):
            found.append(int(match.group(1)))
    return sorted(found)


def finished_iterations(run_dir: str) -> List[int]:
    """The iterations of a run dir that are trained and tested (``done.iter<k>``), in order."""
    return sorted(int(found.group(1)) for found in map(DONE.match, os.listdir(run_dir)) if found)


def is_finished(run_dir: str, iteration: int) -> bool:
    """Whether ``iteration`` of ``run_dir`` was trained and tested whole: its ``done.iter<k>``;
    in a run dir collected before run.sh wrote those markers (en-de/aan: none at all), its scores
    on every test set (it was summarized "unfinished (cut at the deadline)")."""
    finished = finished_iterations(run_dir)
    if finished:
        return iteration in finished
    return set(test_scores(run_dir, iteration)) == set(TEST_SPLITS.values())


# What test_bleu.sh's score.json holds for each test set, which the summary reads.
TEST_SCORE_FIELDS = ("bleu", "chrf", "bleu_signature")


def test_scores(run_dir: str, iteration: int) -> Dict[str, Dict[str, object]]:
    """{test set: {bleu, chrf, signature}} of test_bleu.sh's scores for one iteration."""
    scores = {}
    for split, name in TEST_SPLITS.items():
        path = os.path.join(run_dir, "test-bleu", f"iter{iteration}", split, "score.json")
        score = read_json(path, "score file")
        if score is None:
            continue
        missing = [field for field in TEST_SCORE_FIELDS if score.get(field) is None]
        problem = f"it has no {missing[0]}" if missing else field_problem(score, SCORE_FIELDS)
        if problem is not None:  # a KeyError's traceback
            raise UsageError(f"{path}: {problem}: delete it and rerun the step that writes it")
        scores[name] = {
            "bleu": score["bleu"],
            "chrf": score["chrf"],
            "signature": score["bleu_signature"],
        }
    return scores


def loop_system(iteration: int) -> str:
    """The system of a learn-to-share loop's iteration (module doc)."""
    return {0: "baseline", 1: "san"}.get(iteration, f"san-iter{iteration}")


def system_names(run_name: str, iterations: Sequence[int]) -> List[Tuple[str, int, int]]:
    """(system, seed, iteration) of the systems a run dir holds, by the rules of the module doc."""
    loop = LOOP.match(run_name)
    if (loop or run_name == "warm") and not iterations:
        return []
    if loop:
        suffix = f"-{loop.group(1)}" if loop.group(1) else ""
        return [(f"{loop_system(k)}{suffix}", 1, k) for k in iterations]
    if run_name == "warm":
        return [("san-warm", 1, iterations[-1])] if len(iterations) > 1 else []
    match = SEED_SUFFIX.match(run_name)
    name, seed = (match.group(1), int(match.group(2))) if match else (run_name, 1)
    return [(name, seed, iterations[-1])] if iterations else []


def system_label(system: str, seed: int) -> str:
    """A system's folder name beside the run dirs (its held-out hypotheses): seed 1 unmarked."""
    return system if seed == 1 else f"{system}-s{seed}"


def heldout_paths(results_dir: str, run_dir: str, system: str, seed: int) -> Dict[str, str]:
    """{source name: hypotheses path relative to ``results_dir``} of a system's held-out files."""
    folder = os.path.join(os.path.dirname(run_dir), system_label(system, seed), "heldout")
    if not os.path.isdir(folder):
        return {}
    return {
        name[: -len(".hyp")]: os.path.relpath(os.path.join(folder, name), results_dir)
        for name in sorted(os.listdir(folder)) if name.endswith(".hyp")
    }  # fmt: skip


def training_cap(run_dir: str) -> Optional[float]:
    """The wall-time cap in seconds that run.sh gave the run dir (its last --stop-time-hours in
    run.json, learn_to_share.sh's record of the fairseq-train arguments), else None."""
    recorded = read_record(run_dir)
    train_args = recorded[0].get(TRAIN_ARGS) or [] if recorded else []
    hours = [
        train_args[i + 1] for i, arg in enumerate(train_args[:-1]) if arg == "--stop-time-hours"
    ]
    return round(float(hours[-1]) * 3600, 1) if hours else None


def recipe(run_dir: str) -> Optional[Tuple[dict, dict]]:
    """How a run dir trains: the options of its run.json but NOT_RECIPE, and its data's content
    digests; None without a record."""
    recorded = read_record(run_dir)
    if recorded is None:
        return None
    options, content = recorded
    return {key: value for key, value in options.items() if key not in NOT_RECIPE}, content


def trained_policy(run_dir: str, iteration: int) -> Optional[Policy]:
    """The policy iteration ``iteration`` of a run dir trains with, where it has one."""
    path = policy_path(run_dir, iteration)
    return load_policy(path) if os.path.exists(path) else None


def trained_with(policy: Policy, like: str, pair_dirs: Sequence[str]) -> List[Tuple[str, int]]:
    """(run dir, iteration) of every finished iteration (``finished_iterations``: one cut short
    is not a training of its policy) of the run dirs of ``pair_dirs`` that trained ``policy``
    from scratch with the recipe of run dir ``like``."""
    own = recipe(like)
    found = []
    for pair_dir in pair_dirs:
        names = sorted(os.listdir(pair_dir)) if os.path.isdir(pair_dir) else []
        for name in names:
            other = os.path.join(pair_dir, name)
            iterations = finished_iterations(other) if os.path.isdir(other) else []
            matching = [k for k in iterations if trained_policy(other, k) == policy]
            if matching and own is not None and recipe(other) == own:
                found += [(other, k) for k in matching]
    return found


def stand_in(run_dir: str, iteration: int, pair_dirs: Sequence[str]) -> Optional[str]:
    """A run dir of ``pair_dirs`` (another name than the loop's) that trained the policy which
    the loop's iteration ``iteration`` learned as its iteration 0, with the loop's recipe, and
    learned it back: that training is the loop's next iteration, and the loop, whose policy then
    stops changing, ends there without repeating it. Its name, or None."""
    learned = trained_policy(run_dir, iteration + 1)
    if learned is None:
        return None
    loop_name = os.path.basename(os.path.normpath(run_dir))
    for other, k in trained_with(learned, run_dir, pair_dirs):
        name = os.path.basename(other)
        if k == 0 and name != loop_name and trained_policy(other, 1) == learned:
            return name
    return None


def loop_ends(results_dir: str, pair: str) -> List[dict]:
    """The loops of a pair whose newest iteration learned a new policy (``loop_stop``) that
    another run dir trained (``stand_in``): the loop, that iteration, the policy it learned, and
    the run dir that trained it."""
    pair_dir = os.path.join(results_dir, pair)
    ends = []
    for name in sorted(os.listdir(pair_dir)):
        run_dir = os.path.join(pair_dir, name)
        iterations = (
            trained_iterations(run_dir) if LOOP.match(name) and os.path.isdir(run_dir) else []
        )
        if not iterations or loop_stop(run_dir, iterations[-1]) is not None:
            continue
        other = stand_in(run_dir, iterations[-1], [pair_dir])
        if other:
            learned = read_json(policy_path(run_dir, iterations[-1] + 1), "policy file")
            ends.append({"loop": name, "iteration": iterations[-1], "learned_policy": learned,
                         "trained_by": other})  # fmt: skip
    return ends


def recorded_path(path: str) -> str:
    """``path`` as the summary records it, whatever the spelling of RESULTS (``./RESULTS/``,
    absolute): relative to the repository where it lies inside it, else absolute; read back
    with ``os.path.join(REPO, ...)``."""
    absolute = os.path.abspath(path)
    relative = os.path.relpath(absolute, REPO)
    return absolute if relative.split(os.sep)[0] == os.pardir else relative


def system_row(
    run_dir: str, system: str, seed: int, iteration: int, results_dir: str
) -> Tuple[dict, dict]:
    """(summary.json entry, training report) of one system; the entry has ``heldout`` only where
    the system translated held-out sources."""
    iteration_dir = os.path.join(run_dir, f"iter{iteration}")
    log = read_train_log(os.path.join(iteration_dir, "train.log"))
    updates, wall = log["updates"], log["wall_s"]
    learned = policy_path(run_dir, iteration + 1)
    training = {
        "run_dir": recorded_path(run_dir),
        "iteration": iteration,
        "finished": is_finished(run_dir, iteration),  # trained and tested whole
        "cap_s": training_cap(run_dir),
        "epochs": log["epochs"],
        "stop": log["stop"],
        "best_updates": log["best_updates"],
        "updates_per_s": log["updates_per_s"],
        "tokens_per_s": log["tokens_per_s"],
        "valid_curve_last": log["valid_curve"][-CURVE_POINTS:],
        "learned_policy": read_json(learned, "policy file"),  # at the loop's thresholds, this model
        "learned_theta_range": learned_theta_ranges(run_dir, iteration),  # thetas learning it too
    }
    if system == "san-warm":  # warm start: count the iteration it started from too
        start = read_train_log(os.path.join(run_dir, f"iter{iteration - 1}", "train.log"))
        training["warm_start_from"] = {"updates": start["updates"], "wall_s": start["wall_s"]}
        updates = (updates or 0) + (start["updates"] or 0)
        wall = (wall or 0) + (start["wall_s"] or 0)
    row = {
        "system": system,
        "seed": seed,
        "policy": read_json(os.path.join(iteration_dir, "policy.json"), "policy file"),
        "params": log["params"],
        "updates": updates,
        "wall_s": wall,
        "best_valid_loss": log["best_valid_loss"],
        "test": test_scores(run_dir, iteration),
    }
    heldout = heldout_paths(results_dir, run_dir, system, seed)
    if heldout:
        row["heldout"] = heldout
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
                    rows.append(system_row(run_dir, system, seed, iteration, results_dir))
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
            stats[system][test_set] = {
                "n": len(bleus), "mean": round(statistics.mean(bleus), 2),
                "std": round(statistics.stdev(bleus), 2), "bleu": bleus,
            }  # fmt: skip
    return stats


def seed_tests(seeds: Dict[str, Dict[str, dict]]) -> List[dict]:
    """Every system of several seeds minus the baseline's seeds and, for a SAN of another policy
    (``san-NAME``: the mean policy's), minus SAN's seeds too (which policy is better), per test
    set (``seed_statistics`` of one pair): the difference of the mean BLEU, the exact permutation
    test's p and 95% interval (None: too few seeds for one)."""
    tests = []
    for system, sets in seeds.items():
        references = ["baseline"] + (["san"] if system.startswith("san-") else [])
        for reference in references:
            if system == reference:
                continue
            for test_set, stat in sets.items():
                if test_set not in seeds.get(reference, {}):
                    continue
                against = seeds[reference][test_set]["bleu"]
                tests.append({
                    "system": system, "against": reference, "test_set": test_set,
                    **seed_comparison(stat["bleu"], against),
                })  # fmt: skip
    return tests


def budget_statement(baseline: Tuple[dict, dict], san: Tuple[dict, dict]) -> str:
    """Which budget a baseline-vs-SAN comparison holds equal, in one sentence."""
    (base, base_training), (other, other_training) = baseline, san
    stops = {base_training["stop"], other_training["stop"]}
    facts = (
        f"baseline {shown(base['updates'])} updates in {shown(base['wall_s'], '{:.0f} s')}, "
        f"SAN {shown(other['updates'])} updates in {shown(other['wall_s'], '{:.0f} s')}"
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


def seed_budgets(rows: List[Tuple[dict, dict]]) -> str:
    """``budget_statement`` of each seed that trained both a baseline and SAN, seed by seed
    (their stops may differ: a wall cap stops one seed's baseline and not another's)."""
    by_seed: Dict[int, Dict[str, Tuple[dict, dict]]] = {}
    for row, training in rows:
        by_seed.setdefault(row["seed"], {})[row["system"]] = (row, training)
    return " | ".join(  # a statement holds "; " itself
        f"seed {seed}: {budget_statement(systems['baseline'], systems['san'])}"
        for seed, systems in sorted(by_seed.items())
        if "baseline" in systems and "san" in systems
    )


def hypotheses_file(run_dir: str, iteration: int, split: str) -> str:
    """Where a run dir's iteration keeps its translation of the test set ``split``, as collected."""
    return os.path.join(run_dir, "test-bleu", f"iter{iteration}", split, f"generate-{split}.txt.gz")


def reference_file(data_root: str, pair: str, split: str) -> str:
    return os.path.join(data_root, f"multi30k.{pair}", "text", f"{split}.raw.{pair.split('-')[1]}")


def missing_reference(reference: str, pair: str, what: str) -> str:
    """The refusal of ``what`` (a paired test) where ``pair``'s ``reference`` is missing."""
    source, target = pair.split("-")
    return (
        f"{pair}: no reference {reference} for {what}: prepare the pair "
        f"(examples/multi30k/prepare.sh {source} {target}) or give the data root that holds it "
        "(--data-root; run.sh collect: DATA_ROOT)"
    )


def baseline_caps(rows: Iterable[Tuple[dict, dict]]) -> Set[Optional[float]]:
    """The wall-time caps that a pair's baselines trained under: the systems compared with them
    are those trained under one of these (the bench slice's train briefly, for speed)."""
    return {training["cap_s"] for row, training in rows if row["system"] == "baseline"}


def pairings(found: Dict[Tuple[str, int], Tuple[dict, dict]]) -> List[Tuple[str, int, int]]:
    """(system, seed, baseline seed) of every paired test: each system against the baseline of its
    seed and, where that baseline trained for other updates, against every baseline that trained
    for as many updates as the system (equal updates); SAN first, then the others by name. Only
    systems trained under the baselines' wall-time cap are tested (not the bench slice's, which
    train briefly for speed)."""
    baselines = {
        seed: row["updates"] for (name, seed), (row, _) in found.items() if name == "baseline"
    }
    caps = baseline_caps(found.values())
    tests = []
    for system, seed in sorted(found, key=lambda key: (key[0] != "san", key)):
        if system == "baseline" or found[(system, seed)][1]["cap_s"] not in caps:
            continue
        updates = found[(system, seed)][0]["updates"]
        if seed in baselines:
            tests.append((system, seed, seed))
        if baselines.get(seed) != updates:
            tests += [(system, seed, other) for other, done in sorted(baselines.items())
                      if other != seed and done == updates]  # fmt: skip
    return tests


def paired_reference(pair: str, runs: Sequence[Tuple[str, int]], split: str, data_root: str,
                     what: str) -> Optional[str]:  # fmt: skip
    """The reference of the paired test (``what``) of the (run dir, iteration)s of ``runs`` on
    test set ``split``; None where their hypotheses are not at hand, and a UsageError where they
    are and the reference is not (the test would vanish from the summary without a word:
    data-bin holding only the pair that a GPU call took)."""
    paths = [hypotheses_file(run_dir, iteration, split) for run_dir, iteration in runs]
    if not all(os.path.exists(path) for path in paths):
        return None
    reference = reference_file(data_root, pair, split)
    if not os.path.exists(reference):
        raise UsageError(missing_reference(reference, pair, what))
    return reference


def paired_test(
    pair: str, runs: Sequence[Tuple[str, int]], split: str, data_root: str, name: str
) -> Optional[Dict[str, object]]:
    """``paired_bootstrap`` of the second (run dir, iteration) of ``runs`` (called ``name``)
    against the first on test set ``split``; None where the hypotheses are not at hand
    (``paired_reference``)."""
    from fairseq_san.scoring import read_generate_output, read_lines

    what = f"the paired test of {name} on {split}"
    reference = paired_reference(pair, runs, split, data_root, what)
    if reference is None:
        return None
    hyps = [read_generate_output(hypotheses_file(*run, split)) for run in runs]
    return paired_bootstrap(hyps[0], hyps[1], read_lines(reference), name=name)


def paired_runs(
    rows: Sequence[Tuple[dict, dict]],
) -> List[Tuple[str, int, int, List[Tuple[str, int]]]]:
    """(system, seed, baseline seed, [(run dir, iteration) of the baseline, of the system]) of
    every pairing (``pairings``) of a pair's ``rows``."""
    found = {(row["system"], row["seed"]): (row, training) for row, training in rows}
    return [
        (system, seed, baseline_seed, [
            (os.path.join(REPO, training["run_dir"]), training["iteration"])
            for _, training in (found[("baseline", baseline_seed)], found[(system, seed)])
        ])
        for system, seed, baseline_seed in pairings(found)
    ]  # fmt: skip


def significance(
    pair: str, rows: Sequence[Tuple[dict, dict]], data_root: str
) -> List[Dict[str, object]]:
    """The paired bootstrap of every pairing (``paired_runs``) on each test set whose hypotheses
    and references are at hand."""
    tests = []
    for system, seed, baseline_seed, runs in paired_runs(rows):
        for split, test_set in TEST_SPLITS.items():
            result = paired_test(pair, runs, split, data_root, system)
            if result is not None:
                tests.append({"seed": seed, "baseline_seed": baseline_seed, "test_set": test_set,
                              **result})  # fmt: skip
    return tests


def build_summary(results_dir: str, data_root: str) -> Dict[str, object]:
    """summary.json: ``pairs`` in the campaign's schema, then the training report, seed statistics,
    paired tests and budget statements that the schema's rows do not hold."""
    systems = campaign_systems(results_dir)
    entries = {pair: [row for row, _ in rows] for pair, rows in systems.items()}
    summary: Dict[str, object] = {"pairs": entries}
    summary["training"] = {pair: [report for _, report in rows] for pair, rows in systems.items()}
    summary["seeds"] = {pair: seed_statistics(rows) for pair, rows in entries.items()}
    summary["seed_tests"] = {pair: seed_tests(seeds) for pair, seeds in summary["seeds"].items()}
    summary["paired_bootstrap"] = {
        pair: significance(pair, rows, data_root) for pair, rows in systems.items()
    }
    budgets = {pair: seed_budgets(rows) for pair, rows in systems.items()}
    summary["budget"] = {pair: statement for pair, statement in budgets.items() if statement}
    summary["loop_ends"] = {pair: loop_ends(results_dir, pair) for pair in systems}
    summary["slices"] = slice_records(results_dir)
    return summary


def slice_records(results_dir: str) -> List[dict]:
    """The provenance of every collected slice (where, when and how it ran), oldest first."""
    paths = glob_in(results_dir, "provenance", "*.json")
    records = [read_json(path, "provenance record") for path in paths]
    return sorted(records, key=lambda record: record.get("finished") or "")


def summary_markdown(summary: Dict[str, object]) -> str:
    """The human report of summary.json: per pair, one row per system, then its statements."""
    lines = ["# Converged models: summary", ""]
    for pair, rows in summary["pairs"].items():
        systems = list(zip(rows, summary["training"][pair]))
        caps = baseline_caps(systems)
        apart = [(row, training) for row, training in systems
                 if caps and training["cap_s"] not in caps]  # fmt: skip
        lines += [f"## {pair}", ""]
        lines += systems_table([system for system in systems if system not in apart])
        if apart:
            lines += [
                "Trained under another wall-time cap than the baselines' (the bench slice's "
                "models, trained briefly for its speed benchmark): not compared with the "
                "baselines, nor converged.", "",
            ]  # fmt: skip
            lines += systems_table(apart)
        for system, sets in summary["seeds"].get(pair, {}).items():
            for test_set, stat in sets.items():
                lines.append(
                    f"- {system}, {test_set}: mean BLEU {stat['mean']:.2f}, sample std "
                    f"{stat['std']:.2f} over {stat['n']} seeds"
                )
        for test in summary["seed_tests"].get(pair, []):
            interval = test["interval_95"] or "none (too few seeds)"
            lines.append(
                f"- {test['system']} minus {test['against']} over seeds, {test['test_set']}: "
                f"{test['difference']:+.2f} BLEU ({test['seeds']} against {test['against_seeds']} "
                f"seeds), exact two-sided permutation test over {test['splits']} splits: p = "
                f"{test['p_value']}, 95% interval {interval} (nominal: p moves in steps of "
                f"1/{test['splits']}; a shift of location assumed)"
            )
        for test in summary["paired_bootstrap"].get(pair, []):
            against = (
                f"baseline, seed {test['seed']}"
                if test["baseline_seed"] == test["seed"]
                else f"baseline seed {test['baseline_seed']} (equal updates), seed {test['seed']}"
            )
            lines.append(
                f"- {test['system']} minus {against}, {test['test_set']}: "
                f"{test['difference']:+.2f} BLEU, 95% interval {test['interval_95']}: "
                f"**{test['verdict']}** (the verdict is the interval's; sacreBLEU's paired-"
                f"bootstrap p = {test['p_value']}; `{test['signature']}`)"
            )
        if pair in summary["budget"]:
            lines.append(f"- Budget: {summary['budget'][pair]}.")
        for end in summary.get("loop_ends", {}).get(pair, []):
            lines.append(
                f"- {end['loop']}: iteration {end['iteration']} learned "
                f"{format_policy(end['learned_policy'])}, which {end['trained_by']} trained from "
                "scratch with the loop's recipe and learned back: the loop ends there (not trained "
                "again)."
            )
        for row, training in zip(rows, summary["training"][pair]):
            if training.get("learned_policy") is not None:
                learned = format_policy(training["learned_policy"])
                same = format_theta_ranges(training["learned_theta_range"])
                lines.append(
                    f"- {row['system']} seed {row['seed']} learns {learned} (0.4 / 0.5); "
                    f"the same for theta in: {same}."
                )
        lines.append("")
    return "\n".join(lines + slices_markdown(summary.get("slices", [])))


def systems_table(systems: Sequence[Tuple[dict, dict]]) -> List[str]:
    """The markdown table of (summary entry, training report) rows, one per system."""
    lines = [
        "| system | seed | policy | params | cap | updates | epochs | wall | stop | "
        "best valid loss | valid loss, last points (updates: loss) | test 2016 BLEU | "
        "test 2017 BLEU | held-out |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- | ---: | ---: "
        "| --- |",
    ]  # fmt: skip
    for row, training in systems:
        policy = format_policy(row["policy"]) if row["policy"] is not None else "-"
        curve = ", ".join(f"{u}: {loss:.3f}" for u, loss in training["valid_curve_last"])
        bleu = [
            shown(row["test"].get(test_set, {}).get("bleu"), "{:.2f}")
            for test_set in TEST_SPLITS.values()
        ]
        heldout = ", ".join(f"[{name}]({path})" for name, path in row.get("heldout", {}).items())
        lines.append(
            f"| {row['system']} | {row['seed']} | {policy} | {shown(row['params'], '{:,}')} | "
            f"{shown(training.get('cap_s'), '{:.0f} s')} | "
            f"{shown(row['updates'])} | {shown(training['epochs'])} | "
            f"{shown(row['wall_s'], '{:.0f} s')} | {stop_shown(training)} | "
            f"{shown(row['best_valid_loss'], '{:.3f}')} | {curve} | {bleu[0]} | {bleu[1]} | "
            f"{heldout or '-'} |"
        )
    return lines + [""]


def stop_shown(training: dict) -> str:
    """Why a system's training stopped, marked where its call ended before it was trained and
    tested whole (no ``done.iter<k>``: some test set or held-out source may be missing)."""
    return training["stop"] + ("" if training["finished"] else ", unfinished (cut at the deadline)")


def slices_markdown(records: Sequence[dict]) -> List[str]:
    """Where each collected slice ran: dates, GPU, command, and settings other than the defaults."""
    if not records:
        return []
    lines = [
        "## Where each slice ran", "",
        "| slice | started | finished | GPU | command | settings |",
        "| --- | --- | --- | --- | --- | --- |",
    ]  # fmt: skip
    for record in records:
        settings = ", ".join(f"{k}={v}" for k, v in record.get("settings", {}).items() if v)
        lines.append(
            f"| {record['slice']} | {record.get('started')} | {record.get('finished')} | "
            f"{record.get('gpu')} | `{' '.join(record.get('command', []))}` | {settings or '-'} |"
        )
    return lines + [""]


def write_summary(results_dir: str, data_root: str, output: str) -> Dict[str, object]:
    """Write summary.json (``output``) and summary.md beside it."""
    summary = build_summary(results_dir, data_root)
    if not summary["pairs"]:
        raise UsageError(f"no trained run dir (PAIR/RUN/iter*/train.log) in {results_dir}")
    with open(output, "w", encoding="utf-8") as out:
        json.dump(summary, out, indent=1)
        out.write("\n")
    with open(os.path.splitext(output)[0] + ".md", "w", encoding="utf-8") as out:
        out.write(summary_markdown(summary))
    write_headline(summary, results_dir, list(TEST_SPLITS.values()))
    return summary


def refused(error: Exception) -> int:
    """Say a UsageError, or an OSError (a file named that is not there or cannot be written: its
    path, then the system's words), in one line, not argparse's usage; the exit status, 2."""
    said = file_error(error) if isinstance(error, OSError) else str(error)
    print(PREFIX + said, file=sys.stderr)
    return 2


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="campaign_summary.py",
        description="write the converged campaign's summary.json and summary.md",
    )
    parser.add_argument("results_dir", help="PAIR/RUN_DIR/iter*/ folders (docs/results/converged)")
    parser.add_argument(
        "--data-root",
        default="data-bin",
        help="prepare.sh's folders, for the references of the paired test (%(default)s)",
    )
    parser.add_argument("-o", "--output", help="summary.json to write (RESULTS_DIR/summary.json)")
    args = parser.parse_args(argv)
    output = args.output or os.path.join(args.results_dir, "summary.json")
    try:
        summary = write_summary(args.results_dir, args.data_root, output)
    except (UsageError, OSError) as err:
        return refused(err)
    print(summary_markdown(summary), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
