"""Options a fairseq command needs, and one it cannot honour, checked as the command parses them.

Upstream behaviour corrected: fairseq's parser (``fairseq.options.parse_args_and_arch``) leaves
options unchecked that its commands need, and each then fails far from the cause:

* fairseq-train without ``--arch``: a ``RuntimeError`` without a message;
* fairseq-validate without ``--task`` (it has no default task): ``KeyError: None``, before the
  task's own options (``--san-analysis-dir``) can even be parsed;
* fairseq-interactive, fairseq-validate and fairseq-eval-lm without ``--path``: a ``TypeError``
  where the checkpoint is loaded (fairseq-generate alone asserts it; it gets the same line).

``--replace-unk`` (fairseq-generate, fairseq-interactive) cannot work in fairseq 0.12: without a
value it opens a file named ``'@@ '`` (the flag's constant); with one, the first hypothesis that
holds ``<unk>`` fails in ``fairseq.utils.replace_unk``, which indexes a per-word alignment that
fairseq's generators return empty (``--print-alignment``: as pairs), whatever the model; on
binarized data fairseq-generate first asserts ``--dataset-impl raw``, which leads to the same.
fairseq-eval-lm joins subword-nmt pieces only: any other ``--post-process`` (``--remove-bpe``),
``sentencepiece``, ``none`` or ``''`` too, was a ``NotImplementedError`` traceback once the model
had loaded (``subword_joining.check_eval_lm_post_process``).

A plugin option given to a task or model that does not have it (``fairseq-validate --task
translation --san-analysis-dir DIR``) got argparse's usage text and "unrecognized arguments"; it
is now one line naming the plugin's tasks or models that have the option, and a misspelt option
(``--san-decoder-self-polcy``) one line naming the nearest the command has.

``--beam 0`` or ``--nbest 0`` failed with a ``ZeroDivisionError`` or a slice error inside the
generators, ``--lenpen nan`` printed NaN scores, ``--nbest`` above ``--beam`` printed fewer
hypotheses than asked, ``--temperature 0`` failed on fairseq's assertion, ``--sampling-topk``
beside ``--sampling-topp`` was ignored (fairseq's sampling applies one, top-p), a top-p outside
(0, 1] or a top-k below 1 sampled from every token (the checks: ``generation_options``), ``--bf16``
was ignored by every command but fairseq-train (they convert a model with ``--fp16`` only), and
``--adaptive-softmax-cutoff`` trained only with ``--criterion adaptive_loss`` and
``--ddp-backend legacy_ddp`` (otherwise an autograd ``RuntimeError`` or fairseq's exception), and
``adaptive_loss`` only with it (a bare ``AssertionError``);
``--adaptive-input`` without its cutoff, tied to the output, or tied to an adaptive softmax of
other bands failed on a ``TypeError``, an ``AttributeError`` or a bare ``AssertionError``.
fairseq-train's ranks (``world_size``) and learning-rate schedulers (``lr_schedulers``) are
checked too. A
number out of its range (``--update-freq 0``, ``--dropout 1.5``, ``--lr -1``: ``option_ranges``)
and ``--tokenizer moses`` without ``--source-lang`` and ``--target-lang`` (hydra's "Error merging
override tokenizer.source_lang=null") are one line too.

A plugin option that the command would accept and ignore is refused: the static decoder's and
``--san-decoding`` where nothing decodes (fairseq-validate, fairseq-eval-lm, fairseq-train
without ``--eval-bleu``; fairseq-train keeps ``--san-decoding fast`` and ``no-cache``, which the
model applies to itself and its checkpoint keeps), ``--san-analysis-dir`` outside
fairseq-validate (fairseq-train stopped at its first update; fairseq-eval-lm created the folder
and wrote nothing), the analysis's other options without it, and with it more than one
``--valid-subset`` (the second was refused after the first had been analysed). An option is
given where the command line names it (``--san-decoding fairseq`` too, its default).

A ``--model-overrides`` that fairseq-generate or fairseq-interactive cannot read (a name, a call,
arithmetic, an unclosed brace: a traceback from their ``ast.literal_eval``), or that is no dict
(``'[1]'``: fairseq-validate's ``TypeError``), is one line naming it; so is an empty subset name
in ``--valid-subset`` or ``--gen-subset`` (``''``, ``'valid,'``: "Dataset not found:  (DATA)").

fairseq's ``--help`` printed its help at its first parse, before it added the options of the
chosen ``--arch``, ``--task``, ``--criterion``, ...: the plugin's options were never listed. It
lists them now (``print_help_of_components``).

``install()`` wraps ``parse_args_and_arch``: each of these is one line naming the option and the
fix (``UsageError``) before anything is loaded. It also wraps fairseq-validate's ``main`` (where
that command runs), whose ``checkpoint_utils.load_model_ensemble_and_task`` keeps the checkpoint's
task and gives ``--san-analysis-dir`` only to a task that has it: on a checkpoint of fairseq's own
``translation`` or ``language_modeling`` task (or with a ``'task'`` dict in ``--model-overrides``)
it validated, exited 0 and wrote nothing; once the task is built, before the validation pass, that
is one line naming the override that analyses (``attention_analysis.check_analysis_applied``).
fairseq-preprocess, whose parser is not ``parse_args_and_arch``, has its ``main`` wrapped too
(``check_preprocess``): a missing or folder input, ``--workers`` out of range and an
``--align-suffix`` without its file are one line.
"""

import argparse
import ast
import contextlib
import functools
import io
import logging
import os
import sys
from dataclasses import fields
from typing import Any, Callable, Dict, List, NoReturn, Optional, Tuple

from fairseq_san.errors import UsageError, nearest_key, nearest_key_hint
from fairseq_san.fairseq_fixes.generation_shards import check_shards
from fairseq_san.fairseq_fixes.literal_eval import NotALiteral, evaluate, shown
from fairseq_san.fairseq_fixes.lr_schedulers import check_lr_scheduler
from fairseq_san.fairseq_fixes.namespace_overrides import check_no_interpolation
from fairseq_san.fairseq_fixes.option_ranges import check_option_ranges, shown_value, text_number
from fairseq_san.fairseq_fixes.restore_file import check_checkpoint_flags, fine_tunes
from fairseq_san.fairseq_fixes.subword_joining import check_eval_lm_post_process
from fairseq_san.fairseq_fixes.world_size import check_world_size
from fairseq_san.fairseq_fixes.wrapping import running_command, wrap_once
from fairseq_san.generation_options import (
    check_no_alignment,
    check_no_constraints,
    check_scored_as_asked,
    check_search_numbers,
)
from fairseq_san.options import (
    ANALYSIS_OPTIONS,
    DECODER_OPTIONS,
    DECODING,
    FAIRSEQ,
    MODEL_DECODINGS,
    MODEL_OPTIONS,
    OPTIONS,
    SELF_SHARE,
    Option,
    asked_decoding,
    chosen_decoding,
    current_flag,
    cutoffs_read,
    flag_of,
    name_of,
)

logger = logging.getLogger(__name__)

