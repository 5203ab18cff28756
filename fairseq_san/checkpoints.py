"""Our loading of checkpoints: one line naming the file when one cannot be loaded; the plugin's
stamp.

A file that cannot be loaded because it is missing, a directory, empty, truncated (not a complete
``torch.save`` archive), holds a global outside torch's safe allow-list or is not a fairseq
checkpoint (a state dict alone, another object, an archive torch cannot read) raises
``CheckpointError`` (``explained``), one line naming the file and the problem, which the plugin
prints as ``fairseq-san: error: ...``; other failures propagate unchanged. fairseq's own loaders
get the same explanations from ``fairseq_san.fairseq_fixes.safe_loading``. ``load_state`` is the
plugin's own loader (the loop's summary), with torch's safe loader.

No checkpoint is read where torch's safe loader would not be used (``check_safe_loading``):
fairseq calls ``torch.load`` without ``weights_only``, which means the safe loader only from torch
2.6 and only while ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`` is not set.

Checkpoints made with the plugin carry its name and version (``PLUGIN``) in ``cfg.model.plugin``
(``stamp``), so that a checkpoint says what it needs to be loaded (and a translation model's
languages in ``cfg.model.language_pair``, so that it can refuse the reverse direction).
fairseq's own error cannot say what a checkpoint needs: loading a SAN checkpoint without the
plugin first fails in torch's safe loader (nothing allowed ``argparse.Namespace``), and where
the file is read (the safe loader off, or a fairseq that loads with ``weights_only=False``)
``fairseq.models.build_model`` formats its "Could not infer model type" message with
``str.format`` over the model config's text, whose ``'{}'`` values (fairseq's
``eval_bleu_args``, ``optimizer_overrides``) raise ``IndexError: Replacement index 1 out of
range`` before anything is printed. docs/troubleshooting.md explains both.
"""

import argparse
import contextlib
import itertools
import logging
import os
import pickle
import re
import warnings
import zipfile
from typing import Dict, Iterable, Iterator, List, Optional, Tuple

import torch
from omegaconf import DictConfig, open_dict
from omegaconf.errors import GrammarParseError, InterpolationResolutionError

import fairseq_san
from fairseq_san.errors import UsageError, first_line
from fairseq_san.pickle_globals import ALLOCATING, allocating_globals_in, first_pickle
from fairseq_san.pickled_fields import fields, shown
from fairseq_san.policy import is_policy_text

logger = logging.getLogger(__name__)

PLUGIN = f"fairseq-san {fairseq_san.__version__}"
# Switches torch's safe loader off for every torch.load that does not ask for it, fairseq's too;
# torch reads it as set for these values, in any case (torch.serialization lower-cases it).
UNSAFE_LOADING_VARIABLE = "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"
TORCH_TRUE_VALUES = ("1", "y", "yes", "true")
# The first torch whose torch.load defaults to the safe loader (pytorch/pytorch#137602).
SAFE_BY_DEFAULT = "2.6"
# How much of a file that is no checkpoint is read to tell text (``is_text``).
TEXT_PEEK = 4096
# torch's safe loader's warning of a pickle at another protocol than torch.save's (a regex).
PROTOCOL_WARNING = r"Detected pickle protocol \d+ in the checkpoint"
# The highest pickle protocol of torch.save's legacy format that torch's safe loader reads (4
# added framing, an opcode it refuses).
SAFE_LEGACY_PROTOCOL = 3
# The model configuration's key for the languages a translation model was trained on (``stamp``).
LANGUAGE_PAIR = "language_pair"


class CheckpointError(UsageError):
    """A checkpoint that cannot be loaded, said in one line."""


class VocabularyMismatch(UsageError):
    """A checkpoint trained with other dictionaries than the data's (fairseq's loader, which
    knows the file, adds its path: ``fairseq_fixes.safe_loading``)."""


# What to do about data whose dictionaries are not a checkpoint's (``vocabulary_mismatch``).
VOCABULARY_ADVICE = (
    "use the dictionaries the model was trained with (its data directory, or fairseq-preprocess "
    "--srcdict/--tgtdict with its dict.*.txt)"
)
# The embeddings whose rows are the entries of each dictionary.
EMBEDDINGS = {"source": "encoder.embed_tokens.weight", "target": "decoder.embed_tokens.weight"}
# torch's load_state_dict error for a weight of another shape than the model's.
SIZE_MISMATCH = re.compile(
    r"size mismatch for (\S+): copying a param with shape torch\.Size\(\[(\d+)(?:, \d+)*\]\) "
    r"from checkpoint, the shape in current model is torch\.Size\(\[(\d+)(?:, \d+)*\]\)"
)


def vocabulary_mismatch(sizes: Dict[str, Tuple[int, int]]) -> Optional[VocabularyMismatch]:
    """The error for embeddings of other sizes than the data's dictionaries (``sizes``: side ->
    (rows trained, entries in the data's dictionary)), or None where they all match."""
    if all(trained == built for trained, built in sizes.values()):
        return None
    shown = ", ".join(
        f"{side} {trained} (data: {built})" for side, (trained, built) in sizes.items()
    )
    return VocabularyMismatch(
        f"the checkpoint was trained with other dictionaries than the data's: entries per "
        f"dictionary {shown}; {VOCABULARY_ADVICE}"
    )


def vocabulary_mismatch_in(error: BaseException) -> Optional[VocabularyMismatch]:
    """The VocabularyMismatch that torch's ``load_state_dict`` error says, where embeddings are
    among the weights of other shapes (fairseq's own models load without the plugin's check)."""
    keys = {key: side for side, key in EMBEDDINGS.items()}
    sizes = {
        keys[key]: (int(trained), int(built))
        for key, trained, built in SIZE_MISMATCH.findall(str(error))
        if key in keys
    }
    return vocabulary_mismatch(sizes) if isinstance(error, RuntimeError) and sizes else None


