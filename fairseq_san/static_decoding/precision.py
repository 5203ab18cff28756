"""Reduced-precision decoder steps on the CPU: bf16 weights and activations, or int8 linear layers.

``bf16`` and ``int8`` change only the linear layers of the step (projections, FFN, output
projection), where nearly all of its arithmetic is; attention, layer norms, residuals and caches
stay float32. ``bf16-full`` runs the whole step in bfloat16:

* ``bf16``: bfloat16 weights, the input cast to bfloat16 and the product back to float32, the
  bias added in float32 (AVX512-BF16 or AMX where the processor has them);
* ``int8``: torch's dynamic quantization: int8 weights per output channel, activations quantized
  per call (VNNI);
* ``bf16-full``: every weight, activation and cache of the step in bfloat16 (no cast around each
  linear layer, half the cache traffic); attention softmax, AAN sums and the final log-softmax
  stay float32, as in a bf16 fairseq model.

Only the step is converted; the model, and its encoder (run once per sentence), stay as loaded.
"""

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fairseq_san.static_decoding.errors import StaticDecoderError

PRECISIONS = ("fp32", "bf16", "bf16-full", "int8")


class BFloat16Linear(nn.Module):
    """A float32-in, float32-out Linear whose matrix product runs in bfloat16."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.weight = nn.Parameter(linear.weight.detach().to(torch.bfloat16))
        bias = linear.bias
        self.bias = None if bias is None else nn.Parameter(bias.detach().float())
        self.requires_grad_(False)

    def forward(self, x: Tensor) -> Tensor:
        y = F.linear(x.to(torch.bfloat16), self.weight).float()
        return y if self.bias is None else y + self.bias


def to_bfloat16_linears(module: nn.Module) -> nn.Module:
    """Replace, in place, every nn.Linear below ``module`` by a BFloat16Linear."""
    for name, child in module.named_children():
        if type(child) is nn.Linear:
            setattr(module, name, BFloat16Linear(child))
        else:
            to_bfloat16_linears(child)
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


def apply_precision(step: nn.Module, precision: str) -> nn.Module:
    """``step`` converted in place to ``precision`` (one of PRECISIONS)."""
    if precision == "fp32":
        return step
    if step.dtype != torch.float32:
        raise StaticDecoderError(
            f"--san-decoder-precision {precision} with a model that is not float32"
        )
    if precision == "bf16":
        return to_bfloat16_linears(step)
    if precision == "bf16-full":
        return to_bfloat16_step(step)
    if precision == "int8":
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

        return quantize_dynamic(
            step, {nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8, inplace=True
        )
    raise StaticDecoderError(f"--san-decoder-precision {precision} (choose from {PRECISIONS})")
