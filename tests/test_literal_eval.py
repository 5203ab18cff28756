"""No string from a checkpoint reaches Python's ``eval()`` (fairseq_san/fairseq_fixes/literal_eval.py).

fairseq ``eval()``s some configuration strings (``adaptive_softmax_cutoff``, ``adam_betas``, ...);
torch's safe loader lets such strings through, so a checkpoint could run code while fairseq builds
its model. With the plugin loaded, a non-literal value is refused with one line naming the
checkpoint and the field, on every loading path, and nothing runs; legitimate values (fairseq's
own defaults among them) keep working.
"""

import argparse
import builtins
import dataclasses
import re
from pathlib import Path

import pytest
import torch

import fairseq_san  # noqa: F401  (registers the plugin: installs the fix)
from fairseq_san.fairseq_fixes.literal_eval import (
    EVALUATED_FIELDS,
    NotALiteral,
    evaluate,
)
from helpers import run_cli, train_argv

OPTIMIZER_FIELDS = {"adam_betas", "adamax_betas", "lamb_betas", "adafactor_eps"}


def code_that_touches(marker: Path) -> str:
    """A configuration value that, if evaluated, creates ``marker``, then reads as a list."""
    return f"__import__('pathlib').Path({str(marker)!r}).touch() or [100]"


# --- the evaluator -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["(0.9, 0.98)", "[10000, 20000]", "True", "1e-8", "(1e-30, 1e-3)", "{'a': [1, 2]}", "None",
     "[(512, 3)] * 20", "[(512, 10, 5)] + [(512, 3, 2)] * 4 + [(512,2,2)]", "-0.5", "1/3", "'x'"],
)  # fmt: skip
def test_literals_evaluate_as_python_does(text):
    assert evaluate(text) == builtins.eval(text)


@pytest.mark.parametrize(
    "text",
    ["__import__('os').system('true')", "open('/etc/passwd')", "x", "[1][0]", "(1).real",
     "[i for i in range(3)]", "lambda: 1", "{**{}}", "2 ** 8", "[0] * 10 ** 9", "[0] * 200000",
     "-'a'", "1 if True else 2", "", "1+" * 995 + "1", "-" * 100000 + "1"],
)  # fmt: skip
def test_anything_but_a_literal_is_refused(text):
    """Nested too deeply for the parser, the last two were a RecursionError or MemoryError
    traceback."""
    with pytest.raises(NotALiteral, match="refusing to evaluate"):
        evaluate(text)


@pytest.mark.parametrize(
    "text",
    ["[" + "[0] * 99999, " * 1000 + "]",  # 14 KB of text, 764 MB built: each repetition in bounds
     "'a' * 60000 + 'b' * 60000", "[0] * 60000 + [1] * 60000"],
)  # fmt: skip
def test_what_a_literal_builds_is_bounded_in_all_not_per_repetition(text):
    with pytest.raises(NotALiteral, match="repetitions or concatenations of more than 100000"):
        evaluate(text)
    # 25,000 + 25,000 items repeated, 50,000 concatenated: 100,000 built, the most there may be
    assert evaluate("[0] * 25000 + [1] * 25000") == [0] * 25000 + [1] * 25000


def test_how_deep_a_literal_may_nest_does_not_depend_on_the_recursion_limit():
    """"1+1+...+1" 996 deep was refused by the interpreter's recursion limit, and taken in a
    process where torch's inductor had raised it to 2000 (the full test run found it)."""
    import sys

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 5000))
    try:
        with pytest.raises(NotALiteral, match="nested more than 100 deep"):
            evaluate("1+" * 995 + "1")
    finally:
        sys.setrecursionlimit(limit)
    assert evaluate("1+" * 99 + "1") == 100


def test_non_strings_are_refused_as_eval_refuses_them():
    """A TypeError too, as eval's: fairseq's ``utils.eval_bool`` catches it for a value that is
    already a bool (its default then, as with eval)."""
    from fairseq import utils

    with pytest.raises(NotALiteral):
        evaluate(compile("1", "<x>", "eval"))
    with pytest.raises(TypeError):
        evaluate(True)
    assert utils.eval_bool(True, default="unchanged") == "unchanged"
    assert utils.eval_bool("True") is True


