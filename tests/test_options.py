"""The options schema (``fairseq_san.options``): one table read by the model, the task and the
benchmark; one decoding switch, ``--san-decoding``, whose old flags still work and warn once."""

import argparse
import ast
import logging
import re
import warnings
from typing import List

import pytest

from helpers import REPO, build, make_dictionary, parse_args
from fairseq_san import options
from fairseq_san.models.transformer_lm_san import TransformerLMSANModel
from fairseq_san.models.transformer_san import TransformerSANModel
from fairseq_san.static_decoding import StaticSequenceGenerator
from fairseq_san.tasks.language_modeling_san import LanguageModelingSANConfig
from fairseq_san.tasks.translation_san import TranslationSANConfig, TranslationSANTask

DICT = make_dictionary(24)


@pytest.fixture(autouse=True)
def warn_again(monkeypatch):
    """Each test sees the once-per-process deprecation warnings afresh."""
    monkeypatch.setattr(options, "_warned", set())


def test_a_flag_and_its_option_name_are_each_others_inverse():
    """argparse's dest of each plugin flag is the option's name (what ``name_of`` reads)."""
    for model in (TransformerSANModel, TransformerLMSANModel):
        parser = argparse.ArgumentParser(add_help=False)
        model.add_args(parser)
        for action in parser._actions:
            assert options.name_of(options.flag_of(action.dest)) == action.dest
            assert options.flag_of(action.dest) in action.option_strings
    assert options.name_of("--max-len-a") == "max_len_a"


def test_option_names_are_the_model_flags_and_the_task_fields():
    """What the throwaway parser used to find: every ``san_*`` flag and task field (translation
    and language model), and no more."""
    names = set()
    for model in (TransformerSANModel, TransformerLMSANModel):
        parser = argparse.ArgumentParser(add_help=False)
        model.add_args(parser)
        names |= {action.dest for action in parser._actions}
    names |= set(TranslationSANConfig.__dataclass_fields__)
    names |= set(LanguageModelingSANConfig.__dataclass_fields__)
    assert options.option_names() == tuple(sorted(n for n in names if n.startswith("san_")))


@pytest.mark.parametrize("model", [TransformerSANModel, TransformerLMSANModel])
def test_model_options_join_the_group_fairseq_passes_and_show_in_its_help(model):
    """fairseq gives add_args its "Model-specific configuration" group: the SAN options go in it.
    A group nested in it is deprecated (Python 3.11) and argparse leaves its options out of the
    help."""
    parser = argparse.ArgumentParser(add_help=False)
    group = parser.add_argument_group("Model-specific configuration")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.add_args(group)
    assert not [w for w in caught if "Nesting argument groups" in str(w.message)]
    assert "--san-policy" in parser.format_help() and "--san-decoder-self-policy" in parser.format_help()


def imported_modules(tree: ast.AST, package: str) -> List[str]:
    """Every module an ``import`` or ``from ... import`` of ``tree`` names, relative ones resolved
    against ``package`` (the module's own package)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            module = ".".join(base + [node.module or ""]) if node.level else node.module
            found += [module.rstrip(".")] + [f"{module.rstrip('.')}.{a.name}" for a in node.names]
    return found


def test_the_model_does_not_import_the_task():
    for path in (REPO / "fairseq_san" / "models").glob("*.py"):
        modules = imported_modules(ast.parse(path.read_text()), "fairseq_san.models")
        assert not [m for m in modules if m.startswith("fairseq_san.tasks")], path.name


@pytest.mark.parametrize(
    "argv, decoding",
    [
        ([], "fairseq"),
        (["--san-no-cache"], "no-cache"),
        (["--san-fast-decoding"], "fast"),
        (["--san-no-cache", "--san-fast-decoding"], "no-cache"),  # the cache-free step won
    ],
)
def test_old_model_flags_map_to_san_decoding_and_warn_once(argv, decoding, caplog):
    with caplog.at_level(logging.WARNING, logger="fairseq_san.options"):
        model, args = build(argv, dictionary=DICT)
        build(argv, dictionary=DICT)
    assert getattr(args, "san_decoding", "fairseq") == decoding  # saved besides the old key
    assert model.decoder.recompute_prefix == (decoding == "no-cache")
    assert model.fast_decoding == (decoding == "fast")
    warnings = [r.getMessage() for r in caplog.records if "deprecated" in r.getMessage()]
    assert len(warnings) == len(argv)
    for flag in argv:
        assert any(w.startswith(f"{flag} is deprecated: use --san-decoding") for w in warnings)


@pytest.mark.parametrize("decoding", ["no-cache", "fast"])
def test_san_decoding_in_the_model_options_sets_the_model(decoding, caplog):
    """As ``--model-overrides "{'san_decoding': ...}"`` sets it on a checkpoint's arguments."""
    args = parse_args("transformer_san", ["--encoder-layers", "2", "--decoder-layers", "2"])
    args.san_decoding = decoding
    with caplog.at_level(logging.WARNING):
        model = TransformerSANModel.build_model(args, StandIn())
    assert model.decoder.recompute_prefix == (decoding == "no-cache")
    assert model.fast_decoding == (decoding == "fast")
    assert "deprecated" not in caplog.text


