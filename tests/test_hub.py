"""The Python API (fairseq's hub interface) and fairseq-interactive.

A tiny model is trained with ``--task translation_san`` on sentencepiece pieces of the synthetic
corpus, in the layout the README's example uses (``checkpoints/``, ``data-bin/multi30k.en-de/spm.model``).
The README's Python example runs verbatim; it must translate as fairseq-interactive does, with
the decode-time policy it passes as a keyword.
"""

import ast
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO, cli_env, run_cli, train_argv, write_corpus

POLICY = '{"decoder_self": [6], "decoder_encdec": [6]}'
DATA = "data-bin/multi30k.en-de"  # where examples/multi30k/prepare.sh en de writes


def readme_python_example() -> str:
    """The README's Python block that calls from_pretrained."""
    blocks = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), re.S)
    found = [block for block in blocks if "from_pretrained" in block]
    assert len(found) == 1, "the README has one Python example of from_pretrained"
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
    example = readme_python_example()
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
        "san_decoding='statc' is not one of this task's choices (fairseq, no-cache, fast, "
        "static): did you mean 'static'?"
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
