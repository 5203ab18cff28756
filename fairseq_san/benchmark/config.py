"""What a benchmark runs: its systems, decoding settings and options, with their defaults.

Pure Python (no torch, no fairseq) so that ``fairseq-san-bench --help`` stays fast: the command
line takes every default from the dataclasses here, the one place they are written.
"""

import argparse
import dataclasses
import json
import math
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Collection, Dict, List, Optional, Sequence, Tuple

from fairseq_san import options
from fairseq_san.cores import threads_problem
from fairseq_san.errors import UsageError, json_error, nearest_key_hint, repeated
from fairseq_san.files import glob_in, language_model_data
from fairseq_san.options import flag_of
from fairseq_san.policy import PolicyError, resolve_policy

# Output lengths: where each sentence ends (EOS or the length limit), or a fixed number of tokens.
NATURAL, FIXED = "natural", "fixed"
MODES = (NATURAL, FIXED)

# Engines, each timed in worker processes of its own (see ``workers``).
FAIRSEQ = "fairseq"
CTRANSLATE2 = "ctranslate2"
# The name of the baseline's CTranslate2 row of each compute type, and what no system may be named.
CTRANSLATE2_NAME = "{base} (CTranslate2 {compute_type})"
CTRANSLATE2_ROW = re.compile(r"\(CTranslate2 \w+\)$")

# Decoders of the fairseq engine: fairseq's SequenceGenerator, or the static-shape decoder (the
# deprecated san_decoder's choices).
STATIC = options.STATIC
LEGACY = options.OPTIONS["san_decoder"]

# Short precision labels of the result tables, from torch dtypes and CTranslate2 compute types.
PRECISION_LABELS = {
    "float32": "fp32",
    "float16": "fp16",
    "bfloat16": "bf16",
    "int8": "int8",
    "int8_float32": "int8",
    "int8_float16": "int8+fp16",
    "int8_bfloat16": "int8+bf16",
}


def precision_label(dtype_or_compute_type: str) -> str:
    """``fp32`` for ``torch.float32`` or ``float32``; ``int8`` for CTranslate2's ``int8``."""
    name = dtype_or_compute_type.replace("torch.", "")
    return PRECISION_LABELS.get(name, name)


def unknown_key_error(what: str, key: str, valid: Collection[str]) -> str:
    """One line naming an unknown key and the nearest valid one (difflib), for ValueError; where
    none is near, not the list of the checkpoint's whole configuration (some 330 keys, the
    generation options the benchmark refuses among them)."""
    fallback = "no option of the checkpoint's model or of the decoder is named so"
    return f"{what}: unknown key {key!r} ({nearest_key_hint(key, valid, fallback)})"


