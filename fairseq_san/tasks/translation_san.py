"""``translation_san``: fairseq's translation task plus the layer-similarity analysis of SAN.

Training is exactly ``--task translation``. The analysis (paper section 3.1, Figure 2) runs in
``fairseq-validate``: with teacher forcing it collects the per-head attention distributions of
every layer for decoder self-attention, encoder-decoder attention and encoder self-attention, and
streams the JS divergence between every pair of layers (``fairseq_san.js.PairwiseJS``, in nats;
memory does not grow with the number of sentences)::

    fairseq-validate DATA --user-dir fairseq_san --task translation_san --path CKPT \\
        --valid-subset valid --san-analysis-dir DIR [--san-analysis-max-sentences N]

At the end of the subset DIR holds

* ``js.json``: ``{"decoder_self": MxM, "decoder_encdec": MxM, "encoder_self": NxN,
  "sentences": n, "checkpoint": CKPT, "num_updates": k, "subset": "valid"}``; a kind without
  attention weights (decoder self-attention replaced by AAN) is ``null``. ``num_updates`` is the
  training step fairseq read from the checkpoint when it loaded the model (a ``transformer_san``
  model keeps it; ``null`` for other models). It is the input of
  ``fairseq-san-policy``; ``fairseq-san-plot-js`` plots a series of them against training steps;
* ``js-<kind>.png``: the matrices drawn like the paper's Figure 2 (dark = similar);
* ``attention-<kind>.npz``: the weights of sentences 0..K-1 of the subset
  (``--san-analysis-save-sentences K``, default 4), one array ``sentence_<i>`` per sentence,
  shaped (layers, heads, queries, keys), without padding.

Sentences are identified by their index in the subset (line number from 0).
``--san-analysis-max-sentences N`` analyses sentences 0..N-1 (not the first batches, which
fairseq fills by length), so results do not depend on batching; the validation loss still
covers the whole subset. ``--san-analysis-log-interval`` (default 100) logs progress every that
many analysed batches, besides fairseq's progress bar.

The checkpoint must have been trained with ``--task translation_san``. fairseq-validate builds
the task from the checkpoint's saved task config and applies command-line flags only to keys that
config already has, so for a checkpoint trained with ``--task translation`` the flag
``--task translation_san`` does not change the task. A ``transformer_san`` model then stops
before validating, printing the override that switches the task:
``--model-overrides "{'task': {'_name': 'translation_san', 'san_analysis_dir': 'DIR'}}"``
(add ``'san_analysis_max_sentences': N`` etc. inside the same dict; the other
``--san-analysis-*`` flags are not applied in that case). A bad ``--san-analysis-dir`` or
``--san-analysis-max-sentences`` stops at task set-up, before any batch.

Every sentence of the subset is analysed and in the loss, however batches are sized
(``fairseq_san.batching``). One subset per run, in a single process (no distributed validation).
"""

import json
import logging
import os
import tempfile
from dataclasses import dataclass, field, fields
from typing import Dict, List, Optional

import numpy as np
import torch
from fairseq.dataclass import ChoiceEnum
from fairseq.modules import MultiheadAttention
from fairseq.tasks import TASK_REGISTRY, register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask
from omegaconf import OmegaConf
from torch import Tensor, nn

from fairseq_san.errors import UsageError
from fairseq_san.js import PairwiseJS
from fairseq_san.modules.shared_attention import unfused_static_kv
from fairseq_san.policy import KIND_MODULES, KINDS
from fairseq_san.static_decoding import PRECISIONS as STATIC_PRECISIONS
from fairseq_san.static_decoding import build_static_generator

logger = logging.getLogger(__name__)



@dataclass
class TranslationSANConfig(TranslationConfig):
    san_analysis_dir: Optional[str] = field(
        default=None,
        metadata={
            "help": "fairseq-validate only: write the JS divergence between the attention "
            "weights of every pair of layers (js.json), heatmaps and sample attention here"
        },
    )
    san_analysis_max_sentences: Optional[int] = field(
        default=None,
        metadata={"help": "analyse only sentences 0..N-1 of the subset (the loss covers all)"},
    )
    san_analysis_save_sentences: int = field(
        default=4,
        metadata={"help": "save the attention weights of sentences 0..K-1 as .npz"},
    )
    san_analysis_log_interval: int = field(
        default=100, metadata={"help": "log analysis progress every N analysed batches"}
    )
    san_decoder: ChoiceEnum(["fairseq", "static"]) = field(
        default="fairseq",
        metadata={
            "help": "generation: fairseq's SequenceGenerator, or the static-shape decoder "
            "(fairseq_san.static_decoding: same translations, less per-step overhead)"
        },
    )
    san_decoder_precision: ChoiceEnum(list(STATIC_PRECISIONS)) = field(
        default="fp32",
        metadata={
            "help": "--san-decoder static on the CPU: fp32, bf16 or int8 linear layers, "
            "or bf16-full (the whole step in bfloat16)"
        },
    )


