"""``fairseq-san-bench steps``: ms per decoder step of fairseq's SequenceGenerator against the
static decoder at each of its precisions (``--san-decoding static``), for profiling.

Random-weight models (no checkpoint needed), fixed-length decoding (min_len = max_len = L, so
every system does the same number of steps), random source sentences. Configurations are timed
interleaved, round after round, in one process, so that a busy machine slows them alike; the
table gives the median over rounds and the ratio to the first row of the same round (fairseq's
generator on the first of ``--policies`` where ``--decoders`` starts with it, as by default),
and each row's page faults per step (a step that faults its buffers in again is slower in this
process than in another: read them before a row's speed).

    fairseq-san-bench steps [--arch transformer_san_small] [--beam 4]
        [--batch 16] [--length 20] [--rounds 5] [--threads 2] [--profile]
        [--decoders fairseq static-fp32 static-fp32-compile ...] [--policies baseline san-6-6]
        [--device cpu|cuda] [--dtype fp32|fp16|bf16]

``--profile`` prints torch.profiler's top operators for one batch of each configuration and how
far a position is from its bound (``position_bound``): the time it takes against the time its
matrix products need at the device's measured matmul peak, or its decoder weights at the
measured copy bandwidth, whichever is longer.
"""

import argparse
import resource
import statistics
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple, Union

import torch

from fairseq import options
from fairseq.data import Dictionary
from fairseq.sequence_generator import SequenceGenerator
from fairseq_san.benchmark.fairseq_system import max_output_tokens
from fairseq_san.benchmark.machine import copy_bandwidth, machine_info, matmul_peak
from fairseq_san.benchmark.meters import matmul_flops
from fairseq_san.benchmark.report import huge_pages_clause, processor_line
from fairseq_san.cli import DefaultsHelpFormatter
from fairseq_san.cores import threads_problem
from fairseq_san.errors import repeated
from fairseq_san.models.transformer_san import TransformerSANModel
from fairseq_san.options import flag_of, has_aan_decoder
from fairseq_san.static_decoding import StaticSequenceGenerator
from fairseq_san.static_decoding.execution import EXECUTIONS
from fairseq_san.static_decoding.precision import PRECISIONS

POLICIES = {
    "baseline": [],
    "san-6-6": ["--san-decoder-self-policy", "6", "--san-decoder-encdec-policy", "6"],
}
# The static decoder at each (precision, execution) of its tables: static-PRECISION for the
# eager step, static-PRECISION-EXECUTION for another execution (static-fp32-compile).
SUFFIX = {execution: "" if execution == "eager" else f"-{execution}" for execution in EXECUTIONS}


def devices_of(precision: str, execution: str) -> Tuple[str, ...]:
    """The devices a precision runs on in an execution: both tables' (none for a quantized
    precision in a compiled step: precision.check_compiled_precision)."""
    if EXECUTIONS[execution].compiles and PRECISIONS[precision].quantized:
        return ()
    return tuple(d for d in EXECUTIONS[execution].devices if d in PRECISIONS[precision].devices)


STATIC_DECODERS = {  # the pairs that run on some device
    f"static-{precision}{SUFFIX[execution]}": (precision, execution)
    for execution in EXECUTIONS
    for precision in PRECISIONS
    if devices_of(precision, execution)
}
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def default_decoders(device: str, dtype: str = "fp32") -> List[str]:
    """fairseq's generator, then the eager static decoder at each precision ``device`` runs (at
    fp32 only for a model of another ``dtype``: the others cast or quantize an fp32 model)."""
    eager = [
        name
        for name, (precision, execution) in STATIC_DECODERS.items()
        if execution == "eager" and device in devices_of(precision, execution)
        and (dtype == "fp32" or precision == "fp32")
    ]
    return ["fairseq", *eager]


class StandInTask:
    """What ``build_model`` reads of a task: the dictionaries."""

    def __init__(self, dictionary: Dictionary):
        self.source_dictionary = self.target_dictionary = dictionary


