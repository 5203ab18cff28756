"""A resumed fairseq-train continues the run it interrupted (``fairseq_fixes.resumed_training``):
the same model, update for update, as the run never stopped; nothing trained past a limit the
checkpoint had reached."""

import hashlib
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import List

import pytest
import torch

import helpers  # noqa: F401  (imports fairseq, then the plugin)
from helpers import REPO, cli_env, run_cli, train_argv

UPDATES = 30  # the synthetic corpus: 4 updates an epoch
STOPS = {"mid-epoch": 14, "epoch end": 12}


def train(data: Path, save_dir: Path, updates: int) -> str:
    result = run_cli("fairseq-train", *train_argv(data, save_dir, max_update=updates))
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    return output


def weights(save_dir: Path) -> dict:
    return torch.load(save_dir / "checkpoint_last.pt", map_location="cpu", weights_only=True)[
        "model"
    ]


@pytest.fixture(scope="module")
def resumed(binarized_corpus, tmp_path_factory):
    """{"whole": a run of UPDATES updates and its output; each of STOPS: the same run stopped
    there and resumed to UPDATES, and the resumed run's output}."""
    root = tmp_path_factory.mktemp("resumed")
    runs = {"whole": (root / "whole", train(binarized_corpus, root / "whole", UPDATES))}
    for name, stop in STOPS.items():
        train(binarized_corpus, root / name, stop)
        runs[name] = (root / name, train(binarized_corpus, root / name, UPDATES))
    return runs


@pytest.mark.slow
def test_an_uninterrupted_run_trains_every_epoch_in_turn(resumed):
    """The first version of the fix renumbered fairseq's cached iterator each epoch: epochs 1, 3,
    5, ... (a review found it)."""
    epochs = re.findall(r"begin training epoch (\d+)", resumed["whole"][1])
    assert [int(epoch) for epoch in epochs] == list(range(1, len(epochs) + 1))
    assert len(epochs) == 8  # 30 updates at 4 an epoch


# fairseq-train with the fix's wrappers taken off again: fairseq's own behaviour.
WITHOUT_THE_FIX = """
import sys
import fairseq_cli.train as cli
from fairseq.tasks.fairseq_task import FairseqTask
from fairseq_san.fairseq_fixes import resumed_training  # the plugin's fixes are installed
resumed_training.install = lambda: None  # and this one kept off when the command imports it
FairseqTask.get_batch_iterator = FairseqTask.get_batch_iterator.__wrapped__
cli.train = cli.train.__wrapped__
from fairseq import checkpoint_utils
from fairseq.trainer import Trainer
Trainer.save_checkpoint = Trainer.save_checkpoint.__wrapped__
Trainer.get_train_iterator = Trainer.get_train_iterator.__wrapped__
checkpoint_utils.load_checkpoint = checkpoint_utils.load_checkpoint.__wrapped__
sys.argv = ["fairseq-train", *sys.argv[1:]]
sys.exit(cli.cli_main())
"""


@pytest.mark.slow
def test_the_fix_leaves_an_uninterrupted_run_as_fairseq_trains_it(
    binarized_corpus, resumed, tmp_path
):
    """The fix may change only resumed runs: the same weights as fairseq's own behaviour."""
    save_dir = tmp_path / "fairseq"
    argv = train_argv(binarized_corpus, save_dir, max_update=UPDATES)
    result = subprocess.run([sys.executable, "-c", WITHOUT_THE_FIX, *argv], cwd=REPO,
                            env=cli_env(), capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    whole, fairseq = weights(resumed["whole"][0]), weights(save_dir)
    assert all(torch.equal(whole[name], fairseq[name]) for name in whole)


@pytest.mark.slow
@pytest.mark.parametrize("stop", STOPS)
def test_a_resumed_run_trains_the_model_of_the_run_it_continues(resumed, stop):
    """fairseq main rebuilt the batches with seed + the epoch it resumed at: other batches, and
    the resumed model drifted from the uninterrupted one."""
    save_dir, log = resumed[stop]
    loaded = re.search(r"Loaded checkpoint .* \(epoch (\d+) @ (\d+) updates\)", log)
    assert loaded and int(loaded.group(1)) > 1 and int(loaded.group(2)) == STOPS[stop]
    whole, continued = weights(resumed["whole"][0]), weights(save_dir)
    assert whole.keys() == continued.keys()
    assert all(torch.equal(whole[name], continued[name]) for name in whole)


@pytest.mark.slow
def test_a_resumed_run_seeded_by_epoch_trains_the_model_of_the_run_it_continues(
    binarized_corpus, tmp_path
):
    """With --update-ordered-indices-seed fairseq seeds a run's batches with seed + the epoch it
    starts at (and keeps them): a run resumed at epoch 4 shuffled with seed + 4 where the run it
    continues shuffled with seed + 1, and drifted from it (a review measured it)."""
    seeded = ["--update-ordered-indices-seed"]

    def run(save_dir: Path, updates: int) -> None:
        argv = train_argv(binarized_corpus, save_dir, max_update=updates, extra=seeded)
        result = run_cli("fairseq-train", *argv)
        assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]

    run(tmp_path / "whole", UPDATES)
    run(tmp_path / "resumed", STOPS["mid-epoch"])
    run(tmp_path / "resumed", UPDATES)
    whole, continued = weights(tmp_path / "whole"), weights(tmp_path / "resumed")
    assert all(torch.equal(whole[name], continued[name]) for name in whole)