# Tasks whose load_dataset ignores the checkpoint's task options (fairseq-generate's task_cfg).
TASKS_IGNORING_SAVED_TASK = (
    "translation", "translation_san", "language_modeling", "language_modeling_san",
)  # fmt: skip
# What to pass instead of a group in the --model-overrides of a command that does not read it.
GROUP_FLAGS = {
    "task": "pass --task NAME and the task's options as flags (--task translation_san or "
    "language_modeling_san, ...)",
    "generation": "pass the generation options as flags (--beam 5, ...)",
    "bpe": "pass --bpe NAME and its options as flags",
    "tokenizer": "pass --tokenizer NAME and its options as flags",
}
# Options fairseq's parser needs before it can add their own options: {dest: what to pass}.
NEEDED_TO_PARSE = {
    "arch": "the model to train, e.g. --arch transformer_san_small (translation) or "
    "transformer_lm_san_small (a language model); --help lists them",
    "task": "the task the checkpoint was trained with, e.g. --task translation_san or "
    "language_modeling_san; the task's own options, such as --san-analysis-dir, come with it",
}
CHECKPOINT = "the checkpoint to load, e.g. --path CHECKPOINTS/checkpoint_best.pt"
REPLACE_UNK = (
    "--replace-unk does not work in fairseq 0.12: its generators return no per-word alignment, "
    "so replacing the first <unk> fails (and without a value the flag names a file '@@ '); "
    "leave it out (subword units, sentencepiece or BPE, leave no unknown words to replace)"
)


def missing_to_parse(
    parser: argparse.ArgumentParser, input_args: Optional[List[str]]
) -> Optional[str]:
    """The first option of ``NEEDED_TO_PARSE`` that ``parser`` has and the command line leaves
    unset, after fairseq's parsing failed (``modify_parser`` has set its defaults by then)."""
    known, _ = parser.parse_known_args(input_args)
    for dest in NEEDED_TO_PARSE:
        if hasattr(known, dest) and getattr(known, dest) is None:
            return dest
    return None


# The flags of the plugin's options (a fairseq model's own flag missing from another model is
# argparse's to refuse).
PLUGIN_FLAGS = {option.flag for option in OPTIONS.values()}


def plugin_owners(flag: str) -> List[str]:
    """The plugin's tasks and models that add ``flag`` to a parser, as ``--task NAME`` and
    ``--arch NAME`` (registered models, not their size variants)."""
    from fairseq.models import MODEL_REGISTRY
    from fairseq.tasks import TASK_REGISTRY

    from fairseq_san.models import MODELS
    from fairseq_san.tasks import TASKS

    owners = []
    searched = (("--task", TASK_REGISTRY, TASKS), ("--arch", MODEL_REGISTRY, MODELS))
    for option, registry, plugins in searched:
        for name, cls in registry.items():
            if cls in plugins:
                probe = argparse.ArgumentParser(add_help=False)
                cls.add_args(probe)
                if flag in probe._option_string_actions:
                    owners.append(f"{option} {name}")
    return owners


def current_form_here(parser: argparse.ArgumentParser, flag: str) -> Optional[str]:
    """``--san-decoding static`` where ``flag`` is a deprecated plugin option (``--san-decoder``)
    whose current form (``options.current_flag``) ``parser`` takes, with that value; else None
    (a language model's task has --san-decoding, never the deprecated --san-decoder)."""
    option = OPTIONS.get(name_of(flag))
    if option is None or option.alias_of is None:
        return None
    target, value = current_flag(option, None)
    action = parser._option_string_actions.get(target)
    if action is None or (action.choices and value not in map(str, action.choices)):
        return None
    return f"{target} {value}"


# How near (difflib's ratio) an unknown flag must be to one of the command's to be named as what
# was meant: --san-decoder-self-polcy is 0.98 from --san-decoder-self-policy, --bogus 0.67 from
# --eos.
MISSPELT = 0.85


def refuse_unrecognized(
    parser: argparse.ArgumentParser, args: argparse.Namespace, extra: List[str]
) -> None:
    """What argparse does with ``extra`` (arguments no option took), except that a plugin option
    is a UsageError naming the plugin's tasks or models that have it."""
    for argument in extra:
        flag = argument.split("=", 1)[0]
        owners = plugin_owners(flag) if flag in PLUGIN_FLAGS else []
        if flag in {option.flag for option in ANALYSIS_OPTIONS} and hasattr(args, "beam"):
            raise UsageError(analysis_elsewhere(parser.prog))  # no task would make it read
        if owners:
            option = owners[0].split()[0]  # --task or --arch
            loads_model = option == "--arch" and hasattr(args, "path")  # its arch: the model's
            here = "" if loads_model else f" {option} {getattr(args, name_of(option), None)}"
            replacement = current_form_here(parser, flag)
            if replacement is not None:  # a deprecated option whose current form this one has
                raise UsageError(
                    f"{parser.prog}{here} has no option {flag}: it is a deprecated option of "
                    f"{' or '.join(owners)}; pass {replacement}"
                )
            if loads_model:
                raise UsageError(
                    f"{parser.prog} has no option {flag}: it is an option of "
                    f"{' or '.join(owners)}, set when the model is trained; a checkpoint takes "
                    f"another value with --model-overrides \"{{'{name_of(flag)}': VALUE}}\""
                )
            raise UsageError(
                f"{parser.prog}{here} has no option {flag}: it is an option of "
                f"{' or '.join(owners)}"
            )
    for argument in extra:
        flag = argument.split("=", 1)[0]
        flags = parser._option_string_actions
        near = nearest_key(flag, flags, MISSPELT) if flag.startswith("--") else None
        if near is not None:  # argparse printed its whole usage (hundreds of lines), then this
            raise UsageError(f"{parser.prog} has no option {flag}: did you mean {near}?")
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")


# Precisions that only fairseq's trainer applies: another command ran in fp32 without a word.
TRAINERS_PRECISIONS = {
    "bf16": "fairseq converts a model to evaluate it with --fp16 only",
    "amp": "fairseq's automatic mixed precision is its trainer's",
}


def check_parsed(args: argparse.Namespace, command: str, argv: List[str]) -> None:
    """Refuse arguments (``argv``, parsed as ``args``) that ``command`` cannot honour, before it
    loads or trains anything: the checks below in turn, each saying in its docstring what it
    refuses; the command's kind (``command_kind``) picks the training or decoding ones."""
    if hasattr(args, "path") and args.path is None:
        raise UsageError(f"{command} needs --path: {CHECKPOINT}")
    if getattr(args, "replace_unk", None) is not None:
        raise UsageError(REPLACE_UNK)
    check_no_interpolation(args)
    check_option_ranges(args)
    check_buckets_sized(args)
    check_read_by_interactive(args, command)  # before the search numbers: --lm-path's check
    check_search_numbers(args)
    check_tokenizer_languages(args)
    kind = command_kind(args)
    check_plugin_options_used(args, command, kind, argv)
    if kind == "train":
        check_training(args)
    else:
        check_model_options_not_given(command, argv)
    check_subset_names(args)
    if kind in ("decode", "eval-lm", "validate"):
        overrides = read_overrides(getattr(args, "model_overrides", "{}"), command, kind)
    if kind in ("decode", "eval-lm"):
        check_overrides_read(args, overrides, command, kind)
    if kind == "decode":
        check_scored_as_asked(args, weight_given=given_flag(argv, "--lm-weight"))
        check_one_decoding_asked(args, overrides, command)
        check_refinement_options(args)
        check_constraints_given(args, command)
        check_alignment_printed(args, command)
        check_prefix_unpadded(args)
    check_results_path_written(args, command, kind)
    check_one_checkpoint(args, command, kind)
    check_batches_unpadded(args, command, kind)
    if kind == "eval-lm":
        check_eval_lm_post_process(args)
    shards_read = kind == "eval-lm" or (kind == "decode" and not reads_input_lines(args))
    check_shards(args, command, shards_read)
    check_trainers_precision(args, command, kind)


