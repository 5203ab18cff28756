"""Bad input where the plugin meets fairseq stops with one line ``fairseq-san: error: ...`` that
names the problem and the fix, before the expensive step.

The command-line tests are ``slow``: their fixture trains two tiny models on the synthetic
corpus, side by side, one with ``--task translation_san`` and a sharing policy, one with plain
``--task translation``.
"""

import argparse
import copy
import gzip
import importlib.util
import json
import logging
import os
import pickle
import re
import shlex
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import List

import pytest
import torch

from helpers import (
    BIN,
    REPO,
    TINY,
    StandInTask,
    build,
    build_fairseq_transformer,
    build_lm,
    cli_env,
    command_path,
    fairseq_generate,
    make_dictionary,
    parse_args,
    preprocess,
    run_cli,
    stand_in_fairseq_train,
    train_argv,
    write_corpus,
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
            [str(command_path("fairseq-train")),
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


# --- a typo in --model-overrides --------------------------------------------------------------


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
@pytest.mark.parametrize(
    "override, said",
    [
        ("{'decoder_layerz': 3}", "unknown option 'decoder_layerz'.*did you mean 'decoder_layers'"),
        ("{'encoder_layers': '2'}", r"encoder_layers '2' .*is of type str, but encoder_layers takes"
                                    r" an int \(this checkpoint has \{'encoder_layers': 2\}\)"),
    ],
    ids=["misspelt key", "wrong type"],
)  # fmt: skip
def test_model_overrides_fairseq_ignores_or_fails_on_are_one_line(
    binarized_corpus, trained, override, said
):
    """fairseq sets any key: a misspelt one decoded the model as trained, a '2' for an int failed
    in the encoder's constructor (TypeError)."""
    result = validate(binarized_corpus, trained["san"] / "checkpoint_last.pt",
                      "--model-overrides", override)  # fmt: skip
    assert re.search(said, assert_one_line_error(result))
    assert VALIDATION_STARTED not in result.stdout + result.stderr


def checkpoint_configuration(arch: str = "transformer_san"):
    """The configuration of a checkpoint of ``arch`` as fairseq saves it (cfg.model: the training
    arguments, an argparse.Namespace); ``arch`` transformer_lm_san: a language model's."""
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    args = build_lm()[1] if arch == "transformer_lm_san" else parse_args(arch, TINY)
    return convert_namespace_to_omegaconf(args)


def override(cfg, overrides):
    """What load_checkpoint_to_cpu does with --model-overrides (through the plugin's check)."""
    from fairseq import checkpoint_utils

    checkpoint_utils.overwrite_args_by_name(cfg, overrides)


@pytest.mark.parametrize(
    "overrides, said",
    [
        ({"decoder_layerz": 3}, "unknown option 'decoder_layerz' .*did you mean 'decoder_layers'"),
        ({"zzqx": 1}, "unknown option 'zzqx' .*fairseq would ignore it; check its spelling"),
        # a decoder option, which a checkpoint of --task translation does not hold: the hint
        # named the deprecated model option san_fast_decoding
        ({"san_decodin": "static"}, "unknown option 'san_decodin' .*did you mean 'san_decoding'"),
        ({"encoder_layers": "6"}, r"encoder_layers '6' .*is of type str, but encoder_layers takes an"
                                  r" int \(this checkpoint has \{'encoder_layers': 2\}\)"),
        ({"encoder_layers": True}, "encoder_layers True .*is of type bool, but .*takes an int"),
        ({"encoder_embed_dim": 16.0}, "encoder_embed_dim 16.0 .*is of type float, but .*an int"),
        ({"dropout": "high"}, "dropout 'high' .*is of type str, but dropout takes a number"),
        ({"no_scale_embedding": "False"}, "no_scale_embedding 'False' .*takes True or False"),
        ({"activation_fn": "swish"}, "activation_fn 'swish' .*valid values: relu, gelu"),
        ({"model": {"dropout": 0.2}}, r"model \{'dropout': 0.2\} .*fairseq does not read this "
                                      r"checkpoint's model options from a dict.*\{'dropout': 0.2\}"),
        ({"task": {"_name": "translation_san", "sourc_lang": "en"}},
         "unknown option 'task.sourc_lang' .*did you mean 'task.source_lang'"),
        ({"encoder_layers": {"value": 3}}, "encoder_layers {'value': 3} .*is of type dict"),
        ({"dropout": 1.5}, r"dropout 1.5 .*is out of range: it must be in \[0, 1\]"),
        ({"decoder_attention_heads": 0},
         "decoder_attention_heads 0 .*is out of range: it must be an integer of at least 1"),
        ({"decoder_embed_dim": 2**63}, "decoder_embed_dim 9223372036854775808 .*is out of range: "
                                       "it must be an integer of at least 1, at most "
                                       "9223372036854775807"),
        ({"activation_fn": "rel"}, "activation_fn 'rel' .*valid values: relu, gelu, gelu_fast, "
                                   r"gelu_accurate, tanh, linear; did you mean 'relu'\?$"),
        # fairseq's own options of a few values: set unchecked, the hub loaded without a word
        ({"log_format": "jsn"}, "^log_format 'jsn' .*is not valid; valid values: json, none, "
                                r"simple, tqdm; did you mean 'json'\?$"),
        ({"ddp_backend": "c10"}, r"^ddp_backend 'c10' .*valid values: .*did you mean 'c10d'\?$"),
    ],
    ids=["misspelt", "unknown", "misspelt decoder option", "text for int", "bool for int",
         "float for int", "text for float", "text for switch", "outside choices", "model as a dict",
         "misspelt in a group", "dict for int", "dropout out of range", "no heads",
         "beyond 64 bits", "misspelt choice", "fairseq's choices", "fairseq's misspelt choice"],
)  # fmt: skip
def test_an_override_fairseq_would_ignore_or_fail_on_is_refused(overrides, said):
    from fairseq_san.errors import UsageError

    with pytest.raises(UsageError, match=said):
        override(checkpoint_configuration(), overrides)


def test_fairseqs_own_choices_are_taken_as_overrides():
    """The values of fairseq's options that take one of a few are taken, None too."""
    cfg = checkpoint_configuration()
    override(cfg, {"log_format": "json", "ddp_backend": "c10d", "zero_sharding": "os",
                   "dataset_impl": None})  # fmt: skip
    assert (cfg.common.log_format, cfg.distributed_training.ddp_backend) == ("json", "c10d")


@pytest.mark.parametrize("arch", ["transformer_san", "transformer_lm_san"])
def test_a_checkpoints_own_decoder_options_give_way_to_the_loading_command(arch):
    """fairseq saves a legacy model's configuration as its whole training command line: trained
    with --eval-bleu --san-decoding static (validation decoding), the checkpoint carried static
    to every command that loaded it, which then refused every other decoding. Loaded, the
    checkpoint's decoder options are the defaults; --model-overrides still sets them."""
    from fairseq_san.options import DECODER_OPTIONS

    trained = {"san_decoding": "static", "san_decoder": "static",
               "san_decoder_precision": "int8", "san_decoder_execution": "fixed"}  # fmt: skip
    for overrides, decoding in (({}, "fairseq"), ({"san_decoding": "fast"}, "fast")):
        cfg = checkpoint_configuration(arch)
        for name, value in trained.items():
            setattr(cfg.model, name, value)
        override(cfg, overrides)
        loaded = {option.name: getattr(cfg.model, option.name) for option in DECODER_OPTIONS}
        defaults = {option.name: option.default for option in DECODER_OPTIONS}
        assert loaded == {**defaults, "san_decoding": decoding}


@pytest.mark.parametrize(
    "overrides",
    [
        {"dropout": 0, "encoder_layers": 3, "share_all_embeddings": True,
         "activation_dropout": 0.1},
        {"share_all_embeddings": 1, "no_scale_embedding": 0},  # as Python reads them
        {"beam": 3, "data": "elsewhere", "max_tokens": None},  # generation, task, dataset
        {"bpe": "sentencepiece", "sentencepiece_model": "spm.model"},  # a component switched on
        {"task": {"_name": "translation_san", "san_analysis_dir": "js"}},  # a group replaced
        {"generation_args": {"beam": 2}},  # from_pretrained reads it after loading
        {"san_policy": {"decoder_self": [1, 5]}},  # the hub's keyword (policy.load_policy)
    ],
    ids=["model", "0 and 1 for switches", "other groups", "component", "group", "hub keyword",
         "policy as a dict"],
)  # fmt: skip
def test_overrides_fairseq_applies_are_applied(overrides):
    cfg = checkpoint_configuration()
    override(cfg, overrides)
    for key, value in overrides.items():
        assert getattr(cfg.model, key) == value  # dicts too (it asserted only the others)
        if key in cfg and isinstance(value, dict):  # a group (task): replaced by the dict
            assert {name: cfg[key][name] for name in value} == value


def test_flat_overrides_of_a_group_given_as_a_dict_are_applied_too():
    """fairseq-validate DATA --sample-break-mode eos --model-overrides "{'task': {...}}" (the
    plugin's hint for --san-analysis-dir): fairseq set only the dict's keys on the task, so it
    validated the checkpoint's own data and mode; the dict's own keys still win."""
    cfg = checkpoint_configuration("transformer_lm_san")
    cfg.task.sample_break_mode = "none"
    task = {"_name": "language_modeling_san", "san_analysis_dir": "js", "tokens_per_sample": 9}
    override(cfg, {"data": "elsewhere", "sample_break_mode": "eos", "tokens_per_sample": 5,
                   "dropout": 0.3, "task": task})  # fmt: skip
    assert (cfg.task.data, cfg.task.sample_break_mode) == ("elsewhere", "eos")
    assert (cfg.task.san_analysis_dir, cfg.task.tokens_per_sample) == ("js", 9)
    assert cfg.model.dropout == 0.3 and "dropout" not in cfg.task  # the model's alone


@pytest.mark.parametrize(
    "overrides",
    [
        {"base_shuffle": False},  # its trained value, though the option is declared an int
        {"max_source_positions": 2048},  # fairseq-generate --lm-path: the translation overrides
        {"decoder_self_attention_type": "dot"},  # left to the model (check_no_translation_options)
    ],
)
def test_a_language_models_overrides_fairseq_applies_are_applied(overrides):
    cfg = checkpoint_configuration("transformer_lm_san")
    override(cfg, overrides)
    assert vars(cfg.model).items() >= overrides.items()


@pytest.mark.parametrize(
    "overrides, said",
    [
        ({"bpe": {"_name": "sentencepiece", "sentencepiece_model": "spm.model"}},
         "bpe {'_name': 'sentencepiece', 'sentencepiece_model': 'spm.model'} (from "
         "--model-overrides or a keyword argument): this checkpoint has no bpe, and fairseq "
         "switches one on by its name only, not from a dict, with its options as keys of their "
         "own: {'bpe': 'sentencepiece', 'sentencepiece_model': 'spm.model'}"),
        ({"tokenizer": {"moses_source_lang": "en"}}, "tokenizer {'moses_source_lang': 'en'} (from "
         "--model-overrides or a keyword argument): this checkpoint has no tokenizer, and fairseq "
         "switches one on by its name only, not from a dict, with its options as keys of their "
         "own: {'tokenizer': NAME, 'moses_source_lang': 'en'}"),
        ({"path": "x.pt", "tokenizer": {"_name": "moses"},
          "model_overrides": "{'tokenizer': {'_name': 'moses'}}"},
         "tokenizer {'_name': 'moses'} (from --model-overrides or a keyword argument): this "
         "checkpoint has no tokenizer, and fairseq switches one on by its name only, not from a "
         "dict, with its options as keys of their own: {'tokenizer': 'moses'}"),
        ({1: 2}, "key 1 (from --model-overrides or a keyword argument) is of type int: options "
         "are named by text, e.g. {'dropout': 0.1}"),
        ({"task": {("a",): 2}}, "key ('a',) in task (from --model-overrides or a keyword "
         "argument) is of type tuple: options are named by text, e.g. {'dropout': 0.1}"),
    ],
    ids=["bpe", "tokenizer without a name", "fairseq-validate's", "int key", "tuple key in group"],
)  # fmt: skip
def test_an_override_fairseq_fails_on_with_a_type_error_is_refused(overrides, said):
    """A dict for a component the checkpoint has none of: ``TypeError: unhashable type: 'dict'``
    in fairseq's overwrite_args_by_name (it looks the dict up in the registry); a key that is no
    text: ``TypeError: 'int' object is not iterable`` from the hint's difflib."""
    from fairseq_san.errors import UsageError

    cfg = checkpoint_configuration()
    with pytest.raises(UsageError) as refused:
        override(cfg, overrides)
    assert str(refused.value) == said
    assert cfg.bpe is None and cfg.tokenizer is None


def test_overrides_of_other_models_checkpoints_are_left_to_fairseq():
    cfg = checkpoint_configuration("transformer")
    override(cfg, {"decoder_layerz": 3})
    assert cfg.model.decoder_layerz == 3


def test_encdec_share_weights_without_encdec_sharing_is_a_warning(caplog):
    """Not an error: the loop passes the same flags to every iteration, the first unshared; and
    only when trained: the checkpoint's model, rebuilt to decode, says nothing."""
    warning = "--san-encdec-share weights has no effect"
    for policy in ([], ["--san-decoder-encdec-policy", "1,1,1,1,1,1"]):
        caplog.clear()
        _, args = build(["--san-encdec-share", "weights", *policy])
        assert warning in caplog.text
    caplog.clear()
    build_model(args)  # the arguments a checkpoint saved
    build(["--san-encdec-share", "weights", "--san-decoder-encdec-policy", "3,3"])
    build(["--san-decoder-encdec-policy", "1,1,1,1,1,1"])
    assert warning not in caplog.text


@pytest.mark.slow
def test_decoder_in_model_overrides_is_refused_with_the_flag_that_works(binarized_corpus, trained):
    result = run_cli(
        "fairseq-generate", str(binarized_corpus),
        "--user-dir", "fairseq_san", "--task", "translation_san",
        "--path", str(trained["san"] / "checkpoint_last.pt"),
        "--gen-subset", "test", "--beam", "1", "--batch-size", "32", "--cpu", "--sampling",
        "--model-overrides", "{'san_decoder': 'static'}",
    )  # fmt: skip
    assert_one_line_error(result, "san_decoder 'static'", "Pass --san-decoding static")
    assert "H-0" not in result.stdout


@pytest.mark.parametrize(
    "model, task, refused",
    [
        ({"san_decoder": "static"}, {}, "--san-decoding static"),  # deprecated: its replacement
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


@pytest.mark.slow
def test_left_padded_targets_score_as_right_padded_ones_under_sharing(
    binarized_corpus, trained, tmp_path
):
    """``--left-pad-target``: a padding query at a target's start sees padding only; the
    block's first layer's softmax made its row NaN, which the following layer's values spread
    to every position (loss nan), where fairseq's attention gives 0 (the unshared model scored
    as without the flag). The analysis, which reads fairseq's weights (NaN rows, spread the
    same way), refused them as "no distribution" of a real position: refused up front."""
    losses = []
    for extra in ([], ["--left-pad-target"]):
        result = validate(binarized_corpus, trained["san"] / "checkpoint_last.pt", *extra)
        assert result.returncode == 0, result.stderr[-3000:]
        losses.append(re.search(r"\| loss (\S+) \|", result.stdout + result.stderr).group(1))
    assert losses[0] == losses[1] and losses[0] != "nan", losses
    analysed = validate(binarized_corpus, trained["san"] / "checkpoint_last.pt",
                        "--left-pad-target", "--san-analysis-dir", str(tmp_path / "js"))  # fmt: skip
    assert_one_line_error(analysed, "--left-pad-target with --san-analysis-dir: the analysis "
                          "reads fairseq's attention weights")  # fmt: skip


# --- resuming training without the policy flags ---------------------------------------------


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


@pytest.mark.slow
def test_resume_under_a_policy_that_shares_more_is_refused_without_an_optimizer_state(
    binarized_corpus, trained, tmp_path
):
    """Resumed under more sharing, a run without a saved optimizer state
    (``--no-save-optimizer-state``) dropped the checkpoint's unused projections and trained on
    under the new policy, exit 0; with ``--reset-optimizer`` it does so, logged."""
    save_dir = tmp_path / "resume"
    shutil.copytree(trained["san"], save_dir)
    flags = ["--task", "translation_san", "--no-save-optimizer-state",
             "--san-decoder-self-policy", "6"]  # fmt: skip
    argv = train_argv(binarized_corpus, save_dir, max_update=UPDATES + 2, extra=flags)
    line = assert_one_line_error(run_cli("fairseq-train", *argv), "it would drop the "
                                 "projections of decoder.layers.1.self_attn", "--san-policy")
    assert line.endswith("to train this policy from it, start a new run with "
                         "--finetune-from-model (or --reset-optimizer to go on in this run from "
                         "its weights)")  # fmt: skip
    restarted = run_cli("fairseq-train", *argv, "--reset-optimizer")
    output = restarted.stdout + restarted.stderr
    assert restarted.returncode == 0, output[-3000:]
    assert "--reset-optimizer trains on from its weights under this policy" in output


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


# --- fail before the expensive step ----------------------------------------------------------


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


# --- --san-analysis-dir on a checkpoint trained with --task translation --------------


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


# --- what differs between a checkpoint and the model ---------------------------------------


@pytest.mark.parametrize(
    "trained_arch, trained_flags, model_arch, said",
    [
        ("transformer_san", ["--decoder-self-attention-type", "aan"], "transformer_san",
         "decoder self-attention is aan (the average attention network) but this model's is dot"),
        ("transformer_san", ["--decoder-self-attention-type", "aan",
                             "--san-decoder-encdec-policy", "3,3"], "transformer_san",
         "decoder self-attention is aan"),
        ("transformer_san", [], "transformer_aan_small",
         "decoder self-attention is dot (dot-product attention) but this model's is aan"),
    ],
)  # fmt: skip
def test_another_decoder_self_attention_type_is_named(
    trained_arch, trained_flags, model_arch, said
):
    from fairseq_san.policy import PolicyError

    trained, _ = build(trained_flags, arch=trained_arch)
    model, _ = build(arch=model_arch)
    with pytest.raises(PolicyError, match=re.escape(said)) as error:
        model.load_state_dict(trained.state_dict())
    assert "more attention sharing" not in str(error.value)
    rebuilt, _ = build(flags_in(str(error.value)), arch=model_arch)
    rebuilt.load_state_dict(trained.state_dict())  # strict: every parameter, nothing dropped
    assert rebuilt.state_dict().keys() == trained.state_dict().keys()


@pytest.mark.parametrize("policy", ["3,3", "6"])
def test_another_encdec_share_mode_is_named(policy):
    """Also beside a policy that shares more than the checkpoint's ({6} of {3,3}), which its
    projections serve: the refusal named the policy's blocks, "other borders", and advised a
    policy like the one given."""
    from fairseq_san.policy import PolicyError

    trained, _ = build(["--san-decoder-encdec-policy", "3,3"])  # shares the output A
    model, _ = build(["--san-decoder-encdec-policy", policy, "--san-encdec-share", "weights"])
    with pytest.raises(PolicyError) as error:
        model.load_state_dict(trained.state_dict())
    message = str(error.value)
    assert "shares the encoder-decoder attention output (--san-encdec-share output)" in message
    assert "only its weights (--san-encdec-share weights)" in message
    assert "more attention sharing" not in message and "other borders" not in message
    rebuilt, _ = build(flags_in(message))
    rebuilt.load_state_dict(trained.state_dict())
    shared_more, _ = build(["--san-decoder-encdec-policy", policy])  # the share mode left out
    shared_more.load_state_dict(trained.state_dict(), strict=False)


@pytest.mark.parametrize(
    "option, value, valid",
    [
        ("san_encdec_share", "both", "output, weights"),
        ("decoder_self_attention_type", "average", "dot, aan"),
    ],
)
def test_a_value_outside_an_options_choices_is_refused(option, value, valid):
    """--model-overrides and the hub's keywords bypass argparse's choices."""
    from fairseq_san.errors import UsageError

    args = parse_args("transformer_san", TINY + ["--san-decoder-encdec-policy", "3,3"])
    setattr(args, option, value)
    with pytest.raises(UsageError, match=f"{option} '{value}' .*valid values: {valid}$"):
        build_model(args)


def test_a_translation_model_in_a_language_modelling_task_is_refused():
    """fairseq-eval-lm on a translation checkpoint, or fairseq-train --task language_modeling_san
    --arch transformer_san, failed with an AttributeError (supported_targets) deep in fairseq."""
    from fairseq.tasks.language_modeling import LanguageModelingTask

    from fairseq_san.errors import UsageError
    from fairseq_san.models.transformer_san import TransformerSANModel

    class StandInLanguageModelingTask(LanguageModelingTask):
        def __init__(self):  # what build_model reads of a task is never reached
            pass

    task = StandInLanguageModelingTask()
    with pytest.raises(UsageError, match="^transformer_san is a translation model .encoder and "
                       "decoder., and the task StandInLanguageModelingTask models language: train "
                       "a language model with --arch transformer_lm_san"):  # fmt: skip
        TransformerSANModel.build_model(parse_args("transformer_san", TINY), task)


def test_fairseqs_translation_model_in_a_language_modelling_task_is_refused():
    """fairseq-eval-lm of a checkpoint of fairseq's own --arch transformer (the plugin loaded)
    failed with the same AttributeError (supported_targets) deep in fairseq's task."""
    from fairseq.tasks.language_modeling import LanguageModelingTask

    from fairseq_san.errors import UsageError

    class StandInLanguageModelingTask(LanguageModelingTask):
        def __init__(self):  # what build_model reads of a task is never reached
            pass

    task = StandInLanguageModelingTask()
    with pytest.raises(UsageError, match="^transformer is a translation model .encoder and "
                       "decoder., and the task StandInLanguageModelingTask models language"):
        task.build_model(parse_args("transformer", TINY))


class StandInTranslationTask(StandInTask):
    """A stand-in task with fairseq's ``-s``/``-t`` in its configuration."""

    def __init__(self, source_lang, target_lang):
        super().__init__(make_dictionary())
        self.cfg = argparse.Namespace(source_lang=source_lang, target_lang=target_lang)


def test_a_model_records_the_language_pair_it_was_built_for():
    from fairseq_san.models.transformer_san import TransformerSANModel

    args = parse_args("transformer_san", TINY)
    TransformerSANModel.build_model(args, StandInTranslationTask("en", "de"))
    assert args.language_pair == ["en", "de"]
    TransformerSANModel.build_model(args, StandInTranslationTask("en", "de"))  # the same pair
    assert args.language_pair == ["en", "de"]


@pytest.mark.parametrize(
    "trained, asked",
    [(["en", "de"], ("de", "en")), (["pt-br", "en"], ("en", "pt-br"))],  # fairseq takes pt-br
)
def test_a_checkpoint_asked_for_the_reverse_direction_is_refused(trained, asked):
    """On joined dictionaries (the recipes') fairseq decoded -s de -t en with an En->De
    checkpoint silently: German read as English."""
    from fairseq_san.errors import UsageError
    from fairseq_san.models.transformer_san import TransformerSANModel

    args = parse_args("transformer_san", TINY)
    args.language_pair = trained
    source, target = trained
    with pytest.raises(UsageError) as refused:
        TransformerSANModel.build_model(args, StandInTranslationTask(*asked))
    assert str(refused.value) == (
        f"this checkpoint was trained to translate {source} into {target} (its "
        f"cfg.model.language_pair), and the task asks for {target} into {source}: give "
        f"-s {source} -t {target} (source_lang='{source}', target_lang='{target}' to "
        "from_pretrained or in a fairseq-san-bench system's JSON)"
    )


def test_another_language_pair_than_the_reverse_is_logged(caplog):
    from fairseq_san.models.transformer_san import TransformerSANModel

    args = parse_args("transformer_san", TINY)
    args.language_pair = ["en", "de"]
    TransformerSANModel.build_model(args, StandInTranslationTask("src", "tgt"))
    assert "this checkpoint was trained on en->de, the task reads src->tgt" in caplog.text
    assert args.language_pair == ["en", "de"]


@pytest.mark.parametrize("value", ["en-de", ["en"], 3])
def test_a_language_pair_override_that_is_no_pair_is_one_line(value):
    from fairseq_san.errors import UsageError
    from fairseq_san.models.transformer_san import TransformerSANModel

    args = parse_args("transformer_san", TINY)
    args.language_pair = value
    with pytest.raises(UsageError, match=r"^language_pair .* \(from the checkpoint, --model-"
                       r"overrides or a keyword argument\) is no language pair: give \['SOURCE', 'TARGET'\], "
                       "or None to decode in either direction$"):  # fmt: skip
        TransformerSANModel.build_model(args, StandInTranslationTask("en", "de"))


@pytest.mark.parametrize(
    "task", [StandInTask(make_dictionary()), StandInTranslationTask("de", "en")]
)
def test_a_checkpoint_without_a_recorded_pair_decodes_in_either_direction(task):
    """Checkpoints made before the pair was recorded (or with --model-overrides
    "{'language_pair': None}"), and tasks without languages."""
    from fairseq_san.models.transformer_san import TransformerSANModel

    args = parse_args("transformer_san", TINY)
    args.language_pair = None
    TransformerSANModel.build_model(args, task)
    recorded = ["de", "en"] if isinstance(task, StandInTranslationTask) else None
    assert args.language_pair == recorded


@pytest.mark.slow
def test_generate_in_the_reverse_direction_is_one_line(binarized_corpus, trained):
    """fairseq infers the pair from the data's file names (src-tgt) and keeps it out of the
    checkpoint's task configuration; the model records it."""
    checkpoint = trained["plain"] / "checkpoint_last.pt"
    result = fairseq_generate(binarized_corpus, checkpoint, "-s", "tgt", "-t", "src")
    assert_one_line_error(result, "trained to translate src into tgt", "give -s src -t tgt")


@pytest.mark.parametrize(
    "given, said",
    [
        ({"source_lang": "tgt"}, "-s tgt (source_lang='tgt') without -t: fairseq reads the "
         "language pair from the data's file names where one is missing (src->tgt in {data}) "
         "and would have ignored -s; give -t too (target_lang)"),
        ({"target_lang": "xx"}, "-t xx (target_lang='xx') without -s: fairseq reads the "
         "language pair from the data's file names where one is missing (src->tgt in {data}) "
         "and would have ignored -t; give -s too (source_lang)"),
        ({"source_lang": "src"}, None),  # the data's own: kept
        ({"source_lang": "tgt", "target_lang": "src"}, None),  # both: fairseq reads them
    ],
)
def test_a_language_given_alone_that_the_data_would_override_is_refused(
    binarized_corpus, given, said
):
    """fairseq read the pair from the data's file names whenever one language was missing:
    ``-s tgt`` alone decoded src->tgt silently (fairseq-generate, fairseq-train, the hub)."""
    from fairseq.tasks.translation import TranslationConfig, TranslationTask

    from fairseq_san.errors import UsageError

    cfg = TranslationConfig(data=str(binarized_corpus), **given)
    if said is None:
        task = TranslationTask.setup_task(cfg)
        assert (task.cfg.source_lang, task.cfg.target_lang) == (
            given["source_lang"], given.get("target_lang", "tgt"),
        )  # fmt: skip
        return
    with pytest.raises(UsageError) as refused:
        TranslationTask.setup_task(cfg)  # the plugin's translation_san inherits it
    assert str(refused.value) == said.format(data=binarized_corpus)


@pytest.mark.slow
def test_generate_with_a_source_language_alone_is_one_line(binarized_corpus, trained):
    checkpoint = trained["plain"] / "checkpoint_last.pt"
    result = fairseq_generate(binarized_corpus, checkpoint, "-s", "tgt")
    assert_one_line_error(result, "-s tgt (source_lang='tgt') without -t", "give -t too")


def test_a_language_model_in_a_translation_task_is_refused():
    """fairseq-generate on translation data with a language model's checkpoint: the sizes of
    the embeddings differed, which read as "other dictionaries"."""
    from fairseq.tasks.translation import TranslationTask

    from fairseq_san.errors import UsageError
    from fairseq_san.models.transformer_lm_san import TransformerLMSANModel

    _, args = build_lm()

    class StandInTranslationTask(TranslationTask):
        def __init__(self):  # what build_model reads of a task is never reached
            pass

    with pytest.raises(UsageError, match="^transformer_lm_san is a language model .a decoder "
                       "only., and the task StandInTranslationTask translates: use --task "
                       "language_modeling_san"):  # fmt: skip
        TransformerLMSANModel.build_model(args, StandInTranslationTask())


def test_a_language_model_option_on_a_translation_model_is_refused():
    """--model-overrides "{'san_self_share': 'kv'}" on a translation checkpoint would be ignored."""
    from fairseq_san.errors import UsageError

    args = parse_args("transformer_san", TINY)
    args.san_self_share = "kv"
    with pytest.raises(UsageError, match="^san_self_share 'kv' is an option of transformer_lm_san"):
        build_model(args)


@pytest.mark.parametrize(
    "trained_vocabulary, said",
    [
        (24, "the checkpoint is a language model (a decoder only), and this model is a translation "
         "model (an encoder and a decoder): restore or fine-tune from a translation checkpoint; to "
         "train the checkpoint's model on, pass --task language_modeling_san --arch "
         "transformer_lm_san"),
        (30, "the checkpoint is a language model"),  # not "other dictionaries"
    ],
)  # fmt: skip
def test_a_language_model_checkpoint_in_a_translation_model_is_named(trained_vocabulary, said):
    """fairseq-train --arch transformer_san --restore-file (or --finetune-from-model) of a
    language model's checkpoint read as "other dictionaries" or "more attention sharing"."""
    from fairseq_san.errors import UsageError

    trained, _ = build_lm(dictionary=make_dictionary(trained_vocabulary))
    model, _ = build()
    with pytest.raises(UsageError) as error:
        model.load_state_dict(trained.state_dict())
    assert str(error.value).startswith(said)


def test_a_translation_checkpoint_in_a_language_model_is_named():
    """The reverse was fairseq's "please ensure that the architectures match" traceback."""
    from fairseq_san.errors import UsageError

    trained, _ = build()
    model, _ = build_lm()
    with pytest.raises(UsageError) as error:
        model.load_state_dict(trained.state_dict())
    assert str(error.value) == (
        "the checkpoint is a translation model (an encoder and a decoder), and this model is a "
        "language model (a decoder only): restore or fine-tune from a language model's "
        "checkpoint; to train the checkpoint's model on, pass --task translation_san --arch "
        "transformer_san"
    )


# --- tracebacks where one line is promised -------------------------------------------------------


def test_checkpoint_of_another_vocabulary_names_the_dictionary_sizes():
    from fairseq_san.errors import UsageError

    trained, _ = build(dictionary=make_dictionary(30))
    model, _ = build(dictionary=make_dictionary(24))
    with pytest.raises(UsageError) as error:
        model.load_state_dict(trained.state_dict())
    message = str(error.value)
    assert "source 30 (data: 24), target 30 (data: 24)" in message
    assert "use the dictionaries the model was trained with" in message


def test_language_model_checkpoint_of_another_vocabulary_names_the_dictionary_size():
    """Not torch's "size mismatch for decoder.embed_tokens.weight" traceback."""
    from fairseq_san.errors import UsageError

    trained, _ = build_lm(dictionary=make_dictionary(30))
    model, _ = build_lm(["--san-decoder-self-policy", "6"], dictionary=make_dictionary(24))
    with pytest.raises(UsageError) as error:
        model.load_state_dict(trained.state_dict())
    assert str(error.value).startswith(
        "the checkpoint was trained with other dictionaries than the data's: entries per "
        "dictionary target 30 (data: 24); use the dictionaries the model was trained with"
    )


def test_policy_given_as_a_dict_is_that_policy():
    """The hub's natural form: from_pretrained(..., san_policy={"decoder_self": [1, 5]})."""
    as_json, json_args = build(["--san-policy", '{"decoder_self": [1, 5]}'])
    args = parse_args("transformer_san", TINY)
    args.san_policy = {"decoder_self": [1, 5]}
    as_dict = build_model(args)
    assert args.san_policy == json_args.san_policy  # the checkpoint stores it as JSON text
    assert as_dict.state_dict().keys() == as_json.state_dict().keys()


@pytest.mark.parametrize("value", [[1, 5], 6])
def test_policy_of_another_type_names_the_accepted_ones(value):
    from fairseq_san.policy import PolicyError

    args = parse_args("transformer_san", TINY)
    args.san_policy = value
    with pytest.raises(PolicyError, match="expected a JSON file, JSON text or a dict like"):
        build_model(args)


def analysis_task(tmp_path: Path):
    from fairseq_san.tasks.translation_san import TranslationSANConfig, TranslationSANTask

    config = TranslationSANConfig(data=str(tmp_path), san_analysis_dir=str(tmp_path / "js"))
    return TranslationSANTask(config, make_dictionary(), make_dictionary())


def test_analysis_of_a_checkpoint_trained_with_eval_bleu_leaves_the_bleu_out(tmp_path, caplog):
    """fairseq-validate keeps the checkpoint's task, whose --eval-bleu built a generator with
    the model, which the analysis refused ("a command that decodes"): the learn-to-share loop
    stopped at the analysis of any run trained with --eval-bleu."""
    from fairseq_san.tasks.translation_san import TranslationSANConfig, TranslationSANTask

    config = TranslationSANConfig(data=str(tmp_path), san_analysis_dir=str(tmp_path / "js"),
                                  eval_bleu=True, eval_bleu_args='{"beam": 2}')  # fmt: skip
    task = TranslationSANTask(config, make_dictionary(), make_dictionary())
    with caplog.at_level(logging.INFO, logger="fairseq_san.tasks.attention_analysis"):
        task.build_model(parse_args("transformer_san", TINY))
    assert not task.cfg.eval_bleu and not hasattr(task, "sequence_generator")
    assert "the checkpoint's --eval-bleu left out (no BLEU computed)" in caplog.text


def test_analysis_of_a_second_subset_is_a_usage_error(tmp_path):
    from fairseq_san.errors import UsageError

    task = analysis_task(tmp_path)
    task._analysed_subset = "valid"  # as after the analysis of the first subset was written
    with pytest.raises(UsageError, match="one subset per run: 'valid' is written, 'test' would"):
        task.load_dataset("test")


@pytest.mark.parametrize(
    "options, said",
    [
        (["--eval-bleu-args", "notjson"], "--eval-bleu-args 'notjson' is not JSON (Expecting "
         "value: line 1 column 1 (char 0)): e.g. '{\"beam\": 4}'"),
        (["--eval-bleu-detok-args", "[1]"], "--eval-bleu-detok-args '[1]': it must be a JSON "
         "object, e.g. '{\"moses_no_escape\": true}'"),
        # a RecursionError and Python's digit limit (a ValueError), as tracebacks
        (["--eval-bleu-args", '{"beam": ' + "[" * 5000 + "]" * 5000 + "}"], "--eval-bleu-args "
         "'{\"beam\": " + "[" * 71 + "...' nests too deeply to be JSON: e.g. '{\"beam\": 4}'"),
        (["--eval-bleu-args", '{"beam": 1' + "0" * 5000 + "}"], "--eval-bleu-args '{\"beam\": 1"
         + "0" * 70 + "...' is not JSON (Exceeds the limit (4300 digits) for integer string "
         "conversion: value has 5001 digits)"),
        (["--eval-bleu-args", '{"bema": 2}'], "unknown generation option 'bema' (a key of "
         "--eval-bleu-args): did you mean 'beam'?"),
        (["--eval-bleu-args", '{"san_policy": "{}"}'], "san_policy in --eval-bleu-args is no "
         "generation option: pass --san-policy to fairseq-train itself"),
        (["--eval-bleu-args", '{"beam": 2, "san_decoding": "static"}'], None),
        (["--fp16", "--san-decoding", "static", "--san-decoder-precision", "bf16"],
         "--san-decoder-precision bf16 for --eval-bleu with --fp16: fairseq-train trains the "
         "model in half precision, and the static decoder converts a float32 model only; leave "
         "--san-decoder-precision out (it decodes in the model's own precision)"),
        (["--bf16", "--eval-bleu-args", '{"san_decoding": "static", "san_decoder_precision": '
          '"int8"}'], "--san-decoder-precision int8 for --eval-bleu with --bf16: fairseq-train"),
        (["--fp16", "--san-decoding", "static"], None),  # decodes the half-precision model
        (["--memory-efficient-fp16", "--san-decoding", "static", "--san-decoder-precision",
          "int8"], "--san-decoder-precision int8 for --eval-bleu with --memory-efficient-fp16: "),
    ],
    ids=["not JSON", "not an object", "too deep", "too many digits", "misspelt", "model option",
         "good", "fp16 and bf16",
         "bf16 and int8 in the args", "fp16 alone", "the flag given named"],
)  # fmt: skip
def test_eval_bleu_options_are_checked_as_fairseq_train_parses_them(options, said):
    """fairseq-train read them with json.loads (a traceback) and set each key of
    --eval-bleu-args unchecked: {"bema": 2} decoded validation BLEU at the default beam. Not
    where a checkpoint that keeps them loads (fairseq-validate, the hub): nothing decodes there."""
    from fairseq import options as fairseq_options

    from fairseq_san.errors import UsageError
    from fairseq_san.tasks.translation_san import TranslationSANConfig, TranslationSANTask

    argv = ["data", "--arch", "transformer_san", "--task", "translation_san", "--eval-bleu"]
    parser = fairseq_options.get_training_parser()
    if said is None:
        fairseq_options.parse_args_and_arch(parser, argv + options)
        return
    with pytest.raises(UsageError) as refused:
        fairseq_options.parse_args_and_arch(parser, argv + options)
    assert str(refused.value).startswith(said)
    dictionary = make_dictionary()
    config = TranslationSANConfig(eval_bleu=True, eval_bleu_args='{"bema": 2}')
    TranslationSANTask(config, dictionary, dictionary)  # a checkpoint's task: not checked


@pytest.mark.parametrize(
    "options, said",
    [
        (["--eval-bleu-args", "beam=4"], "--eval-bleu-args 'beam=4' is not JSON (Expecting "),
        (["--eval-bleu-args", '{"bema": 2}'], "unknown generation option 'bema' (a key of "
         "--eval-bleu-args): did you mean 'beam'?"),
        (["--eval-bleu-args", '{"san_decoding": "static"}'], "san_decoding in --eval-bleu-args: "
         "--task translation validates with fairseq's generator, which reads no decoder option "
         "of the plugin; train with --task translation_san"),
        (["--eval-bleu-args", '{"beam": 2}'], None),
    ],
)  # fmt: skip
def test_eval_bleu_options_of_fairseqs_translation_task_are_checked_too(options, said):
    """With --task translation, fairseq-train failed on json.loads (a traceback from deep in its
    task) and decoded validation BLEU ignoring a misspelt key or a decoder option of the plugin."""
    from fairseq import options as fairseq_options

    from fairseq_san.errors import UsageError

    argv = ["data", "--arch", "transformer_san", "--task", "translation", "--eval-bleu", *options]
    parser = fairseq_options.get_training_parser()
    if said is None:
        assert fairseq_options.parse_args_and_arch(parser, argv).eval_bleu_args == options[1]
        return
    with pytest.raises(UsageError) as refused:
        fairseq_options.parse_args_and_arch(parser, argv)
    assert str(refused.value).startswith(said)


@pytest.mark.parametrize(
    "metric, said",
    [
        ("blue", "--best-checkpoint-metric blue: the validation logs no blue (it logs loss, "
         "nll_loss, ppl, bleu); did you mean '--best-checkpoint-metric bleu'?"),
        ("accuracy", "--best-checkpoint-metric accuracy: the validation logs no accuracy (it "
         "logs loss, nll_loss, ppl, bleu); pick one of them"),
        ("nll_loss", None),
        ("num_updates", None),  # get_valid_stats adds it, and fairseq takes it
    ],
)  # fmt: skip
def test_a_best_checkpoint_metric_the_validation_does_not_log_is_one_line(metric, said):
    """fairseq-train failed with KeyError: 'blue' after the first epoch had trained."""
    import fairseq_cli.train
    from omegaconf import OmegaConf

    from fairseq_san.errors import UsageError
    from fairseq_san.fairseq_fixes import command_options

    command_options.install()  # as fairseq-train has it: its module was imported first
    cfg = OmegaConf.create({"checkpoint": {"best_checkpoint_metric": metric,
                                           "maximize_best_checkpoint_metric": False}})
    trainer = argparse.Namespace(get_num_updates=lambda: 4)
    stats = {"loss": 4.5, "nll_loss": 4.4, "ppl": 21.1, "bleu": 0.3}
    if said is None:
        assert fairseq_cli.train.get_valid_stats(cfg, trainer, stats, False)["num_updates"] == 4
        return
    with pytest.raises(UsageError) as refused:
        fairseq_cli.train.get_valid_stats(cfg, trainer, stats, False)
    assert str(refused.value) == said


def test_analysis_in_training_is_a_usage_error(tmp_path):
    from fairseq_san.errors import UsageError

    with pytest.raises(UsageError, match="--san-analysis-dir is for fairseq-validate"):
        analysis_task(tmp_path).train_step(None, None, None, None, 0)


def test_analysis_in_a_command_that_decodes_is_a_usage_error(tmp_path):
    """fairseq-generate and fairseq-interactive build a generator and never run valid_step."""
    from fairseq_san.errors import UsageError

    model = build(dictionary=make_dictionary())[0]
    with pytest.raises(UsageError, match="^--san-analysis-dir is for fairseq-validate: a command "
                       "that decodes would ignore it$"):  # fmt: skip
        analysis_task(tmp_path).build_generator([model], argparse.Namespace(beam=1))


@pytest.mark.parametrize("option", ["san_analysis_save_sentences", "san_analysis_log_interval"])
def test_a_negative_analysis_count_is_a_usage_error(tmp_path, option):
    """A negative log interval logged nothing, without a word."""
    from fairseq_san.errors import UsageError
    from fairseq_san.tasks.translation_san import TranslationSANConfig, TranslationSANTask

    config = TranslationSANConfig(data=str(tmp_path), **{option: -2})
    flag = "--" + option.replace("_", "-")
    with pytest.raises(UsageError, match=f"^{flag} -2: must be 0 or more$"):
        TranslationSANTask(config, make_dictionary(), make_dictionary())


@pytest.mark.slow
def test_analysis_of_two_subsets_is_one_line_before_any_is_analysed(
    binarized_corpus, trained, tmp_path
):
    """It was refused at the second subset, after the first had been analysed and written."""
    result = validate(
        binarized_corpus, trained["san"] / "checkpoint_last.pt",
        "--san-analysis-dir", str(tmp_path / "js"), "--valid-subset", "valid,test",
    )  # fmt: skip
    assert_one_line_error(
        result, "--san-analysis-dir analyses one subset per run, and --valid-subset valid,test "
        "names 2: run fairseq-validate once per subset"
    )  # fmt: skip
    assert not (tmp_path / "js").exists()


NOT_UTF8 = b"tok1 tok2 \xff tok3\n"


def test_interactive_input_that_is_not_utf8_is_named(tmp_path, monkeypatch):
    import io

    from fairseq_cli.interactive import buffered_read

    from fairseq_san.errors import UsageError
    from fairseq_san.fairseq_fixes.interactive_input import strict_utf8

    path = tmp_path / "latin1.txt"
    path.write_bytes(NOT_UTF8)
    with pytest.raises(UsageError, match=rf"--input {path} is not UTF-8 text \(byte 0xff"):
        list(strict_utf8(buffered_read)(str(path), 100))
    # the locale's surrogateescape would turn the byte into an unknown word, silently
    stdin = io.TextIOWrapper(io.BytesIO(NOT_UTF8), encoding="utf-8", errors="surrogateescape")
    monkeypatch.setattr("sys.stdin", stdin)
    with pytest.raises(UsageError, match=r"standard input is not UTF-8 text \(byte 0xff"):
        list(strict_utf8(buffered_read)("-", 100))
    # gzip-compressed: "byte 0x8b" and latin1 advice before
    packed = tmp_path / "input.txt.gz"
    packed.write_bytes(gzip.compress("ein Mann .\n".encode("utf-8")))
    with pytest.raises(UsageError) as refused:
        list(strict_utf8(buffered_read)(str(packed), 100))
    assert str(refused.value) == (
        f"--input {packed} is gzip-compressed; fairseq-interactive reads plain UTF-8 text: "
        f"decompress it first (zcat {packed} | fairseq-interactive ... --input -)"
    )


def test_interactive_input_drops_a_byte_order_mark(tmp_path, monkeypatch):
    """A UTF-8 byte-order mark at the start of --input or standard input (a file saved by a
    Windows editor): fairseq kept it in the first word, translated as <unk> without a word.
    One later in the input is text, and is kept."""
    import io

    from fairseq_cli.interactive import buffered_read

    from fairseq_san.fairseq_fixes.interactive_input import strict_utf8

    text = "\ufeff tok1 tok2\n\ufefftok3\ntok4\n".encode("utf-8")
    path = tmp_path / "windows.txt"
    path.write_bytes(text)
    stdin = io.TextIOWrapper(io.BytesIO(text), encoding="utf-8")
    monkeypatch.setattr("sys.stdin", stdin)
    for source in (str(path), "-"):
        for size, buffers in ((1, [["tok1 tok2"], ["\ufefftok3"], ["tok4"]]),
                              (2, [["tok1 tok2", "\ufefftok3"], ["tok4"]])):  # fmt: skip
            if source == "-":
                stdin.seek(0)
            assert list(strict_utf8(buffered_read)(source, size)) == buffers


def test_interactive_input_from_a_closed_standard_input_is_one_line(monkeypatch):
    """fairseq-interactive started with standard input closed (``<&-``: Python's sys.stdin is
    None) ended in an AttributeError traceback of None's reconfigure."""
    from fairseq_cli.interactive import buffered_read

    from fairseq_san.errors import UsageError
    from fairseq_san.fairseq_fixes.interactive_input import strict_utf8

    monkeypatch.setattr("sys.stdin", None)
    with pytest.raises(UsageError, match=r"^standard input is closed \(the command was started "
                       r"without one\): give the sentences on it, or --input FILE$"):  # fmt: skip
        next(strict_utf8(buffered_read)("-", 1))


@pytest.mark.slow
@pytest.mark.parametrize(
    "source, program",
    [("stdin", ["fairseq-interactive"]), ("--input", ["fairseq-interactive"]),
     ("stdin", ["python", "-m", "fairseq_cli.interactive"])],
    ids=["stdin", "--input", "python -m, stdin"],
)  # fmt: skip
def test_interactive_on_input_that_is_not_utf8_is_one_line(
    binarized_corpus, trained, tmp_path, source, program
):
    path = tmp_path / "latin1.txt"
    path.write_bytes(NOT_UTF8)
    argv = [
        str(command_path(program[0])), *program[1:], str(binarized_corpus), "--user-dir",
        "fairseq_san", "--path", str(trained["plain"] / "checkpoint_last.pt"), "--cpu",
    ]  # fmt: skip
    with open(path, "rb") as stdin:
        result = subprocess.run(
            argv + (["--input", str(path)] if source == "--input" else []),
            stdin=stdin, cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=240,
        )  # fmt: skip
    named = "standard input" if source == "stdin" else f"--input {path}"
    assert_one_line_error(result, f"{named} is not UTF-8 text")
    assert "H-0" not in result.stdout


@pytest.mark.slow
def test_interactive_refuses_a_constraint_of_an_unknown_word(binarized_corpus, trained):
    """``--constraints`` with a word the target dictionary has not: fairseq forced <unk> into
    the translation (C-1 <unk>, exit 0). A known word's constraint is met as before."""
    argv = [str(command_path("fairseq-interactive")), str(binarized_corpus), "--user-dir",
            "fairseq_san", "--path", str(trained["plain"] / "checkpoint_last.pt"), "--cpu",
            "--beam", "4", "--constraints", "--buffer-size", "1"]  # fmt: skip
    text = "tok1 tok2 tok3\ttok2\ntok1 tok3\ttok1\tzzz-unknown\n"
    result = subprocess.run(argv, input=text, cwd=REPO, env=cli_env(), capture_output=True,
                            text=True, timeout=240)  # fmt: skip
    assert_one_line_error(
        result, "--constraints: a phrase of sentence S-1 holds a word that is not in the target "
        "dictionary, which fairseq would force into the translation as <unk>: give words of the "
        "target vocabulary (as --bpe and --tokenizer make them)"
    )  # fmt: skip
    assert "C-0\ttok2" in result.stdout and "<unk>" not in result.stdout


@pytest.mark.parametrize("buffer_size", ["1", "2", "3"])
def test_interactive_skips_a_too_long_line_and_goes_on(binarized_corpus, trained, buffer_size):
    """``--skip-invalid-size-inputs-valid-test`` with a line longer than the positions: where
    it was the only line of its buffer (the default ``--buffer-size 1``), the refusal of a batch
    of no sentence ended the command (exit 1), the lines after it never translated. Each line
    skipped is logged by its S-N, also beside lines translated in its buffer (``--buffer-size
    3``: only fairseq's warning said it, "sample ids=[0]" for S-3)."""
    argv = [str(command_path("fairseq-interactive")), str(binarized_corpus), "--user-dir",
            "fairseq_san", "--path", str(trained["plain"] / "checkpoint_last.pt"), "--cpu",
            "--beam", "2", "--max-source-positions", "6", "--skip-invalid-size-inputs-valid-test",
            "--buffer-size", buffer_size]  # fmt: skip
    too_long = "tok1 tok2 tok3 tok4 tok5 tok6 tok7\n"
    text = "tok1 tok2\ntok3\n" + too_long * 2 + "tok2 tok3\n"
    result = subprocess.run(argv, input=text, cwd=REPO, env=cli_env(), capture_output=True,
                            text=True, timeout=240)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    hypotheses = [line.split("\t")[0] for line in result.stdout.splitlines()
                  if line.startswith("H-")]  # fmt: skip
    assert hypotheses == ["H-0", "H-1", "H-4"]
    said = "longer than the model's positions, not translated"
    skipped = ["S-2 to S-3"] if buffer_size == "2" else ["S-2", "S-3"]
    assert [line.split(": ")[0].split(":")[-1] for line in result.stderr.splitlines()
            if said in line] == skipped  # fmt: skip
    # without the flag the line is named by its number in the input: fairseq's "sample #0" was
    # its place in the buffer (with the default --buffer-size 1, always #0)
    argv.remove("--skip-invalid-size-inputs-valid-test")
    result = subprocess.run(argv, input=text, cwd=REPO, env=cli_env(), capture_output=True,
                            text=True, timeout=240)  # fmt: skip
    named = "S-3" if buffer_size == "2" else "S-2"  # fairseq names the buffer's last of the two
    assert_one_line_error(result, f"Size of {named} is invalid (=(8, 0)) since max_positions=(6, ")


@pytest.mark.slow
@pytest.mark.parametrize("task", ["translation", "translation_san"])
def test_interactive_refuses_a_source_holding_a_special_symbol(binarized_corpus, trained, task):
    """``tok1 <pad> tok2``: fairseq read the typed <pad> as padding and translated "tok1 tok2"
    (the position masked out), exit 0; ``</s>`` ended the source there (its S- line hid it)."""
    argv = [str(command_path("fairseq-interactive")), str(binarized_corpus), "--user-dir",
            "fairseq_san", "--task", task, "--path", str(trained["plain"] / "checkpoint_last.pt"),
            "--cpu", "--beam", "2"]  # fmt: skip
    for typed, said in (("<pad>", "the dictionary's padding symbol, which fairseq reads as "
                         "padding and not as a word (left out, or generated in)"),
                        ("</s>", "the dictionary's end-of-sentence symbol, which fairseq reads "
                         "as a sentence's end there and not as a word")):  # fmt: skip
        result = subprocess.run(argv, input=f"tok1 tok2\ntok1 {typed} tok2\n", cwd=REPO,
                                env=cli_env(), capture_output=True, text=True, timeout=240)
        assert_one_line_error(result, f"an input holds {typed}, {said}: write it otherwise")
        assert "H-0" in result.stdout and "H-1" not in result.stdout


@pytest.mark.slow
def test_fairseq_generate_whose_output_cannot_be_written_ends_without_a_traceback(
    binarized_corpus, trained
):
    """``fairseq-generate ... | head -1``: a BrokenPipeError traceback from fairseq_cli/generate.py,
    now the quiet end of a Unix tool (the status of SIGPIPE); ``> /dev/full``: an OSError
    traceback, now one line."""
    import signal

    command = shlex.join([
        str(command_path("fairseq-generate")), str(binarized_corpus), "--user-dir", "fairseq_san",
        "--path", str(trained["plain"] / "checkpoint_last.pt"), "--cpu", "--gen-subset", "test",
        "--beam", "2", "--batch-size", "1",
    ])  # fmt: skip
    piped = subprocess.run(["bash", "-c", f"{command} | head -1; exit ${{PIPESTATUS[0]}}"],
                           cwd=REPO, env=cli_env(), capture_output=True, text=True,
                           timeout=240)  # fmt: skip
    assert piped.returncode == 128 + signal.SIGPIPE, piped.stderr[-3000:]
    assert "Traceback" not in piped.stderr and "Exception ignored" not in piped.stderr
    if os.path.exists("/dev/full"):
        full = subprocess.run(["bash", "-c", f"{command} > /dev/full"], cwd=REPO, env=cli_env(),
                              capture_output=True, text=True, timeout=240)  # fmt: skip
        assert_one_line_error(full, "cannot write the output: No space left on device")


@pytest.mark.slow
def test_generate_refuses_a_decoding_option_in_its_model_overrides(binarized_corpus, trained):
    """``--model-overrides "{'beam': 3}"`` set the stored configuration, and fairseq-generate
    decoded with its own --beam (test_bleu.sh's ``NAME=CKPT:{'beam': 3}``), without a word."""
    result = run_cli(
        "fairseq-generate", str(binarized_corpus), "--user-dir", "fairseq_san", "--path",
        str(trained["plain"] / "checkpoint_last.pt"), "--cpu", "--gen-subset", "test",
        "--model-overrides", "{'beam': 3}",
    )  # fmt: skip
    assert_one_line_error(
        result, "beam 3 (from --model-overrides) is a decoding option, which fairseq-generate "
        "takes from its own command line, not the checkpoint's: pass --beam instead"
    )  # fmt: skip


def usage_error(main, capsys, *argv: str) -> str:
    """The last line a console command's ``main`` wrote when it exited with status 2."""
    with pytest.raises(SystemExit) as exit:
        main(list(argv))
    assert exit.value.code == 2
    return capsys.readouterr().err.splitlines()[-1]


def plot_js(capsys, *argv: str) -> str:
    from fairseq_san.cli.plot_js import main

    return usage_error(main, capsys, *argv)


def write_analysis(directory: Path, matrix) -> str:
    directory.mkdir()
    text = json.dumps({"num_updates": 10, "decoder_self": matrix, "decoder_encdec": None})
    (directory / "js.json").write_text(text)
    return str(directory)


SQUARE = [[0.0, 0.1, 0.2], [0.1, 0.0, 0.3], [0.2, 0.3, 0.0]]


def test_a_figure_that_cannot_be_written_whole_leaves_the_last_one(tmp_path):
    """fairseq-san-plot-js saved straight onto -o: a full disk (here a file-size limit) left a
    truncated figure where the last whole one was; the figure is written whole or not at all."""
    import resource

    first = write_analysis(tmp_path / "step10", SQUARE)
    later = tmp_path / "step20"
    later.mkdir()
    (later / "js.json").write_text(json.dumps({"num_updates": 20, "decoder_self": SQUARE}))
    figure = tmp_path / "f.png"
    argv = [str(command_path("fairseq-san-plot-js")), first, str(later), "-o", str(figure),
            "--reference-layer", "1", "--layers", "2", "3"]  # fmt: skip
    drawn = subprocess.run(argv, cwd=REPO, env=cli_env(), capture_output=True, text=True)
    assert drawn.returncode == 0, drawn.stderr[-3000:]
    whole = figure.read_bytes()
    limit = len(whole) // 2

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    full = subprocess.run(argv, cwd=REPO, env=cli_env(), capture_output=True, text=True,
                          preexec_fn=small_files)  # fmt: skip
    assert full.stderr.strip().splitlines()[-1] == (
        f"fairseq-san-plot-js: error: cannot write {figure}: File too large"
    )
    assert figure.read_bytes() == whole and not (tmp_path / "f.png.tmp").exists()


@pytest.mark.parametrize(
    "matrix, said",
    [
        ([[0.0, 0.1], [0.1]], "decoder_self: JS matrix is not square: row 1 has 1 values"),
        ([[0.0, "x"], ["x", 0.0]], "decoder_self: JS matrix value [0][1] = 'x' is not a finite"),
        ("0.1", "decoder_self: JS matrix must be a non-empty list of rows"),
    ],
)
def test_plot_js_on_a_bad_matrix_is_one_line(tmp_path, capsys, matrix, said):
    analysis = write_analysis(tmp_path / "step10", matrix)
    line = plot_js(capsys, analysis, "-o", str(tmp_path / "f.png"),
                   "--reference-layer", "1", "--layers", "2")  # fmt: skip
    assert line.startswith("fairseq-san-plot-js: error: ") and said in line, line
    assert f"{analysis}/js.json" in line
    assert not (tmp_path / "f.png").exists()


@pytest.mark.parametrize("title", ["$\\foo$", "cost $5 and $6"])
def test_plot_js_draws_a_title_with_dollars_as_written(tmp_path, capsys, title):
    """A --title (or a recorded subset) with two "$" was set as mathematics by matplotlib, and
    one its mathtext cannot parse was a ValueError traceback; it is drawn as written."""
    import matplotlib

    from fairseq_san.cli.plot_js import main

    figure = tmp_path / "f.svg"
    with matplotlib.rc_context({"svg.fonttype": "none"}):  # text kept as text in the SVG
        main([write_analysis(tmp_path / "step10", SQUARE), "-o", str(figure), "--title", title,
              "--reference-layer", "1", "--layers", "2"])  # fmt: skip
    assert f">{title}<" in figure.read_text()


def test_plot_js_of_analyses_that_are_no_one_series_is_one_line(tmp_path, capsys):
    """Two analyses at one step (the same checkpoint twice, or two models) were stacked points;
    analyses of other subsets or of models of other sharing policies mixed; a layer asked for
    twice plotted every point twice, and one analysis given twice its points."""
    first = write_analysis(tmp_path / "step10", SQUARE)
    again = write_analysis(tmp_path / "again", SQUARE)
    unnamed = tmp_path / "step30"  # written before js.json named its subset: any
    unnamed.mkdir()
    (unnamed / "js.json").write_text(json.dumps({"num_updates": 30, "decoder_self": SQUARE}))
    later = tmp_path / "step20"
    later.mkdir()
    (later / "js.json").write_text(json.dumps({"num_updates": 20, "decoder_self": SQUARE,
                                               "subset": "test"}))  # fmt: skip
    out = ["-o", str(tmp_path / "f.png"), "--reference-layer", "1"]
    assert plot_js(capsys, first, again, *out, "--layers", "2") == (
        f"fairseq-san-plot-js: error: {first}/js.json and {again}/js.json are both at step 10: one "
        "analysis per training step (the same checkpoint twice?)"
    )
    (Path(first) / "js.json").write_text(json.dumps({"num_updates": 10, "decoder_self": SQUARE,
                                                    "subset": "valid"}))  # fmt: skip
    assert plot_js(capsys, first, str(unnamed), str(later), *out, "--layers", "2") == (
        f"fairseq-san-plot-js: error: {first}/js.json (subset valid) and {later}/js.json (subset "
        "test) are analyses of different subsets: take the analyses of the same sentences of one "
        "subset (one --san-analysis-max-sentences) and of models of one policy"
    )
    shared = {"decoder_self": [2]}  # a shared model's analysis
    (later / "js.json").write_text(json.dumps({"num_updates": 20, "decoder_self": SQUARE,
                                               "subset": "valid", "policy": shared}))  # fmt: skip
    (Path(first) / "js.json").write_text(json.dumps({"num_updates": 10, "decoder_self": SQUARE,
                                                    "subset": "valid", "policy": {}}))  # fmt: skip
    assert plot_js(capsys, first, str(unnamed), str(later), *out, "--layers", "2") == (
        f"fairseq-san-plot-js: error: {first}/js.json (policy {{}}) and {later}/js.json (policy "
        '{"decoder_self": [2]}) are analyses of different sharing policies: take the analyses of '
        "the same sentences of one subset (one --san-analysis-max-sentences) and of models of one "
        "policy"
    )  # a shared model's zeros drawn inside an unshared one's curve
    assert plot_js(capsys, first, *out, "--layers", "2", "3", "2") == (
        "fairseq-san-plot-js: error: --layers: layer 2 is given twice"
    )
    for twice in (first, f"{first}/"):  # the same analysis given twice was drawn twice
        assert plot_js(capsys, first, str(unnamed), twice, *out, "--layers", "2") == (
            f"fairseq-san-plot-js: error: {first}/js.json is given twice: one analysis per "
            "training step"
        )
    assert not (tmp_path / "f.png").exists()


@pytest.mark.parametrize(
    "output, said",
    [
        # said before any analysis is read, not after drawing
        ("no-folder/f.png", "-o {}: no folder {}/no-folder (create it first)"),
        ("a-folder.png", "-o {}: is a folder: name the figure to write"),
        ("", "-o {}: is empty: name the figure to write"),
        ("step10/js.json", "-o {}: is the input {}/step10/js.json: write the figure to another"),
        ("step10/js.txt", "-o {}: end the name in a figure format's extension"),
        ("step10/js.png", "-o {}: is the input {}/step10/js.png: write the figure to another"),
        ("figure", "-o {}: end the name in a figure format's extension (avif, eps"),
        ("figure.xyz", "-o {}: end the name in a figure format's extension"),
    ],
)
def test_plot_js_output_it_cannot_write_is_one_line(tmp_path, capsys, output, said):
    (tmp_path / "a-folder.png").mkdir()
    analysis = write_analysis(tmp_path / "step10", SQUARE)
    named_png = tmp_path / "step10" / "js.png"  # an analysis whose name is a figure's
    named_png.write_text((tmp_path / "step10" / "js.json").read_text())
    path = str(tmp_path / output) if output else ""
    line = plot_js(capsys, analysis, str(named_png), "-o", path, "--reference-layer", "1",
                   "--layers", "2", "3")  # fmt: skip
    assert line.startswith("fairseq-san-plot-js: error: " + said.format(path, tmp_path)), line
    assert not (tmp_path / "figure.png").exists()  # matplotlib's default format is not added
    assert json.loads(named_png.read_text())["decoder_self"] == SQUARE


def cpu_ranks(capsys, *argv: str) -> str:
    from fairseq_san.cli.cpu_ranks import main

    return usage_error(main, capsys, *argv)


@pytest.mark.parametrize(
    "program, said",
    [
        ("fairseq-trian", "command not found: fairseq-trian; did you mean 'fairseq-train'?"),
        ("zzqx-no-such-command", "command not found: zzqx-no-such-command"),
        ("{tmp}", "{tmp} is a directory, not a command"),
        ("{tmp}/notes.txt", "{tmp}/notes.txt is not executable"),
        ("{tmp}/fairseq-train", "no such file: {tmp}/fairseq-train"),
    ],
)
def test_cpu_ranks_command_that_cannot_start_is_one_line(tmp_path, capsys, program, said):
    (tmp_path / "notes.txt").write_text("not a program\n")
    program, said = program.format(tmp=tmp_path), said.format(tmp=tmp_path)
    line = cpu_ranks(capsys, "2", "--log-dir", str(tmp_path / "logs"), "--", program, "data")
    assert line == f"fairseq-san-cpu-ranks: error: {said}"
    assert not (tmp_path / "logs").exists()


def test_cpu_ranks_command_installed_off_path_is_said_so(tmp_path, capsys, monkeypatch):
    """It said "command not found: fairseq-train; did you mean 'fairseq-train'?"."""
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    line = cpu_ranks(capsys, "2", "--log-dir", str(tmp_path), "--", "fairseq-train", "data")
    assert line == ("fairseq-san-cpu-ranks: error: command not found: fairseq-train (not on PATH: "
                    "activate the environment of make setup)")  # fmt: skip


def test_cpu_ranks_log_that_cannot_be_written_is_one_line_before_any_rank_starts(
    tmp_path, capsys
):
    """Rank 0 was started before rank 1's log was opened: a traceback, and rank 0 left running
    (in a real run, waiting at the rendezvous for ever)."""
    logs, started = tmp_path / "logs", tmp_path / "rank-0-started"
    (logs / "rank-1.log").mkdir(parents=True)  # a log that cannot be opened, even by root
    rank = f"import pathlib; pathlib.Path({str(started)!r}).touch()"
    program = stand_in_fairseq_train(tmp_path / "bin", rank)
    line = cpu_ranks(capsys, "2", "--log-dir", str(logs), "--", str(program), "-a", "x")
    assert line == f"fairseq-san-cpu-ranks: error: {logs / 'rank-1.log'}: Is a directory"
    assert not started.exists()


def test_more_cpu_ranks_than_cores_is_one_line(tmp_path, capsys):
    """Each rank is a training process: a thousand of them started (and logged) without a word."""
    from fairseq_san.cores import available_cores

    cores = available_cores()
    line = cpu_ranks(capsys, str(cores + 1), "--log-dir", str(tmp_path / "logs"), "--", "true")
    assert line == (
        f"fairseq-san-cpu-ranks: error: {cores + 1} ranks on {cores} CPU cores: each rank is a "
        f"training process, and more than one per core only share them (slower, more memory); "
        f"pass at most {cores} (--update-freq trains the batch of more ranks)"
    )
    assert not (tmp_path / "logs").exists()


def test_cpu_ranks_log_dir_that_is_a_file_is_one_line(tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("a file\n")
    program = stand_in_fairseq_train(tmp_path / "bin", "")
    line = cpu_ranks(capsys, "2", "--log-dir", str(notes), "--", str(program), "--arch=x")
    assert line == f"fairseq-san-cpu-ranks: error: --log-dir {notes} is a file, not a directory"


@pytest.mark.parametrize(
    "command, said",
    [
        (["{generate}", "data"], "it runs fairseq-train only, not fairseq-generate: decode "
         "and validate in one process (each rank would decode a part of the data)"),
        (["{train}", "data", "--ddp-backend", "c10d"], "--ddp-backend: set by "
         "fairseq-san-cpu-ranks for its ranks; leave it out"),
        (["{train}", "data", "--distributed-world-size=4"], "--distributed-world-size: set by "
         "fairseq-san-cpu-ranks for its ranks; leave it out"),
        (["{train}", "data", "--bf16"], "--bf16: fairseq trains in bf16 on a TPU only, and the "
         "ranks train on the CPU (in fp32); leave it out"),
        (["{train}", "data", "--memory-efficient-fp16"], "--memory-efficient-fp16: fairseq's "
         "fp16 training needs a GPU, and the ranks train on the CPU (in fp32); leave it out"),
        # the recipe made its run dir, then each rank printed fairseq's refusal
        (["{train}", "data", "--amp"], "--amp: fairseq's automatic mixed precision needs a GPU, "
         "and the ranks train on the CPU (in fp32); leave it out"),
        (["{train}", "data", "--user-dir", "fairseq_san"], "fairseq-train needs --arch, the "
         "model to train (e.g. --user-dir fairseq_san --arch transformer_san_small; --user-dir "
         "loads the plugin's models)"),
        # refused for its missing --arch, as if the help needed one
        (["{train}", "--help"], "fairseq-train --help prints its options: run it alone, without "
         "fairseq-san-cpu-ranks (fairseq-san-cpu-ranks --help prints this tool's)"),
        # each rank printed fairseq's usage and its list of models, rank 1's quoted below
        (["{train}", "data", "-a", "transformer_san_small"], "--arch transformer_san_small is "
         "the plugin's model, which fairseq-train knows only with --user-dir: add --user-dir "
         "fairseq_san (fairseq-san-loop user-dir prints its path)"),
        (["{train}", "data", "--arch=transformer_lm_san"], "--arch transformer_lm_san is the "
         "plugin's model, which fairseq-train knows only with --user-dir: add --user-dir "
         "fairseq_san (fairseq-san-loop user-dir prints its path)"),
        (["{train}", "data", "-a=transformer_lm_san"], "--arch transformer_lm_san is the "
         "plugin's model, which fairseq-train knows only with --user-dir: add --user-dir "
         "fairseq_san (fairseq-san-loop user-dir prints its path)"),
        (["{train}", "data", "--user-dir", "fairseq_san", "--arch", "transformer_san", "--log-dir",
          "logs"], "--log-dir is fairseq-san-cpu-ranks' option, not fairseq-train's: give it "
         "before --"),
    ],
    ids=["generate", "ddp backend", "world size", "bf16", "memory-efficient fp16", "amp",
         "no arch", "help", "plugin arch, -a", "plugin arch, --arch=", "plugin arch, -a=",
         "log dir after --"],
)  # fmt: skip
def test_cpu_ranks_run_fairseq_train_alone_with_the_options_they_set(
    tmp_path, capsys, command, said
):
    """fairseq-generate's ranks each translated a part of the data, its BLEU that part's; the
    launcher's options silently overrode the user's; --bf16 failed in each rank's TPU set-up;
    without --arch, each rank printed fairseq's traceback of a RuntimeError without a message
    (the plugin's check of it runs only where --user-dir has loaded the plugin)."""
    program = stand_in_fairseq_train(tmp_path / "bin", "")
    generate = stand_in_fairseq_train(tmp_path / "bin", "", name="fairseq-generate")
    argv = [arg.format(train=program, generate=generate) for arg in command]
    line = cpu_ranks(capsys, "2", "--log-dir", str(tmp_path / "logs"), "--", *argv)
    assert line == f"fairseq-san-cpu-ranks: error: {said}"


def test_cpu_ranks_user_dir_that_is_not_there_is_one_line(tmp_path, capsys, monkeypatch):
    """--user-dir fairseq_san from another folder than the repository's: each rank printed
    fairseq's FileNotFoundError traceback (rank 1's in its log). The plugin's folder by its
    path is taken, and a folder where fairseq also looks (from the current folder, or in
    fairseq's package: its examples)."""
    started = tmp_path / "rank-started"
    program = stand_in_fairseq_train(tmp_path / "bin", f"open({str(started)!r}, 'a').close()")
    monkeypatch.chdir(tmp_path)
    train = [str(program), "data", "--arch", "transformer_san"]
    line = cpu_ranks(capsys, "1", "--", *train, "--user-dir", "fairseq_san")
    assert line == (
        f"fairseq-san-cpu-ranks: error: --user-dir fairseq_san: no such folder (from {tmp_path}): "
        "name the plugin's folder (fairseq-san-loop user-dir prints its path)"
    )
    assert not started.exists()
    from fairseq_san.cli.cpu_ranks import main, missing_user_dir

    assert main(["1", "--", *train, f"--user-dir={REPO / 'fairseq_san'}"]) == 0
    assert started.exists()
    (tmp_path / "plugin").mkdir()
    for found in ("plugin", "examples/linformer/linformer_src"):  # here; in fairseq's package
        assert missing_user_dir([str(program), "--user-dir", found]) is None, found
    (tmp_path / "plugin.py").write_text("")  # each rank: fairseq's ModuleNotFoundError
    assert missing_user_dir([str(program), "--user-dir", "plugin.py"]) == (
        f"--user-dir plugin.py: a file, not a folder (from {tmp_path}): name the plugin's folder "
        "(fairseq-san-loop user-dir prints its path)"
    )


def test_interrupting_cpu_ranks_is_one_line(tmp_path, monkeypatch, capsys):
    from fairseq_san.cli import cpu_ranks as launcher

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(launcher, "run_ranks", interrupted)
    monkeypatch.setattr(sys, "argv", [str(BIN / "fairseq-san-cpu-ranks")])
    program = stand_in_fairseq_train(tmp_path / "bin", "")
    with pytest.raises(SystemExit) as exit:
        launcher.main(["2", "--log-dir", str(tmp_path), "--", str(program), "-ax"])
    assert exit.value.code == 130
    assert capsys.readouterr().err == "fairseq-san-cpu-ranks: interrupted\n"


def test_a_stopped_rank_is_killed_after_the_grace(tmp_path):
    """A rank stopped (SIGSTOP) does not run its handler of the termination (fairseq-train's ranks
    exit cleanly on SIGTERM), and the launcher waited for ever."""
    import signal
    import time

    from fairseq_san.cli.cpu_ranks import stop

    handles_termination = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    rank = subprocess.Popen([sys.executable, "-c", handles_termination], stdout=subprocess.PIPE)
    assert rank.stdout.readline() == b"ready\n"
    rank.send_signal(signal.SIGSTOP)
    started = time.monotonic()
    stop([rank], grace=0.5)
    assert rank.returncode == -signal.SIGKILL and time.monotonic() - started < 10


@pytest.mark.parametrize(
    "size, said",
    [
        ("0", "--distributed-world-size 0: must be at least 1"),
        ("-1", "--distributed-world-size -1: must be at least 1"),
        ("2", "--distributed-world-size 2: fairseq-train starts one process per GPU, and this "
         "machine has 0; on CPUs, start the ranks with fairseq-san-cpu-ranks 2 -- fairseq-train "
         "... (the learn-to-share recipes: --cpu-ranks 2)"),
        ("3", "--distributed-world-size 3: fairseq-train starts one process per GPU, and this "
         "machine has 2; give at most 2, or start the ranks with torchrun (the learn-to-share "
         "recipes: --launcher) or --distributed-init-method"),
    ],
)  # fmt: skip
def test_a_world_size_fairseq_train_cannot_start_is_one_line(size, said, monkeypatch):
    """0 or below: no training process, exit 0; more ranks than GPUs: fairseq's assertion."""
    from fairseq_san.errors import UsageError

    for name in ("MASTER_ADDR", "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2 if size == "3" else 0)
    with pytest.raises(UsageError) as refused:
        parse_args("transformer_san", ["--cpu", "--distributed-world-size", size])
    assert str(refused.value) == said


def test_ranks_started_by_a_launcher_parse():
    """fairseq-san-cpu-ranks gives each rank the rendezvous (--distributed-init-method)."""
    from fairseq_san.cli.cpu_ranks import rank_command

    rank = rank_command([], 2, 1, "/tmp/rendezvous")
    assert parse_args("transformer_san", rank).distributed_world_size == 2


def torchrun_environment(monkeypatch, gpus: int, ranks: int, here: int) -> None:
    """The variables torchrun gives rank 1 of ``ranks``, ``here`` of them on this machine, which
    has ``gpus`` GPUs."""
    for name, value in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29500"), ("RANK", "1"),
                        ("WORLD_SIZE", str(ranks)), ("LOCAL_RANK", "1"),
                        ("LOCAL_WORLD_SIZE", str(here)),
                        ("TORCHELASTIC_RUN_ID", "none")):  # fmt: skip
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)


@pytest.mark.parametrize("given", [[], ["--distributed-world-size", "1"]], ids=["default", "1"])
def test_ranks_torchrun_started_on_one_gpu_train_as_one_job(given, monkeypatch):
    """At world size 1 (fairseq's default on one GPU) fairseq ignored torchrun: each rank trained
    alone as rank 0 into one --save-dir, until their checkpoint writes collided (seen on an
    H200: "checkpoint_2_100.pt.tmp: No such file or directory")."""
    from fairseq.distributed import utils as distributed_utils
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    torchrun_environment(monkeypatch, gpus=1, ranks=2, here=2)
    args = parse_args("transformer_san", ["--distributed-backend", "gloo", *given])
    assert args.distributed_world_size == 2
    training = convert_namespace_to_omegaconf(args).distributed_training
    distributed_utils.infer_init_method(training)  # fairseq's own reading of the rendezvous
    assert (training.distributed_init_method, training.distributed_rank) == ("env://", 1)
    assert (training.distributed_world_size, training.device_id) == (2, 0)


@pytest.mark.parametrize(
    "gpus, ranks, here, backend, said",
    [
        (0, 2, 2, "gloo", "torchrun started 2 ranks on a machine without GPUs, and fairseq-train "
         "puts each rank on a GPU; on CPUs, start the ranks with fairseq-san-cpu-ranks 2 -- "
         "fairseq-train ... (the learn-to-share recipes: --cpu-ranks 2)"),
        (1, 2, 2, "nccl", "torchrun started 2 ranks on a machine with 1 GPU: fairseq-train puts "
         "rank R on GPU R % 1, and NCCL (--distributed-backend nccl, fairseq's default) refuses "
         "two ranks on one GPU; start at most 1 a machine (--nproc_per_node), or pass "
         "--distributed-backend gloo"),
        (2, 6, 3, "nccl", "torchrun started 3 ranks on a machine with 2 GPUs: fairseq-train puts "
         "rank R on GPU R % 2, and NCCL (--distributed-backend nccl, fairseq's default) refuses "
         "two ranks on one GPU; start at most 2 a machine (--nproc_per_node), or pass "
         "--distributed-backend gloo"),
    ],
    ids=["no GPU", "nccl, 2 ranks on 1 GPU", "nccl, 3 ranks a machine on 2 GPUs"],
)  # fmt: skip
def test_ranks_torchrun_started_where_they_cannot_meet_are_one_line(
    gpus, ranks, here, backend, said, monkeypatch
):
    """Without GPUs fairseq divided by the GPUs' count (rank % 0) or, at world size 1, trained
    each rank alone; NCCL refuses two ranks on one GPU ("Duplicate GPU detected")."""
    from fairseq_san.errors import UsageError

    torchrun_environment(monkeypatch, gpus, ranks, here)
    backend_given = [] if backend == "nccl" else ["--distributed-backend", backend]
    with pytest.raises(UsageError) as refused:
        parse_args("transformer_san", ["--cpu"] * (gpus == 0) + backend_given)
    assert str(refused.value) == said


def test_one_rank_torchrun_started_trains_as_one_process(monkeypatch):
    """torchrun --nproc_per_node 1 with --distributed-world-size 2: fairseq took torchrun's rank
    and divided it by the GPUs' count, a ZeroDivisionError traceback on CPUs; one rank trains
    as one process, as fairseq's own reading of WORLD_SIZE 1 would have it."""
    from fairseq.distributed import utils as distributed_utils
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    torchrun_environment(monkeypatch, gpus=0, ranks=1, here=1)
    monkeypatch.setenv("RANK", "0")
    args = parse_args("transformer_san", ["--cpu", "--distributed-world-size", "2",
                                          "--distributed-backend", "gloo",
                                          "--ddp-backend", "legacy_ddp"])  # fmt: skip
    assert args.distributed_world_size == 1
    training = convert_namespace_to_omegaconf(args).distributed_training
    distributed_utils.infer_init_method(training)  # fairseq's own reading: none at size 1
    assert training.distributed_init_method is None


def test_torchruns_variables_left_in_the_environment_are_named(monkeypatch):
    """RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT exported in a shell (no torchrun: it sets
    TORCHELASTIC_RUN_ID beside them) made a one-process fairseq-train a rank, refused as
    "torchrun started 2 ranks": the variables are named, and how to train in one process."""
    from fairseq_san.errors import UsageError

    torchrun_environment(monkeypatch, gpus=0, ranks=2, here=2)
    monkeypatch.delenv("TORCHELASTIC_RUN_ID")
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    with pytest.raises(UsageError) as refused:
        parse_args("transformer_san", ["--cpu"])
    assert str(refused.value) == (
        "WORLD_SIZE=2 with RANK, MASTER_ADDR and MASTER_PORT in the environment, set by a "
        "launcher other than torchrun or left from one (unset them to train in one process), "
        "make 2 ranks on a machine without GPUs, and fairseq-train puts each rank on a GPU; on "
        "CPUs, start the ranks with fairseq-san-cpu-ranks 2 -- fairseq-train ... (the "
        "learn-to-share recipes: --cpu-ranks 2)"
    )


def test_ranks_torchrun_started_with_fairseqs_own_init_method_read_their_ranks(monkeypatch):
    """``--distributed-init-method env://``, what fairseq sets itself when it reads torchrun's
    variables: given, fairseq read neither RANK nor WORLD_SIZE, and every rank started as rank 0
    (a hang at the rendezvous, or each rank training alone)."""
    from fairseq.distributed import utils as distributed_utils
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    torchrun_environment(monkeypatch, gpus=1, ranks=2, here=2)
    args = parse_args("transformer_san", ["--distributed-init-method", "env://",
                                          "--distributed-no-spawn", "--distributed-backend",
                                          "gloo"])  # fmt: skip
    training = convert_namespace_to_omegaconf(args).distributed_training
    distributed_utils.infer_init_method(training)
    assert (training.distributed_init_method, training.distributed_rank) == ("env://", 1)
    assert training.distributed_world_size == 2


@pytest.mark.parametrize(
    "given, said",
    [
        (["--distributed-init-method", "tcp://127.0.0.1:1"],
         "--distributed-init-method tcp://127.0.0.1:1 without --distributed-no-spawn: "
         "fairseq-train then starts one process per GPU, and this machine has none (nothing "
         "would train); on CPUs, start the ranks with fairseq-san-cpu-ranks N -- fairseq-train "
         "..., or give each rank --distributed-no-spawn and its --distributed-rank"),
        (["--distributed-init-method", "file:///tmp/r", "--distributed-no-spawn",
          "--distributed-world-size", "2"],
         "--distributed-backend nccl (fairseq's default) needs GPUs, and these ranks train on "
         "CPUs: pass --distributed-backend gloo --ddp-backend legacy_ddp, or on CPUs, start the "
         "ranks with fairseq-san-cpu-ranks N -- fairseq-train ..."),
        (["--distributed-init-method", "file:///tmp/r", "--distributed-no-spawn",
          "--distributed-world-size", "2", "--distributed-backend", "gloo"],
         "--ddp-backend pytorch_ddp (fairseq's default) puts each rank's model on a GPU, and "
         "these ranks train on CPUs: pass --ddp-backend legacy_ddp, or on CPUs, start the ranks "
         "with fairseq-san-cpu-ranks N -- fairseq-train ..."),
    ],
    ids=["spawned on no GPU", "nccl", "pytorch_ddp"],
)  # fmt: skip
def test_ranks_started_by_hand_that_cannot_train_on_cpus_are_one_line(given, said, monkeypatch):
    """Without --distributed-no-spawn fairseq-train trained nothing and exited 0; fairseq's
    default backends failed in torch (no NCCL; DistributedDataParallel given a GPU's device_ids
    for a CPU model)."""
    from fairseq_san.errors import UsageError

    for name in ("MASTER_ADDR", "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    with pytest.raises(UsageError) as refused:
        parse_args("transformer_san", ["--cpu", *given])
    assert str(refused.value) == said
    from fairseq_san.cli.cpu_ranks import rank_command

    assert parse_args("transformer_san", rank_command([], 2, 1, "/tmp/r")).distributed_rank == 1


@pytest.mark.parametrize(
    "gpus, environment, given, world_size",
    [
        # a launcher that sets no LOCAL_WORLD_SIZE (Kubeflow, a hand-written Slurm script): two
        # machines of 8 GPUs
        (8, {"WORLD_SIZE": "16", "RANK": "9"}, ["--distributed-world-size", "16"], 16),
        # torchrun's ranks on CPUs, each given its rank, the world size and the CPU backends
        (0, {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_WORLD_SIZE": "2"},
         ["--cpu", "--distributed-init-method", "env://", "--distributed-no-spawn",
          "--distributed-rank", "1", "--distributed-world-size", "2", "--distributed-backend",
          "gloo", "--ddp-backend", "legacy_ddp"], 2),
        # fairseq's own spawning of CPU processes on a machine with GPUs (one per GPU)
        (2, {}, ["--cpu", "--distributed-init-method", "tcp://127.0.0.1:1",
                 "--distributed-world-size", "2", "--distributed-backend", "gloo",
                 "--ddp-backend", "legacy_ddp"], 2),
    ],
    ids=["no LOCAL_WORLD_SIZE", "torchrun's ranks on CPUs by hand", "CPU processes spawned"],
)  # fmt: skip
def test_launches_fairseq_runs_are_left_to_it(gpus, environment, given, world_size, monkeypatch):
    """What fairseq ran before the checks of torchrun's and CPU ranks still parses as given."""
    for name in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_WORLD_SIZE",
                 "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    if environment:
        monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
        monkeypatch.setenv("MASTER_PORT", "29500")
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    args = parse_args("transformer_san", given)
    assert args.distributed_world_size == world_size
    init = given[given.index("--distributed-init-method") + 1] if "--cpu" in given else None
    assert args.distributed_init_method == init


def test_model_parallel_training_without_megatron_is_one_line():
    """fairseq's ImportError traceback: its megatron submodule is not in its packages."""
    from fairseq_san.errors import UsageError

    with pytest.raises(UsageError) as refused:
        parse_args("transformer_san", ["--cpu", "--model-parallel-size", "2"])
    assert str(refused.value) == (
        "--model-parallel-size 2 needs fairseq's megatron submodule (fairseq/model_parallel/"
        "megatron, not in fairseq's packages), which this machine has not: leave it out"
    )


def test_ranks_torchrun_started_on_enough_gpus_keep_fairseqs_reading(monkeypatch):
    """Two machines of 2 GPUs, NCCL: fairseq's own path (the world size is torchrun's)."""
    torchrun_environment(monkeypatch, gpus=2, ranks=4, here=2)
    assert parse_args("transformer_san", []).distributed_world_size == 4


def bench_error(tmp_path: Path, *extra: str) -> str:
    """fairseq-san-bench's error for ``extra`` (over valid options), before any checkpoint loads."""
    from fairseq_san.cli.bench import main

    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    (data / "dict.src.txt").write_text("a 1\n")
    (data / "test.src-tgt.src.idx").write_bytes(b"")  # the subset is there
    argv = ["--data", str(data), "--system", f"a={tmp_path / 'a.pt'}",
            "--out-dir", str(tmp_path / "out"), "--repeats", "1", *extra]  # fmt: skip
    with pytest.raises(SystemExit) as exit:
        main(argv)
    return str(exit.value.code)


@pytest.mark.parametrize(
    "extra, said",
    [
        (["--threads", "0"], "--threads 0: must be at least 1"),
        (["--threads", "-1"], "--threads -1: must be at least 1"),
        # torch's "Overflow when unpacking long", or OpenMP aborting the process
        (["--threads", "99999999999"], "--threads 99999999999: more than the "
         f"{os.cpu_count()} processors of this machine"),
        (["--max-sentences", "0"], "--max-sentences 0: must be at least 1"),
        (["--fixed-length", "-5"], "--fixed-length -5: must be at least 1"),
        (["--table-beam", "0"], "--table-beam 0: must be at least 1"),
        (["--batch-size", "0"], "--batch-size 0: must be at least 1"),
        (["--beams", "4", "-2"], "--beams -2: beam sizes must be at least 1"),
        (["--cache-beams", "-1"], "--cache-beams -1: beam sizes must be at least 1"),
        (["--lenpen", "nan"], "--lenpen nan: must be a finite number"),
        (["--max-len-a", "inf"], "--max-len-a inf: must be a finite number"),
        (["--max-len-b", "-1"], "--max-len-a 0.0 --max-len-b -1: natural lengths stop at"),
        (["--max-len-a", "0", "--max-len-b", "0"], "a and b must be at least 0, and not both 0"),
        # int(a*x+b) of it: "OverflowError: int too large to convert to float", a traceback
        (["--max-len-b", "1" + "0" * 309], f"--max-len-b 1{'0' * 309}: beyond a float (a*x+b is "
         "computed in floats); give a smaller one"),
        (["--system", "a (CTranslate2 int8)={tmp}/a.pt"], "system 'a (CTranslate2 int8)': names "
         "ending in '(CTranslate2 TYPE)' are the benchmark's own CTranslate2 rows"),
        (["--system", "a|b={tmp}/a.pt"], "system 'a|b': a name may not hold '|' or a line break "
         "(the report's tables are Markdown)"),
        (["--beams", "1", "1"], "--beams: 1 is given twice"),
        (["--fp16", "--cpu"], "--fp16 is half precision on a GPU, and --cpu decodes on the CPU"),
        (["--modes", "natural", "natural"], "--modes: natural is given twice"),
        (["--cache-beams", "4", "20", "4"], "--cache-beams: 4 is given twice"),
        (["--baseline", "b"], "baseline 'b' is not one of the systems ['a']"),
        (["--system", "ab"], "system 'ab': expected NAME=CHECKPOINT[:OVERRIDES_JSON]"),
    ],
)
def test_bench_bad_values_are_usage_errors(tmp_path, capsys, extra, said):
    """Exit 2, as argparse's own errors and a malformed --system were: --beams 0 exited 1, the
    status of a problem in the files, data or models."""
    extra = [arg.format(tmp=tmp_path) for arg in extra]
    assert bench_error(tmp_path, *extra) == "2"
    error = capsys.readouterr().err.splitlines()[-1]
    assert error.startswith("fairseq-san-bench: error: ") and said in error, error


@pytest.mark.parametrize(
    "extra, said",
    [
        (["--spm", "{tmp}/none.model"], "--spm {tmp}/none.model: no such file"),
        (["--references", "{tmp}"], "--references {tmp}: is a directory"),
        (["--data", "{tmp}/nowhere"], "--data {tmp}/nowhere: no such directory"),
        (["--data", "{tmp}/notes.txt"], "--data {tmp}/notes.txt: a file, not a directory"),
        (["--data", "{tmp}"], "--data {tmp}: not a binarized data directory (no dict.*.txt"),
        (["--out-dir", "{tmp}/notes.txt"], "--out-dir {tmp}/notes.txt is a file, not a directory"),
        (["--subset", "test7"], "--subset test7: no such subset in {tmp}/data (it holds: test)"),
        (["--references", "{tmp}/notes.txt"], "--references {tmp}/notes.txt: without a "
         "sentencepiece model (--spm, DATA/spm.model) the hypotheses are the dictionary's tokens"),
        (["--references", "{tmp}/notes.txt", "--spm", "none"], "--references {tmp}/notes.txt: "
         "without a sentencepiece model"),
    ],
)
def test_bench_bad_paths_are_one_line(tmp_path, extra, said):
    (tmp_path / "notes.txt").write_text("a file\n")
    extra = [arg.format(tmp=tmp_path) for arg in extra]
    error = bench_error(tmp_path, *extra)
    assert error.startswith("fairseq-san-bench: error: ") and "\n" not in error
    assert said.format(tmp=tmp_path) in error, error


@pytest.mark.parametrize("flag", ["--out-dir", "--references", "--spm"])
def test_bench_empty_paths_are_refused(tmp_path, capsys, flag):
    """An unset variable: --out-dir "" wrote the results into the working folder, --references
    "" and --spm "" read as the option left out."""
    assert bench_error(tmp_path, flag, "") == "2"  # argparse's exit status
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"fairseq-san-bench: error: argument {flag}: is empty: name a path"
    )


def test_bench_option_errors_come_before_fairseq_logs_anything(tmp_path):
    """The options' checks ran after fairseq's import, whose INFO line ("Please install
    tensorboardX") came before every error."""
    argv = ["--data", str(tmp_path), "--system", f"a={tmp_path / 'a.pt'}", "--repeats", "0",
            "--out-dir", str(tmp_path / "out")]
    (tmp_path / "dict.src.txt").write_text("a 1\n")
    (tmp_path / "test.src-tgt.src.idx").write_bytes(b"")
    result = subprocess.run(
        [sys.executable, "-c", f"from fairseq_san.cli.bench import main; main({argv!r})"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2  # a usage error, as argparse's own
    assert result.stderr.splitlines()[-1] == (
        "fairseq-san-bench: error: --repeats 0: must be at least 1"
    )
    assert result.stderr.startswith("usage: fairseq-san-bench ") and "INFO" not in result.stderr


@pytest.mark.parametrize(
    "flags, said",
    [(["--fp16"], "--fp16 needs a GPU, and CUDA is not available"),
     (["--gpu"], "--gpu: CUDA is not available")],
)  # fmt: skip
def test_bench_without_a_gpu_is_refused_before_fairseq_imports(tmp_path, monkeypatch, flags, said):
    """--fp16 on a machine without a GPU was refused after fairseq's import (its log lines
    first) and the benchmark's run module: the device is checked with the options' files."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setitem(sys.modules, "fairseq_san.benchmark.run", None)  # importing it fails
    assert bench_error(tmp_path, *flags) == f"fairseq-san-bench: error: {said}"


def test_bench_sentencepiece_model_that_does_not_load_is_named(tmp_path):
    from fairseq_san.benchmark.data import Detokenizer

    garbage = tmp_path / "spm.model"
    garbage.write_text("not a model\n")
    with pytest.raises(ValueError, match=f"sentencepiece model {garbage} cannot be loaded"):
        Detokenizer(make_dictionary(), str(garbage))


def test_bench_references_may_come_through_a_pipe(tmp_path):
    """``--references <(zcat test.de.gz)`` was "no such file" (a pipe is no regular file); the
    references are read once, and a pipe read there gives them."""
    from fairseq_san.benchmark.config import readable_file
    from fairseq_san.benchmark.data import load_references

    pipe = tmp_path / "references"
    os.mkfifo(pipe)
    assert readable_file(str(pipe), pipe=True) and not readable_file(str(pipe), pipe=False)
    assert not readable_file(str(tmp_path), pipe=True)
    writer = threading.Thread(target=lambda: pipe.write_text("a\nb\nc\n"), daemon=True)
    writer.start()
    targets = {0: "a", 1: "b"}  # the binarized targets, detokenized
    assert load_references(str(pipe), StandInBatches(3, 2), targets) == ["a", "b"]
    writer.join(timeout=10)


class StandInBatches:
    """The part of the benchmark's Batches that reading references uses."""

    def __init__(self, sentences: int, benchmarked: int):
        self.dataset = [None] * sentences
        self.ids = list(range(benchmarked))


@pytest.mark.parametrize(
    "content, said",
    [
        (b"one\n" * 300, "has 300 lines but the subset has 20 sentences"),
        (b"one\n" * 3, "has 3 lines but the subset has 20 sentences"),
        (b"caf\xe9\n" * 20, "is not UTF-8 text (invalid continuation byte,"),
    ],
)
def test_bench_references_of_another_subset_are_refused(tmp_path, content, said):
    """A reference file longer than the subset is another subset's: its BLEU would be wrong."""
    from fairseq_san.benchmark.data import load_references

    path = tmp_path / "test.raw.tgt"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=re.escape(f"--references {path} {said}")):
        load_references(str(path), StandInBatches(20, 4), targets={})


def test_bench_output_folder_is_checked_before_anything_is_decoded(tmp_path):
    """A folder that cannot take the results failed after the whole benchmark had run, every
    measurement lost."""
    from fairseq_san.benchmark.run import writable_out_dir

    (tmp_path / "results.json").mkdir()
    with pytest.raises(ValueError) as refused:
        writable_out_dir(tmp_path)
    assert str(refused.value) == (
        f"--out-dir {tmp_path}: results.json there is a folder, where the results go"
    )
    (tmp_path / "notes.txt").write_text("a file\n")
    with pytest.raises(ValueError) as refused:
        writable_out_dir(tmp_path / "notes.txt" / "out")
    assert str(refused.value) == (
        f"--out-dir {tmp_path}/notes.txt/out: cannot make it (Not a directory)"
    )


def test_bench_natural_lengths_that_allow_no_token_are_refused():
    """--max-len-a 0.1 --max-len-b 0: fairseq's "min_len cannot be larger than max_len" in the
    worker, a traceback inside a traceback."""
    from fairseq_san.benchmark.config import BenchmarkConfig, DecodeOptions
    from fairseq_san.benchmark.run import check_natural_lengths

    batches = SimpleNamespace(samples=[
        {"net_input": {"src_lengths": torch.tensor(lengths)}} for lengths in ([3, 2], [9, 8])
    ])  # fmt: skip
    for a, b, allowed in ((0.1, 0, False), (0.34, 0, True), (0, 1, True)):
        decode = DecodeOptions(max_len_a=a, max_len_b=b)
        config = BenchmarkConfig(data="d", systems=[], out_dir="o", decode=decode)
        if allowed:
            check_natural_lengths(batches, config)
            continue
        with pytest.raises(ValueError) as refused:
            check_natural_lengths(batches, config)
        assert str(refused.value) == (
            "--max-len-a 0.1 --max-len-b 0: natural lengths allow no token for a batch whose "
            "longest source has 3 tokens (int(a*x+b) = 0); give a larger --max-len-b"
        )


def test_bench_natural_lengths_beyond_a_float_are_one_line():
    """--max-len-a 1e308: int(a*x+b) of infinity, an OverflowError traceback of the benchmark."""
    from fairseq_san.benchmark.config import BenchmarkConfig, DecodeOptions
    from fairseq_san.benchmark.run import check_natural_lengths

    batches = SimpleNamespace(samples=[
        {"net_input": {"src_lengths": torch.tensor(lengths)}} for lengths in ([3, 2], [9, 8])
    ])  # fmt: skip
    decode = DecodeOptions(max_len_a=1e308, max_len_b=6)
    config = BenchmarkConfig(data="d", systems=[], out_dir="o", decode=decode)
    with pytest.raises(ValueError) as refused:
        check_natural_lengths(batches, config)
    assert str(refused.value) == (
        "--max-len-a 1e+308 --max-len-b 6: a*x+b is beyond a float for a source of 9 tokens; "
        "give a smaller --max-len-a (a model decodes at most its positions anyway)"
    )
    config.decode.max_len_a = 2e307  # a float for the narrowest source (3), beyond it for 9
    with pytest.raises(ValueError, match=r"^--max-len-a 2e\+307 .* for a source of 9 tokens;"):
        check_natural_lengths(batches, config)
    config.decode.max_len_a, config.decode.max_len_b = 1.9e307, 10**307  # a*x a float, + b not
    with pytest.raises(ValueError, match=r"a\*x\+b is beyond a float for a source of 9 tokens;"):
        check_natural_lengths(batches, config)
    config.decode.max_len_a, config.decode.max_len_b = 1e300, 6  # large, but floats: capped at
    check_natural_lengths(batches, config)  # the model's positions

def test_a_bench_worker_that_died_is_one_line():
    """A worker killed mid-run: "[Errno 104] Connection reset by peer", or a RuntimeError's
    traceback while it loaded."""
    import multiprocessing

    from fairseq_san.benchmark.workers import Worker, WorkerDied

    worker = Worker.__new__(Worker)
    worker.engine = "fairseq"
    worker.conn, other_end = multiprocessing.Pipe()
    other_end.close()
    worker.process = SimpleNamespace(join=lambda timeout: None, exitcode=-9)
    for ask in (worker.receive, lambda: worker.call("base", "decode", (), {})):
        with pytest.raises(WorkerDied, match=r"^the fairseq worker died \(exit code -9\)$"):
            ask()


def test_bench_workers_stop_at_once_when_the_run_ends_early():
    """A SIGTERM to fairseq-san-bench left its workers decoding on their own (re-parented to
    init) until their request ended: now it ends the run as an interrupt does, and leaving the
    pool on an exception stops each worker without waiting for its request."""
    import multiprocessing
    import signal
    import time

    from fairseq_san.benchmark.workers import Worker, WorkerPool
    from fairseq_san.cli import exiting_on_termination

    worker = Worker.__new__(Worker)
    worker.engine = "fairseq"
    worker.conn, other_end = multiprocessing.Pipe()
    worker.process = multiprocessing.get_context("fork").Process(target=time.sleep, args=(60,))
    worker.process.start()
    pool = WorkerPool.__new__(WorkerPool)
    pool.workers = [worker]
    started = time.monotonic()
    with pytest.raises(SystemExit) as ended, pool, exiting_on_termination():
        os.kill(os.getpid(), signal.SIGTERM)
    assert ended.value.code == 128 + signal.SIGTERM
    assert not worker.process.is_alive() and time.monotonic() - started < 10
    other_end.close()


@pytest.mark.parametrize("content", [[1, 2, 3], {"model": 1, "cfg": "x"}])
def test_bench_file_that_is_no_checkpoint_is_one_line(tmp_path, content):
    """torch.save([1, 2, 3]): AttributeError: 'list' object has no attribute 'get'."""
    from fairseq_san.benchmark.config import BenchmarkConfig, SystemSpec
    from fairseq_san.benchmark.fairseq_system import check_translation

    path = tmp_path / "list.pt"
    torch.save(content, path)
    config = BenchmarkConfig(data=str(tmp_path), out_dir="o", systems=[SystemSpec("a", str(path))])
    with pytest.raises(ValueError, match=f"^system a: cannot load checkpoint {path}: its? "):
        check_translation(config)


@pytest.mark.slow
def test_bench_subset_without_its_target_side_is_one_line(binarized_corpus, san_checkpoint, tmp_path):
    """A subset binarized from its source side only: TypeError: 'NoneType' object is not
    subscriptable, in the parent."""
    data = tmp_path / "data"
    shutil.copytree(binarized_corpus, data)
    for target in data.glob("test.*.tgt.*"):
        target.unlink()
    result = run_cli("fairseq-san-bench", "--data", str(data), "--system", f"a={san_checkpoint}",
                     "--out-dir", str(tmp_path / "out"), "--cpu", "--no-ctranslate2", timeout=120)  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"fairseq-san-bench: error: --subset test of {data} has no target side (binarized "
        "without test.tgt): binarize it with its references"
    )


def loop_error(capsys, *argv: str) -> str:
    """The one line fairseq-san-loop wrote for bad input (exit status 2): no usage text, which
    is for a command line that does not parse."""
    from fairseq_san.cli.loop import main

    assert main(list(argv)) == 2
    (line,) = capsys.readouterr().err.splitlines()
    return line


def test_a_policy_file_fairseq_san_loop_cannot_read_is_one_line(tmp_path, capsys):
    """The loop prints an iteration's policy with ``show``: its usage text came first."""
    policy = tmp_path / "policy.json"
    policy.write_text('{"decoder_self": [1, 5],')
    assert loop_error(capsys, "show", str(policy)) == (
        f'fairseq-san-loop: error: policy file "{policy}": malformed JSON at line 1 column 25: '
        "Expecting property name enclosed in double quotes"
    )


def valid_record(updates: int, loss: str) -> str:
    """A fairseq-train ``valid`` line of the JSON progress bar."""
    fields = {"epoch": 1, "valid_loss": loss, "valid_num_updates": str(updates)}
    return f"2026-12-04 10:00:00 | INFO | valid | {json.dumps(fields)}\n"


def test_loop_train_log_takes_no_nan_for_the_best_loss(tmp_path):
    """A first validation loss of NaN (a diverged start) was the "best valid loss": min() keeps
    a NaN that comes first."""
    from fairseq_san.loop.train_log import read_train_log

    log = tmp_path / "train.log"
    log.write_text(valid_record(10, "nan") + valid_record(20, "9.0") + valid_record(30, "7.0"))
    facts = read_train_log(str(log))
    assert (facts["best_valid_loss"], facts["best_updates"]) == (7.0, 30)
    log.write_text(valid_record(10, "nan"))
    assert read_train_log(str(log))["best_valid_loss"] is None


def test_loop_outputs_that_are_their_inputs_are_refused(tmp_path, capsys):
    """``train-log train.log -o train.log`` and ``perplexity eval.log -o eval.log`` replaced the
    log with the table or the JSON (exit 0); a missing folder or an empty name was said after
    reading, in Python's words (": Is a directory")."""
    log = tmp_path / "train.log"
    log.write_text(valid_record(10, "7.0"))
    before = log.read_text()
    eval_log = tmp_path / "eval.log"
    eval_log.write_text("2026 | INFO | fairseq_cli.eval_lm | Loss (base 2): 5.0, Perplexity: 32\n")
    for argv, said in (
        (["train-log", str(log), "-o", str(log)], f"-o {log} is the input {log}: write the "
         "table to another file"),
        (["perplexity", str(eval_log), "-o", str(eval_log)], f"-o {eval_log} is the input "
         f"{eval_log}: write the JSON file to another file"),
        (["train-log", str(log), "-o", str(tmp_path / "no" / "t.md")], f"-o {tmp_path}/no/t.md "
         f"no folder {tmp_path}/no (create it first)"),
        (["perplexity", str(eval_log), "-o", ""], "-o  is empty: name the JSON file to write"),
    ):  # fmt: skip
        assert loop_error(capsys, *argv) == f"fairseq-san-loop: error: {said}"
    assert log.read_text() == before and "Perplexity" in eval_log.read_text()


def test_dash_opens_the_stream_and_is_said_as_given(tmp_path):
    """The file a command opens for "-" is /dev/stdin or /dev/stdout, named in every message as
    what the user gave: each command rewrote "/dev/stdin" in its error line (or did not)."""
    from fairseq_san.errors import file_error
    from fairseq_san.files import Stream, read_from, written_to

    stdin, stdout = read_from("-"), written_to("-")
    assert (stdin, stdout, read_from("a.txt")) == ("/dev/stdin", "/dev/stdout", "a.txt")
    assert f"{stdin} and {stdout:>16}" == "standard input and  standard output"
    with pytest.raises(OSError) as folder:
        open(Stream(str(tmp_path), "standard input"))
    assert file_error(folder.value) == "standard input: Is a directory"
    assert str(folder.value) == "[Errno 21] Is a directory: 'standard input'"
    for copied in (copy.copy(stdin), copy.deepcopy(stdin), pickle.loads(pickle.dumps(stdin))):
        assert (copied, f"{copied}") == ("/dev/stdin", "standard input")  # a TypeError


def test_a_closed_stream_is_named_closed_where_opening_it_is_a_bad_descriptor(monkeypatch):
    """Where /dev/stdin is a device of descriptors (macOS), "-" in a command started without
    standard input is EBADF, not ENOENT (``errors.closed_stream``): file_error said it closed and
    read_json "cannot be read (Bad file descriptor): give a JSON file"."""
    import errno

    from fairseq_san import files
    from fairseq_san.errors import UsageError

    stdin, stat = files.read_from("-"), os.stat

    def bad_descriptor(path, *args, **kwargs):
        if path is stdin:
            raise OSError(errno.EBADF, os.strerror(errno.EBADF), path)
        return stat(path, *args, **kwargs)

    monkeypatch.setattr(files.os, "stat", bad_descriptor)
    with pytest.raises(UsageError) as refused:
        files.read_json(stdin, "JS file")
    assert str(refused.value) == (
        'JS file "standard input" cannot be read: standard input is closed (the command was '
        "started without one): name a file"
    )


def test_a_list_of_files_names_dash_as_given(tmp_path):
    """A list of files joined into a line (fairseq-san-policy's warning of an ignored theta,
    fairseq-san-score's unpaired seeds) named "-" /dev/stdin: str.join writes the device."""
    from fairseq_san.files import listed, read_from

    assert listed([read_from("-"), "a.json"]) == "standard input, a.json"
    analysis = json.dumps({"decoder_self": [[0, 0.1], [0.1, 0]], "decoder_encdec": None,
                           "encoder_self": None})  # fmt: skip
    learned = run_cli("fairseq-san-policy", "-", "--theta-decoder-self", "0.5",
                      "--theta-encoder-self", "0.25", cwd=tmp_path, input=analysis)  # fmt: skip
    assert learned.returncode == 0, learned.stderr
    assert learned.stderr.splitlines() == [
        "fairseq-san-policy: warning: --theta-encoder-self 0.25 is ignored: the analysis has no "
        "encoder self-attention (encoder_self is null in standard input; a language model has no "
        "encoder)"
    ]


def test_loop_dash_is_standard_input_and_output(tmp_path):
    """``-`` as a log read a file named "-" (none: "No such file", or with ``-o -`` "-o - is the
    input -"), and ``-o -`` wrote the table or the JSON silently to a file named "-" in the
    working folder, as fairseq-san-score, -spm and -average did."""
    table = run_cli("fairseq-san-loop", "train-log", "-", "-o", "-", cwd=tmp_path,
                    input=valid_record(10, "7.0"))  # fmt: skip
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[-1].startswith("| standard input |")  # as given, not
    assert "/dev/stdin" not in table.stdout  # a name never typed
    scored = run_cli("fairseq-san-loop", "perplexity", "-", "-o", "-", cwd=tmp_path,
                     input="Evaluated 15 tokens in 2.1s\nLoss (base 2): 5.0, Perplexity: 32.00\n")
    assert scored.returncode == 0, scored.stderr
    assert json.loads(scored.stdout) == {"perplexity": 32.0, "loss_base2": 5.0, "tokens": 15}
    assert list(tmp_path.iterdir()) == []
    refused = run_cli("fairseq-san-loop", "perplexity", "-", "-o", "-", input="no scores\n")
    assert refused.stderr.startswith(  # named as given, not "/dev/stdin"
        "fairseq-san-loop: error: standard input: no 'Evaluated N tokens'"
    )


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_loop_output_on_a_full_device_is_named(tmp_path, capsys):
    """``train-log LOG -o /dev/full`` said "[Errno 28] No space left on device", naming no
    file."""
    log = tmp_path / "train.log"
    log.write_text(valid_record(10, "7.0"))
    assert loop_error(capsys, "train-log", str(log), "-o", "/dev/full") == (
        "fairseq-san-loop: error: /dev/full: No space left on device"
    )


def test_loop_show_of_a_run_dir_that_is_not_there_is_refused(tmp_path, capsys):
    """A mistyped --run-dir showed every kind (a language model's run shows one), exit 0."""
    assert loop_error(capsys, "show", '{"decoder_self": [2, 4]}', "--run-dir",
                      str(tmp_path / "nope")) == (  # fmt: skip
        f"fairseq-san-loop: error: --run-dir {tmp_path / 'nope'}: no such run directory"
    )


def test_a_lock_descriptor_that_is_not_open_is_one_line(tmp_path):
    """``start --lock-fd 99`` with nothing open on 99 said "[Errno 9] Bad file descriptor"."""
    from fairseq_san.loop.run_record import LOCK, RunError, lock_run

    lock = tmp_path / LOCK
    lock.touch()
    closed = os.open(os.devnull, os.O_RDONLY)
    os.close(closed)
    with pytest.raises(RunError) as refused:
        lock_run(str(tmp_path), closed)
    assert str(refused.value) == (
        f"--lock-fd {closed}: no file is open on it; the recipes open {lock} on it first "
        f"(exec {closed}>>{lock})"
    )
    with open(tmp_path / "other", "w") as other:
        with pytest.raises(RunError, match=f"file descriptor {other.fileno()} is not open on"):
            lock_run(str(tmp_path), other.fileno())


@pytest.mark.parametrize(
    "record, said",
    [
        ("{bad}", "JSONDecodeError: Expecting property name enclosed in double quotes"),
        ('{"epoch": 1}', "KeyError: 'valid_num_updates'"),
        ('{"epoch": 1, "x": ' + "[" * 5000 + "]" * 5000 + "}",
         "RecursionError: maximum recursion depth exceeded"),  # a traceback
        ("epoch 001 | loss 7.1 | wall 1" + "0" * 400 + " | num_updates 1" + "0" * 400,
         "OverflowError: cannot convert float infinity to integer"),
    ],
)
def test_loop_train_log_with_a_malformed_record_is_one_line(tmp_path, capsys, record, said):
    log = tmp_path / "train.log"
    log.write_text(f"2024 | INFO | fairseq_cli.train | start\n2024 | INFO | valid | {record}\n")
    line = loop_error(capsys, "train-log", str(log))
    expected = f"fairseq-san-loop: error: {log} line 2: not a fairseq-train valid record "
    assert line.startswith(expected + "(--log-format json or simple): " + said), line


def test_loop_train_log_of_a_file_that_is_not_a_training_log_is_one_line(tmp_path, capsys):
    log = tmp_path / "notes.txt"
    log.write_text("BLEU 35.2 after 4 minutes\n")
    line = loop_error(capsys, "train-log", str(log))
    assert line == (
        f"fairseq-san-loop: error: {log}: no fairseq-train record in it: not the log of "
        "fairseq-train --log-format json or simple (or a training stopped before its first "
        "update)"
    )


@pytest.mark.parametrize(
    "option, value, said",
    [
        ("--updates", "-5", "must be a whole number of at least 1"),
        ("--max-iterations", "0", "must be a whole number of at least 1"),
        ("--theta-self", "abc", "must be a number in [0, ln 2 = 0.6931]"),
        ("--theta-encdec", "0.8", "must be a number in [0, ln 2 = 0.6931]"),
        ("--theta-encoder", "nan", "must be a number in [0, ln 2 = 0.6931]"),
        ("--cpu-ranks", "two", "must be a whole number (0: one process)"),
        ("--post-process", "bogus",
         "must be one that fairseq-generate knows (sentencepiece, subword_nmt, none, ...)"),
    ],
)  # fmt: skip
def test_loop_start_checks_the_recipes_values(tmp_path, capsys, option, value, said):
    """Before anything is recorded or trained, even in a dry run (a bad theta would otherwise
    stop the loop after its first training)."""
    from fairseq_san.cli.loop import main

    run_dir = tmp_path / "run"
    code = main(["start", str(run_dir), "--data", str(tmp_path), option, value, "--", "--cpu"])
    assert code == 2
    assert capsys.readouterr().err.strip() == f"fairseq-san-loop: error: {option} {value}: {said}"
    assert not run_dir.exists()


def test_loop_start_checks_warm_updates_only_with_warm_start(tmp_path, capsys):
    from fairseq_san.cli.loop import main

    argv = ["start", str(tmp_path / "run"), "--data", str(tmp_path), "--updates", "1",
            "--warm-updates", "0", "--dry-run"]  # fmt: skip
    main(argv)
    assert "--warm-updates" not in capsys.readouterr().err
    assert main([*argv, "--warm-start"]) == 2
    assert "--warm-updates 0: must be a whole number of at least 1" in capsys.readouterr().err


def test_a_folder_where_a_file_is_read_is_one_line(tmp_path, capsys, monkeypatch):
    """fairseq-interactive --input DIR: an IsADirectoryError traceback before."""
    from fairseq_san.fairseq_fixes.one_line_errors import excepthook

    error = IsADirectoryError(21, "Is a directory", str(tmp_path))
    monkeypatch.setattr("sys.argv", ["fairseq-interactive", "DATA", "--input", str(tmp_path)])
    excepthook(lambda *args: print("Traceback", file=sys.stderr))(type(error), error, None)
    said = f"{tmp_path}: Is a directory (a folder, where the command needs a file)"
    assert capsys.readouterr().err == f"fairseq-san: error: {said}\n"


def test_a_folder_that_may_not_be_written_is_one_line(tmp_path, capsys, monkeypatch):
    """fairseq-train --save-dir on a read-only file system, or a folder of another user: an
    OSError traceback of fairseq's probe of the folder (its ``dummy`` file) before."""
    from fairseq_san.fairseq_fixes.one_line_errors import excepthook

    monkeypatch.setattr("sys.argv", ["fairseq-train", "DATA", "--save-dir", str(tmp_path)])
    for error, said in [
        (OSError(30, "Read-only file system", str(tmp_path / "dummy")), "Read-only file system"),
        (PermissionError(13, "Permission denied", str(tmp_path / "x.pt")), "Permission denied"),
    ]:
        excepthook(lambda *args: print("Traceback", file=sys.stderr))(type(error), error, None)
        assert capsys.readouterr().err == f"fairseq-san: error: {error.filename}: {said}\n"


def test_memory_the_machine_cannot_give_is_one_line(capsys, monkeypatch):
    """fairseq-train --max-source-positions 2147483647 (in range) built a table of every
    position, 128 GiB: torch's allocator's RuntimeError traceback before (here, the allocator's
    own error for a tensor of 4 TiB)."""
    import torch

    from fairseq_san.fairseq_fixes.one_line_errors import excepthook

    with pytest.raises(RuntimeError) as raised:
        torch.empty(2**40)
    monkeypatch.setattr("sys.argv", ["fairseq-train", "DATA"])
    excepthook(lambda *args: print("Traceback", file=sys.stderr))(raised.type, raised.value, None)
    said = capsys.readouterr().err
    assert said.startswith("fairseq-san: error: this machine cannot give the memory asked for "
                           "(torch's CPU allocator refused): are the model's sizes "
                           "(--max-source-positions"), said
    assert said.count("\n") == 1, said


def test_a_file_where_a_folder_is_made_is_one_line(tmp_path):
    """fairseq-generate --results-path FILE: os.makedirs' FileExistsError traceback before
    (the folder is made before anything is read)."""
    results = tmp_path / "afile"
    results.write_text("")
    result = run_cli(
        "fairseq-generate", str(tmp_path), "--user-dir", "fairseq_san", "--path", "c.pt",
        "--results-path", str(results),
    )  # fmt: skip
    assert_one_line_error(
        result, f"{results}: File exists (a file, where the command makes a folder)"
    )
    if os.path.exists("/dev/full"):  # a device: "File exists" alone
        result = run_cli("fairseq-generate", str(tmp_path), "--user-dir", "fairseq_san",
                         "--path", "c.pt", "--results-path", "/dev/full")  # fmt: skip
        assert_one_line_error(
            result, "/dev/full: File exists (not a folder, where the command makes a folder)"
        )


def test_the_one_line_error_is_copied_where_the_environment_says(tmp_path, capsys, monkeypatch):
    """fairseq-san-cpu-ranks names a file for rank 0's error (``ERROR_COPY``), not to quote a
    rank's log that ends in the same error below it (every rank refused the input)."""
    from fairseq_san.errors import ERROR_COPY, UsageError
    from fairseq_san.fairseq_fixes.one_line_errors import excepthook

    copy = tmp_path / "rank-0.error"
    monkeypatch.setenv(ERROR_COPY, str(copy))
    excepthook(traceback_printer)(UsageError, UsageError("no data"), None)
    assert capsys.readouterr().err == copy.read_text() == "fairseq-san: error: no data\n"


def test_a_usage_error_of_a_spawned_rank_is_one_line(capsys):
    """fairseq-train starts its ranks with torch.multiprocessing.spawn (GPUs, without
    --distributed-no-spawn): a rank's UsageError reached it as the rank's traceback, text in a
    ProcessRaisedException, printed below the parent's own traceback."""
    import torch.multiprocessing

    from fairseq_san.fairseq_fixes.one_line_errors import excepthook
    from fairseq_san.generation_options import check_temperature

    with pytest.raises(torch.multiprocessing.ProcessRaisedException) as raised:
        torch.multiprocessing.spawn(check_temperature, nprocs=1)  # rank 0: temperature 0
    excepthook(traceback_printer)(raised.type, raised.value, None)
    assert capsys.readouterr().err == (
        "fairseq-san: error: --temperature 0: it must be greater than 0 (greedy decoding is "
        "--beam 1 without --sampling)\n"
    )
    other = torch.multiprocessing.ProcessRaisedException(
        "\n\n-- Process 0 terminated with the following error:\nTraceback ...\n"
        "fairseq_san.errors.Unknown: x\nValueError: not ours\n", 0, 1
    )
    excepthook(traceback_printer)(type(other), other, None)
    assert capsys.readouterr().err == "Traceback (most recent call last):\n"


def test_the_end_of_a_traceback_and_of_an_argparse_error_are_copied_too(
    tmp_path, capsys, monkeypatch
):
    """An error that is no one-line error (a traceback, fairseq's own argparse refusal) was
    printed by every rank, and fairseq-san-cpu-ranks quoted rank 1's log below rank 0's: the line
    each ends with is copied too."""
    import argparse

    from fairseq_san.errors import ERROR_COPY
    from fairseq_san.fairseq_fixes import one_line_errors

    copy = tmp_path / "rank-0.error"
    monkeypatch.setenv(ERROR_COPY, str(copy))
    one_line_errors.excepthook(traceback_printer)(KeyError, KeyError("no key"), None)
    assert copy.read_text() == "KeyError: 'no key'\n"
    one_line_errors.install()
    with pytest.raises(SystemExit):
        argparse.ArgumentParser(prog="fairseq-train").parse_args(["--no-such-flag"])
    assert capsys.readouterr().err.endswith(copy.read_text())
    assert copy.read_text() == "fairseq-train: error: unrecognized arguments: --no-such-flag\n"


@pytest.mark.parametrize(
    "gloo, said",
    [
        ("Connection closed by peer [127.0.0.1]:18834. This is typically caused by a remote "
         "worker crashing. Check the logs of the remote worker before reporting an error.",
         "Connection closed by peer [127.0.0.1]:18834"),
        ("Read error [127.0.0.1]:59607: Connection reset by peer. This is typically caused by a "
         "remote worker hanging or bugs in the application. Check the logs of the remote worker "
         "before reporting an error. GLHF!",
         "Read error [127.0.0.1]:59607: Connection reset by peer"),
    ],
)  # fmt: skip
def test_a_rank_that_lost_another_says_it_in_one_line(capsys, gloo, said):
    """Another of fairseq-san-cpu-ranks' ranks stopped (killed, terminated) under an all-reduce:
    rank 0 printed gloo's RuntimeError as a 47-line traceback on the terminal, above the line
    naming the rank that stopped. Another RuntimeError keeps its traceback."""
    from fairseq_san.fairseq_fixes.one_line_errors import excepthook

    error = RuntimeError(f"[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] "
                         f"{gloo}")  # fmt: skip
    excepthook(traceback_printer)(RuntimeError, error, None)
    assert capsys.readouterr().err == (
        f"fairseq-san: error: the connection to another rank was lost (gloo: {said}): that rank "
        "stopped first, and its own output says why\n"
    )
    excepthook(traceback_printer)(RuntimeError, RuntimeError("Connection closed by peer"), None)
    assert capsys.readouterr().err.startswith("Traceback")


def test_a_rendezvous_port_in_use_is_one_line(capsys):
    """fairseq-train's rank 0 given --distributed-init-method tcp://127.0.0.1:PORT where another
    process listens on PORT (another run's rank 0): torch's DistNetworkError, a 50-line
    traceback; now one line naming the port (the port's own line only: another DistNetworkError
    keeps its traceback)."""
    import torch.distributed as dist

    from fairseq_san.fairseq_fixes.one_line_errors import excepthook

    error = dist.DistNetworkError(
        "The server socket has failed to listen on any local network address. port: 47123, "
        "useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use"
    )
    excepthook(traceback_printer)(type(error), error, None)
    said = capsys.readouterr().err
    assert said.startswith("fairseq-san: error: the ranks' meeting port 47123 is in use")
    assert said.count("\n") == 1
    for other in (
        dist.DistNetworkError("The client socket has timed out after 1s"),
        dist.DistNetworkError(  # a port below 1024 this user may not take: not "in use"
            "The server socket has failed to listen on any local network address. port: 80, "
            "useIpv6: false, code: -13, name: EACCES, message: permission denied"
        ),
    ):
        excepthook(traceback_printer)(type(other), other, None)
        assert capsys.readouterr().err.startswith("Traceback")


def traceback_printer(*args) -> None:
    """A stand-in for the ``sys.excepthook`` that one_line_errors' hook defers to: it prints the
    first line of a traceback."""
    print("Traceback (most recent call last):", file=sys.stderr)


def test_a_missing_file_in_a_command_line_directory_is_one_line(tmp_path, capsys, monkeypatch):
    """fairseq's task looks for DATA/dict.LANG.txt deep inside its set-up."""
    from fairseq_san.fairseq_fixes.one_line_errors import excepthook

    missing = tmp_path / "dict.de.txt"
    error = FileNotFoundError(2, "No such file or directory", str(missing))
    monkeypatch.setattr("sys.argv", ["fairseq-generate", str(tmp_path), "--cpu"])
    excepthook(traceback_printer)(FileNotFoundError, error, None)
    assert capsys.readouterr().err == f"fairseq-san: error: {missing}: No such file or directory\n"
    monkeypatch.setattr("sys.argv", ["fairseq-generate", "--cpu"])  # not a path given: traceback
    excepthook(traceback_printer)(FileNotFoundError, error, None)
    assert capsys.readouterr().err.startswith("Traceback")
    a_file = tmp_path / "train.bin"  # a data "directory" that is a file
    error = NotADirectoryError(20, "Not a directory", str(a_file))
    monkeypatch.setattr("sys.argv", ["fairseq-train", str(a_file), "--cpu"])
    excepthook(traceback_printer)(NotADirectoryError, error, None)
    assert capsys.readouterr().err == f"fairseq-san: error: {a_file}: Not a directory\n"
    (tmp_path / "dict.en.txt").write_text("word 1\n")  # translation data, read as an LM's
    error = FileNotFoundError(2, "No such file or directory", str(tmp_path / "dict.txt"))
    monkeypatch.setattr("sys.argv", ["fairseq-eval-lm", str(tmp_path), "--path", "mt.pt"])
    excepthook(traceback_printer)(FileNotFoundError, error, None)
    assert capsys.readouterr().err == (
        f"fairseq-san: error: {tmp_path}/dict.txt: No such file or directory; {tmp_path} holds "
        "translation data (dict.SRC.txt, dict.TGT.txt), and a language model's task reads "
        "fairseq-preprocess --only-source output (examples/lm/prepare.sh); a translation "
        "checkpoint is scored with fairseq-generate or fairseq-validate\n"
    )
    # fairseq-generate --lm-path loads the language model with the decoded data's dict.txt
    monkeypatch.setattr("sys.argv", ["fairseq-generate", str(tmp_path), "--path", "mt.pt",
                                     "--lm-path", "lm.pt", "--lm-weight", "0.5"])
    excepthook(traceback_printer)(FileNotFoundError, error, None)
    assert capsys.readouterr().err == (
        f"fairseq-san: error: {tmp_path}/dict.txt: No such file or directory; fairseq-generate "
        "loads the --lm-path language model with the dictionary of the data it decodes, "
        f"{tmp_path}/dict.txt: the language model must be of the target language, trained with "
        "the target's dictionary (dict.TGT.txt), copied there as dict.txt\n"
    )


@pytest.mark.parametrize(
    "error, said",
    [
        (FileNotFoundError("Dataset not found: test7 (data-bin/x)"),
         "Dataset not found: test7 (data-bin/x)"),
        (Exception("Could not infer language pair, please provide it explicitly"),
         "Could not infer language pair, please provide it explicitly"),
        (ValueError("optimizer is required!"), "optimizer is required!"),
        (NotImplementedError("Unknown post_process option: bogus"),
         "Unknown post_process option: bogus"),
        (AssertionError("--sampling-topp requires --sampling"),
         "--sampling-topp requires --sampling"),
        (AssertionError("--sampling requires --nbest to be equal to --beam"),
         "--sampling requires --nbest to be equal to --beam"),
        (ValueError("DiverseBeamSearch requires --beam to be divisible by the number of groups"),
         "DiverseBeamSearch requires --beam to be divisible by the number of groups"),
        (AssertionError("--batch-size cannot be larger than --buffer-size"),
         "--batch-size cannot be larger than --buffer-size"),
        (Exception("Size of sample #0 is invalid (=(1501, 0)) since max_positions=(1024, 1024), "
                   "skip this example with --skip-invalid-size-inputs-valid-test"),
         "Size of sample #0 is invalid (=(1501, 0)) since max_positions=(1024, 1024), skip this "
         "example with --skip-invalid-size-inputs-valid-test"),
        (Exception("Size of sample #907 is invalid (=(np.int32(8), np.int32(14))) since "
                   "max_positions=(1024, 10), skip this example with "
                   "--skip-invalid-size-inputs-valid-test"),  # numpy 2's scalars
         "Size of sample #907 is invalid (=(8, 14)) since max_positions=(1024, 10), skip this "
         "example with --skip-invalid-size-inputs-valid-test"),
        (AssertionError("Sentences lengths should not exceed max_tokens=5"),
         "Sentences lengths should not exceed max_tokens=5"),
        (AssertionError("min_len cannot be larger than max_len, please adjust these!"),
         "min_len cannot be larger than max_len, please adjust these!"),
        (ValueError("--share-all-embeddings requires a joined dictionary"),
         "--share-all-embeddings requires a joined dictionary"),
        # --model-overrides "{'decoder_embed_dim': 64}": a traceback from fairseq's build
        (ValueError("--share-all-embeddings requires --encoder-embed-dim to match "
                    "--decoder-embed-dim"),
         "--share-all-embeddings requires --encoder-embed-dim to match --decoder-embed-dim"),
        (AssertionError("Criterion does not match; please reset the optimizer (--reset-optimizer)"
                        ". LabelSmoothedCrossEntropyCriterion vs CrossEntropyCriterion"),
         "Criterion does not match; please reset the optimizer (--reset-optimizer). "
         "LabelSmoothedCrossEntropyCriterion vs CrossEntropyCriterion (the checkpoint's "
         "--criterion label_smoothed_cross_entropy, this run's --criterion cross_entropy)"),
        (AssertionError("Optimizer does not match; please reset the optimizer (--reset-optimizer)"
                        ". FairseqAdam vs FP16Optimizer"),
         "Optimizer does not match; please reset the optimizer (--reset-optimizer). FairseqAdam vs "
         "FP16Optimizer (the checkpoint's --optimizer adam, this run's --fp16 or --bf16)"),
        (KeyboardInterrupt(), "interrupted"),  # Ctrl-C: fairseq-validate printed a traceback
        (AssertionError("beam size mismatch"), None),  # not bad input: a traceback
        (Exception("Could not infer language pair, please provide it explicitly; and more"), None),
    ],
)  # fmt: skip
def test_fairseqs_own_bad_input_errors_are_one_line(capsys, monkeypatch, error, said):
    """fairseq's messages that already name the problem (one_line_errors.FAIRSEQ_BAD_INPUT), without the
    traceback; anything else keeps it."""
    import fairseq.criterions  # noqa: F401  (the registries that name a criterion or optimizer)
    import fairseq.optim  # noqa: F401

    from fairseq_san.fairseq_fixes.one_line_errors import excepthook

    monkeypatch.setattr("sys.argv", ["fairseq-generate", "data-bin/x", "--cpu"])
    excepthook(traceback_printer)(type(error), error, None)
    expected = "Traceback (most recent call last):" if said is None else f"fairseq-san: error: {said}"
    assert capsys.readouterr().err == expected + "\n"


@pytest.mark.parametrize(
    "bpe, given, said",
    [
        ("sentencepiece", "missing.model", "file {dir}/missing.model not found"),
        ("sentencepiece", "", 'FAILED_PRECONDITION: "{dir}": Is a directory'),
        ("sentencepiece", "dict.txt", "INTERNAL: could not parse ModelProto from {dir}/dict.txt"),
        ("fastbpe", "dict.txt", "Please install fastBPE with: pip install fastBPE"),
    ],
    ids=["missing", "a folder", "not a model", "package not installed"],
)
def test_fairseqs_errors_for_a_bpe_are_one_line(capsys, monkeypatch, tmp_path, bpe, given, said):
    """A --sentencepiece-model or --bpe-codes that is missing, a folder or no model, and a --bpe
    whose package is not installed: fairseq-interactive printed fairseq's or sentencepiece's
    traceback. The errors are fairseq's own (its encoders build the --bpe)."""
    from fairseq.data import encoders

    from fairseq_san.fairseq_fixes.one_line_errors import excepthook

    if bpe == "fastbpe" and importlib.util.find_spec("fastBPE") is not None:
        pytest.skip("fastBPE is installed")
    (tmp_path / "dict.txt").write_text("word 1\n")
    path = str(tmp_path / given) if given else str(tmp_path)
    args = argparse.Namespace(bpe=bpe, sentencepiece_model=path, bpe_codes=path)
    with pytest.raises(Exception) as error:
        encoders.build_bpe(args)

    monkeypatch.setattr("sys.argv", ["fairseq-interactive", "data-bin/x", "--bpe", bpe])
    excepthook(traceback_printer)(error.type, error.value, None)
    assert capsys.readouterr().err == f"fairseq-san: error: {said.format(dir=tmp_path)}\n"


def test_a_malformed_model_overrides_value_is_one_line(capsys, monkeypatch):
    """fairseq-generate reads --model-overrides with ast.literal_eval: its SyntaxError names the
    value given on the command line; a SyntaxError elsewhere keeps its traceback."""
    import ast

    from fairseq_san.fairseq_fixes.one_line_errors import excepthook

    value = "{'san_policy': "
    monkeypatch.setattr("sys.argv", ["fairseq-generate", "data", "--model-overrides", value])
    with pytest.raises(SyntaxError) as raised:
        ast.literal_eval(value)
    excepthook(traceback_printer)(SyntaxError, raised.value, None)
    assert capsys.readouterr().err == (
        "fairseq-san: error: \"{'san_policy':\" is not a Python literal ('{' was never closed): "
        "check the quotes and brackets\n"
    )
    monkeypatch.setattr("sys.argv", ["fairseq-generate", "data"])
    excepthook(traceback_printer)(SyntaxError, raised.value, None)
    assert capsys.readouterr().err.startswith("Traceback")


def test_a_malformed_model_overrides_value_given_with_an_equals_sign_is_one_line(
    capsys, monkeypatch
):
    """``--model-overrides={...`` is one argument: its SyntaxError kept its traceback."""
    import ast

    from fairseq_san.fairseq_fixes.one_line_errors import excepthook

    value = "{'dropout': 0.1"
    monkeypatch.setattr("sys.argv", ["fairseq-generate", "data", f"--model-overrides={value}"])
    with pytest.raises(SyntaxError) as raised:
        ast.literal_eval(value)
    excepthook(lambda *args: None)(SyntaxError, raised.value, None)
    assert capsys.readouterr().err == (
        "fairseq-san: error: \"{'dropout': 0.1\" is not a Python literal ('{' was never closed): "
        "check the quotes and brackets\n"
    )


def test_a_command_whose_reader_stops_ends_quietly(tmp_path):
    """``fairseq-san-policy JS | head -1``: the reader gone, the command ends with the status of SIGPIPE, as a
    Unix tool does, with nothing more on stderr (no BrokenPipeError traceback)."""
    import signal

    from paper import PAPER_ENCDEC, PAPER_SELF

    js = tmp_path / "js.json"
    js.write_text(json.dumps({"decoder_self": PAPER_SELF, "decoder_encdec": PAPER_ENCDEC}))
    command = [str(BIN / "fairseq-san-policy"), str(js), "--theta-decoder-self", "0.4",
               "--theta-decoder-encdec", "0.5", "--map", "0.3"]  # fmt: skip
    process = subprocess.Popen(command, cwd=REPO, env=cli_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)  # fmt: skip
    process.stdout.close()  # the reader stops before the command writes
    _, stderr = process.communicate(timeout=120)
    # Only the note that Figure 2b is not in nats (its values above ln 2), on stderr before.
    assert [line.split(":")[1] for line in stderr.decode().splitlines()] == [" note"]
    assert process.returncode == 128 + signal.SIGPIPE


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("command", ["policy", "loop", "bench"])
def test_a_command_whose_output_cannot_be_written_says_so_in_one_line(tmp_path, command):
    """``fairseq-san-policy JS > /dev/full``: an OSError traceback from print, exit 1 (the
    loop's subcommands: "[Errno 28] ..." as its own error, exit 2). Now one line naming the
    standard output and the system's reason, status 1, as coreutils' ``echo hi > /dev/full``."""
    from paper import PAPER_ENCDEC, PAPER_SELF

    js = tmp_path / "js.json"
    js.write_text(json.dumps({"decoder_self": PAPER_SELF, "decoder_encdec": PAPER_ENCDEC}))
    name, argv = {
        "policy": ("fairseq-san-policy", [str(BIN / "fairseq-san-policy"), str(js),
                                          "--theta-decoder-self", "0.4", "--map", "0.3"]),
        "loop": ("fairseq-san-loop", [str(BIN / "fairseq-san-loop"), "show",
                                      '{"decoder_self": [2, 4]}']),
        # the benchmark's report, printed after its workers have ended
        "bench": ("-c", [sys.executable, "-c", "from fairseq_san.cli.bench import print_report; "
                         "print_report('| engine |\\n' * 3)"]),
    }[command]  # fmt: skip
    with open("/dev/full", "w") as full:
        process = subprocess.run(argv, cwd=REPO, env=cli_env(), stdout=full,
                                 stderr=subprocess.PIPE, text=True, timeout=120)  # fmt: skip
    said = [line for line in process.stderr.splitlines() if ": note: " not in line]
    assert said == [f"{name}: error: cannot write the standard output: No space left on device"]
    assert process.returncode == 1


@pytest.mark.parametrize(
    "flags, said",
    [
        (dict(restore_file="{tmp}/nope.pt"), "--restore-file {tmp}/nope.pt: no such file (fairseq "
         "would train from scratch); leave the flag out to resume from --save-dir's "
         "checkpoint_last.pt"),
        (dict(finetune_from_model="{tmp}/nope.pt"), "--finetune-from-model {tmp}/nope.pt: no such "
         "file"),
        (dict(finetune_from_model="{tmp}/here.pt", reset_optimizer=True), "--finetune-from-model "
         "resets the optimizer, learning-rate scheduler, meters and data loader itself: drop "
         "--reset-optimizer"),
        (dict(finetune_from_model="{tmp}/here.pt", restore_file="{tmp}/here.pt"),
         "--finetune-from-model {tmp}/here.pt and --restore-file {tmp}/here.pt both name the "
         "checkpoint to start from: give one (--restore-file resumes a run, --finetune-from-model "
         "starts a new one from a checkpoint's weights)"),
        (dict(restore_file="{tmp}/here.pt"), None),
        (dict(), None),  # fairseq's default: SAVE_DIR/checkpoint_last.pt, or a first run
    ],
)  # fmt: skip
def test_train_refuses_a_checkpoint_flag_naming_nothing(tmp_path, flags, said):
    """fairseq trained from scratch when --restore-file named nothing; the plugin's
    load_checkpoint refuses it before fairseq's runs (the trainer is never touched)."""
    from types import SimpleNamespace

    from fairseq import checkpoint_utils

    from fairseq_san.errors import UsageError
    from fairseq_san.fairseq_fixes.restore_file import check_checkpoint_flags

    (tmp_path / "here.pt").write_bytes(b"")
    # --no-save: the save dir is not locked (save_dir_lock), the trainer stand-in has no config
    cfg = SimpleNamespace(restore_file="checkpoint_last.pt", finetune_from_model=None,
                          save_dir=str(tmp_path / "save"), no_save=True)  # fmt: skip
    for name, value in flags.items():
        setattr(cfg, name, value.format(tmp=tmp_path) if isinstance(value, str) else value)
    if said is None:
        check_checkpoint_flags(cfg, "", False)
        return
    with pytest.raises(UsageError) as refused:
        checkpoint_utils.load_checkpoint(cfg, SimpleNamespace(checkpoint_suffix=""))
    assert str(refused.value) == said.format(tmp=tmp_path)


def test_a_restore_file_of_save_dirs_checkpoint_names_its_path(tmp_path, monkeypatch):
    """--restore-file checkpoint_best.pt, which --save-dir holds: fairseq reads it from the
    working directory; the refusal advised leaving the flag out (checkpoint_last.pt)."""
    from types import SimpleNamespace

    from fairseq_san.errors import UsageError
    from fairseq_san.fairseq_fixes.restore_file import check_checkpoint_flags

    (tmp_path / "save").mkdir()
    (tmp_path / "save" / "checkpoint_best.pt").write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    cfg = SimpleNamespace(restore_file="checkpoint_best.pt", finetune_from_model=None,
                          save_dir=str(tmp_path / "save"))  # fmt: skip
    with pytest.raises(UsageError) as refused:
        check_checkpoint_flags(cfg, "", False)
    assert str(refused.value) == (
        "--restore-file checkpoint_best.pt: no such file (fairseq would train from scratch); "
        "fairseq reads it from the working directory, not --save-dir: pass --restore-file "
        f"{tmp_path / 'save' / 'checkpoint_best.pt'}"
    )


def test_a_finetune_from_model_that_a_resumed_run_ignores_is_said(tmp_path, caplog):
    """--finetune-from-model of another run where --save-dir holds checkpoint_last.pt: fairseq
    resumed that run instead, without a word."""
    from types import SimpleNamespace

    from fairseq_san.fairseq_fixes.restore_file import _checking

    (tmp_path / "checkpoint_last.pt").write_bytes(b"")
    cfg = SimpleNamespace(restore_file="checkpoint_last.pt", finetune_from_model="other.pt",
                          save_dir=str(tmp_path))  # fmt: skip
    with caplog.at_level("INFO", logger="fairseq_san.fairseq_fixes.restore_file"):
        _checking(lambda cfg, trainer: None)(cfg, SimpleNamespace(checkpoint_suffix=""))
    assert caplog.messages == [
        f"--finetune-from-model other.pt is not read: this run resumes {tmp_path}/"
        "checkpoint_last.pt (fairseq fine-tunes only where --save-dir holds no checkpoint_last.pt)"
    ]


def test_an_optimizer_state_for_other_parameters_names_reset_optimizer(tmp_path):
    """Resuming with flags that build another model (without the training's
    --share-all-embeddings): torch refused the optimizer's state with a traceback; then the
    refusal named a policy that shares more (refused before, by check_resumed_sharing) and
    advised --reset-optimizer, which goes on in the other model."""
    from types import SimpleNamespace

    import torch

    from fairseq_san.errors import UsageError
    from fairseq_san.fairseq_fixes.restore_file import _checking

    def load_checkpoint(cfg, trainer):  # torch's own error, as the trainer meets it
        saved = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))] * 1).state_dict()
        torch.optim.Adam([torch.nn.Parameter(torch.zeros(1)) for _ in range(2)]).load_state_dict(
            saved
        )

    cfg = SimpleNamespace(restore_file="checkpoint_last.pt", finetune_from_model=None,
                          save_dir=str(tmp_path))  # fmt: skip
    with pytest.raises(UsageError, match="build another model than the training's .*: pass "
                       "the training's flags to resume it; --reset-optimizer would go on"):
        _checking(load_checkpoint)(cfg, SimpleNamespace(checkpoint_suffix=""))


@pytest.mark.parametrize("scheduler", ["inverse_sqrt", "reduce_lr_on_plateau"])
def test_a_fixed_schedulers_state_resumed_by_another_scheduler_is_one_line(scheduler):
    """fairseq-train --lr-scheduler inverse_sqrt resumed from a run of the default (fixed), which
    saves its learning rate, not the best loss: fairseq's KeyError 'best' traceback."""
    from fairseq.optim.lr_scheduler import LR_SCHEDULER_REGISTRY

    from fairseq_san.errors import UsageError

    load_state_dict = LR_SCHEDULER_REGISTRY[scheduler].load_state_dict
    stand_in = SimpleNamespace(cfg=SimpleNamespace(_name=scheduler))
    with pytest.raises(UsageError, match=(
        rf"^the checkpoint's learning-rate scheduler state \(lr\) is of another --lr-scheduler "
        rf"than {scheduler} \(fixed or manual: .*\): .* or pass --reset-lr-scheduler")):
        load_state_dict(stand_in, {"lr": 0.005})
    if scheduler == "inverse_sqrt":
        load_state_dict(stand_in, {"best": 4.5})
        assert stand_in.best == 4.5


def test_fairseqs_transformer_of_another_depth_is_one_line():
    """fairseq-train --arch transformer resumed with another --encoder-layers: torch's list of
    every missing key, re-raised as "please ensure that the architectures match"."""
    from fairseq_san.errors import UsageError

    trained, _ = build_fairseq_transformer(["--encoder-layers", "2"])
    model, _ = build_fairseq_transformer(["--encoder-layers", "3"])
    with pytest.raises(UsageError, match=r"^the checkpoint has 2 encoder layers, this model 3 "):
        model.load_state_dict(trained.state_dict())


def test_resuming_without_the_trainings_shared_embeddings_is_one_line(
    tmp_path, binarized_corpus, san_checkpoint
):
    """The same refusal met by fairseq-train itself: a run trained with
    --share-all-embeddings, resumed without it (torch's traceback before)."""
    from helpers import run_cli, train_argv

    save_dir = tmp_path / "run"
    save_dir.mkdir()
    shutil.copyfile(san_checkpoint, save_dir / "checkpoint_last.pt")
    argv = train_argv(binarized_corpus, save_dir, 5, ["--task", "translation_san"])
    argv.remove("--share-all-embeddings")
    result = run_cli("fairseq-train", *argv)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith(
        f"{ERROR}the checkpoint's optimizer state is for other parameters than "
        "this model's: this run's flags build another model than the training's"
    ), result.stderr[-2000:]
    assert (save_dir / "checkpoint_last.pt").read_bytes() == san_checkpoint.read_bytes()


def test_an_ema_seed_model_without_ema_weights_is_one_line(
    tmp_path, binarized_corpus, san_checkpoint
):
    """--store-ema --ema-seed-model with a checkpoint trained without --store-ema: KeyError 'ema'
    from inside fairseq."""
    from helpers import run_cli, train_argv

    extra = ["--task", "translation_san", "--store-ema", "--ema-seed-model", str(san_checkpoint)]
    result = run_cli("fairseq-train", *train_argv(binarized_corpus, tmp_path / "run", 5, extra))
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == (
        f"{ERROR}--ema-seed-model {san_checkpoint}: the checkpoint holds no EMA weights (it was "
        "trained without --store-ema); start from its weights with --finetune-from-model instead"
    )
    assert not list((tmp_path / "run").glob("*.pt"))


@pytest.mark.parametrize(
    "execution, said",
    [("fixed", "san_decoder_execution 'fixed' is a model option here (--model-overrides or the "
      "checkpoint), which does not choose the decoder: this command decodes with its default. "
      "Pass --san-decoder-execution fixed on the command line (with --task translation_san) "
      "instead"),
     ("compile", "san_decoder_execution 'compile' (from the checkpoint, --model-overrides or a "
      "keyword argument) is not valid; valid values: eager, fixed, graph, compile-graph; did "
      "you mean 'compile-graph'? (give a valid one as --san-decoder-execution on the command "
      "line, with --task translation_san)")],
)  # fmt: skip
def test_an_execution_among_the_model_overrides_names_what_the_command_line_takes(
    execution, said
):
    """The refusal said the command "decodes with 'None'" (the device's default) and advised
    --san-decoder-execution compile, which the command line refuses."""
    from types import SimpleNamespace

    from fairseq_san.errors import UsageError
    from fairseq_san.models.option_checks import check_decoder_overrides

    task = SimpleNamespace(cfg=SimpleNamespace(san_decoding="static"))
    with pytest.raises(UsageError) as refused:
        check_decoder_overrides(argparse.Namespace(san_decoder_execution=execution), task)
    assert str(refused.value) == said


def test_resuming_mid_epoch_with_larger_batches_is_one_line(tmp_path, binarized_corpus):
    """A run stopped part-way through an epoch, resumed with batches that end the epoch before
    that point: fairseq's traceback asked to report it to its developers."""
    from helpers import run_cli, train_argv

    save_dir = tmp_path / "run"
    small = train_argv(binarized_corpus, save_dir, 3, ["--max-tokens", "40"])
    assert run_cli("fairseq-train", *small).returncode == 0
    large = train_argv(binarized_corpus, save_dir, 6, ["--max-tokens", "100000"])
    result = run_cli("fairseq-train", *large)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == (
        f"{ERROR}cannot resume: the checkpoint stopped part-way through an epoch that the data, "
        "as batched now, does not reach so far (the training data, --max-tokens, --batch-size or "
        "the number of processes changed since?): resume with what it was trained with, or pass "
        "--reset-dataloader to start that epoch again"
    )
    assert run_cli("fairseq-train", *large, "--reset-dataloader").returncode == 0


def test_a_subset_whose_sides_differ_in_length_is_one_line(tmp_path):
    """A corpus whose target side lost a line binarizes without a word, and fairseq-train
    stopped on fairseq's bare assertion, a traceback."""
    from helpers import preprocess, run_cli, train_argv, write_corpus

    raw = write_corpus(tmp_path / "raw")
    target = raw / "train.tgt"
    target.write_text("".join(target.read_text().splitlines(True)[:-1]))
    data = preprocess(raw, tmp_path / "data")
    result = run_cli("fairseq-train", *train_argv(data, tmp_path / "run", 1))
    assert assert_one_line_error(result) == (
        f"{ERROR}a subset's source and target sides hold different numbers of sentences "
        "(fairseq-preprocess binarizes each side alone and does not compare them): give both "
        "sides one sentence per line, line i of one translating line i of the other, and "
        "binarize again"
    )


def resume_from_pair(tmp_path, trained, asked, **flags):
    """The plugin's load_checkpoint resuming a save dir whose last checkpoint recorded
    ``trained`` (as a model's configuration does), for a task asking for ``asked``; whether
    fairseq's own load ran."""
    from types import SimpleNamespace

    import torch

    from fairseq_san.fairseq_fixes.restore_file import _checking

    save_dir = tmp_path / "save"
    save_dir.mkdir(exist_ok=True)
    torch.save({"cfg": {"model": {"language_pair": trained}}, "model": {}},
               save_dir / "checkpoint_last.pt")  # fmt: skip
    loaded = []
    cfg = SimpleNamespace(restore_file="checkpoint_last.pt", finetune_from_model=None,
                          save_dir=str(save_dir), **flags)  # fmt: skip
    trainer = SimpleNamespace(checkpoint_suffix="", task=StandInTranslationTask(*asked))
    _checking(lambda cfg, trainer: loaded.append(True))(cfg, trainer)
    return bool(loaded)


@pytest.mark.parametrize("flags", [{}, {"reset_dataloader": True, "reset_meters": True}])
def test_resuming_a_run_in_the_reverse_direction_is_refused_before_it_loads(tmp_path, flags):
    """fairseq-train -s de -t en in the save dir of an En->De run trained that model on De->En
    data: its model is built from the command line, which check_language_pair accepts. A new
    data loader or meters still resume the run (fairseq advises --reset-dataloader)."""
    from fairseq_san.errors import UsageError

    with pytest.raises(UsageError) as refused:
        resume_from_pair(tmp_path, ["en", "de"], ("de", "en"), **flags)
    path = tmp_path / "save" / "checkpoint_last.pt"
    assert str(refused.value) == (
        f"{path} was trained to translate en into de (its cfg.model.language_pair), and this run "
        "reads de into en: give -s en -t de to resume it, or another --save-dir for a new run "
        f"(--finetune-from-model {path} to start it from these weights)"
    )


@pytest.mark.parametrize(
    "trained, asked, flags",
    [
        (["en", "de"], ("en", "de"), {}),
        (["en", "de"], ("en", "fr"), {}),  # another pair: the model's vocabulary checks
        (None, ("de", "en"), {}),  # a checkpoint made before the record
        (["en", "de"], ("de", "en"), {"reset_optimizer": True}),  # a new run from its weights
    ],
)
def test_resuming_in_the_same_direction_or_restarting_from_the_weights_loads(
    tmp_path, caplog, trained, asked, flags
):
    assert resume_from_pair(tmp_path, trained, asked, **flags)
    logged = "was trained on en->de; this run trains de->en from its weights" in caplog.text
    assert logged == bool(flags)


@pytest.mark.slow
def test_train_resumed_in_the_reverse_direction_is_one_line(binarized_corpus, trained, tmp_path):
    save_dir = tmp_path / "resume"
    shutil.copytree(trained["plain"], save_dir)
    reverse = ["-s", "tgt", "-t", "src"]
    more = train_argv(binarized_corpus, save_dir, max_update=UPDATES + 2, extra=reverse)
    result = run_cli("fairseq-train", *more)
    assert_one_line_error(result, "was trained to translate src into tgt", "give -s src -t tgt")
    assert "num_updates" not in result.stdout + result.stderr


# --- data whose dictionaries hold other words in as many entries ------------------------------


@pytest.fixture(scope="module")
def other_words(tmp_path_factory) -> Path:
    """Data whose dictionary holds other words in as many entries: each word capitalised."""
    root = tmp_path_factory.mktemp("other-words")
    raw = write_corpus(root / "raw")
    for path in raw.iterdir():
        path.write_text(path.read_text().upper())
    return preprocess(raw, root / "data-bin")


def other_counts(data: Path, folder: Path) -> Path:
    """A copy of ``data`` whose dictionaries count each word otherwise, in the same order."""
    shutil.copytree(data, folder)
    for path in folder.glob("dict.*.txt"):
        lines = [line.split(" ") for line in path.read_text().splitlines()]
        path.write_text("".join(f"{word} {int(count) * 3 + 1}\n" for word, count, *_ in lines))
    return folder


def first_word(data: Path) -> str:
    """The first word of ``data``'s source dictionary (id 4, after the special symbols)."""
    return (data / "dict.src.txt").read_text().split(" ")[0]


def refusal(trained_data: Path, data: Path) -> str:
    """What a checkpoint trained on ``trained_data`` says of ``data``'s source dictionary."""
    return (
        f"was trained with other dictionaries than the data's: its source dictionary "
        f"({trained_data}/dict.src.txt) holds other words than the data's {data}/dict.src.txt, "
        f"first at index 4: {first_word(trained_data)!r} in the training's, "
        f"{first_word(data)!r} in the data's; use the dictionaries the model was trained with"
    )


def test_a_checkpoint_records_its_dictionaries_words(binarized_corpus, trained):
    from fairseq.data import Dictionary

    from fairseq_san.fairseq_fixes.dictionary_words import DICTIONARIES_STATE, digest

    state = torch.load(trained["plain"] / "checkpoint_last.pt")
    record = state["extra_state"][DICTIONARIES_STATE]
    expected = {}
    for side in ("src", "tgt"):
        file = str(binarized_corpus / f"dict.{side}.txt")
        symbols = Dictionary.load(file).symbols
        expected[side] = {"entries": len(symbols), "sha256": digest(symbols), "file": file}
    assert record == {"source": expected["src"], "target": expected["tgt"]}


@pytest.mark.slow
def test_resuming_on_other_words_is_refused(binarized_corpus, trained, other_words, tmp_path):
    save_dir = tmp_path / "resume"
    shutil.copytree(trained["plain"], save_dir)
    result = run_cli("fairseq-train", *train_argv(other_words, save_dir, UPDATES + 2))
    assert_one_line_error(result, f"checkpoint {save_dir / 'checkpoint_last.pt'} "
                          + refusal(binarized_corpus, other_words))  # fmt: skip
    assert "num_updates" not in result.stdout + result.stderr


def start_from(path: Path, data: Path, **flags) -> bool:
    """The plugin's load_checkpoint starting a run on ``data`` from checkpoint ``path`` (as
    fairseq-train's flags ``flags`` say); whether fairseq's own load ran."""
    from fairseq.data import Dictionary

    from fairseq_san.fairseq_fixes.restore_file import _checking

    source, target = (Dictionary.load(str(data / f"dict.{side}.txt")) for side in ("src", "tgt"))
    languages = SimpleNamespace(data=str(data), source_lang="src", target_lang="tgt")
    task = SimpleNamespace(source_dictionary=source, target_dictionary=target, cfg=languages)
    cfg = SimpleNamespace(**{"restore_file": "checkpoint_last.pt", "finetune_from_model": None,
                             "save_dir": str(path.parent / "new"), **flags})  # fmt: skip
    loaded = []
    trainer = SimpleNamespace(checkpoint_suffix="", task=task)
    _checking(lambda cfg, trainer: loaded.append(True))(cfg, trainer)
    return bool(loaded)


def test_fine_tuning_on_other_words_is_refused(binarized_corpus, trained, other_words):
    from fairseq_san.errors import UsageError

    path = trained["plain"] / "checkpoint_last.pt"
    with pytest.raises(UsageError, match="its source dictionary .* first at index 4"):
        start_from(path, other_words, finetune_from_model=str(path))


@pytest.mark.slow
def test_the_same_words_counted_otherwise_train_and_decode(binarized_corpus, trained, tmp_path):
    """A dict.txt rebuilt with other counts and the same words in the same order is the same
    vocabulary."""
    data = other_counts(binarized_corpus, tmp_path / "recounted")
    path = trained["plain"] / "checkpoint_last.pt"
    assert start_from(path, data, finetune_from_model=str(path))
    result = fairseq_generate(data, path)
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.slow
def test_generate_on_other_words_is_refused(binarized_corpus, trained, other_words):
    """fairseq's check of the sizes cannot tell the two folders apart: as many entries."""
    sizes = [len((data / "dict.src.txt").read_text().splitlines())
             for data in (binarized_corpus, other_words)]  # fmt: skip
    assert sizes[0] == sizes[1]
    result = fairseq_generate(other_words, trained["plain"] / "checkpoint_last.pt")
    assert_one_line_error(result, refusal(binarized_corpus, other_words))


@pytest.mark.slow
def test_interactive_on_other_words_is_refused(binarized_corpus, trained, other_words):
    """fairseq-interactive reads the data folder's dictionaries only: as many entries."""
    path = trained["plain"] / "checkpoint_last.pt"
    result = run_cli("fairseq-interactive", str(other_words), "--user-dir", "fairseq_san",
                     "--path", str(path), "--cpu", input="TOK1 TOK2\n")  # fmt: skip
    assert_one_line_error(result, refusal(binarized_corpus, other_words))


def test_the_hub_on_other_words_is_refused(binarized_corpus, trained, other_words):
    from fairseq_san.errors import UsageError
    from fairseq_san.models.transformer_san import TransformerSANModel

    with pytest.raises(UsageError) as refused:
        TransformerSANModel.from_pretrained(
            str(trained["plain"]), "checkpoint_last.pt", str(other_words)
        )
    assert refusal(binarized_corpus, other_words) in str(refused.value)


def without_record(save_dir: Path, path: Path) -> Path:
    """A copy of ``save_dir``'s last checkpoint as one saved before the record (or by fairseq)."""
    from fairseq_san.fairseq_fixes.dictionary_words import DICTIONARIES_STATE

    state = torch.load(save_dir / "checkpoint_last.pt")
    del state["extra_state"][DICTIONARIES_STATE]
    torch.save(state, path)
    return path


def test_a_checkpoint_without_the_record_loads_as_before(trained, other_words, tmp_path):
    from fairseq import checkpoint_utils

    path = without_record(trained["plain"], tmp_path / "old.pt")
    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(path)], arg_overrides={"data": str(other_words)}
    )
    assert len(models) == 1 and task.cfg.data == str(other_words)
    assert start_from(path, other_words, finetune_from_model=str(path))


