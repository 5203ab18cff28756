"""Files that the learn-to-share loop takes as a step done (policies, scores, run records,
summaries): each is written whole or not at all, through a temporary file beside it and one
rename, so that a stopped write leaves the old file or none, never a truncated one; and read
back with one line naming a file that is not what was written. Pure Python: the policy tools
import it without torch."""

import filecmp
import glob
import json
import os
import shutil
import stat
import sys
import tempfile
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Type, Union

from fairseq_san.errors import (
    OutputError,
    UsageError,
    binary_kind,
    closed_stream,
    file_error,
    json_error,
    repeated,
)

# The first bytes of a gzip file: kept hypotheses and analyses are gzipped (docs/results).
GZIP_MAGIC = b"\x1f\x8b"


# "-" as Unix tools read it: standard input where a command reads a file, standard output where
# it writes one (a file named "-" was read, or written silently in the working folder).
DASH = "-"
STDIN = "/dev/stdin"
STDOUT = "/dev/stdout"
STDOUT_DESCRIPTOR = 1


class Stream(str):
    """The file a command opens for "-" (``/dev/stdin``, ``/dev/stdout``), named in its messages
    as what the user gave ("standard input"), not as a name the user never typed: f-strings and
    ``str.format`` write ``said``, and so does an OSError of opening it (its filename is this);
    ``str.join`` and ``+`` write the device."""

    def __new__(cls, device: str, said: str) -> "Stream":
        stream = super().__new__(cls, device)
        stream.said = said
        return stream

    def __format__(self, spec: str) -> str:
        return format(self.said, spec)

    def __getnewargs__(self) -> Tuple[str, str]:  # copied or pickled as itself, not str's one
        return str(self), self.said

    def __repr__(self) -> str:  # OSError's str: "[Errno 21] Is a directory: 'standard input'"
        return repr(self.said)


def listed(paths: Sequence[str]) -> str:
    """``paths`` joined by commas, each as the user gave it (a ``Stream`` as "standard input":
    ``str.join`` would write its device)."""
    return ", ".join(f"{path}" for path in paths)


def read_from(path: str) -> str:
    """The file a command reads for the argument ``path``: standard input for "-"."""
    return Stream(STDIN, "standard input") if path == DASH else path


def written_to(path: str) -> str:
    """The file a command writes for the argument ``path``: standard output for "-"."""
    return Stream(STDOUT, "standard output") if path == DASH else path


def standard_input(path: str) -> bool:
    """Whether ``path`` names this process's standard input: "-", or a name of its descriptor 0
    (``/dev/stdin``, ``/dev/fd/0``, ``/proc/self/fd/0``), which a second reader finds empty."""
    return path == DASH or descriptor_of(path) == 0


def write_whole(path: str, write: Callable[[str], None], replace_link: bool = False) -> None:
    """Have ``write(name)`` make the file ``path`` through ``path.tmp`` and ``os.replace``, the
    temporary file removed where writing fails or is interrupted.

    A symbolic link's target is written (the link stays), unless ``replace_link``: the files a
    run dir keeps for itself (its record, its summary), where a link or a pipe in a run dir
    received from elsewhere would have had the loop overwrite whatever it points to, or wait on
    the pipe. Otherwise a pipe, a device or an open descriptor (``/dev/stdout``) is written
    through (``write_through``): a rename would replace it.
    """
    descriptor = descriptor_of(path)
    if replace_link and (os.path.islink(path) or os.path.exists(path) and not os.path.isfile(path)):
        folder, name = os.path.split(path)
        written = os.path.join(os.path.realpath(folder or "."), name)
    elif descriptor is not None or os.path.exists(path) and not (
        os.path.isfile(path) or os.path.isdir(path)
    ):
        write_through(path, write, descriptor)
        return
    else:
        written = os.path.realpath(path)
    temporary = temporary_path(written)
    if os.path.islink(temporary):  # opening it would write wherever it points
        os.remove(temporary)
    try:
        write(temporary)
        os.replace(temporary, written)
    except BaseException as err:  # no partial file left beside it (a directory there, a full disk)
        if os.path.exists(temporary):
            os.remove(temporary)
        if isinstance(err, OSError) and err.errno is not None:
            raise OSError(err.errno, err.strerror, path) from None  # the path given, not .tmp
        raise


