"""A learn-to-share run directory records the options it was made with (``RUN/run.json``).

Re-running ``examples/learn_to_share.sh`` with other options must not corrupt the run: it stops
before anything runs, with one line that names the option and how to start a new run.
``--extend`` may change only ``--max-iterations``. A learned policy is never rewritten.
"""

import shutil
from pathlib import Path
from typing import List, Tuple

import pytest

from helpers import (
    LOOP,
    ONE_BLOCK,
    loop_args,
    output_of,
    read_json,
    run_loop,
    run_script,
    snapshot,
)

# Every test runs the recipe on a prepared toy Multi30k, most on a trained first run.
pytestmark = pytest.mark.slow

ERROR = "fairseq-san-loop: error: "


@pytest.fixture(scope="module")
def first_run(data, tmp_path_factory) -> Path:
    """A run with one trained iteration (P1 learned, not trained): theta 0, 10 updates."""
    run_dir = tmp_path_factory.mktemp("record") / "run"
    result = run_loop(data, run_dir, "--max-iterations", "1", updates=10)
    assert result.returncode == 0, output_of(result)[-6000:]
    assert read_json(run_dir / "iter1" / "policy.json") == ONE_BLOCK
    return run_dir


def fairseq_commands(output: str) -> List[str]:
    return [line for line in output.splitlines() if line.startswith("+ fairseq-")]


def error_lines(stderr: str) -> List[str]:
    return [line for line in stderr.splitlines() if line.strip()]


def test_the_first_run_records_its_options(first_run, data):
    record = read_json(first_run / "run.json")
    options = record["options"]
    assert options["--data"] == str(data.resolve())
    assert options["--valid-ref"] == str((data / "text" / "valid.raw.de").resolve())
    assert options["--theta-self"] == "0" and options["--theta-encdec"] == "0"
    assert options["--theta-encoder"] is None
    assert options["--updates"] == "10" and options["--max-iterations"] == "1"
    assert options["--arch"] == "transformer_san"
    assert options["--warm-start"] is False and options["--warm-updates"] == "5"
    assert options["--cpu-ranks"] == "0" and options["--analysis-sentences"] is None
    argv = loop_args(data, first_run)
    assert options["fairseq-train arguments after --"] == argv[argv.index("--") + 1 :]


@pytest.mark.parametrize(
    "changed,option",
    [
        (["--theta-self", "0.3"], "--theta-self"),
        (["--theta-encoder", "0.2"], "--theta-encoder"),
        (["--updates", "11"], "--updates"),
        (["--analysis-sentences", "5"], "--analysis-sentences"),
        (["--warm-start"], "--warm-start"),
        (["--arch", "transformer_san_small"], "--arch"),
        (["--seed", "2"], "fairseq-train arguments after --"),
    ],
)
def test_a_rerun_with_other_options_refuses_and_changes_nothing(
    first_run, data, changed, option
):
    before = snapshot(first_run)
    if option.startswith("fairseq-train"):
        args = loop_args(data, first_run, "--max-iterations", "1", updates=10) + changed
    else:
        args = loop_args(data, first_run, "--max-iterations", "1", *changed, updates=10)
    result = run_script(LOOP, *args)
    assert result.returncode == 2, output_of(result)[-3000:]
    (line,) = error_lines(result.stderr)
    assert line.startswith(ERROR) and option in line, line
    assert "--run-dir" in line and str(first_run / "run.json") in line
    assert not fairseq_commands(output_of(result))
    assert snapshot(first_run) == before


def test_more_iterations_need_extend(first_run, data):
    before = snapshot(first_run)
    result = run_loop(data, first_run, "--max-iterations", "2", updates=10)
    assert result.returncode == 2, output_of(result)[-3000:]
    (line,) = error_lines(result.stderr)
    assert line.startswith(ERROR) and "--max-iterations 1, not 2" in line, line
    assert "--extend" in line
    assert snapshot(first_run) == before


def test_extend_may_not_change_a_training_option(first_run, data):
    before = snapshot(first_run)
    result = run_loop(
        data, first_run, "--extend", "--max-iterations", "2", "--theta-self", "0.3", updates=10
    )
    assert result.returncode == 2, output_of(result)[-3000:]
    (line,) = error_lines(result.stderr)
    assert "--theta-self 0, not 0.3 (" in line and "--run-dir" in line, line
    assert "--extend changes only --max-iterations" in line
    assert snapshot(first_run) == before


