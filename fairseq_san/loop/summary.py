"""The loop's record of its iterations: ``RUN_DIR/loop.md`` and ``loop.json``.

One row per trained iteration (``RUN_DIR/iter<k>/checkpoints/checkpoint_best.pt``): the policy it
was trained with and the one it learned, with the range of theta that learns the same (a policy
learned near an end of its range is one rounding away from another one), parameters (tied and
shared tensors once), updates, training time, validation loss and the validation BLEU/chrF of
``valid.json``; below it, why the loop stopped, once it has (``stopping``: its rule, or its
--max-iterations reached while the policy still changed). An iteration whose
checkpoint is gone (a run dir restored without checkpoints on another machine, which trains the
next iteration) keeps the row the earlier summary recorded.
"""

import os
from typing import Dict, List, Optional, Sequence

from fairseq_san.errors import UsageError, abbreviated
from fairseq_san.files import glob_in, read_json_if_there, write_json, write_text
from fairseq_san.loop.run_record import ITERATION_DIR, read_record, recorded_thetas
from fairseq_san.loop.stopping import policy_path, why_ended
from fairseq_san.options import LM_KIND
from fairseq_san.policy import (
    KINDS,
    PolicyError,
    ThetaRange,
    format_policy,
    learn_policy,
    load_policy,
    theta_ranges,
)

# Scores a row may lack when an older loop.json recorded it (before the column existed).
SCORES = ("bleu", "chrf", "signature", "perplexity")
NUMBER, TEXT, NONE = (int, float), (str,), (type(None),)
# What each field of a loop.json row holds (what ``iteration_row`` and ``with_learned`` write),
# and of an iteration's valid.json: checked where a run dir received from elsewhere is read,
# before the table formats them.
ROW_FIELDS = {
    "iteration": (int,), "policy": TEXT, "parameters": (int,), "num_updates": (int,) + NONE,
    "train_seconds": NUMBER + NONE, "valid_loss": NUMBER + NONE, "bleu": NUMBER + NONE,
    "chrf": NUMBER + NONE, "perplexity": NUMBER + NONE, "signature": TEXT + NONE,
    "learned": TEXT, "learned_for": TEXT, "trained": (bool,),
}  # fmt: skip
# The fields of a loop.json row that every summary recorded (the table's cells; the scores of
# ``SCORES`` and ``trained`` came later, the learned policy is read again).
REQUIRED_FIELDS = ("policy", "parameters", "num_updates", "train_seconds", "valid_loss")
SCORE_FIELDS = {"bleu": NUMBER + NONE, "chrf": NUMBER + NONE, "perplexity": NUMBER + NONE,
                "bleu_signature": TEXT + NONE}  # fmt: skip


def field_problem(value: Dict[str, object], fields: Dict[str, tuple]) -> Optional[str]:
    """The first field of ``value`` that holds another type than ``fields`` says (True is no
    number), or None."""
    for name, types in fields.items():
        held = value.get(name)
        boolean = isinstance(held, bool) and bool not in types
        if name in value and (not isinstance(held, types) or boolean):
            wanted = " or ".join("null" if t is type(None) else t.__name__ for t in types)
            return f"its {name} is {abbreviated(repr(held))}, not {wanted}"
        if isinstance(held, int) and beyond_floats(held):  # the table's float() raised
            return f"its {name} {abbreviated(repr(held))} is beyond a float's range"
    return None


def beyond_floats(value: int) -> bool:
    """Whether an int is too large for a float (``float()`` raises OverflowError)."""
    try:
        float(value)
    except OverflowError:
        return True
    return False


def iteration_dirs(run_dir: str) -> List[str]:
    """``RUN_DIR/iter<k>`` folders that hold a trained model, in iteration order."""
    found = [
        path
        for path in glob_in(run_dir, "iter*")
        if ITERATION_DIR.search(path) and os.path.exists(best_checkpoint(path))
    ]
    return sorted(found, key=lambda path: int(ITERATION_DIR.search(path).group(1)))