def stamp(args, language_pair: Optional[Tuple[str, str]] = None) -> None:
    """Record the plugin in a model's (argparse) configuration, which fairseq saves as cfg.model,
    and a translation model's ``language_pair`` (``[SOURCE, TARGET]``) where none is recorded
    yet: fairseq's own task configuration keeps ``-s``/``-t`` only where they were given."""
    if isinstance(args, argparse.Namespace):
        args.plugin = PLUGIN
        if language_pair is not None and getattr(args, LANGUAGE_PAIR, None) is None:
            setattr(args, LANGUAGE_PAIR, list(language_pair))


def is_stamped(args) -> bool:
    """Whether a model's configuration is a checkpoint's (``stamp`` ran when it was built)."""
    return getattr(args, "plugin", None) is not None


def check_safe_loading() -> None:
    """Refuse, in one line, to read any checkpoint where torch.load without ``weights_only``
    (fairseq's call) would unpickle it, running whatever code the file names."""
    if os.getenv(UNSAFE_LOADING_VARIABLE, "0").lower() in TORCH_TRUE_VALUES:
        raise CheckpointError(
            f"{UNSAFE_LOADING_VARIABLE} is set: it switches torch's safe loader off, so a "
            "checkpoint could run code as it is read; fairseq-san reads checkpoints only with "
            "the safe loader (unset the variable)"
        )
    if torch.torch_version.TorchVersion(torch.__version__) < SAFE_BY_DEFAULT:
        raise CheckpointError(
            f"torch {torch.__version__} reads checkpoints with pickle by default, so a "
            f"checkpoint could run code as it is read; fairseq-san needs torch >= "
            f"{SAFE_BY_DEFAULT}, whose loader is safe by default"
        )


class NotALiteralArgument(ValueError):
    """An argument of a checkpoint's ``args`` that fairseq reads with ``ast.literal_eval`` (an
    option that is not text, given as text) and that is no literal."""

    def __init__(self, name: str, value: str, error: Exception) -> None:
        reason = first_line(error) or type(error).__name__
        super().__init__(
            f"its args' {name} {shown(value)} is not a Python literal, which fairseq reads it as "
            f"({reason[:100]}): not arguments fairseq-train saved"
        )


# Why a text argument may not hold "${": fairseq saves its configuration resolved, so one carried
# literally would be an interpolation in its checkpoints.
INTERPOLATED = (
    "which fairseq's configuration reads as an omegaconf interpolation (and its checkpoints would "
    "keep as one)"
)


class InterpolatedArgument(ValueError):
    """A text argument of a checkpoint's ``args`` that holds ``${``."""

    def __init__(self, name: str, value: str) -> None:
        super().__init__(f"its args' {name} {shown(value)} holds '${{', {INTERPOLATED}")


class SharedConfiguration(ValueError):
    """A checkpoint's configuration that holds one dict, list or tuple at two places."""

    def __init__(self, second_place: str) -> None:
        super().__init__(
            f"its configuration holds one container at two places (the second: {second_place}), "
            "which fairseq-train never saves and omegaconf would copy at every place (a "
            "kilobyte of pickle can be more nodes than memory holds)"
        )


NOT_A_FILE = (
    "it is no regular file (a pipe or a device): torch reads a checkpoint from a file it can seek "
    "in; write it to a file first"
)


def refuse_before_reading(path: str) -> None:
    """CheckpointError for a path that is a pipe or a device, before anything opens it (a pipe
    without a writer, ``mkfifo``, made torch.load wait forever), and for a file whose pickle
    calls on what makes memory of any size (``pickle_globals.ALLOCATING``): torch's safe loader
    would make it as it read the file."""
    if os.path.exists(path) and not os.path.isfile(path) and not os.path.isdir(path):
        raise CheckpointError(f"cannot load checkpoint {path}: {NOT_A_FILE}")
    try:
        allocating = sorted(allocating_globals_in(path)) if os.path.isfile(path) else []
    except OSError:  # unreadable: torch.load says why
        return
    if allocating:
        name = allocating[0]
        raise CheckpointError(
            f"cannot load checkpoint {path}: its pickle calls {name}, which makes "
            f"{ALLOCATING[name]}: refused before torch's safe loader reads it"
        )


def problem_with(path: str, error: Exception) -> Optional[str]:
    """Why loading the file at ``path`` failed with ``error``, or None if the file does not say."""
    from fairseq_san.safe_numpy import PickleRefused

    if isinstance(error, PickleRefused):  # a stand-in refused its arguments as the file loaded
        return refused_objects(error)
    if isinstance(error, (InterpolatedArgument, NotALiteralArgument, SharedConfiguration)):
        return str(error)
    if isinstance(error, (InterpolationResolutionError, GrammarParseError)):
        return interpolation_problem(getattr(error, "full_key", None) or "a field")
    if isinstance(error, RecursionError):  # fairseq's omegaconf walked its configuration
        return "its configuration's containers nest too deep or hold themselves"
    if os.path.isdir(path):
        return "it is a directory; a checkpoint is a file (for example DIR/checkpoint_best.pt)"
    if not os.path.exists(path):
        return "no such file" if isinstance(error, OSError) else None
    if not os.path.isfile(path):  # a pipe (--path <(zcat ckpt.pt.gz)) reads as 0 bytes
        return NOT_A_FILE
    if os.path.getsize(path) == 0:
        return "the file is empty (0 bytes; was saving it interrupted?)"
    unsafe = unsafe_globals(path, error)
    if unsafe:
        return (
            f"it contains {', '.join(unsafe)}, which torch's safe loader (weights_only) refuses; "
            "fairseq checkpoints need only argparse.Namespace and numpy's arrays, which "
            "fairseq-san reads as data, and fairseq-san reads nothing else"
        )
    state, unreadable = read_back(path)
    if unreadable is not None:
        pickled = first_pickle(path)
        if pickled is not None and not pickled.torch_legacy:
            return (
                f"it is a plain pickle (protocol {pickled.protocol}), not a torch.save archive: "
                "fairseq-san reads checkpoints only with torch's safe loader, which refuses it "
                "(a plain pickle can run code as it is read)"
            )
        if pickled is not None and pickled.protocol > SAFE_LEGACY_PROTOCOL:
            return (
                f"it is torch.save's legacy format pickled at protocol {pickled.protocol}, which "
                f"torch's safe loader does not read (it reads that format up to protocol "
                f"{SAFE_LEGACY_PROTOCOL}): save it again with torch.save's default format"
            )
        if is_text(path):
            return (
                "it is a text file, not a torch.save archive (a checkpoint is a checkpoint*.pt "
                "that fairseq-train wrote)"
            )
        if not zipfile.is_zipfile(path):  # torch's legacy format, read as far as it goes
            return "the file is not a complete torch.save archive (truncated, or not a checkpoint)"
        return unreadable
    return numpy_where_fairseq_computes(state, error) or checkpoint_problem(state, error)


