"""``fairseq-san-average``: the mean of checkpoints' parameters, read with torch's safe loader.

A tiny model trained 3 updates with ``--save-interval-updates 1`` leaves three update checkpoints;
the newest two are averaged (as examples/wmt14_en_de/run.sh averages the newest five), and the
average must be their exact mean, keep the newest checkpoint's other fields and load with
fairseq-generate. Bad input is one line ``fairseq-san-average: error: ...``, and nothing is written.
"""

import datetime
import logging
import re
import shutil
import subprocess
from argparse import Namespace
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import pytest
import torch

from fairseq_san.checkpoints import load_state, set_stored_value, stored_value
from fairseq_san.cli import average
from helpers import (
    REPO,
    best_hypotheses,
    cli_env,
    command_path,
    fairseq_generate,
    run_cli,
    train_argv,
)

PREFIX = "fairseq-san-average: error: "
UPDATE_CHECKPOINT = re.compile(r"checkpoint_\d+_(\d+)\.pt")


def update_checkpoints(folder: Path) -> Dict[int, Path]:
    """{updates: path} of the checkpoint_E_U.pt files in ``folder``."""
    found = {}
    for path in folder.iterdir():
        match = UPDATE_CHECKPOINT.fullmatch(path.name)
        if match:
            found[int(match.group(1))] = path
    return found


def refusal(argv: List[str]) -> str:
    """The one line ``fairseq-san-average`` exits with, run in this process."""
    with pytest.raises(SystemExit) as exit:
        average.main(argv)
    message = exit.value.code
    assert isinstance(message, str) and "\n" not in message, message
    assert message.startswith(PREFIX), message
    return message[len(PREFIX) :]


def save_changed(source: Path, target: Path, change) -> Path:
    """A copy of checkpoint ``source`` at ``target``, its contents passed through ``change``."""
    state = load_state(str(source))
    change(state)
    torch.save(state, target)
    return target


@pytest.fixture(scope="module")
def checkpoints(binarized_corpus, tmp_path_factory) -> Path:
    """A save dir with the update checkpoints of a tiny model's updates 1, 2 and 3."""
    save_dir = tmp_path_factory.mktemp("average") / "checkpoints"
    argv = train_argv(binarized_corpus, save_dir, 3, ["--save-interval-updates", "1"])
    result = run_cli("fairseq-train", *argv)
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(update_checkpoints(save_dir)) == [1, 2, 3], sorted(save_dir.iterdir())
    return save_dir