def best_checkpoint(iteration_dir: str) -> str:
    return os.path.join(iteration_dir, "checkpoints", "checkpoint_best.pt")


def checkpoint_facts(path: str) -> Dict[str, object]:
    """Parameters, best validation loss, updates and training seconds stored in a checkpoint.
    The loss is None where fairseq-train chose the best checkpoint by another metric
    (``--best-checkpoint-metric bleu``): it stores that metric's best, not the loss."""
    from fairseq_san.checkpoints import load_state, stored_value

    state = load_state(path)
    try:
        extra = state.get("extra_state") or {}
        by_loss = (stored_value(state, "checkpoint", "best_checkpoint_metric") or "loss") == "loss"
        return {
            "parameters": parameter_count(state),
            "valid_loss": as_number(extra.get("best")) if by_loss else None,
            "num_updates": state["optimizer_history"][-1].get("num_updates"),
            "train_seconds": as_number(extra.get("previous_training_time")),
        }
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, OverflowError) as err:
        raise UsageError(
            f"checkpoint {path} lacks what fairseq-train stores ({type(err).__name__}: "
            f"{abbreviated(str(err))}): was it written by fairseq-train?"
        ) from None


# Embeddings fairseq ties when the model flag is set. A checkpoint saved from a GPU holds each as
# its own copy (fairseq moves the state dict to the CPU tensor by tensor), so storages alone
# would count a tied embedding three times.
TIED_EMBEDDINGS = {
    "share_all_embeddings": ("decoder.embed_tokens.weight", "decoder.output_projection.weight"),
    "share_decoder_input_output_embed": ("decoder.output_projection.weight",),
}


def parameter_count(state: Dict) -> int:
    """Numbers in a checkpoint's model, each tied or shared tensor counted once; fairseq's
    ``version`` buffers are not parameters (the count equals fairseq-train's "num. model
    params")."""
    from fairseq_san.checkpoints import stored_value

    tied = {
        key
        for flag, keys in TIED_EMBEDDINGS.items()
        if stored_value(state, "model", flag)
        for key in keys
    }
    storages = {
        tensor.data_ptr(): tensor.numel()
        for key, tensor in state["model"].items()
        if key not in tied and key.rpartition(".")[2] != "version"
    }
    return sum(storages.values())


def as_number(value) -> Optional[float]:
    """A plain float for a value fairseq may store as a 0-d tensor (after distributed training)."""
    return None if value is None else float(value)


def read_json(path: str, what: str, expected: type = dict):
    """The JSON value in the loop's file ``path`` (``what``: "score file"; an object unless
    ``expected`` says otherwise), None if there is no file; a file that is not one (truncated,
    say) is a UsageError naming it."""
    fix = "delete it and rerun the step that writes it"
    return read_json_if_there(path, what, UsageError, fix, expected)


def iteration_row(iteration_dir: str, kinds: Sequence[str] = KINDS) -> Dict[str, object]:
    """An iteration's row from its checkpoint and files, its policy as ``kinds`` (the model's)."""
    facts = checkpoint_facts(best_checkpoint(iteration_dir))
    score_path = os.path.join(iteration_dir, "valid.json")
    score = read_json(score_path, "score file") or {}
    problem = field_problem(score, SCORE_FIELDS)
    if problem is not None:
        raise UsageError(f"{score_path}: {problem}: delete it and rerun the step that writes it")
    iteration = int(ITERATION_DIR.search(iteration_dir).group(1))
    return {
        "iteration": iteration,
        # the loop marks an iteration trained once its training ended; a checkpoint without the
        # mark is a training stopped (or still running), its row not a finished iteration's
        "trained": os.path.exists(os.path.join(iteration_dir, "trained")),
        "policy": format_policy(load_policy(os.path.join(iteration_dir, "policy.json")), kinds),
        "bleu": score.get("bleu"),
        "chrf": score.get("chrf"),
        "signature": score.get("bleu_signature"),
        "perplexity": score.get("perplexity"),
        **facts,
    }


