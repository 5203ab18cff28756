"""How the plugin reports bad input: one line ``fairseq-san: error: ...``, never a traceback.

fairseq's commands have no hook for a plugin's errors, so ``fairseq_san`` installs
``excepthook`` when fairseq loads it (``--user-dir``; ``fairseq_fixes.one_line_errors``). It
prints as one line

* a ``UsageError`` (e.g. a ``PolicyError``), also when fairseq re-raised it as another
  exception: its trainer turns any error while loading a checkpoint into "please ensure that
  the architectures match", with ours as the context;
* a missing file or directory that the command line names (e.g. a data directory), or a missing
  file in a directory it names (a data directory without a dictionary), which fairseq's tasks
  hit deep inside their set-up.

Everything else keeps its traceback. Pure Python: the policy tools import it without torch.
"""

import contextlib
import difflib
import os
import sys
from typing import Callable, Collection, Iterator, Optional

PREFIX = "fairseq-san: error: "


class UsageError(ValueError):
    """Bad input; the message names the problem and the fix."""


def nearest_key(key: str, valid: Collection[str]) -> Optional[str]:
    """The valid key nearest to a misspelt one (difflib), if one is near."""
    near = difflib.get_close_matches(key, sorted(valid), n=1)
    return near[0] if near else None


def nearest_key_hint(key: str, valid: Collection[str]) -> str:
    """"did you mean 'K'?" for the valid key nearest to a misspelt one, else the list."""
    near = nearest_key(key, valid)
    return f"did you mean '{near}'?" if near else f"valid: {', '.join(sorted(valid))}"


@contextlib.contextmanager
def utf8_text(path: str) -> Iterator[None]:
    """Reading ``path`` as UTF-8: a byte that is not UTF-8 is a UsageError naming the file."""
    try:
        yield
    except UnicodeDecodeError as err:
        raise UsageError(
            f"{path} is not UTF-8 text ({err.reason}, byte {err.object[err.start:err.start + 1]!r}):"
            " convert it to UTF-8 first (e.g. iconv -t utf-8)"
        ) from None


def usage_error_in_chain(exc: BaseException) -> Optional[UsageError]:
    """``exc`` or the UsageError it was raised from or while handling, if any."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, UsageError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def names_a_command_line_path(exc: BaseException, argv: list) -> bool:
    """Whether ``exc`` is a FileNotFoundError for a path given on the command line, or for a
    file in a directory given there (a data directory without its ``dict.LANG.txt``)."""
    if not isinstance(exc, FileNotFoundError) or not exc.filename:
        return False
    missing = os.path.normpath(str(exc.filename))
    # fairseq takes several data directories as DIR1:DIR2
    given = {os.path.normpath(part) for arg in argv for part in arg.split(os.pathsep) if part}
    return missing in given or os.path.dirname(missing) in given


def excepthook(previous: Callable) -> Callable:
    """A ``sys.excepthook`` that prints bad input as one line and defers to ``previous``."""

    def hook(exc_type, exc, traceback):
        usage = usage_error_in_chain(exc)
        if usage is not None:
            print(PREFIX + str(usage), file=sys.stderr)
        elif names_a_command_line_path(exc, sys.argv[1:]):
            print(f"{PREFIX}{exc.filename}: {exc.strerror}", file=sys.stderr)
        else:
            previous(exc_type, exc, traceback)

    hook.prints_one_line = True
    return hook
