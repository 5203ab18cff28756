"""``transformer_san``: fairseq's transformer with Shared Attention Networks (paper section 3.2).

The model is built exactly as fairseq builds its transformer; the sharing policy then replaces the
attention modules of the layers that reuse a block's attention (see ``modules.shared_attention``),
which drops their unused projections. With no policy nothing is replaced and the model *is*
fairseq's transformer. The same step lets a trained model decode under a policy that shares
more than it was trained with (``--model-overrides "{'san_policy': ...}"``): the projections
the new policy does not use are dropped from the checkpoint on load.
"""

import argparse
import logging
from typing import Dict, Iterable, List, Optional, Type

from fairseq.data import Dictionary
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import (
    TransformerDecoderBase,
    TransformerModel,
    base_architecture,
)
from fairseq.modules import MultiheadAttention
from fairseq.tasks import FairseqTask
from torch import Tensor, nn

from fairseq_san import checkpoints, options
from fairseq_san import policy as san_policy
from fairseq_san.errors import UsageError, nearest_key_hint
from fairseq_san.models.checkpoint_policy import check_checkpoint_fits, drop_unused_projections
from fairseq_san.modules.average_attention import AverageAttention
from fairseq_san.modules.decoding_attention import DecodingAttention
from fairseq_san.modules.shared_attention import (
    BlockLeaderAttention,
    BlockShare,
    SharedContextAttention,
    SharedWeightsAttention,
    attention_kwargs,
)

logger = logging.getLogger(__name__)

POLICY_FLAGS = {kind: option.name for kind, option in options.POLICY_OPTIONS.items()}
# The model's options that take one of a few values. argparse checks them on the command line;
# --model-overrides and the hub's keywords set them unchecked, so ``check_san_options`` does.
CHOICES = {
    option.name: option.choices
    for option in options.MODEL_OPTIONS + (options.SELF_SHARE,)
    if option.choices
}


class TransformerSANDecoder(TransformerDecoderBase):
    """fairseq's decoder, plus the paper's "Baseline-Cache" mode (Table 6).

    With ``recompute_prefix`` set, decoding ignores the incremental state and recomputes the whole
    target prefix at every step, as Transformer inference did before attention caches. The output
    equals cached decoding; only the cost differs.
    """

    recompute_prefix: bool = False

    def extract_features(
        self,
        prev_output_tokens,
        encoder_out=None,
        incremental_state=None,
        full_context_alignment: bool = False,
        alignment_layer: Optional[int] = None,
        alignment_heads: Optional[int] = None,
    ):
        if not (self.recompute_prefix and incremental_state is not None):
            return super().extract_features(
                prev_output_tokens,
                encoder_out,
                incremental_state,
                full_context_alignment,
                alignment_layer,
                alignment_heads,
            )
        x, extra = super().extract_features(
            prev_output_tokens,
            encoder_out,
            None,
            full_context_alignment,
            alignment_layer,
            alignment_heads,
        )
        attn = extra["attn"][0]
        return x[:, -1:], {
            "attn": [None if attn is None else attn[:, -1:]],
            "inner_states": [state[-1:] for state in extra["inner_states"]],
        }