@pytest.mark.slow
def test_a_run_resumed_at_its_max_update_trains_nothing(binarized_corpus, resumed):
    """fairseq took one update past --max-update and saved it over checkpoint_last.pt: what a
    rerun of a recipe stopped after its fairseq-train had finished trained."""
    last = resumed["mid-epoch"][0] / "checkpoint_last.pt"
    before = hashlib.sha256(last.read_bytes()).hexdigest()
    output = train(binarized_corpus, last.parent, UPDATES)
    assert f"the checkpoint has its --max-update {UPDATES} updates: nothing to train" in output
    assert hashlib.sha256(last.read_bytes()).hexdigest() == before


def trained_for(checkpoint: Path, seconds: float) -> None:
    """Make ``checkpoint`` say that its run had trained for ``seconds`` (fairseq's
    ``previous_training_time``): a cap of --stop-time-hours passed without waiting for it."""
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    state["extra_state"]["previous_training_time"] = seconds
    torch.save(state, checkpoint)


def updates_in(checkpoint: Path) -> int:
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    return state["optimizer_history"][-1]["num_updates"]


@pytest.mark.slow
def test_a_run_resumed_past_its_stop_time_trains_nothing(binarized_corpus, tmp_path):
    """fairseq checks --stop-time-hours after an update: a run resumed from a checkpoint saved
    past its cap trained one update more and saved it. A larger cap trains on."""
    save_dir, last = tmp_path / "run", tmp_path / "run" / "checkpoint_last.pt"
    train(binarized_corpus, save_dir, 4)
    trained_for(last, 3600)
    before = hashlib.sha256(last.read_bytes()).hexdigest()
    argv = train_argv(binarized_corpus, save_dir, max_update=8)
    for cap, updates in (("0.5", 4), ("2", 8)):
        result = run_cli("fairseq-train", *argv, "--stop-time-hours", cap)
        output = result.stdout + result.stderr
        assert result.returncode == 0, output[-3000:]
        assert updates_in(last) == updates, cap
        stopped = f"the checkpoint has 1.0000 hours of training, past its --stop-time-hours {cap}"
        assert (stopped in output) == (cap == "0.5"), output[-3000:]
        if cap == "0.5":
            assert hashlib.sha256(last.read_bytes()).hexdigest() == before


@pytest.mark.slow
def test_a_new_run_from_another_s_weights_counts_its_own_training_time(binarized_corpus, tmp_path):
    """fairseq gave a --finetune-from-model run the training time of the run it started from:
    with a --stop-time-hours that run had passed, it trained one update."""
    parent = tmp_path / "parent" / "checkpoint_last.pt"
    train(binarized_corpus, parent.parent, 4)
    trained_for(parent, 3600)
    argv = train_argv(binarized_corpus, tmp_path / "child", max_update=8)
    result = run_cli("fairseq-train", *argv, "--stop-time-hours", "0.5",
                     "--finetune-from-model", str(parent))  # fmt: skip
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert updates_in(tmp_path / "child" / "checkpoint_last.pt") == 8


def patience_argv(data: Path, save_dir: Path, updates: int) -> List[str]:
    """Validation every 2 updates (not at an epoch's end), by a metric that never improves after
    the first (its sentences per batch, the same at every validation): the run stops early at
    update 2 + 2 x PATIENCE."""
    argv = train_argv(data, save_dir, max_update=updates)
    return [word for word in argv if word != "--disable-validation"] + [
        "--validate-interval-updates", "2", "--validate-interval", "1000",
        "--patience", str(PATIENCE), "--best-checkpoint-metric", "bsz",
        "--required-batch-size-multiple", "1",
    ]  # fmt: skip


PATIENCE = 2


