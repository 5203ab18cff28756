"""The Python API (fairseq's hub interface) and fairseq-interactive.

A tiny model is trained with ``--task translation_san`` on sentencepiece pieces of the synthetic
corpus, in the layout the README's example uses (``checkpoints/``, ``data-bin/multi30k.en-de/spm.model``).
The README's Python example runs verbatim; it must translate as fairseq-interactive does, with
the decode-time policy it passes as a keyword.
"""

import ast
import functools
import io
import json
import logging
import math
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest

from helpers import REPO, cli_env, lm_train_argv, run_cli, train_argv, write_corpus

POLICY = '{"decoder_self": [6], "decoder_encdec": [6]}'
DATA = "data-bin/multi30k.en-de"  # where examples/multi30k/prepare.sh en de writes


def python_example(doc: str = "README.md") -> str:
    """The Python block of ``doc`` (a page of the repository) that calls from_pretrained."""
    blocks = re.findall(r"```python\n(.*?)```", (REPO / doc).read_text(), re.S)
    found = [block for block in blocks if "from_pretrained" in block]
    assert len(found) == 1, f"{doc} has one Python example of from_pretrained"
    return found[0]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """checkpoints/checkpoint_best.pt and DATA with spm.model, as the README's training and
    examples/multi30k/prepare.sh leave them and the README's example reads them."""
    root = tmp_path_factory.mktemp("hub")
    raw = write_corpus(root / "raw")
    data = root / DATA
    data.mkdir(parents=True)
    run = [
        ("fairseq-san-spm", "train", str(raw / "train.src"), str(raw / "train.tgt"),
         "--model-prefix", str(data / "spm"), "--vocab-size", "30"),
    ]  # fmt: skip
    for split in ("train", "valid", "test"):
        for side in ("src", "tgt"):
            run.append(("fairseq-san-spm", "encode", "--model", str(data / "spm.model"),
                        str(raw / f"{split}.{side}"), str(root / f"{split}.{side}")))  # fmt: skip
    run.append(
        ("fairseq-preprocess", "--source-lang", "src", "--target-lang", "tgt",
         "--trainpref", str(root / "train"), "--validpref", str(root / "valid"),
         "--testpref", str(root / "test"), "--destdir", str(data),
         "--joined-dictionary", "--workers", "1")
    )  # fmt: skip
    argv = train_argv(data, root / "checkpoints", 40, ["--task", "translation_san"])
    run.append(("fairseq-train", *[a for a in argv if a != "--disable-validation"]))
    for command, *args in run:
        result = run_cli(command, *args)
        assert result.returncode == 0, f"{command}:\n{result.stderr[-3000:]}"
    assert (root / "checkpoints" / "checkpoint_best.pt").is_file()
    return root


