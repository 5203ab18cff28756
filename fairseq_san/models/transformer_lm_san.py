"""``transformer_lm_san``: fairseq's decoder-only ``transformer_lm`` with a decoder self-attention
sharing policy.

fairseq's ``transformer_lm`` is a ``TransformerDecoder`` without encoder-decoder attention, so the
one policy kind that applies is ``decoder_self`` (``--san-decoder-self-policy 1,5`` or
``--san-policy '{"decoder_self": [1, 5]}'``; other kinds are refused). ``--san-self-share`` says
what a block's following layers take from its first layer:

* ``weights`` (SAN): the attention weights S; each keeps its own V, caches V only
  (``modules.shared_attention``);
* ``kv`` (cross-layer KV sharing, CLA): the keys and values; each keeps its own Q, caches nothing
  (``modules.kv_shared_attention``).

Both drop two projections per following layer (q/k or k/v). With no policy nothing is replaced and
the model *is* fairseq's ``transformer_lm`` as its named architectures build it
(``lm_san_base_architecture``): same parameter names and shapes, same outputs.
"""

import argparse
import logging
from typing import Dict, List

from fairseq.dataclass.utils import gen_parser_from_dataclass
from fairseq.models import register_model, register_model_architecture
from fairseq.tasks import FairseqTask
from fairseq.utils import safe_getattr
from fairseq.models.transformer_lm import (
    TransformerLanguageModel,
    TransformerLanguageModelConfig,
    base_lm_architecture,
)

from fairseq_san import checkpoints, options
from fairseq_san import policy as san_policy
from fairseq_san.models.checkpoint_policy import check_lm_checkpoint_fits
from fairseq_san.models.option_checks import (
    check_adaptive_cutoffs,
    check_analysis_task,
    check_attention_heads,
    check_bos_token,
    check_decoder_overrides,
    check_language_modeling_task,
    check_no_translation_options,
    check_san_options,
    check_weights_fit_memory,
)
from fairseq_san.models.san_model import (
    SANModel,
    layers_to_keep_as_text,
    record_training_pruning,
)
from fairseq_san.models.transformer_san import resolve_model_policy, share_attention
from fairseq_san.modules.kv_shared_attention import KVFollowerAttention, KVLeaderAttention
from fairseq_san.modules.shared_attention import SharedWeightsAttention

logger = logging.getLogger(__name__)

KIND = options.LM_KIND

# What each --san-self-share replaces a block's layers with: share_attention's keyword arguments.
SHARES = {
    options.WEIGHTS: dict(follower_class=SharedWeightsAttention),
    options.KV: dict(follower_class=KVFollowerAttention, leader_class=KVLeaderAttention),
}


def positions_for_start_token(args: argparse.Namespace) -> None:
    """One position more than ``--tokens-per-sample`` where ``--add-bos-token`` puts a start token
    before each sample and ``--max-target-positions`` is not given: fairseq's language model then
    takes the sample size as its positions, and a full block (``--sample-break-mode none``) was
    one token too long for them (an ``IndexError`` in training with learned positions)."""
    given = getattr(args, "max_target_positions", None)
    if given is None and getattr(args, "add_bos_token", False):
        args.max_target_positions = args.tokens_per_sample + 1


@register_model("transformer_lm_san")
class TransformerLMSANModel(SANModel, TransformerLanguageModel):
    """A decoder-only language model whose adjacent layers share attention weights or K/V."""

    checkpoint_check = staticmethod(check_lm_checkpoint_fits)

    @classmethod
    def add_args(cls, parser: argparse.ArgumentParser) -> None:
        """fairseq's language model options (their defaults the architecture's) plus SAN's."""
        gen_parser_from_dataclass(parser, TransformerLanguageModelConfig(), delete_default=True)
        for option in options.LM_OPTIONS:
            option.add_argument(parser)  # in fairseq's group: a nested one is deprecated

    @classmethod
    def build_model(cls, args: argparse.Namespace, task: FairseqTask) -> "TransformerLMSANModel":
        """fairseq's language model, built once SAN's options are checked, then each block's
        self-attention shared by the policy: its weights S (Eq. 4) or its keys and values."""
        check_san_options(args)
        check_no_translation_options(args)
        check_language_modeling_task(task)
        check_bos_token(args, task)
        check_analysis_task(args, task, needed="language_modeling_san")
        check_decoder_overrides(args, task, options.LM_DECODING, "language_modeling_san")
        lm_san_base_architecture(args)
        positions_for_start_token(args)
        layers_to_keep_as_text(args)
        record_training_pruning(args)
        check_attention_heads(args, ("decoder",))
        check_weights_fit_memory(args, ("decoder",))
        check_adaptive_cutoffs(args, task)
        policy = resolve_model_policy(args, {"decoder": args.decoder_layers}, kinds=(KIND,))
        warn_unused_self_share(policy, args)
        checkpoints.stamp(args)
        model = super().build_model(args, task)
        if KIND in policy:
            shares = SHARES[args.san_self_share]
            share_attention(model.decoder.layers, "self_attn", policy[KIND], **shares)
        model.self_share = args.san_self_share
        logger.info(
            "attention sharing: %s (%s)",
            san_policy.format_policy(policy, (KIND,)),
            options.SHARE_NAMES[args.san_self_share] if policy else "none",
        )
        return model


