"""Every console command of setup.py answers --help at once: without importing fairseq; fairseq's
commands, with the plugin loaded, list the options of the components their command line chose.

Each command runs in a fresh interpreter that lists the fairseq modules loaded after --help.
"""

import argparse
import importlib
import re
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
COMMANDS = re.findall(r'"(fairseq-san-[\w-]+) = ', (REPO / "setup.py").read_text())

# Runs the console script given as argv[1] with the remaining arguments, as its shell wrapper
# does, then prints the fairseq modules it imported.
RUN_AND_LIST_FAIRSEQ = """
import runpy, sys
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit as exit:
    assert not exit.code, exit.code
print("fairseq modules:", sorted(m for m in sys.modules if m.split(".")[0] == "fairseq"))
"""


def test_setup_declares_the_commands():
    """A guard for the test below, parametrized over what ``COMMANDS`` reads from setup.py: were
    the regex to read nothing, that test would run no case and pass unseen."""
    assert set(COMMANDS) == {
        "fairseq-san-policy", "fairseq-san-plot-js", "fairseq-san-spm", "fairseq-san-bench",
        "fairseq-san-score", "fairseq-san-loop", "fairseq-san-cpu-ranks", "fairseq-san-average",
    }  # fmt: skip


@pytest.mark.parametrize("command", COMMANDS)
def test_help_runs_without_loading_fairseq(command):
    result = subprocess.run(
        [sys.executable, "-c", RUN_AND_LIST_FAIRSEQ, str(BIN / command), "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("usage: "), result.stdout[:500]
    assert result.stdout.splitlines()[-1] == "fairseq modules: []"


def test_bench_help_shows_a_default_only_where_there_is_a_value():
    """No "(default: None)" on a required option, no "(default: True)" on a switch, and one
    default where the help already names it (--baseline: the first system)."""
    from fairseq_san.cli.bench import build_parser

    text = " ".join(build_parser().format_help().split())
    assert not re.findall(r"\(default: (?:None|True|False|auto)\)", text)
    assert "--batch-size BATCH_SIZE sentences per batch (default: 16)" in text
    assert "(default: the first)" in text and "(default: the first) (default:" not in text


def test_score_help_says_where_the_seeds_test_samples_its_splits():
    """--baseline's help called the seeds' test exact; above MAX_EXACT_SPLITS it samples."""
    from fairseq_san.cli.score import build_parser

    text = " ".join(build_parser().format_help().split())
    assert ("by the permutation test of the seeds' BLEU (exact up to 200,000 splits of them, "
            "else a seeded sample of 100,000)") in text


def test_cpu_ranks_help_names_the_log_folder_as_its_usage_does(capsys):
    """The usage line said --log-dir DIR, the option's own line --log-dir LOG_DIR."""
    from fairseq_san.cli.cpu_ranks import main

    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert "[--log-dir DIR]" in text and "--log-dir DIR " in text and "LOG_DIR" not in text


@pytest.mark.parametrize(
    "parser, argv, listed",
    [
        ("get_training_parser", ["data", "--arch", "transformer_san", "--task", "translation_san"],
         ["--san-decoder-self-policy", "--san-decoding", "--encoder-layers"]),
        ("get_training_parser", ["--arch", "transformer_lm_san", "--task", "language_modeling_san",
                                 "--criterion", "label_smoothed_cross_entropy"],
         ["--san-decoder-self-policy", "--label-smoothing", "--tokens-per-sample"]),  # no data
        ("get_generation_parser", ["data", "--task", "translation_san"],
         ["--san-decoding", "--san-decoder-precision"]),
        ("get_training_parser", [], ["--arch", "--task"]),  # nothing chosen: fairseq's own help
        ("get_training_parser", ["--arch", "nosuch"], ["--arch", "--task"]),
    ],
)  # fmt: skip
def test_fairseqs_help_lists_the_chosen_components_options(capsys, parser, argv, listed):
    """fairseq printed its help at its first parse, before it added the options of --arch, --task,
    --criterion, ...: the plugin's were never listed (nor the chosen model's)."""
    from fairseq import options

    import fairseq_san  # noqa: F401  (registers the plugin, as --user-dir does)

    for flag in ("--help", "-h"):
        with pytest.raises(SystemExit) as exit:
            options.parse_args_and_arch(getattr(options, parser)(), [*argv, flag])
        assert exit.value.code == 0
        printed = capsys.readouterr()
        assert printed.out.startswith("usage: ") and not printed.err, printed.err
        for option in listed:
            assert f"{option} " in printed.out, option


def parsers_of(command: str, argv: List[str], monkeypatch) -> List[argparse.ArgumentParser]:
    """The parser ``command``'s main parses ``argv`` with, and its subcommands' parsers."""
    module = re.search(rf'"{command} = ([\w.]+):main"', (REPO / "setup.py").read_text())[1]
    seen: List[argparse.ArgumentParser] = []

    def caught(parser, *args, **kwargs):
        seen.append(parser)
        raise SystemExit(0)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", caught)
    with pytest.raises(SystemExit):
        importlib.import_module(module).main(argv)
    parsers = seen[:1]
    for parser in parsers:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                parsers += [sub for sub in action.choices.values() if sub not in parsers]
    return parsers


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_of_a_command_says_what_it_is_in_its_help(command, monkeypatch):
    """``fairseq-san-spm train --help`` listed --vocab-size and --model-type, and
    ``fairseq-san-bench steps --help`` --vocab, --beam, --rounds ..., with no word and no
    default: docs/usage.md sends readers to --help for what an option does."""
    argvs = [["--help"]] + ([["steps", "--help"]] if command == "fairseq-san-bench" else [])
    bare = [
        f"{parser.prog} {action.option_strings[0]}"
        for argv in argvs
        for parser in parsers_of(command, argv, monkeypatch)
        for action in parser._actions
        if action.option_strings and action.help != argparse.SUPPRESS and not action.help
    ]
    assert not bare, bare


DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]  # not docs/results/*
SUBCOMMANDS = {"fairseq-san-spm": ("train", "encode", "decode"), "fairseq-san-bench": ("steps",)}


def documented_invocations() -> List[tuple]:
    """(doc, command, subcommand or "", the options written after it) of every fairseq-san
    command line in a code block or a code span of the README and docs/*.md (not the messages
    they quote)."""
    found = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        blocks = re.findall(r"```[a-z]*\n(.*?)```", text, re.S)
        lines = [line for block in blocks for line in block.replace("\\\n", " ").splitlines()]
        spans = re.findall(r"`([^`]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
        for line in lines + [" ".join(span.split()) for span in spans]:
            for match in re.finditer(r"\b(fairseq-san-[\w-]+)([^|;&#`)]*)", line):
                words = match[2].split()
                if match[2].startswith(":") or words[:1] and words[0].endswith(":"):
                    continue  # a message the command prints ("PROG: error: ..."), no command
                if "--" in words:
                    words = words[: words.index("--")]
                subcommands = SUBCOMMANDS.get(match[1], ())
                if match[1] == "fairseq-san-loop":
                    subcommands = tuple(loop_subcommands())
                sub = words[0] if words and words[0] in subcommands else ""
                flags = [w.split("=")[0] for w in words if re.fullmatch(r"--?[a-z][\w-]*(=.*)?", w)]
                found.append((doc.name, match[1], sub, [f for f in flags if f[-1] != "-"]))
    return found


def loop_subcommands() -> List[str]:
    from fairseq_san.cli.loop import build_parser

    action = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return list(action.choices)


def test_every_option_the_docs_give_a_command_is_one_it_takes(monkeypatch):
    """A command line of the README or docs/*.md names only options its command (or subcommand)
    has, spelt as its parser spells them."""
    invocations = documented_invocations()
    assert len(invocations) > 20  # the pattern still finds the docs' command lines
    flags = {}
    unknown = []
    for doc, command, sub, written in invocations:
        key = (command, sub)
        if key not in flags:
            argv = ([sub] if sub else []) + ["--help"]
            parsers = parsers_of(command, argv, monkeypatch)
            parser = next(p for p in parsers if not sub or p.prog.endswith(f" {sub}"))
            flags[key] = {s for a in parser._actions for s in a.option_strings}
        unknown += [f"{doc}: {command} {sub} {flag}" for flag in written if flag not in flags[key]]
    assert not unknown, unknown


def test_subwords_and_scores_import_no_numpy():
    """fairseq-san-spm (prepare.sh: encode per split and language) and fairseq-san-score (per
    system and iteration) imported numpy with ``fairseq_san.scoring``, which only its significance
    tests use: about 0.1 s of each command's start, and all of --help's."""
    from helpers import heavy_modules_imported

    program = (
        "import fairseq_san.cli.subwords, fairseq_san.cli.score\n"
        "from fairseq_san.scoring import corpus_scores\n"
        "assert corpus_scores(['a cat sat on the mat'], ['a cat sat on the mat'])['bleu'] == 100\n"
    )
    assert heavy_modules_imported(program) == []
