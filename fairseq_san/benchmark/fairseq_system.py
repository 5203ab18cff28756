"""A fairseq system: a checkpoint loaded with its overrides, decoded by fairseq's
SequenceGenerator (``task.build_generator``), as fairseq-generate decodes it, or, with the
overrides ``"san_decoding": "static"`` and ``"san_decoder_precision"`` (a row of
``static_decoding.precision.PRECISIONS``), by the static-shape decoder
(``fairseq_san.static_decoding``, built directly, so that checkpoints trained with ``--task
translation`` take it too).

The checkpoint's configuration decides which model overrides are valid: ``checkpoint_keys``
lists them, and ``load_checkpoint_task`` reads a checkpoint (and checks a system's overrides)
before any worker starts, so that a typo, or a value the model's option cannot take
(``fairseq_fixes.model_overrides``), stops the benchmark at once. Before that,
``check_translation`` refuses a language model or its data (the benchmark times translation),
from the data's files and each checkpoint's stored task and architecture.
"""

import os
from contextlib import nullcontext
from typing import Dict, List, Optional, Set

import torch
from torch import nn

from fairseq import checkpoint_utils, tasks  # importing fairseq registers the plugin (__init__)
from fairseq.dataclass.configs import CommonConfig, GenerationConfig
from fairseq.dataclass.utils import overwrite_args_by_name

from fairseq_san.benchmark.config import FAIRSEQ, STATIC, DecodeOptions, Setting, SystemSpec
from fairseq_san.benchmark.config import TRANSLATION_ONLY, BenchmarkConfig
from fairseq_san.benchmark.config import precision_label
from fairseq_san.benchmark.data import Batches
from fairseq_san.benchmark.meters import CacheMeter, StepProfiler, matmul_flops
from fairseq_san.benchmark.system import System
from fairseq_san.benchmark.timing import PassResult, clock
from fairseq_san.checkpoints import checkpoint_problem, language_model_in, load_state
from fairseq_san.errors import UsageError
from fairseq_san.fairseq_fixes.model_overrides import check_overrides, configuration_keys
from fairseq_san.files import language_model_data
from fairseq_san.models.option_checks import check_language_pair
from fairseq_san.options import (
    DECODER_EXECUTION,
    DECODER_OPTION_NAMES,
    DECODER_PRECISION,
    DECODING,
)
from fairseq_san.policy import load_policy
from fairseq_san.static_decoding import PRECISIONS as STATIC_PRECISIONS
from fairseq_san.static_decoding import StaticSequenceGenerator, build_static_generator
from fairseq_san.static_decoding import StaticDecoderError
from fairseq_san.static_decoding.caches import DecoderCache
from fairseq_san.static_decoding.execution import Execution, executions_on
from fairseq_san.static_decoding.generator import checked_execution


def checkpoint_keys(state: Dict) -> Set[str]:
    """The keys fairseq's ``arg_overrides`` can change in a loaded checkpoint's configuration."""
    keys = set(configuration_keys(state.get("cfg")))
    if state.get("args") is not None:  # a checkpoint of an older fairseq (args, no cfg)
        keys |= set(vars(state["args"]))
    return keys - {"_name"}


# fairseq's option groups that a checkpoint's configuration holds and a benchmarked system
# reads none of (the benchmark sets them for every system alike), with what they are. A model
# configuration converted from a legacy checkpoint's arguments holds the run options too, so a
# run option is refused even there; a generation option only where it is none of the model's.
GENERATION_OPTIONS = (
    "a generation option, which the benchmark sets for every system alike (--beams, --lenpen, "
    "--max-len-a, --max-len-b, ...)"
)
RUN_OPTIONS = (
    "one of fairseq's run options, which the benchmark sets for every system alike (--fp16, "
    "--cpu, --gpu, --threads) or does not read: a system's own precision is "
    f'{DECODER_PRECISION.name} ("{DECODING.name}": "{STATIC}")'
)


def check_no_generation_or_run_options(spec: SystemSpec, cfg) -> None:
    """ValueError for an override that is one of fairseq's generation options (``sampling``,
    ``beam``, ``max_len_b``) and none of the model's, or one of its run options (``fp16``,
    ``cpu``): the checkpoint's configuration holds them, so they passed as its keys, and every
    system decoded with the benchmark's own options (an ``fp16`` row decoded in fp32)."""
    model_keys = set(configuration_keys(cfg.model))
    for key in spec.overrides:
        if key in CommonConfig.__dataclass_fields__:
            what = RUN_OPTIONS
        elif key in GenerationConfig.__dataclass_fields__ and key not in model_keys:
            what = GENERATION_OPTIONS
        else:
            continue
        raise ValueError(
            f"system {spec.name}: override {key!r} is {what}: the overrides take the model's "
            f"options and {', '.join(DECODER_OPTION_NAMES)}"
        )