def descriptor_of(path: str) -> Optional[int]:
    """The descriptor of this process that ``path`` names (``/dev/stdout``, ``/dev/fd/N``,
    ``/proc/self/fd/N``), or None: the file the shell opened for ``> log``, which a rename would
    replace and a second open would write over."""
    name = os.path.abspath(path)
    prefixes = ("/dev/fd/", "/proc/self/fd/", f"/proc/{os.getpid()}/fd/")
    for _ in range(40):  # the kernel's own limit on links followed
        number = next((name[len(p):] for p in prefixes if name.startswith(p)), "")
        if number.isdigit():
            return int(number)
        if not os.path.islink(name):
            return None
        name = os.path.normpath(os.path.join(os.path.dirname(name), os.readlink(name)))
    return None


def write_through(path: str, write: Callable[[str], None], descriptor: Optional[int]) -> None:
    """Have ``write`` make a temporary file, then copy it into ``path`` (a pipe, a device) or this
    process's ``descriptor`` after what it printed: whole or not at all there too, and at the
    descriptor's own place in a file (a second open would write over the lines printed there).
    A failed write to standard output is an OutputError, as ``print``'s is (``cli``)."""
    sys.stdout.flush()
    sys.stderr.flush()
    with tempfile.TemporaryDirectory() as folder:
        staged = os.path.join(folder, "output")
        write(staged)
        target = open(os.dup(descriptor), "wb") if descriptor is not None else open(path, "wb")
        try:
            with open(staged, "rb") as source, target:
                shutil.copyfileobj(source, target)
        except OSError as err:  # a full device (/dev/full): the path given, not the descriptor
            if descriptor == STDOUT_DESCRIPTOR:  # "-" or /dev/stdout: a closed pipe, /dev/full
                raise OutputError(err) from None
            if err.errno is None:
                raise
            raise OSError(err.errno, err.strerror, path) from None


def temporary_path(written: str) -> str:
    """The temporary file through which ``write_whole`` makes ``written`` (a real path)."""
    return written + ".tmp"


def write_text(path: str, text: str, replace_link: bool = False) -> None:
    """Write ``text`` to ``path`` as ``write_whole`` writes a file."""

    def write(name: str) -> None:
        with open(name, "w", encoding="utf-8") as out:
            out.write(text)

    write_whole(path, write, replace_link)


def write_json(path: str, value, replace_link: bool = False) -> None:
    """``value`` as indented JSON, one newline at the end, written as ``write_text`` does."""
    write_text(path, json.dumps(value, indent=2) + "\n", replace_link)


def output_problem(path: str, what: str, inputs: Iterable[str] = ()) -> Optional[str]:
    """Why a command cannot write ``what`` (named so in the message: "the JSON file") to ``path``,
    said before it works, not after: no name, one of its ``inputs`` (which writing would replace
    before it is read), a folder, or in a folder that is not there; else None."""
    if not path:
        return f"is empty: name {what} to write"
    named = input_at(path, inputs)
    if named:
        return f"is the input {named}: write {what} to another file"
    if os.path.isdir(path):
        return f"is a folder: name {what} to write"
    if path.endswith(("/", os.sep)):  # written as a file named like the folder, said written
        return f"ends in '/', a folder's name: name {what} to write (a file)"
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return f"no folder {folder} (create it first)"
    return None


def read_as_an_option(path: str) -> Optional[str]:
    """Why a recipe cannot take ``path``: one starting with '-', which the commands it runs
    (mkdir, rm, the plugin's own) would read as an option; else None."""
    if path.startswith("-"):
        return (
            "starts with '-', which the commands the recipe runs would read as an option: give "
            f"./{path}"
        )
    return None