@pytest.mark.slow
def test_a_resumed_run_counts_its_patience_on(binarized_corpus, tmp_path):
    """fairseq saved no patience count: the resumed run counted from zero, and trained on past
    the update where the uninterrupted one stopped (10 instead of 6 here)."""
    def run(save_dir: Path, updates: int) -> str:
        result = run_cli("fairseq-train", *patience_argv(binarized_corpus, save_dir, updates))
        assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
        return result.stdout + result.stderr

    stopped = f"early stop since valid performance hasn't improved for last {PATIENCE} runs"
    assert stopped in run(tmp_path / "whole", UPDATES)
    run(tmp_path / "resumed", 4)  # saved after its second validation: one without improvement
    assert stopped in run(tmp_path / "resumed", UPDATES)
    for name in ("whole", "resumed"):
        assert updates_in(tmp_path / name / "checkpoint_last.pt") == 2 + 2 * PATIENCE
    again = run(tmp_path / "resumed", UPDATES)
    assert f"the checkpoint has no better validation for --patience {PATIENCE}" in again
    # A new run from its weights (the loop's --warm-start) counts its own validations.
    argv = patience_argv(binarized_corpus, tmp_path / "new", UPDATES)
    parent = str(tmp_path / "whole" / "checkpoint_last.pt")
    result = run_cli("fairseq-train", *argv, "--finetune-from-model", parent)
    new = result.stdout + result.stderr
    assert result.returncode == 0 and stopped in new and "nothing to train" not in new, new[-3000:]


def test_only_the_first_epoch_of_a_process_stops_at_a_limit_reached():
    """Later epochs stop as fairseq stops them (inside its train, after a validation); the
    first stops at a --max-update reached and at a --stop-time-hours passed, not before."""
    from fairseq_san.fairseq_fixes.resumed_training import _stopping_at_a_reached_limit

    trained = []
    train = _stopping_at_a_reached_limit(lambda *args: trained.append(True) or ([1.0], False))
    cfg = SimpleNamespace(
        optimization=SimpleNamespace(max_update=30, stop_time_hours=0.5),
        checkpoint=SimpleNamespace(patience=0),
    )
    for updates in (30, 30):
        train(cfg, SimpleNamespace(get_num_updates=lambda: updates), None, None)
    assert trained == [True]  # the second call, a later epoch, is fairseq's
    for first_epoch in (
        SimpleNamespace(get_num_updates=lambda: 29),
        SimpleNamespace(get_num_updates=lambda: 29, _previous_training_time=1799),
    ):
        train = _stopping_at_a_reached_limit(lambda *args: trained.append(True) or ([1.0], False))
        train(cfg, first_epoch, None, None)
    assert trained == [True, True, True]
    train = _stopping_at_a_reached_limit(lambda *args: trained.append(True) or ([1.0], False))
    past_the_cap = SimpleNamespace(get_num_updates=lambda: 29, _previous_training_time=1801)
    train(cfg, past_the_cap, None, None)
    assert trained == [True, True, True]  # past the cap of 0.5 hours


@pytest.mark.parametrize("updates, said", [
    (30, "the checkpoint has its --max-update 30 updates: nothing to train"),
    (40, "the checkpoint has 40 updates, more than its --max-update 30: nothing to train"),
])  # fmt: skip
def test_a_run_resumed_under_a_lower_max_update_says_the_updates_it_has(updates, said, caplog):
    """A checkpoint of 40 updates resumed with --max-update 30 was said to have "its
    --max-update 30 updates"."""
    from fairseq_san.fairseq_fixes.resumed_training import _stopping_at_a_reached_limit

    train = _stopping_at_a_reached_limit(lambda *args: pytest.fail("trained"))
    cfg = SimpleNamespace(
        optimization=SimpleNamespace(max_update=30, stop_time_hours=0),
        checkpoint=SimpleNamespace(patience=0),
    )
    with caplog.at_level("INFO", logger="fairseq_san.fairseq_fixes.resumed_training"):
        train(cfg, SimpleNamespace(get_num_updates=lambda: updates), None, None)
    assert said in caplog.messages


class StandInDataset:
    def __init__(self):
        self.epochs_set = []

    def set_epoch(self, epoch):
        self.epochs_set.append(epoch)


