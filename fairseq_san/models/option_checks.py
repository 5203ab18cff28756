"""A SAN model's options checked before it is built: one line naming the problem, where fairseq
would fail deep inside or silently ignore the option.

``--model-overrides`` and ``from_pretrained``'s keywords set any key on a checkpoint's arguments,
unchecked; fairseq-validate and fairseq-generate pass flags the model or the task may not read.
Both models (``transformer_san``, ``transformer_lm_san``) call these first in ``build_model``.
"""

import argparse
import logging
import os
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq.models import ARCH_CONFIG_REGISTRY
from fairseq.tasks import FairseqTask

from fairseq_san import checkpoints, options
from fairseq_san import policy as san_policy
from fairseq_san.errors import (
    STORED_SOURCE, BosTokenUnlikeTask, UsageError, choice_problem, nearest_key_hint, not_a_choice,
)

logger = logging.getLogger(__name__)

# The model's options that take one of a few values. argparse checks them on the command line;
# --model-overrides and the hub's keywords set them unchecked, so ``check_san_options`` does.
CHOICES = {
    option.name: option.choices
    for option in options.MODEL_OPTIONS + (options.SELF_SHARE,)
    if option.choices
}


def check_san_options(args: argparse.Namespace) -> None:
    """Refuse an unknown ``san_*`` option, naming the nearest known one, and a value outside
    an option's ``CHOICES``, naming the valid ones.

    fairseq sets every key of ``--model-overrides`` (or every keyword of ``from_pretrained``) on
    the checkpoint's arguments, known or not, so a typo would otherwise decode another model.
    """
    for name, valid in CHOICES.items():
        value = getattr(args, name, None)
        if value is not None and value not in valid:
            raise not_a_choice(name, value, valid, STORED_SOURCE)
    known = options.option_names()
    for name in vars(args):
        if name.replace("-", "_").startswith("san_") and name not in known:
            hint = nearest_key_hint(name.replace("-", "_"), known)
            raise UsageError(
                f"unknown option '{name}' {STORED_SOURCE}: {hint}"
            )


def check_no_lm_options(args: argparse.Namespace) -> None:
    """Refuse ``san_self_share`` (from ``--model-overrides``), which only a language model reads:
    a translation model shares attention weights S, and would ignore it silently."""
    value = getattr(args, options.SELF_SHARE.name, None)
    if value is not None:
        raise UsageError(
            f"{options.SELF_SHARE.name} {value!r} is an option of transformer_lm_san (decoder-only "
            "language models); transformer_san shares the attention weights S (or the context "
            "A, --san-encdec-share): drop it"
        )


def check_no_translation_options(args: argparse.Namespace) -> None:
    """Refuse a translation model's option (from ``--model-overrides`` or a hub keyword) set to
    anything but its default: a language model has no encoder, encoder-decoder attention, AAN or
    fast step, and would ignore it silently (``check_no_lm_options`` is the mirror)."""
    lm_names = {option.name for option in options.LM_OPTIONS}
    for option in options.MODEL_OPTIONS:
        value = getattr(args, option.name, None)
        if option.name not in lm_names and value is not None and value != option.default:
            raise UsageError(
                f"{option.name} {value!r} is an option of transformer_san (translation); "
                "transformer_lm_san shares decoder self-attention only (san_policy, "
                "san_decoder_self_policy, san_self_share): drop it"
            )


def check_language_modeling_task(task: FairseqTask) -> None:
    """Refuse a translation task: it would give the language model its target dictionary and fail
    on the embeddings' sizes, which reads as "other dictionaries"."""
    from fairseq.tasks.translation import TranslationTask

    if isinstance(task, TranslationTask):
        raise UsageError(
            f"transformer_lm_san is a language model (a decoder only), and the task "
            f"{type(task).__name__} translates: use --task language_modeling_san with the "
            "model's data (fairseq-preprocess --only-source, examples/lm/prepare.sh)"
        )


