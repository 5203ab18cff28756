"""The baseline converted to CTranslate2: the context row of an optimized decoding engine.

The loaded baseline (a plain transformer) is converted in memory and decoded with the same
batches and beam sizes, as float32 and as int8 (what a user who only wants speed picks). It is
skipped, with a note, where ``ctranslate2`` is not installed or the baseline is not a plain
transformer. Only a CTranslate2 worker imports ``ctranslate2`` (see ``workers``).
"""

import argparse
import copy
import tempfile
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple, Union

import torch

from fairseq_san.benchmark.config import CTRANSLATE2, FIXED, NATURAL, BenchmarkConfig
from fairseq_san.benchmark.config import DecodeOptions, Setting
from fairseq_san.benchmark.config import CTRANSLATE2_NAME, precision_label
from fairseq_san.benchmark.data import Batches
from fairseq_san.benchmark.fairseq_system import FairseqSystem, max_output_tokens
from fairseq_san.benchmark.system import System
from fairseq_san.benchmark.timing import PassResult, clock

if TYPE_CHECKING:  # only a CTranslate2 worker imports ctranslate2
    from ctranslate2.converters.converter import Converter
    from ctranslate2.specs.model_spec import ModelSpec
    from omegaconf import DictConfig

CTRANSLATE2_MISSING = "ctranslate2 not installed (pip install ctranslate2)"


class CTranslate2System(System):
    """The baseline converted to CTranslate2, decoding the same batches with ``compute_type``.

    Only a plain transformer converts (``not_converted``).
    """

    COMPUTE_TYPES = ("float32", "int8")

    def __init__(self, base: FairseqSystem, model_dir: Path, compute_type: str, threads: int):
        import ctranslate2

        self.name = CTRANSLATE2_NAME.format(base=base.name, compute_type=compute_type)
        self.device = base.device
        self.task = base.task
        self.compute_type = compute_type
        self.max_output_tokens = max_output_tokens(base.model)  # fairseq's cap of a natural length
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
        """The report's record of the row: CTranslate2's version and the type it computes in."""
        return {
            "kind": CTRANSLATE2,
            "decoder": CTRANSLATE2,
            # what CTranslate2 runs (int8 on the CPU: int8_float32), not what it was asked for
            "precision": precision_label(self.translator.compute_type),
            "version": self.version,
            "compute_type": self.translator.compute_type,
        }

    def _source_tokens(self, index: int, sample: Dict) -> List[List[str]]:
        """Batch ``index``'s sources as CTranslate2 reads them: token strings without padding
        and EOS (CTranslate2 adds its own), kept for the next pass."""
        if index not in self._sources:
            dictionary = self.task.source_dictionary
            special = {dictionary.pad(), dictionary.eos()}
            self._sources[index] = [
                [dictionary[t] for t in row.tolist() if t not in special]
                for row in sample["net_input"]["src_tokens"].cpu()
            ]
        return self._sources[index]

    def decode(
        self,
        batches: Batches,
        setting: Setting,
        options: DecodeOptions,
        keep_hypotheses: bool = False,
        measure_cache: bool = False,
    ) -> PassResult:
        """``System.decode`` by CTranslate2's translator, its tokens counted as fairseq's
        steps (``decoded_steps``); ``measure_cache`` is ignored (CTranslate2's cache is its own)."""
        kwargs = dict(
            beam_size=setting.beam,
            length_penalty=options.lenpen,
            return_scores=False,
            # no truncation (CTranslate2's default cut sources at 1024 tokens, which a model of
            # more positions reads whole in fairseq): the baseline's limit is checked before
            max_input_length=0,
        )
        fixed = setting.mode == FIXED
        if fixed:  # CTranslate2 never emits EOS at its length limit: L + 1 tokens are the
            # L + 1 decoder steps of fairseq's L tokens and EOS (a limit of L ran one step less)
            length = setting.length + 1
            kwargs.update(min_decoding_length=length, max_decoding_length=length)
        dictionary = self.task.target_dictionary
        seconds, tokens, sentences = 0.0, 0, 0
        hypotheses = {} if keep_hypotheses else None
        for index, sample in enumerate(batches.samples):
            sources = self._source_tokens(index, sample)
            # the batch as collated, whole: --batch-size itself overflowed CTranslate2's size_t
            # where it was huge (a TypeError traceback), and a batch holds no more sentences
            kwargs["max_batch_size"] = len(sources)
            if setting.mode == NATURAL:  # fairseq's limit: a * (padded source length) + b,
                # at most the model's positions but one
                source_length = sample["net_input"]["src_tokens"].size(1)
                limit = options.max_len_a * source_length + options.max_len_b
                kwargs["max_decoding_length"] = min(int(limit), self.max_output_tokens)
            start = clock(self.device)
            results = self.translator.translate_batch(sources, **kwargs)
            seconds += clock(self.device) - start
            sentences += len(results)
            limit = kwargs["max_decoding_length"]
            tokens += sum(decoded_steps(len(r.hypotheses[0]), limit, fixed) for r in results)
            if hypotheses is not None:
                for sample_id, result in zip(sample["id"].tolist(), results):
                    hypotheses[sample_id] = [dictionary.index(t) for t in result.hypotheses[0]]
        return PassResult(seconds, tokens, sentences, hypotheses)