@register_model("transformer_san")
class TransformerSANModel(TransformerModel):
    """A Transformer whose adjacent layers share attention weights (S, Eq. 4) or outputs (A,
    Eq. 5)."""

    num_updates: Optional[int] = None

    @classmethod
    def add_args(cls, parser: argparse.ArgumentParser) -> None:
        """fairseq's transformer options plus SAN's, in the group fairseq passes (a group nested
        in it would be deprecated and left out of the help)."""
        super().add_args(parser)
        for option in options.MODEL_OPTIONS:
            option.add_argument(parser)

    @classmethod
    def build_model(cls, args: argparse.Namespace, task: FairseqTask) -> "TransformerSANModel":
        check_san_options(args)
        check_no_lm_options(args)
        check_translation_task(task)
        check_analysis_task(args, task)
        check_generation_options(args, task)
        san_base_architecture(args)
        checkpoints.stamp(args)
        policy = resolve_model_policy(args)
        model = super().build_model(args, task)
        if args.decoder_self_attention_type == "aan":
            use_average_attention(model.decoder.layers)
        for kind, blocks in policy.items():
            stack, attr = san_policy.KIND_MODULES[kind]
            share_attention(getattr(model, stack).layers, attr, blocks, follower_class(kind, args))
        model.set_decoding(model_decoding(args))
        logger.info("attention sharing: %s", san_policy.format_policy(policy))
        return model

    @classmethod
    def build_decoder(
        cls, cfg, tgt_dict: Dictionary, embed_tokens: nn.Embedding
    ) -> "TransformerSANDecoder":
        return TransformerSANDecoder(
            cfg, tgt_dict, embed_tokens, no_encoder_attn=cfg.no_cross_attention
        )

    fast_decoding: bool = False

    def set_decoding(self, decoding: str) -> None:
        """Decode with fairseq's step, without the incremental cache (``no-cache``) or with the
        faster attention step (``fast``): one of ``options.MODEL_DECODINGS``. The task calls this
        for ``--san-decoding``; the model's own options (a checkpoint's, ``--model-overrides``)
        decide at build time."""
        self.decoder.recompute_prefix = decoding == options.NO_CACHE
        self.fast_decoding = decoding == options.FAST
        if self.fast_decoding:
            use_fast_decoding(self.decoder.layers)

    def set_beam_size(self, beam_size: int) -> None:
        """fairseq's SequenceGenerator calls this; with ``--san-decoding fast`` the decoder's
        encoder-decoder attention keeps one copy of the keys/values per source sentence instead
        of one per hypothesis, which beam search would otherwise reorder at every step."""
        if self.fast_decoding:
            self.decoder.set_beam_size(beam_size)

    def set_num_updates(self, num_updates: int) -> None:
        """Keep the training step: fairseq sets it from the checkpoint when it loads the model,
        and the SAN analysis (``translation_san``) reports it."""
        super().set_num_updates(num_updates)
        self.num_updates = num_updates

    def load_state_dict(
        self, state_dict: Dict[str, Tensor], strict: bool = True, model_cfg=None, args=None
    ):
        """Load a checkpoint, dropping projections the current policy no longer uses.

        A checkpoint this model cannot load (other dictionaries or attention type, more sharing)
        gets a one-line error naming the cause instead of fairseq's list of keys and shapes.
        """
        check_checkpoint_fits(self, state_dict)
        drop_unused_projections(self, state_dict)
        return super().load_state_dict(state_dict, strict, model_cfg, args)


def resolve_model_policy(args: argparse.Namespace) -> Dict[str, List[int]]:
    """The policy from ``--san-policy`` and the per-kind flags, checked against the layer counts.

    The resolved policy is written back into ``args`` as JSON text so that the checkpoint carries
    it and ``fairseq-generate`` rebuilds the same model with no extra flag.
    """
    flags = {kind: getattr(args, flag, None) for kind, flag in POLICY_FLAGS.items()}
    policy = san_policy.resolve_policy(getattr(args, "san_policy", None), flags)
    layers = {"decoder": args.decoder_layers, "encoder": args.encoder_layers}
    for kind, blocks in policy.items():
        san_policy.validate_blocks(blocks, layers[san_policy.KIND_MODULES[kind][0]], kind)
    check_policy_fits_model(policy, args)
    args.san_policy = san_policy.dump_policy(policy)
    for flag in POLICY_FLAGS.values():
        setattr(args, flag, None)
    return policy


# Model options that sharing cannot work with, and why; the first entry names the policy kinds.
INCOMPATIBLE_OPTIONS = [
    (san_policy.KINDS, "encoder_layerdrop", "LayerDrop may skip the first layer of a block"),
    (san_policy.KINDS, "decoder_layerdrop", "LayerDrop may skip the first layer of a block"),
    # --offload-activations turns --checkpoint-activations on: named first, it is the flag given.
    (
        san_policy.KINDS,
        "offload_activations",
        "activation checkpointing recomputes layers top-down in backward, after their block",
    ),
    (
        san_policy.KINDS,
        "checkpoint_activations",
        "activation checkpointing recomputes layers top-down in backward, after their block",
    ),
    (("decoder_self",), "cross_self_attention", "its keys include the encoder output"),
    (("decoder_encdec",), "no_cross_attention", "there is no encoder-decoder attention"),
]