def interactive(workdir: Path, lines, *extra: str) -> dict:
    """{sentence index: (detokenized hypothesis, score in nats)} from fairseq-interactive."""
    result = run_cli(
        "fairseq-interactive", DATA,
        "--user-dir", str(REPO / "fairseq_san"), "--path", "checkpoints/checkpoint_best.pt",
        "--bpe", "sentencepiece", "--sentencepiece-model", f"{DATA}/spm.model", "--beam", "4",
        *extra, input="".join(line + "\n" for line in lines), cwd=workdir,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    found = re.findall(r"^D-(\d+)\t(\S+)\t(.*)$", result.stdout, re.M)
    return {int(i): (text, float(score) * math.log(2)) for i, score, text in found}  # from bits


@pytest.mark.slow
def test_readme_python_example_translates_as_fairseq_interactive(workdir):
    example = python_example()
    assert f"san_policy='{POLICY}'" in example  # the decode-time policy, passed as a keyword
    sentences = ast.literal_eval(re.search(r"\.translate\((\[.*?\])", example).group(1))
    check = (
        "\nimport json\n"
        "scores = [model.generate([model.encode(s)], beam=4)[0][0]['score'].item()"
        f" for s in {sentences!r}]\n"
        "decoder = model.models[0].decoder\n"
        "print(json.dumps({'scores': scores, 'attention': [type(layer.self_attn).__name__ "
        "for layer in decoder.layers]}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", example + check], cwd=workdir, env=cli_env(),
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    translations_line, facts_line = result.stdout.strip().splitlines()[-2:]
    translations, facts = ast.literal_eval(translations_line), json.loads(facts_line)
    assert facts["attention"] == ["BlockLeaderAttention"] + ["SharedWeightsAttention"] * 5

    expected = interactive(
        workdir, sentences, "--model-overrides", repr({"san_policy": POLICY})
    )
    assert translations == [expected[i][0] for i in range(len(sentences))]
    assert facts["scores"] == pytest.approx([expected[i][1] for i in range(len(sentences))],
                                            abs=1e-4)  # fmt: skip


@pytest.mark.slow
def test_interactive_decodes_with_the_checkpoints_policy_by_default(workdir):
    """Without an override the checkpoint's own policy (none) decodes: different scores."""
    sentences = ["tok1 tok2 tok3", "tok4 tok5 tok6 tok7"]
    trained = interactive(workdir, sentences)
    shared = interactive(workdir, sentences, "--model-overrides", repr({"san_policy": POLICY}))
    assert sorted(trained) == sorted(shared) == [0, 1]  # one translation per input line
    assert [trained[i][1] for i in (0, 1)] != pytest.approx([shared[i][1] for i in (0, 1)])


def load(workdir: Path, **keywords):
    """The trained model through from_pretrained, as the README loads it."""
    from fairseq_san.models.transformer_san import TransformerSANModel

    return TransformerSANModel.from_pretrained(
        str(workdir / "checkpoints"), checkpoint_file="checkpoint_best.pt",
        data_name_or_path=str(workdir / DATA), bpe="sentencepiece",
        sentencepiece_model=str(workdir / DATA / "spm.model"), **keywords,
    )  # fmt: skip


def test_training_a_hub_model_is_refused_in_one_line_and_dropout_while_decoding_runs(workdir):
    """hub.train() raised fairseq's "cannot train after make_generation_fast" from inside torch;
    the message's way to dropout while decoding keeps it on (scores differ from call to call)."""
    from fairseq_san.errors import UsageError

    hub = load(workdir)
    with pytest.raises(UsageError, match=r"^train\(\) on a hub model: .*--finetune-from-model"):
        hub.train()
    assert hub.eval() is hub and not hub.training
    said = re.search(r"from_pretrained\(\.\.\., generation_args=(\{.*\})\)$", str(
        pytest.raises(UsageError, hub.train).value))
    sampled = load(workdir, generation_args=ast.literal_eval(said.group(1)))
    tokens = sampled.encode("a b c")
    scores = {sampled.generate([tokens], beam=2)[0][0]["score"].item() for _ in range(4)}
    assert len(scores) > 1


@pytest.mark.parametrize("cuda_build", [None, "12.4"])
def test_cuda_without_a_cuda_device_is_one_line(san_checkpoint, binarized_corpus, monkeypatch,
                                                cuda_build):
    """hub.cuda() on a CPU-only torch raised torch's "Torch not compiled with CUDA enabled" from
    inside torch; now one line, naming the build, and the hub still decodes on the CPU."""
    import torch

    from fairseq_san.errors import UsageError

    hub = from_pretrained(san_checkpoint.parent, san_checkpoint.name, binarized_corpus)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", cuda_build)
    why = "is a CPU-only build" if cuda_build is None else "sees no CUDA device"
    said = rf"^cuda\(\) on a hub model: this torch \(\S+\) {why}; decode on the CPU"
    with pytest.raises(UsageError, match=said):
        hub.cuda()
    for args, kwargs, call in ((("cuda",), {}, "to('cuda')"),
                               ((), {"device": "cuda:0"}, "to('cuda:0')")):  # fmt: skip
        with pytest.raises(UsageError) as refused:  # torch's AssertionError from inside it
            hub.to(*args, **kwargs)
        assert str(refused.value).startswith(f"{call} on a hub model: this torch (")
        assert f"{why}; decode on the CPU (leave .{call} out)" in str(refused.value)
    with pytest.raises(UsageError, match=r"^to\(\) on a hub model: Expected one of cpu, .*: tpu$"):
        hub.to("tpu")  # torch's RuntimeError
    assert hub.to("cpu") is hub
    assert hub.device.type == "cpu" and hub.translate("tok1 tok2", beam=2)


def test_a_bpe_model_that_is_not_there_or_read_by_no_bpe_is_one_line(workdir, tmp_path):
    """A missing sentencepiece model or a folder: fairseq's OSError and sentencepiece's
    RuntimeError tracebacks; the model alone, without bpe='sentencepiece': decoded with no bpe,
    without a word; archive_map: a TypeError ("got multiple values")."""
    from fairseq_san.errors import UsageError
    from fairseq_san.models.transformer_san import TransformerSANModel

    def refusal(**keywords) -> str:
        with pytest.raises(UsageError) as refused:
            TransformerSANModel.from_pretrained(
                str(workdir / "checkpoints"), checkpoint_file="checkpoint_best.pt",
                data_name_or_path=str(workdir / DATA), **keywords,
            )  # fmt: skip
        return str(refused.value)

    missing = tmp_path / "none.model"
    assert refusal(bpe="sentencepiece", sentencepiece_model=str(missing)) == (
        f"the hub's bpe or tokenizer: file {missing} not found"
    )
    assert refusal(bpe="sentencepiece", sentencepiece_model=str(tmp_path)).startswith(
        f"the hub's bpe or tokenizer: FAILED_PRECONDITION: \"{tmp_path}\": Is a directory"
    )
    spm = str(workdir / DATA / "spm.model")
    assert refusal(sentencepiece_model=spm) == (
        f"from_pretrained(sentencepiece_model={spm!r}) would be ignored: the model is loaded "
        "without a bpe; pass the bpe it is for beside it (bpe='sentencepiece')"
    )
    assert refusal(archive_map={}) == (
        "from_pretrained(archive_map=...): the hub loads a local model folder "
        "(model_name_or_path) only: leave archive_map out"
    )


def test_a_bpe_without_its_model_is_one_line(workdir):
    """``--bpe sentencepiece`` without ``--sentencepiece-model`` (and the hub's
    ``bpe='sentencepiece'`` alone): omegaconf's MissingMandatoryValue, a traceback from the
    bpe's set-up."""
    from fairseq_san.errors import UsageError
    from fairseq_san.models.transformer_san import TransformerSANModel

    with pytest.raises(UsageError) as refused:
        TransformerSANModel.from_pretrained(
            str(workdir / "checkpoints"), checkpoint_file="checkpoint_best.pt",
            data_name_or_path=str(workdir / DATA), bpe="sentencepiece",
        )  # fmt: skip
    assert str(refused.value) == (
        "bpe='sentencepiece' needs sentencepiece_model: give from_pretrained(..., "
        "sentencepiece_model=...)"
    )
    result = run_cli(
        "fairseq-interactive", DATA, "--user-dir", str(REPO / "fairseq_san"),
        "--path", "checkpoints/checkpoint_best.pt", "--bpe", "sentencepiece",
        input="tok1 tok2\n", cwd=workdir,
    )  # fmt: skip
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stderr.splitlines()[-1] == (
        "fairseq-san: error: --bpe sentencepiece needs --sentencepiece-model"
    )


@pytest.mark.slow
def test_files_the_checkpoint_names_for_the_hub_are_not_read(workdir):
    """fairseq's hub read the bpe model and the --replace-unk dictionary that the checkpoint's
    configuration names: a pipe hung from_pretrained, any file was parsed, a URL fetched."""
    import torch

    from fairseq_san.errors import UsageError
    from fairseq_san.models.transformer_san import TransformerSANModel

    pipe = workdir / "pipe"
    if not pipe.exists():
        os.mkfifo(pipe)
    state = torch.load(workdir / "checkpoints" / "checkpoint_best.pt", weights_only=True)
    state["cfg"]["bpe"] = {"_name": "sentencepiece", "sentencepiece_model": str(pipe),
                           "sentencepiece_enable_sampling": False, "sentencepiece_alpha": None}
    state["cfg"]["generation"]["replace_unk"] = str(pipe)
    stored = workdir / "stored"
    stored.mkdir(exist_ok=True)
    torch.save(state, stored / "checkpoint.pt")
    load = functools.partial(TransformerSANModel.from_pretrained, str(stored), "checkpoint.pt",
                             str(workdir / DATA))  # fmt: skip
    with pytest.raises(UsageError) as refused:
        load()
    assert str(refused.value) == (
        f"the checkpoint names sentencepiece_model={str(pipe)!r} for its bpe 'sentencepiece', a "
        "file outside the model folder: the hub reads only the files you name and those fairseq "
        "finds in the model folder (sentencepiece.bpe.model, code, bpecodes, merges.txt, "
        "vocab.json): give from_pretrained(..., sentencepiece_model='PATH')"
    )
    spm = str(workdir / DATA / "spm.model")
    model = load(sentencepiece_model=spm)  # replace_unk: not read
    assert model.cfg.generation.replace_unk is None and model.translate("tok1 tok2")
    named = load(bpe={"_name": "sentencepiece", "sentencepiece_model": spm})  # fairseq's group form
    assert named.translate("tok1 tok2") == model.translate("tok1 tok2")


def test_a_pipe_in_a_received_model_or_its_data_is_refused(san_checkpoint, binarized_corpus,
                                                          tmp_path):  # fmt: skip
    """A model folder's sentencepiece.bpe.model or a data folder's dictionary that is a pipe (tar
    recreates one) hung from_pretrained, reading it."""
    from fairseq_san.errors import UsageError

    model = tmp_path / "model"
    model.mkdir()
    shutil.copy(san_checkpoint, model / "checkpoint.pt")
    data = tmp_path / "data"
    shutil.copytree(binarized_corpus, data)
    for pipe in (model / "sentencepiece.bpe.model", data / "dict.tgt.txt"):
        pipe.unlink(missing_ok=True)
        os.mkfifo(pipe)
        with pytest.raises(UsageError) as refused:
            from_pretrained(model, "checkpoint.pt", data)
        assert str(refused.value) == (
            f"{pipe} is no regular file (a pipe or a device), and from_pretrained would read it: "
            "give the model's folder with the file itself"
        )
        pipe.unlink()


@pytest.mark.slow
def test_hub_keywords_are_checked_whatever_the_task(workdir):
    """fairseq's translation task (a transformer_san model trained with fairseq-train's default
    task) decoded a misspelt keyword at the default beam and san_decoding='static' with
    fairseq's generator; a model's option given to translate() was ignored by every task."""
    from fairseq.tasks.translation import TranslationTask

    from fairseq_san.errors import UsageError

    fairseqs = load(workdir, task={"_name": "translation"})
    assert type(fairseqs.task) is TranslationTask
    assert len(fairseqs.translate(["tok1 tok2 tok3"], beam=2)) == 1
    with pytest.raises(UsageError, match="^unknown generation option 'bema' .*did you mean 'beam'"):
        fairseqs.translate(["tok1 tok2 tok3"], bema=1)
    with pytest.raises(UsageError) as refused:
        fairseqs.translate(["tok1 tok2 tok3"], san_decoding="static")
    assert str(refused.value) == (
        "san_decoding='static' is an option of the task translation_san, and this model's task "
        "is translation, whose generator would ignore it: load it with "
        "from_pretrained(..., task={'_name': 'translation_san'})"
    )
    with pytest.raises(UsageError, match="^san_policy is an option of the model, which"):
        load(workdir).translate(["tok1 tok2 tok3"], san_policy=POLICY)
    with pytest.raises(UsageError) as refused:  # fairseq's generator decoded it
        load(workdir).translate(["tok1 tok2 tok3"], san_decoding="statc")
    assert str(refused.value) == (
        "san_decoding='statc' is not valid; valid values: fairseq, no-cache, fast, static; did "
        "you mean 'static'?"
    )


@pytest.fixture(scope="module")
def fairseq_task_checkpoints(binarized_corpus, tmp_path_factory) -> dict:
    """Checkpoints of fairseq's own --task translation (fairseq-train's default), 1 update each:
    {arch: path} of a transformer_san and of fairseq's transformer."""
    root = tmp_path_factory.mktemp("fairseq-task")
    checkpoints = {}
    for arch in ("transformer_san", "transformer"):
        argv = train_argv(binarized_corpus, root / arch, 1)
        argv[argv.index("--arch") + 1] = arch
        result = run_cli("fairseq-train", *argv)
        assert result.returncode == 0, result.stderr[-3000:]
        checkpoints[arch] = root / arch / "checkpoint_last.pt"
    return checkpoints


PRECISIONS = "fp32, bf16, bf16-fp32-logits, bf16-full, int8"


@pytest.mark.parametrize(
    "keywords, message",
    [
        (dict(san_decoding="statc"), "san_decoding='statc' is not valid; valid values: fairseq, "
         "no-cache, fast, static; did you mean 'static'?"),
        (dict(san_decoder_precision="bf61"), "san_decoder_precision='bf61' is not valid; valid "
         f"values: {PRECISIONS}; did you mean 'bf16'?"),
        (dict(san_decoding="static", san_decoder_precision="bf61"), "san_decoder_precision="
         f"'bf61' is not valid; valid values: {PRECISIONS}; did you mean 'bf16'?"),
        (dict(san_decoding="static", san_decoder_execution="grph"), "san_decoder_execution="
         "'grph' is not valid; valid values: eager, fixed, graph, compile-graph; did you mean "
         "'graph'?"),
        (dict(san_decoder_execution="cuda"), "san_decoder_execution='cuda' is not valid; valid "
         "values: eager, fixed, graph, compile-graph"),
    ],
    ids=["decoding", "precision", "static-precision", "static-execution", "execution"],
)  # fmt: skip
def test_a_decoder_keywords_bad_value_under_fairseqs_task_is_said_as_a_keyword(
    fairseq_task_checkpoints, binarized_corpus, keywords, message
):
    """Under fairseq's --task translation only the model checked them, and advised the command
    line ("pass one of ... as --san-decoding (with --task translation_san)") to a hub user."""
    from fairseq_san.errors import UsageError

    checkpoint = fairseq_task_checkpoints["transformer_san"]
    with pytest.raises(UsageError) as refused:
        from_pretrained(checkpoint.parent, checkpoint.name, binarized_corpus, **keywords)
    assert str(refused.value) == message


def test_a_decoder_keyword_for_fairseqs_own_model_is_said_as_the_hub_takes_it(
    fairseq_task_checkpoints, binarized_corpus
):
    """fairseq's transformer reads no plugin option: the hub advised the command line's flag
    (beside task={'_name': 'translation_san'} too); the task it advises now decodes. No-cache,
    which only the plugin's models apply, decoded with fairseq's cache under the plugin's task
    (its log said no-cache); fairseq's decoding decodes it as fairseq's task does. The
    deprecated san_decoder is advised as san_decoding; a model's option (san_policy) is no
    decoder's, and is said to need the plugin's model."""
    from fairseq_san.errors import UsageError

    checkpoint = fairseq_task_checkpoints["transformer"]
    load = functools.partial(from_pretrained, checkpoint.parent, checkpoint.name,
                             binarized_corpus)  # fmt: skip
    said = ("this checkpoint's model is none of the plugin's and reads no decoder option: give "
            "it to the task, task={'_name': 'translation_san', 'san_decoding': 'static'")
    for keywords in (dict(san_decoding="static"),
                     dict(san_decoding="static", task={"_name": "translation_san"})):  # fmt: skip
        with pytest.raises(UsageError) as refused:
            load(**keywords)
        assert str(refused.value) == f"from_pretrained(san_decoding='static'): {said}}}"
    with pytest.raises(UsageError) as refused:
        load(san_decoder_precision="bf16")
    assert str(refused.value) == (
        f"from_pretrained(san_decoder_precision='bf16'): {said}, 'san_decoder_precision': 'bf16'}}"
    )
    task = {"_name": "translation_san", "san_decoding": "static", "san_decoder_precision": "bf16"}
    assert load(task=task).translate("tok1 tok2", beam=1, max_len_b=3)
    with pytest.raises(UsageError) as refused:  # the deprecated keyword: the task's own
        load(san_decoder="static")
    assert str(refused.value) == f"from_pretrained(san_decoder='static'): {said}}}"
    for decoding in ("no-cache", "fast"):
        with pytest.raises(UsageError) as refused:
            load(san_decoding=decoding)
        assert str(refused.value) == (
            f"from_pretrained(san_decoding='{decoding}'): this checkpoint's model is none of the "
            "plugin's models, which alone apply it: decode with 'fairseq' or 'static'"
        )
    with pytest.raises(UsageError) as refused:  # a model's option: no task reads it
        load(san_policy=POLICY)
    assert str(refused.value).endswith(
        "attention sharing needs a model trained as transformer_san or transformer_lm_san"
    )
    hub = load(task={"_name": "translation_san"})
    fairseqs = load().translate("tok1 tok2", beam=1, max_len_b=3)  # fairseq's own task
    assert hub.translate("tok1 tok2", beam=1, max_len_b=3, san_decoding="fairseq") == fairseqs
    with pytest.raises(UsageError) as refused:
        hub.translate("tok1 tok2", san_decoding="no-cache")
    assert str(refused.value) == (
        "san_decoding='no-cache': the model (TransformerModel) is none of the plugin's models, "
        "which alone apply it: decode with san_decoding='fairseq' or san_decoding='static'"
    )


@pytest.mark.parametrize(
    "keywords, message",
    [
        (dict(task="translation"), "task 'translation' (from --model-overrides or a keyword "
         "argument): fairseq takes this checkpoint's task as a dict of its options, and would "
         "ignore a name; switch it with {'task': {'_name': 'translation'}}"),
        (dict(task="translation_san"), None),  # the checkpoint's own task: fairseq's no-op
        (dict(model="transformer"), "model 'transformer' (from --model-overrides or a keyword "
         "argument): fairseq builds this checkpoint's model as it was trained (transformer_san), "
         "and would ignore it; leave model out of the overrides"),
        (dict(tokenizer="mosse"), "tokenizer 'mosse' (from --model-overrides or a keyword "
         "argument) is not one of fairseq's tokenizer components: did you mean 'moses'?"),
    ],
)  # fmt: skip
@pytest.mark.slow
def test_a_component_or_group_that_fairseq_would_ignore_or_fail_on_is_refused(
    workdir, keywords, message
):
    """task='translation' left the task as trained; a name no component has was a KeyError."""
    from fairseq_san.errors import UsageError

    if message is None:
        assert load(workdir, **keywords).translate(["tok1 tok2 tok3"])
        return
    with pytest.raises(UsageError) as refused:
        load(workdir, **keywords)
    assert str(refused.value) == message


def test_a_user_dir_that_is_not_there_is_named(tmp_path):
    """fairseq's import_user_module raised a bare FileNotFoundError naming only the path."""
    from fairseq_san.errors import UsageError

    with pytest.raises(UsageError) as refused:
        from_pretrained(tmp_path, "model.pt", tmp_path, user_dir=str(tmp_path / "nope"))
    assert str(refused.value) == (
        f"from_pretrained(user_dir='{tmp_path}/nope'): no such folder (a --user-dir plugin's "
        "package folder)"
    )


@pytest.mark.parametrize("missing", ["model_name_or_path", "data_name_or_path"])
def test_a_folder_that_is_not_there_is_named(tmp_path, missing):
    """fairseq's load_archive_file returned None for it, and from_pretrained failed later with a
    TypeError deep inside fairseq (hub_utils, utils.split_paths)."""
    from fairseq_san.errors import UsageError
    from fairseq_san.models.transformer_san import TransformerSANModel

    paths = {"model_name_or_path": str(tmp_path), "data_name_or_path": str(tmp_path)}
    paths[missing] = str(tmp_path / "nowhere")
    with pytest.raises(UsageError) as refused:
        TransformerSANModel.from_pretrained(checkpoint_file="checkpoint_best.pt", **paths)
    assert str(refused.value) == f"from_pretrained({missing}={paths[missing]!r}): no such file or folder"


def test_sharded_data_is_refused_as_such(tmp_path):
    """fairseq-train's DATA1:DATA2, its folders there: "no such file or folder" misled (fairseq's
    own hub failed with a TypeError in utils.split_paths)."""
    from fairseq_san.errors import UsageError
    from fairseq_san.models.transformer_san import TransformerSANModel

    for shard in ("d1", "d2"):
        (tmp_path / shard).mkdir()
    data = f"{tmp_path}/d1:{tmp_path}/d2"
    with pytest.raises(UsageError) as refused:
        TransformerSANModel.from_pretrained(str(tmp_path), "checkpoint_best.pt", data)
    assert str(refused.value) == (
        f"from_pretrained(data_name_or_path={data!r}): sharded data (DATA1:DATA2...), which the "
        "hub does not read: pass one folder, the first, whose dictionaries fairseq-train read"
    )


def write_archive(path: Path, *members: str) -> Path:
    """A .tar.gz holding one byte under each name of ``members`` (``model/../../x`` too)."""
    with tarfile.open(path, "w:gz") as archive:
        for name in members:
            info = tarfile.TarInfo(name)
            info.size = 1
            archive.addfile(info, io.BytesIO(b"x"))
    return path


def from_pretrained(*args, **keywords):
    from fairseq_san.models.transformer_san import TransformerSANModel

    return TransformerSANModel.from_pretrained(*args, **keywords)


@pytest.mark.parametrize("keyword", ["model_name_or_path", "data_name_or_path"])
def test_an_archive_is_refused_untouched(tmp_path, monkeypatch, keyword):
    """fairseq unpacked it with tarfile.extractall, unfiltered (a member ``model/../../x`` was
    written outside its temporary folder: code, as a .pth file in site-packages), then deleted
    it and put the folder in its place."""
    from fairseq_san.errors import UsageError

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # where fairseq unpacked
    (tmp_path / "tmp").mkdir()
    archive = write_archive(
        tmp_path / "model.tar.gz", "model/checkpoint_best.pt", "model/../../ESCAPED"
    )
    before = archive.read_bytes()
    paths = {"model_name_or_path": str(tmp_path), "data_name_or_path": str(tmp_path)}
    paths[keyword] = str(archive)
    with pytest.raises(UsageError) as refused:
        from_pretrained(checkpoint_file="checkpoint_best.pt", **paths)
    assert str(refused.value) == (
        f"from_pretrained({keyword}={str(archive)!r}) is a file, not a folder: an archive, which "
        "fairseq would unpack unchecked (a member may be written anywhere) and then delete; "
        "unpack it yourself into a folder you choose (mkdir MODEL && tar -xf ARCHIVE -C MODEL) "
        "and pass the folder"
    )
    assert archive.is_file() and archive.read_bytes() == before
    assert sorted(path.name for path in tmp_path.rglob("*")) == ["model.tar.gz", "tmp"]


@pytest.mark.parametrize(
    "given, said",
    [
        ("https://127.0.0.1:9/model.tar.gz", "a name or URL of an archive to download, which "
         "fairseq would unpack unchecked (a member may be written anywhere); download it, unpack "
         "it yourself into a folder you choose"),
        ("transformer.wmt16.en-de", "a name or URL of an archive to download"),  # fairseq's map
        ("CKPT/checkpoint_best.pt", "is a file, not a folder: pass its folder and name: "
         "from_pretrained('CKPT', checkpoint_file='checkpoint_best.pt')"),
    ],
    ids=["URL", "hosted name", "checkpoint file"],
)  # fmt: skip
def test_a_model_that_is_no_local_folder_is_refused(tmp_path, given, said):
    """fairseq downloaded and unpacked a URL or a name of its archive map, and took a checkpoint
    file for an archive (tarfile's ``CompressionError: unknown compression type 'pt'``)."""
    from fairseq_san.errors import UsageError

    (tmp_path / "CKPT").mkdir()
    (tmp_path / "CKPT" / "checkpoint_best.pt").write_bytes(b"x")
    given = given.replace("CKPT", str(tmp_path / "CKPT"))
    with pytest.raises(UsageError) as refused:
        from_pretrained(given, "checkpoint_best.pt", data_name_or_path=str(tmp_path))
    message = str(refused.value)
    assert message.startswith(f"from_pretrained(model_name_or_path={given!r})")
    assert said.replace("CKPT", str(tmp_path / "CKPT")) in message


def test_a_data_path_starting_with_a_dot_is_looked_for_in_the_models_folder(tmp_path, monkeypatch):
    """fairseq joins it to the model's folder: a FileNotFoundError for CKPT/data before."""
    from fairseq_san.errors import UsageError

    (tmp_path / "data").mkdir()
    (tmp_path / "ckpt").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError) as refused:
        from_pretrained("ckpt", checkpoint_file="checkpoint_best.pt", data_name_or_path="./data")
    assert str(refused.value) == (
        f"from_pretrained(data_name_or_path='./data'): no such folder {tmp_path / 'ckpt' / 'data'}"
        f": fairseq takes a data path that starts with '.' inside the model's folder "
        f"({tmp_path / 'ckpt'}); for a folder elsewhere, pass its absolute path (or one without "
        "the leading '.', from the working directory)"
    )


