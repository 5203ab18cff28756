"""The ``--san-analysis-dir`` hook of a task: fairseq-validate's teacher-forced passes also feed
``fairseq_san.analysis.LayerAnalysis``, which writes the JS matrices at the end of the subset.
``translation_san`` and ``language_modeling_san`` both inherit ``AttentionAnalysisTask``; each
says which tokens of a batch are real (``analysis_masks``).

The analysis (paper section 3.1, Figure 2) runs in ``fairseq-validate``: with teacher forcing it
collects the per-head attention distributions of every layer for decoder self-attention,
encoder-decoder attention and encoder self-attention, and streams the JS divergence between every
pair of layers (``fairseq_san.js.PairwiseJS``, in nats; memory does not grow with the number of
sentences)::

    fairseq-validate DATA --user-dir fairseq_san --task translation_san --path CKPT \\
        --valid-subset valid --san-analysis-dir DIR [--san-analysis-max-sentences N]

At the end of the subset DIR holds

* ``js.json``: ``{"decoder_self": MxM, "decoder_encdec": MxM, "encoder_self": NxN,
  "sentences": n, "checkpoint": CKPT, "num_updates": k, "seed": S, "save_dir": D,
  "subset": "valid", "policy": P}``, S the ``--seed`` and D the ``--save-dir`` the checkpoint
  was trained with (what tell two trainings of one recipe apart, D also two of one seed, in any
  folder its checkpoints were copied or linked to: fairseq-san-plot-js refuses a series that
  mixes them), P the sharing
  policy the model's parameters hold (``{}``: none); a kind without
  attention weights (decoder self-attention replaced by AAN; a language model's
  encoder-decoder and encoder attention) is ``null``. ``num_updates`` is the training step the
  checkpoint was saved at, as fairseq read it when it loaded the model. The file is the input
  of ``fairseq-san-policy``; ``fairseq-san-plot-js`` plots a series of them against training
  steps;
* ``js-<kind>.png``: the matrices drawn like the paper's Figure 2 (dark = similar);
* ``attention-<kind>.npz``: the weights of sentences 0..K-1 of the subset
  (``--san-analysis-save-sentences K``, default 4), one array ``sentence_<i>`` per sentence,
  shaped (layers, heads, queries, keys), without padding.

Sentences are identified by their index in the subset (line number from 0); a language model's
samples are its sentences with ``--sample-break-mode eos`` only (other modes, blocks of tokens
across lines, are refused).
``--san-analysis-max-sentences N`` analyses sentences 0..N-1 (not the first batches, which
fairseq fills by length), so results do not depend on batching; the validation loss still
covers the whole subset. ``--san-analysis-log-interval`` (default 100; 0: never) logs progress
every that many analysed batches, besides fairseq's progress bar. A bad ``--san-analysis-dir``
(or one holding a folder named as a file above), a negative count or one beyond 64 bits stops
at task set-up, before any batch; one that the checkpoint's task would not read (fairseq's own
``translation`` or ``language_modeling``, or a ``'task'`` dict in
``--model-overrides``) stops once the task is built, naming the override that analyses
(``check_analysis_applied``). Every sentence of the subset is analysed and in the loss, however
batches are sized (``fairseq_san.fairseq_fixes.last_batch``).
One subset per run, in a single process (no distributed validation).
"""

import argparse
import logging
import os
import tempfile
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import torch
from fairseq.dataclass import FairseqDataclass
from omegaconf import OmegaConf
from torch import Tensor, nn

from fairseq_san import options
from fairseq_san.analysis import AttentionCapture, LayerAnalysis, analysis_files
from fairseq_san.errors import UsageError
from fairseq_san.fairseq_fixes.option_ranges import LARGEST_COUNT
from fairseq_san.models.checkpoint_policy import layers_of, policy_of_state_dict
from fairseq_san.options import option_field

logger = logging.getLogger(__name__)


@dataclass
class AnalysisConfig(FairseqDataclass):
    """The options of ``--san-analysis-dir``, in the config of every task with the hook."""

    san_analysis_dir: Optional[str] = option_field(options.OPTIONS["san_analysis_dir"])
    san_analysis_max_sentences: Optional[int] = option_field(
        options.OPTIONS["san_analysis_max_sentences"]
    )
    san_analysis_save_sentences: int = option_field(options.OPTIONS["san_analysis_save_sentences"])
    san_analysis_log_interval: int = option_field(options.OPTIONS["san_analysis_log_interval"])