def is_text(path: str) -> bool:
    """Whether the file at ``path`` begins as UTF-8 text (its first TEXT_PEEK bytes, a character
    cut at their end allowed): a dictionary or a JSON file given as a checkpoint."""
    with open(path, "rb") as file:
        start = file.read(TEXT_PEEK)
    whole = start if len(start) < TEXT_PEEK else start[:-3]  # a UTF-8 character is 4 bytes or less
    try:
        whole.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return b"\0" not in start


def refused_objects(refused: Exception) -> str:
    """Why a file whose pickle holds numpy values that no numpy wrote is not read
    (``safe_numpy.PickleRefused``: what the safe loader's stand-ins recorded, nothing built)."""
    return (
        f"it holds objects the safe loader refuses: {refused}; fairseq saves numpy arrays of "
        "numbers only, which fairseq-san reads as data"
    )


def numpy_where_fairseq_computes(state: object, error: Exception) -> Optional[str]:
    """Where fairseq's loader failed on a numpy value (a record of ``safe_numpy``: fairseq reads
    the file before the plugin restores them) in a field it computes with, the field; else
    None. fairseq-train saves plain numbers there (``train_iterator.epoch``, ...)."""
    from fairseq_san.safe_numpy import RECORDS, numpy_field

    if not isinstance(error, TypeError) or not any(r.__name__ in str(error) for r in RECORDS):
        return None
    return f"its {numpy_field(state)} is a numpy value where fairseq-train saves a plain number"


def interpolation_problem(field: str) -> str:
    return (
        f"its configuration's {field} is an omegaconf interpolation (${{...}}), which fairseq "
        "resolves before it saves one: not a configuration fairseq wrote"
    )


def interpolation_in(state: dict) -> Optional[str]:
    """Why a checkpoint's configuration is none fairseq saves where it holds an omegaconf
    interpolation (``interpolation_problem``: its first field), or None."""
    for field, value in stored_strings(state.get("cfg")):
        if "${" in value:
            return interpolation_problem(field)
    return None


def refuse_interpolations_in(path: str, state: dict) -> None:
    """Refuse a checkpoint whose configuration holds an omegaconf interpolation: fairseq saves
    its configuration resolved, and one resolved as it loads failed deep in omegaconf (a missing
    key) or took values from the environment (``${oc.env:...}``)."""
    problem = interpolation_in(state)
    if problem is not None:
        raise CheckpointError(f"cannot load checkpoint {path}: {problem}")


def stored_strings(node: object, name: str = "") -> Iterator[Tuple[str, str]]:
    """(dotted name, text) of every string in a checkpoint's configuration, unresolved, each of
    its objects read once (``pickled_fields``)."""
    return ((field, value) for field, _, value in fields(node, name) if isinstance(value, str))


def content_problem(path: str) -> Optional[str]:
    """Why the file at ``path`` is not a fairseq checkpoint (a dict with ``model`` and ``cfg``
    or ``args`` of the types fairseq-train saves), read again with torch's safe loader; None
    when it is one."""
    state, unreadable = read_back(path)
    return unreadable if unreadable is not None else checkpoint_problem(state)


