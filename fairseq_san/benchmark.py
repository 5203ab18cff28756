"""Decoding-speed benchmark of SAN systems (paper Figure 4 and Table 6), in one process.

A *system* is a fairseq checkpoint plus optional model overrides: the same checkpoint decoded
with ``{"san_no_cache": true}`` is the paper's "Baseline-Cache" system, and a checkpoint trained
without sharing decoded with ``{"san_policy": "..."}`` is a decode-time sharing policy. Every
system decodes the same pre-collated batches of one subset with fairseq's SequenceGenerator
(``task.build_generator``), so data loading is never timed. What is measured, and how:

* **Speed** (tokens/s: tokens of the best hypothesis, eos included, as fairseq-generate counts
  them, over the summed wall time of the ``generate`` calls; the device is synchronized around
  every call). For each beam size and each length mode, every system first decodes the subset
  once untimed (warm-up), then the systems decode it ``repeats`` times interleaved
  (A B C ... A B C ...). Reported: the median tokens/s, and the median over repeats of the
  per-repeat ratio to the baseline system, which cancels most of the drift of a shared machine.
* **Length modes.** ``natural``: the systems stop where their search stops, so a model that
  writes longer outputs pays for it. ``fixed``: every hypothesis has exactly L tokens plus eos
  (``min_len = max_len = L``), which isolates the cost of a decoder step.
* **Quality.** BLEU and chrF with sacrebleu on detokenized text (sentencepiece-decoded
  hypotheses against the raw reference file), per beam size, from the natural-length warm-up
  pass (beam search is deterministic, so the timed passes produce the same output).
* **Decoding cache.** During the warm-up passes the decoder's incremental state is walked after
  every step; the size of a step is the sum of the bytes of the distinct storages its tensors
  live in (memory actually held); the peak over the subset is reported. ``cache_tensor_bytes``
  counts ``numel * element_size`` per distinct storage instead (the live extent only).
* **Profile.** One more pass per system with forward hooks timing (``time.perf_counter``,
  synchronized on a GPU) the self-attention, encoder-decoder attention and FFN (fc1 .. fc2) of
  every decoder layer, the output projection, the whole decoder step, the encoder, the cache
  reorder of beam search, and the ``generate`` call. Module hooks cost a few microseconds each,
  which lands in "rest"; ``overhead`` compares the profiled pass with the timed passes.
  ``removable`` is the attention time of decoder layers 2..N as a share of the whole decode:
  no sharing policy can remove more, since the first layer of each stack always attends.
  ``compute`` counts the matrix-multiply FLOPs of decoding the first batch (torch's
  ``FlopCounterMode``), per output token: their ratio to the baseline's is the speed-up a system
  would reach if it ran at the baseline's FLOP rate, so it separates what sharing removes from
  what a faster decoding engine could add.

The optional CTranslate2 row converts the baseline (a plain transformer) in memory and decodes
the same batches with the same beam sizes; it is skipped, with a note, where ``ctranslate2`` is
not installed or the baseline is not a plain transformer.
"""

import argparse
import datetime
import json
import logging
import math
import os
import platform
import statistics
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

import fairseq  # noqa: F401  (must come before fairseq_san.models so that the models register)
import fairseq_san.models  # noqa: F401  (registers transformer_san)
import fairseq_san.tasks  # noqa: F401  (registers translation_san)
from fairseq import checkpoint_utils, utils

from fairseq_san import plots
from fairseq_san.policy import load_policy
from fairseq_san.scoring import corpus_scores, read_lines

logger = logging.getLogger("fairseq_san.benchmark")

MODES = ("natural", "fixed")
CTRANSLATE2_MISSING = "ctranslate2 not installed (pip install ctranslate2)"


# --- systems -------------------------------------------------------------------------------


@dataclass
class SystemSpec:
    """``NAME=CKPT[:OVERRIDES_JSON]`` from the command line."""

    name: str
    checkpoint: str
    overrides: Dict = field(default_factory=dict)


def parse_system(text: str) -> SystemSpec:
    """``NAME=CKPT`` or ``NAME=CKPT:{"san_no_cache": true}`` (JSON from the first ``:{``)."""
    name, sep, rest = text.partition("=")
    if not sep or not name or not rest:
        raise ValueError(f"system {text!r}: expected NAME=CHECKPOINT[:OVERRIDES_JSON]")
    checkpoint, sep, overrides_text = rest.partition(":{")
    overrides = {}
    if sep:
        try:
            overrides = json.loads("{" + overrides_text)
        except json.JSONDecodeError as err:
            raise ValueError(f"system {name}: overrides are not JSON: {err}") from err
        if not isinstance(overrides, dict):
            raise ValueError(f"system {name}: overrides must be a JSON object")
    return SystemSpec(name, checkpoint, overrides)


@dataclass
class Setting:
    """One decoding configuration: beam size and length mode (``length`` is L in fixed mode)."""

    beam: int
    mode: str
    length: Optional[int] = None

    @property
    def key(self) -> str:
        """Its key in results.json: ``beam4_natural``, ``beam20_fixed``."""
        return f"beam{self.beam}_{self.mode}"

    def generation_args(self, max_len_a: float, max_len_b: int, lenpen: float):
        if self.mode == "fixed":
            return argparse.Namespace(
                beam=self.beam, min_len=self.length, max_len_a=0, max_len_b=self.length,
                lenpen=lenpen,
            )  # fmt: skip
        return argparse.Namespace(
            beam=self.beam, min_len=1, max_len_a=max_len_a, max_len_b=max_len_b, lenpen=lenpen
        )