@dataclass
class SystemSpec:
    """``NAME=CKPT[:OVERRIDES_JSON]`` from the command line.

    ``overrides`` holds model options (given to fairseq when it loads the checkpoint) and the
    decoder's options (``options.DECODER_OPTION_NAMES``: ``san_decoding`` static, or the
    deprecated ``san_decoder``, and the precision choose the generator, and are taken out of the
    overrides before fairseq loads the checkpoint; the other decodings are the model's own).
    """

    name: str
    checkpoint: str
    overrides: Dict = field(default_factory=dict)

    @property
    def model_overrides(self) -> Dict:
        """The overrides fairseq applies to the model: all but the generator's."""
        decoder = options.DECODER_OPTION_NAMES
        overrides = {k: v for k, v in self.overrides.items() if k not in decoder}
        if self.overrides.get(options.DECODING.name) in options.MODEL_DECODINGS:
            overrides[options.DECODING.name] = self.overrides[options.DECODING.name]
        return overrides

    @property
    def decoder(self) -> str:
        """``static`` (``san_decoding``, or the deprecated ``san_decoder``) or ``fairseq`` (the
        generator of the model's own decodings)."""
        decoding = self.overrides.get(options.DECODING.name, FAIRSEQ)
        chosen = options.chosen_decoding(decoding, self.overrides.get("san_decoder", FAIRSEQ))
        return STATIC if chosen == STATIC else FAIRSEQ

    @property
    def decoder_precision(self) -> str:
        """The static decoder's precision (the option's default unless overridden)."""
        name = options.DECODER_PRECISION.name
        return self.overrides.get(name, options.DECODER_PRECISION.default)

    def check_overrides(self, valid: Collection[str], precisions: Collection[str]) -> None:
        """ValueError naming the nearest valid key for an override the checkpoint would ignore,
        or naming a decoder or precision (one of ``precisions``) that does not exist.

        fairseq applies an override only to a key its configuration already has (or sets it
        unread on a legacy argparse namespace), so a typo would silently decode the wrong system.
        """
        what = f"system {self.name}: override of {self.checkpoint}"
        san = "san_policy" in valid  # a transformer_san checkpoint: every option of the plugin
        self._check_keys(what, valid, san)
        self._check_decoding(what, san)
        self._check_static_options(what, precisions)

    def _check_keys(self, what: str, valid: Collection[str], san: bool) -> None:
        """ValueError for an override the checkpoint would not read: ``data``, a key of none of
        ``valid`` and the plugin's options, or a model option of a model that is not ``san``."""
        keys = set(valid) | set(options.DECODER_OPTION_NAMES)
        if "data" in self.overrides:  # the worker decoded it, the report scored --data's
            raise ValueError(
                f"{what}: override 'data': every system decodes the sentences of --data, "
                "batched once for all; benchmark other data in a run of its own"
            )
        if san:
            keys |= set(options.option_names())
        for key in self.overrides:
            if not san and key in options.MODEL_OPTION_NAMES:
                raise ValueError(
                    f"{what}: {key} is an option of the plugin's models, and this checkpoint's "
                    "model is none of them (fairseq's own) and reads none: attention sharing "
                    "needs a model trained as transformer_san"
                )
            if key not in keys:
                raise ValueError(unknown_key_error(what, key, keys))

    def _check_decoding(self, what: str, san: bool) -> None:
        """ValueError unless ``san_decoding`` and the deprecated ``san_decoder`` name one decoder
        that exists, and one the model (``san``: a transformer_san model's) decodes with."""
        decoding = self.overrides.get(options.DECODING.name, options.FAIRSEQ)
        if decoding not in options.DECODINGS:
            raise ValueError(
                f"{what}: san_decoding must be one of {options.DECODINGS}, not {decoding!r}"
            )
        if decoding not in (options.FAIRSEQ, STATIC) and not san:
            raise ValueError(
                f"{what}: san_decoding {decoding!r} needs a transformer_san checkpoint (this "
                "model would decode as fairseq's)"
            )
        legacy = self.overrides.get(LEGACY.name, FAIRSEQ)
        if legacy not in LEGACY.choices:
            raise ValueError(
                f"{what}: san_decoder must be one of {LEGACY.choices}, not {legacy!r}"
            )
        try:
            options.chosen_decoding(decoding, legacy)
        except UsageError as two_decoders:
            raise ValueError(f"{what}: {two_decoders}") from None
        if options.DECODING.name in self.overrides and decoding != STATIC == str(legacy):
            raise ValueError(  # chosen_decoding reads a fairseq decoding as the default's
                f'{what}: "san_decoding": "{decoding}" and the deprecated "san_decoder": '
                f'"{STATIC}" choose two decoders: give "san_decoding" alone'
            )

    def _overridden(self, option: options.Option) -> bool:
        """Whether the system's overrides name ``option`` (to any value, its default too)."""
        return option.name in self.overrides

    def _check_static_options(self, what: str, precisions: Collection[str]) -> None:
        """ValueError for the static decoder's execution or precision (one of ``precisions``)
        given to a system the static decoder does not decode, or given as no such one."""
        misplaced = options.misplaced_static_option(self.decoder, self._overridden)
        if misplaced is not None:
            value = self.overrides[misplaced.name]
            refusal = options.misplaced_static_refusal(misplaced, value, self.decoder, key_spelt)
            raise ValueError(f"{what}: {refusal}")
        execution = self.overrides.get("san_decoder_execution")
        if execution is not None and not isinstance(execution, str):  # quoted as its str()
            raise ValueError(f"{what}: san_decoder_execution must be text (an execution's name), "
                             f"not {execution!r}")  # fmt: skip
        if "san_decoder_precision" not in self.overrides:
            return
        precision = self.decoder_precision  # a list failed the lookup: "unhashable type"
        if not isinstance(precision, str) or precision not in precisions:
            raise ValueError(
                f"{what}: san_decoder_precision must be one of {tuple(precisions)}, "
                f"not {self.decoder_precision!r}"
            )


