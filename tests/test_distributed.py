"""Distributed training of shared-attention models on CPU (gloo).

(a) torch's DistributedDataParallel with ``find_unused_parameters=False`` fails on the next
iteration if any parameter took no part in the loss; every parameter must get a gradient.
(b) fairseq-train with two processes (``--distributed-no-spawn``, one rank each).
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Tuple

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel

from helpers import (
    alive,
    build,
    free_port,
    make_dictionary,
    run_cli,
    run_parallel,
    source_batch,
    train_argv,
)

WORLD_SIZE = 2
DDP_MODELS = {
    "san-self15-encdec33": [
        "--san-decoder-self-policy", "1,5", "--san-decoder-encdec-policy", "3,3",
    ],
    "san-weights-enc11": [
        "--san-decoder-self-policy", "2,2,2", "--san-decoder-encdec-policy", "6",
        "--san-encdec-share", "weights", "--san-encoder-self-policy", "2",
    ],
    "aan-encdec33": [
        "--decoder-self-attention-type", "aan", "--san-decoder-encdec-policy", "3,3",
    ],
    # pre-norm: a following layer's query norm had no gradient, and DDP stopped at step 2
    "prenorm-encdec33": [
        "--decoder-normalize-before", "--san-decoder-encdec-policy", "3,3",
    ],
    "prenorm-weights-encdec6": [
        "--decoder-normalize-before", "--san-decoder-encdec-policy", "6",
        "--san-encdec-share", "weights",
    ],
}  # fmt: skip
STEPS = 3

pytestmark = pytest.mark.slow


def _ddp_worker(rank: int, port: int) -> None:
    """One rank: a few DDP forward/backward/update steps per model, all parameters used."""
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD_SIZE
    )
    try:
        dictionary = make_dictionary(24)
        for name, argv in DDP_MODELS.items():
            model, _ = build(argv, dictionary=dictionary, seed=1 + rank)  # DDP syncs the init
            model.train()
            ddp = DistributedDataParallel(model, find_unused_parameters=False)
            optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
            for step in range(STEPS):
                src_tokens, src_lengths = source_batch(
                    dictionary, [5, 3, 7], seed=100 * step + rank
                )
                target, _ = source_batch(dictionary, [6, 6, 6], seed=100 * step + rank + 50)
                prev = torch.roll(target, 1, dims=1)  # eos first, as fairseq shifts targets
                logits = ddp(src_tokens, src_lengths, prev)[0]
                loss = torch.nn.functional.cross_entropy(
                    logits.view(-1, logits.size(-1)), target.view(-1)
                )
                loss.backward()
                missing = [n for n, p in model.named_parameters() if p.grad is None]
                assert not missing, f"{name}: parameters without gradient: {missing}"
                assert all(torch.isfinite(p.grad).all() for p in model.parameters())
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            # The ranks saw different batches but hold identical parameters: gradients synced.
            flat = torch.cat([p.detach().view(-1) for p in model.parameters()])
            gathered = [torch.empty_like(flat) for _ in range(WORLD_SIZE)]
            dist.all_gather(gathered, flat)
            assert all(torch.equal(gathered[0], other) for other in gathered[1:]), name
        # Both ranks done before either tears gloo down: a rank that exits while its peer still
        # talks to it can abort in gloo's threads ("terminate called without an active
        # exception"; seen once on a loaded machine).
        dist.barrier()
    finally:
        dist.destroy_process_group()
    # A rank that passed leaves without the interpreter's teardown, where gloo's threads can
    # still abort the process (seen again, idle, after the barrier): the test is the work above.
    os._exit(0)


def test_torch_ddp_with_sharing_uses_every_parameter():
    mp.spawn(_ddp_worker, args=(free_port(),), nprocs=WORLD_SIZE, join=True)


def train_two_ranks(corpus, save_dir, max_update: int) -> dict:
    """fairseq-train as two gloo ranks, one process each: {"rank R": its output}."""
    common = train_argv(
        corpus,
        save_dir,
        max_update=max_update,
        extra=[
            "--san-decoder-self-policy", "1,5",
            "--san-decoder-encdec-policy", "3,3",
            "--distributed-backend", "gloo",
            "--ddp-backend", "legacy_ddp",
            "--distributed-init-method", f"tcp://127.0.0.1:{free_port()}",
            "--distributed-world-size", str(WORLD_SIZE),
            "--distributed-no-spawn",
            "--max-tokens", "500",
        ],
    )  # fmt: skip
    return run_parallel(
        {
            f"rank {rank}": ["fairseq-train", *common, "--distributed-rank", str(rank)]
            for rank in range(WORLD_SIZE)
        },
        timeout=240,
    )


def test_fairseq_train_two_cpu_processes(binarized_corpus, tmp_path):
    """Two ranks train, then resume from their checkpoint_last.pt: rank 0 reads it and sends it
    to rank 1, which read it with torch's safe loader and failed on what fairseq put in it
    (``fairseq_fixes.checkpoint_broadcast``)."""
    save_dir = tmp_path / "checkpoints"
    logs = train_two_ranks(binarized_corpus, save_dir, max_update=6)
    assert "distributed init (rank 1)" in logs["rank 0"] + logs["rank 1"]
    assert "num_updates 6" in logs["rank 0"] or "done training" in logs["rank 0"]
    checkpoint = save_dir / "checkpoint_last.pt"
    assert checkpoint.is_file()

    state = torch.load(checkpoint, map_location="cpu", weights_only=False)
    assert state["optimizer_history"][-1]["num_updates"] == 6
    model_args = state["cfg"]["model"]
    assert '"decoder_self": [1, 5]' in model_args.san_policy
    keys = state["model"].keys()
    assert "decoder.layers.1.self_attn.q_proj.weight" in keys
    assert "decoder.layers.2.self_attn.q_proj.weight" not in keys
    assert "decoder.layers.1.encoder_attn.v_proj.weight" not in keys

    logs = train_two_ranks(binarized_corpus, save_dir, max_update=8)
    assert f"Loaded checkpoint {checkpoint} (epoch" in logs["rank 0"]
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)
    assert state["optimizer_history"][-1]["num_updates"] == 8


@pytest.mark.slow
def test_a_run_resumed_on_another_number_of_ranks_trains_as_the_run_it_continues(
    binarized_corpus, tmp_path
):
    """A checkpoint's place in its epoch counted one rank's batches: 2 ranks' checkpoint after
    5 updates, resumed as one process (--update-freq 2, the same batch per update), read a batch
    again and ended 0.02 away from one process's run; now as close as 2 ranks are to it."""
    extra = ["--dropout", "0", "--max-tokens", "400", "--san-decoder-self-policy", "1,5"]
    one = tmp_path / "one"
    trained = run_cli("fairseq-train", *train_argv(binarized_corpus, one, max_update=12,
                                                   extra=[*extra, "--update-freq", "2"]))
    assert trained.returncode == 0, trained.stderr[-3000:]
    resumed = tmp_path / "two-then-one"
    two = run_cli("fairseq-san-cpu-ranks", "2", "--log-dir", str(tmp_path), "--", "fairseq-train",
                  *train_argv(binarized_corpus, resumed, max_update=5, extra=extra))
    assert two.returncode == 0, two.stderr[-3000:]
    stopped = torch.load(resumed / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    assert stopped["extra_state"]["train_iterator"]["iterations_in_epoch"] > 0  # mid-epoch
    trained = run_cli("fairseq-train", *train_argv(binarized_corpus, resumed, max_update=12,
                                                   extra=[*extra, "--update-freq", "2"]))
    assert trained.returncode == 0, trained.stderr[-3000:]
    ends = [torch.load(folder / "checkpoint_last.pt", map_location="cpu", weights_only=False)
            for folder in (one, resumed)]  # fmt: skip
    assert ends[0]["extra_state"]["train_iterator"] == ends[1]["extra_state"]["train_iterator"]
    apart = max((ends[0]["model"][name] - ends[1]["model"][name]).abs().max().item()
                for name in ends[0]["model"])  # fmt: skip
    assert apart < 1e-3


def test_a_rank_killed_by_a_signal_stops_the_others_with_the_shells_exit_code(tmp_path, capsys):
    """fairseq-san-cpu-ranks returns 128 + N for a rank killed by signal N (not Popen's -N, which
    sys.exit turns into 256 - N), after the other ranks have stopped and their logs are closed."""
    import signal
    import sys
    import time

    from fairseq_san.cli.cpu_ranks import run_ranks

    rank_1_kills_itself = (
        "import os, signal, sys, time\n"
        "rank = sys.argv[sys.argv.index('--distributed-rank') + 1]\n"
        "print('rank', rank, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL) if rank == '1' else time.sleep(60)\n"
    )
    started = time.monotonic()
    code = run_ranks([sys.executable, "-c", rank_1_kills_itself], 2, str(tmp_path))
    assert code == 128 + signal.SIGKILL
    assert time.monotonic() - started < 30  # rank 0 was stopped, not waited out
    header, output = (tmp_path / "rank-1.log").read_text().splitlines()
    assert header.startswith("== fairseq-san-cpu-ranks: rank 1 of 2, started ") and output == "rank 1"
    # The failure is named, with the end of the failed rank's log (it was in the log alone).
    assert capsys.readouterr().err.splitlines() == [
        f"fairseq-san-cpu-ranks: rank 1 failed (exit {128 + signal.SIGKILL}): see "
        f"{tmp_path / 'rank-1.log'}",
        "  rank 1",
    ]


def test_every_rank_found_failed_is_named_its_peers_first(tmp_path, capsys):
    """Rank 1 failed, then rank 0 lost its peer (gloo: "connection closed by peer"): rank 0 alone
    was named, rank 1's cause left in its log unmentioned."""
    import sys

    from fairseq_san.cli.cpu_ranks import run_ranks

    fails_by_rank = (
        "import sys, time\n"
        "rank = sys.argv[sys.argv.index('--distributed-rank') + 1]\n"
        "time.sleep(0.05 if rank == '1' else 0.3)\n"
        "print('rank', rank, 'gives up', flush=True)\n"
        "sys.exit(7 if rank == '1' else 1)\n"
    )
    code = run_ranks([sys.executable, "-c", fails_by_rank], 2, str(tmp_path))
    said = [line for line in capsys.readouterr().err.splitlines() if "failed" in line]
    assert said[0] == (f"fairseq-san-cpu-ranks: rank 1 failed (exit 7): see "
                       f"{tmp_path / 'rank-1.log'}")  # fmt: skip
    assert code == 7


def test_an_error_every_rank_printed_is_said_once(tmp_path, capsys):
    """Every rank refused the same input: rank 0's one-line error was on the terminal, and the
    end of rank 1's log quoted below it said it again. A rank's own error is still quoted."""
    import sys

    from fairseq_san.cli.cpu_ranks import run_ranks

    refuses = (  # rank 0 copies its error as the plugin's hook does, then waits
        "import os, sys, time\n"
        "rank, error = sys.argv[sys.argv.index('--distributed-rank') + 1], sys.argv[1]\n"
        f"said = os.path.join({str(tmp_path)!r}, 'said')\n"
        "if rank == '0':\n"
        "    copy = os.environ.get('FAIRSEQ_SAN_ERROR_COPY', os.devnull)\n"
        "    open(copy, 'w').write('fairseq-san: error: no\\n')\n"
        "    open(said, 'w').close(), time.sleep(60)\n"
        "while not os.path.exists(said): time.sleep(0.05)\n"
        "sys.exit(f'[rank1]: fairseq-san: error: {error}')\n"
    )
    log = tmp_path / "rank-1.log"
    own = "\n  [rank1]: fairseq-san: error: other"
    for error, after in (("no", " (rank 0's error, above)"), ("other", own)):
        (tmp_path / "said").unlink(missing_ok=True)
        assert run_ranks([sys.executable, "-c", refuses, error], 2, str(tmp_path)) == 1
        assert capsys.readouterr().err == (
            f"fairseq-san-cpu-ranks: rank 1 failed (exit 1): see {log}{after}\n"
        )


def test_a_refused_command_line_is_said_once_without_the_plugin(tmp_path, capsys):
    """Without --user-dir no rank copies its error: fairseq's argparse refusal (rank 0's on the
    terminal) was said again, quoted from the end of rank 1's log."""
    import sys

    from fairseq_san.cli.cpu_ranks import run_ranks

    refuses = (  # rank 0 outlives the termination long enough to exit as argparse does
        "import os, signal, sys, time\n"
        "rank = sys.argv[sys.argv.index('--distributed-rank') + 1]\n"
        f"said = os.path.join({str(tmp_path)!r}, 'said')\n"
        "print('usage: fairseq-train', file=sys.stderr)\n"
        "if rank == '0':\n"
        "    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "    open(said, 'w').close(), time.sleep(0.5), sys.exit('fairseq-train: error: no')\n"
        "while not os.path.exists(said): time.sleep(0.05)\n"
        "print('fairseq-train: error: no', file=sys.stderr), sys.exit(2)\n"
    )
    refused_by_argparse = refuses.replace("sys.exit('fairseq-train: error: no')", "sys.exit(2)")
    assert run_ranks([sys.executable, "-c", refused_by_argparse], 2, str(tmp_path)) == 2
    assert capsys.readouterr().err == (
        f"fairseq-san-cpu-ranks: rank 1 failed (exit 2): see {tmp_path / 'rank-1.log'} (rank 0's "
        "error, above)\n"
    )
    assert run_ranks([sys.executable, "-c", refuses], 2, str(tmp_path)) == 2  # rank 0: exit 1
    assert capsys.readouterr().err.endswith("\n  fairseq-train: error: no\n")


def test_fairseqs_own_refusal_of_the_command_line_is_said_once(binarized_corpus, tmp_path):
    """fairseq's argparse refuses an option on every rank: its usage and error were on the
    terminal twice, rank 0's and the end of rank 1's log quoted below it."""
    refused = run_cli("fairseq-san-cpu-ranks", "2", "--log-dir", str(tmp_path), "--",
                      "fairseq-train", *train_argv(binarized_corpus, tmp_path / "checkpoints"),
                      "--no-such-flag")  # fmt: skip
    assert refused.returncode == 2
    assert refused.stderr.count("unrecognized arguments: --no-such-flag") == 1, refused.stderr


def test_a_rerun_appends_to_the_rank_logs_and_names_its_own_failure(tmp_path, capsys):
    """A second run in the same folder (a resumed one) keeps the first run's rank logs; the
    failure it names shows the end of its own part of the log, not the first run's."""
    import sys

    from fairseq_san.cli.cpu_ranks import run_ranks

    prints_then_fails = (
        "import sys\n"
        "rank, run = sys.argv[sys.argv.index('--distributed-rank') + 1], sys.argv[1]\n"
        "print('run', run, 'rank', rank, flush=True)\n"
        "sys.exit(3 if rank == '1' else 0)\n"
    )
    for run in ("first", "second"):
        assert run_ranks([sys.executable, "-c", prints_then_fails, run], 2, str(tmp_path)) == 3
        tail = [line for line in capsys.readouterr().err.splitlines() if line.startswith("  ")]
        assert tail == [f"  run {run} rank 1"]
    lines = (tmp_path / "rank-1.log").read_text().splitlines()
    assert [line for line in lines if not line.startswith("== ")] == [
        "run first rank 1", "run second rank 1",
    ]
    assert len(lines) == 4


def launched_ranks_waiting(tmp_path: Path) -> Tuple[subprocess.Popen, List[int]]:
    """fairseq-san-cpu-ranks started with two stand-in ranks that wait: the launcher and the
    ranks' process IDs, once both run."""
    from helpers import command_path, stand_in_fairseq_train

    writes_pid_and_waits = (
        "import os, sys, time\n"
        "rank = sys.argv[sys.argv.index('--distributed-rank') + 1]\n"
        f"open(os.path.join({str(tmp_path)!r}, 'pid-' + rank), 'w').write(str(os.getpid()))\n"
        "time.sleep(120)\n"
    )
    program = stand_in_fairseq_train(tmp_path / "bin", writes_pid_and_waits)
    meeting_under_tmp_path = dict(os.environ, TMPDIR=str(tmp_path))  # a SIGKILL leaves it behind
    launcher = subprocess.Popen([str(command_path("fairseq-san-cpu-ranks")), "2", "--log-dir",
                                 str(tmp_path), "--", str(program), "--arch", "x"],
                                env=meeting_under_tmp_path)  # fmt: skip
    deadline = time.monotonic() + 60
    while len(list(tmp_path.glob("pid-*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    pids = [int(path.read_text()) for path in tmp_path.glob("pid-*")]
    assert len(pids) == 2
    return launcher, pids


def test_terminating_the_launcher_stops_its_ranks(tmp_path):
    """SIGTERM (a job killed, a session ended) left both ranks running, re-parented to init and
    still holding the run's lock: it now ends them as an interrupt does, with the shell's status
    for a terminated process."""
    launcher, pids = launched_ranks_waiting(tmp_path)
    launcher.send_signal(signal.SIGTERM)
    assert launcher.wait(timeout=30) == 128 + signal.SIGTERM
    assert not any(alive(pid) for pid in pids)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")
def test_killing_the_launcher_ends_its_ranks(tmp_path):
    """SIGKILL of the launcher (no finally runs) left its ranks training, re-parented to init."""
    launcher, pids = launched_ranks_waiting(tmp_path)
    launcher.send_signal(signal.SIGKILL)
    launcher.wait(timeout=30)
    deadline = time.monotonic() + 30
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(alive(pid) for pid in pids)


def test_each_rank_gets_its_share_of_the_cores_as_threads(monkeypatch):
    """Every rank started a thread per core: two ranks on two cores trained about ten times
    slower than with a thread each. A value the user set is kept."""
    from fairseq_san.cli import cpu_ranks

    monkeypatch.setattr(cpu_ranks, "available_cores", lambda: 8)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("MKL_NUM_THREADS", "3")
    environment = cpu_ranks.rank_environment(2)
    assert environment["OMP_NUM_THREADS"] == "4" and environment["MKL_NUM_THREADS"] == "3"
    assert cpu_ranks.rank_environment(16)["OMP_NUM_THREADS"] == "1"