def glob_in(folder: str, *pattern: str, recursive: bool = False) -> List[str]:
    """The paths under ``folder`` that ``pattern`` (joined path parts) matches, ``folder`` read
    literally: a run or data folder named ``run[AB]`` is a character class to ``glob.glob``,
    which then read a sibling's files (``runA``) or none."""
    return glob.glob(os.path.join(glob.escape(folder), *pattern), recursive=recursive)


def first_data_folder(data: object) -> Optional[str]:
    """The first of a task's data folders (fairseq's DATA1:DATA2..., whose first folder holds
    the dictionaries and the validation data), None for no folder."""
    return data.split(os.pathsep)[0] if isinstance(data, str) and data else None


def translation_dictionaries(folder: str) -> List[str]:
    """A translation's dictionaries in ``folder``: fairseq-preprocess's ``dict.SRC.txt`` and
    ``dict.TGT.txt``."""
    return glob_in(folder, "dict.*.txt")


def language_model_data(folder: str) -> bool:
    """Whether ``folder`` holds a language model's binarized data: fairseq-preprocess
    --only-source's ``dict.txt`` and no translation's dictionaries. The one test behind every
    check that names one kind of data given to the other kind of model."""
    return os.path.isfile(os.path.join(folder, "dict.txt")) and not translation_dictionaries(folder)


def same_file(first: str, second: str) -> bool:
    """Whether two paths name one file (or would: one path, through links, not yet there); an
    output that is its input would be emptied or overwritten before it is read."""
    if os.path.realpath(first) == os.path.realpath(second):
        return True
    return os.path.exists(first) and os.path.exists(second) and os.path.samefile(first, second)


def file_identity(path: str) -> Union[Tuple[int, int], str]:
    """What tells files apart: the device and inode of one that exists (a hard link is the file
    it links to), else the real path."""
    try:
        stat = os.stat(path)
    except OSError:
        return os.path.realpath(path)
    return stat.st_dev, stat.st_ino


def file_given_twice(paths: Sequence[str]) -> Optional[str]:
    """The first of ``paths`` that names a file named before it, through symbolic or hard links,
    as its real path (with the earlier one's where the names differ), or None: an input given
    twice would count twice."""
    earlier: Dict[Union[Tuple[int, int], str], str] = {}
    for path in paths:
        real, identity = os.path.realpath(path), file_identity(path)
        if identity in earlier:
            first = earlier[identity]
            return real if first == real else f"{real} (one file with {first})"
        earlier[identity] = real
    return None


def same_bytes(paths: Sequence[str]) -> Optional[Tuple[str, str]]:
    """The first two of ``paths`` (files) that hold the same bytes under other names, or None:
    fairseq-train's ``checkpoint_last.pt`` is a copy of the last checkpoint it saved. Only files
    of one size are compared, each pair up to its first differing byte; empty files are none's
    copy (the reader says they are empty)."""
    by_size: Dict[int, List[str]] = {}
    for path in paths:
        size = os.path.getsize(path)
        if size:
            by_size.setdefault(size, []).append(path)
    for group in by_size.values():
        for at, first in enumerate(group):
            second = next((p for p in group[at + 1 :] if filecmp.cmp(first, p, shallow=False)),
                          None)  # fmt: skip
            if second is not None:
                return first, second
    return None


def input_at(output: str, inputs: Iterable[str]) -> Optional[str]:
    """The first of ``inputs`` that ``output`` names (``same_file``), which writing ``output``
    would replace, or None."""
    return next((path for path in inputs if same_file(output, path)), None)


# JSON's names of the types json.load returns, for errors.
JSON_TYPES = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number",
              float: "number", type(None): "null"}  # fmt: skip


def line_text(line: str) -> str:
    r"""A line read with ``newline="\n"`` without its end, "\n" or Windows' "\r\n". Text is
    read so (as sacreBLEU reads it) where a bare "\r" inside a sentence must not make two."""
    return line.rstrip("\r\n")


class DuplicateKey(ValueError):
    """A key given twice in one JSON object, which ``json`` would read as its last value."""


def unique_object(pairs: list) -> dict:
    """``json``'s ``object_pairs_hook``: the object, or DuplicateKey naming a key given twice."""
    keys = [key for key, _ in pairs]
    twice = repeated(keys)
    if twice is not None:
        raise DuplicateKey(twice)
    return dict(pairs)


