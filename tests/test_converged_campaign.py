"""The converged-model campaign, in slices, at toy scale on the CPU.

* ``examples/presets/gpu-converge.args``: the measured recipe, which fairseq-train accepts;
* ``docs/results/converged/run.sh SLICE --dry-run``: every slice's commands, in stages, nothing
  written;
* ``campaign_slices.py``: restoring a run dir without what did not finish, refusing
  archives of another run.sh, held-out hypotheses checked line by line;
* ``campaign_headline.py``: the README's headline table from toy archives;
* a tiny real ``en-de`` slice (slow): the archive, collected from ``SHARED/converged``,
  summary.json in the campaign's schema with caps, curves, held-out paths and provenance, and a
  second call on a fresh machine that skips everything finished;
* ``fairseq_san.loop.train_log.read_train_log`` on a resumed, wall-capped log.
"""

import gzip
import hashlib
import io
import json
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from fairseq_san.policy import theta_ranges
from helpers import REPO, alive, cli_env, printed_commands, run_cli
from paper import PAPER_JS

CAMPAIGN = REPO / "docs" / "results" / "converged"  # the campaign's own code lives there
sys.path.insert(0, str(CAMPAIGN))
from helpers import PREPARE, prepare_env, run_script, snapshot, write_fake_multi30k
from campaign_run import preset_args
from campaign_slices import CODE

RUN = REPO / "docs" / "results" / "converged" / "run.sh"
PRESET = REPO / "examples" / "presets" / "gpu-converge.args"
SCHEMA_KEYS = {"system", "seed", "policy", "params", "updates", "wall_s", "best_valid_loss", "test"}
TINY_TRAIN = (
    "--cpu --encoder-layers 2 --decoder-layers 6 --encoder-embed-dim 32 --decoder-embed-dim 32 "
    "--encoder-ffn-embed-dim 64 --decoder-ffn-embed-dim 64 --encoder-attention-heads 2 "
    "--decoder-attention-heads 2 --max-tokens 2000 --warmup-updates 5 "
    "--validate-interval-updates 5 --save-interval-updates 5 --log-interval 5"
)
TEST_SETS = ["test_2016_flickr", "test_2017_flickr"]


