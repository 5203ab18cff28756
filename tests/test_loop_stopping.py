"""The loop's stopping rule (``fairseq_san.loop.stopping``, ``fairseq-san-loop settled``): the
loop stops when the policy an iteration learns is the one it was trained with, or, trained from
scratch, one an earlier iteration was trained with (a cycle), and goes on while it is new."""

import json
import os

import pytest

from fairseq_san.loop.stopping import Stop, loop_stop
from fairseq_san.loop.summary import write_summary
from fairseq_san.policy import LN2, block_similarity, learn_blocks
from helpers import run_cli

NONE = {"decoder_self": None, "decoder_encdec": None, "encoder_self": None}
EVEN = {"decoder_self": [6], "decoder_encdec": [2, 2, 2]}  # the converged En->De loop's
UNEVEN = {"decoder_self": [6], "decoder_encdec": [4, 2]}


def run_dir_with(tmp_path, *policies: dict, warm_start: bool = False) -> str:
    """A run dir whose iteration k was trained with ``policies[k]``; the last one is the policy
    the newest iteration learned (``iter<k+1>/policy.json``), as learn_to_share.sh leaves it."""
    tmp_path.mkdir(exist_ok=True)
    options = {"--warm-start": warm_start, "--theta-self": "0.4", "--theta-encdec": "0.5"}
    (tmp_path / "run.json").write_text(json.dumps({"options": options}))
    for k, policy in enumerate(policies):
        (tmp_path / f"iter{k}").mkdir()
        (tmp_path / f"iter{k}" / "policy.json").write_text(json.dumps(policy))
    return str(tmp_path)


def test_the_policy_did_not_change(tmp_path):
    run_dir = run_dir_with(tmp_path, NONE, EVEN, EVEN)
    assert loop_stop(run_dir, 1) == Stop(1, 1)
    assert str(Stop(1, 1)) == "the policy did not change: done after iteration 1"


def test_a_policy_of_an_earlier_iteration_is_a_cycle(tmp_path):
    """{2,2,2} -> {4,2} -> {2,2,2}: iteration 3 would retrain iteration 1."""
    run_dir = run_dir_with(tmp_path, NONE, EVEN, UNEVEN, EVEN)
    assert loop_stop(run_dir, 2) == Stop(2, 1)
    assert str(Stop(2, 1)) == (
        "iteration 2 learned the policy of iteration 1: done after iteration 2 (the loop cycles: "
        "retrained from scratch with the same seed and options, iteration 3 would repeat "
        "iteration 1, and the policies of iterations 1-2 would follow)"
    )
    back_to_the_baseline = run_dir_with(tmp_path / "back", NONE, EVEN, NONE)
    assert loop_stop(back_to_the_baseline, 1) == Stop(1, 0)


def test_a_learned_policy_can_split_a_block_that_shares_its_attention():
    """Why a policy can come back although shared layers attend alike: layers 4 and 5 share
    (identical attention: JS 0 between them, the same JS to every other layer); layers 1-3 are
    alike, layer 4 less so. Eq. 6's mean passes theta for layers 1-4 and not for 1-5, so the
    policy learned from {1,1,1,2,1} ends a block between the two shared layers."""
    alike, unlike, apart = LN2 - 0.667, LN2 - 0.34, LN2 - 0.1  # JS of mu 0.667, 0.34, 0.1
    js = [[0.0 if i == j else alike for j in range(3)] + [unlike, unlike, apart] for i in range(3)]
    shared = [unlike] * 3 + [0.0, 0.0, apart]
    js += [shared[:], shared[:], [apart] * 5 + [0.0]]
    assert block_similarity(js, 0, 3) >= 0.5 > block_similarity(js, 0, 4)
    assert learn_blocks(js, 0.5) == [4, 1, 1]


