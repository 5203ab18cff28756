"""How the step's linear layers compute on the CPU: packed weights, and reduced precision.

Every linear layer of the step (projections, FFN, output projection), where nearly all of its
arithmetic is, runs on a weight reordered once into oneDNN's blocked layout (``PackedLinear``):
what torch.compile's CPU backend does with frozen weights. ``nn.Linear`` hands MKL the plain
matrix, which is re-blocked at every call; with the same float32 arithmetic, packing took the
static decoder from 1.16x to 1.50-1.54x fairseq's speed (docs/results/cpu-yardstick, beam 4,
2 cores). Packing needs oneDNN (torch's CPU builds have it); a GPU step is left as it is.

Precisions are the rows of ``PRECISIONS`` (what the step, ``--san-decoder-precision``'s help,
the benchmark and its step timer read): attention, layer norms, residuals and caches stay
float32 except in ``bf16-full``. bfloat16 products use AVX512-BF16 or AMX where the processor has
them; int8 is torch's dynamic quantization (VNNI). A CPU without AVX-512 has no oneDNN bfloat16
kernels: torch's generic ones there are several times slower than fp32, so the bfloat16 rows
log a warning (``warn_if_slower_than_fp32``; measured:
docs/results/cpu-yardstick/avx2-2026-11-28); so do they where oneDNN emulates bfloat16 (AVX-512
without AVX512-BF16 or AMX, ``bfloat16_emulated``: about half fp32's speed, measured:
docs/results/cpu-yardstick/icelake-2026-12-04). ``bf16-fp32-logits`` exists because the logits
decide beam search, and bfloat16's 8-bit mantissa moves them enough to change the best
hypothesis of many sentences (measured: docs/results/cpu-yardstick).

A reduced precision also applies to the encoder's linear layers (``convert_encoder``), on a copy:
the encoder runs once per sentence, but at int8 its float32 matrix products had become a fifth of
a whole decode (docs/results/cpu-yardstick, profile of the static rows), and CTranslate2's int8,
the yardstick's peer, quantizes its encoder too. Its activations stay float32; at fp32 the
generator runs the model's own encoder (fairseq's outputs exactly). The model stays as loaded.
"""

from dataclasses import dataclass
from typing import Callable, Dict, Optional, Sequence, Tuple

import copy
import logging

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fairseq_san.static_decoding.errors import StaticDecoderError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Precision:
    """A precision of the step: the dtype its linear layers compute in (None: the model's own)
    and its output projection's, whether the whole step is cast, the devices it runs on, the
    ``matmul_peak`` key that bounds its arithmetic (benchmark.machine) and what it casts."""

    name: str
    linear: Optional[torch.dtype]
    logits: Optional[torch.dtype]
    cast: str
    whole_step: bool = False
    quantized: bool = False
    devices: Tuple[str, ...] = ("cpu", "cuda")
    peak: str = "fp32"


PRECISIONS: Dict[str, Precision] = {
    row.name: row
    for row in (
        Precision("fp32", None, None, "float32 weights and activations"),
        Precision(
            "bf16", torch.bfloat16, torch.bfloat16,
            "bfloat16 weights; each linear layer's input cast to bfloat16, its product back to "
            "float32, the bias added in float32", peak="bf16",
        ),
        Precision(
            "bf16-fp32-logits", torch.bfloat16, torch.float32,
            "bf16 but the output projection in float32 (closer to fp32's translations)",
            peak="bf16",
        ),
        Precision(
            "bf16-full", torch.bfloat16, torch.bfloat16,
            "every weight, activation and cache of the step in bfloat16; attention softmax, AAN "
            "sums and the final log-softmax in float32", whole_step=True, peak="bf16",
        ),
        Precision(
            "int8", torch.qint8, torch.qint8,
            "int8 weights per output channel, activations quantized per call with one scale "
            "for the whole batch (a sentence's translation depends on the sentences decoded "
            "beside it)",
            quantized=True, devices=("cpu",), peak="int8",
        ),
    )
}  # fmt: skip


def precision_help() -> str:
    """``--san-decoder-precision``'s help: one clause per row of PRECISIONS."""
    rows = "; ".join(
        f"{row.name}: {row.cast}" + ("" if "cuda" in row.devices else " (CPU only)")
        for row in PRECISIONS.values()
    )
    return (
        "--san-decoding static: the precision of the linear layers of the decoder step (and, "
        f"below fp32, of the encoder). {rows}"
    )