@pytest.fixture(scope="module")
def averaged(checkpoints, tmp_path_factory):
    """(the average of the newest two update checkpoints, fairseq-san-average's result)."""
    output = tmp_path_factory.mktemp("averaged") / "final.pt"
    result = run_cli(
        "fairseq-san-average", "--inputs", str(checkpoints), "--num-update-checkpoints", "2",
        "--output", str(output),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return output, result


@pytest.mark.slow
def test_average_is_the_mean_of_the_newest_two(checkpoints, averaged):
    output, result = averaged
    by_update = update_checkpoints(checkpoints)
    newest, before = (load_state(str(by_update[u])) for u in (3, 2))
    mean = load_state(str(output))
    assert any(not torch.equal(newest["model"][n], t) for n, t in before["model"].items())
    assert list(mean["model"]) == list(newest["model"])
    for name, tensor in mean["model"].items():
        assert tensor.dtype == newest["model"][name].dtype, name
        expected = (newest["model"][name] + before["model"][name]) / 2
        torch.testing.assert_close(tensor, expected, msg=name)
    # The newest checkpoint's other fields: its configuration, its place in training.
    assert mean["optimizer_history"] == newest["optimizer_history"]
    assert mean["optimizer_history"][-1]["num_updates"] == 3
    assert vars(mean["cfg"]["model"]) == vars(newest["cfg"]["model"])
    assert set(mean) == set(newest)
    # Not the oldest: its parameters differ from the mean's.
    oldest = load_state(str(by_update[1]))
    assert any(not torch.equal(oldest["model"][n], t) for n, t in mean["model"].items())
    assert str(by_update[3]) in result.stderr and str(by_update[2]) in result.stderr
    # the progress log in fairseq's format: its timestamps had milliseconds, fairseq's have none
    assert re.search(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \| INFO \| fairseq_san\.cli\.average \| "
                     "wrote ", result.stderr, re.MULTILINE), result.stderr  # fmt: skip
    assert not output.with_name("final.pt.tmp").exists()


@pytest.mark.slow
def test_named_files_average_as_the_folder_does(checkpoints, averaged, tmp_path):
    by_update = update_checkpoints(checkpoints)
    output = tmp_path / "named.pt"
    average.main(["--inputs", str(by_update[3]), str(by_update[2]), "--output", str(output)])
    folder, named = load_state(str(averaged[0])), load_state(str(output))
    for name, tensor in folder["model"].items():
        assert torch.equal(named["model"][name], tensor), name


@pytest.mark.slow
def test_fairseq_generate_loads_the_average(binarized_corpus, averaged):
    result = fairseq_generate(binarized_corpus, averaged[0])
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(best_hypotheses(result.stdout)) == 20  # every test sentence


@pytest.mark.slow
def test_half_precision_is_averaged_in_float32(checkpoints, tmp_path):
    """fairseq's script sums half-precision parameters in float32 and writes them so."""
    by_update = update_checkpoints(checkpoints)

    def to_half(state: dict) -> None:
        state["model"] = {name: t.half() for name, t in state["model"].items()}

    halves = [save_changed(by_update[u], tmp_path / f"half{u}.pt", to_half) for u in (2, 3)]
    output = tmp_path / "mean.pt"
    average.main(["--inputs", *map(str, halves), "--output", str(output)])
    first, second = (load_state(str(path))["model"] for path in halves)
    for name, tensor in load_state(str(output))["model"].items():
        assert tensor.dtype == torch.float32, name
        torch.testing.assert_close(tensor, (first[name].float() + second[name].float()) / 2)


# --- bad input: one line, nothing written ---------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("options, said", [
    (["--num-update-checkpoints", "4"], "has 3 checkpoint_<epoch>_<updates>.pt checkpoint(s), "
                                        "fewer than the 4 to average"),
    (["--num-update-checkpoints", "2", "--checkpoint-upper-bound", "1"],
     "has 1 checkpoint_<epoch>_<updates>.pt checkpoint(s) of at most 1 updates, fewer than the 2"),
    (["--num-update-checkpoints", "1", "--checkpoint-upper-bound", "0"],
     "has no checkpoint_<epoch>_<updates>.pt checkpoint of at most 0 updates"),
    (["--num-epoch-checkpoints", "1"], "has no checkpoint<epoch>.pt checkpoint"),
    ([], "is a folder: give --num-update-checkpoints N or --num-epoch-checkpoints N"),
])  # fmt: skip
def test_a_folder_without_enough_checkpoints_is_refused(checkpoints, tmp_path, options, said):
    output = tmp_path / "mean.pt"
    message = refusal(["--inputs", str(checkpoints), *options, "--output", str(output)])
    assert said in message
    assert not output.exists()


@pytest.mark.slow
def test_a_folder_without_checkpoints_is_refused(tmp_path):
    (tmp_path / "checkpoint_last.pt").write_bytes(b"")  # not an update checkpoint
    message = refusal(["--inputs", str(tmp_path), "--num-update-checkpoints", "1",
                       "--output", str(tmp_path / "mean.pt")])  # fmt: skip
    assert message == (
        f"--inputs {tmp_path} has no checkpoint_<epoch>_<updates>.pt checkpoint "
        "(fairseq-train --save-interval-updates writes them)"
    )


def drop_a_parameter(state: dict) -> None:
    state["model"].pop(sorted(state["model"])[0])


def widen_a_parameter(state: dict) -> None:
    name = sorted(state["model"])[-1]
    state["model"][name] = torch.zeros(*state["model"][name].shape, 2)


def make_a_float_parameter_an_integer(state: dict) -> None:
    name = sorted(state["model"])[-1]
    state["model"][name] = state["model"][name].long()


def reverse_the_direction(state: dict) -> None:
    source, target = stored_value(state, "model", "language_pair")
    set_stored_value(state, "model", "language_pair", [target, source])


def change_the_activation(state: dict) -> None:
    assert stored_value(state, "model", "activation_fn") == "relu"
    set_stored_value(state, "model", "activation_fn", "gelu")