def attention_modules(model: nn.Module) -> Dict[str, Optional[List[MultiheadAttention]]]:
    """Each kind's attention modules, bottom-up; None for a kind without attention weights."""
    stacks = {name: getattr(model, name, None) for name in ("encoder", "decoder")}
    if not all(hasattr(stack, "layers") for stack in stacks.values()):
        raise ValueError(
            "the SAN analysis needs an encoder-decoder transformer (model.encoder.layers and "
            f"model.decoder.layers); got {type(model).__name__}"
        )
    found = {}
    for kind, (stack, attr) in KIND_MODULES.items():
        modules = [getattr(layer, attr, None) for layer in stacks[stack].layers]
        has_weights = modules and all(isinstance(m, MultiheadAttention) for m in modules)
        found[kind] = modules if has_weights else None
    return found


class AttentionCapture:
    """Per-head attention weights of every layer during the forward passes inside ``with``.

    fairseq's layers ask their attention for no weights. A pre-hook therefore asks every module
    for per-head weights, off fairseq's fused path (``unfused_static_kv``); a forward hook keeps
    them, (heads, batch, queries, keys).
    """

    def __init__(self, model: nn.Module) -> None:
        self.modules = attention_modules(model)
        self.weights: Dict[str, List[Optional[Tensor]]] = {
            kind: [None] * len(modules) for kind, modules in self.modules.items() if modules
        }
        self._handles: list = []

    def __enter__(self) -> "AttentionCapture":
        for kind, modules in self.modules.items():
            for index, module in enumerate(modules or []):
                self._handles.append(
                    module.register_forward_pre_hook(_ask_for_weights, with_kwargs=True)
                )
                self._handles.append(module.register_forward_hook(self._keeper(kind, index)))
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _keeper(self, kind: str, index: int):
        def keep(module, args, output):
            weights = output[1]
            if weights is None or weights.dim() != 4:
                raise RuntimeError(
                    f"{kind} attention of layer {index + 1} ({type(module).__name__}) "
                    "returned no per-head weights"
                )
            self.weights[kind][index] = weights.detach()

        return keep

    def stacked(self, kind: str) -> Optional[Tensor]:
        """(layers, batch, heads, queries, keys) in float32, or None for a kind without weights."""
        if kind not in self.weights:
            return None
        layers = self.weights[kind]
        missing = [index + 1 for index, w in enumerate(layers) if w is None]
        if missing:
            raise RuntimeError(f"{kind} attention of layers {missing} did not run")
        return torch.stack([w.float().transpose(0, 1) for w in layers])


def _ask_for_weights(module, args, kwargs):
    """Forward pre-hook: per-head weights, off fairseq's fused path."""
    if len(args) > 3:
        raise RuntimeError(
            "SAN analysis: attention called with positional arguments after query, key, value"
        )
    kwargs = dict(kwargs, need_weights=True, need_head_weights=True)
    kwargs["static_kv"] = unfused_static_kv(
        kwargs.get("static_kv", False), kwargs.get("incremental_state")
    )
    return args, kwargs


