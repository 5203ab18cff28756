"""fairseq-generate translates the shard that ``--num-shards`` and ``--shard-id`` name; the
commands that do not shard refuse them.

Upstream behaviour corrected: fairseq-generate's help says ``--num-shards N``: "shard generation
over N shards" and ``--shard-id K``: "id of the shard to generate (id < num_shards)", but its batch
iterator takes its shards from ``--distributed-world-size`` and ``--distributed-rank`` (1 and 0
in fairseq-generate), so each of N jobs translated the whole subset: N copies of one output, and
a shard id out of range was accepted. ``install()`` wraps fairseq-generate's ``main`` when that
command runs: the two options become the iterator's shards (fairseq-eval-lm reads them so
already), and a shard id out of range, or shards given both ways and different, is one line.
Shards take whole batches in turn (shard K the batches K, K + N, ...), so a shard past the
subset's last batch held no sentence, and fairseq-generate failed dividing by its time
(``ZeroDivisionError``): ``FairseqTask.get_batch_iterator`` says so in one line instead.

fairseq-eval-lm shards by the two options itself, but a shard id out of range was a ``ValueError``
traceback, and a shard past the last batch reported "Loss (base 2): 0.0000, Perplexity: 1.00" of
no token: both are one line too; so is ``--context-window`` beside shards, where a batch's
context came from the batch before it in the shard, another part of the text (the shards'
losses did not make the whole subset's). fairseq-validate, fairseq-train and
fairseq-interactive accept the options and ignore them (every job validated or trained on the
whole subset), so ``check_shards`` refuses them there.
"""

import argparse
import functools
import inspect

from fairseq_san.errors import UsageError
from fairseq_san.fairseq_fixes.wrapping import running_command, wrap_once


def check_shards(args: argparse.Namespace, command: str, shards_read: bool) -> None:
    """Refuse ``--num-shards`` and ``--shard-id`` where the command ignores them (``shards_read``
    false: it evaluates or trains on the whole subset), a shard that does not exist, and shards
    beside fairseq-eval-lm's ``--context-window``, which takes context across batches."""
    shards, shard = getattr(args, "num_shards", 1), getattr(args, "shard_id", 0)
    if not shards_read and (shards, shard) != (1, 0):
        raise UsageError(
            f"--num-shards {shards} --shard-id {shard}: {command} would ignore them and read the "
            "whole subset; fairseq-generate and fairseq-eval-lm alone shard a subset"
        )
    if shards < 1 or not 0 <= shard < shards:
        raise UsageError(
            f"--shard-id {shard} of --num-shards {shards}: the shards are 0 to N - 1, N at least 1"
        )
    window = getattr(args, "context_window", 0)
    if shards > 1 and window > 0:
        raise UsageError(
            f"--context-window {window} with --num-shards {shards}: fairseq-eval-lm takes a "
            "batch's context from the batch before it in the shard, another part of the text, so "
            "the shards' perplexities would not make the subset's; leave out one of them"
        )


def apply_shards(args: argparse.Namespace) -> None:
    """Set fairseq-generate's shards (``distributed_world_size``, ``distributed_rank``) from
    ``--num-shards`` and ``--shard-id`` (``check_shards`` refused a shard that does not exist
    as they were parsed); UsageError where the distributed options name other shards."""
    shards, shard = args.num_shards, args.shard_id
    if shards == 1:
        return
    world, rank = args.distributed_world_size, args.distributed_rank
    if (world, rank) not in ((1, 0), (shards, shard)):
        raise UsageError(
            f"--num-shards {shards} --shard-id {shard} and --distributed-world-size {world} "
            f"--distributed-rank {rank} name two shardings: give --num-shards and --shard-id only"
        )
    args.distributed_world_size, args.distributed_rank = shards, shard


def _sharding(main):
    @functools.wraps(main)
    def wrapper(cfg, *args, **kwargs):
        if isinstance(cfg, argparse.Namespace):  # the command line's (cli_main)
            apply_shards(cfg)
        return main(cfg, *args, **kwargs)

    return wrapper


def check_shard_has_batches(batches: int, shards: int, shard: int) -> None:
    """Refuse a shard that takes none of the subset's ``batches`` (it holds no sentence)."""
    if shard >= batches:
        raise UsageError(
            f"--shard-id {shard} of --num-shards {shards} holds no sentence: the subset makes "
            f"{batches} batch(es), and each shard takes whole batches in turn; pass at most "
            f"--num-shards {batches}, or a smaller --batch-size or --max-tokens"
        )


def _refusing_empty_shards(get_batch_iterator):
    signature = inspect.signature(get_batch_iterator)

    @functools.wraps(get_batch_iterator)
    def wrapper(*args, **kwargs):
        iterator = get_batch_iterator(*args, **kwargs)
        call = signature.bind(*args, **kwargs)
        call.apply_defaults()
        shards, shard = call.arguments["num_shards"], call.arguments["shard_id"]
        if shards > 1:
            check_shard_has_batches(len(iterator.frozen_batches), shards, shard)
        return iterator

    return wrapper


def install() -> None:
    """Wrap fairseq-generate's ``main`` when that command runs, and the tasks'
    ``get_batch_iterator`` when it or fairseq-eval-lm runs (idempotent)."""
    from fairseq.tasks import FairseqTask

    generate = running_command("fairseq_cli.generate")
    generating = getattr(generate, "main", None) is not None
    if generating:
        wrap_once(generate, "main", _sharding)
    if generating or running_command("fairseq_cli.eval_lm") is not None:
        wrap_once(FairseqTask, "get_batch_iterator", _refusing_empty_shards)