def add_an_unsafe_global(state: dict) -> None:
    state["extra"] = datetime.date(2026, 1, 1)  # not on torch's safe loader's allow-list


@pytest.mark.slow
@pytest.mark.parametrize("change, said", [
    (drop_a_parameter, "is not of the model of {first}: it lacks parameter "),
    (widen_a_parameter, "is not of the model of {first}: its "),
    # an integer tensor summed with a float one: a traceback, or a float by the inputs' order
    (make_a_float_parameter_an_integer, "is not of the model of {first}: its "),
    # the same layout, another model: its mean was written as the first one's, without a word
    (reverse_the_direction, "is not of the model of {first}: its language_pair is ['tgt', 'src'], "
                            "not ['src', 'tgt']; average checkpoints of one training run"),
    (change_the_activation, "is not of the model of {first}: its activation_fn is 'gelu', not "
                            "'relu'"),
    (add_an_unsafe_global, "cannot load checkpoint {other}: it contains datetime.date, which "
                           "torch's safe loader (weights_only) refuses"),
])  # fmt: skip
def test_a_checkpoint_of_another_model_or_unsafe_is_refused(checkpoints, tmp_path, change, said):
    first = update_checkpoints(checkpoints)[3]
    other = save_changed(update_checkpoints(checkpoints)[2], tmp_path / "other.pt", change)
    output = tmp_path / "mean.pt"
    message = refusal(["--inputs", str(first), str(other), "--output", str(output)])
    assert said.format(first=first, other=other) in message
    assert not output.exists() and not (tmp_path / "mean.pt.tmp").exists()


@pytest.mark.slow
@pytest.mark.parametrize("text", ["${oc.env:HOME}", "a${x}"])
def test_a_checkpoint_holding_an_interpolation_is_refused(checkpoints, tmp_path, text):
    """A configuration holding ``${`` (fairseq saves it resolved; its loaders refuse it) was
    averaged, and the average kept it: refused, as fairseq's loaders refuse it."""
    first = update_checkpoints(checkpoints)[3]

    def plant(state: dict) -> None:
        state["cfg"]["checkpoint"]["save_dir"] = text

    other = save_changed(update_checkpoints(checkpoints)[2], tmp_path / "other.pt", plant)
    output = tmp_path / "mean.pt"
    assert refusal(["--inputs", str(first), str(other), "--output", str(output)]) == (
        f"cannot average checkpoint {other}: its configuration's checkpoint.save_dir is an "
        "omegaconf interpolation (${...}), which fairseq resolves before it saves one: not a "
        "configuration fairseq wrote"
    )
    assert not output.exists()


@pytest.mark.slow
def test_a_checkpoint_of_a_shuffled_dictionary_is_refused(checkpoints, tmp_path):
    """Trained on data whose dictionary holds the same number of words in another order: each
    embedding row is another word's, and the mean was written without a word."""
    first, other = (update_checkpoints(checkpoints)[step] for step in (3, 2))
    data = Path(stored_value(torch.load(first, weights_only=True), "task", "data"))
    shuffled = shutil.copytree(data, tmp_path / "data")
    lines = (shuffled / "dict.tgt.txt").read_text().splitlines(keepends=True)
    (shuffled / "dict.tgt.txt").write_text("".join(lines[::-1]))
    other = save_changed(
        other, tmp_path / "other.pt",
        lambda state: set_stored_value(state, "task", "data", str(shuffled)),
    )  # fmt: skip
    message = refusal(["--inputs", str(first), str(other), "--output", str(tmp_path / "m.pt")])
    assert message.endswith(
        f"is not of the model of {first}: its dictionary {shuffled / 'dict.tgt.txt'} holds other "
        f"words than {data / 'dict.tgt.txt'}; average checkpoints of one training run"
    )


@pytest.mark.parametrize("name, said", [("dictionary", "its dictionary's"),
                                         ("target", "its target dictionary's")])
def test_a_checkpoint_recording_other_words_names_its_dictionary(name, said):
    """A language model's one dictionary, recorded as ``dictionary``, was said "its dictionary
    dictionary's record holds other words"."""
    from fairseq_san.fairseq_fixes.dictionary_words import DICTIONARIES_STATE, digest

    def recording(words):
        record = {name: {"entries": len(words), "sha256": digest(words), "file": "dict.txt"}}
        return {"extra_state": {DICTIONARIES_STATE: record}}

    mismatch = average.record_mismatch(recording(["tok1", "tok2"]), recording(["wrd1", "wrd2"]))
    assert mismatch == f"{said} record holds other words"