def check_buckets_sized(args: argparse.Namespace) -> None:
    """Refuse ``--num-batch-buckets`` without ``--max-tokens``: fairseq sizes each bucket's batches
    by its tokens (its assertion "Must specify --max-tokens", a traceback at the first batch)."""
    buckets = getattr(args, "num_batch_buckets", 0)
    if buckets and getattr(args, "max_tokens", None) is None:
        raise UsageError(
            f"--num-batch-buckets {buckets} needs --max-tokens: each bucket's batches are sized "
            "by their tokens (--batch-size alone cannot size them)"
        )


def check_batches_unpadded(args: argparse.Namespace, command: str, kind: str) -> None:
    """Refuse ``--pad-to-fixed-bsz`` where a language model's batches are scored or decoded one
    sentence a row: fairseq-eval-lm and fairseq-generate took its rows of padding for sentences
    (an ``IndexError``, an ``AssertionError``); fairseq-interactive ignored it."""
    if kind in ("decode", "eval-lm") and getattr(args, "pad_to_fixed_bsz", False):
        raise UsageError(
            f"--pad-to-fixed-bsz: {command} would take the rows of padding it adds to each batch "
            "for sentences; it is for training (on TPUs): leave it out"
        )


def check_training(args: argparse.Namespace) -> None:
    """``check_parsed``'s checks of fairseq-train's own options (each check's docstring says what
    it refuses)."""
    check_adaptive_softmax(args)
    check_adaptive_input(args)
    check_output_embeddings(args)
    check_adaptive_loss(args)
    check_world_size(args)
    check_best_checkpoint_metric(args)
    check_lr_scheduler(args)
    check_stop_min_lr(args)
    check_asynchronous_checkpoints(args)
    check_training_backends(args)
    check_start_checkpoint(args)
    if getattr(args, "eval_bleu", False) and hasattr(args, "eval_bleu_args"):
        from fairseq_san.tasks.translation_san import check_eval_bleu_options

        check_eval_bleu_options(args)


def check_start_checkpoint(args: argparse.Namespace) -> None:
    """``restore_file.check_checkpoint_flags`` as fairseq-train parses its options: a
    ``--finetune-from-model`` that is not there (the loop's ``--warm-start`` after a
    ``checkpoint_best.pt`` was deleted) was refused after fairseq printed its whole configuration.
    A sharded or model-parallel run's checkpoint names are known at load only (checked there)."""
    if getattr(args, "use_sharded_state", False) or getattr(args, "model_parallel_size", 1) > 1:
        return
    suffix = getattr(args, "checkpoint_suffix", "") or ""
    check_checkpoint_flags(args, suffix, fine_tunes(args, suffix))


def check_trainers_precision(args: argparse.Namespace, command: str, kind: str) -> None:
    """Refuse ``--bf16`` or ``--amp`` outside fairseq-train (``TRAINERS_PRECISIONS``): the
    command would run in fp32 without a word."""
    given = [name for name in TRAINERS_PRECISIONS if getattr(args, name, False)]
    if given and kind != "train":
        name = given[0]
        static = ", or decode with --san-decoding static --san-decoder-precision bf16"
        raise UsageError(
            f"--{name}: {command} does not apply it ({TRAINERS_PRECISIONS[name]}), and would run "
            f"in fp32; pass --fp16{static if kind == 'decode' else ''}"
        )


def check_refinement_options(args: argparse.Namespace) -> None:
    """Refuse an option of iterative refinement (``--print-step``, ``--iter-decode-max-iter``,
    ...) under a task that decodes left to right: only ``translation_lev`` builds the generator
    that reads them, fairseq's ``translation`` ignored them, and fairseq-generate failed after
    the first batch on two (``KeyError: 'steps'``, ``'history'``). The plugin's tasks refuse
    them also from the hub's keywords (``tasks.decoding``)."""
    from fairseq.tasks import TASK_REGISTRY
    from fairseq.tasks.translation_lev import TranslationLevenshteinTask

    from fairseq_san.tasks.decoding import check_no_refinement_options

    task = TASK_REGISTRY.get(getattr(args, "task", None))
    if task is not None and not issubclass(task, TranslationLevenshteinTask):
        check_no_refinement_options(args)


def check_alignment_printed(args: argparse.Namespace, command: str) -> None:
    """Refuse ``--print-alignment soft`` where fairseq prints hard alignments only: in
    fairseq-interactive (its A- line takes (source, target) pairs), and of ``--score-reference``'s
    scorer, which aligns hard; both failed after the first sentence's output (ValueError,
    TypeError). A language model has no alignment (``check_no_alignment``: fairseq's own
    ``--task language_modeling`` failed in the alignment pass, an IndexError)."""
    if language_modelling(args):
        check_no_alignment(getattr(args, "print_alignment", None))
    if getattr(args, "print_alignment", None) != "soft":
        return
    if reads_input_lines(args):
        raise UsageError(
            f"--print-alignment soft: {command} prints hard alignments only (source-target "
            "pairs); pass --print-alignment hard, or fairseq-generate for soft ones"
        )
    if getattr(args, "score_reference", False):
        raise UsageError(
            "--print-alignment soft with --score-reference: fairseq's scorer aligns the "
            "references hard only; pass --print-alignment hard"
        )


def check_prefix_unpadded(args: argparse.Namespace) -> None:
    """Refuse ``--prefix-size`` with ``--left-pad-target``: fairseq-generate forces the first
    columns of the batch's targets, which are padding and the first tokens of every target
    shorter than the batch's longest (forced at the wrong positions, or not at all), without a
    word."""
    if getattr(args, "prefix_size", 0) and getattr(args, "left_pad_target", False):
        raise UsageError(
            f"--prefix-size {args.prefix_size} with --left-pad-target: fairseq forces the first "
            "columns of the left-padded targets, padding and the wrong tokens of the shorter "
            "ones; leave --left-pad-target out (decoding does not need it)"
        )


def reads_input_lines(args: argparse.Namespace) -> bool:
    """Whether the command is fairseq-interactive (it has its input's ``--buffer-size``), which
    decodes lines it reads, as against fairseq-generate's binarized data."""
    return hasattr(args, "buffer_size")


def check_one_checkpoint(args: argparse.Namespace, command: str, kind: str) -> None:
    """Refuse an ensemble (``--path A.pt:B.pt``) where ``command`` reads one checkpoint (eval-lm,
    validate): it looked for one file of that whole name ("no such file")."""
    path = getattr(args, "path", None)
    if kind not in ("eval-lm", "validate") or not path or os.pathsep not in path:
        return
    if not os.path.exists(path):
        raise UsageError(
            f"{command} reads one checkpoint, and --path {path} names "
            f"{len(path.split(os.pathsep))} (an ensemble is fairseq-generate's and "
            "fairseq-interactive's): give one"
        )


