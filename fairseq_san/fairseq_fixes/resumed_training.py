"""fairseq-train resumed from a checkpoint continues the run it interrupted, update for update.

Upstream behaviour corrected, in fairseq main (and fairseq-fixed, which we install):

* **The batches.** ``FairseqTask.get_batch_iterator`` orders the sentences under
  ``numpy_seed(seed + epoch)`` and builds the batches once, at the epoch the run starts, for
  every epoch after it (it caches the iterator). A run started at epoch 1 batches with
  ``seed + 1`` to its end; the same run resumed at epoch 4 rebuilt its batches with ``seed + 4``,
  other batches, and the resumed run drifted from the one it continues (fairseq 0.12.2 ordered
  under ``numpy_seed(seed)``, whatever the epoch). The learn-to-share loop reruns a stopped
  iteration this way, and a policy learned near a threshold could change with it. A resumed run
  now builds its batches as its first epoch did (an iterator fairseq has cached is left as it
  is), with its first epoch's seed too: ``--update-ordered-indices-seed`` makes the trainer's
  seed the run's seed + the epoch (and a run resumed at epoch 4 shuffled with seed + 4 where the
  run it continues had seed + 1). Where fairseq builds them anew each epoch (sharded data,
  ``--update-epoch-batch-itr``, ``--grouped-shuffling``) nothing changes.
* **The limit.** ``fairseq_cli.train.train`` takes an update before it checks ``--max-update``,
  so a run resumed from a checkpoint that had reached it (its recipe stopped after fairseq-train
  had finished, before it could note so) trained one update more and saved it over
  ``checkpoint_last.pt`` and ``checkpoint_best.pt``. It now stops before it trains, at the first
  epoch of the process only (later epochs stop as fairseq stops them).

* **The patience.** fairseq-train's ``--patience`` counts the validations since the best one in
  attributes of ``should_stop_early``, which no checkpoint saved: a resumed run counted from
  zero, and one that had stopped trained ``--patience`` validations more. The count and the best
  validation are now saved with the checkpoint (``extra_state``) and restored with it when the
  run resumes (not for a new run from its weights: ``--finetune-from-model``,
  ``--reset-optimizer`` or ``--reset-meters``, where fairseq does not restore its best score
  either); a run resumed after its patience ran out trains nothing.

* **The best checkpoint.** fairseq restores the best validation score a checkpoint saved
  (``extra_state["best"]``) whatever ``--best-checkpoint-metric`` it was by: a run resumed under
  another metric or direction compared its validations with the old metric's best (a BLEU of 0
  against a loss of 4.4, a loss against a BLEU), and ``checkpoint_best.pt`` stayed the old run's
  checkpoint, without a word. The metric is now saved with the checkpoint; a run resumed under
  another one starts its best score, and its patience count, anew, and says so.

* **The wall-time cap.** ``--stop-time-hours`` is checked after an update too, against the
  training time a checkpoint keeps (``previous_training_time``), so a run resumed from a
  checkpoint saved at its cap trained one update more and saved it. It now stops before it
  trains when the checkpoint's training time is past the cap. That time is the same on every
  rank (fairseq keeps the mean over the ranks and saves it); a larger cap trains on. A new run
  from another's weights (as for the patience) counts its own time from zero: fairseq gave it
  the time of the run it started from.

* **The ranks.** A checkpoint's place in its epoch (``train_iterator``'s
  ``iterations_in_epoch``) counts one rank's batches: rank R of N reads batches R, R + N, ...
  A run of 2 ranks resumed as one process read its last batch again, and one process's resumed
  by 2 ranks skipped two, without a word. The number of ranks is saved with the checkpoint, and
  the place is converted for the ranks that resume it (a place they cannot share out, as 3
  batches between 2 ranks, is refused, naming ``--reset-dataloader``).
"""

import contextvars
import functools
import inspect
import logging

from fairseq_san.errors import UsageError
from fairseq_san.fairseq_fixes.dictionary_words import DICTIONARIES_STATE, dictionaries_record
from fairseq_san.fairseq_fixes.wrapping import running_command, wrap_once

