"""fairseq-train resumed from a checkpoint continues the run it interrupted, update for update.

Upstream behaviour corrected, in fairseq main (and fairseq-fixed, which we install):

* **The batches.** ``FairseqTask.get_batch_iterator`` orders the sentences under
  ``numpy_seed(seed + epoch)`` and builds the batches once, at the epoch the run starts, for
  every epoch after it (unless ``--rebuild-batches``). A run started at epoch 1 batches with
  ``seed + 1`` to its end; the same run resumed at epoch 4 rebuilt its batches with ``seed + 4``:
  the same sentences in each batch, in another order, so float sums differ and the resumed run
  drifts from the one it continues (fairseq 0.12.2 ordered under ``numpy_seed(seed)``, whatever
  the epoch). The learn-to-share loop reruns a stopped iteration this way, and a policy learned
  near a threshold could change with it. A resumed run now orders its batches as its first epoch
  did; where fairseq rebuilds them each epoch (``--rebuild-batches``, sharded data) nothing
  changes.
* **The limit.** ``fairseq_cli.train.train`` takes an update before it checks ``--max-update``
  and ``--stop-time-hours``, so a run resumed from a checkpoint that had reached its limit (its
  recipe stopped after fairseq-train had finished, before it could note so) trained one update
  more and saved it over ``checkpoint_last.pt`` and ``checkpoint_best.pt``. It now stops before
  it trains, as fairseq's own check would have stopped it.

A run stopped by ``--patience`` still trains on when resumed: fairseq does not save how many
validations have not improved.
"""

import functools
import inspect
import logging
from typing import Optional

from fairseq_san.fairseq_fixes.wrapping import running_command, wrap_once

logger = logging.getLogger(__name__)

FIRST_EPOCH = 1  # fairseq's epochs count from 1


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
        epoch = call.arguments["epoch"]
        task = call.arguments["self"]
        if epoch == FIRST_EPOCH or not builds_batches_once(task, call):
            return get_batch_iterator(*args, **kwargs)
        logger.info("resuming at epoch %d: the batches of epoch %d, as the run made them",
                    epoch, FIRST_EPOCH)  # fmt: skip
        call.arguments["epoch"] = FIRST_EPOCH
        iterator = get_batch_iterator(*call.args, **call.kwargs)
        iterator.epoch = epoch  # what fairseq's constructor would have set: the epoch to resume
        call.arguments["dataset"].set_epoch(epoch)
        return iterator

    return wrapper


def reached_limit(cfg, trainer) -> Optional[str]:
    """The training limit a run has reached before it trains (fairseq's ``validate_and_save``
    checks after an update), or None."""
    optimization = cfg.optimization
    if optimization.max_update and trainer.get_num_updates() >= optimization.max_update:
        return f"--max-update {optimization.max_update}"
    hours = trainer.cumulative_training_time() / (60 * 60)
    if optimization.stop_time_hours > 0 and hours > optimization.stop_time_hours:
        return f"--stop-time-hours {optimization.stop_time_hours}"
    return None


def _stopping_at_the_limit(train):
    @functools.wraps(train)
    def wrapper(cfg, trainer, task, epoch_itr):
        limit = reached_limit(cfg, trainer)
        if limit is None:
            return train(cfg, trainer, task, epoch_itr)
        logger.info("the checkpoint has reached %s (%d updates): nothing to train", limit,
                    trainer.get_num_updates())  # fmt: skip
        return [None], True  # fairseq's (valid losses, should stop)

    return wrapper


def install() -> None:
    """Batch a resumed run as its first epoch did; stop fairseq-train before it trains past its
    limit (idempotent)."""
    from fairseq.tasks.fairseq_task import FairseqTask

    wrap_once(FairseqTask, "get_batch_iterator", _batching_as_the_first_epoch)
    train = running_command("fairseq_cli.train")
    if getattr(train, "train", None) is not None:
        wrap_once(train, "train", _stopping_at_the_limit)