def san_architectures() -> List[str]:
    """The named architectures of ``transformer_san`` (the policies' flags are its options)."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    return sorted(name for name, cls in ARCH_MODEL_REGISTRY.items() if cls is TransformerSANModel)


def build_model(arch: str, policy: List[str], dictionary: Dictionary):
    """A random-weight ``arch`` (seed 1) with the sharing flags ``policy``, in eval mode."""
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(
        parser, ["unused", "--task", "translation", "--arch", arch, *policy]
    )
    torch.manual_seed(1)
    return TransformerSANModel.build_model(args, StandInTask(dictionary)).eval()


def make_generator(
    decoder: str, model: TransformerSANModel, dictionary: Dictionary, beam: int, length: int
) -> Union[SequenceGenerator, StaticSequenceGenerator]:
    """A generator (fairseq or one of ``STATIC_DECODERS``) decoding exactly ``length`` tokens."""
    settings = dict(beam_size=beam, min_len=length, max_len_a=0, max_len_b=length)
    if decoder == "fairseq":
        return SequenceGenerator([model], dictionary, **settings)
    precision, execution = STATIC_DECODERS[decoder]
    return StaticSequenceGenerator(
        [model], dictionary, precision=precision, execution=execution, **settings
    )


def dictionary_of(size: int) -> Dictionary:
    """A dictionary of ``size`` symbols: fairseq's special ones, then w0, w1, ..."""
    dictionary = Dictionary()
    for index in range(size - len(dictionary)):
        dictionary.add_symbol(f"w{index}")
    return dictionary


def batches(dictionary: Dictionary, count: int, batch: int, source_length: int):
    """``count`` batches of random source sentences (seed 0), ``source_length`` tokens each."""
    generator = torch.Generator().manual_seed(0)
    for _ in range(count):
        tokens = torch.randint(
            dictionary.nspecial, len(dictionary), (batch, source_length), generator=generator
        )
        tokens[:, -1] = dictionary.eos()
        lengths = torch.full((batch,), source_length)
        yield {"net_input": {"src_tokens": tokens, "src_lengths": lengths}}