def check_results_path_written(args: argparse.Namespace, command: str, kind: str) -> None:
    """Refuse ``--results-path`` where the command accepts it and writes nothing there: only
    fairseq-generate does; fairseq-interactive, fairseq-validate and fairseq-eval-lm print to
    standard output and ignored it."""
    generates = kind == "decode" and not reads_input_lines(args)
    if getattr(args, "results_path", None) is not None and not generates:
        raise UsageError(
            f"--results-path: {command} writes nothing there (fairseq-generate alone does); it "
            "prints to standard output: redirect that (> FILE)"
        )


def check_constraints_given(args: argparse.Namespace, command: str) -> None:
    """Refuse ``--constraints`` where no constraint can be given: fairseq-interactive reads them
    after tabs on each input line, fairseq-generate's binarized data hold none, and fairseq's
    constrained search failed on its first batch ("TypeError: 'NoneType' object is not
    iterable"); a language model has none (``check_no_constraints``)."""
    if language_modelling(args):
        check_no_constraints(getattr(args, "constraints", None))
    if getattr(args, "constraints", None) and not reads_input_lines(args):
        raise UsageError(
            f"--constraints: {command} has no constraints to decode with (its data hold none); "
            "give them to fairseq-interactive, after a tab on each input line, or leave "
            "--constraints out"
        )


def language_modelling(args: argparse.Namespace) -> bool:
    """Whether ``args.task`` is fairseq's language-modelling task or one derived from it."""
    from fairseq.tasks import TASK_REGISTRY
    from fairseq.tasks.language_modeling import LanguageModelingTask

    task = TASK_REGISTRY.get(getattr(args, "task", None))
    return task is not None and issubclass(task, LanguageModelingTask)


# fairseq-generate's options that fairseq-interactive accepts and does not follow: it loads no
# --lm-path model, forces no prefix, and has no reference to score (KeyError: 'target').
UNREAD_BY_INTERACTIVE = {
    "lm_path": "it fuses no language model (fairseq-generate --lm-path does)",
    "prefix_size": "it forces no prefix of its input (fairseq-generate --prefix-size forces the "
    "reference's; a language model's prompt is the input line itself)",
    "score_reference": "its input has no reference to score (fairseq-generate --score-reference "
    "scores a test set's)",
}


def check_read_by_interactive(args: argparse.Namespace, command: str) -> None:
    """Refuse an option of ``UNREAD_BY_INTERACTIVE`` given to fairseq-interactive: it decoded as
    without it, or failed on its first batch (``--score-reference``)."""
    if not reads_input_lines(args):
        return
    for name, why in UNREAD_BY_INTERACTIVE.items():
        if getattr(args, name, None):
            raise UsageError(f"{flag_of(name)}: {command} would ignore it: {why}")


# Validation metrics of fairseq's translation and language-modelling tasks, by the way they
# improve: BLEU (logged with --eval-bleu) up; the losses and perplexity down.
HIGHER_IS_BETTER = ("bleu",)
LOWER_IS_BETTER = ("loss", "nll_loss", "ppl")
# fairseq's criteria that log nll_loss only with --sentence-avg: without it their loss, per
# token, is the negative log-likelihood itself, and nll_loss is not logged.
NLL_WITH_SENTENCE_AVG = ("cross_entropy", "adaptive_loss")


def check_best_checkpoint_metric(args: argparse.Namespace) -> None:
    """Refuse a ``--best-checkpoint-metric`` that fairseq-train would keep the worst of, or that
    its validation does not log: ``bleu`` without ``--maximize-best-checkpoint-metric`` kept the
    lowest BLEU as checkpoint_best.pt (and counted ``--patience`` from it), the flag with a loss
    kept the highest loss, both silently; ``bleu`` without ``--eval-bleu``, and ``nll_loss`` from
    a criterion of ``NLL_WITH_SENTENCE_AVG`` without ``--sentence-avg``, were refused only at the
    first validation, after the first epoch had trained (``check_metric_logged``)."""
    metric = args.best_checkpoint_metric
    maximize = args.maximize_best_checkpoint_metric
    criterion = getattr(args, "criterion", None)
    averaged = getattr(args, "sentence_avg", False)
    if metric == "nll_loss" and criterion in NLL_WITH_SENTENCE_AVG and not averaged:
        raise UsageError(
            f"--best-checkpoint-metric nll_loss: --criterion {criterion} logs nll_loss only with "
            "--sentence-avg (without it, its loss is the negative log-likelihood per token): "
            "pass --best-checkpoint-metric loss"
        )
    if metric in HIGHER_IS_BETTER and not getattr(args, "eval_bleu", False):
        raise UsageError(
            f"--best-checkpoint-metric {metric}: the validation logs BLEU only with --eval-bleu "
            "(translation tasks); add it, or keep the default metric, loss"
        )
    if metric in HIGHER_IS_BETTER and not maximize:
        raise UsageError(
            f"--best-checkpoint-metric {metric} without --maximize-best-checkpoint-metric: "
            f"fairseq would keep the lowest {metric} as checkpoint_best.pt; add the flag"
        )
    if metric in LOWER_IS_BETTER and maximize:
        raise UsageError(
            f"--maximize-best-checkpoint-metric with --best-checkpoint-metric {metric}: fairseq "
            f"would keep the highest {metric} as checkpoint_best.pt; drop the flag"
        )


def check_metric_logged(metric: str, stats: Dict[str, Any]) -> None:
    """Refuse a ``--best-checkpoint-metric`` that the validation did not log (``stats``): a
    misspelt one (``blue``) failed with ``KeyError: 'blue'`` after the first epoch had trained,
    and which metrics a criterion logs is known only when it has validated. ``num_updates``,
    which fairseq's ``get_valid_stats`` adds to them, is taken."""
    if metric not in stats and metric != "num_updates":
        hint = nearest_key_hint(
            metric, list(stats), "pick one of them", prefix="--best-checkpoint-metric "
        )
        raise UsageError(
            f"--best-checkpoint-metric {metric}: the validation logs no {metric} (it logs "
            f"{', '.join(stats)}); {hint}"
        )


def _naming_a_metric_not_logged(get_valid_stats: Callable) -> Callable:
    """fairseq-train's statistics of a validation, ``--best-checkpoint-metric`` among them."""

    @functools.wraps(get_valid_stats)
    def wrapper(cfg, trainer, stats, *args, **kwargs):
        check_metric_logged(cfg.checkpoint.best_checkpoint_metric, stats)
        return get_valid_stats(cfg, trainer, stats, *args, **kwargs)

    return wrapper


def check_stop_min_lr(args: argparse.Namespace) -> None:
    """Refuse a ``--stop-min-lr`` at or above the learning rate a run starts with: fairseq-train
    stops before an epoch whose learning rate is at most it, so it trained nothing and exited 0.
    The start is ``--lr``, or with ``--lr-scheduler inverse_sqrt`` and a warm-up its
    ``--warmup-init-lr`` (0 when not given)."""
    stop = args.stop_min_lr
    if stop < 0:  # fairseq's default, -1: no stop
        return
    warms_up = args.lr_scheduler == "inverse_sqrt" and args.warmup_updates > 0
    start = max(args.warmup_init_lr, 0.0) if warms_up else max(args.lr)
    if start > stop:
        return
    said = f"--lr {shown_value(start)}"
    if warms_up:
        said = (
            f"--warmup-init-lr {shown_value(start)}, where --lr-scheduler inverse_sqrt's warm-up "
            "starts" + (" (0 when not given)" if args.warmup_init_lr < 0 else "")
        )
    raise UsageError(
        f"--stop-min-lr {shown_value(stop)} is not below {said}: fairseq-train stops as soon as "
        "the learning rate is at most --stop-min-lr, and would train nothing; give a lower "
        "--stop-min-lr" + (" or a --warmup-init-lr above it" if warms_up else "")
    )


