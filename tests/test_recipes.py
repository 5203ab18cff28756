"""The recipes end to end, at toy scale: the shell scripts and console commands a user runs.

* ``examples/multi30k/prepare.sh`` on a fake Multi30k (gzipped synthetic sentences, 30 words);
* ``examples/learn_to_share.sh`` on that corpus: the loop with theta 0 (every kind becomes one
  block of 6 after iteration 0; in iteration 1 the shared layers have identical attention, JS 0,
  so the policy stays {6}/{6} and the loop stops), its resumption, ``--warm-start`` and
  ``--cpu-ranks``;
* ``examples/wmt14_en_de/run.sh --dry-run``;
* AAN + SAN through fairseq-train / fairseq-generate;
* ``fairseq-san-loop show`` and ``fairseq-san-score``.

The prepared corpus and the first loop run are shared by the module. Everything is tiny (32-dim
models, 10-20 updates) so that the file runs in a few minutes on two CPU cores.
"""

import argparse
import gzip
import json
import os
import random
import re
import shlex
import shutil
import subprocess
import sys
import time
import unicodedata
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import pytest
import torch

from fairseq_san.loop.run_record import write_record
from fairseq_san.loop.summary import format_theta_ranges
from fairseq_san.policy import theta_ranges
from helpers import (
    BIN,
    EN_WORDS,
    LM_PREPARE,
    LOOP,
    ONE_BLOCK,
    PREPARE,
    REPO,
    SPLITS,
    TEST_BLEU,
    VOCAB_SIZE,
    best_hypotheses,
    cli_env,
    command_path,
    fairseq_generate,
    loop_args,
    output_of,
    prepare_env,
    printed_commands,
    read_json,
    run_cli,
    run_loop,
    run_script,
    snapshot,
    train_argv,
    write_corpus,
    write_fake_multi30k,
)

WMT14 = REPO / "examples" / "wmt14_en_de" / "run.sh"
# The fairseq commit whose prepare-wmt14en2de.sh the recipe runs (its last change), and the sha256
# of that file.
WMT14_PREPARE_URL = (
    "https://raw.githubusercontent.com/facebookresearch/fairseq/"
    "13d9e2baf8a67339bcdb25af18538630f7fa128f"
)
WMT14_PREPARE_SHA256 = "d34382e7986f6fdaede569edc7a5c15670ed4583867fb847436f423bb3865a41"

NO_SHARING = {"decoder_self": None, "decoder_encdec": None, "encoder_self": None}
DONE_LINE = "== the policy did not change: done after iteration 1"


# --- helpers ----------------------------------------------------------------------------------


def load_checkpoint(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=False)


def table_rows(markdown: str) -> List[str]:
    """The data rows of loop.md's table (``| <iteration> | ...``)."""
    return [line for line in markdown.splitlines() if re.match(r"^\| \d+ \|", line)]


# --- prepare.sh -------------------------------------------------------------------------------


@pytest.mark.slow
def test_prepare_writes_the_binarized_corpus(prepared, multi30k_raw):
    out, result = prepared
    assert f"prepare.sh: done: {out}" in result.stdout
    # --joined-dictionary: one vocabulary for both sides.
    assert (out / "dict.en.txt").is_file()
    assert (out / "dict.en.txt").read_text() == (out / "dict.de.txt").read_text()
    for split in ("train", "valid", "test", "test1"):
        for lang in ("en", "de"):
            for ext in ("bin", "idx"):
                path = out / f"{split}.en-de.{lang}.{ext}"
                assert path.is_file() and path.stat().st_size > 0, path
    assert (out / "spm.model").is_file()
    assert len((out / "spm.vocab").read_text().splitlines()) == VOCAB_SIZE
    # The raw text of every split, as it was in the gzipped files (the references for BLEU).
    raw_names = {
        "train": "train", "valid": "val", "test": "test_2016_flickr", "test1": "test_2017_flickr"
    }  # fmt: skip
    for split, raw_name in raw_names.items():
        for lang in ("en", "de"):
            with gzip.open(multi30k_raw / f"{raw_name}.{lang}.gz", "rt", encoding="utf-8") as raw:
                assert (out / "text" / f"{split}.raw.{lang}").read_text() == raw.read()
    # The subwords that fairseq-preprocess binarized: every piece is in the joint dictionary.
    words = {line.split()[0] for line in (out / "dict.en.txt").read_text().splitlines()}
    encoded = (out / "text" / "valid.de").read_text().splitlines()
    pieces = {piece for line in encoded for piece in line.split()}
    assert pieces and pieces <= words


@pytest.mark.slow
def test_lm_prepare_writes_the_english_corpus_once(multi30k_raw, tmp_path):
    out = tmp_path / "multi30k.en-lm"
    result = run_script(LM_PREPARE, str(out), env=prepare_env(multi30k_raw))
    assert result.returncode == 0, output_of(result)[-3000:]
    assert f"prepare.sh: done: {out}" in result.stdout
    for split, raw_name in (("train", "train"), ("valid", "val"), ("test", "test_2016_flickr")):
        with gzip.open(multi30k_raw / f"{raw_name}.en.gz", "rt", encoding="utf-8") as raw:
            assert (out / "text" / f"{split}.raw.en").read_text() == raw.read()
        for ext in ("bin", "idx"):
            assert (out / f"{split}.{ext}").stat().st_size > 0
    words = {line.split()[0] for line in (out / "dict.txt").read_text().splitlines()}
    pieces = set((out / "text" / "valid.en").read_text().split())
    assert pieces and pieces <= words
    before = snapshot(out)
    again = run_script(LM_PREPARE, str(out), env=prepare_env(multi30k_raw))
    assert again.returncode == 0 and f"prepare.sh: {out} is ready" in again.stdout
    assert snapshot(out) == before


@pytest.mark.slow
@pytest.mark.parametrize("src,tgt", [("en", "de"), ("de", "en")])
def test_loop_scores_validation_against_the_target_language(multi30k_raw, tmp_path, src, tgt):
    """The references default to DATA/text/valid.raw.TGT, whichever language sorts first."""
    data = tmp_path / f"multi30k.{src}-{tgt}"
    prepared = run_script(PREPARE, src, tgt, str(data), env=prepare_env(multi30k_raw))
    assert prepared.returncode == 0, output_of(prepared)[-4000:]
    result = run_loop(data, tmp_path / "run", "--dry-run")
    assert result.returncode == 0, output_of(result)[-4000:]
    (score,) = printed_commands(output_of(result), "fairseq-san-score")
    assert last_values(score)["--reference"] == f"{data}/text/valid.raw.{tgt}"


@pytest.mark.slow
def test_prepare_again_does_nothing(prepared, multi30k_raw):
    out, _ = prepared
    before = snapshot(out)
    result = run_script(PREPARE, "en", "de", str(out), env=prepare_env(multi30k_raw))
    assert result.returncode == 0, output_of(result)[-3000:]
    assert f"prepare.sh: {out} is ready" in result.stdout
    assert "sentencepiece" not in result.stdout and "Wrote preprocessed" not in output_of(result)
    assert snapshot(out) == before


STOPPED_PREPROCESS = """#!/usr/bin/env bash
# fairseq-preprocess stopped after its first dictionary (Ctrl-C)
while [ $# -gt 0 ]; do [ "$1" = --destdir ] && destdir=$2; shift; done
mkdir -p "$destdir" && echo "w 1" > "$destdir/dict.en.txt" && exit 130
"""


@pytest.mark.slow
@pytest.mark.parametrize("script, argv", [(PREPARE, ["en", "de"]), (LM_PREPARE, [])])
def test_prepare_stopped_inside_fairseq_preprocess_runs_again(multi30k_raw, tmp_path, script,
                                                              argv):  # fmt: skip
    """A run stopped inside fairseq-preprocess left its dictionary in OUT_DIR, and every run
    after it failed on it (FileExistsError, a traceback) until the folder was deleted."""
    out = tmp_path / "data-bin"
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "fairseq-preprocess").write_text(STOPPED_PREPROCESS)
    (shim / "fairseq-preprocess").chmod(0o755)
    env = prepare_env(multi30k_raw)
    stopped = run_script(script, *argv, str(out), env={**env, "PATH": f"{shim}:{env['PATH']}"})
    assert stopped.returncode == 130 and not (out / ".done").exists()
    again = run_script(script, *argv, str(out), env=env)
    assert again.returncode == 0, output_of(again)[-3000:]
    assert f"prepare.sh: done: {out}" in again.stdout and not (out / ".binarizing").exists()
    (out / ".done").unlink()  # stopped between binarizing and .done: prepared again
    again = run_script(script, *argv, str(out), env=env)
    assert again.returncode == 0 and (out / ".done").exists(), output_of(again)[-3000:]
    (out / ".done").unlink()
    (out / ".binarized").unlink()  # a folder of dictionaries that no run of prepare.sh wrote
    refused = run_script(script, *argv, str(out), env=env)
    assert refused.returncode == 1 and re.fullmatch(
        f"prepare.sh: {re.escape(str(out))} holds binarized data \\({re.escape(str(out))}/dict"
        "[.a-z]*txt\\) that prepare.sh did not finish: choose another OUT_DIR\n",
        refused.stderr,
    ), refused.stderr


@pytest.mark.parametrize("script, usage", [
    (PREPARE, "usage: prepare.sh SRC TGT [OUT_DIR]"),
    (REPO / "examples" / "multi30k" / "test_bleu.sh",
     "usage: test_bleu.sh DATA TGT OUT_DIR NAME=CHECKPOINT[:OVERRIDES] ..."),
])  # fmt: skip
def test_recipes_say_their_usage(script, usage):
    """``--help``, or too few arguments, printed bash's "prepare.sh: line 16: 2: usage: ..."
    (status 1)."""
    helped = run_script(script, "--help", timeout=60)
    assert (helped.returncode, helped.stdout) == (0, usage + "\n"), output_of(helped)
    for argv in ([], ["en"]):
        short = run_script(script, *argv, timeout=60)
        assert (short.returncode, short.stderr) == (2, usage + "\n"), output_of(short)



def test_the_lm_recipe_says_its_usage(tmp_path):
    """``examples/lm/prepare.sh --help`` took the option for OUT_DIR: "mkdir: unrecognized option
    '--help/text'" (status 1); an option of another recipe made a folder of that name."""
    usage = "usage: examples/lm/prepare.sh [OUT_DIR]"

    def run(option: str) -> subprocess.CompletedProcess:  # in tmp_path: what it makes stays there
        return subprocess.run(["bash", str(LM_PREPARE), option], cwd=tmp_path, env=cli_env(),
                              capture_output=True, text=True, timeout=60)  # fmt: skip

    helped = run("--help")
    assert (helped.returncode, helped.stdout) == (0, usage + "\n"), output_of(helped)
    other = run("--vocab-size")
    assert (other.returncode, other.stderr) == (
        2, f"prepare.sh: unknown option --vocab-size; {usage}\n"), output_of(other)
    assert not list(tmp_path.iterdir())


def test_the_demo_says_its_usage_and_takes_no_arguments(tmp_path):
    """``examples/demo.sh --help`` (or ``--dry-run``) was ignored: the whole demo ran, the
    download and 20 minutes of training (here stopped by a missing MULTI30K_DIR)."""
    usage = "usage: [MULTI30K_DIR=DIR] [RUN_DIR=RUN] [UPDATES=N] [DATA_DIR=DATA] examples/demo.sh"
    env = {**cli_env(), "MULTI30K_DIR": str(tmp_path / "multi30k"),
           "RUN_DIR": str(tmp_path / "run"), "DATA_DIR": str(tmp_path / "data")}  # fmt: skip
    helped = run_script(REPO / "examples" / "demo.sh", "--help", env=env, timeout=60)
    assert (helped.returncode, helped.stdout) == (0, usage + "\n"), output_of(helped)
    other = run_script(REPO / "examples" / "demo.sh", "--dry-run", env=env, timeout=60)
    assert (other.returncode, other.stderr) == (2, "demo.sh: --dry-run: it takes no arguments "
                                                f"(set its variables instead); {usage}\n")
    assert not list(tmp_path.iterdir())


def test_the_demo_checks_its_variables_before_it_prepares_the_data(multi30k_raw, tmp_path):
    """``UPDATES=abc examples/demo.sh`` prepared Multi30k (minutes, or a download) before the
    loop refused its value."""
    env = {**cli_env(), "MULTI30K_DIR": str(multi30k_raw), "RUN_DIR": str(tmp_path / "run"),
           "DATA_DIR": str(tmp_path / "data"), "UPDATES": "abc"}  # fmt: skip
    refused = run_script(REPO / "examples" / "demo.sh", env=env, timeout=120)
    assert (refused.returncode, refused.stderr) == (
        2, "fairseq-san-loop: error: --updates abc: must be a whole number of at least 1\n"
    ), output_of(refused)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("variable", ["RUN_DIR", "DATA_DIR", "MULTI30K_DIR"])