def check_policy_fits_model(policy: Dict[str, List[int]], args: argparse.Namespace) -> None:
    """Raise PolicyError for a policy the model's other options make impossible."""
    if "decoder_self" in policy and getattr(args, "decoder_self_attention_type", "") == "aan":
        raise san_policy.PolicyError(
            "a decoder_self sharing policy cannot be combined with "
            "--decoder-self-attention-type aan (AAN has no attention weights to share)"
        )
    for kinds, option, reason in INCOMPATIBLE_OPTIONS:
        shared = [kind for kind in kinds if kind in policy]
        if shared and getattr(args, option, False):
            raise san_policy.PolicyError(
                f"{shared[0]} sharing cannot be combined with {options.flag_of(option)}: {reason}"
            )


def follower_class(kind: str, args: argparse.Namespace) -> Type[MultiheadAttention]:
    """The module of a layer that reuses its block's attention: S (Eq. 4) or A (Eq. 5)."""
    if kind == "decoder_encdec" and args.san_encdec_share == "output":
        return SharedContextAttention
    return SharedWeightsAttention


def share_attention(
    layers: nn.ModuleList,
    attr: str,
    blocks: List[int],
    follower: Type[MultiheadAttention],
    leader_class: Type[MultiheadAttention] = BlockLeaderAttention,
) -> None:
    """Replace attention module ``attr`` of ``layers`` so that each block shares its first layer's.

    ``leader_class`` and ``follower``, which one ``BlockShare`` per block connects, say what is
    shared: SAN's S or A (the defaults), or keys and values (``modules.kv_shared_attention``).
    """
    leaders = san_policy.block_leaders(blocks, len(layers))
    for index, leader in enumerate(leaders):
        if leaders.count(leader) == 1:
            continue
        if index == leader:
            # A block's first layer comes before its other layers in the loop, so ``block``,
            # set here, is still this block's BlockShare when the loop reaches its followers.
            block = BlockShare()
            module_class: Type[MultiheadAttention] = leader_class
        else:
            module_class = follower
        is_last = index + 1 == len(leaders) or leaders[index + 1] != leader
        old = getattr(layers[index], attr)
        new = rebuild_attention(old, module_class, block=block, releases_block=is_last)
        setattr(layers[index], attr, new)


def rebuild_attention(old: MultiheadAttention, module_class: Type, **extra) -> MultiheadAttention:
    """A ``module_class`` shaped like ``old`` that takes over the projections it keeps, in
    ``old``'s mode: a model made ready for inference (fairseq-generate) no longer passes
    ``eval()`` on to its modules, and a module left in training mode would drop attention out.

    Moving the projection modules keeps their values and anything fairseq attached to them
    (quant-noise hooks).
    """
    new = module_class(**extra, **attention_kwargs(old)).train(old.training)
    for name, _ in list(new.named_children()):
        if name.endswith("_proj"):
            setattr(new, name, getattr(old, name))
    if old.bias_k is not None:  # parameters, not modules: only fast decoding's module keeps them
        new.bias_k, new.bias_v = old.bias_k, old.bias_v
    return new


def use_fast_decoding(layers: Iterable[nn.Module]) -> None:
    """Switch the decoder's attention to the fast incremental path (``DecodingAttention``).

    Shared-attention modules already are ``DecodingAttention``; fairseq's own modules are rebuilt
    as one, keeping their projection modules. AAN is left as it is.
    """
    for layer in layers:
        for attr in ("self_attn", "encoder_attn"):
            module = getattr(layer, attr, None)
            if type(module) is MultiheadAttention:
                module = rebuild_attention(module, DecodingAttention)
                setattr(layer, attr, module)
            if isinstance(module, DecodingAttention):
                module.fast_decoding = True