def key_spelt(option: options.Option, value: object) -> str:
    """``option`` as a system's overrides give it: its JSON key, with ``value`` unless None."""
    key = json.dumps(option.name)
    return key if value is None else f"{key}: {json.dumps(value)}"


def fairseq_twins(systems: Sequence[SystemSpec]) -> Dict[str, str]:
    """For each system the static decoder decodes, the first system that fairseq's own decoder
    decodes from the same checkpoint with the same model overrides: the translations the static
    decoder is built to reproduce (the report's ``= fairseq`` column). The same checkpoint however
    its path is spelt (``./a.pt``), and ``san_decoding: fairseq``, the default, as no override:
    either left the column empty."""

    def model(spec: SystemSpec) -> tuple:
        overrides = policy_resolved(dict(spec.model_overrides))
        if overrides.get(options.DECODING.name) == FAIRSEQ:
            del overrides[options.DECODING.name]
        return os.path.realpath(spec.checkpoint), json.dumps(overrides, sort_keys=True)

    decoded_by_fairseq: Dict[tuple, str] = {}
    for spec in systems:
        if spec.decoder == FAIRSEQ:
            decoded_by_fairseq.setdefault(model(spec), spec.name)
    return {
        spec.name: decoded_by_fairseq[model(spec)]
        for spec in systems
        if spec.decoder == STATIC and model(spec) in decoded_by_fairseq
    }


def policy_resolved(overrides: Dict) -> Dict:
    """``overrides`` with its policy (``san_policy`` and the per-kind ``san_*_policy``) as the
    blocks it gives, however it is written (a file, JSON text spaced otherwise): the same policy
    spelt twice left ``= fairseq`` empty. Where it does not load, as written (loading refuses
    it)."""
    names = [options.OPTIONS["san_policy"].name, *(o.name for o in options.POLICY_OPTIONS.values())]
    if not any(name in overrides for name in names):
        return overrides
    flags = {kind: overrides.get(option.name) for kind, option in options.POLICY_OPTIONS.items()}
    try:
        policy = resolve_policy(overrides.get(names[0]), flags)
    except (PolicyError, OSError):
        return overrides
    rest = {key: value for key, value in overrides.items() if key not in names}
    return {**rest, "policy": policy}


# Where a system's overrides start after its checkpoint: ``:{``, spaces allowed between.
OVERRIDES_START = re.compile(r":\s*\{")


def split_system(text: str) -> Tuple[str, str, Optional[str]]:
    """``NAME=CKPT[:OVERRIDES]`` as (NAME, CKPT, OVERRIDES from its ``{``, or None): NAME ends at
    the first ``=`` and OVERRIDES start at the first ``:{`` (``: {`` too: a space there made them
    part of the checkpoint's name), so a checkpoint's path may hold ``:``. How every command
    reads a system (the benchmark; ``fairseq-san-loop test-systems``)."""
    name, sep, rest = text.partition("=")
    if not sep or not name or not rest:
        raise ValueError(f"system {text!r}: expected NAME=CHECKPOINT[:OVERRIDES_JSON]")
    overrides = OVERRIDES_START.search(rest)
    if overrides is None:
        return name, rest, None
    return name, rest[: overrides.start()], rest[overrides.end() - 1 :]


