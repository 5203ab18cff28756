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
the model *is* fairseq's ``transformer_lm``: same parameter names, same outputs.
"""

import json
import logging
from typing import Dict, List, Optional

from fairseq.dataclass.utils import gen_parser_from_dataclass
from fairseq.models import register_model, register_model_architecture
from fairseq.utils import safe_getattr
from fairseq.models.transformer_lm import (
    TransformerLanguageModel,
    TransformerLanguageModelConfig,
    base_lm_architecture,
)
from torch import Tensor

from fairseq_san import checkpoints, options
from fairseq_san import policy as san_policy
from fairseq_san.errors import UsageError
from fairseq_san.models.checkpoint_policy import (
    check_checkpoint_model_kind,
    check_checkpoint_vocabulary,
    drop_unused_projections,
    missing_projections,
    policy_of_state_dict,
)
from fairseq_san.models.transformer_san import (
    check_analysis_task,
    check_policy_fits_model,
    check_san_options,
    share_attention,
)
from fairseq_san.modules.kv_shared_attention import KVFollowerAttention, KVLeaderAttention
from fairseq_san.modules.shared_attention import SharedWeightsAttention

logger = logging.getLogger(__name__)

KIND = "decoder_self"
# What each --san-self-share replaces a block's layers with: share_attention's keyword arguments.
SHARES = {
    options.WEIGHTS: dict(follower=SharedWeightsAttention),
    options.KV: dict(follower=KVFollowerAttention, leader_class=KVLeaderAttention),
}
SHARE_NAMES = {options.WEIGHTS: "SAN attention weights", options.KV: "cross-layer KV sharing"}


@register_model("transformer_lm_san")
class TransformerLMSANModel(TransformerLanguageModel):
    """A decoder-only language model whose adjacent layers share attention weights or K/V."""

    num_updates: Optional[int] = None

    @classmethod
    def add_args(cls, parser):
        gen_parser_from_dataclass(parser, TransformerLanguageModelConfig(), delete_default=True)
        for option in options.LM_OPTIONS:
            option.add_argument(parser)  # in fairseq's group: a nested one is deprecated

    @classmethod
    def build_model(cls, args, task):
        check_san_options(args)
        check_no_translation_options(args)
        check_language_modeling_task(task)
        check_analysis_task(args, task, needed="language_modeling_san")
        lm_san_base_architecture(args)
        checkpoints.stamp(args)
        policy = resolve_lm_policy(args)
        model = super().build_model(args, task)
        if KIND in policy:
            share_attention(model.decoder.layers, "self_attn", policy[KIND], **SHARES[args.san_self_share])
        model.self_share = args.san_self_share
        logger.info(
            "attention sharing: %s (%s)",
            san_policy.format_policy(policy),
            SHARE_NAMES[args.san_self_share] if policy else "none",
        )
        return model

    def set_num_updates(self, num_updates: int) -> None:
        """Keep the training step for the analysis (``tasks.language_modeling_san``)."""
        super().set_num_updates(num_updates)
        self.num_updates = num_updates

    def load_state_dict(
        self, state_dict: Dict[str, Tensor], strict: bool = True, model_cfg=None, args=None
    ):
        """Load a checkpoint, dropping projections the current policy no longer uses; a checkpoint
        that shares otherwise (more than the model, or K/V instead of S) is refused in one line."""
        check_checkpoint_fits(self, state_dict)
        drop_unused_projections(self, state_dict)
        return super().load_state_dict(state_dict, strict, model_cfg, args)


def check_no_translation_options(args) -> None:
    """Refuse a translation model's option (from ``--model-overrides`` or a hub keyword) set to
    anything but its default: a language model has no encoder, encoder-decoder attention, AAN or
    fast step, and would ignore it silently (``check_no_lm_options`` is the mirror)."""
    lm_names = {option.name for option in options.LM_OPTIONS}
    for option in options.MODEL_OPTIONS:
        value = getattr(args, option.name, None)
        if option.name not in lm_names and value is not None and value != option.default:
            raise UsageError(
                f"{option.name} {value!r} is an option of transformer_san (translation); "
                "transformer_lm_san shares decoder self-attention only (san_policy, "
                "san_decoder_self_policy, san_self_share): drop it"
            )


def check_language_modeling_task(task) -> None:
    """Refuse a translation task: it would give the language model its target dictionary and fail
    on the embeddings' sizes, which reads as "other dictionaries"."""
    from fairseq.tasks.translation import TranslationTask

    if isinstance(task, TranslationTask):
        raise UsageError(
            f"transformer_lm_san is a language model (a decoder only), and the task "
            f"{type(task).__name__} translates: use --task language_modeling_san with the "
            "model's data (fairseq-preprocess --only-source, examples/lm/prepare.sh)"
        )


