"""Bad input to a fairseq command as one line, ``fairseq-san: error: ...``, not a traceback.

Upstream behaviour corrected: fairseq's commands have no hook for a plugin's errors, so an error
the plugin raises while fairseq sets up (a bad policy, a refused checkpoint) or a missing path
named on the command line surfaces as a traceback from deep inside fairseq. ``install()`` chains
``excepthook`` in front of ``sys.excepthook`` when fairseq loads the plugin (``--user-dir``). It
prints as one line

* a ``UsageError`` (e.g. a ``PolicyError``), also when fairseq re-raised it as another
  exception: its trainer turns any error while loading a checkpoint into "please ensure that
  the architectures match", with ours as the context; and a rank's that fairseq-train started
  itself (``torch.multiprocessing.spawn``), which reached it as the rank's traceback;
* a missing file or directory that the command line names (e.g. a data directory), or a missing
  file in a directory it names (a data directory without a dictionary), which fairseq's tasks
  hit deep inside their set-up, or one that may not be written (a read-only ``--save-dir``);
* fairseq's own bad-input errors whose message already says what is wrong
  (``FAIRSEQ_BAD_INPUT``), or in the plugin's words where it misleads (``FAIRSEQ_REWORDED``),
  a ``--model-overrides`` that is not Python literal syntax, and a component chosen without an
  option it needs (``--bpe sentencepiece`` without its model);
* gloo's loss of another rank under a collective (``PEER_LOST``): that rank stopped first
  (failed, killed), and this one printed a traceback of its all-reduce, some 50 lines on
  fairseq-san-cpu-ranks' terminal above the line naming the rank that stopped;
* a ``--distributed-init-method tcp://HOST:PORT`` whose port rank 0 cannot listen on
  (``PORT_IN_USE``): another run's rank 0, or another program, holds it (torch's
  DistNetworkError, some 50 lines);
* an interrupt (Ctrl-C): fairseq-validate, -generate and -eval-lm printed a traceback of
  wherever they were (the exit status stays the interrupt's);
* an output that cannot be written: a reader that stopped (``fairseq-generate ... | head``) ends
  the command quietly with the status of SIGPIPE, as Unix tools end; a full device or disk
  (``> /dev/full``) is one line.

Everything else keeps its traceback. The line is also written to the file that the environment
variable ``ERROR_COPY`` names, where set (fairseq-san-cpu-ranks' rank 0, whose error is on the
terminal: another rank's log that ends in it is not quoted below it), and so is the last line of
the error of a traceback, and of fairseq's own refusals of its command line (argparse's
``PROG: error: ...`` after its usage).
"""

import argparse
import contextlib
import errno
import functools
import os
import re
import signal
import sys
from traceback import format_exception_only
from typing import Callable, NoReturn, Optional

from fairseq_san.cli import drop_unwritten_output
from fairseq_san.errors import ERROR_COPY, PREFIX, UsageError
from fairseq_san.fairseq_fixes.wrapping import wrap_once
from fairseq_san.files import glob_in
from fairseq_san.options import flag_of

# The errors of a write to an output with no room left: a full device or disk, a quota.
NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)

# fairseq's error where a translation task finds no dict.SRC.txt and dict.TGT.txt to name the
# languages (its data folder holds no dictionary, or a language model's dict.txt).
NO_LANGUAGE_PAIR = "Could not infer language pair, please provide it explicitly"