def max_output_tokens(model) -> int:
    """The most tokens fairseq's generator decodes with ``model`` before EOS: one short of the
    decoder's positions."""
    return model.max_decoder_positions() - 1


def check_overrides_written_as_json(spec: SystemSpec) -> None:
    """ValueError for overrides that are no JSON object (``a=CKPT:null``, ``a=CKPT:[]``): they
    were read as part of the checkpoint's name, called missing."""
    checkpoint, _, rest = spec.checkpoint.rpartition(":")
    if checkpoint and os.path.isfile(checkpoint):
        raise ValueError(
            f"system {spec.name}: {rest!r} after checkpoint {checkpoint} is no overrides: write "
            f"them as a JSON object, e.g. {spec.name}={checkpoint}:{{\"san_decoding\": \"static\"}}"
        )


def check_checkpoint_file(spec: SystemSpec) -> None:
    """ValueError unless ``spec``'s checkpoint is a file."""
    if not os.path.isfile(spec.checkpoint):
        check_overrides_written_as_json(spec)
        problem = "is a directory" if os.path.isdir(spec.checkpoint) else "does not exist"
        raise ValueError(f"system {spec.name}: checkpoint {spec.checkpoint} {problem}")


def check_translation(config: BenchmarkConfig) -> None:
    """ValueError naming monolingual data and every checkpoint of a language model, before any
    checkpoint is loaded into a task (fairseq's tasks failed on them in their own words: a
    missing ``dict.txt``, "Could not infer language pair", a dataset without ``src_sizes``).
    Each checkpoint's configuration is read, memory-mapped, without its model being built."""
    problems: List[str] = []
    if language_model_data(config.data):
        problems.append(
            f"--data {config.data} is monolingual data (dict.txt: fairseq-preprocess --only-source)"
        )
    systems: Dict[str, List[str]] = {}
    for spec in config.systems:
        check_checkpoint_file(spec)
        systems.setdefault(spec.checkpoint, []).append(spec.name)
    for checkpoint, names in systems.items():
        state = load_state(checkpoint)
        problem = checkpoint_problem(state)
        if problem is not None:
            raise ValueError(f"system {names[0]}: cannot load checkpoint {checkpoint}: {problem}")
        model = language_model_in(state)
        if model is not None:
            named = f"system {names[0]}" if len(names) == 1 else f"systems {', '.join(names)}"
            problems.append(f"{named}: checkpoint {checkpoint} is a language model ({model})")
    if problems:
        raise ValueError(f"{TRANSLATION_ONLY}: {'; '.join(problems)}")


def load_checkpoint_task(spec: SystemSpec, data: str, device: torch.device):
    """The task of ``spec``'s checkpoint on ``data``; ValueError for an override it would ignore,
    or a static decoder's choice that does not run on ``device``."""
    check_checkpoint_file(spec)
    state = checkpoint_utils.load_checkpoint_to_cpu(spec.checkpoint, {"data": data})
    check_no_generation_or_run_options(spec, state["cfg"])
    spec.check_overrides(checkpoint_keys(state), STATIC_PRECISIONS)
    check_overrides(state["cfg"], spec.model_overrides, f"(system {spec.name}'s overrides)")
    check_static_choices(spec, device)
    overwrite_args_by_name(state["cfg"], loading_overrides(spec, data))  # as the worker loads
    try:
        task = tasks.setup_task(state["cfg"].task, from_checkpoint=True)
        check_language_pair(state["cfg"].model, task)  # else met in the worker, naming no system
    except FileNotFoundError as err:  # a language (source_lang) the data has no dictionary of
        raise ValueError(
            f"system {spec.name}: {err.filename}: no such file (the languages it translates, "
            f"{task_pair(state['cfg'].task)}, are to be those of --data)"
        ) from None
    except UsageError as err:  # the language pair's checks (fairseq_fixes.language_pair)
        raise ValueError(f"system {spec.name}: {err}") from None
    return task


def task_pair(task_cfg) -> str:
    """``en->de``: a task configuration's languages as given (``None`` where one is not)."""
    return f"{task_cfg.source_lang}->{task_cfg.target_lang}"


def loading_overrides(spec: SystemSpec, data: str) -> Dict:
    """fairseq's ``arg_overrides`` of ``spec``'s checkpoint: its model overrides, among them the
    task's languages where given (``source_lang``), and the benchmark's ``--data``; the same in
    the main process, whose task batches every system's sentences, and in the system's worker."""
    return {**spec.model_overrides, "data": data}