def resolve_lm_policy(args) -> Dict[str, List[int]]:
    """The decoder self-attention policy from ``--san-policy`` and ``--san-decoder-self-policy``.

    Written back into ``args`` as JSON text, as ``transformer_san`` does, so that the checkpoint
    carries it. A key of an encoder-decoder policy is refused: a language model has neither an
    encoder nor encoder-decoder attention.
    """
    flag = options.POLICY_OPTIONS[KIND].name
    policy = san_policy.resolve_policy(
        getattr(args, "san_policy", None), {KIND: getattr(args, flag, None)}
    )
    others = [kind for kind in policy if kind != KIND]
    if others:
        raise san_policy.PolicyError(
            f'policy key "{others[0]}" is for encoder-decoder models: a language model '
            f'(transformer_lm_san) shares only decoder self-attention ("{KIND}")'
        )
    if KIND in policy:
        san_policy.validate_blocks(policy[KIND], args.decoder_layers, KIND)
    check_policy_fits_model(policy, args)
    args.san_policy = san_policy.dump_policy(policy)
    setattr(args, flag, None)
    return policy


def self_share_of_state_dict(state_dict: Dict, blocks: List[int]) -> str:
    """How the following layers of a saved model shared: own V (``weights``) or own Q (``kv``)."""
    leaders = san_policy.block_leaders(blocks, sum(blocks))
    follower = next(index for index, leader in enumerate(leaders) if index != leader)
    own_query = f"decoder.layers.{follower}.self_attn.q_proj.weight" in state_dict
    return options.KV if own_query else options.WEIGHTS


def check_checkpoint_fits(model: TransformerLMSANModel, state_dict: Dict) -> None:
    """Refuse a translation model's checkpoint, one of other dictionaries, or shared another way
    (K/V or S) or with more sharing than the model.

    A model can decode a checkpoint under a policy that shares more (the unused projections are
    dropped), never less, and never with the other kind of sharing: the checkpoint's following
    layers were trained without the projections that the other kind needs.
    """
    check_checkpoint_model_kind(model, state_dict)
    check_checkpoint_vocabulary(model, state_dict)
    layers = {"decoder": len(model.decoder.layers), "encoder": 0}
    own = model.state_dict()
    trained = policy_of_state_dict(state_dict, layers).get(KIND)
    wanted = policy_of_state_dict(own, layers).get(KIND)
    trained_share = trained and self_share_of_state_dict(state_dict, trained)
    flags = (
        f"--san-policy '{json.dumps({KIND: trained})}' --san-self-share {trained_share}"
        if trained
        else "--san-policy '{}'"
    )
    if trained and wanted and trained_share != model.self_share:
        raise san_policy.PolicyError(
            f"the checkpoint was trained with {SHARE_NAMES[trained_share]} "
            f"(--san-self-share {trained_share}), this model is built with "
            f"{SHARE_NAMES[model.self_share]} (--san-self-share {model.self_share}): its "
            f"following layers lack the projections that needs; decode it with {flags}"
        )
    needed = missing_projections(own, state_dict)
    if needed:
        raise san_policy.PolicyError(
            f"the checkpoint was trained with more attention sharing (decoder_self "
            f"{trained}) than this model ({wanted}): it has no projections for "
            f"{', '.join(needed)}. To continue training or decode it, pass {flags}, or a "
            "policy that shares at least as much"
        )


def lm_san_base_architecture(args) -> None:
    """fairseq's ``transformer_lm`` defaults plus no sharing."""
    for option in options.LM_OPTIONS:
        setattr(args, option.name, safe_getattr(args, option.name, option.default))
    base_lm_architecture(args)


@register_model_architecture("transformer_lm_san", "transformer_lm_san")
def transformer_lm_san(args):
    """fairseq's ``transformer_lm``: 6 layers, 512 dims, FFN 2048, 8 heads."""
    lm_san_base_architecture(args)


@register_model_architecture("transformer_lm_san", "transformer_lm_san_small")
def transformer_lm_san_small(args):
    """CPU scale: 6 layers, 64 dims, FFN 256, 4 heads (Multi30k English converges in minutes)."""
    args.decoder_embed_dim = safe_getattr(args, "decoder_embed_dim", 64)
    args.decoder_ffn_embed_dim = safe_getattr(args, "decoder_ffn_embed_dim", 256)
    args.decoder_attention_heads = safe_getattr(args, "decoder_attention_heads", 4)
    lm_san_base_architecture(args)
