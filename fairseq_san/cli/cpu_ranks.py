"""``fairseq-san-cpu-ranks N -- fairseq-train ...``: train as N CPU processes, one per rank.

fairseq's ``pytorch_ddp`` backend and ``torchrun`` both assume GPUs; on CPU, distributed training
works as one process per rank with gloo, ``legacy_ddp`` and a rendezvous in a file. This
starts those processes with the right flags, each with its share of the cores as its threads (as
torchrun sets ``OMP_NUM_THREADS``: every rank would otherwise start a thread per core, and N ranks
compete for the cores, about ten times slower), waits for all, and stops the rest if one fails,
naming it, or if this process is interrupted or terminated. Rank 0 writes to this terminal; rank
R > 0 to ``--log-dir``/rank-R.log, after the logs of earlier runs there (a resumed run keeps the
interrupted one's), each run's part under a line of its own (``RUN_HEADER``).

It runs fairseq-train only: fairseq-generate's ranks each translated a part of the data (the
terminal showed half the sentences and their BLEU), and fairseq-validate's gathered results on
CUDA. The options it sets for the ranks are refused in the command (they were overridden
silently), and so are the precisions the ranks cannot train in: bf16 (fairseq's is a TPU's: each
rank failed in fairseq's TPU set-up) and fp16 (a GPU's).
"""

import argparse
import ctypes
import importlib.metadata
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional, Tuple

from fairseq_san.cli import exiting_on_termination, said_when_interrupted
from fairseq_san.cores import available_cores
from fairseq_san.errors import ERROR_COPY, file_error, nearest_key
from fairseq_san.loop.recipe_options import ARCHITECTURES
from fairseq_san.loop.run_record import train_arg


def rank_command(command: List[str], world_size: int, rank: int, rendezvous: str) -> List[str]:
    """``command`` as rank ``rank``, meeting the others through the file ``rendezvous`` (gloo's
    file store: a TCP port found free here could be taken before rank 0 bound it)."""
    return command + [
        "--cpu",
        "--distributed-backend", "gloo",
        "--ddp-backend", "legacy_ddp",
        "--distributed-init-method", f"file://{rendezvous}",
        "--distributed-world-size", str(world_size),
        "--distributed-no-spawn",
        "--distributed-rank", str(rank),
    ]


# The options rank_command sets (but --cpu, which means the same given twice), and what fairseq
# cannot train on CPU ranks.
SET_FOR_THE_RANKS = tuple(
    arg for arg in rank_command([], 1, 0, "") if arg.startswith("--") and arg != "--cpu"
)
NOT_ON_CPU_RANKS = {
    "--bf16": "fairseq trains in bf16 on a TPU only",
    "--memory-efficient-bf16": "fairseq trains in bf16 on a TPU only",
    "--tpu": "fairseq's TPU training",
    "--fp16": "fairseq's fp16 training needs a GPU",
    "--memory-efficient-fp16": "fairseq's fp16 training needs a GPU",
    "--amp": "fairseq's automatic mixed precision needs a GPU",
}


def command_arguments_problem(command: List[str]) -> Optional[str]:
    """Why the ranks cannot run ``command``: another program than fairseq-train, an option the
    ranks are given, or one they cannot train with; else None."""
    if os.path.basename(command[0]) != "fairseq-train":
        return (
            f"it runs fairseq-train only, not {os.path.basename(command[0])}: decode and validate "
            "in one process (each rank would decode a part of the data)"
        )
    given = {arg.split("=", 1)[0] for arg in command[1:] if arg.startswith("--")}
    for flag in SET_FOR_THE_RANKS:
        if flag in given:
            return f"{flag}: set by fairseq-san-cpu-ranks for its ranks; leave it out"
    for flag, why in NOT_ON_CPU_RANKS.items():
        if flag in given:
            return f"{flag}: {why}, and the ranks train on the CPU (in fp32); leave it out"
    return None


def help_asked(command: List[str]) -> Optional[str]:
    """Where the command asks for its help (``-h``, ``--help``), which each rank would print
    after the missing --arch was refused: what prints it; else None."""
    if not {"-h", "--help"} & set(command[1:]):
        return None
    return (
        f"{os.path.basename(command[0])} --help prints its options: run it alone, without "
        "fairseq-san-cpu-ranks (fairseq-san-cpu-ranks --help prints this tool's)"
    )