def campaign(
    slice_name: str, *args: str, env: Dict[str, str], timeout: int = 600, script: str = str(RUN)
) -> str:
    result = subprocess.run(
        ["bash", script, slice_name, *args], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip
    assert result.returncode == 0, (result.stdout + result.stderr)[-5000:]
    return result.stdout + result.stderr


def values(words: List[str], flag: str) -> List[str]:
    """Every value of ``flag``, in order (``--system`` is given once a system)."""
    return [words[i + 1] for i, word in enumerate(words) if word == flag]


def value(words: List[str], flag: str) -> str:
    """The last value of ``flag`` (the one fairseq and learn_to_share.sh use)."""
    return values(words, flag)[-1]


def trainings(output: str) -> List[tuple]:
    """(run dir relative to RUNS, iteration it trains up to) of each learn_to_share.sh, in order."""
    return [
        (value(words, "--run-dir").split("/runs/", 1)[1], int(value(words, "--max-iterations")) - 1)
        for words in printed_commands(output, "learn_to_share.sh")
    ]  # fmt: skip


# --- the preset -------------------------------------------------------------------------------


def test_preset_is_the_measured_recipe_with_one_stopping_rule():
    from fairseq import options

    args = options.parse_args_and_arch(
        options.get_training_parser(),
        ["data", "--task", "translation", "--arch", "transformer", *preset_args(str(PRESET))],
    )
    assert args.fp16 and args.max_tokens == 8192 and args.lr == [1e-3]
    assert args.warmup_updates == 500
    assert args.patience > 0 and 0 < args.stop_time_hours < 10 / 60  # inside one device call
    assert args.validate_interval_updates == args.save_interval_updates > 0
    assert args.log_format == "json"  # what fairseq_san.loop.train_log.read_train_log parses


# --- run.sh --dry-run -------------------------------------------------------------------------


@pytest.fixture()
def dry_env(tmp_path) -> Dict[str, str]:
    heldout = tmp_path / "shared" / "heldout"
    heldout.mkdir(parents=True)
    (heldout / "test_2018_flickr.en").write_text("A dog runs.\n")
    env = cli_env()
    env.update(RUNS=str(tmp_path / "runs"), OUT=str(tmp_path / "out"), SHARED=str(tmp_path / "shared"),
               RESULTS=str(tmp_path / "results"),  # none collected: nothing restored
               TABLES_RUNS=str(tmp_path / "tables-runs"))  # the tables slice never ran here  # fmt: skip
    return env


@pytest.mark.parametrize("setting, said", [
    ("UPDATES=abc", "UPDATES=abc: a whole number, at least 1"),  # a traceback
    ("CAP_MIN=6,5", "CAP_MIN=6,5: a number, at least 0.006 (--stop-time-hours 0.0001; 0 hours "
                    "is no cap to fairseq)"),
    # printed as --stop-time-hours 0.0000, which fairseq reads as no cap
    ("CAP_MIN=0.002", "CAP_MIN=0.002: a number, at least 0.006 (--stop-time-hours 0.0001; 0 "
                      "hours is no cap to fairseq)"),
    ("UPDATES=\u00b2", "UPDATES=\u00b2: a whole number, at least 1"),  # isdigit(): a traceback
    ("SEEDS=6 6", "SEEDS=6 6: seed 6 is given twice"),  # the second failed on the first's lock
    ("TRAIN_EXTRA=--cpu 'oops", "TRAIN_EXTRA: No closing quotation in \"--cpu 'oops\" (words "
                                "quoted as in a shell)"),  # a traceback
    ("EVAL_S=-0.5", "EVAL_S=-0.5: a number, at least 0"),  # passed its "above -1" bound
    ("EVALUATE=yes", "EVALUATE=yes: 1 (test every system) or 0 (none)"),  # tested none
    ("SEEDS=2,3", "seed 2,3 (SEEDS, STAGE2_SEED): a whole number; SEEDS lists them by spaces"),
    # FileNotFoundError, IsADirectoryError tracebacks
    ("PRESET=no-such.args", "PRESET=no-such.args: no such file (a file of fairseq-train "
                            "arguments)"),
    ("PRESET=docs", "PRESET=docs: a folder (a file of fairseq-train arguments)"),
])  # fmt: skip
@pytest.mark.parametrize("call", [["en-de", "--dry-run"], ["collect", "none.tar.gz"]])
def test_a_setting_no_slice_can_run_with_is_one_line(dry_env, setting, said, call):
    """Also where ``collect`` reads the settings (a SettingError traceback)."""
    name, value = setting.split("=", 1)
    result = subprocess.run(["bash", str(RUN), *call], cwd=REPO,
                            env={**dry_env, name: value}, capture_output=True, text=True,
                            timeout=600)  # fmt: skip
    assert result.returncode == 2, (result.stdout + result.stderr)[-3000:]
    assert result.stderr.strip().splitlines() == [f"run.sh: {said}"]


def test_no_other_seeds_are_asked_for_by_an_empty_seeds(dry_env):
    """SEEDS="" was read as unset: the en-de slice trained seeds 2 and 3 all the same."""
    output = campaign("en-de", "--dry-run", env={**dry_env, "SEEDS": ""})
    runs = {run for run, _ in trainings(output)}
    assert "en-de/baseline-s4" in runs  # STAGE2_SEED's
    assert not {"en-de/baseline-s2", "en-de/baseline-s3"} & runs


def test_a_run_dir_of_only_the_slice_never_asks_for_is_said(dry_env):
    """ONLY=en-de/baselin-s2 (misspelt) ran nothing, and the call exited 0 without a word."""
    output = campaign("en-de", "--dry-run", env={**dry_env, "ONLY": "en-de/baselin-s2"})
    assert ("== note: ONLY names no run dir that the en-de slice asked for: en-de/baselin-s2 (it "
            "asked for: en-de/baseline-s2 en-de/baseline-s3 ") in output  # fmt: skip


def dry_runs(env: Dict[str, str]) -> Dict[str, str]:
    return {name: campaign(name, "--dry-run", env=env) for name in ("en-de", "pairs", "tables", "bench")}


def test_dry_run_prints_each_slice_in_two_stages_and_writes_nothing(dry_env, tmp_path):
    before = snapshot(REPO / "docs" / "results")
    outputs = dry_runs(dry_env)
    assert snapshot(REPO / "docs" / "results") == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["shared"]

    preset = preset_args(str(PRESET))
    for name, output in outputs.items():
        caps, budgets = set(), set()
        for words in printed_commands(output, "learn_to_share.sh"):
            after = words[words.index("--") + 1 :]
            assert after[: len(preset)] == preset, name  # the preset, then the slice's own cap
            cap = value(words, "--stop-time-hours")
            if "/smoke/" in value(words, "--run-dir"):  # not a compared system: its command's cap
                assert float(cap) == pytest.approx(120 / 3600, abs=1e-4), name
                continue
            caps.add(cap)
            budgets.add(value(words, "--updates"))
            assert value(words, "--decode-batch-size") == "128"  # a GPU's batch
        assert len(caps) == 1, name  # the same cap for every system of the slice
        assert float(caps.pop()) == pytest.approx((2.5 if name == "bench" else 6.5) / 60, abs=1e-4)
        assert budgets == {"1000000" if name == "bench" else "3000"}, name  # bench: the cap alone
        for words in printed_commands(output, "campaign_slices.py"):
            if "heldout" in words:
                assert value(words, "--batch-size") == "128"
        (record,) = printed_commands(output, "campaign_slices.py")[-1:]
        assert record[2:5] == ["record", dry_env["RUNS"], "--slice"] and record[-2:] == [str(RUN), name]
        # Packed after the first stage too: a call stopped later still returns that archive.
        tars = printed_commands(output, "tar")
        assert len(tars) >= 2 and all(tar == tars[0] for tar in tars), name
        tar = tars[0]
        assert tar[tar.index("-C") + 1] == dry_env["RUNS"] and "--exclude=*.pt" in tar
        archive = f"{dry_env['OUT']}/converged-{name}.tar.gz"
        assert value(tar, "czf") == archive + ".part"  # renamed when whole
        assert printed_commands(output, "mv") == [["mv", archive + ".part", archive]] * len(tars)

    en_de = trainings(outputs["en-de"])
    stage1 = [("en-de/loop", 0), ("en-de/baseline-s2", 0), ("en-de/baseline-s3", 0),
              ("en-de/uniform-6-6", 0)]  # fmt: skip
    stage2 = [("en-de/loop", 1), ("en-de/san-s2", 0), ("en-de/san-s3", 0), ("en-de/baseline-s4", 0)]
    assert en_de == stage1 + stage2  # four trainings in each stage
    seeds = {run_dir: value(words, "--seed") for (run_dir, _), words in
             zip(en_de, printed_commands(outputs["en-de"], "learn_to_share.sh")) if "--seed" in words}  # fmt: skip
    assert seeds == {"en-de/baseline-s2": "2", "en-de/baseline-s3": "3", "en-de/san-s2": "2",
                     "en-de/san-s3": "3", "en-de/baseline-s4": "4"}  # fmt: skip
    tests = printed_commands(outputs["en-de"], "test_bleu.sh")
    assert [words[-1].split("=")[0] for words in tests] == ["iter0"] * 4 + ["iter1"] + ["iter0"] * 3
    heldout = printed_commands(outputs["en-de"], "campaign_slices.py")
    assert sum("heldout" in words for words in heldout) == 8  # every En->De system

    pairs = trainings(outputs["pairs"])
    assert pairs == [(f"{p}/loop", k) for k in (0, 1) for p in ("de-en", "en-fr", "en-cs")] + [
        ("en-de/san-mean-s2", 0)]  # no en-de loop collected: stage 2's fourth place  # fmt: skip
    (mean,) = printed_commands(outputs["pairs"], "fairseq-san-policy")
    analyses = [word.split("/results/")[1] for word in mean if "/results/" in word]
    assert analyses == [f"en-de/{run}/iter0/analysis/js.json" for run in (
        "loop", "baseline-s2", "baseline-s3", "baseline-s4")]  # the en-de slice's seeds  # fmt: skip
    assert value(mean, "-o") == f"{dry_env['RUNS']}/en-de/policies/mean.json"
    assert value(printed_commands(outputs["pairs"], "learn_to_share.sh")[-1], "--seed") == "2"
    heldout = [w for w in printed_commands(outputs["pairs"], "campaign_slices.py") if "heldout" in w]
    assert {words[3].split("/runs/")[1] for words in heldout} == {
        "en-fr/loop", "en-cs/loop", "en-de/san-mean-s2"}  # En->X only  # fmt: skip

    tables = trainings(outputs["tables"])
    assert tables == [(f"en-de/{name}", 0) for name in (
        "baseline-s5", "san-s4", "aan-san", "own-v",  # stage 1: four at a time, then stage 2:
        "theta-0.3-0.4", "theta-0.3-0.5", "theta-0.4-0.4", "uniform-6-3-3", "aan", "enc-0.4")]  # fmt: skip
    words = {value(w, "--run-dir").split("/runs/")[1]: w for w in printed_commands(outputs["tables"], "learn_to_share.sh")}
    assert value(words["en-de/own-v"], "--san-encdec-share") == "weights"
    assert value(words["en-de/aan-san"], "--arch") == "transformer_aan_small"
    assert value(words["en-de/san-s4"], "--seed") == "4"  # the bench slice's SAN, beside baseline s4
    assert value(words["en-de/baseline-s5"], "--keep-interval-updates") == "1000"  # Figure 5
    assert value(words["en-de/baseline-s5"], "--seed") == "5"
    learned = printed_commands(outputs["tables"], "fairseq-san-policy")
    analysed = {word.split("/results/")[1] for words in learned[:4] for word in words if "/results/" in word}
    assert analysed == {"en-de/loop/iter0/analysis/js.json"}  # the en-de loop's, as san's policy
    assert [value(w, "-o").split("/runs/")[1] for w in learned[:4]] == [
        f"en-de/policies/{name}.json" for name in ("theta-0.3-0.4", "theta-0.3-0.5", "theta-0.4-0.4",
                                                   "enc-0.4")]  # fmt: skip
    validates = printed_commands(outputs["tables"], "fairseq-validate")  # Figure 5's analyses, and:
    (other,) = [words for words in validates if value(words, "--valid-subset") == "test"]
    assert value(other, "--path").endswith("baseline-s5/iter0/checkpoints/checkpoint_best.pt")
    assert value(other, "--san-analysis-dir").endswith("baseline-s5/iter0/analysis-test")
    (learned,) = [w for w in learned if "--explain" in w]
    assert value(learned, "-o").endswith("baseline-s5/policies/test-sentences.json")

    bench = trainings(outputs["bench"])
    assert [run for run in bench if not run[0].startswith("smoke/")] == [
        ("en-de/baseline-bench", 0), ("en-de/san-bench", 0), ("en-de/aan-san-bench", 0)]  # fmt: skip
    words = {value(w, "--run-dir").split("/runs/")[1]: w for w in printed_commands(outputs["bench"], "learn_to_share.sh")}
    assert value(words["en-de/aan-san-bench"], "--arch") == "transformer_aan_small"
    (aan_policy,) = [w for w in printed_commands(outputs["bench"], "campaign_slices.py") if "aan-policy" in w]
    assert aan_policy[3].endswith("/results/en-de/loop/iter1/policy.json")  # the headline SAN's
    smoke = {run_dir: w for (run_dir, _), w in zip(bench, printed_commands(outputs["bench"], "learn_to_share.sh"))
             if run_dir.startswith("smoke/")}  # fmt: skip
    assert value(smoke["smoke/spawn-gloo"], "--distributed-world-size") == "2"
    for backend in ("gloo", "nccl"):
        assert "torchrun --nproc_per_node 2" in smoke[f"smoke/torchrun-{backend}"]
        assert value(smoke[f"smoke/torchrun-{backend}"], "--distributed-backend") == backend
    runs = printed_commands(outputs["bench"], "fairseq-san-bench")
    assert [value(words, "--batch-size") for words in runs] == ["16", "128", "128"]
    assert ["--fp16" in words for words in runs] == [False, False, True]  # fp16 last: optional
    # models of 2.5 minutes: beside, not over, the converged models' benchmark (en-de/bench)
    assert [value(words, "--out-dir").split("/runs/")[1] for words in runs] == [
        "en-de/bench-trained/batch16", "en-de/bench-trained/batch128",
        "en-de/bench-trained/batch128-fp16"]  # fmt: skip
    for words in runs:
        assert "--gpu" in words and words[words.index("--beams") + 1 : words.index("--beams") + 3] == ["4", "20"]
        assert words[words.index("--modes") + 1 : words.index("--modes") + 3] == ["natural", "fixed"]
        systems = values(words, "--system")
        fast = [s.split("=")[0] for s in systems if s.endswith(':{"san_decoding": "fast"}')]
        assert fast == ["san-fast", "aan-san-fast"]
        for execution in ("eager", "graph"):  # issue 19: the static decoder both ways
            static = [s.split("=")[0] for s in systems
                      if f'"san_decoder_execution": "{execution}"' in s]  # fmt: skip
            assert static == [f"{model}-{execution}" for model in ("baseline", "san", "aan-san")]


def test_the_archive_keeps_figure_5s_js_not_its_attention_nor_checkpoints(dry_env, tmp_path):
    """The slice's own tar and mv commands on a toy RUNS: what a later call needs and the paired
    test reads travels; Figure 5's attention dumps and heatmaps (per checkpoint) and checkpoints
    do not."""
    output = campaign("tables", "--dry-run", env=dry_env)
    tar, move = printed_commands(output, "tar")[-1], printed_commands(output, "mv")[-1]
    runs, out = Path(dry_env["RUNS"]), Path(dry_env["OUT"])
    loop = "en-de/baseline-s5"
    kept = [f"{loop}/iter0/analysis/attention-decoder_self.npz", f"{loop}/iter0/analysis/js.json",
            f"{loop}/figure5/checkpoint_1_100/js.json",
            f"{loop}/test-bleu/iter0/test/generate-test.txt"]
    left = [f"{loop}/figure5/checkpoint_1_100/attention-decoder_self.npz",
            f"{loop}/figure5/checkpoint_1_100/js-decoder_self.png",
            f"{loop}/iter0/checkpoints/checkpoint_best.pt"]  # fmt: skip
    for name in kept + left:
        (runs / name).parent.mkdir(parents=True, exist_ok=True)
        (runs / name).write_text("x")
    out.mkdir()
    subprocess.run(tar, check=True)
    subprocess.run(move, check=True)
    with tarfile.open(out / "converged-tables.tar.gz") as archive:
        names = {name.removeprefix("./") for name in archive.getnames()}
    assert set(kept) <= names and not names & set(left)


def test_a_system_without_time_for_its_cap_and_evaluation_waits_for_the_next_call(dry_env, tmp_path):
    """With less time left than CAP_MIN + EVAL_S, no system starts (each says so) and the call
    still packs its archive: the slice's next call runs them. The provenance it packs names the
    plugin that ran: this checkout's, also where an installed one comes first on PYTHONPATH (as
    the bundle's wheel does on the GPU machine, possibly older than the tree sent there), and
    where CDPATH is set (with it, cd printed the folder, which PYTHONPATH took too)."""
    stale = tmp_path / "prefix" / "fairseq_san"
    stale.mkdir(parents=True)
    (stale / "__init__.py").write_text("raise ImportError('the bundle wheel, older than the tree')")
    env = {**dry_env, "SLICE_S": "100", "CAP_MIN": "1", "EVAL_S": "60", "RESULTS": str(tmp_path / "results"),
           "PYTHONPATH": str(stale.parent), "CDPATH": "."}  # fmt: skip
    output = campaign("en-de", env=env, script=str(RUN.relative_to(REPO)))  # as CDPATH looks up
    assert printed_commands(output, "learn_to_share.sh") == []
    for name in ("loop", "baseline-s2", "baseline-s3", "uniform-6-6"):
        assert f"== en-de/{name}: not started: " in output and "it needs 120 (CAP_MIN, EVAL_S)" in output
    assert "== en-de/loop: skipped, iteration 0 did not finish" in output
    with tarfile.open(Path(dry_env["OUT"]) / "converged-en-de.tar.gz") as archive:
        (record,) = [name for name in archive.getnames() if name.startswith("./provenance/en-de-")]
        assert json.load(archive.extractfile(record))["plugin"] == "fairseq_san"


def test_bench_trains_again_on_a_fresh_machine_and_benchmarks_only_checkpoints_it_has(
    dry_env, tmp_path
):
    """Without the tables slice's models on this machine, the bench slice trains its own: its run
    dirs are not restored from the collected results (its benchmark needs their checkpoints), and
    without checkpoints there is no benchmark (one line says so)."""
    results = tmp_path / "results"
    (results / "en-de" / "baseline-bench" / "iter0").mkdir(parents=True)
    (results / "en-de" / "baseline-bench" / "done.iter0").touch()
    env = {**dry_env, "SLICE_S": "100", "CAP_MIN": "1", "EVAL_S": "60", "RESULTS": str(results),
           "ONLY": "en-de/baseline-bench"}  # fmt: skip
    output = campaign("bench", env=env)
    assert "== en-de/baseline-bench: not started: " in output  # not "done in an earlier run"
    assert not (Path(dry_env["RUNS"]) / "en-de" / "baseline-bench").exists()
    assert "== bench: not run: a model without its trained checkpoint here among " in output
    assert printed_commands(output, "fairseq-san-bench") == []


@pytest.fixture()
def tables_models(dry_env, tmp_path) -> Dict[str, str]:
    """The bench slice's environment on the machine where the tables slice's first call trained
    baseline seed 5, SAN seed 4 and AAN+SAN (toy checkpoints), with a ``fairseq-san-bench`` that
    records its arguments (bench.args, one line of JSON a call)."""
    tables = tmp_path / "tables-runs"
    for name in ("baseline-s5", "san-s4", "aan-san"):
        (tables / "en-de" / name / "iter0" / "checkpoints").mkdir(parents=True)
        (tables / "en-de" / name / "iter0" / "checkpoints" / "checkpoint_best.pt").write_text("x")
        (tables / "en-de" / name / "iter0" / "trained").touch()
    return {**dry_env, "TABLES_RUNS": str(tables), "PATH": f"{bench_stub(tmp_path)}:{dry_env['PATH']}"}


def bench_stub(folder: Path) -> Path:
    """A folder holding a ``fairseq-san-bench`` that appends its arguments to FOLDER/bench.args
    (a line of JSON a call) and benchmarks nothing."""
    stub = folder / "bin" / "fairseq-san-bench"
    stub.parent.mkdir()
    stub.write_text(f"#!{sys.executable}\nimport json, sys\n"
                    f"open({str(folder / 'bench.args')!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n")
    stub.chmod(0o755)
    return stub.parent


def test_bench_benchmarks_the_tables_models_trained_on_this_machine(tables_models, tmp_path):
    """Right after the tables slice's first call, on the same machine, the bench slice trains
    nothing: it benchmarks that call's converged baseline, SAN and AAN+SAN, then runs the smoke
    runs where time is left (never beside the benchmark)."""
    output = campaign("bench", env={**tables_models, "SLICE_S": "100", "BENCH_S": "0"})
    assert "== bench: the tables slice's models on this machine: " in output
    assert printed_commands(output, "learn_to_share.sh") == []
    for name in ("spawn-gloo", "torchrun-gloo", "torchrun-nccl"):
        assert f"== smoke/{name}: not started: " in output  # 100 s left: it needs 120 (JOB_S)
    calls = [json.loads(line) for line in (tmp_path / "bench.args").read_text().splitlines()]
    assert [value(words, "--batch-size") for words in calls] == ["16", "128", "128"]
    assert value(calls[0], "--out-dir").endswith("/en-de/bench/batch16")  # the headline's speed
    tables = tables_models["TABLES_RUNS"]
    systems = dict(system.split("=", 1) for system in values(calls[0], "--system"))
    assert systems["baseline"] == f"{tables}/en-de/baseline-s5/iter0/checkpoints/checkpoint_best.pt"
    assert systems["san-fast"].startswith(f"{tables}/en-de/san-s4/iter0/")
    assert systems["aan-san-graph"].startswith(f"{tables}/en-de/aan-san/iter0/")


def test_a_failed_benchmark_is_said_in_the_calls_output(tables_models, tmp_path):
    """A benchmark that failed (here: no CUDA) left its error in the archived log only, and the
    call's reply read as a success: each failed run is said, with its log's last line."""
    failing = tmp_path / "failing" / "fairseq-san-bench"
    failing.parent.mkdir()
    failing.write_text(f"#!{sys.executable}\nimport sys\n"
                       "sys.exit('fairseq-san-bench: error: CUDA is not available')\n")  # fmt: skip
    failing.chmod(0o755)
    env = {**tables_models, "SLICE_S": "100", "BENCH_S": "0",
           "PATH": f"{failing.parent}:{tables_models['PATH']}"}  # fmt: skip
    output = campaign("bench", env=env)
    for run in ("batch16", "batch128", "batch128-fp16"):
        assert (f"== bench {run}: failed (exit 1): fairseq-san-bench: error: CUDA is not "
                "available") in output, output[-3000:]  # fmt: skip


def test_a_failed_training_is_said_in_the_calls_output(dry_env, tmp_path):
    """A system whose training failed (here: no data) said "started" alone in the call's output,
    its error in run.log only, and the call exited 0: it is said with the log's last line, and
    the call exits 1 after packing."""
    env = {**dry_env, "DATA_ROOT": str(tmp_path / "nowhere"), "ONLY": "en-de/baseline-s2",
           "SLICE_S": "300", "CAP_MIN": "1", "EVAL_S": "0"}  # fmt: skip
    result = subprocess.run(["bash", str(RUN), "en-de"], cwd=REPO, env=env, capture_output=True,
                            text=True, timeout=600)  # fmt: skip
    assert result.returncode == 1, (result.stdout + result.stderr)[-3000:]
    assert re.search(r"== en-de/baseline-s2: failed \(exit 2\): .*no data directory",
                     result.stdout), result.stdout[-3000:]  # fmt: skip
    assert "== failed: en-de/baseline-s2 (each run dir's run.log says why)" in result.stdout
    assert (tmp_path / "out" / "converged-en-de.tar.gz").is_file()  # packed all the same


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_slice_stops_its_trainings_and_packs_what_ran(dry_env, tmp_path, stop):
    """Ctrl-C ended the slice with a traceback, and its training kept running (``timeout``
    gives it a process group of its own, which the terminal's Ctrl-C does not reach): every
    command stops, what ran is packed, and the slice exits 130 with a line saying so."""
    pids = tmp_path / "pids"
    stub = tmp_path / "bin" / "fairseq-san-loop"  # learn_to_share.sh's first command
    stub.parent.mkdir()
    stub.write_text(f"#!/bin/sh\necho $$ >> {pids}\nexec sleep 300\n")
    stub.chmod(0o755)
    env = {**dry_env, "ONLY": "en-de/baseline-s2", "SLICE_S": "300", "CAP_MIN": "1",
           "EVAL_S": "0", "PATH": f"{stub.parent}:{dry_env['PATH']}"}  # fmt: skip
    slice_run = subprocess.Popen(["bash", str(RUN), "en-de"], cwd=REPO, env=env, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    deadline = time.monotonic() + 60
    while not pids.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert pids.exists(), slice_run.communicate(timeout=30)[0][-3000:]
    slice_run.send_signal(stop)
    output = slice_run.communicate(timeout=60)[0]
    assert slice_run.returncode == 130, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    assert "== en-de/baseline-s2: interrupted (exit " in output, output[-3000:]
    assert output.rstrip().endswith(
        "== interrupted: what ran is packed; the slice's next call resumes it"
    )
    assert (tmp_path / "out" / "converged-en-de.tar.gz").is_file()
    training = int(pids.read_text().split()[0])
    deadline = time.monotonic() + 10  # timeout passed the signal on; its group ends soon after
    while alive(training) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive(training)


def test_bench_trains_nothing_where_tables_ran_without_its_models(tables_models):
    """Where the tables slice ran but a benchmarked model has no trained checkpoint here (one cut
    at the deadline; tables' second call, on a fresh machine), the bench slice trains no model of
    its own, says so, and goes on to the smoke runs (each needs its cap: none evaluates)."""
    tables = Path(tables_models["TABLES_RUNS"])
    (tables / "en-de" / "aan-san" / "iter0" / "trained").unlink()
    output = campaign("bench", env={**tables_models, "SLICE_S": "50", "BENCH_S": "0", "CAP_MIN": "1"})
    assert f"== bench: not run: a model without its trained checkpoint here among {tables}/" in output
    assert printed_commands(output, "fairseq-san-bench") == []
    assert "== en-de/baseline-bench" not in output and "iteration 0 started" not in output
    # its cap alone (EVAL_S 0); the seconds left are the slice's 50 less what the call took so far
    left = re.search(r"== smoke/spawn-gloo: not started: (\d+) s left, it needs 60 ", output)
    assert left and 40 <= int(left.group(1)) <= 50, output[-3000:]


def test_a_benchmark_without_time_waits_for_the_next_call_on_this_machine(tables_models):
    """A benchmark batch size without BENCH_S seconds left waits for the next call on the same
    machine, saying so."""
    output = campaign("bench", env={**tables_models, "SLICE_S": "50"})
    for run in ("batch16", "batch128", "batch128-fp16"):
        assert f"== bench {run}: not started: " in output
    assert "the slice's next call on this machine runs it" in output
    assert printed_commands(output, "fairseq-san-bench") == []


def unsettled_en_de_loop(results: Path) -> Path:
    """A collected en-de loop whose iteration 1 learned another policy than its own."""
    loop = results / "en-de" / "loop"
    toy_system(loop, 0, {}, 30.0, ["x"])
    toy_system(loop, 1, SAN_POLICY, 31.0, ["x"])
    (loop / "iter2").mkdir()
    (loop / "iter2" / "policy.json").write_text(json.dumps({**SAN_POLICY, "decoder_encdec": [4, 2]}))
    return loop


def pairs_stage(k: int) -> List[tuple]:
    """The pairs slice's three trainings of stage ``k`` (0: baselines, 1: SAN)."""
    return [(f"{pair}/loop", k) for pair in ("de-en", "en-fr", "en-cs")]


MEAN_SAN = [("en-de/san-mean-s2", 0)]  # stage 2's fourth place once the en-de loop has ended


def test_pairs_trains_the_en_de_loops_next_iteration_while_its_policy_changes(dry_env, tmp_path):
    """Each stage of pairs (three trainings) takes the en-de loop's next iteration beside them
    while the loop's last iteration learned a new policy (the dry run prints iteration 2 for both
    stages: nothing trains), none once it learned its own or an earlier iteration's, and then
    stage 2's fourth place trains the En->De SAN of the seeds' mean policy; a stage that starts
    nothing starts neither."""
    loop = unsettled_en_de_loop(Path(dry_env["RESULTS"]))
    (loop / "iter0" / "analysis").mkdir()
    (loop / "iter0" / "analysis" / "js.json").write_text(json.dumps(PAPER_JS))
    stage = pairs_stage

    pairs = trainings(campaign("pairs", "--dry-run", env=dry_env))
    assert pairs == stage(0) + [("en-de/loop", 2)] + stage(1) + [("en-de/loop", 2)]
    short = campaign("pairs", env={**dry_env, "SLICE_S": "100", "CAP_MIN": "1", "EVAL_S": "60"})
    assert printed_commands(short, "learn_to_share.sh") == [] and "== en-de/loop" not in short
    assert "== en-de/san-mean-s2: not started: " in short  # its policy learned, no time left
    (loop / "iter2" / "policy.json").write_text(json.dumps(SAN_POLICY))  # the loop has settled
    assert trainings(campaign("pairs", "--dry-run", env=dry_env)) == stage(0) + stage(1) + MEAN_SAN
    (loop / "iter2" / "policy.json").write_text("{}")  # iteration 0's: the loop would cycle
    assert trainings(campaign("pairs", "--dry-run", env=dry_env)) == stage(0) + stage(1) + MEAN_SAN


def test_the_loop_ends_where_another_run_dir_trained_its_next_policy_with_its_recipe(
    dry_env, tmp_path
):
    """The en-de loop's iteration 1 learned {4,2}; a uniform run dir trained {4,2} from scratch
    with the loop's recipe and learned it back: that is the loop's iteration 2, so pairs does not
    train it (and says why), and the summary says where the loop ended. Trained with another
    recipe (another seed), or learning another policy back, it stands in for nothing."""
    from campaign_summary import write_summary

    results = Path(dry_env["RESULTS"])
    loop = unsettled_en_de_loop(results)
    later = json.loads((loop / "iter2" / "policy.json").read_text())
    uniform = results / "en-de" / "uniform-4-2"
    toy_system(uniform, 0, later, 33.0, ["x"])
    (uniform / "iter1").mkdir()
    (uniform / "iter1" / "policy.json").write_text(json.dumps(later))
    output = campaign("pairs", "--dry-run", env=dry_env)
    assert trainings(output) == pairs_stage(0) + pairs_stage(1) + MEAN_SAN
    assert "iteration 1's policy was trained by uniform-4-2 with the loop's recipe" in output
    toy_references(tmp_path, ["x"])
    summary = write_summary(str(results), str(tmp_path), str(results / "summary.json"))
    assert summary["loop_ends"]["en-de"] == [
        {"loop": "loop", "iteration": 1, "learned_policy": later, "trained_by": "uniform-4-2"}]
    assert ("- loop: iteration 1 learned decoder_self {1,5}  decoder_encdec {4,2}  encoder_self "
            "none, which uniform-4-2 trained from scratch") in (results / "summary.md").read_text()

    record = json.loads((uniform / "run.json").read_text())
    record["options"]["fairseq-train arguments after --"] += ["--seed", "2"]
    (uniform / "run.json").write_text(json.dumps(record))
    assert ("en-de/loop", 2) in trainings(campaign("pairs", "--dry-run", env=dry_env))
    (uniform / "run.json").write_text(json.dumps({**record, "options": json.loads(
        (loop / "run.json").read_text())["options"]}))  # the loop's recipe again  # fmt: skip
    (uniform / "iter1" / "policy.json").write_text(json.dumps(SAN_POLICY))  # learned another
    assert ("en-de/loop", 2) in trainings(campaign("pairs", "--dry-run", env=dry_env))


def test_a_slice_trains_only_the_policies_no_system_trained_with_the_recipe(tmp_path, capsys):
    """Of Table 3's policy files, one the loop's SAN trained, one new, the same again, and one
    missing: only the new one is left to train, each other one said. A system that trained the
    new policy with another recipe (another seed), or was cut short, does not count."""
    from campaign_slices import untrained

    pair = tmp_path / "results" / "en-de"
    toy_system(pair / "loop", 0, {}, 30.0, ["x"])
    toy_system(pair / "loop", 1, SAN_POLICY, 31.0, ["x"])
    new = {**SAN_POLICY, "decoder_encdec": [6]}
    files = []
    for name, policy in (("theta-a", SAN_POLICY), ("theta-b", new), ("theta-c", new)):
        files.append(tmp_path / f"{name}.json")
        files[-1].write_text(json.dumps(policy))
    files = [str(path) for path in files + [tmp_path / "theta-d.json"]]
    assert untrained(files, str(pair / "loop"), [str(pair)]) == files[1:2]
    said = capsys.readouterr().err.splitlines()
    assert said == [
        f"== {files[0]}: trained already, as san ({pair / 'loop'}, iteration 1), with the recipe "
        f"of {pair / 'loop'}",
        f"== {files[2]}: the policy of {files[1]}, trained once",
        f"== {files[3]}: no such policy, nothing to train",
    ]  # fmt: skip
    toy_system(pair / "other-s2", 0, new, 32.0, ["x"])
    record = json.loads((pair / "other-s2" / "run.json").read_text())
    record["options"]["fairseq-train arguments after --"] += ["--seed", "2"]
    (pair / "other-s2" / "run.json").write_text(json.dumps(record))
    assert untrained(files[1:2], str(pair / "loop"), [str(pair)]) == files[1:2]
    toy_system(pair / "theta-b", 0, new, 32.0, ["x"])  # the loop's recipe, but cut short:
    (pair / "theta-b" / "done.iter0").unlink()  # its next call trains it to the end
    assert untrained(files[1:2], str(pair / "loop"), [str(pair)]) == files[1:2]
    (pair / "theta-b" / "done.iter0").touch()
    assert untrained(files[1:2], str(pair / "loop"), [str(pair)]) == []


def test_tables_trains_what_is_new_and_gives_free_places_to_the_mean_policy(dry_env, tmp_path):
    """The tables slice learns its policies from the collected en-de loop: Table 3's policy that
    the loop's SAN trained is not trained again, the others wait for time (no system has any
    here), and stage 2, with places free, takes the SAN of the seeds' mean policy, seeds 3 and 4."""
    from fairseq_san.policy import learn_policy

    loop = Path(dry_env["RESULTS"]) / "en-de" / "loop"
    learned = learn_policy(PAPER_JS, {"decoder_self": 0.3, "decoder_encdec": 0.5})
    toy_system(loop, 0, {}, 30.0, ["x"])
    toy_system(loop, 1, {**learned, "encoder_self": None}, 31.0, ["x"])
    (loop / "iter0" / "analysis").mkdir()
    (loop / "iter0" / "analysis" / "js.json").write_text(json.dumps(PAPER_JS))
    output = campaign("tables", env={**dry_env, "SLICE_S": "100", "CAP_MIN": "1", "EVAL_S": "60"})
    assert printed_commands(output, "learn_to_share.sh") == []
    assert "/en-de/policies/theta-0.3-0.5.json: trained already, as san (" in output
    assert "== en-de/theta-0.3-0.5:" not in output
    for name in ("san-s4", "aan-san", "own-v", "uniform-6-3-3", "aan", "enc-0.4", "san-mean-s3",
                 "san-mean-s4"):  # fmt: skip
        assert f"== en-de/{name}: not started: " in output, name


def test_an_unknown_slice_is_one_line(dry_env):
    result = subprocess.run(["bash", str(RUN), "A"], cwd=REPO, env=dry_env, capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "run.sh: unknown slice A (usage: run.sh en-de|pairs|tables|bench [--dry-run] | "
        "run.sh collect [ARCHIVE...])"
    ]
    # the word that is not known (it named --dry-run), and collect's own (argparse's usage)
    for argv, said in ((["en-de", "--dry-run", "x"], "run.sh: unknown argument x ("),
                       (["collect", "--dry-run"], "run.sh: collect takes archives only, not "
                        "--dry-run (an archive's path starting with '-': give it as ./NAME)")):
        result = subprocess.run(["bash", str(RUN), *argv], cwd=REPO, env=dry_env,
                                capture_output=True, text=True)  # fmt: skip
        assert result.returncode == 2
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith(said), line


# --- toy archives -----------------------------------------------------------------------------


def train_log(updates: int, losses: List[float]) -> str:
    """A fairseq-train JSON log that validated every 100 updates and stopped at the wall cap."""
    lines = ["x | INFO | fairseq_cli.train | num. shared model params: 1,000\n"]
    for i, loss in enumerate(losses, 1):
        record = {"epoch": i, "valid_loss": str(loss), "valid_num_updates": str(100 * i)}
        lines.append(f"x | INFO | valid | {json.dumps(record)}\n")
    lines.append("x | INFO | fairseq_cli.train | Stopping training due to cumulative_training_time: "
                 "0.0418 > stop_time_hours: 0.0417 hour(s)\n")  # fmt: skip
    record = {"epoch": len(losses), "train_num_updates": str(updates), "train_wall": "150"}
    lines.append(f"x | INFO | train | {json.dumps(record)}\n")
    return "".join(lines)


def toy_system(run_dir: Path, iteration: int, policy, bleu: float, hypotheses: List[str],
               updates: Optional[int] = None) -> None:  # fmt: skip
    """One trained, tested iteration of a run dir, as ``collect`` leaves it (no checkpoints, the
    hypotheses gzipped), trained for ``updates`` (1500 + iteration unless given)."""
    folder = run_dir / f"iter{iteration}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.log").write_text(train_log(updates or 1500 + iteration, [5.0, 4.5, 4.3]))
    (folder / "policy.json").write_text(json.dumps(policy))
    train_args = ["--stop-time-hours", "0.05", "--stop-time-hours", "0.0417"]  # the last counts
    options = {"--theta-self": "0.5", "--theta-encdec": "0.5", "--theta-encoder": None}
    record = {"options": {**options, "fairseq-train arguments after --": train_args}}
    (run_dir / "run.json").write_text(json.dumps(record))
    for split in ("test", "test1"):
        tested = run_dir / "test-bleu" / f"iter{iteration}" / split
        tested.mkdir(parents=True)
        score = {"bleu": bleu, "chrf": 60.0, "bleu_signature": "nrefs:1|case:mixed|v"}
        (tested / "score.json").write_text(json.dumps(score))
        generated = "".join(f"D-{i}\t-0.1\t{line}\n" for i, line in enumerate(hypotheses))
        (tested / f"generate-{split}.txt.gz").write_bytes(gzip.compress(generated.encode()))
    (run_dir / f"done.iter{iteration}").touch()


REFERENCES = [f"a small dog number {i} runs in the park" for i in range(40)]
SAN_POLICY = {"decoder_self": [1, 5], "decoder_encdec": [3, 3], "encoder_self": None}


def toy_references(data_root: Path, references: List[str]) -> None:
    """The En->De test sets' raw references under ``data_root``, as prepare.sh writes them."""
    text = data_root / "multi30k.en-de" / "text"
    text.mkdir(parents=True, exist_ok=True)
    for split in ("test", "test1"):
        (text / f"{split}.raw.de").write_text("\n".join(references) + "\n")


def toy_en_de(root: Path) -> Path:
    """The results dir and data root of a collected en-de slice: 2 seeds of baseline and SAN;
    SAN translates every sentence right, the baseline drops words from half of them."""
    results = root / "results"
    toy_references(root / "data", REFERENCES)
    worse = [ref if i % 2 else " ".join(ref.split()[:4]) for i, ref in enumerate(REFERENCES)]
    toy_system(results / "en-de" / "loop", 0, {}, 30.0, worse)
    toy_system(results / "en-de" / "loop", 1, SAN_POLICY, 40.0, REFERENCES)
    analysis = results / "en-de" / "loop" / "iter0" / "analysis"
    analysis.mkdir()
    (analysis / "js.json").write_text(json.dumps(PAPER_JS))  # learns SAN_POLICY at 0.5 / 0.5
    toy_system(results / "en-de" / "baseline-s2", 0, {}, 31.0, worse)
    toy_system(results / "en-de" / "san-s2", 0, SAN_POLICY, 41.0, REFERENCES)
    for label in ("baseline", "san"):
        (results / "en-de" / label / "heldout").mkdir(parents=True)
        (results / "en-de" / label / "heldout" / "test_2018_flickr.hyp").write_text("Ein Hund.\n")
    return results


def test_a_paired_test_without_its_reference_stops_the_summary(tmp_path):
    """data-bin holding only the pair a GPU call took: the other pairs' paired tests vanished
    from summary.json and headline.md without a word."""
    from campaign_summary import write_summary

    from fairseq_san.errors import UsageError

    results = toy_en_de(tmp_path)
    with pytest.raises(UsageError, match=r"^en-de: no reference .*/nowhere/multi30k.en-de/text/"
                       r"test.raw.de for the paired test of san on test: prepare the pair "
                       r"\(examples/multi30k/prepare.sh en de\)"):  # fmt: skip
        write_summary(str(results), str(tmp_path / "nowhere"), str(results / "summary.json"))


@pytest.mark.parametrize("field", ["chrf", "bleu", "bleu_signature"])
def test_a_test_score_without_a_field_the_summary_reads_is_one_line(tmp_path, field):
    """A KeyError's traceback."""
    from campaign_summary import write_summary

    from fairseq_san.errors import UsageError

    results = toy_en_de(tmp_path)
    score = results / "en-de" / "san-s2" / "test-bleu" / "iter0" / "test" / "score.json"
    score.write_text(json.dumps({**json.loads(score.read_text()), field: None}))
    with pytest.raises(UsageError) as refused:
        write_summary(str(results), str(tmp_path / "data"), str(results / "summary.json"))
    assert str(refused.value) == (
        f"{score}: it has no {field}: delete it and rerun the step that writes it"
    )


def test_headline_table_from_a_collected_en_de_slice(tmp_path):
    from campaign_summary import write_summary

    results = toy_en_de(tmp_path)
    summary = write_summary(str(results), str(tmp_path / "data"), str(results / "summary.json"))
    rows = summary["pairs"]["en-de"]
    assert [(row["system"], row["seed"]) for row in rows] == [
        ("baseline", 1), ("baseline", 2), ("san", 1), ("san", 2)]  # fmt: skip
    assert rows[0]["heldout"] == {"test_2018_flickr": "en-de/baseline/heldout/test_2018_flickr.hyp"}
    assert "heldout" not in rows[1] and set(rows[1]) == SCHEMA_KEYS
    training = summary["training"]["en-de"][0]
    assert training["cap_s"] == pytest.approx(150.1) and training["stop"] == "wall cap"
    assert training["valid_curve_last"] == [(100, 5.0), (200, 4.5), (300, 4.3)]
    assert training["learned_policy"] == SAN_POLICY  # iteration 1's policy, learned from it
    assert training["learned_theta_range"] == theta_ranges(PAPER_JS, {"decoder_self": 0.5,
                                                                      "decoder_encdec": 0.5})
    assert summary["training"]["en-de"][1]["learned_theta_range"] is None  # no analysis there
    table = (results / "headline.md").read_text()
    (san,) = [line for line in table.splitlines() if line.startswith("| en-de | san |")]
    cells = [cell.strip() for cell in san.strip("|").split("|")]
    assert cells[2] == "decoder_self {1,5}  decoder_encdec {3,3}  encoder_self none"
    assert cells[4] == "40.50 ± 0.71 (2 seeds)"  # statistics.stdev of 40 and 41
    assert cells[6].startswith("+") and "s1 [" in cells[6] and "s2 [" in cells[6]
    # Over seeds: 40, 41 against 30, 31 is the most extreme of the 6 splits (with its mirror).
    assert cells[8] == "+10.00 (too few seeds for 95%), p = 0.33"
    assert cells[10] == "san better"  # every seed's interval excludes 0
    markdown = (results / "summary.md").read_text()
    assert "| 150 s |" in markdown and "300: 4.300" in markdown
    assert "(0.4 / 0.5); the same for theta in: decoder_self [0.4893, 0.6448]  decoder_encdec " \
        "[0.4967, 0.5243]." in markdown


def test_headline_speed_is_the_bench_slices_san_fast_against_fairseqs_baseline(tmp_path):
    """The bench slice's benchmark, collected beside the run dirs (en-de/bench/batch16), gives the
    headline's GPU speed: SAN with --san-decoding fast against fairseq's baseline, beam 4, natural
    lengths; it is no system of the summary."""
    from campaign_summary import write_summary

    results = toy_en_de(tmp_path)
    bench = results / "en-de" / "bench" / "batch16"
    bench.mkdir(parents=True)
    setting = {"beam4_natural": {"ratio_to_baseline": 1.234}, "beam4_fixed": {"ratio_to_baseline": 9.0}}
    systems = {"baseline": {"settings": {}}, "san-graph": {"settings": {"beam4_natural": {
        "ratio_to_baseline": 4.5}}}, "san-fast": {"settings": setting}}  # fmt: skip
    (bench / "results.json").write_text(json.dumps({"systems": systems}))
    summary = write_summary(str(results), str(tmp_path / "data"), str(results / "summary.json"))
    assert {row["system"] for row in summary["pairs"]["en-de"]} == {"baseline", "san"}
    lines = (results / "headline.md").read_text().splitlines()
    (san,) = [line for line in lines if line.startswith("| en-de | san |")]
    (baseline,) = [line for line in lines if line.startswith("| en-de | baseline |")]
    assert san.strip("|").split("|")[-1].strip() == "1.23x"
    assert baseline.strip("|").split("|")[-1].strip() == ""


def test_same_seed_pairs_two_systems_that_summary_does_not(tmp_path):
    """same_seed.py: the paired bootstrap of one run dir against another of the pair, per test
    set (SAN seed 2, every sentence right, against baseline seed 2, half of them cut short)."""
    results = toy_en_de(tmp_path)
    command = [sys.executable, str(CAMPAIGN / "same_seed.py"), "en-de", "baseline-s2", "san-s2",
               "--data-root", str(tmp_path / "data"), "--results", str(results)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env=cli_env(), check=True)
    tests = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(t["test_set"], t["against"], t["verdict"]) for t in tests] == [
        ("test_2016_flickr", "baseline-s2", "san-s2 better"),
        ("test_2017_flickr", "baseline-s2", "san-s2 better"),
    ]
    command[3:5] = ["loop:0", "loop:1"]  # a loop's iterations: seed 1's baseline and SAN
    done = subprocess.run(command, capture_output=True, text=True, env=cli_env(), check=True)
    tests = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(t["against"], t["system"], t["verdict"]) for t in tests] == [
        ("loop:0", "loop:1", "loop:1 better")
    ] * 2
    command[3] = "loop:first"
    refused = subprocess.run(command, capture_output=True, text=True, env=cli_env())
    assert refused.returncode == 2 and "loop:first: give RUN or RUN:ITERATION" in refused.stderr


