"""The error messages docs/troubleshooting.md quotes are still said by the code.

Each message the guide quotes in bold (**`...`**) must share RUN words in a row with a string
the code writes: a Python string literal, not a docstring (up to two of the words may stand for
an f-string's fields), or a shell recipe's text, not its comments (its variables likewise). A
message that no code says any more (reworded past recognition, or its check removed) fails
here, naming it, so that its entry is updated or dropped. Example values and placeholders
(``N``, ``PATH``, ``'bema'``) need not occur."""

import ast
import re
from itertools import combinations
from pathlib import Path
from typing import Iterator, List, Set

from helpers import REPO

GUIDE = REPO / "docs" / "troubleshooting.md"
FIELD = "\x00"  # where a string's text comes from a variable
RUN = 4  # words in a row that a message shares with the code (fewer where it has no such run)

# Quoted messages that fairseq, torch, Python, the C++ runtime or matplotlib say, not the plugin.
UPSTREAM = (
    "AssertionError: Could not infer task type",
    "DEBUG:matplotlib.font_manager:findfont",
    "fairseq-san: error: PATH: No such file or directory",  # the OSError's own words
    "fairseq-san: error: Size of S-N is invalid",  # fairseq's words, its sample numbered
    "FileNotFoundError: /some/folder/fairseq_san",
    "IndexError: index out of range in self",
    "IndexError: list index out of range",
    "IndexError: Replacement index 1 out of range",
    "Please install X with: pip install Y",
    "RuntimeError: invalid multinomial distribution",
    "terminate called without an active exception",
    "UnpicklingError: Weights only load failed",
    "ValueError: Provided Search parameters are mutually exclusive.",
)
# The plugin's messages assembled from parts (a table's, an error's), no four words in one string.
ASSEMBLED = (
    "--bpe sentencepiece needs --sentencepiece-model",  # one_line_errors: "--{group} {name} ..."
    "--ddp-backend fully_sharded needs the fairscale package",  # training_backends' rows
    "--model-overrides: refusing to evaluate",  # the flag, then literal_eval's error
    "--model-parallel-size 2 needs fairseq's megatron submodule",  # training_backends' rows
    "--run-dir -r starts with '-'",  # check_no_leading_dash: the flag, then its problem
    "--use-plasma-view needs pyarrow's plasma store",  # training_backends' rows
    "the dictionary's end-of-sentence symbol",  # special_symbols: "{meaning}-of-sentence"
)

# Words that stand for a value: placeholders (N, PATH, DATA/x), numbers, quoted or bracketed text.
VALUE = re.compile(
    r".*[\d{}\[\]=<>]|\(?['\"].*|.*['\"][,.:;)?]*$"  # numbers, quoted or bracketed text
    r"|[A-Z][A-Z0-9_]*([,.:;)/].*)?$|\([A-Z][A-Z0-9_]*\)"  # placeholders
)
PREFIX = re.compile(r"^([\w.-]+( \w+)?: (error|warning): |[\w-]+\.sh: (\w+: )?)")
EDGES = " ,.:;()"
DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def docstrings(tree: ast.AST) -> Set[int]:
    """The ids of the docstring nodes of ``tree``, which explain messages rather than say them."""
    return {
        id(node.body[0].value) for node in ast.walk(tree)
        if isinstance(node, DOCUMENTED) and node.body and isinstance(node.body[0], ast.Expr)
    }  # fmt: skip


def python_strings(path: Path) -> Iterator[str]:
    """The string literals of a Python file but its docstrings, an f-string's fields as FIELD."""
    tree = ast.parse(path.read_text())
    skipped = docstrings(tree)
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.JoinedStr):
            yield "".join(v.value if isinstance(v, ast.Constant) else FIELD for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value


def shell_text(path: Path) -> str:
    """A shell script's text but its comments, its variables and command substitutions as FIELD
    and an echo's arguments continued over lines joined."""
    text = re.sub(r"^\s*#.*\n", "", path.read_text(), flags=re.M)
    text = re.sub(r'"\s*\\\n\s*"', " ", text)
    return re.sub(r"\$\{[^}]*\}|\$\([^)]*\)|\$\w+", FIELD, text)


def source_text() -> str:
    """Every string the plugin, its recipes and its scripts can print, whitespace collapsed."""
    parts: List[str] = []
    for folder in ("fairseq_san", "examples", "scripts", "docs/results"):
        for path in sorted((REPO / folder).rglob("*")):
            if "__pycache__" in path.parts:  # compiled, written by a test run
                continue
            if path.suffix == ".py":
                parts.extend(python_strings(path))
            elif path.suffix == ".sh" or (path.is_file() and folder == "scripts"):
                parts.append(shell_text(path))
    return re.sub(r"\s+", " ", FIELD.join(parts))


def quoted_messages() -> List[str]:
    """The guide's bold code spans, each on one line."""
    return re.findall(r"\*\*`([^`]+)`\*\*", re.sub(r"\s*\n\s*", " ", GUIDE.read_text()))


def said(words: List[str], text: str) -> bool:
    """Whether ``words`` occur in ``text`` in a row, up to two of them perhaps fields."""
    for count in range(3):
        for fields in combinations(range(len(words)), count):
            shown = [re.sub(r"^\(?[^\s,.:;()]+", FIELD, w) if k in fields else w
                     for k, w in enumerate(words)]  # fmt: skip
            if " ".join(shown).strip(EDGES) in text:
                return True
    return False


def needed_run(words: List[str]) -> int:
    """RUN, or the message's longest run of words that stand for no value where shorter."""
    longest = current = 0
    for word in words:
        current = 0 if VALUE.match(word) else current + 1
        longest = max(longest, current)
    return min(RUN, longest)


def is_said(message: str, text: str) -> bool:
    """Whether the code says ``message``: ``needed_run`` of its words in a row, its program's
    prefix and its elisions (...) left out."""
    words = PREFIX.sub("", message).replace("...", " ").split()
    need = needed_run(words)
    return any(said(words[i:i + need], text) for i in range(len(words) - need + 1))


def test_every_message_the_troubleshooting_guide_quotes_is_said_by_the_code():
    text = source_text()
    messages = quoted_messages()
    assert len(messages) > 300  # the guide's entries, not a pattern that matches nothing
    kept = [m for m in messages if not m.startswith(UPSTREAM + ASSEMBLED)]
    stale = [message for message in kept if not is_said(message, text)]
    assert not stale, "docs/troubleshooting.md quotes messages no code says:\n" + "\n".join(stale)
