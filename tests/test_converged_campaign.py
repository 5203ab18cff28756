"""The converged-model campaign of issue 11, at toy scale on the CPU.

* ``examples/presets/gpu-converge.args``: fairseq-train accepts it and it sets the stopping rule;
* ``docs/results/converged/run.sh PHASE --dry-run``: the commands of every phase, nothing written;
* a tiny real campaign: phase A (the En->De loop's baseline and a second baseline seed), then
  phase B on a "fresh machine" (only the archive of A, unpacked by ``collect``), then
  ``collect``: summary.json in issue 11's schema with real values; the archive is one file,
  without checkpoints; re-running a phase skips finished work;
* ``fairseq_san.converged_summary.read_train_log`` on a resumed, wall-capped log.
"""

import json
import shlex
import subprocess
import tarfile
from pathlib import Path
from typing import Dict, List

import pytest

from helpers import REPO, cli_env, run_cli
from test_recipes import PREPARE, prepare_env, run_script, snapshot, write_fake_multi30k

RUN = REPO / "docs" / "results" / "converged" / "run.sh"
PRESET = REPO / "examples" / "presets" / "gpu-converge.args"
PAIRS = ["en-de", "de-en", "en-fr", "en-cs"]
SCHEMA_KEYS = {"system", "seed", "policy", "params", "updates", "wall_s", "best_valid_loss", "test"}
TINY_TRAIN = (
    "--cpu --encoder-layers 2 --decoder-layers 6 --encoder-embed-dim 32 --decoder-embed-dim 32 "
    "--encoder-ffn-embed-dim 64 --decoder-ffn-embed-dim 64 --encoder-attention-heads 2 "
    "--decoder-attention-heads 2 --max-tokens 2000 --warmup-updates 5 "
    "--validate-interval-updates 5 --save-interval-updates 5 --max-update 20 --log-interval 5"
)


def preset_args(path: Path = PRESET) -> List[str]:
    """The preset's arguments, as run.sh reads them (``#`` starts a comment)."""
    text = "\n".join(line.split("#", 1)[0] for line in path.read_text().splitlines())
    return shlex.split(text)


