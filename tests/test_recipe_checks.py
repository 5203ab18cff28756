"""The recipes check their inputs before the expensive step, and ``--dry-run`` writes nothing.

Each bad input stops a recipe with one line that names it, before any training or decoding and
before any file is written. The checks need no trained model: a data directory here is a few
empty files with the names that fairseq-preprocess and prepare.sh write.
"""

import fcntl
import gzip
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from helpers import (
    LM_LOOP,
    LM_PREPARE,
    LOOP,
    PREPARE,
    REPO,
    TEST_BLEU,
    cli_env,
    loop_args,
    output_of,
    prepare_env,
    read_json,
    run_cli,
    run_script,
    snapshot,
    write_fake_multi30k,
)
from fairseq_san.cores import available_cores

CORES = available_cores()  # what the recipe counts (a CPU quota included)


def fake_data(directory: Path, valid_reference: bool = True) -> Path:
    """The names a prepared Multi30k En-De directory holds (contents are not read)."""
    (directory / "text").mkdir(parents=True)
    for split in ("train", "valid", "test"):
        for lang in ("en", "de"):
            for ext in ("bin", "idx"):
                (directory / f"{split}.en-de.{lang}.{ext}").touch()
    (directory / "text" / "test.raw.de").write_text("Ein Hund .\n")
    if valid_reference:
        (directory / "text" / "valid.raw.de").write_text("Ein Hund .\n")
    return directory


def lines(text: str) -> List[str]:
    return [line for line in text.splitlines() if line.strip()]


def ran_nothing(output: str) -> bool:
    return not [line for line in output.splitlines() if line.startswith("+ ")]


# --- learn_to_share.sh ------------------------------------------------------------------------


def test_loop_without_validation_references_stops_before_training(tmp_path):
    data = fake_data(tmp_path / "data", valid_reference=False)
    run_dir = tmp_path / "run"
    result = run_script(LOOP, *loop_args(data, run_dir))
    assert result.returncode == 2, output_of(result)[-3000:]
    (line,) = lines(result.stderr)
    assert line.startswith("fairseq-san-loop: error: ")
    assert f"{data.resolve()}/text/valid.raw.de" in line and "--valid-ref" in line, line
    assert ran_nothing(output_of(result))
    assert not run_dir.exists()


def test_loop_start_by_hand_without_validation_references_is_one_line(tmp_path):
    """``fairseq-san-loop start RUN --data DATA --check-inputs`` with no --valid-ref (the
    recipes pass their default): a TypeError inside os.path.isfile(None)."""
    data = fake_data(tmp_path / "data", valid_reference=False)
    result = run_cli("fairseq-san-loop", "start", str(tmp_path / "run"), "--data", str(data),
                     "--check-inputs")  # fmt: skip
    assert result.returncode == 2, output_of(result)[-3000:]
    (line,) = lines(result.stderr)
    assert line == (
        "fairseq-san-loop: error: no --valid-ref: a translation run scores its validation BLEU "
        "against the raw target side of the valid split (examples/multi30k/prepare.sh writes "
        "DATA/text/valid.raw.TGT)"
    )
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]], ids=["run", "dry run"])
def test_loop_inputs_of_the_wrong_kind_are_refused_in_a_dry_run_too(tmp_path, dry_run):
    """A dry run noted a file given as --data as "no data directory ... yet", a folder given as
    --valid-ref as "no validation references ... yet", a translation's data for a language
    model "no binarized data ... yet": preparing the data changes none of them."""
    data = fake_data(tmp_path / "data")
    for options, said in (
        (["--data", str(data / "text" / "test.raw.de")],
         f"--data {data}/text/test.raw.de is no folder: give the folder of fairseq-preprocess "
         "output"),
        (["--data", str(data), "--valid-ref", str(data / "text")],
         f"--valid-ref {data}/text is a folder: give the file of the valid split's raw target "
         "sentences (DATA/text/valid.raw.TGT)"),
        (["--data", str(data), "--lm"],  # a translation's data for a language model's run
         f"{data} holds no fairseq-preprocess --only-source output (dict.txt, train.idx): run "
         "examples/lm/prepare.sh first (--data)"),
    ):  # fmt: skip
        result = run_cli("fairseq-san-loop", "start", str(tmp_path / "run"), *options, *dry_run)
        assert result.returncode == 2, output_of(result)[-3000:]
        assert lines(result.stderr) == [f"fairseq-san-loop: error: {said}"]
        assert not (tmp_path / "run").exists()


def test_loop_start_without_data_is_one_line(tmp_path):
    """``fairseq-san-loop start RUN`` (a documented subcommand) printed a TypeError's traceback
    from a check of the data's path."""
    for check in ([], ["--check-inputs"]):
        result = run_cli("fairseq-san-loop", "start", str(tmp_path / "run"), *check)
        assert result.returncode == 2
        assert lines(result.stderr)[-1] == (
            "fairseq-san-loop start: error: the following arguments are required: --data"
        )
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("check", [[], ["--check-inputs"]], ids=["run", "check inputs"])
def test_loop_start_with_an_empty_run_dir_or_data_is_one_line(tmp_path, check):
    """``start '' --data DATA`` wrote run.json and iter0 into the current folder; ``start RUN
    --data ''`` printed a TypeError's traceback (the recipes refuse both before)."""
    data = fake_data(tmp_path / "data")
    (tmp_path / "here").mkdir()
    reference = ["--valid-ref", str(data / "text" / "valid.raw.de")]
    for run_dir, given, said in (("", str(data), "RUN_DIR"), ("run", "", "--data")):
        result = run_cli("fairseq-san-loop", "start", run_dir, "--data", given, *reference,
                         *check, cwd=tmp_path / "here")  # fmt: skip
        assert result.returncode == 2, output_of(result)[-3000:]
        assert lines(result.stderr) == [f"fairseq-san-loop: error: {said} is empty: name a folder"]
    assert os.listdir(tmp_path / "here") == []


def test_data_the_loop_cannot_train_on_as_it_reads_it_is_refused_in_a_dry_run_too(tmp_path):
    """Both directions in one folder: the recipe scored against one pair's references and
    fairseq-train trained the other (the folder's listing order), and failed after training; a
    path with ':' (fairseq's several folders) and data without a valid split failed after the run
    dir was made; a language model's data for the translation loop was noted "no binarized data
    yet" by a dry run, which preparing would not change; a language code with '-' (pt-BR-en) was
    said to have no valid split (valid.pt-BR-en.pt.idx), and fairseq cannot infer the pair."""
    both = fake_data(tmp_path / "both")
    hyphen = fake_data(tmp_path / "hyphen")
    for name in os.listdir(hyphen):
        if name.endswith((".bin", ".idx")):
            renamed = name.replace("en-de", "pt-BR-en").replace(".de.", ".pt-BR.")
            (hyphen / name).rename(hyphen / renamed)
    for language in ("en", "de"):
        (both / f"train.de-en.{language}.idx").touch()
    no_valid = fake_data(tmp_path / "no-valid")
    (no_valid / "valid.en-de.de.idx").unlink()
    (tmp_path / "a:b").symlink_to(fake_data(tmp_path / "data"))
    for data, said in (
        (both, f"{both} holds the binarized pairs de-en, en-de, and fairseq-train would take one "
         "of them by the folder's listing order: give a folder with one pair"),
        (hyphen, f"{hyphen} holds the binarized pair pt-BR-en, which fairseq cannot read as "
         "SRC-TGT: a language code holds '-'; binarize with codes without one (pt_BR, not pt-BR)"),
        (no_valid, f"{no_valid} holds no valid split (valid.en-de.de.idx): the loop validates, "
         "analyses and scores on it; binarize one with fairseq-preprocess --validpref"),
        (tmp_path / "a:b", f"--data {tmp_path}/a:b holds ':', which fairseq reads between two "
         "data folders: choose a path without one"),
        (lm_data(tmp_path / "lm"), f"{tmp_path}/lm holds no fairseq-preprocess output "
         "(train.SRC-TGT.LANG.idx): run examples/multi30k/prepare.sh or fairseq-preprocess first "
         "(--data) (it holds a language model's data: examples/learn_to_share_lm.sh trains on "
         "it)"),
    ):  # fmt: skip
        result = run_script(LOOP, "--data", str(data), "--run-dir", str(tmp_path / "run"),
                            "--valid-ref", str(tmp_path / "data" / "text" / "valid.raw.de"),
                            "--dry-run")  # fmt: skip
        assert result.returncode == 2, output_of(result)[-3000:]
        assert lines(result.stderr) == [f"fairseq-san-loop: error: {said}"]
        assert ran_nothing(output_of(result)) and not (tmp_path / "run").exists()


@pytest.mark.parametrize("recipe", [LOOP, LM_LOOP])
def test_data_with_an_empty_valid_split_is_refused_before_the_run_dir(tmp_path, recipe):
    """A valid split binarized from empty files (prepare.sh took an empty val.LANG.gz): the
    translation loop said its references were "the source side of the valid split" (both sides
    empty), the language model's stopped inside fairseq-train after the run dir was made."""
    from fairseq_san.loop.run_record import INDEX_MAGIC

    data = recipe_data(tmp_path, recipe)
    empty = INDEX_MAGIC + (1).to_bytes(8, "little") + b"\x04" + (0).to_bytes(8, "little")
    names = ["valid.en-de.en.idx", "valid.en-de.de.idx"] if recipe == LOOP else ["valid.idx"]
    for name in names:
        (data / name).write_bytes(empty)
    if recipe == LOOP:
        (data / "text" / "valid.raw.de").write_text("")
        (data / "text" / "valid.raw.en").write_text("")
    for dry_run in ([], ["--dry-run"]):
        result = run_script(recipe, *recipe_args(recipe, data, tmp_path / "run", *dry_run))
        assert result.returncode == 2, output_of(result)[-3000:]
        assert lines(result.stderr) == [
            f"fairseq-san-loop: error: {data} holds an empty valid split ({names[0]}): the loop "
            "validates, analyses and scores on it; binarize one with fairseq-preprocess "
            "--validpref"
        ]
        assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("recipe", [LOOP, LM_LOOP])
def test_what_the_recipe_sets_itself_is_refused_after_dashes_in_any_spelling(tmp_path, recipe):
    """``-- -a transformer_aan_small`` (fairseq's alias of --arch; ``-atransformer_aan_small``,
    its value attached, as argparse reads it too) trained another model than run.json recorded,
    and ``-- --max-update 50`` other updates than --updates, exit 0."""
    arch = ("-a after --: the recipe sets it itself (the model, from its own --arch), and fairseq "
            "would take the value after -- instead, unrecorded: give --arch before --")
    for words, said in (
        (["-a", "x"], arch),
        (["-atransformer_aan_small"], arch),
        (["--max-update=50"], "--max-update after --: the recipe sets it itself (each "
         "iteration's updates, from --updates (--warm-updates)), and fairseq would take the "
         "value after -- instead, unrecorded: give --updates before --"),
    ):  # fmt: skip
        result = recipe_run(tmp_path, recipe, tmp_path / "run", "--", *words)
        assert result.returncode == 2, output_of(result)[-3000:]
        assert lines(result.stderr) == [f"{recipe.name}: {said}"]
        assert not (tmp_path / "run").exists()
        shutil.rmtree(tmp_path / ("data" if recipe == LOOP else "lm"))