def test_a_budget_without_updates_reads_a_dash_not_none():
    """A training whose log holds no update (an empty train.log) is "-" updates in the budget
    statement, as its wall time is, not "None updates"."""
    from campaign_summary import budget_statement

    empty = ({"updates": None, "wall_s": None}, {"stop": "unknown"})
    trained = ({"updates": 3000, "wall_s": 306.0}, {"stop": "max update"})
    statement = budget_statement(empty, trained)
    assert "None" not in statement
    assert "baseline - updates in -, SAN 3000 updates in 306 s" in statement


def test_every_system_is_tested_against_the_baseline_of_its_seed(tmp_path):
    """A uniform row (seed 1 only) gets its own paired bootstrap; the headline keeps SAN's."""
    from campaign_summary import write_summary

    results = toy_en_de(tmp_path)
    worse = [" ".join(ref.split()[:3]) for ref in REFERENCES]
    toy_system(results / "en-de" / "uniform-6-6", 0, {"decoder_self": [6]}, 20.0, worse)
    summary = write_summary(str(results), str(tmp_path / "data"), str(results / "summary.json"))
    tests = [(t["system"], t["seed"], t["verdict"]) for t in summary["paired_bootstrap"]["en-de"]]
    assert tests == [("san", 1, "san better")] * 2 + [("san", 2, "san better")] * 2 + [
        ("uniform-6-6", 1, "uniform-6-6 worse")] * 2  # fmt: skip
    (san,) = [line for line in (results / "headline.md").read_text().splitlines()
              if line.startswith("| en-de | san |")]  # fmt: skip
    assert san.rstrip(" |").endswith("san better")
    assert "- uniform-6-6 minus baseline, seed 1, test_2016_flickr: " in (results / "summary.md").read_text()