def check_asynchronous_checkpoints(args: argparse.Namespace) -> None:
    """Refuse ``--write-checkpoints-asynchronously`` without the iopath package it writes with:
    fairseq-train logged the error with a traceback and returned, having trained nothing, with
    exit status 0."""
    import importlib.util

    if getattr(args, "write_checkpoints_asynchronously", False) and (
        importlib.util.find_spec("iopath") is None
    ):
        raise UsageError(
            "--write-checkpoints-asynchronously needs the iopath package, which is not "
            "installed: fairseq-train would train nothing and exit 0; leave the flag out (or "
            "pip install iopath)"
        )


# fairseq-train's options that need a device or package this machine may lack: (flag, whether it
# is given, what it needs, whether that is here); fairseq failed on each after loading the data
# and the model, with a traceback (torch_xla's "'NoneType' object has no attribute
# 'xla_device'", "Torch not compiled with CUDA enabled", fairscale's ImportError, pyarrow's
# plasma store's "'PlasmaStore' object has no attribute 'server'").
def training_backends(args: argparse.Namespace) -> List[Tuple[str, bool, str, Callable]]:
    import importlib
    import importlib.util

    import torch

    def installed(module: str) -> Callable[[], bool]:
        return lambda: importlib.util.find_spec(module.split(".")[0]) is not None

    def installed_module(module: str) -> Callable[[], bool]:
        def found() -> bool:
            try:  # an empty folder (a checkout without the submodule) is a namespace package
                return importlib.util.find_spec(module) is not None
            except ModuleNotFoundError:  # its package is not there
                return False

        return found

    def plasma() -> bool:
        try:
            importlib.import_module("pyarrow.plasma")  # pyarrow before 12
        except ImportError:
            return False
        return True

    return [
        ("--tpu", bool(getattr(args, "tpu", False)) and not getattr(args, "bf16", False),
         "a TPU through torch_xla", installed("torch_xla")),  # --bf16 sets it: half_precision
        ("--profile", bool(getattr(args, "profile", False)), "a GPU (torch.cuda.profiler)",
         torch.cuda.is_available),
        ("--zero-sharding os", getattr(args, "zero_sharding", "none") == "os",
         "the fairscale package", installed("fairscale")),
        ("--ddp-backend fully_sharded", getattr(args, "ddp_backend", "") == "fully_sharded",
         "the fairscale package", installed("fairscale")),
        ("--use-plasma-view", bool(getattr(args, "use_plasma_view", False)),
         "pyarrow's plasma store (pyarrow before 12)", plasma),
        (f"--model-parallel-size {getattr(args, 'model_parallel_size', 1)}",
         getattr(args, "model_parallel_size", 1) > 1, "fairseq's megatron submodule "
         "(fairseq/model_parallel/megatron, not in fairseq's packages)",
         installed_module("fairseq.model_parallel.megatron.mpu")),
    ]  # fmt: skip


def check_training_backends(args: argparse.Namespace) -> None:
    """Refuse a fairseq-train option whose device or package this machine lacks
    (``training_backends``), and ``--cpu-offload`` without the fully sharded backend that reads
    it, as the command line is parsed."""
    for flag, chosen, needs, available in training_backends(args):
        if chosen and not available():
            raise UsageError(f"{flag} needs {needs}, which this machine has not: leave it out")
    if getattr(args, "cpu_offload", False) and args.ddp_backend != "fully_sharded":
        raise UsageError(
            f"--cpu-offload is an option of --ddp-backend fully_sharded, and this run's is "
            f"{args.ddp_backend}: leave it out"
        )


def check_tokenizer_languages(args: argparse.Namespace) -> None:
    """Refuse ``--tokenizer moses`` without the languages on a translation task: fairseq builds
    the tokenizer's configuration from ``--source-lang`` and ``--target-lang`` before its task
    reads them from the data, and failed on the missing ones (hydra's "Error merging override
    tokenizer.source_lang=null")."""
    if getattr(args, "tokenizer", None) != "moses":
        return
    missing = [flag_of(name) for name in ("source_lang", "target_lang")
               if hasattr(args, name) and getattr(args, name) is None]  # fmt: skip
    if missing:
        raise UsageError(
            f"--tokenizer moses needs {' and '.join(missing)}: fairseq gives the tokenizer its "
            "languages from the command line, before it reads them from the data (e.g. "
            "--source-lang en --target-lang de)"
        )


def check_adaptive_softmax(args: argparse.Namespace) -> None:
    """Refuse ``--adaptive-softmax-cutoff`` with another criterion than ``adaptive_loss`` (the
    first update failed in autograd: fairseq's adaptive softmax changes in place the
    log-probabilities that the other criteria keep for the backward pass), and ``adaptive_loss``
    with PyTorch's DistributedDataParallel, the default ``--ddp-backend`` (fairseq's exception,
    after loading the data)."""
    if not adaptive_softmax_cutoff(args):
        return
    if args.criterion != "adaptive_loss":
        raise UsageError(
            f"--adaptive-softmax-cutoff trains with --criterion adaptive_loss only: with "
            f"{args.criterion} the first update fails in autograd (fairseq's adaptive softmax "
            "changes in place the log-probabilities it needs); pass --criterion adaptive_loss "
            "--ddp-backend legacy_ddp, or drop --adaptive-softmax-cutoff"
        )
    if args.ddp_backend in ("c10d", "pytorch_ddp"):
        raise UsageError(
            f"--criterion adaptive_loss does not train with --ddp-backend {args.ddp_backend} "
            "(PyTorch's DistributedDataParallel, fairseq-train's default): pass --ddp-backend "
            "legacy_ddp"
        )


# fairseq's models that build their adaptive softmax under --criterion adaptive_loss only: their
# architectures' default --adaptive-softmax-cutoff goes unread with another criterion.
ADAPTIVE_LOSS_ONLY_MODELS = frozenset(
    {"fairseq.models.lstm", "fairseq.models.lstm_lm", "fairseq.models.fconv_lm"}
)


