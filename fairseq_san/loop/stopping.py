"""The loop's stopping rule: stop when the policy an iteration learns is not new.

The paper (Section 3.3, Figure 3) returns "the result of the final round ... when there is no new
update of the model". It names the plain case: iteration k learns the policy it was trained with.
A policy can also come back: iteration k learns the policy of an earlier iteration j. Layers that
share attention weights have identical attention (JS 0), so the learned policy mostly merges
blocks, but not always: Eq. 6 takes a block's mean over pairs, which can end a block inside a
shared one (three alike layers and a fourth unlike them, shared with a fifth: the four pass
theta, the five do not), and KV sharing (``--self-share kv``) leaves every layer its own
attention. Trained from scratch with the same data, seed and options, iteration k + 1 would then
repeat iteration j, and the loop would cycle through j..k without end, so that stops it too. A
warm-started loop (``--warm-start``) starts each iteration from the one before: there a repeated
policy is a new model, and only the plain case stops it. Policies are compared by the layers that
share (``policy.shared_blocks``): every layer a block of its own is no sharing, iteration 0's.
"""

import os
from dataclasses import dataclass
from typing import Optional, Union

from fairseq_san.loop.run_record import read_record
from fairseq_san.policy import load_policy, shared_blocks


def policy_path(run_dir: str, iteration: int) -> str:
    """``RUN_DIR/iter<k>/policy.json``: the policy iteration k is trained with."""
    return os.path.join(run_dir, f"iter{iteration}", "policy.json")


@dataclass(frozen=True)
class Stop:
    """Iteration ``iteration`` learned the policy that iteration ``repeats`` was trained with."""

    iteration: int
    repeats: int

    def __str__(self) -> str:
        k, j = self.iteration, self.repeats
        if j == k:
            return f"the policy did not change: done after iteration {k}"
        return (
            f"iteration {k} learned the policy of iteration {j}: done after iteration {k} (the "
            f"loop cycles: retrained from scratch with the same seed and options, iteration "
            f"{k + 1} would repeat iteration {j}, and the policies of iterations {j}-{k} would "
            "follow)"
        )


def warm_started(run_dir: str) -> bool:
    """Whether the run's record (run.json) says each iteration starts from the one before."""
    record = read_record(run_dir)
    return bool(record and record[0].get("--warm-start"))


def loop_stop(run_dir: str, iteration: int) -> Optional[Stop]:
    """Why the loop stops after ``iteration``, given the policy it learned
    (``iter<k+1>/policy.json``): the newest iteration j <= k trained with that policy (only k
    itself in a warm-started run); None when the policy is new or not learned yet."""
    learned_path = policy_path(run_dir, iteration + 1)
    if not os.path.exists(learned_path):
        return None
    learned = shared_blocks(load_policy(learned_path))
    earliest = iteration if warm_started(run_dir) else 0
    for trained in range(iteration, earliest - 1, -1):
        path = policy_path(run_dir, trained)
        if os.path.exists(path) and shared_blocks(load_policy(path)) == learned:
            return Stop(iteration, trained)
    return None


@dataclass(frozen=True)
class Unsettled:
    """--max-iterations ended the loop after ``iteration``, which learned a new policy."""

    iteration: int
    max_iterations: int

    def __str__(self) -> str:
        k = self.iteration
        return (
            f"--max-iterations {self.max_iterations} ended the loop with its policy still "
            f"changing: iteration {k} learned a policy no iteration trained "
            f"(iter{k + 1}/policy.json); rerun the recipe with --extend --max-iterations "
            f"{self.max_iterations + 1} to train it"
        )


def why_ended(run_dir: str, iteration: int) -> Optional[Union[Stop, Unsettled]]:
    """Why the loop ended after ``iteration``: its stopping rule (``loop_stop``), else its
    recorded --max-iterations, reached with a new policy learned; None while it goes on, and for
    a run of one iteration (--max-iterations 1: a system trained once, its policy learned for
    the record, as the converged campaign's systems are)."""
    stop = loop_stop(run_dir, iteration)
    if stop is not None or not os.path.exists(policy_path(run_dir, iteration + 1)):
        return stop
    record = read_record(run_dir)
    wanted = str(record[0].get("--max-iterations", "")) if record else ""
    if wanted.isdigit() and int(wanted) == iteration + 1 > 1:
        return Unsettled(iteration, int(wanted))
    return None