# fairseq's errors for bad input on its command line whose message names the problem (fairseq
# main): (exception type, pattern of the message). They are printed as one line, not a traceback.
FAIRSEQ_BAD_INPUT = [
    (FileNotFoundError, r"Dataset not found: \S+ \(.*\)"),  # --gen-subset / --valid-subset
    (Exception, re.escape(NO_LANGUAGE_PAIR)),  # no data there
    (AssertionError, r"Must specify batch size either with --max-tokens or --batch-size"),
    (ValueError, r"optimizer is required!"),
    (NotImplementedError, r"Unknown post_process option: .*"),
    (AssertionError, r"--sampling-top[kp] requires --sampling"),
    (AssertionError, r"--sampling requires --nbest to be equal to --beam"),  # generate, interactive
    (ValueError, r"DiverseBeamSearch requires --beam to be divisible by the number of groups"),
    (AssertionError, r"--batch-size cannot be larger than --buffer-size"),  # interactive
    (Exception, r"Size of sample #\d+ is invalid \(=.*\) since max_positions=.*, skip this "
                r"example with --skip-invalid-size-inputs-valid-test"),  # input too long
    (AssertionError, r"Sentences lengths should not exceed max_tokens=\d+"),  # --max-tokens
    (AssertionError, r"min_len cannot be larger than max_len, please adjust these!"),  # --min-len
    (ValueError, r"--share-all-embeddings requires a joined dictionary"),  # preprocess's flag
    # a width given one stack in --model-overrides (or fairseq-train's flags)
    (ValueError, r"--share-all-embeddings requires --encoder-embed-dim to match "
                 r"--decoder-embed-dim"),
    # resuming with another --criterion or --optimizer than the checkpoint's
    (AssertionError, r"(Criterion|Optimizer) does not match; please reset the optimizer "
                     r"\(--reset-optimizer\)\. \w+ vs \w+"),
    # a file a --bpe or --tokenizer reads (--bpe-codes, --sentencepiece-model): fairseq's
    # cached_path, then sentencepiece's own errors on a folder or a file that is not its model
    (OSError, r"file .+ not found"),
    (RuntimeError, r'FAILED_PRECONDITION: ".+": Is a directory'),
    (RuntimeError, r"INTERNAL: could not parse ModelProto from .+"),
    # a --bpe, --tokenizer or --scoring whose Python package is not installed
    (ImportError, r"Please install .+"),
]


# fairseq's errors for bad input whose message misleads, by what the plugin says instead.
FAIRSEQ_REWORDED = [
    # resuming where the data, as batched now, has fewer batches in the epoch than the
    # checkpoint had read: fairseq asked to report it to its developers
    (RuntimeError, r"Cannot resume training due to dataloader mismatch, please report .*",
     "cannot resume: the checkpoint stopped part-way through an epoch that the data, as batched "
     "now, does not reach so far (the training data, --max-tokens, --batch-size or the number of "
     "processes changed since?): resume with what it was trained with, or pass "
     "--reset-dataloader to start that epoch again"),
    # a subset binarized from two sides of different lengths: fairseq-preprocess binarizes each
    # side alone, and the commands that load it stopped on a bare assertion
    (AssertionError, r"Source and target must contain the same number of examples",
     "a subset's source and target sides hold different numbers of sentences (fairseq-preprocess "
     "binarizes each side alone and does not compare them): give both sides one sentence per "
     "line, line i of one translating line i of the other, and binarize again"),
    # torch's CPU allocator refusing a tensor: a size far beyond the defaults, mostly
    # (--max-source-positions 2147483647 asked for a table of every position: 128 GiB)
    (RuntimeError, r"\[enforce fail at alloc_cpu\.cpp:\d+\] .*DefaultCPUAllocator: can't "
                   r"allocate memory: .*",
     "this machine cannot give the memory asked for (torch's CPU allocator refused): are the "
     "model's sizes (--max-source-positions, --max-target-positions, the embedding and layer "
     "sizes) or the batch's (--max-tokens, --batch-size) far larger than meant?"),
]


# fairseq's batching's message for a sentence longer than the model's positions.
TOO_LONG = re.compile(r"Size of sample #(\d+) is invalid ")


def too_long_sentence(error: Exception) -> Optional[int]:
    """The index of the sentence that fairseq's batching found longer than the model's
    positions (``data_utils.filter_by_size``, a plain Exception), else None."""
    found = TOO_LONG.match(str(error))
    return int(found.group(1)) if type(error) is Exception and found else None


# gloo's error where the connection to another rank closed: its words up to its hint.
PEER_LOST = re.compile(r"\[[^\]]*gloo[^\]]*\] (.+?)\. This is typically caused by a remote worker")


def peer_lost(exc: BaseException) -> Optional[str]:
    """The connection to another rank lost (``PEER_LOST``), said with gloo's words; else None."""
    found = PEER_LOST.match(str(exc)) if isinstance(exc, RuntimeError) else None
    if found is None:
        return None
    return (
        f"the connection to another rank was lost (gloo: {found.group(1)}): that rank stopped "
        "first, and its own output says why"
    )


# torch's error where rank 0 cannot listen on the rendezvous's port: another process holds it.
PORT_IN_USE = re.compile(r"The server socket has failed to listen .*port: (\d+),.*EADDRINUSE")


def port_in_use(exc: BaseException) -> Optional[str]:
    """The rendezvous's port held by another process (``PORT_IN_USE``), and the way out; else
    None. The other ranks, connected to what holds it, wait for a rank 0 that never comes."""
    found = PORT_IN_USE.search(str(exc)) if isinstance(exc, RuntimeError) else None
    if found is None:
        return None
    return (
        f"the ranks' meeting port {found.group(1)} is in use (another run's rank 0, or another "
        "program): give each run a port of its own (--distributed-init-method tcp://HOST:PORT, "
        "--distributed-port or MASTER_PORT) and stop this run's other ranks (they wait for this "
        "one); on one machine, fairseq-san-cpu-ranks N -- fairseq-train ... needs no port"
    )


