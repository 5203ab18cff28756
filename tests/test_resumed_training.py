"""A resumed fairseq-train continues the run it interrupted (``fairseq_fixes.resumed_training``):
the same model, update for update, as the run never stopped; nothing trained past a limit the
checkpoint had reached."""

import hashlib
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import helpers  # noqa: F401  (imports fairseq, then the plugin)
from helpers import run_cli, train_argv

UPDATES, STOPPED_AT = 30, 13  # the synthetic corpus: about 2 updates an epoch


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
    """{"whole": a run of UPDATES updates, "resumed": the same run stopped at STOPPED_AT and
    resumed to UPDATES, "log": the resumed run's output}."""
    root = tmp_path_factory.mktemp("resumed")
    train(binarized_corpus, root / "whole", UPDATES)
    train(binarized_corpus, root / "resumed", STOPPED_AT)
    log = train(binarized_corpus, root / "resumed", UPDATES)
    return {"whole": root / "whole", "resumed": root / "resumed", "log": log}


@pytest.mark.slow
def test_a_resumed_run_trains_the_model_of_the_run_it_continues(resumed):
    """fairseq main rebuilt the batches with seed + the epoch it resumed at: the same sentences
    in another order, and the resumed model drifted (0.038 at most on this corpus)."""
    loaded = re.search(r"Loaded checkpoint .* \(epoch (\d+) @ (\d+) updates\)", resumed["log"])
    assert loaded and int(loaded.group(1)) > 1 and int(loaded.group(2)) == STOPPED_AT
    whole, continued = weights(resumed["whole"]), weights(resumed["resumed"])
    assert whole.keys() == continued.keys()
    assert all(torch.equal(whole[name], continued[name]) for name in whole)


@pytest.mark.slow
def test_a_run_resumed_at_its_max_update_trains_nothing(binarized_corpus, resumed):
    """fairseq took one update past --max-update and saved it over checkpoint_last.pt: what a
    rerun of a recipe stopped after its fairseq-train had finished trained."""
    last = resumed["resumed"] / "checkpoint_last.pt"
    before = hashlib.sha256(last.read_bytes()).hexdigest()
    output = train(binarized_corpus, resumed["resumed"], UPDATES)
    assert f"the checkpoint has reached --max-update {UPDATES} ({UPDATES} updates)" in output
    assert hashlib.sha256(last.read_bytes()).hexdigest() == before


@pytest.mark.parametrize(
    "updates, hours, limit",
    [(30, 0.0, "--max-update 30"), (29, 0.0, None), (29, 2.5, "--stop-time-hours 2"),
     (29, 1.5, None)],
)  # fmt: skip
def test_the_limit_a_checkpoint_has_reached(updates, hours, limit):
    from fairseq_san.fairseq_fixes.resumed_training import reached_limit

    cfg = SimpleNamespace(optimization=SimpleNamespace(max_update=30, stop_time_hours=2))
    trainer = SimpleNamespace(
        get_num_updates=lambda: updates, cumulative_training_time=lambda: hours * 3600
    )
    assert reached_limit(cfg, trainer) == limit


@pytest.mark.parametrize("rebuild_batches", [False, True])
def test_batches_are_those_of_the_first_epoch_unless_fairseq_rebuilds_them(rebuild_batches):
    """Where fairseq builds the batches anew each epoch, the epoch's own seed is fairseq's."""
    from fairseq_san.fairseq_fixes.resumed_training import _batching_as_the_first_epoch

    epochs_set = []
    dataset = SimpleNamespace(set_epoch=epochs_set.append)

    def get_batch_iterator(self, dataset, epoch=1, disable_iterator_cache=False,
                           update_epoch_batch_itr=False):  # fmt: skip
        return SimpleNamespace(built_at=epoch, epoch=epoch)

    task = SimpleNamespace(
        cfg=SimpleNamespace(rebuild_batches=rebuild_batches), can_reuse_epoch_itr=lambda _: True
    )
    iterator = _batching_as_the_first_epoch(get_batch_iterator)(task, dataset, epoch=4)
    assert iterator.epoch == 4
    assert iterator.built_at == (4 if rebuild_batches else 1)
    assert epochs_set == ([] if rebuild_batches else [4])


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
    assert not checkpoint_utils.PathManager.copy(str(new), str(last))  # fairseq's overwrite=False