def minor_faults() -> int:
    """Page faults of this process so far that needed no disk (a freed buffer's pages given
    back to the kernel and touched again)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def time_rounds(
    configs: Dict, samples: List, rounds: int, steps: int
) -> Tuple[Dict[str, List[float]], Dict[str, List[float]]]:
    """(ms per step, page faults per step) of each generator of ``configs`` (name -> generator)
    decoding ``samples`` (``steps`` steps in all), after one warm-up batch each (printed: it
    holds any compilation), interleaved round after round: one value per round. The faults show
    a step that gives its buffers back to the kernel and faults them in again, which can cost a
    CPU step a third of its time in one process and nothing in another
    (docs/results/cpu-yardstick/host-memory-2026-11-30)."""
    times: Dict[str, List[float]] = {name: [] for name in configs}
    faults: Dict[str, List[float]] = {name: [] for name in configs}
    with torch.no_grad():
        for name, generator in configs.items():
            start = time.perf_counter()
            generator.generate(None, samples[0])
            print(f"{name:24s} warm-up {time.perf_counter() - start:7.1f} s", flush=True)
        for _ in range(rounds):
            for name, generator in configs.items():
                faulted, start = minor_faults(), time.perf_counter()
                for sample in samples:
                    generator.generate(None, sample)  # ends with a host sync (its n-best)
                times[name].append((time.perf_counter() - start) / steps * 1e3)
                faults[name].append((minor_faults() - faulted) / steps)
    return times, faults


@dataclass
class PositionBound:
    """What one decoder position needs at least, whatever the decoder."""

    gflop: float  # its matrix products (fairseq's generator: attention over written positions)
    weight_mb: float  # the decoder's weights, each read once
    peak_gflops: Optional[float]  # the device's measured matmul peak at the model's dtype
    bandwidth_gbs: float  # the device's measured copy bandwidth

    @property
    def ms(self) -> float:
        """The longer of the products at the peak and the weights at the bandwidth (GFLOP over
        GFLOP/s is seconds, MB over GB/s milliseconds)."""
        compute = self.gflop / self.peak_gflops * 1e3 if self.peak_gflops else 0.0
        return max(compute, self.weight_mb / self.bandwidth_gbs)

    def describe(self) -> str:
        """The bound and the products, weights and peaks it comes from, on one line."""
        peak = f"{self.peak_gflops:,.0f} GFLOP/s" if self.peak_gflops else "no measured peak"
        return (f"{self.gflop:.3f} GFLOP at {peak}, {self.weight_mb:.1f} MB of decoder weights at "
                f"{self.bandwidth_gbs:,.1f} GB/s: {self.ms:.4f} ms")  # fmt: skip


def position_bound(
    model, dictionary, sample: dict, beam: int, length: int, peak_gflops: Optional[float],
    bandwidth_gbs: float,
) -> PositionBound:  # fmt: skip
    """The bound of one position of ``model`` on a device of these peaks: the matrix-multiply
    FLOPs of fairseq's generator decoding ``sample`` (the encoder's, run once per batch,
    included) over its positions, and the bytes of the decoder's parameters (tied ones once)."""
    generator = make_generator("fairseq", model, dictionary, beam, length)
    with torch.no_grad():
        flops, _ = matmul_flops(lambda: generator.generate(None, sample))
    weights = sum(p.numel() * p.element_size() for p in model.decoder.parameters())
    return PositionBound(
        gflop=flops / (length + 1) / 1e9,
        weight_mb=weights / 1e6,
        peak_gflops=peak_gflops,
        bandwidth_gbs=bandwidth_gbs,
    )


def build_parser() -> argparse.ArgumentParser:
    """The options of ``fairseq-san-bench steps``."""
    parser = argparse.ArgumentParser(
        prog="fairseq-san-bench steps", description=" ".join(__doc__.split("\n\n")[0].split()),
        formatter_class=DefaultsHelpFormatter,
    )
    parser.add_argument("--arch", default="transformer_san_small", choices=san_architectures(),
                        help="the model, with random weights")  # fmt: skip
    parser.add_argument("--vocab", type=int, default=8000, help="dictionary size")
    parser.add_argument("--beam", type=int, default=4, help="beam size")
    parser.add_argument("--batch", type=int, default=16, help="sentences per batch")
    parser.add_argument("--batches", type=int, default=2, help="random batches timed per round")
    parser.add_argument("--length", type=int, default=20,
                        help="tokens each hypothesis is forced to decode")  # fmt: skip
    parser.add_argument("--source-length", type=int, default=16, help="tokens per source sentence")
    parser.add_argument("--rounds", type=int, default=5,
                        help="timed rounds, interleaved across the decoders")  # fmt: skip
    parser.add_argument("--threads", type=int, default=2, help="torch's CPU threads")
    parser.add_argument(
        "--decoders", nargs="+", choices=["fairseq", *STATIC_DECODERS],
        help="default: fairseq and the eager static decoder at each precision of --device "
        "(fp32 only with another --dtype)",
    )  # fmt: skip
    parser.add_argument("--policies", nargs="+", choices=list(POLICIES),
                        help="default: all; baseline alone for an AAN --arch")  # fmt: skip
    parser.add_argument(
        "--device", default="cpu", choices=["cpu", "cuda"], help="static-*-graph: cuda only"
    )
    parser.add_argument("--dtype", default="fp32", choices=list(DTYPES), help="the model's")
    parser.add_argument(
        "--profile", action="store_true",
        help="also print torch.profiler's top operators and each model's bound per position",
    )  # fmt: skip
    return parser