def test_every_layer_a_block_of_its_own_is_no_sharing(tmp_path):
    """A theta near ln 2 learns {1,1,1,1,1,1}: no layer shares, as in iteration 0 (no policy),
    and the loop trained iteration 1 again, the same weights bit for bit. It stops there, and
    a policy that adds such a kind to another's is the other's."""
    singles = {"decoder_self": [1] * 6}
    assert loop_stop(run_dir_with(tmp_path / "lm", {}, singles), 0) == Stop(0, 0)
    assert loop_stop(run_dir_with(tmp_path / "mt", NONE, EVEN, {**EVEN, "encoder_self": [1] * 6}),
                     1) == Stop(1, 1)  # fmt: skip
    assert loop_stop(run_dir_with(tmp_path / "new", {}, {"decoder_self": [1] * 4 + [2]}), 0) is None


def test_a_new_policy_goes_on(tmp_path):
    run_dir = run_dir_with(tmp_path, NONE, EVEN, UNEVEN)
    assert loop_stop(run_dir, 1) is None
    assert loop_stop(run_dir, 2) is None  # iteration 2 has learned nothing yet
    assert loop_stop(run_dir, 0) is None  # iteration 0 learned {6}/{2,2,2}: new then


def test_a_warm_started_loop_stops_only_when_the_policy_did_not_change(tmp_path):
    """Each iteration starts from the one before: a policy seen before trains a new model."""
    run_dir = run_dir_with(tmp_path, NONE, EVEN, UNEVEN, EVEN, warm_start=True)
    assert loop_stop(run_dir, 2) is None
    (tmp_path / "iter3" / "policy.json").write_text(json.dumps(UNEVEN))
    assert loop_stop(run_dir, 2) == Stop(2, 2)


def test_the_settled_command(tmp_path):
    run_dir = run_dir_with(tmp_path, NONE, EVEN, UNEVEN, EVEN)
    cycled = run_cli("fairseq-san-loop", "settled", run_dir, "2")
    assert cycled.returncode == 0
    assert cycled.stdout == f"== {Stop(2, 1)}\n"
    going_on = run_cli("fairseq-san-loop", "settled", run_dir, "1")
    assert (going_on.returncode, going_on.stdout) == (1, "")
    (tmp_path / "iter3" / "policy.json").write_text('{"decoder_self": [6],')
    malformed = run_cli("fairseq-san-loop", "settled", run_dir, "2")
    assert malformed.returncode == 2
    assert "malformed JSON" in malformed.stderr and "Traceback" not in malformed.stderr
    missing = run_cli("fairseq-san-loop", "settled", str(tmp_path / "nowhere"), "1")
    assert missing.returncode == 2  # not 1, which would read "the policy is new"
    assert missing.stderr.splitlines()[-1] == (
        f"fairseq-san-loop: error: {tmp_path / 'nowhere'}: no such run directory"
    )
    unlearned = run_cli("fairseq-san-loop", "settled", run_dir, "3")
    assert unlearned.returncode == 2  # it exited 1 without a word: "the policy is new"
    assert unlearned.stderr.splitlines()[-1] == (
        f"fairseq-san-loop: error: {tmp_path / 'iter4' / 'policy.json'}: iteration 3 has learned "
        "no policy yet (fairseq-san-policy writes it)"
    )
    negative = run_cli("fairseq-san-loop", "settled", run_dir, "-1")
    assert negative.returncode == 2  # it exited 1 without a word: "the policy is new"
    assert negative.stderr.splitlines()[-1] == (
        "fairseq-san-loop settled: error: argument K: -1 is not an iteration number (0, 1, ...)"
    )
    word = run_cli("fairseq-san-loop", "settled", run_dir, "x")
    assert word.returncode == 2  # argparse's "invalid iteration value", the type's name
    assert word.stderr.splitlines()[-1] == (
        "fairseq-san-loop settled: error: argument K: x is not an iteration number (0, 1, ...)"
    )


