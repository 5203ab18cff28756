"""``transformer_san``: fairseq's transformer with Shared Attention Networks (paper section 3.2).

The model is built exactly as fairseq builds its transformer; the sharing policy then replaces the
attention modules of the layers that reuse a block's attention (see ``modules.shared_attention``),
which drops their unused projections. With no policy nothing is replaced and the model *is*
fairseq's transformer. The same step lets a trained model decode under a policy that shares
more than it was trained with (``--model-overrides "{'san_policy': ...}"``): the projections
the new policy does not use are dropped from the checkpoint on load.

Why modules are replaced after the build rather than built by the layers' hooks
(``build_self_attention``, as fairseq's linformer example does): one mechanism then serves the
policy, AAN, ``--san-decoding fast`` (switched by the task after the model is loaded) and the
language model (fairseq's ``TransformerLanguageModel.build_model`` has no hook for its decoder
class), and fairseq's construction, parameter initialization included, is left as it is: a
model without a policy is fairseq's, parameter for parameter.
"""

import argparse
import logging
from typing import Dict, List, Optional, Tuple, Type

import torch
from fairseq.data import Dictionary
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import (
    TransformerConfig,
    TransformerDecoderBase,
    TransformerModel,
    base_architecture,
)
from fairseq.modules import MultiheadAttention
from fairseq.tasks import FairseqTask
from torch import Tensor, nn

from fairseq_san import checkpoints, options
from fairseq_san import policy as san_policy
from fairseq_san.models.checkpoint_policy import check_checkpoint_fits
from fairseq_san.models.option_checks import (
    check_adaptive_cutoffs,
    check_analysis_task,
    check_attention_heads,
    check_decoder_overrides,
    check_language_pair,
    check_no_lm_options,
    check_policy_fits_model,
    check_san_options,
    check_translation_task,
    check_weights_fit_memory,
    task_language_pair,
    warn_unused_encdec_share,
)
from fairseq_san.models.san_model import (
    SANModel,
    layers_to_keep_as_text,
    record_training_pruning,
)
from fairseq_san.modules import IncrementalState
from fairseq_san.modules.average_attention import AverageAttention
from fairseq_san.modules.decoding_attention import DecodingAttention
from fairseq_san.modules.shared_attention import (
    PROJECTIONS,
    BlockLeaderAttention,
    BlockShare,
    SharedContextAttention,
    SharedWeightsAttention,
    attention_kwargs,
)

logger = logging.getLogger(__name__)