class AttentionAnalysisTask:
    """A fairseq task mixin: the attention analysis of ``--san-analysis-dir`` in valid_step.

    The task's ``cfg`` has the fields of ``options.ANALYSIS_OPTIONS``; ``__init__`` of the task
    calls ``check_analysis_options(cfg)`` before fairseq's and ``start_analysis()`` after it.
    """

    def start_analysis(self) -> None:
        """Nothing analysed yet: the analysis, its training step, policy and subset unknown."""
        self._analysis: Optional[LayerAnalysis] = None
        self._num_updates: Optional[int] = None
        self._policy: Optional[Dict[str, List[int]]] = None
        self._subset: Optional[str] = None
        self._analysed_subset: Optional[str] = None

    @property
    def analysing(self) -> bool:
        """Whether this run analyses (``--san-analysis-dir`` given)."""
        return bool(self.cfg.san_analysis_dir)

    def analysis_masks(
        self, sample: dict, rows: Tensor, model: nn.Module
    ) -> Dict[str, Tuple[Tensor, Tensor]]:
        """(query mask, key mask) of ``rows`` per attention kind of ``model``: which tokens are
        not padding."""
        raise NotImplementedError

    def load_dataset(self, split: str, epoch: int = 1, combine: bool = False, **kwargs) -> None:
        if self.analysing and self._analysed_subset not in (None, split):
            raise UsageError(
                f"--san-analysis-dir analyses one subset per run: '{self._analysed_subset}' "
                f"is written, '{split}' would overwrite it; run fairseq-validate once per subset"
            )
        self._subset = split
        return super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)

    def build_model(self, cfg, from_checkpoint: bool = False) -> nn.Module:
        """The task's model, keeping the training step that fairseq sets on it as it loads the
        checkpoint (``num_updates``, Figure 5's x axis): fairseq's models pass it on to their
        modules and keep none. A checkpoint trained with ``--eval-bleu`` is analysed without
        it (``leave_bleu_out``)."""
        if self.analysing:
            self.leave_bleu_out()
        model = super().build_model(cfg, from_checkpoint)
        if self.analysing:
            keep_num_updates(model)
        return model

    def leave_bleu_out(self) -> None:
        """Turn off the ``--eval-bleu`` that fairseq-validate takes from the checkpoint's task: it
        would build a generator (refused where the task analyses) and decode every batch of the
        subset, which the analysis does not read (fairseq-validate's loss is kept)."""
        if getattr(self.cfg, "eval_bleu", False):
            logger.info("SAN analysis: the checkpoint's --eval-bleu left out (no BLEU computed)")
            self.cfg.eval_bleu = False

    def train_step(self, *args, **kwargs) -> Tuple[Tensor, int, dict]:
        if self.analysing:
            raise UsageError("--san-analysis-dir is for fairseq-validate, not for training")
        return super().train_step(*args, **kwargs)

    def valid_step(self, sample: dict, model: nn.Module, criterion) -> Tuple[Tensor, int, dict]:
        if self.analysing and sample and "net_input" in sample:
            self._analyse(sample, model)
        return super().valid_step(sample, model, criterion)

    def _analyse(self, sample: dict, model: nn.Module) -> None:
        """One teacher-forced forward pass with the attention weights captured."""
        if self._analysis is None:
            if torch.distributed.is_available() and torch.distributed.is_initialized():
                if torch.distributed.get_world_size() > 1:
                    raise UsageError("--san-analysis-dir runs in a single process only")
            self._analysis = LayerAnalysis(
                self.cfg.san_analysis_max_sentences, self.cfg.san_analysis_save_sentences
            )
            self._num_updates = getattr(model, "num_updates", None)
            state_dict = model.state_dict()
            self._policy = policy_of_state_dict(state_dict, layers_of(state_dict))
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
        analysis.add_masked(capture, sample, rows, self.analysis_masks(sample, rows, model))
        interval = self.cfg.san_analysis_log_interval
        if interval > 0 and analysis.batches % interval == 0:
            logger.info(
                "SAN analysis: %d sentences in %d batches", analysis.sentences, analysis.batches
            )

    def reduce_metrics(self, logging_outputs: List[dict], criterion) -> None:
        """fairseq-validate calls this once per subset, after its last batch: write the analysis."""
        super().reduce_metrics(logging_outputs, criterion)
        if not self.analysing:
            return
        analysis, self._analysis = self._analysis, None
        if analysis is None:
            raise UsageError(
                f"SAN analysis: subset '{self._subset}' had no batches (an empty subset, or every "
                "sentence filtered out by --max-source-positions or --max-target-positions with "
                "--skip-invalid-size-inputs-valid-test): nothing to analyse"
            )
        checkpoint = _root_config_value(self.cfg, "common_eval.path")
        seed = _root_config_value(self.cfg, "common.seed")
        save_dir = _root_config_value(self.cfg, "checkpoint.save_dir")
        analysis.write(
            self.cfg.san_analysis_dir,
            {"checkpoint": checkpoint, "num_updates": self._num_updates, "seed": seed,
             "save_dir": save_dir, "subset": self._subset, "policy": self._policy},
        )
        self._analysed_subset = self._subset
        logger.info(
            "SAN analysis: wrote %s (%d sentences)",
            os.path.join(self.cfg.san_analysis_dir, "js.json"),
            analysis.sentences,
        )