def main(argv: Optional[List[str]] = None) -> None:
    """Time each policy's random-weight model under each decoder (``--decoders``) on random
    batches, and print the times (and with ``--profile`` the profiles)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    args.decoders = args.decoders or default_decoders(args.device, args.dtype)
    args.policies = args.policies or default_policies(args.arch)
    problem = argument_problem(args)
    if problem:
        parser.error(problem)
    torch.set_num_threads(args.threads)
    dictionary = dictionary_of(args.vocab)
    samples = [
        {"net_input": {k: v.to(args.device) for k, v in sample["net_input"].items()}}
        for sample in batches(dictionary, args.batches, args.batch, args.source_length)
    ]
    configs, models = {}, {}
    for policy in args.policies:
        models[policy] = build_model(args.arch, POLICIES[policy], dictionary)
        models[policy] = models[policy].to(args.device, DTYPES[args.dtype])
        problem = length_problem(models[policy], args)
        if problem:
            parser.error(problem)
        for decoder in args.decoders:
            configs[f"{policy} {decoder}"] = make_generator(
                decoder, models[policy], dictionary, args.beam, args.length
            )
    times, faults = time_rounds(configs, samples, args.rounds, args.batches * (args.length + 1))
    print_times(times, faults, args)
    if args.profile:
        print_profiles(configs, models, times, dictionary, samples[0], args)


def print_times(
    times: Dict[str, List[float]], faults: Dict[str, List[float]], args: argparse.Namespace
) -> None:
    """The processor, the settings, then ms per step, the speed-up over the first row and the
    page faults per step."""
    reference = times[next(iter(times))]
    machine = machine_info(torch.device(args.device))
    gpu = f", {machine['gpu']}" if "gpu" in machine else ""
    pages = huge_pages_clause(machine)
    print(f"Processor: {processor_line(machine)}{gpu}; torch {machine['torch']}{pages}")
    print(f"{args.arch} {weights_of(args.dtype)}, beam {args.beam}, batch {args.batch}, "
          f"L={args.length}, {args.threads} threads, {args.rounds} rounds; ms per step (median), "
          "speed-up over the first row (median of per-round ratios), page faults per step "
          "(median)")  # fmt: skip
    for name, values in times.items():
        ratio = statistics.median(r / v for r, v in zip(reference, values))
        print(f"{name:24s} {statistics.median(values):7.2f} ms/step  {ratio:5.2f}x  "
              f"{statistics.median(faults[name]):7,.0f} page faults/step")  # fmt: skip


def weights_of(dtype: str) -> str:
    """The model's weights as the header says them: every row, fairseq's and a static decoder's
    named for its own precision (static-fp32: no cast), computes in them."""
    if dtype == "fp32":
        return "with fp32 weights"
    return f"with {dtype} weights (--dtype {dtype}: static-fp32 rows compute in {dtype} too)"


def print_profiles(
    configs: Dict, models: Dict, times: Dict[str, List[float]], dictionary: Dictionary,
    sample: Dict, args: argparse.Namespace,
) -> None:  # fmt: skip
    """``--profile``: each system's profile of one batch, against its position's bound."""
    device = torch.device(args.device)
    peak, bandwidth = matmul_peak(device, [args.dtype]).get(args.dtype), copy_bandwidth(device)
    bounds = {
        policy: position_bound(model, dictionary, sample, args.beam, args.length, peak, bandwidth)
        for policy, model in models.items()
    }
    for name, generator in configs.items():
        bound = bounds[name.split()[0]]
        print_profile(name, generator, sample, args.length + 1, bound)
        step_ms = statistics.median(times[name])
        print(f"{name}: bound {bound.describe()} per position; the timed step "
              f"{step_ms:.3f} ms, {step_ms / bound.ms:.1f}x the bound")  # fmt: skip


def default_policies(arch: str) -> List[str]:
    """Every policy of ``POLICIES``, but for an AAN decoder, whose self-attention has no weights
    to share: the baseline alone (san-6-6 failed to build, the default command refused)."""
    return ["baseline"] if has_aan_decoder(arch) else list(POLICIES)


def argument_problem(args: argparse.Namespace) -> Optional[str]:
    """What is wrong with the step timer's arguments, in one line, before any model is built."""
    for name in ("decoders", "policies"):  # a row timed once and printed once: a silent drop
        if (twice := repeated(getattr(args, name))) is not None:
            return f"{flag_of(name)}: {twice} is given twice"
    for name in ("beam", "batch", "batches", "length", "source_length", "rounds", "threads"):
        if getattr(args, name) < 1:
            return f"{flag_of(name)} {getattr(args, name)}: must be at least 1"
    if args.vocab < len(Dictionary()) + 1:
        return f"--vocab {args.vocab}: must be more than the {len(Dictionary())} special symbols"
    if args.beam > args.vocab - 1:  # fairseq's search keeps at most vocab - 1: the report lied
        return (
            f"--beam {args.beam}: fairseq's search keeps at most --vocab minus 1 hypotheses "
            f"({args.vocab - 1}); raise --vocab or lower --beam"
        )
    if problem := threads_problem(args.threads):
        return problem
    if has_aan_decoder(args.arch) and set(args.policies) - {"baseline"}:
        return (
            f"--policies {' '.join(args.policies)}: san-6-6 shares decoder self-attention, which "
            f"an AAN decoder (--arch {args.arch}) has not: give --policies baseline"
        )
    if args.device == "cuda" and not torch.cuda.is_available():
        return "--device cuda: no GPU is available to torch here"
    for decoder in args.decoders:
        precision, execution = STATIC_DECODERS.get(decoder, ("fp32", "eager"))
        if args.device not in devices_of(precision, execution):
            return (
                f"--decoders {decoder}: precision {precision!r} in execution {execution!r} does "
                f"not run on {args.device}"
            )
        if precision != "fp32" and args.dtype != "fp32":
            return (
                f"--decoders {decoder} casts or quantizes a float32 model; --dtype {args.dtype} "
                "makes the model's weights another precision already: leave --dtype fp32"
            )
    return None