def check_bos_token(args: argparse.Namespace, task: FairseqTask) -> None:
    """Refuse a language model whose ``--add-bos-token`` (a checkpoint's keeps its training's) is
    not its task's: fairseq-eval-lm, -generate and -interactive build their task from their own
    command line, and scored or decoded the model's inputs without the start token it learned
    with, or with one it never saw, without a word (a training gives both the same value)."""
    trained = getattr(args, "add_bos_token", None)
    task_cfg = getattr(task, "args", None) or getattr(task, "cfg", None)
    given = getattr(task_cfg, "add_bos_token", None)
    if trained is None or given is None or bool(trained) == bool(given):
        return
    raise bos_token_unlike_training(bool(trained))


def bos_token_unlike_training(trained: bool, override: str = "") -> UsageError:
    """The error for a language model loaded with another ``--add-bos-token`` than ``trained``
    with: by the command line, or by ``override`` (where it says so, an override's source)."""
    if override:
        fed = (
            "without the start token it learned with" if trained
            else "after a start token it never saw"
        )  # fmt: skip
        return UsageError(
            f"add_bos_token={not trained} {override}: the model was trained "
            f"{'with' if trained else 'without'} --add-bos-token, and would be fed its samples "
            f"{fed}: leave add_bos_token out"
        )
    return BosTokenUnlikeTask(
        f"the model was trained {'with' if trained else 'without'} --add-bos-token, and this "
        f"command's task {'lacks' if trained else 'has'} it (the commands that load a language "
        f"model build their task from their own command line): "
        f"{'add' if trained else 'drop'} --add-bos-token",
        trained,
    )


def check_translation_task(task: FairseqTask, arch: str = "transformer_san") -> None:
    """Refuse a language-modelling task for the encoder-decoder model ``arch``, which fails deep
    inside fairseq (``'TransformerSANModel' object has no attribute 'supported_targets'``)."""
    from fairseq.tasks.language_modeling import LanguageModelingTask

    if isinstance(task, LanguageModelingTask):
        raise UsageError(
            f"{arch} is a translation model (encoder and decoder), and the task "
            f"{type(task).__name__} models language: train a language model with --arch "
            "transformer_lm_san (or transformer_lm_san_small), or decode this checkpoint with "
            "--task translation_san"
        )


LanguagePair = Tuple[str, str]


def task_language_pair(task: FairseqTask) -> Optional[LanguagePair]:
    """The task's source and target languages (fairseq's ``-s``/``-t``, or the pair it inferred
    from the data's file names), or None for a task without languages."""
    cfg = getattr(task, "cfg", None)
    source, target = getattr(cfg, "source_lang", None), getattr(cfg, "target_lang", None)
    return (source, target) if source and target else None


def as_language_pair(value: object) -> Optional[LanguagePair]:
    """``value`` (a recorded ``language_pair``) as (source, target), or None if it is no pair."""
    if isinstance(value, str) or not isinstance(value, Sequence) or len(value) != 2:
        return None
    return (str(value[0]), str(value[1]))


def trained_language_pair(args: argparse.Namespace) -> Optional[LanguagePair]:
    """The languages recorded in a checkpoint's configuration (``checkpoints.stamp``), None where
    none are; a UsageError for a value ``--model-overrides`` set that is no pair."""
    value = getattr(args, checkpoints.LANGUAGE_PAIR, None)
    if value is None:
        return None
    pair = as_language_pair(value)
    if pair is None:
        raise UsageError(
            f"{checkpoints.LANGUAGE_PAIR} {value!r} {STORED_SOURCE} is no language pair: give "
            "['SOURCE', 'TARGET'], or None to decode in either direction"
        )
    return pair


def check_language_pair(args: argparse.Namespace, task: FairseqTask) -> None:
    """Refuse to decode a checkpoint in the direction opposite to its training's.

    The recipes' dictionaries are joined, so fairseq would read ``-s de -t en`` with an En->De
    checkpoint without a complaint and translate German as though it were English: a silently
    wrong result. ``checkpoints.stamp`` records the pair a model was trained on (checkpoints
    made before it carry none and are not checked); another pair than the reverse (a folder
    whose files use other language codes) is only logged.
    """
    trained, requested = trained_language_pair(args), task_language_pair(task)
    if trained is None or requested is None or trained == requested:
        return
    source, target = trained
    if requested == (target, source):
        raise UsageError(
            f"this checkpoint was trained to translate {source} into {target} (its "
            f"cfg.model.{checkpoints.LANGUAGE_PAIR}), and the task asks for {target} into "
            f"{source}: give -s {source} -t {target} (source_lang={source!r}, "
            f"target_lang={target!r} to from_pretrained or in a fairseq-san-bench system's JSON)"
        )
    logger.warning(
        "this checkpoint was trained on %s->%s, the task reads %s->%s (its -s/-t or its data's "
        "file names)",
        *trained,
        *requested,
    )