def test_averaging_checkpoints_of_other_words_is_refused(trained, tmp_path):
    from fairseq_san.checkpoints import CheckpointError
    from fairseq_san.cli import average
    from fairseq_san.fairseq_fixes.dictionary_words import DICTIONARIES_STATE, digest

    path = trained["plain"] / "checkpoint_last.pt"
    state = torch.load(path)
    state["extra_state"][DICTIONARIES_STATE]["target"]["sha256"] = digest(["other"])
    torch.save(state, tmp_path / "other.pt")
    with pytest.raises(CheckpointError) as refused:
        average.average([str(path), str(tmp_path / "other.pt")])
    assert "its target dictionary's record holds other words" in str(refused.value)


# --- options fairseq's commands need and leave unchecked --------------------------------------


TRAIN, SAN = "get_training_parser", ["data", "--arch", "transformer_san"]


@pytest.mark.parametrize(
    "parser, argv, said",
    [
        ("get_training_parser", ["data", "--task", "translation_san"],
         "fairseq-x needs --arch: the model to train, e.g. --arch transformer_san_small"),
        ("get_validation_parser", ["data", "--path", "c.pt", "--san-analysis-dir", "js"],
         "fairseq-x needs --task: the task the checkpoint was trained with"),
        ("get_interactive_generation_parser", ["data"],
         "fairseq-x needs --path: the checkpoint to load"),
        ("get_eval_lm_parser", ["data"], "fairseq-x needs --path: the checkpoint to load"),
        ("get_generation_parser", ["data", "--path", "c.pt", "--replace-unk"],
         "--replace-unk does not work in fairseq 0.12: its generators return no per-word"),
        ("get_generation_parser", ["data", "--path", "c.pt", "--replace-unk", "align.txt"],
         "--replace-unk does not work in fairseq 0.12"),
        ("get_validation_parser",
         ["data", "--task", "translation", "--path", "c.pt", "--san-analysis-dir", "js"],
         "fairseq-x --task translation has no option --san-analysis-dir: it is an option of "
         "--task language_modeling_san or --task translation_san"),
        ("get_training_parser",
         ["data", "--task", "translation", "--arch", "transformer", "--san-decoder-self-policy=6"],
         "fairseq-x --arch transformer has no option --san-decoder-self-policy: it is an option "
         "of --arch transformer_san or --arch transformer_lm_san"),
        # a deprecated option of translation_san: the language model's task takes its current
        # form (it named --task translation_san only)
        ("get_interactive_generation_parser",
         ["data", "--task", "language_modeling_san", "--path", "c.pt", "--san-decoder", "static"],
         "fairseq-x --task language_modeling_san has no option --san-decoder: it is a deprecated "
         "option of --task translation_san; pass --san-decoding static"),
        ("get_interactive_generation_parser",
         ["data", "--task", "translation", "--path", "c.pt", "--san-decoder", "static"],
         "fairseq-x --task translation has no option --san-decoder: it is an option of --task "
         "translation_san"),
        ("get_training_parser",
         ["data", "--task", "translation", "--arch", "transformer", "--decoder-self-attention-type",
          "aan"],
         "fairseq-x --arch transformer has no option --decoder-self-attention-type: it is an "
         "option of --arch transformer_san"),
        ("get_training_parser",  # argparse's usage text, hundreds of lines, then the flag
         ["data", "--task", "translation_san", "--arch", "transformer_san",
          "--san-decoder-self-polcy", "1,5"],
         "fairseq-x has no option --san-decoder-self-polcy: did you mean "
         "--san-decoder-self-policy?"),
        ("get_generation_parser", ["data", "--path", "c.pt", "--beam", "0"],
         "--beam 0: it must be an integer of at least 1"),
        ("get_interactive_generation_parser", ["data", "--path", "c.pt", "--nbest", "0"],
         "--nbest 0: it must be an integer of at least 1"),
        ("get_generation_parser", ["data", "--path", "c.pt", "--nbest", "3", "--beam", "2"],
         "--nbest 3 is more than --beam 2: the search keeps 2 hypotheses per sentence"),
        ("get_generation_parser", ["data", "--path", "c.pt", "--lenpen", "nan"],
         "--lenpen nan: it must be a finite number"),
        ("get_generation_parser", ["data", "--path", "c.pt", "--max-len-a", "inf"],
         "--max-len-a inf: it must be a finite number"),
        ("get_interactive_generation_parser", ["data", "--path", "c.pt", "--temperature", "nan"],
         "--temperature nan: it must be a finite number"),
        ("get_generation_parser", ["data", "--path", "c.pt", "--sampling-topp", "nan"],
         "--sampling-topp nan: it must be a finite number"),
        ("get_generation_parser", ["data", "--path", "c.pt", "--sampling", "--sampling-topp", "2"],
         "--sampling-topp 2.0: it must be in (0, 1] (-1, the default, samples from every token)"),
        ("get_generation_parser", ["data", "--path", "c.pt", "--sampling", "--sampling-topk=-5"],
         "--sampling-topk -5: it must be an integer of at least 1 (-1, the default, samples from "
         "every token)"),
        ("get_generation_parser", ["data", "--path", "c.pt", "--sampling", "--sampling-topk", "0"],
         "--sampling-topk 0: it must be an integer of at least 1"),
        ("get_generation_parser", ["data", "--path", "c.pt", "--diversity-rate=-inf"],
         "--diversity-rate -inf: it must be a finite number"),
        ("get_generation_parser", ["data", "--path", "c.pt", "--diverse-beam-strength", "0.9"],
         "--diverse-beam-strength 0.9 is read only by diverse beam search: pass "
         "--diverse-beam-groups G as well (the search ignored it)"),
        ("get_generation_parser", ["data", "--path", "c.pt", "--beam", "5",
                                   "--diverse-beam-groups", "2"],
         "--beam 5 is not a multiple of --diverse-beam-groups 2: diverse beam search splits the "
         "beam into groups of equal size"),  # fairseq's ValueError at the first step
        ("get_generation_parser", ["data", "--path", "c.pt", "--sampling", "--match-source-len"],
         "--sampling and --match-source-len each choose a search, and fairseq's generator runs "
         "one: pass one of them"),  # fairseq's ValueError naming neither, a traceback
        ("get_interactive_generation_parser", ["data", "--path", "c.pt", "--beam", "4",
                                               "--diverse-beam-groups", "2", "--diversity-rate",
                                               "0.5"],
         "--diverse-beam-groups and --diversity-rate each choose a search"),
        # constraints with a search chosen before the constrained one: fairseq's
        # NotImplementedError at the first batch (a diversity rate of 0 chooses one too)
        ("get_interactive_generation_parser", ["data", "--path", "c.pt", "--constraints",
                                               "--sampling"],
         "--constraints and --sampling each choose a search, and fairseq's generator runs one"),
        ("get_generation_parser", ["data", "--path", "c.pt", "--constraints", "ordered",
                                   "--diversity-rate", "0"],
         "--constraints and --diversity-rate each choose a search"),
        # options the generator ignores beside another: decoded as if not given, no word said
        ("get_generation_parser", ["data", "--path", "c.pt", "--lm-path", "lm.pt"],
         "--lm-path lm.pt without --lm-weight: fairseq's default weight, 0, would run the "
         "language model and fuse it changing nothing; pass --lm-weight W (e.g. 0.2)"),
        ("get_generation_parser", ["data", "--path", "c.pt", "--lm-path", "lm.pt",
                                   "--lm-weight=0"], None),  # a sweep's baseline weight
        ("get_interactive_generation_parser", ["data", "--path", "c.pt", "--lm-weight", "0.5"],
         "--lm-weight 0.5 without --lm-path: there is no language model to fuse, so it would be "
         "ignored; leave it out"),
        ("get_generation_parser", ["data", "--path", "c.pt", "--score-reference",
                                   "--temperature", "2"],
         "--temperature 2.0 with --score-reference: the references are scored in one "
         "teacher-forced pass, as the model scores them, so it would be ignored; leave it out"),
        # fairseq's scorer takes no search option: each ignored without a word
        ("get_generation_parser", ["data", "--path", "c.pt", "--score-reference", "--beam", "4",
                                   "--max-len-b", "10"],
         "--max-len-b 10 with --score-reference: the references are scored whole, one per "
         "sentence, with no search, so it would be ignored; leave it out"),
        ("get_generation_parser", ["data", "--path", "c.pt", "--score-reference", "--beam", "4",
                                   "--nbest", "2"], "--nbest 2 with --score-reference"),
        ("get_generation_parser", ["data", "--path", "c.pt", "--score-reference", "--prefix-size",
                                   "3"], "--prefix-size 3 with --score-reference"),
        ("get_generation_parser", ["data", "--path", "c.pt", "--score-reference", "--sampling",
                                   "--beam", "1"], "--sampling with --score-reference"),
        ("get_generation_parser", ["data", "--path", "c.pt", "--score-reference",
                                   "--unnormalized"],
         "--unnormalized with --score-reference: the references are scored in one "
         "teacher-forced pass"),  # the scorer's scores are normalized
        ("get_generation_parser", ["data", "--path", "c.pt", "--score-reference", "--lm-path",
                                   "lm.pt", "--lm-weight", "0.2"],
         "--lm-path lm.pt with --score-reference"),  # loaded, never fused
        ("get_generation_parser", ["data", "--path", "c.pt", "--score-reference", "--beam", "1",
                                   "--max-len-b", "200", "--min-len", "1", "--nbest", "1",
                                   "--lenpen", "1"], None),  # defaults typed; --beam is logged
        ("get_generation_parser", ["data", "--path", "c.pt", "--score-reference", "--unkpen", "5"],
         "--unkpen 5.0 with --score-reference"),
        ("get_generation_parser", ["data", "--path", "c.pt", "--unnormalized", "--lenpen", "2"],
         "--lenpen 2.0 with --unnormalized: the length penalty divides normalized scores only, "
         "so it would be ignored; leave it out"),
        ("get_generation_parser", ["data", "--path", "c.pt", "--retain-dropout-modules",
                                   "TransformerDecoder"],
         "--retain-dropout-modules TransformerDecoder without --retain-dropout: fairseq keeps "
         "dropout at inference only with --retain-dropout, so it would be ignored; leave it out"),
        ("get_generation_parser", ["data", "--path", "c.pt", "--retain-dropout",
                                   "--retain-dropout-modules", "TransformerDecoder"], None),
        ("get_generation_parser", ["data", "--path", "c.pt", "--match-source-len",
                                   "--max-len-b", "5"],
         "--max-len-b 5 with --match-source-len: each output is as long as its source, so it "
         "would be ignored; leave it out"),
        ("get_generation_parser", ["data", "--path", "c.pt", "--prefix-size=-1"],
         "--prefix-size -1: it must be an integer of at least 0"),  # no prefix, no word
        ("get_generation_parser", ["data", "--path", "c.pt", "--lm-path", "lm.pt", "--lm-weight",
                                   "0.3", "--match-source-len", "--lenpen", "2"], None),
        ("get_generation_parser", ["data", "--path", "c.pt", "--no-repeat-ngram-size", "1"],
         "--no-repeat-ngram-size 1: it must be 0 (no blocking) or an integer of at least 2 (1 "
         "would block the end of sentence too"),  # nothing on the CPU, the end with CUDA's
        ("get_interactive_generation_parser",
         ["data", "--path", "c.pt", "--no-repeat-ngram-size=-2"],
         "--no-repeat-ngram-size -2: it must be 0 (no blocking)"),  # off without a word
        ("get_generation_parser", ["data", "--path", "c.pt", "--batch-size=-1"],
         "--batch-size -1: it must be an integer of at least 1"),
        ("get_training_parser", ["data", "--arch", "transformer_san", "--max-tokens", "0"],
         "--max-tokens 0: it must be an integer of at least 1"),
        ("get_training_parser", ["data", "--arch", "transformer_san", "--max-tokens-valid", "0"],
         "--max-tokens-valid 0: it must be an integer of at least 1"),  # text: a TypeError before
        # fairseq's numbers out of their range: a traceback far inside, or another run silently
        (TRAIN, SAN + ["--update-freq", "1,0"],
         "--update-freq 0: it must be an integer of at least 1"),
        (TRAIN, SAN + ["--log-interval", "0"],
         "--log-interval 0: it must be an integer of at least 1"),
        (TRAIN, SAN + ["--encoder-embed-dim", "0"],
         "--encoder-embed-dim 0: it must be an integer of at least 1"),
        (TRAIN, SAN + ["--lr=-1"], "--lr -1: it must be greater than 0"),  # trained nothing
        (TRAIN, SAN + ["--max-epoch=-1"],
         "--max-epoch -1: it must be an integer of at least 0 (0: no limit)"),
        (TRAIN, SAN + ["--dropout", "1.5"], "--dropout 1.5: it must be in [0, 1]"),
        (TRAIN, SAN + ["--activation-dropout=-1"], "--activation-dropout -1: it must be in [0, 1]"),
        (TRAIN, SAN + ["--seed=-1"], "--seed -1: it must be an integer in [0, 2147483647]"),
        (TRAIN, SAN + ["--num-workers=-1"], "--num-workers -1: it must be an integer in [0, "),
        # ran until killed, starting worker processes
        (TRAIN, SAN + ["--num-workers", "2147483648"],
         "--num-workers 2147483648: it must be an integer in [0, "),
        (TRAIN, SAN + ["--num-workers", "1"], None),
        (TRAIN, SAN + ["--num-workers", "64"], None),  # more than the processors: torch warns
        # numpy's "Seed must be between 0 and 2**32 - 1" at the first epoch (seed + epoch)
        (TRAIN, SAN + ["--seed", "4294967295"],
         "--seed 4294967295: it must be an integer in [0, 2147483647] (fairseq seeds numpy with "
         "it plus the epoch, below 2**32)"),
        (TRAIN, SAN + ["--seed", "2147483647"], None),
        # kept as text and read back as a literal: a traceback as fairseq-train began
        (TRAIN, SAN + ["--batch-size-valid", "nan"],
         "--batch-size-valid nan: it must be an integer of at least 1"),
        (TRAIN, SAN + ["--max-tokens-valid", "inf"],
         "--max-tokens-valid inf: it must be an integer of at least 1"),
        (TRAIN, SAN + ["--max-tokens-valid", "abc"],
         "--max-tokens-valid abc: it must be an integer of at least 1"),
        (TRAIN, SAN + ["--batch-size-valid", "[8]"],
         "--batch-size-valid [8]: it must be an integer of at least 1"),
        (TRAIN, SAN + ["--batch-size-valid", "8", "--max-tokens-valid", "1e3"], None),
        # a translation model's --decoder-output-dim is text too: int()'s ValueError, 0 a
        # ZeroDivisionError, as fairseq-train built the model
        (TRAIN, SAN + ["--decoder-output-dim", "abc"],
         "--decoder-output-dim abc: it must be an integer of at least 1"),
        (TRAIN, SAN + ["--decoder-output-dim", "16.5"],
         "--decoder-output-dim 16.5: it must be an integer of at least 1"),
        (TRAIN, SAN + ["--decoder-output-dim", "0"],
         "--decoder-output-dim 0: it must be an integer of at least 1"),
        (TRAIN, SAN + ["--decoder-output-dim", "24"], None),
        (TRAIN, SAN + ["--optimizer", "adam", "--adam-betas", "(0.9, 1.5)"],
         "--adam-betas 1.5: it must be in [0, 1)"),
        # an IndexError in the optimizer, fairseq's eval() of a malformed one, on every rank
        (TRAIN, SAN + ["--optimizer", "adam", "--adam-betas", "(0.9,)"],
         "--adam-betas '(0.9,)': it must be a pair of numbers, e.g. '(0.9, 0.98)'"),
        (TRAIN, SAN + ["--optimizer", "adam", "--adam-betas", "(0.9, 0.98"],
         "--adam-betas '(0.9, 0.98': it must be a pair of numbers"),
        (TRAIN, SAN + ["--optimizer", "adamax", "--adamax-betas", "(0.9, 0.98, 0.99)"],
         "--adamax-betas '(0.9, 0.98, 0.99)': it must be a pair of numbers"),
        (TRAIN, SAN + ["--optimizer", "adam", "--adam-betas", "[0.9, 0.98]"], None),
        (TRAIN, SAN + ["--optimizer", "adam", "--weight-decay=-0.1"],
         "--weight-decay -0.1: it must be at least 0"),
        # nan, inf, a count beyond 64 bits: NaN gradients (a traceback at the first update), an
        # OverflowError from numpy, no clipping or no time limit without a word
        (TRAIN, SAN + ["--lr", "1e309"], "--lr inf: it must be greater than 0, and finite"),
        (TRAIN, SAN + ["--optimizer", "adam", "--weight-decay", "inf"],
         "--weight-decay inf: it must be at least 0, and finite"),
        (TRAIN, SAN + ["--max-tokens", "9223372036854775808"],
         "--max-tokens 9223372036854775808: it must be an integer of at least 1, at most "
         "9223372036854775807 (fairseq holds it in a 64-bit integer)"),
        (TRAIN, SAN + ["--max-tokens", "9223372036854775807"], None),
        (TRAIN, SAN + ["--optimizer", "adam", "--adam-eps", "0"],
         "--adam-eps 0: it must be greater than 0"),
        (TRAIN, SAN + ["--optimizer", "adam", "--adam-eps", "nan"],
         "--adam-eps nan: it must be greater than 0, and finite"),
        (TRAIN, SAN + ["--optimizer", "nag", "--momentum", "nan"],
         "--momentum nan: it must be at least 0, and finite"),
        (TRAIN, SAN + ["--optimizer", "sgd", "--momentum=-1"],
         "--momentum -1: it must be at least 0"),
        (TRAIN, SAN + ["--clip-norm=-1"], "--clip-norm -1: it must be at least 0 (0: no clipping)"),
        (TRAIN, SAN + ["--clip-norm", "nan"],
         "--clip-norm nan: it must be at least 0 (0: no clipping), and finite"),
        (TRAIN, SAN + ["--clip-norm", "inf", "--stop-time-hours", "inf"], None),  # no limit
        (TRAIN, SAN + ["--stop-time-hours", "nan"],
         "--stop-time-hours nan: it must be at least 0 (0: no limit), and finite"),
        (TRAIN, SAN + ["--stop-time-hours=-1"],
         "--stop-time-hours -1: it must be at least 0 (0: no limit)"),
        (TRAIN, SAN + ["--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "1.5"],
         "--label-smoothing 1.5: it must be in [0, 1)"),
        # tracebacks at the first batch: fairseq's batching holds the multiple in 32 bits
        # ("OverflowError: value too large to convert to int32_t"), islice's step the shards
        ("get_generation_parser", ["data", "--path", "c.pt", "--required-batch-size-multiple",
                                   "2147483648"],
         "--required-batch-size-multiple 2147483648: it must be an integer in [1, 2147483647]"),
        ("get_generation_parser", ["data", "--path", "c.pt", "--num-shards",
                                   "9223372036854775808"],
         "--num-shards 9223372036854775808: it must be an integer of at least 1, at most "
         "9223372036854775807"),
        ("get_generation_parser", ["data", "--path", "c.pt", "--num-shards",
                                   "9223372036854775807", "--required-batch-size-multiple",
                                   "2147483647"], None),
        # --fp16's loss scaler, parsed before --fp16 is refused on the CPU: ZeroDivisionError at
        # the first update, no floor or no threshold, every update skipped as an overflow
        (TRAIN, SAN + ["--fp16-init-scale", "0"],
         "--fp16-init-scale 0: it must be an integer of at least 1"),
        (TRAIN, SAN + ["--fp16-scale-window", "0"],
         "--fp16-scale-window 0: it must be an integer of at least 1"),
        (TRAIN, SAN + ["--fp16-init-scale", "9223372036854775808"],
         "--fp16-init-scale 9223372036854775808: it must be an integer of at least 1, at most "),
        (TRAIN, SAN + ["--min-loss-scale", "nan"],
         "--min-loss-scale nan: it must be greater than 0, and finite"),
        (TRAIN, SAN + ["--min-loss-scale", "0"], "--min-loss-scale 0: it must be greater than 0"),
        (TRAIN, SAN + ["--min-loss-scale", "1e309"],
         "--min-loss-scale inf: it must be greater than 0, and finite"),
        (TRAIN, SAN + ["--threshold-loss-scale", "inf"],
         "--threshold-loss-scale inf: it must be greater than 0, and finite"),
        (TRAIN, SAN + ["--threshold-loss-scale=-1"],
         "--threshold-loss-scale -1: it must be greater than 0"),
        (TRAIN, SAN + ["--fp16-scale-tolerance", "nan"],
         "--fp16-scale-tolerance nan: it must be in [0, 1]"),
        (TRAIN, SAN + ["--fp16-scale-tolerance", "1.5"],
         "--fp16-scale-tolerance 1.5: it must be in [0, 1]"),
        (TRAIN, SAN + ["--fp16-init-scale", "4", "--fp16-scale-window", "100",
                       "--fp16-scale-tolerance", "0.25", "--min-loss-scale", "1e-8",
                       "--threshold-loss-scale", "1"], None),
        (TRAIN, SAN + ["--lr-scheduler", "inverse_sqrt", "--warmup-updates", "0"],
         "--warmup-updates 0: it must be an integer of at least 1 (--lr-scheduler inverse_sqrt "
         "divides by it)"),
        (TRAIN, SAN + ["--lr-scheduler", "polynomial_decay", "--warmup-updates", "0",
                       "--total-num-update", "10"], None),
        # ZeroDivisionError at the end of the first epoch
        (TRAIN, SAN + ["--save-interval", "0"],
         "--save-interval 0: it must be an integer of at least 1"),
        (TRAIN, SAN + ["--validate-interval", "0"],
         "--validate-interval 0: it must be an integer of at least 1"),
        # each scheduler's traceback as it was built, after the data and the model were loaded:
        # hydra's "Error merging override lr_scheduler.total_num_update=null", AssertionError
        (TRAIN, SAN + ["--lr-scheduler", "polynomial_decay", "--max-update", "300"],
         "--lr-scheduler polynomial_decay needs --total-num-update, the updates over which it "
         "decays the learning rate (fairseq does not take --max-update for it): e.g. "
         "--total-num-update 300"),
        (TRAIN, SAN + ["--lr-scheduler", "polynomial_decay", "--total-num-update", "0"],
         "--total-num-update 0: it must be greater than 0"),
        (TRAIN, SAN + ["--lr-scheduler", "polynomial_decay", "--total-num-update", "10",
                       "--lr", "0.1,0.01"], None),  # one learning rate an epoch
        # "please specify steps or phase_ratio", ZeroDivisionError, "phase ratios must add up
        # to 1", a bare AssertionError, "math domain error"
        (TRAIN, SAN + ["--lr-scheduler", "tri_stage"],
         "--lr-scheduler tri_stage needs its stages' lengths: --phase-ratio '(0.1, 0.4, 0.5)' "
         "with --max-update N, or --warmup-steps, --hold-steps and --decay-steps"),
        (TRAIN, SAN + ["--lr-scheduler", "tri_stage", "--warmup-steps", "3"],
         "--decay-steps 0: --lr-scheduler tri_stage divides by it; give one of at least 1"),
        (TRAIN, SAN + ["--lr-scheduler", "tri_stage", "--phase-ratio", "(0.7, 0.2, 0.1)",
                       "--max-update", "100"],
         "--phase-ratio '(0.7, 0.2, 0.1)': fairseq asserts that the ratios add up to exactly 1, "
         "and in floating point they add up to 0.9999999999999999: e.g. '(0.1, 0.4, 0.5)'"),
        (TRAIN, SAN + ["--lr-scheduler", "tri_stage", "--phase-ratio", "(0.1, 0.4, 0.5)"],
         "--phase-ratio '(0.1, 0.4, 0.5)' is a share of --max-update, which is not given"),
        (TRAIN, SAN + ["--lr-scheduler", "tri_stage", "--phase-ratio", "(0.5, 0.45, 0.05)",
                       "--max-update", "6"],
         "--phase-ratio '(0.5, 0.45, 0.05)' with --max-update 6 leaves the decay stage no "
         "update"),
        (TRAIN, SAN + ["--lr-scheduler", "tri_stage", "--decay-steps", "3", "--final-lr-scale",
                       "0"],
         "--final-lr-scale 0: it must be greater than 0 (--lr-scheduler tri_stage decays by its "
         "logarithm)"),
        (TRAIN, SAN + ["--lr-scheduler", "tri_stage", "--phase-ratio", "(0.1, 0.4, 0.5)",
                       "--max-update", "100"], None),
        # "Either --max_update or --lr-period-updates must be set"; a ZeroDivisionError
        (TRAIN, SAN + ["--lr-scheduler", "cosine"],
         "--lr-scheduler cosine needs --lr-period-updates N, or a --max-update above "
         "--warmup-updates (the period is then the updates after the warm-up), and --max-update "
         "is not given"),
        (TRAIN, SAN + ["--lr-scheduler", "cosine", "--max-update", "10", "--warmup-updates", "10"],
         "--lr-scheduler cosine needs --lr-period-updates N"),
        (TRAIN, SAN + ["--lr-scheduler", "cosine", "--lr-period-updates", "5"], None),
        # ValueError "Cannot use a fixed learning rate schedule with inverse_sqrt"; step: the
        # first alone, silently
        (TRAIN, SAN + ["--lr-scheduler", "inverse_sqrt", "--lr", "0.1,0.01"],
         "--lr 0.1,0.01: --lr-scheduler inverse_sqrt schedules from one learning rate; give one, "
         "or --lr-scheduler fixed (or polynomial_decay) for one an epoch"),
        (TRAIN, SAN + ["--lr-scheduler", "step", "--lr", "0.1,0.01"],
         "--lr 0.1,0.01: --lr-scheduler step schedules from one learning rate"),
        # bare AssertionErrors, a ZeroDivisionError
        (TRAIN, SAN + ["--lr-scheduler", "step", "--lr", "0.01", "--min-lr", "0.1"],
         "--min-lr 0.1: --lr-scheduler step decays from --lr 0.01 towards it, and it must be at "
         "least 0 and below --lr"),
        (TRAIN, SAN + ["--lr-scheduler", "step", "--lr-deacy-period", "0"],
         "--lr-deacy-period 0: it must be at least 1"),
        (TRAIN, SAN + ["--lr-scheduler", "triangular", "--max-lr", "1", "--lr-period-updates",
                       "1"],
         "--lr-period-updates 1: --lr-scheduler triangular divides by half of it; give one of "
         "at least 2"),
        (TRAIN, SAN + ["--lr-scheduler", "triangular", "--max-lr", "0.1", "--lr", "0.2"],
         "--max-lr 0.1 is not above --lr 0.2: --lr-scheduler triangular cycles between them"),
        (TRAIN, SAN + ["--lr-scheduler", "triangular", "--max-lr", "0.1", "--lr", "0.1"],
         "--max-lr 0.1 is not above --lr 0.1"),
        (TRAIN, SAN + ["--lr-scheduler", "triangular", "--max-lr", "1", "--lr", "0.1,0.01"],
         "--lr 0.1,0.01: --lr-scheduler triangular schedules from one learning rate"),
        (TRAIN, SAN + ["--lr-scheduler", "cosine", "--lr-period-updates", "5", "--lr",
                       "0.1,0.01"],
         "--lr 0.1,0.01: --lr-scheduler cosine schedules from one learning rate"),
        (TRAIN, SAN + ["--lr-scheduler", "cosine", "--lr-period-updates", "0"],
         "--lr-scheduler cosine needs --lr-period-updates N"),
        (TRAIN, SAN + ["--lr-scheduler", "step", "--lr", "0.01", "--min-lr", "0.01"],
         "--min-lr 0.01: --lr-scheduler step decays from --lr 0.01 towards it"),
        (TRAIN, SAN + ["--lr-scheduler", "step", "--min-lr=-1"],
         "--min-lr -1: --lr-scheduler step decays from --lr 0.25 towards it"),
        (TRAIN, SAN + ["--lr-scheduler", "step", "--lr-decay", "1.5"],
         "--lr-decay 1.5: it must be in [0, 1]"),
        (TRAIN, SAN + ["--lr-scheduler", "step", "--lr-decay=-0.5"],
         "--lr-decay -0.5: it must be in [0, 1]"),
        (TRAIN, SAN + ["--lr-scheduler", "polynomial_decay"],
         "--lr-scheduler polynomial_decay needs --total-num-update, the updates over which it "
         "decays the learning rate (fairseq does not take --max-update for it): e.g. "
         "--total-num-update 100000"),
        (TRAIN, SAN + ["--lr-scheduler", "tri_stage", "--phase-ratio", "(0.5, 0.5)",
                       "--max-update", "10"],
         "--phase-ratio '(0.5, 0.5)': it must be three numbers, e.g. '(0.1, 0.4, 0.5)'"),
        # a scheduler's nan or inf: NaN learning rates trained silently (--final-lr-scale), a
        # ValueError at the first update (--lr-period-updates), an AssertionError (--max-lr)
        (TRAIN, SAN + ["--lr-scheduler", "tri_stage", "--decay-steps", "3", "--final-lr-scale",
                       "nan"], "--final-lr-scale nan: it must be a finite number"),
        (TRAIN, SAN + ["--lr-scheduler", "tri_stage", "--decay-steps", "3", "--final-lr-scale",
                       "inf"], "--final-lr-scale inf: it must be a finite number"),
        (TRAIN, SAN + ["--lr-scheduler", "cosine", "--lr-period-updates", "nan", "--max-update",
                       "100"], "--lr-period-updates nan: it must be a finite number"),
        (TRAIN, SAN + ["--lr-scheduler", "triangular", "--max-lr", "nan"],
         "--max-lr nan: it must be a finite number"),
        (TRAIN, SAN + ["--lr-scheduler", "polynomial_decay", "--total-num-update", "nan"],
         "--total-num-update 'nan': it must be a finite number"),
        (TRAIN, SAN + ["--lr-scheduler", "polynomial_decay", "--total-num-update", "abc"],
         "--total-num-update 'abc': it must be a finite number"),
        (TRAIN, SAN + ["--optimizer", "adam", "--lr", "0.1,0.01", "--update-freq", "2,4"], None),
        (TRAIN, SAN + ["--update-freq", "1e1,2.0"], None),  # whole numbers: [10, 2]
        ("get_generation_parser", ["data", "--path", "c.pt", "--seed=-1"],
         "--seed -1: it must be an integer in [0, 2147483647]"),
        # fairseq-train: "OverflowError: int too big to convert", a traceback
        (TRAIN, SAN + ["--max-source-positions", "99999999999999999999999"],
         "--max-source-positions 99999999999999999999999: it must be an integer in [1, "
         "2147483647]"),
        ("get_interactive_generation_parser", ["data", "--path", "c.pt", "--tokenizer", "moses"],
         "--tokenizer moses needs --source-lang and --target-lang: fairseq gives the tokenizer "
         "its languages from the command line, before it reads them from the data (e.g. "
         "--source-lang en --target-lang de)"),
        ("get_generation_parser", ["data", "--path", "c.pt", "--tokenizer", "moses", "-t", "de"],
         "--tokenizer moses needs --source-lang: "),
        ("get_interactive_generation_parser", ["data", "--path", "c.pt", "--tokenizer", "moses",
                                               "-s", "en", "-t", "de"], None),
        ("get_generation_parser", ["data", "--path", "c.pt", "--print-step"],  # KeyError: 'steps'
         "--print-step is an option of fairseq's iterative refinement of non-autoregressive "
         "models (--task translation_lev); this model decodes left to right, without it: drop it"),
        ("get_interactive_generation_parser", ["data", "--path", "c.pt", "--task",
                                               "language_modeling", "--iter-decode-max-iter", "3"],
         "--iter-decode-max-iter is an option of fairseq's iterative refinement"),
        ("get_generation_parser", ["data", "--path", "c.pt", "--task", "translation_lev",
                                   "--print-step", "--retain-iter-history"], None),
        ("get_generation_parser", ["data", "--path", "c.pt", "--constraints"],  # a TypeError
         "--constraints: fairseq-x has no constraints to decode with (its data hold none); give "
         "them to fairseq-interactive, after a tab on each input line, or leave --constraints "
         "out"),
        ("get_interactive_generation_parser", ["data", "--path", "c.pt", "--constraints",
                                               "unordered"], None),
        ("get_interactive_generation_parser", ["data", "--path", "c.pt", "--results-path", "r"],
         "--results-path: fairseq-x writes nothing there (fairseq-generate alone does); it prints "
         "to standard output: redirect that (> FILE)"),
        ("get_validation_parser", ["data", "--task", "translation_san", "--path", "c.pt",
                                   "--results-path", "r"], "--results-path: fairseq-x writes"),
        ("get_eval_lm_parser", ["data", "--path", "c.pt", "--results-path", "r"],
         "--results-path: fairseq-x writes nothing there"),
        ("get_eval_lm_parser", ["data", "--path", "c.pt", "--softmax-batch", "-5"],  # assert
         "--softmax-batch -5: it must be an integer of at least 1"),
        ("get_generation_parser", ["data", "--path", "c.pt", "--results-path", "r"], None),
        # fairseq-interactive loaded no --lm-path model, forced no prefix (both silently), and
        # failed with KeyError: 'target' on --score-reference
        ("get_interactive_generation_parser", ["data", "--path", "c.pt", "--lm-path", "lm.pt",
                                               "--lm-weight", "0.5"],
         "--lm-path: fairseq-x would ignore it: it fuses no language model (fairseq-generate "
         "--lm-path does)"),
        ("get_interactive_generation_parser", ["data", "--path", "c.pt", "--prefix-size", "2"],
         "--prefix-size: fairseq-x would ignore it: it forces no prefix of its input"),
        ("get_interactive_generation_parser", ["data", "--path", "c.pt", "--score-reference"],
         "--score-reference: fairseq-x would ignore it: its input has no reference to score"),
        ("get_generation_parser", ["data", "--path", "c.pt", "--prefix-size", "2"], None),
        # fairseq printed soft alignments as hard ones and failed after the first sentence
        ("get_interactive_generation_parser", ["data", "--path", "c.pt", "--print-alignment",
                                               "soft"],
         "--print-alignment soft: fairseq-x prints hard alignments only (source-target pairs); "
         "pass --print-alignment hard, or fairseq-generate for soft ones"),
        ("get_generation_parser", ["data", "--path", "c.pt", "--score-reference",
                                   "--print-alignment", "soft"],
         "--print-alignment soft with --score-reference: fairseq's scorer aligns the references "
         "hard only; pass --print-alignment hard"),
        ("get_generation_parser", ["data", "--path", "c.pt", "--print-alignment", "soft"], None),
        # the prefix forced from the left-padded targets' first columns, without a word
        ("get_generation_parser", ["data", "--path", "c.pt", "--prefix-size", "2",
                                   "--left-pad-target"],
         "--prefix-size 2 with --left-pad-target: fairseq forces the first columns of the "
         "left-padded targets, padding and the wrong tokens of the shorter ones; leave "
         "--left-pad-target out (decoding does not need it)"),
        # the best checkpoint kept by a metric the wrong way round, silently; or never logged
        (TRAIN, SAN + ["--task", "translation_san", "--eval-bleu", "--best-checkpoint-metric",
                       "bleu"],
         "--best-checkpoint-metric bleu without --maximize-best-checkpoint-metric: fairseq would "
         "keep the lowest bleu as checkpoint_best.pt; add the flag"),
        (TRAIN, SAN + ["--maximize-best-checkpoint-metric"],
         "--maximize-best-checkpoint-metric with --best-checkpoint-metric loss: fairseq would keep "
         "the highest loss as checkpoint_best.pt; drop the flag"),
        (TRAIN, SAN + ["--best-checkpoint-metric", "bleu", "--maximize-best-checkpoint-metric"],
         "--best-checkpoint-metric bleu: the validation logs BLEU only with --eval-bleu"),
        (TRAIN, SAN + ["--task", "translation_san", "--eval-bleu", "--best-checkpoint-metric",
                       "bleu", "--maximize-best-checkpoint-metric"], None),
        (TRAIN, SAN + ["--criterion", "cross_entropy", "--best-checkpoint-metric", "nll_loss"],
         "--best-checkpoint-metric nll_loss: --criterion cross_entropy logs nll_loss only with "
         "--sentence-avg (without it, its loss is the negative log-likelihood per token): pass "
         "--best-checkpoint-metric loss"),  # refused at the first validation, an epoch trained
        (TRAIN, ["data", "--task", "language_modeling_san", "--arch", "transformer_lm_san",
                 "--criterion", "adaptive_loss", "--adaptive-softmax-cutoff", "1000",
                 "--ddp-backend", "legacy_ddp", "--best-checkpoint-metric", "nll_loss"],
         "--best-checkpoint-metric nll_loss: --criterion adaptive_loss logs nll_loss only"),
        (TRAIN, SAN + ["--criterion", "cross_entropy", "--sentence-avg",
                       "--best-checkpoint-metric", "nll_loss"], None),
        (TRAIN, SAN + ["--criterion", "label_smoothed_cross_entropy", "--best-checkpoint-metric",
                       "nll_loss"], None),
        # a run that trains nothing and exits 0: its learning rate starts at --stop-min-lr or below
        (TRAIN, SAN + ["--lr", "1e-3", "--stop-min-lr", "1"],
         "--stop-min-lr 1 is not below --lr 0.001: fairseq-train stops as soon as the learning "
         "rate is at most --stop-min-lr, and would train nothing; give a lower --stop-min-lr"),
        (TRAIN, SAN + ["--lr-scheduler", "inverse_sqrt", "--warmup-updates", "10",
                       "--stop-min-lr", "1e-9"],
         "--stop-min-lr 1e-09 is not below --warmup-init-lr 0, where --lr-scheduler inverse_sqrt's "
         "warm-up starts (0 when not given): fairseq-train stops as soon as the learning rate is "
         "at most --stop-min-lr, and would train nothing; give a lower --stop-min-lr or a "
         "--warmup-init-lr above it"),
        (TRAIN, SAN + ["--lr-scheduler", "inverse_sqrt", "--warmup-updates", "10",
                       "--warmup-init-lr", "1e-7", "--stop-min-lr", "1e-9"], None),
        # fairseq-train logged a ModuleNotFoundError, trained nothing and exited 0
        pytest.param(TRAIN, SAN + ["--write-checkpoints-asynchronously"],
                     "--write-checkpoints-asynchronously needs the iopath package, which is not "
                     "installed: fairseq-train would train nothing and exit 0",
                     marks=pytest.mark.skipif(importlib.util.find_spec("iopath") is not None,
                                              reason="iopath is installed")),
        ("get_validation_parser",
         ["data", "--task", "translation_san", "--path", "c.pt", "--san-decoding", "static"],
         "--san-decoding static: fairseq-x decodes nothing (it scores with teacher forcing), so "
         "it would be ignored"),
        ("get_validation_parser",  # its default, given: ignored all the same
         ["data", "--task", "translation_san", "--path", "c.pt", "--san-decoding=fairseq"],
         "--san-decoding fairseq: fairseq-x decodes nothing (it scores with teacher forcing)"),
        ("get_eval_lm_parser", ["data", "--task", "language_modeling_san", "--path", "c.pt",
                                "--san-decoder-precision", "bf16"],
         "--san-decoder-precision bf16: fairseq-x decodes nothing (it scores"),
        ("get_training_parser", ["data", "--task", "translation_san", "--arch", "transformer_san",
                                 "--san-decoder-precision", "int8"],
         "--san-decoder-precision int8: fairseq-x decodes nothing without --eval-bleu"),
        ("get_training_parser", ["data", "--task", "translation_san", "--arch", "transformer_san",
                                 "--san-analysis-dir", "js"],
         "--san-analysis-dir is for fairseq-validate (its teacher-forced pass): fairseq-x would "
         "analyse nothing"),
        ("get_eval_lm_parser", ["data", "--task", "language_modeling_san", "--path", "c.pt",
                                "--san-analysis-dir", "js"],
         "--san-analysis-dir is for fairseq-validate"),
        ("get_validation_parser", ["data", "--task", "translation_san", "--path", "c.pt",
                                   "--san-analysis-max-sentences", "5"],
         "--san-analysis-max-sentences 5 is an option of --san-analysis-dir: add "
         "--san-analysis-dir DIR (fairseq-validate), or drop --san-analysis-max-sentences"),
        ("get_generation_parser", ["data", "--task", "translation_san", "--path", "c.pt",
                                   "--san-analysis-save-sentences", "0"],
         "--san-analysis-save-sentences 0 is an option of --san-analysis-dir"),
        ("get_training_parser", ["data", "--task", "translation_san", "--arch", "transformer_san",
                                 "--eval-bleu", "--san-decoding", "static"], None),
        ("get_training_parser", ["data", "--task", "translation_san", "--arch", "transformer_san",
                                 "--san-decoding", "fast"], None),  # the model applies it
        ("get_training_parser", ["data", "--task", "language_modeling_san", "--arch",
                                 "transformer_lm_san", "--san-decoding", "static"],
         "--san-decoding static: fairseq-x decodes nothing (it trains), so it would be ignored"),
        ("get_generation_parser", ["data", "--task", "translation_san", "--path", "c.pt",
                                   "--san-decoding", "static", "--san-decoder-precision", "bf16"],
         None),
        ("get_validation_parser", ["data", "--task", "translation_san", "--path", "c.pt",
                                   "--san-analysis-dir", "js", "--san-analysis-max-sentences", "5"],
         None),
        ("get_generation_parser", ["data", "--path", "c.pt", "--temperature", "0"],
         "--temperature 0.0: it must be greater than 0 (greedy decoding is --beam 1 without "
         "--sampling)"),
        ("get_interactive_generation_parser", ["data", "--path", "c.pt", "--sampling",
                                               "--sampling-topk", "1", "--sampling-topp", "0.9"],
         "--sampling-topk 1 and --sampling-topp 0.9: fairseq's sampling keeps the top-p tokens "
         "and ignores top-k; pass one"),
        ("get_generation_parser", ["data", "--path", "c.pt", "--bf16"],
         "--bf16: fairseq-x does not apply it (fairseq converts a model to evaluate it with "
         "--fp16 only), and would run in fp32; pass --fp16, or decode with --san-decoding static "
         "--san-decoder-precision bf16"),
        ("get_eval_lm_parser", ["data", "--path", "c.pt", "--bf16"],
         "--bf16: fairseq-x does not apply it (fairseq converts a model to evaluate it with "
         "--fp16 only), and would run in fp32; pass --fp16"),  # no static decoder where none is
        ("get_interactive_generation_parser", ["data", "--path", "c.pt", "--amp"],
         "--amp: fairseq-x does not apply it (fairseq's automatic mixed precision is its "
         "trainer's), and would run in fp32"),  # the output was fp32's, without a word
        ("get_training_parser", ["data", "--arch", "transformer_san", "--amp"], None),
        pytest.param("get_training_parser", ["data", "--arch", "transformer_san", "--tpu"],
                     "--tpu needs a TPU through torch_xla, which this machine has not: leave it "
                     "out", marks=pytest.mark.skipif(
                         importlib.util.find_spec("torch_xla") is not None,
                         reason="torch_xla is installed")),  # fmt: skip
        pytest.param("get_training_parser", ["data", "--arch", "transformer_san", "--zero-sharding",
                                             "os"],
                     "--zero-sharding os needs the fairscale package, which this machine has not",
                     marks=pytest.mark.skipif(importlib.util.find_spec("fairscale") is not None,
                                              reason="fairscale is installed")),  # fmt: skip
        ("get_training_parser", ["data", "--arch", "transformer_san", "--cpu-offload"],
         "--cpu-offload is an option of --ddp-backend fully_sharded, and this run's is "
         "pytorch_ddp: leave it out"),  # fairseq's ValueError after loading data and model
        ("get_training_parser", ["data", "--arch", "transformer_san", "--bf16"], None),
        ("get_generation_parser", ["data", "--path", "c.pt", "--san-analysis-dir", "js"],
         "--san-analysis-dir is for fairseq-validate (its teacher-forced pass): fairseq-x would "
         "analyse nothing"),  # --task translation: "an option of --task translation_san" first
        ("get_generation_parser", ["data", "--task", "translation_san", "--path", "c.pt",
                                   "--san-decoder-self-policy", "2"],
         "fairseq-x has no option --san-decoder-self-policy: it is an option of --arch "
         "transformer_san or --arch transformer_lm_san, set when the model is trained; a "
         "checkpoint takes another value with --model-overrides \"{'san_decoder_self_policy': "
         "VALUE}\""),
        ("get_training_parser", ["data", "--arch", "transformer_san"], None),
        ("get_training_parser", ["data", "--arch", "transformer_san", "--adaptive-softmax-cutoff",
                                 "1000,3000", "--criterion", "label_smoothed_cross_entropy"],
         "--adaptive-softmax-cutoff trains with --criterion adaptive_loss only: with "
         "label_smoothed_cross_entropy the first update fails in autograd (fairseq's adaptive "
         "softmax changes in place the log-probabilities it needs); pass --criterion adaptive_loss "
         "--ddp-backend legacy_ddp, or drop --adaptive-softmax-cutoff"),
        ("get_training_parser", ["data", "--arch", "transformer_lm_san", "--task",
                                 "language_modeling", "--adaptive-softmax-cutoff", "1000",
                                 "--criterion", "adaptive_loss"],
         "--criterion adaptive_loss does not train with --ddp-backend pytorch_ddp (PyTorch's "
         "DistributedDataParallel, fairseq-train's default): pass --ddp-backend legacy_ddp"),
        ("get_training_parser", ["data", "--arch", "transformer_san", "--adaptive-softmax-cutoff",
                                 "1000,3000", "--criterion", "adaptive_loss", "--ddp-backend",
                                 "legacy_ddp"], None),
        # fairseq's lstm, lstm_lm and fconv_lm build an adaptive softmax under adaptive_loss
        # only: their architectures' default cutoff goes unread with another criterion
        ("get_training_parser", ["data", "--arch", "lstm"], None),
        ("get_training_parser", ["data", "--arch", "lstm", "--share-decoder-input-output-embed"],
         None),
        ("get_training_parser", ["data", "--task", "language_modeling", "--arch", "fconv_lm"],
         None),
        ("get_training_parser", ["data", "--arch", "fconv", "--encoder-layers", "[(16, 3)] * 2"],
         None),  # fconv's layers are text: widths and kernels, no count
        ("get_training_parser", ["data", "--arch", "lstm", "--criterion", "adaptive_loss"],
         "--criterion adaptive_loss does not train with --ddp-backend pytorch_ddp"),
        # adaptive_loss without an adaptive softmax: fairseq's bare AssertionError as the
        # criterion is built (with legacy_ddp), or its exception for pytorch_ddp
        *(("get_training_parser", ["data", "--arch", "transformer_lm_san", "--task",
                                   "language_modeling", "--criterion", "adaptive_loss", *ddp],
           "--criterion adaptive_loss trains an adaptive softmax, and this model has none: add "
           "--adaptive-softmax-cutoff")
          for ddp in ([], ["--ddp-backend", "legacy_ddp"])),
        ("get_training_parser", ["data", "--arch", "transformer_lm_wiki103", "--task",
                                 "language_modeling", "--criterion", "adaptive_loss",
                                 "--ddp-backend", "legacy_ddp"], None),  # its arch's cutoff
        # fairseq's tracebacks at build or at the first update, or a tie dropped without a word
        ("get_training_parser", ["data", "--arch", "transformer_san", "--adaptive-softmax-cutoff",
                                 "1000", "--criterion", "adaptive_loss", "--ddp-backend",
                                 "legacy_ddp", "--tie-adaptive-weights"],
         "--tie-adaptive-weights ties the adaptive softmax to an adaptive input embedding "
         "(--adaptive-input, a language model's), which this model has not: drop "
         "--tie-adaptive-weights, or add --adaptive-input"),
        ("get_training_parser", ["data", "--arch", "transformer_san", "--adaptive-softmax-cutoff",
                                 "1000", "--criterion", "adaptive_loss", "--ddp-backend",
                                 "legacy_ddp", "--share-decoder-input-output-embed"],
         "--share-decoder-input-output-embed ties the output projection to the input embeddings, "
         "and --adaptive-softmax-cutoff replaces that projection (fairseq drops the tie without a "
         "word): drop one of them"),
        ("get_training_parser", ["data", "--arch", "transformer_san", "--share-all-embeddings",
                                 "--decoder-output-dim", "16"],
         "--decoder-output-dim 16 with --share-all-embeddings: the output projection is the "
         "512-wide input embeddings, which cannot take 16-wide outputs (a shape error at the "
         "first update): drop --decoder-output-dim, or --share-all-embeddings"),
        ("get_training_parser", ["data", "--arch", "transformer_lm_san", "--task",
                                 "language_modeling", "--share-decoder-input-output-embed",
                                 "--decoder-input-dim", "64", "--decoder-output-dim", "32"],
         "--decoder-output-dim 32 with --share-decoder-input-output-embed: the output projection "
         "is the 64-wide input embeddings"),  # a language model's embeddings: its input dim
        ("get_training_parser", ["data", "--arch", "transformer_san", "--decoder-output-dim",
                                 "16"], None),  # untied: projected to 16, trains
        # the embeddings' own width: fairseq trains it; refused as "16 cannot take 16" (text)
        ("get_training_parser", ["data", "--arch", "transformer_san", "--share-all-embeddings",
                                 "--decoder-embed-dim", "16", "--encoder-embed-dim", "16",
                                 "--decoder-output-dim", "16"], None),
        ("get_training_parser", ["data", "--arch", "transformer", "--share-decoder-input-output-"
                                 "embed", "--decoder-output-dim", "512"], None),
        # a language model's adaptive input and character embeddings (fairseq's tracebacks)
        ("get_training_parser", ["data", "--arch", "transformer_lm_san", "--task",
                                 "language_modeling", "--adaptive-input"],
         "--adaptive-input needs --adaptive-input-cutoff, the vocabulary's bands"),
        # a band's width divided by 0 (a ZeroDivisionError), or by a negative factor
        ("get_training_parser", ["data", "--arch", "transformer_lm_san", "--task",
                                 "language_modeling", "--adaptive-input", "--adaptive-input-cutoff",
                                 "1000", "--adaptive-input-factor", "0"],
         "--adaptive-input-factor 0: it must be greater than 0"),
        ("get_training_parser", ["data", "--arch", "transformer_san", "--adaptive-softmax-cutoff",
                                 "1000", "--criterion", "adaptive_loss", "--ddp-backend",
                                 "legacy_ddp", "--adaptive-softmax-factor=-2"],
         "--adaptive-softmax-factor -2: it must be greater than 0"),
        ("get_training_parser", ["data", "--arch", "transformer_lm_san", "--task",
                                 "language_modeling", "--character-embeddings",
                                 "--share-decoder-input-output-embed"],
         "--share-decoder-input-output-embed ties the output projection to one table of input "
         "embeddings, which --character-embeddings does not make (fairseq fails on its missing "
         "'weight'): drop --share-decoder-input-output-embed"),
        ("get_training_parser", ["data", "--arch", "transformer_lm_san", "--task",
                                 "language_modeling", "--adaptive-input", "--adaptive-input-cutoff",
                                 "1000", "--share-decoder-input-output-embed"],
         "--share-decoder-input-output-embed ties the output projection to one table of input "
         "embeddings, which --adaptive-input does not make"),
        *(("get_training_parser", ["data", "--arch", "transformer_lm_san", "--task",
                                   "language_modeling", "--criterion", "adaptive_loss",
                                   "--ddp-backend", "legacy_ddp", "--adaptive-input",
                                   "--adaptive-input-cutoff", "1000,3000", "--tie-adaptive-weights",
                                   *tied], said)
          for tied, said in [
              ([], "--tie-adaptive-weights ties an adaptive softmax to the adaptive input, and "
               "this model has none: add --adaptive-softmax-cutoff"),
              (["--adaptive-softmax-cutoff", "1000"], "--tie-adaptive-weights ties each band of "
               "the adaptive softmax to the adaptive input's, and --adaptive-softmax-cutoff 1000 "
               "differs from --adaptive-input-cutoff 1000,3000: give both the same value"),
              (["--adaptive-softmax-cutoff", "1000,3000", "--adaptive-input-factor", "2"],
               "--tie-adaptive-weights ties each band of the adaptive softmax to the adaptive "
               "input's, and --adaptive-softmax-factor 4 differs from --adaptive-input-factor 2"),
              (["--adaptive-softmax-cutoff", "1000,3000", "--decoder-output-dim", "64"],
               "--tie-adaptive-weights ties each band of the adaptive softmax to the adaptive "
               "input's, and --decoder-output-dim 64 differs from --decoder-input-dim 512"),
              (["--adaptive-softmax-cutoff", "1000, 3000"], None),  # the same bands
              (["--adaptive-softmax-cutoff", "[1000, 3000]"], None),  # as fairseq reads them
          ]),
        ("get_generation_parser", ["data", "--path", "c.pt"], None),
        ("get_generation_parser", ["data", "--path", "c.pt", "--nbest", "4", "--beam", "4"], None),
        ("get_generation_parser", ["data", "--path", "c.pt", "--model-overrides",
                                   "{'task': {'_name': 'translation_san'}}"],
         "--model-overrides key 'task': fairseq-x builds only the model from the checkpoint's "
         "configuration and takes its task from its own command line, so the key would be "
         "ignored; pass --task NAME and the task's options as flags (--task translation_san or "
         "language_modeling_san, ...)"),
        ("get_generation_parser", ["data", "--task", "translation", "--path", "c.pt", "--lm-path",
                                   "lm.pt", "--lm-weight", "0.2", "--model-overrides",
                                   "{'task': {'data': 'lm-data'}}"],
         None),  # the language model's task reads it
        ("get_interactive_generation_parser", ["data", "--path", "c.pt", "--lm-path", "lm.pt",
                                               "--model-overrides", "{'task': {'data': 'x'}}"],
         "--lm-path: fairseq-x would ignore it: it fuses no language model"),  # no LM is loaded
        ("get_interactive_generation_parser", ["data", "--path", "c.pt",
                                               "--model-overrides", "{'task': {'data': 'x'}}"],
         "--model-overrides key 'task': fairseq-x builds only the model"),
        ("get_eval_lm_parser", ["data", "--path", "c.pt", "--model-overrides",
                                "{'task': {'tokens_per_sample': 64}}"],
         "--model-overrides key 'task': fairseq-x builds only the model"),
        ("get_generation_parser", ["data", "--task", "speech_to_text", "--path", "c.pt",
                                   "--model-overrides", "{'task': {'data': 'x'}}"],
         None),  # fairseq-generate hands it to this task's load_dataset
        ("get_interactive_generation_parser", ["data", "--path", "c.pt", "--model-overrides",
                                               "{'generation': {'beam': 2}, 'dropout': 0.1}"],
         "--model-overrides key 'generation': fairseq-x builds only the model from the "
         "checkpoint's configuration and takes its generation from its own command line, so the "
         "key would be ignored; pass the generation options as flags (--beam 5, ...)"),
        ("get_generation_parser", ["data", "--path", "c.pt", "--model-overrides",
                                   "{'bpe': 'sentencepiece'}"],
         "--model-overrides key 'bpe': fairseq-x builds only the model"),
        ("get_generation_parser", ["data", "--path", "c.pt", "--model-overrides",
                                   "{'criterion': {'label_smoothing': 0.2}}"],
         "--model-overrides key 'criterion': fairseq-x builds only the model from the checkpoint's "
         "configuration and takes its criterion from its own command line, so the key would be "
         "ignored; drop it, or give the criterion options as flags of fairseq-x"),
        ("get_generation_parser", ["data", "--path", "c.pt", "--model-overrides",
                                   "{'san_policy': 'p.json', 'encoder_layers': 6}"], None),
        ("get_generation_parser", ["data", "--task", "translation_san", "--path", "c.pt",
                                   "--san-decoding", "fast", "--model-overrides",
                                   "{'san_decoding': 'no-cache'}"],
         "--san-decoding fast and --model-overrides (decoding 'no-cache') ask fairseq-x for two "
         "decodings, and --san-decoding would win without a word: give one (--san-decoding "
         "no-cache alone decodes as the override asks)"),
        ("get_interactive_generation_parser",
         ["data", "--task", "translation_san", "--path", "c.pt", "--san-decoding", "static",
          "--model-overrides", "{'san_fast_decoding': True}"],
         "--san-decoding static and --model-overrides (decoding 'fast') ask fairseq-x for two"),
        ("get_generation_parser", ["data", "--task", "translation_san", "--path", "c.pt",
                                   "--san-decoder", "static", "--model-overrides",
                                   "{'san_decoding': 'no-cache'}"],
         "--san-decoding static and --model-overrides (decoding 'no-cache') ask"),
        *(("get_generation_parser", ["data", "--task", "translation_san", "--path", "c.pt",
                                     *decoding, "--model-overrides",
                                     "{'san_decoding': 'no-cache'}"], None)
          for decoding in ([], ["--san-decoding", "fairseq"], ["--san-decoding", "no-cache"])),
        ("get_validation_parser", ["data", "--task", "translation_san", "--path", "c.pt",
                                   "--model-overrides", "{'task': {'_name': 'translation_san'}}"],
         None),  # fairseq-validate loads the checkpoint's task, overrides applied
        ("get_validation_parser",
         ["data", "--task", "translation_san", "--path", "c.pt", "--san-analysis-dir", "js"], None),
        # shards that fairseq-validate, fairseq-train and fairseq-interactive ignored (every job
        # read the whole subset), or that fairseq-eval-lm failed on (a ValueError traceback)
        ("get_validation_parser", ["data", "--task", "translation_san", "--path", "c.pt",
                                   "--num-shards", "2", "--shard-id", "1"],
         "--num-shards 2 --shard-id 1: fairseq-x would ignore them and read the whole subset; "
         "fairseq-generate and fairseq-eval-lm alone shard a subset"),
        (TRAIN, SAN + ["--num-shards", "2"], "--num-shards 2 --shard-id 0: fairseq-x would"),
        ("get_interactive_generation_parser", ["data", "--path", "c.pt", "--shard-id", "1"],
         "--num-shards 1 --shard-id 1: fairseq-x would ignore them"),
        ("get_eval_lm_parser", ["data", "--path", "c.pt", "--num-shards", "2", "--shard-id", "5"],
         "--shard-id 5 of --num-shards 2: the shards are 0 to N - 1, N at least 1"),
        # a context window in a shard took its context from the shard's batch before: another
        # part of the text, and the shards' losses did not make the subset's
        ("get_eval_lm_parser", ["data", "--path", "c.pt", "--context-window", "4",
                                "--num-shards", "2", "--shard-id", "1"],
         "--context-window 4 with --num-shards 2: fairseq-eval-lm takes a batch's context from "
         "the batch before it in the shard"),
        ("get_eval_lm_parser", ["data", "--path", "c.pt", "--context-window", "4"], None),
        # fairseq-eval-lm's NotImplementedError once the model had loaded (a traceback)
        *(("get_eval_lm_parser", ["data", "--path", "c.pt", *given],
           f"--post-process {given[-1]!r} (or --remove-bpe): fairseq-eval-lm joins subword-nmt "
           "pieces only")
          for given in (["--remove-bpe", ""], ["--post-process", "sentencepiece"],
                        ["--post-process", "none"])),
        *(("get_eval_lm_parser", ["data", "--path", "c.pt", *given], None)
          for given in (["--remove-bpe"], ["--post-process", "subword_nmt"],
                        ["--post-process", "@@ "])),
        # an ensemble where one checkpoint is read: "no such file" of the joined name
        *((parser, ["data", "--task", task, "--path", "a.pt:b.pt"],
           "fairseq-x reads one checkpoint, and --path a.pt:b.pt names 2 (an ensemble is")
          for parser, task in (("get_eval_lm_parser", "language_modeling_san"),
                               ("get_validation_parser", "translation_san"))),
        ("get_generation_parser", ["data", "--task", "translation_san", "--path", "a.pt:b.pt"],
         None),
        ("get_eval_lm_parser", ["data", "--path", "c.pt", "--num-shards", "2", "--shard-id", "1"],
         None),
        # fairseq's assertion "Must specify --max-tokens", a traceback at the first batch
        ("get_generation_parser", ["data", "--path", "c.pt", "--batch-size", "4",
                                   "--num-batch-buckets", "3"],
         "--num-batch-buckets 3 needs --max-tokens: each bucket's batches are sized by their "
         "tokens (--batch-size alone cannot size them)"),
        (TRAIN, SAN + ["--batch-size", "4", "--num-batch-buckets", "3"],
         "--num-batch-buckets 3 needs --max-tokens"),
        ("get_generation_parser", ["data", "--path", "c.pt", "--max-tokens", "100",
                                   "--num-batch-buckets", "3"], None),
        # rows of padding taken for sentences: an IndexError (eval-lm), an AssertionError
        ("get_eval_lm_parser", ["data", "--path", "c.pt", "--pad-to-fixed-bsz"],
         "--pad-to-fixed-bsz: fairseq-x would take the rows of padding it adds to each batch for "
         "sentences; it is for training (on TPUs): leave it out"),
        ("get_generation_parser", ["data", "--task", "language_modeling_san", "--path", "c.pt",
                                   "--pad-to-fixed-bsz"], "--pad-to-fixed-bsz: fairseq-x would"),
        ("get_validation_parser", ["data", "--task", "language_modeling_san", "--path", "c.pt",
                                   "--pad-to-fixed-bsz"], None),
        # a --model-overrides that is no dict: fairseq-validate's "TypeError: cannot convert
        # dictionary update sequence element", a traceback
        *((parser, ["data", "--task", "translation_san", "--path", "c.pt", "--model-overrides",
                    "[1]"], "--model-overrides '[1]': it must be a dict of option names")
          for parser in ("get_validation_parser", "get_generation_parser")),
        # an empty subset name: "Dataset not found:  (data)", a traceback
        *(("get_validation_parser", ["data", "--task", "translation_san", "--path", "c.pt",
                                     "--valid-subset", given],
           f"--valid-subset {given!r}: a subset's name is empty")
          for given in ("", "valid,")),
        ("get_generation_parser", ["data", "--path", "c.pt", "--gen-subset", ""],
         "--gen-subset '': a subset's name is empty"),
        ("get_validation_parser", ["data", "--task", "translation_san", "--path", "c.pt",
                                   "--valid-subset", "valid,test"], None),
        # refused at loading, after fairseq-train printed its whole configuration (the loop's
        # --warm-start from a deleted checkpoint_best.pt)
        (TRAIN, SAN + ["--finetune-from-model", "/nonexistent/checkpoint_best.pt"],
         "--finetune-from-model /nonexistent/checkpoint_best.pt: no such file"),
        (TRAIN, SAN + ["--restore-file", "/nonexistent/checkpoint_last.pt"],
         "--restore-file /nonexistent/checkpoint_last.pt: no such file (fairseq would train"),
    ],
)  # fmt: skip
def test_an_option_a_command_needs_is_named_as_it_is_parsed(parser, argv, said):
    """fairseq's own failures: a bare RuntimeError (no --arch), KeyError: None (validate without
    --task), a TypeError at loading (no --path), a file '@@ ' or an IndexError at the first <unk>
    (--replace-unk); a ZeroDivisionError or slice error (--beam 0, --nbest 0), NaN scores
    (--lenpen nan), a ValueError converting NaN or an OverflowError (--max-len-a), an
    option silently off (--sampling-topp nan), no batch limit at all (--batch-size -1), fewer
    hypotheses than --nbest; argparse's usage and "unrecognized arguments"
    for a plugin option under a task or model without it; a plugin option accepted and ignored
    (a decoder's where nothing decodes, the analysis's outside fairseq-validate or without its
    folder)."""
    from fairseq import options

    from fairseq_san.errors import UsageError

    built = getattr(options, parser)()
    built.prog = "fairseq-x"
    if said is None:
        options.parse_args_and_arch(built, argv)
        return
    with pytest.raises(UsageError) as error:
        options.parse_args_and_arch(built, argv)
    assert str(error.value).startswith(said), str(error.value)


@pytest.mark.skipif(not os.path.isfile("/proc/sys/kernel/pid_max"), reason="Linux's pid_max")
@pytest.mark.parametrize("soft", ["unlimited", 100, 2**40])
def test_num_workers_are_bounded_by_the_smaller_of_the_process_limits(monkeypatch, soft):
    """--num-workers' bound is the smaller of the soft RLIMIT_NPROC and pid_max; an unlimited
    RLIMIT_NPROC (RLIM_INFINITY, -1) leaves pid_max, and is not taken as a limit of -1 (which
    refused every --num-workers)."""
    import resource

    from fairseq_san.fairseq_fixes.option_ranges import most_processes

    with open("/proc/sys/kernel/pid_max") as ids:
        pid_max = int(ids.read())
    limit = resource.RLIM_INFINITY if soft == "unlimited" else soft
    monkeypatch.setattr(resource, "getrlimit", lambda kind: (limit, resource.RLIM_INFINITY))
    assert most_processes() == (pid_max if soft == "unlimited" else min(soft, pid_max))


def test_every_number_of_a_fairseq_scheduler_is_refused_as_nan():
    """Each float option of fairseq's learning-rate schedulers (their dataclasses), nan: a NaN
    learning rate trained silently or failed later (``--warmup-init-lr nan``,
    ``--end-learning-rate nan``); ``max_update`` is fairseq-train's own (an integer), and
    ``--total-num-update`` is read apart (``total_updates``)."""
    import dataclasses

    from fairseq.optim.lr_scheduler import LR_SCHEDULER_DATACLASS_REGISTRY

    from fairseq_san.errors import UsageError
    from fairseq_san.fairseq_fixes.lr_schedulers import check_lr_scheduler

    floats = {field.name for config in LR_SCHEDULER_DATACLASS_REGISTRY.values()
              for field in dataclasses.fields(config) if field.type in (float, "float")}
    floats -= {"max_update", "total_num_update"}
    assert {"end_learning_rate", "warmup_init_lr", "lr_shrink"} <= floats
    for name in sorted(floats):
        with pytest.raises(UsageError) as refused:
            check_lr_scheduler(argparse.Namespace(**{name: float("nan")}))
        flag = "--" + name.replace("_", "-")
        assert str(refused.value) == f"{flag} nan: it must be a finite number"


LIST_READ = "fairseq reads one or a comma-separated list of"


@pytest.mark.parametrize("given, said", [
    (["--lr", "x"], f"argument --lr: invalid value 'x': {LIST_READ} numbers"),
    (["--lr", "1e-3,y"], f"argument --lr: invalid value '1e-3,y': {LIST_READ} numbers"),
    (["--adaptive-softmax-cutoff", "1,x"],
     f"argument --adaptive-softmax-cutoff: invalid value '1,x': {LIST_READ} integers"),
    # fairseq's int() of each item: 2 batches accumulated, without a word; an OverflowError
    (["--update-freq", "2.9"],
     f"argument --update-freq: invalid value '2.9': {LIST_READ} integers"),
    (["--update-freq", "1,1e309"],
     f"argument --update-freq: invalid value '1,1e309': {LIST_READ} integers"),
    (["--lr-scheduler", "triangular"],
     "argument --max-lr: not given, and it has no default: give one"),
])
def test_an_options_bad_value_says_what_it_reads(capsys, given, said):
    """argparse named fairseq's list options' type by its lambda ("argument --lr: invalid
    <lambda> value: 'x'"), and converted omegaconf's MISSING where an option without a default
    was not given ("argument --max-lr: invalid float value: '???'")."""
    from fairseq import options

    built = options.get_training_parser()
    built.prog = "fairseq-x"
    with pytest.raises(SystemExit):
        options.parse_args_and_arch(built, ["data", "--arch", "transformer_san", *given])
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"fairseq-x: error: {said}"


@pytest.mark.parametrize("flags", [["--san-decoder-self-policy", "2"],
                                   ["--san-encdec-share", "output"]])
def test_generate_refuses_model_flags_that_its_arch_option_accepts(binarized_corpus, flags):
    """fairseq-generate has --arch (fairseq's workaround for wav2vec2), which adds the model's
    flags: they parsed, and the checkpoint's own policy decoded, exit 0."""
    result = run_cli("fairseq-generate", str(binarized_corpus), "--user-dir", "fairseq_san",
                     "--path", "c.pt", "--arch", "transformer_san", *flags)  # fmt: skip
    name = flags[0][2:].replace("-", "_")
    assert_one_line_error(
        result, f"{flags[0]}: fairseq-generate builds the model as its checkpoint was trained, "
        f"and would ignore the flag; a checkpoint takes another value with --model-overrides "
        f"\"{{'{name}': VALUE}}\""
    )


NOT_A_LITERAL = (
    "--model-overrides: refusing to evaluate {} as Python: fairseq evaluates this configuration "
    "string, and fairseq-san accepts only literals (numbers, strings, tuples, lists, dicts; + - * "
    "/ between them): {}"
)


@pytest.mark.parametrize(
    "parser, overrides, said",
    [
        ("get_generation_parser", ["--model-overrides", "{'dropout': foo}"],
         NOT_A_LITERAL.format('"{\'dropout\': foo}"', "Name is not a literal")),
        ("get_interactive_generation_parser",
         ["--model-overrides", "{'dropout': __import__('os').getcwd()}"],
         NOT_A_LITERAL.format('"{\'dropout\': __import__(\'os\').getcwd()}"',
                              "Call is not a literal")),
        ("get_generation_parser", ["--model-overrides={'dropout': 0.1"],
         NOT_A_LITERAL.format('"{\'dropout\': 0.1"', "'{' was never closed (<unknown>, line 1)")),
        ("get_generation_parser", ["--model-overrides", "{'dropout': 1/10}"],
         "--model-overrides \"{'dropout': 1/10}\": fairseq-x reads it with Python's "
         "ast.literal_eval, which takes no arithmetic (+ - * / between values); write each value "
         "out"),
        ("get_eval_lm_parser", ["--model-overrides", "{'dropout': 1/10}"], None),  # its eval
    ],
    ids=["name", "call", "unclosed, with =", "arithmetic", "arithmetic in eval-lm"],
)  # fmt: skip
def test_model_overrides_the_command_cannot_read_are_one_line_as_parsed(parser, overrides, said):
    """fairseq-generate and fairseq-interactive read --model-overrides with ast.literal_eval: a
    name or a call ended in ``ValueError: malformed node or string``, an unclosed brace given
    with ``=`` in a SyntaxError, tracebacks."""
    from fairseq import options

    from fairseq_san.errors import UsageError

    built = getattr(options, parser)()
    built.prog = "fairseq-x"
    argv = ["data", "--path", "c.pt", *overrides]
    if said is None:
        options.parse_args_and_arch(built, argv)
        return
    with pytest.raises(UsageError) as error:
        options.parse_args_and_arch(built, argv)
    assert str(error.value) == said


def test_validation_batch_sizes_given_as_text_by_fairseqs_parser_are_checked():
    """fairseq parses --max-tokens-valid and --batch-size-valid as text (their default is an
    interpolation of the training ones): the check compared text with 1 and failed with a
    TypeError, so fairseq-train could not take them at all."""
    from fairseq import options

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, ["data", "--arch", "transformer_san",
                                                "--max-tokens-valid", "100", "--batch-size-valid", "8"])
    assert (int(args.max_tokens_valid), int(args.batch_size_valid)) == (100, 8)