def test_settled_over_a_folder_for_the_learned_policy_names_it(tmp_path):
    """A folder where iteration K's learned policy goes was said to be no policy learned yet."""
    run_dir = run_dir_with(tmp_path, NONE, EVEN)
    os.unlink(tmp_path / "iter1" / "policy.json")
    (tmp_path / "iter1" / "policy.json").mkdir()
    result = run_cli("fairseq-san-loop", "settled", run_dir, "0")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.splitlines()[-1] == (
        f"fairseq-san-loop: error: policy file \"{tmp_path / 'iter1' / 'policy.json'}\" is a "
        "folder, not a file: give a JSON file"
    )


def test_decode_key_of_missing_data_is_one_line(tmp_path):
    """The key of a data directory that is not there would be the digest of nothing."""
    checkpoint = tmp_path / "model.pt"
    checkpoint.write_bytes(b"weights")
    result = run_cli("fairseq-san-loop", "decode-key", str(checkpoint), str(tmp_path / "nodata"),
                     "valid")  # fmt: skip
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines()[-1] == (
        f"fairseq-san-loop: error: {tmp_path / 'nodata'}: no such file, nor a data directory "
        "(dict*.txt)"
    )


def test_decode_key_of_a_pipe_is_one_line(tmp_path):
    """A checkpoint given as a pipe, or a data folder's .bin that is one, was read until killed."""
    checkpoint, data = tmp_path / "model.pt", tmp_path / "data"
    os.mkfifo(checkpoint)
    data.mkdir()
    for name in ("dict.en.txt", "test.en-de.en.idx", "test.en-de.en.bin"):
        (data / name).write_bytes(name.encode())
    result = run_cli("fairseq-san-loop", "decode-key", str(checkpoint), str(data), "test",
                     timeout=60)  # fmt: skip
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines()[-1] == (
        f"fairseq-san-loop: error: {checkpoint}: a pipe, device or socket, not a regular file"
    )
    os.unlink(checkpoint)
    checkpoint.write_bytes(b"weights")
    os.unlink(data / "test.en-de.en.bin")
    os.mkfifo(data / "test.en-de.en.bin")
    result = run_cli("fairseq-san-loop", "decode-key", str(checkpoint), str(data), "test",
                     timeout=60)  # fmt: skip
    assert result.stderr.splitlines()[-1].endswith("test.en-de.en.bin: a pipe, device or "
                                                   "socket, not a regular file")  # fmt: skip


def test_decode_key_follows_the_splits_sentences(tmp_path):
    """A test set edited with its sentences' lengths kept has the same dictionaries and index
    files: its stale decoding was reused. A split that is not there is named."""
    from fairseq_san.loop.decode_key import decode_key

    checkpoint, data = tmp_path / "model.pt", tmp_path / "data"
    checkpoint.write_bytes(b"weights")
    data.mkdir()
    for name in ("dict.en.txt", "dict.de.txt", "test.en-de.en.idx", "test.en-de.de.idx",
                 "test.en-de.en.bin", "test.en-de.de.bin"):
        (data / name).write_bytes(name.encode())  # fmt: skip
    key = decode_key(str(checkpoint), str(data), "test", ["--beam", "4"])
    assert decode_key(str(checkpoint), str(data), "test", ["--beam", "4"]) == key
    (data / "test.en-de.en.bin").write_bytes(b"other words")
    assert decode_key(str(checkpoint), str(data), "test", ["--beam", "4"]) != key
    with pytest.raises(FileNotFoundError, match=r"no binarized split 'test1' \(test1\.\*\.bin\)"):
        decode_key(str(checkpoint), str(data), "test1", [])


