"""One decoder step over preallocated caches, built from a loaded fairseq decoder's own weights.

``StaticDecoderStep`` reads the modules of a fairseq ``TransformerDecoderBase`` (fairseq's
transformer and every model ``transformer_san`` builds) and computes, for one new token per
hypothesis, the same function as fairseq's incremental ``decoder.forward`` followed by
``get_normalized_probs``:

* attention modules map by the role the model set on them (``AttentionRole``): fairseq's
  MultiheadAttention (FULL) and a block leader (LEADER, Eq. 1-2) keep their own q/k/v; a
  follower reusing the block's weights S (WEIGHTS, Eq. 4) keeps only V; one reusing the context
  A (CONTEXT, Eq. 5) keeps nothing; one reusing the block's keys and values (KEYS_VALUES,
  cross-layer KV sharing) keeps its own q and no cache; ``AverageAttention`` keeps a running sum;
* projections are copied once into fused matrices (q/k/v of self-attention, k/v of the encoder
  output) with the query scaling folded in, so that ``precision.py`` can cast or quantize every
  linear layer of the step without touching the model;
* all state lives in a ``DecoderCache`` (caches.py) indexed by position: no per-step allocation
  of caches, no dictionaries of incremental state;
* a decoder it does not reproduce exactly is refused before it is read
  (``support.DECODER_CHECKS``).

The position is a Python int (the sliced layout, the CPU's) or a device tensor with a length
bucket (the fixed layout: torch.compile, CUDA graphs); the modules read and write the cache
through ``caches.Position`` only, so one step serves both. ``prefill`` runs the same layers over
a language model's prompt, all its positions in one pass (``Position.prefill``).
"""

import copy
from typing import Callable, Dict, List, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from fairseq.models.transformer import TransformerDecoderBase
from fairseq.modules import MultiheadAttention
from torch import Tensor, nn

from fairseq_san.modules.average_attention import AverageAttention, gated_average
from fairseq_san.modules.shared_attention import KEPT_PROJECTIONS, AttentionRole
from fairseq_san.modules.shared_attention import attention_role
from fairseq_san.static_decoding.caches import (
    DecoderCache,
    KeptMemory,
    Position,
    allocate_cache,
    bmm,
    pad_source,
)
from fairseq_san.static_decoding.errors import StaticDecoderError
from fairseq_san.static_decoding.support import check_decoder

# What a block leader hands to its followers in one step: S (weights) and A (per-head context),
# per kind of attention ("self", "encdec"), and the cache slot of its keys ("self slot").
Shared = Dict[str, Union[Tuple[Tensor, Tensor], int]]

# On the CPU the output projection and the log-softmax run on blocks of rows of about this
# size (float32 log-probabilities), each block's written into the step's result (the cache's
# ``log_probs`` where the generator gives one): at beam 20 the whole products are buffers of
# megabytes (int8's int32 accumulator, the logits) that glibc may give back to the kernel when
# they are freed, each page then faulted in again at the next step, while a block's buffers stay
# in the processor's cache (docs/results/cpu-yardstick/log-probs-2026-12-01).
LOG_PROBS_BLOCK_BYTES = 1 << 20

LEADER = AttentionRole.LEADER
WEIGHTS, CONTEXT = AttentionRole.WEIGHTS, AttentionRole.CONTEXT
KEYS_VALUES = AttentionRole.KEYS_VALUES


def copy_linear(*sources: nn.Linear, scales: Optional[List[float]] = None) -> nn.Linear:
    """A Linear computing ``sources`` side by side (output rows stacked), row blocks scaled.

    A single unscaled source shares its weight storage with the model (no copy); the Linear's
    parameters are its own objects, so casting or quantizing it leaves the model as it is.
    """
    scales = scales or [1.0] * len(sources)
    weights = [_scaled(s.weight, c) for s, c in zip(sources, scales)]
    has_bias = any(s.bias is not None for s in sources)
    biases = [
        _scaled(s.bias, c) if s.bias is not None else s.weight.new_zeros(s.weight.size(0))
        for s, c in zip(sources, scales)
    ]
    weight = weights[0] if len(weights) == 1 else torch.cat(weights)
    linear = nn.Linear(weight.size(1), weight.size(0), bias=has_bias, device="meta")
    linear.weight = nn.Parameter(weight, requires_grad=False)
    if has_bias:
        bias = biases[0] if len(biases) == 1 else torch.cat(biases)
        linear.bias = nn.Parameter(bias, requires_grad=False)
    return linear


