"""Tests for the layer-similarity analysis (task ``translation_san``) and its figures.

The module fixture trains tiny models on the synthetic corpus with fairseq-train and runs
fairseq-validate with ``--san-analysis-dir`` on them, as a user does; the commands of one stage
run side by side.
"""

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import List

import numpy as np
import pytest
import torch

from helpers import (
    REPO,
    build,
    cli_env,
    drawn_figures,
    run_cli,
    run_parallel,
    source_batch,
    target_prefixes,
    train_argv,
)
from fairseq_san.policy import KIND_TABLE, KINDS, LN2

LAYERS = {"decoder_self": 6, "decoder_encdec": 6, "encoder_self": 2}  # train_argv's model
HEADS = 4
VALID_SENTENCES = 30  # helpers.write_corpus
MAX_SENTENCES = 17


def validate(data: Path, checkpoint: Path, analysis: Path, *extra: str) -> List[str]:
    return [
        "fairseq-validate", str(data),
        "--user-dir", "fairseq_san",
        "--task", "translation_san",
        "--path", str(checkpoint),
        "--valid-subset", "valid",
        "--san-analysis-dir", str(analysis),
        "--cpu", "--num-workers", "0",
        *extra,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def runs(binarized_corpus, tmp_path_factory):
    """Checkpoints and analysis directories; ``runs["out"]`` holds the validation logs."""
    data = binarized_corpus
    root = tmp_path_factory.mktemp("analysis")
    san = ["--task", "translation_san"]
    run_parallel(
        {
            "base": ["fairseq-train", *train_argv(
                data, root / "base", extra=[*san, "--save-interval-updates", "10"])],
            "shared": ["fairseq-train", *train_argv(
                data, root / "shared", extra=[*san, "--san-decoder-self-policy", "1,5"])],
            "plain": ["fairseq-train", *train_argv(data, root / "plain")],  # --task translation
        }
    )  # fmt: skip
    (step10,) = (root / "base").glob("checkpoint_*_10.pt")
    last = root / "base" / "checkpoint_last.pt"
    plain = root / "plain" / "checkpoint_last.pt"
    limit = ["--san-analysis-max-sentences", str(MAX_SENTENCES)]
    names = ("small", "big", "buckets", "step10", "shared", "plain", "override")
    dirs = {name: root / f"js-{name}" for name in names}
    task = {"_name": "translation_san", "san_analysis_dir": str(dirs["override"])}
    override = repr({"task": task})
    out = run_parallel(
        {
            "small": validate(data, last, dirs["small"], "--batch-size", "3", *limit,
                              "--san-analysis-log-interval", "2"),
            # fairseq-validate's --seed replaced the training's in js.json
            "big": validate(data, last, dirs["big"], "--batch-size", "64", *limit, "--seed", "7"),
            # targets padded to their bucket's length before fairseq shifts them
            "buckets": validate(data, last, dirs["buckets"], "--max-tokens", "100",
                                "--num-batch-buckets", "3", *limit),
            "step10": validate(data, step10, dirs["step10"], "--batch-size", "8", *limit),
            "shared": validate(data, root / "shared" / "checkpoint_last.pt", dirs["shared"],
                               "--batch-size", "8"),
            # the task dict of --model-overrides wins over the --san-analysis-* flags
            "override": validate(data, plain, dirs["plain"], "--batch-size", "8",
                                 "--model-overrides", override),
        }
    )  # fmt: skip
    return dict(dirs, out=out, last=last, step10_checkpoint=step10)


def load_js(directory: Path) -> dict:
    return json.loads((directory / "js.json").read_text())


@pytest.mark.slow
def test_js_json(runs):
    result = load_js(runs["small"])
    assert set(result) == {*KINDS, "sentences", "checkpoint", "num_updates", "seed", "save_dir",
                           "subset", "policy"}  # fmt: skip
    assert result["policy"] == {}  # unshared
    assert result["seed"] == load_js(runs["big"])["seed"] == 1  # train_argv's, not --seed 7
    assert result["save_dir"] == str(runs["last"].parent)  # the training's, not the checkpoint's
    assert result["sentences"] == MAX_SENTENCES
    assert result["checkpoint"] == str(runs["last"])
    assert result["num_updates"] == 40
    assert result["subset"] == "valid"
    for kind in KINDS:
        js = np.array(result[kind])
        assert js.shape == (LAYERS[kind], LAYERS[kind]), kind
        assert (js >= 0).all() and (js <= LN2).all(), kind
        np.testing.assert_array_equal(js, js.T)
        np.testing.assert_array_equal(np.diag(js), 0.0)
        assert js[0, 1] > 1e-4, f"{kind}: unshared layers should differ"


@pytest.mark.slow
def test_all_sentences_by_default_and_checkpoint_steps(runs):
    assert load_js(runs["shared"])["sentences"] == VALID_SENTENCES
    result = load_js(runs["step10"])
    assert result["sentences"] == MAX_SENTENCES
    assert result["num_updates"] == 10
    assert result["checkpoint"] == str(runs["step10_checkpoint"])


@pytest.mark.slow
def test_progress_is_logged(runs):
    lines = [line for line in runs["out"]["small"].splitlines() if "SAN analysis:" in line]
    assert any("sentences in 2 batches" in line for line in lines), lines
    assert any("wrote" in line and "js.json" in line for line in lines), lines


@pytest.mark.slow
def test_streaming_over_batches_equals_one_batch(runs):
    small, big = load_js(runs["small"]), load_js(runs["big"])
    assert small["sentences"] == big["sentences"] == MAX_SENTENCES
    for kind in KINDS:
        np.testing.assert_allclose(small[kind], big[kind], atol=1e-6, rtol=0, err_msg=kind)


@pytest.mark.slow
def test_targets_padded_to_buckets_are_analysed_as_they_are(runs):
    """With --num-batch-buckets fairseq pads a target to its bucket's length and then shifts it:
    the decoder's input also holds the target's end of sentence, a position that predicts padding.
    It was analysed as a query (the JS and the saved weights changed with the batching)."""
    small, buckets = load_js(runs["small"]), load_js(runs["buckets"])
    for kind in KINDS:
        np.testing.assert_allclose(small[kind], buckets[kind], atol=1e-6, rtol=0, err_msg=kind)
        with np.load(runs["small"] / f"attention-{kind}.npz") as expected, np.load(
            runs["buckets"] / f"attention-{kind}.npz"
        ) as got:
            for name in expected.files:
                assert got[name].shape == expected[name].shape, (kind, name)


@pytest.mark.slow
def test_shared_block_has_zero_js(runs):
    """Layers that share their weights have JS 0; the analysis records the model's policy, by
    which fairseq-san-policy and fairseq-san-plot-js refuse it beside an unshared model's."""
    assert load_js(runs["shared"])["policy"] == {"decoder_self": [1, 5]}
    js = np.array(load_js(runs["shared"])["decoder_self"])
    assert np.abs(js[1:, 1:]).max() <= 1e-6  # layers 2..6 share layer 2's weights
    assert js[0, 1:].min() > 1e-4  # layer 1 is its own block


@pytest.mark.slow
def test_figures_and_saved_attention(runs, binarized_corpus):
    from fairseq.data import Dictionary, data_utils

    directory = runs["small"]
    lengths = {}
    for side in ("src", "tgt"):
        dictionary = Dictionary.load(str(binarized_corpus / f"dict.{side}.txt"))
        prefix = str(binarized_corpus / f"valid.src-tgt.{side}")
        dataset = data_utils.load_indexed_dataset(prefix, dictionary)
        lengths[side] = np.array(dataset.sizes)  # with eos; a copy, as the mmap closes with it
    for kind in KINDS:
        png = directory / f"js-{kind}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
        with np.load(directory / f"attention-{kind}.npz") as saved:
            assert sorted(saved.files) == [f"sentence_{i}" for i in range(4)]
            for i in range(4):
                queries = lengths["src" if kind == "encoder_self" else "tgt"][i]
                keys = lengths["tgt" if kind == "decoder_self" else "src"][i]
                assert saved[f"sentence_{i}"].shape == (LAYERS[kind], HEADS, queries, keys)


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_saved_rows_are_distributions_and_causal(runs, kind):
    with np.load(runs["small"] / f"attention-{kind}.npz") as saved:
        for name in saved.files:
            attn = saved[name]
            np.testing.assert_allclose(attn.sum(-1), 1.0, atol=1e-5)
            assert (attn >= 0).all()
            if kind == "decoder_self":
                assert np.abs(np.triu(attn, k=1)).max() == 0.0, name


@pytest.mark.slow
def test_translation_checkpoint_analysed_with_model_overrides(runs):
    """--model-overrides switches a translation checkpoint's task (fairseq-validate keeps the saved
    task config; without the override it stops with that advice: test_errors.py)."""
    assert not runs["plain"].exists()
    result = load_js(runs["override"])
    assert result["sentences"] == VALID_SENTENCES
    assert result["num_updates"] == 40


@pytest.mark.slow
def test_fairseqs_own_transformer_is_analysed_at_its_training_step(runs, binarized_corpus, tmp_path):
    """fairseq's ``transformer`` keeps no ``num_updates`` (the plugin's models kept it
    themselves): its js.json said null, and fairseq-san-plot-js refused it. The analysis task
    keeps the step fairseq sets on any model as it loads the checkpoint."""
    from fairseq import checkpoint_utils
    from omegaconf import OmegaConf

    state = checkpoint_utils.load_checkpoint_to_cpu(str(runs["last"]))
    state["cfg"] = OmegaConf.to_container(state["cfg"])  # as fairseq saves it
    state["cfg"]["model"]._name = state["cfg"]["model"].arch = "transformer"  # a Namespace
    plain = tmp_path / "transformer.pt"
    torch.save(state, plain)
    analysis = tmp_path / "js"
    task = {"_name": "translation_san", "san_analysis_dir": str(analysis)}
    result = run_cli(*validate(binarized_corpus, plain, analysis, "--batch-size", "8",
                               "--model-overrides", repr({"task": task})))  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert load_js(analysis)["num_updates"] == 40


@pytest.mark.slow
def test_plot_js(runs, tmp_path):
    """One training's analyses of the same sentences at two steps plot; one of every valid
    sentence beside them (another text's attention) is refused."""
    output = tmp_path / "fig5.png"
    result = run_cli(
        "fairseq-san-plot-js", str(runs["step10"]), str(runs["small"]), "-o", str(output)
    )
    assert result.returncode == 0, result.stderr
    assert output.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    every = tmp_path / "every"
    every.mkdir()
    analysis = {**load_js(runs["step10"]), "num_updates": 20, "sentences": VALID_SENTENCES}
    (every / "js.json").write_text(json.dumps(analysis))
    result = run_cli("fairseq-san-plot-js", str(runs["step10"]), str(every), "-o",
                     str(tmp_path / "mixed.png"))  # fmt: skip
    assert result.returncode == 2
    assert f"(sentences {MAX_SENTENCES}) and {every}/js.json (sentences {VALID_SENTENCES}) are " \
        "analyses of different numbers of sentences" in result.stderr


def test_figure5_curves_are_js_of_each_layer_to_the_reference_over_training():
    """``fairseq-san-plot-js``'s points: per kind, JS(reference, layer) of each analysis at its
    training step (not JS(layer, layer), 0, nor another kind's); None for a kind no analysis has."""
    from fairseq_san.cli.plot_js import curves

    def matrix(scale: float) -> List[List[float]]:
        return [[0.0 if i == j else scale * (i + j) / 10 for j in range(3)] for i in range(3)]

    early, late = matrix(1.0), matrix(0.5)
    analyses = [
        ("a/js.json", {"num_updates": 10, "decoder_self": early, "decoder_encdec": late}),
        ("b/js.json", {"num_updates": 40, "decoder_self": late, "decoder_encdec": None}),
    ]
    panels = curves(analyses, reference=1, layers=[2, 3])
    assert panels["decoder_self"] == {
        2: [(10, early[0][1]), (40, late[0][1])],
        3: [(10, early[0][2]), (40, late[0][2])],
    }
    assert panels["decoder_encdec"] == {2: [(10, late[0][1])], 3: [(10, late[0][2])]}
    only_self = [(path, {**data, "decoder_encdec": None}) for path, data in analyses]
    assert curves(only_self, reference=1, layers=[2])["decoder_encdec"] is None


def uniform_js(layers: int) -> List[List[float]]:
    return [[0.0 if i == j else 0.1 for j in range(layers)] for i in range(layers)]


def write_js(directory: Path, steps: int, **kinds) -> str:
    """An analysis folder whose js.json holds ``kinds`` (layer counts, None: no weights) as
    fairseq-validate --san-analysis-dir writes them, at training step ``steps``."""
    directory.mkdir()
    matrices = {kind: layers and uniform_js(layers) for kind, layers in kinds.items()}
    analysis = {**matrices, "sentences": 30, "checkpoint": "c.pt", "num_updates": steps,
                "subset": "valid"}  # fmt: skip
    (directory / "js.json").write_text(json.dumps(analysis))
    return str(directory)


def plot_js_refusal(argv: List[str], capsys) -> str:
    """The last line of fairseq-san-plot-js's usage error (exit status 2) for ``argv``."""
    from fairseq_san.cli.plot_js import main

    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    return capsys.readouterr().err.splitlines()[-1]


def test_plot_js_refuses_stdout_saying_why(tmp_path, capsys):
    """`-o -` was told to "end the name in a figure format's extension"; a figure's format is
    read from its name, so standard output is refused as such, in one line."""
    analysis = write_js(tmp_path / "a", 10, decoder_self=6, decoder_encdec=6, encoder_self=2)
    assert plot_js_refusal([analysis, "-o", "-"], capsys) == (
        "fairseq-san-plot-js: error: -o -: the figure is not written to standard output (its "
        "format is read from the file name's extension): name a file, e.g. -o fig5.png"
    )


@pytest.mark.parametrize(
    "other, described",
    [
        ({"decoder_self": 6, "decoder_encdec": None, "encoder_self": None},
         "decoder_self 6 layers, no decoder_encdec, no encoder_self"),  # a language model
        ({"decoder_self": 6, "decoder_encdec": 6, "encoder_self": 6},
         "decoder_self 6 layers, decoder_encdec 6 layers, encoder_self 6 layers"),
        ({"decoder_self": None, "decoder_encdec": 6, "encoder_self": 2},
         "no decoder_self, decoder_encdec 6 layers, encoder_self 2 layers"),  # AAN
        ({"decoder_self": 4, "decoder_encdec": 4, "encoder_self": 2},
         "decoder_self 4 layers, decoder_encdec 4 layers, encoder_self 2 layers"),
    ],
    ids=["language model", "encoder layers", "AAN", "decoder layers"],
)  # fmt: skip
def test_plot_js_refuses_analyses_of_different_models(tmp_path, capsys, other, described):
    """A translation model's analysis and a language model's were drawn as one Self-Attention
    curve ("2 checkpoints"): analyses of models of other kinds of attention or layer counts
    (what fairseq-san-policy refuses to average) are one line naming both."""
    first = write_js(tmp_path / "a", 10, decoder_self=6, decoder_encdec=6, encoder_self=2)
    later = write_js(tmp_path / "a-later", 20, decoder_self=6, decoder_encdec=6, encoder_self=2)
    mixed = write_js(tmp_path / "b", 30, **other)
    output = tmp_path / "mix.png"
    argv = [first, later, mixed, "-o", str(output), "--reference-layer", "1", "--layers", "2"]
    assert plot_js_refusal(argv, capsys) == (
        f"fairseq-san-plot-js: error: {first}/js.json (decoder_self 6 layers, decoder_encdec 6 "
        f"layers, encoder_self 2 layers) and {mixed}/js.json ({described}) are analyses of "
        "different models: plot the checkpoints of one model"
    )
    assert not output.exists()


def with_recorded(folder: str, **recorded) -> str:
    """``folder``'s analysis recording ``recorded`` too (a seed, a checkpoint)."""
    analysis = json.loads(Path(folder, "js.json").read_text())
    Path(folder, "js.json").write_text(json.dumps({**analysis, **recorded}))
    return folder


def test_plot_js_refuses_analyses_of_two_trainings(tmp_path, capsys):
    """Two seeds' kept checkpoints of one recipe (one policy, one subset) were drawn as one curve,
    their points interleaved by step."""
    first, other = (with_recorded(write_js(tmp_path / name, steps, decoder_self=6), seed=seed)
                    for name, steps, seed in (("a", 10, 1), ("b", 20, 2)))  # fmt: skip
    output = tmp_path / "fig5.png"
    argv = [first, other, "-o", str(output), "--reference-layer", "1", "--layers", "2"]
    assert plot_js_refusal(argv, capsys) == (
        f"fairseq-san-plot-js: error: {first}/js.json (seed 1) and {other}/js.json (seed 2) are "
        "analyses of different trainings: plot the checkpoints of one training"
    )
    assert not output.exists()


def test_plot_js_refuses_two_trainings_of_one_seed(tmp_path, capsys):
    """Two runs of one recipe and seed, trained into two --save-dir, were drawn as one curve."""
    first, other = (with_recorded(write_js(tmp_path / name, steps, decoder_self=6), seed=1,
                                  save_dir=f"runs/{name}")
                    for name, steps in (("a", 10), ("b", 20)))  # fmt: skip
    output = tmp_path / "fig5.png"
    argv = [first, other, "-o", str(output), "--reference-layer", "1", "--layers", "2"]
    assert plot_js_refusal(argv, capsys) == (
        f"fairseq-san-plot-js: error: {first}/js.json (--save-dir runs/a) and {other}/js.json "
        "(--save-dir runs/b) are analyses of different trainings: plot the checkpoints of one "
        "training (or, one training moved to another --save-dir and resumed there: "
        "--one-training)"
    )
    assert not output.exists()


def test_plot_js_takes_a_training_moved_and_resumed_with_one_training(tmp_path, capsys):
    """A training moved to another folder and resumed there was refused as two trainings, with
    no way to plot it; --one-training takes its --save-dirs, not its seeds."""
    from fairseq_san.cli.plot_js import main

    first, moved = (with_recorded(write_js(tmp_path / name, steps, decoder_self=6), seed=1,
                                  save_dir=f"runs/{name}")
                    for name, steps in (("a", 10), ("b", 20)))  # fmt: skip
    output = tmp_path / "fig5.png"
    argv = [first, moved, "-o", str(output), "--reference-layer", "1", "--layers", "2"]
    main([*argv, "--one-training"])
    assert output.stat().st_size > 0 and "(2 checkpoints)" in capsys.readouterr().err
    output.unlink()
    with_recorded(moved, seed=2)
    assert plot_js_refusal([*argv, "--one-training"], capsys) == (
        f"fairseq-san-plot-js: error: {first}/js.json (seed 1) and {moved}/js.json (seed 2) are "
        "analyses of different trainings: plot the checkpoints of one training"
    )
    assert not output.exists()


def test_plot_js_takes_one_trainings_checkpoints_from_two_folders(tmp_path, capsys):
    """docs/results/de-en-figure5 plots snapshots kept while the run trained beside its
    checkpoint_last.pt, one training in two folders: it was refused as two trainings."""
    from fairseq_san.cli.plot_js import main

    checkpoints = ("run/snapshots/checkpoint_1_10.pt", "./run/snapshots/checkpoint_2_20.pt",
                   "run/iter0/checkpoints/checkpoint_last.pt")  # fmt: skip
    folders = [with_recorded(write_js(tmp_path / str(steps), steps, decoder_self=6), seed=1,
                             checkpoint=checkpoint)
               for steps, checkpoint in zip((10, 20, 30), checkpoints)]  # fmt: skip
    with_recorded(folders[0], save_dir="./run/iter0/checkpoints")  # as fairseq-train was told
    with_recorded(folders[1], save_dir="run/iter0/checkpoints")
    output = tmp_path / "fig5.png"
    main([*folders, "-o", str(output), "--reference-layer", "1", "--layers", "2"])
    assert output.stat().st_size > 0 and "(3 checkpoints)" in capsys.readouterr().err


def test_plot_js_warns_of_an_older_analysis_beside_one_that_records_its_policy(tmp_path, capsys):
    """An analysis recording no sharing policy (written before js.json recorded it) drawn in one
    curve with a shared model's, without a word: fairseq-san-policy's warning
    (``policy.unrecorded_note``) is plot-js' too, and the figure is drawn as before."""
    from fairseq_san.cli.plot_js import main

    older = write_js(tmp_path / "a", 10, decoder_self=6)
    shared = with_recorded(write_js(tmp_path / "b", 20, decoder_self=6),
                           policy={"decoder_self": [6]})  # fmt: skip
    output = tmp_path / "fig5.png"
    main([older, shared, "-o", str(output), "--reference-layer", "1", "--layers", "2"])
    assert output.stat().st_size > 0
    assert (
        f"fairseq-san-plot-js: warning: {older}/js.json records no policy (an analysis written by "
        f"an older version) but {shared}/js.json does" in capsys.readouterr().err
    )


def test_plot_js_refuses_the_reference_layer_among_the_layers(tmp_path, capsys):
    """"L4 vs L4" was drawn, a flat line at 0."""
    first = write_js(tmp_path / "a", 10, decoder_self=6, decoder_encdec=6, encoder_self=2)
    output = tmp_path / "fig5.png"
    argv = [first, "-o", str(output), "--reference-layer", "4", "--layers", "4", "5"]
    assert plot_js_refusal(argv, capsys) == (
        "fairseq-san-plot-js: error: --layers 4 is the --reference-layer: its JS with itself is "
        "0; give the other layers"
    )
    assert not output.exists()


@pytest.mark.parametrize("steps", [-5, "10", None, True, 2**63])
def test_plot_js_refuses_an_analysis_without_training_steps(tmp_path, capsys, steps):
    """-5 was drawn at step -5 (of a count that starts at 0); 2**63 and more failed in numpy
    (OverflowError)."""
    first = write_js(tmp_path / "a", steps, decoder_self=6, decoder_encdec=6, encoder_self=2)
    assert plot_js_refusal([first, "-o", str(tmp_path / "fig5.png")], capsys) == (
        f'fairseq-san-plot-js: error: "{first}/js.json" has no training steps ("num_updates": '
        f"{steps!r})"
    )


def test_plot_js_names_a_default_layer_a_smaller_model_lacks(tmp_path, capsys):
    """The defaults are the paper's six layers: a three-layer model's analyses were refused for
    "layer 4", which the user never gave."""
    first = write_js(tmp_path / "a", 10, decoder_self=3, decoder_encdec=3, encoder_self=2)
    assert plot_js_refusal([first, "-o", str(tmp_path / "fig5.png")], capsys) == (
        f"fairseq-san-plot-js: error: --reference-layer: layer 4 (the default) is out of range: "
        f"decoder_self in {first}/js.json has 3 layers (1..3); give --reference-layer and "
        "--layers among them"
    )


def test_plot_js_takes_analysis_folders_or_their_js_json(tmp_path, capsys):
    """As fairseq-san-policy does: a js.json given by its path was read as a folder
    ("js.json/js.json" not found); a missing one names the folder that would write it."""
    from fairseq_san.cli.plot_js import main

    first = write_js(tmp_path / "a", 10, decoder_self=6, decoder_encdec=6, encoder_self=2)
    later = write_js(tmp_path / "b", 20, decoder_self=6, decoder_encdec=6, encoder_self=2)
    output = tmp_path / "fig5.png"
    main([f"{first}/js.json", later, "-o", str(output), "--reference-layer", "1", "--layers", "2"])
    assert output.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert capsys.readouterr().err.splitlines()[-1] == f"wrote {output} (2 checkpoints)"
    main([first, "-o", str(output), "--reference-layer", "1", "--layers", "2"])
    assert capsys.readouterr().err.splitlines()[-1] == f"wrote {output} (1 checkpoint)"
    argv = [first, str(tmp_path / "c" / "js.json"), "-o", str(output)]
    assert plot_js_refusal(argv, capsys) == (
        f'fairseq-san-plot-js: error: "{tmp_path}/c/js.json" not found: give an analysis folder '
        f"or its js.json (fairseq-validate --task translation_san --san-analysis-dir "
        f"{tmp_path}/c writes them)"
    )


def test_plot_js_without_a_writable_cache_folder_is_one_line(tmp_path):
    """MPLCONFIGDIR, HOME and every temporary folder unwritable: matplotlib's import raised an
    OSError, a traceback from checking -o's extension; said in one line, exit status 2."""
    first = write_js(tmp_path / "a", 10, decoder_self=3, decoder_encdec=3, encoder_self=2)
    (tmp_path / "file").touch()
    code = ("import sys, tempfile; tempfile.tempdir = sys.argv.pop(1)  # none usable\n"
            "from fairseq_san.cli.plot_js import main; main()")  # fmt: skip
    argv = [str(tmp_path / "none"), first, "-o", str(tmp_path / "fig5.png")]
    env = {**cli_env(), "MPLCONFIGDIR": str(tmp_path / "file"), "HOME": str(tmp_path / "file")}
    result = subprocess.run([sys.executable, "-c", code, *argv], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.splitlines()[-1].startswith(
        "fairseq-san-plot-js: error: cannot draw figures: Matplotlib requires access to a "
        f"writable cache directory, but there was an issue with MPLCONFIGDIR ({tmp_path}/file)"
    )


@pytest.mark.slow
def test_plot_js_errors(runs, tmp_path):
    output = tmp_path / "fig5.png"
    bad_layer = run_cli(
        "fairseq-san-plot-js", str(runs["small"]), "-o", str(output), "--layers", "5", "7"
    )
    assert bad_layer.returncode == 2
    assert bad_layer.stderr.strip().splitlines()[-1] == (
        f"fairseq-san-plot-js: error: --layers: layer 7 is out of range: decoder_self in "
        f"{runs['small']}/js.json has 6 layers (1..6); give --reference-layer and --layers among "
        "them"
    )
    missing = run_cli("fairseq-san-plot-js", str(tmp_path / "nowhere"), "-o", str(output))
    assert missing.returncode == 2 and "js.json" in missing.stderr and "not found" in missing.stderr
    assert not output.exists()


# --- in process: the capture itself ----------------------------------------------------------


def padded_batch(model_dictionary):
    src_tokens, src_lengths = source_batch(model_dictionary, [5, 2, 4], seed=3)
    prev = target_prefixes(model_dictionary, 3, 6, seed=4)
    prev[1, 3:] = model_dictionary.pad()  # a shorter target, padded on the right
    return {"src_tokens": src_tokens, "src_lengths": src_lengths, "prev_output_tokens": prev}


def target_of(prev: torch.Tensor, dictionary) -> torch.Tensor:
    """The target that fairseq shifts into ``prev`` (right-padded, end of sentence moved first)."""
    target = prev.roll(-1, dims=1)
    target[torch.arange(len(prev)), prev.ne(dictionary.pad()).sum(1) - 1] = dictionary.eos()
    return target.masked_fill(prev.eq(dictionary.pad()), dictionary.pad())


def test_capture_masks_and_leaves_model_unchanged():
    from fairseq_san.analysis import AttentionCapture

    model, _ = build(["--san-decoder-encdec-policy", "3,3"])
    dictionary = model.decoder.dictionary
    net_input = padded_batch(dictionary)
    with torch.no_grad():
        expected = model(**net_input)[0]
        with AttentionCapture(model) as capture:
            got = model(**net_input)[0]
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)  # fused vs. unfused path
    for module in model.modules():
        assert not module._forward_pre_hooks and not module._forward_hooks
    src_pad = net_input["src_tokens"].eq(dictionary.pad())
    tgt_pad = net_input["prev_output_tokens"].eq(dictionary.pad())
    for kind, key_pad in (("decoder_self", tgt_pad), ("decoder_encdec", src_pad),
                          ("encoder_self", src_pad)):  # fmt: skip
        attn = capture.stacked(kind)  # (L, B, H, T, S)
        assert attn.shape[:3] == (6 if kind != "encoder_self" else 2, 3, 2)
        torch.testing.assert_close(attn.sum(-1), torch.ones(attn.shape[:-1]), atol=1e-5, rtol=0)
        assert attn.masked_select(key_pad[None, :, None, None, :]).abs().max() == 0
    assert capture.stacked("decoder_self").triu(diagonal=1).abs().max() == 0
    encdec = capture.stacked("decoder_encdec")
    torch.testing.assert_close(encdec[1], encdec[0], atol=0, rtol=0)  # block {1,2,3}
    torch.testing.assert_close(encdec[3], encdec[5], atol=0, rtol=0)  # block {4,5,6}


def test_average_attention_has_no_decoder_self_weights():
    from fairseq_san.analysis import AttentionCapture, attention_modules

    model, _ = build(["--decoder-self-attention-type", "aan"])
    assert attention_modules(model)["decoder_self"] is None
    with torch.no_grad(), AttentionCapture(model) as capture:
        model(**padded_batch(model.decoder.dictionary))
    assert capture.stacked("decoder_self") is None
    assert capture.stacked("decoder_encdec").shape[0] == 6


def analysed_batch(model, analysis) -> tuple:
    """``add_masked``'s arguments for ``padded_batch`` through ``model``, captured."""
    from fairseq_san.analysis import AttentionCapture
    from fairseq_san.tasks.translation_san import TranslationSANTask

    dictionary = model.decoder.dictionary
    net_input = padded_batch(dictionary)
    with torch.no_grad(), AttentionCapture(model) as capture:
        model(**net_input)
    target = target_of(net_input["prev_output_tokens"], dictionary)
    sample = {"id": torch.arange(3), "net_input": net_input, "target": target}
    rows = analysis.rows(sample)
    task = SimpleNamespace(src_dict=dictionary, tgt_dict=dictionary)  # what analysis_masks reads
    return capture, sample, rows, TranslationSANTask.analysis_masks(task, sample, rows, model)


def test_cross_self_attention_keeps_the_source_keys_of_a_saved_sentence():
    """With --cross-self-attention the decoder's self-attention attends over the source, then
    the target: saving a sentence's weights failed (an IndexError: the target's mask taken as the
    keys' mask)."""
    from fairseq_san.analysis import LayerAnalysis

    model, _ = build(["--cross-self-attention"])
    analysis = LayerAnalysis(max_sentences=None, save_sentences=3)
    analysis.add_masked(*analysed_batch(model, analysis))
    saved = analysis.saved["decoder_self"]
    assert saved[1].shape[-2:] == (3, 3 + 3)  # 3 target queries; 3 source and 3 target keys
    assert saved[0].shape[-2:] == (6, 6 + 6)  # (the source's EOS counted)
    assert np.allclose(saved[1].sum(-1), 1, atol=1e-5)  # no key of the padding left out


def hand_weights(model, src_tokens, prev) -> dict:
    """Each kind's (layers, heads, queries, keys) weights of one unpadded sentence, by hand:
    softmax(Q K^T / sqrt(d_k)) (Eq. 1) from each layer's own projections of its inputs."""
    modules = {
        kind: [getattr(layer, spec.module) for layer in getattr(model, spec.stack).layers]
        for kind, spec in KIND_TABLE.items()
    }
    inputs = {}

    def keep(name):
        def hook(module, args, kwargs):
            inputs[name] = kwargs

        return hook

    handles = [
        mha.register_forward_pre_hook(keep((kind, index)), with_kwargs=True)
        for kind, layers in modules.items()
        for index, mha in enumerate(layers)
    ]
    with torch.no_grad():
        model(src_tokens[None], torch.tensor([src_tokens.numel()]), prev[None])
    for handle in handles:
        handle.remove()
    weights = {}
    for kind, layers in modules.items():
        for index, mha in enumerate(layers):
            kwargs, heads, dim = inputs[kind, index], mha.num_heads, mha.head_dim
            query = mha.q_proj(kwargs["query"][:, 0]).view(-1, heads, dim).transpose(0, 1)
            key = mha.k_proj(kwargs["key"][:, 0]).view(-1, heads, dim).transpose(0, 1)
            logits = query @ key.transpose(1, 2) * dim**-0.5
            if kind == "decoder_self":  # causal
                future = torch.ones_like(logits[0], dtype=torch.bool).triu(1)
                logits = logits.masked_fill(future, float("-inf"))
            weights.setdefault(kind, []).append(logits.softmax(-1).double())
    return {kind: torch.stack(layers) for kind, layers in weights.items()}


def test_js_of_a_padded_batch_is_each_sentence_alone_by_hand():
    """The analysis of a batch (sources padded on the left, a target on the right) is the JS of
    weights computed by hand for each sentence alone, per head and query position, pooled over
    the sentences (docs/usage.md), for the three kinds of attention."""
    from fairseq_san.analysis import LayerAnalysis

    model, _ = build()
    analysis = LayerAnalysis(max_sentences=None, save_sentences=0)
    capture, sample, rows, masks = analysed_batch(model, analysis)
    analysis.add_masked(capture, sample, rows, masks)
    pad = model.decoder.dictionary.pad()
    sums, counts = {}, {}
    for src_tokens, prev in zip(*(sample["net_input"][name] for name in
                                  ("src_tokens", "prev_output_tokens"))):  # fmt: skip
        for kind, attn in hand_weights(model, src_tokens[src_tokens.ne(pad)],
                                       prev[prev.ne(pad)]).items():  # fmt: skip
            p, q = attn[:, None], attn[None, :]  # (L, L, H, T, S) pairs of layers
            m = (p + q) / 2
            kl = lambda a: torch.where(a > 0, a * (a / m).log(), torch.zeros_like(a)).sum(-1)
            sums[kind] = sums.get(kind, 0) + (kl(p) + kl(q)).div(2).sum((-1, -2))
            counts[kind] = counts.get(kind, 0) + attn.shape[1] * attn.shape[2]
    for kind in KINDS:
        expected = sums[kind] / counts[kind]
        assert expected.max() > 1e-3, kind  # layers that differ
        got = torch.tensor(analysis.js[kind].matrix(), dtype=torch.float64)
        torch.testing.assert_close(got, expected, atol=1e-6, rtol=0,
                                   msg=lambda text, kind=kind: f"{kind}: {text}")


def test_analysis_written_only_whole_with_js_json_last(tmp_path, monkeypatch):
    """Stopped while drawing the second kind's heatmap, the analysis leaves no js.json (which the
    loop takes as the analysis being done); written again, every file is there."""
    from fairseq_san import plots
    from fairseq_san.analysis import LayerAnalysis

    model, _ = build()
    analysis = LayerAnalysis(max_sentences=None, save_sentences=2)
    analysis.add_masked(*analysed_batch(model, analysis))
    draw = plots.js_heatmap

    def stopped_at_encdec(matrix, path, **kwargs):
        if "decoder_encdec" in path:
            raise KeyboardInterrupt
        draw(matrix, path, **kwargs)

    monkeypatch.setattr(plots, "js_heatmap", stopped_at_encdec)
    with pytest.raises(KeyboardInterrupt):
        analysis.write(str(tmp_path), {"subset": "valid"})
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(plots, "js_heatmap", draw)
    analysis.write(str(tmp_path), {"subset": "valid"})
    expected = {"js.json"} | {f"{stem}-{kind}.{ext}" for kind in KINDS
                              for stem, ext in (("js", "png"), ("attention", "npz"))}  # fmt: skip
    assert {path.name for path in tmp_path.iterdir()} == expected


def test_a_diverged_models_attention_is_one_usage_error_and_no_analysis(tmp_path):
    """NaN weights (a diverged model) were written into js.json as bare NaN, and the learn-to-
    share loop took the file as a finished analysis and failed on it at every rerun."""
    from fairseq_san.analysis import LayerAnalysis
    from fairseq_san.errors import UsageError

    model, _ = build()
    with torch.no_grad():
        model.decoder.layers[-1].encoder_attn.k_proj.weight.fill_(float("nan"))
    analysis = LayerAnalysis(max_sentences=None, save_sentences=2)
    with pytest.raises(UsageError) as refused:
        analysis.add_masked(*analysed_batch(model, analysis))
    assert str(refused.value).startswith(
        f"SAN analysis of {KIND_TABLE['decoder_encdec'].title}: the attention weights of layer 6 "
        "are no distribution over the keys at a real query position"
    )


def test_an_analysis_of_no_sentences_is_one_usage_error(tmp_path):
    """Sentences 0..N-1 (--san-analysis-max-sentences) all filtered out: fairseq-validate ran its
    batches, and the analysis names the likely cause in one line instead of writing nothing."""
    from fairseq_san.analysis import LayerAnalysis
    from fairseq_san.errors import UsageError

    analysis = LayerAnalysis(max_sentences=2, save_sentences=1)
    assert analysis.rows({"id": torch.tensor([5, 7])}).numel() == 0
    with pytest.raises(UsageError, match="no sentences were analysed .*--san-analysis-max-sen"):
        analysis.write(str(tmp_path), {"subset": "valid"})
    assert list(tmp_path.iterdir()) == []


def analysis_cfg(directory: Path, **options) -> SimpleNamespace:
    """A task config holding the analysis options, as fairseq-validate's flags set them."""
    defaults = {"san_analysis_dir": str(directory), "san_analysis_max_sentences": None,
                "san_analysis_save_sentences": 4, "san_analysis_log_interval": 100}  # fmt: skip
    return SimpleNamespace(**{**defaults, **options})


def test_a_sentence_limit_beyond_64_bits_is_refused_at_set_up(tmp_path):
    """--san-analysis-max-sentences 99999999999999999999999 passed the task's set-up and was an
    OverflowError traceback at the first batch (compared with the batch's 64-bit sentence ids)."""
    from fairseq_san.analysis import LayerAnalysis
    from fairseq_san.errors import UsageError
    from fairseq_san.tasks.attention_analysis import check_analysis_options

    largest = 2**63 - 1
    check_analysis_options(analysis_cfg(tmp_path / "js", san_analysis_max_sentences=largest))
    assert LayerAnalysis(largest, 4).rows({"id": torch.tensor([5, 7])}).tolist() == [0, 1]
    huge = 10**23
    with pytest.raises(UsageError) as refused:
        check_analysis_options(analysis_cfg(tmp_path / "js", san_analysis_max_sentences=huge))
    assert str(refused.value) == (
        f"--san-analysis-max-sentences {huge}: must be at most {largest} (sentence ids are 64-bit "
        "integers; leave it out to analyse every sentence)"
    )


@pytest.mark.parametrize("name", ["js.json", "attention-encoder_self.npz", "js-decoder_encdec.png"])
def test_a_folder_named_as_an_analysis_file_is_refused_at_set_up(tmp_path, name):
    """A folder DIR/js.json (or a heatmap's, a kind's weights', one a language model's analysis
    removes) was an IsADirectoryError traceback after the whole validation pass, the other
    files already moved in."""
    from fairseq_san.errors import UsageError
    from fairseq_san.tasks.attention_analysis import check_analysis_options

    directory = tmp_path / "js"
    (directory / name).mkdir(parents=True)
    with pytest.raises(UsageError) as refused:
        check_analysis_options(analysis_cfg(directory))
    assert str(refused.value) == (
        f"--san-analysis-dir {directory}: {name} there is a folder, and the analysis writes a "
        "file of that name; move it away or name another folder"
    )
    (directory / name).rmdir()
    (directory.parent / "elsewhere").mkdir()
    (directory / name).symlink_to(directory.parent / "elsewhere")  # replaced, as a file is
    check_analysis_options(analysis_cfg(directory))
    (directory / name).unlink()
    (directory / name).write_text("an earlier analysis'")  # replaced at the end: no refusal
    check_analysis_options(analysis_cfg(directory))


def test_a_language_model_has_decoder_self_attention_only(tmp_path):
    """transformer_lm_san (no encoder): the JS of its decoder self-attention, the other kinds
    null; a SAN block's layers have the same S, so their JS is 0."""
    from fairseq_san.analysis import AttentionCapture, LayerAnalysis
    from helpers import build_lm, target_prefixes

    model, _ = build_lm(["--san-decoder-self-policy", "2,4"])
    dictionary = model.decoder.dictionary
    tokens = target_prefixes(dictionary, 3, 5)
    tokens[0, -2:] = dictionary.pad()
    analysis = LayerAnalysis(max_sentences=None, save_sentences=1)
    with torch.no_grad(), AttentionCapture(model) as capture:
        model(tokens)
    sample = {"id": torch.arange(3), "net_input": {"src_tokens": tokens}}
    mask = tokens.ne(dictionary.pad())
    analysis.add_masked(capture, sample, analysis.rows(sample), {"decoder_self": (mask, mask)})
    stale = [tmp_path / name for name in ("js-decoder_encdec.png", "attention-encoder_self.npz")]
    for path in stale:  # a translation model's analysis in the folder before
        path.write_bytes(b"another model's")
    analysis.write(str(tmp_path), {"subset": "valid"})
    js = json.loads((tmp_path / "js.json").read_text())
    assert js["decoder_encdec"] is None and js["encoder_self"] is None
    assert not any(path.exists() for path in stale)  # beside a js.json that says there is none
    assert js["decoder_self"][0][1] == pytest.approx(0, abs=1e-6)
    assert js["decoder_self"][0][2] > 0.001
    assert (tmp_path / "js-decoder_self.png").exists()


def test_plot_js_names_a_policy_given_for_an_analysis(tmp_path, capsys):
    """A policy.json given where a js.json goes was said to have "no training steps"."""
    policy = tmp_path / "policy.json"
    policy.write_text('{"decoder_self": [1, 5], "decoder_encdec": [3, 3], "encoder_self": null}')
    assert plot_js_refusal([str(policy), "-o", str(tmp_path / "fig5.png")], capsys) == (
        f'fairseq-san-plot-js: error: "{policy}" holds block sizes (a sharing policy), not JS '
        "matrices: give the js.json that fairseq-validate --task translation_san "
        "--san-analysis-dir writes"
    )


def test_plot_js_refuses_pgf_without_latex(tmp_path, capsys, monkeypatch):
    """-o fig5.pgf ended in matplotlib's RuntimeError traceback ('xelatex' not found)."""
    import shutil

    monkeypatch.setattr(shutil, "which", lambda name: None)
    first = write_js(tmp_path / "a", 10, decoder_self=6, decoder_encdec=6, encoder_self=2)
    output = tmp_path / "fig5.pgf"
    assert plot_js_refusal([first, "-o", str(output)], capsys) == (
        f"fairseq-san-plot-js: error: -o {output}: a .pgf figure needs xelatex, which is not "
        "installed: write a .pdf or .svg"
    )
    assert not output.exists()


def test_plot_js_notes_values_above_ln2(tmp_path, capsys):
    """JS in bits (up to 1) was drawn beside JS in nats without a word."""
    from fairseq_san.cli.plot_js import main

    first = write_js(tmp_path / "a", 10, decoder_self=6, decoder_encdec=6, encoder_self=2)
    bits = write_js(tmp_path / "b", 20, decoder_self=6, decoder_encdec=6, encoder_self=2)
    analysis = json.loads(Path(bits, "js.json").read_text())
    analysis["decoder_self"][3][4] = analysis["decoder_self"][4][3] = 0.9
    Path(bits, "js.json").write_text(json.dumps(analysis))
    main([first, bits, "-o", str(tmp_path / "fig5.png")])
    note = f"note: {bits}/js.json: decoder_self holds JS values above ln 2"
    assert note in capsys.readouterr().err


def test_heatmap_scale_is_ln2_with_a_colour_bar_and_whole_title(monkeypatch, tmp_path):
    """A two-layer model's JS of 0.02 was drawn white (the matrix's own largest value), as
    different as layers can be, with no scale shown; its title lost both ends."""
    from fairseq_san import plots

    drawn = drawn_figures(monkeypatch)
    title = "encoder-decoder attention: JS divergence (nats), 30 sentences"
    plots.js_heatmap([[0.0, 0.02], [0.02, 0.0]], str(tmp_path / "js.png"), title=title)
    (fig,) = drawn
    heatmap, bar = fig.axes
    assert heatmap.get_images()[0].get_clim() == (0.0, LN2)
    assert bar.get_ylabel() == "JS divergence (nats)"
    assert bar.get_yticks()[-1] == pytest.approx(LN2)  # the scale's white end, not 0.6
    assert bar.get_yticklabels()[-1].get_text() == "ln 2 = 0.693"
    assert heatmap.get_title().replace("\n", " ") == title
    renderer = fig.canvas.get_renderer()
    box = heatmap.title.get_window_extent(renderer)
    assert 0 <= box.x0 and box.x1 <= fig.bbox.width


@pytest.mark.parametrize("flags, title", [
    ([], "JS divergence of decoder layers 2, 3 from layer 1 against training steps (valid, 30 "
         "sentences)"),
    (["--layers", "3", "--title", "Multi30k De-En"], "Multi30k De-En"),
])  # fmt: skip
def test_plot_js_titles_the_figure_with_its_layers_and_data(tmp_path, monkeypatch, flags, title):
    """Figure 5 said neither which layers nor which sentences it drew, nor could a user say."""
    from fairseq_san.cli.plot_js import main

    drawn = drawn_figures(monkeypatch)
    first = write_js(tmp_path / "a", 3, decoder_self=3, decoder_encdec=3, encoder_self=2)
    main([first, "-o", str(tmp_path / "fig5.png"), "--reference-layer", "1", "--layers", "2",
          "3", *flags])  # fmt: skip
    (fig,) = drawn
    assert fig.get_suptitle().replace("\n", " ") == title


def test_plot_js_ticks_whole_training_steps(tmp_path, monkeypatch):
    """One checkpoint at step 3 was ticked 2.85, 2.90, ..., 3.15 training steps."""
    from fairseq_san.cli.plot_js import main

    drawn = drawn_figures(monkeypatch)
    first = write_js(tmp_path / "a", 3, decoder_self=2, decoder_encdec=2, encoder_self=2)
    main([first, "-o", str(tmp_path / "fig5.png"), "--reference-layer", "1", "--layers", "2"])
    (fig,) = drawn
    assert all(float(tick).is_integer() for ax in fig.axes for tick in ax.get_xticks())


@pytest.mark.parametrize("layers", [6, 12, 16, 50])
def test_plot_js_legend_of_a_deep_decoder_stays_in_its_panel(tmp_path, monkeypatch, layers):
    """A 12-layer decoder's legend (11 layers against layer 1) ran past the bottom of its panel
    over the x axis' label, a 16-layer one's off the figure: the layers it lost were not said. A
    50-layer one's 41st line was drawn as its first (eight markers against ten colours)."""
    from fairseq_san.cli.plot_js import main

    drawn = drawn_figures(monkeypatch)
    first = write_js(tmp_path / "a", 3, decoder_self=layers, decoder_encdec=layers,
                     encoder_self=2)  # fmt: skip
    others = [str(layer) for layer in range(2, layers + 1)]
    main([first, "-o", str(tmp_path / "fig5.png"), "--reference-layer", "1", "--layers", *others])
    (fig,) = drawn
    fig.canvas.draw()
    for ax in fig.axes:
        legend, panel = ax.get_legend().get_window_extent(), ax.get_window_extent()
        assert panel.y0 <= legend.y0 and legend.y1 <= panel.y1, (legend, panel)
        assert panel.x0 <= legend.x0 and legend.x1 <= panel.x1, (legend, panel)
        assert len(ax.get_legend().get_texts()) == layers - 1
        assert ax.xaxis.label.get_window_extent().y0 >= 0  # on the figure
        assert len({(line.get_color(), line.get_marker()) for line in ax.lines}) == layers - 1