@pytest.mark.parametrize(
    "generation_args, said",
    [
        ({"bema": 3}, "unknown generation option 'bema' (a key of from_pretrained's "
         "generation_args): did you mean 'beam'?"),
        ({"san_policy": POLICY}, "san_policy (in from_pretrained's generation_args) is an option "
         "of the model, not of the generation: give it to from_pretrained(..., san_policy=...)"),
        ([("beam", 2)], "from_pretrained(generation_args=[('beam', 2)]): it takes a dict of "
         "generation options, e.g. generation_args={'beam': 4}"),
        ({"seed": 1}, "seed=1 (in from_pretrained's generation_args) would be ignored: the hub "
         "seeds no generator (fairseq's commands seed torch with --seed): call "
         "torch.manual_seed(N) before the call that samples"),
    ],
    ids=["misspelt", "model option", "no dict", "seed"],
)  # fmt: skip
def test_generation_args_are_checked_before_loading(tmp_path, generation_args, said):
    """fairseq set them on the generation config unchecked: a misspelt key failed at translate(),
    blaming "a keyword of translate()"."""
    from fairseq_san.errors import UsageError

    with pytest.raises(UsageError) as refused:
        from_pretrained(str(tmp_path), generation_args=generation_args)  # nothing to load there
    assert str(refused.value) == said


def test_a_beam_keyword_of_from_pretrained_is_refused(tmp_path):
    """``from_pretrained(..., beam=3)`` set the stored configuration's beam, which translate()
    never reads (fairseq's generate() has its own default, 5): five hypotheses, without a word."""
    from fairseq_san.errors import UsageError

    with pytest.raises(UsageError) as refused:
        from_pretrained(str(tmp_path), beam=3)  # refused before anything is loaded
    assert str(refused.value) == (
        "from_pretrained(beam=3): the hub decodes with the beam of generation_args or of each "
        "call: pass generation_args={'beam': 3}, or translate(..., beam=3)"
    )


@pytest.mark.parametrize("keyword, value", [("sampling", "False"), ("max_len_b", 3)])
def test_a_decoding_keyword_of_from_pretrained_is_refused(tmp_path, keyword, value):
    """fairseq set it on the generation config unchecked: sampling='False' failed at translate()
    deep inside fairseq, nbest=2 was ignored; generation_args and the calls check them."""
    from fairseq_san.errors import UsageError

    with pytest.raises(UsageError) as refused:
        from_pretrained(str(tmp_path), **{keyword: value})  # refused before anything is loaded
    assert str(refused.value) == (
        f"from_pretrained({keyword}={value!r}) is a decoding option: pass "
        f"generation_args={{'{keyword}': {value!r}}} (checked as the calls' keywords are), or "
        f"translate(..., {keyword}={value!r})"
    )


@pytest.mark.parametrize(
    "keywords, said",
    [({"fp16": True}, "from_pretrained(fp16=True) would be ignored: the hub keeps the "
      "checkpoint's float32 weights; call .half() on the hub it returns"),
     ({"bf16": True}, "from_pretrained(bf16=True) would be ignored: the hub keeps the "
      "checkpoint's float32 weights; call .bfloat16() on the hub it returns"),
     ({"max_tokens": 0}, "from_pretrained(max_tokens=0): it must be an integer of at least 1"),
     ({"batch_size": -1}, "from_pretrained(batch_size=-1): it must be an integer of at least 1"),
     ({"max_tokens": 2**63}, "from_pretrained(max_tokens=9223372036854775808): it must be an "
      "integer of at least 1, at most 9223372036854775807 (fairseq holds it in a 64-bit integer)"),
     ({"max_tokens": "abc"}, "from_pretrained(max_tokens='abc'): it must be an integer of at "
      "least 1")],
)  # fmt: skip
def test_a_precision_or_batch_size_the_hub_would_not_follow_is_refused(tmp_path, keywords, said):
    """fp16=True decoded in float32 (scores not fairseq-generate --fp16's); max_tokens=0 and
    batch_size=-1 were read as no limit, 'abc' failed at the first call inside fairseq."""
    from fairseq_san.errors import UsageError

    with pytest.raises(UsageError) as refused:
        from_pretrained(str(tmp_path), **keywords)  # refused before anything is loaded
    assert str(refused.value) == said


def test_a_keyword_of_from_pretrained_that_no_hub_generator_reads_says_what_to_do(tmp_path):
    """``nbest=2`` was pointed to ``generation_args`` and ``translate()``, which refuse it too
    (the hub's generate() returns the whole beam): the message says to slice instead."""
    from fairseq_san.errors import UsageError

    with pytest.raises(UsageError) as refused:
        from_pretrained(str(tmp_path), nbest=2)  # refused before anything is loaded
    assert str(refused.value) == (
        "from_pretrained(nbest=2) would be ignored: generate() returns every hypothesis of the "
        "beam, best first (translate() and sample() the best one): slice them, hypos[:N]"
    )


def test_model_overrides_of_from_pretrained_are_refused(san_checkpoint, binarized_corpus):
    """fairseq's hub set model_overrides (fairseq-generate's --model-overrides) on its config,
    where nothing read it: the checkpoint loaded with its own policy, without a word."""
    from fairseq_san.errors import UsageError

    overrides = "{'san_policy': '{\"decoder_self\": [6]}'}"
    with pytest.raises(UsageError) as refused:
        from_pretrained(san_checkpoint.parent, san_checkpoint.name, binarized_corpus,
                        model_overrides=overrides)  # fmt: skip
    assert str(refused.value) == (
        f"from_pretrained(model_overrides={overrides!r}) would be ignored: the hub's keywords "
        "are the overrides; give each as one, from_pretrained(..., san_policy=...)"
    )


@pytest.mark.slow
def test_a_checkpoint_loads_from_paths_and_its_generation_args_are_checked_for_its_task(
    san_checkpoint, binarized_corpus
):
    """pathlib.Path arguments failed in fairseq (``'PosixPath' object has no attribute
    'startswith'``); under fairseq's task, ``generation_args={'san_decoding': 'static'}`` loaded
    and decoded with fairseq's generator, silently; a misspelt ``retain_dropout_modules`` kept
    no dropout."""
    from fairseq.tasks.translation import TranslationTask

    from fairseq_san.errors import UsageError

    folder, name = san_checkpoint.parent, Path(san_checkpoint.name)
    loaded = from_pretrained(folder, checkpoint_file=name, data_name_or_path=binarized_corpus,
                             generation_args={"beam": 2})  # fmt: skip
    assert loaded.cfg.generation.beam == 2 and len(loaded.translate(["tok1 tok2"])) > 0
    fairseqs = {"_name": "translation"}
    fairseq_task = from_pretrained(folder, name, binarized_corpus, task=fairseqs).task
    assert type(fairseq_task) is TranslationTask
    with pytest.raises(UsageError) as refused:
        from_pretrained(folder, name, binarized_corpus, task=fairseqs,
                        generation_args={"san_decoding": "static"})  # fmt: skip
    assert str(refused.value) == (
        "san_decoding='static' (in from_pretrained's generation_args) is an option of the task "
        "translation_san, and this model's task is translation, whose generator would ignore it: "
        "load it with from_pretrained(..., task={'_name': 'translation_san'})"
    )
    with pytest.raises(UsageError, match=r"^beam=0: it must be an integer of at least 1$"):
        from_pretrained(folder, name, binarized_corpus, generation_args={"beam": 0})
    misspelt = {"retain_dropout": True, "retain_dropout_modules": ["TransformerDecodr"]}
    with pytest.raises(UsageError) as refused:  # fairseq kept none; the flag was named
        from_pretrained(folder, name, binarized_corpus, generation_args=misspelt)
    assert str(refused.value).startswith(
        "retain_dropout_modules=['TransformerDecodr'] (in from_pretrained's generation_args): "
        "no dropout of this TransformerSANModel is named TransformerDecodr, and fairseq would "
        "keep none for it; its modules with dropout are "
    )
    with pytest.raises(UsageError) as refused:  # the model's refusal advised the command line
        from_pretrained(folder, name, binarized_corpus, task=fairseqs, san_decoding="static")
    assert str(refused.value) == (
        "from_pretrained(san_decoding='static'): the task loaded is fairseq's own, whose "
        "generator would ignore it: load the model with task={'_name': 'translation_san'} beside "
        "san_decoding"
    )


@pytest.mark.slow
def test_lm_page_python_example_samples_and_scores(multi30k_raw, tmp_path):
    """docs/lm.md's example, verbatim, on a language model trained a few updates on the toy
    Multi30k as examples/lm/prepare.sh prepares it, in the folders the page names: its
    ``score()`` was refused (the translation models' score_reference rule)."""
    from helpers import LM_PREPARE, output_of, prepare_env, run_script

    data = tmp_path / "data-bin" / "multi30k.en-lm"
    prepared = run_script(LM_PREPARE, str(data), env=prepare_env(multi30k_raw))
    assert prepared.returncode == 0, output_of(prepared)[-3000:]
    argv = lm_train_argv(data, tmp_path / "checkpoints" / "lm", "--tokens-per-sample", "64",
                         max_update=5)  # the page's --save-dir
    trained = run_cli("fairseq-train", *argv)
    assert trained.returncode == 0, trained.stderr[-3000:]
    check = (
        "\nimport json\n"
        "sampled, scored = lm.sample('A man is', beam=1), lm.score('A man is riding a bike.')\n"
        "print(json.dumps([sampled, scored['positional_scores'].tolist()]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", python_example("docs/lm.md") + check], cwd=tmp_path,
        env=cli_env(), capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    sampled, scores = json.loads(result.stdout.strip().splitlines()[-1])
    assert sampled.startswith("A man is") and len(sampled) > len("A man is")
    assert len(scores) >= 6 and all(score <= 0 for score in scores)  # a score for each piece


@pytest.fixture(scope="module")
def language_model_files(tmp_path_factory):
    """The folder of a transformer_lm_san checkpoint of --task language_modeling_san, trained 3
    updates on one side of the synthetic corpus, and its data."""
    from helpers import lm_train_argv, preprocess_lm

    root = tmp_path_factory.mktemp("hub-lm")
    data = preprocess_lm(write_corpus(root / "raw"), root / "data-bin")
    result = run_cli("fairseq-train", *lm_train_argv(data, root / "lm", max_update=3))
    assert result.returncode == 0, result.stderr[-3000:]
    return root / "lm", data


def load_language_model(files, **keywords):
    from fairseq_san.models.transformer_lm_san import TransformerLMSANModel

    folder, data = files
    keywords.setdefault("checkpoint_file", "checkpoint_last.pt")
    return TransformerLMSANModel.from_pretrained(str(folder), data_name_or_path=str(data),
                                                 **keywords)  # fmt: skip


@pytest.fixture(scope="module")
def language_model(language_model_files):
    """The hub of ``language_model_files``."""
    return load_language_model(language_model_files)


def test_a_keyword_or_data_folder_holding_an_interpolation_is_named(language_model_files,
                                                                     tmp_path):  # fmt: skip
    """A keyword holding ``${`` (or a data folder whose path does: fairseq sets it as an
    override) was refused as the checkpoint's own interpolation, "not a configuration fairseq
    wrote"; ``${oc.env:HOME}`` is never resolved."""
    from fairseq_san.errors import UsageError

    interpolation = "holds '${', which fairseq's configuration reads as an omegaconf interpolation"
    with pytest.raises(UsageError) as refused:
        load_language_model(language_model_files, save_dir="${oc.env:HOME}")
    keyword = "save_dir='${oc.env:HOME}' (from --model-overrides or a keyword argument)"
    assert str(refused.value).startswith(f"{keyword} {interpolation}")
    data = shutil.copytree(language_model_files[1], tmp_path / "a${x}")
    with pytest.raises(UsageError) as refused:
        load_language_model((language_model_files[0], data))
    assert str(refused.value).startswith(f"the data folder {data} {interpolation}")


NBEST_IGNORED = (
    "nbest=1 would be ignored: generate() returns every hypothesis of the beam, best first "
    "(translate() and sample() the best one): slice them, hypos[:N]"
)


@pytest.mark.slow
def test_generation_keywords_no_generator_of_the_hub_reads_are_refused(
    san_checkpoint, binarized_corpus, language_model
):
    """fairseq's hub sets every keyword on its generation config, and only fairseq-generate and
    fairseq-interactive read these: ``nbest=1`` with ``beam=3`` returned 3 hypotheses,
    ``prefix_size`` and ``lm_path`` decoded as without them."""
    from fairseq_san.errors import UsageError

    hub = from_pretrained(san_checkpoint.parent, san_checkpoint.name, binarized_corpus)
    sentence = hub.encode("tok1 tok2 tok3")
    with pytest.raises(UsageError) as refused:
        hub.generate([sentence], beam=3, nbest=1)
    assert str(refused.value) == NBEST_IGNORED
    assert len(hub.generate([sentence], beam=3)[0]) == 3  # the beam's, for the caller to slice
    with pytest.raises(UsageError, match=r"^lm_path='lm\.pt' would be ignored: the hub fuses no "):
        hub.translate("tok1 tok2 tok3", lm_path="lm.pt", lm_weight=0.5)
    with pytest.raises(UsageError) as refused:
        hub.translate("tok1 tok2 tok3", retain_dropout=True)
    assert str(refused.value) == (
        "retain_dropout=True would be ignored: the hub applies it to the models as it builds "
        "them: give it to from_pretrained(..., generation_args={'retain_dropout': ...})"
    )
    with pytest.raises(UsageError) as refused:
        language_model.sample("tok1 tok2 tok3", beam=1, max_len_b=8, prefix_size=1)
    assert str(refused.value) == (
        "prefix_size=1 would be ignored: a language model continues the whole text it is given "
        "(give it only the prefix), and a translation model gets no target prefix here "
        "(fairseq-generate --prefix-size N takes one from the references)"
    )
    assert language_model.sample("tok1 tok2", beam=1, max_len_b=8).startswith("tok1 tok2")


