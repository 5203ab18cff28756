"""Bad input where the plugin meets fairseq stops with one line ``fairseq-san: error: ...`` that
names the problem and the fix, before the expensive step (issue 14, items 3, 6, 7 and 8).

The command-line tests are ``slow``: their fixture trains two tiny models on the synthetic
corpus, side by side, one with ``--task translation_san`` and a sharing policy, one with plain
``--task translation``.
"""

import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import List

import pytest

from helpers import (
    BIN,
    REPO,
    TINY,
    StandInTask,
    build,
    cli_env,
    make_dictionary,
    parse_args,
    run_cli,
    train_argv,
)

POLICY_FLAGS = ["--san-decoder-self-policy", "1,5"]
UPDATES = 4
ERROR = "fairseq-san: error: "
VALIDATION_STARTED = "valid on 'valid' subset"


@pytest.fixture(scope="module")
def trained(binarized_corpus, tmp_path_factory):
    """{"san": save dir (translation_san, decoder_self {1,5}), "plain": save dir (translation)}."""
    root = tmp_path_factory.mktemp("errors")
    runs = {
        "san": ["--task", "translation_san", *POLICY_FLAGS],
        "plain": [],  # train_argv's --task translation
    }
    procs = {
        name: subprocess.Popen(
            [str(BIN / "fairseq-train"),
             *train_argv(binarized_corpus, root / name, max_update=UPDATES, extra=extra)],
            cwd=REPO, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        for name, extra in runs.items()
    }
    for name, proc in procs.items():
        output = proc.communicate(timeout=300)[0]
        assert proc.returncode == 0, f"fairseq-train ({name}):\n{output[-3000:]}"
    return {name: root / name for name in runs}


def error_lines(result: subprocess.CompletedProcess) -> List[str]:
    return [line for line in result.stderr.splitlines() if line.startswith(ERROR)]


def assert_one_line_error(result: subprocess.CompletedProcess, *needles: str) -> str:
    """The command failed with exactly one error line holding ``needles``; no traceback."""
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    lines = error_lines(result)
    assert len(lines) == 1, output[-3000:]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def flags_in(message: str) -> List[str]:
    """The command-line flags that a checkpoint-policy error tells the user to pass."""
    found = re.search(r"To continue training it, pass (.*?);", message)
    assert found, message
    return shlex.split(found.group(1))


def validate(data: Path, checkpoint: Path, *extra: str) -> subprocess.CompletedProcess:
    return run_cli(
        "fairseq-validate", str(data),
        "--user-dir", "fairseq_san",
        "--task", "translation_san",
        "--path", str(checkpoint),
        "--valid-subset", "valid",
        "--batch-size", "8",
        "--cpu", "--num-workers", "0",
        *extra,
    )  # fmt: skip


# --- item 3: a typo in --model-overrides -------------------------------------------------------


def build_model(args):
    from fairseq_san.models.transformer_san import TransformerSANModel

    return TransformerSANModel.build_model(args, StandInTask(make_dictionary()))


@pytest.mark.slow
def test_model_overrides_typo_names_the_nearest_key(binarized_corpus, trained):
    result = run_cli(
        "fairseq-generate", str(binarized_corpus),
        "--user-dir", "fairseq_san",
        "--path", str(trained["plain"] / "checkpoint_last.pt"),
        "--gen-subset", "test", "--beam", "1", "--batch-size", "32", "--cpu",
        "--model-overrides", "{'san_polcy': '{\"decoder_self\": [1, 5]}'}",
    )  # fmt: skip
    assert_one_line_error(result, "san_polcy", "did you mean 'san_policy'")
    assert "H-0" not in result.stdout


@pytest.mark.parametrize(
    "typo, nearest",
    [
        ("san_no_cahce", "san_no_cache"),
        ("san_fast_decodng", "san_fast_decoding"),
        ("san_analysis_dri", "san_analysis_dir"),
        ("san-policy", "san_policy"),
    ],
)
def test_unknown_san_key_is_refused_in_build_model(typo, nearest):
    from fairseq_san.errors import UsageError

    args = parse_args("transformer_san", TINY)
    setattr(args, typo, True)  # as --model-overrides sets it on a checkpoint's arguments
    with pytest.raises(UsageError, match=f"'{typo}'.*did you mean '{nearest}'"):
        build_model(args)


def test_unknown_san_key_without_a_near_one_lists_the_valid_keys():
    from fairseq_san.errors import UsageError

    args = parse_args("transformer_san", TINY)
    args.san_zzzzzz = 1
    with pytest.raises(UsageError, match="valid: .*san_analysis_dir.*san_policy"):
        build_model(args)


@pytest.mark.slow
def test_decoder_in_model_overrides_is_refused_with_the_flag_that_works(binarized_corpus, trained):
    result = run_cli(
        "fairseq-generate", str(binarized_corpus),
        "--user-dir", "fairseq_san", "--task", "translation_san",
        "--path", str(trained["san"] / "checkpoint_last.pt"),
        "--gen-subset", "test", "--beam", "1", "--batch-size", "32", "--cpu", "--sampling",
        "--model-overrides", "{'san_decoder': 'static'}",
    )  # fmt: skip
    assert_one_line_error(result, "san_decoder 'static'", "Pass --san-decoder static")
    assert "H-0" not in result.stdout


@pytest.mark.parametrize(
    "model, task, refused",
    [
        ({"san_decoder": "static"}, {}, "--san-decoder static"),
        ({"san_decoder_precision": "bf16"}, {"san_decoder": "static"}, "--san-decoder-precision bf16"),
        ({"san_decoder": "static"}, {"san_decoder": "static"}, None),  # the task applies it
        ({"san_decoder": "fairseq"}, {"san_decoder": "static"}, None),  # saved in training
    ],
)  # fmt: skip
def test_decoder_options_the_task_does_not_apply_are_refused(model, task, refused):
    from fairseq_san.errors import UsageError
    from fairseq_san.models.transformer_san import TransformerSANModel
    from fairseq_san.tasks.translation_san import TranslationSANConfig

    args = parse_args("transformer_san", TINY)
    for name, value in model.items():
        setattr(args, name, value)  # as --model-overrides sets it on a checkpoint's arguments
    stand_in = StandInTask(make_dictionary())
    stand_in.cfg = TranslationSANConfig(**task)
    if refused is None:
        TransformerSANModel.build_model(args, stand_in)
        return
    with pytest.raises(UsageError, match=f"is a model option.*Pass {refused} on the command line"):
        TransformerSANModel.build_model(args, stand_in)


# --- item 6: resuming training without the policy flags --------------------------------------


@pytest.mark.slow
def test_resume_without_policy_flags_says_how_to_continue(binarized_corpus, trained, tmp_path):
    save_dir = tmp_path / "resume"
    shutil.copytree(trained["san"], save_dir)
    more = UPDATES + 2
    san = ["--task", "translation_san"]
    base = train_argv(binarized_corpus, save_dir, max_update=more, extra=san)
    result = run_cli("fairseq-train", *base)
    line = assert_one_line_error(result, "decoder_self {1,5}", "--san-policy")
    assert "architectures match" not in result.stderr
    assert "decode-time" not in line
    # the flags the line gives continue the run
    resumed = run_cli("fairseq-train", *base, *flags_in(line))
    output = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, output[-3000:]
    checkpoint = re.escape(str(save_dir / "checkpoint_last.pt"))
    loaded = rf"Loaded checkpoint {checkpoint} \(epoch \d+ @ (\d+) "
    assert [int(n) for n in re.findall(loaded, output)] == [UPDATES], output[-3000:]
    assert f"num_updates {more}" in output, output[-3000:]
    assert "attention sharing: decoder_self {1,5}" in output


@pytest.mark.parametrize(
    "trained_flags",
    [
        ["--san-decoder-self-policy", "2,4", "--san-encoder-self-policy", "2"],
        ["--san-decoder-encdec-policy", "3,3", "--san-encdec-share", "weights"],
        ["--san-decoder-encdec-policy", "1,5"],
    ],
)
def test_the_flags_in_the_message_rebuild_the_checkpoints_model(trained_flags):
    from fairseq_san.policy import PolicyError

    trained, _ = build(trained_flags)
    unshared, _ = build()
    with pytest.raises(PolicyError, match="more attention sharing") as error:
        unshared.load_state_dict(trained.state_dict())
    rebuilt, _ = build(flags_in(str(error.value)))
    rebuilt.load_state_dict(trained.state_dict())  # strict: every parameter, nothing dropped
    assert rebuilt.state_dict().keys() == trained.state_dict().keys()


# --- item 7: fail before the expensive step ---------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("where", ["a file", "under a file", "not creatable"])
def test_bad_analysis_dir_fails_before_validation(binarized_corpus, trained, tmp_path, where):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("not a directory\n")
    path = {
        "a file": a_file,
        "under a file": a_file / "analysis",
        "not creatable": Path("/proc/fairseq-san-analysis"),
    }[where]
    result = validate(
        binarized_corpus, trained["san"] / "checkpoint_last.pt", "--san-analysis-dir", str(path)
    )
    assert_one_line_error(result, "--san-analysis-dir", str(path))
    assert VALIDATION_STARTED not in result.stdout + result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("value", ["0", "-3"])
def test_analysis_max_sentences_must_be_positive(binarized_corpus, trained, tmp_path, value):
    result = validate(
        binarized_corpus, trained["san"] / "checkpoint_last.pt",
        "--san-analysis-dir", str(tmp_path / "js"), "--san-analysis-max-sentences", value,
    )  # fmt: skip
    assert_one_line_error(result, "--san-analysis-max-sentences", value, "at least 1")
    assert VALIDATION_STARTED not in result.stdout + result.stderr


@pytest.mark.slow
def test_missing_data_directory_is_one_line(trained, tmp_path):
    missing = tmp_path / "no-such-data"
    san = ["--task", "translation_san"]
    train = run_cli("fairseq-train", *train_argv(missing, tmp_path / "save", extra=san))
    assert_one_line_error(train, str(missing), "No such file or directory")
    generate = run_cli(  # fairseq's own translation task (the default)
        "fairseq-generate", str(missing), "--user-dir", "fairseq_san",
        "--path", str(trained["plain"] / "checkpoint_last.pt"), "--batch-size", "8", "--cpu",
    )  # fmt: skip
    assert_one_line_error(generate, str(missing), "No such file or directory")


def test_js_matrices_of_one_stack_must_agree_in_size():
    from fairseq_san.policy import PolicyError, learn_policy

    three = [[0.0, 0.1, 0.2], [0.1, 0.0, 0.1], [0.2, 0.1, 0.0]]
    two = [[0.0, 0.1], [0.1, 0.0]]
    with pytest.raises(PolicyError, match=r"decoder_self is 3x3 but decoder_encdec is 2x2"):
        learn_policy({"decoder_self": three, "decoder_encdec": two}, {"decoder_self": 0.5})


# --- item 8: --san-analysis-dir on a checkpoint trained with --task translation --------------


@pytest.mark.slow
def test_analysis_flags_work_on_a_translation_san_checkpoint_and_are_explained_on_another(
    binarized_corpus, trained, tmp_path
):
    flags = ["--san-analysis-max-sentences", "5"]
    san = validate(
        binarized_corpus, trained["san"] / "checkpoint_last.pt",
        "--san-analysis-dir", str(tmp_path / "san"), *flags,
    )  # fmt: skip
    assert san.returncode == 0, (san.stdout + san.stderr)[-3000:]
    assert '"sentences": 5' in (tmp_path / "san" / "js.json").read_text()

    analysis = tmp_path / "plain"
    checkpoint = trained["plain"] / "checkpoint_last.pt"
    result = validate(binarized_corpus, checkpoint, "--san-analysis-dir", str(analysis), *flags)
    line = assert_one_line_error(result, "--task translation", "--model-overrides")
    assert VALIDATION_STARTED not in result.stdout + result.stderr
    assert not analysis.exists()
    override = re.search(r'--model-overrides "([^"]+)"', line)
    assert override, line
    fixed = validate(binarized_corpus, checkpoint, "--model-overrides", override.group(1))
    assert fixed.returncode == 0, (fixed.stdout + fixed.stderr)[-3000:]
    assert '"sentences": 5' in (analysis / "js.json").read_text()