def usage_error_in_chain(exc: BaseException) -> Optional[UsageError]:
    """``exc`` or the UsageError it was raised from or while handling, if any."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, UsageError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


# A line of a traceback's text that names an error of the plugin: its module, class and message.
RAISED_AS = re.compile(r"^(fairseq_san[\w.]*)\.(\w+): (.*)$", re.MULTILINE)


def rank_usage_error(exc: BaseException) -> Optional[str]:
    """The message of the outermost ``UsageError`` that a rank started by
    ``torch.multiprocessing.spawn`` raised (fairseq-train's ranks without
    --distributed-no-spawn), which reaches the parent as the rank's traceback, text in a
    ``ProcessRaisedException``; else None."""
    spawn = sys.modules.get("torch.multiprocessing.spawn")
    if spawn is None or not isinstance(exc, spawn.ProcessRaisedException):
        return None
    for module, name, message in reversed(RAISED_AS.findall(str(exc))):  # the chain's last first
        kind = getattr(sys.modules.get(module), name, None)
        if isinstance(kind, type) and issubclass(kind, UsageError):
            return message
    return None


def fairseqs_bad_input(exc: BaseException) -> Optional[str]:
    """The message of one of fairseq's bad-input errors (``FAIRSEQ_BAD_INPUT``), or the plugin's
    words for one whose message misleads (``FAIRSEQ_REWORDED``), else None; a criterion or
    optimizer that does not match the checkpoint's is also said as options."""
    for kind, pattern in FAIRSEQ_BAD_INPUT:
        if isinstance(exc, kind) and re.fullmatch(pattern, str(exc)):
            return without_numpy_reprs(str(exc)) + component_options_said(str(exc))
    for kind, pattern, said in FAIRSEQ_REWORDED:
        if isinstance(exc, kind) and re.fullmatch(pattern, str(exc)):
            return said
    return None


def without_numpy_reprs(message: str) -> str:
    """numpy 2's scalars as the numbers they hold: fairseq formats sizes it read from numpy
    arrays, "(=(np.int32(8), np.int32(14)))" for "(=(8, 14))"."""
    return re.sub(r"np\.\w+\(([^()]*)\)", r"\1", message)


# Where fairseq registers each component a checkpoint's optimizer history names by class, and
# the options that choose fairseq's optimizer wrappers (the class recorded when one was given).
COMPONENT_REGISTRIES = {
    "Criterion": ("fairseq.criterions", "CRITERION_REGISTRY", "--criterion"),
    "Optimizer": ("fairseq.optim", "OPTIMIZER_REGISTRY", "--optimizer"),
}
OPTIMIZER_WRAPPERS = {
    "FP16Optimizer": "--fp16 or --bf16",
    "MemoryEfficientFP16Optimizer": "--memory-efficient-fp16 or --memory-efficient-bf16",
    "AMPOptimizer": "--amp",
}


def component_option(component: str, class_name: str) -> str:
    """``--criterion cross_entropy`` for fairseq's class ``CrossEntropyCriterion`` (read from
    fairseq's registry where fairseq is imported), else the class name."""
    if class_name in OPTIMIZER_WRAPPERS:
        return OPTIMIZER_WRAPPERS[class_name]
    module, registry, flag = COMPONENT_REGISTRIES[component]
    classes = getattr(sys.modules.get(module), registry, {})
    names = [name for name, cls in classes.items() if cls.__name__ == class_name]
    return f"{flag} {names[0]}" if len(names) == 1 else class_name


def component_options_said(message: str) -> str:
    """For fairseq's "Criterion does not match ... A vs B" (A: the checkpoint's, B: this run's),
    the two as command-line options; else nothing."""
    match = re.fullmatch(r"(Criterion|Optimizer) does not match; .* (\w+) vs (\w+)", message)
    if match is None:
        return ""
    component, saved, given = match.groups()
    return (
        f" (the checkpoint's {component_option(component, saved)}, this run's "
        f"{component_option(component, given)})"
    )


def malformed_command_line_value(exc: BaseException, argv: list) -> Optional[str]:
    """A SyntaxError from fairseq's ``ast.literal_eval`` of a value given on the command line
    (``--model-overrides "{'san_policy': "``, or ``--model-overrides={...``), said as one line
    naming the value."""
    if not isinstance(exc, SyntaxError) or exc.text is None:
        return None
    given = {arg.strip() for arg in argv} | {value.strip() for value in flag_values(argv)}
    if exc.text.strip() not in given:
        return None
    value = exc.text.strip()
    return f"{value!r} is not a Python literal ({exc.msg}): check the quotes and brackets"