def parse_system(text: str) -> SystemSpec:
    """``NAME=CKPT`` or ``NAME=CKPT:{"san_no_cache": true}`` (JSON from the first ``:{``)."""
    name, checkpoint, overrides_text = split_system(text)
    overrides = {}
    if overrides_text is not None:
        try:
            overrides = json.loads(overrides_text)
        except ValueError as err:  # an integer of more digits than Python converts too
            raise ValueError(f"system {name}: overrides are not JSON: {json_error(err)}") from None
        except RecursionError:
            raise ValueError(f"system {name}: overrides nest too deeply to be JSON") from None
        if not isinstance(overrides, dict):
            raise ValueError(f"system {name}: overrides must be a JSON object")
    return SystemSpec(name, checkpoint, overrides)


@dataclass
class Setting:
    """One decoding configuration: beam size and length mode (``length`` is L in fixed mode)."""

    beam: int
    mode: str
    length: Optional[int] = None

    @classmethod
    def of(cls, beam: int, mode: str, fixed_length: int) -> "Setting":
        """The setting of ``beam`` and ``mode``, with ``fixed_length`` in fixed mode only."""
        return cls(beam, mode, fixed_length if mode == FIXED else None)

    @property
    def key(self) -> str:
        """Its key in results.json: ``beam4_natural``, ``beam20_fixed``."""
        return f"beam{self.beam}_{self.mode}"

    def generation_args(self, max_len_a: float, max_len_b: int, lenpen: float):
        if self.mode == FIXED:
            return argparse.Namespace(
                beam=self.beam, min_len=self.length, max_len_a=0, max_len_b=self.length,
                lenpen=lenpen,
            )  # fmt: skip
        return argparse.Namespace(
            beam=self.beam, min_len=1, max_len_a=max_len_a, max_len_b=max_len_b, lenpen=lenpen
        )


@dataclass
class DecodeOptions:
    """Natural lengths stop at ``max_len_a * source length + max_len_b`` tokens."""

    max_len_a: float = 0.0
    max_len_b: int = 200
    lenpen: float = 1.0


@dataclass
class BenchmarkConfig:
    data: str
    systems: List[SystemSpec]
    out_dir: str
    subset: str = "test"
    baseline: Optional[str] = None  # None: the first system
    beams: Sequence[int] = (1, 4, 8, 12, 16, 20)
    batch_size: int = 16
    repeats: int = 3
    max_sentences: Optional[int] = None
    device: str = "auto"  # auto | cpu | cuda
    fp16: bool = False
    modes: Sequence[str] = MODES
    fixed_length: Optional[int] = None  # None: the mean reference length
    cache_beams: Sequence[int] = (4, 20)
    table_beam: int = 4
    profile: bool = True
    spm_model: Optional[str] = None  # None: DATA/spm.model when it exists; "" disables
    references: Optional[str] = None  # None: DATA/text/SUBSET.raw.TGT when it exists
    decode: DecodeOptions = field(default_factory=DecodeOptions)
    threads: Optional[int] = None  # None: torch's own choice
    ctranslate2: bool = True
    command: str = ""


def field_defaults(cls) -> Dict:
    """{field: default} of the dataclass ``cls``'s fields that have one (sequences as lists)."""
    defaults = {}
    for spec in dataclasses.fields(cls):
        if spec.default_factory is not dataclasses.MISSING:
            defaults[spec.name] = spec.default_factory()
        elif spec.default is not dataclasses.MISSING:
            value = spec.default
            defaults[spec.name] = list(value) if isinstance(value, tuple) else value
    return defaults


# Options that count something, so at least 1 when given (None: the default's choice).
COUNTS = ("batch_size", "repeats", "max_sentences", "threads", "fixed_length", "table_beam")
COUNT_LISTS = ("beams", "cache_beams")