@dataclass
class PassResult:
    """One pass over the subset: wall time of the generate calls and what was generated."""

    seconds: float
    tokens: int
    sentences: int
    hypotheses: Optional[Dict[int, List[int]]] = None  # sample id -> best hypothesis tokens
    cache_bytes: Optional[int] = None
    cache_tensor_bytes: Optional[int] = None

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else float("nan")


def clock(device: torch.device) -> float:
    """perf_counter after the device has finished its queued work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


class FairseqSystem:
    """A checkpoint loaded with its overrides, decoded by fairseq's SequenceGenerator."""

    def __init__(self, spec: SystemSpec, data: str, device: torch.device, fp16: bool):
        self.spec = spec
        self.name = spec.name
        self.device = device
        overrides = {"data": data, **spec.overrides}
        models, cfg, task = checkpoint_utils.load_model_ensemble_and_task(
            [spec.checkpoint], arg_overrides=overrides
        )
        self.model, self.cfg, self.task = models[0], cfg, task
        if fp16:
            self.model.half()
        self.model.to(device)
        self.model.prepare_for_inference_(cfg)  # as fairseq-generate: eval, no attention output
        self.model.eval()

    def describe(self) -> Dict:
        model_cfg = self.cfg.model
        decoder = self.model.decoder
        return {
            "kind": "fairseq",
            "checkpoint": self.spec.checkpoint,
            "overrides": self.spec.overrides,
            "arch": getattr(model_cfg, "arch", getattr(model_cfg, "_name", None)),
            "san_policy": load_policy(getattr(model_cfg, "san_policy", None) or "{}"),
            "san_encdec_share": getattr(model_cfg, "san_encdec_share", None),
            "decoder_self_attention_type": getattr(
                model_cfg, "decoder_self_attention_type", "dot"
            ),
            "no_cache": bool(getattr(decoder, "recompute_prefix", False)),
            "params": sum(p.numel() for p in self.model.parameters()),
            "decoder_params": sum(p.numel() for p in decoder.parameters()),
            "encoder_params": sum(p.numel() for p in self.model.encoder.parameters()),
        }

    def is_plain_transformer(self) -> bool:
        info = self.describe()
        return (
            info["decoder_self_attention_type"] in (None, "dot")
            and not info["no_cache"]
            and not info["san_policy"]
        )

    def decode(
        self,
        batches: "Batches",
        setting: Setting,
        options: "DecodeOptions",
        keep_hypotheses: bool = False,
        measure_cache: bool = False,
    ) -> PassResult:
        args = setting.generation_args(options.max_len_a, options.max_len_b, options.lenpen)
        generator = self.task.build_generator([self.model], args)
        meter = CacheMeter(self.model.decoder) if measure_cache else None
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

    def profile(self, batches: "Batches", setting: Setting, options: "DecodeOptions") -> Dict:
        args = setting.generation_args(options.max_len_a, options.max_len_b, options.lenpen)
        generator = self.task.build_generator([self.model], args)
        profiler = StepProfiler(self.model, self.device)
        with profiler:
            for sample in batches.samples:
                start = clock(self.device)
                generator.generate([self.model], sample)
                profiler.generate_seconds += clock(self.device) - start
        return profiler.summary()

    def count_flops(self, batches: "Batches", setting: Setting, options: "DecodeOptions") -> Dict:
        """Matrix-multiply FLOPs (torch's FlopCounterMode) of decoding the first batch, per
        output token: the work a decoding engine cannot skip without changing the model."""
        from torch.utils.flop_counter import FlopCounterMode

        args = setting.generation_args(options.max_len_a, options.max_len_b, options.lenpen)
        generator = self.task.build_generator([self.model], args)
        with FlopCounterMode(display=False) as counter:
            output = generator.generate([self.model], batches.samples[0])
        flops = counter.get_total_flops()
        tokens = sum(len(nbest[0]["tokens"]) for nbest in output)
        return {"flops": flops, "tokens": tokens, "mflop_per_token": flops / tokens / 1e6}


@contextmanager
def _wrapped_method(obj, name: str, make_wrapper: Callable[[Callable], Callable]):
    """Temporarily replace the bound method ``obj.name`` by ``make_wrapper(original)``.

    SequenceGenerator calls ``model.decoder.forward`` (and ``forward_torchscript``,
    ``reorder_incremental_state_scripting``) directly, not through ``__call__``, so module hooks
    on the decoder itself never fire; an instance attribute does.
    """
    had_own = name in vars(obj)
    previous = vars(obj).get(name)
    setattr(obj, name, make_wrapper(getattr(obj, name)))
    try:
        yield
    finally:
        if had_own:
            setattr(obj, name, previous)
        else:
            delattr(obj, name)


# --- decoding cache ------------------------------------------------------------------------


