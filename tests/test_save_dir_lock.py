"""fairseq-train holds its ``--save-dir`` for the whole run (``fairseq_fixes.save_dir_lock``): two
runs on one folder saved over each other's checkpoints (one died on the other's temporary file,
the other finished with both runs' saves mixed, silently)."""

import fcntl
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

import helpers  # noqa: F401  (imports fairseq, then the plugin)
from fairseq_san.errors import UsageError
from fairseq_san.fairseq_fixes import save_dir_lock
from helpers import run_cli, train_argv

HOLDER_PID = 4242  # the pid the other run wrote into the lock file


def hold(save_dir: Path) -> int:
    """The descriptor of ``save_dir``'s lock, locked as another run holds it (with its pid)."""
    save_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(save_dir / save_dir_lock.LOCK, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.write(fd, f"{HOLDER_PID}\n".encode())
    return fd


def test_a_save_dir_another_process_holds_is_refused_and_its_lock_file_left_blocks_no_one(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(save_dir_lock, "_held", {})
    save_dir = tmp_path / "run"
    fd = hold(save_dir)
    with pytest.raises(UsageError, match=rf"--save-dir {save_dir} is in use by another "
                                         rf"fairseq-train \(.*, pid {HOLDER_PID}\)"):  # fmt: skip
        save_dir_lock.lock_save_dir(str(save_dir))
    os.close(fd)  # the other run ends (or is killed), its lock file stays
    save_dir_lock.lock_save_dir(str(save_dir))
    save_dir_lock.lock_save_dir(str(save_dir))  # again in this process: it holds the lock
    held = save_dir_lock._held.pop(str(save_dir.resolve()))
    assert (save_dir / save_dir_lock.LOCK).read_text() == f"{os.getpid()}\n"
    os.close(held)


def test_a_save_dir_that_cannot_be_locked_is_trained_in_unlocked(tmp_path, monkeypatch, caplog):
    """A file system without locks (flock's ENOLCK on some network ones) is no reason to refuse
    a training: it runs, with a warning that the folder is not held."""
    import errno

    def no_locks(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(save_dir_lock, "_held", {})
    monkeypatch.setattr(save_dir_lock.fcntl, "flock", no_locks)
    save_dir_lock.lock_save_dir(str(tmp_path))
    assert save_dir_lock._held == {}
    assert f"--save-dir {tmp_path} cannot be locked" in caplog.text


def test_a_forked_child_does_not_hold_the_save_dir_after_its_parent(tmp_path, monkeypatch):
    """The data loader's workers (--num-workers, forked) outlive a SIGKILLed fairseq-train by
    seconds: sharing its lock, they had the next run refused, naming the dead run's pid."""
    monkeypatch.setattr(save_dir_lock, "_held", {})
    save_dir_lock.lock_save_dir(str(tmp_path))
    go, wait = os.pipe()
    ready, started = os.pipe()
    child = os.fork()
    if child == 0:  # a worker: says it runs (past the fork's handlers), lives on until told;
        # it holds no lock (a fork of its own would close the descriptors again, other files)
        os.write(started, b"!" if save_dir_lock._held else b"x")
        os.read(go, 1)
        os._exit(0)
    try:
        assert os.read(ready, 1) == b"x"
        os.close(save_dir_lock._held.pop(str(tmp_path.resolve())))  # the parent is gone
        fd = os.open(tmp_path / save_dir_lock.LOCK, os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the next run: not refused
        os.close(fd)
    finally:
        os.write(wait, b"x")
        os.waitpid(child, 0)
        for end in (go, wait, ready, started):
            os.close(end)


@pytest.mark.slow
def test_fairseq_train_refuses_a_save_dir_another_run_holds(binarized_corpus, tmp_path):
    """The second run says so in one line before it trains or reads a checkpoint; a --no-save run
    writes nothing there and goes on; a run after the other has ended trains."""
    save_dir = tmp_path / "run"
    argv = train_argv(binarized_corpus, save_dir, max_update=4)
    fd = hold(save_dir)
    try:
        refused = run_cli("fairseq-train", *argv)
        assert refused.returncode != 0
        error = refused.stderr.strip().splitlines()[-1]
        assert error == (
            f"fairseq-san: error: --save-dir {save_dir} is in use by another fairseq-train "
            f"({save_dir / save_dir_lock.LOCK} is locked, pid {HOLDER_PID}): two runs would save "
            "over each other's checkpoints; wait for it to end or stop it, or give this run "
            "another --save-dir"
        ), refused.stderr[-3000:]
        assert "Traceback" not in refused.stderr
        assert not list(save_dir.glob("*.pt"))
        unsaved = run_cli("fairseq-train", *argv, "--no-save")
        assert unsaved.returncode == 0, (unsaved.stdout + unsaved.stderr)[-3000:]
    finally:
        os.close(fd)
    after = run_cli("fairseq-train", *argv)
    assert after.returncode == 0, (after.stdout + after.stderr)[-3000:]
    assert (save_dir / "checkpoint_last.pt").is_file()


def test_a_partial_checkpoint_config_loads_as_fairseqs_load_checkpoint_takes_it():
    """fairseq's ``load_checkpoint`` never reads ``no_save``, and a program's config (fairseq's
    own tests) may lack it or hold no ``save_dir``: the lock failed on them (omegaconf's
    "Missing key no_save") before fairseq's function ran."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.create({"save_dir": None, "restore_file": "checkpoint_last.pt"})
    trainer = SimpleNamespace(cfg=SimpleNamespace(distributed_training=None))
    load = save_dir_lock._locking(lambda cfg, trainer: "loaded")
    assert load(cfg, trainer) == "loaded"