def check_numbers(config: BenchmarkConfig) -> None:
    """ValueError naming the first count below 1, a number that is not finite, natural lengths
    that allow no token, or a --max-len-b beyond a float."""
    for name in COUNTS:
        value = getattr(config, name)
        if value is not None and value < 1:
            raise ValueError(f"{flag_of(name)} {value}: must be at least 1")
    if config.threads is not None and (problem := threads_problem(config.threads)):
        raise ValueError(problem)
    for name in COUNT_LISTS:
        below = [value for value in getattr(config, name) if value < 1]
        if below:
            raise ValueError(f"{flag_of(name)} {below[0]}: beam sizes must be at least 1")
    for name in ("max_len_a", "lenpen"):
        value = getattr(config.decode, name)
        if not math.isfinite(value):
            raise ValueError(f"{flag_of(name)} {value}: must be a finite number")
    a, b = config.decode.max_len_a, config.decode.max_len_b
    if a < 0 or b < 0 or a == b == 0:
        raise ValueError(
            f"--max-len-a {a} --max-len-b {b}: natural lengths stop at a*x+b tokens; a and b "
            "must be at least 0, and not both 0"
        )
    if b > sys.float_info.max:  # a*x+b: "int too large to convert to float", a traceback
        raise ValueError(
            f"--max-len-b {b}: beyond a float (a*x+b is computed in floats); give a smaller one "
            "(a model decodes at most its positions anyway)"
        )


def check_given_once(config: BenchmarkConfig) -> None:
    """ValueError for a beam or mode listed twice: it was timed twice, the second run overwriting
    the first, and its column printed twice."""
    for name in ("beams", "modes", "cache_beams"):
        twice = repeated(getattr(config, name))
        if twice is not None:
            raise ValueError(f"{flag_of(name)}: {twice} is given twice")


def readable_file(path: str, pipe: bool) -> bool:
    """Whether ``path`` is a file, or with ``pipe`` anything but a folder that is there: the
    references are read once, so a pipe will do (``--references <(zcat test.de.gz)``)."""
    if pipe:
        return os.path.exists(path) and not os.path.isdir(path)
    return os.path.isfile(path)


def pair_subsets(data: str) -> List[str]:
    """The subsets of a language pair's binarized files in ``data`` (``SUBSET.SRC-TGT.LANG``)."""
    files = glob_in(data, "*.*-*.*")
    return sorted({os.path.basename(path).split(".")[0] for path in files})


def check_subset(data: str, subset: str) -> None:
    """ValueError for a subset that ``data`` does not hold (fairseq's "Dataset not found" named
    no option); a language model's data is left to the check that refuses it by name."""
    subsets = pair_subsets(data)
    if subset not in subsets and not language_model_data(data):
        held = ", ".join(subsets) or "none"
        raise ValueError(f"--subset {subset}: no such subset in {data} (it holds: {held})")


def check_paths(config: BenchmarkConfig) -> None:
    """ValueError for a data directory or a given file that is missing or of the wrong kind, or
    raw references without the sentencepiece model that would make hypotheses text."""
    if not os.path.isdir(config.data):
        problem = "a file, not a directory" if os.path.exists(config.data) else "no such directory"
        raise ValueError(f"--data {config.data}: {problem}")
    if not glob_in(config.data, "dict*.txt"):
        raise ValueError(
            f"--data {config.data}: not a binarized data directory (no dict.*.txt: "
            "fairseq-preprocess writes them)"
        )
    check_subset(config.data, config.subset)
    if os.path.exists(config.out_dir) and not os.path.isdir(config.out_dir):
        raise ValueError(f"--out-dir {config.out_dir} is a file, not a directory")
    sentencepiece_model(config)  # DATA/spm.model, where no --spm is given: no pipe
    for flag, path in (("--spm", config.spm_model), ("--references", config.references)):
        if path and not readable_file(path, pipe=flag == "--references"):
            problem = "is a directory" if os.path.isdir(path) else "no such file"
            raise ValueError(f"{flag} {path}: {problem}")
    if config.references and not sentencepiece_model(config):
        raise ValueError(
            f"--references {config.references}: without a sentencepiece model (--spm, "
            "DATA/spm.model) the hypotheses are the dictionary's tokens, which raw text does not "
            "compare with: give --spm MODEL, or drop --references (the binarized targets are "
            "then the references)"
        )


