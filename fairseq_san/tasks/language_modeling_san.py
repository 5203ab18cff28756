"""``language_modeling_san``: fairseq's language modelling task plus the layer-similarity analysis.

Training, ``fairseq-eval-lm``, ``fairseq-generate``/``fairseq-interactive`` and the hub's
``sample`` are ``--task language_modeling``'s. ``fairseq-validate --san-analysis-dir DIR`` writes
the decoder self-attention JS matrix (``js.json``, the other kinds ``null``), its heatmap and
sample attention, as ``translation_san`` does for its three kinds (``tasks.attention_analysis``)::

    fairseq-validate DATA --user-dir fairseq_san --task language_modeling_san --path CKPT \\
        --sample-break-mode eos --valid-subset valid --san-analysis-dir DIR

``--san-decoding static`` generates with the static decoder (``static_decoding.lm_generator``:
the prompt prefilled in one pass, then greedy, beam or sampling steps; the same greedy output as
fairseq's generator). A prompt as long as the model's positions or longer is refused in one line
before decoding.
"""

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

from fairseq.dataclass import ChoiceEnum
from fairseq.tasks import register_task
from fairseq.tasks.language_modeling import LanguageModelingConfig, LanguageModelingTask
from torch import Tensor, nn

from fairseq_san import options
from fairseq_san.errors import UsageError
from fairseq_san.options import option_field
from fairseq_san.tasks.attention_analysis import (
    AnalysisConfig,
    AttentionAnalysisTask,
    check_analysis_options,
)
from fairseq_san.tasks.decoding import DecodingTask, StaticDecoderConfig


@dataclass
class LanguageModelingSANConfig(LanguageModelingConfig, AnalysisConfig, StaticDecoderConfig):
    san_decoding: ChoiceEnum(options.LM_DECODING.choices) = option_field(options.LM_DECODING)


@register_task("language_modeling_san", dataclass=LanguageModelingSANConfig)
class LanguageModelingSANTask(AttentionAnalysisTask, DecodingTask, LanguageModelingTask):
    """``language_modeling`` with the attention analysis of ``--san-analysis-dir`` and
    ``--san-decoding static`` (``tasks.decoding``)."""

    def __init__(self, args, dictionary, output_dictionary=None, targets=None) -> None:
        check_analysis_options(args)
        super().__init__(args, dictionary, output_dictionary, targets)
        self.cfg = args
        self.start_analysis()

    def analysis_masks(self, sample: dict, rows: Tensor) -> Dict[str, Tuple[Tensor, Tensor]]:
        """The tokens of the model's input that are not padding."""
        tokens = sample["net_input"]["src_tokens"].index_select(0, rows)
        mask = tokens.ne(self.source_dictionary.pad())
        return {"decoder_self": (mask, mask)}

    def build_model(self, cfg, from_checkpoint: bool = False) -> nn.Module:
        """fairseq's; the task keeps the fewest positions of its models for ``check_prompt``."""
        model = super().build_model(cfg, from_checkpoint)
        positions = model.max_decoder_positions()
        self.positions = min(positions, getattr(self, "positions", positions))
        return model

    def check_prompt(self, tokens: int) -> None:
        """Refuse a prompt of ``tokens`` tokens (without the start token) that leaves the model
        no position to generate in: fairseq's generator would cut it, its batching drop it."""
        positions = getattr(self, "positions", None)
        if positions is not None and tokens + 2 > positions:
            raise UsageError(
                f"a prompt of {tokens} tokens is longer than the model's {positions} positions "
                f"leave room for (the start token and one generated token): shorten it to at "
                f"most {positions - 2} tokens"
            )

    def build_dataset_for_inference(
        self, src_tokens: List[Tensor], src_lengths: List[int], **kwargs
    ):
        """fairseq-interactive's and the hub's prompts, checked (``check_prompt``) without the
        end-of-sentence token that fairseq strips from them."""
        eos = self.source_dictionary.eos()
        for tokens in src_tokens:
            self.check_prompt(len(tokens) - int(len(tokens) > 0 and tokens[-1] == eos))
        return super().build_dataset_for_inference(src_tokens, src_lengths, **kwargs)

    def inference_step(
        self,
        generator,
        models: List[nn.Module],
        sample: Dict,
        prefix_tokens: Optional[Tensor] = None,
        constraints: Optional[Tensor] = None,
    ):
        """fairseq's, after ``check_prompt`` (the batch's width counts the start token)."""
        self.check_prompt(sample["net_input"]["src_tokens"].size(1) - 1)
        return super().inference_step(generator, models, sample, prefix_tokens, constraints)

    def static_generator(self) -> Callable:
        from fairseq_san.static_decoding.lm_generator import build_static_lm_generator

        return build_static_lm_generator