def check_resumed_language_pair(
    path: str, stored: object, task: FairseqTask, restarts: bool
) -> None:
    """Refuse to resume fairseq-train from ``path``, whose model recorded the pair ``stored``
    (``checkpoints.stamp``), in the opposite direction.

    A resumed run's model is built from the command line, so ``check_language_pair`` never sees
    the checkpoint's record, and on joined dictionaries the run would go on training an En->De
    model on De->En data. A run that only starts from the checkpoint's weights (``restarts``:
    ``--reset-optimizer``, fairseq's older way to fine-tune) may reverse the pair: logged.
    """
    trained, requested = as_language_pair(stored), task_language_pair(task)
    if trained is None or requested is None or requested != trained[::-1]:
        # no record (a checkpoint made before it, or none this check can read), or no reverse
        return
    source, target = trained
    if restarts:
        logger.warning("%s was trained on %s->%s; this run trains %s->%s from its weights",
                       path, *trained, *requested)  # fmt: skip
        return
    raise UsageError(
        f"{path} was trained to translate {source} into {target} (its "
        f"cfg.model.{checkpoints.LANGUAGE_PAIR}), and this run reads {target} into {source}: "
        f"give -s {source} -t {target} to resume it, or another --save-dir for a new run "
        f"(--finetune-from-model {path} to start it from these weights)"
    )


def check_analysis_task(
    args: argparse.Namespace, task: FairseqTask, needed: str = "translation_san"
) -> None:
    """Refuse ``--san-analysis-dir`` for a model whose task has no analysis options.

    fairseq-validate builds the task saved in the checkpoint and gives command-line flags only to
    keys that task's config has, so on a checkpoint trained with another task than ``needed``
    (``language_modeling_san`` for a language model) the analysis would be silently skipped.
    fairseq sets every flag on the model's arguments, though, so the model checks; the message
    gives the override that switches the task.
    """
    cfg = getattr(task, "cfg", None)
    if not getattr(args, "san_analysis_dir", None) or hasattr(cfg, "san_analysis_dir"):
        return
    from fairseq.tasks import TASK_REGISTRY

    given = {
        option.name: getattr(args, option.name)
        for option in options.ANALYSIS_OPTIONS
        if getattr(args, option.name, None) is not None
    }
    trained = next((name for name, cls in TASK_REGISTRY.items() if cls is type(task)), None)
    override = {"task": {"_name": needed, **given}}
    raise UsageError(
        f"--san-analysis-dir needs the task {needed}, but this checkpoint was trained "
        f"with --task {trained or type(task).__name__}, which fairseq-validate keeps: switch its "
        f'task with --model-overrides "{override!r}"'
    )


def check_attention_heads(args: argparse.Namespace, stacks: Tuple[str, ...]) -> None:
    """Refuse a count of attention heads below 1 or that does not divide its stack's embedding
    size (each head takes embed/heads of it): fairseq's MultiheadAttention asserts it, a
    traceback."""
    for stack in stacks:
        heads = getattr(args, f"{stack}_attention_heads")
        embed = getattr(args, f"{stack}_embed_dim")
        if heads < 1 or embed % heads:
            divisors = [d for d in range(1, min(embed, 64) + 1) if embed % d == 0]
            raise UsageError(
                f"--{stack}-attention-heads {heads} does not divide --{stack}-embed-dim {embed} "
                f"(each head takes an equal part of it): pick one of "
                f"{', '.join(map(str, divisors[-6:]))}, or another --{stack}-embed-dim"
            )


