"""``translation_san``: fairseq's translation task plus the layer-similarity analysis of SAN
(``--san-analysis-dir``: how it runs and what it writes, ``tasks.attention_analysis``) and the
plugin's decoders (``tasks.decoding``).

Training is exactly ``--task translation``. The checkpoint to analyse must have been trained with
``--task translation_san``. fairseq-validate builds the task from the checkpoint's saved task
config and applies command-line flags only to keys that config already has, so for a checkpoint
trained with ``--task translation`` the flag ``--task translation_san`` does not change the task.
A ``transformer_san`` model then stops before validating, printing the override that switches the
task: ``--model-overrides "{'task': {'_name': 'translation_san', 'san_analysis_dir': 'DIR'}}"``
(add ``'san_analysis_max_sentences': N`` etc. inside the same dict; the other
``--san-analysis-*`` flags are not applied in that case).
"""

import argparse
import json
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

import torch
from fairseq.data import Dictionary
from fairseq.dataclass import ChoiceEnum
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask
from torch import Tensor, nn

from fairseq_san import options
from fairseq_san.errors import UsageError, abbreviated, json_error
from fairseq_san.fairseq_fixes.wrapping import running_command
from fairseq_san.options import option_field
from fairseq_san.policy import KIND_TABLE
from fairseq_san.static_decoding.precision import PRECISIONS
from fairseq_san.tasks.attention_analysis import (
    AnalysisConfig,
    AttentionAnalysisTask,
    check_analysis_options,
)
from fairseq_san.tasks.decoding import DecodingTask, StaticDecoderConfig, check_generation_keys


@dataclass
class TranslationSANConfig(TranslationConfig, AnalysisConfig, StaticDecoderConfig):
    """fairseq's translation options, the analysis's (``--san-analysis-*``), the static decoder's
    and the decoder choice (``--san-decoding``; ``--san-decoder``, its deprecated form)."""

    san_decoding: ChoiceEnum(options.DECODINGS) = option_field(options.DECODING)
    san_decoder: ChoiceEnum(options.OPTIONS["san_decoder"].choices) = option_field(
        options.OPTIONS["san_decoder"]
    )


@register_task("translation_san", dataclass=TranslationSANConfig)
class TranslationSANTask(AttentionAnalysisTask, DecodingTask, TranslationTask):
    """``translation`` with the attention analysis of ``--san-analysis-dir`` (see module doc) and
    ``--san-decoding`` (``tasks.decoding``)."""

    cfg: TranslationSANConfig

    def __init__(
        self, cfg: TranslationSANConfig, src_dict: Dictionary, tgt_dict: Dictionary
    ) -> None:
        check_analysis_options(cfg)
        super().__init__(cfg, src_dict, tgt_dict)
        self.start_analysis()

    def analysis_masks(
        self, sample: dict, rows: Tensor, model: nn.Module
    ) -> Dict[str, Tuple[Tensor, Tensor]]:
        """Source tokens that are not padding, and the decoder's positions that predict a target
        token, for the three kinds; with ``--cross-self-attention`` the decoder's self-attention
        keys are the source's tokens, then the target's (fairseq's decoder layer).

        The decoder's positions are read from the target, not from ``prev_output_tokens``: with
        ``--num-batch-buckets`` fairseq pads each target to its bucket's length before it shifts
        it, so ``prev_output_tokens`` also holds the target's end of sentence, over padding."""
        src_mask = sample["net_input"]["src_tokens"].index_select(0, rows).ne(self.src_dict.pad())
        tgt_mask = sample["target"].index_select(0, rows).ne(self.tgt_dict.pad())
        stacks = {"decoder": tgt_mask, "encoder": src_mask}
        masks = {name: (stacks[kind.stack], stacks[kind.keys]) for name, kind in KIND_TABLE.items()}
        if getattr(model.decoder, "cross_self_attention", False):
            masks["decoder_self"] = (tgt_mask, torch.cat([src_mask, tgt_mask], dim=1))
        return masks

    def build_model(self, cfg, from_checkpoint: bool = False) -> nn.Module:
        """fairseq's, whose ``--eval-bleu`` generator fairseq-train builds before it moves the
        model to its device: a static decoder is told that device (``decoding_device``)."""
        if running_command("fairseq_cli.train") is not None:
            self.decoding_device = training_device(cfg)
        try:
            return super().build_model(cfg, from_checkpoint)
        finally:
            self.decoding_device = None

    def static_generator(self) -> Callable:
        from fairseq_san.static_decoding import build_static_generator

        return build_static_generator


def training_device(cfg) -> torch.device:
    """The device fairseq-train's trainer moves the model to: CUDA where there is one, unless
    ``--cpu`` (a legacy model's ``cfg`` holds every command-line option)."""
    return torch.device(
        "cuda" if torch.cuda.is_available() and not getattr(cfg, "cpu", False) else "cpu"
    )