def fairseq_defaults():
    """(field, default) of every evaluated field in fairseq's dataclasses and architectures."""
    from fairseq.dataclass import FairseqDataclass
    from fairseq.models import ARCH_CONFIG_REGISTRY

    found = set()
    for architecture in ARCH_CONFIG_REGISTRY.values():
        args = argparse.Namespace()
        try:
            architecture(args)
        except Exception:  # some read fields set elsewhere; their defaults come from elsewhere
            pass
        found |= {(k, v) for k, v in vars(args).items() if isinstance(v, str)}
    pending = [FairseqDataclass]
    while pending:
        config = pending.pop()
        pending += config.__subclasses__()
        if dataclasses.is_dataclass(config):
            found |= {(f.name, f.default) for f in dataclasses.fields(config)
                      if isinstance(f.default, str)}  # fmt: skip
    return sorted((k, v) for k, v in found if k in EVALUATED_FIELDS)


def test_every_fairseq_default_of_an_evaluated_field_still_evaluates():
    defaults = fairseq_defaults()
    assert len(defaults) >= 30  # fconv's layer lists, the optimizers' betas, ...
    for field, default in defaults:
        assert evaluate(default) == builtins.eval(default), field


FAIRSEQ_EVAL = re.compile(
    r"(?:(?<![\w.])eval|eval_str_list|eval_str_dict|eval_bool)\(\s*(?:self\.)?(?:cfg|args)"
    r"(?:\.\w+)*?\.(\w+)\s*[,)]"
)


def test_the_table_names_every_field_fairseq_evaluates():
    """Read fairseq's installed source: a field it evaluates and the table misses fails here."""
    import fairseq

    root = Path(fairseq.__file__).parent
    sources = [p for p in root.rglob("*.py") if "examples" not in p.relative_to(root).parts]
    sources += list((root.parent / "fairseq_cli").rglob("*.py"))
    evaluated = {m for path in sources for m in FAIRSEQ_EVAL.findall(path.read_text())}
    assert len(evaluated) >= 25
    assert evaluated <= EVALUATED_FIELDS, sorted(evaluated - EVALUATED_FIELDS)


def test_fairseq_modules_that_call_eval_get_the_literal_evaluator(tmp_path):
    from fairseq import utils
    from fairseq.models import fconv
    from fairseq.optim import adam

    assert adam.eval is evaluate and fconv.eval is evaluate and utils.eval is evaluate
    assert utils.eval_str_list("[10000, 20000]", int) == [10000, 20000]
    assert utils.eval_bool("False") is False
    marker = tmp_path / "MARKER"
    with pytest.raises(NotALiteral):
        utils.eval_str_list(code_that_touches(marker), int)
    assert not marker.exists()
    assert builtins.eval("len('abc')") == 3  # Python's own eval is left alone


# --- checkpoints -------------------------------------------------------------------------------


def with_field(checkpoint: Path, out: Path, field: str, value: str) -> Path:
    """A copy of ``checkpoint`` whose saved configuration sets ``field`` to ``value``."""
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    section = "optimizer" if field in OPTIMIZER_FIELDS else "model"
    if field == "model_overrides":
        section = "common_eval"
    config = state["cfg"][section]
    if isinstance(config, argparse.Namespace):
        setattr(config, field, value)
    else:
        config[field] = value
    torch.save(state, out)
    return out


def refusal(path: Path, field: str) -> str:
    section = "optimizer" if field in OPTIMIZER_FIELDS else "model"
    section = "common_eval" if field == "model_overrides" else section
    return f"checkpoint {path}: cfg.{section}.{field} = "


