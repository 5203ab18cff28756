"""The ranks fairseq-train starts or joins, checked as it parses its options.

Upstream behaviour corrected: fairseq-train with ``--distributed-world-size`` 0 or below trained
nothing and exited 0, and with more ranks than GPUs (``--cpu`` included) and no launcher asserted
"world size is N but have M available devices": one line, naming ``fairseq-san-cpu-ranks`` for
CPUs. Ranks that torchrun started on a machine with one GPU or none each trained alone as rank 0
(fairseq's default world size there is 1, at which it ignores torchrun), into one --save-dir:
they take torchrun's world size, or are refused in one line where they cannot meet (no GPU; NCCL
with two ranks a GPU). Ranks started elsewhere that cannot train on CPUs (fairseq's NCCL and
pytorch_ddp defaults, or no --distributed-no-spawn) are refused too (``check_cpu_ranks``).
``command_options`` calls ``check_world_size`` for fairseq-train.
"""

import argparse
import os

from fairseq_san.errors import UsageError
from fairseq_san.ranks import nccl_ranks_problem

# torchrun's variables (torch.distributed.launch's too), which fairseq reads as the rendezvous.
TORCHRUN = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")
# Environment variables by which fairseq finds the ranks' rendezvous itself (torchrun's, Slurm's).
LAUNCHED = (TORCHRUN, ("SLURM_STEP_NODELIST",), ("SLURM_JOB_NODELIST",))


def check_world_size(args: argparse.Namespace) -> None:
    """Refuse a world size below 1 (fairseq started no training process and exited 0), and, where
    fairseq would start the ranks itself (no --distributed-init-method, no launcher, no TPU), more
    ranks than GPUs: it asserted, and on CPUs only fairseq-san-cpu-ranks starts ranks. Ranks that
    torchrun started take its world size (``take_torchruns_world_size``)."""
    import torch

    size = getattr(args, "distributed_world_size", 1)
    if size < 1:
        raise UsageError(f"--distributed-world-size {size}: must be at least 1")
    gpus = torch.cuda.device_count()
    take_torchruns_world_size(args, gpus)
    launched = any(all(name in os.environ for name in names) for names in LAUNCHED)
    check_cpu_ranks(args, gpus, launched)
    if size > gpus and size > 1 and not (
        args.distributed_init_method or args.tpu or args.pipeline_model_parallel or launched
    ):
        way_out = (
            f"give at most {gpus}, or start the ranks with torchrun (the learn-to-share recipes: "
            "--launcher) or --distributed-init-method"
            if gpus
            else f"on CPUs, start the ranks with fairseq-san-cpu-ranks {size} -- fairseq-train "
            f"... (the learn-to-share recipes: --cpu-ranks {size})"
        )
        raise UsageError(
            f"--distributed-world-size {size}: fairseq-train starts one process per GPU, and "
            f"this machine has {gpus}; {way_out}"
        )