def test_dictionaries_beside_several_data_folders_are_read_in_the_first(tmp_path):
    """fairseq's DATA1:DATA2 keeps the dictionaries in DATA1: checkpoints trained on A:X and
    B:X, whose A/dict.txt and B/dict.txt hold other words, are told apart by those files (not
    by 'A:X' as a folder, nor by the shared X)."""
    for folder, words in (("a", "tok1 1\ntok2 1\n"), ("b", "wrd1 1\nwrd2 1\n"), ("x", "")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "dict.txt").write_text(words)
    reference, state = ({"cfg": {"task": {"data": f"{tmp_path / first}:{tmp_path / 'x'}"}}}
                        for first in ("a", "b"))  # fmt: skip
    assert average.dictionary_mismatch(reference, state) == (
        f"its dictionary {tmp_path / 'b' / 'dict.txt'} holds other words than "
        f"{tmp_path / 'a' / 'dict.txt'}"
    )


def test_language_models_with_and_without_a_start_token_are_refused():
    """A run resumed with --add-bos-token keeps the checkpoints saved before it without: their
    mean was written under the first checkpoint's --add-bos-token, without a word, and loaded as
    a model of that start token."""
    with_start, without = ({"cfg": {"model": {"_name": "transformer_lm_san", "add_bos_token": bos}}}
                           for bos in (True, False))  # fmt: skip
    assert average.configuration_mismatch(with_start, without) == (
        "its add_bos_token is False, not True"
    )


def test_checkpoints_of_a_run_resumed_across_an_upgrade_are_one_model():
    """A checkpoint saved before the plugin recorded a key (language_pair, since 2e106c0) and one
    of the same run resumed after were refused as two models ("its language_pair is ['de',
    'en'], not None; average checkpoints of one training run"); a key both record still counts."""
    model = {"_name": "transformer_san", "add_bos_token": False}
    older = {"cfg": {"model": model}}
    newer = {"cfg": {"model": {**model, "language_pair": ["de", "en"]}}}
    reverse = {"cfg": {"model": {**model, "language_pair": ["en", "de"]}}}
    assert average.configuration_mismatch(older, newer) is None
    assert average.configuration_mismatch(newer, older) is None
    assert average.configuration_mismatch(newer, reverse) == (
        "its language_pair is ['en', 'de'], not ['de', 'en']"
    )
    # fairseq-train saves a legacy architecture's (transformer_san's) model options as a Namespace
    older, newer = ({"cfg": {"model": Namespace(**state["cfg"]["model"])}}
                    for state in (older, newer))  # fmt: skip
    assert average.configuration_mismatch(older, newer) is None
    assert average.configuration_mismatch(newer, older) is None


def add_a_mask(value: bool):
    """A change that adds a boolean buffer (a mask) holding ``value``."""

    def change(state: dict) -> None:
        state["model"]["decoder.mask"] = torch.tensor([True, value])

    return change


@pytest.mark.slow
def test_a_boolean_tensor_is_kept_where_the_checkpoints_agree(checkpoints, tmp_path):
    """A boolean buffer (a mask) failed with a traceback (floor_divide_ on bool); it is no sum:
    the average keeps it where every checkpoint holds the same, and refuses it where not."""
    by_update = update_checkpoints(checkpoints)
    masked = [save_changed(by_update[u], tmp_path / f"masked{u}.pt", add_a_mask(False))
              for u in (2, 3)]  # fmt: skip
    output = tmp_path / "mean.pt"
    average.main(["--inputs", *map(str, masked), "--output", str(output)])
    mask = load_state(str(output))["model"]["decoder.mask"]
    assert mask.dtype == torch.bool and mask.tolist() == [True, False]
    other = save_changed(by_update[2], tmp_path / "other.pt", add_a_mask(True))
    assert refusal(["--inputs", str(masked[1]), str(other), "--output", str(output)]) == (
        f"checkpoint {other}: its boolean decoder.mask differs from that of {masked[1]}, and a "
        "mean of booleans is none: average checkpoints whose boolean tensors agree"
    )