@contextlib.contextmanager
def protocol_warning_left_out() -> Iterator[None]:
    """torch's safe loader without its warning of a pickle protocol other than its own: two lines
    of torch's before the one-line refusal of a plain pickle, which says what the file is."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", PROTOCOL_WARNING, UserWarning)
        yield


def read_back(path: str) -> Tuple[object, Optional[str]]:
    """(contents, None) of the file at ``path`` read with torch's safe loader, or (None, why it
    cannot be read)."""
    try:
        with protocol_warning_left_out():
            return torch.load(path, map_location="cpu", weights_only=True), None
    except pickle.UnpicklingError:
        return None, (
            "its pickle cannot be read: the archive is damaged, or torch.save did not write it"
        )
    except Exception as error:  # a zip archive without torch's layout
        reason = first_line(error).split("  (")[0][:100]
        return None, f"the file is not a readable torch.save archive ({reason})"


def checkpoint_problem(state: object, error: Optional[Exception] = None) -> Optional[str]:
    """Why ``state`` (a file's contents) is not a fairseq checkpoint, or None (``error``: the
    failure it is read back for, see ``configuration_problem``)."""
    if isinstance(state, dict) and "model" in state and ("cfg" in state or "args" in state):
        return configuration_problem(state, error)
    if isinstance(state, dict):
        keys = sorted(key[:40] if isinstance(key, str) else shown(key)
                      for key in itertools.islice(state, 50))  # fmt: skip
        held = f"a dict (keys: {', '.join(keys[:3])}{', ...' if len(state) > 3 else ''})"
    else:
        held = f"a {type(state).__name__}"
    return (
        f"it holds {held}, not a fairseq checkpoint: a dict with 'model' and 'cfg' (a model's "
        "state dict alone is not one; fairseq-train saves checkpoints)"
    )


def refuse_malformed_in(path: str, state: object) -> None:
    """Refuse a loaded checkpoint that is none fairseq-train saves (``checkpoint_problem``):
    weights of None or a model configuration of None failed deep inside fairseq or the checks
    after this one."""
    problem = checkpoint_problem(state)
    if problem is not None:
        raise CheckpointError(f"cannot load checkpoint {path}: {problem}")


# The names by which fairseq looks a checkpoint's model and task up, by group.
STORED_NAMES = (("model", "_name"), ("model", "arch"), ("task", "_name"), ("task", "task"))


def configuration_problem(state: dict, error: Optional[Exception] = None) -> Optional[str]:
    """Why a checkpoint's fields are not those fairseq-train saves, or None: a configuration or
    weights of another type; where loading failed in fairseq's lookup of the model or task it
    names (``error``: "Could not infer ...", or the ``IndexError`` formatting that message), a
    model or task that nothing registered; a model whose package is not installed
    (``ImportError`` as fairseq builds it: ``hf_gpt2`` without transformers)."""
    cfg, args = state.get("cfg"), state.get("args")
    weights = state["model"]
    if not isinstance(weights, dict):  # None too: fairseq's loaders failed on it
        held = "None" if weights is None else f"a {type(weights).__name__}"
        return f"its 'model' is {held}, not what fairseq-train saves there"
    fields = {"cfg": (cfg, (dict, DictConfig)),
              "args": (args, argparse.Namespace),
              "optimizer_history": (state.get("optimizer_history", []), list)}  # fmt: skip
    for name, (value, wanted) in fields.items():
        if value is not None and not isinstance(value, wanted):
            return f"its '{name}' is a {type(value).__name__}, not what fairseq-train saves there"
    if cfg is None and args is None:
        return "it holds no configuration ('cfg' and 'args' are None)"
    numpy_value = numpy_in_configuration(state)
    if numpy_value is not None:
        return numpy_value
    model_cfg = stored_group(state, "model")
    if model_cfg is None:
        return "it holds no model configuration (its cfg.model is None)"
    for group, name in STORED_NAMES:
        value = stored_value(state, group, name)
        if value is not None and not isinstance(value, str):  # a KeyError: 123 in fairseq
            return f"its {group} configuration's {name} {shown(value)} is no name"
    if not isinstance(model_cfg, (argparse.Namespace, dict, DictConfig)):
        return f"its cfg.model is a {type(model_cfg).__name__}, not a model's configuration"
    names = vars(model_cfg) if isinstance(model_cfg, argparse.Namespace) else model_cfg
    unnamed = next((name for name in names if not isinstance(name, str)), None)
    if unnamed is not None:
        return f"its cfg.model holds an option named {shown(unnamed)}, which is no text"
    if isinstance(error, ImportError):  # fairseq's models of optional packages, as they build
        arch = stored_value(state, "model", "_name") or stored_value(state, "model", "arch")
        said = " ".join(str(error).split())
        return f"its model {arch!r} needs a package this Python lacks: {said}"
    return unregistered_name(state) if failed_lookup(error) else None


def failed_lookup(error: Optional[Exception]) -> bool:
    """Whether ``error`` is fairseq's failure to find a model or task by the name a checkpoint
    stores (``models.build_model``, ``tasks.setup_task``)."""
    text = str(error)
    formatting = isinstance(error, IndexError) and "Replacement index" in text
    return formatting or "Could not infer" in text


def unregistered_name(state: dict) -> Optional[str]:
    """The model or task a checkpoint names that nothing registered, said; None if none."""
    from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY
    from fairseq.tasks import TASK_REGISTRY

    model = stored_value(state, "model", "_name") or stored_value(state, "model", "arch")
    if model is not None and model not in ARCH_MODEL_REGISTRY and model not in MODEL_REGISTRY:
        return f"its model {model!r} is not one that fairseq or a --user-dir given registers"
    task = stored_value(state, "task", "_name") or stored_value(state, "task", "task")
    if task is not None and task not in TASK_REGISTRY:
        return f"its task {task!r} is not one that fairseq or a --user-dir given registers"
    return None


def refuse_stored_values_in(path: str, state: dict) -> None:
    """Refuse a checkpoint of a plugin model whose configuration holds a value of another type
    than the model's option takes (text, a float or a list for an int, text for a number or
    True/False), or text outside the option's choices, or None where the architecture sets a
    value: fairseq-train's parser wrote none of them, and each failed inside the model
    (``dropout`` "abc": ``TypeError`` in its first forward; ``decoder_layers`` 6.0 or
    ``decoder_attention_heads`` None in its constructor). None is left to the model where the
    architecture sets none (several options are optional), and a value of the type the
    architecture itself sets is the model's: a language model's architecture sets fairseq's
    dataclass defaults, some of another type than their parser's (``base_shuffle`` False for an
    int). The plugin's own options are checked where the model is built
    (``models.option_checks``)."""
    from fairseq_san import options
    from fairseq_san.fairseq_fixes.model_overrides import model_options, plugin_model_class
    from fairseq_san.models.option_checks import architecture_defaults

    model_cfg = stored_group(state, "model")
    model_class = plugin_model_class(model_cfg)
    if not isinstance(model_cfg, argparse.Namespace) or model_class is None:
        return
    defaults = architecture_defaults(model_cfg.arch)
    for key, action in model_options(model_class).items():
        value, default = getattr(model_cfg, key, None), getattr(defaults, key, None)
        if key in vars(model_cfg) and value is None:
            problem = unset_value_problem(model_cfg.arch, key, default)
        elif key in options.OPTIONS or of_the_architectures_type(value, default):
            continue
        else:
            problem = stored_value_problem(key, value, action)
        if problem is not None:
            raise CheckpointError(
                f"cannot load checkpoint {path}: {key} {value!r} (in the checkpoint) {problem}"
            )


def refuse_weights_that_are_not_in(path: str, state: dict) -> None:
    """Refuse a checkpoint of a plugin model whose weights (``model``) are not all tensors named
    by text, as ``state_dict()`` saves them: a number or an int key failed where the model read
    them back (``checkpoint_policy``'s checks, a TypeError)."""
    from fairseq_san.fairseq_fixes.model_overrides import plugin_model_class

    weights = state.get("model")
    if plugin_model_class(stored_group(state, "model")) is None or not isinstance(weights, dict):
        return  # another model's, or not a dict: explained where fairseq fails on it
    for key, value in weights.items():
        if not isinstance(key, str) or not isinstance(value, torch.Tensor):
            raise CheckpointError(
                f"cannot load checkpoint {path}: its weights hold {shown(key)}, a "
                f"{type(value).__name__}; fairseq-train saves tensors named by text"
            )
        problem = tensor_problem(value)
        if problem is None and is_parameter(key) and not value.is_floating_point():
            problem = f"a tensor of {torch_word(value.dtype)}"  # cast to 0/1
        if problem is not None:
            raise CheckpointError(
                f"cannot load checkpoint {path}: its weight {key} is {problem}; fairseq-train "
                "saves dense floating-point weights"
            )


def is_parameter(key: str) -> bool:
    """Whether a state dict's ``key`` names a layer's weight or bias (a buffer may hold whole
    numbers: the ``version`` of fairseq's adaptive softmax is an int64 tensor)."""
    return key.rpartition(".")[2] in ("weight", "bias")


def tensor_problem(tensor: torch.Tensor) -> Optional[str]:
    """What a stored tensor is where fairseq-train saves none such (sparse, without values, of
    complex numbers), which failed deep inside torch as a model or a mean read it; else None."""
    if tensor.layout != torch.strided:
        return f"a {torch_word(tensor.layout)} tensor"
    if tensor.is_meta:
        return "a meta tensor, which holds no values"
    if tensor.is_complex():
        return f"a tensor of complex numbers ({torch_word(tensor.dtype)})"
    return None


def torch_word(value: object) -> str:
    """A torch dtype or layout as a message says it: ``int64`` for ``torch.int64``."""
    return str(value).replace("torch.", "")


def non_finite_weight(weights: Dict[str, torch.Tensor]) -> Optional[str]:
    """The first floating-point weight holding a NaN or an infinity (a training that diverged),
    or None; tensors that ``tensor_problem`` refuses are left to it."""
    return next(
        (name for name, tensor in weights.items()
         if isinstance(tensor, torch.Tensor) and tensor_problem(tensor) is None
         and tensor.is_floating_point() and not torch.isfinite(tensor).all()),
        None,
    )  # fmt: skip


def refuse_non_finite_weights_in(path: str, state: dict) -> None:
    """Refuse a checkpoint whose weights hold NaN or infinite values: every translation of it
    failed inside fairseq's beam search (``AssertionError: 4 < 4``), the static decoder's
    (max_len with live sentences), and its loss was NaN."""
    weights = state.get("model")
    broken = non_finite_weight(weights) if isinstance(weights, dict) else None
    if broken is not None:
        raise CheckpointError(
            f"cannot load checkpoint {path}: its weight {broken} holds NaN or infinite values "
            "(the training diverged before saving it): take an earlier checkpoint"
        )


def refuse_beyond_float16(
    weights: Iterable[Tuple[str, torch.Tensor]],
    what: str = "--fp16",
    fix: str = "run in float32 (leave --fp16 and --memory-efficient-fp16 out)",
) -> None:
    """Refuse converting a model to float16 (``what``: fairseq's ``--fp16`` at evaluation and
    in training, ``.half()``) where a weight is beyond float16's range: it became infinite, and
    every translation failed inside the beam search (fairseq's ``AssertionError: 12 < 12``, the
    static decoder's max_len with live sentences)."""
    limit = torch.finfo(torch.float16).max
    for name, tensor in weights:
        if not tensor.is_floating_point() or tensor.dtype == torch.float16 or not tensor.numel():
            continue
        largest = tensor.detach().abs().max().item()
        if largest > limit:
            raise UsageError(
                f"{what}: the model's weight {name} holds {largest:g}, beyond float16's range "
                f"({limit:g}), where it would become infinite; {fix}"
            )


def of_the_architectures_type(value: object, default: object) -> bool:
    """Whether ``value`` is no text and of the type of the architecture's ``default`` (text is
    checked against the option's choices whatever the architecture sets)."""
    return not isinstance(value, str) and default is not None and type(value) is type(default)


def unset_value_problem(arch: str, key: str, default: object) -> Optional[str]:
    """Why a stored None for the option ``key`` is none that fairseq-train writes (the
    architecture ``arch`` sets it to ``default`` where the command line gives nothing), or
    None where the architecture leaves it unset too."""
    if default is None:
        return None
    return f"is no value, but {arch} sets one ({default!r} where no option is given)"


def stored_value_problem(key: str, value: object, action: argparse.Action) -> Optional[str]:
    """Why a stored ``value`` is none that the option ``action`` of fairseq-train's parser would
    have written, or None."""
    from fairseq_san.fairseq_fixes.model_overrides import fits, wanted_type

    wanted = wanted_type(action)
    if isinstance(value, str):
        if wanted is not None:
            return f"is text, but {key} takes {wanted[1]}"
        if action.choices and all(isinstance(c, str) for c in action.choices):
            return None if value in action.choices else f"is not one of {', '.join(action.choices)}"
        return None
    if value is not None and wanted is not None and not fits(value, wanted[0], None):
        return f"is of type {type(value).__name__}, but {key} takes {wanted[1]}"
    return None


# How torch's safe loader names the global it refused: one outside its allow-list, and one of a
# module it blocks outright (os, posix, subprocess, ...).
UNSAFE_GLOBAL = re.compile(
    r"Unsupported global: GLOBAL (\S+) was not an allowed global"
    r"|unsupported GLOBAL (\S+) whose module \S+ is blocked"
)


def unsafe_globals(path: str, error: Exception) -> List[str]:
    """The globals outside the safe loader's allow-list that made loading ``path`` fail: listed
    from the archive, or for a file in torch's legacy (not zip) format, the one the error names."""
    if not isinstance(error, pickle.UnpicklingError):
        return []
    if zipfile.is_zipfile(path):
        try:
            return torch.serialization.get_unsafe_globals_in_checkpoint(path)
        except pickle.UnpicklingError:  # a damaged pickle, no global to name: content_problem
            return []
    return [found.group(1) or found.group(2) for found in UNSAFE_GLOBAL.finditer(str(error))]


@contextlib.contextmanager
def explained(*paths: str) -> Iterator[None]:
    """Turn a failure to load ``paths`` into a CheckpointError when one of the files explains it
    (torch's warning of another pickle protocol left out: the error says what the file is)."""
    try:
        with protocol_warning_left_out():
            yield
    except UsageError:  # said already, in one line (CheckpointError, the model's own checks)
        raise
    except Exception as error:
        for path in paths:
            problem = problem_with(path, error)
            if problem is not None:
                raise CheckpointError(f"cannot load checkpoint {path}: {problem}") from error
        raise


def refuse_policy_file_in(path: str, state: dict, overrides: Optional[dict]) -> None:
    """Refuse a checkpoint whose stored ``san_policy`` is a file name, not JSON text.

    A model stores its resolved policy as JSON text (``transformer_san.resolve_model_policy``);
    a file name is for the command line (``--san-policy``, ``--model-overrides``). Read from a
    checkpoint, it would make loading open whatever file the checkpoint names (``/dev/zero``,
    or a file whose first key the error would then print)."""
    if "san_policy" in (overrides or {}):
        return  # the user's value, not the checkpoint's
    stored = stored_value(state, "model", "san_policy")
    if isinstance(stored, str) and stored.strip() and not is_policy_text(stored):
        raise CheckpointError(
            f"checkpoint {path}: cfg.model.san_policy = {stored[:40]!r} is a file name; a "
            "checkpoint stores its policy as JSON text, and only the command line may name a "
            "policy file: refused"
        )


def stored_group(state: dict, group: str) -> object:
    """A checkpoint's ``group`` ("model", "task") configuration, or its ``args`` (checkpoints
    saved before fairseq's dataclass configurations); None if neither."""
    return (state.get("cfg") or {}).get(group) or state.get("args")


def stored_value(state: dict, group: str, name: str) -> object:
    """Option ``name`` of a checkpoint's ``group`` ("model", "task") configuration, or of its
    ``args`` (checkpoints saved before fairseq's dataclass configurations); None if unset."""
    node = stored_group(state, group)
    if isinstance(node, dict) or hasattr(node, "keys"):  # a dict or an omegaconf DictConfig
        return node.get(name)
    return getattr(node, name, None)


def stored_holds(state: dict, group: str, name: str) -> bool:
    """Whether a checkpoint's ``group`` configuration (``stored_value``'s) holds option ``name``
    at all: a checkpoint saved before the option was recorded (an older fairseq or plugin) does
    not, which says nothing of its value."""
    node = stored_group(state, group)
    if isinstance(node, dict) or hasattr(node, "keys"):
        return name in node
    return hasattr(node, name)


def language_model_in(state: dict) -> Optional[str]:
    """``task T, arch A`` where a checkpoint's configuration (read, not built) is a language
    model's: its task models language or its architecture is a language model; else None."""
    from fairseq import tasks
    from fairseq.models import ARCH_MODEL_REGISTRY, FairseqLanguageModel
    from fairseq.tasks.language_modeling import LanguageModelingTask

    task = stored_value(state, "task", "_name") or stored_value(state, "task", "task")
    arch = stored_value(state, "model", "_name") or stored_value(state, "model", "arch")
    task_class = tasks.TASK_REGISTRY.get(task)
    model_class = ARCH_MODEL_REGISTRY.get(arch)
    if (task_class is not None and issubclass(task_class, LanguageModelingTask)) or (
        model_class is not None and issubclass(model_class, FairseqLanguageModel)
    ):
        return f"task {task}, arch {arch}"
    return None


# Files a model's options name that its build reads and its checkpoint's weights then replace.
EMBEDDING_FILES = ("encoder_embed_path", "decoder_embed_path")


def drop_embedding_files_in(path: str, state: dict, overrides: Optional[dict]) -> None:
    """Unset the pretrained-embedding files a checkpoint stores (``--encoder-embed-path``), unless
    the user gives them: fairseq's build read whatever file the checkpoint named (a pipe hung
    every command, a folder or another file was a traceback, a file of the trainer's machine
    missing), only for the checkpoint's own embeddings to replace what it read."""
    for name in EMBEDDING_FILES:
        stored = stored_value(state, "model", name)
        if stored and name not in (overrides or {}):
            logger.info("checkpoint %s: its %s %r is not read (its embeddings are in it)",
                        path, name, stored)  # fmt: skip
            set_stored_value(state, "model", name, None)


def set_stored_value(state: dict, group: str, name: str, value: object) -> None:
    """Set option ``name`` of a checkpoint's ``group`` configuration and of its ``args``."""
    for node in ((state.get("cfg") or {}).get(group), state.get("args")):
        if isinstance(node, DictConfig):
            with open_dict(node):
                node[name] = value
        elif isinstance(node, dict):
            node[name] = value
        elif node is not None and hasattr(node, name):
            setattr(node, name, value)


def refuse_analysis_dir_in(path: str, state: dict, overrides: Optional[dict]) -> None:
    """Refuse a checkpoint that stores ``san_analysis_dir`` unless the user gives one (None too):
    fairseq-validate and the hub build the task from the checkpoint's configuration, so it
    chose a folder that they created and wrote into. fairseq-train refuses the option now (it
    took it before 2026-11-29); only the command line names the folder."""
    overrides = overrides or {}
    task = overrides.get("task") if isinstance(overrides.get("task"), dict) else {}
    if "san_analysis_dir" in overrides or "san_analysis_dir" in task:
        return  # the user's value, None too ({'task': {...}}: the group), not the checkpoint's
    stored = stored_value(state, "task", "san_analysis_dir")
    if stored:
        raise CheckpointError(
            f"checkpoint {path}: cfg.task.san_analysis_dir = {str(stored)[:60]!r} names a folder "
            "to write to, which only the command line may name: refused (load it with "
            "--san-analysis-dir DIR, or with --model-overrides \"{'san_analysis_dir': None}\" "
            "to analyse nothing)"
        )


def refuse_eval_bleu_args_in(path: str, state: dict) -> None:
    """Refuse a checkpoint whose task validates with BLEU (``eval_bleu``) but stores
    ``eval_bleu_args`` or ``eval_bleu_detok_args`` that are no JSON object: fairseq's
    translation task reads them with ``json.loads`` where it builds the model (fairseq-validate,
    the hub), a traceback (``translation_san.json_object`` checks fairseq-train's). In
    fairseq-validate, which decodes its BLEU with them, a key that names no generation option
    too (``translation_san.check_stored_eval_bleu_args``)."""
    from fairseq_san.fairseq_fixes.wrapping import running_command
    from fairseq_san.tasks.translation_san import check_stored_eval_bleu_args, json_object

    if stored_value(state, "task", "eval_bleu") is not True:
        return
    for name in ("eval_bleu_args", "eval_bleu_detok_args"):
        try:
            json_object(f"cfg.task.{name}", stored_value(state, "task", name), "{}")
        except UsageError as error:
            raise CheckpointError(
                f"checkpoint {path}: {error}; fairseq's translation task reads it as it builds "
                "the model: refused (load it with --model-overrides \"{'eval_bleu': False}\")"
            ) from None
    if running_command("fairseq_cli.validate") is not None:
        check_stored_eval_bleu_args(stored_value(state, "task", "eval_bleu_args"))


def stored_layers(state_dict: dict, stack: str) -> int:
    """How many layers of ``stack`` ("encoder", "decoder") a checkpoint's weights hold."""
    found = (re.match(rf"{stack}\.layers\.(\d+)\.", str(key)) for key in state_dict)
    return len({match.group(1) for match in found if match})


def refuse_layers_beyond_weights_in(path: str, state: dict) -> None:
    """Refuse a checkpoint whose configuration (overrides applied) asks for more layers of a stack
    than its weights hold, or for a negative count: fairseq builds every configured layer before
    it reads the weights, so a file saying 1,000,000 decoder layers ran until killed, and a
    smaller excess failed after the build (missing weights)."""
    weights = state.get("model")
    if not isinstance(weights, dict):
        return
    for stack in ("encoder", "decoder"):
        configured = stored_value(state, "model", f"{stack}_layers")
        # text: fairseq's convolutional models give each layer's shape there; a stack built
        # from --*-layers-to-keep has that many layers, whatever the count beside it
        if isinstance(configured, bool) or not isinstance(configured, int):
            continue
        if stored_value(state, "model", f"{stack}_layers_to_keep"):
            continue
        if configured < 0:
            raise CheckpointError(
                f"cannot load checkpoint {path}: its configuration's {stack}_layers "
                f"{configured!r} is no number of layers"
            )
        stored = stored_layers(weights, stack)
        if stored and configured > stored:
            raise CheckpointError(
                f"cannot load checkpoint {path}: its configuration asks for {configured} {stack} "
                f"layers, its weights hold {stored}: not a checkpoint that fairseq-train wrote "
                f"(or --model-overrides sets {stack}_layers)"
            )


# More positions than any model fairseq-train trains here: fairseq builds the sinusoidal table of
# every configured position as it builds the model (none of it in the weights), 4 GB at 2**20
# positions of 1,024 dimensions; a received file saying 10**10 asked for 40 GB.
MAX_POSITIONS = 2**20


# The decoder's widths that no layer's fc1 holds, by the weight each is the width of: a received
# file saying 5*10**7 for decoder_output_dim took 6.6 GB and 25 s before a missing weight. A
# language model's embeddings are decoder_input_dim wide (a translation model's are
# decoder_embed_dim wide, and it reads no decoder_input_dim).
WIDTH_WEIGHTS = (("decoder_output_dim", "decoder.output_projection.weight"),)
LM_WIDTH_WEIGHTS = (("decoder_input_dim", "decoder.embed_tokens.weight"),)


def refuse_sizes_beyond_weights_in(path: str, state: dict) -> None:
    """Refuse a checkpoint whose configuration gives a stack wider layers than its weights hold
    (``{stack}_embed_dim``, ``{stack}_ffn_embed_dim`` against its first layer's ``fc1``; the
    decoder's output width, and a language model's input width, against ``WIDTH_WEIGHTS``), a
    width that is no positive number, or more positions than ``MAX_POSITIONS``: fairseq builds
    the model before it reads the weights, and a received file said 5,000,000 for the decoder's
    FFN (4.2 GB and 24 s before the size mismatch), 10**10 positions (a 40 GB table), or 0
    dimensions (a ZeroDivisionError deep inside fairseq); and attention heads that do not divide
    their stack's width (``refuse_heads_not_dividing_in``)."""
    weights = state.get("model")
    if not isinstance(weights, dict):
        return
    for name, value in stored_items(state, "model"):
        stack_width = name.startswith(("encoder_", "decoder_")) and name.endswith("_dim")
        if stack_width and is_count(value) and value < 1:
            raise CheckpointError(
                f"cannot load checkpoint {path}: its configuration's {name} {value} is no width"
            )
    widths = WIDTH_WEIGHTS + (LM_WIDTH_WEIGHTS if language_model_in(state) else ())
    for name, key in widths:
        configured, stored = stored_value(state, "model", name), weights.get(key)
        if is_count(configured) and torch.is_tensor(stored) and stored.dim() == 2:
            if configured > stored.shape[1]:
                raise CheckpointError(
                    f"cannot load checkpoint {path}: its configuration's {name} {configured} is "
                    f"more than its weights' {stored.shape[1]} ({key}): not a checkpoint that "
                    f"fairseq-train wrote (or --model-overrides sets {name})"
                )
    for stack in ("encoder", "decoder"):
        fc1 = weights.get(f"{stack}.layers.0.fc1.weight")
        if not torch.is_tensor(fc1) or fc1.dim() != 2:
            continue
        for name, stored in ((f"{stack}_ffn_embed_dim", fc1.shape[0]),
                             (f"{stack}_embed_dim", fc1.shape[1])):  # fmt: skip
            configured = stored_value(state, "model", name)
            if is_count(configured) and configured > stored:
                raise CheckpointError(
                    f"cannot load checkpoint {path}: its configuration's {name} {configured} is "
                    f"more than its weights' {stored} ({stack}.layers.0.fc1): not a checkpoint "
                    f"that fairseq-train wrote (or --model-overrides sets {name})"
                )
    refuse_positions_beyond_limit_in(path, state)
    refuse_heads_not_dividing_in(path, state)


def refuse_heads_not_dividing_in(path: str, state: dict) -> None:
    """Refuse a stack whose configured attention heads do not divide its width (each head takes
    an equal part of it): the model's check named the command line's flags, which the checkpoint
    was not given."""
    for stack in ("encoder", "decoder"):
        name = f"{stack}_attention_heads"
        heads = stored_value(state, "model", name)
        width = stored_value(state, "model", f"{stack}_embed_dim")
        if is_count(heads) and is_count(width) and width >= 1 and (heads < 1 or width % heads):
            raise CheckpointError(
                f"cannot load checkpoint {path}: its configuration's {name} {heads} does not "
                f"divide its {stack}_embed_dim {width}: not a checkpoint that fairseq-train "
                f"wrote (or --model-overrides sets {name})"
            )


def refuse_positions_beyond_limit_in(path: str, state: dict) -> None:
    """Refuse a configured number of positions (a language model's samples, where its model
    gives none) that is not from 1 to ``MAX_POSITIONS``."""
    given = [(name, stored_value(state, "model", name))
             for name in ("max_source_positions", "max_target_positions")]  # fmt: skip
    if given[1][1] is None:  # a language model's: its samples' length
        given.append(("tokens_per_sample", stored_value(state, "task", "tokens_per_sample")))
    for name, value in given:
        if is_count(value) and not 1 <= value <= MAX_POSITIONS:
            raise CheckpointError(
                f"cannot load checkpoint {path}: its configuration's {name} {value:,} is not "
                f"from 1 to {MAX_POSITIONS:,} (fairseq builds a table of every position before "
                "it reads the weights)"
            )


def stored_items(state: dict, group: str) -> List[Tuple[str, object]]:
    """The (name, value) pairs of a checkpoint's ``group`` configuration (``stored_group``)."""
    node = stored_group(state, group)
    if isinstance(node, dict) or hasattr(node, "keys"):
        return [(str(name), node.get(name)) for name in node.keys()]
    return list(vars(node).items()) if hasattr(node, "__dict__") else []


def is_count(value: object) -> bool:
    """Whether ``value`` is an int (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool)


def load_state(path: str) -> dict:
    """A checkpoint's contents on the CPU, with torch's safe loader (memory-mapped if possible)."""
    from fairseq_san.fairseq_fixes.safe_loading import allow_fairseq_globals

    check_safe_loading()
    allow_fairseq_globals()
    refuse_before_reading(path)  # is_zipfile would read a pipe, torch.load wait for a writer
    with explained(path):
        state = torch.load(
            path, map_location="cpu", mmap=zipfile.is_zipfile(path), weights_only=True
        )
    return numpy_restored_in(path, state)


def numpy_restored_in(path: str, state: object) -> object:
    """``state`` with the numpy values that torch's safe loader read as records made numpy's
    (``safe_numpy``); a CheckpointError naming ``path`` for one that is not of numbers."""
    from fairseq_san.safe_numpy import MALFORMED, PickleRefused, numpy_restored

    try:
        restored = numpy_restored(state)
    except PickleRefused as refused:
        problem = refused_objects(refused)
        raise CheckpointError(f"cannot load checkpoint {path}: {problem}") from None
    except RecursionError:
        raise CheckpointError(
            f"cannot load checkpoint {path}: its containers nest too deep"
        ) from None
    except (*MALFORMED, MemoryError) as error:
        raise CheckpointError(
            f"cannot load checkpoint {path}: it holds what torch.save of fairseq's objects does "
            f"not write ({type(error).__name__})"
        ) from None
    problem = isinstance(restored, dict) and numpy_in_configuration(restored)
    if problem:
        raise CheckpointError(f"cannot load checkpoint {path}: {problem}")
    return restored


def numpy_in_configuration(state: dict) -> Optional[str]:
    """Why a checkpoint's configuration (``cfg``, ``args``) is not fairseq-train's: a numpy value
    in it (fairseq saves them in the metrics only; its code would compare them with numbers); or
    None."""
    from fairseq_san.safe_numpy import numpy_field

    for name in ("cfg", "args"):
        field = numpy_field(state.get(name))
        if field is not None:
            return (
                f"its configuration's {name}.{field} is a numpy value, which fairseq-train never "
                "saves there"
            )
    return None