def take_torchruns_world_size(args: argparse.Namespace, gpus: int) -> None:
    """Have the ranks torchrun started train as one job. fairseq reads torchrun's rendezvous only
    where --distributed-world-size is above 1 (``infer_init_method`` returns at 1, its default on
    a machine with one GPU or none): each rank trained alone as rank 0, all into one --save-dir,
    until their checkpoint writes collided. torchrun's WORLD_SIZE is taken, as fairseq takes it
    over any other size. Refused: ranks on a machine without GPUs (fairseq puts rank R on GPU
    R % GPUs) and, with NCCL, more ranks on a machine than it has GPUs (NCCL refuses two ranks on
    one GPU: "Duplicate GPU detected"; told by torchrun's LOCAL_WORLD_SIZE, which other launchers
    may not set). One rank (WORLD_SIZE 1) under a larger --distributed-world-size trains as one
    process: fairseq took its size and rank too, then divided the rank by the GPUs' count (a
    ZeroDivisionError on CPUs). ``--distributed-init-method env://``, but with
    --distributed-no-spawn, this rank's --distributed-rank and torchrun's world size, is left to
    fairseq's reading, which sets all of it: given, fairseq read neither RANK nor WORLD_SIZE, and
    every rank started as rank 0 (a hang, or each rank training alone)."""
    if args.tpu or args.pipeline_model_parallel:
        return
    if not all(name in os.environ for name in TORCHRUN) or not os.environ["WORLD_SIZE"].isdigit():
        return
    ranks = int(os.environ["WORLD_SIZE"])
    if args.distributed_init_method == "env://" and not (
        args.distributed_no_spawn
        and str(args.distributed_rank) == os.environ["RANK"]
        and args.distributed_world_size == ranks
    ):
        args.distributed_init_method = None  # fairseq's own reading sets env://, rank and size
    if args.distributed_init_method or ranks < 1:
        return
    if ranks == 1:  # one rank trains as one process, whatever --distributed-world-size says
        args.distributed_world_size = 1
        return
    if gpus == 0:
        raise UsageError(
            f"{launched_by(ranks)} on a machine without GPUs, and fairseq-train puts each rank "
            f"on a GPU; on CPUs, start the ranks with fairseq-san-cpu-ranks {ranks} -- "
            f"fairseq-train ... (the learn-to-share recipes: --cpu-ranks {ranks})"
        )
    here = os.environ.get("LOCAL_WORLD_SIZE", "")
    if args.distributed_backend == "nccl" and here.isdigit() and int(here) > gpus:
        raise UsageError(f"torchrun started {nccl_ranks_problem(int(here), gpus)}")
    args.distributed_world_size = ranks


def launched_by(ranks: int) -> str:
    """Who made this process one of ``ranks`` ranks: torchrun, which sets TORCHELASTIC_RUN_ID
    beside ``TORCHRUN``'s variables, or those variables alone, left in the environment (from a
    launcher's shell: a one-process fairseq-train was refused as ranks torchrun started)."""
    if "TORCHELASTIC_RUN_ID" in os.environ:
        return f"torchrun started {ranks} ranks"
    return (
        f"WORLD_SIZE={ranks} with RANK, MASTER_ADDR and MASTER_PORT in the environment, set by "
        "a launcher other than torchrun or left from one (unset them to train in one process), "
        f"make {ranks} ranks"
    )


def check_cpu_ranks(args: argparse.Namespace, gpus: int, launched: bool) -> None:
    """Refuse ranks started elsewhere (``launched``, or a --distributed-init-method) that
    fairseq-train cannot run on CPUs: without --distributed-no-spawn it starts one process per
    GPU, and on a machine without GPUs none (it trained nothing and exited 0); more than one with
    fairseq's default backends, NCCL and pytorch_ddp (a traceback: "Distributed package doesn't
    have NCCL built in", or DistributedDataParallel's "device_ids [0] ... module parameters
    {device(type='cpu')}")."""
    if args.tpu or not (args.cpu or gpus == 0) or not (launched or args.distributed_init_method):
        return
    cpu_ranks = "on CPUs, start the ranks with fairseq-san-cpu-ranks N -- fairseq-train ..."
    if args.distributed_init_method and not args.distributed_no_spawn and gpus == 0:
        raise UsageError(
            f"--distributed-init-method {args.distributed_init_method} without "
            "--distributed-no-spawn: fairseq-train then starts one process per GPU, and this "
            f"machine has none (nothing would train); {cpu_ranks}, or give each rank "
            "--distributed-no-spawn and its --distributed-rank"
        )
    if args.distributed_world_size < 2:
        return
    default = (
        f" (fairseq's default --distributed-world-size is the GPUs' count, {gpus}: "
        "--distributed-world-size 1 trains in one CPU process)"
        if args.distributed_world_size == gpus else ""
    )
    if args.distributed_backend == "nccl":
        raise UsageError(
            "--distributed-backend nccl (fairseq's default) needs GPUs, and these ranks train on "
            f"CPUs: pass --distributed-backend gloo --ddp-backend legacy_ddp, or {cpu_ranks}"
            + default
        )
    if args.ddp_backend in ("c10d", "pytorch_ddp"):
        raise UsageError(
            f"--ddp-backend {args.ddp_backend} (fairseq's default) puts each rank's model on a "
            f"GPU, and these ranks train on CPUs: pass --ddp-backend legacy_ddp, or {cpu_ranks}"
            + default
        )
