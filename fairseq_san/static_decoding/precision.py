"""Reduced-precision decoder steps on the CPU: bf16 weights and activations, or int8 linear layers.

* ``bf16``: the step's weights, activations and self-attention caches in bfloat16 (matmuls on
  AVX512-BF16 or AMX where the processor has them; log-probabilities and AAN sums stay float32).
* ``int8``: every linear layer of the step (projections, FFN, output projection) quantized with
  torch's dynamic quantization: int8 weights per output channel, activations quantized per call
  (VNNI); everything else stays float32.

Only the step is converted; the model, and its encoder (run once per sentence), stay as loaded.
"""

import torch
from torch import nn

from fairseq_san.static_decoding.errors import StaticDecoderError

PRECISIONS = ("fp32", "bf16", "int8")


def apply_precision(step: nn.Module, precision: str) -> nn.Module:
    """``step`` converted in place to ``precision`` (one of PRECISIONS)."""
    if precision == "fp32":
        return step
    if precision == "bf16":
        return step.to(torch.bfloat16)
    if precision == "int8":
        if step.dtype != torch.float32:
            raise StaticDecoderError("--san-decoder-precision int8 with a model that is not float32")
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

        return quantize_dynamic(
            step, {nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8, inplace=True
        )
    raise StaticDecoderError(f"--san-decoder-precision {precision} (choose from {PRECISIONS})")