def test_keywords_the_hub_cannot_follow_are_one_line(
    san_checkpoint, binarized_corpus, language_model
):
    """fairseq's hub failed on these deep inside (TypeError, IndexError) or ignored them."""
    import torch
    from fairseq.token_generation_constraints import pack_constraints

    from fairseq_san.errors import UsageError

    hub = from_pretrained(san_checkpoint.parent, san_checkpoint.name, binarized_corpus)
    tokens = {"constraints": pack_constraints([[torch.tensor([hub.tgt_dict.index("tok3")])]])}
    for keywords, said in (
        ({"score_reference": True}, "score_reference=True (score() sets it): the hub gives a "
         "translation model's scorer no reference"),
        ({"constraints": "ordered"}, "constraints='ordered': constrained decoding needs the "
         "constraint tokens, inference_step_args={'constraints': ...}"),
        # the checks shared with the command line, in the hub's words (they named flags)
        ({"diverse_beam_strength": 0.9}, "diverse_beam_strength=0.9 is read only by diverse "
         "beam search"),
        ({"beam": 4, "diverse_beam_groups": 3}, "beam=4 is not a multiple of "
         "diverse_beam_groups=3"),  # fairseq's ValueError at the first step, a traceback
        ({"no_repeat_ngram_size": 1}, "no_repeat_ngram_size=1: it must be 0 (no blocking) or "
         "an integer of at least 2"),
        ({"sampling": True, "match_source_len": True}, "sampling=True and match_source_len=True "
         "each choose a search, and fairseq's generator runs one"),
        ({"print_alignment": True}, "print_alignment=True is not valid; valid values: hard, soft"),
        # fairseq's search failed on them: NameError, "cannot access free variable"
        ({"constraints": "sideways", "inference_step_args": tokens},
         "constraints='sideways' is not valid; valid values: ordered, unordered"),
        ({"constraints": True, "inference_step_args": tokens},
         "constraints=True is not valid; valid values: ordered, unordered"),
        ({"san_decoding": "static", "san_decoder_execution": "compile"},  # compiled per call
         "san_decoder_execution='compile' is not valid; valid values: eager, fixed, graph, "
         "compile-graph; did you mean 'compile-graph'?"),
        ({"san_decoder_precision": "int8"}, "san_decoder_precision='int8' is an option of "
         "san_decoding='static', not of san_decoding='fairseq', which decodes here: add "
         "san_decoding='static', or drop san_decoder_precision"),
        ({"min_len": 500, "max_len_b": 20}, "min_len=500 is above the longest output of a batch "
         "(max_len_a=0"),
        ({"beam": "4"}, "beam='4': it must be an integer of at least 1"),  # not a keyword: "beam"
        ({"print_alignment": "two words"}, "print_alignment='two words' is not valid; valid "
         "values: hard, soft"),
        # fairseq's verbose log formats (source, target) pairs: a ValueError
        ({"print_alignment": "soft", "verbose": True}, "print_alignment='soft' with verbose=True: "
         "fairseq's hub logs hard alignments only"),
    ):  # fmt: skip
        with pytest.raises(UsageError, match="^" + re.escape(said)):
            hub.translate("tok1 tok2 tok3", **keywords)
    with pytest.raises(UsageError, match="^print_alignment: a language model has no source"):
        language_model.sample("tok1 tok2", beam=1, max_len_b=8, print_alignment="hard")
    with pytest.raises(UsageError, match=r"^score_reference=True \(score\(\) sets it\)"):
        hub.score("tok1 tok2 tok3")


def test_the_hub_meets_constraints_with_either_decoder(san_checkpoint, binarized_corpus):
    """``constraints='ordered'`` with the constraint tokens in ``inference_step_args``: fairseq's
    decoder and the static one give the same translation, holding its constraint; the tokens
    without the representation are one line (fairseq's generator raised NotImplementedError)."""
    import torch
    from fairseq.token_generation_constraints import pack_constraints

    from fairseq_san.errors import UsageError

    hub = from_pretrained(san_checkpoint.parent, san_checkpoint.name, binarized_corpus)
    source = hub.encode("tok1 tok2 tok3 tok4")
    word = hub.tgt_dict.index("tok7")
    packed = {"constraints": pack_constraints([[torch.tensor([word])]])}
    best = [
        hub.generate([source], beam=4, constraints="ordered", inference_step_args=packed,
                     san_decoding=decoding)[0][0]["tokens"].tolist()
        for decoding in ("fairseq", "static")
    ]  # fmt: skip
    assert best[0] == best[1] and word in best[0]
    with pytest.raises(UsageError, match=r"^inference_step_args=\{'constraints': ...\} needs "
                       "constraints='ordered' or 'unordered'"):  # fmt: skip
        hub.generate([source], beam=4, inference_step_args=packed)


def test_each_sentence_gets_its_own_prefix_and_constraints(san_checkpoint, binarized_corpus):
    """fairseq's hub gave every batch (sentences sorted by length) the whole tensor of
    ``inference_step_args``: row i went to another sentence (together: 'tree a a a', 'house
    red'; one at a time: 'house a a a', 'tree red'), and a 1-D sentence's were dropped.
    Each sentence now decodes with its own row, in one batch or many."""
    import torch
    from fairseq.token_generation_constraints import pack_constraints

    short, long = "tok1 tok2", "tok3 tok4 tok5 tok6 tok7"  # sorted: the longer one first
    words = [[7], [9]]  # a word for each sentence, in their order
    for batch_size in (None, 1):
        loaded = {} if batch_size is None else {"batch_size": batch_size}
        hub = from_pretrained(san_checkpoint.parent, san_checkpoint.name, binarized_corpus,
                              **loaded)  # fmt: skip
        sources = [hub.encode(short), hub.encode(long)]
        ids = [[hub.tgt_dict.index(f"tok{n}") for n in row] for row in words]
        prefixes = {"prefix_tokens": torch.tensor(ids)}
        packed = {"constraints": pack_constraints([[torch.tensor(row)] for row in ids])}
        for step_args, keywords in ((prefixes, {}), (packed, {"constraints": "ordered"})):
            together = hub.generate(sources, beam=2, inference_step_args=step_args, **keywords)
            for index, source in enumerate(sources):
                own = {key: value[index : index + 1] for key, value in step_args.items()}
                alone = hub.generate(source, beam=2, inference_step_args=own, **keywords)
                assert together[index][0]["tokens"].tolist() == alone[0]["tokens"].tolist()
                assert ids[index][0] in alone[0]["tokens"].tolist()