def check_eval_bleu_options(args: argparse.Namespace) -> None:
    """Refuse ``--eval-bleu-args`` or ``--eval-bleu-detok-args`` that is not a JSON object, and a
    key of ``--eval-bleu-args`` that names no generation option: fairseq-train reads them with
    ``json.loads`` (a traceback) and sets each key unchecked, so a misspelt ``{"bema": 4}``
    decoded validation BLEU at the default beam. For fairseq-train's command line, this task's or
    fairseq's own ``translation`` (whose generator reads no decoder option of the plugin): a
    checkpoint keeps them, and fairseq-validate decodes with them where it validates with BLEU
    (``checkpoints.refuse_eval_bleu_args_in`` refuses those that are no JSON object, and in
    fairseq-validate a key that names no generation option)."""
    generation = json_object("--eval-bleu-args", args.eval_bleu_args, '{"beam": 4}')
    json_object("--eval-bleu-detok-args", args.eval_bleu_detok_args, '{"moses_no_escape": true}')
    check_generation_keys(
        generation,
        "a key of --eval-bleu-args",
        lambda option: f"{option.name} in --eval-bleu-args is no generation option: pass "
        f"{option.flag} to fairseq-train itself",
    )
    if args.task == "translation_san":
        check_eval_bleu_precision(args, generation)
        return
    for key in generation:
        if key in options.DECODER_OPTION_NAMES:
            raise UsageError(
                f"{key} in --eval-bleu-args: --task {args.task} validates with fairseq's "
                "generator, which reads no decoder option of the plugin; train with --task "
                "translation_san"
            )


def check_stored_eval_bleu_args(text: Optional[str]) -> None:
    """Refuse a checkpoint's ``eval_bleu_args`` (a JSON object) with a key that names no
    generation option (saved before fairseq-train checked them, or edited), where fairseq-validate
    decodes its BLEU with them (``checkpoints.refuse_eval_bleu_args_in``): fairseq sets each key
    unchecked, so ``{"bema": 4}`` reported BLEU at beam 1. The other commands build that
    generator and never decode with it: they load such a checkpoint."""
    where = "cfg.task.eval_bleu_args of the checkpoint, which fairseq-validate decodes BLEU with"
    replacing = "--model-overrides \"{'eval_bleu_args': '{\\\"beam\\\": 4}'}\""
    try:
        check_generation_keys(
            json_object("cfg.task.eval_bleu_args", text, '{"beam": 4}'),
            where,
            lambda option: f"{option.name} ({where}) is no generation option",
        )
    except UsageError as error:
        raise UsageError(f"{error} ({replacing} replaces them)") from None


# fairseq-train's half-precision flags, each memory-efficient one before the flag it implies.
HALF_PRECISION_FLAGS = ("--memory-efficient-fp16", "--memory-efficient-bf16", "--fp16", "--bf16")


def check_eval_bleu_precision(args: argparse.Namespace, generation: dict) -> None:
    """Refuse a static decoder's reduced precision for ``--eval-bleu`` where fairseq-train trains
    the model in half precision (``--fp16``, ``--bf16``): the static decoder converts a float32
    model only, and said so at the first validation, after training had begun."""
    if not (getattr(args, "fp16", False) or getattr(args, "bf16", False)):
        return

    def given(option: options.Option) -> object:
        """``--eval-bleu-args``' value, else the command line's, else the default (None: unset,
        as ``DecodingTask.decoding_option`` reads it)."""
        for value in (generation.get(option.name), getattr(args, option.name, None)):
            if value is not None:
                return value
        return option.default

    legacy = given(options.OPTIONS["san_decoder"])
    decoding = options.chosen_decoding(str(given(options.DECODING)), legacy)
    precision = given(options.DECODER_PRECISION)
    row = PRECISIONS.get(str(precision))  # its linear layers in a dtype of their own: float32 in
    if decoding == options.STATIC and row is not None and row.linear is not None:
        half = next(flag for flag in HALF_PRECISION_FLAGS if getattr(args, options.name_of(flag)))
        raise UsageError(
            f"--san-decoder-precision {precision} for --eval-bleu with {half}: fairseq-train "
            "trains the model in half precision, and the static decoder converts a float32 model "
            "only; leave --san-decoder-precision out (it decodes in the model's own precision)"
        )


def json_object(flag: str, text: Optional[str], example: str) -> dict:
    """The JSON object ``text`` given as ``flag`` ("{}" when empty), or a UsageError."""
    shown = repr(abbreviated(text or ""))
    try:
        value = json.loads(text or "{}")
    except ValueError as error:  # an integer of more digits than Python converts too
        said = json_error(error)
        raise UsageError(f"{flag} {shown} is not JSON ({said}): e.g. '{example}'") from None
    except RecursionError:
        raise UsageError(f"{flag} {shown} nests too deeply to be JSON: e.g. '{example}'") from None
    if not isinstance(value, dict):
        raise UsageError(f"{flag} {shown}: it must be a JSON object, e.g. '{example}'")
    return value