logger = logging.getLogger(__name__)

FIRST_EPOCH = 1  # fairseq's epochs count from 1
# True while fairseq's trainer builds the training batches with --update-ordered-indices-seed:
# the seed it gives the task is then the run's seed + the epoch (Trainer.get_train_iterator).
SEED_PLUS_EPOCH = contextvars.ContextVar("fairseq_san_seed_plus_epoch", default=False)


def builds_batches_once(task, call: inspect.BoundArguments) -> bool:
    """Whether ``get_batch_iterator`` keeps the batches it builds for every later epoch (as
    fairseq decides it: a cached iterator, not rebuilt per epoch)."""
    arguments = call.arguments
    return (
        not getattr(getattr(task, "cfg", None), "rebuild_batches", False)
        and not arguments["disable_iterator_cache"]
        and not arguments["update_epoch_batch_itr"]
        and task.can_reuse_epoch_itr(arguments["dataset"])
    )


def _batching_as_the_first_epoch(get_batch_iterator):
    signature = inspect.signature(get_batch_iterator)

    @functools.wraps(get_batch_iterator)
    def wrapper(*args, **kwargs):
        call = signature.bind(*args, **kwargs)
        call.apply_defaults()
        epoch, task = call.arguments["epoch"], call.arguments["self"]
        cached = call.arguments["dataset"] in getattr(task, "dataset_to_epoch_iter", {})
        if epoch == FIRST_EPOCH or cached or not builds_batches_once(task, call):
            return get_batch_iterator(*args, **kwargs)  # fairseq's (a cached one: as it is)
        logger.info("resuming at epoch %d: the batches of epoch %d, as the run made them",
                    epoch, FIRST_EPOCH)  # fmt: skip
        call.arguments["epoch"] = FIRST_EPOCH
        if SEED_PLUS_EPOCH.get():  # the trainer's seed + epoch: the first epoch's seed
            call.arguments["seed"] += FIRST_EPOCH - epoch
        iterator = get_batch_iterator(*call.args, **call.kwargs)
        iterator.epoch = epoch  # what fairseq's constructor would have set: the epoch to resume
        call.arguments["dataset"].set_epoch(epoch)
        return iterator

    return wrapper


def _noting_the_seed_plus_epoch(get_train_iterator):
    @functools.wraps(get_train_iterator)
    def wrapper(self, *args, **kwargs):
        noted = SEED_PLUS_EPOCH.set(bool(self.cfg.dataset.update_ordered_indices_seed))
        try:
            return get_train_iterator(self, *args, **kwargs)
        finally:
            SEED_PLUS_EPOCH.reset(noted)

    return wrapper


PATIENCE_STATE = "fairseq_san_patience"  # extra_state's key: should_stop_early's attributes
# extra_state's key: the ranks the run's batches were sharded over (train_iterator's
# iterations_in_epoch counts one rank's batches: of every SHARDS batches, the rank's one)
SHARDS_STATE = "fairseq_san_data_shards"
# extra_state's key: the --best-checkpoint-metric of its "best", and whether it is maximized
BEST_METRIC_STATE = "fairseq_san_best_metric"


def best_metric(cfg) -> list:
    """The metric that ``checkpoint_best.pt`` is chosen by (``cfg``: the checkpoint options), as
    saved in a checkpoint's ``extra_state``: its name and whether it is maximized."""
    return [cfg.best_checkpoint_metric, bool(cfg.maximize_best_checkpoint_metric)]


def shown_metric(metric: list) -> str:
    name, maximized = metric
    return f"--best-checkpoint-metric {name}{' (maximized)' if maximized else ''}"


def forget_best_score(saved: list, cfg) -> None:
    """Start the run's best validation score anew: the checkpoint's (which fairseq restored) is
    by the metric ``saved``, another than this run's."""
    from fairseq import checkpoint_utils

    if hasattr(checkpoint_utils.save_checkpoint, "best"):
        del checkpoint_utils.save_checkpoint.best
    logger.warning("the checkpoint's best validation is by %s, this run's by %s: "
                   "checkpoint_best.pt and --patience count from this run's validations",
                   shown_metric(saved), shown_metric(best_metric(cfg)))  # fmt: skip