def length_problem(model: TransformerSANModel, args: argparse.Namespace) -> Optional[str]:
    """A ``--length`` or ``--source-length`` beyond the positions of the model built for them, in
    one line (fairseq's generator asserts on the first; the encoder's embeddings fail on the
    second)."""
    target_limit = max_output_tokens(model)
    if args.length > target_limit:
        return f"--length {args.length}: {args.arch} decodes at most {target_limit} tokens"
    source_limit = model.encoder.max_positions()
    if args.source_length > source_limit:
        return f"--source-length {args.source_length}: {args.arch} reads at most {source_limit}"
    return None


def print_profile(name: str, generator, sample: dict, positions: int, bound: PositionBound) -> None:
    """torch.profiler's top operators for one batch of ``generator``: by host time, and on a GPU
    also by device time, with the device's busy time per position against ``bound`` (what a
    captured position costs the GPU, set against what it must do)."""
    from torch.profiler import ProfilerActivity, profile

    on_gpu = sample["net_input"]["src_tokens"].is_cuda
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    with torch.no_grad(), profile(activities=activities) as prof:
        generator.generate(None, sample)
    averages = prof.key_averages()
    print(f"--- {name}")
    print(averages.table(sort_by="self_cpu_time_total", row_limit=12))
    if on_gpu:
        print(averages.table(sort_by="self_device_time_total", row_limit=12))
        busy_ms = sum(event.self_device_time_total for event in averages) / 1e3 / positions
        print(f"{name}: device busy {busy_ms:.3f} ms per position ({busy_ms * positions:.1f} ms "
              f"for {positions} positions), {busy_ms / bound.ms:.1f}x the bound")  # fmt: skip