def incremental_state_bytes(state: Optional[Dict]) -> Tuple[int, int]:
    """(bytes of the distinct storages, sum of numel * element_size per distinct storage).

    ``state`` is fairseq's incremental state: module key -> {name: tensor or None}, possibly
    nested. A storage shared by several tensors (views) is counted once.
    """
    storages: Dict[Tuple[str, int], Tuple[int, int]] = {}

    def visit(value):
        if isinstance(value, torch.Tensor):
            storage = value.untyped_storage()
            key = (str(value.device), storage.data_ptr())
            held, extent = storages.get(key, (0, 0))
            storages[key] = (
                max(held, storage.nbytes()),
                max(extent, value.numel() * value.element_size()),
            )
        elif isinstance(value, dict):
            for item in value.values():
                visit(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                visit(item)

    visit(state or {})
    return sum(h for h, _ in storages.values()), sum(e for _, e in storages.values())


class CacheMeter:
    """Peak size of the decoder's incremental state, measured after every decoder step."""

    def __init__(self, decoder: torch.nn.Module):
        self.decoder = decoder
        self.peak = 0
        self.peak_tensor = 0
        self._context = None

    def _wrap(self, forward):
        def measured_forward(*args, **kwargs):
            out = forward(*args, **kwargs)
            held, extent = incremental_state_bytes(kwargs.get("incremental_state"))
            self.peak = max(self.peak, held)
            self.peak_tensor = max(self.peak_tensor, extent)
            return out

        return measured_forward

    def __enter__(self):
        self._context = _wrapped_method(self.decoder, "forward", self._wrap)
        self._context.__enter__()
        return self

    def __exit__(self, *exc):
        return self._context.__exit__(*exc)


# --- profile -------------------------------------------------------------------------------

PARTS = ("self_attn", "encdec_attn", "ffn", "output_proj")


class StepProfiler:
    """Wall time of the parts of decoding, from forward hooks and wrapped methods.

    Each decoder layer's ``self_attn`` and ``encoder_attn`` are timed from their pre-hook to
    their post-hook, the FFN from ``fc1``'s pre-hook to ``fc2``'s post-hook, the output
    projection likewise; ``decoder.forward`` (one decoder step), the encoder and the cache
    reorder of beam search by wrapping their methods.
    """

    def __init__(self, model: torch.nn.Module, device: torch.device):
        self.model = model
        self.device = device
        layers = len(model.decoder.layers)
        self.layer_seconds = {part: [0.0] * layers for part in ("self_attn", "encdec_attn", "ffn")}
        self.output_seconds = 0.0
        self.step_seconds = 0.0
        self.steps = 0
        self.encoder_seconds = 0.0
        self.reorder_seconds = 0.0
        self.generate_seconds = 0.0
        self._handles: List = []
        self._contexts: List = []

    def _span(self, start_module, end_module, add: Callable[[float], None]) -> None:
        started: List[float] = []

        def pre_hook(module, inputs):
            started.append(clock(self.device))

        def post_hook(module, inputs, output):
            add(clock(self.device) - started.pop())

        self._handles.append(start_module.register_forward_pre_hook(pre_hook))
        self._handles.append(end_module.register_forward_hook(post_hook))

    def _adder(self, part: str, index: int) -> Callable[[float], None]:
        def add(seconds: float) -> None:
            self.layer_seconds[part][index] += seconds

        return add

    def _timed(self, attribute: str, count_steps: bool = False):
        def make_wrapper(method):
            def timed(*args, **kwargs):
                start = clock(self.device)
                out = method(*args, **kwargs)
                setattr(self, attribute, getattr(self, attribute) + clock(self.device) - start)
                if count_steps:
                    self.steps += 1
                return out

            return timed

        return make_wrapper

    def __enter__(self):
        decoder = self.model.decoder
        for index, layer in enumerate(decoder.layers):
            self._span(layer.self_attn, layer.self_attn, self._adder("self_attn", index))
            if getattr(layer, "encoder_attn", None) is not None:
                add = self._adder("encdec_attn", index)
                self._span(layer.encoder_attn, layer.encoder_attn, add)
            self._span(layer.fc1, layer.fc2, self._adder("ffn", index))
        if isinstance(getattr(decoder, "output_projection", None), torch.nn.Module):

            def add_output(seconds: float) -> None:
                self.output_seconds += seconds

            self._span(decoder.output_projection, decoder.output_projection, add_output)
        self._contexts = [
            _wrapped_method(decoder, "forward", self._timed("step_seconds", count_steps=True)),
            _wrapped_method(
                self.model.encoder, "forward_torchscript", self._timed("encoder_seconds")
            ),
            _wrapped_method(
                decoder, "reorder_incremental_state_scripting", self._timed("reorder_seconds")
            ),
        ]
        for context in self._contexts:
            context.__enter__()
        return self

    def __exit__(self, *exc):
        for handle in self._handles:
            handle.remove()
        for context in reversed(self._contexts):
            context.__exit__(None, None, None)
        self._handles, self._contexts = [], []
        return False

    def summary(self) -> Dict:
        parts = {part: sum(values) for part, values in self.layer_seconds.items()}
        parts["output_proj"] = self.output_seconds
        parts["rest"] = max(self.step_seconds - sum(parts.values()), 0.0)
        step = self.step_seconds
        total = self.generate_seconds
        attention = parts["self_attn"] + parts["encdec_attn"]
        removable = sum(self.layer_seconds["self_attn"][1:]) + sum(
            self.layer_seconds["encdec_attn"][1:]
        )
        outside = max(total - step - self.encoder_seconds - self.reorder_seconds, 0.0)
        return {
            "steps": self.steps,
            "ms_per_step": 1000 * step / self.steps if self.steps else float("nan"),
            "decoder_step_share": {k: _share(v, step) for k, v in parts.items()},
            "decoder_step_seconds": parts,
            "per_layer_seconds": self.layer_seconds,
            "generate_seconds": total,
            "generate_share": {
                "encoder": _share(self.encoder_seconds, total),
                "decoder_steps": _share(step, total),
                "cache_reorder": _share(self.reorder_seconds, total),
                "search_and_other": _share(outside, total),
            },
            "attention_share_of_decode": _share(attention, total),
            "removable_share_of_decode": _share(removable, total),
            "max_speedup_from_sharing": 1.0 / (1.0 - _share(removable, total))
            if total > 0 and removable < total
            else float("nan"),
        }


def _share(part: float, whole: float) -> float:
    return part / whole if whole > 0 else float("nan")


# --- CTranslate2 ---------------------------------------------------------------------------


class CTranslate2System:
    """The baseline converted to CTranslate2, decoding the same batches with ``compute_type``
    (float32, or int8 weights: what a user who only wants speed picks).

    Only a plain transformer converts (no sharing, dot-product self-attention, with cache).
    """

    COMPUTE_TYPES = ("float32", "int8")

    def __init__(self, base: FairseqSystem, model_dir: Path, compute_type: str, threads: int):
        import ctranslate2

        self.name = f"{base.name} (CTranslate2 {compute_type})"
        self.device = base.device
        self.task = base.task
        self.compute_type = compute_type
        self.translator = ctranslate2.Translator(
            str(model_dir),
            device="cuda" if self.device.type == "cuda" else "cpu",
            compute_type=compute_type,
            inter_threads=1,
            intra_threads=threads if self.device.type != "cuda" else 0,
        )
        self.version = ctranslate2.__version__
        self._sources: Dict[int, List[List[str]]] = {}

    @classmethod
    def convert(cls, base: FairseqSystem, work_dir: Path) -> Path:
        """Convert the loaded baseline once; every compute type loads the same directory."""
        from ctranslate2.converters import fairseq as ct2_fairseq

        model_dir = work_dir / "ctranslate2-model"
        _in_memory_converter(base, ct2_fairseq).convert(str(model_dir), force=True)
        return model_dir

    def describe(self) -> Dict:
        return {"kind": "ctranslate2", "version": self.version, "compute_type": self.compute_type}

    def _source_tokens(self, index: int, sample) -> List[List[str]]:
        if index not in self._sources:
            dictionary = self.task.source_dictionary
            special = {dictionary.pad(), dictionary.eos()}
            self._sources[index] = [
                [dictionary[t] for t in row.tolist() if t not in special]
                for row in sample["net_input"]["src_tokens"].cpu()
            ]
        return self._sources[index]

    def decode(self, batches, setting, options, keep_hypotheses=False, measure_cache=False):
        kwargs = dict(
            beam_size=setting.beam,
            max_batch_size=batches.batch_size,
            length_penalty=options.lenpen,
            return_scores=False,
        )
        if setting.mode == "fixed":
            kwargs.update(min_decoding_length=setting.length, max_decoding_length=setting.length)
        dictionary = self.task.target_dictionary
        seconds, tokens, sentences = 0.0, 0, 0
        hypotheses = {} if keep_hypotheses else None
        for index, sample in enumerate(batches.samples):
            sources = self._source_tokens(index, sample)
            if setting.mode == "natural":  # fairseq's limit: a * (padded source length) + b
                source_length = sample["net_input"]["src_tokens"].size(1)
                limit = options.max_len_a * source_length + options.max_len_b
                kwargs["max_decoding_length"] = int(limit)
            start = clock(self.device)
            results = self.translator.translate_batch(sources, **kwargs)
            seconds += clock(self.device) - start
            sentences += len(results)
            tokens += sum(len(r.hypotheses[0]) + 1 for r in results)  # + eos, as fairseq counts
            if hypotheses is not None:
                for sample_id, result in zip(sample["id"].tolist(), results):
                    hypotheses[sample_id] = [dictionary.index(t) for t in result.hypotheses[0]]
        return PassResult(seconds, tokens, sentences, hypotheses)


def _in_memory_converter(base: FairseqSystem, ct2_fairseq):
    """CTranslate2's fairseq conversion, fed the already loaded model instead of a file.

    CTranslate2 knows fairseq's ``transformer``; a ``transformer_san`` with no sharing is exactly
    that model, so the architecture name is swapped before the spec is chosen.
    """
    import copy

    from ctranslate2.converters.converter import Converter

    class InMemoryFairseqConverter(Converter):
        @torch.no_grad()
        def _load(self):
            model = copy.deepcopy(base.model).float().cpu()
            args = _namespace(base.cfg.model)
            args.arch = "transformer"
            spec = ct2_fairseq._get_model_spec(args)
            ct2_fairseq.set_transformer_encoder(spec.encoder, model.encoder)
            ct2_fairseq.set_transformer_decoder(spec.decoder, model.decoder)
            spec.register_source_vocabulary(ct2_fairseq._get_vocab(base.task.source_dictionary))
            spec.register_target_vocabulary(ct2_fairseq._get_vocab(base.task.target_dictionary))
            spec.config.decoder_start_token = spec.config.eos_token
            spec.config.add_source_eos = True
            return spec

    return InMemoryFairseqConverter()


def _namespace(config) -> argparse.Namespace:
    if isinstance(config, argparse.Namespace):
        return argparse.Namespace(**vars(config))
    from omegaconf import OmegaConf

    return argparse.Namespace(**OmegaConf.to_container(config, resolve=True))


# --- data and scoring ----------------------------------------------------------------------


@dataclass
class DecodeOptions:
    max_len_a: float = 0.0
    max_len_b: int = 200
    lenpen: float = 1.0


class Batches:
    """The subset's sentences, sorted by source length, collated once and moved to the device."""

    def __init__(
        self, task, subset: str, batch_size: int, device: torch.device,
        max_sentences: Optional[int] = None,
    ):  # fmt: skip
        task.load_dataset(subset, combine=False)
        dataset = task.dataset(subset)
        count = len(dataset) if max_sentences is None else min(max_sentences, len(dataset))
        ids = sorted(range(count), key=lambda i: (int(dataset.src_sizes[i]), i))
        self.dataset = dataset
        self.ids = list(range(count))
        self.batch_size = batch_size
        self.samples = []
        for start in range(0, count, batch_size):
            sample = dataset.collater([dataset[i] for i in ids[start : start + batch_size]])
            if device.type == "cuda":
                sample = utils.move_to_cuda(sample, device)
            self.samples.append(sample)

    def mean_target_length(self) -> float:
        """Mean reference length in target tokens, eos excluded."""
        sizes = self.dataset.tgt_sizes
        return float(sum(int(sizes[i]) - 1 for i in self.ids)) / max(len(self.ids), 1)


class Detokenizer:
    """Target dictionary tokens -> text: sentencepiece-decoded when a model is given."""

    def __init__(self, dictionary, spm_model: Optional[str]):
        self.dictionary = dictionary
        self.spm_model = spm_model
        self.processor = None
        if spm_model:
            import sentencepiece as spm

            self.processor = spm.SentencePieceProcessor(model_file=spm_model)

    def __call__(self, tokens: Sequence[int]) -> str:
        pieces = self.dictionary.string(torch.tensor(list(tokens), dtype=torch.long))
        if self.processor is None:
            return pieces
        return self.processor.decode(pieces.split())


def load_references(path: Optional[str], batches: Batches, detokenize: Detokenizer) -> List[str]:
    """References for the benchmarked sentences: the raw file, or the binarized targets."""
    if path:
        lines = read_lines(path)
        if len(lines) < len(batches.ids):
            raise ValueError(
                f"{path} has {len(lines)} lines, fewer than the {len(batches.ids)} sentences"
            )
        return [lines[i] for i in batches.ids]
    return [detokenize(batches.dataset.tgt[i].tolist()) for i in batches.ids]


def score(hypotheses: Dict[int, List[int]], references: List[str], ids, detokenize) -> Dict:
    """sacrebleu BLEU and chrF of the detokenized best hypotheses, with signatures."""
    texts = [detokenize(hypotheses[i]) for i in ids]
    return {**corpus_scores(texts, references), "first_hypotheses": texts[:3]}


# --- the benchmark -------------------------------------------------------------------------


@dataclass
class BenchmarkConfig:
    data: str
    subset: str
    systems: List[SystemSpec]
    baseline: Optional[str] = None
    beams: Sequence[int] = (1, 4, 8, 12, 16, 20)
    batch_size: int = 16
    repeats: int = 3
    out_dir: str = "bench"
    max_sentences: Optional[int] = None
    device: str = "auto"  # auto | cpu | cuda
    fp16: bool = False
    modes: Sequence[str] = MODES
    fixed_length: Optional[int] = None
    cache_beams: Sequence[int] = (4, 20)
    table_beam: int = 4
    profile: bool = True
    spm_model: Optional[str] = None  # None: DATA/spm.model when it exists; "" disables
    references: Optional[str] = None  # None: DATA/text/SUBSET.raw.TGT when it exists
    decode: DecodeOptions = field(default_factory=DecodeOptions)
    threads: Optional[int] = None
    ctranslate2: bool = True
    command: str = ""


def choose_device(name: str) -> torch.device:
    if name == "cuda" or (name == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise ValueError("--gpu: CUDA is not available")
        return torch.device("cuda")
    return torch.device("cpu")


def machine_info(device: torch.device) -> Dict:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    import sacrebleu

    info = {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "fairseq": getattr(fairseq, "__version__", "unknown"),
        "sacrebleu": sacrebleu.__version__,
        "device": str(device),
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
        info["cuda"] = torch.version.cuda
    return info


def _median(values: Sequence[float]) -> float:
    values = [v for v in values if not math.isnan(v)]
    return statistics.median(values) if values else float("nan")


def run_benchmark(config: BenchmarkConfig) -> Dict:
    """Decode, time, score and profile every system; write results.{json,md} and the plots."""
    baseline = _check(config)
    if config.threads:
        torch.set_num_threads(config.threads)
    device = choose_device(config.device)
    if config.fp16 and device.type != "cuda":
        raise ValueError("--fp16 needs a GPU")
    out_dir = Path(config.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    machine = machine_info(device)  # before decoding: the load average of the machine as found

    systems: List = []
    for spec in config.systems:
        logger.info("loading %s: %s %s", spec.name, spec.checkpoint, spec.overrides or "")
        systems.append(FairseqSystem(spec, config.data, device, config.fp16))
    task = systems[0].task
    for system in systems[1:]:
        if system.task.target_dictionary.symbols != task.target_dictionary.symbols:
            raise ValueError(f"{system.name}: target dictionary differs from {systems[0].name}'s")
    batches = Batches(task, config.subset, config.batch_size, device, config.max_sentences)
    if not batches.ids:
        raise ValueError(f"subset {config.subset} is empty")
    text = TextSide(config, task, batches)
    fixed_length = config.fixed_length or max(1, round(batches.mean_target_length()))

    notes: List[str] = []
    base_system = systems[[s.name for s in systems].index(baseline)]
    ctranslate2_systems, ctranslate2_info = _ctranslate2_systems(config, base_system, out_dir)
    systems += ctranslate2_systems
    if ctranslate2_info.get("note"):
        notes.append("CTranslate2 row: " + ctranslate2_info["note"])
        logger.warning("CTranslate2 row skipped: %s", ctranslate2_info["note"])

    results_systems = {s.name: {**s.describe(), "settings": {}} for s in systems}
    for beam in config.beams:
        for mode in config.modes:
            setting = Setting(beam, mode, fixed_length if mode == "fixed" else None)
            runs = time_setting(systems, baseline, batches, setting, config, text)
            for name, run in runs.items():
                results_systems[name]["settings"][setting.key] = run

    fairseq_systems = [s for s in systems if isinstance(s, FairseqSystem)]
    cache_mode = "fixed" if "fixed" in config.modes else "natural"
    for beam in config.cache_beams:  # beams outside the speed grid: one untimed pass each
        setting = Setting(beam, cache_mode, fixed_length if cache_mode == "fixed" else None)
        for system in fairseq_systems:
            if setting.key not in results_systems[system.name]["settings"]:
                measured = system.decode(batches, setting, config.decode, measure_cache=True)
                results_systems[system.name]["settings"][setting.key] = {
                    "beam": beam, "mode": cache_mode, "length": setting.length,
                    "cache_bytes": measured.cache_bytes,
                    "cache_tensor_bytes": measured.cache_tensor_bytes,
                }  # fmt: skip

    # The beam of the main table and of the profile: --table-beam when it was timed.
    profile_beam = config.table_beam if config.table_beam in config.beams else config.beams[0]
    if config.profile:
        for mode in config.modes:
            setting = Setting(profile_beam, mode, fixed_length if mode == "fixed" else None)
            logger.info("profile: beam %d, %s lengths", profile_beam, mode)
            for system in fairseq_systems:
                summary = system.profile(batches, setting, config.decode)
                timed = results_systems[system.name]["settings"][setting.key]["seconds"]
                summary["overhead"] = summary["generate_seconds"] / _median(timed)
                summary["compute"] = system.count_flops(batches, setting, config.decode)
                results_systems[system.name].setdefault("profile", {})[mode] = {
                    "beam": profile_beam, **summary
                }

    results = {
        "command": config.command,
        "machine": machine,
        "config": {
            "data": config.data,
            "subset": config.subset,
            "sentences": len(batches.ids),
            "batch_size": config.batch_size,
            "beams": list(config.beams),
            "repeats": config.repeats,
            "modes": list(config.modes),
            "fixed_length": fixed_length,
            "mean_reference_length": batches.mean_target_length(),
            "cache_beams": list(config.cache_beams),
            "cache_mode": cache_mode,
            "table_beam": profile_beam,
            "profile_beam": profile_beam,
            "max_len_a": config.decode.max_len_a,
            "max_len_b": config.decode.max_len_b,
            "lenpen": config.decode.lenpen,
            "fp16": config.fp16,
            "spm_model": text.spm_model,
            "references": text.references_source,
        },
        "baseline": baseline,
        "bleu_signature": text.signatures.get("bleu_signature"),
        "chrf_signature": text.signatures.get("chrf_signature"),
        "systems": results_systems,
        "ctranslate2": ctranslate2_info,
        "notes": notes,
    }
    write_results(results, out_dir)
    return results


def _check(config: BenchmarkConfig) -> str:
    """Validate the configuration; return the baseline's name."""
    names = [spec.name for spec in config.systems]
    if not names:
        raise ValueError("no system to benchmark")
    if len(set(names)) != len(names):
        raise ValueError(f"system names must be unique: {names}")
    baseline = config.baseline or names[0]
    if baseline not in names:
        raise ValueError(f"baseline {baseline!r} is not one of the systems {names}")
    unknown = [mode for mode in config.modes if mode not in MODES]
    if unknown or not config.modes:
        raise ValueError(f"modes must be among {MODES}, got {list(config.modes)}")
    if not config.beams or min(config.beams) < 1 or config.repeats < 1 or config.batch_size < 1:
        raise ValueError("beams, repeats and batch size must be positive")
    return baseline


class TextSide:
    """Detokenizer, references and scoring of one benchmark."""

    def __init__(self, config: BenchmarkConfig, task, batches: Batches):
        data = Path(config.data)
        spm_model = config.spm_model
        if spm_model is None:
            spm_model = str(data / "spm.model") if (data / "spm.model").exists() else ""
        references = config.references
        if references is None:
            default = data / "text" / f"{config.subset}.raw.{task.cfg.target_lang}"
            references = str(default) if default.exists() else ""
        self.spm_model = spm_model or None
        self.references_source = references or "binarized targets, detokenized like hypotheses"
        self.detokenize = Detokenizer(task.target_dictionary, self.spm_model)
        self.references = load_references(references or None, batches, self.detokenize)
        self.ids = batches.ids
        self.signatures: Dict[str, str] = {}

    def score(self, hypotheses: Dict[int, List[int]]) -> Dict:
        """BLEU and chrF of the best hypotheses (sample id -> target tokens)."""
        scores = score(hypotheses, self.references, self.ids, self.detokenize)
        for key in ("bleu_signature", "chrf_signature"):
            self.signatures[key] = scores.pop(key)
        return scores


def time_setting(
    systems: Sequence, baseline: str, batches: Batches, setting: Setting,
    config: BenchmarkConfig, text: TextSide,
) -> Dict[str, Dict]:  # fmt: skip
    """Warm-up pass (also scores and cache peak) then ``repeats`` interleaved timed passes."""
    logger.info("beam %d, %s lengths: warm-up", setting.beam, setting.mode)
    runs: Dict[str, Dict] = {}
    for system in systems:
        warm = system.decode(
            batches, setting, config.decode,
            keep_hypotheses=setting.mode == "natural",
            measure_cache=isinstance(system, FairseqSystem),
        )  # fmt: skip
        run = {
            "beam": setting.beam,
            "mode": setting.mode,
            "length": setting.length,
            "sentences": warm.sentences,
            "tokens": warm.tokens,
            "warmup_seconds": warm.seconds,
            "seconds": [],
            "tokens_per_second_repeats": [],
        }
        if warm.cache_bytes is not None:
            run["cache_bytes"] = warm.cache_bytes
            run["cache_tensor_bytes"] = warm.cache_tensor_bytes
        if warm.hypotheses is not None:
            run.update(text.score(warm.hypotheses))
        runs[system.name] = run
    for repeat in range(config.repeats):
        for system in systems:  # interleaved: A B C ... A B C ...
            timed = system.decode(batches, setting, config.decode)
            runs[system.name]["seconds"].append(timed.seconds)
            runs[system.name]["tokens_per_second_repeats"].append(timed.tokens_per_second)
        logger.info(
            "beam %d, %s lengths, repeat %d: %s", setting.beam, setting.mode, repeat + 1,
            ", ".join(
                f"{name} {run['tokens_per_second_repeats'][-1]:.1f} tok/s"
                for name, run in runs.items()
            ),
        )  # fmt: skip
    base = runs[baseline]["tokens_per_second_repeats"]
    for run in runs.values():
        speeds = run["tokens_per_second_repeats"]
        run["tokens_per_second"] = _median(speeds)
        run["ratio_repeats"] = [a / b if b > 0 else float("nan") for a, b in zip(speeds, base)]
        run["ratio_to_baseline"] = _median(run["ratio_repeats"])
    return runs


def _ctranslate2_systems(
    config: BenchmarkConfig, base: FairseqSystem, out_dir: Path
) -> Tuple[List[CTranslate2System], Dict]:
    """The baseline as CTranslate2 systems (float32 and int8), or none and why not."""
    if not config.ctranslate2:
        return [], {"status": "disabled"}
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        return [], {"status": "skipped", "note": CTRANSLATE2_MISSING}
    if not base.is_plain_transformer():
        return [], {
            "status": "skipped",
            "note": f"baseline {base.name} is not a plain transformer (sharing, AAN or no "
            "cache); CTranslate2 converts only fairseq's transformer",
        }
    threads = config.threads or torch.get_num_threads()
    try:
        model_dir = CTranslate2System.convert(base, out_dir)
        systems = [
            CTranslate2System(base, model_dir, compute_type, threads)
            for compute_type in CTranslate2System.COMPUTE_TYPES
        ]
    except Exception as err:  # noqa: BLE001  (the converter's API moves between versions)
        note = f"conversion failed: {type(err).__name__}: {err}"
        return [], {"status": "skipped", "note": note}
    info = {"status": "ok", "systems": [s.name for s in systems], "version": systems[0].version}
    return systems, info


# --- outputs -------------------------------------------------------------------------------


def write_results(results: Dict, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "results.json", "w", encoding="utf-8") as handle:
        json.dump(_finite(results), handle, indent=2, allow_nan=False)
        handle.write("\n")
    (out_dir / "results.md").write_text(markdown_report(results), encoding="utf-8")
    plot_speed_vs_beam(results, out_dir / "speed_vs_beam.png")
    plot_speed_vs_bleu(results, out_dir / "speed_vs_bleu.png")


def _finite(value):
    """``value`` with NaN and infinities replaced by None (strict JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _fmt(value, spec: str = ".1f", missing: str = "-") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return missing
    return format(value, spec)


def _bytes(value: Optional[int]) -> str:
    if value is None:
        return "-"
    for unit, size in (("MiB", 2**20), ("KiB", 2**10)):
        if value >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value} B"


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _setting(system: Dict, beam: int, mode: str) -> Dict:
    return system["settings"].get(f"beam{beam}_{mode}", {})


def markdown_report(results: Dict) -> str:
    config, systems = results["config"], results["systems"]
    beam = config["table_beam"]
    length = config["fixed_length"]
    machine = results["machine"]
    lines = [
        "# SAN decoding benchmark",
        "",
        f"`{results['command']}`",
        "",
        f"{config['subset']} of `{config['data']}`: {config['sentences']} sentences, batches of "
        f"{config['batch_size']}, {config['repeats']} timed repeats (medians; the systems "
        f"interleaved), baseline **{results['baseline']}**."
        + (
            f" Fixed lengths: every hypothesis {length} tokens + eos (mean reference length "
            f"{config['mean_reference_length']:.1f})."
            if "fixed" in config["modes"]
            else ""
        ),
        "",
        f"Machine: {machine['cpu']}, {machine['torch_threads']} torch threads, device "
        f"{machine['device']}{' (' + machine['gpu'] + ')' if machine.get('gpu') else ''}; "
        f"torch {machine['torch']}, fairseq {machine['fairseq']}; {machine['date']}; "
        f"load average at start {machine.get('load_average')}.",
        "",
        f"BLEU: `{results.get('bleu_signature') or '-'}`; "
        f"chrF: `{results.get('chrf_signature') or '-'}`; references: {config['references']}.",
        "",
    ]
    modes = config["modes"]
    cache_mode = config["cache_mode"]
    header = ["system", "BLEU", "chrF", "params"]
    for mode in modes:
        header += [f"tok/s b{beam} {mode}", "x base"]
    header += [f"cache b{b} ({cache_mode})" for b in config["cache_beams"]]
    lines += [f"## Beam {beam}", "", _row(header), _row(["---"] * len(header))]
    for name, system in systems.items():
        natural = _setting(system, beam, "natural")
        cells = [name, _fmt(natural.get("bleu"), ".2f"), _fmt(natural.get("chrf"), ".2f")]
        cells.append(str(system["params"]) if system.get("params") is not None else "-")
        for mode in modes:
            run = _setting(system, beam, mode)
            cells += [_fmt(run.get("tokens_per_second")), _fmt(run.get("ratio_to_baseline"), ".2f")]
        for b in config["cache_beams"]:
            cells.append(_bytes(_setting(system, b, cache_mode).get("cache_bytes")))
        lines.append(_row(cells))
    for mode in config["modes"]:
        lines += [
            "",
            f"## Speed vs beam ({mode} lengths): tokens/s (x baseline)",
            "",
            "| system | " + " | ".join(f"beam {b}" for b in config["beams"]) + " |",
            "|" + " --- |" * (1 + len(config["beams"])),
        ]
        for name, system in systems.items():
            cells = []
            for b in config["beams"]:
                run = _setting(system, b, mode)
                cells.append(
                    f"{_fmt(run.get('tokens_per_second'))} "
                    f"({_fmt(run.get('ratio_to_baseline'), '.2f')})"
                )
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if "natural" in config["modes"]:
        lines += [
            "",
            "## BLEU vs beam",
            "",
            "| system | " + " | ".join(f"beam {b}" for b in config["beams"]) + " |",
            "|" + " --- |" * (1 + len(config["beams"])),
        ]
        for name, system in systems.items():
            cells = [
                _fmt(_setting(system, b, "natural").get("bleu"), ".2f") for b in config["beams"]
            ]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    for mode in config["modes"]:
        profiled = {
            name: system["profile"][mode]
            for name, system in systems.items()
            if mode in system.get("profile", {})
        }
        if not profiled:
            continue
        lines += [
            "",
            f"## Decoder step profile (beam {config['profile_beam']}, {mode} lengths)",
            "",
            "Shares of the decoder step; the last columns split the whole decode.",
            "",
            "| system | ms/step | self-attn | enc-dec attn | FFN | output proj | rest "
            "| encoder | cache reorder | search+other | hook overhead "
            "| MFLOP/token | compute x base | GFLOP/s |",
            "|" + " --- |" * 14,
        ]
        base = profiled.get(results["baseline"])
        for name, prof in profiled.items():
            step, whole = prof["decoder_step_share"], prof["generate_share"]
            lines.append(
                f"| {name} | {_fmt(prof['ms_per_step'], '.3f')} "
                + "".join(f"| {_fmt(100 * step[p], '.1f')}% " for p in (*PARTS, "rest"))
                + "".join(
                    f"| {_fmt(100 * whole[p], '.1f')}% "
                    for p in ("encoder", "cache_reorder", "search_and_other")
                )
                + f"| {_fmt(prof.get('overhead'), '.2f')}x | "
                + " | ".join(_compute_cells(prof, base, _setting(systems[name], prof["beam"], mode)))
                + " |"
            )
        if base:
            lines += [
                "",
                f"Baseline: attention is {_fmt(100 * base['attention_share_of_decode'], '.1f')}% "
                f"of the decode; attention in decoder layers 2..N, the most any sharing can "
                f"remove, is {_fmt(100 * base['removable_share_of_decode'], '.1f')}% "
                f"(speed-up at most {_fmt(base['max_speedup_from_sharing'], '.2f')}x).",
                "MFLOP/token counts the matrix multiplies of decoding one batch (torch's "
                "FlopCounterMode); `compute x base` is the speed-up if every system ran at the "
                "baseline's FLOP rate, the bound for decoding-engine work that keeps the model.",
            ]
    if results.get("notes"):
        lines += ["", "## Notes", ""] + [f"- {note}" for note in results["notes"]]
    return "\n".join(lines) + "\n"


def _compute_cells(prof: Dict, base: Optional[Dict], timed: Dict) -> List[str]:
    """MFLOP per output token, the baseline's over this system's, and the FLOP rate achieved."""
    compute = prof.get("compute") or {}
    mflop = compute.get("mflop_per_token")
    base_mflop = ((base or {}).get("compute") or {}).get("mflop_per_token")
    ratio = base_mflop / mflop if mflop and base_mflop else None
    tokens_per_second = timed.get("tokens_per_second")
    rate = mflop * tokens_per_second / 1000 if mflop and tokens_per_second else None
    return [_fmt(mflop, ".1f"), _fmt(ratio, ".2f"), _fmt(rate, ".1f")]


def plot_speed_vs_beam(results: Dict, path: Path) -> None:
    """Paper Figure 4 (left): tokens/s against beam size, one panel per length mode."""
    beams = results["config"]["beams"]
    panels = {}
    for mode in results["config"]["modes"]:
        series = {}
        for name, system in results["systems"].items():
            points = [(b, _setting(system, b, mode).get("tokens_per_second"), "") for b in beams]
            series[name] = [p for p in points if p[1] is not None]
        panels[f"speed vs beam size ({mode} lengths)"] = series
    plots.speed_curves(panels, "beam size", str(path))


def plot_speed_vs_bleu(results: Dict, path: Path) -> None:
    """Paper Figure 4 (right): tokens/s against BLEU, one point per beam size (natural lengths)."""
    series = {}
    for name, system in results["systems"].items():
        runs = [(b, _setting(system, b, "natural")) for b in results["config"]["beams"]]
        series[name] = [
            (run["bleu"], run["tokens_per_second"], f"b{b}")
            for b, run in runs
            if run.get("bleu") is not None and run.get("tokens_per_second") is not None
        ]
    plots.speed_curves({"speed vs BLEU (natural lengths)": series}, "BLEU", str(path))