class TransformerSANDecoder(TransformerDecoderBase):
    """fairseq's decoder, plus the paper's "Baseline-Cache" mode (Table 6).

    With ``recompute_prefix`` set, decoding ignores the incremental state and recomputes the whole
    target prefix at every step, as Transformer inference did before attention caches. The output
    equals cached decoding; only the cost differs.
    """

    recompute_prefix: bool = False

    def __init__(self, *args, **kwargs) -> None:
        """fairseq's, its dropout named as fairseq's transformer names it: fairseq names it after
        the class, and ``--retain-dropout-modules TransformerDecoder`` kept it for fairseq's
        transformer only (this decoder's, "TransformerSANDecoder", ran without dropout)."""
        super().__init__(*args, **kwargs)
        self.dropout_module.module_name = "TransformerDecoder"

    def extract_features(
        self,
        prev_output_tokens: Tensor,
        encoder_out: Optional[Dict[str, List[Tensor]]] = None,
        incremental_state: Optional[IncrementalState] = None,
        full_context_alignment: bool = False,
        alignment_layer: Optional[int] = None,
        alignment_heads: Optional[int] = None,
    ) -> Tuple[Tensor, Dict[str, List[Optional[Tensor]]]]:
        """fairseq's, or with ``recompute_prefix`` (``--san-decoding no-cache``) the whole prefix
        recomputed without the cache at each step, its last position returned."""
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
class TransformerSANModel(SANModel, TransformerModel):
    """A Transformer whose adjacent layers share attention weights (S, Eq. 4) or outputs (A,
    Eq. 5)."""

    checkpoint_check = staticmethod(check_checkpoint_fits)

    @classmethod
    def add_args(cls, parser: argparse.ArgumentParser) -> None:
        """fairseq's transformer options plus SAN's, in the group fairseq passes (a group nested
        in it would be deprecated and left out of the help)."""
        super().add_args(parser)
        for option in options.MODEL_OPTIONS:
            option.add_argument(parser)

    @classmethod
    def build_model(cls, args: argparse.Namespace, task: FairseqTask) -> "TransformerSANModel":
        """fairseq's transformer, built once SAN's options are checked, then its decoder
        self-attention made AAN where asked and each block's attention shared by the policy."""
        check_san_options(args)
        check_no_lm_options(args)
        check_translation_task(task)
        check_language_pair(args, task)
        check_analysis_task(args, task)
        check_decoder_overrides(args, task)
        san_base_architecture(args)
        layers_to_keep_as_text(args)
        record_training_pruning(args)
        check_attention_heads(args, ("encoder", "decoder"))
        check_weights_fit_memory(args, ("encoder", "decoder"))
        check_adaptive_cutoffs(args, task)
        layers = {"decoder": args.decoder_layers, "encoder": args.encoder_layers}
        policy = resolve_model_policy(args, layers)
        warn_unused_encdec_share(policy, args)
        checkpoints.stamp(args, task_language_pair(task))
        model = super().build_model(args, task)
        if args.decoder_self_attention_type == "aan":
            use_average_attention(model.decoder.layers)
        for kind, blocks in policy.items():
            stack, attr = san_policy.KIND_MODULES[kind]
            share_attention(getattr(model, stack).layers, attr, blocks, follower_class(kind, args))
        if args.decoder_normalize_before and policy.get("decoder_encdec"):
            drop_unused_query_norms(model.decoder.layers, policy["decoder_encdec"])
        model.own_decoding = model_decoding(args)
        model.set_decoding(options.FAIRSEQ)
        logger.info("attention sharing: %s", san_policy.format_policy(policy))
        return model

    @classmethod
    def build_decoder(
        cls, cfg: TransformerConfig, tgt_dict: Dictionary, embed_tokens: nn.Embedding
    ) -> "TransformerSANDecoder":
        """fairseq's decoder with the paper's "Baseline-Cache" mode (``TransformerSANDecoder``)."""
        return TransformerSANDecoder(
            cfg, tgt_dict, embed_tokens, no_encoder_attn=cfg.no_cross_attention
        )

    # The decoding the model's own options choose (``model_decoding``: ``--model-overrides``, a
    # checkpoint's deprecated ``san_no_cache``), set at build; the one it applies now.
    own_decoding: str = options.FAIRSEQ
    decoding: str = options.FAIRSEQ

    def set_decoding(self, decoding: str) -> None:
        """Decode with fairseq's step, without the incremental cache (``no-cache``) or with the
        faster attention step (``fast``): one of ``options.MODEL_DECODINGS``; ``fairseq`` means
        the model's own decoding. The task calls this for ``--san-decoding`` at every generator
        it builds, so that a model decodes as the latest asked (the hub's and the benchmark's
        models decode several ways): a model that decoded with ``no-cache`` kept recomputing
        the prefix where fairseq's decoding was asked next."""
        self.decoding = self.own_decoding if decoding == options.FAIRSEQ else decoding
        self.decoder.recompute_prefix = self.decoding == options.NO_CACHE
        use_fast_decoding(self.decoder.layers, self.fast_decoding)
        if not self.fast_decoding:  # fairseq's step would read the fast step's beam
            self.decoder.set_beam_size(1)

    @property
    def fast_decoding(self) -> bool:
        """Whether the decoder's attention takes the fast step (``--san-decoding fast``)."""
        return self.decoding == options.FAST

    def set_beam_size(self, beam_size: int) -> None:
        """fairseq's SequenceGenerator calls this; with ``--san-decoding fast`` the decoder's
        encoder-decoder attention keeps one copy of the keys/values per source sentence instead
        of one per hypothesis, which beam search would otherwise reorder at every step."""
        if self.fast_decoding:
            self.decoder.set_beam_size(beam_size)