def flag_values(argv: list) -> list:
    """The values given as ``--flag=value`` in ``argv``."""
    return [arg.split("=", 1)[1] for arg in argv if arg.startswith("--") and "=" in arg]


# Errors of a path that is missing or of the wrong kind: a folder for a file
# (fairseq-interactive --input DIR), a file for a folder (fairseq-generate --results-path FILE);
# or that may not be written (fairseq-train --save-dir on a read-only file system: EROFS).
PATH_ERRORS = (
    FileNotFoundError, NotADirectoryError, IsADirectoryError, FileExistsError, PermissionError
)  # fmt: skip


def names_a_command_line_path(exc: BaseException, argv: list) -> bool:
    """Whether ``exc`` is one of ``PATH_ERRORS`` for a path given on the command line, or for a
    file in a directory given there (a data directory without its ``dict.LANG.txt``)."""
    read_only = isinstance(exc, OSError) and exc.errno == errno.EROFS
    if not (isinstance(exc, PATH_ERRORS) or read_only) or not exc.filename:
        return False
    missing = os.path.normpath(str(exc.filename))
    # fairseq takes several data directories as DIR1:DIR2
    given = {os.path.normpath(part) for arg in argv for part in arg.split(os.pathsep) if part}
    return missing in given or os.path.dirname(missing) in given


def path_error_said(exc: OSError, argv: list) -> str:
    """The path and what is wrong with it; for a language model's ``dict.txt`` missing from
    translation data (``dict.SRC.txt``, ``dict.TGT.txt``: fairseq-eval-lm's default task on it,
    or fairseq-generate's ``--lm-path``), what each kind of data needs."""
    said = f"{exc.filename}: {exc.strerror}"
    if isinstance(exc, FileExistsError) and not os.path.isdir(exc.filename):
        kind = "a file" if os.path.isfile(exc.filename) else "not a folder"  # /dev/full
        return said + f" ({kind}, where the command makes a folder)"
    if isinstance(exc, IsADirectoryError):
        return said + " (a folder, where the command needs a file)"
    folder, name = os.path.split(str(exc.filename))
    if name == "dict.txt" and any(arg.split("=")[0] == "--lm-path" for arg in argv):
        said += (
            "; fairseq-generate loads the --lm-path language model with the dictionary of the "
            f"data it decodes, {folder}/dict.txt: the language model must be of the target "
            "language, trained with the target's dictionary (dict.TGT.txt), copied there as "
            "dict.txt"
        )
    elif name == "dict.txt" and glob_in(folder, "dict.*.txt"):
        said += (
            f"; {folder} holds translation data (dict.SRC.txt, dict.TGT.txt), and a language "
            "model's task reads fairseq-preprocess --only-source output (examples/lm/prepare.sh); "
            "a translation checkpoint is scored with fairseq-generate or fairseq-validate"
        )
    return said


def missing_component_option(exc: BaseException, as_keyword: bool = False) -> Optional[str]:
    """What a component chosen without an option it cannot do without needs (``--bpe
    sentencepiece`` without ``--sentencepiece-model``: omegaconf's MissingMandatoryValue, a
    traceback from the component's set-up), said as the command line's flags or, ``as_keyword``,
    the hub's keywords; None for another error."""
    from fairseq.registry import REGISTRIES
    from omegaconf.errors import MissingMandatoryValue

    if not isinstance(exc, MissingMandatoryValue) or not exc.full_key:
        return None
    key = str(exc.full_key).split(".")[-1]
    chosen = [
        (group, name)
        for group, registry in REGISTRIES.items()
        for name, config in registry["dataclass_registry"].items()
        if config is exc.object_type
    ]
    if not chosen:
        return None
    group, name = chosen[0]
    if as_keyword:
        return f"{group}={name!r} needs {key}: give from_pretrained(..., {key}=...)"
    return f"--{group} {name} needs {flag_of(key)}"


def output_that_cannot_be_written(exc: BaseException) -> bool:
    """Whether ``exc`` is a write that failed on an output with no room (``> /dev/full``, a full
    disk): an error of the device that names no file, as a write to an open file is. What
    fairseq-generate and -interactive print goes through ``print``, which names none."""
    return isinstance(exc, OSError) and exc.filename is None and exc.errno in NO_ROOM


