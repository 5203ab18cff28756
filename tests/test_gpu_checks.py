"""docs/results/gpu-steps/run.sh, the GPU checks a lent GPU runs after the converged slice, with
stand-ins for the GPU's commands: which benchmarks it asks for (their command lines parsed by the
real fairseq-san-bench parser), what it skips, and what comes back."""

import os
import re
import subprocess
import tarfile
from pathlib import Path

import pytest

from helpers import BENCH_STAND_IN, REPO, bench_calls, stand_in

SCRIPT = REPO / "docs/results/gpu-steps/run.sh"

def run_checks(tmp_path: Path, parts: str, left_s: int = 600, checkpoints: bool = True,
               data: bool = True, status: int = 0):  # fmt: skip
    """Run the script in ``tmp_path`` with stand-ins; (its output, stdout then stderr, the
    benchmark calls). As on the GPU machine, an installed plugin comes first on PYTHONPATH (the
    bundle's wheel, possibly older than the tree): here one that cannot be imported, so that only
    this checkout's can run; and CDPATH is set, with which cd prints the folder it changes to."""
    stale = tmp_path / "prefix" / "fairseq_san"
    stale.mkdir(parents=True, exist_ok=True)
    (stale / "__init__.py").write_text("raise ImportError('the bundle wheel, older than the tree')")
    bin_dir = tmp_path / "bin"
    stand_in(bin_dir / "fairseq-san-bench", BENCH_STAND_IN)
    stand_in(bin_dir / "nvidia-smi", "#!/bin/sh\necho 'NVIDIA stand-in, 1.0'\n")
    runs = tmp_path / "runs"
    if checkpoints:
        for run_dir in ("loop", "uniform-6-6"):
            checkpoint = runs / run_dir / "iter0/checkpoints/checkpoint_best.pt"
            checkpoint.parent.mkdir(parents=True)
            checkpoint.write_bytes(b"")
    if data:
        (tmp_path / f"data-bin/multi30k.{os.environ.get('PAIR', 'en-de')}").mkdir(
            parents=True, exist_ok=True)  # fmt: skip
    record = tmp_path / "bench.jsonl"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "BENCH_RECORD": str(record),
           "OUT": str(tmp_path / "out"), "CHECKPOINTS": str(runs), "PARTS": parts,
           "LEFT_S": str(left_s), "PYTHONPATH": str(stale.parent),
           "CDPATH": f".:{REPO.parent}"}  # fmt: skip
    checkout = tmp_path / "checkout"  # a relative path, as cd looks up in CDPATH
    if not checkout.exists():
        checkout.symlink_to(REPO)
    script = str(Path(checkout.name, SCRIPT.relative_to(REPO)))
    done = subprocess.run(["bash", script], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == status, done.stderr
    return done.stdout + done.stderr, bench_calls(record)


@pytest.mark.parametrize("parts", ["e2e", "e2e-more"])
def test_end_to_end_decodes_the_slice_models_with_fairseq_and_as_graphs(tmp_path, parts):
    """Every end-to-end run pairs each captured-graph system with fairseq's decoding of the same
    checkpoint (the "= fairseq" check), on the slice's baseline and SAN; e2e-more adds fp16, the
    static eager step and --san-decoding fast; everything the benchmarks wrote comes back."""
    stdout, calls = run_checks(tmp_path, parts)
    assert len(calls) == 2
    graph = {"san_decoding": "static", "san_decoder_execution": "graph"}
    for call in calls:
        systems = call["systems"]
        assert systems["baseline"] == systems["san"] == {}
        assert systems["baseline-graph"] == systems["san-graph"] == graph
        assert {"baseline-graph": "baseline", "san-graph": "san"}.items() <= call["twins"].items()
        assert call["argv"][call["argv"].index("--repeats") + 1] == "3"
    beams = [call["argv"][call["argv"].index("--beams") + 1 :][:2] for call in calls]
    if parts == "e2e":
        assert [call["fp16"] for call in calls] == [False, False]
        assert [b[0] for b in beams] == ["4", "4"] and beams[0][1].startswith("--")
        assert [c["argv"][c["argv"].index("--batch-size") + 1] for c in calls] == ["128", "16"]
    else:
        assert [call["fp16"] for call in calls] == [True, False]
        assert beams == [["4", "20"], ["4", "20"]]
        assert calls[1]["twins"]["baseline-eager"] == "baseline"
        assert calls[1]["systems"]["san-fast"] == {"san_decoding": "fast"}
    with tarfile.open(tmp_path / "out/gpu-steps.tar.gz") as archive:
        returned = {name for name in archive.getnames() if name.endswith("results.json")}
    assert returned == {f"gpu-steps/{Path(call['out']).name}/results.json" for call in calls}
    assert "NVIDIA stand-in" in (tmp_path / "out/gpu-steps.txt").read_text()


@pytest.mark.parametrize("parts", ["e2e", "e2e-more"])
def test_an_aan_san_checkpoint_is_decoded_beside_the_baseline_and_san(tmp_path, monkeypatch, parts):
    """Issue 19 names AAN+SAN among the models decoded end to end: AAN_SAN (the bench slice's
    aan-san-bench) adds its rows to every end-to-end part, each part's time limit growing by
    half; a missing one is said, and the parts decode the baseline and SAN alone."""
    aan_san = tmp_path / "aan-san.pt"
    aan_san.write_bytes(b"")
    monkeypatch.setenv("AAN_SAN", str(aan_san))
    stdout, calls = run_checks(tmp_path, parts)
    graph = {"san_decoding": "static", "san_decoder_execution": "graph"}
    for call in calls:
        assert call["systems"]["aan-san"] == {} and call["systems"]["aan-san-graph"] == graph
        assert call["twins"]["aan-san-graph"] == "aan-san"
    limits = re.findall(r"== e2e: .* \(at \d+ s, up to (\d+) s\)", stdout)
    assert limits == (["180", "165"] if parts == "e2e" else ["225", "225"])
    if parts == "e2e-more":
        more = calls[1]["systems"]
        assert more["aan-san-eager"] == {**graph, "san_decoder_execution": "eager"}
        assert more["aan-san-fast"] == {"san_decoding": "fast"} and "baseline-fast" not in more
    monkeypatch.setenv("AAN_SAN", str(tmp_path / "none.pt"))
    stdout, calls = run_checks(tmp_path / "missing", parts)
    assert f"run.sh: AAN_SAN={tmp_path / 'none.pt'}: no such checkpoint; the end-to-end" in stdout
    assert len(calls) == 2 and not any("aan-san" in call["systems"] for call in calls)


def test_what_does_not_fit_or_has_no_models_is_skipped_and_said(tmp_path):
    """Parts that the call's time cannot hold are skipped, and so are the end-to-end runs without
    the slice's checkpoints; the step timings still run, each in its own call."""
    stdout, calls = run_checks(tmp_path, "e2e steps", checkpoints=False)
    assert "== skipped: e2e (no " in stdout
    assert [call["argv"][0] for call in calls] == ["steps"] * 5
    stdout, calls = run_checks(tmp_path / "short", "e2e steps", left_s=100)  # steps: 90 s each
    assert "== skipped (under 120 s left): e2e: fp32, beam 4, batch 128" in stdout
    assert "== skipped (under 110 s left): e2e: fp32, beam 4, batch 16" in stdout
    assert len(calls) == 5 and "skipped" not in stdout.split("== steps")[1]


def test_a_failed_part_is_said_and_what_ran_before_it_comes_back(tmp_path, monkeypatch):
    """The benchmarks' results were packed only at the end, so that a call cut short brought back
    none of them; and the script exited 0 whatever failed. Each part's results are packed as it
    ends; a failed part is logged and makes the exit status 1."""
    monkeypatch.setenv("FAIL_OUT", "fp32-batch16")
    stdout, calls = run_checks(tmp_path, "e2e", status=1)
    first = "gpu-steps/fp32-batch128/results.json"
    assert [call.get("returned_before") for call in calls] == [None]  # the failing call: no record
    assert "== failed (exit 3): e2e: fp32, beam 4, batch 16, 128 sentences" in stdout
    with tarfile.open(tmp_path / "out/gpu-steps.tar.gz") as archive:
        assert [n for n in archive.getnames() if n.endswith(".json")] == [first]
    monkeypatch.delenv("FAIL_OUT")
    stdout, calls = run_checks(tmp_path / "whole", "e2e")
    assert [call.get("returned_before") for call in calls] == [None, [first]]


def test_end_to_end_without_the_data_is_skipped_before_any_decoding(tmp_path):
    """Without the pair's binarized data (none here, none in the bundle) the end-to-end parts
    failed only as they decoded, after the tests' minutes."""
    stdout, calls = run_checks(tmp_path, "e2e e2e-more e2e-compile", data=False)
    assert calls == []
    for part in ("e2e", "e2e-more"):
        assert f"== skipped: {part} (no data-bin/multi30k.en-de, here or in the bundle" in stdout
    assert "== skipped: e2e-compile (no " in stdout


def test_end_to_end_decodes_the_checkpoints_named_by_base_and_san(tmp_path, monkeypatch):
    """After the en-de slice's stage 2 the machine holds baseline-s4 and the learned-policy SAN,
    not stage 1's models: BASE and SAN name them."""
    runs = tmp_path / "runs"
    chosen = {name: runs / name / "checkpoint_best.pt" for name in ("baseline-s4", "loop-iter1")}
    for checkpoint in chosen.values():
        checkpoint.parent.mkdir(parents=True)
        checkpoint.write_bytes(b"")
    monkeypatch.setenv("BASE", str(chosen["baseline-s4"]))
    monkeypatch.setenv("SAN", str(chosen["loop-iter1"]))
    stdout, calls = run_checks(tmp_path, "e2e", checkpoints=False)
    assert len(calls) == 2 and "skipped" not in stdout
    for call in calls:
        paths = [word.split("=", 1)[1].split(":")[0] for word in call["argv"] if "=" in word]
        assert set(paths) == {str(chosen["baseline-s4"]), str(chosen["loop-iter1"])}


def test_compile_part_profiles_the_compiled_step_captured_beside_the_graph(tmp_path):
    """The compile part times and profiles the inductor-compiled step captured against the graph
    of the uncompiled step, both decoders ones the step timer knows."""
    from fairseq_san.benchmark.step_timer import STATIC_DECODERS

    stdout, calls = run_checks(tmp_path, "compile profile")
    assert [call["argv"][0] for call in calls] == ["steps", "steps", "steps"]
    argv = calls[0]["argv"]
    decoders = argv[argv.index("--decoders") + 1 : argv.index("--beam")]
    assert decoders == ["static-fp32-graph", "static-fp32-compile-graph"]
    assert set(decoders) <= set(STATIC_DECODERS)
    assert all("--profile" in call["argv"] and "--device" in call["argv"] for call in calls)
    wide = calls[2]["argv"]  # the profile where the graphs gained least: beam 20, batch 128
    assert wide[wide.index("--beam") :] == ["--beam", "20", "--batch", "128", "--profile"]
    assert wide[wide.index("--decoders") + 1 : wide.index("--beam")] == [
        "fairseq", "static-fp32-fixed", "static-fp32-graph"]  # fmt: skip
    assert "== compile: fp32, beam 4, batch 16" in stdout


@pytest.mark.parametrize("left_s", [230, 600, 140])
def test_compile_part_takes_what_the_second_call_has_left(tmp_path, left_s):
    """The session's second call (results.md: LEFT_S=$((230 - SECONDS))) runs the compile part
    with all of its time but the archive's 10 s; under 150 s it is skipped, and says so."""
    stdout, calls = run_checks(tmp_path, "compile", left_s=left_s)
    if left_s < 150:
        assert calls == [] and "== skipped (under 150 s left): compile" in stdout
        return
    (timeout,) = re.findall(r"== compile: .* \(at \d+ s, up to (\d+) s\)", stdout)
    assert len(calls) == 1 and left_s - 12 <= int(timeout) <= left_s - 10  # a second or two ran


@pytest.mark.parametrize("with_baseline", [True, False])
def test_e2e_compile_part_decodes_compiled_graphs_beside_graphs_and_fairseq(
    tmp_path, monkeypatch, with_baseline
):
    """e2e-compile decodes each model present (SAN; BASE only where it exists, as after the pairs
    slice's stage 2 it does not) by fairseq, as graphs and as compiled graphs, natural lengths
    only, with what the call has left, on PAIR's data (en-de unless named); without SAN it is
    skipped and says so."""
    san = tmp_path / "runs/pairs/iter3/checkpoint_best.pt"
    san.parent.mkdir(parents=True)
    san.write_bytes(b"")
    monkeypatch.setenv("SAN", str(san))
    stdout, calls = run_checks(tmp_path, "e2e-compile", left_s=400, checkpoints=with_baseline)
    (call,) = calls
    models = ["san", "baseline"] if with_baseline else ["san"]
    compiled = {"san_decoding": "static", "san_decoder_execution": "compile-graph"}
    assert sorted(call["systems"]) == sorted(
        f"{model}{suffix}" for model in models for suffix in ("", "-graph", "-compile-graph")
    )
    assert all(call["systems"][f"{model}-compile-graph"] == compiled for model in models)
    assert {f"{model}-compile-graph": model for model in models}.items() <= call["twins"].items()
    argv = call["argv"]
    assert argv[argv.index("--modes") + 1 :][:2] == ["natural", "--repeats"]
    (timeout,) = re.findall(r"== e2e: .*compile-graph \(at \d+ s, up to (\d+) s\)", stdout)
    assert 388 <= int(timeout) <= 390
    assert argv[argv.index("--data") + 1].endswith("multi30k.en-de")
    monkeypatch.setenv("PAIR", "en-fr")  # another pair's SAN: its data
    stdout, calls = run_checks(tmp_path / "en-fr", "e2e-compile", checkpoints=False)
    assert calls[0]["argv"][calls[0]["argv"].index("--data") + 1].endswith("multi30k.en-fr")
    monkeypatch.setenv("SAN", str(tmp_path / "absent.pt"))
    stdout, calls = run_checks(tmp_path / "none", "e2e-compile")
    assert calls == [] and "== skipped: e2e-compile (no " in stdout


@pytest.mark.parametrize("parts, left_s, said", [
    ("e2e e2e-compiled", 600, "run.sh: unknown part e2e-compiled (PARTS takes: tests e2e steps "
     "profile compile e2e-more e2e-compile)"),
    ("profile", "abc", "run.sh: LEFT_S=abc: a whole number of seconds (at most 12 digits)"),
    (" ", 600, "run.sh: PARTS is empty: name the parts to run (tests e2e steps profile compile "
     "e2e-more e2e-compile)"),  # ran nothing, exit 0
])  # fmt: skip
def test_an_unknown_part_or_a_limit_that_is_no_count_stops_before_anything_runs(
    tmp_path, parts, left_s, said
):
    """A misspelt part was logged ("== unknown part") and the call exited 0, having run the
    others; LEFT_S=abc was bash's "unbound variable" inside a part, exit 0 too."""
    output, calls = run_checks(tmp_path, parts, left_s=left_s, status=2)
    assert output.strip().splitlines() == [said]
    assert calls == [] and not (tmp_path / "out").exists()


def test_limits_are_read_as_decimal_and_the_tests_limit_is_one(tmp_path, monkeypatch):
    """LEFT_S=09 failed in bash's arithmetic ("value too great for base") and ran no part, exit
    0; 0600 was read as octal 384; TESTS_S=0 gave the CUDA tests no limit at all."""
    output, calls = run_checks(tmp_path / "a", "steps", left_s="0600")
    assert calls and "value too great" not in output
    output, calls = run_checks(tmp_path / "b", "steps", left_s="09")
    assert "value too great" not in output and "== skipped (under 90 s left): steps" in output
    monkeypatch.setenv("TESTS_S", "0")
    output, calls = run_checks(tmp_path / "c", "tests", status=2)
    assert output.strip().splitlines() == [
        "run.sh: TESTS_S=0: at least 1 (timeout 0 sets no limit)"
    ]


def test_the_log_goes_to_a_folder_made_for_it_or_the_call_stops(tmp_path, monkeypatch):
    """LOG in a folder that was not there: no part ran (bash could not open the log) and the call
    exited 0; a LOG that cannot be written is one line, exit 2."""
    log = tmp_path / "new" / "cuda-tests.txt"
    monkeypatch.setenv("LOG", str(log))
    _, before = run_checks(tmp_path, "steps")
    assert "NVIDIA stand-in" in log.read_text()
    monkeypatch.setenv("LOG", str(tmp_path))
    output, calls = run_checks(tmp_path, "steps", checkpoints=False, status=2)
    assert output.strip().splitlines() == [f"run.sh: LOG={tmp_path}: cannot write it"]
    assert calls == before  # no call more
