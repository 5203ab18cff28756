"""``fairseq-san-cpu-ranks N -- COMMAND ...``: run a fairseq command as N CPU processes, one per rank.

fairseq's ``pytorch_ddp`` backend and ``torchrun`` both assume GPUs; on CPU, distributed training
works as one process per rank with gloo, ``legacy_ddp`` and a TCP rendezvous on 127.0.0.1. This
starts those processes with the right flags, waits for all, and stops the rest if one fails.
Rank 0 writes to this terminal; rank R > 0 to ``--log-dir``/rank-R.log.
"""

import argparse
import importlib.metadata
import os
import shutil
import socket
import subprocess
import sys
import time
from typing import List, Optional

from fairseq_san.cores import available_cores
from fairseq_san.errors import nearest_key


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def rank_command(command: List[str], world_size: int, rank: int, port: int) -> List[str]:
    return command + [
        "--cpu",
        "--distributed-backend", "gloo",
        "--ddp-backend", "legacy_ddp",
        "--distributed-init-method", f"tcp://127.0.0.1:{port}",
        "--distributed-world-size", str(world_size),
        "--distributed-no-spawn",
        "--distributed-rank", str(rank),
    ]


def open_rank_logs(log_dir: str, world_size: int) -> List:
    """``log_dir``/rank-R.log for each rank R > 0, all opened before any rank starts."""
    logs = []
    try:
        for rank in range(1, world_size):
            logs.append(open(os.path.join(log_dir, f"rank-{rank}.log"), "w"))
    except OSError:
        for log in logs:
            log.close()
        raise
    return logs


def first_failure(processes: List[subprocess.Popen]) -> Optional[int]:
    """Wait until every process has exited 0 (None) or one has failed (its exit code)."""
    while True:
        codes = [process.poll() for process in processes]
        failed = [code for code in codes if code not in (None, 0)]
        if failed:
            return failed[0]
        if all(code == 0 for code in codes):
            return None
        time.sleep(0.5)


def run_ranks(command: List[str], world_size: int, log_dir: str) -> int:
    """Start every rank, wait for all; the first failure ends the others, and its exit code is
    returned (128 + N for a rank killed by signal N, as a shell reports it). An interrupt ends
    them too, and goes on up."""
    port = free_port()
    logs = open_rank_logs(log_dir, world_size)
    processes = []
    try:
        for rank, output in enumerate([None] + logs):
            rank_argv = rank_command(command, world_size, rank, port)
            processes.append(subprocess.Popen(rank_argv, stdout=output, stderr=output))
        code = first_failure(processes)
    finally:
        for process in processes:
            if process.poll() is None:
                process.terminate()
        for process in processes:
            process.wait()
        for log in logs:
            log.close()
    if code is None:
        return 0
    return 128 - code if code < 0 else code  # killed by signal N: Popen's -N, a shell's 128 + N


def fairseq_commands() -> List[str]:
    """The installed fairseq commands (fairseq's and the plugin's): what a misspelt one meant."""
    scripts = importlib.metadata.entry_points(group="console_scripts")
    return [entry.name for entry in scripts if entry.name.startswith("fairseq")]


def command_problem(program: str) -> Optional[str]:
    """Why ``program`` cannot be started as a command, or None."""
    if shutil.which(program) is not None:
        return None
    if os.sep in program and os.path.isdir(program):
        return f"{program} is a directory, not a command"
    if os.sep in program and os.path.exists(program):
        return f"{program} is not executable"
    near = nearest_key(os.path.basename(program), fairseq_commands())
    return f"command not found: {program}" + (f"; did you mean '{near}'?" if near else "")


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="fairseq-san-cpu-ranks", description=__doc__.splitlines()[0])
    parser.add_argument("world_size", type=int, help="number of CPU processes (ranks)")
    parser.add_argument("--log-dir", default=".", help="where ranks > 0 write their logs")
    parser.usage = "%(prog)s [-h] [--log-dir DIR] world_size -- COMMAND ..."
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    args, command = parser.parse_args(argv[:split]), argv[split + 1 :]
    if not command or args.world_size < 1:
        parser.error("give a world size >= 1 and a command after --")
    cores = available_cores()
    if args.world_size > cores:
        parser.error(
            f"{args.world_size} ranks on {cores} CPU cores: each rank is a training process, "
            f"and more than one per core only share them (slower, more memory); pass at most "
            f"{cores} (--update-freq trains the batch of more ranks)"
        )
    problem = command_problem(command[0])
    if problem:
        parser.error(problem)
    if os.path.exists(args.log_dir) and not os.path.isdir(args.log_dir):
        parser.error(f"--log-dir {args.log_dir} is a file, not a directory")
    try:
        os.makedirs(args.log_dir, exist_ok=True)
    except OSError as err:
        parser.error(f"--log-dir {args.log_dir} cannot be created: {err.strerror or err}")
    try:
        return run_ranks(command, args.world_size, args.log_dir)
    except OSError as err:  # a rank's log cannot be written, or its command not started
        parser.error(f"{err.filename}: {err.strerror or err}")


if __name__ == "__main__":
    sys.exit(main())