def machine_memory() -> Optional[int]:
    """This machine's memory in bytes (its physical pages), None where the system does not say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_weights_fit_memory(args: argparse.Namespace, stacks: Tuple[str, ...]) -> None:
    """Refuse layers whose feed-forward weights alone (two ``embed x ffn`` matrices a layer, 32-bit
    floats: fairseq builds the model so on the CPU) take more than this machine's memory:
    ``--encoder-layers 2147483648`` built layers until the command was killed."""
    memory = machine_memory()
    for stack in stacks:
        layers, embed = getattr(args, f"{stack}_layers"), getattr(args, f"{stack}_embed_dim")
        least = layers * 2 * embed * getattr(args, f"{stack}_ffn_embed_dim") * 4
        if memory is not None and least > memory:
            raise UsageError(
                f"--{stack}-layers {layers} of --{stack}-embed-dim {embed}: their feed-forward "
                f"weights alone take {least / 2**30:,.0f} GiB, more than this machine's "
                f"{memory / 2**30:,.0f} GiB of memory; give the sizes meant"
            )


# The adaptive bands' options, each with the task's dictionary whose words it divides, the
# option that divides the width from one band to the next, and the first band's width.
ADAPTIVE_CUTOFFS = {
    "adaptive_softmax_cutoff": (
        "target_dictionary", "adaptive_softmax_factor", "decoder_output_dim",
    ),
    "adaptive_input_cutoff": ("source_dictionary", "adaptive_input_factor", "decoder_input_dim"),
}


def check_adaptive_cutoffs(args: argparse.Namespace, task: FairseqTask) -> None:
    """Refuse adaptive bands (``--adaptive-softmax-cutoff``, ``--adaptive-input-cutoff``) that do
    not increase up to at most the dictionary's size (fairseq asserts "cannot specify cutoff
    larger than vocab size", a traceback, or fails on a band of negative size), or whose last
    band is 0 wide (``check_band_widths``)."""
    for option, (dictionary, factor, width) in ADAPTIVE_CUTOFFS.items():
        text = getattr(args, option, None)
        cutoffs = options.cutoffs_read(text)  # as fairseq reads them
        if not isinstance(cutoffs, list) or not cutoffs:
            continue  # unset, or fairseq's to refuse
        size = len(getattr(task, dictionary))
        if any(low >= high for low, high in zip([0] + cutoffs, cutoffs)) or cutoffs[-1] > size:
            raise UsageError(
                f"{options.flag_of(option)} {text}: the bands' ends must increase from above 0 "
                f"to at most the dictionary's size, {size} words"
            )
        bands = len(cutoffs) + (cutoffs[-1] < size)  # fairseq adds the band up to the size
        check_band_widths(args, option, factor, width, bands)


def check_band_widths(
    args: argparse.Namespace, option: str, factor: str, width: str, bands: int
) -> None:
    """Refuse adaptive bands whose last is 0 wide: fairseq makes band i ``width // factor**i``
    wide, and a band of 0 failed to initialise (adaptive input: ``ZeroDivisionError``) or gave
    its words one probability each, untrainable (adaptive softmax: silently). A checkpoint
    trained so (only an adaptive softmax can be) still decodes as trained: a warning."""
    first, divisor = getattr(args, width, None), getattr(args, factor, None)
    if first is None or divisor is None or first // divisor ** (bands - 1) >= 1:
        return
    problem = (
        f"{options.flag_of(option)} makes {bands} bands, and the last is {first} // "
        f"{divisor:g}^{bands - 1} = 0 wide ({options.flag_of(width)} {first}, "
        f"{options.flag_of(factor)} {divisor:g})"
    )
    if checkpoints.is_stamped(args):
        logger.warning("%s: its words were not learned, each one probability", problem)
        return
    raise UsageError(f"{problem}: use fewer bands, a smaller factor or a wider model")


# How check_decoder_overrides says a decoder option reached the model alone (the hub words it
# again for its keywords).
MODEL_OPTION_HERE = "is a model option here"


def check_decoder_overrides(
    args: argparse.Namespace,
    task: FairseqTask,
    switch: options.Option = options.DECODING,
    plugin_task: str = "translation_san",
) -> None:
    """Refuse a decoder option among the model's options that the task does not apply.

    ``--model-overrides`` sets its keys on the checkpoint's configuration, but fairseq-generate
    and fairseq-interactive build the generator from the task of their command line, which never
    reads the model's ``san_decoding`` static or ``san_decoder_precision``: they would be
    accepted and ignored. A value other than the default that the task does not have is refused
    with the flag that works (the model applies the decodings of ``options.MODEL_DECODINGS``);
    a decoding outside ``switch``'s choices (a language model's: ``options.LM_DECODING``) is
    refused as such. A legacy task (fairseq's ``language_modeling``) keeps its options in
    ``args``.
    """
    cfg = getattr(task, "cfg", None) or getattr(task, "args", None)
    if cfg is None:
        return
    for option in options.DECODER_OPTIONS:
        given = getattr(args, option.name, None)
        applied = getattr(cfg, option.name, None) or option.default
        if given is None or str(given) in (str(option.default), str(applied)):
            continue
        flag, value = options.current_flag(option, given)
        choices = list(switch.choices) if option is options.DECODING else (
            command_line_choices(option)
        )
        if choices is not None and str(value) not in choices:  # advised a flag it refuses
            said = choice_problem(f"{option.name} '{given}' {STORED_SOURCE}", value, choices)
            raise UsageError(
                f"{said} (give a valid one as {flag} on the command line, with --task "
                f"{plugin_task})"
            )
        if option is options.DECODING and str(given) in options.MODEL_DECODINGS:
            continue
        decodes = "its default" if applied is None else f"'{applied}'"  # the device's execution
        raise UsageError(
            f"{option.name} '{given}' {MODEL_OPTION_HERE} (--model-overrides or the "
            f"checkpoint), which does not choose the decoder: this command decodes with "
            f"{decodes}. Pass {flag} {value} on the command line (with --task "
            f"{plugin_task}) instead"
        )


def command_line_choices(option: options.Option) -> Optional[List[str]]:
    """The values the command line takes for a decoder ``option``: its own choices, the table
    of precisions' or of the executions offered; None where it takes any."""
    from fairseq_san.static_decoding.execution import offered_executions
    from fairseq_san.static_decoding.precision import PRECISIONS

    if option is options.DECODER_PRECISION:
        return list(PRECISIONS)
    if option is options.DECODER_EXECUTION:
        return offered_executions()
    return None if option.choices is None else list(option.choices)


# Model options that sharing cannot work with, and why; the first entry names the policy kinds.
LAYERDROP = "LayerDrop may skip the first layer of a block"
PRUNING = (
    "pruning layers may drop a block's first layer, and the policy's blocks count the layers "
    "before pruning"
)
BASE_LAYERS = (
    "fairseq inserts its BASE layers, which have no attention, among the decoder's layers, and "
    "the policy's blocks count the layers with attention"
)
# The reasons above that refuse any policy of the stack, shared or not (its blocks count layers).
ANY_POLICY = (PRUNING, BASE_LAYERS)
INCOMPATIBLE_OPTIONS = [
    (san_policy.stack_kinds("encoder"), "encoder_layerdrop", LAYERDROP),
    (san_policy.stack_kinds("decoder"), "decoder_layerdrop", LAYERDROP),
    (san_policy.stack_kinds("encoder"), "encoder_layers_to_keep", PRUNING),
    (san_policy.stack_kinds("decoder"), "decoder_layers_to_keep", PRUNING),
    # --offload-activations turns --checkpoint-activations on: named first, it is the flag given.
    (
        san_policy.KINDS,
        "offload_activations",
        "activation checkpointing recomputes layers top-down in backward, after their block",
    ),
    (
        san_policy.KINDS,
        "checkpoint_activations",
        "activation checkpointing recomputes layers top-down in backward, after their block",
    ),
    (("decoder_self",), "cross_self_attention", "its keys include the encoder output"),
    (("decoder_encdec",), "no_cross_attention", "there is no encoder-decoder attention"),
    (san_policy.stack_kinds("decoder"), "base_layers", BASE_LAYERS),
]
# The options above that act in training only, and the value that turns each off: a checkpoint
# decoded under more sharing than it was trained with (``--model-overrides``, a hub keyword) is
# built without them instead of refused.
TRAINING_ONLY = {
    "encoder_layerdrop": 0.0,
    "decoder_layerdrop": 0.0,
    "offload_activations": False,
    "checkpoint_activations": False,
}


def architecture_defaults(arch: str) -> argparse.Namespace:
    """What the named architecture sets where the command line gives nothing (fairseq-train
    stores these values); empty for a name no architecture is registered under."""
    defaults = argparse.Namespace()
    set_defaults = ARCH_CONFIG_REGISTRY.get(arch)
    if set_defaults is not None:
        set_defaults(defaults)
    return defaults


def architecture_sets_aan(arch: str) -> bool:
    """Whether the named architecture's defaults make the decoder's self-attention AAN
    (``transformer_aan_small``, or any architecture registered on top of one)."""
    return getattr(architecture_defaults(arch), "decoder_self_attention_type", None) == "aan"


def aan_flag(args: argparse.Namespace) -> str:
    """What made the decoder's self-attention AAN, as the user wrote it: an AAN architecture
    or the flag itself."""
    arch = getattr(args, "arch", "") or ""
    if architecture_sets_aan(arch):
        return f"--arch {arch} (the average attention network in the decoder)"
    return "--decoder-self-attention-type aan"


def check_policy_fits_model(policy: Dict[str, List[int]], args: argparse.Namespace) -> None:
    """Raise PolicyError for a policy the model's other options make impossible."""
    aan = getattr(args, "decoder_self_attention_type", "") == "aan"
    if "decoder_self" in policy and aan:
        raise san_policy.PolicyError(
            f"a decoder_self sharing policy cannot be combined with {aan_flag(args)}: AAN has no "
            "attention weights to share"
        )
    if aan and getattr(args, "cross_self_attention", False):
        raise san_policy.PolicyError(
            f"--cross-self-attention cannot be combined with {aan_flag(args)}: AAN averages the "
            "target prefix and has no keys to add the encoder output to"
        )
    if aan and getattr(args, "base_layers", 0):
        raise san_policy.PolicyError(
            f"--base-layers cannot be combined with {aan_flag(args)}: fairseq's BASE layers, "
            "inserted among the decoder's, have no self-attention for AAN to replace"
        )
    sharing = san_policy.shared_blocks(policy)  # {1,1,1} shares nothing
    for kinds, option, reason in INCOMPATIBLE_OPTIONS:
        # A pruned stack, or one with BASE layers, has other layers than any policy of it counts.
        shared = [kind for kind in kinds if kind in (policy if reason in ANY_POLICY else sharing)]
        if not shared or not getattr(args, option, False):
            continue
        if option in TRAINING_ONLY and checkpoints.is_stamped(args):
            turn_off_training_option(args, option, shared[0])
        else:
            raise san_policy.PolicyError(
                f"{shared[0]} sharing cannot be combined with {options.flag_of(option)}: {reason}"
            )


def turn_off_training_option(args: argparse.Namespace, option: str, kind: str) -> None:
    """Build a checkpoint's model, decoded with ``kind`` sharing its training did not have,
    without ``option`` (``TRAINING_ONLY``): it acts in training only, so the outputs are the
    same, and a model of the configuration trained on would not drop or recompute a block's
    first layer. The check refused decoding a model trained with LayerDrop under more sharing."""
    logger.info(
        "%s sharing: this checkpoint's %s is off (it acts in training only)",
        kind,
        options.flag_of(option),
    )
    setattr(args, option, TRAINING_ONLY[option])


def warn_unused_encdec_share(policy: Dict[str, List[int]], args: argparse.Namespace) -> None:
    """Log that ``--san-encdec-share weights`` changes nothing: no block of the policy shares
    encoder-decoder attention. A warning, not an error: the loop recipes pass the same flags to
    every iteration, and the first trains without a policy (a later one may learn none). Only
    for a model built from the command line: a checkpoint's was warned of when it trained."""
    if getattr(args, "san_encdec_share", None) != "weights" or checkpoints.is_stamped(args):
        return
    if any(size > 1 for size in policy.get("decoder_encdec", [])):
        return
    logger.warning(
        "--san-encdec-share weights has no effect: this model shares no encoder-decoder "
        "attention (attention sharing: %s); it applies to decoder_encdec blocks of 2 or more "
        "layers",
        san_policy.format_policy(policy),
    )