def test_decode_key_follows_the_files_the_overrides_name(tmp_path, monkeypatch):
    """test_bleu.sh with NAME=CKPT:{'san_policy': 'policy.json'} only rescored its earlier
    decoding after another policy was written to policy.json (the overrides' text unchanged), and
    so with the same name from another folder, another file."""
    from fairseq_san.loop.decode_key import decode_key

    checkpoint, data = tmp_path / "model.pt", tmp_path / "data"
    checkpoint.write_bytes(b"weights")
    data.mkdir()
    for name in ("dict.en.txt", "dict.de.txt", "test.en-de.en.bin", "test.en-de.de.bin"):
        (data / name).write_bytes(name.encode())
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    overrides = ["--model-overrides", "{'san_policy': 'policy.json'}", "--beam", "4"]
    (tmp_path / "a" / "policy.json").write_text('{"decoder_self": [6]}')
    key = decode_key(str(checkpoint), str(data), "test", overrides)
    assert decode_key(str(checkpoint), str(data), "test", overrides) == key
    (tmp_path / "a" / "policy.json").write_text('{"decoder_self": [1, 1, 1, 1, 1, 1]}')
    rewritten = decode_key(str(checkpoint), str(data), "test", overrides)
    assert rewritten != key
    monkeypatch.chdir(tmp_path / "b")
    (tmp_path / "b" / "policy.json").write_text('{"decoder_self": [1, 1, 1, 1, 1, 1]}')
    assert decode_key(str(checkpoint), str(data), "test", overrides) not in (key, rewritten)


def test_decode_key_follows_the_files_of_overrides_given_with_an_equals_sign(tmp_path):
    """``--model-overrides={...}``, which fairseq-generate reads as ``--model-overrides {...}``:
    the files it named were left out of the key, a split decoded under another policy reused."""
    from fairseq_san.loop.decode_key import decode_key

    checkpoint, data, policy = tmp_path / "model.pt", tmp_path / "data", tmp_path / "policy.json"
    checkpoint.write_bytes(b"weights")
    data.mkdir()
    for name in ("dict.en.txt", "dict.de.txt", "test.en-de.en.bin", "test.en-de.de.bin"):
        (data / name).write_bytes(name.encode())
    policy.write_text('{"decoder_self": [6]}')
    joined = [f"--model-overrides={{'san_policy': {str(policy)!r}}}"]
    key = decode_key(str(checkpoint), str(data), "test", joined)
    assert json.loads(key)["override_files_sha256"] == json.loads(
        decode_key(str(checkpoint), str(data), "test", joined[0].split("=", 1))
    )["override_files_sha256"] != {}
    policy.write_text('{"decoder_self": [1, 1, 1, 1, 1, 1]}')
    assert decode_key(str(checkpoint), str(data), "test", joined) != key


def recorded_iterations(tmp_path, monkeypatch, count: int) -> None:
    """Rows of iterations 0..count-1 in the run's loop.json, their checkpoints gone (the summary
    keeps the recorded rows)."""
    import fairseq_san.loop.summary as summary

    rows = [{"iteration": k, "policy": "-", "parameters": 1, "num_updates": 1, "train_seconds": 60,
             "valid_loss": 4.0, "bleu": 30.0, "chrf": 60.0, "signature": None, "perplexity": None}
            for k in range(count)]  # fmt: skip
    (tmp_path / "loop.json").write_text(json.dumps(rows))
    monkeypatch.setattr(summary, "iteration_dirs", lambda run_dir: [])


def test_loop_md_says_why_the_loop_stopped(tmp_path, monkeypatch):
    """Below the table, once the newest row's learned policy stops the loop."""
    run_dir = run_dir_with(tmp_path, NONE, EVEN, UNEVEN, EVEN)
    recorded_iterations(tmp_path, monkeypatch, 3)
    written = write_summary(run_dir)
    assert written.endswith(f"\nStopped: {Stop(2, 1)}.\n")
    assert len([line for line in written.splitlines() if line.startswith("| 2 |")]) == 1
    (tmp_path / "iter3" / "policy.json").write_text(json.dumps({"decoder_encdec": [1, 5]}))
    assert "Stopped" not in write_summary(run_dir)


@pytest.mark.parametrize("max_iterations, trained, stopped", [
    ("2", 2, True), ("3", 2, False), ("1", 1, False)])  # fmt: skip