def missing_arch(command: List[str]) -> Optional[str]:
    """Why fairseq-train cannot run ``command``, which names no ``--arch``: each rank printed
    fairseq's traceback of a RuntimeError without a message (the plugin's own check of
    fairseq-train's options runs only where ``--user-dir`` has loaded it); else None. (The
    recipes check their user's arguments with ``command_arguments_problem`` alone: they add
    ``--arch`` themselves.)"""
    given = {arg.split("=", 1)[0] for arg in command[1:]}
    if "--arch" in given or any(arg.startswith("-a") for arg in given):  # -a NAME, -aNAME
        return None
    return (
        "fairseq-train needs --arch, the model to train (e.g. --user-dir fairseq_san --arch "
        "transformer_san_small; --user-dir loads the plugin's models)"
    )


def own_option_after_separator(command: List[str]) -> Optional[str]:
    """Where ``--log-dir``, this tool's option, was given after ``--`` to fairseq-train, which
    has none (each rank printed fairseq's usage): where it goes; else None."""
    if "--log-dir" not in {arg.split("=", 1)[0] for arg in command[1:]}:
        return None
    return "--log-dir is fairseq-san-cpu-ranks' option, not fairseq-train's: give it before --"


def arch_given(command: List[str]) -> Optional[str]:
    """The value of the command's last ``--arch`` (``--arch NAME``, ``--arch=NAME``, ``-a NAME``,
    ``-aNAME``, ``-a=NAME``: fairseq takes the last; ``train_arg`` with ``-aNAME`` spelt ``-a
    NAME``), or None."""
    words = []
    for arg in command[1:]:
        joined = arg.startswith("-a") and not arg.startswith("--") and len(arg) > 2
        words += ["-a", arg[2:].removeprefix("=")] if joined else [arg]
    return train_arg(words, ("--arch", "-a"), None)


def plugin_arch_without_user_dir(command: List[str]) -> Optional[str]:
    """Why fairseq-train cannot build the plugin's model that ``command`` names without
    ``--user-dir``: each rank printed fairseq's usage and its list of a hundred models, and the
    end of rank 1's log was quoted below (the plugin, not loaded, could not copy rank 0's error);
    else None."""
    arch = arch_given(command)
    plugins = {name for names in ARCHITECTURES.values() for name in names}
    given = {arg.split("=", 1)[0] for arg in command[1:]}
    if arch not in plugins or "--user-dir" in given:
        return None
    return (
        f"--arch {arch} is the plugin's model, which fairseq-train knows only with --user-dir: "
        "add --user-dir fairseq_san (fairseq-san-loop user-dir prints its path)"
    )


def missing_user_dir(command: List[str]) -> Optional[str]:
    """Why fairseq-train cannot load the ``--user-dir`` that ``command`` names: no such folder
    where fairseq's ``import_user_module`` looks (as given, from the current folder, or beside
    fairseq's package); each rank printed fairseq's FileNotFoundError traceback (for a file, its
    ModuleNotFoundError). Else None."""
    user_dir = train_arg(command[1:], "--user-dir", None)
    if user_dir is None:
        return None
    fairseq_dir = os.path.dirname(importlib.util.find_spec("fairseq").origin)  # not imported
    places = (user_dir, os.path.join(fairseq_dir, user_dir),
              os.path.join(fairseq_dir, "..", user_dir))  # fmt: skip
    if any(os.path.isdir(place) for place in places):
        return None
    missing = "a file, not a folder" if os.path.isfile(user_dir) else "no such folder"
    return (
        f"--user-dir {user_dir}: {missing} (from {os.getcwd()}): name the plugin's folder "
        "(fairseq-san-loop user-dir prints its path)"
    )


# The line each run's part of a rank's log begins with.
RUN_HEADER = "== fairseq-san-cpu-ranks: "