def use_average_attention(layers: Iterable[nn.Module]) -> None:
    """Replace decoder self-attention by AAN (Zhang et al. 2018), FFN inner size = model size.

    AAN's FFN drops out what the layer's own FFN drops out (``--activation-dropout``), as in
    Zhang et al.'s implementation (its ``relu_dropout`` serves both FFNs).
    """
    for layer in layers:
        embed_dim = layer.self_attn.embed_dim
        dropout = layer.activation_dropout_module.p
        layer.self_attn = AverageAttention(embed_dim, embed_dim, dropout)


def check_san_options(args: argparse.Namespace) -> None:
    """Refuse an unknown ``san_*`` option, naming the nearest known one, and a value outside
    an option's ``CHOICES``, naming the valid ones.

    fairseq sets every key of ``--model-overrides`` (or every keyword of ``from_pretrained``) on
    the checkpoint's arguments, known or not, so a typo would otherwise decode another model.
    """
    for name, valid in CHOICES.items():
        value = getattr(args, name, None)
        if value is not None and value not in valid:
            raise UsageError(
                f"{name} {value!r} (from --model-overrides or a keyword argument) is not valid; "
                f"valid values: {', '.join(valid)}"
            )
    known = options.option_names()
    for name in vars(args):
        if name.replace("-", "_").startswith("san_") and name not in known:
            hint = nearest_key_hint(name.replace("-", "_"), known)
            raise UsageError(
                f"unknown option '{name}' (from --model-overrides or a keyword argument): {hint}"
            )


def check_no_lm_options(args: argparse.Namespace) -> None:
    """Refuse ``san_self_share`` (from ``--model-overrides``), which only a language model reads:
    a translation model shares attention weights S, and would ignore it silently."""
    value = getattr(args, options.SELF_SHARE.name, None)
    if value is not None:
        raise UsageError(
            f"{options.SELF_SHARE.name} {value!r} is an option of transformer_lm_san (decoder-only "
            "language models); transformer_san shares the attention weights S (or the context "
            "A, --san-encdec-share): drop it"
        )


def model_decoding(args: argparse.Namespace) -> str:
    """The decoding the model applies to itself (``options.MODEL_DECODINGS``) from its options.

    ``san_decoding`` reaches the model's arguments from the task's options saved in training or
    from ``--model-overrides``; the deprecated ``san_no_cache`` and ``san_fast_decoding`` (in
    checkpoints saved before ``--san-decoding``) mean ``no-cache`` and ``fast``: they are kept,
    and ``san_decoding`` set to what they mean, so that the checkpoint saves the new key too.
    ``static`` is the task's.
    """
    decoding = str(getattr(args, "san_decoding", None) or options.FAIRSEQ)
    for name in ("san_no_cache", "san_fast_decoding"):
        meant = options.deprecated_value(name, getattr(args, name, None))
        if meant is not None and decoding == options.FAIRSEQ:
            decoding = args.san_decoding = meant
    return decoding if decoding in options.MODEL_DECODINGS else options.FAIRSEQ


def check_translation_task(task: FairseqTask) -> None:
    """Refuse a language-modelling task, which fails on an encoder-decoder model deep inside
    fairseq (``'TransformerSANModel' object has no attribute 'supported_targets'``)."""
    from fairseq.tasks.language_modeling import LanguageModelingTask

    if isinstance(task, LanguageModelingTask):
        raise UsageError(
            f"transformer_san is a translation model (encoder and decoder), and the task "
            f"{type(task).__name__} models language: train a language model with --arch "
            "transformer_lm_san (or transformer_lm_san_small), or decode this checkpoint with "
            "--task translation_san"
        )