def test_loop_md_says_max_iterations_ended_a_loop_whose_policy_still_changed(
    tmp_path, monkeypatch, max_iterations, trained, stopped
):
    """The loop ran its --max-iterations and the last iteration learned a new policy: loop.md
    (and the recipe's output, which prints it) says so, and how to go on; while iterations are
    left (the loop still running), nothing; nor for a run of one iteration (a system trained
    once, its policy learned for the record: no loop to go on)."""
    run_dir = run_dir_with(tmp_path, *[NONE, EVEN, UNEVEN][: trained + 1])
    record = json.loads((tmp_path / "run.json").read_text())
    record["options"]["--max-iterations"] = max_iterations
    (tmp_path / "run.json").write_text(json.dumps(record))
    recorded_iterations(tmp_path, monkeypatch, trained)
    written = write_summary(run_dir)
    if not stopped:
        assert "Stopped" not in written
        return
    assert written.endswith(
        "\nStopped: --max-iterations 2 ended the loop with its policy still changing: iteration 1 "
        "learned a policy no iteration trained (iter2/policy.json); rerun the recipe with --extend "
        "--max-iterations 3 to train it.\n"
    ), written


def test_rows_of_an_older_loop_json_lack_the_newer_score_columns(tmp_path, monkeypatch):
    """A loop.json written before a score column existed (perplexity, chrF) is read with those
    cells empty ("-"), not a KeyError: its rows are the only record of iterations whose
    checkpoints are gone."""
    import fairseq_san.loop.summary as summary

    run_dir = run_dir_with(tmp_path, NONE, EVEN)
    rows = [{"iteration": k, "policy": "-", "parameters": 1, "num_updates": 1, "train_seconds": 60,
             "valid_loss": 4.0, "bleu": 30.0, "signature": None} for k in range(2)]  # fmt: skip
    (tmp_path / "loop.json").write_text(json.dumps(rows))
    monkeypatch.setattr(summary, "iteration_dirs", lambda run_dir: [])  # no checkpoints here
    written = write_summary(run_dir)
    assert "| 1 | - | 1 | 1 | 1 min | 4.000 | 30.00 | - |" in written
    rewritten = json.loads((tmp_path / "loop.json").read_text())
    assert [row["perplexity"] for row in rewritten] == [None, None]


def two_groups(first: int, js_between: float) -> list:
    """JS of six layers trained in two sharing blocks, layers 1..first and the rest: 0 within a
    block (its layers attend alike), ``js_between`` across."""
    return [[0.0 if (i < first) == (j < first) else js_between for j in range(6)] for i in range(6)]


@pytest.mark.parametrize(
    "first, js_between, learned",
    [(4, 0.3621, [6]), (4, 0.3623, [5, 1]), (4, 0.4828, [5, 1]), (4, 0.4830, [4, 2]),
     (5, 0.5793, [6]), (5, 0.5795, [5, 1])],
)  # fmt: skip
def test_where_a_loop_trained_with_4_2_can_go(first, js_between, learned):
    """converged/results.md's bounds at theta 0.5: from {4,2}, {6} up to a JS of 0.3622 nats
    between the blocks, {5,1} up to 0.4829, else {4,2} again; from {5,1}, {6} up to 0.5794."""
    assert learn_blocks(two_groups(first, js_between), 0.5) == learned


def test_decode_key_imports_neither_fairseq_nor_torch(tmp_path):
    """test_bleu.sh runs fairseq-san-loop decode-key per system and split: the literal evaluator
    it reads --model-overrides with was imported through fairseq_fixes, whose package imported
    every fix, fairseq and torch (about 3 s each time on a 2-core VM)."""
    from helpers import heavy_modules_imported

    program = (
        "from fairseq_san.loop.decode_key import override_files\n"
        f"assert override_files(['--model-overrides', \"{{'san_policy': {str(tmp_path)!r}}}\"]) "
        "== {}\n"
    )
    assert heavy_modules_imported(program) == []