def test_calls_in_threads_of_their_own_keep_their_own_rows(
    san_checkpoint, binarized_corpus, monkeypatch
):
    """Two threads decoding with one hub, each with its own prefix: the rows lived on the hub,
    and the call that set them last gave its prefix to both. fairseq's generate waits here until
    both calls have set theirs."""
    import threading

    import torch
    from fairseq import hub_utils

    both_started = threading.Barrier(2, timeout=60)
    fairseq_generate = hub_utils.GeneratorHubInterface.generate

    def generate_after_both_started(self, *args, **kwargs):
        both_started.wait()
        return fairseq_generate(self, *args, **kwargs)

    hub = from_pretrained(san_checkpoint.parent, san_checkpoint.name, binarized_corpus)
    sources = [hub.encode("tok1 tok2"), hub.encode("tok3 tok4 tok5 tok6 tok7")]
    words = [hub.tgt_dict.index(word) for word in ("tok7", "tok9")]
    prefixes = [torch.tensor([[words[0]], [words[1]]]), torch.tensor([[words[1]], [words[0]]])]

    def best(prefix: torch.Tensor) -> list:
        decoded = hub.generate(sources, beam=2, inference_step_args={"prefix_tokens": prefix})
        return [hypos[0]["tokens"].tolist() for hypos in decoded]

    alone = [best(prefix) for prefix in prefixes]
    assert alone[0] != alone[1]
    monkeypatch.setattr(hub_utils.GeneratorHubInterface, "generate",
                        generate_after_both_started)  # fmt: skip
    together = [None, None]

    def decode(index: int) -> None:
        together[index] = best(prefixes[index])

    threads = [threading.Thread(target=decode, args=(index,)) for index in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert together == alone


def test_a_copied_hub_decodes_as_the_original_and_apart_from_it(san_checkpoint, binarized_corpus):
    """``copy.deepcopy(hub)``: fairseq's task state called itself until a RecursionError, and the
    hub's record of its calls could not be copied. The copy decodes as the original, with the
    beam it was loaded with, and its own models: halving them leaves the original's."""
    import copy

    import torch

    hub = from_pretrained(san_checkpoint.parent, san_checkpoint.name, binarized_corpus,
                          generation_args={"beam": 2})  # fmt: skip
    copied = copy.deepcopy(hub)
    sources = [hub.encode("tok1 tok2 tok3"), hub.encode("tok4 tok5")]
    assert [[h["tokens"].tolist() for h in hypos] for hypos in copied.generate(sources)] == [
        [h["tokens"].tolist() for h in hypos] for hypos in hub.generate(sources)
    ]
    assert len(copied.generate(sources)[0]) == 2  # the beam it was loaded with
    copied.half()
    assert next(hub.parameters()).dtype == torch.float32
    assert copied.task.source_dictionary == hub.task.source_dictionary


def test_a_hubs_half_refuses_a_weight_beyond_float16s_range(san_checkpoint, binarized_corpus):
    """``hub.half()`` converts its models without their own ``half()``: a weight above 65504
    became infinite, and every translation failed inside fairseq's beam search."""
    import torch

    from fairseq_san.errors import UsageError

    hub = from_pretrained(san_checkpoint.parent, san_checkpoint.name, binarized_corpus)
    with torch.no_grad():
        hub.models[0].decoder.layers[0].fc1.bias[0] = 1e6
    with pytest.raises(UsageError, match=r"^half\(\): the model's weight "
                       r"decoder\.layers\.0\.fc1\.bias holds 1e\+06, beyond float16's range "
                       r"\(65504\), where it would become infinite; keep it in float32$"):
        hub.half()
    assert next(hub.parameters()).dtype == torch.float32


def test_pickling_a_hub_is_refused_in_one_line(san_checkpoint, binarized_corpus, tmp_path):
    """pickle (torch.save, a process pool) failed inside fairseq's objects: "Can't pickle local
    object 'BaseFairseqModel.make_generation_fast_.<locals>.train'"; its refusal says what
    copies or saves a hub; copy.copy, which took the pickle's way, still copies it."""
    import copy
    import pickle

    import torch

    hub = from_pretrained(san_checkpoint.parent, san_checkpoint.name, binarized_corpus)
    for save in (pickle.dumps, lambda hub: torch.save(hub, tmp_path / "hub.pt")):
        with pytest.raises(TypeError) as refused:
            save(hub)
        assert str(refused.value).startswith(
            "cannot pickle a hub model (SANHubInterface): fairseq's generation-ready models"
        )
    assert copy.copy(hub).translate("tok1 tok2 tok3") == hub.translate("tok1 tok2 tok3")


def test_a_shared_models_calls_in_threads_of_their_own_translate_as_alone(
    binarized_corpus, tmp_path
):
    """A block's leader hands its attention to the layers above through the model: two threads'
    forward passes read each other's ("shared attention used before its block's first layer
    ran", or another batch's attention). Each thread now has its own hand-off."""
    import threading

    from helpers import run_cli, train_argv

    policy = ["--task", "translation_san", "--san-decoder-self-policy", "1,5",
              "--san-decoder-encdec-policy", "2,4"]  # fmt: skip
    result = run_cli("fairseq-train", *train_argv(binarized_corpus, tmp_path, 3, policy))
    assert result.returncode == 0, result.stderr[-2000:]
    hub = from_pretrained(tmp_path, "checkpoint_last.pt", binarized_corpus)
    sentences = ["tok1 tok2 tok3", "tok4 tok5", "tok6 tok7 tok8 tok9", "tok2 tok3"]
    alone = hub.translate(sentences, beam=3)
    started = threading.Barrier(4, timeout=60)
    together, failures = {}, []

    def translate(index: int) -> None:
        started.wait()
        try:
            together[index] = [hub.translate(sentences, beam=3) for _ in range(3)]
        except Exception as error:  # reported below
            failures.append(error)

    threads = [threading.Thread(target=translate, args=(index,)) for index in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures
    assert all(outputs == [alone] * 3 for outputs in together.values()) and len(together) == 4


def test_a_language_models_calls_in_threads_of_their_own_keep_their_own_checks(
    language_model, monkeypatch
):
    """A score and a sample in threads of their own, the score's scorer built, then the sample's
    generator, before either batches: the task kept whether the last generator built scores,
    and the score was checked as a prompt ("a prompt of 15 tokens is longer than the model's 16
    positions leave room for"). Each thread now keeps its own record of its call."""
    import threading

    from fairseq_san.tasks.language_modeling_san import LanguageModelingSANTask

    sentence = " ".join(["tok4"] * 15)  # scored: it fits; a prompt: it leaves no room
    calls = {
        "score": lambda: language_model.score(sentence)["score"].item(),
        "sample": lambda: language_model.sample("tok1 tok2 tok3 tok4 tok5 tok6", max_len_b=10),
    }
    alone = {name: call() for name, call in calls.items()}
    scorer_built, generator_built = threading.Event(), threading.Event()
    build_generator = LanguageModelingSANTask.build_generator

    def scorer_then_generator(self, models, args, *rest, **kwargs):
        """The scorer built first, then the sample's generator, before either call batches."""
        if not args.score_reference:
            assert scorer_built.wait(60)
        generator = build_generator(self, models, args, *rest, **kwargs)
        (scorer_built if args.score_reference else generator_built).set()
        assert generator_built.wait(60)
        return generator

    monkeypatch.setattr(LanguageModelingSANTask, "build_generator", scorer_then_generator)
    together = {}

    def call(name: str) -> None:
        try:
            together[name] = calls[name]()
        except Exception as error:  # compared below
            together[name] = error

    threads = [threading.Thread(target=call, args=(name,)) for name in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert together == alone


def test_searches_wider_than_the_vocabulary_are_one_line_under_fairseqs_task(
    san_checkpoint, binarized_corpus
):
    """Under fairseq's own task (whose generator the plugin's checks did not reach) these failed
    inside torch's topk: "selected index k out of range"."""
    from fairseq_san.errors import UsageError

    hub = from_pretrained(san_checkpoint.parent, san_checkpoint.name, binarized_corpus,
                          task={"_name": "translation"})  # fmt: skip
    entries = len(hub.tgt_dict)
    for keywords, said in (
        ({"sampling": True, "beam": 1, "sampling_topk": 99999}, f"sampling_topk=99999 is more "
         f"than the target dictionary's {entries} entries"),
        ({"beam": 30, "diversity_rate": 0.5}, f"diversity_rate with beam=30: its search takes "
         f"the 2 x beam best tokens of each hypothesis, more than the target dictionary's "
         f"{entries} entries: pass beam={entries // 2} or less"),
    ):  # fmt: skip
        with pytest.raises(UsageError) as refused:
            hub.translate("tok1 tok2", **keywords)
        assert str(refused.value).startswith(said), str(refused.value)


def test_a_prefix_refusal_names_the_hubs_prefix_tokens(san_checkpoint, binarized_corpus):
    """The prefix checks shared with fairseq-generate named --prefix-size (as the hub spells
    keywords: ``prefix_size``, which the hub refuses): a prefix comes from
    ``inference_step_args``."""
    import torch

    from fairseq_san.errors import UsageError

    hub = from_pretrained(san_checkpoint.parent, san_checkpoint.name, binarized_corpus)
    prefix = {"prefix_tokens": torch.tensor([[hub.tgt_dict.eos()]])}
    with pytest.raises(UsageError) as refused:
        hub.generate([hub.encode("tok1 tok2")], beam=2, inference_step_args=prefix)
    assert str(refused.value).startswith(
        "inference_step_args['prefix_tokens']: the prefix of sentence 0 forces its end (EOS), "
        "which beam search at beam=2 cannot finish"
    ), str(refused.value)
    for decoding in ("fairseq", "static"):  # it said "at beam=1 cannot finish: use beam=1"
        with pytest.raises(UsageError) as refused:
            hub.generate([hub.encode("tok1 tok2")], beam=1, match_source_len=True,
                         inference_step_args=prefix, san_decoding=decoding)  # fmt: skip
        assert str(refused.value).startswith(
            "inference_step_args['prefix_tokens']: the prefix of sentence 0 holds its end (EOS) "
            "before its source's length, where match_source_len=True forbids it"
        ), str(refused.value)


def test_a_call_inside_a_call_keeps_the_outer_calls_rows(san_checkpoint, binarized_corpus):
    """A ``prefix_allowed_tokens_fn`` that translates with the same hub: the inner call took the
    outer call's rows away, and the outer one failed (AttributeError) as it ended."""
    import torch

    hub = from_pretrained(san_checkpoint.parent, san_checkpoint.name, binarized_corpus)
    sources = [hub.encode("tok1 tok2"), hub.encode("tok3 tok4 tok5 tok6 tok7")]
    prefix = {"prefix_tokens": torch.tensor([[hub.tgt_dict.index(w)] for w in ("tok7", "tok9")])}
    expected = [hypos[0]["tokens"].tolist()
                for hypos in hub.generate(sources, beam=2, inference_step_args=prefix)]  # fmt: skip
    inner = []

    def allowed(batch_id, tokens):
        if not inner:
            inner.append(hub.translate("tok1", beam=1))
        return list(range(len(hub.tgt_dict)))

    decoded = hub.generate(sources, beam=2, inference_step_args=prefix,
                           prefix_allowed_tokens_fn=allowed)  # fmt: skip
    assert [hypos[0]["tokens"].tolist() for hypos in decoded] == expected and inner


@pytest.mark.parametrize("decoding", ["fairseq", "static"])
def test_allowed_tokens_beside_another_search_are_one_line(
    san_checkpoint, binarized_corpus, decoding
):
    """fairseq's generator chooses sampling, diverse beam search, --match-source-len, a
    diversity rate (even 0.0) and constraints before a ``prefix_allowed_tokens_fn``: beside one
    of them it never called the function, and translated tokens it forbids, silently. Alone, the
    function restricts every token."""
    import torch
    from fairseq.token_generation_constraints import pack_constraints

    from fairseq_san.errors import UsageError

    hub = from_pretrained(san_checkpoint.parent, san_checkpoint.name, binarized_corpus)
    sources = [hub.encode("tok1 tok2 tok3"), hub.encode("tok4 tok5")]
    allowed_words = [hub.tgt_dict.index(word) for word in ("tok3", "tok5")]
    allowed = [*allowed_words, hub.tgt_dict.eos()]

    def restricted(batch_id, tokens):
        return allowed

    constraints = {"constraints": pack_constraints([[torch.tensor(allowed_words[:1])]] * 2)}
    for keywords, said in (
        ({"sampling": True}, "sampling=True"),
        ({"diverse_beam_groups": 2}, "diverse_beam_groups=2"),
        ({"match_source_len": True}, "match_source_len=True"),
        ({"diversity_rate": 0.0}, "diversity_rate=0.0"),
        ({"constraints": "ordered", "inference_step_args": constraints}, "constraints='ordered'"),
    ):  # fmt: skip
        with pytest.raises(UsageError, match=re.escape(
            f"prefix_allowed_tokens_fn and {said} each choose a search, and fairseq's generator "
            "runs the other one, never calling the function: pass one of them"
        )):  # fmt: skip
            hub.generate(sources, beam=2, san_decoding=decoding,
                         prefix_allowed_tokens_fn=restricted, **keywords)  # fmt: skip
    decoded = hub.generate(sources, beam=2, san_decoding=decoding,
                           prefix_allowed_tokens_fn=restricted)  # fmt: skip
    assert {token for hypos in decoded for hypo in hypos
            for token in hypo["tokens"].tolist()} <= set(allowed)  # fmt: skip


@pytest.mark.parametrize("decoding", ["fairseq", "static"])
def test_allowed_tokens_that_never_end_a_translation_are_one_line(
    san_checkpoint, binarized_corpus, decoding
):
    """A function that never allows the end of sentence leaves no hypothesis: translate() failed
    inside fairseq's sample() (an IndexError on the empty n-best list); generate() returns it
    empty, with a warning."""
    from fairseq_san.errors import UsageError

    hub = from_pretrained(san_checkpoint.parent, san_checkpoint.name, binarized_corpus)
    words = [hub.tgt_dict.index(f"tok{index}") for index in range(1, 6)]

    def never_ending(batch_id, tokens):
        return words

    with pytest.raises(UsageError) as refused:
        hub.translate(["tok1 tok2 tok3"], beam=2, san_decoding=decoding,
                      prefix_allowed_tokens_fn=never_ending)  # fmt: skip
    assert str(refused.value) == (
        "sentence 0 (of 1 with no hypothesis): prefix_allowed_tokens_fn left it none; it must "
        "allow each token of a prompt or of prefix_tokens at its position, and the end of "
        "sentence by the maximum length; translate() and sample() return each sentence's best "
        "hypothesis: generate() returns the n-best lists, empty for such a sentence"
    )
    decoded = hub.generate([hub.encode("tok1 tok2 tok3")], beam=2, san_decoding=decoding,
                           prefix_allowed_tokens_fn=never_ending)  # fmt: skip
    assert decoded == [[]]
    assert hub.translate("tok1 tok2", beam=2, san_decoding=decoding)  # the call's state reset


@pytest.mark.parametrize("decoding", ["fairseq", "static"])
def test_allowed_tokens_outside_the_dictionary_or_none_are_one_line(
    san_checkpoint, binarized_corpus, decoding
):
    """An id outside the target dictionary failed inside the search (an IndexError); None
    allowed every token, without a word."""
    from fairseq_san.errors import UsageError

    hub = from_pretrained(san_checkpoint.parent, san_checkpoint.name, binarized_corpus)
    for answer, said in (
        ([999], "prefix_allowed_tokens_fn returned token id 999, outside the model's target "
         f"dictionary (0..{len(hub.tgt_dict) - 1})"),
        (None, "prefix_allowed_tokens_fn returned None: return the allowed token ids (all of "
         "them: list(range(len(hub.tgt_dict))))"),
    ):  # fmt: skip
        with pytest.raises(UsageError) as refused:
            hub.translate("tok1 tok2", beam=2, san_decoding=decoding,
                          prefix_allowed_tokens_fn=lambda batch, tokens: answer)  # fmt: skip
        assert str(refused.value) == said


def test_allowed_tokens_that_leave_a_prompt_no_hypothesis_are_said(language_model, caplog):
    """A language model's prompt is forced through the search, which asks the function at its
    positions too: a function that forbids a prompt's token left the sentence no hypothesis, and
    generate() returned its empty n-best list without a word."""
    dictionary = language_model.tgt_dict
    prompt = language_model.encode("tok1 tok2")
    continuing = [dictionary.index(word) for word in ("tok3", "tok5")] + [dictionary.eos()]
    said = "sentence 0 (of 1 with no hypothesis): prefix_allowed_tokens_fn left it none; it must "
    for allowed, hypotheses in ((continuing, 0), (continuing + prompt.tolist(), 2)):
        caplog.clear()
        restricted = functools.partial(lambda tokens, i, t: tokens, allowed)
        with caplog.at_level(logging.WARNING, logger="fairseq_san.hub"):
            decoded = language_model.generate([prompt], beam=2, max_len_b=6,
                                              prefix_allowed_tokens_fn=restricted)  # fmt: skip
        assert len(decoded[0]) == hypotheses
        assert (said in caplog.text) == (hypotheses == 0), caplog.text


def test_a_language_models_too_long_prompt_is_left_out_where_asked(language_model):
    """skip_invalid_size_inputs=True: a prompt longer than the model's positions was refused
    (the call failed, the other prompts' samples lost), where fairseq's batching leaves it out as
    a translation's too long sentence is; one of the positions but one (fairseq's batching kept
    it, and it left no position to generate in) was refused where asked to skip; without it the
    refusal stays."""
    from fairseq_san.errors import UsageError

    positions = language_model.models[0].max_decoder_positions()
    long = " ".join(["tok1"] * (positions + 4))
    for too_long in (long, " ".join(["tok1"] * (positions - 1))):
        kept = language_model.sample(["tok1 tok2", too_long, "tok3"], beam=2, max_len_b=3,
                                     skip_invalid_size_inputs=True)  # fmt: skip
        assert len(kept) == 2 and kept[0].startswith("tok1 tok2") and kept[1].startswith("tok3")
        assert language_model.sample([too_long], beam=2, skip_invalid_size_inputs=True) == []
    fits = " ".join(["tok1"] * (positions - 2))
    assert len(language_model.sample([fits], beam=2, skip_invalid_size_inputs=True)) == 1
    with pytest.raises(UsageError, match=f"^a prompt of {positions + 4} tokens is longer than "):
        language_model.sample(["tok1 tok2", long], beam=2, max_len_b=3)


def test_one_text_left_out_where_asked_is_one_line(language_model, san_checkpoint,
                                                   binarized_corpus):
    """sample() and translate() of one text (not a list) that skip_invalid_size_inputs=True
    left out: fairseq's took the first of no sample, an IndexError ("list index out of range")."""
    from fairseq_san.errors import UsageError

    positions = language_model.models[0].max_decoder_positions()
    translation = from_pretrained(san_checkpoint.parent, san_checkpoint.name, binarized_corpus)
    calls = (
        (language_model.sample, " ".join(["tok1"] * (positions + 4))),
        (translation.translate, " ".join(["tok3"] * translation.max_positions[0])),
    )
    for call, too_long in calls:
        with pytest.raises(UsageError) as refused:
            call(too_long, beam=2, max_len_b=3, skip_invalid_size_inputs=True)
        assert str(refused.value) == (
            "skip_invalid_size_inputs=True left out the one text given (too long for the model), "
            "and translate() and sample() of one text return its text: pass a list of texts "
            "([text]) to get a shorter list, here [], or leave skip_invalid_size_inputs out to "
            "have the length refused"
        )
        assert call([too_long], beam=2, max_len_b=3, skip_invalid_size_inputs=True) == []
    assert language_model.sample("tok1 tok2", beam=2, max_len_b=4,
                                 skip_invalid_size_inputs=True).startswith("tok1 tok2")


def test_inference_step_rows_that_fit_no_sentence_are_one_line(san_checkpoint, binarized_corpus):
    """fairseq failed deep inside the search: "Dimension out of range", "The shape of the mask
    [2] ...", "index 500 is out of bounds", "'list' object has no attribute 'size'"."""
    import torch

    from fairseq_san.errors import UsageError

    hub = from_pretrained(san_checkpoint.parent, san_checkpoint.name, binarized_corpus)
    sources = [hub.encode("tok1 tok2"), hub.encode("tok3")]
    given = "inference_step_args['prefix_tokens']"
    for prefix, error, said in (
        (torch.tensor([7, 8]), TypeError, f"{given} is Tensor tensor([7, 8]): pass a 2-D "
         "torch.long tensor, a row for each sentence"),
        ([[7], [8]], TypeError, f"{given} is list [[7], [8]]: pass a 2-D torch.long tensor"),
        (torch.tensor([[7]]), UsageError, f"{given} has 1 rows for 2 sentences: give a row for "
         "each sentence, in their order"),
        (torch.tensor([[7], [500]]), UsageError, f"{given} holds token id 500, outside the "
         f"model's target dictionary (0..{len(hub.tgt_dict) - 1})"),
    ):  # fmt: skip
        with pytest.raises(error) as refused:
            hub.generate(sources, beam=2, inference_step_args={"prefix_tokens": prefix})
        assert str(refused.value).startswith(said), str(refused.value)
    from fairseq.token_generation_constraints import pack_constraints

    packed = pack_constraints([[torch.tensor([999])], [torch.tensor([7])]])  # an IndexError
    with pytest.raises(UsageError) as refused:
        hub.generate(sources, beam=2, constraints="ordered",
                     inference_step_args={"constraints": packed})  # fmt: skip
    assert str(refused.value) == (
        "inference_step_args['constraints'] holds token id 999, outside the model's target "
        f"dictionary (0..{len(hub.tgt_dict) - 1})"
    )


def test_a_language_model_scores_texts(language_model):
    """The hub's ``score()`` (``generate(score_reference=True)``) scores each token of a text (as
    fairseq's language models' hub does, its end-of-sentence token stripped): it was refused with
    the translation models' score_reference."""
    scored = language_model.score(["tok1 tok2 tok3", "tok2"])
    assert [len(hypo["positional_scores"]) for hypo in scored] == [3, 1]
    assert all(hypo["positional_scores"].le(0).all() for hypo in scored)


@pytest.fixture(scope="module")
def bos_language_model_files(tmp_path_factory):
    """The folder of a transformer_lm_san checkpoint trained 20 updates with --add-bos-token on
    one side of the synthetic corpus, and its data."""
    from helpers import preprocess_lm

    root = tmp_path_factory.mktemp("hub-bos-lm")
    data = preprocess_lm(write_corpus(root / "raw"), root / "data-bin")
    argv = lm_train_argv(data, root / "bos", "--add-bos-token", max_update=20)
    result = run_cli("fairseq-train", *argv)
    assert result.returncode == 0, result.stderr[-3000:]
    return root / "bos", data


def test_a_start_token_language_model_scores_texts_as_it_was_trained(bos_language_model_files):
    """A model trained with --add-bos-token read its samples as ``<s> </s> w1 ... wn`` (fairseq's
    training and fairseq-eval-lm), and the hub's ``score()`` read ``<s> w1 ... wn``: other
    log-probabilities than eval-lm's, silently. They are the training dataset's now, and a
    sentence one token too long for that reading is refused."""
    import torch

    from fairseq_san.errors import UsageError

    hub = load_language_model(bos_language_model_files)
    hub.task.load_dataset("valid")
    dictionary, model = hub.task.dictionary, hub.models[0]  # in eval mode
    for index in range(3):  # the training's source <s> </s> w1 ... wn, target <s> w1 ... </s>
        item = hub.task.dataset("valid")[index]
        with torch.no_grad():
            logits = model(item["source"][None])[0]
        expected = model.get_normalized_probs((logits, None), log_probs=True)[0]
        expected = expected.gather(1, item["target"][:, None])[1:-1, 0]  # w1 ... wn
        scored = hub.score(dictionary.string(item["target"][1:-1]))
        assert torch.allclose(scored["positional_scores"], expected, atol=1e-5), index
    positions = hub.task.positions
    with pytest.raises(UsageError) as refused:
        hub.score(" ".join(["tok1"] * (positions - 1)))
    assert str(refused.value) == (
        f"a sentence of {positions - 1} tokens is longer than the model's {positions} positions "
        f"hold (after the start tokens <s> </s> of --add-bos-token): shorten it to at most "
        f"{positions - 2} tokens"
    )
    assert len(hub.score(" ".join(["tok1"] * (positions - 2)))["positional_scores"]) == positions - 2


def test_a_start_token_language_models_sentence_beyond_a_batch_counts_its_start_tokens(
    bos_language_model_files,
):
    """score() of a --add-bos-token model batches ``<s> </s> w1 ... wn``, a token more than the
    sentence and its end: one that fit max_tokens by those alone failed with fairseq's
    AssertionError "Sentences lengths should not exceed max_tokens=9" (a traceback), and one
    longer was told a max_tokens a token too small."""
    from fairseq_san.errors import UsageError

    eight = " ".join(["tok1"] * 8)  # 9 tokens with its end, 10 as scored
    for max_tokens in (8, 9):
        hub = load_language_model(bos_language_model_files, max_tokens=max_tokens)
        with pytest.raises(UsageError) as refused:
            hub.score(["tok2", eight])
        assert str(refused.value) == (
            "sentence 1 is 10 tokens long (its end of sentence and the start token </s> after <s> "
            f"of --add-bos-token included), and a batch holds at most {max_tokens} (max_tokens, "
            "by default the training's --max-tokens): load the model with "
            "from_pretrained(..., max_tokens=10) or more"
        )
    hub = load_language_model(bos_language_model_files, max_tokens=10)
    assert len(hub.score(eight)["positional_scores"]) == 8


def test_start_tokens_datasets_sizes_batches_and_filter_are_the_scored_samples(
    bos_language_model_files,
):
    """fairseq's batching and size filter read ``StartTokensDataset``'s sizes, and its batch
    is ``<s> </s> w1 ... wn`` with targets ``<s> w1 ... wn`` (the first not scored): each a
    token more than the sentences' ``<s> w1 ... wn``."""
    import numpy as np
    import torch
    from fairseq.tasks.language_modeling import LanguageModelingTask

    from fairseq_san.tasks.language_modeling_san import StartTokensDataset

    task = load_language_model(bos_language_model_files).task
    dictionary = task.dictionary
    bos, eos, pad = dictionary.bos(), dictionary.eos(), dictionary.pad()
    w = dictionary.index("tok1")
    sentences = [torch.tensor([w, eos]), torch.tensor([w, w, w, eos])]
    inner = LanguageModelingTask.build_dataset_for_inference(task, sentences, [2, 4])
    dataset = StartTokensDataset(inner, dictionary)
    assert dataset.sizes.tolist() == [3, 5]
    assert [dataset.size(i) for i in (0, 1)] == [dataset.num_tokens(i) for i in (0, 1)] == [3, 5]
    kept, ignored = dataset.filter_indices_by_size(np.arange(2), 4)
    assert kept.tolist() == [0] and ignored == [1]
    batch = dataset.collater([dataset[0], dataset[1]])
    assert batch["net_input"]["src_tokens"].tolist() == [
        [bos, eos, w, pad, pad], [bos, eos, w, w, w]
    ]
    assert batch["net_input"]["src_lengths"].tolist() == [3, 5]
    assert batch["target"].tolist() == [[bos, w, pad, pad, pad], [bos, w, w, w, pad]]
    assert batch["start_indices"] == [1, 1]
    assert dataset.collater([]) == {}


def test_a_language_model_without_start_tokens_scores_as_fairseq_reads_it(language_model):
    """Only a model trained with --add-bos-token reads ``<s> </s> w1 ...`` (StartTokensDataset):
    one without reads fairseq's ``</s> w1 ... wn``, each word scored after those before it."""
    import torch

    dictionary, model = language_model.task.dictionary, language_model.models[0]
    words = [dictionary.index(word) for word in ("tok1", "tok2", "tok3")]
    with torch.no_grad():
        logits = model(torch.tensor([[dictionary.eos(), *words]]))[0]
    expected = model.get_normalized_probs((logits, None), log_probs=True)[0]
    expected = expected[:3].gather(1, torch.tensor(words)[:, None])[:, 0]
    scored = language_model.score("tok1 tok2 tok3")["positional_scores"]
    assert torch.allclose(scored, expected, atol=1e-5)


@pytest.mark.slow
def test_a_task_or_ensemble_unlike_the_models_add_bos_token_is_said_in_the_hubs_words(
    language_model_files, tmp_path
):
    """The hub builds the task from the checkpoint, so a task dict given to it or an ensemble's
    other checkpoint was the only way to another --add-bos-token than the model's, and the
    refusal said "this command's task" and "drop --add-bos-token", a flag the hub has not. A
    task's given to an ensemble trained alike was said as checkpoints trained unalike."""
    from fairseq_san.errors import UsageError

    folder, data = language_model_files
    task = {"_name": "language_modeling_san", "data": str(data), "add_bos_token": True}
    with pytest.raises(UsageError) as refused:
        load_language_model(language_model_files, task=task)
    assert str(refused.value) == (
        "from_pretrained(checkpoint_file='checkpoint_last.pt', task=...): the model was trained "
        "without --add-bos-token, and the task given has it: leave add_bos_token out of task "
        "(the hub takes the checkpoint's)"
    )
    alike = "checkpoint_last.pt:checkpoint_best.pt"  # an ensemble trained alike: the task's
    with pytest.raises(UsageError) as refused:
        load_language_model(language_model_files, checkpoint_file=alike, task=task)
    assert str(refused.value).startswith(f"from_pretrained(checkpoint_file={alike!r}, task=...)")
    argv = lm_train_argv(data, tmp_path / "bos", "--add-bos-token", max_update=1)
    result = run_cli("fairseq-train", *argv)
    assert result.returncode == 0, result.stderr[-3000:]
    shutil.copy(folder / "checkpoint_last.pt", tmp_path / "bos" / "plain.pt")
    for checkpoints in ("plain.pt:checkpoint_last.pt", "checkpoint_last.pt:plain.pt"):
        with pytest.raises(UsageError) as refused:
            load_language_model((tmp_path / "bos", data), checkpoint_file=checkpoints)
        assert str(refused.value) == (
            f"from_pretrained(checkpoint_file={checkpoints!r}): some were trained with "
            "--add-bos-token, some without; an ensemble's checkpoints (the hub builds their task "
            "from the first) read one task, so they must all be trained with --add-bos-token or "
            "all without"
        )


SEED_IGNORED = (
    "would be ignored: the hub seeds no generator (fairseq's commands seed torch with --seed): "
    "call torch.manual_seed(N) before the call that samples"
)


def test_a_seed_the_hub_would_ignore_is_refused_and_torchs_seed_repeats_samples(
    language_model, tmp_path
):
    """fairseq's hub seeds nothing: ``from_pretrained(seed=1)`` set its config's seed, and each
    run sampled others, without a word; ``sample(seed=1)`` was an unknown generation option,
    not said what to do. torch's seed, which the message names, repeats the samples."""
    import torch

    from fairseq_san.errors import UsageError

    with pytest.raises(UsageError) as refused:
        load_language_model((tmp_path, tmp_path), seed=1)  # refused before anything is loaded
    assert str(refused.value) == f"from_pretrained(seed=1) {SEED_IGNORED}"
    with pytest.raises(UsageError) as refused:
        language_model.sample("tok1", sampling=True, seed=1)
    assert str(refused.value) == f"seed=1 {SEED_IGNORED}"
    drawn = []
    for _ in range(2):
        torch.manual_seed(1)
        drawn.append(language_model.sample(["tok1"] * 4, sampling=True, max_len_b=12))
    assert drawn[0] == drawn[1] and len(set(drawn[0])) > 1  # the same draws, not one sample


def test_a_language_model_loaded_with_a_searchs_options_still_scores(language_model):
    """A hub loaded with ``generation_args={'temperature': 0.8}`` (or a length penalty) for its
    sampling scores texts too: score() runs no search, and the options the hub was loaded with
    are not the call's to leave out."""
    generation = language_model.cfg.generation
    expected = language_model.score("tok1 tok2 tok3")["positional_scores"]
    for name, value in (("temperature", 0.8), ("lenpen", 0.6), ("unkpen", 2.0)):
        default = getattr(generation, name)
        setattr(generation, name, value)
        try:
            scores = language_model.score("tok1 tok2 tok3")["positional_scores"]
        finally:
            setattr(generation, name, default)
        assert scores.tolist() == expected.tolist(), name


def test_a_language_model_loaded_for_the_static_decoder_scores_texts(
    language_model, language_model_files
):
    """``from_pretrained(..., san_decoding='static')`` (and a precision) then ``score()`` was
    refused, naming ``score_reference``, which the user never gave: scoring decodes nothing,
    and fairseq's scorer gives the same scores as the hub loaded without them."""
    from fairseq_san.errors import UsageError

    expected = language_model.score(["tok1 tok2 tok3", "tok2"])
    for loaded in ({"san_decoding": "static"},
                   {"san_decoding": "static", "san_decoder_precision": "bf16"}):  # fmt: skip
        hub = load_language_model(language_model_files, **loaded)
        scored = hub.score(["tok1 tok2 tok3", "tok2"])
        assert [hypo["positional_scores"].tolist() for hypo in scored] == [
            hypo["positional_scores"].tolist() for hypo in expected
        ], loaded
    with pytest.raises(UsageError, match=r"^san_decoding='static' would be ignored: score\(\)"):
        language_model.score("tok1 tok2", san_decoding="static")


@pytest.mark.parametrize("task", [{}, {"task": "language_modeling"}], ids=["own", "fairseqs"])
def test_a_language_models_decoding_outside_its_choices_names_its_own(language_model_files, task):
    """The refusal listed a translation task's decodings (fast among them) and advised
    "did you mean 'fast'?" for the very value refused; under fairseq's own task too, where only
    the model checks it."""
    from fairseq_san.errors import UsageError

    with pytest.raises(UsageError) as refused:
        load_language_model(language_model_files, san_decoding="fast", **task)
    assert str(refused.value) == (
        "san_decoding='fast' is not valid; valid values: fairseq, static"
    )


def test_score_refuses_a_searchs_keyword_and_what_is_no_text(language_model):
    """score() runs no search, and fairseq's ignored ``lenpen``, ``temperature`` and ``beam``:
    the same score; ``score(b"...")`` scored the bytes' numbers (a TypeError inside the
    tokenizer)."""
    from fairseq_san.errors import UsageError

    for keywords in ({"lenpen": 2.0}, {"temperature": 5.0}, {"beam": 3}):
        (key, value), = keywords.items()
        with pytest.raises(UsageError) as refused:
            language_model.score("tok1 tok2", **keywords)
        assert str(refused.value) == (
            f"{key}={value!r} would be ignored: score() scores the sentences as they are, by no "
            "search: drop it"
        )
    with pytest.raises(TypeError, match=r"^sentences is bytes b'tok1': translate\(\), sample"):
        language_model.score(b"tok1")
    # "no" is true: the newline was replaced; the skip was ignored, a long sentence refused
    with pytest.raises(TypeError, match=r"^replace_newline_with_eos='no': pass True or False$"):
        language_model.score("tok1\ntok2", replace_newline_with_eos="no")
    with pytest.raises(UsageError, match=r"^skip_invalid_size_inputs=True: score\(\) scores every"):
        language_model.score(["tok1 tok2"], skip_invalid_size_inputs=True)
    with pytest.raises(TypeError, match=r"^verbose='no': pass True or False$"):  # it logged
        language_model.sample("tok1 tok2", beam=1, max_len_b=4, verbose="no")


def test_a_language_model_refuses_constraints(language_model):
    """The hint to give the constraint tokens led to fairseq's NotImplementedError traceback
    (its language-modelling task decodes no constraints)."""
    import torch
    from fairseq.token_generation_constraints import pack_constraints

    from fairseq_san.errors import UsageError

    packed = {"constraints": pack_constraints([[torch.tensor([4])]])}
    for keywords in ({"constraints": "ordered"}, {"inference_step_args": packed},
                     {"constraints": "unordered", "inference_step_args": packed}):  # fmt: skip
        with pytest.raises(UsageError) as refused:
            language_model.generate([language_model.encode("tok1")], beam=2, **keywords)
        assert str(refused.value) == (
            "constraints: a language model decodes no constraints (fairseq's "
            "language-modelling task refuses them); leave constraints out"
        )


@pytest.mark.parametrize("decoding", ["fairseq", "static"])
def test_a_language_models_prefix_tokens_beside_a_prompt_are_refused(language_model, decoding):
    """fairseq's language-modelling task forces the prefix tokens in place of the prompt, which
    it dropped without a word: the prompt "tok1 tok2" with prefix_tokens [[tok7]] gave "tok7 ..."
    Beside an empty sentence they are the prompt."""
    import torch

    from fairseq_san.errors import UsageError

    hub = language_model
    prefix = {"prefix_tokens": torch.tensor([[hub.src_dict.index("tok7")]])}
    with pytest.raises(UsageError) as refused:
        hub.generate([hub.encode("tok1 tok2")], beam=2, san_decoding=decoding,
                     inference_step_args=prefix)  # fmt: skip
    assert str(refused.value) == (
        "inference_step_args['prefix_tokens'] beside sentence 0, which holds a prompt: a "
        "language model's prefix tokens take the prompt's place, and the prompt would be "
        "ignored; give the prefix as the text (a language model continues the text it is "
        "given), or the sentences empty (encode(''))"
    )
    decoded = hub.generate([hub.encode("")], beam=2, san_decoding=decoding,
                           inference_step_args=prefix)  # fmt: skip
    assert decoded[0][0]["tokens"][0] == hub.src_dict.index("tok7")


def test_an_input_holding_the_padding_symbol_is_refused(language_model):
    """A typed ``<pad>`` was read as padding: a prompt's position generated in, a text's left out
    of its score (``score("tok1 <pad> tok2")`` scored "tok1 tok2"), silently."""
    from fairseq_san.errors import UsageError

    for call in (language_model.sample, language_model.score):
        with pytest.raises(UsageError) as refused:
            call("tok1 <pad> tok2")
        assert str(refused.value) == (
            "an input holds <pad>, the dictionary's padding symbol, which fairseq reads as "
            "padding and not as a word (left out, or generated in): write it otherwise"
        )


def test_a_source_holding_a_sentences_end_or_beginning_is_refused(
    san_checkpoint, binarized_corpus
):
    """``encode("tok1 </s> tok2")`` held the end of sentence inside the source, which the model
    read as two sentences (another score, silently); ``<s>`` a sentence's beginning. The end
    that encoding puts last is taken."""
    from fairseq_san.errors import UsageError

    hub = from_pretrained(san_checkpoint.parent, san_checkpoint.name, binarized_corpus)
    for typed, meaning in (("</s>", "end"), ("<s>", "beginning")):
        with pytest.raises(UsageError) as refused:
            hub.translate(f"tok1 {typed} tok2", beam=2)
        assert str(refused.value) == (
            f"an input holds {typed}, the dictionary's {meaning}-of-sentence symbol, which "
            f"fairseq reads as a sentence's {meaning} there and not as a word: write it "
            "otherwise"
        )
    assert hub.translate("tok1 tok2", beam=2) is not None


def test_an_empty_sentence_to_score_is_refused(language_model):
    """score(["tok1", ""]) scored the empty one NaN (the mean of no token's score), silently;
    and so did score("</s>"), whose end-of-sentence tokens fairseq strips (StripTokenDataset)."""
    from fairseq_san.errors import UsageError

    for empty in ("", "</s>", "</s> </s>"):
        with pytest.raises(UsageError) as refused:
            language_model.score(["tok1 tok2", empty])
        assert str(refused.value) == (
            "an empty sentence to score: a language model scores a sentence's tokens (not its "
            "end), and its score would be NaN; leave it out"
        )
    assert language_model.score("</s> tok1 </s>")["tokens"].tolist() == [
        language_model.task.dictionary.index("tok1")
    ]


@pytest.mark.slow
def test_calls_decode_with_the_beam_given_at_load(san_checkpoint, binarized_corpus):
    """``generation_args={'beam': N}``: translate(), sample() and generate() passed their own
    default beam (5, 1, 5) over it; a call's own beam still wins."""
    loaded = from_pretrained(san_checkpoint.parent, san_checkpoint.name, binarized_corpus,
                             generation_args={"beam": 2})  # fmt: skip
    fairseqs = from_pretrained(san_checkpoint.parent, san_checkpoint.name, binarized_corpus)
    sentence = loaded.encode("tok1 tok2 tok3")
    assert len(loaded.generate([sentence])[0]) == 2
    assert len(loaded.generate([sentence], beam=3)[0]) == 3
    assert len(fairseqs.generate([sentence])[0]) == 5
    searched = []
    loaded.generate = lambda tokens, beam, *rest, **keywords: searched.append(beam) or [
        [{"tokens": tokens[0]}]
    ]
    loaded.translate("tok1 tok2"), loaded.sample("tok1 tok2"), loaded.translate("tok1", beam=4)
    assert searched == [2, 2, 4]


@pytest.mark.slow
def test_no_text_decodes_to_nothing_and_an_item_that_is_no_text_is_named(
    san_checkpoint, binarized_corpus, language_model
):
    """translate([]) failed in fairseq's batching, in the plugin's words for a command line's
    empty subset ("no sentence to batch ... --skip-invalid-size-inputs-valid-test"); an item
    that is no text failed in sentencepiece ("Input must be str or bytes"), not saying which.
    The keywords are still checked."""
    import torch

    from fairseq_san.errors import UsageError

    hub = from_pretrained(san_checkpoint.parent, san_checkpoint.name, binarized_corpus)
    for model in (hub, language_model):
        assert model.translate([]) == [] and model.sample(()) == [] and model.generate([]) == []
        # an empty generator or 2-D tensor: the command line's "no sentence to batch"
        assert model.generate(iter([])) == [] == model.generate(torch.zeros(0, 5, dtype=torch.long))
    with pytest.raises(UsageError, match="^unknown generation option 'bema'"):
        hub.translate([], bema=3)
    with pytest.raises(TypeError) as refused:
        hub.translate(["tok1 tok2", None])
    assert str(refused.value) == (
        "sentence 1 is NoneType None, not text: translate(), sample() and score() take a text or "
        "a list of texts"
    )
    with pytest.raises(TypeError) as refused:
        hub.translate(7)
    assert str(refused.value) == (
        "sentences is int 7: translate(), sample() and score() take a text (str) or a list of "
        "texts"
    )
    with pytest.raises(TypeError) as refused:  # fairseq translated the keys, values unread
        hub.translate({"id-1": "tok1 tok2"})
    assert str(refused.value) == (
        "sentences is dict {'id-1': 'tok1 tok2'}: translate(), sample() and score() take a "
        "list, whose outputs follow its order (a dict's values: list(d.values()))"
    )
    assert hub.translate([b"tok1 tok2"], beam=2) == hub.translate(["tok1 tok2"], beam=2)
    with pytest.raises(UsageError) as refused:
        hub.translate([b"\xff tok1"])
    assert str(refused.value) == (
        "sentence 0 is bytes that are not UTF-8 (invalid start byte): give text"
    )


def test_encode_and_decode_refuse_what_is_no_text_or_no_ids_of_the_dictionary(
    san_checkpoint, binarized_corpus
):
    """encode() of a list of texts failed inside the tokenizer ("sequence item 0: expected str
    instance"), decode() of a text inside fairseq ("'<' not supported"), and decode() of an id
    outside the target dictionary returned "<unk>", without a word."""
    import torch

    from fairseq_san.errors import UsageError

    hub = from_pretrained(san_checkpoint.parent, san_checkpoint.name, binarized_corpus)
    tokens = hub.encode("tok1 tok2")
    assert hub.encode(b"tok1 tok2").tolist() == tokens.tolist()
    assert hub.decode(tokens) == hub.decode(tokens.tolist()) == "tok1 tok2"
    with pytest.raises(TypeError) as refused:
        hub.encode(["tok1", "tok2"])
    assert str(refused.value) == (
        "encode() takes one text (str), not list ['tok1', 'tok2'] (several texts: "
        "[hub.encode(text) for text in texts])"
    )
    for no_ids in ("tok1", ["tok1"], torch.tensor([1.0])):
        with pytest.raises(TypeError, match="^decode[(][)] takes token ids"):
            hub.decode(no_ids)
    entries = len(hub.tgt_dict)
    with pytest.raises(UsageError) as refused:
        hub.decode(torch.tensor([4, entries]))
    assert str(refused.value) == (
        f"decode() of token id {entries}, outside the model's target dictionary "
        f"(0..{entries - 1})"
    )


def test_generate_names_a_sentence_that_is_no_token_ids(san_checkpoint, binarized_corpus):
    """fairseq failed deep inside: a list of ints "'list' object has no attribute 'numel'", an id
    beyond the dictionary an IndexError, an empty tensor "cannot reshape tensor of 0 elements"."""
    import torch

    from fairseq_san.errors import UsageError

    hub = from_pretrained(san_checkpoint.parent, san_checkpoint.name, binarized_corpus)
    size, tokens = len(hub.task.source_dictionary), hub.encode("tok1")
    for sentences, error, said in (
        ([[5, 6, 2]], TypeError, "sentence 0 is list [5, 6, 2]: generate() takes a list of 1-D "
         "torch.long tensors of token ids (encode() makes them)"),
        ([hub.encode("tok1"), torch.tensor([size, 2])], UsageError, f"sentence 1 holds token id "
         f"{size}, outside the model's dictionary (0..{size - 1}): encode() the text with this "
         "model"),
        ([torch.tensor([], dtype=torch.long)], UsageError, "sentence 0 holds no token: encode() "
         "ends each with the end of sentence"),
        (torch.tensor(5), TypeError, "tokenized_sentences is Tensor tensor(5): generate() takes a "
         "list of 1-D torch.long tensors of token ids (encode() makes them), or one"),
        (None, TypeError, "tokenized_sentences is NoneType None: generate() takes a list of 1-D "
         "torch.long tensors of token ids (encode() makes them), or one"),
        ({tokens}, TypeError, f"tokenized_sentences is set {{{tokens!r}}}: generate() takes a "
         "list, whose outputs follow its order (a set has none: make it a list)"),
    ):  # fmt: skip
        with pytest.raises(error) as refused:
            hub.generate(sentences, beam=2)
        assert str(refused.value) == said
    assert hub.generate(hub.encode("tok1 tok2"), beam=2)[0]["tokens"].dim() == 1
    from_a_generator = hub.generate((hub.encode(text) for text in ["tok1", "tok2"]), beam=2)
    assert len(from_a_generator) == 2  # read once, by the check


def test_generates_own_arguments_are_checked(san_checkpoint, binarized_corpus):
    """fairseq used them unchecked: ``skip_invalid_size_inputs="False"`` (a true text) left
    long sentences out, an unknown ``inference_step_args`` key or a number for
    ``prefix_allowed_tokens_fn`` failed deep inside the search."""
    from fairseq_san.errors import UsageError

    hub = from_pretrained(san_checkpoint.parent, san_checkpoint.name, binarized_corpus)
    sentence = hub.encode("tok1 tok2")
    for arguments, error, said in (
        ({"skip_invalid_size_inputs": "False"}, TypeError, "skip_invalid_size_inputs='False': "
         "pass True or False"),
        ({"inference_step_args": {"prefix": 1}}, UsageError, "inference_step_args={'prefix': "
         "...}: the task's inference_step takes prefix_tokens, constraints"),
        ({"inference_step_args": [1]}, TypeError, "inference_step_args=[1]: pass a dict of the "
         "task's inference_step keywords (prefix_tokens, constraints)"),
        ({"prefix_allowed_tokens_fn": 5}, TypeError, "prefix_allowed_tokens_fn=5: pass a function "
         "of (batch id, prefix tokens) returning the allowed token ids, or None"),
    ):  # fmt: skip
        with pytest.raises(error) as refused:
            hub.generate([sentence], beam=2, **arguments)
        assert str(refused.value) == said


@pytest.mark.parametrize(
    "keywords, said",
    [
        ({"sampling": "False"}, "sampling='False' (a keyword of translate(), sample() or "
         "generate()): it takes True or False (leave it out for fairseq's default, False)"),
        ({"unnormalized": "False"}, "unnormalized='False' (a keyword of translate(), sample() or "
         "generate()): it takes True or False (leave it out for fairseq's default, False)"),
        ({"lenpen": None}, "lenpen=None (a keyword of translate(), sample() or generate()): it "
         "takes a number (leave it out for fairseq's default, 1)"),
        ({"min_len": 1.5}, "min_len=1.5 (a keyword of translate(), sample() or generate()): it "
         "takes an integer (leave it out for fairseq's default, 1)"),
        ({"sampling_topk": 3}, "sampling_topk=3 is read by sampling only: pass sampling=True "
         "too, or leave it out"),  # fairseq's assertion
    ],
)
def test_a_keyword_value_its_option_cannot_take_is_refused(
    san_checkpoint, binarized_corpus, keywords, said
):
    """fairseq set the hub's keywords on its generation config unchecked: a text is true, so
    ``sampling='False'`` sampled and ``unnormalized='False'`` left the scores unnormalized;
    ``lenpen=None`` failed deep inside the search."""
    from fairseq_san.errors import UsageError

    hub = from_pretrained(san_checkpoint.parent, san_checkpoint.name, binarized_corpus)
    with pytest.raises(UsageError) as refused:
        hub.translate("tok1 tok2", beam=2, **keywords)
    assert str(refused.value) == said
    with pytest.raises(UsageError) as refused:
        from_pretrained(san_checkpoint.parent, san_checkpoint.name, binarized_corpus,
                        generation_args=keywords)  # fmt: skip
    assert str(refused.value) == said.replace(
        "a keyword of translate(), sample() or generate()", "a key of from_pretrained's "
        "generation_args"
    )


def test_sentences_from_a_generator_are_translated(san_checkpoint, binarized_corpus,
                                                   language_model):  # fmt: skip
    """translate((line for line in lines)) returned [], the check of its items having read the
    generator; fairseq's own sample() reads any iterable once."""
    hub = from_pretrained(san_checkpoint.parent, san_checkpoint.name, binarized_corpus)
    texts = ["tok1 tok2 tok3", "tok4 tok5"]
    expected = hub.translate(texts, beam=2)
    assert len(expected) == 2
    assert hub.translate((text for text in texts), beam=2) == expected
    assert len(language_model.sample(iter(["tok1"]), beam=1, max_len_b=3)) == 1


def assert_a_sentence_beyond_a_batch_is_named(san_checkpoint, binarized_corpus) -> None:
    """A hub loaded with max_tokens=8 names a sentence of 10 tokens in its own words (fairseq's
    AssertionError "Sentences lengths should not exceed max_tokens=8")."""
    from fairseq_san.errors import UsageError

    small_batches = from_pretrained(san_checkpoint.parent, san_checkpoint.name, binarized_corpus,
                                     max_tokens=8)  # fmt: skip
    with pytest.raises(UsageError) as refused:
        small_batches.translate(["tok1 tok2", " ".join(["tok3"] * 9)], beam=2, max_len_b=3)
    assert str(refused.value) == (
        "sentence 1 is 10 tokens long (its end of sentence included), and a batch holds at most 8 "
        "(max_tokens, by default the training's --max-tokens): load the model with "
        "from_pretrained(..., max_tokens=10) or more"
    )


def test_a_sentence_longer_than_the_models_positions_is_named(san_checkpoint, binarized_corpus):
    """fairseq's batching said "Size of sample #1 is invalid (=(np.int64(P + 1), 0)) since
    max_positions=(P, P), skip this example with --skip-invalid-size-inputs-valid-test": a flag
    of fairseq-generate's, which the hub has not; its keyword still skips."""
    from fairseq_san.errors import UsageError

    hub = from_pretrained(san_checkpoint.parent, san_checkpoint.name, binarized_corpus)
    limit = hub.max_positions[0]
    texts = ["tok1 tok2", " ".join(["tok3"] * limit)]  # with its end of sentence: limit + 1
    with pytest.raises(UsageError) as refused:
        hub.translate(texts, beam=2, max_len_b=3)
    assert str(refused.value) == (
        f"sentence 1 is {limit + 1} tokens long (its end of sentence included), and the model "
        f"reads at most {limit}: shorten or split it, or pass skip_invalid_size_inputs=True to "
        "leave such sentences out (fairseq then returns no item for them, and the list is "
        "shorter than the sentences)"
    )
    kept = hub.translate(texts, beam=2, max_len_b=3, skip_invalid_size_inputs=True)
    assert kept == hub.translate(texts[:1], beam=2, max_len_b=3)
    # every sentence skipped: no item (it was the command line's "no sentence to batch")
    assert hub.translate(texts[1:], beam=2, skip_invalid_size_inputs=True) == []
    # within the positions, beyond a batch: fairseq's AssertionError "Sentences lengths should
    # not exceed max_tokens=8"
    assert_a_sentence_beyond_a_batch_is_named(san_checkpoint, binarized_corpus)


def test_a_sentence_beyond_a_batch_is_said_as_the_hub_takes_it_beside_a_command(
    san_checkpoint, binarized_corpus, monkeypatch
):
    """In a process that imported a fairseq command (the command line's batch fix installed),
    the hub said the command line's words: "of the data ... (--max-tokens; ...)"."""
    from fairseq.tasks import FairseqTask

    from fairseq_san.fairseq_fixes.batch_tokens import _naming_the_longest_sentence

    wrapped = _naming_the_longest_sentence(FairseqTask.get_batch_iterator)
    monkeypatch.setattr(FairseqTask, "get_batch_iterator", wrapped)
    assert_a_sentence_beyond_a_batch_is_named(san_checkpoint, binarized_corpus)


def test_generation_args_no_generator_reads_are_refused_before_loading(tmp_path):
    """``generation_args`` are the keywords of every call: those no generator reads were ignored
    too, except the ones the hub applies to the models as it builds them."""
    from fairseq_san.errors import UsageError
    from fairseq_san.hub_loading import check_generation_arg_keys

    with pytest.raises(UsageError) as refused:
        from_pretrained(str(tmp_path), generation_args={"beam": 3, "nbest": 1})  # nothing there
    assert str(refused.value) == NBEST_IGNORED.replace(
        "nbest=1", "nbest=1 (in from_pretrained's generation_args)"
    )
    check_generation_arg_keys({"retain_dropout": True, "no_beamable_mm": True})


def test_a_checkpoint_of_the_other_kind_of_model_is_refused(
    san_checkpoint, binarized_corpus, language_model
):
    """fairseq's from_pretrained returned the checkpoint's own kind of hub whatever class loaded
    it: TransformerLMSANModel.from_pretrained of a translation checkpoint translated in
    ``sample()``, and the reverse continued a text in ``translate()``."""
    from fairseq_san.errors import UsageError
    from fairseq_san.models.transformer_lm_san import TransformerLMSANModel

    with pytest.raises(UsageError) as refused:
        TransformerLMSANModel.from_pretrained(str(san_checkpoint.parent), san_checkpoint.name,
                                              str(binarized_corpus))  # fmt: skip
    assert str(refused.value) == (
        f"{san_checkpoint.name} is a translation model (TransformerSANModel), and "
        "TransformerLMSANModel.from_pretrained loads language models: load it with "
        "TransformerSANModel.from_pretrained"
    )
    folder, data = language_model.cfg.checkpoint.save_dir, language_model.cfg.task.data
    with pytest.raises(UsageError, match=r"^checkpoint_last\.pt is a language model \("):
        from_pretrained(folder, "checkpoint_last.pt", data)


@pytest.mark.parametrize(
    "key, value", [("decoder_attention_heads", 1), ("cross_self_attention", True),
                   ("activation_fn", "gelu")],
)  # fmt: skip
def test_an_override_that_changes_what_the_weights_compute_is_refused(
    san_checkpoint, binarized_corpus, key, value
):
    """More heads over the same projections, cross-attention over the target too, another
    activation: the weights loaded, and the model decoded another function, without a word
    (--model-overrides alike)."""
    from fairseq_san import checkpoints
    from fairseq_san.errors import UsageError

    trained = getattr(checkpoints.load_state(str(san_checkpoint))["cfg"]["model"], key)
    assert trained != value
    with pytest.raises(UsageError) as refused:
        from_pretrained(san_checkpoint.parent, san_checkpoint.name, binarized_corpus,
                        **{key: value})  # fmt: skip
    assert str(refused.value) == (
        f"{key} {value!r} (from --model-overrides or a keyword argument): this checkpoint was "
        f"trained with {key} {trained!r}, and its weights fit either, so the model would "
        "compute another function than it learned: leave it out"
    )
    from_pretrained(san_checkpoint.parent, san_checkpoint.name, binarized_corpus,
                    **{key: trained})  # fmt: skip


def test_the_reverse_direction_of_a_checkpoint_is_refused(san_checkpoint, binarized_corpus):
    """The hub takes the languages from its keywords (or the data's file names): the reverse of
    the checkpoint's decoded silently on joined dictionaries."""
    from fairseq_san.errors import UsageError

    with pytest.raises(UsageError) as refused:
        from_pretrained(san_checkpoint.parent, san_checkpoint.name, binarized_corpus,
                        source_lang="tgt", target_lang="src")  # fmt: skip
    assert str(refused.value).endswith(
        "give -s src -t tgt (source_lang='src', target_lang='tgt' to from_pretrained or in a "
        "fairseq-san-bench system's JSON)"
    )
    hub = from_pretrained(san_checkpoint.parent, san_checkpoint.name, binarized_corpus,
                          source_lang="src", target_lang="tgt")  # fmt: skip
    assert hub.translate("tok1 tok2 tok3", beam=1)


def test_data_without_the_models_dictionaries_is_named(san_checkpoint, binarized_corpus, tmp_path):
    """The data folder's default, '.', is the model's folder, which holds no dictionary: fairseq's
    "Could not infer language pair, please provide it explicitly"; a language model's data
    (dict.txt) for a translation checkpoint: the same line, as for a translation's dictionaries
    alone; translation data for a language model: a FileNotFoundError for DATA/dict.txt."""
    from fairseq_san.errors import UsageError
    from fairseq_san.hub_loading import data_problem

    with pytest.raises(UsageError) as refused:
        from_pretrained(san_checkpoint.parent, san_checkpoint.name)
    assert str(refused.value) == (
        f"from_pretrained(data_name_or_path='.'): {san_checkpoint.parent} holds no dictionary "
        "(dict.SRC.txt and dict.TGT.txt of a translation's data, dict.txt of a language model's) "
        "(the default, '.', is the model's folder): give the binarized data the model was "
        "trained on, or a folder with its dictionaries"
    )
    with pytest.raises(UsageError) as refused:  # the pair given: FileNotFoundError dict.src.txt
        from_pretrained(san_checkpoint.parent, san_checkpoint.name, source_lang="src",
                        target_lang="tgt")  # fmt: skip
    assert str(refused.value).startswith(
        f"from_pretrained(data_name_or_path='.'): {san_checkpoint.parent} holds no dictionary "
    )
    one_side = tmp_path / "one-side"
    one_side.mkdir()
    shutil.copy(binarized_corpus / "dict.src.txt", one_side)
    with pytest.raises(UsageError) as refused:
        from_pretrained(san_checkpoint.parent, san_checkpoint.name, str(one_side),
                        source_lang="src", target_lang="tgt")  # fmt: skip
    assert str(refused.value) == (
        f"from_pretrained(data_name_or_path={str(one_side)!r}): {one_side} holds no "
        "dict.tgt.txt, the dictionary of tgt, which the model translates (it holds those of "
        "src): give the binarized data the model was trained on"
    )
    shutil.copy(binarized_corpus / "dict.src.txt", tmp_path / "dict.txt")  # a language model's
    with pytest.raises(UsageError) as refused:
        from_pretrained(san_checkpoint.parent, san_checkpoint.name, str(tmp_path))
    assert str(refused.value) == (
        f"from_pretrained(data_name_or_path={str(tmp_path)!r}): {tmp_path} holds a language "
        "model's data (dict.txt), and this checkpoint translates, which needs dict.SRC.txt and "
        "dict.TGT.txt: give its data"
    )
    dictionaries = tmp_path / "dictionaries"  # no train.SRC-TGT.* to infer the pair from
    dictionaries.mkdir()
    for language in ("src", "tgt"):
        shutil.copy(binarized_corpus / f"dict.{language}.txt", dictionaries)
    with pytest.raises(UsageError) as refused:
        from_pretrained(san_checkpoint.parent, san_checkpoint.name, str(dictionaries))
    assert str(refused.value).endswith(
        f"{dictionaries} holds the dictionaries of src, tgt and no binarized data whose names say "
        "which language is the source (train.SRC-TGT.*): give the pair the model translates, "
        "from_pretrained(..., source_lang='src', target_lang='tgt')"
    )
    missing = FileNotFoundError(2, "No such file or directory", str(binarized_corpus / "dict.txt"))
    assert data_problem(binarized_corpus, str(binarized_corpus), missing).endswith(
        "holds a translation's data (dict.SRC.txt, dict.TGT.txt), and this checkpoint is a "
        "language model, whose task reads dict.txt (fairseq-preprocess --only-source output: "
        "examples/lm/prepare.sh): give its data"
    )
    assert data_problem(binarized_corpus, str(binarized_corpus), ValueError("other")) is None


def test_a_decoder_keyword_beside_a_task_dict_reaches_the_task(san_checkpoint, binarized_corpus):
    """fairseq sets a keyword on each group that has it, except a group given as a dict:
    ``task={'_name': 'translation_san'}, san_decoding='static'`` reached the model alone, and the
    model's refusal advised the command line's --san-decoding."""
    task = {"_name": "translation_san"}
    hub = from_pretrained(san_checkpoint.parent, san_checkpoint.name, binarized_corpus,
                          task=task, san_decoding="static")  # fmt: skip
    assert hub.task.cfg.san_decoding == "static" and task == {"_name": "translation_san"}
    fairseqs = from_pretrained(san_checkpoint.parent, san_checkpoint.name, binarized_corpus)
    sentences = ["tok1 tok2 tok3", "tok4 tok5"]
    assert hub.translate(sentences, beam=2) == fairseqs.translate(sentences, beam=2)


def test_a_task_option_outside_its_choices_is_one_line_at_load(san_checkpoint, binarized_corpus):
    """from_pretrained(..., san_decoding='statik') (or in the task's dict) raised omegaconf's
    ValidationError over three lines; translate()'s keyword had the one line. Now both, and the
    static decoder's precision too (it got omegaconf's list, no nearest choice); fairseq's own
    option outside its choices was omegaconf's first line, or loaded silently (log_format):
    now checked as an override, with the nearest choice."""
    from fairseq_san.errors import UsageError

    said = ("san_decoding='statik' is not valid; valid values: fairseq, no-cache, fast, static; "
            "did you mean 'static'?")  # fmt: skip
    in_task = {"_name": "translation_san", "san_decoding": "statik"}
    for keywords in (dict(san_decoding="statik"), dict(task=in_task)):
        with pytest.raises(UsageError) as refused:
            from_pretrained(san_checkpoint.parent, san_checkpoint.name, binarized_corpus,
                            **keywords)  # fmt: skip
        assert str(refused.value) == said
    with pytest.raises(UsageError) as refused:  # its choices a table's, not the option's
        from_pretrained(san_checkpoint.parent, san_checkpoint.name, binarized_corpus,
                        san_decoder_precision="bf61")  # fmt: skip
    assert str(refused.value).startswith("san_decoder_precision='bf61' is not valid; valid "
                                         "values: fp32, bf16, ")  # fmt: skip
    assert str(refused.value).endswith("; did you mean 'bf16'?")
    with pytest.raises(UsageError) as refused:
        from_pretrained(san_checkpoint.parent, san_checkpoint.name, binarized_corpus,
                        dataset_impl="mmapp")  # fmt: skip
    assert str(refused.value) == (
        "dataset_impl 'mmapp' (from --model-overrides or a keyword argument) is not valid; valid "
        "values: raw, lazy, cached, mmap, fasta, huffman; did you mean 'mmap'?"
    )
    with pytest.raises(UsageError, match="^log_format 'jsn' .*did you mean 'json'"):  # loaded
        from_pretrained(san_checkpoint.parent, san_checkpoint.name, binarized_corpus,
                        log_format="jsn")  # fmt: skip


def test_the_static_decoders_keywords_without_it_are_refused_at_load(san_checkpoint,
                                                                      binarized_corpus):
    """from_pretrained(san_decoder_precision='bf16') without san_decoding='static' loaded, and
    every call refused it: refused at load; with the static decoder it loads."""
    from fairseq_san.errors import UsageError

    for key, value in (("san_decoder_precision", "bf16"), ("san_decoder_execution", "graph")):
        with pytest.raises(UsageError) as refused:
            from_pretrained(san_checkpoint.parent, san_checkpoint.name, binarized_corpus,
                            **{key: value})  # fmt: skip
        assert str(refused.value) == (
            f"{key}={value!r} is an option of san_decoding='static', not of "
            f"san_decoding='fairseq', which decodes here: add san_decoding='static', or drop {key}"
        )
    from_pretrained(san_checkpoint.parent, san_checkpoint.name, binarized_corpus,
                    san_decoding="static", san_decoder_precision="bf16")  # fmt: skip


def test_an_ensemble_refused_by_the_static_decoder_is_said_in_the_hubs_words(san_checkpoint,
                                                                             binarized_corpus):
    """The static decoder's refusal of an ensemble named --path, which the hub has not."""
    from fairseq_san.errors import UsageError

    ensemble = f"{san_checkpoint.name}:{san_checkpoint.name}"
    hub = from_pretrained(san_checkpoint.parent, ensemble, binarized_corpus, san_decoding="static")
    with pytest.raises(UsageError) as refused:
        hub.translate("tok1 tok2 tok3")
    assert str(refused.value).startswith(
        "san_decoding='static' does not support ensembles (several checkpoints, as --path "
        "A.pt:B.pt or the hub's checkpoint_file='A.pt:B.pt' load them); decode with fairseq's "
    )


def test_length_keywords_no_search_can_follow_are_one_line(san_checkpoint, binarized_corpus):
    """min_len above a batch's longest output was fairseq's AssertionError ("min_len cannot be
    larger than max_len, please adjust these!"), max_len_b=inf an OverflowError, in either
    task's hub; now one line each, naming the options (above the model's positions, the advice
    to raise max_len_b, which cannot help there, is not given)."""
    from fairseq_san.errors import UsageError

    said = ("min_len=10 is above the longest output of a batch (max_len_a=0 x its source "
            "length + max_len_b=5, at most the model's positions - 1): lower min_len or "
            "raise max_len_b")  # fmt: skip
    for task in ("translation_san", "translation"):
        hub = from_pretrained(san_checkpoint.parent, san_checkpoint.name, binarized_corpus,
                              task={"_name": task})  # fmt: skip
        with pytest.raises(UsageError) as refused:
            hub.translate("tok1 tok2", beam=2, min_len=10, max_len_b=5, max_len_a=0)
        assert str(refused.value) == said, task
        positions = hub.models[0].max_decoder_positions()  # raising max_len_b cannot help
        with pytest.raises(UsageError) as refused:
            hub.translate("tok1 tok2", beam=2, min_len=positions, max_len_b=2 * positions)
        assert str(refused.value) == (
            f"min_len={positions} is above the longest output the model's {positions} positions "
            f"hold ({positions - 1} tokens, then the end of sentence; with lm_path, the fewer "
            f"of the two models' positions): lower min_len to at most {positions - 1}"
        ), task
        for keywords, shown in ((dict(max_len_b=float("inf")), "max_len_b=inf"),
                                (dict(min_len=2.5), "min_len=2.5")):  # fmt: skip
            with pytest.raises(UsageError) as refused:
                hub.translate("tok1 tok2", beam=2, **keywords)
            assert str(refused.value).startswith(
                f"{shown} (a keyword of translate(), sample() or generate()): it takes an integer"
            )