def check_analysis_task(
    args: argparse.Namespace, task: FairseqTask, needed: str = "translation_san"
) -> None:
    """Refuse ``--san-analysis-dir`` for a model whose task has no analysis options.

    fairseq-validate builds the task saved in the checkpoint and gives command-line flags only to
    keys that task's config has, so on a checkpoint trained with another task than ``needed``
    (``language_modeling_san`` for a language model) the analysis would be silently skipped.
    fairseq sets every flag on the model's arguments, though, so the model checks; the message
    gives the override that switches the task.
    """
    cfg = getattr(task, "cfg", None)
    if not getattr(args, "san_analysis_dir", None) or hasattr(cfg, "san_analysis_dir"):
        return
    from fairseq.tasks import TASK_REGISTRY

    given = {
        option.name: getattr(args, option.name)
        for option in options.ANALYSIS_OPTIONS
        if getattr(args, option.name, None) is not None
    }
    trained = next((name for name, cls in TASK_REGISTRY.items() if cls is type(task)), None)
    override = {"task": {"_name": needed, **given}}
    raise UsageError(
        f"--san-analysis-dir needs the task {needed}, but this checkpoint was trained "
        f"with --task {trained or type(task).__name__}, which fairseq-validate keeps: switch its "
        f'task with --model-overrides "{override!r}"'
    )


def check_generation_options(args: argparse.Namespace, task: FairseqTask) -> None:
    """Refuse a decoder option among the model's options that the task does not apply.

    ``--model-overrides`` sets its keys on the checkpoint's configuration, but fairseq-generate
    and fairseq-interactive build the generator from the task of their command line, which never
    reads the model's ``san_decoding`` static or ``san_decoder_precision``: they would be
    accepted and ignored. A value other than the default that the task does not have is refused
    with the flag that works (the model applies the decodings of ``options.MODEL_DECODINGS``).
    """
    cfg = getattr(task, "cfg", None)
    if cfg is None:
        return
    for option in options.DECODER_OPTIONS:
        given = getattr(args, option.name, None)
        applied = getattr(cfg, option.name, None) or option.default
        if given is None or str(given) in (str(option.default), str(applied)):
            continue
        if option is options.DECODING and str(given) in options.MODEL_DECODINGS:
            continue
        flag, value = options.current_flag(option, given)
        raise UsageError(
            f"{option.name} '{given}' is a model option here (--model-overrides or the "
            f"checkpoint), which does not choose the decoder: this command decodes with "
            f"'{applied}'. Pass {flag} {value} on the command line (with --task "
            "translation_san) instead"
        )


def san_base_architecture(args: argparse.Namespace) -> None:
    """fairseq's transformer defaults plus no sharing."""
    for option in options.MODEL_OPTIONS:
        setattr(args, option.name, getattr(args, option.name, None) or option.default)
    base_architecture(args)


@register_model_architecture("transformer_san", "transformer_san")
def transformer_san(args: argparse.Namespace) -> None:
    san_base_architecture(args)


@register_model_architecture("transformer_san", "transformer_san_base")
def transformer_san_base(args: argparse.Namespace) -> None:
    """The paper's system: 6+6 layers, 512 dims, FFN 2048, 8 heads (= fairseq's base)."""
    san_base_architecture(args)


@register_model_architecture("transformer_san", "transformer_san_small")
def transformer_san_small(args: argparse.Namespace) -> None:
    """CPU scale: 6+6 layers, 256 dims, FFN 1024, 4 heads."""
    for side in ("encoder", "decoder"):
        setattr(args, f"{side}_embed_dim", getattr(args, f"{side}_embed_dim", 256))
        setattr(args, f"{side}_ffn_embed_dim", getattr(args, f"{side}_ffn_embed_dim", 1024))
        setattr(args, f"{side}_attention_heads", getattr(args, f"{side}_attention_heads", 4))
    san_base_architecture(args)


@register_model_architecture("transformer_san", "transformer_aan_base")
def transformer_aan_base(args: argparse.Namespace) -> None:
    """The average attention network in the decoder (paper Table 6, "+AAN"), base size."""
    args.decoder_self_attention_type = getattr(args, "decoder_self_attention_type", None) or "aan"
    transformer_san_base(args)


@register_model_architecture("transformer_san", "transformer_aan_small")
def transformer_aan_small(args: argparse.Namespace) -> None:
    """The average attention network in the decoder, CPU size."""
    args.decoder_self_attention_type = getattr(args, "decoder_self_attention_type", None) or "aan"
    transformer_san_small(args)