@pytest.mark.parametrize("recipe", [LOOP, LM_LOOP])
def test_counts_are_decimal_ascii_and_paths_no_options(tmp_path, recipe):
    """bash read --max-iterations 010 as octal 8 (and 08 as its error, the loop not run) while
    the check and the record read 10; a full-width --cpu-ranks ２ passed the check and bash
    ignored it (one process); a --run-dir starting with '-' was read as an option of the loop's
    own commands (its usage printed)."""
    data = recipe_data(tmp_path, recipe)
    result = run_script(recipe, *recipe_args(recipe, data, tmp_path / "run", "--max-iterations",
                                             "08", "--dry-run"))  # fmt: skip
    assert result.returncode == 0, output_of(result)[-3000:]
    assert "value too great" not in output_of(result) and "== iteration 0 (dry run)" in (
        result.stdout
    )
    options = dict(line.split("=", 1) for line in run_cli(
        "fairseq-san-loop", "options", recipe.name, *recipe_args(recipe, data, tmp_path / "run",
                                                                  "--max-iterations", "010")
    ).stdout.splitlines() if "=" in line and not line.startswith(("set", "START")))  # fmt: skip
    assert options["MAX_ITERATIONS"] == "10"
    result = run_script(recipe, *recipe_args(recipe, data, tmp_path / "run", "--cpu-ranks", "２"))
    assert result.returncode == 2, output_of(result)[-3000:]
    assert lines(result.stderr) == [
        "fairseq-san-loop: error: --cpu-ranks ２: must be a whole number (0: one process)"
    ]
    result = run_script(recipe, "--data", str(data), "--run-dir=-run")
    assert result.returncode == 2, output_of(result)[-3000:]
    assert lines(result.stderr) == [
        f"{recipe.name}: --run-dir -run starts with '-', which the commands the recipe runs "
        "would read as an option: give ./-run"
    ]


def test_loop_with_a_missing_data_directory_is_one_line(tmp_path):
    data, run_dir = tmp_path / "data-bin" / "typo", tmp_path / "run"
    result = run_script(LOOP, *loop_args(data, run_dir))
    assert result.returncode == 2, output_of(result)[-3000:]
    (line,) = lines(result.stderr)
    assert line == f"fairseq-san-loop: error: no data directory {data.resolve()} (--data)"
    assert not run_dir.exists()


@pytest.mark.parametrize("recipe", ["translation", "language model"])
def test_loop_with_a_run_dir_that_is_a_file_is_one_line(tmp_path, recipe):
    """mkdir, then the lock, failed on it: "File exists", then "Bad file descriptor"."""
    run_dir = tmp_path / "run"
    run_dir.write_text("a file")
    if recipe == "translation":
        result = run_script(LOOP, *loop_args(fake_data(tmp_path / "data"), run_dir))
    else:
        data = tmp_path / "lm"
        data.mkdir()
        (data / "dict.txt").write_text("word 1\n")
        result = run_script(LM_LOOP, "--data", str(data), "--run-dir", str(run_dir))
    assert result.returncode == 2, output_of(result)[-3000:]
    assert lines(result.stderr) == [
        f"fairseq-san-loop: error: {run_dir.resolve()} is a file; --run-dir names a directory "
        "(made when missing)"
    ]
    assert run_dir.read_text() == "a file"


@pytest.mark.parametrize("where, said", [
    ("afile/run", "--run-dir {run}: {tmp}/afile is a file, so no directory can be made there"),
    ("runs/en-de-14:05", "--run-dir {run} holds ':', which fairseq-generate reads between two "
     "checkpoints (an ensemble): choose a path without one"),
])  # fmt: skip
def test_loop_with_a_run_dir_it_cannot_use_is_one_line(tmp_path, where, said):
    """Under a file, mkdir failed and the recipe went on to the lock: the loop's usage, then "Bad
    file descriptor". Holding ':', iteration 0 trained, then its validation BLEU failed
    (fairseq-generate reads ':' in --path between an ensemble's checkpoints: "cannot load
    checkpoint .../runs/en-de-14"), at every rerun. Each refused before the run dir is made."""
    (tmp_path / "afile").write_text("a file")
    run_dir = tmp_path / where
    result = run_script(LOOP, *loop_args(fake_data(tmp_path / "data"), run_dir))
    assert result.returncode == 2, output_of(result)[-3000:]
    assert lines(result.stderr) == [
        "fairseq-san-loop: error: " + said.format(run=run_dir.resolve(), tmp=tmp_path)
    ]
    assert not run_dir.exists()


def test_loop_on_a_directory_without_binarized_data_is_one_line(tmp_path):
    data, run_dir = tmp_path / "raw", tmp_path / "run"
    data.mkdir()
    result = run_script(LOOP, *loop_args(data, run_dir))
    assert result.returncode == 2, output_of(result)[-3000:]
    (line,) = lines(result.stderr)
    assert f"{data.resolve()} holds no fairseq-preprocess output" in line, line
    assert not run_dir.exists()


def test_loop_with_a_bad_decode_batch_size_is_one_line(tmp_path):
    data, run_dir = fake_data(tmp_path / "data"), tmp_path / "run"
    result = run_script(LOOP, *loop_args(data, run_dir, "--decode-batch-size", "0"))
    assert result.returncode == 2, output_of(result)[-3000:]
    assert lines(result.stderr) == [
        "learn_to_share.sh: --decode-batch-size takes a positive integer, not '0'"]  # fmt: skip
    assert not run_dir.exists()


def lm_data(directory: Path) -> Path:
    """A language model's binarized text, as far as the recipe checks it: DATA/dict.txt,
    DATA/train.idx and DATA/valid.idx."""
    directory.mkdir(parents=True)
    (directory / "dict.txt").write_text("word 1\n")
    (directory / "train.idx").write_bytes(b"")
    (directory / "valid.idx").write_bytes(b"")
    return directory


def recipe_data(directory: Path, recipe: Path) -> Path:
    """Fake inputs of the translation or the language model's recipe, in ``directory``."""
    return fake_data(directory / "data") if recipe == LOOP else lm_data(directory / "lm")


def recipe_args(recipe: Path, data: Path, run_dir: Path, *options: str) -> List[str]:
    if recipe == LOOP:
        return loop_args(data, run_dir, *options)
    return ["--data", str(data), "--run-dir", str(run_dir), *options]


def recipe_run(tmp_path: Path, recipe: Path, run_dir: Path, *options: str):
    """Run the translation or the language model's recipe on fake data with these options."""
    data = recipe_data(tmp_path, recipe)
    return run_script(recipe, *recipe_args(recipe, data, run_dir, *options))


@pytest.mark.parametrize(
    "recipe, arch, said",
    [
        (LOOP, "transformer_lm_san_small",
         "learn_to_share.sh: --arch transformer_lm_san_small is a language model: train it with "
         "examples/learn_to_share_lm.sh (learn_to_share.sh trains a translation model, e.g. "
         "--arch transformer_san_small)"),
        (LM_LOOP, "transformer_san_small",
         "learn_to_share_lm.sh: --arch transformer_san_small is a translation model: train it "
         "with examples/learn_to_share.sh (learn_to_share_lm.sh trains a language model, e.g. "
         "--arch transformer_lm_san_small)"),
        (LOOP, "transformer_san_smal",
         "learn_to_share.sh: --arch transformer_san_smal: not one of the plugin's models that "
         "learn_to_share.sh trains; did you mean 'transformer_san_small'?"),
        (LM_LOOP, "transformer_lm_san_smal",
         "learn_to_share_lm.sh: --arch transformer_lm_san_smal: not one of the plugin's models "
         "that learn_to_share_lm.sh trains; did you mean 'transformer_lm_san_small'?"),
    ],
)  # fmt: skip
def test_a_recipe_given_the_other_recipes_model_is_one_line(tmp_path, recipe, arch, said):
    """It failed inside fairseq-train (unrecognized arguments: --share-all-embeddings; a misspelt
    one: a hundred lines of usage and choices), the run dir made and its options recorded."""
    run_dir = tmp_path / "run"
    result = recipe_run(tmp_path, recipe, run_dir, "--arch", arch)
    assert result.returncode == 2, output_of(result)[-3000:]
    assert lines(result.stderr) == [said]
    assert ran_nothing(output_of(result)) and not run_dir.exists()