def learned_policy(run_dir: str, iteration: int, kinds: Sequence[str] = KINDS) -> str:
    """The policy iteration ``iteration`` learned (``iter<k+1>/policy.json``), "-" if none yet."""
    path = policy_path(run_dir, iteration + 1)
    return format_policy(load_policy(path), kinds) if os.path.exists(path) else "-"


def learned_theta_ranges(run_dir: str, iteration: int) -> Optional[Dict[str, ThetaRange]]:
    """Per kind, the thetas that learn the policy iteration ``iteration`` learned from its analysis
    (``theta_ranges`` at the run's recorded thresholds); None before that policy exists, and where
    its file is not what those thresholds learn (a policy written by hand)."""
    path = policy_path(run_dir, iteration + 1)
    js_path = os.path.join(run_dir, f"iter{iteration}", "analysis", "js.json")
    js = read_json(js_path, "analysis")
    recorded = read_record(run_dir)
    if not os.path.exists(path) or js is None or recorded is None:
        return None
    thetas = recorded_thetas(recorded[0])
    try:
        learned = learn_policy(js, thetas)
    except PolicyError as err:  # a matrix of another shape: the message named no file
        raise UsageError(f"{js_path}: {err}: delete it and rerun the step that writes it") from None
    return theta_ranges(js, thetas) if learned == load_policy(path) else None


def format_theta_ranges(ranges: Optional[Dict[str, Sequence]]) -> str:
    """Ranges of theta per kind (a ``learned_theta_ranges`` result, or its JSON) as a table cell,
    e.g. ``decoder_encdec [0.4883, 0.5006]`` (``ThetaRange``: rounded inwards); "-" for None."""
    if ranges is None:
        return "-"
    return "  ".join(f"{kind} {ThetaRange(*same)}" for kind, same in ranges.items())


def with_learned(
    run_dir: str, row: Dict[str, object], kinds: Sequence[str] = KINDS
) -> Dict[str, object]:
    """``row`` with the policy its iteration learned, as it is now, and that policy's range of
    theta (a recorded row's may be older than the next iteration's policy file)."""
    iteration = row["iteration"]
    return {
        **row,
        "learned": learned_policy(run_dir, iteration, kinds),
        "learned_for": format_theta_ranges(learned_theta_ranges(run_dir, iteration)),
    }


def recorded_rows(run_dir: str) -> List[Dict[str, object]]:
    """The rows of ``RUN_DIR/loop.json`` whose iteration folder is still there, with None for
    the scores that an older summary did not record."""
    path = os.path.join(run_dir, "loop.json")
    rows = read_json(path, "loop summary", list) or []
    if not all(isinstance(row, dict) and "iteration" in row for row in rows):
        raise UsageError(f"{path} is not a loop summary (a list of iteration rows): delete it to "
                         "rebuild it from the checkpoints")  # fmt: skip
    for row in rows:
        missing = [name for name in REQUIRED_FIELDS if name not in row]
        problem = f"it lacks {', '.join(missing)}" if missing else field_problem(row, ROW_FIELDS)
        if problem is not None:
            raise UsageError(f"{path}: the row of iteration {row['iteration']!r}: {problem}: "
                             "delete it to rebuild it from the checkpoints")  # fmt: skip
    return [
        {**dict.fromkeys(SCORES), "trained": True, **row}  # an older loop.json: unmarked
        for row in rows
        if os.path.isdir(os.path.join(run_dir, f"iter{row['iteration']}"))
    ]


def shown(value, fmt: str = "{}") -> str:
    """A table cell: ``value`` formatted, "-" where there is none."""
    return "-" if value is None else fmt.format(value)