def campaign(phase: str, *args: str, env: Dict[str, str], timeout: int = 400):
    result = subprocess.run(
        ["bash", str(RUN), phase, *args], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip
    assert result.returncode == 0, (result.stdout + result.stderr)[-5000:]
    return result.stdout + result.stderr


def commands(output: str, program: str) -> List[List[str]]:
    """The printed commands (``+ ...`` lines) that run ``program`` (after ``timeout -k 10 S``)."""
    found = []
    for line in output.splitlines():
        if line.startswith("+ "):
            words = shlex.split(line[2:])
            if words[0] == "timeout":
                words = words[4:]
            if words[0].endswith(program):
                found.append(words)
    return found


def value(words: List[str], flag: str) -> str:
    """The last value of ``flag`` (the one fairseq and learn_to_share.sh use)."""
    return [words[i + 1] for i, word in enumerate(words) if word == flag][-1]


def run_dirs(output: str) -> Dict[str, List[str]]:
    return {
        value(words, "--run-dir").split("converged/", 1)[1]: words
        for words in commands(output, "learn_to_share.sh")
    }


# --- the preset -------------------------------------------------------------------------------


def test_preset_parses_as_fairseq_train_arguments_with_one_stopping_rule():
    from fairseq import options

    args = options.parse_args_and_arch(
        options.get_training_parser(),
        ["data", "--task", "translation", "--arch", "transformer", *preset_args()],
    )
    assert args.fp16 and args.max_tokens >= 16384
    assert args.patience > 0 and 0 < args.stop_time_hours < 10 / 60  # inside one device call
    assert args.validate_interval_updates == args.save_interval_updates > 0
    assert args.log_format == "json"  # what converged_summary.read_train_log parses


# --- run.sh --dry-run -------------------------------------------------------------------------


@pytest.fixture()
def dry_env(tmp_path) -> Dict[str, str]:
    env = cli_env()
    env.update(RUNS=str(tmp_path / "runs" / "converged"), OUT=str(tmp_path / "out"))
    return env


def test_dry_run_prints_each_phase_and_writes_nothing(dry_env, tmp_path):
    before = snapshot(REPO / "docs" / "results")
    phases = "sweep A B C D".split()
    outputs = {phase: campaign(phase, "--dry-run", env=dry_env) for phase in phases}
    assert snapshot(REPO / "docs" / "results") == before
    assert list(tmp_path.iterdir()) == []

    preset = preset_args()
    for phase, output in outputs.items():
        for words in commands(output, "learn_to_share.sh"):
            after = words[words.index("--") + 1 :]
            assert after[: len(preset)] == preset, phase  # the preset, then the phase's own cap
            assert float(value(words, "--stop-time-hours")) > 0
        (tar,) = commands(output, "tar")
        assert tar[tar.index("-C") + 1] == dry_env["RUNS"] and "--exclude=*.pt" in tar

    sweep = run_dirs(outputs["sweep"])
    assert {value(sweep[f"sweep/tokens-{t}"], "--max-tokens") for t in (8192, 16384, 32768)} == {
        "8192", "16384", "32768"
    }  # fmt: skip
    assert value(sweep["smoke/spawn-gloo"], "--distributed-world-size") == "2"
    for backend in ("gloo", "nccl"):
        smoke = sweep[f"smoke/torchrun-{backend}"]
        assert "torchrun --nproc_per_node 2" in smoke
        assert value(smoke, "--distributed-backend") == backend
    assert commands(outputs["sweep"], "test_bleu.sh") == []

    a = run_dirs(outputs["A"])
    assert set(a) == {f"{pair}/loop" for pair in PAIRS} | {"en-de/baseline-s2", "en-de/baseline-s3"}
    assert value(a["en-de/baseline-s3"], "--seed") == "3"
    assert len(commands(outputs["A"], "test_bleu.sh")) == 6
    thetas = {(value(w, "--theta-decoder-self"), value(w, "--theta-decoder-encdec"))
              for w in commands(outputs["A"], "fairseq-san-policy")}  # fmt: skip
    assert {("0.3", "0.4"), ("0.3", "0.5"), ("0.4", "0.4")} <= thetas

    b = run_dirs(outputs["B"])
    assert {value(b[f"{pair}/loop"], "--max-iterations") for pair in PAIRS} == {"2"}
    assert value(b["en-de/san-s2"], "--seed") == "2"
    warm = b["en-de/warm"]
    assert "--warm-start" in warm and value(warm, "--max-iterations") == "2"
    assert float(value(warm, "--stop-time-hours")) == pytest.approx(
        float(value(b["en-de/san-s2"], "--stop-time-hours")) / 2, abs=1e-4
    )

    c = run_dirs(outputs["C"])
    sensitivity = "baseline-sens san-sens uniform own-v enc-0.4 aan aan-san".split()
    assert {f"en-de/{name}" for name in sensitivity} <= set(c)
    assert value(c["en-de/own-v"], "--san-encdec-share") == "weights"
    assert value(c["en-de/aan"], "--arch") == "transformer_aan_small"

    d = run_dirs(outputs["D"])
    assert {value(d[f"{pair}/loop"], "--max-iterations") for pair in PAIRS} == {"3"}
    bench = commands(outputs["D"], "fairseq-san-bench")
    assert len(bench) == 2 and all("--gpu" in words for words in bench)


# --- a tiny real campaign ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Dict[str, object]:
    """Phase A (En->De loop + baseline seed 2), collect, phase B on a fresh RUNS, collect."""
    root = tmp_path_factory.mktemp("campaign")
    raw = write_fake_multi30k(root / "raw")
    data = root / "data" / "multi30k.en-de"
    prepared = run_script(PREPARE, "en", "de", str(data), env=prepare_env(raw))
    assert prepared.returncode == 0, prepared.stderr[-3000:]
    cpu_preset = root / "cpu.args"  # the GPU preset without --fp16; TINY_TRAIN makes it small
    cpu_preset.write_text("\n".join(a for a in preset_args() if a != "--fp16") + "\n")
    results = root / "results"
    results.mkdir()
    env = cli_env()
    env.update(
        PRESET=str(cpu_preset), DATA_ROOT=str(root / "data"), RESULTS=str(results), SEEDS="2",
        TRAIN_EXTRA=TINY_TRAIN,
    )  # fmt: skip
    outputs = {}
    for phase, only in (("A", "en-de/loop en-de/baseline-s2"), ("B", "en-de/loop")):
        env.update(ONLY=only, RUNS=str(root / phase / "runs"), OUT=str(root / phase / "out"))
        outputs[phase] = campaign(phase, env=env)
        archive = root / phase / "out" / f"converged-{phase}.tar.gz"
        campaign("collect", str(archive), env=env)
    env.update(ONLY="en-de/loop en-de/baseline-s2", RUNS=str(root / "A" / "runs"))
    env.update(OUT=str(root / "A" / "out"))
    outputs["A again"] = campaign("A", env=env)
    return {"root": root, "results": results, "outputs": outputs, "env": env}


@pytest.mark.slow
def test_summary_has_issue_11_schema_with_real_values(tiny):
    results = tiny["results"]
    summary = json.loads((results / "summary.json").read_text())
    rows = summary["pairs"]["en-de"]
    named = [(row["system"], row["seed"]) for row in rows]
    assert named == [("baseline", 1), ("baseline", 2), ("san", 1)]
    learned = json.loads((results / "en-de" / "loop" / "iter1" / "policy.json").read_text())
    for row in rows:
        assert set(row) == SCHEMA_KEYS
        assert row["updates"] == 20 and row["wall_s"] > 0  # --max-update 20
        assert set(row["test"]) == {"test_2016_flickr", "test_2017_flickr"}
        for score in row["test"].values():
            assert score["signature"].startswith("nrefs:1|") and 0 <= score["bleu"] <= 100
    baseline, _, san = rows
    assert baseline["policy"]["decoder_self"] is None and san["policy"] == learned
    assert san["params"] < baseline["params"]  # shared attention: fewer parameters
    training = summary["training"]["en-de"]
    for row, report in zip(rows, training):
        curve = report["valid_curve_last"]
        assert [point[0] for point in curve] == [5, 10, 15, 20]
        assert row["best_valid_loss"] == min(point[1] for point in curve)
        assert report["stop"] == "max update" and report["epochs"] >= 1
    assert summary["seeds"]["en-de"]["baseline"]["test_2016_flickr"]["n"] == 2
    tests = summary["paired_bootstrap"]["en-de"]
    assert {test["test_set"] for test in tests} == {"test_2016_flickr", "test_2017_flickr"}
    for test in tests:
        low, high = test["interval_95"]
        assert low <= test["difference"] <= high
        assert test["verdict"] == ("inconclusive" if low <= 0 <= high else test["verdict"])
        assert "bs:1000" in test["signature"]
    assert summary["budget"]["en-de"].startswith("equal updates")
    assert "| san | 1 |" in (results / "summary.md").read_text()


@pytest.mark.slow
def test_archive_is_one_file_without_checkpoints_and_a_fresh_machine_resumes_from_it(tiny):
    root = tiny["root"]
    for phase, trained in (("A", "iter0"), ("B", "iter1")):
        out = root / phase / "out"
        assert [path.name for path in out.iterdir()] == [f"converged-{phase}.tar.gz"]
        with tarfile.open(out / f"converged-{phase}.tar.gz") as archive:
            names = archive.getnames()
        assert not any(name.endswith(".pt") or "/checkpoints" in name for name in names)
        assert (root / phase / "runs" / "en-de" / "loop" / trained / "checkpoints").is_dir()
    with tarfile.open(root / "A" / "out" / "converged-A.tar.gz") as archive:
        names = set(archive.getnames())
    for run_dir in ("en-de/loop", "en-de/baseline-s2"):
        for part in (
            "iter0/train.log", "iter0/analysis/js.json", "iter0/analysis/js-decoder_self.png",
            "test-bleu/iter0/test/score.json", "test-bleu/iter0/test/generate-test.txt",
        ):  # fmt: skip
            assert f"./{run_dir}/{part}" in names
    assert "./en-de/policies/theta-0.3-0.4.json" in names
    # Figure 5: the En->De baseline's checkpoints (every 5 updates here), each analysed.
    analysed = [
        name.split("/")[3] for name in names
        if name.startswith("./en-de/figure5/checkpoint_") and name.endswith("/js.json")
    ]  # fmt: skip
    assert sorted(int(name.rsplit("_", 1)[1]) for name in analysed) == [5, 10, 15, 20]
    assert "./en-de/figure5/js_vs_steps.png" in names
    # Phase B ran where phase A's checkpoints were not: iteration 0 came from the archive and
    # was not trained again; iteration 1 was.
    b_loop = root / "B" / "runs" / "en-de" / "loop"
    assert not (b_loop / "iter0" / "checkpoints").exists()
    assert (b_loop / "iter1" / "checkpoints" / "checkpoint_best.pt").is_file()
    # Running phase A again on the same machine skips what it finished.
    again = tiny["outputs"]["A again"]
    assert "== en-de/loop: done in an earlier run" in again
    assert commands(again, "learn_to_share.sh") == []


@pytest.mark.slow
def test_train_log_table_reports_the_sweep_columns(tiny):
    log = tiny["results"] / "en-de" / "loop" / "iter0" / "train.log"
    result = run_cli("fairseq-san-loop", "train-log", str(log))
    assert result.returncode == 0, result.stderr[-2000:]
    (row,) = [line for line in result.stdout.splitlines() if line.startswith(f"| {log}")]
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[2] == "20" and cells[6] == "max update"  # updates, stop
    assert float(cells[4]) > 0 and float(cells[5]) > 0  # updates/s, tokens/s


# --- the log parser ---------------------------------------------------------------------------


def test_read_train_log_follows_a_resumed_wall_capped_run(tmp_path):
    from fairseq_san.converged_summary import read_train_log

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