def check_analysis_options(cfg) -> None:
    """Refuse analysis options that would fail only after the validation pass.

    The analysis directory is created (and written to) here, at task set-up, before any batch.
    """
    limit = cfg.san_analysis_max_sentences
    if limit is not None and limit < 1:
        raise UsageError(
            f"--san-analysis-max-sentences {limit}: must be at least 1 "
            "(leave it out to analyse every sentence)"
        )
    if limit is not None and limit > LARGEST_COUNT:  # compared with 64-bit sentence ids
        raise UsageError(
            f"--san-analysis-max-sentences {limit}: must be at most {LARGEST_COUNT} (sentence "
            "ids are 64-bit integers; leave it out to analyse every sentence)"
        )
    for name in ("san_analysis_save_sentences", "san_analysis_log_interval"):
        value = getattr(cfg, name)
        if value is not None and value < 0:
            raise UsageError(f"{options.flag_of(name)} {value}: must be 0 or more")
    directory = cfg.san_analysis_dir
    if directory == "":  # read as no analysis: exit 0, nothing written
        raise UsageError(
            "--san-analysis-dir is empty: name the folder to write the analysis to (leave the "
            "option out for none)"
        )
    if directory is None:
        return
    mode = getattr(cfg, "sample_break_mode", "eos")  # a language model's; sources are sentences
    if mode != "eos":
        raise UsageError(
            f"--san-analysis-dir with --sample-break-mode {mode}: the analysis reads each sample "
            "as a sentence of the subset (its id a line number), and this mode makes samples of "
            "blocks of tokens across lines; pass --sample-break-mode eos"
        )
    if getattr(cfg, "left_pad_target", False):
        raise UsageError(
            "--left-pad-target with --san-analysis-dir: the analysis reads fairseq's attention "
            "weights, whose rows for a target's leading padding are NaN (no key to attend to) and "
            "spread to the real positions; leave --left-pad-target out (the targets score the same "
            "without it)"
        )
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise UsageError(f"--san-analysis-dir {directory} is a file, not a directory")
    try:
        os.makedirs(directory, exist_ok=True)
        tempfile.TemporaryFile(dir=directory).close()
    except OSError as err:
        raise UsageError(
            f"--san-analysis-dir {directory} cannot be written: {err.strerror or err}"
        ) from None
    check_no_folder_in_place(directory)


def check_no_folder_in_place(directory: str) -> None:
    """Refuse a folder in ``directory`` named as a file of the analysis: replacing it at the end
    of the subset, after the whole validation pass, was an IsADirectoryError traceback."""
    for name in analysis_files():
        path = os.path.join(directory, name)
        if os.path.isdir(path) and not os.path.islink(path):
            raise UsageError(
                f"--san-analysis-dir {directory}: {name} there is a folder, and the analysis "
                "writes a file of that name; move it away or name another folder"
            )


def check_analysis_applied(task, overrides: Optional[Dict[str, Any]]) -> None:
    """Refuse ``--san-analysis-dir`` among ``overrides`` (fairseq-validate's flags, with its
    ``--model-overrides``) when ``task``, built from the checkpoint, will not analyse.

    fairseq-validate keeps the checkpoint's task and sets a flag only where its config has the
    key: fairseq's own tasks (``translation``, ``language_modeling``) have none, and a ``'task'``
    dict in ``--model-overrides`` takes the flags' place; either way the validation ran and wrote
    nothing. A plugin model refuses the first case as it is built (``check_analysis_task``);
    fairseq's own models do not, so the command checks the task it built.
    """
    overrides = overrides or {}
    directory = overrides.get("san_analysis_dir")
    if not directory or getattr(task, "analysing", False):
        return
    given = {
        option.name: overrides[option.name]
        for option in options.ANALYSIS_OPTIONS
        if overrides.get(option.name) is not None
    }
    if isinstance(task, AttentionAnalysisTask):
        task_dict = overrides["task"] if isinstance(overrides.get("task"), dict) else {}
        override = {"task": {**task_dict, **given}}
        raise UsageError(
            f"--san-analysis-dir {directory}: the 'task' dict of --model-overrides sets the "
            "task's options, and fairseq-validate drops those given as flags, so it would not "
            f'analyse; put them in that dict: --model-overrides "{override!r}"'
        )
    from fairseq.tasks.language_modeling import LanguageModelingTask

    from fairseq_san.models.option_checks import check_analysis_task

    language_model = isinstance(task, LanguageModelingTask)
    needed = "language_modeling_san" if language_model else "translation_san"
    check_analysis_task(argparse.Namespace(**given), task, needed)


def keep_num_updates(model: nn.Module) -> None:
    """``model.set_num_updates`` also keeping the step as ``model.num_updates``."""
    set_num_updates = model.set_num_updates

    def keeping(num_updates: int) -> None:
        set_num_updates(num_updates)
        model.num_updates = num_updates

    model.set_num_updates = keeping


def _root_config_value(cfg, key: str):
    """A value of the configuration that the task's config is part of, or None.

    fairseq-validate loads the checkpoint's configuration, sets ``common_eval.path`` in it to
    ``--path`` (an override by name) and builds the task from its ``task`` node, whose parent
    fairseq keeps (``merge_with_parent``).
    """
    if not OmegaConf.is_config(cfg):
        return None
    return OmegaConf.select(cfg._get_root(), key, default=None)