def test_an_unknown_option_that_is_not_the_plugins_is_left_to_argparse(capsys):
    """Only the plugin's options are named with their tasks or models: any other unknown option
    with no near one (--bogus: --eos is not near enough) gets argparse's own usage and exit
    status 2, as without the plugin."""
    from fairseq import options

    parser = options.get_training_parser()
    with pytest.raises(SystemExit) as exit:
        options.parse_args_and_arch(parser, ["data", "--arch", "transformer", "--bogus", "1"])
    assert exit.value.code == 2
    assert "error: unrecognized arguments: --bogus 1" in capsys.readouterr().err


@pytest.mark.slow
def test_commands_without_an_option_they_need_are_one_line(binarized_corpus, tmp_path):
    """Through fairseq's commands, which load the plugin (--user-dir) before they parse: a failure
    of fairseq's parser (train, validate), a check of what it parsed (interactive) and a plugin
    option under fairseq's own task (generate), side by side; each stops as it parses, before a
    checkpoint is read."""
    data, checkpoint = str(binarized_corpus), str(tmp_path / "checkpoint_best.pt")
    commands = {
        "fairseq-train": ([data, "--task", "translation_san", "--optimizer", "adam"],
                          "fairseq-train needs --arch"),
        "fairseq-validate": ([data, "--path", checkpoint, "--san-analysis-dir", str(tmp_path)],
                             "fairseq-validate needs --task"),
        "fairseq-interactive": ([data], "fairseq-interactive needs --path"),
        "fairseq-generate": (
            [data, "--task", "translation", "--path", checkpoint, "--san-decoding", "static"],
            "fairseq-generate --task translation has no option --san-decoding",
        ),
    }  # fmt: skip
    processes = {
        command: subprocess.Popen(
            [str(command_path(command)), *argv, "--user-dir", "fairseq_san", "--cpu"],
            cwd=REPO, env=cli_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        for command, (argv, _) in commands.items()
    }
    for command, process in processes.items():
        stdout, stderr = process.communicate(timeout=240)
        result = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
        assert_one_line_error(result, commands[command][1])


@pytest.mark.parametrize(
    "task, tokens, positions, said",
    [
        ("language_modeling", 0, None, "--tokens-per-sample 0: must be at least 1"),
        ("language_modeling_san", -3, None, "--tokens-per-sample -3: must be at least 1"),
        ("language_modeling", 64, 32,
         "--tokens-per-sample 64 is more than --max-target-positions 32, the model's positions: "
         "no sample that long fits the model; lower --tokens-per-sample to at most 32, or leave "
         "--max-target-positions out (it then follows --tokens-per-sample)"),
        ("language_modeling", 32, 32, None),
        ("language_modeling_san", 16, None, None),
    ],
)  # fmt: skip
def test_language_modelling_refuses_a_sample_size_no_sample_fits(task, tokens, positions, said):
    """fairseq failed deep in its datasets (ZeroDivisionError, IndexError), or dropped every
    training sample longer than the model's positions and then failed."""
    from fairseq.tasks import TASK_DATACLASS_REGISTRY, TASK_REGISTRY

    from fairseq_san.errors import UsageError

    config = TASK_DATACLASS_REGISTRY[task](tokens_per_sample=tokens, max_target_positions=positions)
    if said is None:
        TASK_REGISTRY[task](config, make_dictionary())
        return
    with pytest.raises(UsageError) as error:
        TASK_REGISTRY[task](config, make_dictionary())
    assert str(error.value) == said


def test_a_negative_context_window_is_refused():
    """fairseq-eval-lm read --context-window -4 as no context, without a word."""
    from fairseq_san.errors import UsageError
    from fairseq_san.fairseq_fixes.tokens_per_sample import check_context_window

    check_context_window(0, 16, 16)
    with pytest.raises(UsageError, match=r"^--context-window -4: it must be 0 \(no context\)"):
        check_context_window(-4, 16, 16)


@pytest.mark.parametrize("overrides", ["null", "[]", "san_decoding=static"])
def test_bench_overrides_that_are_no_json_object_are_named_as_such(tmp_path, overrides):
    """``a=CKPT:null`` was read as a checkpoint named ``CKPT:null``, called missing."""
    import torch

    from fairseq_san.benchmark.config import parse_system
    from fairseq_san.benchmark.fairseq_system import load_checkpoint_task

    checkpoint = tmp_path / "a.pt"
    checkpoint.write_bytes(b"")
    with pytest.raises(ValueError) as refused:
        load_checkpoint_task(parse_system(f"a={checkpoint}:{overrides}"), str(tmp_path), torch.device("cpu"))
    assert str(refused.value) == (
        f"system a: {overrides!r} after checkpoint {checkpoint} is no overrides: write them as a "
        f'JSON object, e.g. a={checkpoint}:{{"san_decoding": "static"}}'
    )
    with pytest.raises(ValueError, match=f"^system a: checkpoint {tmp_path}/b.pt:null does not"):
        load_checkpoint_task(parse_system(f"a={tmp_path}/b.pt:null"), str(tmp_path), torch.device("cpu"))


@pytest.mark.parametrize(
    "flags, cuda, xla, said",
    [
        (dict(fp16=True), False, False, "--fp16: fairseq-train's fp16 training needs a GPU"),
        (dict(fp16=True, cpu=True), True, False, "--fp16: fairseq-train's fp16 training needs"),
        (dict(bf16=True, tpu=True), True, False, "--bf16: fairseq-train trains in bf16 on a TPU"),
        (dict(bf16=True, memory_efficient_bf16=True), True, False, "--memory-efficient-bf16: "
         "fairseq-train trains in bf16 on a TPU"),  # it named --bf16, not given
        (dict(amp=True), False, False, "--amp: fairseq's automatic mixed precision casts on a "
         "GPU, and this run is on the CPU, where it would train in fp32"),  # exit 0, slower
        (dict(amp=True), True, False, None),
        (dict(fp16=True), True, False, None),
        (dict(fp16=True, memory_efficient_fp16=True), False, False, None),  # trains on the CPU
        (dict(bf16=True, tpu=True), False, True, None),
    ],
)  # fmt: skip
def test_half_precision_training_without_its_device_is_one_line(flags, cuda, xla, said):
    """fairseq's trainer failed on them after loading data and model: "Torch not compiled with
    CUDA enabled" (--fp16), "'NoneType' object has no attribute 'xla_device'" (--bf16)."""
    from types import SimpleNamespace

    from fairseq_san.errors import UsageError
    from fairseq_san.fairseq_fixes.half_precision import check_half_precision

    common = SimpleNamespace(**{**dict(fp16=False, bf16=False, memory_efficient_fp16=False,
                                       memory_efficient_bf16=False, amp=False, cpu=False,
                                       tpu=False), **flags})  # fmt: skip
    if said is None:
        check_half_precision(common, cuda, xla)
        return
    with pytest.raises(UsageError, match="^" + re.escape(said)):
        check_half_precision(common, cuda, xla)


def test_half_precision_is_checked_where_the_trainer_is_built():
    from fairseq.trainer import Trainer

    from fairseq_san.fairseq_fixes import half_precision

    assert Trainer.__init__.wrapped_by is half_precision._checking


@pytest.mark.parametrize(
    "window, tokens, extra, said",
    [
        (8, 8, [], "--context-window 8 leaves no tokens of --tokens-per-sample 8 to score: "
         "fairseq-eval-lm scores tokens-per-sample minus context-window tokens per sample; pass a "
         "--context-window below --tokens-per-sample"),
        (12, 8, [], "--context-window 12 leaves no tokens of --tokens-per-sample 8 to score: "),
        (4, 0, [], "--tokens-per-sample 0: it must be an integer in [1, 2147483647]"),  # parsed
        (8, 40, ["--max-target-positions", "16"],  # it named --tokens-per-sample 32
         "--tokens-per-sample 40 is more than --max-target-positions 16"),
    ],
)  # fmt: skip
def test_eval_lm_names_the_sizes_given_for_a_context_window_that_leaves_nothing(
    window, tokens, extra, said
):
    """fairseq-eval-lm's main takes --context-window from --tokens-per-sample before the task
    checks it: the refusal named --tokens-per-sample 0 (or -4), a size the user never gave. It
    is refused with the sizes given, before main changes them."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq_cli import eval_lm

    from fairseq_san.errors import UsageError
    from fairseq_san.fairseq_fixes import tokens_per_sample

    tokens_per_sample.install()  # as when fairseq-eval-lm loads the plugin
    assert eval_lm.main.wrapped_by is tokens_per_sample._checking_window
    with pytest.raises(UsageError, match="^" + re.escape(said)):
        args = options.parse_args_and_arch(options.get_eval_lm_parser(), [
            "data", "--path", "model.pt", "--context-window", str(window),
            "--tokens-per-sample", str(tokens), *extra])  # fmt: skip
        cfg = convert_namespace_to_omegaconf(args)
        eval_lm.main(cfg)
    if tokens > 0:  # refused by main's check, not as parsed
        assert cfg.task.tokens_per_sample == tokens


@pytest.mark.parametrize(
    "sizes, positions, block, refused",
    [
        ([10, 14, 12, 11], 16, 8, 0),  # eos: the context fills each sample up to 8 + 8 = 16
        ([10, 14, 12, 11], 15, 8, 4),  # ... which 15 positions do not hold
        ([20, 9], 24, 8, 0),  # a sentence longer than 8 + 8 gets no context: 20 fits 24
        ([8, 8, 8], 15, 8, 3),  # samples of 8 after 8 of context
    ],
)  # fmt: skip
def test_eval_lm_samples_are_measured_with_the_context_they_are_fed(
    sizes, positions, block, refused
):
    """LMContextWindowDataset feeds a sample after up to C tokens of the ones before it, and no
    more than fill --tokens-per-sample (block + C): max(L, min(L + C, block + C)) positions."""
    from fairseq_san.errors import UsageError
    from fairseq_san.fairseq_fixes.tokens_per_sample import check_samples_fit

    dataset = type("Samples", (), {"sizes": sizes, "__len__": lambda self: len(sizes)})()
    if not refused:
        check_samples_fit(dataset, positions, "eos", 8, block)
        return
    with pytest.raises(UsageError, match=f"^{refused} of the {len(sizes)} samples are longer"):
        check_samples_fit(dataset, positions, "eos", 8, block)


@pytest.mark.parametrize(
    "break_mode, block, window, fix",
    [
        ("complete", 4, 0, "complete a sentence longer than --tokens-per-sample is a sample of"),
        ("complete_doc", 2, 2, "complete_doc a sentence longer than --tokens-per-sample is a"),
        ("complete", 8, 0, "pass --tokens-per-sample 4 or fewer"),  # the blocks are too long
        ("none", 8, 0, "pass --tokens-per-sample 4 or fewer"),
    ],
)  # fmt: skip
def test_samples_too_long_are_refused_naming_what_makes_them_long(break_mode, block, window, fix):
    """With --sample-break-mode complete(_doc) a sentence longer than a block is a sample of its
    own: where the block fits the positions, a smaller --tokens-per-sample (the advice before)
    fixes nothing."""
    from fairseq_san.errors import UsageError
    from fairseq_san.fairseq_fixes.tokens_per_sample import check_samples_fit

    sizes = [9, 3]
    dataset = type("Samples", (), {"sizes": sizes, "__len__": lambda self: len(sizes)})()
    with pytest.raises(UsageError, match=re.escape(fix)):
        check_samples_fit(dataset, 4, break_mode, window, block)


def test_eval_lm_with_a_context_window_below_the_sample_size_runs_as_fairseq():
    from argparse import Namespace

    from fairseq_san.fairseq_fixes.tokens_per_sample import _checking_window

    seen = []
    main = _checking_window(lambda cfg, **kwargs: seen.append((cfg, kwargs)))
    cfg = Namespace(context_window=7, tokens_per_sample=8, task="language_modeling",
                    max_target_positions=None)  # fmt: skip
    main(cfg, extra=1)  # fairseq's main takes a Namespace too
    assert seen[0][0].eval_lm.context_window == 7 and seen[0][0].task.tokens_per_sample == 8
    assert seen[0][1] == {"extra": 1}


# --- a name where fairseq reads a group's dict, and fairseq's model on a SAN checkpoint ----------


def label_smoothed_configuration():
    """A checkpoint's configuration whose criterion has options cross_entropy has not."""
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    flags = ["--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1"]
    return convert_namespace_to_omegaconf(parse_args("transformer_san", TINY + flags))


@pytest.mark.parametrize(
    "overrides, said",
    [
        ({"task": "translation_san"}, "task 'translation_san' (from --model-overrides or a keyword "
         "argument): fairseq takes this checkpoint's task as a dict of its options, and would "
         "ignore a name; switch it with {'task': {'_name': 'translation_san'}}"),
        ({"criterion": "label_smoothed_cross_entropy"}, "criterion 'label_smoothed_cross_entropy' "
         "(from --model-overrides or a keyword argument): fairseq takes this checkpoint's "
         "criterion as a dict of its options, and would ignore a name; switch it with "
         "{'criterion': {'_name': 'label_smoothed_cross_entropy'}}"),
        ({"generation": "sampling"}, "generation 'sampling' (from --model-overrides or a keyword "
         "argument): generation is a group of options, not a component fairseq could switch, and "
         "it would ignore the name; give its options in a dict, e.g. {'generation': {'beam': 5}}"),
        ({"model": "transformer"}, "model 'transformer' (from --model-overrides or a keyword "
         "argument): fairseq builds this checkpoint's model as it was trained (transformer_san), "
         "and would ignore it; leave model out of the overrides"),
        ({"arch": "transformer_san_small"}, "arch 'transformer_san_small' (from --model-overrides "
         "or a keyword argument): fairseq builds this checkpoint's model as it was trained "
         "(transformer_san), and would ignore it; leave arch out of the overrides"),
        ({"path": "x.pt", "task": "translation_san",
          "model_overrides": "{'task': 'translation_san'}"},
         "task 'translation_san' (from --model-overrides or a keyword argument): fairseq takes"),
        ({"_name": "transformer"}, "_name 'transformer' (from --model-overrides or a keyword "
         "argument): fairseq would give every group of this checkpoint's configuration that name "
         "(its model, its task, ...); leave it out, and name a group's component in that group's "
         "dict ({'task': {'_name': ...}})"),
    ],
    ids=["task", "component", "group of options", "model", "arch", "fairseq-validate's",
         "every group"],
)  # fmt: skip
def test_a_name_fairseq_would_ignore_for_a_group_or_the_model_is_refused(overrides, said):
    """fairseq switches a group the checkpoint holds only from a dict, and builds the model its
    _name saved: {'task': 'translation_san'} decoded with the checkpoint's task; a _name of the
    overrides' own named every group, and fairseq built another model."""
    from fairseq_san.errors import UsageError

    cfg = checkpoint_configuration()
    with pytest.raises(UsageError) as refused:
        override(cfg, overrides)
    assert str(refused.value).startswith(said)
    assert cfg.task._name == "translation" and cfg.model.arch == "transformer_san"


@pytest.mark.parametrize(
    "switch",
    [{"criterion": "cross_entropy"}, {"criterion": {"_name": "cross_entropy"}}],
    ids=["name", "dict"],
)
def test_a_switch_to_a_component_without_the_groups_options_is_refused(switch):
    """fairseq-validate failed on it: omegaconf's "Key 'label_smoothing' not in
    'CrossEntropyCriterionConfig'", a traceback."""
    from fairseq_san.errors import UsageError

    with pytest.raises(UsageError) as refused:
        override(label_smoothed_configuration(), switch)
    assert str(refused.value) == (
        "criterion 'cross_entropy' (from --model-overrides or a keyword argument): this "
        "checkpoint's criterion (label_smoothed_cross_entropy) has options that cross_entropy has "
        "not (ignore_prefix_size, label_smoothing, report_accuracy): fairseq keeps them, and "
        "fails on them where it builds the criterion; it cannot switch this checkpoint's "
        "criterion to cross_entropy"
    )


@pytest.mark.parametrize(
    "overrides, group, name",
    [
        ({"task": "translation", "arch": "transformer_san", "model": "transformer_san"},
         "task", "translation"),  # the checkpoint's own: fairseq leaves them as they are
        ({"path": "x.pt", "task": "translation_san"},
         "task", "translation"),  # fairseq-validate's own --task, not the user's
        ({"path": "x.pt", "task": "translation_san", "model_overrides": "{'beam': 2}"},
         "task", "translation"),
        ({"task": {"_name": "translation_san"}}, "task", "translation_san"),
        ({"criterion": {"_name": "label_smoothed_cross_entropy"}}, "criterion",
         "label_smoothed_cross_entropy"),  # every option of cross_entropy's is one of its
        ({"tokenizer": "moses"}, "tokenizer", "moses"),  # an unset group takes a name
    ],
    ids=["own names", "validate's task", "validate's task and overrides", "task dict",
         "component dict", "unset group"],
)  # fmt: skip
def test_names_and_switches_fairseq_applies_are_applied(overrides, group, name):
    cfg = checkpoint_configuration()
    override(cfg, overrides)
    assert cfg[group]._name == name


@pytest.mark.slow
def test_a_task_name_in_validates_model_overrides_is_one_line(binarized_corpus, trained):
    """fairseq-validate decoded the translation checkpoint with its own task, silently."""
    checkpoint = trained["plain"] / "checkpoint_last.pt"
    override = "{'task': 'translation_san'}"
    result = validate(binarized_corpus, checkpoint, "--model-overrides", override)
    assert_one_line_error(result, "task 'translation_san'", "switch it with {'task': {'_name'")
    assert VALIDATION_STARTED not in result.stdout + result.stderr


@pytest.mark.parametrize(
    "trained_flags, flags",
    [
        (["--san-decoder-self-policy", "1,5"], "--san-policy '{\"decoder_self\": [1, 5]}'"),
        (["--san-decoder-encdec-policy", "3,3", "--san-encdec-share", "weights"],
         "--san-policy '{\"decoder_encdec\": [3, 3]}' --san-encdec-share weights"),
        (["--decoder-self-attention-type", "aan", "--san-encoder-self-policy", "2"],
         "--san-policy '{\"encoder_self\": [2]}' --decoder-self-attention-type aan"),
    ],
    ids=["decoder self", "encoder-decoder weights", "aan"],
)  # fmt: skip
def test_fairseqs_transformer_on_a_shared_checkpoint_names_the_plugins_model(trained_flags, flags):
    """fairseq-train --arch transformer --restore-file of a SAN checkpoint: torch's list of
    missing k_proj keys, re-raised as "please ensure that the architectures match"."""
    from helpers import build_fairseq_transformer

    from fairseq_san.errors import UsageError

    trained, _ = build(trained_flags)
    theirs, _ = build_fairseq_transformer()
    with pytest.raises(UsageError) as refused:
        theirs.load_state_dict(trained.state_dict())
    message = str(refused.value)
    assert re.match(r"the checkpoint was trained with (attention sharing|the average attention)"
                    r".*, which this model \(TransformerModel\) has not: the checkpoint has no "
                    r"projections for \S+\.layers\.\d\.", message)  # fmt: skip
    given = message.partition("To continue training it, pass ")[2]
    assert given == f"--task translation_san --arch transformer_san {flags}"
    rebuilt, _ = build(shlex.split(given))
    rebuilt.load_state_dict(trained.state_dict())  # strict: every parameter, nothing dropped


def test_fairseqs_language_model_on_a_shared_checkpoint_names_the_plugins_model():
    from fairseq_san.errors import UsageError

    trained, _ = build_lm(["--san-decoder-self-policy", "2,4", "--san-self-share", "kv"])
    theirs, _ = build_lm(arch="transformer_lm")
    with pytest.raises(UsageError) as refused:
        theirs.load_state_dict(trained.state_dict())
    assert str(refused.value) == (
        "the checkpoint was trained with attention sharing (decoder_self {2,4}), which this model "
        "(TransformerLanguageModel) has not: the checkpoint has no projections for "
        "decoder.layers.1.self_attn, decoder.layers.3.self_attn, decoder.layers.4.self_attn, "
        "decoder.layers.5.self_attn. To continue training it, pass --task language_modeling_san "
        "--arch transformer_lm_san --san-policy '{\"decoder_self\": [2, 4]}' --san-self-share kv"
    )


@pytest.mark.parametrize(
    "overrides, advice",
    [
        ({"san_policy": '{"decoder_self": [3]}'},
         "attention sharing needs a model trained as transformer_san or transformer_lm_san"),
        ({"san_decoding": "no-cache"},  # the task could not apply it either
         "only the plugin's models apply it: decode with --san-decoding fairseq or static"),
        ({"san_decoder_precision": "bf16"},  # the hub has no command line: its task keyword
         "give --san-decoder-precision on the command line (with --task translation_san), or to "
         "the hub in its task (task={'_name': 'translation_san', 'san_decoder_precision': "
         "'bf16'})"),
    ],
)  # fmt: skip
def test_a_plugin_option_in_the_overrides_of_fairseqs_own_model_is_refused(overrides, advice):
    """fairseq's transformer decoded as trained with either, without a word: no sharing, and
    fairseq's generator."""
    from omegaconf import OmegaConf

    from fairseq_san.errors import UsageError
    from fairseq_san.fairseq_fixes.model_overrides import check_overrides

    cfg = OmegaConf.create({"model": {"_name": "transformer", "arch": "transformer"}})
    with pytest.raises(UsageError) as refused:
        check_overrides(cfg, overrides)
    (key, value), = overrides.items()
    assert str(refused.value) == (
        f"{key}={value!r} (from --model-overrides or a keyword argument): this checkpoint's "
        "model (transformer) is none of the plugin's and reads no option of it, and fairseq "
        f"would decode it as trained; {advice}"
    )
    check_overrides(cfg, {"san_policy": None, "beam": 4})  # no plugin option set: as before
    language_model = OmegaConf.create({"model": {"_name": "transformer_lm",
                                                 "arch": "transformer_lm"}})  # fmt: skip
    check_overrides(language_model, overrides)  # --lm-path: the translation model's overrides


@pytest.mark.parametrize("decoding", ["fast", "no-cache"])
def test_a_model_decoding_of_fairseqs_own_model_is_refused(tmp_path, decoding):
    """fairseq-generate --task translation_san --san-decoding no-cache of a --arch transformer
    checkpoint decoded it with the cache, and the log said "SAN decoding: no-cache"."""
    from fairseq.dataclass.configs import GenerationConfig
    from helpers import build_fairseq_transformer

    from fairseq_san.errors import UsageError
    from fairseq_san.tasks.translation_san import TranslationSANConfig, TranslationSANTask

    config = TranslationSANConfig(data=str(tmp_path), san_decoding=decoding)
    task = TranslationSANTask(config, make_dictionary(), make_dictionary())
    theirs, _ = build_fairseq_transformer()
    with pytest.raises(UsageError) as refused:
        task.build_generator([theirs], GenerationConfig(beam=2))
    assert str(refused.value) == (
        f"--san-decoding {decoding}: the model (TransformerModel) is none of the plugin's "
        "models, which alone apply it: decode with --san-decoding fairseq or --san-decoding "
        "static"
    )
    ours, _ = build()
    task.build_generator([ours], GenerationConfig(beam=2))  # the plugin's model takes it
    assert ours.decoding == decoding


def test_a_model_decoding_of_an_ensemble_with_a_plugin_model_is_logged_as_applied(
    tmp_path, caplog
):
    """--path SAN.pt:BASELINE.pt --san-decoding no-cache was refused for the baseline, though the
    plugin's model applies it (as an ensemble takes its overrides); the log says who does not."""
    from fairseq.dataclass.configs import GenerationConfig
    from helpers import build_fairseq_transformer

    from fairseq_san.tasks.translation_san import TranslationSANConfig, TranslationSANTask

    config = TranslationSANConfig(data=str(tmp_path), san_decoding="no-cache")
    task = TranslationSANTask(config, make_dictionary(), make_dictionary())
    (theirs, _), (ours, _) = build_fairseq_transformer(), build()
    with caplog.at_level(logging.INFO, logger="fairseq_san.tasks.decoding"):
        task.build_generator([ours, theirs], GenerationConfig(beam=2))
    assert ours.decoding == "no-cache"
    logged = "SAN decoding: no-cache; fairseq for TransformerModel, none of the plugin's models ("
    assert logged in caplog.text


def test_fine_tuning_fairseqs_transformer_from_a_shared_checkpoint_names_the_plugins_model():
    """--finetune-from-model: the plugin's model starts from the checkpoint under any policy."""
    from helpers import build_fairseq_transformer

    from fairseq_san.errors import UsageError
    from fairseq_san.models.checkpoint_policy import fine_tuning

    trained, _ = build(["--san-decoder-self-policy", "1,5"])
    theirs, _ = build_fairseq_transformer()
    with fine_tuning(), pytest.raises(UsageError) as refused:
        theirs.load_state_dict(trained.state_dict())
    given = str(refused.value).partition(". To fine-tune from it, pass ")[2]
    assert given == (
        "--task translation_san --arch transformer_san and any policy (with none, each layer "
        "starts from the projections of its block)"
    )
    unshared, _ = build(shlex.split(given.partition(" and ")[0]))
    with fine_tuning():
        unshared.load_state_dict(trained.state_dict())


def test_fairseqs_transformer_loads_an_unshared_checkpoint_and_names_another_width():
    """An unshared plugin checkpoint loads into fairseq's transformer; one of another width was
    torch's list of every mismatched shape."""
    from helpers import build_fairseq_transformer

    from fairseq_san.errors import UsageError

    theirs, _ = build_fairseq_transformer()
    theirs.load_state_dict(build()[0].state_dict())  # unshared: fairseq's transformer loads it
    other_width, _ = build(["--encoder-ffn-embed-dim", "24"])
    with pytest.raises(UsageError, match=r"^the checkpoint's encoder.layers.0.fc1.weight has "
                       r"shape \(24, 16\), this model's \(32, 16\): it was trained"):  # fmt: skip
        theirs.load_state_dict(other_width.state_dict())


def test_fairseqs_transformer_of_another_vocabulary_names_the_dictionary_sizes():
    """fairseq-generate of a ``transformer`` checkpoint on another data directory: torch's size
    mismatch of the embeddings (and fairseq-san-bench: two tracebacks, its worker's inside)."""
    from helpers import build_fairseq_transformer

    from fairseq_san.checkpoints import VocabularyMismatch

    theirs, _ = build_fairseq_transformer()
    other_vocabulary, _ = build_fairseq_transformer(dictionary=make_dictionary(48))
    with pytest.raises(VocabularyMismatch) as refused:
        theirs.load_state_dict(other_vocabulary.state_dict())
    assert str(refused.value).startswith(
        "the checkpoint was trained with other dictionaries than the data's: entries per "
        "dictionary source 48 (data: 24), target 48 (data: 24); use the dictionaries"
    )


def test_fairseqs_models_name_a_plugin_checkpoint_where_they_load_it():
    from fairseq.models import BaseFairseqModel

    from fairseq_san.fairseq_fixes import shared_checkpoints

    assert BaseFairseqModel.load_state_dict.wrapped_by is shared_checkpoints._naming


@pytest.mark.slow
def test_fairseq_train_of_fairseqs_transformer_from_a_shared_checkpoint_is_one_line(
    binarized_corpus, trained, tmp_path
):
    argv = train_argv(binarized_corpus, tmp_path / "transformer")
    argv[argv.index("transformer_san")] = "transformer"
    checkpoint = str(trained["san"] / "checkpoint_last.pt")
    result = run_cli("fairseq-train", *argv, "--finetune-from-model", checkpoint)
    assert_one_line_error(
        result, "attention sharing (decoder_self {1,5})", "this model (TransformerModel)",
        "To fine-tune from it, pass --task translation_san --arch transformer_san",
    )
    assert "architectures match" not in result.stderr


def test_a_task_name_that_no_task_has_is_refused():
    """{'task': {'_name': 'bogus'}} passed (the task is not among fairseq's REGISTRIES), and the
    hub then failed on fairseq's long "Could not infer task type" assertion."""
    from fairseq_san.errors import UsageError
    from fairseq_san.fairseq_fixes.model_overrides import check_component_name

    check_component_name("task", "translation_san", "(from --model-overrides)")
    with pytest.raises(UsageError) as refused:
        check_component_name("task", "translaton_san", "(from --model-overrides)")
    assert str(refused.value) == (
        "task 'translaton_san' (from --model-overrides) is not one of fairseq's task components: "
        "did you mean 'translation_san'?"
    )


# --- --san-analysis-dir on a checkpoint of fairseq's own model and task ----------------------

# The plugin's task that analyses each of fairseq's own tasks.
ANALYSING_TASK = {"translation": "translation_san", "language_modeling": "language_modeling_san"}


@pytest.fixture(scope="module")
def fairseqs_own(binarized_corpus, tmp_path_factory):
    """{fairseq's task: fairseq-validate's arguments for a checkpoint of fairseq's own model
    trained with it, under the plugin's task}: ``transformer`` (translation), ``transformer_lm``
    (language_modeling), 3 updates each."""
    from helpers import lm_train_argv, preprocess_lm, write_corpus

    root = tmp_path_factory.mktemp("fairseqs-own")
    lm_data = preprocess_lm(write_corpus(root / "raw"), root / "lm-bin")
    translation = train_argv(binarized_corpus, root / "translation", 3)
    translation[translation.index("transformer_san")] = "transformer"
    lm = lm_train_argv(lm_data, root / "lm", max_update=3)
    lm[lm.index("language_modeling_san")] = "language_modeling"
    lm[lm.index("transformer_lm_san")] = "transformer_lm"
    for argv in (translation, lm):
        result = run_cli("fairseq-train", *argv)
        assert result.returncode == 0, result.stderr[-3000:]
    common = ["--user-dir", "fairseq_san", "--valid-subset", "valid", "--cpu", "--num-workers", "0"]
    return {
        "translation": [str(binarized_corpus), "--task", "translation_san", "--batch-size", "8",
                        "--path", str(root / "translation" / "checkpoint_last.pt"), *common],
        "language_modeling": [str(lm_data), "--task", "language_modeling_san",
                              "--sample-break-mode", "eos", "--max-tokens", "500",
                              "--path", str(root / "lm" / "checkpoint_last.pt"), *common],
    }  # fmt: skip


def printed_override(line: str) -> str:
    """The ``--model-overrides`` value that an error line tells the user to pass."""
    override = re.search(r'--model-overrides "([^"]+)"', line)
    assert override, line
    return override.group(1)


@pytest.mark.slow
@pytest.mark.parametrize("trained_task", ["translation", "language_modeling"])
def test_analysis_of_fairseqs_own_task_names_the_override_that_analyses(
    fairseqs_own, tmp_path, trained_task
):
    """fairseq-validate keeps the checkpoint's task, and fairseq's own has no analysis hook nor
    the option: it validated, exited 0 and wrote nothing (fairseq's models do not check it)."""
    import ast

    argv, analysis = fairseqs_own[trained_task], tmp_path / "js"
    flags = ["--san-analysis-dir", str(analysis), "--san-analysis-max-sentences", "5"]
    result = run_cli("fairseq-validate", *argv, *flags)
    line = assert_one_line_error(
        result, f"--san-analysis-dir needs the task {ANALYSING_TASK[trained_task]}",
        f"trained with --task {trained_task}, which fairseq-validate keeps",
    )  # fmt: skip
    assert VALIDATION_STARTED not in result.stdout + result.stderr
    assert not analysis.exists()
    override = printed_override(line)
    assert ast.literal_eval(override) == {"task": {
        "_name": ANALYSING_TASK[trained_task], "san_analysis_dir": str(analysis),
        "san_analysis_max_sentences": 5,
    }}  # fmt: skip
    fixed = run_cli("fairseq-validate", *argv, "--model-overrides", override)
    assert fixed.returncode == 0, (fixed.stdout + fixed.stderr)[-3000:]
    assert json.loads((analysis / "js.json").read_text())["sentences"] == 5


@pytest.mark.slow
def test_a_task_dict_in_the_overrides_that_drops_the_analysis_flags_is_refused(
    fairseqs_own, tmp_path
):
    """A ``'task'`` dict in --model-overrides sets only its own keys on the task, and fairseq
    then gives the task none of the flags: the plugin's task validated without analysing."""
    import ast

    argv, analysis = fairseqs_own["translation"], tmp_path / "js"
    switched = ["--model-overrides", "{'task': {'_name': 'translation_san'}}"]
    result = run_cli("fairseq-validate", *argv, "--san-analysis-dir", str(analysis), *switched)
    line = assert_one_line_error(
        result, f"--san-analysis-dir {analysis}: the 'task' dict of --model-overrides",
        "put them in that dict",
    )  # fmt: skip
    assert VALIDATION_STARTED not in result.stdout + result.stderr
    override = printed_override(line)
    assert ast.literal_eval(override) == {
        "task": {"_name": "translation_san", "san_analysis_dir": str(analysis)}
    }
    fixed = run_cli("fairseq-validate", *argv, "--model-overrides", override)
    assert fixed.returncode == 0, (fixed.stdout + fixed.stderr)[-3000:]
    assert json.loads((analysis / "js.json").read_text())["sentences"] == 30


@pytest.mark.slow
def test_a_language_models_data_under_a_translation_task_is_named(fairseqs_own, tmp_path):
    """A translation checkpoint validated on a language model's data (its task, translation, kept
    from the checkpoint), and fairseq-train of translation_san there, ended in fairseq's "Could not
    infer language pair, please provide it explicitly", naming neither the data nor the task."""
    lm_data = fairseqs_own["language_modeling"][0]
    translation = fairseqs_own["translation"]
    checkpoint = translation[translation.index("--path") + 1]
    validate = run_cli("fairseq-validate", lm_data, "--user-dir", "fairseq_san", "--task",
                       "language_modeling_san", "--path", checkpoint, "--max-tokens", "500")
    train = run_cli("fairseq-train", lm_data, "--user-dir", "fairseq_san", "--task",
                    "translation_san", "--arch", "transformer_san", "--max-tokens", "100",
                    "--save-dir", str(tmp_path / "checkpoints"))  # fmt: skip
    for result, task in ((validate, "translation"), (train, "translation_san")):
        assert assert_one_line_error(result).endswith(
            f"{lm_data} holds a language model's data (dict.txt), not a translation's "
            f"(dict.SRC.txt, dict.TGT.txt), and the task, {task} (--task, or the checkpoint's), "
            "translates: give a translation's binarized data, or a language model"
        )


@pytest.mark.parametrize("files, language_model", [
    (["dict.txt"], True),
    (["dict.txt", "train.bin", "train.idx"], True),
    (["dict.txt", "dict.en.txt", "dict.de.txt"], False),
    (["dict.en.txt", "dict.de.txt", "train.en-de.en.idx"], False),
    (["dict.txt/"], False),
    ([], False),
])  # fmt: skip
def test_one_rule_tells_a_language_models_data_from_a_translations(tmp_path, files, language_model):
    """The translation task's wrapper, the benchmark and the hub's loader name a language model's
    data by one rule (files.language_model_data): dict.txt and no translation's dictionary. The
    benchmark had its own (dict.txt and no pair's .idx), which disagreed on a folder with both."""
    from fairseq_san.benchmark.config import check_subset
    from fairseq_san.files import language_model_data

    for name in files:
        (tmp_path / name).mkdir() if name.endswith("/") else (tmp_path / name).touch()
    assert language_model_data(str(tmp_path)) is language_model
    if language_model:
        check_subset(str(tmp_path), "valid")  # left to the check that names the data's kind
    else:
        with pytest.raises(ValueError, match="--subset valid: no such subset"):
            check_subset(str(tmp_path), "valid")


def test_a_binarized_subset_of_no_sentence_is_named(tmp_path):
    """fairseq-preprocess writes an empty .bin for an input of no lines, which numpy cannot map:
    every command loading it ended in "ValueError: cannot mmap an empty file" (no file named)."""
    import numpy as np
    from fairseq.data import data_utils, indexed_dataset

    from fairseq_san.errors import UsageError

    prefix = str(tmp_path / "test.en-de.en")
    indexed_dataset.MMapIndexedDatasetBuilder(prefix + ".bin", dtype=np.uint16).finalize(
        prefix + ".idx"
    )
    with pytest.raises(UsageError) as refused:
        data_utils.load_indexed_dataset(prefix, make_dictionary(), "mmap")
    assert str(refused.value) == (
        f"{prefix}.bin holds no sentence (fairseq-preprocess wrote it from an empty file): give "
        "that subset sentences, or name another (--valid-subset, --gen-subset)"
    )
    builder = indexed_dataset.MMapIndexedDatasetBuilder(prefix + ".bin", dtype=np.uint16)
    builder.add_item(torch.tensor([5, 2]))
    builder.finalize(prefix + ".idx")
    assert len(data_utils.load_indexed_dataset(prefix, make_dictionary(), "mmap")) == 1


@pytest.mark.parametrize(
    "given, said",
    [
        (["--trainpref", "{raw}/nope"], "fairseq-preprocess input {raw}/nope.src does not exist"),
        (["--trainpref", "{raw}/train", "--validpref", "{raw}/valid,{raw}/nope"],
         "fairseq-preprocess input {raw}/nope.src does not exist"),
        (["--trainpref", "{raw}/folder"], "fairseq-preprocess input {raw}/folder.src is a folder"),
        (["--trainpref", "{raw}/train", "--workers", "0"], "--workers 0: it must be an integer"),
        (["--trainpref", "{raw}/train", "--workers", "-1"], "--workers -1: it must be an integer"),
        (["--trainpref", "{raw}/train", "--align-suffix", "align"],
         "--align-suffix align: there is no {raw}/train.align"),
        (["--trainpref", "{raw}/train", "--validpref", "{raw}/valid"], None),
        (["--only-source", "--trainpref", "{raw}/mono"], None),  # no mono.tgt read
    ],
    ids=["missing", "missing in a list", "folder", "0 workers", "-1 workers", "no alignments",
         "good", "only source"],
)  # fmt: skip
def test_fairseq_preprocess_inputs_it_fails_on_or_ignores_are_refused(tmp_path, given, said):
    """fairseq-preprocess's tracebacks: FileNotFoundError or IsADirectoryError as it read an
    input (after it wrote the dictionaries), ZeroDivisionError (--workers 0), IndexError (-1);
    and an --align-suffix with no alignments file, which it skipped without a word."""
    from fairseq import options

    from fairseq_san.errors import UsageError
    from fairseq_san.fairseq_fixes.command_options import check_preprocess

    raw = write_corpus(tmp_path / "raw")
    (raw / "folder.src").mkdir()
    (raw / "mono.src").write_text("a b\n")
    argv = ["--source-lang", "src", "--target-lang", "tgt", "--destdir", str(tmp_path / "bin"),
            *(arg.format(raw=raw) for arg in given)]  # fmt: skip
    args = options.get_preprocessing_parser().parse_args(argv)
    if said is None:
        check_preprocess(args)
        return
    with pytest.raises(UsageError) as refused:
        check_preprocess(args)
    assert str(refused.value).startswith(said.format(raw=raw)), str(refused.value)


@pytest.mark.parametrize("lines_before", [1, 3000])
def test_a_text_input_that_is_not_utf8_is_named(tmp_path, lines_before):
    """fairseq's chunked reading stepped back past the start of a file of bytes that are no
    UTF-8: "ValueError: negative seek position -1", naming no file (fairseq-preprocess); such
    bytes beyond the first read (8 KiB) were a UnicodeDecodeError traceback."""
    from fairseq.file_chunker_utils import ChunkLineIterator

    from fairseq_san.errors import UsageError

    text = tmp_path / "train.src"
    text.write_bytes(b"a b\n" * lines_before + b"c \xff d\n")
    with open(text, encoding="utf-8") as fd, pytest.raises(UsageError) as refused:
        list(ChunkLineIterator(fd, 0, text.stat().st_size))
    assert str(refused.value) == (
        f"{text} is not UTF-8 text: fairseq reads its inputs as UTF-8; convert it (iconv -f "
        "ENCODING -t UTF-8)"
    )


def test_fairseq_preprocess_checks_its_inputs_with_the_plugin_loaded(tmp_path):
    """fairseq-preprocess --user-dir fairseq_san: a missing input is one line (a traceback)."""
    result = run_cli(
        "fairseq-preprocess", "--user-dir", "fairseq_san", "--source-lang", "src",
        "--target-lang", "tgt", "--trainpref", str(tmp_path / "nope"),
        "--destdir", str(tmp_path / "bin"), "--workers", "1",
    )  # fmt: skip
    assert_one_line_error(result, f"input {tmp_path}/nope.src does not exist")
    assert not (tmp_path / "bin" / "dict.src.txt").exists()


@pytest.mark.parametrize(
    "text,said",
    [
        ("w1 5\nbadline\n", "Incorrect dictionary format, expected '<token> <cnt> [flags]': \"badline \""),
        ("w1 5\nw1 3\n", "Duplicate word found when loading Dictionary: 'w1'."),
        (b"w1 5\n\xe9 3\n", "Incorrect encoding detected in"),
    ],
    ids=["no count", "twice", "not UTF-8"],
)  # fmt: skip
def test_a_dictionary_fairseq_cannot_read_is_named(tmp_path, text, said):
    """fairseq's Dictionary raised ValueError, RuntimeError or a bare Exception naming neither
    the file nor what to do: a traceback from every command that loads the data."""
    from fairseq.data import Dictionary

    from fairseq_san.errors import UsageError

    path = tmp_path / "dict.en.txt"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(UsageError) as refused:
        Dictionary.load(str(path))
    assert str(refused.value).startswith(f"dictionary {path} cannot be read: {said}")
    assert str(refused.value).endswith("(give the dict.*.txt that fairseq-preprocess wrote)")


def test_a_fusion_language_model_over_another_dictionary_is_refused():
    """fairseq-generate --lm-path: a language model over another vocabulary failed at the first
    step of the search (a size mismatch in the fused log-probabilities), and one over as many
    other tokens fused the scores of other words silently; the target's own dictionary fuses."""
    from fairseq.sequence_generator import SequenceGenerator

    from fairseq_san.errors import UsageError

    target = make_dictionary(24)
    model, _ = build(dictionary=target)
    other_words = make_dictionary(24)
    other_words.symbols[-1] = "other"  # as many entries, one other word
    shuffled = make_dictionary(24)
    shuffled.symbols[-2:] = shuffled.symbols[:-3:-1]  # the same words, two swapped
    for lm_dictionary, said in ((make_dictionary(30), "(30 entries) "),
                                (other_words, "(24 entries, entry 23 'other' where "),
                                (shuffled, f"(24 entries, entry 22 {target.symbols[23]!r} where ")):
        lm, _ = build_lm(dictionary=lm_dictionary)
        with pytest.raises(UsageError) as refused:
            SequenceGenerator([model], target, beam_size=2, lm_model=lm, lm_weight=0.5)
        assert str(refused.value).startswith(f"--lm-path: the language model's dictionary {said}")
    lm, _ = build_lm(dictionary=make_dictionary(24))
    SequenceGenerator([model], target, beam_size=2, lm_model=lm, lm_weight=0.5)


def test_a_translation_model_as_the_fusion_language_model_is_refused():
    """--lm-path naming a translation checkpoint: its decoder has the target's dictionary, and
    both decoders failed at the first step (fairseq's a TypeError, the forward wanting a source;
    the static decoder an IndexError in its caches). One line, in either."""
    from fairseq.sequence_generator import SequenceGenerator

    from fairseq_san.errors import UsageError
    from fairseq_san.static_decoding import StaticSequenceGenerator

    target = make_dictionary(24)
    model, _ = build(dictionary=target)
    translation, _ = build(dictionary=target, seed=2)
    for generator in (SequenceGenerator, StaticSequenceGenerator):
        with pytest.raises(UsageError) as refused:
            generator([model], target, beam_size=2, lm_model=translation, lm_weight=0.5)
        assert str(refused.value) == (
            "--lm-path: the model is a TransformerSANModel, not a language model: give a "
            "checkpoint of --task language_modeling_san (examples/learn_to_share_lm.sh) trained "
            "on the target language"
        )


@pytest.mark.parametrize("arch", ["transformer_lm_san", "transformer_lm"])
def test_a_fusion_language_model_trained_with_a_start_token_is_refused(arch):
    """--lm-path of a language model trained with --add-bos-token: the search fed it the end of
    sentence where it learned <s>, and its scores were fused without a word (either decoder)."""
    from fairseq.sequence_generator import SequenceGenerator

    from fairseq_san.errors import UsageError
    from fairseq_san.static_decoding import StaticSequenceGenerator

    target = make_dictionary(24)
    model, _ = build(dictionary=target)
    with_start, _ = build_lm(["--add-bos-token"], arch=arch, dictionary=make_dictionary(24))
    for generator in (SequenceGenerator, StaticSequenceGenerator):
        with pytest.raises(UsageError) as refused:
            generator([model], target, beam_size=2, lm_model=with_start, lm_weight=0.5)
        assert str(refused.value) == (
            "--lm-path: the language model was trained with --add-bos-token, and the search would "
            "feed it the end of sentence (</s>) as its start token, not the <s> it learned: give "
            "one trained without --add-bos-token"
        )


def test_interactive_says_a_tab_without_constraints_once(caplog):
    """A line ``sentence<TAB>phrase`` without --constraints was translated whole, the phrase as
    part of the sentence, without a word."""
    from types import SimpleNamespace

    from fairseq.tasks.language_modeling import LanguageModelingTask

    from fairseq_san.fairseq_fixes.interactive_input import numbered_across_buffers

    def make_batches(lines, cfg, task):  # every line batched, as without skipping
        yield SimpleNamespace(ids=torch.arange(len(lines)), constraints=None)

    class Task:
        target_dictionary = None

    class LanguageModel(LanguageModelingTask):  # no constraints to forget: not said
        def __init__(self):
            self.output_dictionary = None

    read = numbered_across_buffers(make_batches)
    plain, constrained = (SimpleNamespace(generation=SimpleNamespace(constraints=given))
                          for given in (None, "ordered"))  # fmt: skip
    with caplog.at_level("WARNING"):
        list(read(["no tab", "with\ttab"], constrained, Task()))
        assert not caplog.records
        task = Task()
        list(read(["a tab\\tfree line"], plain, task))  # escaped: no tab
        list(read(["no tab", "with\ttab"], plain, task))
        list(read(["again\ttab"], plain, task))
        list(numbered_across_buffers(make_batches)(["a\tprompt"], plain, LanguageModel()))
    assert [record.getMessage() for record in caplog.records] == [
        "S-2 holds a tab: without --constraints fairseq-interactive translates the whole line, "
        "its tabs read as spaces; give --constraints to read each phrase after a tab as one the "
        "translation must hold (said once)"
    ]