def test_a_dry_run_of_a_resumed_run_prints_its_next_iteration(first_run, data):
    """It printed iteration 0 (all done: no command) and said iteration 1 would repeat them: the
    commands of the first iteration with steps left are printed, and nothing is written."""
    before = snapshot(first_run)
    result = run_loop(data, first_run, "--extend", "--max-iterations", "2", "--dry-run",
                      updates=10)  # fmt: skip
    assert result.returncode == 0, output_of(result)[-3000:]
    assert "== iteration 1 (dry run)" in result.stdout
    assert "== iteration 0" not in result.stdout
    trainings = [c for c in fairseq_commands(result.stderr) if c.startswith("+ fairseq-train ")]
    assert len(trainings) == 1 and str(first_run / "iter1" / "policy.json") in trainings[0]
    assert snapshot(first_run) == before
    done = run_loop(data, first_run, "--dry-run", "--max-iterations", "1", updates=10)
    assert done.returncode == 0, output_of(done)[-3000:]
    assert not fairseq_commands(output_of(done))
    assert f"(dry run: the iterations of {first_run} are done" in done.stdout
    assert snapshot(first_run) == before


def test_analysis_sentences_reach_the_analysis_of_a_run(data, tmp_path):
    """--analysis-sentences N: fairseq-validate's analysis reads validation sentences 0..N-1."""
    result = run_loop(data, tmp_path / "run", "--analysis-sentences", "7", "--dry-run")
    assert result.returncode == 0, output_of(result)[-3000:]
    (analysis,) = [c for c in fairseq_commands(result.stderr) if "--san-analysis-dir" in c]
    assert analysis.endswith(" --san-analysis-max-sentences 7"), analysis


def test_extend_trains_more_iterations_and_keeps_the_learned_policy(first_run, data):
    policy = first_run / "iter1" / "policy.json"
    learned = (policy.read_bytes(), policy.stat().st_mtime_ns)
    result = run_loop(data, first_run, "--extend", "--max-iterations", "2", updates=10)
    assert result.returncode == 0, output_of(result)[-6000:]
    assert (first_run / "iter1" / "trained").is_file()
    assert (policy.read_bytes(), policy.stat().st_mtime_ns) == learned  # trained with it, as is
    assert read_json(first_run / "run.json")["options"]["--max-iterations"] == "2"
    trainings = [c for c in fairseq_commands(output_of(result)) if c.startswith("+ fairseq-train ")]
    assert len(trainings) == 1
    # Each step says it is done already, or where its log goes: a resumed run said nothing of
    # the steps it skipped, and nothing said that training's output is kept in train.log.
    for step, output in (("trained", "trained"), ("analysed", "analysis/js.json"),
                         ("scored", "valid.json"), ("learned P_1", "../iter1/policy.json")):
        said = f"== iteration 0: {step} already ({first_run / 'iter0' / output})\n"
        assert said.replace("iter0/../", "") in result.stdout, result.stdout[-3000:]
    assert (f"== iteration 1: training (its output also goes to {first_run / 'iter1'}/train.log)"
            in result.stdout)  # fmt: skip
    # The extended run is now the record: the same command again runs nothing.
    again = run_loop(data, first_run, "--max-iterations", "2", updates=10)
    assert again.returncode == 0, output_of(again)[-3000:]
    assert not fairseq_commands(output_of(again))


def test_options_may_change_until_a_checkpoint_is_written(data, tmp_path):
    """A first attempt that fails before training (here: a fairseq-train option that does not
    exist) is corrected by running again with the right options, in the same run directory."""
    run_dir = tmp_path / "run"
    failed = run_script(LOOP, *loop_args(data, run_dir, updates=10), "--no-such-option")
    assert failed.returncode != 0
    recorded = read_json(run_dir / "run.json")["options"]["fairseq-train arguments after --"]
    assert recorded[-1] == "--no-such-option"
    result = run_loop(data, run_dir, "--dry-run", updates=10)
    assert result.returncode == 0, output_of(result)[-3000:]
    assert "+ fairseq-train " in result.stderr


def restored(first_run: Path, data: Path, tmp_path: Path) -> Tuple[Path, Path, str]:
    """(run dir, data) copied to other paths, as on a fresh machine; the recorded iterations."""
    run_dir, moved = tmp_path / "run", tmp_path / "data-bin"
    shutil.copytree(first_run, run_dir, symlinks=True)
    shutil.copytree(data, moved)
    return run_dir, moved, read_json(run_dir / "run.json")["options"]["--max-iterations"]


def test_a_run_restored_elsewhere_resumes_with_its_data_at_another_path(first_run, data, tmp_path):
    run_dir, moved, iterations = restored(first_run, data, tmp_path)
    result = run_loop(moved, run_dir, "--max-iterations", iterations, updates=10)
    assert result.returncode == 0, output_of(result)[-3000:]
    assert not fairseq_commands(output_of(result))  # everything finished: nothing runs again
    options = read_json(run_dir / "run.json")["options"]
    assert options["--data"] == str(moved.resolve())  # the record follows the data
    assert options["--valid-ref"] == str((moved / "text" / "valid.raw.de").resolve())