@pytest.mark.parametrize("case", ["builds once", "rebuilds each epoch", "cached"])
def test_batches_are_those_of_the_first_epoch_where_fairseq_builds_them_once(case):
    """Where fairseq builds the batches anew each epoch, the epoch's own seed is fairseq's; an
    iterator it has cached (every epoch after the first of a process) is returned as it is."""
    from fairseq_san.fairseq_fixes.resumed_training import _batching_as_the_first_epoch

    dataset = StandInDataset()

    def get_batch_iterator(self, dataset, epoch=1, disable_iterator_cache=False,
                           update_epoch_batch_itr=False):  # fmt: skip
        return SimpleNamespace(built_at=epoch, epoch=epoch)

    task = SimpleNamespace(
        cfg=SimpleNamespace(rebuild_batches=case == "rebuilds each epoch"),
        can_reuse_epoch_itr=lambda _: True,
        dataset_to_epoch_iter={dataset: None} if case == "cached" else {},
    )
    iterator = _batching_as_the_first_epoch(get_batch_iterator)(task, dataset, epoch=4)
    assert iterator.epoch == 4
    assert iterator.built_at == (1 if case == "builds once" else 4)
    assert dataset.epochs_set == ([4] if case == "builds once" else [])


def test_a_checkpoint_copy_stopped_midway_leaves_the_previous_file(tmp_path, monkeypatch):
    """fairseq copied checkpoint_last.pt in place: a run killed then left a truncated file that
    every rerun stopped on."""
    from fairseq import checkpoint_utils

    from fairseq_san.fairseq_fixes import checkpoint_copies

    new, last = tmp_path / "checkpoint_best.pt", tmp_path / "checkpoint_last.pt"
    new.write_bytes(b"new" * 1000)
    last.write_bytes(b"previous")
    assert checkpoint_utils.PathManager.copy(str(new), str(last), overwrite=True)
    assert last.read_bytes() == new.read_bytes()

    def stopped(source, destination):  # the first bytes written, then the run is killed
        Path(destination).write_bytes(b"ne")
        raise KeyboardInterrupt

    last.write_bytes(b"previous")
    monkeypatch.setattr(checkpoint_copies.shutil, "copyfile", stopped)
    with pytest.raises(KeyboardInterrupt):
        checkpoint_utils.PathManager.copy(str(new), str(last), overwrite=True)
    assert last.read_bytes() == b"previous"
    assert not list(tmp_path.glob("*.partial-copy"))  # nothing left of the copy stopped
    assert not checkpoint_utils.PathManager.copy(str(new), str(last))  # fairseq's overwrite=False


def test_a_checkpoint_copy_writes_through_a_link(tmp_path):
    """As fairseq's copy did: the link stays, the file it names gets the checkpoint."""
    from fairseq import checkpoint_utils

    new, target, link = tmp_path / "new.pt", tmp_path / "elsewhere.pt", tmp_path / "last.pt"
    new.write_bytes(b"new")
    target.write_bytes(b"old")
    link.symlink_to(target)
    assert checkpoint_utils.PathManager.copy(str(new), str(link), overwrite=True)
    assert link.is_symlink() and target.read_bytes() == b"new"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["elsewhere.pt", "last.pt", "new.pt"]


def test_a_checkpoint_resumes_where_it_stopped_on_another_number_of_ranks():
    """iterations_in_epoch counts one rank's batches: 2 ranks' checkpoint after 1 batch each
    (2 of the epoch) resumed in 1 process read batch 1 again; 1 process's after 2 batches,
    resumed by 2 ranks, skipped batches 2 and 3. A position the ranks cannot share is refused."""
    from fairseq_san.errors import UsageError
    from fairseq_san.fairseq_fixes.resumed_training import resharded_position

    state = {"epoch": 2, "iterations_in_epoch": 1, "shuffle": True}
    assert resharded_position(state, 2, 1)["iterations_in_epoch"] == 2
    assert resharded_position(dict(state, iterations_in_epoch=2), 1, 2)["iterations_in_epoch"] == 1
    assert resharded_position(state, 2, 2) is state
    with pytest.raises(UsageError, match="cannot share out"):
        resharded_position(dict(state, iterations_in_epoch=3), 1, 2)


def test_a_run_resumed_under_another_metric_chooses_its_best_checkpoint_anew(
    binarized_corpus, tmp_path
):
    """fairseq restored the checkpoint's best score whatever its metric: a run resumed by the
    validation's sentences per batch (30, to minimize) compared them with the loss's best (4.5),
    and checkpoint_best.pt stayed the first run's."""
    save_dir = tmp_path / "run"
    for updates, metric in ((4, "loss"), (8, "bsz")):
        argv = train_argv(binarized_corpus, save_dir, max_update=updates)
        argv = [word for word in argv if word != "--disable-validation"]
        result = run_cli("fairseq-train", *argv, "--best-checkpoint-metric", metric)
        assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert updates_in(save_dir / "checkpoint_best.pt") == 8
    said = ("the checkpoint's best validation is by --best-checkpoint-metric loss, this run's by "
            "--best-checkpoint-metric bsz")  # fmt: skip
    assert said in result.stdout + result.stderr