def test_the_demo_takes_folders_whose_names_start_with_a_dash(tmp_path, variable):
    """``RUN_DIR=-r examples/demo.sh`` stopped on realpath's "invalid option -- 'r'" (and its
    "Try 'realpath --help'"), before anything was checked; it names a folder ./-r."""
    env = {**cli_env(), "MULTI30K_DIR": str(tmp_path / "multi30k"),
           "RUN_DIR": str(tmp_path / "run"), "DATA_DIR": str(tmp_path / "data"),
           "UPDATES": "abc", variable: "-r"}  # fmt: skip
    refused = subprocess.run(["bash", str(REPO / "examples" / "demo.sh")], cwd=tmp_path,
                             env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert (refused.returncode, refused.stderr) == (
        2, "fairseq-san-loop: error: --updates abc: must be a whole number of at least 1\n"
    ), output_of(refused)
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
@pytest.mark.parametrize("script, argv, vocab, status, said", [
    (PREPARE, ["de", "en", "{out}"], None, 1, "holds other data than de->en translation data (no "
     "train.de-en.de.idx): choose another OUT_DIR"),
    (PREPARE, ["en", "fr", "{out}"], None, 1, "holds other data than en->fr translation data"),
    (PREPARE, ["en", "de", "{out}"], "7", 1,
     f"holds a vocabulary of {VOCAB_SIZE} pieces, not VOCAB_SIZE=7"),
    (LM_PREPARE, ["{out}"], None, 1, "holds other data than language-modelling data (no dict.txt)"),
    (PREPARE, ["en", "de", "{out}", "extra"], None, 2, "usage: prepare.sh SRC TGT [OUT_DIR]"),
])  # fmt: skip
def test_prepare_into_a_folder_of_other_data_is_one_line(
    prepared, multi30k_raw, script, argv, vocab, status, said
):
    """A finished folder of other data (another pair or direction, vocabulary or kind) was
    "ready", and the run went on with data other than asked for."""
    out, _ = prepared
    before = snapshot(out)
    env = prepare_env(multi30k_raw)
    if vocab:
        env["VOCAB_SIZE"] = vocab
    result = run_script(script, *[arg.format(out=out) for arg in argv], env=env)
    assert result.returncode == status and said in result.stderr, output_of(result)[-3000:]
    assert snapshot(out) == before


@pytest.mark.slow
def test_prepare_again_from_another_multi30k_dir_is_one_line(prepared, multi30k_raw, tmp_path):
    """A finished folder was "ready" for any MULTI30K_DIR (only the pair and the vocabulary size
    were checked): the run went on with the text of the first. A copy of the same files is
    ready."""
    out, _ = prepared
    before = snapshot(out)
    copy = shutil.copytree(multi30k_raw, tmp_path / "copy")
    again = run_script(PREPARE, "en", "de", str(out), env=prepare_env(copy))
    assert again.returncode == 0 and again.stdout.strip().endswith("is ready"), output_of(again)
    other = write_fake_multi30k(tmp_path / "other", seed=1)
    result = run_script(PREPARE, "en", "de", str(out), env=prepare_env(other))
    assert (result.returncode, result.stderr) == (1, (
        f"prepare.sh: {out} was prepared from other text than MULTI30K_DIR={other} "
        f"({other}/train.en.gz is not {out}/text/train.raw.en): choose another OUT_DIR\n"
    )), output_of(result)
    # a MULTI30K_DIR misspelt, or holding none of the files, was "ready" too
    (tmp_path / "empty").mkdir()
    for given, said in ((tmp_path / "nowhere", "no such directory"),
                        (tmp_path / "empty", f"holds none of {out}'s raw files (SPLIT.LANG.gz): "
                                             "check MULTI30K_DIR")):  # fmt: skip
        result = run_script(PREPARE, "en", "de", str(out), env=prepare_env(given))
        assert (result.returncode, result.stderr) == (
            1, f"prepare.sh: MULTI30K_DIR={given}: {said}\n" if "such" in said
            else f"prepare.sh: MULTI30K_DIR={given} {said}\n"
        ), output_of(result)
    assert snapshot(out) == before


@pytest.mark.slow
def test_prepare_reads_vocab_size_as_its_number(prepared, multi30k_raw):
    """VOCAB_SIZE=08000 prepared a folder of 8000 pieces, and the same command again said it held
    "8000 pieces, not VOCAB_SIZE=08000"."""
    out, _ = prepared
    env = prepare_env(multi30k_raw)
    env["VOCAB_SIZE"] = f"0{VOCAB_SIZE}"
    result = run_script(PREPARE, "en", "de", str(out), env=env)
    assert result.returncode == 0, output_of(result)[-3000:]
    assert result.stdout.strip().endswith("is ready")


# --- the learn-to-share loop ------------------------------------------------------------------


@pytest.fixture(scope="module")
def loop_run(data, tmp_path_factory):
    """(RUN, result): the loop with theta 0 on the toy corpus, at most 3 iterations."""
    run_dir = tmp_path_factory.mktemp("loop") / "run"
    result = run_loop(data, run_dir, "--max-iterations", "3")
    assert result.returncode == 0, output_of(result)[-6000:]
    return run_dir, result


@pytest.mark.slow
def test_a_training_that_saved_no_checkpoint_is_not_marked_trained(data, tmp_path):
    """fairseq-train exiting 0 without a checkpoint (--no-save; --distributed-world-size 0 did
    too) was marked trained: every re-run skipped training and failed at the analysis."""
    run_dir = tmp_path / "run"
    result = run_script(LOOP, *loop_args(data, run_dir, "--max-iterations", "1"), "--no-save")
    assert result.returncode == 1, output_of(result)[-3000:]
    checkpoint = run_dir / "iter0" / "checkpoints" / "checkpoint_best.pt"
    assert result.stderr.splitlines()[-1] == (
        f"learn_to_share: iteration 0: fairseq-train ended without {checkpoint} (its output: "
        f"{run_dir / 'iter0'}/train.log)"
    )
    assert not (run_dir / "iter0" / "trained").exists()


@pytest.mark.slow
def test_an_iteration_marked_trained_without_its_checkpoint_is_named(loop_run, data, tmp_path):
    """iter1/trained beside no checkpoint_best.pt (deleted), its scoring not done: the rerun
    skipped training, and fairseq-generate printed its whole configuration and stopped on the
    missing checkpoint, at every rerun."""
    run_dir = tmp_path / "run"
    shutil.copytree(loop_run[0], run_dir, symlinks=True)
    checkpoint = run_dir / "iter1" / "checkpoints" / "checkpoint_best.pt"
    checkpoint.unlink()
    (run_dir / "iter1" / "valid.json").unlink()
    result = run_loop(data, run_dir, "--max-iterations", "3")
    assert result.returncode == 1, output_of(result)[-3000:]
    assert result.stderr.splitlines()[-1] == (
        f"learn_to_share: iteration 1: {run_dir}/iter1/trained says it trained, and {checkpoint} "
        f"is gone: delete {run_dir}/iter1/trained to train it again"
    )


@pytest.mark.slow
def test_loop_trains_two_iterations_and_stops_on_an_unchanged_policy(loop_run, data):
    run_dir, result = loop_run
    assert DONE_LINE in result.stdout
    for k in (0, 1):
        iteration = run_dir / f"iter{k}"
        assert (iteration / "trained").is_file()
        assert (iteration / "checkpoints" / "checkpoint_best.pt").is_file()
        assert (iteration / "analysis" / "js.json").is_file()
        assert (iteration / "generate-valid.txt").is_file()
        score = read_json(iteration / "valid.json")
        assert score["sentences"] == SPLITS["val"]
        assert score["bleu_signature"].startswith("nrefs:1|")
    assert read_json(run_dir / "iter0" / "policy.json") == NO_SHARING
    assert read_json(run_dir / "iter1" / "policy.json") == ONE_BLOCK
    # P2 = P1: learned, compared, not trained.
    assert read_json(run_dir / "iter2" / "policy.json") == ONE_BLOCK
    assert sorted(p.name for p in (run_dir / "iter2").iterdir()) == ["policy.json"]
    assert not (run_dir / "iter3").exists()
    assert os.readlink(run_dir / "last") == "iter1"
    # Two trainings in all: iterations 0 and 1.
    assert output_of(result).count("+ fairseq-train ") == 2


@pytest.mark.slow
def test_loop_analysis_of_the_shared_model(loop_run):
    """Under {6}/{6} every decoder layer reuses one attention: pairwise JS is 0."""
    run_dir, _ = loop_run
    js0 = read_json(run_dir / "iter0" / "analysis" / "js.json")
    js1 = read_json(run_dir / "iter1" / "analysis" / "js.json")
    for js in (js0, js1):
        assert js["sentences"] == SPLITS["val"] and js["subset"] == "valid"
        for kind in ("decoder_self", "decoder_encdec"):
            assert len(js[kind]) == 6 and all(len(row) == 6 for row in js[kind])
        assert len(js["encoder_self"]) == 2
    for kind in ("decoder_self", "decoder_encdec"):
        assert max(max(row) for row in js1[kind]) < 1e-6, kind
        assert max(max(row) for row in js0[kind]) > 1e-4, kind  # unshared layers differ


@pytest.mark.slow
def test_loop_summary(loop_run):
    run_dir, result = loop_run
    markdown = (run_dir / "loop.md").read_text()
    rows = table_rows(markdown)
    assert len(rows) == 2, markdown
    assert rows[0].startswith("| 0 | decoder_self none  decoder_encdec none")
    assert rows[1].startswith("| 1 | decoder_self {6}  decoder_encdec {6}")
    signature = read_json(run_dir / "iter1" / "valid.json")["bleu_signature"]
    assert f"BLEU signature: `{signature}`" in markdown
    assert markdown.split("\n", 2)[2] in result.stdout  # the table is also printed
    summary = read_json(run_dir / "loop.json")
    assert [row["iteration"] for row in summary] == [0, 1]
    assert [row["num_updates"] for row in summary] == [20, 20]
    # {6}/{6} drops q,k of decoder self-attention and q,k,v of encoder-decoder attention in
    # layers 2-6: 5 layers x (2 + 3) projections x (32 x 32 weights + 32 biases).
    assert summary[0]["parameters"] - summary[1]["parameters"] == 5 * 5 * (32 * 32 + 32)
    assert summary[1]["learned"] == "decoder_self {6}  decoder_encdec {6}  encoder_self none"
    # The thetas that learn it too, from the iteration's analysis at the recorded theta 0.
    thetas = {"decoder_self": 0.0, "decoder_encdec": 0.0}
    for row in summary:
        js = read_json(run_dir / f"iter{row['iteration']}" / "analysis" / "js.json")
        assert row["learned_for"] == format_theta_ranges(theta_ranges(js, thetas))
        assert f"| {row['learned']} | {row['learned_for']} |" in markdown
    assert summary[0]["learned_for"].startswith("decoder_self [0, ")


@pytest.mark.slow
def test_train_log_reads_the_loops_own_logs(loop_run):
    """The recipes train with --log-format simple; train-log read only JSON records and gave
    a row of dashes for these logs, with exit 0."""
    from fairseq_san.loop.train_log import read_train_log

    run_dir, _ = loop_run
    for k in (0, 1):
        log = read_train_log(str(run_dir / f"iter{k}" / "train.log"))
        best = torch.load(run_dir / f"iter{k}" / "checkpoints" / "checkpoint_best.pt",
                          weights_only=True)  # fmt: skip
        assert log["updates"] == 20 and log["stop"] == "max update"
        assert log["epochs"] >= 1 and log["wall_s"] > 0  # no train_inner line: 20 < 25 updates
        assert log["best_valid_loss"] == pytest.approx(best["extra_state"]["best"], abs=5e-4)
        assert [update for update, _ in log["valid_curve"]] == sorted(
            update for update, _ in log["valid_curve"])  # fmt: skip


@pytest.mark.slow
def test_loop_again_skips_everything_and_changes_nothing(loop_run, data):
    run_dir, first = loop_run
    before = snapshot(run_dir)
    summary, markdown = read_json(run_dir / "loop.json"), (run_dir / "loop.md").read_text()
    start = time.monotonic()
    result = run_loop(data, run_dir, "--max-iterations", "3")
    elapsed = time.monotonic() - start
    output = output_of(result)
    assert result.returncode == 0, output[-4000:]
    assert elapsed < 40, f"the resumed loop took {elapsed:.0f} s"
    for command in ("fairseq-train", "fairseq-validate", "fairseq-generate", "fairseq-san-score"):
        assert f"+ {command} " not in output, command
    assert DONE_LINE in result.stdout
    assert read_json(run_dir / "loop.json") == summary
    assert (run_dir / "loop.md").read_text() == markdown
    after = snapshot(run_dir)
    # Only the summary is rewritten, with the same content; learned policies are never rewritten.
    rewritten = {"loop.md", "loop.json"}
    assert {k: v for k, v in after.items() if k not in rewritten} == {
        k: v for k, v in before.items() if k not in rewritten
    }
    assert set(after) == set(before)
    assert read_json(run_dir / "iter2" / "policy.json") == ONE_BLOCK
    assert os.readlink(run_dir / "last") == "iter1"


# --- warm start -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def warm_run(loop_run, data, tmp_path_factory):
    """The loop with --warm-start --warm-updates 10.

    Iteration 0 is the very same command as in ``loop_run`` (a warm start changes only k > 0),
    so its finished directory is copied in to save a training run; the loop resumes after it.
    """
    source, _ = loop_run
    run_dir = tmp_path_factory.mktemp("warm") / "run"
    run_dir.mkdir()
    shutil.copytree(source / "iter0", run_dir / "iter0", symlinks=True)
    result = run_loop(
        data, run_dir, "--max-iterations", "3", "--warm-start", "--warm-updates", "10"
    )
    assert result.returncode == 0, output_of(result)[-6000:]
    return run_dir, result


def expected_one_block_keys(keys: Sequence[str]) -> set:
    """The state-dict keys of a {6}/{6} model, from those of the unshared model."""
    dropped = set()
    for layer in range(1, 6):  # layers 2-6 (0-based 1..5) follow layer 1 of the block
        for attn, projections in (("self_attn", "qk"), ("encoder_attn", "qkv")):
            for proj in projections:
                for param in ("weight", "bias"):
                    dropped.add(f"decoder.layers.{layer}.{attn}.{proj}_proj.{param}")
    assert dropped <= set(keys)
    return set(keys) - dropped


@pytest.mark.slow
def test_warm_start_drops_exactly_the_unused_projections(warm_run):
    run_dir, result = warm_run
    assert DONE_LINE in result.stdout
    assert read_json(run_dir / "iter1" / "policy.json") == ONE_BLOCK
    state0 = load_checkpoint(run_dir / "iter0" / "checkpoints" / "checkpoint_best.pt")
    state1 = load_checkpoint(run_dir / "iter1" / "checkpoints" / "checkpoint_best.pt")
    model0, model1 = state0["model"], state1["model"]
    assert set(model1) == expected_one_block_keys(list(model0))
    for key in model1:
        assert model1[key].shape == model0[key].shape, key
    assert state1["optimizer_history"][-1]["num_updates"] == 10  # --warm-updates


@pytest.mark.slow
def test_warm_start_loads_the_previous_iteration(warm_run):
    run_dir, _ = warm_run
    previous = run_dir / "iter0" / "checkpoints" / "checkpoint_best.pt"
    log = (run_dir / "iter1" / "train.log").read_text()
    command = next(line for line in log.splitlines() if line.startswith("+ fairseq-train "))
    argv = shlex.split(command[2:])
    assert argv[argv.index("--finetune-from-model") + 1] == str(previous)
    assert last_values(argv)["--max-update"] == "10"
    assert f"loading pretrained model from {previous}" in log
    loaded = rf"Loaded checkpoint {re.escape(str(previous))} \(epoch \d+ @ 0 updates\)"
    assert re.search(loaded, log)
    # Iteration 0 is not warm-started (and was not retrained here: it was complete).
    assert "--finetune-from-model" not in (run_dir / "iter0" / "train.log").read_text()
    assert "+ fairseq-train " not in log.split("+ fairseq-train ", 1)[1]  # trained once


# --- AAN + SAN through the fairseq commands ---------------------------------------------------

AAN = ["--decoder-self-attention-type", "aan"]


@pytest.fixture(scope="module")
def aan_checkpoint(data, tmp_path_factory) -> Path:
    save_dir = tmp_path_factory.mktemp("aan") / "checkpoints"
    argv = train_argv(data, save_dir, 10, [*AAN, "--san-decoder-encdec-policy", "3,3"])
    result = run_cli("fairseq-train", *argv)
    output = output_of(result)
    assert result.returncode == 0, output[-4000:]
    assert "attention sharing: decoder_self none  decoder_encdec {3,3}  encoder_self none" in output
    assert "AverageAttention" in output
    return save_dir / "checkpoint_last.pt"


@pytest.mark.slow
def test_aan_with_shared_encdec_decodes_the_same_without_cache(data, aan_checkpoint):
    keys = set(load_checkpoint(aan_checkpoint)["model"])
    assert "decoder.layers.3.encoder_attn.q_proj.weight" in keys  # leader of the second block
    assert "decoder.layers.4.encoder_attn.q_proj.weight" not in keys
    assert not [k for k in keys if re.match(r"decoder\.layers\.\d+\.self_attn\.[qk]_proj", k)]
    cached = fairseq_generate(data, aan_checkpoint)
    uncached = fairseq_generate(data, aan_checkpoint, "--model-overrides", "{'san_no_cache': True}")
    assert cached.returncode == 0, output_of(cached)[-4000:]
    assert uncached.returncode == 0, output_of(uncached)[-4000:]
    first, second = best_hypotheses(cached.stdout), best_hypotheses(uncached.stdout)
    assert len(first) == SPLITS["test_2016_flickr"]
    assert first.keys() == second.keys()
    for i, hypothesis in first.items():
        assert second[i].text == hypothesis.text, i
        assert abs(second[i].score - hypothesis.score) < 1e-4, i


@pytest.mark.slow
def test_test_bleu_scores_both_test_sets_of_each_system(data, aan_checkpoint, tmp_path):
    shared = "{'san_policy': '{\"decoder_encdec\": [6]}'}"
    systems = [f"aan={aan_checkpoint}", f"aan-one-block={aan_checkpoint}:{shared}"]
    result = run_script(TEST_BLEU, str(data), "de", str(tmp_path), *systems, env=cli_env())
    assert result.returncode == 0, output_of(result)[-4000:]
    headers = [line for line in result.stdout.splitlines() if line.startswith("== ")]
    assert headers == ["== aan test", "== aan test1", "== aan-one-block test", "== aan-one-block test1"]
    assert result.stdout.count("BLEU = ") == result.stdout.count("chrF = ") == 4
    for name in ("aan", "aan-one-block"):
        for split in ("test", "test1"):
            scores = read_json(tmp_path / name / split / "score.json")
            assert scores["sentences"] == SPLITS["test_2016_flickr"]
            assert 0.0 <= scores["bleu"] <= 100.0
    log = (tmp_path / "aan-one-block" / "test" / "generate.log").read_text(encoding="utf-8")
    assert "decoder_encdec {6}" in log  # the override reached the model
    generated = (tmp_path / "aan" / "test" / "generate-test.txt").read_text(encoding="utf-8")
    summary = generated.splitlines()[-1]  # sacrebleu's score: fairseq's C BLEU scorer not needed
    assert "BLEU = " in summary and "BLEU4" not in summary, summary
    again = run_script(TEST_BLEU, str(data), "de", str(tmp_path), *systems, env=cli_env())
    assert again.stdout == result.stdout  # decoded splits are rescored, not decoded again


def test_a_failed_commands_log_tail_leaves_fairseqs_configuration_out(tmp_path):
    """test_bleu.sh and the language model's recipe print the end of a failed command's log:
    fairseq's configuration (kilobytes on one line) came before the error and buried it."""
    log = tmp_path / "generate.log"
    configuration = "INFO:fairseq_cli.generate:{'_name': None, 'common': {" + "'x': 1, " * 900 + "}}"
    other_format = "2026-11-30 12:00:00 | INFO | fairseq_cli.train | {'_name': None, 'common': {}}"
    error = "fairseq-san: error: ... switch it with {'task': {'_name': 'translation_san'}}"
    log.write_text(f"INFO:fairseq.tasks:a\n{configuration}\n{other_format}\nINFO:b\n{error}\n")
    result = run_cli("fairseq-san-loop", "log-tail", str(log))
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"INFO:fairseq.tasks:a\nINFO:b\n{error}\n"
    assert run_cli("fairseq-san-loop", "log-tail", str(log), "-n", "1").stdout == f"{error}\n"
    assert run_cli("fairseq-san-loop", "log-tail", str(log), "-n", "0").returncode == 2


@pytest.mark.slow
def test_test_bleu_missing_checkpoint_is_one_clear_error(data, tmp_path):
    result = run_script(TEST_BLEU, str(data), "de", str(tmp_path), f"x={tmp_path}/none.pt",
                        env=cli_env())  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip() == f"test_bleu.sh: x: no checkpoint {tmp_path}/none.pt"


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["..={checkpoint}", "a/b={checkpoint}", "={checkpoint}",
                                  "{checkpoint}"])  # fmt: skip
def test_test_bleu_name_that_is_no_folder_name_is_one_clear_error(data, tmp_path, spec):
    """NAME is the folder whose splits are replaced: '..' replaced OUT_DIR/../test; a bare
    checkpoint path was taken as NAME."""
    checkpoint = tmp_path / "model.pt"
    checkpoint.write_text("")
    spec = spec.format(checkpoint=checkpoint)
    result = run_script(TEST_BLEU, str(data), "de", str(tmp_path / "out"), spec, env=cli_env())
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"test_bleu.sh: '{spec}': give NAME=CHECKPOINT, NAME a folder name (not empty, '.' or "
        "'..', no '/')"
    )


@pytest.mark.slow
def test_aan_with_a_decoder_self_policy_is_one_clear_error(data, tmp_path):
    policy = ["--san-decoder-self-policy", "1,5"]
    argv = train_argv(data, tmp_path / "checkpoints", 10, [*AAN, *policy])
    result = run_cli("fairseq-train", *argv)
    assert result.returncode != 0
    errors = [
        line for line in result.stderr.splitlines() if line.startswith("fairseq-san: error: ")
    ]
    assert len(errors) == 1, result.stderr[-3000:]
    assert "aan" in errors[0]
    assert "Traceback" not in output_of(result), output_of(result)[-3000:]
    assert not (tmp_path / "checkpoints" / "checkpoint_last.pt").exists()


# --- fairseq-san-loop show, fairseq-san-score ---------------------------------------------------


def test_show_prints_a_policy_in_the_papers_notation_and_refuses_bad_files(tmp_path):
    def policy(name: str, text: str) -> str:
        (tmp_path / name).write_text(text)
        return str(tmp_path / name)

    a = policy("a.json", '{"decoder_self": [1, 5], "decoder_encdec": [3, 3], "encoder_self": null}')
    same = policy("same.json", '{"decoder_encdec": "3,3", "decoder_self": [1, 5]}')
    shown = run_cli("fairseq-san-loop", "show", a)
    assert shown.returncode == 0, shown.stderr
    assert "decoder_self {1,5}" in shown.stdout and "decoder_encdec {3,3}" in shown.stdout
    assert run_cli("fairseq-san-loop", "show", same).stdout == shown.stdout
    malformed = run_cli("fairseq-san-loop", "show", policy("bad.json", '{"decoder_self": [1, 5],'))
    assert malformed.returncode == 2
    assert "malformed JSON" in malformed.stderr and "Traceback" not in malformed.stderr
    missing = run_cli("fairseq-san-loop", "show", str(tmp_path / "missing.json"))
    assert missing.returncode == 2 and "Traceback" not in missing.stderr