def test_other_data_at_another_path_is_refused(first_run, data, tmp_path):
    run_dir, moved, iterations = restored(first_run, data, tmp_path)
    line = refused_after_a_new_vocabulary(run_dir, moved, iterations)
    assert line.startswith(ERROR) and f"--data {data.resolve()}, not {moved.resolve()}" in line
    assert "--valid-ref" not in line  # the references are the same file, copied


def test_other_data_at_the_same_path_is_refused(first_run, data, tmp_path):
    """Data binarized again in the folder the run was recorded with resumed without a word: a
    path was compared by content only where it had changed."""
    run_dir, moved, iterations = restored(first_run, data, tmp_path)
    result = run_loop(moved, run_dir, "--max-iterations", iterations, updates=10)
    assert result.returncode == 0, output_of(result)[-3000:]  # the record follows the data
    line = refused_after_a_new_vocabulary(run_dir, moved, iterations)
    said = f"--data {moved.resolve()} as it was then (its content has changed since)"
    assert line.startswith(ERROR) and said in line, line


def refused_after_a_new_vocabulary(run_dir: Path, data: Path, iterations: str) -> str:
    """The one error line of the loop resumed on ``data`` with a word added to its (joined)
    vocabulary: another experiment; the run dir is left as it was."""
    for language in ("en", "de"):
        with open(data / f"dict.{language}.txt", "a", encoding="utf-8") as vocabulary:
            vocabulary.write("neu 1\n")
    before = snapshot(run_dir)
    result = run_loop(data, run_dir, "--max-iterations", iterations, updates=10)
    assert result.returncode == 2, output_of(result)[-3000:]
    assert snapshot(run_dir) == before
    (line,) = error_lines(result.stderr)
    return line


@pytest.mark.parametrize(
    "content, said",
    [
        (None, "is a device, pipe or socket, not a file: restore it"),  # read forever before
        (b'{"options": {"--data": "d"', ": malformed JSON at line 1 column 27: Expecting"),
        (b"[" * 200_000, ": JSON nested too deeply to be one: restore it"),  # RecursionError
        (b'{"options": "\xe9"}', "is binary, not JSON text (byte 0xe9 at 13: "),
        (b'{"options": {}, "options": {}}', ': key "options" is given twice: restore it'),
        (b"[1, 2]", "holds a JSON array, not a JSON object: restore it"),
        (b"null", "holds a JSON null, not a JSON object: restore it"),  # no missing record
        (b'{"options": {}, "content": 3}', "is not a run record (its options or content are no "
         "objects): restore it"),
    ],
)  # fmt: skip
def test_a_run_record_that_is_not_one_is_one_line(tmp_path, content, said):
    """A run dir received from elsewhere, or a record cut short: one RunError naming the file."""
    import os

    from fairseq_san.loop.run_record import RunError, read_record, record_path

    path = record_path(str(tmp_path))
    if content is None:
        os.mkfifo(path)
    else:
        Path(path).write_bytes(content)
    with pytest.raises(RunError) as refused:
        read_record(str(tmp_path))
    assert str(refused.value).startswith((f'run record "{path}"', f"{path} ")), refused.value
    assert said in str(refused.value), refused.value
    assert str(refused.value).endswith("start a new run with another --run-dir")


def test_no_run_record_is_none(tmp_path):
    from fairseq_san.loop.run_record import read_record

    assert read_record(str(tmp_path)) is None


def test_references_under_another_name_are_the_same_references(tmp_path):
    """The name of a --valid-ref file was part of its digest: the same references copied under
    another name (DATA/text/valid.raw.de of data moved elsewhere) refused to resume; a record
    made with the name in its digest still resumes."""
    from fairseq_san.loop.run_record import digest, files_sha256, recorded_digests

    first, second = tmp_path / "valid.ref", tmp_path / "valid.raw.de"
    for path in (first, second):
        path.write_text("ein Hund läuft\n")
    assert digest(str(first)) == digest(str(second))
    assert files_sha256([str(first)]) in recorded_digests(str(first))  # an older record's
    second.write_text("eine Katze\n")
    assert digest(str(first)) != digest(str(second))


def test_the_sample_positions_check_imports_no_numpy():
    """fairseq-san-loop start and lm-task-args check --tokens-per-sample against
    --max-target-positions with the language-modelling fix, whose module imported numpy for the
    datasets' sizes only (0.1 s of the loop's start)."""
    from helpers import heavy_modules_imported

    program = (
        "from fairseq_san.loop.run_record import sample_positions_problem\n"
        "args = ['--tokens-per-sample', '512', '--max-target-positions', '128']\n"
        "assert 'is more than --max-target-positions 128' in sample_positions_problem(args)\n"
    )
    assert heavy_modules_imported(program) == []
