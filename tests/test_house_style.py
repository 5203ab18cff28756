"""The house's line length: at most 100 characters in the plugin, its scripts, the converged
campaign's code (the tests quote long messages whole; docs/results' other scripts are kept as
their runs used them)."""

from helpers import REPO

KEPT = ("fairseq_san", "scripts", "docs/results/converged")
LIMIT = 100


def test_no_line_is_longer_than_100_characters():
    long_lines = [
        f"{path.relative_to(REPO)}:{number} ({len(line)} characters)"
        for folder in KEPT
        for path in sorted((REPO / folder).rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if len(line) > LIMIT
    ]
    assert not long_lines, "lines over 100 characters:\n" + "\n".join(long_lines)
