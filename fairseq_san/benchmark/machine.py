"""The machine a benchmark ran on: processor model and the instruction sets that decide which
precisions are fast (AVX-512 VNNI and AMX for int8 and bf16), torch's CPU kernels, the GPU, and
the arithmetic bound of each precision (``matmul_peak``), and the memory bandwidth
(``copy_bandwidth``)."""

import datetime
import os
import platform
from typing import Callable, Dict, Iterable, List, Optional, Tuple

import torch

from fairseq_san.benchmark.timing import clock
from fairseq_san.cores import available_cores

# Processor flags (/proc/cpuinfo) that decide the speed of fp32, bf16 and int8 matmuls.
CPU_FLAGS = (
    "avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8",
)  # fmt: skip


def choose_device(name: str, fp16: bool) -> torch.device:
    """The benchmark's device: cuda (``--gpu``), cpu, or auto (a GPU where torch has one);
    ValueError where the machine has no GPU for ``--gpu`` or ``fp16``."""
    if name == "cuda" or (name == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise ValueError("--gpu: CUDA is not available")
        return torch.device("cuda")
    if fp16:
        raise ValueError("--fp16 needs a GPU, and CUDA is not available")
    return torch.device("cpu")


def processor() -> Tuple[str, List[str], str]:
    """(model name, the CPU_FLAGS it has, its identity) from /proc/cpuinfo; the platform's name
    elsewhere. The identity (``family 25, model 17, stepping 1, 2596 MHz``) tells apart two hosts
    that a virtual machine names alike ("AMD EPYC"), whose speeds differ."""
    model, flags, fields = platform.processor() or platform.machine(), set(), {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key == "model name":
                    model = value
                elif key in ("cpu family", "model", "stepping", "cpu MHz"):
                    fields[key] = value
                elif key == "flags":
                    flags = set(value.split())
                    break
    except OSError:
        pass
    return model, [flag for flag in CPU_FLAGS if flag in flags], processor_identity(fields)


def processor_identity(fields: Dict[str, str]) -> str:
    """``family F, model M, stepping S, N MHz`` from /proc/cpuinfo's fields, those it has."""
    parts = [f"{name} {fields[key]}" for key, name in
             (("cpu family", "family"), ("model", "model"), ("stepping", "stepping"))
             if key in fields]  # fmt: skip
    if "cpu MHz" in fields:
        parts.append(f"{float(fields['cpu MHz']):.0f} MHz")
    return ", ".join(parts)


# The kernel's transparent huge pages mode: [always], [madvise] (where a program asks) or [never].
KERNEL_THP = "/sys/kernel/mm/transparent_hugepage/enabled"


def huge_pages() -> str:
    """Whether torch backs its large CPU buffers (2 MB and more) with 2 MB pages: torch's own
    switch ``THP_MEM_ALLOC_ENABLE`` (1: madvise them), read by every engine's process, and the
    kernel's mode. Each first write of a fresh 4 KiB page is a fault, tens to thousands a decoder
    step on a 2-core VM, fewer or more with the switch (docs/results/cpu-yardstick/thp-2026-11-29):
    a report says which setting it ran with."""
    switch = os.environ.get("THP_MEM_ALLOC_ENABLE", "unset")
    try:
        with open(KERNEL_THP, encoding="utf-8") as handle:
            modes = handle.read().split()
        kernel = next((mode.strip("[]") for mode in modes if mode.startswith("[")), "unknown")
    except OSError:
        kernel = "unknown"
    return f"THP_MEM_ALLOC_ENABLE={switch}, kernel transparent huge pages {kernel}"


def machine_info(device: torch.device) -> Dict:
    """What a report names of the machine: date, processor, GPU, library versions, load."""
    import fairseq
    import sacrebleu

    cpu, flags, identity = processor()
    info = {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "cpu": cpu,
        "cpu_identity": identity,
        "cpu_flags": flags,
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "huge_pages": huge_pages(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": available_cores(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "fairseq": getattr(fairseq, "__version__", "unknown"),
        "sacrebleu": sacrebleu.__version__,
        "device": str(device),
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
        info["cuda"] = torch.version.cuda
    return info


def matmul_peak(
    device: torch.device, precisions: Optional[Iterable[str]] = None
) -> Dict[str, float]:
    """GFLOP/s of one large square matrix product per precision (all where ``precisions`` is
    None), at this process's threads: the arithmetic bound of a decoder step, whose products are
    smaller and reach less of it.

    fp32 and bf16 (and fp16 on a GPU) are torch's matmul; int8 on the CPU is the dynamically
    quantized linear layer that the static decoder's int8 step uses.
    """
    size = 1024 if device.type == "cpu" else 8192
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    if device.type == "cuda":
        dtypes["fp16"] = torch.float16
    wanted = set(precisions) if precisions is not None else {*dtypes, "int8"}
    peaks = {}
    selected = {name: dtype for name, dtype in dtypes.items() if name in wanted}
    for name, dtype in selected.items():
        a, b = (torch.randn(size, size, device=device).to(dtype) for _ in range(2))
        peaks[name] = _gflops(lambda: torch.mm(a, b), size, device)
    int8_available = device.type == "cpu" and "fbgemm" in torch.backends.quantized.supported_engines
    if "int8" in wanted and int8_available:
        from torch.ao.nn.quantized.dynamic import Linear as DynamicInt8Linear

        linear, x = DynamicInt8Linear(size, size), torch.randn(size, size)
        peaks["int8"] = _gflops(lambda: linear(x), size, device)
    return peaks


def copy_bandwidth(device: torch.device) -> float:
    """GB/s of one large tensor copy (bytes read plus bytes written): the bound of a step that
    must read every weight once."""
    numel = (256 if device.type == "cuda" else 32) * 2**20
    source, target = torch.ones(numel, device=device), torch.empty(numel, device=device)
    seconds = _best_seconds(lambda: target.copy_(source), device)
    return 2 * numel * source.element_size() / seconds / 1e9


def _gflops(product: Callable[[], object], size: int, device: torch.device) -> float:
    """GFLOP/s of ``product`` (size x size by size x size)."""
    return 2 * size**3 / _best_seconds(product, device) / 1e9


def _best_seconds(
    work: Callable[[], object], device: torch.device, budget_s: float = 1.0
) -> float:
    """Seconds of ``work`` on ``device``: the best of 5 after 2 warm-ups, or of fewer where they
    would take more than ``budget_s`` (one run of a slow product, such as bf16 on a processor
    without bf16 instructions, already takes seconds and varies little)."""
    warm_up = _seconds(work, device)
    if warm_up < budget_s:
        work()
    best, spent = float("inf"), 0.0
    for _ in range(5):
        seconds = _seconds(work, device)
        best, spent = min(best, seconds), spent + seconds
        if spent > budget_s:
            break
    return best


def _seconds(work: Callable[[], object], device: torch.device) -> float:
    start = clock(device)
    work()
    return clock(device) - start