class LayerAnalysis:
    """JS between layers per kind, streamed over batches, plus the weights of a few sentences.

    Sentences are chosen by their index in the subset (its line number, from 0), not by the
    order of fairseq's batches, which sorts by length: ``max_sentences`` analyses indices
    0..N-1 and ``save_sentences`` keeps the weights of indices 0..K-1 among them. The result
    therefore does not depend on batching.
    """

    def __init__(self, max_sentences: Optional[int], save_sentences: int) -> None:
        self.max_sentences = max_sentences
        self.save_sentences = save_sentences
        self.js: Dict[str, Optional[PairwiseJS]] = {}
        self.saved: Dict[str, Dict[int, np.ndarray]] = {}
        self.sentences = 0
        self.batches = 0

    def rows(self, sample: dict) -> Tensor:
        """Which rows of the batch to analyse."""
        ids = sample["id"]
        if self.max_sentences is None:
            return torch.arange(ids.numel(), device=ids.device)
        return ids.lt(self.max_sentences).nonzero().squeeze(1)

    def add(
        self, capture: AttentionCapture, sample: dict, rows: Tensor, src_pad: int, tgt_pad: int
    ) -> None:
        """Add ``rows`` of one batch whose forward ran inside ``capture``."""
        net_input = sample["net_input"]
        src_mask = net_input["src_tokens"].index_select(0, rows).ne(src_pad)
        tgt_mask = net_input["prev_output_tokens"].index_select(0, rows).ne(tgt_pad)
        masks = {  # (query mask, key mask) per kind
            "decoder_self": (tgt_mask, tgt_mask),
            "decoder_encdec": (tgt_mask, src_mask),
            "encoder_self": (src_mask, src_mask),
        }
        ids = sample["id"].index_select(0, rows).tolist()
        for kind in KINDS:
            attn = capture.stacked(kind)
            if attn is None:
                self.js[kind] = None
                continue
            attn = attn.index_select(1, rows.to(attn.device))
            queries, keys = masks[kind]
            if kind not in self.js:
                self.js[kind] = PairwiseJS(attn.size(0))
                self.saved[kind] = {}
            self.js[kind].update(attn, queries)
            for b, sentence in enumerate(ids):
                if sentence < self.save_sentences:
                    kept = attn[:, b][:, :, queries[b]][:, :, :, keys[b]]
                    self.saved[kind][sentence] = kept.cpu().numpy()
        self.sentences += len(ids)
        self.batches += 1

    def write(self, directory: str, meta: dict) -> None:
        """js.json, js-<kind>.png and attention-<kind>.npz in ``directory``."""
        from fairseq_san import plots

        if self.sentences == 0:
            raise RuntimeError("SAN analysis: no sentences were analysed, nothing to write")
        os.makedirs(directory, exist_ok=True)
        matrices = {
            kind: None if self.js.get(kind) is None else self.js[kind].matrix() for kind in KINDS
        }
        with open(os.path.join(directory, "js.json"), "w", encoding="utf-8") as handle:
            handle.write(_dump_json(dict(matrices, sentences=self.sentences, **meta)))
        for kind, matrix in matrices.items():
            if matrix is None:
                continue
            title = f"{kind.replace('_', ' ')}: JS divergence (nats), {self.sentences} sentences"
            plots.js_heatmap(matrix, os.path.join(directory, f"js-{kind}.png"), title=title)
            saved = self.saved[kind]
            np.savez(
                os.path.join(directory, f"attention-{kind}.npz"),
                **{f"sentence_{sentence}": saved[sentence] for sentence in sorted(saved)},
            )


def _dump_json(result: dict) -> str:
    """JSON text with one matrix row per line."""
    parts = []
    for key, value in result.items():
        if isinstance(value, list):
            rows = ",\n".join("    " + json.dumps(row) for row in value)
            text = "[\n" + rows + "\n  ]"
        else:
            text = json.dumps(value)
        parts.append(f"  {json.dumps(key)}: {text}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


@register_task("translation_san", dataclass=TranslationSANConfig)
class TranslationSANTask(TranslationTask):
    """``translation`` with the attention analysis of ``--san-analysis-dir`` (see module doc)."""

    cfg: TranslationSANConfig

    def __init__(self, cfg: TranslationSANConfig, src_dict, tgt_dict):
        check_analysis_options(cfg)
        super().__init__(cfg, src_dict, tgt_dict)
        self._analysis: Optional[LayerAnalysis] = None
        self._num_updates: Optional[int] = None
        self._subset: Optional[str] = None
        self._analysed_subset: Optional[str] = None

    @property
    def analysing(self) -> bool:
        return bool(self.cfg.san_analysis_dir)

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        if self.analysing and self._analysed_subset not in (None, split):
            raise ValueError(
                f"--san-analysis-dir analyses one subset per run: '{self._analysed_subset}' "
                f"is written, '{split}' would overwrite it; run fairseq-validate once per subset"
            )
        self._subset = split
        return super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)

    def train_step(self, *args, **kwargs):
        if self.analysing:
            raise ValueError("--san-analysis-dir is for fairseq-validate, not for training")
        return super().train_step(*args, **kwargs)

    def valid_step(self, sample, model, criterion):
        if self.analysing and sample and "net_input" in sample:
            self._analyse(sample, model)
        return super().valid_step(sample, model, criterion)

    def _analyse(self, sample: dict, model: nn.Module) -> None:
        """One teacher-forced forward pass with the attention weights captured."""
        if self._analysis is None:
            if torch.distributed.is_available() and torch.distributed.is_initialized():
                if torch.distributed.get_world_size() > 1:
                    raise ValueError("--san-analysis-dir runs in a single process only")
            self._analysis = LayerAnalysis(
                self.cfg.san_analysis_max_sentences, self.cfg.san_analysis_save_sentences
            )
            self._num_updates = getattr(model, "num_updates", None)
            logger.info(
                "SAN analysis of subset '%s' into %s", self._subset, self.cfg.san_analysis_dir
            )
        analysis = self._analysis
        rows = analysis.rows(sample)
        if rows.numel() == 0:
            return
        model.eval()
        with torch.no_grad(), AttentionCapture(model) as capture:
            model(**sample["net_input"])
        analysis.add(capture, sample, rows, self.src_dict.pad(), self.tgt_dict.pad())
        interval = self.cfg.san_analysis_log_interval
        if interval > 0 and analysis.batches % interval == 0:
            logger.info(
                "SAN analysis: %d sentences in %d batches", analysis.sentences, analysis.batches
            )

    def build_generator(
        self,
        models,
        args,
        seq_gen_cls=None,
        extra_gen_cls_kwargs=None,
        prefix_allowed_tokens_fn=None,
    ):
        """fairseq's generator, or with ``--san-decoder static`` the static-shape decoder.

        ``args`` (the generation options) may carry ``san_decoder`` and ``san_decoder_precision``
        themselves (the benchmark does); otherwise the task's options decide.
        """
        if (getattr(args, "san_decoder", None) or self.cfg.san_decoder) != "static":
            return super().build_generator(
                models, args, seq_gen_cls, extra_gen_cls_kwargs, prefix_allowed_tokens_fn
            )
        return build_static_generator(
            models,
            self.target_dictionary,
            args,
            getattr(args, "san_decoder_precision", None) or self.cfg.san_decoder_precision,
            seq_gen_cls,
            extra_gen_cls_kwargs,
            prefix_allowed_tokens_fn,
        )

    def reduce_metrics(self, logging_outputs, criterion):
        """fairseq-validate calls this once per subset, after its last batch: write the analysis."""
        super().reduce_metrics(logging_outputs, criterion)
        if not self.analysing:
            return
        analysis, self._analysis = self._analysis, None
        if analysis is None:
            raise RuntimeError(f"SAN analysis: subset '{self._subset}' had no batches")
        checkpoint = _root_config_value(self.cfg, "common_eval.path")
        analysis.write(
            self.cfg.san_analysis_dir,
            {
                "checkpoint": checkpoint,
                "num_updates": self._num_updates,
                "subset": self._subset,
            },
        )
        self._analysed_subset = self._subset
        logger.info(
            "SAN analysis: wrote %s (%d sentences)",
            os.path.join(self.cfg.san_analysis_dir, "js.json"),
            analysis.sentences,
        )