def resolve_model_policy(
    args: argparse.Namespace, layers: Dict[str, int], kinds: Tuple[str, ...] = san_policy.KINDS
) -> Dict[str, List[int]]:
    """The policy from ``--san-policy`` and the per-kind flags, checked against the layer counts
    (``layers``: per stack, "encoder" and "decoder").

    A model with fewer attention kinds (``kinds``: a language model's decoder self-attention only)
    refuses a policy key of another kind. The resolved policy is written back into ``args`` as
    JSON text so that the checkpoint carries it and ``fairseq-generate`` rebuilds the same model
    with no extra flag.
    """
    flags = {kind: getattr(args, options.POLICY_OPTIONS[kind].name, None) for kind in kinds}
    policy = san_policy.resolve_policy(getattr(args, "san_policy", None), flags)
    others = [kind for kind in policy if kind not in kinds]
    if others:
        raise san_policy.PolicyError(
            f'policy key "{others[0]}" is for encoder-decoder models: a language model '
            '(transformer_lm_san) shares only decoder self-attention ("decoder_self")'
        )
    for kind, blocks in policy.items():
        san_policy.validate_blocks(blocks, layers[san_policy.KIND_MODULES[kind][0]], kind)
    check_policy_fits_model(policy, args)
    args.san_policy = san_policy.dump_policy(policy)
    for kind in kinds:
        setattr(args, options.POLICY_OPTIONS[kind].name, None)
    return policy


def follower_class(kind: str, args: argparse.Namespace) -> Type[MultiheadAttention]:
    """The module of a layer that reuses its block's attention: S (Eq. 4) or A (Eq. 5), the
    latter where ``--san-encdec-share output`` asks it and the kind allows it."""
    shares_output = args.san_encdec_share == options.OUTPUT
    if san_policy.KIND_TABLE[kind].attends_to_fixed_memory and shares_output:
        return SharedContextAttention
    return SharedWeightsAttention