def open_rank_logs(log_dir: str, world_size: int) -> List:
    """``log_dir``/rank-R.log for each rank R > 0, all opened (to append: the earlier runs' logs
    stay) before any rank starts, this run's part begun with ``RUN_HEADER``."""
    logs = []
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    try:
        for rank in range(1, world_size):
            log = open(os.path.join(log_dir, f"rank-{rank}.log"), "a")
            logs.append(log)
            log.write(f"{RUN_HEADER}rank {rank} of {world_size}, started {started}\n")
            log.flush()
    except OSError:
        for log in logs:
            log.close()
        raise
    return logs


def first_failures(processes: List[subprocess.Popen]) -> List[Tuple[int, int]]:
    """Wait until every process has exited 0 (an empty list) or some have failed: (rank, exit
    code) of each found failed at the first look that found one, ranks > 0 first (a failure of
    rank 0 is often its peers' loss: gloo's "connection closed by peer")."""
    while True:
        codes = [process.poll() for process in processes]
        failed = [(rank, code) for rank, code in enumerate(codes) if code not in (None, 0)]
        if failed:
            return sorted(failed, key=lambda failure: failure[0] == 0)
        if all(code == 0 for code in codes):
            return []
        time.sleep(0.1)


THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def rank_environment(world_size: int) -> Dict[str, str]:
    """This environment with each rank's share of the cores as its threads, unless the user set
    them: N ranks of a thread per core each would compete for the cores."""
    environment = dict(os.environ)
    threads = str(max(1, available_cores() // world_size))
    for variable in THREAD_VARIABLES:
        environment.setdefault(variable, threads)
    return environment


def shell_status(code: int) -> int:
    """An exit status as a shell reports it: 128 + N for a process killed by signal N (Popen's
    -N, which sys.exit would turn into 256 - N)."""
    return 128 - code if code < 0 else code


def log_tail(rank: int, log_dir: str) -> List[str]:
    """The last lines of this run's part of rank ``rank``'s log."""
    with open(os.path.join(log_dir, f"rank-{rank}.log"), errors="replace") as log:
        lines = log.readlines()
    headers = [i for i, line in enumerate(lines) if line.startswith(RUN_HEADER)]
    return lines[headers[-1] + 1 if headers else 0 :][-5:]


# What torch begins each line of a rank's uncaught error with, once the ranks have met.
RANK_PREFIX = re.compile(r"^\[rank\d+\]: ")


def copied_error(path: str) -> str:
    """The error line rank 0 copied to ``path`` (``ERROR_COPY``), or "" where it wrote none."""
    try:
        with open(path, errors="replace") as copy:
            return copy.read().strip()
    except OSError:
        return ""


# The line argparse ends a refused command line with, and the status it exits with.
USAGE_ERROR, USAGE_STATUS = re.compile(r"^\S+: error: "), 2


def said_by_rank_0(line: str, rank_0_error: str, rank_0_status: Optional[int]) -> bool:
    """Whether a rank's last line is the error rank 0 printed: the one it copied
    (``rank_0_error``), or, where it copied none (without ``--user-dir`` no plugin copies it),
    argparse's refusal of the command line, which every rank is given alike, where rank 0 exited
    as argparse does."""
    line = RANK_PREFIX.sub("", line.strip())
    if rank_0_error:
        return line == rank_0_error
    return rank_0_status == USAGE_STATUS and USAGE_ERROR.match(line) is not None


def say_failure(
    rank: int, code: int, log_dir: str, rank_0_error: str, rank_0_status: Optional[int] = None
) -> None:
    """Name a rank that failed and, for a rank > 0, the end of its log (rank 0's output is on
    this terminal already), unless it ends in the error rank 0 printed (``said_by_rank_0``):
    every rank refused the same input (it was printed twice)."""
    where = "" if rank == 0 else f": see {os.path.join(log_dir, f'rank-{rank}.log')}"
    tail = log_tail(rank, log_dir) if rank > 0 else []
    if tail and said_by_rank_0(tail[-1], rank_0_error, rank_0_status):
        tail, where = [], f"{where} (rank 0's error, above)"
    print(f"fairseq-san-cpu-ranks: rank {rank} failed (exit {shell_status(code)}){where}",
          file=sys.stderr)  # fmt: skip
    sys.stderr.writelines(f"  {line}" for line in tail)


def stop(processes: List[subprocess.Popen], grace: float = 10.0) -> None:
    """Terminate the processes still running; kill those that have not ended ``grace`` seconds
    later (a stopped rank ignored the termination, and this waited for it forever)."""
    for process in processes:
        if process.poll() is None:
            process.terminate()
    deadline = time.monotonic() + grace
    for process in processes:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def ending_with_this_process() -> Optional[Callable[[], None]]:
    """What a rank runs before its program (Linux; elsewhere None): the kernel terminates it when
    this process dies, also by SIGKILL, which no ``finally`` outlives (its ranks trained on,
    re-parented to init, holding the learn-to-share loop's lock). ``prctl`` is looked up here, in
    the parent: loading a library in a child forked from threads can deadlock."""
    if not sys.platform.startswith("linux"):
        return None
    prctl, launcher = ctypes.CDLL(None, use_errno=True).prctl, os.getpid()

    def end_with_the_launcher() -> None:
        if prctl(PR_SET_PDEATHSIG, signal.SIGTERM) != 0 or os.getppid() != launcher:
            os._exit(1)  # no parent-death signal, or the launcher died before it was set

    return end_with_the_launcher


def run_ranks(command: List[str], world_size: int, log_dir: str) -> int:
    """Start every rank, wait for all; a failure ends the others, each rank found failed is
    named, and the first one's exit code returned (``shell_status``). An interrupt or a
    termination ends them too, and goes on up."""
    logs = open_rank_logs(log_dir, world_size)
    processes = []
    environment = rank_environment(world_size)
    before_each_rank = ending_with_this_process()
    meeting = tempfile.mkdtemp(prefix="fairseq-san-ranks-")
    rank_0_error = os.path.join(meeting, "rank-0.error")
    try:
        with exiting_on_termination():
            for rank, output in enumerate([None] + logs):
                rank_argv = rank_command(command, world_size, rank, f"{meeting}/rendezvous")
                env = dict(environment, **{ERROR_COPY: rank_0_error}) if rank == 0 else environment
                processes.append(subprocess.Popen(rank_argv, stdout=output, stderr=output,
                                                  env=env,
                                                  preexec_fn=before_each_rank))  # fmt: skip
            failures = first_failures(processes)
    finally:
        stop(processes)
        for log in logs:
            log.close()
        error = copied_error(rank_0_error)
        shutil.rmtree(meeting, ignore_errors=True)
    for rank, code in failures:
        say_failure(rank, code, log_dir, error, processes[0].returncode)
    return shell_status(failures[0][1]) if failures else 0


def fairseq_commands() -> List[str]:
    """The installed fairseq commands (fairseq's and the plugin's): what a misspelt one meant."""
    scripts = importlib.metadata.entry_points(group="console_scripts")
    return [entry.name for entry in scripts if entry.name.startswith("fairseq")]


def command_problem(program: str) -> Optional[str]:
    """Why ``program`` cannot be started as a command, or None."""
    if shutil.which(program) is not None:
        return None
    if os.sep in program:  # a path: no command of PATH is meant
        if os.path.isdir(program):
            return f"{program} is a directory, not a command"
        exists = os.path.exists(program)
        return f"{program} is not executable" if exists else f"no such file: {program}"
    near = nearest_key(program, fairseq_commands())
    if near == program:  # installed, where PATH does not lead
        return f"command not found: {program} (not on PATH: activate the environment of make setup)"
    return f"command not found: {program}" + (f"; did you mean '{near}'?" if near else "")


@said_when_interrupted  # the ranks are stopped (run_ranks); no traceback of this one
def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="fairseq-san-cpu-ranks", description=__doc__.splitlines()[0]
    )
    parser.add_argument("world_size", type=int, help="number of CPU processes (ranks)")
    parser.add_argument(
        "--log-dir", default=".", metavar="DIR",
        help="where ranks > 0 write their logs, rank-R.log (default: the current folder)",
    )  # fmt: skip
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
    problem = (
        command_problem(command[0]) or help_asked(command) or own_option_after_separator(command)
        or command_arguments_problem(command) or missing_arch(command)
        or plugin_arch_without_user_dir(command) or missing_user_dir(command)
    )  # fmt: skip
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
        parser.error(file_error(err))


if __name__ == "__main__":
    sys.exit(main())
