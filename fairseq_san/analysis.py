"""The attention analysis of SAN (paper section 3.1, Figure 2): capture every layer's attention
distributions under teacher forcing and stream the JS divergence between layers.

The tasks' ``valid_step`` drives it (``fairseq_san.tasks.attention_analysis``, for
``translation_san`` and ``language_modeling_san``, which also describes the command and the
files it writes); the JS itself is ``fairseq_san.js``.
"""

import contextlib
import json
import os
import tempfile
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import torch
from fairseq.modules import MultiheadAttention
from torch import Tensor, nn

from fairseq_san.errors import UsageError
from fairseq_san.js import PairwiseJS
from fairseq_san.modules.shared_attention import unfused_static_kv
from fairseq_san.policy import KIND_MODULES, KIND_TABLE, KINDS


def attention_modules(model: nn.Module) -> Dict[str, Optional[List[MultiheadAttention]]]:
    """Each kind's attention modules, bottom-up; None for a kind without attention weights."""
    stacks = {name: getattr(model, name, None) for name in ("encoder", "decoder")}
    if not hasattr(stacks["decoder"], "layers") or (
        stacks["encoder"] is not None and not hasattr(stacks["encoder"], "layers")
    ):
        raise UsageError(
            "the SAN analysis needs a transformer (model.decoder.layers, and model.encoder.layers "
            f"when it has an encoder); got {type(model).__name__}"
        )
    found = {}
    for kind, (stack, attr) in KIND_MODULES.items():
        if stacks[stack] is None:  # a decoder-only language model
            found[kind] = None
            continue
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

    def __exit__(self, *_exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _keeper(self, kind: str, index: int) -> Callable[[nn.Module, tuple, tuple], None]:
        """The forward hook that keeps the per-head weights of layer ``index`` of ``kind``."""

        def keep(module: nn.Module, args: tuple, output: tuple) -> None:
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

    def add_masked(
        self,
        capture: AttentionCapture,
        sample: dict,
        rows: Tensor,
        masks: Dict[str, Tuple[Tensor, Tensor]],
    ) -> None:
        """Add ``rows`` of one batch; ``masks`` holds the (query, key) masks of the ``rows`` for
        every kind with attention weights (a language model has decoder self-attention only)."""
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
            try:
                self.js[kind].update(attn, queries)
            except ValueError as error:  # a diverged model's weights: no js.json to learn from
                raise UsageError(f"SAN analysis of {KIND_TABLE[kind].title}: {error}") from None
            for b, sentence in enumerate(ids):
                if sentence < self.save_sentences:
                    kept = attn[:, b][:, :, queries[b]][:, :, :, keys[b]]
                    self.saved[kind][sentence] = kept.cpu().numpy()
        self.sentences += len(ids)
        self.batches += 1

    def write(self, directory: str, meta: dict) -> None:
        """js.json, js-<kind>.png and attention-<kind>.npz in ``directory``.

        Everything is written into a temporary folder inside ``directory`` and moved into place
        with js.json last, so that js.json in ``directory`` means every file of the analysis is
        there (the learn-to-share loop takes it as the analysis being done). A kind without
        attention here loses the files an earlier analysis in ``directory`` left of it: they
        would stand beside a js.json that says it has none.
        """
        if self.sentences == 0:
            raise UsageError(
                "SAN analysis: no sentences were analysed (--san-analysis-max-sentences takes "
                "sentence ids 0..N-1; were they filtered out, by --max-source-positions or "
                "--max-target-positions with --skip-invalid-size-inputs-valid-test?): nothing to "
                "write"
            )
        os.makedirs(directory, exist_ok=True)
        matrices = {
            kind: None if self.js.get(kind) is None else self.js[kind].matrix() for kind in KINDS
        }
        with tempfile.TemporaryDirectory(dir=directory, prefix=".partial-") as partial:
            names = self._write_kinds(partial, matrices)
            with open(os.path.join(partial, "js.json"), "w", encoding="utf-8") as handle:
                handle.write(_dump_json(dict(matrices, sentences=self.sentences, **meta)))
            for name in names + ["js.json"]:
                os.replace(os.path.join(partial, name), os.path.join(directory, name))
        for kind in (kind for kind, matrix in matrices.items() if matrix is None):
            for name in kind_files(kind):  # after js.json says so
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(directory, name))

    def _write_kinds(self, directory: str, matrices: Dict[str, Optional[list]]) -> List[str]:
        """The heatmap and the saved weights of every kind with attention; their file names."""
        from fairseq_san import plots

        names = []
        for kind, matrix in matrices.items():
            if matrix is None:
                continue
            heatmap, weights = kind_files(kind)
            title = f"{KIND_TABLE[kind].title}: JS divergence (nats), {self.sentences} sentences"
            plots.js_heatmap(matrix, os.path.join(directory, heatmap), title=title)
            saved = self.saved[kind]
            np.savez(
                os.path.join(directory, weights),
                **{f"sentence_{sentence}": saved[sentence] for sentence in sorted(saved)},
            )
            names += [heatmap, weights]
        return names


def kind_files(kind: str) -> Tuple[str, str]:
    """The names of the heatmap and of the saved weights that an analysis writes of ``kind``."""
    return f"js-{kind}.png", f"attention-{kind}.npz"


def analysis_files() -> List[str]:
    """The name of every file an analysis writes (or removes) in its folder."""
    return [name for kind in KINDS for name in kind_files(kind)] + ["js.json"]


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