def share_attention(
    layers: nn.ModuleList,
    attr: str,
    blocks: List[int],
    follower_class: Type[MultiheadAttention],
    leader_class: Type[MultiheadAttention] = BlockLeaderAttention,
) -> None:
    """Replace attention module ``attr`` of ``layers`` so that each block shares its first layer's.

    ``leader_class`` and ``follower_class``, which one ``BlockShare`` per block connects, say
    what is shared: SAN's S or A (the defaults), or keys and values
    (``modules.kv_shared_attention``).
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
            module_class = follower_class
        is_last = index + 1 == len(leaders) or leaders[index + 1] != leader
        old = getattr(layers[index], attr)
        new = rebuild_attention(old, module_class, block=block, releases_block=is_last)
        setattr(layers[index], attr, new)


def drop_unused_query_norms(layers: nn.ModuleList, blocks: List[int]) -> None:
    """Replace by the identity the encoder-decoder attention's layer norm of each following
    layer of a pre-norm decoder's ``blocks``: the norm makes only the attention's query, and a
    following layer uses its leader's S (Eq. 4) or A (Eq. 5), never its own query, so the norm's
    parameters got no gradient (fairseq's DDP, ``find_unused_parameters`` off, stopped at the
    first update) and were counted as the model's. A post-norm layer normalizes its output: kept.
    """
    for index, leader in enumerate(san_policy.block_leaders(blocks, len(layers))):
        if index != leader:
            layers[index].encoder_attn_layer_norm = nn.Identity()


def rebuild_attention(old: MultiheadAttention, module_class: Type, **extra) -> MultiheadAttention:
    """A ``module_class`` shaped like ``old`` that takes over the projections it keeps, in
    ``old``'s mode: a model made ready for inference (fairseq-generate) no longer passes
    ``eval()`` on to its modules, and a module left in training mode would drop attention out.

    Moving the projection modules keeps their values and anything fairseq attached to them
    (quant-noise hooks); moving the dropout module keeps its name, ``MultiheadAttention``, which
    ``--retain-dropout-modules`` selects by, and its ``--retain-dropout`` switch, set before
    fairseq-generate builds the generator that asks for the fast step.
    """
    new = module_class(**extra, **attention_kwargs(old)).train(old.training)
    kept = dict(new.named_children())
    for name in (*PROJECTIONS, "out_proj", "dropout_module"):
        if name in kept:
            setattr(new, name, getattr(old, name))
    if old.bias_k is not None:  # parameters, not modules: only fast decoding's module keeps them
        new.bias_k, new.bias_v = old.bias_k, old.bias_v
    return new


def use_fast_decoding(layers: nn.ModuleList, fast: bool = True) -> None:
    """Switch the decoder's attention to the fast incremental path (``DecodingAttention``), or
    back to fairseq's (``fast`` False; a rebuilt module then runs fairseq's forward).

    Shared-attention modules already are ``DecodingAttention``; fairseq's own modules are rebuilt
    as one, keeping their projection modules, with torch's random state kept: fairseq-generate
    seeds it before it loads the model, and the new modules' initial weights (replaced at once)
    drew from it, so that ``--sampling`` drew other samples than fairseq's decoding with the same
    ``--seed``. AAN is left as it is.
    """
    with torch.random.fork_rng(devices=[]):
        for layer in every_layer(layers):
            for attr in ("self_attn", "encoder_attn"):
                module = getattr(layer, attr, None)
                if fast and type(module) is MultiheadAttention:
                    module = rebuild_attention(module, DecodingAttention)
                    setattr(layer, attr, module)
                if isinstance(module, DecodingAttention):
                    module.fast_decoding = fast


def every_layer(layers: nn.ModuleList) -> List[nn.Module]:
    """Each layer of a stack, by index: iterating fairseq's ``LayerDropModuleList`` (a
    ``--*-layerdrop``) in training mode, as a model is built, skips layers at random (an AAN
    decoder kept dot-product attention in some of its layers, and trained so)."""
    return [layers[index] for index in range(len(layers))]


def use_average_attention(layers: nn.ModuleList) -> None:
    """Replace decoder self-attention by AAN (Zhang et al. 2018), FFN inner size = model size.

    AAN's FFN drops out what the layer's own FFN drops out (``--activation-dropout``), as in
    Zhang et al.'s implementation (its ``relu_dropout`` serves both FFNs), and its projections
    take the layer's ``--quant-noise-pq``, as the attention they replace did (fairseq built it
    with them; AAN's ran without).
    """
    for layer in every_layer(layers):
        embed_dim = layer.self_attn.embed_dim
        dropout = layer.activation_dropout_module.p
        layer.self_attn = AverageAttention(
            embed_dim, embed_dim, dropout, layer.quant_noise, layer.quant_noise_block_size
        )


def model_decoding(args: argparse.Namespace) -> str:
    """The decoding the model applies to itself (``options.MODEL_DECODINGS``) from its options.

    ``san_decoding`` reaches the model's arguments from the task's options saved in training or
    from ``--model-overrides``; the deprecated ``san_no_cache`` and ``san_fast_decoding`` (in
    checkpoints saved before ``--san-decoding``) mean ``no-cache`` and ``fast``: they are kept,
    and ``san_decoding`` set to what they mean, so that the checkpoint saves the new key too.
    ``static`` is the task's.
    """
    saved = {key: getattr(args, key, None) for key in options.DECODING_KEYS}
    decoding = options.asked_decoding(saved)
    if decoding != options.FAIRSEQ:
        args.san_decoding = decoding
    return decoding if decoding in options.MODEL_DECODINGS else options.FAIRSEQ


def san_base_architecture(args: argparse.Namespace) -> None:
    """fairseq's transformer defaults plus no sharing."""
    options.fill_defaults(args, options.MODEL_OPTIONS)
    base_architecture(args)


@register_model_architecture("transformer_san", "transformer_san")
def transformer_san(args: argparse.Namespace) -> None:
    """fairseq's transformer defaults plus no sharing (``transformer_san_base``'s sizes)."""
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
