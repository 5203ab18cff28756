"""What the static decoder refuses, each list checked in one place before anything is built (as
CTranslate2's converter checks a fairseq model): the generation options it does not implement
(``UNSUPPORTED_OPTIONS``), the arguments of ``task.build_generator`` that ask for another
generator, and the decoders its step does not reproduce exactly (``DECODER_CHECKS``). A new
refusal is one new row. The precisions and executions a device runs are rows of their own
tables (``precision.PRECISIONS``, ``execution.EXECUTIONS``), refused where they are chosen.
"""

from argparse import Namespace
from typing import Callable, Dict, Iterator, Optional, Tuple, Union

from fairseq.models.transformer import TransformerDecoderBase
from fairseq.modules import MultiheadAttention
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase
from omegaconf import DictConfig
from torch import nn

from fairseq_san.errors import UsageError
from fairseq_san.modules.average_attention import AverageAttention
from fairseq_san.modules.shared_attention import AttentionRole, attention_role
from fairseq_san.options import flag_of
from fairseq_san.static_decoding.errors import StaticDecoderError

# fairseq's generation options as ``task.build_generator`` receives them: ``cfg.generation`` (a
# DictConfig of GenerationConfig) from fairseq's commands, an argparse Namespace from older code.
GenerationArgs = Union[Namespace, DictConfig]

# Generation options (fairseq's GenerationConfig names) the static decoder does not implement:
# (option, test of its value that means "in use").
UNSUPPORTED_OPTIONS = [
    ("retain_dropout", bool),
    ("score_reference", bool),
]


def check_generation_options(args: GenerationArgs) -> None:
    """Raise StaticDecoderError naming the first option in ``args`` the decoder cannot honour,
    and a UsageError for a sampling limit without ``--sampling``, which fairseq's generator
    refuses too (a static decoder would run beam search)."""
    for option, in_use in UNSUPPORTED_OPTIONS:
        if in_use(getattr(args, option, None)):
            raise StaticDecoderError(flag_of(option))
    for limit in ("sampling_topk", "sampling_topp"):
        if (getattr(args, limit, None) or -1) > 0 and not getattr(args, "sampling", False):
            raise UsageError(f"{flag_of(limit)} needs --sampling")


def check_generator_arguments(
    seq_gen_cls: Optional[type], extra_gen_cls_kwargs: Optional[Dict]
) -> None:
    """StaticDecoderError for the arguments of ``task.build_generator`` besides the options:
    another generator class, or generator arguments other than fairseq-generate's language model
    fusion (``lm_model``, ``lm_weight``: ``--lm-path``, ``--lm-weight``)."""
    if seq_gen_cls is not None:
        raise StaticDecoderError(f"a custom generator class ({seq_gen_cls.__name__})")
    extra = set(extra_gen_cls_kwargs or {}) - {"lm_model", "lm_weight"}
    if extra:
        raise StaticDecoderError(f"generator options {sorted(extra)}")


# fairseq's input embeddings that are not one table of vectors (``transformer_lm``'s options).
INPUT_EMBEDDING_OPTIONS = {
    "AdaptiveInput": "--adaptive-input",
    "CharacterTokenEmbedder": "--character-embeddings",
}
# fairseq's decoder layers other than its transformer layer, by the option that inserts them.
LAYER_OPTIONS = {"BaseLayer": "--base-layers"}
# Sub-modules of fairseq's decoder layer that its ``--scale-*`` options add.
SCALING_MODULES = ("c_attn", "attn_ln", "ffn_layernorm", "w_resid")


def decoder_type(decoder: nn.Module) -> Optional[str]:
    if not isinstance(decoder, TransformerDecoderBase):
        return f"decoders of type {type(decoder).__name__}"
    return None


def adaptive_softmax(decoder: TransformerDecoderBase) -> Optional[str]:
    return "--adaptive-softmax-cutoff" if decoder.adaptive_softmax is not None else None


def input_embeddings(decoder: TransformerDecoderBase) -> Optional[str]:
    """The option that gave the decoder other input embeddings than one table of vectors (the
    step looks a token's vector up in one nn.Embedding)."""
    if isinstance(decoder.embed_tokens, nn.Embedding):
        return None
    name = type(decoder.embed_tokens).__name__
    return INPUT_EMBEDDING_OPTIONS.get(name, f"input embeddings of type {name}")


def layer_types(decoder: TransformerDecoderBase) -> Optional[str]:
    """The option that put other layers than fairseq's transformer layer among the decoder's (the
    step reads each layer's attention, residuals and feed-forward)."""
    for layer in decoder.layers:
        if not isinstance(layer, TransformerDecoderLayerBase):
            name = type(layer).__name__
            return LAYER_OPTIONS.get(name, f"decoder layers of type {name}")
    return None


def quant_noise(decoder: TransformerDecoderBase) -> Optional[str]:
    return "--quant-noise-pq" if decoder.quant_noise is not None else None


def scaled_layers(decoder: TransformerDecoderBase) -> Optional[str]:
    for layer in decoder.layers:
        for extra in SCALING_MODULES:
            if getattr(layer, extra, None) is not None:
                return f"decoder layers with {extra} (--scale-* options)"
    return None


def cross_self_attention(decoder: TransformerDecoderBase) -> Optional[str]:
    if any(getattr(layer, "cross_self_attention", False) for layer in decoder.layers):
        return "--cross-self-attention"
    return None


def attention_modules(decoder: nn.Module) -> Iterator[nn.Module]:
    """The decoder's dot-product attention modules (AAN's are the step's own to reproduce)."""
    for layer in decoder.layers:
        if not isinstance(layer.self_attn, AverageAttention):
            yield layer.self_attn
        if layer.encoder_attn is not None:
            yield layer.encoder_attn


def attention_types(decoder: TransformerDecoderBase) -> Optional[str]:
    for module in attention_modules(decoder):
        if not isinstance(module, MultiheadAttention):
            return f"decoder attention of type {type(module).__name__}"
        if attention_role(module) == AttentionRole.FULL and (
            module.bias_k is not None or module.add_zero_attn
        ):
            return "attention with add_bias_kv or add_zero_attn"
    return None


def mixed_heads(decoder: TransformerDecoderBase) -> Optional[str]:
    heads = {
        layer.self_attn.num_heads
        for layer in decoder.layers
        if not isinstance(layer.self_attn, AverageAttention)
    }
    return "decoder layers with different numbers of heads" if len(heads) > 1 else None


# What the step refuses in a decoder: each row names what it finds (None: nothing), in order
# (the first row makes sure the others read a fairseq transformer decoder).
DECODER_CHECKS: Tuple[Callable[[nn.Module], Optional[str]], ...] = (
    decoder_type,
    layer_types,
    adaptive_softmax,
    input_embeddings,
    quant_noise,
    scaled_layers,
    cross_self_attention,
    attention_types,
    mixed_heads,
)


def check_decoder(decoder: nn.Module, owner: Optional[str] = None) -> None:
    """Raise StaticDecoderError for a decoder the step does not reproduce exactly, naming the
    first thing found (``DECODER_CHECKS``) and the model it is in where not the decoded one
    (``owner``: a fused language model)."""
    for check in DECODER_CHECKS:
        found = check(decoder)
        if found is not None:
            raise StaticDecoderError(found if owner is None else f"{found} in {owner}")
