"""``language_modeling_san``: fairseq's language modelling task plus the layer-similarity analysis.

Training, ``fairseq-eval-lm``, ``fairseq-generate``/``fairseq-interactive`` and the hub's
``sample`` are ``--task language_modeling``'s. ``fairseq-validate --san-analysis-dir DIR`` writes
the decoder self-attention JS matrix (``js.json``, the other kinds ``null``), its heatmap and
sample attention, as ``translation_san`` does for its three kinds (``tasks.attention_analysis``)::

    fairseq-validate DATA --user-dir fairseq_san --task language_modeling_san --path CKPT \\
        --sample-break-mode eos --valid-subset valid --san-analysis-dir DIR

A prompt as long as the model's positions or longer is refused in one line before decoding.
"""

from dataclasses import dataclass
from typing import Optional

from fairseq.tasks import register_task
from fairseq.tasks.language_modeling import LanguageModelingConfig, LanguageModelingTask

from fairseq_san import options
from fairseq_san.errors import UsageError
from fairseq_san.options import option_field
from fairseq_san.tasks.attention_analysis import AttentionAnalysisTask, check_analysis_options

ANALYSIS = {option.name: option for option in options.ANALYSIS_OPTIONS}


@dataclass
class LanguageModelingSANConfig(LanguageModelingConfig):
    san_analysis_dir: Optional[str] = option_field(ANALYSIS["san_analysis_dir"])
    san_analysis_max_sentences: Optional[int] = option_field(ANALYSIS["san_analysis_max_sentences"])
    san_analysis_save_sentences: int = option_field(ANALYSIS["san_analysis_save_sentences"])
    san_analysis_log_interval: int = option_field(ANALYSIS["san_analysis_log_interval"])


@register_task("language_modeling_san", dataclass=LanguageModelingSANConfig)
class LanguageModelingSANTask(AttentionAnalysisTask, LanguageModelingTask):
    """``language_modeling`` with the attention analysis of ``--san-analysis-dir``."""

    def __init__(self, args, dictionary, output_dictionary=None, targets=None):
        check_analysis_options(args)
        super().__init__(args, dictionary, output_dictionary, targets)
        self.cfg = args
        self.start_analysis()

    def analysis_masks(self, sample, rows):
        """The tokens of the model's input that are not padding."""
        tokens = sample["net_input"]["src_tokens"].index_select(0, rows)
        mask = tokens.ne(self.source_dictionary.pad())
        return {"decoder_self": (mask, mask)}

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        """fairseq's, after refusing a prompt that leaves the model no position to generate in."""
        prompt = sample["net_input"]["src_tokens"].size(1)
        for model in models:
            positions = model.max_decoder_positions()
            if prompt >= positions:
                raise UsageError(
                    f"a prompt of {prompt} tokens (with the start token) is longer than the "
                    f"model's {positions} positions leave room for: shorten it to at most "
                    f"{positions - 2} tokens"
                )
        return super().inference_step(generator, models, sample, prefix_tokens, constraints)