def warn_unused_self_share(policy: Dict[str, List[int]], args: argparse.Namespace) -> None:
    """Log that ``--san-self-share kv`` changes nothing: no block of the policy shares decoder
    self-attention. A warning, as ``option_checks.warn_unused_encdec_share`` gives for
    ``--san-encdec-share`` (the loop recipes pass the same flags to every iteration, the first
    without a policy); only for a model built from the command line, not a checkpoint's."""
    if getattr(args, options.SELF_SHARE.name, None) != options.KV or checkpoints.is_stamped(args):
        return
    if any(size > 1 for size in policy.get(KIND, [])):
        return
    logger.warning(
        "--san-self-share kv has no effect: this model shares no decoder self-attention "
        "(attention sharing: %s); it applies to decoder_self blocks of 2 or more layers",
        san_policy.format_policy(policy, (KIND,)),
    )


def lm_san_base_architecture(args: argparse.Namespace) -> None:
    """fairseq's ``transformer_lm`` defaults as its named architectures set them
    (``base_lm_architecture``: pre-norm, input and output widths the layers'), plus no sharing;
    a field that function leaves unset (the character embedder's) its dataclass default.

    fairseq-train's bare ``--arch transformer_lm`` takes its dataclass's defaults instead
    (post-norm, input and output widths 512): the same model as this one with
    ``--decoder-normalize-before --decoder-input-dim D --decoder-output-dim D`` (D the
    ``--decoder-embed-dim``). Checkpoints of this model were all built this way: resuming one
    builds the same model again.
    """
    options.fill_defaults(args, options.LM_OPTIONS)
    base_lm_architecture(args)
    fill_dataclass_defaults(args)


def fill_dataclass_defaults(args: argparse.Namespace) -> None:
    """Give each field of ``TransformerLanguageModelConfig`` that ``args`` lacks its dataclass
    default (``--character-embeddings`` failed on ``character_filters``); fields the dataclass
    takes from the task's or the common options (``${task.tokens_per_sample}``) are those
    options'."""
    defaults = TransformerLanguageModelConfig()
    for name in TransformerLanguageModelConfig.__dataclass_fields__:
        value = getattr(defaults, name)
        interpolated = isinstance(value, str) and value.startswith("${")
        if not name.startswith("_") and not interpolated and not hasattr(args, name):
            setattr(args, name, value)


@register_model_architecture("transformer_lm_san", "transformer_lm_san")
def transformer_lm_san(args: argparse.Namespace) -> None:
    """fairseq's ``transformer_lm`` as its named architectures define it: 6 layers, 512 dims, FFN
    2048, 8 heads, pre-norm (``lm_san_base_architecture``)."""
    lm_san_base_architecture(args)


@register_model_architecture("transformer_lm_san", "transformer_lm_san_small")
def transformer_lm_san_small(args: argparse.Namespace) -> None:
    """CPU scale: 6 layers, 64 dims, FFN 256, 4 heads (Multi30k English converges in minutes)."""
    args.decoder_embed_dim = safe_getattr(args, "decoder_embed_dim", 64)
    args.decoder_ffn_embed_dim = safe_getattr(args, "decoder_ffn_embed_dim", 256)
    args.decoder_attention_heads = safe_getattr(args, "decoder_attention_heads", 4)
    lm_san_base_architecture(args)