def copy_error(line: str) -> None:
    """Write ``line``, the last the command printed of its error, to the file ``ERROR_COPY``
    names, if any (fairseq-san-cpu-ranks then quotes no other rank's log that ends in the same)."""
    if os.environ.get(ERROR_COPY):
        with contextlib.suppress(OSError), open(os.environ[ERROR_COPY], "w") as copy:
            copy.write(line + "\n")


def say(error: str) -> None:
    """Print ``error`` as the command's one line, and copy it (``copy_error``)."""
    print(PREFIX + error, file=sys.stderr)
    copy_error(PREFIX + error)


# argparse's words for a bad value of fairseq's list options (``--lr``, ``--update-freq``), whose
# type is a lambda of ``fairseq.dataclass.utils``: "argument --lr: invalid <lambda> value: 'x'".
LIST_VALUE = re.compile(r"argument (\S+): invalid <lambda> value: (.*)")
# What such a list holds, by the type its lambda calls.
LIST_ITEMS = {"int": "integers", "float": "numbers", "str": "texts"}


# argparse's words for an option whose default is omegaconf's MISSING, not given: it converts
# the default text ("argument --max-lr: invalid float value: '???'" of --lr-scheduler triangular).
MISSING_VALUE = re.compile(r"argument (\S+): invalid \S+ value: '\?\?\?'")


def value_said(parser: argparse.ArgumentParser, message: str) -> str:
    """``message``, where argparse named a list option's type ``<lambda>``, saying what the
    option reads instead (one item or a comma-separated list of them), or where it converted a
    default that means "no default", saying the option must be given."""
    missing = MISSING_VALUE.fullmatch(message)
    if missing is not None:
        return f"argument {missing.group(1)}: not given, and it has no default: give one"
    found = LIST_VALUE.fullmatch(message)
    if found is None:
        return message
    flag = found.group(1).split("/")[0]
    action = parser._option_string_actions.get(flag)
    called = getattr(getattr(action, "type", None), "__code__", None)
    items = next((LIST_ITEMS[name] for name in getattr(called, "co_names", ()) if name in
                  LIST_ITEMS), "values")  # fmt: skip
    return (
        f"argument {found.group(1)}: invalid value {found.group(2)}: fairseq reads one or a "
        f"comma-separated list of {items}"
    )


def copying_usage_errors(error: Callable[..., NoReturn]) -> Callable[..., NoReturn]:
    """argparse's ``ArgumentParser.error`` that copies the line it ends with (``copy_error``):
    fairseq's own refusals of its command line, which every rank printed; a list option's bad
    value says what the option reads, and one without a default is asked for (``value_said``)."""

    @functools.wraps(error)
    def wrapped(self: argparse.ArgumentParser, message: str) -> NoReturn:
        message = value_said(self, message)
        copy_error(f"{self.prog}: error: {message}")
        error(self, message)

    return wrapped


def excepthook(previous: Callable) -> Callable:
    """A ``sys.excepthook`` that prints bad input as one line and defers to ``previous``."""

    def hook(exc_type, exc, traceback):
        usage = usage_error_in_chain(exc)
        usage_said = str(usage) if usage is not None else rank_usage_error(exc)
        said = (
            fairseqs_bad_input(exc)
            or malformed_command_line_value(exc, sys.argv[1:])
            or missing_component_option(exc)
            or peer_lost(exc)
            or port_in_use(exc)
        )
        if isinstance(exc, BrokenPipeError):  # ``fairseq-generate ... | head``: the reader left
            drop_unwritten_output()
            raise SystemExit(128 + signal.SIGPIPE)  # quietly, as Unix tools end
        if output_that_cannot_be_written(exc):
            drop_unwritten_output()
            say(f"cannot write the output: {exc.strerror}")
        elif isinstance(exc, KeyboardInterrupt):
            say("interrupted")
        elif usage_said is not None:
            say(usage_said)
        elif names_a_command_line_path(exc, sys.argv[1:]):
            say(path_error_said(exc, sys.argv[1:]))
        elif said is not None:
            say(said)
        else:
            copy_error("".join(format_exception_only(exc_type, exc)).strip().splitlines()[-1])
            previous(exc_type, exc, traceback)

    hook.prints_one_line = True
    return hook


def install() -> None:
    """Print the plugin's usage errors as one line, and copy the last line of every error
    (``copy_error``), for this process (idempotent)."""
    if not getattr(sys.excepthook, "prints_one_line", False):
        sys.excepthook = excepthook(sys.excepthook)
    wrap_once(argparse.ArgumentParser, "error", copying_usage_errors)