# Where a language model's two scores come from: they differ in what they count with
# --add-bos-token (2 ** loss is then not the perplexity).
LM_SCORES_NOTE = (
    "Valid loss is fairseq-train's best validation loss (base 2), valid ppl fairseq-eval-lm's "
    "on the same split: with --add-bos-token the loss counts a first target, <s> after <s>, that "
    "the perplexity leaves out, so 2 ** loss is not the perplexity."
)


def summary_table(rows: List[Dict[str, object]], language_model: bool = False) -> str:
    """Markdown table of the loop, one row per iteration: BLEU and chrF of a translation model,
    the perplexity of a language model (``language_model``: the run's record says so, or a
    ``valid.json`` does; an LM run stopped before its first showed the translation columns)."""
    language_model = language_model or any(row["perplexity"] is not None for row in rows)
    scores = "valid ppl |" if language_model else "valid BLEU | valid chrF |"
    lines = [
        f"| iter | trained with policy | params | updates | train time | valid loss | {scores} "
        "learned policy | learned for theta in |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |" + ("" if language_model else " ---: |")
        + " --- | --- |",
    ]
    for row in rows:
        minutes = None if row["train_seconds"] is None else row["train_seconds"] / 60
        cells = (
            [shown(row["perplexity"], "{:.2f}")]
            if language_model
            else [shown(row["bleu"], "{:.2f}"), shown(row["chrf"], "{:.2f}")]
        )
        unfinished = "" if row.get("trained", True) else " (training unfinished)"
        lines.append(
            f"| {row['iteration']}{unfinished} | {row['policy']} | {row['parameters']:,} | "
            f"{shown(row['num_updates'])} | {shown(minutes, '{:.0f} min')} | "
            f"{shown(row['valid_loss'], '{:.3f}')} | {' | '.join(cells)} | {row['learned']} | "
            f"{row['learned_for']} |"
        )
    signatures = sorted({row["signature"] for row in rows if row["signature"]})
    lines += ["", "Train time is fairseq's training clock stored in the checkpoint (a warm-started "
              "iteration's counts its own training only)."]
    if language_model:
        lines += ["", LM_SCORES_NOTE]
    if signatures:
        lines += [""] + [f"BLEU signature: `{signature}`" for signature in signatures]
    return "\n".join(lines) + "\n"


def model_kinds(run_dir: str) -> Sequence[str]:
    """The attention kinds of the run's model: a language model's run (its record's ``--lm``,
    learn_to_share_lm.sh) has decoder self-attention only."""
    record = read_record(run_dir)
    return (LM_KIND,) if record is not None and record[0].get("--lm") else KINDS


def write_summary(run_dir: str) -> str:
    """Write loop.md and loop.json: a row per trained iteration, from its checkpoint, else as the
    earlier summary recorded it (with the policy it learned brought up to date)."""
    if not os.path.isdir(run_dir):
        raise FileNotFoundError(f"{run_dir}: no such run dir (the loop's --run-dir)")
    kinds = model_kinds(run_dir)
    by_iteration = {row["iteration"]: row for row in recorded_rows(run_dir)}
    for folder in iteration_dirs(run_dir):
        row = iteration_row(folder, kinds)
        by_iteration[row["iteration"]] = row
    rows = [with_learned(run_dir, by_iteration[k], kinds) for k in sorted(by_iteration)]
    if not rows:
        raise FileNotFoundError(
            f"no trained iteration (iter*/checkpoints/checkpoint_best.pt) in {run_dir}"
        )
    stop = why_ended(run_dir, rows[-1]["iteration"])
    table = f"# Learn to share: {run_dir}\n\n" + summary_table(rows, kinds == (LM_KIND,))
    table += "" if stop is None else f"\nStopped: {stop}.\n"
    write_text(os.path.join(run_dir, "loop.md"), table, replace_link=True)
    write_json(os.path.join(run_dir, "loop.json"), rows, replace_link=True)
    return table