# What the benchmark decodes, said where a language model or its data is given.
TRANSLATION_ONLY = (
    "the benchmark times translation models on translation data (binarized by fairseq-preprocess "
    "with a source and a target language)"
)


def sentencepiece_model(config: BenchmarkConfig) -> Optional[str]:
    """The model that detokenizes hypotheses: ``--spm``, else ``DATA/spm.model`` where it exists;
    None without one (``--spm none``)."""
    if config.spm_model is not None:
        return config.spm_model or None
    return data_file(os.path.join(config.data, "spm.model"), "--spm")


def references_file(config: BenchmarkConfig, target_language: str) -> Optional[str]:
    """The raw references: ``--references``, else ``DATA/text/SUBSET.raw.TGT`` where it exists
    and hypotheses are detokenized (raw text and the dictionary's tokens would not compare);
    None: the binarized targets, detokenized like the hypotheses."""
    if config.references is not None or not sentencepiece_model(config):
        return config.references or None
    default = os.path.join(config.data, "text", f"{config.subset}.raw.{target_language}")
    return data_file(default, "--references")


def data_file(path: str, flag: str) -> Optional[str]:
    """``path``, a file the benchmark takes from the data folder where ``flag`` is not given, or
    None where there is none; ValueError for a pipe or a device there: reading a pipe without a
    writer hung the benchmark (a received data folder may hold one)."""
    if not os.path.exists(path):
        return None
    if not os.path.isfile(path):
        kind = "a folder" if os.path.isdir(path) else "a pipe or a device"
        raise ValueError(
            f"{path} is {kind}, not a regular file, and the benchmark would read it ({flag} "
            f"not given): give the file with {flag}, or replace it with the file itself"
        )
    return path


def check_table_cells(names: Sequence[str]) -> None:
    """ValueError for a system name that would break a row of results.md: a ``|`` starts a new
    cell (every value moved a column right) and a line break a new line."""
    for name in names:
        if "|" in name or not name.isprintable():
            raise ValueError(
                f"system {name!r}: a name may not hold '|' or a line break (the report's tables "
                "are Markdown); name it otherwise"
            )


def check_config(config: BenchmarkConfig) -> str:
    """Validate the configuration, its values and then its paths; return the baseline's name."""
    baseline = check_values(config)
    check_paths(config)
    return baseline


def check_values(config: BenchmarkConfig) -> str:
    """Validate the options' values, reading no file (a bad one is a usage error); return the
    baseline's name."""
    names = [spec.name for spec in config.systems]
    if not names:
        raise ValueError("no system to benchmark")
    if len(set(names)) != len(names):
        raise ValueError(f"system names must be unique: {names}")
    check_table_cells(names)
    taken = next((name for name in names if CTRANSLATE2_ROW.search(name)), None)
    if taken is not None:  # a CTranslate2 row of that name replaced the system in the results
        raise ValueError(
            f"system {taken!r}: names ending in '(CTranslate2 TYPE)' are the benchmark's own "
            "CTranslate2 rows; name it otherwise"
        )
    baseline = config.baseline or names[0]
    if baseline not in names:
        raise ValueError(f"baseline {baseline!r} is not one of the systems {names}")
    unknown = [mode for mode in config.modes if mode not in MODES]
    if unknown or not config.modes:
        raise ValueError(f"modes must be among {MODES}, got {list(config.modes)}")
    if not config.beams:
        raise ValueError("--beams: give at least one beam size")
    if config.fp16 and config.device == "cpu":  # else found only after fairseq loads (run.py)
        raise ValueError("--fp16 is half precision on a GPU, and --cpu decodes on the CPU: drop "
                         "one (the CPU's half precision is the static decoder's bf16)")  # fmt: skip
    check_given_once(config)
    check_numbers(config)
    return baseline