def adaptive_softmax_cutoff(args: argparse.Namespace) -> Optional[str]:
    """The ``--adaptive-softmax-cutoff`` that the model builds, None where it builds no adaptive
    softmax: those of ``ADAPTIVE_LOSS_ONLY_MODELS`` read it with ``adaptive_loss`` only (``--arch
    lstm``'s default, unread with cross_entropy, was refused)."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    model = ARCH_MODEL_REGISTRY.get(getattr(args, "arch", None))
    module = getattr(model, "__module__", None)
    if module in ADAPTIVE_LOSS_ONLY_MODELS and args.criterion != "adaptive_loss":
        return None
    return getattr(args, "adaptive_softmax_cutoff", None)


def check_adaptive_loss(args: argparse.Namespace) -> None:
    """Refuse ``--criterion adaptive_loss`` for a model without an adaptive softmax to train
    (fairseq's bare ``AssertionError`` as the criterion is built, or its exception for
    PyTorch's DistributedDataParallel first)."""
    if args.criterion == "adaptive_loss" and not getattr(args, "adaptive_softmax_cutoff", None):
        raise UsageError(
            "--criterion adaptive_loss trains an adaptive softmax, and this model has none: add "
            "--adaptive-softmax-cutoff (the vocabulary's bands, e.g. 20000,60000), or train with "
            "--criterion cross_entropy"
        )


def check_adaptive_input(args: argparse.Namespace) -> None:
    """Refuse ``--adaptive-input`` without ``--adaptive-input-cutoff``: fairseq has no default
    bands for it (``TypeError: 'NoneType' object is not subscriptable`` as the model is built)."""
    if getattr(args, "adaptive_input", False) and not getattr(args, "adaptive_input_cutoff", None):
        raise UsageError(
            "--adaptive-input needs --adaptive-input-cutoff, the vocabulary's bands (e.g. "
            "20000,60000; the same as --adaptive-softmax-cutoff to tie them)"
        )


def check_output_embeddings(args: argparse.Namespace) -> None:
    """Refuse output embeddings fairseq cannot build as asked: ``--tie-adaptive-weights``
    without an adaptive input (``'Embedding' object has no attribute 'weights_for_band'``), an
    output tied to the input embeddings (``--share-decoder-input-output-embed``,
    ``--share-all-embeddings``) from a ``--decoder-output-dim`` of another width (a shape error
    at the first update) or replaced by an adaptive softmax, which leaves it untied without a
    word (logged for ``--share-all-embeddings``, whose input embeddings are still shared)."""
    adaptive = adaptive_softmax_cutoff(args)
    if getattr(args, "tie_adaptive_weights", False) and not getattr(args, "adaptive_input", False):
        raise UsageError(
            "--tie-adaptive-weights ties the adaptive softmax to an adaptive input embedding "
            "(--adaptive-input, a language model's), which this model has not: drop "
            "--tie-adaptive-weights, or add --adaptive-input"
        )
    if getattr(args, "tie_adaptive_weights", False):
        check_tied_adaptive_bands(args)
    ties = [flag for flag in ("--share-all-embeddings", "--share-decoder-input-output-embed")
            if getattr(args, name_of(flag), False)]  # fmt: skip
    if not ties:
        return
    untable = input_embedding_option(args)
    if untable is not None and not adaptive:
        raise UsageError(
            f"{ties[0]} ties the output projection to one table of input embeddings, which "
            f"{untable} does not make (fairseq fails on its missing 'weight'): drop {ties[0]}"
            + (", or tie an adaptive softmax to it with --adaptive-softmax-cutoff "
               "--tie-adaptive-weights" if untable == "--adaptive-input" else "")
        )  # fmt: skip
    if adaptive and ties[0] == "--share-decoder-input-output-embed":
        raise UsageError(
            "--share-decoder-input-output-embed ties the output projection to the input "
            "embeddings, and --adaptive-softmax-cutoff replaces that projection (fairseq drops "
            "the tie without a word): drop one of them"
        )
    if adaptive:
        logger.warning(
            "--share-all-embeddings with --adaptive-softmax-cutoff: the encoder and decoder share "
            "their input embeddings; the adaptive softmax is not tied to them"
        )
        return
    width = embedding_width(args)
    # a translation model's --decoder-output-dim is text (fairseq's parser keeps it so)
    output = text_number(getattr(args, "decoder_output_dim", None)) or width
    if width is not None and output != width:
        raise UsageError(
            f"--decoder-output-dim {output} with {ties[0]}: the output projection is the "
            f"{width}-wide input embeddings, which cannot take {output}-wide outputs (a shape "
            f"error at the first update): drop --decoder-output-dim, or {ties[0]}"
        )


def input_embedding_option(args: argparse.Namespace) -> Optional[str]:
    """The language model's option that makes its input embeddings other than one table of
    vectors (``--character-embeddings``, ``--adaptive-input``), None where none does."""
    for flag in ("--character-embeddings", "--adaptive-input"):  # fairseq's order of precedence
        if getattr(args, name_of(flag), False):
            return flag
    return None


# What fairseq asserts of an adaptive softmax tied to the adaptive input (--tie-adaptive-weights):
# the options of the two that must be equal, as (softmax's, input's).
TIED_ADAPTIVE_OPTIONS = [
    ("adaptive_softmax_cutoff", "adaptive_input_cutoff"),
    ("adaptive_softmax_factor", "adaptive_input_factor"),
    ("decoder_output_dim", "decoder_input_dim"),
]


def check_tied_adaptive_bands(args: argparse.Namespace) -> None:
    """Refuse ``--tie-adaptive-weights`` between an adaptive softmax and input whose bands
    differ: fairseq's ``transformer_lm`` asserts each pair of ``TIED_ADAPTIVE_OPTIONS`` equal (a
    bare ``AssertionError``). Cutoffs are compared as the lists fairseq reads
    (``options.cutoffs_read``)."""
    if not getattr(args, "adaptive_softmax_cutoff", None):
        raise UsageError(
            "--tie-adaptive-weights ties an adaptive softmax to the adaptive input, and this "
            "model has none: add --adaptive-softmax-cutoff (the adaptive input's bands), or drop "
            "--tie-adaptive-weights"
        )
    for softmax, inputs in TIED_ADAPTIVE_OPTIONS:
        values = [getattr(args, name, None) for name in (softmax, inputs)]
        if "cutoff" in softmax:  # check_adaptive_input and check_adaptive_softmax: both given
            same = cutoffs_read(values[0]) == cutoffs_read(values[1])
            setattr(args, inputs, getattr(args, softmax))  # the same list: fairseq compares text
        else:
            same = values[0] == values[1]
        if not same:
            raise UsageError(
                f"--tie-adaptive-weights ties each band of the adaptive softmax to the adaptive "
                f"input's, and {flag_of(softmax)} {values[0]} differs from {flag_of(inputs)} "
                f"{values[1]}: give both the same value"
            )


def embedding_width(args: argparse.Namespace) -> Optional[int]:
    """The decoder's embedding width as fairseq builds it: ``--decoder-input-dim`` for a
    language model, ``--decoder-embed-dim`` for a translation model (None where unset)."""
    from fairseq.models import ARCH_MODEL_REGISTRY, FairseqLanguageModel

    model = ARCH_MODEL_REGISTRY.get(getattr(args, "arch", None))
    language_model = isinstance(model, type) and issubclass(model, FairseqLanguageModel)
    name = "decoder_input_dim" if language_model else "decoder_embed_dim"
    return getattr(args, name, None) or getattr(args, "decoder_embed_dim", None)


def command_kind(args: argparse.Namespace) -> str:
    """What the parsed command does, told by its options (its name may be anything: ``python -m
    fairseq_cli.train``): "decode" (generate, interactive), "train", "eval-lm" or "validate"."""
    if hasattr(args, "beam"):
        return "decode"
    if hasattr(args, "max_epoch"):
        return "train"
    if hasattr(args, "output_word_probs"):
        return "eval-lm"
    return "validate"


def check_plugin_options_used(
    args: argparse.Namespace, command: str, kind: str, argv: List[str]
) -> None:
    """Refuse a plugin option that ``command`` (of ``kind``: ``command_kind``) accepts (its task
    has it) and ``argv`` gives, and would ignore: a decoder's option where nothing decodes, the
    analysis outside fairseq-validate, and the analysis's options without
    ``--san-analysis-dir``."""
    for option in DECODER_OPTIONS:
        if given(argv, option) and not decodes_with(args, kind, option):
            value = getattr(args, option.name)
            why = "(it scores with teacher forcing)"
            if kind == "train":
                why = "without --eval-bleu" if hasattr(args, "eval_bleu") else "(it trains)"
            raise UsageError(
                f"{option.flag} {value}: {command} decodes nothing {why}, so it would be "
                "ignored; pass it to fairseq-generate or fairseq-interactive"
            )
    analysis_dir, *analysis_options = ANALYSIS_OPTIONS
    if kind != "validate" and given(argv, analysis_dir):
        raise UsageError(analysis_elsewhere(command))
    subsets = getattr(args, "valid_subset", "").split(",")
    if kind == "validate" and given(argv, analysis_dir) and len(subsets) > 1:
        raise UsageError(
            f"--san-analysis-dir analyses one subset per run, and --valid-subset "
            f"{args.valid_subset} names {len(subsets)}: run fairseq-validate once per subset"
        )
    for option in analysis_options:
        if given(argv, option) and not given(argv, analysis_dir):
            raise UsageError(
                f"{option.flag} {getattr(args, option.name)} is an option of --san-analysis-dir: "
                f"add --san-analysis-dir DIR (fairseq-validate), or drop {option.flag}"
            )


def analysis_elsewhere(command: str) -> str:
    """Why ``command`` (not fairseq-validate) takes no option of the attention analysis."""
    return (
        f"--san-analysis-dir is for fairseq-validate (its teacher-forced pass): {command} would "
        "analyse nothing; drop it, and run fairseq-validate DATA --task translation_san (or "
        "language_modeling_san) --path CKPT --san-analysis-dir DIR"
    )


def check_model_options_not_given(command: str, argv: List[str]) -> None:
    """Refuse a plugin model option on the command line of a command that loads a checkpoint
    (fairseq-generate takes them after --arch, which adds the model's flags): it builds the
    model from the checkpoint's configuration, and ignored them (the policy it was trained with
    decoded)."""
    for option in MODEL_OPTIONS + (SELF_SHARE,):
        if given(argv, option):
            raise UsageError(
                f"{option.flag}: {command} builds the model as its checkpoint was trained, and "
                f"would ignore the flag; a checkpoint takes another value with --model-overrides "
                f"\"{{'{option.name}': VALUE}}\""
            )


def check_overrides_read(args: argparse.Namespace, overrides: Any, command: str, kind: str) -> None:
    """Refuse a configuration group other than the model's in the ``--model-overrides`` of
    fairseq-generate, fairseq-interactive or fairseq-eval-lm (``kind`` "decode" or "eval-lm"):
    they set up the task, the generator and the tokenizers from their own command line and build
    only the model from the checkpoint's configuration. fairseq-generate also hands the task's
    group to ``load_dataset``, which the translation and language-modelling tasks ignore, and to
    the ``--lm-path`` language model, whose task is built from it."""
    from fairseq.dataclass.configs import FairseqConfig

    if not isinstance(overrides, dict):
        return
    unread = {field.name for field in fields(FairseqConfig)} - {"model"}
    if kind != "eval-lm" and getattr(args, "task", None) not in TASKS_IGNORING_SAVED_TASK:
        unread.discard("task")  # fairseq-generate hands it to this task's load_dataset
    if getattr(args, "lm_path", None) is not None and not hasattr(args, "buffer_size"):
        unread.discard("task")  # and builds the --lm-path model's task from it (interactive: not)
    for key in (key for key in overrides if key in unread):
        advice = GROUP_FLAGS.get(key, f"drop it, or give the {key} options as flags of {command}")
        raise UsageError(
            f"--model-overrides key '{key}': {command} builds only the model from the "
            f"checkpoint's configuration and takes its {key} from its own command line, so the "
            f"key would be ignored; {advice}"
        )


def check_one_decoding_asked(args: argparse.Namespace, overrides: Any, command: str) -> None:
    """Refuse ``--san-decoding X`` beside ``--model-overrides "{'san_decoding': 'Y'}"`` (or a
    deprecated key that means Y: ``san_no_cache``, ``san_fast_decoding``) where X and Y are two
    decodings: the command line's won without a word (a model's own decoding gives way to any
    asked but fairseq's, which means the model's own), so one of the two was ignored."""
    if not isinstance(overrides, dict):
        return
    own = asked_decoding(overrides)
    legacy = getattr(args, "san_decoder", None)
    asked = chosen_decoding(str(getattr(args, "san_decoding", FAIRSEQ)), legacy)
    if FAIRSEQ not in (own, asked) and own != asked:
        raise UsageError(
            f"--san-decoding {asked} and --model-overrides (decoding {own!r}) ask {command} for "
            f"two decodings, and --san-decoding would win without a word: give one (--san-decoding "
            f"{own} alone decodes as the override asks)"
        )


def read_overrides(text: str, command: str, kind: str) -> Any:
    """``--model-overrides`` as ``command`` reads it, else a UsageError naming it.
    fairseq-generate and fairseq-interactive (``kind`` "decode") read it with ``ast.literal_eval``,
    whose ``ValueError: malformed node or string`` (a name, a call, arithmetic) or
    ``SyntaxError`` was a traceback; fairseq-eval-lm with ``eval``: literals, and ``+ - * /``
    between them (``literal_eval.evaluate``)."""
    try:
        overrides = evaluate(text)
        if kind == "decode":
            ast.literal_eval(text)
    except NotALiteral as error:
        raise UsageError(f"--model-overrides: {error}") from None
    except ValueError:
        raise UsageError(
            f"--model-overrides {shown(text)}: {command} reads it with Python's ast.literal_eval, "
            "which takes no arithmetic (+ - * / between values); write each value out"
        ) from None
    if not isinstance(overrides, dict):
        raise UsageError(
            f"--model-overrides {shown(text)}: it must be a dict of option names and their "
            "values, e.g. \"{'dropout': 0.1}\" (fairseq updated the model's options with it: a "
            "traceback)"
        )
    return overrides


# The options that name subsets of the data, as fairseq splits them (a comma list, or one name).
SUBSET_OPTIONS = ("valid_subset", "gen_subset")


def check_subset_names(args: argparse.Namespace) -> None:
    """Refuse an empty subset name in ``--valid-subset`` or ``--gen-subset`` ('', 'valid,'):
    fairseq looked for a dataset of no name, "Dataset not found:  (DATA)", a traceback."""
    for name in SUBSET_OPTIONS:
        value = getattr(args, name, None)
        if isinstance(value, str) and "" in value.split(","):
            raise UsageError(
                f"{flag_of(name)} {value!r}: a subset's name is empty; give subset names "
                "separated by commas, e.g. 'valid' or 'valid,test'"
            )


def decodes_with(args: argparse.Namespace, kind: str, option: Option) -> bool:
    """Whether a command of ``kind`` reads ``option``: one that decodes, or fairseq-train for
    ``--eval-bleu``; fairseq-train also for a decoding the model applies to itself
    (``--san-decoding fast``: the checkpoint keeps it, and decodes with it)."""
    if kind == "decode" or getattr(args, "eval_bleu", False):
        return True
    return kind == "train" and option is DECODING and args.san_decoding in MODEL_DECODINGS


def given(argv: List[str], option: Option) -> bool:
    """Whether the command line ``argv`` names ``option`` (``given_flag``)."""
    return given_flag(argv, option.flag)


def given_flag(argv: List[str], flag: str) -> bool:
    """Whether the command line ``argv`` names ``flag`` (``--flag V`` or ``--flag=V``; fairseq's
    parsers take no abbreviations; a program's ``argv`` may hold ``None``, which argparse takes
    as a value)."""
    return any(arg == flag or str(arg).startswith(flag + "=") for arg in argv)


HELP_FLAGS = ("-h", "--help")


def print_help_of_components(
    parse_args_and_arch: Callable,
    parser: argparse.ArgumentParser,
    argv: List[str],
    modify_parser: Optional[Callable],
) -> NoReturn:
    """Print the command's help with the options of the components the command line chose
    (``--arch``, ``--task``, ``--criterion``, ``--optimizer``, ...), then exit.

    fairseq's parser printed its help at its first parse, before it adds those options: the
    plugin's (``--san-decoder-self-policy``, ``--san-decoding``) and the chosen model's were never
    listed. fairseq's own parse runs first without the help flag (a stand-in for the data
    directory where none is given); whatever it cannot parse leaves the help as fairseq's."""
    rest = [arg for arg in argv if arg not in HELP_FLAGS]
    with contextlib.redirect_stderr(io.StringIO()):
        try:
            parse_args_and_arch(parser, ["DATA", *rest], True, False, modify_parser)
        except (Exception, SystemExit):  # argparse exits on what it cannot parse
            pass
    parser.print_help()
    raise SystemExit(0)


def _checking(parse_args_and_arch: Callable) -> Callable:
    """fairseq's parser, refusing what ``missing_to_parse``, ``refuse_unrecognized`` and
    ``check_parsed`` find."""

    @functools.wraps(parse_args_and_arch)
    def wrapper(
        parser, input_args=None, parse_known=False, suppress_defaults=False, modify_parser=None
    ):
        argv = sys.argv[1:] if input_args is None else list(input_args)
        if any(arg in HELP_FLAGS for arg in argv):
            print_help_of_components(parse_args_and_arch, parser, argv, modify_parser)
        # A strict parse runs as a known-args one, so that refuse_unrecognized sees the rest.
        strict = not parse_known and not suppress_defaults
        try:
            parsed = parse_args_and_arch(
                parser, input_args, parse_known or strict, suppress_defaults, modify_parser
            )
        except Exception:
            dest = missing_to_parse(parser, input_args)
            if dest is not None:
                raise UsageError(
                    f"{parser.prog} needs {flag_of(dest)}: {NEEDED_TO_PARSE[dest]}"
                ) from None
            raise
        if strict:
            parsed, extra = parsed
            refuse_unrecognized(parser, parsed, extra)
        check_parsed(parsed[0] if isinstance(parsed, tuple) else parsed, parser.prog, argv)
        return parsed

    return wrapper


def _analysing(main: Callable) -> Callable:
    """fairseq-validate's ``main``, loading its checkpoint with ``checking_analysis``'s loader (for
    this call only: other fixes wrap fairseq's loader for good)."""

    @functools.wraps(main)
    def wrapper(cfg, *args, **kwargs):
        from fairseq import checkpoint_utils

        load = checkpoint_utils.load_model_ensemble_and_task
        checkpoint_utils.load_model_ensemble_and_task = checking_analysis(load)
        try:
            return main(cfg, *args, **kwargs)
        finally:
            checkpoint_utils.load_model_ensemble_and_task = load

    return wrapper


def checking_analysis(load_model_ensemble_and_task: Callable) -> Callable:
    """fairseq's ensemble loader, refusing a ``--san-analysis-dir`` among its ``arg_overrides``
    (fairseq-validate's flags) that the task it built would ignore; with the analysis, the
    checkpoint's ``--seed`` kept (fairseq-validate's seeds nothing it validates)."""

    @functools.wraps(load_model_ensemble_and_task)
    def loading(filenames, arg_overrides=None, *args, **kwargs):
        from fairseq_san.tasks.attention_analysis import check_analysis_applied

        if arg_overrides and arg_overrides.get("san_analysis_dir"):
            # fairseq-validate's --seed replaced the training's in the configuration, which
            # js.json records as the checkpoint's (a series of two trainings then plotted)
            arg_overrides = {key: value for key, value in arg_overrides.items() if key != "seed"}
        loaded = load_model_ensemble_and_task(filenames, arg_overrides, *args, **kwargs)
        check_analysis_applied(loaded[2], arg_overrides)
        return loaded

    return loading


def preprocess_inputs(args: argparse.Namespace) -> List[str]:
    """The text files fairseq-preprocess reads: each of ``--trainpref``, ``--validpref`` and
    ``--testpref``'s prefixes (the last two comma lists) with each language's suffix, as
    fairseq names them (``PREFIX.LANG``, or ``PREFIX`` without a language)."""
    prefixes = [args.trainpref] if args.trainpref else []
    for listed in (args.validpref, args.testpref):
        prefixes += listed.split(",") if listed else []
    langs = [args.source_lang] + ([] if args.only_source else [args.target_lang])
    return [f"{prefix}.{lang}" if lang else prefix for prefix in prefixes for lang in langs]


def check_preprocess(args: argparse.Namespace) -> None:
    """Refuse fairseq-preprocess arguments it fails on or ignores: a ``--workers`` out of range
    (0: a ZeroDivisionError, -1: an IndexError), an input file that is missing or a folder (a
    traceback as it reads it, after it may have written the dictionaries), and an
    ``--align-suffix`` with no ``TRAINPREF.SUFFIX`` file (fairseq binarized no alignment,
    silently)."""
    check_option_ranges(args)
    for path in preprocess_inputs(args):
        if not os.path.isfile(path):
            state = "is a folder" if os.path.isdir(path) else "does not exist"
            raise UsageError(f"fairseq-preprocess input {path} {state}: give a text file there")
    if args.align_suffix and args.trainpref:
        alignments = f"{args.trainpref}.{args.align_suffix}"
        if not os.path.isfile(alignments):
            raise UsageError(
                f"--align-suffix {args.align_suffix}: there is no {alignments}, and "
                "fairseq-preprocess would binarize no alignment; give the file, or leave the "
                "option out"
            )


def _checking_preprocess(main: Callable) -> Callable:
    """fairseq-preprocess's ``main``, its arguments checked first (``check_preprocess``)."""

    @functools.wraps(main)
    def wrapper(args, *rest, **kwargs):
        check_preprocess(args)
        return main(args, *rest, **kwargs)

    return wrapper


def install() -> None:
    """Check the options of fairseq's commands as they are parsed, fairseq-validate's analysis
    once the checkpoint's task is built, and fairseq-train's best checkpoint metric once it has
    validated (idempotent)."""
    from fairseq import options

    wrap_once(options, "parse_args_and_arch", _checking)
    train = running_command("fairseq_cli.train")
    if getattr(train, "get_valid_stats", None) is not None:
        wrap_once(train, "get_valid_stats", _naming_a_metric_not_logged)
    validate = running_command("fairseq_cli.validate")
    if getattr(validate, "main", None) is not None:
        wrap_once(validate, "main", _analysing)
    preprocess = running_command("fairseq_cli.preprocess")
    if getattr(preprocess, "main", None) is not None:
        wrap_once(preprocess, "main", _checking_preprocess)