@pytest.mark.slow
@pytest.mark.parametrize("field", sorted(EVALUATED_FIELDS))
def test_a_checkpoint_with_code_in_an_evaluated_field_is_refused_when_loaded(
    san_checkpoint, tmp_path, field
):
    from fairseq import checkpoint_utils

    marker = tmp_path / "MARKER"
    evil = with_field(san_checkpoint, tmp_path / "evil.pt", field, code_that_touches(marker))
    with pytest.raises(NotALiteral) as error:
        checkpoint_utils.load_checkpoint_to_cpu(str(evil))
    assert str(error.value).startswith(refusal(evil, field))
    assert "__import__('pathlib').Path(" in str(error.value)  # the value's first characters
    assert not marker.exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    "field, value",
    [("adam_betas", "(0.9, 0.98)"), ("adaptive_softmax_cutoff", "[10000, 20000]"),
     ("left_pad_source", "True")],
)  # fmt: skip
def test_legitimate_values_still_load(san_checkpoint, tmp_path, field, value):
    from fairseq import checkpoint_utils

    fine = with_field(san_checkpoint, tmp_path / "fine.pt", field, value)
    state = checkpoint_utils.load_checkpoint_to_cpu(str(fine))
    assert state["model"].keys() == torch.load(san_checkpoint, weights_only=True)["model"].keys()


@pytest.fixture
def evil(san_checkpoint, tmp_path):
    """(checkpoint whose adaptive_softmax_cutoff is code, the file that code would create)."""
    marker = tmp_path / "MARKER"
    path = with_field(
        san_checkpoint, tmp_path / "evil.pt", "adaptive_softmax_cutoff", code_that_touches(marker)
    )
    return path, marker


def assert_refused(result, evil_path: Path, marker: Path) -> None:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"fairseq-san: error: {refusal(evil_path, 'adaptive_softmax_cutoff')}"
    ), result.stderr[-3000:]
    assert not marker.exists()


def loading_command(path: str, data: Path, checkpoint: Path, tmp: Path):
    """(command, args, standard input) that loads ``checkpoint`` on loading path ``path``."""
    common = ["--user-dir", "fairseq_san", "--cpu"]
    train = train_argv(data, tmp / "train", 6, ["--task", "translation_san"])
    return {
        "generate": ("fairseq-generate", [str(data), "--path", str(checkpoint), *common], None),
        "interactive": (
            "fairseq-interactive", [str(data), "--path", str(checkpoint), *common], "tok1 tok2\n"
        ),
        "validate": (
            "fairseq-validate",
            [str(data), "--path", str(checkpoint), "--task", "translation", "--batch-size", "8",
             *common],
            None,
        ),
        "validate-analysis": (
            "fairseq-validate",
            [str(data), "--path", str(checkpoint), "--task", "translation_san",
             "--san-analysis-dir", str(tmp / "js"), "--batch-size", "8", *common],
            None,
        ),  # fmt: skip
        "restore-file": ("fairseq-train", [*train, "--restore-file", str(checkpoint)], None),
        "finetune-from-model": (
            "fairseq-train", [*train, "--finetune-from-model", str(checkpoint)], None
        ),
    }[path]


@pytest.mark.slow
@pytest.mark.parametrize(
    "path",
    ["generate", "interactive", "validate", "validate-analysis", "restore-file",
     "finetune-from-model"],
)  # fmt: skip
def test_every_command_refuses_the_checkpoint_before_running_its_code(
    binarized_corpus, evil, tmp_path, path
):
    evil_path, marker = evil
    command, args, stdin = loading_command(path, binarized_corpus, evil_path, tmp_path)
    result = run_cli(command, *args, input=stdin)
    assert_refused(result, evil_path, marker)


@pytest.mark.slow
def test_the_hub_refuses_the_checkpoint(binarized_corpus, evil):
    from fairseq_san.models.transformer_san import TransformerSANModel

    evil_path, marker = evil
    with pytest.raises(NotALiteral, match=re.escape(refusal(evil_path, "adaptive_softmax_cutoff"))):
        TransformerSANModel.from_pretrained(
            str(evil_path.parent), checkpoint_file=evil_path.name,
            data_name_or_path=str(binarized_corpus),
        )  # fmt: skip
    assert not marker.exists()


@pytest.mark.slow
def test_the_benchmark_refuses_the_checkpoint(binarized_corpus, evil, tmp_path):
    from fairseq_san.cli import bench

    evil_path, marker = evil
    with pytest.raises(SystemExit) as error:
        bench.main(
            ["--data", str(binarized_corpus), "--system", f"evil={evil_path}",
             "--out-dir", str(tmp_path / "bench"), "--cpu"]
        )  # fmt: skip
    assert str(error.value).startswith(
        f"fairseq-san-bench: error: {refusal(evil_path, 'adaptive_softmax_cutoff')}"
    )
    assert not marker.exists()