def decoded_steps(length: int, limit: int, fixed: bool) -> int:
    """The decoder steps behind a CTranslate2 hypothesis of ``length`` tokens (EOS left out),
    counted as fairseq's tokens count its steps: at natural lengths the EOS step too, where the
    hypothesis ended before ``limit`` (``max_decoding_length``); one that reached it decoded no
    EOS (fairseq forces one there, in a step of its own, which its count holds)."""
    return length + (not fixed and length < limit)


def transformer_arch(arch: Optional[str]) -> bool:
    """Whether fairseq builds ``arch`` (an --arch, or a model's name) as its TransformerModel or a
    subclass (transformer_san): the model whose weights CTranslate2's converter reads."""
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY, MODEL_REGISTRY
    from fairseq.models.transformer import TransformerModel

    model = MODEL_REGISTRY.get(ARCH_MODEL_NAME_REGISTRY.get(arch, arch))
    return model is not None and issubclass(model, TransformerModel)


# What CTranslate2's converter would make another model of, or decode otherwise than the
# baseline: (what the baseline does, its ``FairseqSystem.describe()`` filled in, test of it).
NOT_CONVERTED = (
    # an lstm's weights are no transformer's: "conversion failed: AttributeError" said nothing
    ("is no transformer (--arch {arch})", lambda info: not transformer_arch(info["arch"])),
    ("shares attention (san_policy)", lambda info: bool(info["san_policy"])),
    ("has an AAN decoder", lambda info: info["decoder_self_attention_type"] not in (None, "dot")),
    ("decodes without the cache", lambda info: info["no_cache"]),
    ("uses --cross-self-attention", lambda info: info["cross_self_attention"]),
)


def not_converted(base: FairseqSystem) -> Optional[str]:
    """Why CTranslate2 cannot stand for ``base`` (what it does that fairseq's plain transformer,
    all the converter knows, does not: each reason it has), or None."""
    info = base.describe()
    reasons = [reason.format(**info) for reason, applies in NOT_CONVERTED if applies(info)]
    if not reasons:
        return None
    return (
        f"baseline {base.name} {' and '.join(reasons)}: CTranslate2 converts only fairseq's "
        "plain transformer"
    )


def ctranslate2_systems(
    config: BenchmarkConfig, base: FairseqSystem
) -> Tuple[List[CTranslate2System], Dict]:
    """The baseline as CTranslate2 systems (float32 and int8), or none and why not.

    The converted model lives in a temporary directory only while the translators load it, so
    that no model file lands among the results.
    """
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        return [], {"status": "skipped", "note": CTRANSLATE2_MISSING}
    reason = not_converted(base)
    if reason is not None:
        return [], {"status": "skipped", "note": reason}
    threads = config.threads or torch.get_num_threads()
    with tempfile.TemporaryDirectory(prefix="fairseq-san-bench-") as work_dir:
        try:
            model_dir = CTranslate2System.convert(base, Path(work_dir))
        except Exception as err:  # noqa: BLE001  (the converter's API moves between versions)
            note = f"conversion failed: {type(err).__name__}: {one_line(err)}"
            return [], {"status": "skipped", "note": note}
        systems, failures = _loaded(base, model_dir, threads)
    if not systems:
        return [], {"status": "skipped", "note": "; ".join(failures)}
    info = {"status": "ok", "systems": [s.name for s in systems], "version": systems[0].version}
    if failures:
        info["note"] = "; ".join(failures)
    return systems, info


def _loaded(
    base: FairseqSystem, model_dir: Path, threads: int
) -> Tuple[List[CTranslate2System], List[str]]:
    """The converted model loaded at every compute type the device runs, and one line for each
    that did not load (int8 on a GPU without it, a CUDA runtime the driver lacks): the others
    keep their rows."""
    systems, failures = [], []
    for compute_type in CTranslate2System.COMPUTE_TYPES:
        try:
            systems.append(CTranslate2System(base, model_dir, compute_type, threads))
        except Exception as err:  # noqa: BLE001  (CTranslate2's ValueError or RuntimeError)
            failures.append(
                f"{compute_type} not loaded on {base.device.type}: {type(err).__name__}: "
                f"{one_line(err)}"
            )
    return systems, failures


def one_line(error: BaseException) -> str:
    """An error's message as one line: CTranslate2's converter gives its reasons on lines of
    their own, which made a stray item of the report's notes and a log line of several."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return " ".join(lines) or type(error).__name__


def _in_memory_converter(base: FairseqSystem, ct2_fairseq: ModuleType) -> "Converter":
    """CTranslate2's fairseq conversion, fed the already loaded model instead of a file.

    CTranslate2 knows fairseq's ``transformer``; a ``transformer_san`` with no sharing is exactly
    that model, so the architecture name is swapped before the spec is chosen.
    """
    from ctranslate2.converters.converter import Converter

    class InMemoryFairseqConverter(Converter):
        @torch.no_grad()
        def _load(self) -> "ModelSpec":
            """CTranslate2's ``FairseqConverter._load`` from its model on: the spec and weights
            of ``base``'s model (an encoder-decoder; language models are refused before)."""
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


def _namespace(config: Union[argparse.Namespace, "DictConfig"]) -> argparse.Namespace:
    """A copy of the model's configuration as the namespace CTranslate2's converter reads."""
    if isinstance(config, argparse.Namespace):
        return argparse.Namespace(**vars(config))
    from omegaconf import OmegaConf

    return argparse.Namespace(**OmegaConf.to_container(config, resolve=True))