def test_a_system_is_also_tested_against_every_baseline_of_equal_updates(tmp_path):
    """SAN seed 1 (1501 updates) and its seed's baseline (1500) differ in updates: SAN is also
    tested against baseline seed 4, which trained for 1501; SAN seed 2 and its baseline trained
    for 1500 each (no other test). The headline keeps the same-seed tests."""
    from campaign_summary import write_summary

    results = toy_en_de(tmp_path)
    toy_system(results / "en-de" / "baseline-s4", 0, {}, 30.0, REFERENCES, updates=1501)
    summary = write_summary(str(results), str(tmp_path / "data"), str(results / "summary.json"))
    tests = [(t["system"], t["seed"], t["baseline_seed"], t["verdict"])
             for t in summary["paired_bootstrap"]["en-de"]]  # fmt: skip
    assert tests == [("san", 1, 1, "san better")] * 2 + [("san", 1, 4, "inconclusive")] * 2 + [
        ("san", 2, 2, "san better")] * 2  # fmt: skip
    markdown = (results / "summary.md").read_text()
    assert "- san minus baseline seed 4 (equal updates), seed 1, test_2016_flickr: +0.00 BLEU" in markdown
    (san,) = [line for line in (results / "headline.md").read_text().splitlines()
              if line.startswith("| en-de | san |")]  # fmt: skip
    assert san.rstrip(" |").endswith("san better") and "s4" not in san


def test_a_system_trained_under_another_cap_is_not_tested_against_the_baselines(tmp_path):
    """The bench slice's systems train for a shorter cap, for speed: a BLEU test against the
    converged baselines would say nothing of SAN, so there is none."""
    from campaign_summary import write_summary

    results = toy_en_de(tmp_path)
    toy_system(results / "en-de" / "san-bench", 0, SAN_POLICY, 20.0, REFERENCES)
    record = json.loads((results / "en-de" / "san-bench" / "run.json").read_text())
    record["options"]["fairseq-train arguments after --"][-1] = "0.0208"  # 75 s, not 150
    (results / "en-de" / "san-bench" / "run.json").write_text(json.dumps(record))
    summary = write_summary(str(results), str(tmp_path / "data"), str(results / "summary.json"))
    assert ("san-bench", 1) in {(row["system"], row["seed"]) for row in summary["pairs"]["en-de"]}
    assert {test["system"] for test in summary["paired_bootstrap"]["en-de"]} == {"san"}
    # summary.md shows it apart from the converged systems, under a sentence saying why
    converged, apart = (results / "summary.md").read_text().split("another wall-time cap")
    assert "| san-bench |" in apart and "| san-bench |" not in converged
    assert "| baseline | 2 |" in converged and "| san | 1 |" in converged


def test_a_later_loop_iteration_is_its_own_system_and_the_headline_keeps_iteration_1(tmp_path):
    """Iteration 1 of the loop is "san" (trained with the policy the baseline learned, as the
    other SAN seeds are); a later iteration, trained while the policy still changed, is
    "san-iter2", tested against the baseline on its own."""
    from campaign_summary import write_summary

    results = toy_en_de(tmp_path)
    later = {**SAN_POLICY, "decoder_encdec": [4, 2]}
    toy_system(results / "en-de" / "loop", 2, later, 35.0, REFERENCES)
    summary = write_summary(str(results), str(tmp_path / "data"), str(results / "summary.json"))
    rows = {(row["system"], row["seed"]): row for row in summary["pairs"]["en-de"]}
    assert rows[("san", 1)]["policy"] == SAN_POLICY and rows[("san-iter2", 1)]["policy"] == later
    tests = {(t["system"], t["seed"], t["baseline_seed"]) for t in summary["paired_bootstrap"]["en-de"]}
    assert ("san-iter2", 1, 1) in tests
    (san,) = [line for line in (results / "headline.md").read_text().splitlines()
              if line.startswith("| en-de | san |")]  # fmt: skip
    assert "decoder_encdec {3,3}" in san


@pytest.mark.parametrize("spelling, cwd", [
    ("docs/results/converged", REPO),
    # the run dirs were recorded as spelt: "./docs/results/converged//de-en/loop"
    ("./docs/results/converged/", REPO),
    (str(CAMPAIGN), CAMPAIGN / "en-de"),
])  # fmt: skip
def test_the_committed_summary_is_what_the_committed_run_dirs_give(monkeypatch, spelling, cwd):
    """summary.json's rows and training reports, as campaign_summary.py reads them now from the
    committed run dirs, however RESULTS is spelt: a summary left from older code (its baselines'
    wall time read from the last train_wall, 391 s, where fairseq's clock at the cap said 390 s)
    is caught here."""
    from campaign_summary import campaign_systems, summary_markdown

    monkeypatch.chdir(cwd)
    committed = json.loads((CAMPAIGN / "summary.json").read_text())
    systems = json.loads(json.dumps(campaign_systems(spelling)))  # tuples: lists
    assert {pair: [row for row, _ in rows] for pair, rows in systems.items()} == committed["pairs"]
    reports = {pair: [report for _, report in rows] for pair, rows in systems.items()}
    assert reports == committed["training"]
    assert summary_markdown(committed) == (CAMPAIGN / "summary.md").read_text()


def test_no_headline_before_the_en_de_slice(tmp_path):
    from campaign_summary import write_summary

    results = toy_en_de(tmp_path)
    shutil.rmtree(results / "en-de" / "loop" / "iter1")
    shutil.rmtree(results / "en-de" / "san-s2")
    write_summary(str(results), str(tmp_path / "data"), str(results / "summary.json"))
    assert not (results / "headline.md").exists()


def test_restore_keeps_finished_iterations_and_the_learned_policy_only(tmp_path):
    from campaign_slices import restore

    source = tmp_path / "results" / "en-de" / "loop"
    toy_system(source, 0, {}, 30.0, ["x"])
    (source / "iter1").mkdir()
    (source / "iter1" / "policy.json").write_text(json.dumps(SAN_POLICY))
    (source / "iter1" / "train.log").write_text("a training cut at the deadline\n")
    (source / "test-bleu" / "iter1").mkdir()
    target = tmp_path / "runs" / "en-de" / "loop"
    assert restore(str(source), str(target))
    assert sorted(path.name for path in (target / "iter1").iterdir()) == ["policy.json"]
    assert (target / "iter0" / "train.log").is_file() and (target / "done.iter0").is_file()
    assert sorted(path.name for path in (target / "test-bleu").iterdir()) == ["iter0"]
    unfinished = tmp_path / "results" / "en-de" / "san-s2"
    (unfinished / "iter0").mkdir(parents=True)
    assert not restore(str(unfinished), str(tmp_path / "runs" / "en-de" / "san-s2"))
    assert not (tmp_path / "runs" / "en-de" / "san-s2").exists()


def toy_archive(folder: Path, runs: Path, slice_name: str, run_sh: Path = RUN,
                started: str = "2026-11-26T10:00:00") -> Path:  # fmt: skip
    from campaign_slices import record

    record(str(runs), slice_name, str(run_sh), [str(RUN), slice_name], started, {})
    folder.mkdir(parents=True, exist_ok=True)
    archive = folder / f"converged-{slice_name}.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(runs, arcname=".")
    return archive