def kept_projections(module: MultiheadAttention, names: Tuple[str, ...]) -> nn.Linear:
    """The projections ``names`` of ``module`` as one Linear, side by side, the query's scaling
    folded into q."""
    scales = [module.scaling if name == "q_proj" else 1.0 for name in names]
    return copy_linear(*(getattr(module, name) for name in names), scales=scales)


def _scaled(tensor: Tensor, scale: float) -> Tensor:
    """``tensor`` times ``scale``, detached; the same storage when ``scale`` is 1."""
    return tensor.detach() * scale if scale != 1.0 else tensor.detach()


def copy_module(module: Optional[nn.Module]) -> Optional[nn.Module]:
    """A copy of a small module (layer norm) that the step may cast without touching the model."""
    return None if module is None else copy.deepcopy(module).requires_grad_(False)


def split_heads(x: Tensor, heads: int) -> Tensor:
    """(rows, positions, embed) -> (rows, heads, positions, head_dim), a view."""
    rows, positions, embed = x.shape
    return x.view(rows, positions, heads, embed // heads).transpose(1, 2)


class SelfAttentionStep(nn.Module):
    """Decoder self-attention for one position (or a prefill's span of positions): K/V (or V
    alone) written into cache slots."""

    def __init__(self, module: MultiheadAttention, slot: int) -> None:
        super().__init__()
        self.role = attention_role(module)
        self.heads = module.num_heads
        # the kept q/k/v side by side: q, k, v (FULL, LEADER), v (WEIGHTS), q (KEYS_VALUES)
        self.projections = kept_projections(module, KEPT_PROJECTIONS[self.role])
        # the kept keys, then values in cache slots from ``slot`` on (values only for WEIGHTS)
        self.slot = slot
        self.cache_slots = sum(name != "q_proj" for name in KEPT_PROJECTIONS[self.role])
        self.out = copy_linear(module.out_proj)

    def _per_head(self, x: Tensor, rows: int, parts: int) -> Tensor:
        """(rows * span, parts * embed) -> (parts, rows, heads, span, head_dim)."""
        span = x.size(0) // rows
        return x.view(rows, span, parts, self.heads, -1).permute(2, 0, 3, 1, 4)

    def _queries(self, x: Tensor, rows: int) -> Tensor:
        """(rows * span, embed) -> (rows * heads, span, head_dim)."""
        return self._per_head(x, rows, 1)[0].reshape(rows * self.heads, -1, x.size(1) // self.heads)

    def _attend(
        self, query: Tensor, at: Position, states: Tensor, slot: int
    ) -> Tuple[Tensor, Tensor]:
        """Eq. 1-2 over the keys and values of cache slots ``slot``, ``slot + 1``: S and A."""
        logits = at.logits(query, at.read(states[slot]))
        weights = torch.softmax(logits, dim=-1, dtype=torch.float32).type_as(logits)  # Eq. 1
        return weights, bmm(weights, at.read(states[slot + 1]))  # Eq. 2

    def forward(self, x: Tensor, at: Position, cache: DecoderCache, shared: Shared) -> Tensor:
        positions, embed = x.shape  # rows x span
        rows = positions // at.span
        states = cache.self_attention.tensor
        projected = self.projections(x)
        if self.role == WEIGHTS:
            at.write(cache, self.slot, self._per_head(projected, rows, 1))
            context = bmm(shared["self"][0], at.read(states[self.slot]))  # Eq. 4: S^m V^n
        elif self.role == KEYS_VALUES:  # the block leader's keys and values, own queries
            query = self._queries(projected, rows)
            _, context = self._attend(query, at, states, shared["self slot"])
        else:
            at.write(cache, self.slot, self._per_head(projected[:, embed:], rows, 2))
            query = self._queries(projected[:, :embed], rows)
            weights, context = self._attend(query, at, states, self.slot)
            if self.role == LEADER:
                shared["self"], shared["self slot"] = (weights, context), self.slot
        # (rows * heads, span, head_dim) -> (rows * span, embed)
        context = context.view(rows, self.heads, at.span, -1).transpose(1, 2)
        return self.out(context.reshape(positions, embed))


class AverageAttentionStep(nn.Module):
    """AAN for one position (Zhang et al.'s average and gating layers): running sum in the
    cache, then gates."""

    def __init__(self, module: AverageAttention, index: int) -> None:
        super().__init__()
        self.index = index
        self.fc1, self.fc2 = copy_linear(module.fc1), copy_linear(module.fc2)
        self.gate = copy_linear(module.gate)
        self.activation_fn = module.activation_fn

    def forward(self, x: Tensor, at: Position, cache: DecoderCache, shared: Shared) -> Tensor:
        sums = cache.sums.tensor
        running = sums[:, self.index] + x.to(sums.dtype)
        sums[:, self.index] = running
        average = (running / at.count()).type_as(x)
        return gated_average(self, x, average)


class EncoderAttentionStep(nn.Module):
    """Encoder-decoder attention: keys/values once per source sentence, queries per hypothesis."""

    def __init__(self, module: MultiheadAttention) -> None:
        super().__init__()
        self.role = attention_role(module)
        self.heads = module.num_heads
        kept = KEPT_PROJECTIONS[self.role]
        # queries per step; the kept keys and values (k and v, or v alone) once per source
        self.q = kept_projections(module, ("q_proj",)) if "q_proj" in kept else None
        self.kv_names = tuple(name for name in kept if name != "q_proj")
        self.kv = kept_projections(module, self.kv_names) if self.kv_names else None
        self.out = copy_linear(module.out_proj)
        self.slot = -1

    def project(self, encoder_out: Tensor, encoder: List[Tensor]) -> None:
        """Append to ``encoder`` this module's keys/values of ``encoder_out`` (source, sentences,
        embed), each as (sentences * heads, source, head_dim)."""
        if self.kv is None:  # CONTEXT: the block's A, nothing of its own
            return
        self.slot = len(encoder)
        for x in self.kv(encoder_out.transpose(0, 1)).chunk(len(self.kv_names), dim=-1):
            per_head = split_heads(x, self.heads)
            encoder.append(per_head.reshape(-1, per_head.size(2), per_head.size(3)))

    def forward(self, x: Tensor, cache: DecoderCache, shared: Shared) -> Tensor:
        rows, embed = x.shape
        sentences = cache.sentences
        beam = rows // sentences
        heads = self.heads
        if self.role == CONTEXT:
            context = shared["encdec"][1]  # Eq. 5: A^m
        elif self.role == WEIGHTS:
            context = bmm(shared["encdec"][0], cache.encoder[self.slot])  # Eq. 4
        else:
            query = self.q(x).view(sentences, beam, heads, -1).transpose(1, 2)
            query = query.reshape(sentences * heads, beam, -1)
            keys, values = cache.encoder[self.slot], cache.encoder[self.slot + 1]
            logits = bmm(query, keys.transpose(1, 2))
            if cache.source_padding is not None:
                logits = logits.view(sentences, heads, beam, -1)
                logits = logits.masked_fill(cache.source_padding, float("-inf"))
                logits = logits.view(sentences * heads, beam, -1)
            weights = torch.softmax(logits, dim=-1, dtype=torch.float32).type_as(logits)  # Eq. 1
            context = bmm(weights, values)  # Eq. 2
            if self.role == LEADER:
                shared["encdec"] = (weights, context)
        # (sentences * heads, beam, head_dim) -> (hypotheses, embed), hypothesis-major.
        context = context.view(sentences, heads, beam, -1).transpose(1, 2)
        return self.out(context.reshape(rows, embed))


class LayerStep(nn.Module):
    """fairseq's TransformerDecoderLayerBase for one position (pre- or post-norm)."""

    def __init__(self, layer: nn.Module, self_attention: nn.Module) -> None:
        super().__init__()
        self.normalize_before = layer.normalize_before
        self.self_attn = self_attention
        self.self_attn_layer_norm = copy_module(layer.self_attn_layer_norm)
        self.encoder_attn = (
            EncoderAttentionStep(layer.encoder_attn) if layer.encoder_attn is not None else None
        )
        self.encoder_attn_layer_norm = copy_module(layer.encoder_attn_layer_norm)
        self.fc1, self.fc2 = copy_linear(layer.fc1), copy_linear(layer.fc2)
        self.activation_fn: Callable[[Tensor], Tensor] = layer.activation_fn
        self.final_layer_norm = copy_module(layer.final_layer_norm)

    def _sublayer(self, x: Tensor, norm: nn.Module, body: Callable[[Tensor], Tensor]) -> Tensor:
        """Residual sub-layer: norm before (pre-norm) or after the residual sum (post-norm)."""
        y = body(norm(x) if self.normalize_before else x)
        x = x + y
        return x if self.normalize_before else norm(x)

    def forward(self, x: Tensor, at: Position, cache: DecoderCache, shared: Shared) -> Tensor:
        x = self._sublayer(
            x, self.self_attn_layer_norm, lambda y: self.self_attn(y, at, cache, shared)
        )
        if self.encoder_attn is not None:
            x = self._sublayer(
                x, self.encoder_attn_layer_norm, lambda y: self.encoder_attn(y, cache, shared)
            )
        return self._sublayer(
            x, self.final_layer_norm, lambda y: self.fc2(self.activation_fn(self.fc1(y)))
        )


class StaticDecoderStep(nn.Module):
    """The whole decoder for one token per hypothesis: embeddings, layers, log-probabilities."""

    def __init__(self, decoder: TransformerDecoderBase, owner: Optional[str] = None) -> None:
        """The step of ``decoder``, or StaticDecoderError naming what it cannot reproduce there
        (and ``owner``, the model it is in, where not the decoded one: ``check_decoder``)."""
        super().__init__()
        check_decoder(decoder, owner)
        self.embed_dim = decoder.embed_dim  # the layers' width (the input's is projected to it)
        self.embed_tokens = nn.Parameter(decoder.embed_tokens.weight.detach(), requires_grad=False)
        self.embed_scale = float(decoder.embed_scale)
        self.project_in_dim = _optional_linear(decoder.project_in_dim)
        self.layernorm_embedding = copy_module(decoder.layernorm_embedding)
        # the model's own module, called once per batch (``prepare``): precision.py never casts it
        self._positions_of = decoder.embed_positions
        self.register_buffer("positions", torch.empty(0), persistent=False)
        self.heads = decoder.layers[0].self_attn.num_heads
        self.self_slots, self.aan_layers = 0, 0
        layers = []
        for layer in decoder.layers:
            if isinstance(layer.self_attn, AverageAttention):
                attention = AverageAttentionStep(layer.self_attn, self.aan_layers)
                self.aan_layers += 1
            else:
                attention = SelfAttentionStep(layer.self_attn, self.self_slots)
                self.self_slots += attention.cache_slots
            layers.append(LayerStep(layer, attention))
        self.layers = nn.ModuleList(layers)
        self.layer_norm = copy_module(decoder.layer_norm)
        self.project_out_dim = _optional_linear(decoder.project_out_dim)
        self.output_projection = copy_linear(decoder.output_projection)
        self.vocabulary = decoder.output_projection.out_features

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of activations and caches (float32 for int8 weights)."""
        return self.embed_tokens.dtype

    def empty_cache(
        self,
        rows: int,
        positions: int,
        device: torch.device,
        fixed: bool,
        fixed_address: bool = False,
        memory: Optional[KeptMemory] = None,
        log_probs_memory: Optional[KeptMemory] = None,
    ) -> DecoderCache:
        """An empty cache of this step for ``rows`` hypotheses and ``positions`` positions
        (``allocate_cache``'s layout and memory); on the CPU, where ``log_probs_memory`` is
        given, the steps' log-probabilities written in it (a caller that reads each step's
        before the next)."""
        cache = allocate_cache(
            rows, positions, self.self_slots, self.heads, self.aan_layers, self.embed_dim,
            self.dtype, device, fixed=fixed, fixed_address=fixed_address, memory=memory,
        )  # fmt: skip
        if log_probs_memory is not None and device.type == "cpu":
            shape = (rows, self.vocabulary)
            cache.log_probs = log_probs_memory.take(shape, torch.float32, device)
        return cache

    def prepare(
        self,
        encoder_out: Optional[Tensor],
        source_padding: Optional[Tensor],
        cache: DecoderCache,
        positions: int,
    ) -> None:
        """Project the encoder output for every encoder-decoder attention (a language model has
        none: ``encoder_out`` None); the position table for ``positions`` positions."""
        if encoder_out is not None:
            self._project_encoder(encoder_out, source_padding, cache)
        self._extend_positions(positions, self.embed_tokens.device)

    def _project_encoder(
        self, encoder_out: Tensor, source_padding: Optional[Tensor], cache: DecoderCache
    ) -> None:
        encoder_out = encoder_out.to(self.dtype)
        cache.sentences = encoder_out.size(1)
        if cache.fixed:
            encoder_out, source_padding = pad_source(encoder_out, source_padding)
        # None when no sentence has padding: fairseq's mask would change nothing either.
        elif source_padding is not None and not bool(source_padding.any()):
            source_padding = None
        if source_padding is not None:
            source_padding = source_padding.view(source_padding.size(0), 1, 1, -1)
        encoder: List[Tensor] = []
        for layer in self.layers:
            if layer.encoder_attn is not None:
                layer.encoder_attn.project(encoder_out, encoder)
        cache.hold_encoder(encoder, source_padding)

    def _extend_positions(self, positions: int, device: torch.device) -> None:
        """Position embeddings 0..positions-1 from the model's own module (learned, sinusoidal),
        up to as many as it has: a fused language model's may be fewer than the table of the
        model it is fused with, and, as in fairseq, a decode fails only where it reaches them."""
        if self._positions_of is None:
            return
        positions = min(positions, getattr(self._positions_of, "max_positions", positions))
        if self.positions.size(0) >= positions:
            return
        tokens = torch.full((1, positions), self._positions_of.padding_idx + 1, device=device)
        with torch.no_grad():
            table = self._positions_of(tokens)[0]
        self.positions = table.to(device=device, dtype=self.dtype)

    def forward(
        self,
        tokens: Tensor,
        step: Union[int, Tensor],
        cache: DecoderCache,
        temperature: float = 1.0,
        length: Optional[int] = None,
    ) -> Tensor:
        """Log-probabilities (hypotheses, vocabulary), float32, of the token after ``tokens``
        (hypotheses,) at position ``step``; writes position ``step`` of the caches. ``step``: an
        int (sliced layout) or a (1,) long tensor attending over ``length`` positions (fixed)."""
        return self._layers(tokens, Position.at(step, length, self.dtype), cache, temperature)

    def prefill(self, tokens: Tensor, cache: DecoderCache, temperature: float = 1.0) -> Tensor:
        """A language model's prompt in one pass: log-probabilities (rows, span, vocabulary) after
        each token of ``tokens`` (rows, span), positions 0..span-1 of the caches written."""
        self.check_prefill()
        rows, span = tokens.shape
        at = Position.prefill(span, self.dtype, tokens.device)
        return self._layers(tokens, at, cache, temperature).view(rows, span, -1)

    def check_prefill(self) -> None:
        """StaticDecoderError for a decoder whose prompt the prefill cannot run in one pass (AAN's
        running sums and encoder-decoder attention take one position at a time)."""
        if self.aan_layers or any(layer.encoder_attn is not None for layer in self.layers):
            raise StaticDecoderError("a prompt's prefill with AAN or encoder-decoder attention")

    def _layers(self, tokens: Tensor, at: Position, cache: DecoderCache, temperature: float):
        """Embeddings, layers and log-probabilities of the positions of ``at`` (the span along
        the tokens' last dimension, flattened into rows)."""
        x = self.embed_scale * F.embedding(tokens, self.embed_tokens)
        if self.project_in_dim is not None:
            x = self.project_in_dim(x)
        if self._positions_of is not None:
            x += at.embedding(self.positions)
        x = x.view(-1, x.size(-1))
        if self.layernorm_embedding is not None:
            x = self.layernorm_embedding(x)
        shared: Shared = {}
        for layer in self.layers:
            x = layer(x, at, cache, shared)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        if self.project_out_dim is not None:
            x = self.project_out_dim(x)
        if x.device.type != "cpu" or torch.compiler.is_compiling():
            return self._log_probs(x, temperature)
        return self._log_probs_in_blocks(x, temperature, cache.log_probs)

    def _log_probs_in_blocks(self, x: Tensor, temperature: float, out: Optional[Tensor]) -> Tensor:
        """``_log_probs`` of blocks of rows of ``x`` (``LOG_PROBS_BLOCK_BYTES``), each written
        into ``out`` (its first rows; a new tensor where None)."""
        rows = x.size(0)
        if out is None:
            log_probs = x.new_empty(rows, self.vocabulary, dtype=torch.float32)
        else:
            log_probs = out[:rows]
        block = max(1, LOG_PROBS_BLOCK_BYTES // (4 * self.vocabulary))
        for start in range(0, rows, block):
            self._log_probs(x[start : start + block], temperature, log_probs[start : start + block])
        return log_probs

    def _log_probs(self, x: Tensor, temperature: float, out: Optional[Tensor] = None) -> Tensor:
        """Log-probabilities (rows, vocabulary), float32, of the last layer's output ``x``."""
        logits = self.output_projection(x)
        if temperature != 1.0:
            logits = logits / temperature
        return torch.log_softmax(logits, dim=-1, dtype=torch.float32, out=out)


def _optional_linear(module: Optional[nn.Module]) -> Optional[nn.Linear]:
    return None if module is None else copy_linear(module)
