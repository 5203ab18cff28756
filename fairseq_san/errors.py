"""How the plugin reports bad input: a ``UsageError`` whose message names the problem and the way
out, printed as one line ``fairseq-san: error: ...`` (``PREFIX``), never a traceback: by the
plugin's own commands, and in fairseq's by the hook of ``fairseq_fixes.one_line_errors``.

Pure Python: the policy tools import it without torch.
"""

import contextlib
import difflib
import errno
import os
from typing import Collection, Hashable, Iterator, Optional, Sequence

PREFIX = "fairseq-san: error: "
# The environment variable naming a file where a fairseq command also writes the one line it
# printed as its error (fairseq-san-cpu-ranks gives rank 0 one: its error is on the terminal).
ERROR_COPY = "FAIRSEQ_SAN_ERROR_COPY"
# Where a checkpoint's options that no command-line parser checked came from: the overrides
# fairseq sets on its configuration, and any value of the configuration it built (a file edited or
# made by hand holds values fairseq-train would have refused).
OVERRIDE_SOURCE = "(from --model-overrides or a keyword argument)"
STORED_SOURCE = "(from the checkpoint, --model-overrides or a keyword argument)"


def first_line(error: BaseException) -> str:
    """The first line of an error's message (torch's and CUDA's run on), or its type's name."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


# What a command says of a standard stream it was started without (``<&-``).
CLOSED_STREAM = "is closed (the command was started without one)"


def file_error(error: OSError) -> str:
    """An error of the file system as the commands say it: the path, then the system's words
    (``data/ref.de: No such file or directory``), not Python's ``[Errno 2] ...``."""
    if error.filename is None or not error.strerror:
        return str(error)
    if closed_stream(error):
        return f"{error.filename} {CLOSED_STREAM}: name a file"
    return f"{error.filename}: {error.strerror}"


def closed_stream(error: OSError) -> bool:
    """Whether ``error`` is opening "-" (``files.Stream``) in a command started with that stream
    closed (``<&-``): ``/dev/stdin`` then names nothing, and "No such file or directory" misled."""
    return hasattr(error.filename, "said") and error.errno in (errno.ENOENT, errno.EBADF)


class UsageError(ValueError):
    """Bad input; the message names the problem and the fix."""


class RecipeError(Exception):
    """What stops a recipe before its expensive step, asked through ``fairseq-san-loop``: the
    line that says why, printed after the recipe's name (``recipe``), and the exit status."""

    def __init__(self, recipe: str, message: str, status: int) -> None:
        super().__init__(message)
        self.recipe = recipe
        self.status = status


class BosTokenUnlikeTask(UsageError):
    """The error for a language model loaded by a task of another ``--add-bos-token`` than it
    was ``trained`` with (``option_checks.bos_token_unlike_training``), which the hub words again
    for its ``task`` and ensembles, and fairseq's commands for an ensemble (``model_overrides``)."""

    def __init__(self, message: str, trained: bool = False) -> None:
        super().__init__(message)
        self.trained = trained


class NotThePluginsModel(UsageError):
    """The error for a plugin option given to a model that is none of the plugin's (fairseq's
    ``transformer``), which reads none: ``key`` and ``value`` as given (the hub words it again
    for a decoder's, which its task reads)."""

    def __init__(self, message: str, key: str, value: object) -> None:
        super().__init__(message)
        self.key = key
        self.value = value


class OutputError(Exception):
    """A write to standard output failed: ``closed`` where the program reading it stopped (a
    broken pipe), else no room (``> /dev/full``). No OSError, so that a command's handling of
    its files' errors does not say it as one of them (``cli.quiet_when_output_closes`` does)."""

    def __init__(self, error: OSError) -> None:
        super().__init__(error.strerror)
        self.closed = isinstance(error, BrokenPipeError)
        self.strerror = error.strerror


def repeated(values: Sequence[Hashable]) -> Optional[Hashable]:
    """The first value that ``values`` holds twice (a key, a beam, a layer given twice), or
    None."""
    seen = set()
    for value in values:
        if value in seen:
            return value
        seen.add(value)
    return None