def test_collect_takes_shared_archives_of_this_run_sh_and_refuses_others(tmp_path, dry_env):
    runs = toy_en_de(tmp_path / "made")  # a results dir is what a slice's RUNS holds
    tested = runs / "en-de" / "loop" / "test-bleu" / "iter1" / "test"
    text = gzip.decompress((tested / "generate-test.txt.gz").read_bytes())
    (tested / "generate-test.txt.gz").unlink()
    (tested / "generate-test.txt").write_bytes(text)  # as the GPU machine writes it
    for step in (100, 200):  # Figure 5's analyses, drawn by collect (no matplotlib on the GPU)
        analysis = runs / "en-de" / "baseline-s5" / "figure5" / f"checkpoint_{step // 100}_{step}"
        analysis.mkdir(parents=True)
        (analysis / "js.json").write_text(json.dumps({**PAPER_JS, "num_updates": step}))
    # An analysis stopped at the deadline: its folder without js.json (plot-js exited 2 on it),
    # beside finished ones and alone (a call stopped during its first analysis).
    (runs / "en-de" / "baseline-s5" / "figure5" / "checkpoint_3_300").mkdir()
    (runs / "en-de" / "baseline-s6" / "figure5" / "checkpoint_1_100").mkdir(parents=True)
    shared = Path(dry_env["SHARED"])
    toy_archive(shared / "converged", runs, "en-de")
    results = tmp_path / "results"
    results.mkdir()
    env = dict(dry_env, RESULTS=str(results), DATA_ROOT=str(tmp_path / "made" / "data"))
    result = subprocess.run(["bash", str(RUN), "collect"], cwd=REPO, env=env, capture_output=True,
                            text=True)  # made on this CPU: refused unless asked for  # fmt: skip
    assert result.returncode == 2 and not list(results.iterdir())
    (line,) = result.stderr.strip().splitlines()
    assert line.endswith("(a toy run's archive), refused: ALLOW_CPU_ARCHIVES=1 collects it anyway")
    env["ALLOW_CPU_ARCHIVES"] = "1"
    output = campaign("collect", env=env)
    assert "== collected" in output and (results / "summary.json").is_file()
    assert (results / "figure2.png").read_bytes()[:4] == b"\x89PNG"  # campaign_figures.py
    figure5 = results / "en-de" / "baseline-s5" / "figure5" / "js_vs_steps.png"
    assert figure5.read_bytes()[:4] == b"\x89PNG"
    assert "== the working tree that travels to a GPU call is " in output
    collected = results / "en-de" / "loop" / "test-bleu" / "iter1" / "test"
    assert sorted(path.name for path in collected.glob("generate-*")) == ["generate-test.txt.gz"]
    packed = (collected / "generate-test.txt.gz").read_bytes()
    assert gzip.decompress(packed) == text
    assert packed[3] == 0 and packed[4:8] == bytes(4)  # no name, no date: the same bytes each time
    summary = json.loads((results / "summary.json").read_text())
    assert {(test["seed"], test["test_set"]) for test in summary["paired_bootstrap"]["en-de"]} == {
        (seed, test_set) for seed in (1, 2) for test_set in TEST_SETS}  # fmt: skip
    (record,) = summary["slices"]
    assert record["command"] == [str(RUN), "en-de"] and record["gpu"]
    code = b"".join(path.read_bytes() for path in (RUN, *(CAMPAIGN / name for name in CODE)))
    assert record["code_sha256"] == hashlib.sha256(code).hexdigest()
    assert "## Where each slice ran" in (results / "summary.md").read_text()

    other = tmp_path / "other" / "run.sh"  # the same run.sh, another scheduler beside it
    other.parent.mkdir()
    other.write_text(RUN.read_text())
    shutil.copy(CAMPAIGN / "campaign_slices.py", other.parent)
    (other.parent / "campaign_run.py").write_text((CAMPAIGN / "campaign_run.py").read_text() + "# changed\n")
    shutil.rmtree(runs / "provenance")
    refused = toy_archive(tmp_path / "elsewhere", runs, "pairs", run_sh=other)
    result = subprocess.run(["bash", str(RUN), "collect", str(refused)], cwd=REPO, env=env,
                            capture_output=True, text=True)  # fmt: skip
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"fairseq-san: error: {refused}: made by another run.sh")
    truncated = tmp_path / "cut" / "converged-tables.tar.gz"  # a call killed while packing
    truncated.parent.mkdir()
    for kept in (refused.stat().st_size // 2, refused.stat().st_size - 20):  # 20: its trailer
        truncated.write_bytes(refused.read_bytes()[:kept])  # whose members all read whole
        result = subprocess.run(["bash", str(RUN), "collect", str(truncated)], cwd=REPO, env=env,
                                capture_output=True, text=True)  # fmt: skip
        assert result.returncode == 2
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith(f"fairseq-san: error: {truncated}: unreadable archive")


@pytest.mark.parametrize("content", [b"", gzip.compress(b"no tar")], ids=["empty", "gzip, no tar"])
def test_an_archive_that_is_no_tar_is_one_line(tmp_path, capsys, content):
    """tarfile's guess at the compression said why each of its four tries failed, on five
    lines."""
    from campaign_slices import main

    archive = tmp_path / "converged-tables.tar.gz"
    archive.write_bytes(content)
    assert main(["collect", str(tmp_path / "results"), "--run-sh", str(RUN), str(archive)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"fairseq-san: error: {archive}: unreadable archive (")
    assert not (tmp_path / "results").exists()


def test_a_later_calls_figure5_replaces_an_earlier_calls(tmp_path):
    """A slice's second call on a fresh machine retrains an unfinished baseline from scratch; its
    Figure 5 analyses were unpacked over the first call's, whose later steps (another training's)
    stayed in the plot. An archive without that run's Figure 5 leaves it as it is."""
    from campaign_slices import collect

    def archive_of(call: str, steps, slice_name: str = "tables", hour: int = 10) -> Path:
        runs = tmp_path / call / "runs"
        for step in steps:
            analysis = runs / "en-de" / "baseline-s5" / "figure5" / f"checkpoint_1_{step}"
            analysis.mkdir(parents=True)
            (analysis / "js.json").write_text(json.dumps({"call": call, "num_updates": step}))
        (runs / "en-de").mkdir(parents=True, exist_ok=True)
        return toy_archive(tmp_path / call / "out", runs, slice_name,
                           started=f"2026-11-26T{hour}:00:00+00:00")  # fmt: skip

    first = archive_of("first", (100, 200, 300))
    second = archive_of("second", (100,), hour=12)
    bench = archive_of("bench", (), "bench", hour=14)
    figure5 = tmp_path / "results" / "en-de" / "baseline-s5" / "figure5"
    # in the order the calls started, whatever the order given (the shared folder's archives
    # came after those named: an older call's unpacked over a newer one's)
    for order in ([first, second, bench], [second, bench, first]):
        shutil.rmtree(tmp_path / "results", ignore_errors=True)
        unpacked = collect(str(tmp_path / "results"), str(RUN), list(map(str, order)),
                           allow_cpu=True)  # fmt: skip
        assert unpacked == [str(first), str(second), str(bench)]
        assert [path.name for path in figure5.iterdir()] == ["checkpoint_1_100"]
        assert json.loads((figure5 / "checkpoint_1_100" / "js.json").read_text())["call"] == (
            "second"
        )


def test_a_second_call_on_the_same_runs_is_unpacked_after_the_first(tmp_path):
    """A call's archive holds the provenance of every call that wrote its RUNS before it: ordered
    by the oldest record, a second call on the same machine tied with the first, and the first's
    results, unpacked after it in the order given, replaced the second's."""
    from campaign_slices import collect

    runs, results = tmp_path / "runs", tmp_path / "results"
    js = runs / "en-de" / "baseline-s5" / "figure5" / "checkpoint_1_100" / "js.json"

    def call(name: str, hour: int) -> Path:
        js.parent.mkdir(parents=True, exist_ok=True)
        js.write_text(json.dumps({"call": name, "num_updates": 100}))
        return toy_archive(tmp_path / name, runs, "tables",
                           started=f"2026-11-26T{hour}:00:00+00:00")  # fmt: skip

    first, second = call("first", 10), call("second", 12)
    for order in ([first, second], [second, first]):
        shutil.rmtree(results, ignore_errors=True)
        unpacked = collect(str(results), str(RUN), list(map(str, order)), allow_cpu=True)
        assert unpacked == [str(first), str(second)]
        collected = results / js.relative_to(runs)
        assert json.loads(collected.read_text())["call"] == "second"


def test_an_archive_whose_contents_its_record_does_not_name_is_refused(tmp_path):
    """A record naming another slice than the archive's name was collected (the summary's table
    of slices named it so), and an en-de run dir copied under fr-en published fr-en's section
    with en-de's scores."""
    from campaign_slices import collect, record

    from fairseq_san.errors import UsageError

    runs = tmp_path / "runs"
    (runs / "en-de" / "baseline-s2" / "iter0").mkdir(parents=True)
    (runs / "en-de" / "baseline-s2" / "iter0" / "train.log").write_text("")
    record(str(runs), "pairs", str(RUN), [str(RUN), "en-de"], "2026-11-26T10:00:00", {})
    archive = tmp_path / "a" / "converged-en-de.tar.gz"
    archive.parent.mkdir()
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(runs, arcname=".")
    with pytest.raises(UsageError) as refused:
        collect(str(tmp_path / "results"), str(RUN), [str(archive)], allow_cpu=True)
    assert str(refused.value) == (
        f"{archive}: its provenance names the slice pairs, its name en-de, refused"
    )
    shutil.rmtree(runs / "provenance")
    (runs / "fr-en" / "baseline-s2").mkdir(parents=True)
    (runs / "fr-en" / "baseline-s2" / "run.log").write_text("")  # recorded after: no iter folder
    copied = toy_archive(tmp_path / "b", runs, "en-de")
    with pytest.raises(UsageError) as refused:
        collect(str(tmp_path / "results"), str(RUN), [str(copied)], allow_cpu=True)
    assert str(refused.value) == (
        f"{copied}: holds fr-en, of no run dir its provenance records, refused"
    )
    assert not (tmp_path / "results").exists()


def test_a_bench_archive_adds_its_policy_to_the_collected_policies(tmp_path):
    """The bench slice writes en-de/policies/aan-san.json alone; collect took the pair's
    policies folder for a run dir and replaced it whole, deleting the tables slice's policies."""
    from campaign_slices import collect

    def archive_of(call: str, policies, slice_name: str, hour: int) -> Path:
        runs = tmp_path / call / "runs"
        folder = runs / "en-de" / "policies"
        folder.mkdir(parents=True)
        for name in policies:
            (folder / f"{name}.json").write_text(json.dumps({"decoder_self": [6], "call": call}))
        return toy_archive(tmp_path / call / "out", runs, slice_name,
                           started=f"2026-11-26T{hour}:00:00+00:00")  # fmt: skip

    tables = archive_of("tables", ("mean", "enc-0.4", "aan-san"), "tables", 10)
    bench = archive_of("bench", ("aan-san",), "bench", 12)
    results = tmp_path / "results"
    collect(str(results), str(RUN), [str(tables), str(bench)], allow_cpu=True)
    policies = results / "en-de" / "policies"
    assert sorted(path.name for path in policies.iterdir()) == [
        "aan-san.json", "enc-0.4.json", "mean.json"
    ]
    assert json.loads((policies / "aan-san.json").read_text())["call"] == "bench"


def test_a_later_call_that_trained_an_iteration_again_replaces_the_earlier_calls_run_dir(
    tmp_path,
):
    """A call on a fresh machine retrains an unfinished iteration from scratch; unpacked over the
    earlier call's archive, the new training sat beside the earlier one's test scores and held-out
    hypotheses in summary.md, and nothing marked it unfinished. The iteration it restored
    finished keeps its held-out hypotheses (they do not travel back to the GPU)."""
    from campaign_slices import collect
    from campaign_summary import write_summary

    def call(name: str, iter1_updates: int) -> Path:
        loop = tmp_path / name / "en-de" / "loop"
        toy_system(loop, 0, {}, 30.0, REFERENCES)
        toy_system(loop, 1, SAN_POLICY, 40.0, REFERENCES, updates=iter1_updates)
        (loop / "done.iter1").unlink()  # cut at the deadline
        return tmp_path / name

    first = call("first", iter1_updates=900)
    for label in ("baseline", "san"):
        heldout = first / "en-de" / label / "heldout"
        heldout.mkdir(parents=True)
        (heldout / "test_2018_flickr.hyp").write_text(f"{label} of the first call\n")
    second = call("second", iter1_updates=1200)
    shutil.rmtree(second / "en-de" / "loop" / "test-bleu" / "iter1")  # not tested
    archives = [toy_archive(tmp_path / f"out-{hour}", runs, "en-de",
                            started=f"2026-11-26T{hour}:00:00+00:00")
                for runs, hour in ((second, 12), (first, 10))]  # fmt: skip
    results = tmp_path / "results"
    collect(str(results), str(RUN), list(map(str, archives)), allow_cpu=True)
    pair = results / "en-de"
    assert not (pair / "loop" / "test-bleu" / "iter1").exists()
    assert not (pair / "san" / "heldout").exists()
    kept = pair / "baseline" / "heldout" / "test_2018_flickr.hyp"
    assert kept.read_text() == "baseline of the first call\n"
    toy_references(tmp_path / "data", REFERENCES)
    summary = write_summary(str(results), str(tmp_path / "data"), str(results / "summary.json"))
    (baseline, baseline_training), (san, san_training) = zip(
        summary["pairs"]["en-de"], summary["training"]["en-de"])  # fmt: skip
    assert (san["system"], san["updates"], san["test"]) == ("san", 1200, {})
    assert "heldout" not in san and "heldout" in baseline
    assert (baseline_training["finished"], san_training["finished"]) == (True, False)
    rows = [line for line in (results / "summary.md").read_text().splitlines()
            if line.startswith("| san | 1 |")]  # fmt: skip
    assert len(rows) == 1 and "| wall cap, unfinished (cut at the deadline) |" in rows[0]


def test_a_run_dir_collected_before_done_markers_counts_its_tested_iterations_finished(tmp_path):
    """en-de/aan was collected before run.sh wrote done.iter<k>: its tested iteration 0 was
    summarized "unfinished (cut at the deadline)". Without any marker, an iteration with scores
    on every test set is finished; one without them is not."""
    from campaign_summary import write_summary

    results = tmp_path / "results"
    loop = results / "en-de" / "loop"
    toy_system(loop, 0, {}, 30.0, REFERENCES)
    toy_system(loop, 1, SAN_POLICY, 31.0, REFERENCES)
    for marker in loop.glob("done.iter*"):
        marker.unlink()
    shutil.rmtree(loop / "test-bleu" / "iter1" / "test1")  # iteration 1 tested in part
    toy_references(tmp_path / "data", REFERENCES)
    summary = write_summary(str(results), str(tmp_path / "data"), str(results / "summary.json"))
    assert [row["finished"] for row in summary["training"]["en-de"]] == [True, False]


def test_what_the_summary_would_refuse_is_refused_before_unpacking(tmp_path, capsys):
    """campaign_summary.py refused a pair without its references, or results without a trained
    run dir, after the archives were unpacked (they looked collected), with argparse's usage."""
    from campaign_slices import collect
    from campaign_summary import main as summary_main

    from fairseq_san.errors import UsageError

    runs = toy_en_de(tmp_path / "made")
    archive = toy_archive(tmp_path / "out", runs, "en-de")
    results = tmp_path / "results"
    nowhere = tmp_path / "nowhere"
    for split in ("test", "test1"):
        with pytest.raises(UsageError) as refused:
            collect(str(results), str(RUN), [str(archive)], allow_cpu=True, data_root=str(nowhere))
        reference = nowhere / "multi30k.en-de" / "text" / f"{split}.raw.de"
        assert str(refused.value) == (
            f"en-de: no reference {reference} for the paired tests on {split}: prepare the pair "
            "(examples/multi30k/prepare.sh en de) or give the data root that holds it "
            "(--data-root; run.sh collect: DATA_ROOT); nothing unpacked"
        )
        assert not results.exists()
        toy_references(nowhere, REFERENCES[:1])
        if split == "test":  # the first split's reference alone
            (nowhere / "multi30k.en-de" / "text" / "test1.raw.de").unlink()
    untrained = tmp_path / "untrained"
    (untrained / "en-de" / "loop" / "iter0").mkdir(parents=True)  # stopped before its log
    empty = toy_archive(tmp_path / "empty", untrained, "en-de")
    with pytest.raises(UsageError, match=r"^no trained run dir \(PAIR/RUN/iter\*/train.log\) in "
                       r".*results nor in the archives: nothing to summarize; nothing unpacked$"):
        collect(str(results), str(RUN), [str(empty)], allow_cpu=True, data_root=str(nowhere))
    assert not results.exists()
    results.mkdir()
    assert summary_main([str(results)]) == 2
    assert capsys.readouterr().err == (
        f"fairseq-san: error: no trained run dir (PAIR/RUN/iter*/train.log) in {results}\n"
    )


def test_collect_asks_only_the_references_of_the_paired_tests_the_summary_runs(tmp_path):
    """A pair translated by two systems but with no baseline to test them against (a loop-X's
    baseline-X and san-X) has no paired test: collect refused it for want of references that
    the summary never reads."""
    from campaign_slices import collect
    from campaign_summary import write_summary

    runs = tmp_path / "made"
    toy_system(runs / "en-de" / "loop-fast", 0, {}, 30.0, REFERENCES)
    toy_system(runs / "en-de" / "loop-fast", 1, SAN_POLICY, 31.0, REFERENCES)
    archive = toy_archive(tmp_path / "out", runs, "en-de")
    results, nowhere = tmp_path / "results", tmp_path / "nowhere"
    collect(str(results), str(RUN), [str(archive)], allow_cpu=True, data_root=str(nowhere))
    summary = write_summary(str(results), str(nowhere), str(results / "summary.json"))
    assert [row["system"] for row in summary["pairs"]["en-de"]] == ["baseline-fast", "san-fast"]
    assert summary["paired_bootstrap"] == {"en-de": []}


def test_collect_says_what_travels_to_the_next_gpu_call(tmp_path, monkeypatch):
    """The files git tracks or does not ignore, and the bundle, against the device's limit."""
    import campaign_slices

    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    (repo / ".gitignore").write_text("build/\nlogs/\n")
    (repo / "tracked").write_bytes(bytes(1 << 20))
    subprocess.run(["git", "add", ".gitignore", "tracked"], cwd=repo, check=True)
    (repo / "untracked").write_bytes(bytes(1 << 19))
    (repo / "logs").mkdir()
    (repo / "logs" / "train.log").write_bytes(bytes(4 << 20))  # ignored: stays here
    assert campaign_slices.travel_report(str(repo)) == (
        "== the working tree that travels to a GPU call is 1.5 MiB of 64 (no build/offline-bundle yet)"
    )
    (repo / "build" / "offline-bundle" / "wheels").mkdir(parents=True)
    (repo / "build" / "offline-bundle" / "wheels" / "a.whl").write_bytes(bytes(1 << 20))
    assert campaign_slices.travel_report(str(repo)).endswith(
        "is 1.5 MiB, with build/offline-bundle 2.5 MiB of 64"
    )
    monkeypatch.setattr(campaign_slices, "DEVICE_MIB", 2)
    assert campaign_slices.travel_report(str(repo)).endswith(
        "2.5 MiB of 2: over, so rebuild the bundle with the --data of the next slice's pairs only"
    )


def test_archive_of_another_slice_command_is_refused(tmp_path):
    from campaign_slices import check_archive, code_sha256
    from fairseq_san.errors import UsageError

    runs = tmp_path / "runs"
    runs.mkdir()
    archive = toy_archive(tmp_path / "out", runs, "tables")
    renamed = archive.with_name("converged-bench.tar.gz")
    archive.rename(renamed)
    with pytest.raises(UsageError, match="its provenance names the slice tables, its name bench"):
        check_archive(str(renamed), code_sha256(str(RUN)))


def test_a_gpu_archive_of_toy_models_is_refused(tmp_path, monkeypatch):
    """TRAIN_EXTRA (the tests' tiny sizes) on a GPU made an archive that collect took as the
    converged campaign's."""
    import campaign_slices
    from campaign_slices import check_archive, code_sha256, record
    from fairseq_san.errors import UsageError

    monkeypatch.setattr(campaign_slices, "gpu_name", lambda: "NVIDIA H200")
    runs = tmp_path / "runs"
    runs.mkdir()
    record(str(runs), "tables", str(RUN), [str(RUN), "tables"], "2026-11-30T06:00:00",
           {"TRAIN_EXTRA": "--encoder-layers 1"})  # fmt: skip
    archive = tmp_path / "converged-tables.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(runs, arcname=".")
    with pytest.raises(UsageError, match=r"made with TRAIN_EXTRA '--encoder-layers 1' \(fairseq-"
                       r"train arguments put last: a toy run's sizes\), refused: ALLOW_CPU"):  # fmt: skip
        check_archive(str(archive), code_sha256(str(RUN)))
    check_archive(str(archive), code_sha256(str(RUN)), allow_cpu=True)


def test_a_gpu_archive_trained_with_another_preset_is_refused(tmp_path, monkeypatch):
    """An archive made on a GPU with PRESET set to other fairseq-train arguments (a toy run's
    preset) was collected as the converged campaign's: its preset's sha256 is recorded and must
    be that of the campaign's preset here."""
    import campaign_slices
    from campaign_slices import check_archive, code_sha256, record
    from fairseq_san.errors import UsageError

    monkeypatch.setattr(campaign_slices, "gpu_name", lambda: "NVIDIA H200")
    toy = tmp_path / "toy.args"
    toy.write_text("--arch transformer_san_small --max-tokens 64\n")
    archives = {}
    for name, settings in (("toy", {"PRESET": str(toy)}), ("preset", {"PRESET": str(PRESET)})):
        runs = tmp_path / name
        runs.mkdir()
        record(str(runs), "tables", str(RUN), [str(RUN), "tables"], "2026-11-30T06:00:00",
               settings)  # fmt: skip
        archives[name] = tmp_path / f"converged-tables-{name}.tar.gz"
        with tarfile.open(archives[name], "w:gz") as tar:
            tar.add(runs, arcname=".")
    with pytest.raises(UsageError) as refused:
        check_archive(str(archives["toy"]), code_sha256(str(RUN)))
    assert str(refused.value).startswith(
        f"{archives['toy']}: trained with PRESET '{toy}', whose arguments are not those of "
        "examples/presets/gpu-converge.args here (sha256 "
    )
    assert str(refused.value).endswith("refused: ALLOW_CPU_ARCHIVES=1 collects it anyway")
    check_archive(str(archives["toy"]), code_sha256(str(RUN)), allow_cpu=True)
    check_archive(str(archives["preset"]), code_sha256(str(RUN)))


@pytest.mark.parametrize(
    "kind,name,said",
    [
        ("file", "campaign_summary.py", "is outside a pair's folder, provenance/ and smoke/"),
        ("file", "en-de/loop/evil.py", "is a program or a checkpoint"),
        ("file", "en-de/../../outside.json", "lies outside the archive's folder"),
        ("symlink", "en-de/link", "is a link or a special file"),
        ("hardlink", "en-de/hard", "is a link or a special file"),
        ("fifo", "en-de/fifo", "is a link or a special file"),
        # unpacked, then compressing the hypotheses failed (IsADirectoryError)
        ("dir", "en-de/loop/test-bleu/iter0/test/generate-test.txt", "is no file of hypotheses"),
        # unpacked over a results folder's en-de/: IsADirectoryError
        ("file", "en-de", "is a file where a folder belongs"),
    ],
)  # fmt: skip
def test_an_archive_member_collect_must_not_unpack_is_refused(tmp_path, monkeypatch, kind, name,
                                                               said):  # fmt: skip
    """collect unpacked an archive into the folder of run.sh and then ran its programs
    (campaign_summary.py): a member at the top, a program, a path out or a link (which Python's
    tarfile "data" filter does not always stop) is refused before anything is unpacked; the
    provenance, text in the archive, proves nothing."""
    import campaign_slices
    from campaign_slices import check_archive, code_sha256, record
    from fairseq_san.errors import UsageError

    monkeypatch.setattr(campaign_slices, "gpu_name", lambda: "NVIDIA H200")
    runs = tmp_path / "runs"
    runs.mkdir()
    record(str(runs), "en-de", str(RUN), [str(RUN), "en-de"], "2026-11-30T06:00:00", {})
    archive = tmp_path / "converged-en-de.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(runs, arcname=".")
        member = tarfile.TarInfo(name)
        member.type = {"file": tarfile.REGTYPE, "symlink": tarfile.SYMTYPE, "dir": tarfile.DIRTYPE,
                       "hardlink": tarfile.LNKTYPE, "fifo": tarfile.FIFOTYPE}[kind]  # fmt: skip
        member.linkname = "/etc/passwd" if kind in ("symlink", "hardlink") else ""
        tar.addfile(member, io.BytesIO(b"") if kind == "file" else None)
    with pytest.raises(UsageError) as refused:
        check_archive(str(archive), code_sha256(str(RUN)))
    assert str(refused.value) == f"{archive}: member {name!r} {said}: refused"


def test_a_member_that_is_a_file_and_a_folder_is_refused(tmp_path, monkeypatch):
    """Unpacking stopped half-way, at NotADirectoryError, with the archive's first part unpacked
    and its hypotheses not compressed."""
    from campaign_slices import check_archive, code_sha256
    from fairseq_san.errors import UsageError

    runs = gpu_archive(tmp_path, monkeypatch)
    archive = tmp_path / "converged-en-de.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(runs, arcname=".")
        for name in ("en-de/a", "en-de/a/b"):
            member = tarfile.TarInfo(name)
            tar.addfile(member, io.BytesIO(b""))
    with pytest.raises(UsageError) as refused:
        check_archive(str(archive), code_sha256(str(RUN)))
    assert str(refused.value) == f"{archive}: member 'en-de/a' is a file and a folder both: refused"


def test_archives_that_cannot_unpack_beside_each_other_are_refused_before_any(
    tmp_path, monkeypatch
):
    """Each archive passed its own checks, then unpacking stopped half-way ("Not a directory",
    "File name too long", "Is a directory") with the archives before it unpacked: the slice
    looked collected. Refused before anything is written, naming the archive and member; an
    archive of too many members too (50,000 empty files unpacked)."""
    import campaign_slices
    from campaign_slices import collect
    from fairseq_san.errors import UsageError

    def archive_with(name: str, members: Dict[str, bool]) -> Path:
        runs = gpu_archive(tmp_path / name, monkeypatch)
        archive = tmp_path / name / "converged-en-de.tar.gz"
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(runs, arcname=".")
            for path, folder in members.items():
                member = tarfile.TarInfo(path)
                member.type = tarfile.DIRTYPE if folder else tarfile.REGTYPE
                tar.addfile(member, None if folder else io.BytesIO(b""))
        return archive

    results = tmp_path / "results"
    (results / "en-de" / "loop" / "iter0").mkdir(parents=True)
    file_y = archive_with("a", {"en-de/q/r.txt": False, "en-de/x/y": False})
    folder_y = archive_with("b", {"en-de/x/y/z": False})
    long_name = archive_with("c", {"en-de/" + "n" * 300: False})
    over_folder = archive_with("d", {"en-de/loop": False})  # a run dir an archive replaces
    for archives, member, said in (
        ([file_y, folder_y], "en-de/x/y/z", f"is a folder where {file_y} has a file"),
        ([long_name], "en-de/" + "n" * 300, "has a name longer than 255 bytes"),
        ([over_folder], "en-de/loop", f"is a file where {results} has a folder"),
    ):  # fmt: skip
        with pytest.raises(UsageError) as refused:
            collect(str(results), str(RUN), list(map(str, archives)))
        archive = archives[-1] if len(archives) == 1 else folder_y
        assert str(refused.value) == f"{archive}: member {member!r} {said}: refused"
        assert not (results / "en-de" / "q").exists() and not (results / "provenance").exists()
    monkeypatch.setattr(campaign_slices, "MAX_MEMBERS", 5)
    with pytest.raises(UsageError, match=r"holds \d+ members, more than a slice's results \(5 at"):
        collect(str(results), str(RUN), [str(file_y)])


def gpu_archive(tmp_path, monkeypatch, slice_name: str = "en-de"):
    """A run dir with a GPU's provenance record for ``slice_name`` (what collect accepts)."""
    import campaign_slices

    monkeypatch.setattr(campaign_slices, "gpu_name", lambda: "NVIDIA H200")
    runs = tmp_path / "runs"
    (runs / slice_name).mkdir(parents=True)
    campaign_slices.record(str(runs), slice_name, str(RUN), [str(RUN), slice_name],
                           "2026-11-30T06:00:00", {})  # fmt: skip
    return runs


@pytest.mark.skipif(shutil.which("tar") is None, reason="needs GNU tar")
def test_an_archive_that_unpacks_to_more_than_a_slice_is_refused(tmp_path, monkeypatch):
    """A received archive of 357 bytes unpacked a 20 GiB sparse file, and one of 300 KB of gzip
    300 MB, filling the disk of whoever collected it: a sparse member is refused, and so is an
    archive whose members add up to more than UNPACKED_MIB, before anything is unpacked."""
    import campaign_slices
    from campaign_slices import check_archive, code_sha256
    from fairseq_san.errors import UsageError

    runs = gpu_archive(tmp_path, monkeypatch)
    with open(runs / "en-de" / "hypotheses.txt", "wb") as sparse:
        sparse.truncate(3 << 20)
    archive = tmp_path / "converged-en-de.tar.gz"
    subprocess.run(["tar", "--format=gnu", "-S", "-czf", archive, "-C", runs, "."], check=True)
    with pytest.raises(UsageError, match=r"member './en-de/hypotheses.txt' is a sparse file: "):
        check_archive(str(archive), code_sha256(str(RUN)))
    subprocess.run(["tar", "-czf", archive, "-C", runs, "."], check=True)  # written out whole
    monkeypatch.setattr(campaign_slices, "UNPACKED_MIB", 2)
    with pytest.raises(UsageError, match=r"unpacks to 3 MiB, more than a slice's results \(2 MiB"):
        check_archive(str(archive), code_sha256(str(RUN)))
    monkeypatch.setattr(campaign_slices, "UNPACKED_MIB", 4)
    check_archive(str(archive), code_sha256(str(RUN)))


@pytest.mark.parametrize(
    "record, said",
    [
        ([1, 2], "is a JSON list, not an object"),
        ({"command": {"a": 1}}, "has a command that is not a list of strings"),
        ({"command": ["run.sh", 1]}, "has a command that is not a list of strings"),
        ({"settings": [1]}, "has settings that are not an object"),
        # collected without ALLOW_CPU_ARCHIVES, then the summary's table read "None"
        ({"gpu": None}, "has no gpu named (its gpu is None)"),
        ({"slice": None}, "has no slice named (its slice is None)"),  # the summary's KeyError
        # unpacked, then the summary's sort failed: "'<' not supported between int and str"
        ({"finished": 20261205}, "has no ISO 8601 finished time (its finished is 20261205)"),
        ({"started": "yesterday"}, "has no ISO 8601 started time (its started is 'yesterday')"),
    ],
)
def test_a_provenance_record_of_another_shape_is_one_line(tmp_path, monkeypatch, record, said):
    """Provenance records of the wrong shape stopped collect in a traceback (AttributeError,
    TypeError; RecursionError for JSON nested 100,000 deep): one line each."""
    from campaign_slices import check_archive, code_sha256
    from fairseq_san.errors import UsageError

    runs = gpu_archive(tmp_path, monkeypatch)
    (recorded,) = (runs / "provenance").glob("*.json")
    if isinstance(record, dict):
        record = {**json.loads(recorded.read_text()), **record}
    recorded.write_text(json.dumps(record))
    archive = tmp_path / "converged-en-de.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(runs, arcname=".")
    with pytest.raises(UsageError) as refused:
        check_archive(str(archive), code_sha256(str(RUN)))
    assert str(refused.value) == f"{archive}: provenance record {said}: refused"
    recorded.write_text("[" * 100000 + "]" * 100000)
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(runs, arcname=".")
    with pytest.raises(UsageError, match="unreadable archive"):
        check_archive(str(archive), code_sha256(str(RUN)))


def test_heldout_hypotheses_must_match_the_sources_line_by_line(tmp_path, monkeypatch):
    import campaign_slices as converged_slices
    from fairseq_san.errors import UsageError

    source = tmp_path / "test_2018_flickr.en"
    source.write_text("A dog.\nA cat.\nTwo birds.\n")

    def interactive(hypotheses: int):
        def fake(command, stdin, stdout, stderr, text):
            stdout.write("".join(f"D-{i}\t-0.2\tSatz {i}\n" for i in reversed(range(hypotheses))))
            return subprocess.CompletedProcess(command, 0, stderr="")
        return fake

    monkeypatch.setattr(converged_slices.subprocess, "run", interactive(3))
    out = tmp_path / "ok.hyp"
    assert converged_slices.translate("data", "ckpt.pt", str(source), str(out), batch_size=8) == 3
    assert out.read_text() == "Satz 0\nSatz 1\nSatz 2\n"  # in source order
    monkeypatch.setattr(converged_slices.subprocess, "run", interactive(2))
    with pytest.raises(UsageError, match="3 sentences but 2 hypotheses"):
        converged_slices.translate("data", "ckpt.pt", str(source), str(tmp_path / "short.hyp"), 8)
    assert not (tmp_path / "short.hyp").exists()


def test_bundle_carries_the_heldout_sources(tmp_path):
    from helpers import load_builder

    sources = tmp_path / "heldout"
    sources.mkdir()
    (sources / "test_2018_flickr.en").write_text("A dog.\n")
    (sources / "README.md").write_text("not a source\n")
    (sources / "folder.en").mkdir()  # copied as a file: an IsADirectoryError traceback
    builder = load_builder()
    assert builder.copy_heldout(sources, tmp_path / "bundle" / "heldout") == ["test_2018_flickr.en"]
    assert (tmp_path / "bundle" / "heldout" / "test_2018_flickr.en").read_text() == "A dog.\n"


# --- a tiny real slice ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Dict[str, object]:
    """The en-de slice (loop and seed 2, held-out sources), its archive collected from
    SHARED/converged, then the slice again on a fresh machine (only the collected run dirs)."""
    root = tmp_path_factory.mktemp("campaign")
    raw = write_fake_multi30k(root / "raw")
    data = root / "data" / "multi30k.en-de"
    prepared = run_script(PREPARE, "en", "de", str(data), env=prepare_env(raw))
    assert prepared.returncode == 0, prepared.stderr[-3000:]
    cpu_preset = root / "cpu.args"  # the GPU preset without --fp16; TINY_TRAIN makes it small
    cpu_preset.write_text("\n".join(a for a in preset_args(str(PRESET)) if a != "--fp16") + "\n")
    heldout = root / "shared" / "heldout"
    heldout.mkdir(parents=True)
    (heldout / "test_2018_flickr.en").write_text("a man rides a bike .\ntwo dogs play .\nred car\n")
    (heldout / "zz_unreadable.en").mkdir()  # its translation fails, as one cut at the deadline
    results = root / "results"
    results.mkdir()
    env = cli_env()
    env.update(
        PRESET=str(cpu_preset), DATA_ROOT=str(root / "data"), RESULTS=str(results), SEEDS="2",
        TRAIN_EXTRA=TINY_TRAIN, SHARED=str(root / "shared"), CAP_MIN="1", DECODE_BATCH_SIZE="4",
        UPDATES="20",
        ONLY="en-de/loop en-de/baseline-s2 en-de/san-s2", ALLOW_CPU_ARCHIVES="1",
    )  # fmt: skip
    outputs = {}
    env.update(RUNS=str(root / "first" / "runs"), OUT=str(root / "shared" / "converged"))
    outputs["first"] = campaign("en-de", env=env)
    outputs["collect"] = campaign("collect", env=env)
    env.update(RUNS=str(root / "fresh" / "runs"), OUT=str(root / "fresh" / "out"))
    outputs["fresh"] = campaign("en-de", env=env)
    return {"root": root, "results": results, "outputs": outputs, "env": env}


@pytest.mark.slow
def test_tiny_en_de_slice_summary_has_the_schema_caps_curves_and_heldout(tiny):
    results = tiny["results"]
    summary = json.loads((results / "summary.json").read_text())
    rows = summary["pairs"]["en-de"]
    assert [(row["system"], row["seed"]) for row in rows] == [
        ("baseline", 1), ("baseline", 2), ("san", 1), ("san", 2)]  # fmt: skip
    learned = json.loads((results / "en-de" / "loop" / "iter1" / "policy.json").read_text())
    assert len(summary["training"]["en-de"]) == len(rows) == 4
    for row, training in zip(rows, summary["training"]["en-de"]):
        assert set(row) == SCHEMA_KEYS | {"heldout"}
        assert row["updates"] == 20 and row["wall_s"] > 0  # --max-update 20
        assert set(row["test"]) == set(TEST_SETS)
        for score in row["test"].values():
            assert score["signature"].startswith("nrefs:1|") and 0 <= score["bleu"] <= 100
        assert training["cap_s"] == pytest.approx(60, abs=1)  # CAP_MIN 1, the same for all
        assert [point[0] for point in training["valid_curve_last"]] == [5, 10, 15, 20]
        assert row["best_valid_loss"] == min(point[1] for point in training["valid_curve_last"])
        assert training["epochs"] >= 1
        (path,) = row["heldout"].values()
        assert len((results / path).read_text().splitlines()) == 3
    assert rows[0]["policy"]["decoder_self"] is None
    assert rows[2]["policy"] == rows[3]["policy"] == learned  # every SAN seed: seed 1's policy
    assert summary["seeds"]["en-de"]["san"]["test_2016_flickr"]["n"] == 2
    tests = summary["paired_bootstrap"]["en-de"]
    assert {(test["seed"], test["test_set"]) for test in tests} == {
        (seed, test_set) for seed in (1, 2) for test_set in TEST_SETS}  # fmt: skip
    (record,) = summary["slices"]
    assert record["slice"] == "en-de" and record["settings"]["TRAIN_EXTRA"] == TINY_TRAIN
    assert "| en-de | san |" in (results / "headline.md").read_text()


@pytest.mark.slow
def test_tiny_archive_has_no_checkpoints_and_a_fresh_machine_skips_what_finished(tiny):
    root = tiny["root"]
    with tarfile.open(root / "shared" / "converged" / "converged-en-de.tar.gz") as archive:
        names = archive.getnames()
    assert not any(name.endswith(".pt") or "/checkpoints" in name for name in names)
    for part in ("en-de/loop/iter0/analysis/js.json", "en-de/loop/test-bleu/iter1/test/generate-test.txt",
                 "en-de/san/heldout/test_2018_flickr.hyp", "en-de/baseline-s2/done.iter0"):  # fmt: skip
        assert f"./{part}" in names
    for run_dir in ("loop", "baseline-s2", "san-s2"):  # done: trained and tested
        log = (root / "first" / "runs" / "en-de" / run_dir / "run.log").read_text()
        assert "held-out translation stopped (exit 2): what it wrote is kept" in log
    fresh = tiny["outputs"]["fresh"]
    assert " started at " not in fresh  # no system trained again
    for name in ("en-de/loop: iteration 0", "en-de/loop: iteration 1", "en-de/san-s2: iteration 0"):
        assert f"== {name} done in an earlier run" in fresh
    assert not (root / "fresh" / "runs" / "en-de" / "loop" / "iter0" / "checkpoints").exists()


@pytest.mark.slow
def test_a_fresh_machine_trains_stage_2_on_stage_1_collected_without_checkpoints(tiny, tmp_path):
    """The slice's second call: the loop's stage 1, collected (no checkpoints), restored on a
    fresh machine, which trains iteration 1 alone, with the policy iteration 0 learned."""
    loop = tmp_path / "results" / "en-de" / "loop"
    shutil.copytree(tiny["results"] / "en-de" / "loop", loop)
    for stage_2 in ("done.iter1", "iter2", "test-bleu/iter1", *(f"iter1/{p.name}" for p in (
            loop / "iter1").iterdir() if p.name != "policy.json")):  # fmt: skip
        path = loop / stage_2
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    learned = (loop / "iter1" / "policy.json").read_text()
    env = {**tiny["env"], "RESULTS": str(tmp_path / "results"), "RUNS": str(tmp_path / "runs"),
           "OUT": str(tmp_path / "out"), "ONLY": "en-de/loop"}  # fmt: skip
    output = campaign("en-de", env=env)
    assert "== en-de/loop: iteration 0 done in an earlier run" in output
    assert "== en-de/loop: iteration 1 started at " in output
    run_dir = tmp_path / "runs" / "en-de" / "loop"
    assert (run_dir / "done.iter1").is_file() and (run_dir / "test-bleu" / "iter1" / "test1").is_dir()
    assert (run_dir / "iter1" / "policy.json").read_text() == learned
    assert not (run_dir / "iter0" / "checkpoints").exists()
    # The loop's summary still has iteration 0, as stage 1 recorded it.
    assert [row["iteration"] for row in json.loads((run_dir / "loop.json").read_text())] == [0, 1]


@pytest.mark.slow
def test_figure_5_analyses_each_checkpoint_beside_its_baselines_training(tiny, tmp_path):
    """The tables slice's baseline seed 5 keeps every checkpoint; beside its training, each one is
    analysed as it is written (its checkpoints never reach the slice's next call), then the best
    one on the test sentences, and the policy learned from them. Then, on the same machine, the
    bench slice finds that call's baseline, SAN and AAN+SAN and benchmarks them, training none."""
    env = {**tiny["env"], "RUNS": str(tmp_path / "runs"), "OUT": str(tmp_path / "out"),
           "ONLY": "en-de/baseline-s5 en-de/san-s4 en-de/aan-san",
           "EVALUATE": "0"}  # no test sets: the analyses only  # fmt: skip
    output = campaign("tables", env=env)
    bench_env = {**env, "RUNS": str(tmp_path / "bench"), "TABLES_RUNS": env["RUNS"], "BENCH_S": "0",
                 "PATH": f"{bench_stub(tmp_path)}:{env['PATH']}"}  # fmt: skip
    bench = campaign("bench", env=bench_env)
    assert "== bench: the tables slice's models on this machine: " in bench
    assert printed_commands(bench, "learn_to_share.sh") == []
    calls = [json.loads(line) for line in (tmp_path / "bench.args").read_text().splitlines()]
    systems = values(calls[0], "--system")
    assert [Path(w.split("=")[1].split(":")[0]).is_file() for w in systems] == [True] * 11
    run_dir = tmp_path / "runs" / "en-de" / "baseline-s5"
    kept = sorted(path.stem for path in (run_dir / "iter0" / "checkpoints").glob("checkpoint_*_*.pt"))
    assert len(kept) == 4, output[-3000:]  # --save-interval-updates 5, --max-update 20
    analysed = sorted(path.parent.name for path in (run_dir / "figure5").glob("*/js.json"))
    assert analysed == kept
    steps = [json.loads((run_dir / "figure5" / name / "js.json").read_text())["num_updates"]
             for name in kept]  # fmt: skip
    assert sorted(steps) == [5, 10, 15, 20]
    assert (run_dir / "iter0" / "analysis-test" / "js.json").is_file()
    assert "decoder_self" in json.loads((run_dir / "policies" / "test-sentences.json").read_text())


@pytest.mark.slow
def test_train_log_table_reports_a_slice_system(tiny):
    log = tiny["results"] / "en-de" / "loop" / "iter0" / "train.log"
    result = run_cli("fairseq-san-loop", "train-log", str(log))
    assert result.returncode == 0, result.stderr[-2000:]
    (row,) = [line for line in result.stdout.splitlines() if line.startswith(f"| {log}")]
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[2] == "20" and cells[6] == "max update"  # updates, stop
    assert float(cells[4]) > 0 and float(cells[5]) > 0  # updates/s, tokens/s


# --- the log parser ---------------------------------------------------------------------------


def test_read_train_log_follows_a_resumed_wall_capped_run(tmp_path):
    from fairseq_san.loop.train_log import read_train_log

    def record(tag: str, **fields) -> str:
        return f"2026-11-26 10:00:00 | INFO | {tag} | {json.dumps(fields)}\n"

    start = "2026-11-26 10:00:00 | INFO | fairseq_cli.train | num. shared model params: 1,234\n"
    log = tmp_path / "train.log"
    log.write_text(
        start
        + record("train_inner", epoch=1, num_updates="50", ups="10", wps="1000", wall="5")
        + record("valid", epoch=1, valid_loss="6.5", valid_num_updates="100")
        + "Traceback: killed\n"  # a first process killed; the resumed one appends
        + start
        + record("valid", epoch=3, valid_loss="6.1", valid_num_updates="200")
        + record("train_inner", epoch=3, num_updates="250", ups="12", wps="1200", wall="30")
        + record("valid", epoch=4, valid_loss="6.2", valid_num_updates="300")
        + "2026-11-26 10:06:00 | INFO | fairseq_cli.train | Stopping training due to "
        "cumulative_training_time: 0.0101 > stop_time_hours: 0.01 hour(s)\n"
        + record("train", epoch=4, train_num_updates="301", train_wall="36")
    )  # fmt: skip
    facts = read_train_log(str(log))
    assert facts["params"] == 1234 and facts["updates"] == 301 and facts["epochs"] == 4
    assert facts["stop"] == "wall cap" and facts["wall_s"] == pytest.approx(36.36)
    assert facts["valid_curve"] == [(100, 6.5), (200, 6.1), (300, 6.2)]
    assert (facts["best_valid_loss"], facts["best_updates"]) == (6.1, 200)
    assert facts["updates_per_s"] == 11 and facts["tokens_per_s"] == 1100


def test_read_train_log_adds_the_wall_time_of_each_resumed_process(tmp_path):
    """A resumed fairseq-train starts its wall meter again at 0 (here 1..8 s, then 1..4 s):
    the longest of them was taken, 8 s of 10 (a longer resumed process left the first out)."""
    from fairseq_san.loop.train_log import read_train_log

    def record(wall: int, updates: int) -> str:
        fields = {"epoch": 1, "num_updates": str(updates), "ups": "10", "wps": "1000",
                  "wall": str(wall)}  # fmt: skip
        return f"2026-12-05 00:14:08 | INFO | train_inner | {json.dumps(fields)}\n"

    start = "2026-12-05 00:14:08 | INFO | fairseq_cli.train | num. shared model params: 9,848\n"
    done = "2026-12-05 00:14:16 | INFO | fairseq_cli.train | done training in {} seconds\n"
    log = tmp_path / "train.log"
    log.write_text(start + record(1, 10) + record(7, 120) + done.format(7.6)
                   + start + record(1, 130) + record(2, 160) + done.format(2.4))  # fmt: skip
    assert read_train_log(str(log))["wall_s"] == pytest.approx(10.0)
    capped = ("2026-12-05 00:14:16 | INFO | fairseq_cli.train | Stopping training due to "
              "cumulative_training_time: 0.0025 > stop_time_hours: 0.0025 hour(s)\n")
    log.write_text(start + record(7, 120) + capped + start + record(2, 160) + done.format(2.4))
    assert read_train_log(str(log))["wall_s"] == pytest.approx(11.4)  # capped at 9 s, then 2.4


def test_read_train_log_forgets_an_attempt_that_a_start_from_scratch_replaced(tmp_path):
    """A recipe reruns a training that saved no checkpoint with other arguments, appending to
    its log: the abandoned attempt's model size (308,480 of a 64-dim model, not the 97,152 that
    trained), speed and wall time were reported as the training's. A resumed process (it
    loaded a checkpoint) still adds to the one before."""
    from fairseq_san.loop.train_log import read_train_log

    def line(text: str) -> str:
        return f"2026-12-05 19:32:00 | INFO | fairseq_cli.train | {text}\n"

    def record(wall: int, updates: int, ups: str) -> str:
        fields = {"epoch": 1, "num_updates": str(updates), "ups": ups, "wps": "1000",
                  "wall": str(wall)}  # fmt: skip
        return f"2026-12-05 19:32:01 | INFO | train_inner | {json.dumps(fields)}\n"

    scratch = line("No existing checkpoint found checkpoints/checkpoint_last.pt")
    log = tmp_path / "train.log"
    log.write_text(line("num. shared model params: 308,480 (num. trained: 308,480)") + scratch
                   + record(5, 10, "2")  # killed before its first checkpoint
                   + line("num. shared model params: 97,152 (num. trained: 97,152)") + scratch
                   + record(3, 10, "8") + line("done training in 3.5 seconds")
                   + line("num. shared model params: 97,152 (num. trained: 97,152)")  # resumed
                   + record(2, 20, "6") + line("done training in 2.5 seconds"))  # fmt: skip
    facts = read_train_log(str(log))
    assert (facts["params"], facts["updates"], facts["wall_s"]) == (97_152, 20, 6.0)
    assert facts["updates_per_s"] == 7.0  # of 8 and 6, not the attempt's 2


def test_read_train_log_reads_the_simple_format_as_the_json_one(tmp_path):
    """The same stats written by fairseq's simple progress bar (the recipes' --log-format) and by
    its JSON bar give the same facts."""
    from fairseq_san.loop.train_log import read_train_log

    start = "2026-11-26 10:00:00 | INFO | fairseq_cli.train | num. model params: 1,234 (...)\n"
    simple, json_log = tmp_path / "simple.log", tmp_path / "json.log"
    simple.write_text(
        start
        + "2026-11-26 10:00:01 | INFO | train_inner | epoch 001:     25 / 117 loss=9.1, "
        "nll_loss=9, ppl=550, wps=1000, ups=10, wpb=400, bsz=30, num_updates=25, lr=5e-05, "
        "gnorm=2.1, train_wall=10, wall=12\n"
        "2026-11-26 10:00:02 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 6.5 | "
        "nll_loss 6.4 | ppl 85.4 | wps 1900 | wpb 204.5 | bsz 10.5 | num_updates 30\n"
        "2026-11-26 10:00:02 | INFO | train | epoch 001 | loss 7.1 | nll_loss 7.1 | ppl 139.6 | "
        "wps 8676.4 | ups 7.14 | wpb 1250.7 | bsz 66.7 | num_updates 30 | lr 0.0009 | gnorm 1.8 "
        "| train_wall 0 | wall 14\n"
        "2026-11-26 10:00:02 | INFO | fairseq_cli.train | done training in 14.5 seconds\n"
    )  # fmt: skip
    def record(tag: str, **fields) -> str:
        return f"2026-11-26 10:00:02 | INFO | {tag} | {json.dumps(fields)}\n"

    json_log.write_text(
        start
        + record("train_inner", epoch=1, num_updates="25", ups="10", wps="1000", wall="12")
        + record("valid", epoch=1, valid_loss="6.5", valid_num_updates="30")
        + record("train", epoch=1, train_num_updates="30", train_wall="14")
        + "2026-11-26 10:00:02 | INFO | fairseq_cli.train | done training in 14.5 seconds\n"
    )
    facts = read_train_log(str(simple))
    assert facts == read_train_log(str(json_log))
    assert facts["updates"] == 30 and facts["epochs"] == 1 and facts["wall_s"] == 14.5
    assert facts["valid_curve"] == [(30, 6.5)] and facts["updates_per_s"] == 10


def test_permutation_test_over_seeds_counts_the_splits_as_extreme_as_the_observed_one():
    """3 against 4 seeds: 35 splits. 1, 2, 3 against 4-7 (difference -3.5) and its opposite
    5, 6, 7 against 1-4 (+3.5) are the two most extreme; equal scores give p = 1."""
    from fairseq_san.scoring import permutation_p

    assert permutation_p([1, 2, 3], [4, 5, 6, 7]) == pytest.approx(2 / 35)
    assert permutation_p([5, 6, 7], [1, 2, 3, 4]) == pytest.approx(2 / 35)
    assert permutation_p([2, 2, 2], [2, 2, 2, 2]) == 1
    # 1, 2, 4 against 3, 5, 6, 7 (-2.92): splits as far from 0 are the observed one, 1, 2, 3
    # (-3.5), and 5, 6, 7 (+3.5), 4, 6, 7 (+2.92): 4 of 35.
    assert permutation_p([1, 2, 4], [3, 5, 6, 7]) == pytest.approx(4 / 35)


def test_the_permutation_test_samples_splits_where_they_are_too_many(monkeypatch):
    """12 seeds against 12 are 2.7 million splits, for each step of the interval's search:
    fairseq-san-score ran for minutes to hours without a word. Above MAX_EXACT_SPLITS the test
    takes random splits (the observed one counted), and its p is near the exact one."""
    from fairseq_san import scoring

    san, baseline = [37.8, 37.9, 37.1, 36.5, 38.2], [37.2, 36.8, 37.2, 37.4, 36.9]
    exact = scoring.seed_comparison(san, baseline)
    assert (exact["exact"], exact["splits"]) == (True, 252)
    monkeypatch.setattr(scoring, "MAX_EXACT_SPLITS", 100)
    monkeypatch.setattr(scoring, "SAMPLED_SPLITS", 20_000)
    sampled = scoring.seed_comparison(san, baseline)
    assert (sampled["exact"], sampled["splits"]) == (False, 20_001)
    assert sampled["p_value"] == pytest.approx(exact["p_value"], abs=0.01)
    assert sampled["difference"] == exact["difference"]
    many = scoring.seed_comparison([40.0 + i / 10 for i in range(12)], [30.0] * 12)
    assert not many["exact"] and many["p_value"] == round(1 / 20_001, 4)  # only the observed


def test_budget_is_stated_for_each_seed_that_trained_a_baseline_and_san():
    """A wall cap may stop one seed's baseline and not another's: each seed gets its statement,
    and a seed without both systems (baseline seed 4 here) gets none."""
    from campaign_summary import seed_budgets

    def system(name, seed, updates, stop):
        return {"system": name, "seed": seed, "updates": updates, "wall_s": 300.0}, {"stop": stop}

    rows = [
        system("baseline", 1, 2841, "wall cap"), system("san", 1, 3000, "max update"),
        system("baseline", 2, 3000, "max update"), system("san", 2, 3000, "max update"),
        system("baseline", 4, 3000, "max update"), system("uniform", 4, 3000, "max update"),
    ]  # fmt: skip
    first, second = seed_budgets(rows).split(" | seed ")
    assert first.startswith("seed 1: mixed stopping (baseline: wall cap, SAN: max update;")
    assert second.startswith("2: equal updates") and "seed 4" not in seed_budgets(rows)
    assert seed_budgets(rows[4:]) == ""


def test_permutation_interval_holds_the_shifts_the_test_does_not_reject():
    """The interval is the test inverted: its ends are not rejected at 5%, a step beyond each is;
    with 2 seeds against 2 no shift can be rejected, so there is none."""
    from campaign_summary import seed_tests
    from fairseq_san.scoring import SHIFT_STEP, permutation_interval, permutation_p

    san, baseline = [37.81, 37.85, 37.78, 36.5], [37.2, 36.77, 37.18, 37.41]
    low, high = permutation_interval(san, baseline)
    assert low < sum(san) / 4 - sum(baseline) / 4 < high
    for end, beyond in ((low, low - SHIFT_STEP), (high, high + SHIFT_STEP)):
        assert permutation_p([x - end for x in san], baseline) > 0.05
        assert permutation_p([x - beyond for x in san], baseline) <= 0.05
    assert permutation_interval([40, 41], [30, 31]) is None
    seeds = {
        "baseline": {"test_2016_flickr": {"n": 4, "bleu": baseline}},
        "san": {"test_2016_flickr": {"n": 4, "bleu": san}},
        "uniform": {"test_2017_flickr": {"n": 2, "bleu": [1.0, 2.0]}},  # no baseline on 2017
    }
    (test,) = seed_tests(seeds)
    assert (test["system"], test["against"], test["splits"], test["interval_95"]) == (
        "san", "baseline", 70, [low, high])  # fmt: skip
    # A SAN of another policy is tested against the baseline and against SAN (which policy).
    seeds["san-mean"] = {"test_2016_flickr": {"n": 3, "bleu": [37.97, 37.5, 38.1]}}
    tests = [(t["system"], t["against"], t["against_seeds"]) for t in seed_tests(seeds)]
    assert tests == [("san", "baseline", 4), ("san-mean", "baseline", 4), ("san-mean", "san", 4)]


def test_bootstrap_statistics_give_sacrebleus_corpus_bleu_on_any_resample():
    """The difference's interval sums per-sentence statistics (sacreBLEU's public sentence scores):
    on any set of sentences they must give exactly ``BLEU().corpus_score``."""
    import random

    from fairseq_san.scoring import corpus_bleu, sentence_statistics
    from sacrebleu.metrics import BLEU

    rng = random.Random(0)
    words = "a man in a red shirt is riding a horse on the beach with two dogs".split()
    references = [" ".join(rng.choices(words, k=rng.randint(5, 12))) for _ in range(40)]
    hypotheses = [" ".join(rng.choices(words, k=rng.randint(4, 12))) for _ in range(40)]
    stats = sentence_statistics(hypotheses, references)
    for rows in ([*range(40)], [rng.randrange(40) for _ in range(40)], [3, 3, 7]):
        expected = BLEU().corpus_score([hypotheses[i] for i in rows], [[references[i] for i in rows]])
        assert corpus_bleu(stats[rows].sum(0)) == pytest.approx(expected.score, abs=1e-9)


def test_a_records_name_is_its_start_in_utc(tmp_path, monkeypatch, capsys):
    """Another zone's time was written as if it were UTC (05:00+05:00 as 050000Z); a start that
    is no time, and a RUNS folder that is not there, were tracebacks."""
    import campaign_slices

    monkeypatch.setattr(campaign_slices, "gpu_name", lambda: "NVIDIA H200")
    path = campaign_slices.record(str(tmp_path), "en-de", str(RUN), [str(RUN), "en-de"],
                                  "2026-01-01T05:00:00+05:00", {})  # fmt: skip
    assert Path(path).name == "en-de-20260101T000000Z.json"
    argv = ["record", str(tmp_path), "--slice", "en-de", "--run-sh", str(RUN), "--started"]
    assert campaign_slices.main([*argv, "yesterday", "--", "run.sh", "en-de"]) == 2
    assert capsys.readouterr().err.strip() == (
        "fairseq-san: error: --started yesterday: not an ISO 8601 time (run.sh: date -u "
        "-Iseconds)"
    )
    missing = tmp_path / "missing"
    argv[1] = str(missing)
    assert campaign_slices.main([*argv, "2026-01-01T05:00:00", "--", "run.sh", "en-de"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"fairseq-san: error: {missing}: No such file or directory"
    )