def check_analysis_options(cfg: TranslationSANConfig) -> None:
    """Refuse analysis options that would fail only after the validation pass.

    The analysis directory is created (and written to) here, at task set-up, before any batch.
    """
    limit = cfg.san_analysis_max_sentences
    if limit is not None and limit < 1:
        raise UsageError(
            f"--san-analysis-max-sentences {limit}: must be at least 1 "
            "(leave it out to analyse every sentence)"
        )
    directory = cfg.san_analysis_dir
    if not directory:
        return
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise UsageError(f"--san-analysis-dir {directory} is a file, not a directory")
    try:
        os.makedirs(directory, exist_ok=True)
        tempfile.TemporaryFile(dir=directory).close()
    except OSError as err:
        raise UsageError(
            f"--san-analysis-dir {directory} cannot be written: {err.strerror or err}"
        ) from None


def check_analysis_task(args, task) -> None:
    """Refuse ``--san-analysis-dir`` for a model whose task is not ``translation_san``.

    fairseq-validate builds the task saved in the checkpoint and gives command-line flags only to
    keys that task's config has, so on a checkpoint trained with another task the analysis would
    be silently skipped. fairseq sets every flag on the model's arguments, though, so the model
    (``TransformerSANModel.build_model``) calls this; the message gives the override that
    switches the task.
    """
    if not getattr(args, "san_analysis_dir", None) or isinstance(task, TranslationSANTask):
        return
    given = {
        name: getattr(args, name)
        for name in (option.name for option in fields(TranslationSANConfig))
        if name.startswith("san_analysis") and getattr(args, name, None) is not None
    }
    trained = next((name for name, cls in TASK_REGISTRY.items() if cls is type(task)), None)
    override = {"task": {"_name": "translation_san", **given}}
    raise UsageError(
        f"--san-analysis-dir needs the task translation_san, but this checkpoint was trained "
        f"with --task {trained or type(task).__name__}, which fairseq-validate keeps: switch its "
        f'task with --model-overrides "{override!r}"'
    )


def _root_config_value(cfg, key: str):
    """A value of the configuration that the task's config is part of, or None.

    fairseq-validate loads the checkpoint's configuration, sets ``common_eval.path`` in it to
    ``--path`` (an override by name) and builds the task from its ``task`` node, whose parent
    fairseq keeps (``merge_with_parent``).
    """
    if not OmegaConf.is_config(cfg):
        return None
    return OmegaConf.select(cfg._get_root(), key, default=None)
