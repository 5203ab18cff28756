"""What docs/results records still holds with today's code: what a run.sh hands a recipe passes
the recipe's own check of its command line, and every relative link of the docs names a file."""

import json
import os
import re
import shutil
import subprocess
import sys

from helpers import BENCH_STAND_IN, REPO, bench_calls, cli_env, stand_in

# examples/learn_to_share_lm.sh's stand-in: its first step, the check of its command line
# (fairseq-san-loop options), then each call's arguments recorded.
LM_RECIPE_STAND_IN = """#!/usr/bin/env bash
set -euo pipefail
fairseq-san-loop options learn_to_share_lm.sh "$@" > /dev/null
printf '%s\\n' "$*" >> "$RECIPE_CALLS"
"""


def test_the_policy_speed_benchmark_gets_every_policy(tmp_path):
    """policy() read an unset $4 under set -u: its 9 policies were 'NAME=CKPT:', refused."""
    script = tmp_path / "run.sh"
    shutil.copy(REPO / "docs/results/en-de-policy-speed/run.sh", script)
    checkpoint = tmp_path / "runs/multi30k.en-de/iter0/checkpoints/checkpoint_best.pt"
    checkpoint.parent.mkdir(parents=True)
    checkpoint.touch()
    bench = stand_in(tmp_path / "bin/fairseq-san-bench", BENCH_STAND_IN)
    record = tmp_path / "bench.jsonl"
    env = cli_env()
    env.update(PATH=f"{bench.parent}{os.pathsep}{env['PATH']}", PYTHONPATH=str(REPO),
               BENCH_RECORD=str(record))  # fmt: skip
    result = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=120)  # fmt: skip
    assert result.returncode == 0 and not result.stderr, result.stderr
    [call] = bench_calls(record)
    overrides = call["systems"]
    assert overrides.pop("baseline") == {} and len(overrides) == 9
    assert json.loads(overrides["6/6-enc-1.5"]["san_policy"]) == {
        "decoder_self": [6], "decoder_encdec": [6], "encoder_self": [1, 5]}  # fmt: skip
    assert overrides["6/6-own-V"]["san_encdec_share"] == "weights"


def test_the_lm_results_loops_pass_the_recipes_check(tmp_path):
    """lm-multi30k/run.sh's loops gave the recipe --task, --arch and --max-update after --,
    which it refuses (it sets them itself): both loop steps stopped in one line."""
    here = tmp_path / "docs/results/lm-multi30k"
    shutil.copytree(REPO / "docs/results/lm-multi30k", here)  # run.sh reads systems.py
    stand_in(tmp_path / "examples/learn_to_share_lm.sh", LM_RECIPE_STAND_IN)
    calls = tmp_path / "calls.txt"
    env = {**cli_env(), "RECIPE_CALLS": str(calls), "RUNS": str(tmp_path / "runs"),
           "PYTHONPATH": str(REPO)}  # fmt: skip
    result = subprocess.run(["bash", str(here / "run.sh"), "loop", "loop_kv"], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr
    loops = calls.read_text().splitlines()
    assert len(loops) == 2 and "--self-share kv" in loops[1]
    assert all("--sample-break-mode eos" in loop and "--patience 5" in loop for loop in loops)


# A markdown link's relative target, before any #anchor: [text](target)
RELATIVE_LINK = re.compile(r"\]\((?!https?:|mailto:|#)([^)\s#]+)")


def test_every_relative_link_of_the_docs_names_a_file():
    """results.md linked logs/, a folder git ignores: a link to nothing in every checkout."""
    documents = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    broken = [
        f"{document.relative_to(REPO)}: {target}"
        for document in documents
        for target in RELATIVE_LINK.findall(document.read_text())
        if not (document.parent / target).exists()
    ]
    assert not broken


def test_a_results_helper_without_its_arguments_prints_its_usage():
    """A helper beside a run.sh read sys.argv[1] itself: without it, an IndexError traceback
    (systems.py: its own usage and exit 1, for --help too). (The ones of the standard library
    alone: a helper that imports torch is slow to start.)"""
    for script, usage, required in (
        ("cpu-yardstick/host-memory-2026-11-30/summary.py", "usage: summary.py [-h] out", "out"),
        ("cpu-yardstick/log-probs-2026-12-01/summary.py", "usage: summary.py [-h] out", "out"),
        ("lm-multi30k/systems.py", "usage: systems.py [-h] names|checkpoint ...",
         "names|checkpoint"),
    ):
        path = REPO / "docs" / "results" / script
        bare = subprocess.run([sys.executable, str(path)], capture_output=True, text=True)
        assert bare.returncode == 2 and bare.stderr.splitlines() == [
            usage, f"{path.name}: error: the following arguments are required: {required}"
        ], bare.stderr
        helped = subprocess.run([sys.executable, str(path), "--help"], capture_output=True,
                                text=True)  # fmt: skip
        assert helped.returncode == 0 and helped.stdout.startswith(usage), helped.stdout


def test_a_results_helper_takes_help_for_help_not_for_a_folder():
    """summarize.py read --help as the folder of its logs, and printed an empty table."""
    path = REPO / "docs" / "results" / "static-compile" / "summarize.py"
    helped = subprocess.run([sys.executable, str(path), "--help"], capture_output=True, text=True)
    assert helped.returncode == 0 and helped.stdout.startswith("usage: summarize.py [-h] [FOLDER]")