def check_static_choices(spec: SystemSpec, device: torch.device) -> None:
    """ValueError for a static decoder's precision or execution that does not run on ``device``
    (else met at the system's first decode, after every worker has loaded)."""
    if spec.decoder != STATIC:
        return
    asked = execution_asked(spec)
    here = executions_on(device.type, offered_only=False)
    if asked is not None and asked not in here:  # the overrides' key; compile is theirs too
        raise ValueError(
            f'system {spec.name}: "{DECODER_EXECUTION.name}": "{asked}" is not an execution the '
            f"static decoder runs on {device.type.upper()} (those are: {', '.join(here)})"
        )
    try:
        checked_execution(spec.decoder_precision, asked, device)
    except StaticDecoderError as err:
        raise ValueError(f"system {spec.name}: {err}") from None


def execution_asked(spec: SystemSpec) -> Optional[str]:
    """The static decoder's execution that ``spec`` names (None: the device's default)."""
    return spec.overrides.get(DECODER_EXECUTION.name)


class FairseqSystem(System):
    """A checkpoint loaded with its model overrides, decoded by fairseq's SequenceGenerator or
    the static decoder (``spec.decoder``)."""

    def __init__(self, spec: SystemSpec, data: str, device: torch.device, fp16: bool):
        self.spec = spec
        self.name = spec.name
        self.device = device
        overrides = loading_overrides(spec, data)
        state = checkpoint_utils.load_checkpoint_to_cpu(spec.checkpoint, overrides)
        models, cfg, task = checkpoint_utils.load_model_ensemble_and_task(
            [spec.checkpoint], arg_overrides=overrides, state=state
        )
        self.model, self.cfg, self.task = models[0], cfg, task
        if fp16:
            self.model.half()
        self.model.to(device)
        self.model.prepare_for_inference_(cfg)  # as fairseq-generate: eval, no attention output
        self.model.eval()
        self._generator_of = None  # (key, generator) of the last setting decoded

    @property
    def precision(self) -> str:
        """The static decoder's reduced precision, else the model's (its weights' dtype)."""
        if self.spec.decoder == STATIC and self.spec.decoder_precision != "fp32":
            return self.spec.decoder_precision
        return precision_label(str(next(self.model.parameters()).dtype))

    def describe(self) -> Dict:
        """The report's record of the system: its decoder, precision, model and limits."""
        model_cfg = self.cfg.model
        decoder = self.model.decoder
        return {
            "kind": FAIRSEQ,
            "decoder": self.spec.decoder,
            "precision": self.precision,
            "checkpoint": self.spec.checkpoint,
            "overrides": self.spec.overrides,
            "arch": getattr(model_cfg, "arch", getattr(model_cfg, "_name", None)),
            "san_policy": load_policy(getattr(model_cfg, "san_policy", None) or "{}"),
            "san_encdec_share": getattr(model_cfg, "san_encdec_share", None),
            "decoder_self_attention_type": getattr(
                model_cfg, "decoder_self_attention_type", "dot"
            ),
            "no_cache": bool(getattr(decoder, "recompute_prefix", False)),
            "cross_self_attention": bool(getattr(decoder, "cross_self_attention", False)),
            "max_output_tokens": max_output_tokens(self.model),
            "max_source_tokens": self.model.max_positions()[0],
            "params": sum(p.numel() for p in self.model.parameters()),
            "decoder_params": sum(p.numel() for p in decoder.parameters()),
            "encoder_params": sum(p.numel() for p in self.model.encoder.parameters()),
        }

    def _generator(
        self, setting: Setting, options: DecodeOptions, precision: str = "", execution: str = ""
    ) -> nn.Module:
        """The generator of a setting (the static decoder at ``precision`` and ``execution``, by
        default the system's), kept for the next call: building the static decoder copies, casts
        or quantizes the decoder's weights, and the timing loop decodes one setting many times."""
        precision = precision or self.spec.decoder_precision
        execution = execution or self.spec.overrides.get(DECODER_EXECUTION.name)
        key = (setting.beam, setting.mode, setting.length, repr(options), precision, execution)
        if self._generator_of is None or self._generator_of[0] != key:
            args = setting.generation_args(options.max_len_a, options.max_len_b, options.lenpen)
            if self.spec.decoder == STATIC:
                generator = build_static_generator(
                    self.task, [self.model], args, precision, execution=execution
                )
            else:
                # translation_san: not whatever its checkpoint says (the model's own decoding is
                # already set, from its overrides)
                args.san_decoding = args.san_decoder = FAIRSEQ
                generator = self.task.build_generator([self.model], args)
            self._generator_of = (key, generator)
        return self._generator_of[1]

    def _cache_meter(self, generator: nn.Module) -> CacheMeter:
        """The meter of the decoder cache's peak bytes while ``generator`` decodes."""
        if isinstance(generator, StaticSequenceGenerator):
            return CacheMeter.of_static(generator.step)
        return CacheMeter.of_fairseq(self.model.decoder)

    def _profiler(self, generator: nn.Module) -> StepProfiler:
        """The profiler of ``generator``'s decoder steps, encoder and cache reorders."""
        if isinstance(generator, StaticSequenceGenerator):  # its encoder: below fp32, a copy
            reorder = (DecoderCache, "reorder")
            return StepProfiler(generator.step, generator.encoder, reorder, self.device)
        decoder = self.model.decoder
        reorder = (decoder, "reorder_incremental_state_scripting")
        return StepProfiler(decoder, self.model.encoder, reorder, self.device)

    def decode(
        self,
        batches: Batches,
        setting: Setting,
        options: DecodeOptions,
        keep_hypotheses: bool = False,
        measure_cache: bool = False,
    ) -> PassResult:
        """``System.decode`` by the generator of ``setting`` (``_generator``), one ``generate``
        call a batch."""
        generator = self._generator(setting, options)
        meter = self._cache_meter(generator) if measure_cache else None
        seconds, tokens, sentences = 0.0, 0, 0
        hypotheses = {} if keep_hypotheses else None
        with meter or nullcontext():
            for sample in batches.samples:
                start = clock(self.device)
                output = generator.generate([self.model], sample)
                seconds += clock(self.device) - start
                sentences += len(output)
                tokens += sum(len(nbest[0]["tokens"]) for nbest in output)
                if hypotheses is not None:
                    for sample_id, nbest in zip(sample["id"].tolist(), output):
                        hypotheses[sample_id] = nbest[0]["tokens"].tolist()
        result = PassResult(seconds, tokens, sentences, hypotheses)
        if meter is not None:
            result.cache_bytes, result.cache_tensor_bytes = meter.peak, meter.peak_tensor
        return result

    def profile(self, batches: Batches, setting: Setting, options: DecodeOptions) -> Dict:
        """The step profile of one pass, after an untimed one, as the timed passes: a generator
        built for this setting allocates its caches in its first pass of each batch shape.

        A static decoder that replays CUDA graphs or runs a compiled step is profiled uncompiled
        and uncaptured in the same cache layout, the ``fixed`` execution (``eager_in_place_of``
        names its own): a replayed graph calls no module's hooks, and the profiler's device syncs
        cannot be captured or compiled."""
        own = self.static_execution()
        in_place_of = own.name if own is not None and (own.graphs or own.compiles) else None
        generator = self._generator(setting, options, execution="fixed" if in_place_of else "")
        for sample in batches.samples:
            generator.generate([self.model], sample)
        profiler = self._profiler(generator)
        with profiler:
            for sample in batches.samples:
                start = clock(self.device)
                generator.generate([self.model], sample)
                profiler.generate_seconds += clock(self.device) - start
        return {**profiler.summary(), "eager_in_place_of": in_place_of}

    def static_execution(self) -> Optional[Execution]:
        """The static decoder's execution on this system's device; None for fairseq's decoder."""
        if self.spec.decoder != STATIC:
            return None
        spec = self.spec
        return checked_execution(spec.decoder_precision, execution_asked(spec), self.device)

    def count_flops(self, batches: Batches, setting: Setting, options: DecodeOptions) -> Dict:
        """Matrix-multiply FLOPs of decoding one batch, per output token: the work a decoding
        engine cannot skip without changing the model. The batch of median source length (the
        batches are sorted by it): the encoder's and the encoder-decoder attention's share grow
        with the source, so the shortest batch would undercount the subset's.

        The static decoder is counted at fp32 whatever its precision: FlopCounterMode does not
        count int8's quantized linear layers, and every precision does the same multiplies; and
        eager: a replayed CUDA graph dispatches no operator to count."""
        generator = self._generator(setting, options, precision="fp32", execution="eager")
        sample = batches.samples[len(batches.samples) // 2]
        flops, output = matmul_flops(lambda: generator.generate([self.model], sample))
        tokens = sum(len(nbest[0]["tokens"]) for nbest in output)
        return {"flops": flops, "tokens": tokens, "mflop_per_token": flops / tokens / 1e6}