def spoilt_layer_refusal(checkpoints, tmp_path, spoil: Callable) -> Tuple[Path, str, str]:
    """(the spoilt checkpoint, the weight spoilt, the refusal) of averaging the newest checkpoint
    with update 2's, its first layer weight replaced by ``spoil`` of it; no average is written."""
    by_update = update_checkpoints(checkpoints)
    name = next(n for n in sorted(load_state(str(by_update[2]))["model"]) if "layers" in n)

    def change(state: dict) -> None:
        state["model"][name] = spoil(state["model"][name])

    spoilt = save_changed(by_update[2], tmp_path / "spoilt.pt", change)
    output = tmp_path / "mean.pt"
    said = refusal(["--inputs", str(by_update[3]), str(spoilt), "--output", str(output)])
    assert not output.exists()
    return spoilt, name, said


@pytest.mark.slow
@pytest.mark.parametrize("make, said", [
    (lambda t: t.to_sparse(), "a sparse_coo tensor"),
    (lambda t: t.to("meta"), "a meta tensor, which holds no values"),
    (lambda t: t.to(torch.complex64), "a tensor of complex numbers (complex64)"),
])  # fmt: skip
def test_a_checkpoint_of_tensors_no_training_saves_is_refused(checkpoints, tmp_path, make, said):
    """A sparse, meta or complex parameter failed inside torch as the average summed it (or,
    complex, was averaged without a word)."""
    spoilt, name, refused = spoilt_layer_refusal(checkpoints, tmp_path, make)
    assert refused == (
        f"cannot average checkpoint {spoilt}: its {name} is {said}; fairseq-train saves dense "
        "real-valued tensors"
    )


@pytest.mark.slow
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_checkpoint_holding_nan_or_infinity_is_refused(checkpoints, tmp_path, bad):
    """A diverged training's checkpoint was averaged silently, every mean it entered NaN."""

    def spoil(tensor: torch.Tensor) -> torch.Tensor:
        tensor = tensor.clone()
        tensor.view(-1)[0] = bad
        return tensor

    spoilt, name, refused = spoilt_layer_refusal(checkpoints, tmp_path, spoil)
    assert refused == (
        f"checkpoint {spoilt}: its {name} holds NaN or infinite values (the training diverged?), "
        "which every mean would take: leave it out of the average"
    )


@pytest.mark.slow
def test_an_output_that_is_an_input_is_refused(checkpoints):
    by_update = update_checkpoints(checkpoints)
    before = by_update[3].read_bytes()
    output = f"{checkpoints}/./{by_update[3].name}"  # the same file, spelt otherwise
    message = refusal(["--inputs", str(checkpoints), "--num-update-checkpoints", "2",
                       "--output", output])  # fmt: skip
    assert message == (
        f"--output {output}: is the input {by_update[3]}: write the average to another file"
    )
    assert by_update[3].read_bytes() == before


@pytest.mark.slow
def test_an_input_that_the_average_would_be_written_through_is_refused(checkpoints, tmp_path):
    """The average is written through OUTPUT.tmp: an input of that name was overwritten while it
    was still mapped from the file, and the command died of SIGBUS, the input destroyed."""
    by_update = update_checkpoints(checkpoints)
    temporary = tmp_path / "mean.pt.tmp"
    temporary.write_bytes(by_update[3].read_bytes())
    output = tmp_path / "mean.pt"
    message = refusal(["--inputs", str(temporary), str(by_update[2]), "--output", str(output)])
    assert message == (
        f"--output {output}: is written through {output}.tmp first, which is the input "
        f"{temporary}: write the average to another file"
    )
    assert temporary.read_bytes() == by_update[3].read_bytes()


@pytest.mark.slow
def test_an_output_that_is_a_link_writes_its_target(checkpoints, tmp_path):
    """The rename replaced the link (and a device: ``--output /dev/full`` became a regular
    file); fairseq's script, ``torch.save(path)``, writes through it."""
    by_update = update_checkpoints(checkpoints)
    target, link = tmp_path / "target.pt", tmp_path / "link.pt"
    link.symlink_to(target)
    result = run_cli("fairseq-san-average", "--inputs", str(by_update[3]), str(by_update[2]),
                     "--output", str(link))  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert link.is_symlink() and set(load_state(str(target))["model"]) == set(
        load_state(str(by_update[3]))["model"]
    )