def test_show_prints_the_kinds_of_the_runs_model(tmp_path):
    """With --run-dir, a language model's run (its record's --lm) shows decoder_self alone; a
    translation run, or a folder without a record, the three kinds."""
    policy = tmp_path / "policy.json"
    policy.write_text('{"decoder_self": [2, 4]}')
    lm_run, translation_run = tmp_path / "lm", tmp_path / "mt"
    lm_run.mkdir(), translation_run.mkdir(), (tmp_path / "no-record").mkdir()
    write_record(str(lm_run), {"--lm": True, "--theta-self": "0.5"})
    write_record(str(translation_run), {"--theta-self": "0.5"})

    def shown(*run_dir: str) -> str:
        result = run_cli("fairseq-san-loop", "show", str(policy), *run_dir)
        assert result.returncode == 0, result.stderr
        return result.stdout.strip()

    assert shown("--run-dir", str(lm_run)) == "decoder_self {2,4}"
    three = "decoder_self {2,4}  decoder_encdec none  encoder_self none"
    assert shown("--run-dir", str(translation_run)) == three
    assert shown("--run-dir", str(tmp_path / "no-record")) == three
    assert shown() == three


def test_user_dir_is_the_package_folder_that_fairseq_imports(tmp_path):
    """What the recipes give --user-dir, from any folder: fairseq imports the plugin from it."""
    printed = run_cli("fairseq-san-loop", "user-dir", cwd=tmp_path)
    assert printed.returncode == 0, printed.stderr
    folder = printed.stdout.strip()
    assert os.path.isabs(folder) and os.path.isfile(os.path.join(folder, "__init__.py"))
    imported = subprocess.run(
        [str(BIN / "python"), "-c",
         "import sys; from argparse import Namespace; from fairseq import utils; "
         "utils.import_user_module(Namespace(user_dir=sys.argv[1])); "
         "from fairseq.models import ARCH_MODEL_REGISTRY; "
         "print('transformer_san' in ARCH_MODEL_REGISTRY)",
         folder],
        cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert imported.stdout.strip().splitlines()[-1] == "True", imported.stderr


GENERATE_OUTPUT = """\
S-1\t▁the ▁cat
T-1\tDie Katze sitzt auf der Matte .
H-1\t-0.31\t▁Die ▁Katze ▁sitzt ▁auf ▁der ▁Matte ▁.
D-1\t-0.31\tDie Katze sitzt auf der Matte .
P-1\t-0.1 -0.2 -0.3 -0.4 -0.5 -0.6 -0.7 -0.8
S-0\t▁a ▁man
H-0\t-0.25\t▁Ein ▁Mann ▁geht ▁mit ▁einem ▁Hund ▁im ▁Park ▁spazieren ▁.
D-0\t-0.25\tEin Mann geht mit einem Hund im Park spazieren .
P-0\t-0.1 -0.2
Generate test with beam=4: BLEU = 100.00
"""
REFERENCES = "Ein Mann geht mit einem Hund im Park spazieren .\nDie Katze sitzt auf der Matte .\n"


def test_score_identical_text_is_bleu_100(tmp_path):
    (tmp_path / "generate-test.txt").write_text(GENERATE_OUTPUT, encoding="utf-8")
    (tmp_path / "ref.de").write_text(REFERENCES, encoding="utf-8")
    result = run_cli(
        "fairseq-san-score", str(tmp_path / "generate-test.txt"),
        "--reference", str(tmp_path / "ref.de"), "-o", str(tmp_path / "scores.json"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    bleu_line = r"BLEU = 100\.00  nrefs:1\|case:mixed\|eff:no\|tok:13a\|smooth:exp\|version:\S+"
    assert re.fullmatch(bleu_line, lines[0])
    assert re.fullmatch(r"chrF = 100\.00  nrefs:1\|.*", lines[1])
    scores = read_json(tmp_path / "scores.json")
    assert scores["bleu"] == 100.0 and scores["chrf"] == 100.0 and scores["sentences"] == 2
    assert lines[0].endswith(scores["bleu_signature"])
    # A reference file of another length: one error line, exit 2.
    (tmp_path / "short.de").write_text(REFERENCES.splitlines()[0] + "\n", encoding="utf-8")
    short = run_cli(
        "fairseq-san-score", str(tmp_path / "generate-test.txt"),
        "--reference", str(tmp_path / "short.de"),
    )  # fmt: skip
    assert short.returncode == 2
    assert one_error_line(short, "fairseq-san-score").endswith(
        "2 hypotheses but 1 references: give the raw references of every sentence decoded (the "
        "file is cut short?)")  # fmt: skip (it said fairseq-generate had skipped sentences)
    # One more, empty, line at the end: named as such (not "must not skip sentences").
    blank = score(tmp_path, GENERATE_OUTPUT, REFERENCES + "\n")
    assert one_error_line(blank, "fairseq-san-score").endswith(
        "2 hypotheses but 3 references: the references end with 1 empty line(s): remove them (a "
        "sentence per line, no blank line at the end)")  # fmt: skip
    # A folder that takes no new file: one error line after the scores, exit 2.
    unwritable = score(tmp_path, GENERATE_OUTPUT, REFERENCES, "-o", "/proc/scores.json")
    assert unwritable.stderr.strip().splitlines()[-1] == (
        "fairseq-san-score: error: -o /proc/scores.json: cannot write it: No such file or directory"
    )
    assert unwritable.returncode == 2 and "Traceback" not in unwritable.stderr


@pytest.mark.slow
@pytest.mark.parametrize("where", ["--results-path", "stdout"])
def test_score_refuses_score_reference_output(binarized_corpus, san_checkpoint, tmp_path, where):
    """fairseq-generate --score-reference prints the references as its D- lines: they scored as a
    perfect translation (BLEU 100 here, 98 on Multi30k) without a word. Where the output holds
    fairseq-generate's log (``2>&1``), its configuration says so: refused; where it does not
    (``--results-path``, or standard output alone), each H- line is its T- line: a warning."""
    generate = [
        "fairseq-generate", str(binarized_corpus), "--user-dir", "fairseq_san",
        "--task", "translation_san", "--path", str(san_checkpoint), "--gen-subset", "test",
        "--score-reference", "--batch-size", "8", "--cpu",
    ]  # fmt: skip
    output = tmp_path / "generate-test.txt"
    if where == "stdout":
        generated = run_cli(*generate)
        output.write_text(generated.stdout, encoding="utf-8")
        logged = tmp_path / "logged.txt"
        logged.write_text(generated.stderr + generated.stdout, encoding="utf-8")  # as 2>&1
    else:
        generated = run_cli(*generate, "--results-path", str(tmp_path))
    assert generated.returncode == 0, generated.stderr[-3000:]
    references = str(binarized_corpus.parent / "raw" / "test.tgt")
    warned = run_cli("fairseq-san-score", str(output), "--reference", references)
    assert warned.returncode == 0 and warned.stdout.startswith("BLEU = 100.00"), warned.stderr
    assert warned.stderr.strip().splitlines()[-1] == (
        f"fairseq-san-score: warning: {output}: each of the 20 hypotheses is its sentence's "
        "reference, token for token (its H- line is its T- line): is it fairseq-generate "
        "--score-reference output? That prints the references as hypotheses"
    )
    if where == "stdout":
        refused = run_cli("fairseq-san-score", str(logged), "--reference", references)
        assert one_error_line(refused, "fairseq-san-score") == (
            f"fairseq-san-score: error: {logged} is fairseq-generate --score-reference output "
            "(its logged configuration says so): its D- lines are the references, not "
            "translations; generate again without --score-reference"
        )


def test_score_refuses_to_write_over_a_file_it_scores(tmp_path):
    """``-o`` naming the reference or an output replaced it with the scores' JSON."""
    (tmp_path / "generate-test.txt").write_text(GENERATE_OUTPUT, encoding="utf-8")
    for named in ("ref.de", "generate-test.txt"):
        (tmp_path / "ref.de").write_text(REFERENCES, encoding="utf-8")
        result = score(tmp_path, GENERATE_OUTPUT, REFERENCES, "-o", str(tmp_path / named))
        assert one_error_line(result, "fairseq-san-score") == (
            f"fairseq-san-score: error: -o {tmp_path / named}: is the input {tmp_path / named}: "
            "write the scores to another file"
        )
        assert (tmp_path / "ref.de").read_text(encoding="utf-8") == REFERENCES


def test_score_refuses_an_empty_output_name(tmp_path):
    """``-o ""`` (an unset variable) scored, wrote nothing and exited 0."""
    result = score(tmp_path, GENERATE_OUTPUT, REFERENCES, "-o", "")
    assert one_error_line(result, "fairseq-san-score") == (
        "fairseq-san-score: error: -o : is empty: name the scores to write"
    )


NBEST_OUTPUT = """\
S-0\t▁a ▁man
H-0\t-0.25\t▁Ein ▁Mann ▁geht ▁.
D-0\t-0.25\tEin Mann geht .
H-0\t-0.90\t▁Ein ▁Hund ▁geht ▁.
D-0\t-0.90\tEin Hund geht .
S-1\t▁the ▁cat
H-1\t-0.31\t▁Die ▁Katze ▁sitzt ▁.
D-1\t-0.31\tDie Katze sitzt .
H-1\t-0.95\t▁Der ▁Hund ▁sitzt ▁.
D-1\t-0.95\tDer Hund sitzt .
"""


def score(tmp_path: Path, generated: str, references: str, *extra: str):
    """fairseq-san-score on ``generated`` (the file's text) against ``references``."""
    (tmp_path / "generate-test.txt").write_text(generated, encoding="utf-8")
    (tmp_path / "ref.de").write_text(references, encoding="utf-8")
    return run_cli(
        "fairseq-san-score", str(tmp_path / "generate-test.txt"),
        "--reference", str(tmp_path / "ref.de"), *extra,
    )  # fmt: skip


def test_score_dash_is_standard_input_and_output(tmp_path):
    """``fairseq-generate ... | fairseq-san-score - --reference REF`` read a file named "-" (or
    none), and ``-o -`` wrote the JSON silently to a file named "-" in the working folder."""
    (tmp_path / "ref.de").write_text(REFERENCES, encoding="utf-8")
    (tmp_path / "generate-test.txt").write_text(GENERATE_OUTPUT, encoding="utf-8")
    piped = run_cli("fairseq-san-score", "-", "--reference", str(tmp_path / "ref.de"), "-o", "-",
                    input=GENERATE_OUTPUT, cwd=tmp_path)  # fmt: skip
    assert piped.returncode == 0, output_of(piped)[-3000:]
    assert json.loads(piped.stdout)["bleu"] == 100.0 and piped.stderr.startswith("BLEU = 100.00")
    referenced = run_cli("fairseq-san-score", str(tmp_path / "generate-test.txt"), "--reference",
                         "-", input=REFERENCES, cwd=tmp_path)  # fmt: skip
    assert referenced.returncode == 0 and referenced.stdout.startswith("BLEU = 100.00"), (
        output_of(referenced)
    )
    for second in ("-", "/dev/stdin", "/dev/fd/0"):  # each name of it: read twice, a count error
        twice = run_cli("fairseq-san-score", "-", "--reference", second, input=REFERENCES,
                        cwd=tmp_path)  # fmt: skip
        assert one_error_line(twice, "fairseq-san-score") == (
            "fairseq-san-score: error: standard input is given twice: it holds one file"
        )
    junk = run_cli("fairseq-san-score", "-", "--reference", str(tmp_path / "ref.de"),
                   input=REFERENCES, cwd=tmp_path)  # fmt: skip
    assert one_error_line(junk, "fairseq-san-score") == (  # not "/dev/stdin", never typed
        "fairseq-san-score: error: standard input holds no D- lines: it is not "
        "fairseq-generate's output"
    )
    assert sorted(path.name for path in tmp_path.iterdir()) == ["generate-test.txt", "ref.de"]


def one_error_line(result: subprocess.CompletedProcess, prog: str) -> str:
    """The command failed (exit 2), its last line ``PROG: error: ...``, no traceback; the line."""
    assert result.returncode == 2, output_of(result)[-3000:]
    assert result.stdout == ""
    line = result.stderr.strip().splitlines()[-1]  # after argparse's usage line
    assert line.startswith(f"{prog}: error: ") and "Traceback" not in result.stderr, result.stderr
    return line


def test_score_of_nbest_output_is_the_best_hypothesis(tmp_path):
    result = score(tmp_path, NBEST_OUTPUT, "Ein Mann geht .\nDie Katze sitzt .\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("BLEU = 100.00 ")


@pytest.mark.parametrize("post_process, generated", [
    ("sentencepiece", GENERATE_OUTPUT.replace("D-1\t-0.31\tDie Katze", "D-1\t-0.31\t▁Die ▁Katze")),
    ("subword_nmt", "D-0\t-0.2\tEin Ma@@ nn geht .\nD-1\t-0.3\tDie Katze sitzt .\n"),
    ("subword_nmt", "D-0\t-0.2\tEin Mann geht .\nD-1\t-0.3\tDie Katze sitzt@@\n"),  # at the end
])  # fmt: skip
def test_score_refuses_text_that_was_not_detokenized(tmp_path, post_process, generated):
    line = one_error_line(score(tmp_path, generated, REFERENCES), "fairseq-san-score")
    assert f"rerun fairseq-generate with --post-process {post_process}" in line, line
    assert "D-" in line and "generate-test.txt" in line, line


def test_score_refuses_pieces_in_the_targets_alone(tmp_path):
    """Without --post-process a weak model's hypotheses can hold no word-initial piece ("in in
    in"), while the T- lines, detokenized by the same flag, hold them: refused, naming T-0 (it
    was scored as words)."""
    generated = "T-0\t▁Ein ▁Mann ▁geht ▁.\nD-0\t-0.2\tin in in\nD-1\t-0.3\tin in\n"
    line = one_error_line(score(tmp_path, generated, REFERENCES), "fairseq-san-score")
    assert line.endswith(
        "generate-test.txt: T-0 holds sentencepiece pieces ('▁'): rerun fairseq-generate with "
        "--post-process sentencepiece, or detokenize"
    ), line


@pytest.mark.parametrize("hypothesis", ["@@", "E-Mail @@ Adresse", "Preis : 5 @@"])
def test_score_takes_marks_that_are_text_not_pieces(tmp_path, hypothesis):
    """A subword-nmt mark ends a piece of a word; "@@" on its own (or after a space) is text a
    model wrote, as the plain AAN of the converged campaign did for one test_2017 sentence
    (sentencepiece data, detokenized): scored, not refused as undetokenized."""
    generated = f"D-0\t-0.2\tEin Mann geht .\nD-1\t-0.3\t{hypothesis}\n"
    result = score(tmp_path, generated, REFERENCES)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("BLEU = "), result.stdout


@pytest.mark.parametrize("generated, references, needle", [
    ("", REFERENCES.encode(), "generate-test.txt holds no D- lines"),
    ("", b"", "ref.de is empty"),  # read first: its count says which sentences are missing
    (GENERATE_OUTPUT, b"", "ref.de is empty"),
    (GENERATE_OUTPUT, "Ein Mann \xe9\n".encode("latin-1"), "ref.de is not UTF-8 text"),
])  # fmt: skip
def test_score_of_empty_or_undecodable_files_is_one_line(tmp_path, generated, references, needle):
    (tmp_path / "generate-test.txt").write_text(generated, encoding="utf-8")
    (tmp_path / "ref.de").write_bytes(references)
    result = run_cli("fairseq-san-score", str(tmp_path / "generate-test.txt"),
                     "--reference", str(tmp_path / "ref.de"))  # fmt: skip
    assert needle in one_error_line(result, "fairseq-san-score")


@pytest.mark.parametrize("generated, references, missing", [
    ("D-5\t-0.2\tEin Mann geht .\n", "Ein Mann geht .\n",
     "no D- line for sentence 0 (5 of sentences 0-5 missing)"),
    (GENERATE_OUTPUT.replace("D-0\t", "X-0\t"), REFERENCES,
     "no D- line for sentence 0 (1 of sentences 0-1 missing)"),
    # a stray id: the gaps were counted in a set of every id up to it (memory without end)
    (GENERATE_OUTPUT + "D-300000000000\t-0.1\tx\n", REFERENCES,
     "no D- line for sentence 2 (299999999998 of sentences 0-300000000000 missing)"),
    # the last sentences too, of the references' count: it said "1 of sentences 0-1"
    (GENERATE_OUTPUT.replace("D-0\t", "X-0\t"), REFERENCES + "Ein Hund .\nEin Ball .\n",
     "no D- line for sentence 0 (3 of sentences 0-3 missing)"),
])  # fmt: skip
def test_score_refuses_output_with_a_sentence_missing(tmp_path, generated, references, missing):
    """Hypotheses are paired with references by sentence id: a gap would pair a hypothesis with
    another sentence's reference (one D-5 line against a one-line reference scored it)."""
    line = one_error_line(score(tmp_path, generated, references), "fairseq-san-score")
    assert missing in line, line


def test_score_refuses_two_generate_outputs_appended_into_one_file(tmp_path):
    """fairseq-generate ... >> out twice: the first run's D- lines were scored, the second's
    read as n-best lists. A sentence's second S- line is one line naming it; n-best output,
    whose S- line is one per sentence, is scored (``test_score_of_nbest_output_...``)."""
    second = GENERATE_OUTPUT.replace("Die Katze sitzt", "Der Hund liegt")
    line = one_error_line(score(tmp_path, GENERATE_OUTPUT + second, REFERENCES),
                          "fairseq-san-score")  # fmt: skip
    assert line == (
        f"fairseq-san-score: error: {tmp_path / 'generate-test.txt'}: sentence 1 is there twice "
        "(two S-1 lines): two fairseq-generate outputs in one file? Score each run's own file"
    )


SENTENCES = [f"ein mann {word} mit {n} hunden im park ." for n, word in
             enumerate(["geht", "läuft", "steht", "sitzt", "spielt"] * 6)]  # fmt: skip


def generate_output(hypotheses: List[str]) -> str:
    """fairseq-generate's output (D- and T- lines) of ``hypotheses`` for ``SENTENCES``."""
    lines = [f"T-{i}\t{reference}\nD-{i}\t-0.5\t{hypothesis}\n"
             for i, (hypothesis, reference) in enumerate(zip(hypotheses, SENTENCES))]  # fmt: skip
    return "".join(lines)


def test_score_compares_two_systems_by_paired_bootstrap(tmp_path):
    """--baseline: the BLEU difference, its 95% interval and a verdict that says better or worse
    only where the interval excludes 0 (sacreBLEU's paired bootstrap, as the converged campaign
    tests its systems)."""
    (tmp_path / "ref.de").write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    truncated = [" ".join(sentence.split()[:-3]) for sentence in SENTENCES]
    for name, hypotheses in (("exact.txt", SENTENCES), ("short.txt", truncated)):
        (tmp_path / name).write_text(generate_output(hypotheses), encoding="utf-8")

    def compare(system: str, baseline: str):
        result = run_cli(
            "fairseq-san-score", str(tmp_path / system), "--baseline", str(tmp_path / baseline),
            "--reference", str(tmp_path / "ref.de"), "--bootstrap-samples", "200",
            "-o", str(tmp_path / "scores.json"),
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        return result.stdout.splitlines()[-1], read_json(tmp_path / "scores.json")

    line, scores = compare("exact.txt", "short.txt")
    test = scores["paired_bootstrap"]
    assert test["system_bleu"] == 100.0 and 0 < test["baseline_bleu"] < 100
    assert test["interval_95"][0] > 0 and test["verdict"] == f"{tmp_path / 'exact.txt'} better"
    assert line == (
        f"against --baseline {tmp_path / 'short.txt'} (paired bootstrap, 200 samples): BLEU "
        f"100.00 vs {test['baseline_bleu']:.2f}, difference {test['difference']:+.2f} (95% "
        f"interval {test['interval_95'][0]:+.2f} to {test['interval_95'][1]:+.2f}, p = "
        f"{test['p_value']:.4f}): {test['verdict']}"
    )
    assert compare("short.txt", "exact.txt")[1]["paired_bootstrap"]["verdict"].endswith(" worse")
    same = compare("exact.txt", "exact.txt")[1]["paired_bootstrap"]
    assert (same["difference"], same["interval_95"], same["verdict"]) == (0.0, [0.0, 0.0],
                                                                          "inconclusive")
    # A baseline of another subset (one sentence fewer): one line naming it.
    (tmp_path / "fewer.txt").write_text(generate_output(SENTENCES[:-1]), encoding="utf-8")
    result = run_cli("fairseq-san-score", str(tmp_path / "exact.txt"), "--baseline",
                     str(tmp_path / "fewer.txt"), "--reference", str(tmp_path / "ref.de"))
    assert one_error_line(result, "fairseq-san-score").startswith(
        f"fairseq-san-score: error: {tmp_path / 'fewer.txt'}: 29 hypotheses but 30 references: ")


def test_score_refuses_an_output_given_twice_and_reads_sacrebleus_seed(tmp_path, monkeypatch):
    """One output given twice was scored as two seeds (a permutation test over 3 splits of one
    run); sacreBLEU's own SACREBLEU_SEED=None (a random seed) was "invalid literal for int()";
    resamples beyond the memory a numpy traceback."""
    (tmp_path / "ref.de").write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    output, baseline = tmp_path / "san.txt", tmp_path / "base.txt"
    output.write_text(generate_output(SENTENCES), encoding="utf-8")
    baseline.write_text(generate_output([s.split()[0] for s in SENTENCES]), encoding="utf-8")
    (tmp_path / "link.txt").symlink_to(output)
    os.link(output, tmp_path / "hard.txt")
    reference = ("--reference", str(tmp_path / "ref.de"))
    for given, named in (
        ((str(output), str(tmp_path / "link.txt"), "--baseline", str(baseline)), str(output)),
        ((str(output), str(tmp_path / "hard.txt"), "--baseline", str(baseline)),
         f"{tmp_path / 'hard.txt'} (one file with {output})"),
        ((str(output), "--baseline", str(baseline), str(baseline)), f"--baseline {baseline}"),
    ):
        result = run_cli("fairseq-san-score", *given, *reference)
        assert one_error_line(result, "fairseq-san-score") == (
            f"fairseq-san-score: error: {named} is given twice: give each seed's output once"
        )
    compressed = tmp_path / "san.txt.gz"  # the same run under another name and form
    compressed.write_bytes(gzip.compress(output.read_bytes()))
    result = run_cli("fairseq-san-score", str(output), str(compressed), "--baseline",
                     str(baseline), *reference)  # fmt: skip
    assert one_error_line(result, "fairseq-san-score") == (
        f"fairseq-san-score: error: {output} and {compressed} hold the same hypotheses, sentence "
        "for sentence: one run given twice (a copy?); give each seed's output once"
    )
    compared = (str(output), "--baseline", str(baseline), *reference)
    result = run_cli("fairseq-san-score", *compared, "--bootstrap-samples", "1000000000000")
    assert one_error_line(result, "fairseq-san-score") == (
        "fairseq-san-score: error: --bootstrap-samples 1000000000000: too many resamples of this "
        "test set for this machine's memory; lower it (sacreBLEU's default: 1000)"
    )
    result = run_cli("fairseq-san-score", *compared, "--bootstrap-samples", "10" * 12)
    assert one_error_line(result, "fairseq-san-score").startswith(  # an OverflowError traceback
        f"fairseq-san-score: error: --bootstrap-samples {'10' * 12}: too many resamples of this "
    )
    # One resample gave an "interval" that was that resample, and a verdict "better" at p = 0.5.
    result = run_cli("fairseq-san-score", *compared, "--bootstrap-samples", "39")
    assert one_error_line(result, "fairseq-san-score") == (
        "fairseq-san-score: error: --bootstrap-samples 39: a 95% interval needs at least 40 "
        "resamples, 2.5% of them beyond each end (sacreBLEU's default: 1000)"
    )
    # One run a seed of both sides: the permutation test counted it for both systems (one
    # output against itself stays a check: test_score_compares_two_systems_by_paired_bootstrap).
    hard = tmp_path / "hard.txt"
    for given, named in (
        ((str(output), "--baseline", str(baseline), str(output)), str(output)),
        ((str(output), "--baseline", str(baseline), str(hard)), f"{hard} (one file with {output})"),
    ):
        result = run_cli("fairseq-san-score", *given, *reference)
        assert one_error_line(result, "fairseq-san-score") == (
            f"fairseq-san-score: error: {named} is both a seed of the system and of the "
            "--baseline: give each run on one side"
        )
    monkeypatch.setenv("SACREBLEU_SEED", "None")
    result = run_cli("fairseq-san-score", *compared, "--bootstrap-samples", "50")
    assert result.returncode == 0 and result.stdout.splitlines()[-1].endswith(" better"), (
        result.stderr)  # fmt: skip
    for seed in ("seven", "-1"):  # -1: numpy's "expected non-negative integer", naming neither
        monkeypatch.setenv("SACREBLEU_SEED", seed)
        result = run_cli("fairseq-san-score", *compared, "--bootstrap-samples", "50")
        assert one_error_line(result, "fairseq-san-score") == (
            f"fairseq-san-score: error: SACREBLEU_SEED='{seed}': give a non-negative integer, or "
            "None for a random seed"
        )


def test_score_compares_seeds_by_the_exact_permutation_test(tmp_path):
    """Several outputs on either side are one system's seeds: each file's scores, the paired
    bootstrap of each seed against the baseline's of its place, and the permutation test of the
    seeds' BLEU (its 95% interval only where the seeds allow one: 3 against 3 cannot reject)."""
    (tmp_path / "ref.de").write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    names = {"san": [], "base": []}
    for seed in range(4):
        for system, cut in (("san", 1), ("base", 3)):  # the baseline drops more words
            hypotheses = [" ".join(sentence.split()[:-cut]) if i % 4 != seed else sentence
                          for i, sentence in enumerate(SENTENCES)]  # fmt: skip
            path = tmp_path / f"{system}{seed}.txt"
            path.write_text(generate_output(hypotheses), encoding="utf-8")
            names[system].append(str(path))

    def compare(seeds: int, baseline_seeds: Optional[int] = None):
        baseline_seeds = seeds if baseline_seeds is None else baseline_seeds
        result = run_cli(
            "fairseq-san-score", *names["san"][:seeds],
            "--baseline", *names["base"][:baseline_seeds],
            "--reference", str(tmp_path / "ref.de"), "--bootstrap-samples", "100",
            "-o", str(tmp_path / "scores.json"),
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        return result.stdout.splitlines(), read_json(tmp_path / "scores.json")

    lines, scores = compare(4)
    assert [file["file"] for file in scores["systems"] + scores["baselines"]] == (
        names["san"] + names["base"])  # fmt: skip
    assert [test["verdict"] for test in scores["paired_bootstrap"]] == [
        f"{name} better" for name in names["san"]]  # fmt: skip
    seeds = scores["seeds"]
    assert (seeds["seeds"], seeds["against_seeds"], seeds["splits"]) == (4, 4, 70)
    assert seeds["p_value"] == round(2 / 70, 4)  # every san seed above every baseline seed
    low, high = seeds["interval_95"]
    assert 0 < low <= seeds["difference"] <= high
    assert lines[0] == f"{names['san'][0]}: BLEU = {scores['systems'][0]['bleu']:.2f}  chrF = " + (
        f"{scores['systems'][0]['chrf']:.2f}")  # fmt: skip
    assert lines[-1] == (
        f"over seeds (4 against 4, exact permutation test): mean BLEU difference "
        f"{seeds['difference']:+.2f} (95% interval {low:+.2f} to {high:+.2f}, p = 0.0286 over 70 "
        "splits)"
    )
    lines, scores = compare(3)
    assert scores["seeds"]["interval_95"] is None
    assert lines[-1].endswith("(too few seeds for a 95% interval, p = 0.1000 over 20 splits)")
    # Sides of different sizes: each seed against the baseline's of its place, the one left
    # over named (it was passed over without a word); a single baseline: against every seed.
    lines, scores = compare(3, 4)
    assert [test["verdict"] for test in scores["paired_bootstrap"]] == [
        f"{name} better" for name in names["san"][:3]]  # fmt: skip
    assert lines[-2] == (
        f"no paired bootstrap for {names['base'][3]}: no seed of its place on the other side")
    lines, scores = compare(3, 1)
    assert [line.split(" (paired")[0] for line in lines if line.startswith("against")] == [
        f"against --baseline {names['base'][0]}"] * 3  # fmt: skip
    assert [test["verdict"] for test in scores["paired_bootstrap"]] == [
        f"{name} better" for name in names["san"][:3]]  # fmt: skip


def test_score_reads_gzip_compressed_files_and_names_a_broken_one(tmp_path):
    """Kept hypotheses are stored gzip-compressed (docs/results/converged), and so are Multi30k's
    raw references: either file scores as its text does, whatever its name (a compressed
    reference was "not UTF-8 text: convert it with iconv"); a truncated one is one error line."""
    packed = gzip.compress(GENERATE_OUTPUT.encode("utf-8"))
    references = gzip.compress(REFERENCES.encode("utf-8"))
    for output, reference, needle in (
        (packed, REFERENCES.encode("utf-8"), None),
        (GENERATE_OUTPUT.encode("utf-8"), references, None),  # plain text named .gz
        (packed, references, None),
        (packed[: len(packed) // 2], references, "generate-test.txt.gz is not a whole gzip file "
                                                 "(Compressed file ended"),
        (packed, references[: len(references) // 2], "ref.de is not a whole gzip file"),
    ):  # fmt: skip
        (tmp_path / "generate-test.txt.gz").write_bytes(output)
        (tmp_path / "ref.de").write_bytes(reference)
        result = run_cli("fairseq-san-score", str(tmp_path / "generate-test.txt.gz"),
                         "--reference", str(tmp_path / "ref.de"))  # fmt: skip
        if needle is None:
            assert result.returncode == 0 and result.stdout.startswith("BLEU = 100.00 "), result.stderr
            continue
        assert needle in one_error_line(result, "fairseq-san-score")


TARGETED_OUTPUT = """\
S-0\t▁a ▁man
T-0\tEin Mann geht .
D-0\t-0.2\tEin Mann geht .
S-1\t▁the ▁cat
T-1\tDie <unk> sitzt .
D-1\t-0.3\tDie Katze sitzt .
S-2\t▁two ▁dogs
T-2\tZwei  Hunde laufen .
D-2\t-0.3\tZwei Hunde rennen .
"""


def test_score_refuses_references_of_another_subset(tmp_path):
    """test and test1 of Multi30k have 1,000 lines each: the other split's references (or the
    source side) scored without a word; fairseq-generate's own targets (T- lines, detokenized,
    unknown words aside) tell them apart."""
    right = "Ein Mann geht .\nDie Katze sitzt .\nZwei Hunde laufen .\n"
    assert score(tmp_path, TARGETED_OUTPUT, right).returncode == 0
    normalized = TARGETED_OUTPUT.replace("T-0\tEin Mann geht .", "T-0\tEin Mann , geht")
    raw = "Ein Mann\uff0cgeht\nDie Katze sitzt .\nZwei Hunde laufen.\n"  # full-width comma, no spaces
    assert score(tmp_path, normalized, raw).returncode == 0  # sentencepiece's NFKC, a tokenizer
    one_off = "Ein Mann geht .\nDie Katze sitzt .\nDrei Hunde laufen .\n"  # 1 of 2 compared
    assert score(tmp_path, TARGETED_OUTPUT, one_off).returncode == 0
    other = "Eine Frau liest .\nDie Katze sitzt .\nEin Kind spielt .\n"
    line = one_error_line(score(tmp_path, TARGETED_OUTPUT, other), "fairseq-san-score")
    assert line == (
        f"fairseq-san-score: error: {tmp_path / 'ref.de'} is not the reference of "
        f"{tmp_path / 'generate-test.txt'}: 2 of its 2 targets (T- lines) read otherwise, the "
        "first at line 1 (T-0: 'Ein Mann geht .', the reference: 'Eine Frau liest .'): give the "
        "raw references of the subset decoded (--gen-subset test1: text/test1.raw.TGT)"
    )


def test_score_refuses_references_out_of_line_with_the_output(tmp_path):
    """A reference file that lost a line in its second half (and has one more at its end) is out
    of line for under half of the targets, which the check of another subset lets pass: those
    sentences were scored against their neighbours' references without a word."""
    lost = [*SENTENCES[:20], *SENTENCES[21:], "ein hund ."]
    result = score(tmp_path, generate_output(SENTENCES), "\n".join(lost) + "\n")
    assert one_error_line(result, "fairseq-san-score") == (
        f"fairseq-san-score: error: {tmp_path / 'ref.de'} is out of line with "
        f"{tmp_path / 'generate-test.txt'}: 9 targets (T- lines) read as another line of it, the "
        "first T-21 as line 21, not 22: a line added or lost before it; give the raw references "
        "of the subset, as they were binarized"
    )


def test_score_refuses_generate_output_as_the_reference(tmp_path):
    """The output given as --reference (the arguments swapped, or the output as both) was read
    as references: "2 hypotheses but 10 references: score the whole subset", or, swapped, the
    raw text blamed for holding no D- lines."""
    output = tmp_path / "generate-test.txt"
    output.write_text(GENERATE_OUTPUT, encoding="utf-8")
    (tmp_path / "ref.de").write_text(REFERENCES, encoding="utf-8")
    for given in (str(output), str(tmp_path / "ref.de")):
        result = run_cli("fairseq-san-score", given, "--reference", str(output))
        assert one_error_line(result, "fairseq-san-score") == (
            f"fairseq-san-score: error: {output} is fairseq-generate's output (line 4 is a D- "
            "line), not raw references: give it as GENERATE_OUTPUT and the raw text of the "
            "subset decoded as --reference (text/SPLIT.raw.TGT)"
        )


def test_score_refuses_a_sacrebleu_seed_of_0(tmp_path, monkeypatch):
    """sacreBLEU's paired test seeds its resamples with None where SACREBLEU_SEED is 0: its p
    changed from run to run (0.0130, 0.0080) under a signature saying seed:0, and was drawn from
    other resamples than the interval, which numpy seeded with 0."""
    (tmp_path / "ref.de").write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    output, baseline = tmp_path / "san.txt", tmp_path / "base.txt"
    output.write_text(generate_output(SENTENCES), encoding="utf-8")
    baseline.write_text(generate_output([s.split()[0] for s in SENTENCES]), encoding="utf-8")
    monkeypatch.setenv("SACREBLEU_SEED", "0")
    result = run_cli("fairseq-san-score", str(output), "--baseline", str(baseline),
                     "--reference", str(tmp_path / "ref.de"), "--bootstrap-samples", "50")
    assert one_error_line(result, "fairseq-san-score") == (
        "fairseq-san-score: error: SACREBLEU_SEED='0': sacreBLEU's paired bootstrap takes 0 as no "
        "seed (its p changes from run to run, its signature saying seed:0): give another "
        "integer, or None for a random seed"
    )


def score_through_pipes(tmp_path: Path, generated: bytes, references: bytes):
    """fairseq-san-score given both files through bash's process substitution (``<(cat FILE)``),
    as one gives ``--reference <(zcat ref.de.gz)``: pipes, which can be read once only."""
    (tmp_path / "generate-test.txt").write_bytes(generated)
    (tmp_path / "ref.de").write_bytes(references)
    return subprocess.run(
        ["bash", "-c", 'fairseq-san-score <(cat "$1") --reference <(cat "$2")', "bash",
         str(tmp_path / "generate-test.txt"), str(tmp_path / "ref.de")],
        env=cli_env(), capture_output=True, text=True, timeout=240,
    )  # fmt: skip


def test_score_reads_its_files_from_pipes(tmp_path):
    """A file's first bytes were read to look for gzip's magic and the file opened again: from a
    pipe the reference read as empty ("/dev/fd/62 is empty"), the output as "no D- lines"; and
    the output's targets (the reference check) were read in a second pass, from the emptied pipe,
    so other references scored without a word."""
    right = "Ein Mann geht .\nDie Katze sitzt .\nZwei Hunde laufen .\n"
    for references in (right.encode(), gzip.compress(right.encode())):
        result = score_through_pipes(tmp_path, TARGETED_OUTPUT.encode(), references)
        assert result.returncode == 0 and result.stdout.startswith("BLEU = "), result.stderr
    packed = gzip.compress(TARGETED_OUTPUT.encode())
    assert score_through_pipes(tmp_path, packed, right.encode()).returncode == 0
    other = "Eine Frau liest .\nDie Katze sitzt .\nEin Kind spielt .\n"
    result = score_through_pipes(tmp_path, TARGETED_OUTPUT.encode(), other.encode())
    assert "is not the reference of /dev/fd/" in one_error_line(result, "fairseq-san-score")


@pytest.mark.parametrize("glued", ["EinManngeht.", "EinMa@@nngeht."], ids=["words", "subword-nmt"])
def test_score_refuses_targets_glued_by_sentencepiece_post_processing(tmp_path, glued):
    """--post-process sentencepiece on words (or subword-nmt pieces) deletes every space: the
    output scored BLEU 1.06 without a word (43.42 with --post-process none), and subword-nmt's
    glued "Ma@@nn" was blamed on the references."""
    def line(text: str) -> str:
        return "".join(text.split()) if glued.startswith("EinMann") else text.replace(
            "Mann", "Ma@@nn").replace(" ", "")  # fmt: skip

    output = "".join(f"T-{i}\t{line(text)}\nD-{i}\t-0.2\t{line(text)}\n"
                     for i, text in enumerate(["Ein Mann geht .", "Die Katze sitzt ."]))
    result = score(tmp_path, output, "Ein Mann geht .\nDie Katze sitzt .\n")
    assert one_error_line(result, "fairseq-san-score") == (
        f"fairseq-san-score: error: {tmp_path / 'generate-test.txt'}: 2 of its 2 targets (T- "
        f"lines) have lost the spaces their references have (T-0: '{glued}'): "
        "fairseq-generate's --post-process sentencepiece removes every space of text that is "
        "not sentencepiece pieces; rerun it with the --post-process of your data's segmentation "
        "(subword_nmt, or none for words)"
    )
    one_word = "T-0\tJa\nD-0\t-0.2\tJa\nT-1\tNein .\nD-1\t-0.2\tNein .\n"  # a word: its own
    assert score(tmp_path, one_word, "Ja\nNein .\n").returncode == 0
    unspaced = "T-0\t私は学生です。\nD-0\t-0.2\t私は学生です。\n"  # references segmented
    assert score(tmp_path, unspaced, "私 は 学生 です 。\n").returncode == 0


def test_score_refuses_references_in_another_unicode_normalization(tmp_path):
    """Raw references in NFD (a Mac's export) against sentencepiece's output, which is NFKC: each
    accented word scored as wrong (58.54 BLEU read 45.49 on 40 Multi30k lines, as sacreBLEU's CLI
    reads it), without a word; the targets (T- lines) differ from them in nothing else."""
    texts = ["Un homme marche dans le parc .", "Le café est fermé ."]
    output = "".join(f"T-{i}\t{text}\nD-{i}\t-0.2\t{text}\n" for i, text in enumerate(texts))
    decomposed = "".join(unicodedata.normalize("NFD", text) + "\n" for text in texts)
    assert one_error_line(score(tmp_path, output, decomposed), "fairseq-san-score") == (
        f"fairseq-san-score: error: {tmp_path / 'ref.de'} is in another Unicode normalization "
        f"than {tmp_path / 'generate-test.txt'}'s text: 1 of its lines differ from their targets "
        "(T- lines) in it alone, the first line 2 (T-1: 'Le café est fermé .'), so the same "
        "words score as different; normalize the references to NFC first (uconv -x any-nfc)"
    )
    assert score(tmp_path, output, "".join(text + "\n" for text in texts)).returncode == 0


def test_score_warns_of_references_in_another_compatibility_form(tmp_path):
    """A reference's ligature "\ufb01" (sentencepiece writes "fi") scored as a wrong word, without
    a word said: the lines differing in NFKC alone are counted, the first named."""
    texts = ["Un homme marche .", "Le profil est fermé .", "Un fil ."]
    output = "".join(f"T-{i}\t{text}\nD-{i}\t-0.2\t{text}\n" for i, text in enumerate(texts))
    references = "Un homme marche .\nLe pro\ufb01l est fermé .\nUn \ufb01l .\n"
    scored = score(tmp_path, output, references)
    assert scored.returncode == 0
    assert (
        f"fairseq-san-score: warning: {tmp_path / 'ref.de'}: 2 of its lines differ from "
        f"{tmp_path / 'generate-test.txt'}'s targets (T- lines) in their NFKC normalization alone, "
        "the first line 2 (T-1: 'Le profil est fermé .'): characters sentencepiece writes "
        "otherwise score as different; to score them as the model writes them, normalize the "
        "references to NFKC (uconv -x any-nfkc)\n"
    ) in scored.stderr
    assert "warning" not in score(tmp_path, output, "".join(t + "\n" for t in texts)).stderr


def test_score_refuses_a_paired_bootstrap_of_one_sentence(tmp_path):
    """Every resample of a one-sentence test set is that sentence: the interval was a point
    ("+65.14 to +65.14") and the verdict "better", a significance no test showed."""
    (tmp_path / "base.txt").write_text("T-0\tEin Mann geht .\nD-0\t-0.2\tEin Hund\n")
    result = score(tmp_path, "T-0\tEin Mann geht .\nD-0\t-0.2\tEin Mann geht .\n",
                   "Ein Mann geht .\n", "--baseline", str(tmp_path / "base.txt"))
    assert one_error_line(result, "fairseq-san-score") == (
        "fairseq-san-score: error: a paired bootstrap resamples the test set's sentences, and "
        "one sentence gives every resample the same: score a test set of several sentences, or "
        "leave out --baseline"
    )


def test_a_pipe_whose_first_read_brings_one_byte_is_read_whole(tmp_path):
    """gzip's magic was peeked at, and a pipe's first read may bring one byte of it: gzip
    references read as text ("not UTF-8 text (... byte b'\\x8b')")."""
    right = ["Ein Mann geht .", "Die Katze sitzt ."]
    (tmp_path / "ref.de.gz").write_bytes(gzip.compress("\n".join(right).encode() + b"\n"))
    reads = "import sys; from fairseq_san.scoring import read_lines; print(read_lines(sys.argv[1]))"
    result = subprocess.run(
        ["bash", "-c", f'{sys.executable} -c "$2" <(head -c 1 "$1"; sleep 0.5; tail -c +2 "$1")',
         "bash", str(tmp_path / "ref.de.gz"), reads],
        env=cli_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0 and result.stdout == f"{right}\n", result.stderr


def test_score_names_a_file_it_cannot_read(tmp_path):
    """A missing reference was "[Errno 2] No such file or directory: 'PATH'"."""
    for missing, said in ((tmp_path / "none.de", "No such file or directory"),
                          (tmp_path, "Is a directory")):  # fmt: skip
        (tmp_path / "generate-test.txt").write_text(GENERATE_OUTPUT, encoding="utf-8")
        result = run_cli("fairseq-san-score", str(tmp_path / "generate-test.txt"),
                         "--reference", str(missing))  # fmt: skip
        line = one_error_line(result, "fairseq-san-score")
        assert line == f"fairseq-san-score: error: {missing}: {said}"


def test_score_ignores_a_byte_order_mark(tmp_path):
    """A reference (or output) saved with a UTF-8 byte-order mark scored BLEU 86.28 against its
    own text: the mark stuck to the first sentence."""
    result = score(tmp_path, "\ufeff" + GENERATE_OUTPUT, "\ufeff" + REFERENCES)
    assert result.returncode == 0 and result.stdout.startswith("BLEU = 100.00 "), result.stderr


def test_score_ends_lines_at_newlines_only(tmp_path):
    """A bare carriage return inside a sentence made two lines of it (Python's universal
    newlines): its hypothesis was cut short, its reference a count mismatch. sacreBLEU ends
    lines at newlines only; a Windows line end still scores as one."""
    generated = GENERATE_OUTPUT.replace("Die Katze sitzt", "Die Katze\rsitzt")
    references = REFERENCES.replace("Die Katze sitzt", "Die Katze\rsitzt")
    result = score(tmp_path, generated, references.replace("\n", "\r\n"))
    assert result.returncode == 0 and result.stdout.startswith("BLEU = 100.00 "), result.stderr


@pytest.mark.parametrize("output, needle", [("missing/scores.json", "no folder"), (".", "is a folder")])
def test_score_into_a_missing_folder_is_one_line_before_scoring(tmp_path, output, needle):
    result = score(tmp_path, GENERATE_OUTPUT, REFERENCES, "-o", str(tmp_path / output))
    assert needle in one_error_line(result, "fairseq-san-score")
    assert not (tmp_path / "missing").exists()


# --- fairseq-san-spm ---------------------------------------------------------------------------

# A line of the progress log, in fairseq's format ("2026-12-06 17:59:42 | INFO | name | ...").
PROGRESS_LOG = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \| INFO \| [\w.]+ \| ")


def without_progress(stderr: str) -> str:
    """``stderr`` without the lines of the progress log (what learning from a file says): the
    command's error, warnings and notes, stripped."""
    return "\n".join(line for line in stderr.splitlines() if not PROGRESS_LOG.match(line)).strip()


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("spm")
    text = root / "train.txt"
    rng = random.Random(0)
    text.write_text("".join(" ".join(rng.choices(EN_WORDS, k=6)) + "\n" for _ in range(200)))
    result = run_cli("fairseq-san-spm", "train", str(text), "--model-prefix", str(root / "spm"),
                     "--vocab-size", "60")  # fmt: skip
    assert result.returncode == 0, output_of(result)[-3000:]
    return root / "spm.model"


def test_spm_train_says_what_it_learns_and_what_it_wrote(tmp_path):
    """Learning from a large corpus takes minutes, and the command said nothing, not even at its
    end; it logs both, in fairseq's format (timestamps without milliseconds)."""
    text = tmp_path / "train.txt"
    text.write_text("a man walks\na dog runs\n" * 20)
    prefix = tmp_path / "spm"
    result = run_cli("fairseq-san-spm", "train", str(text), "--model-prefix", str(prefix),
                     "--vocab-size", "24")  # fmt: skip
    assert result.returncode == 0 and result.stdout == "", result.stderr
    lines = result.stderr.strip().splitlines()
    assert [PROGRESS_LOG.sub("", line) for line in lines if PROGRESS_LOG.match(line)] == [
        f"learning a bpe model of 24 pieces from {text} (sentencepiece says nothing until it "
        "ends: minutes on a large corpus)",
        f"wrote {prefix}.model and {prefix}.vocab",
    ], result.stderr


@pytest.mark.parametrize("command", ["encode", "decode"])
def test_spm_refuses_to_write_over_its_input(spm_model, tmp_path, command):
    text = tmp_path / "text.en"
    text.write_text("a man walks\n")
    (tmp_path / "link.en").symlink_to(text)
    for target in (text, tmp_path / "link.en"):
        result = run_cli("fairseq-san-spm", command, "--model", str(spm_model), str(text),
                         str(target))  # fmt: skip
        assert result.returncode == 1 and result.stdout == ""
        assert result.stderr.strip() == (
            f"fairseq-san-spm: error: {target}: is the input {text}: write the output file to "
            "another file"
        )
        assert text.read_text() == "a man walks\n"


def test_spm_refuses_to_write_over_its_model_or_training_text(spm_model, tmp_path):
    """``encode --model m.model src m.model`` replaced the model with the encoded text, and
    ``train corp.vocab --model-prefix corp`` the training text with the vocabulary (exit 0)."""
    model = tmp_path / "m.model"
    model.write_bytes(spm_model.read_bytes())
    text = tmp_path / "corp.vocab"
    text.write_text((spm_model.parent / "train.txt").read_text())
    before = text.read_text()
    for args, said in (
        (("encode", "--model", str(model), str(text), str(model)),
         f"{model}: is the input {model}: write the output file to another file"),
        (("train", str(text), "--model-prefix", str(tmp_path / "corp"), "--vocab-size", "60"),
         f"--model-prefix {tmp_path / 'corp'}: is the input {text}: write the model to another "
         "file"),
    ):  # fmt: skip
        result = run_cli("fairseq-san-spm", *args)
        assert result.returncode == 1 and result.stderr.strip() == f"fairseq-san-spm: error: {said}"
    assert model.read_bytes() == spm_model.read_bytes() and text.read_text() == before
    assert not (tmp_path / "corp.model").exists()


def test_spm_train_refuses_to_write_over_a_model_without_force(spm_model, tmp_path):
    """train learned a new model over PREFIX.model without a word (exit 0): the text encoded
    with the old one, and the data binarized from it, no longer matched the model beside it."""
    for name in ("spm.model", "spm.vocab"):
        shutil.copy(spm_model.parent / name, tmp_path / name)
    argv = ["train", str(spm_model.parent / "train.txt"), "--model-prefix", str(tmp_path / "spm"),
            "--vocab-size", "50", "--model-type", "unigram"]  # fmt: skip
    refused = run_cli("fairseq-san-spm", *argv)
    assert refused.returncode == 1 and refused.stderr.strip() == (
        f"fairseq-san-spm: error: --model-prefix {tmp_path / 'spm'}: {tmp_path / 'spm.model'} "
        "exists (text encoded with it would not match a new model): give --force to learn it "
        "again, or another prefix"
    )
    assert (tmp_path / "spm.model").read_bytes() == spm_model.read_bytes()
    forced = run_cli("fairseq-san-spm", *argv, "--force")
    assert forced.returncode == 0, output_of(forced)[-3000:]
    assert (tmp_path / "spm.model").read_bytes() != spm_model.read_bytes()


def test_spm_dash_is_standard_input_and_output(spm_model, tmp_path):
    """``encode --model M text -`` wrote the pieces silently to a file named "-" in the working
    folder (exit 0, nothing printed), and ``-`` as the source read that file, or none."""
    encoded = run_cli("fairseq-san-spm", "encode", "--model", str(spm_model), "-", "-",
                      input="a man walks\n", cwd=tmp_path)  # fmt: skip
    assert encoded.returncode == 0, output_of(encoded)[-3000:]
    assert encoded.stdout.count("\u2581") == 3 and list(tmp_path.iterdir()) == []
    decoded = run_cli("fairseq-san-spm", "decode", "--model", str(spm_model), "-", "-",
                      input=encoded.stdout, cwd=tmp_path)  # fmt: skip
    assert (decoded.returncode, decoded.stdout) == (0, "a man walks\n"), output_of(decoded)
    twice = run_cli("fairseq-san-spm", "train", "-", "-", "--model-prefix", str(tmp_path / "m"),
                    input="a man walks\n", cwd=tmp_path)  # fmt: skip
    assert twice.returncode == 1 and twice.stderr.splitlines()[-1] == (  # not "/dev/stdin twice"
        "fairseq-san-spm: error: standard input is given twice: it holds one file; give each "
        "side once"
    )


def test_spm_train_that_cannot_write_its_model_whole_leaves_the_last_one(spm_model, tmp_path):
    """sentencepiece does not say that it could not write its model: on a full disk (here a
    file-size limit) train left a truncated PREFIX.model in place of the last one, exit 0, and
    encode then called it "not the .model file that train wrote"."""
    import resource

    for name in ("spm.model", "spm.vocab"):
        shutil.copy(spm_model.parent / name, tmp_path / name)
    text = spm_model.parent / "train.txt"
    limit = (tmp_path / "spm.model").stat().st_size // 2

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    argv = [str(command_path("fairseq-san-spm")), "train", str(text), "--model-prefix",
            str(tmp_path / "spm"), "--vocab-size", "50", "--model-type", "unigram",
            "--force"]  # fmt: skip
    result = subprocess.run(argv, cwd=REPO, env=cli_env(), capture_output=True, text=True,
                            timeout=240, preexec_fn=small_files)  # fmt: skip
    assert result.returncode == 1 and without_progress(result.stderr) == (
        f"fairseq-san-spm: error: --model-prefix {tmp_path / 'spm'}: sentencepiece could not "
        "write the model whole (a full disk?): nothing written"
    )
    for name in ("spm.model", "spm.vocab"):
        assert (tmp_path / name).read_bytes() == (spm_model.parent / name).read_bytes()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["spm.model", "spm.vocab"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_spm_output_on_a_full_device_is_named(spm_model, tmp_path):
    """``encode SRC /dev/full`` said "[Errno 28] No space left on device", naming no file."""
    text = tmp_path / "text.en"
    text.write_text("a man walks\n")
    result = run_cli("fairseq-san-spm", "encode", "--model", str(spm_model), str(text),
                     "/dev/full")  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip() == "fairseq-san-spm: error: /dev/full: No space left on device"


def test_spm_on_non_utf8_input_names_the_file_and_leaves_the_output_as_it_was(spm_model,
                                                                              tmp_path):
    """A line that is no UTF-8 left the lines before it as the output (an earlier output
    emptied): the output is now written whole or not at all."""
    text = tmp_path / "latin1.en"
    text.write_bytes(b"a man walks\n" + "a man walks \xe0 la plage\n".encode("latin-1"))
    out = tmp_path / "out.en"
    out.write_text("earlier\n")
    result = run_cli("fairseq-san-spm", "encode", "--model", str(spm_model), str(text), str(out))
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"fairseq-san-spm: error: {text} is not UTF-8 text"), line
    assert out.read_text() == "earlier\n" and sorted(p.name for p in tmp_path.iterdir()) == [
        "latin1.en", "out.en"]  # fmt: skip


def test_spm_encode_keeps_the_inputs_line_count(spm_model, tmp_path):
    """A bare carriage return inside a sentence made two lines of it, and the two sides of a
    corpus no longer paired line by line; sentencepiece reads it as a space."""
    text = tmp_path / "text.en"
    text.write_bytes(b"a man\rwalks\r\na man walks\n")
    out = tmp_path / "out.en"
    result = run_cli("fairseq-san-spm", "encode", "--model", str(spm_model), str(text), str(out))
    assert result.returncode == 0, output_of(result)[-3000:]
    first, second = out.read_bytes().decode("utf-8").split("\n")[:-1]
    assert first == second and "\r" not in first


def test_spm_train_learns_from_a_pipe_what_it_learns_from_the_file(spm_model, tmp_path):
    """The check for empty inputs read a pipe's first lines (``<(cat train.en train.de)``), which
    sentencepiece then never saw: a vocabulary learned from the rest, without a word."""
    text = spm_model.parent / "train.txt"
    result = subprocess.run(
        ["bash", "-c", 'fairseq-san-spm train <(cat "$1") --model-prefix "$2" --vocab-size 60',
         "bash", str(text), str(tmp_path / "piped")],
        env=cli_env(), capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    learned = (tmp_path / "piped.vocab").read_text(encoding="utf-8")
    assert learned == spm_model.with_suffix(".vocab").read_text(encoding="utf-8")


def test_spm_train_on_a_pipe_of_blank_lines_is_one_line(tmp_path):
    """sentencepiece said ``INTERNAL: src/trainer_interface.cc(576) [(all_chars_count) > (0)]``
    (the same text in a file is refused before sentencepiece reads it)."""
    result = subprocess.run(
        ["bash", "-c", "fairseq-san-spm train <(printf '\\n  \\n') --model-prefix \"$1\"", "bash",
         str(tmp_path / "m")],
        env=cli_env(), capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert result.returncode == 1
    said = without_progress(result.stderr)  # the pipe named as bash names it
    assert re.fullmatch(
        r"fairseq-san-spm: error: no sentence to learn subwords from in /dev/fd/\d+", said
    ), said


def test_spm_errors_are_the_commands_words(spm_model, tmp_path):
    """sentencepiece's own errors were printed as they came: "INTERNAL: src/trainer_interface.cc(744)
    [(trainer_spec_.vocab_size()) == (model_proto->pieces_size())] Vocabulary size too high...";
    a missing folder for the model was said only after training."""
    text = spm_model.parent / "train.txt"
    comma = tmp_path / "x,y.en"  # read as x and y.en, or "x: No such file or directory"
    comma.write_text(text.read_text())
    empty_model = tmp_path / "empty.model"
    empty_model.write_bytes(b"")
    packed = tmp_path / "train.txt.gz"  # were "not UTF-8 text ...: convert it (iconv)"
    packed.write_bytes(gzip.compress(text.read_bytes()))
    checkpoint = tmp_path / "checkpoint.pt"
    torch.save({"model": {}}, checkpoint)
    mac = tmp_path / "mac.de"  # sentencepiece read one line, too long, and left it out: exit 0
    mac.write_bytes(text.read_bytes().replace(b"\n", b"\r"))
    cases = [
        (("train", str(packed), "--model-prefix", str(tmp_path / "m")),
         f"{packed} is gzip-compressed: give it unpacked \\(gunzip -k\\)"),
        (("encode", "--model", str(spm_model), str(checkpoint), str(tmp_path / "out")),
         f"{checkpoint} is a zip archive \\(a PyTorch checkpoint\\?\\), not text: give the text "
         "file"),
        (("train", str(text), str(mac), "--model-prefix", str(tmp_path / "m")),
         f"{mac}: its lines end in a carriage return alone \\(\\\\r, classic Mac text\\), and "
         r"sentencepiece ends a line at \\n only: convert them first \(tr '\\r' '\\n'\)"),
        # written as a file named "out", said written; the temporary folder named, never given
        (("encode", "--model", str(spm_model), str(text), f"{tmp_path / 'out'}/"),
         f"{tmp_path / 'out'}/: ends in '/', a folder's name: name the output file to write "
         r"\(a file\)"),
        (("train", str(text), "--model-prefix", "/proc/m"),
         "--model-prefix /proc/m: cannot write in /proc: No such file or directory"),
        (("train", str(text), "--model-prefix", str(tmp_path / "m"), "--vocab-size", "100000"),
         r"--vocab-size 100000: this text has too few distinct pieces for it; \d+ at most"),
        (("train", str(text), "--model-prefix", str(tmp_path / "m"), "--vocab-size", "5"),
         r"--vocab-size 5: this text needs at least \d+, a piece for each of its characters"),
        (("train", str(comma), "--model-prefix", str(tmp_path / "m")),
         f"{comma}: sentencepiece reads a name holding ',' as two files: rename it, or give a "
         "link to it under a name without one"),
        (("train", str(text), "--model-prefix", str(tmp_path / "none" / "m")),
         f"--model-prefix {tmp_path / 'none' / 'm'}: no folder {tmp_path / 'none'} "
         r"\(create it first\)"),
        (("train", str(tmp_path / "none.txt"), "--model-prefix", str(tmp_path / "m")),
         f"{tmp_path / 'none.txt'}: No such file or directory"),
        (("train", str(tmp_path), "--model-prefix", str(tmp_path / "m")),
         f"{tmp_path}: Is a directory"),
        (("encode", "--model", str(text), str(text), str(tmp_path / "out")),
         f"{text} is not a sentencepiece model: give --model the .model file that train wrote"),
        (("encode", "--model", str(tmp_path / "none.model"), str(text), str(tmp_path / "out")),
         f"{tmp_path / 'none.model'}: No such file or directory"),
        (("decode", "--model", str(spm_model), str(text), str(tmp_path / "none" / "out")),
         f"{tmp_path / 'none' / 'out'}: no folder {tmp_path / 'none'} \\(create it first\\)"),
        (("decode", "--model", str(spm_model), str(text), ""),
         "'': is empty: name the output file to write"),
        # sentencepiece's "FAILED_PRECONDITION: ... Is a directory", "INTERNAL: unk is not
        # defined." (/dev/null, an empty file), "INVALID_ARGUMENT: cannot parse ... as int"
        (("encode", "--model", str(tmp_path), str(text), str(tmp_path / "out")),
         f"--model {tmp_path} is not a file: give the .model file that train wrote"),
        (("encode", "--model", "/dev/null", str(text), str(tmp_path / "out")),
         "--model /dev/null is not a file: give the .model file that train wrote"),
        (("encode", "--model", str(empty_model), str(text), str(tmp_path / "out")),
         f"{empty_model} is not a sentencepiece model: give --model the .model file that train "
         "wrote"),
        (("train", str(text), "--model-prefix", str(tmp_path / "m"), "--vocab-size",
          "99999999999"),
         r"--vocab-size 99999999999: more than sentencepiece takes \(2147483647 at most\)"),
        # the input missing, or a folder: named (the output was, an error inside its writing)
        (("encode", "--model", str(spm_model), str(tmp_path / "none.txt"), str(tmp_path / "out")),
         f"{tmp_path / 'none.txt'}: No such file or directory"),
        (("decode", "--model", str(spm_model), str(tmp_path), str(tmp_path / "out")),
         f"{tmp_path}: Is a directory"),
    ]  # fmt: skip
    for args, said in cases:
        result = run_cli("fairseq-san-spm", *args)
        assert result.returncode == 1 and result.stdout == "", result.stderr
        (line,) = without_progress(result.stderr).splitlines()
        assert re.fullmatch(f"fairseq-san-spm: error: {said}", line), line
    assert not list(tmp_path.glob("m.*"))


def test_spm_decode_refuses_whole_generate_lines(spm_model, tmp_path):
    """Decoding deletes every space before it turns each piece's mark into one:
    fairseq-generate's whole H- lines came out as "H-0-0.5 Ein ...", exit 0, and text decoded
    already (the recipes' D- lines) as one word a line ("EinMannläuft"). Pieces, a one-word
    line and an empty line among them, are decoded."""
    pieces, out = tmp_path / "pieces.txt", tmp_path / "out.txt"
    for text, said in (("H-0\t-0.5\t\u2581Ein \u2581Mann\n",
                        f"{pieces}, line 1, holds a tab: give the pieces alone (of "
                        "fairseq-generate's H- lines, the third field: cut -f3)"),
                       ("\u2581a \u2581man\nHund\nEin Mann läuft\n",
                        f"{pieces}, line 3, is no sentencepiece pieces: none of its 3 pieces "
                        "holds '\u2581' (a word's start), and decoding would glue them into one "
                        "word; is it decoded text already (fairseq-generate's D- lines, with "
                        "--post-process sentencepiece)?")):  # fmt: skip
        pieces.write_text(text, encoding="utf-8")
        result = run_cli("fairseq-san-spm", "decode", "--model", str(spm_model), str(pieces),
                         str(out))  # fmt: skip
        assert result.returncode == 1 and result.stderr.strip().splitlines() == [
            f"fairseq-san-spm: error: {said}"], result.stderr  # fmt: skip
        assert not out.exists()
    text = tmp_path / "text.txt"
    text.write_text((spm_model.parent / "train.txt").read_text().splitlines()[0] + "\n\n")
    for command, source, target in (("encode", text, pieces), ("decode", pieces, out)):
        result = run_cli("fairseq-san-spm", command, "--model", str(spm_model), str(source),
                         str(target))  # fmt: skip
        assert result.returncode == 0, result.stderr
    assert out.read_text() == text.read_text()


def test_spm_decode_takes_a_one_word_line_of_a_model_without_a_dummy_prefix(spm_model, tmp_path):
    """A model trained with --add_dummy_prefix false marks no line's first word: a one-word line
    of its pieces ("a t t e n t i o n") was refused as decoded text; it decodes, and so does
    a line of several words."""
    import sentencepiece

    prefix = tmp_path / "nodummy"
    sentencepiece.SentencePieceTrainer.train(
        input=str(spm_model.parent / "train.txt"), model_prefix=str(prefix), vocab_size=40,
        add_dummy_prefix=False, minloglevel=2,
    )  # fmt: skip
    processor = sentencepiece.SentencePieceProcessor(model_file=f"{prefix}.model")
    text = spm_model.parent / "train.txt"
    lines = [*text.read_text().splitlines()[:2], text.read_text().split()[0]]
    pieces, out = tmp_path / "pieces.txt", tmp_path / "out.txt"
    encoded = [processor.encode(line, out_type=str) for line in lines]
    assert len(encoded[-1]) > 1 and "\u2581" not in "".join(encoded[-1])  # the case refused
    pieces.write_text("".join(" ".join(line) + "\n" for line in encoded), encoding="utf-8")
    result = run_cli("fairseq-san-spm", "decode", "--model", f"{prefix}.model", str(pieces),
                     str(out))  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert out.read_text().splitlines() == lines


def test_spm_decode_refuses_pieces_the_model_has_not(spm_model, tmp_path):
    """Pieces of another model were decoded as they are, marks and all ("\u2581Ein\u2581Hund"),
    exit 0. What encode writes for characters the model has not ("\u03a9") is decoded back."""
    pieces, out = tmp_path / "pieces.txt", tmp_path / "out.txt"
    pieces.write_text("\u2581a \u2581man\n\u2581Ein \u2581Hund\n", encoding="utf-8")
    result = run_cli("fairseq-san-spm", "decode", "--model", str(spm_model), str(pieces),
                     str(out))  # fmt: skip
    assert result.returncode == 1 and result.stderr.strip().splitlines() == [
        f"fairseq-san-spm: error: {pieces}, line 2, holds the piece \u2581Ein, which --model "
        f"{spm_model} has not: give the model that encoded the text"], result.stderr  # fmt: skip
    assert not out.exists()
    text = tmp_path / "text.txt"
    text.write_text("a \u03a9man \u03a9\u03a9 walks\n", encoding="utf-8")
    for command, source, target in (("encode", text, pieces), ("decode", pieces, out)):
        result = run_cli("fairseq-san-spm", command, "--model", str(spm_model), str(source),
                         str(target))  # fmt: skip
        assert result.returncode == 0, result.stderr
    assert out.read_text(encoding="utf-8") == text.read_text(encoding="utf-8")


def test_spm_decode_drops_a_byte_order_mark(spm_model, tmp_path):
    """A UTF-8 byte-order mark before the first piece was read as part of it: the first word
    was decoded as "\ufeff\u2581a" (encode's normalization drops it)."""
    pieces, out = tmp_path / "pieces.txt", tmp_path / "out.txt"
    pieces.write_text("\ufeff\u2581a \u2581man\n", encoding="utf-8")
    result = run_cli("fairseq-san-spm", "decode", "--model", str(spm_model), str(pieces),
                     str(out))  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert out.read_bytes() == b"a man\n"


def test_spm_train_refuses_a_file_given_twice(spm_model, tmp_path):
    """``train train.en train.en`` (for ``train.en train.de``) learned a joint model of one side,
    exit 0; also through a link."""
    text = spm_model.parent / "train.txt"
    link = tmp_path / "link.txt"
    link.symlink_to(text)
    for second in (text, link):
        result = run_cli("fairseq-san-spm", "train", str(text), str(second), "--model-prefix",
                         str(tmp_path / "m"), "--vocab-size", "60")  # fmt: skip
        assert result.returncode == 1 and result.stderr.strip().splitlines() == [
            f"fairseq-san-spm: error: the inputs name {text} twice: a joint model learns from "
            "each side once (train.en train.de): give each file once"], result.stderr  # fmt: skip
    assert sorted(path.name for path in tmp_path.iterdir()) == ["link.txt"]


def test_spm_train_names_sentences_too_long_for_sentencepiece(tmp_path):
    """Lines longer than sentencepiece's max_sentence_length are left out without a word (its
    log is silenced): a file of only such lines was said to hold no sentence."""
    long_line = "word " * 900  # 4,500 bytes
    only_long = tmp_path / "long.en"
    only_long.write_text(f"{long_line}\n{long_line}\n")
    result = run_cli("fairseq-san-spm", "train", str(only_long), "--model-prefix",
                     str(tmp_path / "m"))  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"fairseq-san-spm: error: {only_long}: every sentence is longer than 4,192 bytes, and "
        "sentencepiece learns from none longer (its max_sentence_length): split its lines into "
        "sentences"
    )
    mixed = tmp_path / "mixed.en"
    mixed.write_text(f"a man walks\na dog runs\n{long_line}\n")
    result = run_cli("fairseq-san-spm", "train", str(mixed), "--model-prefix",
                     str(tmp_path / "m"), "--vocab-size", "16")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip().splitlines()[0] == (
        f"fairseq-san-spm: warning: 1 of the 3 sentences of {mixed} are longer than 4,192 bytes: "
        "sentencepiece leaves them out of what it learns from"
    )


def test_spm_train_learns_from_the_other_inputs_beside_a_file_of_long_lines(tmp_path):
    """A file of only over-long lines among other inputs was refused, as if nothing were left
    to learn from; refused only where every input is such a file."""
    long_line = "word " * 900  # 4,500 bytes
    only_long, other_long, text = tmp_path / "long.en", tmp_path / "long.de", tmp_path / "text.de"
    only_long.write_text(f"{long_line}\n{long_line}\n")
    other_long.write_text(f"{long_line}\n")
    text.write_text("a man walks\na dog runs\nein Mann geht\n")
    result = run_cli("fairseq-san-spm", "train", str(only_long), str(text), "--model-prefix",
                     str(tmp_path / "m"), "--vocab-size", "24")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip().splitlines()[0] == (
        f"fairseq-san-spm: warning: 2 of the 2 sentences of {only_long} are longer than 4,192 "
        "bytes: sentencepiece leaves them out of what it learns from"
    )
    assert (tmp_path / "m.model").is_file()
    result = run_cli("fairseq-san-spm", "train", str(only_long), str(other_long), "--model-prefix",
                     str(tmp_path / "n"))  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"fairseq-san-spm: error: {only_long}, {other_long}: every sentence is longer than 4,192 "
        "bytes, and sentencepiece learns from none longer (its max_sentence_length): split their "
        "lines into sentences"
    )


def test_spm_train_on_text_without_sentences_or_a_vocabulary_is_one_line(tmp_path):
    """sentencepiece said ``INTERNAL: src/trainer_interface.cc(467) [!sentences_.empty()]``."""
    empty = tmp_path / "empty.en"
    empty.write_text("\n \n")
    result = run_cli("fairseq-san-spm", "train", str(empty), "--model-prefix", str(tmp_path / "m"))
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"fairseq-san-spm: error: {empty} has no sentence to learn subwords from"
    )
    text = tmp_path / "text.en"
    text.write_text("a man walks\n")
    result = run_cli("fairseq-san-spm", "train", str(text), "--model-prefix", str(tmp_path / "m"),
                     "--vocab-size", "0")  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "fairseq-san-spm train: error: argument --vocab-size: 0 is not a positive integer"
    )
    assert not list(tmp_path.glob("m.*"))
    for folder in (f"{tmp_path}/", f"{tmp_path}/.", f"{tmp_path}/.."):  # "." wrote "..model"
        result = run_cli("fairseq-san-spm", "train", str(text), "--model-prefix", folder)
        assert result.returncode == 2
        assert result.stderr.strip().splitlines()[-1] == (
            f"fairseq-san-spm train: error: argument --model-prefix: {folder} names a folder: "
            f"add a file name, e.g. {os.path.join(folder, 'spm')}"
        )
    assert not list(tmp_path.glob(".*model"))


# --- WMT14 dry run ----------------------------------------------------------------------------


def last_values(argv: List[str]) -> Dict[str, str]:
    """{--flag: value} where a later occurrence wins, as in argparse."""
    values = {}
    for index, word in enumerate(argv[:-1]):
        if word.startswith("--"):
            values[word] = argv[index + 1]
    return values


@pytest.mark.parametrize("argv, status, said", [
    (["{work}", "--dry-run"], 0, None),  # --dry-run after WORK_DIR was a real run
    (["--dry-run", "{work}", "--bogus"], 2, "run.sh: unknown option --bogus"),
    (["--dry-run", "{work}", "{work}2"], 2, "run.sh: one WORK_DIR only"),
    (["--dry-run", "{file}"], 2, "run.sh: WORK_DIR {file} is a file: give a folder"),  # mkdir's
    # an unset "$WORK" ran in runs/wmt14_en_de; --help was an unknown option
    (["--dry-run", ""], 2, "run.sh: WORK_DIR is empty (an unset \"$WORK\"?): name a folder"),
    (["--help"], 0, "usage: examples/wmt14_en_de/run.sh [--dry-run] [WORK_DIR]"),
])  # fmt: skip
def test_wmt14_arguments_in_any_order_or_unknown(tmp_path, argv, status, said):
    work, file = tmp_path / "wmt14", tmp_path / "file"
    file.touch()
    argv = [arg.format(work=work, file=file) for arg in argv]
    said = said and said.format(file=file)
    result = run_script(WMT14, *argv, timeout=120)
    assert result.returncode == status, output_of(result)[-3000:]
    assert not work.exists()  # printed, not made
    if said:
        assert (result.stderr or result.stdout).startswith(said), output_of(result)
    else:
        assert printed_commands(output_of(result), "curl")


def test_wmt14_dry_run_prints_the_paper_setup(tmp_path):
    work = tmp_path / "wmt14"
    result = run_script(WMT14, "--dry-run", str(work), timeout=120)
    output = output_of(result)
    assert result.returncode == 0, output[-4000:]
    # Data: fairseq's preparation script at a fixed commit, downloaded, checked and run; one joint
    # dictionary. Nothing else is downloaded: no code from a branch.
    *archives, curl = printed_commands(output, "curl")
    assert curl[-1] == f"{WMT14_PREPARE_URL}/examples/translation/prepare-wmt14en2de.sh"
    (check,) = printed_commands(output, "sha256sum")
    assert check[1] == curl[curl.index("-o") + 1] and WMT14_PREPARE_SHA256 in check
    # WMT14's data (--icml17: news commentary v9 into wmt14_en_de/; without it, WMT17's v12 into
    # wmt17_en_de/, which the recipe does not read), each archive downloaded whole before it runs.
    assert any("bash prepare-wmt14en2de.sh --icml17" in " ".join(a)
               for a in printed_commands(output, "bash"))  # fmt: skip
    assert [url.rsplit("/", 1)[1] for *_, url in archives] == [
        "training-parallel-europarl-v7.tgz", "training-parallel-commoncrawl.tgz",
        "training-parallel-nc-v9.tgz", "dev.tgz", "test-full.tgz",
    ]  # fmt: skip
    assert all(command[command.index("-o") + 1].endswith(".partial") for command in archives)
    # The tools that script clones, cloned first at pinned commits (it leaves them there).
    pinned = {command[2]: command[-1] for command in printed_commands(output, "git")
              if command[3:5] == ["checkout", "-q"]}  # fmt: skip
    assert pinned == {
        str(work / "mosesdecoder"): "34452895f350bf097b21ee514a529a1dc542243c",
        str(work / "subword-nmt"): "92d6139d07d30e12735a0af9e7f7f925ebe62c54",
    }
    printed = [line for line in output.splitlines() if line.startswith("+ ")]
    steps = [i for i, line in enumerate(printed)
             if "checkout -q" in line or "bash\\ prepare" in line]  # fmt: skip
    assert len(steps) == 3 and "checkout -q" not in printed[steps[-1]]  # pinned, then run
    assert len([command for command in printed_commands(output, "git") if "clone" in command]) == 2
    (preprocess,) = printed_commands(output, "fairseq-preprocess")
    assert "--joined-dictionary" in preprocess
    # Training: section 4.1 of the paper, 8 GPUs.
    (train,) = printed_commands(output, "fairseq-train")
    flags = last_values(train)
    assert flags["--arch"] == "transformer_san_base"
    assert flags["--distributed-world-size"] == "8"
    assert flags["--max-tokens"] == "4096"
    assert float(flags["--lr"]) == 7e-4
    assert flags["--warmup-updates"] == "4000"
    assert float(flags["--dropout"]) == 0.1
    assert float(flags["--weight-decay"]) == 0.0  # not the Multi30k default's 0.0001
    assert flags["--max-update"] == "100000"
    assert float(flags["--label-smoothing"]) == 0.1
    assert flags["--adam-betas"] == "(0.9,0.98)"
    assert flags["--keep-interval-updates"] == "5"  # the 5 checkpoints that are averaged
    # The analysis and the policy (thetas 0.4 / 0.5).
    (validate,) = printed_commands(output, "fairseq-validate")
    assert "--san-analysis-dir" in validate
    (policy,) = printed_commands(output, "fairseq-san-policy")
    policy_flags = last_values(policy)
    assert policy_flags["--theta-decoder-self"] == "0.4"
    assert policy_flags["--theta-decoder-encdec"] == "0.5"
    # The final model: the average of the last 5 checkpoints (the plugin's command, which reads
    # them with torch's safe loader), beam 4, batch 16.
    assert not printed_commands(output, "python")
    average = printed_commands(output, "fairseq-san-average")
    assert len(average) == 1 and last_values(average[0])["--num-update-checkpoints"] == "5"
    assert last_values(average[0])["--inputs"] == str(work / "run" / "last" / "checkpoints")
    generates = printed_commands(output, "fairseq-generate")
    final = [a for a in generates if last_values(a)["--gen-subset"] == "test"]
    assert len(final) == 1
    assert last_values(final[0])["--beam"] == "4"
    assert "--lenpen" not in last_values(final[0])  # the paper names none
    assert last_values(final[0])["--batch-size"] == "16"
    assert last_values(final[0])["--path"] == last_values(average[0])["--output"]
    assert "(dry run: iteration 1 repeats these commands" in output
    # Nothing was downloaded, trained or written.
    assert not work.exists(), sorted(work.rglob("*"))


# What fairseq's preparation script reads from the WMT14 archives (under WORK/orig).
WMT14_CORPORA = [
    f"{corpus}.{language}"
    for corpus in ("training/europarl-v7.de-en", "commoncrawl.de-en",
                   "training/news-commentary-v9.de-en")
    for language in ("en", "de")
] + ["test-full/newstest2014-deen-src.en.sgm", "test-full/newstest2014-deen-ref.de.sgm"]  # fmt: skip


def wmt14_stand_ins(tmp_path: Path, corpora: Sequence[str] = WMT14_CORPORA, stubs=()) -> dict:
    """The environment of a real run of the WMT14 recipe with stand-ins for the network: curl
    writes every archive as a tgz of ``corpora`` (one line each) and the preparation script as one
    that is not fairseq's (it would touch WORK/ran), logging each URL to ``tmp_path/curl.log``; git
    clones make empty repositories. ``stubs``: commands that fail (exit 3) when run."""
    tree = tmp_path / "archive"
    for name in corpora:
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text("a line\n")
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    commands = {
        "curl": 'url=${!#}; echo "$url" >> "%s"\n'
                'while [ $# -gt 0 ]; do [ "$1" = -o ] && out=$2; shift; done\n'
                'case $url in\n'
                '  *.tgz) tar -czf "$out" -C "%s" . ;;\n'
                '  *) printf \'touch "%%s"\\n\' "$(dirname "$out")/ran" > "$out" ;;\n'
                'esac\n' % (tmp_path / "curl.log", tree),
        "git": '[ "$1" = clone ] && mkdir -p "${!#}/.git"; exit 0\n',
        # the recipe's 8 GPUs, checked before anything is downloaded
        "nvidia-smi": 'for i in 0 1 2 3 4 5 6 7; do echo "GPU $i: stand-in"; done\n',
        **{name: 'echo "stand-in $0" >&2; exit 3\n' for name in stubs},
    }  # fmt: skip
    for name, body in commands.items():
        (fake_bin / name).write_text("#!/usr/bin/env bash\n" + body)
        (fake_bin / name).chmod(0o755)
    env = cli_env()
    env["PATH"] = f"{fake_bin}{os.pathsep}{env['PATH']}"
    return env


def gpu_listing(gpus: int) -> str:
    """``nvidia-smi -L`` of ``gpus`` GPUs, the first split into MIG devices (listed under it,
    none a GPU)."""
    mig = "".join(f"  MIG 3g.20gb     Device  {i}: (UUID: MIG-{i})\\n" for i in range(2))
    return "".join(f"GPU {i}: NVIDIA A100-SXM4-40GB (UUID: GPU-{i})\\n" + (mig if i == 0 else "")
                   for i in range(gpus))  # fmt: skip


@pytest.mark.parametrize("gpus", [0, 7])
def test_wmt14_refuses_a_machine_without_its_gpus_before_downloading(tmp_path, gpus):
    """Without 8 GPUs (a stand-in nvidia-smi that fails: none; one that lists 7 and MIG
    devices), the run stops in one line before its work dir, downloads and preparation;
    fairseq-train refused it only hours later."""
    work = tmp_path / "wmt14"
    env = wmt14_stand_ins(tmp_path, stubs=() if gpus else ("nvidia-smi",))
    if gpus:
        (tmp_path / "bin" / "nvidia-smi").write_text(f"#!/bin/sh\nprintf '{gpu_listing(gpus)}'\n")
    result = run_script(WMT14, str(work), env=env, timeout=120)
    assert result.returncode == 1, output_of(result)[-3000:]
    assert result.stderr.splitlines() == [
        f"run.sh: this machine has {gpus} GPUs, and the recipe trains on 8 "
        "(--distributed-world-size 8): run it on such a machine, or --dry-run to print its "
        "commands"]
    assert not work.exists() and not (tmp_path / "curl.log").exists()


def test_wmt14_runs_no_preparation_script_but_the_pinned_one(tmp_path):
    """A download that is not fairseq's file at the pinned commit is refused in one line and
    removed, before it runs (a stand-in curl writes another script)."""
    work = tmp_path / "wmt14"
    result = run_script(WMT14, str(work), env=wmt14_stand_ins(tmp_path), timeout=120)
    script = work / "prepare-wmt14en2de.sh"
    assert result.returncode == 1, output_of(result)[-3000:]
    last = result.stderr.splitlines()[-1]
    assert last.startswith(f"run.sh: {script} has sha256 "), result.stderr
    assert f"not {WMT14_PREPARE_SHA256}" in last and last.endswith("not run, removed")
    assert not (work / "ran").exists() and not script.exists()
    assert not printed_commands(output_of(result), "fairseq-preprocess")


def test_wmt14_downloads_each_archive_once_and_refuses_one_without_its_corpus(tmp_path):
    """fairseq's preparation script takes any file of an archive's name as downloaded, unpacks
    only what it downloads, and goes on without a corpus it cannot read (CommonCrawl, half of
    WMT14's pairs, was dropped after an interrupted download): the recipe downloads each archive
    whole, once, and refuses in one line to prepare without every corpus."""
    corpora = [name for name in WMT14_CORPORA if not name.startswith("commoncrawl")]
    env = wmt14_stand_ins(tmp_path, corpora)
    work = tmp_path / "wmt14"
    for _ in range(2):  # the second run downloads and unpacks nothing again
        result = run_script(WMT14, str(work), env=env, timeout=120)
        assert result.returncode == 1, output_of(result)[-3000:]
        assert result.stderr.splitlines()[-1] == (
            f"run.sh: {work}/orig/commoncrawl.de-en.en is missing or empty after unpacking its "
            "archive"
        )
    urls = (tmp_path / "curl.log").read_text().split()
    assert len(urls) == len(set(urls)) == 5 and "training-parallel-nc-v9.tgz" in urls[2]
    assert not list(work.rglob("*.partial")) and not (work / "prepare-wmt14en2de.sh").exists()


def wmt14_prepared(work: Path, raw: Path) -> Path:
    """WORK as fairseq's preparation script leaves it (finished): wmt14_en_de/{code, train, valid,
    test}.{en,de} from ``write_corpus``'s files."""
    prepared = work / "wmt14_en_de"
    prepared.mkdir(parents=True)
    (prepared / "code").write_text("#version: 0.2\n")
    for split in ("train", "valid", "test"):
        shutil.copy(raw / f"{split}.src", prepared / f"{split}.en")
        shutil.copy(raw / f"{split}.tgt", prepared / f"{split}.de")
    (work / ".done-prepare").touch()
    return prepared


def test_wmt14_refuses_to_binarize_an_uneven_preparation(tmp_path):
    """The preparation script exits 0 whatever failed (without python on PATH every file it
    writes is empty): what it left is checked before anything is binarized."""
    work = tmp_path / "wmt14"
    prepared = wmt14_prepared(work, write_corpus(tmp_path / "raw"))
    lines = (prepared / "valid.de").read_text().splitlines(keepends=True)
    (prepared / "valid.de").write_text("".join(lines[:-1]))
    result = run_script(WMT14, str(work), env=wmt14_stand_ins(tmp_path), timeout=120)
    assert result.returncode == 1, output_of(result)[-3000:]
    assert result.stderr.splitlines()[-1] == (
        f"run.sh: {prepared}/valid.en has {len(lines)} lines, valid.de {len(lines) - 1}: not a "
        "parallel corpus"
    )
    assert not (work / "data-bin").exists() and not (work / ".done-preprocess").exists()


@pytest.mark.parametrize(
    "source, target, said",
    [("a\nb\n", "x\ny", None),  # refused: "valid.de 1", which fairseq reads as 2 lines
     ("a\nb\nc", "x\ny\n", "valid.en has 3 lines, valid.de 2")],  # passed: wc -l's 2 and 2
    ids=["parallel", "not parallel"],
)  # fmt: skip
def test_wmt14_counts_a_last_line_without_its_newline(tmp_path, source, target, said):
    """The prepared text's lines were counted as wc -l counts them (its newlines): a last line
    without one was left out, where fairseq-preprocess binarizes it."""
    from fairseq_san.errors import RecipeError
    from fairseq_san.loop.prepared_data import check_wmt14_prepared

    (tmp_path / "code").write_text("#version: 0.2\n")
    for split in ("train", "valid", "test"):
        (tmp_path / f"{split}.en").write_text(source if split == "valid" else "a\n")
        (tmp_path / f"{split}.de").write_text(target if split == "valid" else "x\n")
    if said is None:
        check_wmt14_prepared(str(tmp_path))
        return
    with pytest.raises(RecipeError) as error:
        check_wmt14_prepared(str(tmp_path))
    assert f"{tmp_path}/{said}: not a parallel corpus" in str(error.value)


@pytest.mark.parametrize("text, lines", [("", 0), ("a\n", 1), ("a\nb", 2), ("\n\n", 2)])
def test_line_count_counts_the_lines_fairseq_reads(tmp_path, text, lines):
    """An empty file has no line (an spm.vocab of no pieces), a last line without its newline
    one."""
    from fairseq_san.loop.prepared_data import line_count

    (tmp_path / "text").write_text(text)
    assert line_count(str(tmp_path / "text")) == lines


def test_wmt14_binarizes_again_after_an_interrupted_binarizing(tmp_path):
    """fairseq-preprocess refuses a folder that holds a dictionary: an interrupted binarizing
    (its dictionary written, no .done-preprocess) stopped every re-run with a traceback. The
    re-run binarizes whole (the loop after it stands in: it fails)."""
    work = tmp_path / "wmt14"
    wmt14_prepared(work, write_corpus(tmp_path / "raw"))
    for left in ("data-bin", "data-bin.partial"):
        (work / left).mkdir()
        (work / left / "dict.en.txt").write_text("tok0 1\n")
    env = wmt14_stand_ins(tmp_path, stubs=("fairseq-train",))
    result = run_script(WMT14, str(work), env=env, timeout=240)
    assert "Traceback" not in output_of(result), output_of(result)[-3000:]
    assert "stand-in" in output_of(result)  # the loop trained: past the binarizing
    assert (work / ".done-preprocess").exists() and not (work / "data-bin.partial").exists()
    binarized = {path.name for path in (work / "data-bin").iterdir()}
    assert {"dict.en.txt", "dict.de.txt", "train.en-de.en.bin", "test.en-de.de.idx"} <= binarized
    assert len((work / "data-bin" / "dict.en.txt").read_text().splitlines()) > 1


def test_wmt14_averages_and_decodes_once_per_run(tmp_path):
    """Every step but the last two was skipped once finished: each re-run averaged the
    checkpoints and decoded newstest2014 again. Then their markers were in WORK_DIR: a new run
    (WORK_DIR/run removed) skipped both, leaving no model. The recipe runs beside a loop that
    stands in for learn_to_share.sh (finished), with stand-ins for the average and the decoding
    that write their outputs."""
    recipe = tmp_path / "examples" / "wmt14_en_de" / "run.sh"
    recipe.parent.mkdir(parents=True)
    shutil.copy(WMT14, recipe)
    shutil.copy(REPO / "examples" / "commands.sh", tmp_path / "examples")
    (tmp_path / "examples" / "learn_to_share.sh").write_text("#!/usr/bin/env bash\nexit 0\n")
    (tmp_path / "examples" / "learn_to_share.sh").chmod(0o755)
    work = tmp_path / "wmt14"
    wmt14_prepared(work, write_corpus(tmp_path / "raw"))
    (work / ".done-preprocess").touch()
    env = wmt14_stand_ins(tmp_path)
    calls = tmp_path / "calls.log"
    names = ["fairseq-san-average", "fairseq-generate", "fairseq-san-score"]
    for name in names:
        stand_in = tmp_path / "bin" / name
        stand_in.write_text(
            f'#!/usr/bin/env bash\necho {name} >> "{calls}"\n'
            'while [ $# -gt 1 ]; do case $1 in --output | -o) mkdir -p "${2%/*}"; touch "$2" ;; '
            'esac; shift; done\n'
        )
        stand_in.chmod(0o755)
    for new_run in (False, False, True):
        if new_run:
            shutil.rmtree(work / "run")
        result = run_script(recipe, str(work), env=env, timeout=120)
        assert result.returncode == 0, output_of(result)[-3000:]
    assert calls.read_text().split() == names * 2
    assert (work / "run" / "final.pt").exists() and (work / "run" / "final" / "test.json").exists()
    (work / "run" / "final.pt").unlink()  # averaged again: the old test.json scored the old model
    result = run_script(recipe, str(work), env=env, timeout=120)
    assert result.returncode == 0, output_of(result)[-3000:]
    assert calls.read_text().split() == names * 3


def test_wmt14_refuses_a_real_run_without_its_tools(tmp_path):
    """Without fairseq's commands (or curl, perl, python...) on PATH, hours of downloads and
    tokenizing ran before "fairseq-preprocess: command not found"."""
    env = {**cli_env(), "PATH": "/usr/bin:/bin"}
    work = tmp_path / "wmt14"
    result = run_script(WMT14, str(work), env=env, timeout=120)
    assert result.returncode == 1
    assert re.fullmatch(r"run\.sh: \S+ not found on PATH \(activate the environment of make "
                        r"setup\)\n", result.stderr), result.stderr  # fmt: skip
    assert not work.exists()


def test_wmt14_refuses_a_work_dir_with_a_colon(tmp_path):
    """fairseq reads DATA1:DATA2 as two data directories; fairseq-preprocess --validpref X,Y as
    two prefixes (a traceback after the download and the preparation)."""
    for name, said in (("wmt:14", "holds ':'"), ("wmt,14", "holds ','")):
        work = tmp_path / name
        result = run_script(WMT14, "--dry-run", str(work), timeout=120)
        assert result.returncode == 2 and result.stderr.startswith(
            f"run.sh: WORK_DIR {work} {said}"
        ), result.stderr


def test_wmt14_dry_run_scores_against_references_without_bpe(tmp_path):
    """fairseq's prepare-wmt14en2de.sh writes wmt14_en_de/valid.de *after* apply_bpe.py ("@@ "
    segmented); fairseq-generate --post-process subword_nmt removes the BPE from the hypotheses,
    so BLEU against that file compares de-BPE'd text with BPE'd text."""
    work = tmp_path / "wmt14"
    result = run_script(WMT14, "--dry-run", str(work), timeout=120)
    output = output_of(result)
    assert result.returncode == 0, output[-4000:]
    score = printed_commands(output, "fairseq-san-score")[0]  # the validation's; then the test's
    reference = last_values(score)["--reference"]
    assert reference != str(work / "wmt14_en_de" / "valid.de"), (
        f"the validation BLEU reference {reference} is BPE-segmented text"
    )


def test_wmt14_scores_newstest2014_with_a_signature_against_its_text_without_bpe(tmp_path):
    """newstest2014's BLEU was only the line fairseq-generate's sacrebleu scorer writes, without a
    signature: it is scored as the validation is, by fairseq-san-score into final/test.json,
    against the test's German without its BPE (made beside it, as the hypotheses lose theirs)."""
    work = tmp_path / "wmt14"
    prepared = wmt14_prepared(work, write_corpus(tmp_path / "raw"))
    (prepared / "test.de").write_text("ein Te@@ st\nzwei@@\n")
    (work / ".done-preprocess").touch()
    env = wmt14_stand_ins(tmp_path, stubs=("fairseq-train",))
    run_script(WMT14, str(work), env=env, timeout=120)
    assert (prepared / "test.ref.de").read_text() == "ein Test\nzwei\n"
    output = output_of(run_script(WMT14, "--dry-run", str(work), timeout=120))
    final = work / "run" / "final"
    assert printed_commands(output, "fairseq-san-score")[-1][1:] == [
        str(final / "generate-test.txt"), "--reference", str(prepared / "test.ref.de"),
        "-o", str(final / "test.json"),
    ]  # fmt: skip


# --- --cpu-ranks ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ranks_run(data, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("ranks") / "run"
    result = run_loop(data, run_dir, "--max-iterations", "1", "--cpu-ranks", "2", updates=10)
    return run_dir, result


@pytest.mark.slow
def test_cpu_ranks_trains_with_two_processes(ranks_run):
    run_dir, result = ranks_run
    output = output_of(result)
    assert result.returncode == 0, output[-5000:]
    iteration = run_dir / "iter0"
    assert (iteration / "trained").is_file()
    rank1 = iteration / "rank-1.log"
    assert rank1.is_file()
    log = (iteration / "train.log").read_text()
    assert "distributed init (rank 0)" in log
    assert "distributed init (rank 1)" in rank1.read_text()
    state = load_checkpoint(iteration / "checkpoints" / "checkpoint_best.pt")
    assert state["cfg"]["distributed_training"]["distributed_world_size"] == 2
    assert state["optimizer_history"][-1]["num_updates"] == 10
    # --max-iterations 1: P1 is learned, not trained; the summary has one row.
    assert read_json(run_dir / "iter1" / "policy.json") == ONE_BLOCK
    assert not (run_dir / "iter1" / "trained").exists()
    assert len(table_rows((run_dir / "loop.md").read_text())) == 1
    summary = read_json(run_dir / "loop.json")
    assert len(summary) == 1 and summary[0]["num_updates"] == 10
    assert isinstance(summary[0]["train_seconds"], float)


def test_summary_counts_tied_embeddings_saved_as_copies_once(tmp_path):
    """A checkpoint saved from a GPU holds fairseq's tied embeddings as three separate copies;
    the parameter count must not depend on where the model was trained."""
    iteration = tmp_path / "run" / "iter0"
    (iteration / "checkpoints").mkdir(parents=True)
    (iteration / "policy.json").write_text(json.dumps(NO_SHARING))
    tied = ["encoder.embed_tokens.weight", "decoder.embed_tokens.weight",
            "decoder.output_projection.weight"]  # fmt: skip
    model = {key: torch.ones(10, 4) for key in tied}  # three storages
    model["decoder.layers.0.fc1.weight"] = torch.ones(8, 4)
    flags = argparse.Namespace(share_all_embeddings=True, share_decoder_input_output_embed=True)
    torch.save(
        {"model": model, "cfg": {"model": flags}, "optimizer_history": [{"num_updates": 5}],
         "extra_state": {"best": 7.0}},
        iteration / "checkpoints" / "checkpoint_best.pt",
    )  # fmt: skip
    result = run_cli("fairseq-san-loop", "summary", str(tmp_path / "run"))
    assert result.returncode == 0, result.stderr[-3000:]
    (row,) = read_json(tmp_path / "run" / "loop.json")
    assert row["parameters"] == 10 * 4 + 8 * 4


def test_summary_marks_an_iteration_whose_training_did_not_finish(tmp_path):
    """A checkpoint without the loop's ``trained`` marker (a run stopped inside its training, or
    still training) is a row marked unfinished, not one that reads like a finished iteration."""
    iteration = iteration_with_checkpoint(tmp_path / "run")
    result = run_cli("fairseq-san-loop", "summary", str(tmp_path / "run"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "| 0 (training unfinished) |" in result.stdout
    assert read_json(tmp_path / "run" / "loop.json")[0]["trained"] is False
    (iteration / "trained").touch()
    result = run_cli("fairseq-san-loop", "summary", str(tmp_path / "run"))
    assert "| 0 |" in result.stdout and "unfinished" not in result.stdout
    assert read_json(tmp_path / "run" / "loop.json")[0]["trained"] is True


def test_summary_shows_no_loss_of_a_checkpoint_chosen_by_bleu(tmp_path):
    """With --best-checkpoint-metric bleu fairseq stores the best BLEU where the summary read the
    best validation loss: loop.md showed a valid loss of 0.040 (a BLEU of 0.04)."""
    iteration = iteration_with_checkpoint(tmp_path / "run")
    checkpoint = iteration / "checkpoints" / "checkpoint_best.pt"
    state = torch.load(checkpoint)
    state["cfg"] = {"checkpoint": {"best_checkpoint_metric": "bleu"}}
    torch.save(state, checkpoint)
    result = run_cli("fairseq-san-loop", "summary", str(tmp_path / "run"))
    assert result.returncode == 0, result.stderr[-3000:]
    (row,) = read_json(tmp_path / "run" / "loop.json")
    assert row["valid_loss"] is None and row["num_updates"] == 10
    state["cfg"] = {"checkpoint": {"best_checkpoint_metric": "loss"}}
    torch.save(state, checkpoint)
    assert run_cli("fairseq-san-loop", "summary", str(tmp_path / "run")).returncode == 0
    assert read_json(tmp_path / "run" / "loop.json")[0]["valid_loss"] == 6.25


def test_summary_of_a_distributed_training_checkpoint(tmp_path):
    """fairseq stores previous_training_time as a tensor after distributed training
    (trainer._cumulative_training_time = all-reduced total / world size); loop.json must still
    be written."""
    iteration = tmp_path / "run" / "iter0"
    (iteration / "checkpoints").mkdir(parents=True)
    (iteration / "policy.json").write_text(json.dumps(NO_SHARING))
    torch.save(
        {
            "model": {"w": torch.zeros(3, 4)},
            "optimizer_history": [{"num_updates": 10}],
            "extra_state": {
                "best": 6.25,
                "previous_training_time": torch.tensor(90.0, dtype=torch.float64),
            },
        },
        iteration / "checkpoints" / "checkpoint_best.pt",
    )
    (iteration / "trained").touch()  # as the loop marks it
    result = run_cli("fairseq-san-loop", "summary", str(tmp_path / "run"))
    assert result.returncode == 0, result.stderr[-3000:]
    (row,) = read_json(tmp_path / "run" / "loop.json")
    assert row["train_seconds"] == 90.0 and row["parameters"] == 12 and row["num_updates"] == 10
    assert "| 0 | decoder_self none" in (tmp_path / "run" / "loop.md").read_text()


def iteration_with_checkpoint(run_dir: Path) -> Path:
    """RUN/iter0 with a policy and a small valid checkpoint_best.pt, as summary reads them."""
    iteration = run_dir / "iter0"
    (iteration / "checkpoints").mkdir(parents=True)
    (iteration / "policy.json").write_text(json.dumps(NO_SHARING))
    torch.save({"model": {"w": torch.zeros(3, 4)}, "optimizer_history": [{"num_updates": 10}],
                "extra_state": {"best": 6.25}}, iteration / "checkpoints" / "checkpoint_best.pt")
    return iteration


def test_summary_over_a_truncated_checkpoint_is_one_line_naming_it(tmp_path):
    checkpoint = iteration_with_checkpoint(tmp_path / "run") / "checkpoints" / "checkpoint_best.pt"
    checkpoint.write_bytes(checkpoint.read_bytes()[:200])
    result = run_cli("fairseq-san-loop", "summary", str(tmp_path / "run"))
    line = one_error_line(result, "fairseq-san-loop")
    assert str(checkpoint) in line and "truncated" in line, line
    assert not (tmp_path / "run" / "loop.md").exists()


@pytest.mark.parametrize(
    "field, value, said",
    [
        ("parameters", "x", "its parameters is 'x', not int"),
        ("signature", [1], "its signature is [1], not str or null"),
        ("train_seconds", "x", "its train_seconds is 'x', not int or float or null"),
        ("valid_loss", True, "its valid_loss is True, not int or float or null"),
        # the table's float() raised OverflowError
        ("valid_loss", 10**400, f"its valid_loss {'1' + '0' * 79}... is beyond a float's range"),
    ],
)  # fmt: skip
def test_summary_over_a_recorded_row_of_other_types_is_one_line(tmp_path, field, value, said):
    """loop.json of a run dir received from elsewhere: ValueError (format), TypeError
    (unhashable) tracebacks from the table."""
    run_dir = tmp_path / "run"
    iteration_with_checkpoint(run_dir)
    assert run_cli("fairseq-san-loop", "summary", str(run_dir)).returncode == 0
    (run_dir / "iter0" / "checkpoints" / "checkpoint_best.pt").unlink()  # the row is read back
    rows = json.loads((run_dir / "loop.json").read_text())
    rows[0][field] = value
    (run_dir / "loop.json").write_text(json.dumps(rows))
    line = one_error_line(run_cli("fairseq-san-loop", "summary", str(run_dir)), "fairseq-san-loop")
    assert line == (
        f"fairseq-san-loop: error: {run_dir / 'loop.json'}: the row of iteration 0: {said}: "
        "delete it to rebuild it from the checkpoints"
    )


def test_summary_over_a_recorded_row_lacking_fields_is_one_line(tmp_path):
    """A row of loop.json edited by hand to lack a cell the table shows: a KeyError traceback."""
    run_dir = tmp_path / "run"
    iteration_with_checkpoint(run_dir)
    assert run_cli("fairseq-san-loop", "summary", str(run_dir)).returncode == 0
    (run_dir / "iter0" / "checkpoints" / "checkpoint_best.pt").unlink()  # the row is read back
    (run_dir / "loop.json").write_text(json.dumps([{"iteration": 0, "policy": "-"}]))
    line = one_error_line(run_cli("fairseq-san-loop", "summary", str(run_dir)), "fairseq-san-loop")
    assert line == (
        f"fairseq-san-loop: error: {run_dir / 'loop.json'}: the row of iteration 0: it lacks "
        "parameters, num_updates, train_seconds, valid_loss: delete it to rebuild it from the "
        "checkpoints"
    )


def test_summary_over_an_analysis_of_another_shape_names_its_file(tmp_path):
    """iter<k>/analysis/js.json whose matrix is no list of rows: the error named no file."""
    run_dir = tmp_path / "run"
    iteration = iteration_with_checkpoint(run_dir)
    (run_dir / "run.json").write_text(json.dumps({"options": {"--theta-self": "0.4"}}))
    (run_dir / "iter1").mkdir()
    (run_dir / "iter1" / "policy.json").write_text(json.dumps(NO_SHARING))
    (iteration / "analysis").mkdir()
    (iteration / "analysis" / "js.json").write_text(json.dumps({"decoder_self": 3}))
    line = one_error_line(run_cli("fairseq-san-loop", "summary", str(run_dir)), "fairseq-san-loop")
    assert line == (
        f"fairseq-san-loop: error: {iteration / 'analysis' / 'js.json'}: decoder_self: JS matrix "
        "must be a non-empty list of rows: delete it and rerun the step that writes it"
    )


def test_summary_over_scores_or_thresholds_of_other_types_is_one_line(tmp_path):
    """valid.json {"bleu": "high"} (a ValueError formatting it) and run.json's --theta-self "abc"
    (a ValueError converting it), in a run dir received from elsewhere."""
    run_dir = tmp_path / "run"
    iteration = iteration_with_checkpoint(run_dir)
    (iteration / "valid.json").write_text(json.dumps({"bleu": "high"}))
    line = one_error_line(run_cli("fairseq-san-loop", "summary", str(run_dir)), "fairseq-san-loop")
    assert line == (
        f"fairseq-san-loop: error: {iteration / 'valid.json'}: its bleu is 'high', not int or "
        "float or null: delete it and rerun the step that writes it"
    )
    (iteration / "valid.json").write_text(json.dumps({"bleu": 10**400}))  # an OverflowError
    line = one_error_line(run_cli("fairseq-san-loop", "summary", str(run_dir)), "fairseq-san-loop")
    assert line == (
        f"fairseq-san-loop: error: {iteration / 'valid.json'}: its bleu {'1' + '0' * 79}... is "
        "beyond a float's range: delete it and rerun the step that writes it"
    )
    (iteration / "valid.json").write_text(json.dumps({"bleu": 12.5}))
    (run_dir / "run.json").write_text(json.dumps({"options": {"--theta-self": "abc"}}))
    (run_dir / "iter1").mkdir()
    (run_dir / "iter1" / "policy.json").write_text(json.dumps(NO_SHARING))
    (iteration / "analysis").mkdir()
    (iteration / "analysis" / "js.json").write_text("{}")
    line = one_error_line(run_cli("fairseq-san-loop", "summary", str(run_dir)), "fairseq-san-loop")
    assert line == (
        "fairseq-san-loop: error: run.json records --theta-self 'abc', which is no threshold: a "
        "record the recipe did not write; delete it and rerun the recipe"
    )


def test_summary_replaces_links_in_the_run_dir_and_writes_no_file_they_name(tmp_path):
    """A run dir received from elsewhere with loop.md (or loop.md.tmp) linked to another file:
    the summary wrote the loop's table into that file."""
    run_dir = tmp_path / "run"
    iteration_with_checkpoint(run_dir)
    victims = {name: tmp_path / f"victim-{name}" for name in ("loop.md", "loop.json.tmp")}
    for name, victim in victims.items():
        victim.write_text("precious\n")
        (run_dir / name).symlink_to(victim)
    result = run_cli("fairseq-san-loop", "summary", str(run_dir))
    assert result.returncode == 0, result.stderr
    assert all(victim.read_text() == "precious\n" for victim in victims.values())
    assert not (run_dir / "loop.md").is_symlink() and "| iter |" in (run_dir / "loop.md").read_text()
    assert not (run_dir / "loop.json.tmp").exists() and (run_dir / "loop.json").is_file()
    (run_dir / "loop.md").unlink()
    os.mkfifo(run_dir / "loop.md")  # opened for writing, it waited for a reader
    assert run_cli("fairseq-san-loop", "summary", str(run_dir), timeout=60).returncode == 0
    assert (run_dir / "loop.md").is_file()
    (run_dir / "loop.json").unlink()
    os.mkfifo(run_dir / "loop.json")  # read, it waited for a writer
    refused = run_cli("fairseq-san-loop", "summary", str(run_dir), timeout=60)
    assert one_error_line(refused, "fairseq-san-loop").endswith(
        f"loop summary \"{run_dir / 'loop.json'}\" is a device, pipe or socket, not a file: "
        "delete it and rerun the step that writes it"
    )


@pytest.mark.parametrize(
    "field,value",
    [("optimizer_history", []), ("extra_state", {"best": "x"}), ("model", None)],
)  # fmt: skip
def test_summary_over_a_checkpoint_without_fairseqs_training_record_is_one_line(tmp_path, field,
                                                                                 value):  # fmt: skip
    """IndexError, ValueError or TypeError tracebacks from a checkpoint whose fields are not those
    fairseq-train stores."""
    import torch

    checkpoint = iteration_with_checkpoint(tmp_path / "run") / "checkpoints" / "checkpoint_best.pt"
    state = torch.load(checkpoint, weights_only=True)
    state[field] = value
    torch.save(state, checkpoint)
    line = one_error_line(run_cli("fairseq-san-loop", "summary", str(tmp_path / "run")),
                          "fairseq-san-loop")  # fmt: skip
    assert f"checkpoint {checkpoint} lacks what fairseq-train stores (" in line, line


def test_summary_over_a_truncated_valid_json_is_one_line_naming_it(tmp_path):
    scores = iteration_with_checkpoint(tmp_path / "run") / "valid.json"
    for text in ('{"bleu": 12.5, "chrf": 3', '{"bleu": 1' + "0" * 5000 + "}"):  # int(): traceback
        scores.write_text(text)
        result = run_cli("fairseq-san-loop", "summary", str(tmp_path / "run"))
        line = one_error_line(result, "fairseq-san-loop")
        assert f'score file "{scores}": ' in line, line
        assert line.endswith(": delete it and rerun the step that writes it"), line


def test_summary_keeps_the_recorded_row_of_an_iteration_whose_checkpoint_is_gone(tmp_path):
    """A run dir restored without checkpoints on another machine trains the next iteration; the
    summary it writes then must still hold the earlier iterations as recorded, with the policy
    each learned brought up to date, and no row for an iteration folder that is gone."""
    run_dir = tmp_path / "run"
    (iteration_with_checkpoint(run_dir) / "trained").touch()
    assert run_cli("fairseq-san-loop", "summary", str(run_dir)).returncode == 0
    (recorded,) = read_json(run_dir / "loop.json")
    shutil.rmtree(run_dir / "iter0" / "checkpoints")
    second = run_dir / "iter1"
    (second / "checkpoints").mkdir(parents=True)
    (second / "policy.json").write_text(json.dumps(ONE_BLOCK))
    torch.save({"model": {"w": torch.zeros(2, 4)}, "optimizer_history": [{"num_updates": 20}],
                "extra_state": {"best": 5.5}}, second / "checkpoints" / "checkpoint_best.pt")
    (second / "trained").touch()
    stale = {**recorded, "iteration": 7}  # a row whose folder was deleted
    (run_dir / "loop.json").write_text(json.dumps([recorded, stale]))
    result = run_cli("fairseq-san-loop", "summary", str(run_dir))
    assert result.returncode == 0, result.stderr[-3000:]
    first, trained = read_json(run_dir / "loop.json")
    assert first == {**recorded, "learned": "decoder_self {6}  decoder_encdec {6}  encoder_self none"}
    assert (trained["iteration"], trained["num_updates"], trained["parameters"]) == (1, 20, 8)
    rows = table_rows((run_dir / "loop.md").read_text())
    assert [row.split("|")[1].strip() for row in rows] == ["0", "1"]


def test_summary_over_a_loop_json_that_is_not_a_summary_is_one_line_naming_it(tmp_path):
    iteration_with_checkpoint(tmp_path / "run")
    (tmp_path / "run" / "loop.json").write_text('{"iteration": 0}')
    result = run_cli("fairseq-san-loop", "summary", str(tmp_path / "run"))
    line = one_error_line(result, "fairseq-san-loop")
    assert 'loop.json" holds a JSON object, not a JSON array' in line, line


def test_summary_does_not_count_fairseqs_version_buffers(tmp_path):
    """fairseq-train's "num. model params" counts parameters; the encoder's and decoder's
    ``version`` buffers are in the state dict too."""
    checkpoint = iteration_with_checkpoint(tmp_path / "run") / "checkpoints" / "checkpoint_best.pt"
    state = torch.load(checkpoint)
    state["model"].update({"encoder.version": torch.tensor([3.0]), "decoder.version": torch.tensor([3.0])})
    torch.save(state, checkpoint)
    assert run_cli("fairseq-san-loop", "summary", str(tmp_path / "run")).returncode == 0
    (row,) = read_json(tmp_path / "run" / "loop.json")
    assert row["parameters"] == 12