def json_error(error: ValueError) -> str:
    """What json's ``error`` says of the text, without Python's advice to raise its limit on the
    digits of an integer (``sys.set_int_max_str_digits``), which a user cannot follow."""
    return str(error).split(";")[0]


def abbreviated(text: str, limit: int = 80) -> str:
    """``text`` as one line of an error shows it: its first ``limit`` characters, then "...",
    where it is longer (a value of thousands of characters made a message of as many)."""
    return text if len(text) <= limit else f"{text[:limit]}..."


def nearest_key(key: str, valid: Collection[str], cutoff: float = 0.6) -> Optional[str]:
    """The valid key nearest to a misspelt one (difflib), if one is near (``cutoff``: how near,
    difflib's ratio)."""
    near = difflib.get_close_matches(key, sorted(valid), n=1, cutoff=cutoff)
    return near[0] if near else None


def did_you_mean(key: str, valid: Collection[str], prefix: str = "") -> Optional[str]:
    """"did you mean 'K'?" for the valid key nearest to a misspelt one (written after
    ``prefix``), None where none is near."""
    near = nearest_key(key, valid)
    return f"did you mean '{prefix}{near}'?" if near else None


def nearest_key_hint(
    key: str, valid: Collection[str], fallback: Optional[str] = None, prefix: str = ""
) -> str:
    """``did_you_mean``'s question, else ``fallback``, else the list of valid keys."""
    return did_you_mean(key, valid, prefix) or fallback or f"valid: {', '.join(sorted(valid))}"


def choice_problem(given: str, value: object, valid: Sequence[object]) -> str:
    """The one wording of a ``value`` outside its ``valid`` values, after ``given`` (the option
    and value as the user gave them: ``san_decoding='statc'``, ``dataset_impl 'mmapp' (from
    --model-overrides ...)``): them, and the nearest where one is near."""
    question = did_you_mean(str(value), [str(choice) for choice in valid])
    hint = f"; {question}" if question else ""
    return f"{given} is not valid; valid values: {', '.join(map(str, valid))}{hint}"


def not_a_choice(name: str, value: object, valid: Sequence[object], source: str) -> UsageError:
    """The error for an option's ``value`` (given by ``source``) outside its ``valid`` values
    (``choice_problem``: ``activation_fn='rel'``, did you mean relu)."""
    return UsageError(choice_problem(f"{name} {value!r} {source}", value, valid))


def first_bytes(path: str) -> bytes:
    """The first 4 bytes of the regular file ``path``; none of a pipe's or where unreadable."""
    try:
        if not os.path.isfile(path):
            return b""
        with open(path, "rb") as handle:
            return handle.read(4)
    except OSError:
        return b""


def binary_kind(decoded: bytes, file_start: bytes) -> Optional[str]:
    """What a file is where it is no text, and what to give instead, by the first bytes of the
    block that failed to decode (``decoded``: the file's own unless a command unpacked it, which
    ``scoring`` does with gzip) and of the file; None where they do not say."""
    from fairseq_san.files import GZIP_MAGIC  # files imports this module

    if decoded.startswith(GZIP_MAGIC):
        return "gzip-compressed: give it unpacked (gunzip -k)"
    if file_start == b"PK\x03\x04":  # torch.save's format
        return "a zip archive (a PyTorch checkpoint?), not text: give the text file"
    return None


@contextlib.contextmanager
def utf8_text(path: str) -> Iterator[None]:
    """Reading ``path`` as UTF-8: a byte that is not UTF-8 is a UsageError naming the file, and
    what it is where ``binary_kind`` knows (a gzip-compressed file and a checkpoint were advised
    to be converted with iconv)."""
    try:
        yield
    except UnicodeDecodeError as err:
        kind = binary_kind(bytes(err.object[:4]), first_bytes(path))
        if kind is not None:
            raise UsageError(f"{path} is {kind}") from None
        raise UsageError(
            f"{path} is not UTF-8 text ({err.reason}, byte "
            f"{err.object[err.start:err.start + 1]!r}): convert it to UTF-8 first (e.g. iconv -t "
            "utf-8)"
        ) from None