def parsed_json(
    text: str, shown: str, error: Type[Exception] = UsageError, fix: Optional[str] = None
) -> object:
    """``text`` as JSON (a key given twice refused), its errors one ``error`` after ``shown``
    (what was read: ``policy file "p.json"``), ending with ``fix`` where given."""
    advice = f": {fix}" if fix else ""
    try:
        return json.loads(text, object_pairs_hook=unique_object)
    except DuplicateKey as err:
        raise error(f'{shown}: key "{err}" is given twice{advice}') from None
    except json.JSONDecodeError as err:
        raise error(
            f"{shown}: malformed JSON at line {err.lineno} column {err.colno}: {err.msg}{advice}"
        ) from None
    except RecursionError:
        raise error(f"{shown}: JSON nested too deeply to be one{advice}") from None
    except ValueError as err:  # an integer of more digits than Python converts (4,300)
        raise error(f"{shown}: {json_error(err)}{advice}") from None


def read_json(
    path: str,
    what: str,
    error: Type[Exception] = UsageError,
    fix: Optional[str] = None,
    expected: type = dict,
    limit: Optional[int] = None,
    streamed: bool = False,
) -> object:
    """The JSON value in the file ``path`` (an object unless ``expected`` says otherwise): the one
    reader of the plugin's JSON files, each problem one ``error`` naming the file as ``what``
    ("policy file") and ending with ``fix`` where given (what to do: "restore it").

    The file is UTF-8 text (a byte-order mark allowed), a regular file unless ``streamed`` (an
    analysis through a pipe, ``<(zcat js.json.gz)``; a pipe in a run dir received from elsewhere
    would be read forever), of at most ``limit`` bytes where given (a policy given as
    ``/dev/zero`` was read until memory ran out). A value of another type (``null`` too) is
    refused in JSON's words.
    """
    shown, advice = f'{what} "{path}"', fix or "give a JSON file"
    try:
        mode = os.stat(path).st_mode
        if stat.S_ISDIR(mode) or not (streamed or stat.S_ISREG(mode)):
            kind = "a folder" if stat.S_ISDIR(mode) else "a device, pipe or socket"
            raise error(f"{shown} is {kind}, not a file: {advice}")
        with open(path, "rb") as handle:
            data = handle.read() if limit is None else handle.read(limit + 1)
    except OSError as err:
        if closed_stream(err):  # ENOENT, or EBADF where /dev/stdin is a device of descriptors
            raise error(f"{shown} cannot be read: {file_error(err)}") from None
        if isinstance(err, FileNotFoundError):
            raise error(f"{shown} not found{f': {fix}' if fix else ''}") from None
        raise error(f"{shown} cannot be read ({err.strerror}): {advice}") from None
    if limit is not None and len(data) > limit:
        raise error(f"{shown} is over {limit:,} bytes, more than a {what} holds: check the path")
    kind = binary_kind(data, data[:4])
    if kind is not None:
        raise error(f"{shown} is {kind}")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:  # nothing in it is read further (no .npy, no pickle)
        raise error(
            f"{shown} is binary, not JSON text (byte {err.object[err.start]:#04x} at {err.start}: "
            f"a .npy or .npz array, a pickle, a checkpoint?): {advice}"
        ) from None
    if not text.strip():  # JSON's "Expecting value at line 1 column 1" hid why
        raise error(f"{shown} is empty: {advice}")
    value = parsed_json(text, shown, error, fix)
    if not isinstance(value, expected):
        found, wanted = JSON_TYPES.get(type(value), type(value).__name__), JSON_TYPES[expected]
        raise error(f"{shown} holds a JSON {found}, not a JSON {wanted}: {advice}")
    return value


def read_json_if_there(path: str, what: str, error: Type[Exception], fix: str,
                       expected: type = dict) -> object:  # fmt: skip
    """``read_json``'s value of ``path``, None where there is no file (a step not yet done)."""
    return read_json(path, what, error, fix, expected) if os.path.exists(path) else None