class StandIn:
    source_dictionary = target_dictionary = DICT


def generation_args(**given) -> argparse.Namespace:
    return argparse.Namespace(beam=2, max_len_a=0, max_len_b=5, min_len=1, lenpen=1.0, **given)


@pytest.mark.parametrize(
    "task_options, static, recompute, fast, warned",
    [
        ({}, False, False, False, False),
        ({"san_decoding": "static"}, True, False, False, False),
        ({"san_decoder": "static"}, True, False, False, True),
        ({"san_decoding": "no-cache"}, False, True, False, False),
        ({"san_decoding": "fast"}, False, False, True, False),
    ],
)
def test_the_task_applies_san_decoding(task_options, static, recompute, fast, warned, caplog):
    task = TranslationSANTask(TranslationSANConfig(**task_options), DICT, DICT)
    model, _ = build(dictionary=DICT)
    with caplog.at_level(logging.WARNING, logger="fairseq_san.options"):
        generator = task.build_generator([model], generation_args())
    assert isinstance(generator, StaticSequenceGenerator) == static
    assert (model.decoder.recompute_prefix, model.fast_decoding) == (recompute, fast)
    assert ("--san-decoder static is deprecated: use --san-decoding static" in caplog.text) == warned


def test_static_san_decoding_as_a_model_option_is_refused_with_the_flag_that_works():
    from fairseq_san.errors import UsageError

    args = parse_args("transformer_san", ["--encoder-layers", "2", "--decoder-layers", "2"])
    args.san_decoding = "static"
    stand_in = StandIn()
    stand_in.cfg = TranslationSANConfig()
    with pytest.raises(UsageError, match="Pass --san-decoding static on the command line"):
        TransformerSANModel.build_model(args, stand_in)


def test_benchmark_reads_san_decoding():
    from fairseq_san.benchmark.config import parse_system

    static = parse_system('s=m.pt:{"san_decoding": "static", "san_decoder_precision": "bf16"}')
    assert (static.decoder, static.decoder_precision, static.model_overrides) == (
        "static", "bf16", {}
    )
    fast = parse_system('f=m.pt:{"san_decoding": "fast"}')
    assert (fast.decoder, fast.model_overrides) == ("fairseq", {"san_decoding": "fast"})
    valid = {"san_policy", "dropout"}  # a transformer_san checkpoint saved before san_decoding
    fast.check_overrides(valid, ("fp32",))
    with pytest.raises(ValueError, match="san_decoding must be one of .*not 'fsat'"):
        parse_system('f=m.pt:{"san_decoding": "fsat"}').check_overrides(valid, ("fp32",))
    with pytest.raises(ValueError, match="'fast' needs a transformer_san checkpoint"):
        fast.check_overrides({"dropout"}, ("fp32",))  # fairseq's transformer would ignore it


def test_bench_help_names_the_decoder_keys_and_the_decodings():
    from fairseq_san.cli.bench import build_parser

    text = " ".join(build_parser().format_help().split())
    assert "san_decoding (fairseq, no-cache, fast, static) and san_decoder_precision" in text


def test_every_san_flag_the_docs_name_is_an_option():
    """Each ``--san-*`` flag of the README and docs/*.md is one of the table's, spelt as it is
    (not a prefix such as ``--san-analysis-max-``, nor the misspelling that
    troubleshooting.md quotes from fairseq-train's refusal)."""
    misspelt = {"--san-decoder-self-polcy"}
    flags = {option.flag for option in options.OPTIONS.values()}
    flags |= {option.flag for option in options.POLICY_OPTIONS.values()}
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        named = set(re.findall(r"--san-[a-z-]*[a-z](?![\w-])", doc.read_text(encoding="utf-8")))
        assert not named - flags - misspelt, doc.name


def test_a_programs_argv_may_hold_none_as_fairseqs_parser_takes_it():
    """fairseq's parser takes ``None`` as an option's value (fairseq's own tests pass
    ``--save-dir None``, and it reads "None"); the plugin's checks of the command line failed
    on it (an AttributeError: 'NoneType' object has no attribute 'startswith')."""
    assert parse_args("transformer", ["--save-dir", None]).save_dir == "None"
