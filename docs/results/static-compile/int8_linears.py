"""Which int8 linear layer is fastest on this CPU for the static decoder's shapes: the shipped one
(torch.ao's deprecated dynamic quantized linear, fbgemm) or one of torchao's?

    python docs/results/static-compile/int8_linears.py [--threads 2] [--rounds 7]

Needs torchao (``pip install torchao``; not a dependency of the plugin: its int8 is not used).

``torchao_int8.py`` compared whole steps (torch.ao against torchao's ``quantize_``). This script
adds the path torchao documents for x86 CPUs with torch.compile (pt2e: ``X86InductorQuantizer``,
dynamic, lowered by inductor to oneDNN's int8 linear) and weight-only int8, on the linear layers
alone, so that a slower compiled step cannot hide a faster int8 kernel. Two modules of
``transformer_san_small`` (256 dims, FFN 1024, 7,796 words: Multi30k En-De's dictionary):

* ``layer``: one decoder layer's linear layers in a row (self-attention q, k, v, out; encoder
  attention q, out; fc1, ReLU, fc2), so a compiled module pays its call overhead once per layer,
  as a compiled step pays it once per 6 layers;
* ``output``: the output projection (256 -> 7,796).

Rows: 64 (batch 16, beam 4) and 320 (beam 20). Every candidate is timed in every round, in turn;
prints microseconds per call, the median over rounds, and the largest difference from fp32.
"""

import argparse
import copy
import statistics
import time
import warnings
from typing import Callable, Dict

import torch
from torch import nn

EMBED, FFN, VOCAB = 256, 1024, 7796


def layer_linears() -> nn.Module:
    """A decoder layer's linear layers, in the order the step runs them."""
    square = [nn.Linear(EMBED, EMBED) for _ in range(6)]
    return nn.Sequential(*square, nn.Linear(EMBED, FFN), nn.ReLU(), nn.Linear(FFN, EMBED)).eval()


def output_projection() -> nn.Module:
    return nn.Sequential(nn.Linear(EMBED, VOCAB, bias=False)).eval()


def shipped_int8(module: nn.Module, x: torch.Tensor) -> Callable:
    """What ``precision.quantize_linears`` does (per-channel weights, fbgemm)."""
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    qconfig = {nn.Linear: per_channel_dynamic_qconfig}
    return quantize_dynamic(copy.deepcopy(module), qconfig, dtype=torch.qint8)


def torchao_int8(module: nn.Module, x: torch.Tensor, compile_it: bool) -> Callable:
    """torchao's ``quantize_`` with int8 weights per channel, activations per token."""
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_

    converted = copy.deepcopy(module)
    quantize_(converted, Int8DynamicActivationInt8WeightConfig())
    return torch.compile(converted, fullgraph=True, dynamic=False) if compile_it else converted


def torchao_pt2e_x86(module: nn.Module, x: torch.Tensor) -> Callable:
    """torchao's pt2e flow for x86 (export, ``X86InductorQuantizer`` dynamic, convert), compiled:
    inductor fuses the quantize/linear pattern into oneDNN's int8 linear."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as x86

    quantizer = x86.X86InductorQuantizer()
    quantizer.set_global(x86.get_default_x86_inductor_quantization_config(is_dynamic=True))
    exported = torch.export.export(copy.deepcopy(module), (x,)).module()
    prepared = prepare_pt2e(exported, quantizer)
    prepared(x)
    return torch.compile(convert_pt2e(prepared), fullgraph=True, dynamic=False)


def torchao_weight_only_bf16(module: nn.Module, x: torch.Tensor) -> Callable:
    """torchao's int8 weight-only linear (``_weight_int8pack_mm``) on bfloat16 activations."""
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    converted = copy.deepcopy(module).to(torch.bfloat16)
    quantize_(converted, Int8WeightOnlyConfig())
    return lambda x: converted(x.to(torch.bfloat16)).float()


def candidates(module: nn.Module, x: torch.Tensor) -> Dict[str, Callable]:
    return {
        "fp32": module,
        "int8 torch.ao (shipped)": shipped_int8(module, x),
        "int8 torchao quantize_, eager": torchao_int8(module, x, compile_it=False),
        "int8 torchao quantize_, compiled": torchao_int8(module, x, compile_it=True),
        "int8 torchao pt2e x86, compiled": torchao_pt2e_x86(module, x),
        "int8 weight-only torchao, bf16": torchao_weight_only_bf16(module, x),
    }


def time_call(run: Callable, x: torch.Tensor, calls: int) -> float:
    """Microseconds per call of ``run(x)``, over ``calls`` calls."""
    start = time.perf_counter()
    for _ in range(calls):
        run(x)
    return (time.perf_counter() - start) / calls * 1e6


def measure(name: str, module: nn.Module, rows: int, rounds: int) -> None:
    x = torch.randn(rows, EMBED)
    with torch.no_grad():
        runs = candidates(module, x)
        reference = module(x)
        error = {key: (run(x).float() - reference).abs().max().item() for key, run in runs.items()}
        for run in runs.values():  # warm-up (compilation, packing)
            time_call(run, x, 10)
        times: Dict[str, list] = {key: [] for key in runs}
        for _ in range(rounds):
            for key, run in runs.items():
                times[key].append(time_call(run, x, 50))
    shipped = statistics.median(times["int8 torch.ao (shipped)"])
    for key, values in times.items():
        median = statistics.median(values)
        print(f"| {name} | {rows} | {key} | {median:,.0f} | {median / shipped:.2f} | "
              f"{error[key]:.3f} |", flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    import torch._inductor.config as inductor_config

    inductor_config.freezing = True  # as the compiled step (execution.compiled)
    inductor_config.cpp.weight_prepack = True
    print(f"{args.threads} threads, {args.rounds} rounds of 50 calls; torch {torch.__version__}\n")
    print("| module | rows | linear | us/call (median) | / shipped | max abs diff from fp32 |")
    print("| --- | ---: | --- | ---: | ---: | ---: |")
    for rows in (64, 320):
        measure("layer", layer_linears(), rows, args.rounds)
        measure("output", output_projection(), rows, args.rounds)


if __name__ == "__main__":
    main()