def resharded_position(itr_state: dict, saved_shards: int, shards: int) -> dict:
    """``itr_state`` (the checkpoint's train_iterator) for ``shards`` ranks where ``saved_shards``
    saved it: each rank had read ``iterations_in_epoch`` batches of its shard (batches R, R + N,
    ...), ``iterations_in_epoch * saved_shards`` of the epoch's in all. A position that the new
    ranks cannot reach together is refused: they would read batches again or skip some."""
    done = itr_state.get("iterations_in_epoch", 0) * saved_shards
    if saved_shards == shards or done == 0:
        return itr_state
    if done % shards:
        raise UsageError(
            f"the checkpoint was saved by {saved_shards} rank(s) after {done} batches of epoch "
            f"{itr_state.get('epoch')}, which {shards} rank(s) cannot share out: resume with "
            f"{saved_shards} rank(s), or with --reset-dataloader (the epoch starts again)"
        )
    logger.info("resuming %d rank(s)' checkpoint with %d: %d batches of the epoch read",
                saved_shards, shards, done)  # fmt: skip
    return dict(itr_state, iterations_in_epoch=done // shards)


def patience_counter():
    """fairseq-train's ``should_stop_early``, whose attributes ``best`` and ``num_runs`` count the
    validations since the best one (None outside fairseq-train)."""
    return getattr(running_command("fairseq_cli.train"), "should_stop_early", None)


def _saving_the_run_state(save_checkpoint):
    """The trainer's ``save_checkpoint``, saving the patience's count, the number of ranks the
    batches were shared out to and the record of the dictionaries' words
    (``dictionary_words.dictionaries_record``) in its ``extra_state``."""

    @functools.wraps(save_checkpoint)
    def wrapper(self, filename, extra_state):
        counted = patience_counter()
        if hasattr(counted, "num_runs"):
            extra_state[PATIENCE_STATE] = {"best": counted.best, "num_runs": counted.num_runs}
        extra_state[SHARDS_STATE] = self.data_parallel_world_size
        extra_state[BEST_METRIC_STATE] = best_metric(self.cfg.checkpoint)
        extra_state[DICTIONARIES_STATE] = dictionaries_record(self.task)
        return save_checkpoint(self, filename, extra_state)

    return wrapper


def _restoring_the_run_state(load_checkpoint):
    @functools.wraps(load_checkpoint)
    def wrapper(cfg, trainer, **passthrough_args):
        from fairseq_san.fairseq_fixes.restore_file import fine_tunes

        # A new run from another's weights counts its own validations and training time
        # (fairseq resets the optimizer and meters of a --finetune-from-model itself, not in
        # cfg, and gave it the time of the run it started from: at a --stop-time-hours that run
        # had passed, it trained one update).
        new_run = cfg.reset_optimizer or cfg.reset_meters
        new_run = new_run or fine_tunes(cfg, trainer.checkpoint_suffix or "")
        extra_state, epoch_itr = load_checkpoint(cfg, trainer, **passthrough_args)
        if new_run:
            trainer._previous_training_time = 0
        metric = (extra_state or {}).get(BEST_METRIC_STATE, best_metric(cfg))
        other_metric = list(metric) != best_metric(cfg) and not new_run
        if other_metric:
            forget_best_score(metric, cfg)
        saved = (extra_state or {}).get(PATIENCE_STATE)
        counted = patience_counter()
        if saved is not None and counted is not None and not new_run and not other_metric:
            counted.best, counted.num_runs = saved["best"], saved["num_runs"]
        return extra_state, epoch_itr

    return wrapper


def _resharding_the_position(load_checkpoint):
    """The trainer's ``load_checkpoint``, its epoch's place converted for this run's ranks
    (``resharded_position``), unless ``--reset-dataloader`` has it not read."""

    @functools.wraps(load_checkpoint)
    def wrapper(self, *args, **kwargs):
        extra_state = load_checkpoint(self, *args, **kwargs)
        saved = (extra_state or {}).get(SHARDS_STATE)
        reset = getattr(getattr(self.cfg, "checkpoint", None), "reset_dataloader", False)
        if saved and "train_iterator" in extra_state and not reset:  # reset: not read
            extra_state["train_iterator"] = resharded_position(
                extra_state["train_iterator"], saved, self.data_parallel_world_size
            )
        return extra_state

    return wrapper


def out_of_patience(cfg) -> bool:
    """Whether the run's validations had not improved for ``--patience`` when it was saved."""
    patience = cfg.checkpoint.patience
    return patience > 0 and getattr(patience_counter(), "num_runs", 0) >= patience


def reached_max_update(cfg, trainer) -> bool:
    """Whether a run resumed from a checkpoint has its ``--max-update`` updates already (fairseq's
    ``validate_and_save`` checks after an update; the count is every rank's)."""
    max_update = cfg.optimization.max_update
    return bool(max_update) and trainer.get_num_updates() >= max_update


def updates_reached(updates: int, max_update: int) -> str:
    """What a checkpoint of ``updates`` has of ``--max-update``, said: a run resumed under a lower
    limit than it was trained to has more updates than the limit, not the limit."""
    if updates == max_update:
        return f"its --max-update {max_update} updates"
    return f"{updates} updates, more than its --max-update {max_update}"


def reached_stop_time(cfg, trainer) -> bool:
    """Whether a run resumed from a checkpoint had trained past ``--stop-time-hours`` when it was
    saved (fairseq's ``should_stop`` checks after an update; the checkpoint's training time,
    which fairseq's trainer keeps as ``_previous_training_time``, is every rank's)."""
    cap_hours = cfg.optimization.stop_time_hours
    return cap_hours > 0 and trained_hours(trainer) > cap_hours


def trained_hours(trainer) -> float:
    """The training time of the checkpoint ``trainer`` resumed from, in hours (0: a new run)."""
    return getattr(trainer, "_previous_training_time", 0) / 3600


def _stopping_at_a_reached_limit(train):
    first_call = [True]  # the epoch a resumed run starts with; later ones stop as fairseq does

    @functools.wraps(train)
    def wrapper(cfg, trainer, task, epoch_itr):
        resuming, first_call[0] = first_call[0], False
        if resuming and reached_max_update(cfg, trainer):
            reached = updates_reached(trainer.get_num_updates(), cfg.optimization.max_update)
        elif resuming and reached_stop_time(cfg, trainer):
            reached = (f"{trained_hours(trainer):.4f} hours of training, past its "
                       f"--stop-time-hours {cfg.optimization.stop_time_hours}")  # fmt: skip
        elif resuming and out_of_patience(cfg):
            reached = f"no better validation for --patience {cfg.checkpoint.patience}"
        else:
            return train(cfg, trainer, task, epoch_itr)
        logger.info("the checkpoint has %s: nothing to train", reached)
        return [None], True  # fairseq's (valid losses, should stop)

    return wrapper


def install() -> None:
    """Batch a resumed run as its first epoch did; keep fairseq-train's patience count with its
    checkpoints; stop it before it trains past a limit its checkpoint had reached; a new run from
    another's weights counts its own training time (idempotent)."""
    from fairseq.tasks.fairseq_task import FairseqTask

    wrap_once(FairseqTask, "get_batch_iterator", _batching_as_the_first_epoch)
    train = running_command("fairseq_cli.train")
    if getattr(train, "train", None) is not None:
        from fairseq import checkpoint_utils
        from fairseq.trainer import Trainer

        wrap_once(train, "train", _stopping_at_a_reached_limit)
        wrap_once(Trainer, "get_train_iterator", _noting_the_seed_plus_epoch)
        wrap_once(Trainer, "save_checkpoint", _saving_the_run_state)
        wrap_once(Trainer, "load_checkpoint", _resharding_the_position)
        wrap_once(checkpoint_utils, "load_checkpoint", _restoring_the_run_state)