class PackedLinear(nn.Module):
    """A Linear computed in ``dtype`` on a weight packed once for oneDNN (see module doc).

    An input of another dtype is cast to ``dtype`` and the product cast back, the bias then added
    in the input's dtype (the ``bf16`` precision); an input of ``dtype`` gets the bias fused.
    """

    def __init__(self, linear: nn.Linear, dtype: torch.dtype) -> None:
        super().__init__()
        self.dtype = dtype
        self.in_features, self.out_features = linear.in_features, linear.out_features
        # An opaque oneDNN tensor: a plain attribute, neither parameter nor buffer (it cannot be
        # moved or saved; the step is built where it runs and never saved).
        self.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach().to(dtype))
        bias = linear.bias
        self.bias: Optional[Tensor] = None if bias is None else bias.detach()

    def flops(self, x: Tensor) -> int:
        """Multiply-add FLOPs (2 each) of ``self(x)``, as torch's FlopCounterMode counts addmm."""
        return 2 * (x.numel() // self.in_features) * self.in_features * self.out_features

    def forward(self, x: Tensor) -> Tensor:
        if x.dtype == self.dtype:  # the bias has the weight's dtype here (fp32, bf16-full)
            return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")
        y = torch.ops.mkldnn._linear_pointwise(x.to(self.dtype), self.packed, None, "none", [], "")
        y = y.to(x.dtype)
        return y if self.bias is None else y + self.bias


class BFloat16Linear(nn.Module):
    """A float32-in, float32-out Linear whose matrix product runs in bfloat16 (without oneDNN)."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.weight = nn.Parameter(linear.weight.detach().to(torch.bfloat16))
        bias = linear.bias
        self.bias = None if bias is None else nn.Parameter(bias.detach().float())
        self.requires_grad_(False)

    def forward(self, x: Tensor) -> Tensor:
        y = F.linear(x.to(torch.bfloat16), self.weight).float()
        return y if self.bias is None else y + self.bias


def can_pack(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether ``PackedLinear`` runs here: a CPU with oneDNN (and its bfloat16 kernels for bf16)."""
    if device.type != "cpu" or dtype not in (torch.float32, torch.bfloat16):
        return False
    if not torch.backends.mkldnn.is_available():
        return False
    return dtype != torch.bfloat16 or torch.ops.mkldnn._is_mkldnn_bf16_supported()


def replace_linears(
    module: nn.Module, make: Callable[[nn.Linear], nn.Module], skip: Sequence[str] = ()
) -> nn.Module:
    """Replace, in place, every nn.Linear below ``module`` by ``make(linear)``, but the children
    of ``module`` named in ``skip`` (converted otherwise: the step's output projection)."""
    for name, child in module.named_children():
        if name in skip:
            continue
        if type(child) is nn.Linear:
            setattr(module, name, make(child))
        else:
            replace_linears(child, make)
    return module


def to_bfloat16_step(step: nn.Module) -> nn.Module:
    """The whole step in bfloat16, in place; the model's position module (which the step only
    calls once per batch, see ``StaticDecoderStep``) is left as it is."""
    for name, child in step.named_children():
        if name != "_positions_of":
            child.to(torch.bfloat16)
    for parameter in step.parameters(recurse=False):
        parameter.data = parameter.data.to(torch.bfloat16)
    for name, buffer in step.named_buffers(recurse=False):
        setattr(step, name, buffer.to(torch.bfloat16))
    return step


def apply_precision(step: nn.Module, precision: str, pack: bool = True) -> nn.Module:
    """``step`` converted in place to ``precision`` (a row of PRECISIONS), its linear layers
    packed where the device allows (see module doc) and ``pack`` asks (torch.compile packs its
    own: it cannot trace an opaque oneDNN weight)."""
    row = PRECISIONS.get(str(precision))  # fairseq's ChoiceEnum member or a plain string
    if row is None:
        raise StaticDecoderError(
            f"--san-decoder-precision {precision}",
            f"choose --san-decoder-precision from {tuple(PRECISIONS)}",
        )
    if row.linear is not None and step.dtype != torch.float32:
        raise StaticDecoderError(
            f"--san-decoder-precision {precision} with a model not float32",
            "--san-decoder-precision fp32 decodes it in its own precision",
        )
    device = step.embed_tokens.device
    if row.quantized:
        return quantize_linears(step, row)
    if row.whole_step:
        step = to_bfloat16_step(step)
    dtype = row.linear or step.dtype
    output_projection = linear_kernel(row.logits or dtype, device, pack)(step.output_projection)
    replace_linears(step, linear_kernel(dtype, device, pack), skip=("output_projection",))
    step.output_projection = output_projection
    return step


def quantize_linears(module: nn.Module, row: Precision) -> nn.Module:
    """Every nn.Linear below ``module`` dynamically quantized to ``row.linear``, per output
    channel, in place (torch's dynamic quantization: int8 weights, activations per call).

    torch.ao.quantization is deprecated in favour of torchao, whose int8 was slower here
    (docs/results/static-compile: the whole step, and each linear layer); a torch without it
    gets one StaticDecoderError, not an ImportError from inside the generator."""
    try:
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic
    except ImportError as error:
        reduced = [
            name for name, other in PRECISIONS.items() if other.linear and not other.quantized
        ]
        raise StaticDecoderError(
            f"--san-decoder-precision int8 on torch {torch.__version__}, which no longer has "
            "torch.ao's dynamic quantization",
            f"choose --san-decoder-precision {' or '.join(reduced)}",
        ) from error

    qconfig = {nn.Linear: per_channel_dynamic_qconfig}
    return quantize_dynamic(module, qconfig, dtype=row.linear, inplace=True)


def convert_encoder(encoder: nn.Module, precision: str, pack: bool = True) -> nn.Module:
    """The encoder the static decoder runs at ``precision`` (see module doc): the model's own at
    fp32; else a copy whose linear layers compute as the step's do (int8 quantized, bfloat16
    products; bf16-full's too), its activations float32."""
    row = PRECISIONS[str(precision)]
    if row.linear is None:
        return encoder
    converted = copy.deepcopy(encoder)
    for module in converted.modules():
        if hasattr(module, "skip_embed_dim_check"):  # fairseq's MultiheadAttention: its fused
            module.skip_embed_dim_check = True  # path reads the projections' weights, not them
    if row.quantized:
        return quantize_linears(converted, row)
    device = next(converted.parameters()).device
    return replace_linears(converted, linear_kernel(row.linear, device, pack))


def check_device(precision: str, device: torch.device) -> None:
    """StaticDecoderError for a precision that does not run on ``device`` (int8 on a GPU)."""
    row = PRECISIONS.get(str(precision))
    if row is not None and device.type not in row.devices:
        only = " or ".join(name.upper() for name in row.devices)
        here = [name for name, other in PRECISIONS.items() if device.type in other.devices]
        on = "on a GPU" if device.type == "cuda" else f"on {device.type.upper()}"
        raise StaticDecoderError(
            f"--san-decoder-precision {precision} {on} ({only} only)",
            f"choose --san-decoder-precision {' or '.join(here)} {on}",
        )


def check_compiled_precision(precision: str, compiles: bool) -> None:
    """StaticDecoderError for a quantized precision (int8) in a compiled step: torch.ao's
    quantized linear layers keep their packed weights in a TorchScript object, which torch.compile
    cannot trace (with ``fullgraph=True`` a traceback from inside dynamo)."""
    row = PRECISIONS.get(str(precision))
    if row is not None and row.quantized and compiles:
        raise StaticDecoderError(
            f"--san-decoder-precision {precision} in a compiled step (torch.compile cannot trace "
            "torch.ao's quantized linear layers)",
            f"choose the execution eager or fixed for {precision}, or another precision",
        )


def bfloat16_emulated(device: torch.device) -> bool:
    """Whether oneDNN's bfloat16 kernels run here without bfloat16 instructions: an x86 CPU with
    AVX-512 but neither AVX512-BF16 nor AMX (Intel Ice Lake), where they convert to float32 and
    back and run at about half fp32's speed (docs/results/cpu-yardstick/icelake-2026-12-04)."""
    if not can_pack(device, torch.bfloat16):
        return False
    x86 = torch.backends.cpu.get_cpu_capability().startswith("AVX")
    native = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    return x86 and not native


def warn_if_slower_than_fp32(precision: str, device: torch.device) -> None:
    """Log a warning where a bfloat16 precision runs on a CPU without oneDNN's bfloat16 kernels,
    or with kernels that emulate bfloat16 (see module doc): the user asked for speed and would
    get a slower decoder."""
    row = PRECISIONS.get(str(precision))
    if row is None or row.peak != "bf16" or device.type != "cpu":
        return
    capability = torch.backends.cpu.get_cpu_capability()
    if not can_pack(device, torch.bfloat16):
        cpu = f"without bfloat16 kernels (torch's CPU capability: {capability}; oneDNN's need "
        cpu += "AVX-512 or AMX)"
    elif bfloat16_emulated(device):
        cpu = f"without bfloat16 instructions (torch's CPU capability: {capability}, without "
        cpu += "AVX512-BF16 or AMX: oneDNN emulates them)"
    else:
        return
    logger.warning(
        f"--san-decoder-precision {precision} on a CPU {cpu}: its products run slower than at "
        "fp32 here; --san-decoder-precision int8 or fp32 decode faster"
    )


def linear_kernel(
    dtype: torch.dtype, device: torch.device, pack: bool = True
) -> Callable[[nn.Linear], nn.Module]:
    """What a linear layer of the step becomes to compute in ``dtype`` on ``device``: a
    PackedLinear where oneDNN runs (and ``pack``), else a BFloat16Linear for a float32 layer
    computing in bfloat16, else itself (a layer already in ``dtype``: ``bf16-full``)."""
    if pack and can_pack(device, dtype):
        return lambda linear: PackedLinear(linear, dtype)
    return lambda linear: linear if linear.weight.dtype == dtype else BFloat16Linear(linear)