def test_output_dash_is_standard_output(tmp_path):
    """``--output -`` wrote the average to a file named "-" in the working folder (fairseq's
    script too), where "-" is standard output to the plugin's other commands."""
    for value in (1.0, 2.0):
        torch.save({"model": {"w": torch.full((2,), value)}}, tmp_path / f"c{value:.0f}.pt")
    result = subprocess.run(
        [str(command_path("fairseq-san-average")), "--inputs", "c1.pt", "c2.pt", "--output", "-"],
        cwd=tmp_path, env=cli_env(), capture_output=True, timeout=240,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    (tmp_path / "piped.pt").write_bytes(result.stdout)
    assert torch.equal(load_state(str(tmp_path / "piped.pt"))["model"]["w"], torch.full((2,), 1.5))
    assert not (tmp_path / "-").exists()


def test_output_dash_to_a_terminal_is_refused(tmp_path, monkeypatch):
    """``--output -`` at a terminal printed the checkpoint's megabytes of zip archive there."""
    monkeypatch.setattr(average.sys.stdout, "isatty", lambda: True)
    checkpoint = tmp_path / "c.pt"
    torch.save({"model": {"w": torch.ones(2)}}, checkpoint)
    assert refusal(["--inputs", str(checkpoint), "--output", "-"]) == (
        "--output -: standard output is a terminal, and a checkpoint is binary: redirect it "
        "(> FILE)"
    )


@pytest.mark.slow
def test_an_average_that_cannot_be_written_says_why(checkpoints, tmp_path):
    """On a full disk (here a file-size limit) the reason was torch's "[enforce fail at
    inline_container.cc:672] . unexpected pos 44672 vs 44564"; the output is left as it was."""
    import resource

    by_update = update_checkpoints(checkpoints)
    output = tmp_path / "mean.pt"
    output.write_bytes(b"the last average")
    limit = by_update[3].stat().st_size // 2

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    argv = [str(command_path("fairseq-san-average")), "--inputs", str(by_update[3]),
            str(by_update[2]), "--output", str(output)]  # fmt: skip
    result = subprocess.run(argv, cwd=REPO, env=cli_env(), capture_output=True, text=True,
                            timeout=240, preexec_fn=small_files)  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"{PREFIX}cannot write {output}: File too large"
    )
    assert output.read_bytes() == b"the last average"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["mean.pt"]


@pytest.mark.slow
def test_files_that_are_no_checkpoints_are_refused(checkpoints, tmp_path):
    newest = str(update_checkpoints(checkpoints)[3])
    text = tmp_path / "notes.txt"
    text.write_text("not a checkpoint\n")
    missing = tmp_path / "missing.pt"
    weights = tmp_path / "weights.pt"
    torch.save(load_state(newest)["model"], weights)  # a state dict alone
    output = str(tmp_path / "mean.pt")
    assert refusal(["--inputs", newest, str(missing), "--output", output]) == (
        f"--inputs {missing}: no such file"
    )
    assert refusal(["--inputs", newest, str(text), "--output", output]).startswith(
        f"cannot load checkpoint {text}: "
    )
    assert "not a fairseq checkpoint" in refusal(["--inputs", str(weights), "--output", output])
    assert refusal(["--inputs", newest, newest, "--output", output]) == (
        f"--inputs names {newest} twice: each checkpoint counts once"
    )
    hard_link = tmp_path / "hard.pt"  # another name of the same file: it weighed twice
    hard_link.hardlink_to(newest)
    assert refusal(["--inputs", newest, str(hard_link), "--output", output]) == (
        f"--inputs names {hard_link} (one file with {newest}) twice: each checkpoint counts once"
    )
    last = tmp_path / "checkpoint_last.pt"  # fairseq-train's copy of the last: it weighed twice
    shutil.copyfile(newest, last)
    assert refusal(["--inputs", str(last), newest, "--output", output]) == (
        f"--inputs {last} and {newest} hold the same bytes (fairseq-train's checkpoint_last.pt "
        "copies the last checkpoint it saved): one checkpoint would count twice; leave one out"
    )
    empty = [tmp_path / "empty1.pt", tmp_path / "empty2.pt"]  # were "the same bytes"
    for path in empty:
        path.write_bytes(b"")
    assert refusal(["--inputs", *map(str, empty), "--output", output]) == (
        f"cannot load checkpoint {empty[0]}: the file is empty (0 bytes; was saving it "
        "interrupted?)"
    )
    assert refusal(["--inputs", newest, "--output", str(tmp_path / "no" / "mean.pt")]) == (
        f"--output {tmp_path / 'no' / 'mean.pt'}: no folder {tmp_path / 'no'} (create it first)"
    )
    # An empty name (an unset variable) was the working directory: "cannot write : Is a directory".
    assert refusal(["--inputs", newest, "--output", ""]) == (
        "--output '': is empty: name the average to write"
    )
    assert not (tmp_path / "mean.pt").exists()