def test_the_recipes_architectures_are_the_plugins():
    """recipe_options.ARCHITECTURES (pure Python) is what fairseq's registry holds for each
    recipe's model: a new named architecture is added there too."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    from fairseq_san.loop.recipe_options import ARCHITECTURES
    from fairseq_san.models.transformer_lm_san import TransformerLMSANModel
    from fairseq_san.models.transformer_san import TransformerSANModel

    for recipe, model in ((LOOP, TransformerSANModel), (LM_LOOP, TransformerLMSANModel)):
        registered = {name for name, cls in ARCH_MODEL_REGISTRY.items() if cls is model}
        assert set(ARCHITECTURES[recipe.name]) == registered, recipe.name


@pytest.mark.parametrize(
    "recipe, option, value, said",
    [
        (LOOP, "--updates", "-5", "must be a whole number of at least 1"),
        (LOOP, "--theta-encdec", "abc", "must be a number in [0, ln 2 = 0.6931]"),
        (LM_LOOP, "--theta-self", "2", "must be a number in [0, ln 2 = 0.6931]"),
        (LM_LOOP, "--max-iterations", "0", "must be a whole number of at least 1"),
        (LOOP, "--cpu-ranks", str(CORES + 1), f"more ranks than the {CORES} CPU cores here"),
        (LM_LOOP, "--self-share", "bogus", "must be weights (SAN) or kv (CLA)"),
        (LM_LOOP, "--analysis-sentences", "0", "must be a whole number of at least 1"),
        (LOOP, "--analysis-sentences", "all", "must be a whole number of at least 1"),
    ],
)
def test_a_refused_value_leaves_no_run_dir(tmp_path, recipe, option, value, said):
    """The values were checked after the run dir and its .lock were made: an empty run dir with
    a .lock was left behind."""
    run_dir = tmp_path / "runs" / "run"
    result = recipe_run(tmp_path, recipe, run_dir, option, value)
    assert result.returncode == 2, output_of(result)[-3000:]
    assert lines(result.stderr) == [f"fairseq-san-loop: error: {option} {value}: {said}"]
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "recipe, option, default",
    [(LM_LOOP, "--theta-self", "0.4"), (LOOP, "--theta-encdec", "0.5"),
     (LM_LOOP, "--updates", "20000"), (LM_LOOP, "--self-share", "weights"),
     (LOOP, "--max-iterations", "3")],
)  # fmt: skip
def test_an_emptied_option_with_a_default_leaves_no_run_dir(tmp_path, recipe, option, default):
    """``--theta-self ""`` was read as unset: the loop trained and analysed iteration 0, then
    fairseq-san-policy failed on the empty theta, and the rerun with a theta was refused (the
    record said none); ``--updates ""`` failed inside fairseq-train, the run dir made."""
    run_dir = tmp_path / "runs" / "run"
    result = recipe_run(tmp_path, recipe, run_dir, option, "")
    assert result.returncode == 2, output_of(result)[-3000:]
    assert lines(result.stderr) == [
        f"{recipe.name}: {option} is empty: give {option_metavar(recipe, option)}, or leave the "
        f"option out for its default ({default})"
    ]
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("spelling", [["--valid-ref", ""], ["--valid-ref="]])
def test_an_emptied_valid_ref_is_refused_not_read_as_the_default(tmp_path, spelling):
    """``--valid-ref "$REF"`` with REF unset scored the validation against DATA's own
    references, without a word, as if the option were left out (a dry run printed them)."""
    result = recipe_run(tmp_path, LOOP, tmp_path / "runs" / "run", *spelling, "--dry-run")
    assert result.returncode == 2, output_of(result)[-3000:]
    assert lines(result.stderr) == [
        "learn_to_share.sh: --valid-ref is empty: give FILE, or leave the option out for its "
        "default"
    ]
    assert ran_nothing(output_of(result)) and not (tmp_path / "runs").exists()


def test_positions_shorter_than_a_valid_sentence_are_refused_before_the_run_dir(tmp_path):
    """--max-source-positions or --max-target-positions (after --) below the longest valid
    sentence of that side: the run dir was made, then fairseq-train stopped at its first
    validation ("Size of sample #5 is invalid (=(41, 41)) since max_positions=(20, 20)"), naming
    --skip-invalid-size-inputs-valid-test, which the loop refuses. The sizes are fairseq's index's,
    end of sentence counted."""
    import numpy as np
    import torch
    from fairseq.data.indexed_dataset import MMapIndexedDatasetBuilder

    data = fake_data(tmp_path / "data")
    (data / "text" / "valid.raw.de").write_text("Ein Hund .\nEin Hund .\n")
    for lang, lengths in (("en", (4, 41)), ("de", (30, 6))):
        prefix = data / f"valid.en-de.{lang}"
        builder = MMapIndexedDatasetBuilder(f"{prefix}.bin", dtype=np.uint16)
        for length in lengths:
            builder.add_item(torch.full((length,), 5, dtype=torch.int32))
        builder.finalize(f"{prefix}.idx")

    def refusal(*after: str) -> List[str]:
        run_dir = tmp_path / "run"
        result = run_script(LOOP, *loop_args(data, run_dir, "--dry-run"), *after)
        assert not run_dir.exists()
        return [] if result.returncode == 0 else lines(result.stderr)

    def said(flag: str, given: int, lang: str, longest: int) -> List[str]:
        return [
            f"fairseq-san-loop: error: {flag} {given}: the longest valid sentence of {data} "
            f"({lang}) has {longest} tokens with its end, and fairseq-train stops at one longer "
            "than the model takes (the loop analyses and scores every valid sentence): pass "
            f"{flag} {longest} or more after --"
        ]

    assert refusal("--max-source-positions", "20") == said("--max-source-positions", 20, "en", 41)
    assert refusal("--max-target-positions=29") == said("--max-target-positions", 29, "de", 30)
    assert refusal("--max-source-positions", "41", "--max-target-positions", "30") == []


def option_metavar(recipe: Path, flag: str) -> str:
    from fairseq_san.loop.recipe_options import RECIPE_OPTIONS

    return next(option.metavar for option in RECIPE_OPTIONS[recipe.name] if option.flag == flag)


@pytest.mark.parametrize("recipe", [LOOP, LM_LOOP])
def test_skipping_long_valid_sentences_in_training_is_refused_before_the_run_dir(
    tmp_path, recipe
):
    """Given after -- (as fairseq-train's error about a long valid sentence advises), training
    skipped the sentence, and the loop's analysis and scores then failed on it, with iteration 0
    trained and the train arguments fixed in its run dir."""
    run_dir = tmp_path / "runs" / "run"
    result = recipe_run(tmp_path, recipe, run_dir, "--", "--skip-invalid-size-inputs-valid-test")
    assert result.returncode == 2, output_of(result)[-3000:]
    assert lines(result.stderr) == [
        "fairseq-san-loop: error: --skip-invalid-size-inputs-valid-test (after --): the loop's "
        "attention analysis and scores read every valid sentence, and would fail on those "
        "training skipped; let the model take them (--tokens-per-sample for a language model, "
        "--max-source-positions and --max-target-positions for translation)"
    ]
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("recipe", [LOOP, LM_LOOP])
def test_arguments_cpu_ranks_refuse_are_refused_before_the_run_dir(tmp_path, recipe):
    """--cpu-ranks with -- --fp16 (the GPU preset's) was refused by fairseq-san-cpu-ranks at the
    first training, the run dir made and locked."""
    run_dir = tmp_path / "runs" / "run"
    result = recipe_run(tmp_path, recipe, run_dir, "--cpu-ranks", "1", "--", "--fp16")
    assert result.returncode == 2, output_of(result)[-3000:]
    assert lines(result.stderr) == [
        "fairseq-san-loop: error: --cpu-ranks 1 (fairseq-san-cpu-ranks): --fp16: fairseq's fp16 "
        "training needs a GPU, and the ranks train on the CPU (in fp32); leave it out"
    ]
    assert not (tmp_path / "runs").exists()


def test_a_rerun_spelling_a_number_otherwise_is_the_same_run():
    """"--theta-self 0.60" against a run made with 0.6, "--updates 0100" against 100: refused as
    other values."""
    from fairseq_san.loop.run_record import RunError, compare

    old = {"--lm": True, "--theta-self": "0.6", "--updates": "100", "--arch": "a"}
    assert compare("RUN", old, {**old, "--theta-self": "0.60", "--updates": "0100"}, {}, False,
                   {}) == []  # fmt: skip
    with pytest.raises(RunError, match="made with --theta-self 0.6, not 0.61"):
        compare("RUN", old, {**old, "--theta-self": "0.61"}, {}, False, {})


def test_a_rerun_spelling_a_train_argument_with_or_without_equals_is_the_same_run():
    """fairseq-train reads "--save-interval-updates=10" as "--save-interval-updates 10": a rerun
    spelling it the other way was refused as another run; another value still is."""
    from fairseq_san.loop.run_record import TRAIN_ARGS, RunError, compare

    old = {"--lm": True, TRAIN_ARGS: ["--save-interval-updates", "10", "--adam-betas=(0.9, 0.98)"]}
    now = {"--lm": True, TRAIN_ARGS: ["--save-interval-updates=10", "--adam-betas", "(0.9, 0.98)"]}
    assert compare("RUN", old, now, {}, False, {}) == []
    changed = "--save-interval-updates 10, not --save-interval-updates 20"
    with pytest.raises(RunError, match=changed):
        compare("RUN", old, {**now, TRAIN_ARGS: ["--save-interval-updates=20"]}, {}, False, {})


def test_a_rerun_with_other_train_arguments_names_those_that_differ():
    """The refusal named the arguments after -- as a whole, both lists in full (the one changed
    flag buried in them): it names each flag that differs, as given then and now."""
    from fairseq_san.loop.run_record import TRAIN_ARGS, RunError, compare

    old = {TRAIN_ARGS: ["--cpu", "--max-tokens", "2000", "--dropout", "0.3", "--seed", "1"]}
    now = {TRAIN_ARGS: ["--max-tokens", "2000", "--dropout=0.1", "--seed", "1", "--seed", "2"]}
    with pytest.raises(RunError) as refused:
        compare("RUN", old, now, {}, False, {})
    assert ("made with fairseq-train arguments after --: --cpu, not no --cpu; --dropout 0.3, not "
            "--dropout 0.1; --seed 1, not --seed 2 (") in str(refused.value)
    assert "--max-tokens" not in str(refused.value)


def test_a_rerun_giving_the_train_arguments_in_another_order_is_the_same_run():
    """fairseq-train reads "--seed 1 --cpu" as "--cpu --seed 1": a rerun giving its flags in
    another order was refused as another run; another last value of a flag still is."""
    from fairseq_san.loop.run_record import TRAIN_ARGS, RunError, compare

    old = {TRAIN_ARGS: ["--cpu", "--seed", "1", "--dropout", "0.3"]}
    now = {TRAIN_ARGS: ["--dropout=0.3", "--seed", "2", "--seed", "1", "--cpu"]}
    assert compare("RUN", old, now, {}, False, {}) == []
    with pytest.raises(RunError, match="made with fairseq-train .*: --seed 1, not --seed 2 \\("):
        compare("RUN", old, {TRAIN_ARGS: ["--seed", "1", "--cpu", "--seed", "2", "--dropout",
                                          "0.3"]}, {}, False, {})  # fmt: skip


def test_a_rerun_giving_an_options_two_spellings_in_another_order_is_another_run():
    """fairseq-train reads --max-sentences as --batch-size, the last given winning: "--batch-size
    8 --max-sentences 16" (a batch of 16) and the same flags in another order (8) resumed as one
    run, its checkpoints trained on with another batch; one spelling for the other is the same
    run."""
    from fairseq_san.loop.run_record import TRAIN_ARGS, RunError, compare

    old = {TRAIN_ARGS: ["--batch-size", "8", "--max-sentences", "16"]}
    now = {TRAIN_ARGS: ["--max-sentences", "16", "--batch-size", "8"]}
    with pytest.raises(RunError, match="after --: --batch-size 16, not --batch-size 8 \\("):
        compare("RUN", old, now, {}, False, {})
    assert compare("RUN", old, {TRAIN_ARGS: ["--batch-size=16"]}, {}, False, {}) == []


def test_the_train_aliases_are_fairseqs():
    """``TRAIN_ALIASES`` lists, in pure Python, fairseq-train's options with two long spellings."""
    from fairseq import options

    from fairseq_san.loop.run_record import TRAIN_ALIASES

    parser = options.get_training_parser()
    spellings = [action.option_strings for action in parser._actions]
    found = {alias: names[0] for names in spellings for alias in names[1:]
             if names[0].startswith("--") and alias.startswith("--")}  # fmt: skip
    assert TRAIN_ALIASES == found


def test_a_link_to_a_file_in_a_run_dir_is_refused_before_the_loop_writes(tmp_path):
    """A run dir received from elsewhere with iter1/policy.json linked to another file (or to
    nothing): the loop wrote the learned policy through the link. A link to a folder is
    followed, and RUN/last is the loop's own."""
    from fairseq_san.loop.run_record import RunError, check_no_file_links

    run_dir = tmp_path / "run"
    (run_dir / "iter1").mkdir(parents=True)
    (tmp_path / "disk").mkdir()
    (run_dir / "iter0").symlink_to(tmp_path / "disk")
    (run_dir / "last").symlink_to("iter1")
    check_no_file_links(str(run_dir))
    (run_dir / "iter1" / "policy.json").symlink_to("/nonexistent")
    with pytest.raises(RunError) as refused:
        check_no_file_links(str(run_dir))
    assert str(refused.value) == (
        f"{run_dir}/iter1/policy.json is a symbolic link to /nonexistent: the loop writes its run "
        "dir's files in place, and would write there; replace it with the file"
    )


def binarize_valid_target(data: Path, sentences: int) -> None:
    """DATA/valid.en-de.de.{bin,idx} of ``sentences`` sentences, as fairseq-preprocess writes."""
    import numpy
    import torch
    from fairseq.data import indexed_dataset

    builder = indexed_dataset.MMapIndexedDatasetBuilder(
        str(data / "valid.en-de.de.bin"), dtype=numpy.int32
    )
    for _ in range(sentences):
        builder.add_item(torch.IntTensor([4, 5, 2]))
    builder.finalize(str(data / "valid.en-de.de.idx"))


@pytest.mark.parametrize(
    "reference, said",
    [
        ("valid.raw.de", "--valid-ref {text}/valid.raw.de has 3 lines, the valid split of {data} "
         "2 sentences: give the raw target side of the valid split"),
        ("valid.raw.en", "--valid-ref {text}/valid.raw.en is the source side of the valid split "
         "({text}/valid.raw.en): give the target side, valid.raw.de"),
    ],
)  # fmt: skip
def test_references_that_are_not_the_valid_splits_are_refused_before_the_run_dir(
    tmp_path, reference, said
):
    """Another split's references (their line count) or the source side failed or scored
    nonsense only after iteration 0 had trained, and the run then refused another --valid-ref."""
    data, run_dir = fake_data(tmp_path / "data"), tmp_path / "run"
    binarize_valid_target(data, 2)
    (data / "text" / "valid.raw.de").write_text("Ein Hund .\nEine Katze .\nDrei .\n")
    (data / "text" / "valid.raw.en").write_text("A dog .\nA cat .\n")
    path = data.resolve() / "text" / reference
    result = run_script(LOOP, *loop_args(data, run_dir, "--valid-ref", str(path)))
    assert result.returncode == 2, output_of(result)[-3000:]
    text = data.resolve() / "text"
    assert lines(result.stderr) == [
        "fairseq-san-loop: error: " + said.format(text=text, data=data.resolve())
    ]
    assert not run_dir.exists()


@pytest.mark.parametrize("dictionaries, said, accepted_with", [
    # the recipe trains with --share-all-embeddings: fairseq's ValueError came after the run
    # dir, its run.json and iter0 were made
    (("dog 3\n", "Hund 3\n"), "{data}: dict.en.txt and dict.de.txt differ, and the recipe ties "
     "the source and target embeddings (--share-all-embeddings): binarize with "
     "fairseq-preprocess --joined-dictionary (examples/multi30k/prepare.sh does)", None),
    # the default --post-process sentencepiece deletes every space of subword-nmt output: each
    # iteration's validation BLEU was near 0, without a word
    (("Hund 3\nMa@@ 2\n",) * 2, "{data}/dict.de.txt holds subword-nmt pieces ('Ma@@'), and "
     "--post-process sentencepiece (the default) deletes every space of such text: the "
     "validation translations' BLEU would be near 0; pass --post-process subword_nmt",
     ["--post-process", "subword_nmt"]),
], ids=["not joined", "subword-nmt"])  # fmt: skip
def test_data_the_recipe_cannot_train_on_is_refused_before_the_run_dir(
    tmp_path, dictionaries, said, accepted_with
):
    data, run_dir = fake_data(tmp_path / "data"), tmp_path / "run"
    for language, dictionary in zip(("en", "de"), dictionaries):
        (data / f"dict.{language}.txt").write_text(dictionary)
    result = run_script(LOOP, *loop_args(data, run_dir))
    assert result.returncode == 2, output_of(result)[-3000:]
    assert lines(result.stderr) == ["fairseq-san-loop: error: " + said.format(data=data)]
    assert not run_dir.exists()
    if accepted_with:
        result = run_script(LOOP, *loop_args(data, run_dir, *accepted_with, "--dry-run"))
        assert result.returncode == 0, output_of(result)[-3000:]


def test_a_refused_value_leaves_a_run_dir_in_use_and_its_lock_alone(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with open(run_dir / ".lock", "a") as held:  # another loop's, still running
        fcntl.flock(held, fcntl.LOCK_EX)
        before = snapshot(run_dir)
        result = recipe_run(tmp_path, LOOP, run_dir, "--updates", "-5")
        assert result.returncode == 2, output_of(result)[-3000:]
        assert lines(result.stderr) == [
            "fairseq-san-loop: error: --updates -5: must be a whole number of at least 1"]
        assert snapshot(run_dir) == before
        with open(run_dir / ".lock", "a") as other, pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # still locked by `held`


BOTH = pytest.mark.parametrize("recipe", [LOOP, LM_LOOP], ids=["translation", "lm"])


@BOTH
@pytest.mark.parametrize(
    "options, said",
    [
        (["--warm-updates", "500"],
         "{recipe}: --warm-updates 500 without --warm-start: it sets a warm-started iteration's "
         "updates; add --warm-start, or drop --warm-updates (--updates sets each iteration's)"),
        (["--launcher", "torchrun --nproc_per_node 2", "--cpu-ranks", "2"],
         "{recipe}: --launcher 'torchrun --nproc_per_node 2' and --cpu-ranks 2 both say how "
         "fairseq-train starts (--cpu-ranks would win, the launcher unused): give one"),
    ],
)  # fmt: skip
def test_an_option_the_loop_would_not_read_is_one_line(tmp_path, recipe, options, said):
    """Both were ignored silently (--cpu-ranks chose the launch; --warm-updates is read only for
    a warm-started iteration), also in a dry run."""
    run_dir = tmp_path / "run"
    for dry_run in ([], ["--dry-run"]):
        result = recipe_run(tmp_path / f"inputs{len(dry_run)}", recipe, run_dir, *options,
                            *dry_run)  # fmt: skip
        assert result.returncode == 2, output_of(result)[-3000:]
        assert lines(result.stderr) == [said.format(recipe=recipe.name)]
        assert not run_dir.exists()


@BOTH
def test_the_options_read_with_another_are_taken_with_it(tmp_path, recipe):
    """--warm-updates with --warm-start, --launcher with --cpu-ranks 0 (one process); --cpu-ranks
    2 starts fairseq-train as two CPU processes."""
    run_dir = tmp_path / "run"
    for number, (options, printed) in enumerate((
        (["--warm-start", "--warm-updates", "7"], "+ fairseq-train "),
        (["--launcher", "torchrun --nproc_per_node 2", "--cpu-ranks", "0"],
         "+ torchrun --nproc_per_node 2 "),
        (["--launcher", "torchrun --rdzv-conf 'timeout=900 join_timeout=60'"],
         "+ torchrun --rdzv-conf timeout=900\\ join_timeout=60 "),  # one word, as quoted
        (["--cpu-ranks", str(min(2, CORES))],
         f"+ fairseq-san-cpu-ranks {min(2, CORES)} --log-dir {run_dir}/iter0 -- fairseq-train "),
    )):  # fmt: skip
        result = recipe_run(tmp_path / f"inputs{number}", recipe, run_dir, *options, "--dry-run")
        assert result.returncode == 0, output_of(result)[-3000:]
        assert printed in result.stderr, result.stderr[-3000:]


@BOTH
def test_loop_dry_run_writes_nothing(tmp_path, recipe):
    """It prints iteration 0's commands, each step's, and creates no file or folder."""
    run_dir = tmp_path / "runs" / "run"
    data = recipe_data(tmp_path, recipe)
    before = snapshot(tmp_path)
    result = run_script(recipe, *recipe_args(recipe, data, run_dir, "--dry-run"))
    assert result.returncode == 0, output_of(result)[-3000:]
    printed = [line.split()[1] for line in result.stderr.splitlines() if line.startswith("+ ")]
    assert printed[:3] == ["fairseq-train", "fairseq-validate", printed[2]]
    assert printed[-1] == "fairseq-san-policy", printed
    assert "(dry run: iteration 1 repeats these commands" in result.stdout
    assert not (tmp_path / "runs").exists()
    assert snapshot(tmp_path) == before


def fake_fairseq_train(directory: Path) -> Path:
    """A ``fairseq-train`` that writes its pid to DIRECTORY/train.pid and sleeps."""
    directory.mkdir()
    program = directory / "fairseq-train"
    program.write_text(f"#!/bin/sh\necho $$ > {directory}/train.pid\nexec sleep 60\n")
    program.chmod(0o755)
    return directory


def test_a_run_dir_in_use_is_refused_also_after_the_loop_was_killed(tmp_path):
    """The issue's case: ``kill -9`` of the loop alone leaves fairseq-train training; a second
    loop on the run dir must not train into the same checkpoints."""
    data, run_dir = fake_data(tmp_path / "data"), tmp_path / "run"
    fake = fake_fairseq_train(tmp_path / "bin")
    env = cli_env()
    env["PATH"] = f"{fake}{os.pathsep}{env['PATH']}"
    holder = subprocess.Popen(["bash", str(LOOP), *loop_args(data, run_dir)], cwd=REPO, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    pid_file = fake / "train.pid"
    try:
        deadline = time.monotonic() + 60
        while not pid_file.exists() and time.monotonic() < deadline and holder.poll() is None:
            time.sleep(0.2)
        assert pid_file.exists(), "the first loop did not reach fairseq-train"
        expected = (f"fairseq-san-loop: error: {run_dir} is in use by another learn-to-share loop "
                    "or a command it started that still runs")  # fmt: skip
        for moment in ("running", "loop killed, its fairseq-train running"):
            before = snapshot(run_dir)
            second = run_script(LOOP, *loop_args(data, run_dir))
            assert second.returncode == 2, (moment, output_of(second)[-3000:])
            (line,) = lines(second.stderr)
            assert line.startswith(expected), (moment, line)
            assert ran_nothing(output_of(second)) and snapshot(run_dir) == before, moment
            holder.kill()  # SIGKILL to the loop alone, as in the issue
            holder.wait()
    finally:
        holder.kill()
        holder.wait()
        if pid_file.exists():
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


# --- test_bleu.sh -----------------------------------------------------------------------------


def test_test_bleu_checks_every_checkpoint_before_decoding_any(tmp_path, san_checkpoint):
    data = fake_data(tmp_path / "data")
    present = model_at(tmp_path / "present.pt", san_checkpoint)  # not decoded: b is found first
    out = tmp_path / "out"
    missing = tmp_path / "missing.pt"
    result = run_script(TEST_BLEU, str(data), "de", str(out), f"a={present}", f"b={missing}")
    assert result.returncode == 1, output_of(result)[-3000:]
    assert lines(result.stderr) == [f"test_bleu.sh: b: no checkpoint {missing}"]
    assert result.stdout == ""
    assert not out.exists()


FAKE_GENERATE = """\
import sys
argv = sys.argv[1:]
value = lambda flag: argv[argv.index(flag) + 1]
with open(sys.argv[0] + ".calls", "a") as calls:
    calls.write(" ".join(argv) + "\\n")
with open(f"{value('--results-path')}/generate-{value('--gen-subset')}.txt", "w") as out:
    out.write("D-0\\t-0.1\\tEin Hund .\\n")
"""


def fake_generate(folder: Path) -> Tuple[Path, Dict[str, str]]:
    """(``folder``, the commands' environment with ``folder`` first on PATH) where ``folder``
    holds the stand-in fairseq-generate, which records its calls in fairseq-generate.calls."""
    folder.mkdir()
    (folder / "fairseq-generate").write_text(f"#!{sys.executable}\n{FAKE_GENERATE}")
    (folder / "fairseq-generate").chmod(0o755)
    env = cli_env()
    env["PATH"] = f"{folder}{os.pathsep}{env['PATH']}"
    return folder, env


def model_at(path: Path, trained: Path, tag: str = "") -> Path:
    """A checkpoint at ``path`` that test_bleu.sh can load (it loads each system's before it
    decodes any): a copy of ``trained``, with ``tag`` other bytes of the same model."""
    import torch

    from fairseq_san.checkpoints import load_state

    path.parent.mkdir(parents=True, exist_ok=True)
    if not tag:
        shutil.copyfile(trained, path)
        return path
    state = load_state(str(trained))
    state["extra_state"]["tag"] = tag
    torch.save(state, path)
    return path


def test_test_bleu_decodes_again_for_another_checkpoint_overrides_or_data(
    tmp_path, san_checkpoint, binarized_corpus
):
    """A decoded split is reused only for the same checkpoint bytes, overrides and data; here
    fairseq-generate is a stand-in that records its calls."""
    data = fake_data(tmp_path / "data")
    fake, env = fake_generate(tmp_path / "bin")
    checkpoint, out = model_at(tmp_path / "model.pt", san_checkpoint), tmp_path / "out"

    def decodes(system: str, **variables: str) -> int:
        """Run test_bleu.sh on one system; how many times it ran fairseq-generate."""
        calls = fake / "fairseq-generate.calls"
        before = len(calls.read_text().splitlines()) if calls.exists() else 0
        result = run_script(TEST_BLEU, str(data), "de", str(out), system, env={**env, **variables})
        assert result.returncode == 0, output_of(result)[-3000:]
        assert "chrF = 100.00" in result.stdout  # the stand-in translates perfectly
        return len(calls.read_text().splitlines()) - before

    assert decodes(f"a={checkpoint}") == 1
    assert decodes(f"a={checkpoint}") == 0  # the same: rescored only
    model_at(checkpoint, san_checkpoint, "another model at the same path")
    assert decodes(f"a={checkpoint}") == 1
    assert decodes(f"a={checkpoint}:{{'san_no_cache': True}}") == 1
    assert "{'san_no_cache': True}" in (fake / "fairseq-generate.calls").read_text()
    words = (binarized_corpus / "dict.tgt.txt").read_text().splitlines()
    (data / "dict.de.txt").write_text("".join(f"{line.split()[0]} 1\n" for line in words))
    assert decodes(f"a={checkpoint}:{{'san_no_cache': True}}") == 1
    copy = tmp_path / "copy.pt"
    copy.write_bytes(checkpoint.read_bytes())
    assert decodes(f"a={copy}:{{'san_no_cache': True}}") == 0  # the same bytes elsewhere
    assert decodes(f"a={copy}:{{'san_no_cache': True}}", DECODE_BATCH_SIZE="128") == 1
    assert "--batch-size 128 " in (fake / "fairseq-generate.calls").read_text()
    # "0128" is 128, as VOCAB_SIZE=08000 is 8000 (it was refused: "must be a positive integer")
    assert decodes(f"a={copy}:{{'san_no_cache': True}}", DECODE_BATCH_SIZE="0128") == 0
    assert sorted(p.name for p in out.iterdir()) == ["a"]  # no partial folder left
    # its output deleted since: fairseq-san-score failed on it at every rerun, exit 2
    (out / "a" / "test" / "generate-test.txt").unlink()
    assert decodes(f"a={copy}:{{'san_no_cache': True}}", DECODE_BATCH_SIZE="128") == 1


@pytest.mark.parametrize("size", ["16x", "-x"])  # "-x" was read by argparse as an option
def test_test_bleu_with_a_bad_batch_size_is_one_line(tmp_path, size):
    data = fake_data(tmp_path / "data")
    env = {**cli_env(), "DECODE_BATCH_SIZE": size}
    result = run_script(TEST_BLEU, str(data), "de", str(tmp_path / "out"), f"a={tmp_path}/a.pt", env=env)
    assert result.returncode == 2
    assert lines(result.stderr) == [f"test_bleu.sh: DECODE_BATCH_SIZE must be a positive integer, not '{size}'"]


def test_test_bleu_with_a_missing_data_directory_is_one_line(tmp_path):
    data = tmp_path / "nowhere"
    result = run_script(TEST_BLEU, str(data), "de", str(tmp_path / "out"), f"a={tmp_path}/a.pt")
    assert result.returncode == 1
    assert lines(result.stderr) == [f"test_bleu.sh: no data directory {data}"]


@pytest.mark.parametrize("empty", ["DATA", "TGT"])
def test_test_bleu_with_an_empty_data_or_target_is_one_line(tmp_path, empty):
    """``test_bleu.sh "$DATA" de ...`` with DATA unset said "no data directory " (naming
    nothing); an empty TGT "no DATA/text/test.raw. (run prepare.sh)"."""
    data = "" if empty == "DATA" else str(fake_data(tmp_path / "data"))
    target = "" if empty == "TGT" else "de"
    result = run_script(TEST_BLEU, data, target, str(tmp_path / "out"), f"a={tmp_path}/a.pt")
    assert result.returncode == 2, output_of(result)
    assert lines(result.stderr) == [f"test_bleu.sh: {empty} is empty (an unset variable?): name one"]
    assert not (tmp_path / "out").exists()


def test_test_bleu_on_data_whose_path_holds_a_colon_is_one_line(tmp_path):
    """fairseq-generate read "d:x" as two data directories and named "d" as missing."""
    data = fake_data(tmp_path / "d:x")
    result = run_script(TEST_BLEU, str(data), "de", str(tmp_path / "out"), f"a={tmp_path}/a.pt")
    assert result.returncode == 2
    assert lines(result.stderr) == [
        f"test_bleu.sh: DATA {data} holds ':', which fairseq reads between two data directories: "
        "give a path without one (a link to it)"
    ]


@pytest.mark.parametrize("script, pair", [(PREPARE, ["en", "de"]), (LM_PREPARE, [])])
@pytest.mark.parametrize("out", ["data,v2", "data:v2"])
def test_prepare_into_a_folder_whose_name_lists_files_is_one_line(
    multi30k_raw, tmp_path, out, script, pair
):
    """sentencepiece's input= and fairseq-preprocess's --testpref split "data,v2" at the comma:
    "fairseq-san-spm: error: data: No such file or directory", after the text was unpacked (the
    language-model data was prepared, and fairseq-train then read "data:v2" as two folders)."""
    result = run_script(script, *pair, str(tmp_path / out), env=prepare_env(multi30k_raw))
    assert result.returncode == 2
    assert lines(result.stderr) == [
        f"prepare.sh: OUT_DIR {tmp_path / out} holds ',' or ':', which sentencepiece and fairseq "
        "read between two files (or data directories): choose another"
    ]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("change, target, code, said", [
    (lambda data: (data / "text" / "test.raw.en").write_text("A dog .\n"), "en", 1,
     "{data} does not translate into 'en' (no test.SRC-en.en.idx): TGT is the target language of "
     "the pair"),
    (lambda data: (data / "dict.de.txt").write_text("\n. 9\nEin 5\nMa@@ 3\nnn 3\n"), "de", 2,
     "{data}/dict.de.txt holds subword-nmt pieces ('Ma@@'): test_bleu.sh detokenizes with "
     "sentencepiece, as prepare.sh segments; score subword-nmt output with fairseq-generate "
     "--post-process subword_nmt and fairseq-san-score"),
])  # fmt: skip
def test_test_bleu_refuses_data_it_cannot_score_in_one_line(tmp_path, change, target, code, said):
    """Refused before decoding: En->De data has English references too (text/test.raw.en), and
    asked for "en", fairseq-generate translated into German, scored against English, BLEU 0 and
    exit 0; data segmented with subword-nmt was decoded whole, test_bleu.sh's sentencepiece
    detokenizing dropped every space and kept each '@@', then refused it as having other
    references than its own."""
    data = fake_data(tmp_path / "data")
    change(data)
    checkpoint = tmp_path / "a.pt"
    checkpoint.write_bytes(b"not decoded")
    result = run_script(TEST_BLEU, str(data), target, str(tmp_path / "out"), f"a={checkpoint}")
    assert result.returncode == code
    assert lines(result.stderr) == ["test_bleu.sh: " + said.format(data=data)]
    assert not (tmp_path / "out").exists()


def test_test_bleu_passes_each_system_to_fairseq_generate(tmp_path, san_checkpoint):
    """The systems as fairseq-san-loop test-systems reads them reach fairseq-generate: overrides
    from the first ':{', none as '{}'; every system decoded."""
    data = fake_data(tmp_path / "data")
    fake, env = fake_generate(tmp_path / "bin")
    checkpoint, out = model_at(tmp_path / "at-12" / "model.pt", san_checkpoint), tmp_path / "out"
    systems = [f"a={checkpoint}:{{'san_no_cache': True}}", f"b={checkpoint}"]
    result = run_script(TEST_BLEU, str(data), "de", str(out), *systems, env=env)
    assert result.returncode == 0, output_of(result)[-3000:]
    assert [line for line in result.stdout.splitlines() if line.startswith("== ")] == [
        "== a test", "== b test"
    ]  # fmt: skip
    calls = (fake / "fairseq-generate.calls").read_text().splitlines()
    assert len(calls) == 2
    assert f"--path {checkpoint} " in calls[0] and f"--path {checkpoint} " in calls[1]
    assert "--model-overrides {'san_no_cache': True} " in calls[0]
    assert "--model-overrides {} " in calls[1]
    assert sorted(p.name for p in out.iterdir()) == ["a", "b"]


def check_systems(*args: str) -> subprocess.CompletedProcess:
    return run_cli("fairseq-san-loop", "test-systems", *args)


def test_test_systems_prints_one_line_per_system_and_split(tmp_path, san_checkpoint):
    """NAME, SPLIT, REFERENCE, CHECKPOINT, OVERRIDES tab-separated; OVERRIDES start at the first
    ':{', '{}' without them; test1 where DATA has its references (and binarized)."""
    data = fake_data(tmp_path / "data")
    checkpoint = model_at(tmp_path / "at-12" / "model.pt", san_checkpoint)
    policy = "{'san_policy': '{\"decoder_self\": [6]}', 'san_no_cache': True}"
    result = check_systems(str(data), "de", f"base={checkpoint}", f"p1={checkpoint}:{policy}",
                          "--batch-size", "32")  # fmt: skip
    assert (result.returncode, result.stderr) == (0, "")
    test = f"test\t{data}/text/test.raw.de"
    assert result.stdout.splitlines() == [f"base\t{test}\t{checkpoint}\t{{}}",
                                          f"p1\t{test}\t{checkpoint}\t{policy}"]  # fmt: skip
    (data / "text" / "test1.raw.de").write_text("Ein Hund .\n")
    (data / "test1.en-de.de.bin").touch()
    result = check_systems(str(data), "de", f"base={checkpoint}")
    test1 = f"test1\t{data}/text/test1.raw.de"
    assert result.stdout.splitlines() == [f"base\t{test}\t{checkpoint}\t{{}}",
                                          f"base\t{test1}\t{checkpoint}\t{{}}"]  # fmt: skip


REFUSED_NAME = "'{spec}': give NAME=CHECKPOINT, NAME a folder name (not empty, '.' or '..', no '/')"


@pytest.mark.parametrize("spec", ["..={checkpoint}", ".={checkpoint}", "a/b={checkpoint}",
                                  "={checkpoint}", "{checkpoint}", "a="])  # fmt: skip
def test_test_systems_refuses_a_name_that_is_no_folder_name(tmp_path, spec):
    data = fake_data(tmp_path / "data")
    checkpoint = tmp_path / "model.pt"
    checkpoint.write_bytes(b"weights")
    spec = spec.format(checkpoint=checkpoint)
    result = check_systems(str(data), "de", spec)
    assert (result.returncode, result.stdout) == (2, "")
    assert lines(result.stderr) == ["test_bleu.sh: " + REFUSED_NAME.format(spec=spec)]


def test_test_systems_refusals_are_one_line_each(tmp_path, san_checkpoint):
    """Each refusal, in the order test_bleu.sh checked them: exit 1 for a file that is not
    there, 2 for bad usage; nothing printed on stdout, not even the systems before the bad one."""
    data = fake_data(tmp_path / "data")
    (data / "text" / "test.raw.en").write_text("A dog .\n")  # En->De data has both references
    checkpoint = model_at(tmp_path / "model.pt", san_checkpoint)
    good, missing = f"a={checkpoint}", tmp_path / "missing.pt"
    cut_short = tmp_path / "cut.pt"  # loaded only when its turn to decode came
    cut_short.write_bytes(checkpoint.read_bytes()[:100_000])
    (data / "text" / "test1.raw.de").write_text("Ein Hund .\n")
    cases = [
        # test1 not binarized beside its references: found after the systems before were decoded
        ((str(data), "de", good), 1,
         f"{data}: no binarized split 'test1' (test1.*-de.de.bin) beside its references "
         f"{data}/text/test1.raw.de: run prepare.sh again"),
        ((str(tmp_path / "nowhere"), "de", good), 1,
         f"no data directory {tmp_path / 'nowhere'}"),
        # its lines hold the references' path: the recipe read a tab's halves as two fields
        ((f"{tmp_path}/da\tta", "de", good), 2,
         f"DATA '{tmp_path}/da\\tta' holds a tab or line break: give a path without one"),
        ((str(data), "fr", good), 1, f"no {data}/text/test.raw.fr (run prepare.sh)"),
        ((str(data), "en", good), 1,
         f"{data} does not translate into 'en' (no test.SRC-en.en.idx): TGT is the target "
         "language of the pair"),
        ((str(data), "de", good, "--batch-size", "16x"), 2,
         "DECODE_BATCH_SIZE must be a positive integer, not '16x'"),
        ((str(data), "de", good, "--batch-size", "0"), 2,
         "DECODE_BATCH_SIZE must be a positive integer, not '0'"),
        ((str(data), "de", good, "--batch-size", ""), 2,
         "DECODE_BATCH_SIZE must be a positive integer, not ''"),
        ((str(data), "de", good, "--batch-size", "99999999999"), 2,  # bash's arithmetic: fine
         "DECODE_BATCH_SIZE 99999999999: at most 2147483647 (fairseq's --batch-size)"),
        ((str(data), "de", good, f"b={missing}"), 1, f"b: no checkpoint {missing}"),
        # fairseq-generate reads ':' between an ensemble's checkpoints: "cannot load .../at"
        ((str(data), "de", good, f"b={tmp_path}/at:12/model.pt:{{'beam': 2}}"), 2,
         f"b: CHECKPOINT {tmp_path}/at:12/model.pt holds ':', which fairseq-generate reads "
         "between two checkpoints (an ensemble): give a path without one (a link to it)"),
        ((str(data), "de", good, f"b={missing}:{{'san_no_cache': True}}"), 1,
         f"b: no checkpoint {missing}"),
        ((str(data), "de", good, f"a\tb={checkpoint}"), 2,
         f"'a\\tb={checkpoint}': NAME=CHECKPOINT[:OVERRIDES] must hold no tab or line break"),
        ((str(data), "de", good, f"a={checkpoint}:{{'beam': 2}}"), 2,
         "a: two systems of that NAME (each writes OUT_DIR/NAME)"),
        ((str(data), "de", good, f"b={checkpoint}:{{'san_no_cache': open('x')}}"), 2,
         "b: refusing to evaluate \"{'san_no_cache': open('x')}\" as Python"),
        ((str(data), "de", good, f"b={checkpoint}:{{1, 2}}"), 2,
         "b: OVERRIDES {1, 2} is not a dict"),
        ((str(data), "de", good, f"b={checkpoint}:{{'san_decoding': 'static'}}"), 2,
         "b: OVERRIDES set san_decoding 'static', which chooses the decoder: test_bleu.sh decodes "
         "with fairseq's generator; score that decoder with fairseq-generate --task "
         "translation_san --san-decoding static and fairseq-san-score"),
        ((str(data), "de", good, f"b={checkpoint}:{{'san_decoder': 'static'}}"), 2,
         "b: OVERRIDES set san_decoder 'static', which chooses the decoder: test_bleu.sh decodes "
         "with fairseq's generator; score that decoder with fairseq-generate --task "
         "translation_san --san-decoding static"),
        ((str(data), "de", good, f"b={checkpoint}:{{'san_decoder_precision': 'int8'}}"), 2,
         "b: OVERRIDES set san_decoder_precision 'int8', which chooses the decoder"),
        ((str(data), "de", good, f"b={cut_short}"), 2,
         f"b: cannot load checkpoint {cut_short}: "),
    ]  # fmt: skip
    (data / "test1.en-de.en.bin").touch()  # the source side alone was taken
    for at, (args, status, message) in enumerate(cases):
        if at == 1:  # test1 binarized from here on
            (data / "test1.en-de.de.bin").touch()
        result = check_systems(*args)
        assert (result.returncode, result.stdout) == (status, ""), args
        said = lines(result.stderr)
        assert len(said) == 1 and said[0].startswith(f"test_bleu.sh: {message}"), args


def test_test_systems_checks_overrides_against_the_checkpoint(tmp_path, san_checkpoint):
    """OVERRIDES that fairseq-generate would refuse (a key nothing reads, a policy file that is
    not there, a policy of other layers) were refused only at their system's turn, after the
    systems before it had been decoded: now before any."""
    data = fake_data(tmp_path / "data")
    good = f"a={san_checkpoint}"
    cases = [
        ("{'san_polcy': '{\"decoder_self\": [6]}'}",
         "b: unknown option 'san_polcy' in OVERRIDES: neither this checkpoint's model nor any "
         "fairseq component has it, and fairseq would ignore it; did you mean 'san_policy'?"),
        (f"{{'san_policy': '{tmp_path / 'nope.json'}'}}",
         f"b: policy file \"{tmp_path / 'nope.json'}\" not found"),
        ("{'san_policy': '{\"decoder_self\": [1, 4]}'}",
         "b: decoder_self policy [1, 4] sums to 5 but the decoder has 6 layers"),
    ]  # fmt: skip
    for overrides, message in cases:
        result = check_systems(str(data), "de", good, f"b={san_checkpoint}:{overrides}")
        assert (result.returncode, result.stdout) == (2, ""), overrides
        assert lines(result.stderr) == [f"test_bleu.sh: {message}"], overrides
    shares = "{'san_policy': '{\"decoder_self\": [1, 5]}'}"
    result = check_systems(str(data), "de", good, f"b={san_checkpoint}:{shares}")
    assert result.returncode == 0, result.stderr


def test_test_systems_checks_dictionaries_and_out_dir(tmp_path, san_checkpoint,
                                                     binarized_corpus):  # fmt: skip
    """A checkpoint of other dictionaries than DATA's failed only in its fairseq-generate, after
    the systems before it were decoded; an OUT_DIR that is a file, or starts with '-', failed in
    mkdir or rm, with their messages."""
    from fairseq.data import Dictionary

    data = fake_data(tmp_path / "data")
    (data / "dict.en.txt").write_text("a 1\nb 1\n")
    (data / "dict.de.txt").write_text("a 1\nb 1\n")
    rows = len(Dictionary.load(str(binarized_corpus / "dict.src.txt")))
    result = check_systems(str(data), "de", f"a={san_checkpoint}")
    assert (result.returncode, result.stdout) == (2, "")
    assert lines(result.stderr) == [
        f"test_bleu.sh: a: {san_checkpoint}: the checkpoint was trained with other dictionaries "
        f"than the data's: entries per dictionary source {rows} (data: 6), target {rows} (data: "
        "6); use the dictionaries the model was trained with (its data directory, or "
        "fairseq-preprocess --srcdict/--tgtdict with its dict.*.txt)"
    ]
    for side, language in (("src", "en"), ("tgt", "de")):
        shutil.copy(binarized_corpus / f"dict.{side}.txt", data / f"dict.{language}.txt")
    assert check_systems(str(data), "de", f"a={san_checkpoint}").returncode == 0
    (tmp_path / "file").touch()
    for out, said in (
        (str(tmp_path / "file"), f"OUT_DIR {tmp_path}/file is a file: give a folder (made when "
         "missing)"),
        ("-out", "OUT_DIR -out starts with '-', which the commands the recipe runs would read as "
         "an option: give ./-out"),
    ):  # fmt: skip
        result = check_systems(f"--out-dir={out}", "--", str(data), "de", f"a={san_checkpoint}")
        assert (result.returncode, lines(result.stderr)) == (2, [f"test_bleu.sh: {said}"])


def test_test_bleu_refuses_an_empty_out_dir(tmp_path):
    """An empty OUT_DIR (an unset "$OUT") wrote each system's folder under /."""
    data = fake_data(tmp_path / "data")
    for language in ("en", "de"):
        (data / f"dict.{language}.txt").write_text("a 1\n")
    result = run_script(TEST_BLEU, str(data), "de", "", f"a={tmp_path / 'model.pt'}")
    assert (result.returncode, lines(result.stderr)) == (2, [
        "test_bleu.sh: OUT_DIR is empty (an unset variable?): name a folder"])  # fmt: skip


# --- prepare.sh -------------------------------------------------------------------------------


# The translation recipe (SRC TGT OUT) and the language model's (OUT, English only).
PREPARE_RECIPES = {
    "translation": (PREPARE, lambda out: ["en", "de", str(out)], "val.de.gz"),
    "lm": (LM_PREPARE, lambda out: [str(out)], "val.en.gz"),
}


@pytest.mark.parametrize("recipe", list(PREPARE_RECIPES))
def test_prepare_with_a_missing_multi30k_dir_is_one_line(tmp_path, recipe):
    script, args, _ = PREPARE_RECIPES[recipe]
    raw, out = tmp_path / "multi30k", tmp_path / "data-bin"
    result = run_script(script, *args(out), env=prepare_env(raw))
    assert result.returncode == 1
    assert lines(result.stderr) == [f"prepare.sh: MULTI30K_DIR={raw}: no such directory"]
    assert not out.exists()


@pytest.mark.parametrize("recipe", list(PREPARE_RECIPES))
def test_prepare_into_what_is_no_folder_name_or_with_no_vocabulary_size_is_one_line(
    tmp_path, recipe
):
    """An OUT_DIR that is a file (mkdir's "Not a directory"), one starting with '-' (mkdir's
    "unrecognized option"), and VOCAB_SIZE=abc (fairseq-san-spm's usage, naming --vocab-size,
    after the raw text was written)."""
    script, args, _ = PREPARE_RECIPES[recipe]
    raw = write_fake_multi30k(tmp_path / "multi30k")
    (tmp_path / "file").touch()
    env = prepare_env(raw)
    for out, vocab, said in (
        (tmp_path / "file", "30", f"prepare.sh: OUT_DIR {tmp_path}/file is a file: give a folder "
         "(made when missing)"),
        (tmp_path / "data-bin", "abc", "prepare.sh: VOCAB_SIZE=abc: give a positive whole "
         "number of pieces"),
        # bash's arithmetic wrapped it round: "joint sentencepiece model (7766279631452241919"
        (tmp_path / "data-bin", "99999999999999999999", "prepare.sh: VOCAB_SIZE="
         "99999999999999999999: give a positive whole number of pieces (at most 2147483647)"),
        ("--out", "30", "prepare.sh: unknown option --out; usage: "),
    ):  # fmt: skip
        env["VOCAB_SIZE"] = vocab
        result = run_script(script, *args(out), env=env)
        assert result.returncode == 2, output_of(result)[-3000:]
        assert lines(result.stderr)[0].startswith(said), output_of(result)
        assert not (tmp_path / "data-bin").exists()


@pytest.mark.parametrize("recipe", list(PREPARE_RECIPES))
def test_prepare_into_an_empty_out_dir_is_one_line(tmp_path, recipe):
    """``prepare.sh en de "$DATA"`` with DATA unset prepared the default folder, which no later
    command named, and said "done"."""
    script, args, _ = PREPARE_RECIPES[recipe]
    env = prepare_env(write_fake_multi30k(tmp_path / "multi30k"))
    result = subprocess.run(["bash", str(script), *args("")], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=400)  # fmt: skip
    assert result.returncode == 2, output_of(result)[-3000:]
    default = "data-bin/multi30k." + ("en-de" if recipe == "translation" else "en-lm")
    assert lines(result.stderr) == [
        f"prepare.sh: OUT_DIR is empty: name a folder, or leave it out for {default}; usage: "
        + ("prepare.sh SRC TGT [OUT_DIR]" if recipe == "translation"
           else "examples/lm/prepare.sh [OUT_DIR]")
    ]  # fmt: skip
    assert not (tmp_path / "data-bin").exists()


def test_prepare_of_one_language_into_itself_is_one_line(tmp_path):
    """``prepare.sh en en`` made an en-en copy task, which the loop then trained."""
    raw, out = write_fake_multi30k(tmp_path / "multi30k"), tmp_path / "data-bin"
    result = run_script(PREPARE, "en", "en", str(out), env=prepare_env(raw))
    assert result.returncode == 2
    assert lines(result.stderr) == ["prepare.sh: SRC and TGT are both en: give two languages"]
    assert not out.exists()


def test_prepare_refuses_a_split_whose_sides_differ_in_lines(tmp_path):
    """val.de.gz a line short of val.en.gz: prepare.sh said "done", and fairseq-train failed on
    its assertion ("Source and target must contain the same number of examples"), a traceback
    naming no file, at every rerun."""
    raw, out = write_fake_multi30k(tmp_path / "multi30k"), tmp_path / "data-bin"
    short = gzip.decompress((raw / "val.de.gz").read_bytes()).splitlines(keepends=True)[:-1]
    (raw / "val.de.gz").write_bytes(gzip.compress(b"".join(short)))
    result = run_script(PREPARE, "en", "de", str(out), env=prepare_env(raw))
    assert result.returncode == 1
    assert lines(result.stderr)[-1] == (
        f"prepare.sh: valid: {raw}/val.en.gz has {len(short) + 1} lines and {raw}/val.de.gz "
        f"{len(short)}: not a parallel corpus (check MULTI30K_DIR's files)"
    )
    assert not (out / ".done").exists() and not list(out.glob("*.idx"))


@pytest.mark.parametrize("recipe", list(PREPARE_RECIPES))
def test_prepare_names_a_missing_raw_file_before_writing(tmp_path, recipe):
    script, args, missing = PREPARE_RECIPES[recipe]
    raw, out = write_fake_multi30k(tmp_path / "multi30k"), tmp_path / "data-bin"
    (raw / missing).unlink()
    result = run_script(script, *args(out), env=prepare_env(raw))
    assert result.returncode == 1
    assert lines(result.stderr) == [f"prepare.sh: no {raw}/{missing}"]
    assert result.stdout == ""
    assert not out.exists()


@pytest.mark.parametrize("recipe", list(PREPARE_RECIPES))
def test_prepare_names_an_empty_or_broken_raw_file_before_writing(tmp_path, recipe):
    """An empty val.LANG.gz was prepared "done" (an empty valid split, which the loop then
    refused as its references' "source side"); a truncated or unpacked one stopped the recipe
    after the raw text was written, in gzip's words; a broken test_2017_flickr too."""
    script, args, _ = PREPARE_RECIPES[recipe]
    raw, out = write_fake_multi30k(tmp_path / "multi30k"), tmp_path / "data-bin"
    whole = (raw / "val.en.gz").read_bytes()
    for name, content, said in (
        ("val.en.gz", gzip.compress(b""), "holds no sentence: every split needs some"),
        ("val.en.gz", whole[: len(whole) // 2], "is no whole gzip file (Compressed file ended "
         "before the end-of-stream marker was reached)"),
        ("val.en.gz", gzip.decompress(whole), "is no whole gzip file (Not a gzipped file"),
        ("test_2017_flickr.en.gz", b"", "holds no sentence: every split needs some"),
    ):  # fmt: skip
        if name.startswith("test_2017") and recipe == "lm":
            continue  # the language model's data has no test1
        (raw / "val.en.gz").write_bytes(whole)
        (raw / name).write_bytes(content)
        result = run_script(script, *args(out), env=prepare_env(raw))
        assert result.returncode == 1, output_of(result)[-3000:]
        assert lines(result.stderr)[0].startswith(f"prepare.sh: {raw}/{name} {said}"), (
            output_of(result)[-3000:]
        )
        assert len(lines(result.stderr)) == 1 and result.stdout == ""
        assert not out.exists()


@pytest.mark.parametrize("recipe", list(PREPARE_RECIPES))
def test_prepare_without_multi30k_dir_downloads_and_names_a_failed_download(tmp_path, recipe):
    """Unset MULTI30K_DIR: the raw files come from the multi30k repository; a download that
    fails (here a curl that cannot reach the host) stops the recipe in one line."""
    script, args, _ = PREPARE_RECIPES[recipe]
    bin_dir, out = tmp_path / "bin", tmp_path / "data-bin"
    bin_dir.mkdir()
    (bin_dir / "curl").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/curl.log\nexit 6\n')
    (bin_dir / "curl").chmod(0o755)
    env = prepare_env(tmp_path)
    del env["MULTI30K_DIR"]
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    result = run_script(script, *args(out), env=env)
    url = "https://github.com/multi30k/dataset/raw/a3d2e0d26b56f3846f66a952536ffed4e401d05a/data/task1/raw/train.en.gz"
    assert result.returncode == 1
    assert lines(result.stderr) == [
        f"prepare.sh: cannot download {url} (set MULTI30K_DIR to a local copy)"
    ]
    assert url in (tmp_path / "curl.log").read_text()
    assert not list(out.glob("*.bin"))


def test_prepare_stops_where_test_2017_fails_to_download(multi30k_raw, tmp_path):
    """test_2017_flickr was looked for by downloading it, errors hidden: a failed download (a
    timeout) made a pair without test1, and .done kept it so. The repository has test_2017 for
    en, de and fr: its download failing stops the recipe, as any other download does."""
    bin_dir, out = tmp_path / "bin", tmp_path / "data-bin"
    bin_dir.mkdir()
    (bin_dir / "curl").write_text(
        "#!/bin/sh\n"  # curl -fsL -o FILE URL: FILE from MULTI30K, test_2017 timing out
        f'echo "$4" >> {tmp_path}/curl.log\n'
        'case $4 in */test_2017_flickr.*) exit 28 ;; esac\n'
        f'cp "{multi30k_raw}/${{4##*/}}" "$3"\n'
    )  # fmt: skip
    (bin_dir / "curl").chmod(0o755)
    env = prepare_env(tmp_path)
    del env["MULTI30K_DIR"]
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    result = run_script(PREPARE, "en", "de", str(out), env=env)
    url = "https://github.com/multi30k/dataset/raw/a3d2e0d26b56f3846f66a952536ffed4e401d05a/data/task1/raw"
    assert result.returncode == 1
    assert lines(result.stderr)[-1] == (
        f"prepare.sh: cannot download {url}/test_2017_flickr.en.gz (set MULTI30K_DIR to a local "
        "copy)"
    )
    assert not (out / ".done").exists()


def test_the_recipes_post_process_values_are_fairseqs():
    """run_record.POST_PROCESS is every value fairseq's post_process names, each accepted."""
    import ast
    import inspect

    from fairseq.data import data_utils

    from fairseq_san.loop.run_record import POST_PROCESS

    named = set()
    for node in ast.walk(ast.parse(inspect.getsource(data_utils.post_process))):
        if isinstance(node, ast.Compare) and getattr(node.left, "id", None) == "symbol":
            for compared in node.comparators:
                named |= {c.value for c in ast.walk(compared) if isinstance(c, ast.Constant)}
    named.discard(None)
    assert named == set(POST_PROCESS)
    for symbol in POST_PROCESS:
        data_utils.post_process("a b", symbol)  # raises NotImplementedError for an unknown one


@pytest.mark.parametrize("recorded", [{"--updates": None}, {}], ids=["null", "absent"])
def test_a_record_made_before_the_recipe_had_an_option_resumes_at_its_default(recorded):
    """learn_to_share_lm.sh gained --updates (20000): a run recorded before held it as null, and
    every re-run of it was refused ("made with no --updates, not --updates 20000"). At the
    default it resumes; at another value it is refused as before."""
    from fairseq_san.loop.recipe_options import LM_LOOP, recipe_defaults
    from fairseq_san.loop.run_record import RunError, compare

    defaults = recipe_defaults(LM_LOOP)
    old = {"--lm": True, "--theta-self": "0.5", **recorded}
    now = {"--lm": True, "--theta-self": "0.5", "--updates": defaults["--updates"]}
    assert compare("RUN", old, now, {}, False, defaults) == []
    with pytest.raises(RunError, match="made with no --updates, not --updates 500"):
        compare("RUN", old, {**now, "--updates": "500"}, {}, False, defaults)


def test_a_language_models_run_recorded_before_its_start_options_resumes():
    """learn_to_share_lm.sh gained the translation loop's start options: a run recorded before
    held --warm-updates as null, which has no default (half of --updates), and every re-run was
    refused ("made with no --warm-updates, not --warm-updates 10000"). An option read only with
    another is compared only where that one is on."""
    from fairseq_san.loop.recipe_options import LM_LOOP, recipe_defaults
    from fairseq_san.loop.run_record import RunError, compare

    defaults = recipe_defaults(LM_LOOP)
    old = {"--lm": True, "--updates": "20000", "--warm-start": False, "--warm-updates": None,
           "--cpu-ranks": None, "--launcher": None}  # fmt: skip
    now = {**old, "--warm-updates": "10000", "--cpu-ranks": "0"}
    assert compare("RUN", old, now, {}, False, defaults) == []
    with pytest.raises(RunError, match="made with no --warm-start, not --warm-start"):
        compare("RUN", old, {**now, "--warm-start": True}, {}, False, defaults)
    warm = {**now, "--warm-start": True}
    with pytest.raises(RunError, match="made with --warm-updates 10000, not 7"):
        compare("RUN", warm, {**warm, "--warm-updates": "7"}, {}, False, defaults)


def translation_data(directory: Path) -> Path:
    """A binarized En-De directory whose files hold their own names, and valid references."""
    fake_data(directory)
    for name in ("dict.en.txt", "dict.de.txt"):
        (directory / name).write_text("Hund 1\n")
    for path in directory.glob("*.*-*.*.*"):
        path.write_bytes(path.name.encode())
    return directory


def test_the_data_digest_covers_the_sentences(tmp_path):
    """Data binarized again with the same vocabulary and every sentence's length (its index
    files) but other tokens resumed a run as the same data: the digest read no ``.bin``."""
    from fairseq_san.loop.run_record import RunError, compare, digest, digests

    data = translation_data(tmp_path / "data")
    options = {"--data": str(data)}
    recorded = digests(options)
    assert compare("RUN", options, options, recorded, False, {}) == []
    before = digest(str(data))
    (data / "train.en-de.de.bin").write_bytes(b"other tokens")
    assert digest(str(data)) != before
    with pytest.raises(RunError, match="its content has changed since"):
        compare("RUN", options, options, recorded, False, {})


def test_a_run_recorded_before_the_digest_read_the_sentences_resumes_and_is_recorded_anew(
    tmp_path,
):
    """A record of the digest of dictionaries and index files alone (before 2026-12-01) is the
    same data; the resumed run records the digest that reads the sentences too."""
    from fairseq_san.files import write_json
    from fairseq_san.loop.run_record import (
        data_files,
        digest,
        files_sha256,
        record_path,
        start_run,
    )

    data = translation_data(tmp_path / "data")
    run_dir = tmp_path / "run"
    (run_dir / "iter0").mkdir(parents=True)
    (run_dir / "iter0" / "trained").touch()
    options = {"--data": str(data), "--valid-ref": str(data / "text" / "valid.raw.de")}
    old = files_sha256(data_files(str(data)))
    content = {"--data": old, "--valid-ref": digest(options["--valid-ref"])}
    write_json(record_path(str(run_dir)), {"options": options, "content": content})
    start_run(str(run_dir), options)
    assert read_json(Path(record_path(str(run_dir))))["content"]["--data"] == digest(str(data))
    assert digest(str(data)) != old


@pytest.mark.parametrize("was_lm", [True, False], ids=["lm run", "translation run"])
def test_a_run_dir_of_the_other_recipe_is_named_as_such(was_lm):
    """The language model's recipe on a translation run listed ten differing options, the first
    "made with no --lm, not --lm"; the translation recipe never said the run was a language
    model's."""
    from fairseq_san.loop.run_record import RunError, compare

    lm, translation = {"--lm": True, "--theta-self": "0.4"}, {"--theta-self": "0.4"}
    recorded, now = (lm, translation) if was_lm else (translation, lm)
    made = ("a language model's run (learn_to_share_lm.sh)" if was_lm
            else "a translation run (learn_to_share.sh)")  # fmt: skip
    with pytest.raises(RunError) as refused:
        compare("RUN", recorded, now, {}, False, {})
    assert str(refused.value) == (
        f"RUN is {made} (RUN/run.json): resume it with that recipe, or start a new run with "
        "another --run-dir"
    )


@pytest.mark.parametrize("extend", [True, False])
def test_max_iterations_below_the_trained_ones_is_refused_saying_so(tmp_path, extend):
    """--extend --max-iterations 1 on a run that trained two was taken: the loop stopped after
    iteration 0 and pointed RUN/last there, while loop.md still said it stopped after 1. Without
    --extend it was told "pass --extend to change --max-iterations", which then refused it: it
    says why at once; a higher one is still told to pass --extend (or taken with it)."""
    from fairseq_san.loop.run_record import RunError, compare

    for k in (0, 1):
        (tmp_path / f"iter{k}").mkdir()
        (tmp_path / f"iter{k}" / "trained").touch()
    recorded = {"--max-iterations": "3"}
    with pytest.raises(RunError, match=f"--max-iterations 1: {tmp_path} has trained 2 "
                       "iterations already; --extend raises the limit"):  # fmt: skip
        compare(str(tmp_path), recorded, {"--max-iterations": "1"}, {}, extend, {})
    for allowed in ("2", "5"):
        if extend:
            changed = compare(str(tmp_path), recorded, {"--max-iterations": allowed}, {}, True, {})
            assert changed == ["--max-iterations"]
            continue
        with pytest.raises(RunError, match="pass --extend to change --max-iterations"):
            compare(str(tmp_path), recorded, {"--max-iterations": allowed}, {}, False, {})


def test_a_language_models_data_digest_covers_its_dictionary(tmp_path):
    """fairseq-preprocess --only-source writes ``dict.txt``, not ``dict.LANG.txt``: a language
    model's data re-binarized with another vocabulary (the same sentence lengths) resumed its run
    as the same data."""
    from fairseq_san.loop.run_record import digest

    for name in ("dict.txt", "train.idx", "valid.idx"):
        (tmp_path / name).write_text(name)
    before = digest(str(tmp_path))
    (tmp_path / "dict.txt").write_text("another vocabulary")
    assert digest(str(tmp_path)) != before


def test_a_language_models_run_recorded_before_its_dictionary_counted_resumes(tmp_path):
    """Records made before the digest read ``dict.txt`` hold the digest of the index files: the
    same data, resumed (refused with "its content has changed since" until it was accepted)."""
    from fairseq_san.loop.run_record import differs, digest, files_sha256

    for name in ("dict.txt", "train.idx", "valid.idx"):
        (tmp_path / name).write_text(name)
    old = files_sha256([str(tmp_path / "train.idx"), str(tmp_path / "valid.idx")])
    options = {"--data": str(tmp_path)}
    for recorded in (old, digest(str(tmp_path))):
        assert not differs("--data", options, options, {"--data": recorded}, {})
    (tmp_path / "train.idx").write_text("other sentences")
    assert differs("--data", options, options, {"--data": old}, {})


def test_extend_is_not_below_an_iteration_that_began_training(tmp_path):
    """A run stopped inside iteration 1's training (its checkpoints, no ``trained`` marker):
    --extend --max-iterations 1 would end the loop before it, the summary still listing it."""
    from fairseq_san.loop.run_record import RunError, compare

    run_dir = tmp_path / "run"
    for k in (0, 1):
        (run_dir / f"iter{k}" / "checkpoints").mkdir(parents=True)
        (run_dir / f"iter{k}" / "checkpoints" / "checkpoint_last.pt").touch()
    (run_dir / "iter0" / "trained").touch()
    with pytest.raises(RunError, match=r"has trained 1 iterations already and begun iteration 1 "):
        compare(str(run_dir), {"--max-iterations": "3"}, {"--max-iterations": "1"}, {}, True, {})
    assert compare(str(run_dir), {"--max-iterations": "3"}, {"--max-iterations": "2"}, {}, True,
                   {}) == ["--max-iterations"]  # fmt: skip


def test_folders_named_with_glob_characters_are_read_as_named(tmp_path):
    """A run folder ``run[AB]`` or data ``data[1]`` was a character class to ``glob``: a trained
    run read as untouched (its options rewritten at will), ``summary`` found no iteration, and
    beside a sibling ``data1`` the run recorded the sibling's files as its data."""
    from fairseq_san.loop.run_record import RunError, compare, data_files, digest, started
    from fairseq_san.loop.summary import iteration_dirs

    run_dir = tmp_path / "run[AB]"
    (tmp_path / "runA").mkdir()  # an untouched sibling the class matches
    (run_dir / "iter0" / "checkpoints").mkdir(parents=True)
    (run_dir / "iter0" / "trained").touch()
    (run_dir / "iter0" / "checkpoints" / "checkpoint_best.pt").touch()
    assert started(str(run_dir))
    assert iteration_dirs(str(run_dir)) == [str(run_dir / "iter0")]
    with pytest.raises(RunError, match="has trained 1 iterations already"):
        compare(str(run_dir), {"--max-iterations": "3"}, {"--max-iterations": "0"}, {}, True, {})
    data = translation_data(tmp_path / "data[1]")
    sibling = translation_data(tmp_path / "data1")
    (sibling / "dict.en.txt").write_text("Katze 1\n")
    found = data_files(str(data))
    assert found and all(path.startswith(str(data)) for path in found)
    assert digest(str(data)) != digest(str(sibling))


def test_options_left_out_then_and_now_are_the_same():
    """``fairseq-san-loop start`` run by hand without the options at their defaults: the same
    command again was refused, each left-out option "None as it was then (its content has changed
    since)"."""
    from fairseq_san.loop.run_record import RunError, compare

    defaults = {"--arch": "transformer_san_small", "--updates": "3000"}
    recorded = {"--arch": None, "--updates": None, "--theta-self": "0.4"}
    assert compare("RUN", recorded, dict(recorded), {}, False, defaults) == []
    with pytest.raises(RunError) as refused:
        compare("RUN", recorded, {**recorded, "--theta-self": "0.3"}, {}, False, defaults)
    assert str(refused.value) == (
        "RUN was made with --theta-self 0.4, not 0.3 (RUN/run.json): start a new run with "
        "another --run-dir"
    )


def test_a_sample_shorter_than_a_valid_sentence_is_refused_before_the_run_dir(tmp_path):
    """A language model's --tokens-per-sample below its longest valid sentence: the run dir was
    made, then fairseq-train stopped at that sentence ("Size of sample #537 is invalid (=41) since
    max_positions=40"), naming --skip-invalid-size-inputs-valid-test, which the loop refuses.
    The recipe's own 128 was not checked, only a value after --. The sizes are read from
    fairseq's index as fairseq reads them."""
    from fairseq.data.indexed_dataset import MMapIndexedDataset
    from helpers import preprocess_lm

    from fairseq_san.loop.run_record import index_sizes

    raw = tmp_path / "raw"
    raw.mkdir()
    for split, lines in (("train", ["a b c"] * 20), ("valid", ["a b", "a " * 129 + "c"]),
                         ("test", ["b c"])):  # fmt: skip
        (raw / f"{split}.src").write_text("".join(line + "\n" for line in lines))
    data = preprocess_lm(raw, tmp_path / "data-bin")
    sizes = index_sizes(str(data / "valid.idx"))
    fairseqs = MMapIndexedDataset(str(data / "valid"))  # kept: its sizes are its mapped memory
    assert sizes == fairseqs.sizes.tolist() == [3, 131]

    def refusal(*after: str) -> str:
        run_dir = tmp_path / "run"
        result = run_script(LM_LOOP, "--data", str(data), "--run-dir", str(run_dir), "--dry-run",
                            "--", *after)  # fmt: skip
        assert not run_dir.exists()
        return "" if result.returncode == 0 else result.stderr

    def said(tokens: int) -> str:
        return (
            f"fairseq-san-loop: error: --tokens-per-sample {tokens}: the longest valid sentence "
            f"of {data} has 131 tokens with its end, and fairseq-train stops at one longer than "
            "a sample (--sample-break-mode eos; the loop analyses and scores every valid "
            "sentence): pass --tokens-per-sample 131 or more after --\n"
        )

    assert refusal() == said(128)  # the recipe's own
    assert refusal("--tokens-per-sample=130") == said(130)
    assert refusal("--tokens-per-sample", "131") == ""
    # blocks of 2, but the analysis reads each valid sentence whole: it stopped after iteration 0
    blocks = ("--tokens-per-sample", "2", "--sample-break-mode", "none")
    assert "more than the model's positions hold (--sample-break-mode none" in refusal(*blocks)
    assert refusal(*blocks, "--max-target-positions", "131") == ""
    # fairseq-san-loop start --lm by hand, the arguments after -- its own
    start = ["fairseq-san-loop", "start", str(tmp_path / "run"), "--lm", "--data", str(data),
             "--dry-run", "--"]  # fmt: skip
    assert run_cli(*start, "--tokens-per-sample", "130").stderr.splitlines()[-1:] == [
        said(130).rstrip("\n")
    ]
    assert not (tmp_path / "run").exists()
    assert run_cli(*start, "--tokens-per-sample", "131").returncode == 0


def test_the_recipes_name_a_command_missing_from_path(tmp_path):
    """Without the venv's bin on PATH bash said "line 24: fairseq-san-loop: command not found"
    (exit 127), naming neither the cause nor the fix; each recipe says so in one line first."""
    env = {**prepare_env(write_fake_multi30k(tmp_path / "raw")), "PATH": "/usr/bin:/bin"}
    out, data = tmp_path / "out", fake_data(tmp_path / "data")
    runs = {
        PREPARE: ["en", "de", str(out)],
        LM_PREPARE: [str(out)],
        TEST_BLEU: [str(data), "de", str(out), f"a={data}/checkpoint.pt"],
        LOOP: ["--data", str(data), "--run-dir", str(out)],
        LM_LOOP: ["--data", str(data), "--run-dir", str(out)],
        REPO / "examples" / "demo.sh": [],
    }
    for script, args in runs.items():
        result = run_script(script, *args, env={**env, "RUN_DIR": str(out)}, timeout=60)
        name = str(script) if script in (LOOP, LM_LOOP) else script.name
        assert (result.returncode, result.stdout, result.stderr) == (1, "", (
            f"{name}: fairseq-san-loop not found on PATH (activate the environment of make "
            "setup)\n")), output_of(result)  # fmt: skip
        assert not out.exists()