@pytest.mark.slow
def test_the_unsafe_loader_is_refused(checkpoints, tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    message = refusal(["--inputs", str(checkpoints), "--num-update-checkpoints", "2",
                       "--output", str(tmp_path / "mean.pt")])  # fmt: skip
    assert "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD is set" in message


@pytest.mark.slow
def test_the_command_says_a_refusal_in_one_line(checkpoints, tmp_path):
    """As a user runs it: standard error holds the progress lines and one error line."""
    result = run_cli("fairseq-san-average", "--inputs", str(checkpoints),
                     "--num-update-checkpoints", "5", "--output", str(tmp_path / "mean.pt"))
    newest_first = [update_checkpoints(checkpoints)[u].name for u in (3, 2, 1)]
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"{PREFIX}--inputs {checkpoints} has 3 checkpoint_<epoch>_<updates>.pt checkpoint(s), "
        f"fewer than the 5 to average: {', '.join(newest_first)}"
    ]


@pytest.mark.parametrize("argv, said", [
    (["--inputs", "a.pt"], "the following arguments are required: --output"),
    (["--inputs", "d", "--output", "o.pt", "--num-update-checkpoints", "2",
      "--num-epoch-checkpoints", "2"], "not allowed with argument"),
    (["--inputs", "d", "--output", "o.pt", "--num-update-checkpoints", "0"],
     "0 is not a positive integer"),
    (["--inputs", "a.pt", "--output", "o.pt", "--checkpoint-upper-bound", "5"],
     "--checkpoint-upper-bound needs --num-update-checkpoints or --num-epoch-checkpoints"),
])  # fmt: skip
def test_bad_options_are_usage_errors(argv, said, capsys):
    with pytest.raises(SystemExit) as exit:
        average.main(argv)
    assert exit.value.code == 2
    error = capsys.readouterr().err.splitlines()[-1]
    assert error.startswith("fairseq-san-average: error: ") and said in error, error


def test_a_missing_input_is_refused_before_any_checkpoint_is_read(tmp_path, caplog):
    """It was found as fairseq's loader read it, after the progress lines, seconds later."""
    present = tmp_path / "present.pt"
    present.write_bytes(b"")
    missing = tmp_path / "missing.pt"
    with caplog.at_level(logging.INFO):
        named = refusal(["--inputs", str(present), str(missing), "--output", "o.pt"])
        folder = refusal(["--inputs", str(missing), "--num-epoch-checkpoints", "2",
                          "--output", "o.pt"])  # fmt: skip
    assert named == f"--inputs {missing}: no such file"
    assert folder == f"--inputs {missing}: no such folder"  # was "give --inputs DIR"
    assert caplog.records == []


def test_num_checkpoints_need_one_folder(tmp_path):
    files = [tmp_path / "a.pt", tmp_path / "b.pt"]
    message = refusal(["--inputs", *map(str, files), "--num-update-checkpoints", "2",
                       "--output", str(tmp_path / "o.pt")])  # fmt: skip
    assert message.startswith("--num-update-checkpoints averages the newest checkpoints of one")


def test_the_parser_keeps_fairseqs_option_names():
    """The options of fairseq's scripts/average_checkpoints.py that the recipe and users give."""
    options = {o for action in average.build_parser()._actions for o in action.option_strings}
    assert {"--inputs", "--output", "--num-update-checkpoints", "--num-epoch-checkpoints",
            "--checkpoint-upper-bound"} <= options  # fmt: skip

