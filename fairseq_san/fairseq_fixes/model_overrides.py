"""``--model-overrides`` checked against the checkpoint they change, for the plugin's models: a key
that nothing reads, or a value the option cannot take, is one line naming it.

Upstream behaviour corrected: ``checkpoint_utils.load_checkpoint_to_cpu`` hands the overrides
(``--model-overrides``, the keywords of the hub's ``from_pretrained``) to
``fairseq.dataclass.utils.overwrite_args_by_name``, which sets every key on the model's
``argparse.Namespace`` unchecked. A misspelt key (``decoder_layerz``), or a dict for the model
(``{'model': {'dropout': 0.2}}``), is ignored, and the model decoded as it was trained; so is a
name for a group the checkpoint holds as a dict of options (``{'task': 'translation_san'}``:
fairseq switches such a group only from a dict, ``{'task': {'_name': 'translation_san'}}``, and
takes a name only for an unset one, ``{'bpe': 'sentencepiece'}``), an option that changes what
the model computes and none of its weights (``decoder_attention_heads``,
``cross_self_attention``: another function of the same weights), and another model
(``{'arch': 'transformer'}``: fairseq builds the model named by the ``_name`` it saved), while
a ``_name`` of their own renames every group, the model too. A value of another type (``'6'`` for
``encoder_layers``) fails deep inside the model's construction (``TypeError: 'str' object cannot
be interpreted as an integer``) or, for a switch (``'False'``), silently turns it on. Checked:
every key, and the keys of a group given as a dict (``{'task': {...}}``); a name given for a
group or the model, other than the checkpoint's own, and a ``_name`` of their own; a switch to
a component that lacks some of the group's options (omegaconf's ``ConfigKeyError`` where fairseq
builds it); the type of the model's options that take an int, a number or True/False, the
choices of those that have them, and the range of those that have one (``option_ranges``); a
component's name that fairseq has not registered (``bpe='bogus'``: a ``KeyError`` when the hub
built it); a dict for a component the checkpoint has none of (``{'bpe': {'_name':
'sentencepiece'}}``: ``TypeError: unhashable type: 'dict'``, fairseq takes its name); a key that
is no text (``{1: 2}``: a ``TypeError``). The plugin's own options are checked where the model
is built (``models.option_checks``), with their hints. A group given as a dict
(``{'task': {...}}``, as the plugin's hints give it) made fairseq drop the flat keys of that
group, fairseq-validate's command-line flags among them: its ``DATA`` (the checkpoint's own data
was validated instead) and ``--sample-break-mode``; they now apply unless the dict sets them.
Other models' checkpoints, and an older fairseq's (``args``, no ``cfg``), are left as fairseq
loads them, but for a plugin option set on fairseq's own translation model, which is refused
unless a plugin model of the same ensemble (``--path SAN.pt:BASELINE.pt``: fairseq gives every
model the overrides) reads it.
"""

import argparse
import contextvars
import enum
import functools
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple

from omegaconf import DictConfig

from fairseq_san import options
from fairseq_san.errors import (
    OVERRIDE_SOURCE, BosTokenUnlikeTask, NotThePluginsModel, UsageError, nearest_key_hint,
    not_a_choice,
)
from fairseq_san.fairseq_fixes.command_options import analysis_elsewhere
from fairseq_san.fairseq_fixes.literal_eval import evaluate
from fairseq_san.fairseq_fixes.option_ranges import OPTION_RANGES, given_values, out_of_range
from fairseq_san.fairseq_fixes.wrapping import running_command, wrap_once

# Keywords of the hub's from_pretrained that fairseq reads outside the configuration.
HUB_KEYWORDS = {"generation_args"}


def plugin_model_classes() -> Tuple[type, ...]:
    """The plugin's registered models (``transformer_san``, ``transformer_lm_san``)."""
    from fairseq_san.models import MODELS

    return MODELS


def plugin_model_class(model_cfg: Any) -> Optional[type]:
    """The plugin's model that ``model_cfg`` (a checkpoint's ``cfg.model``) was trained as, or
    None for another model."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    arch = getattr(model_cfg, "arch", None)
    model_class = ARCH_MODEL_REGISTRY.get(arch) if isinstance(arch, str) else None
    return model_class if model_class in plugin_model_classes() else None


def model_options(model_class: type) -> Dict[str, argparse.Action]:
    """The options of ``model_class`` (its ``add_args``), by name."""
    parser = argparse.ArgumentParser(add_help=False)
    model_class.add_args(parser)
    return {action.dest: action for action in parser._actions}


def configuration_keys(cfg: Any) -> Iterator[str]:
    """The option names a checkpoint's configuration holds, in each of its groups (a dataclass
    group, or a legacy ``argparse.Namespace`` of the training arguments)."""
    if isinstance(cfg, argparse.Namespace):
        yield from vars(cfg)
    elif isinstance(cfg, DictConfig):
        for key in cfg.keys():
            # "key in cfg" is False for a mandatory value not set ("???")
            if key in cfg and isinstance(cfg[key], (DictConfig, argparse.Namespace)):
                yield from configuration_keys(cfg[key])
            else:
                yield key


def component_fields(group: Optional[str] = None, name: Optional[str] = None) -> Set[str]:
    """The options of fairseq's registered components (tokenizer, BPE, criterion, scorer, ...),
    which an override may switch on (``{'bpe': 'sentencepiece', 'sentencepiece_model': ...}``);
    with ``group`` and ``name``, those of that one (``task``, ``translation_san``)."""
    from fairseq.registry import REGISTRIES

    if group is not None:
        dataclass = component_dataclass(group, name)
        return set(dataclass.__dataclass_fields__) if dataclass else set()
    return {
        field
        for registry in REGISTRIES.values()
        for dataclass in registry["dataclass_registry"].values()
        for field in dataclass.__dataclass_fields__
    }


def component_dataclass(group: str, name: Any) -> Optional[type]:
    """The dataclass of fairseq's component ``name`` of ``group`` (``task``,
    ``translation_san``), or None where there is none."""
    from fairseq.registry import REGISTRIES
    from fairseq.tasks import TASK_DATACLASS_REGISTRY

    registries = {key: registry["dataclass_registry"] for key, registry in REGISTRIES.items()}
    registries["task"] = TASK_DATACLASS_REGISTRY
    return registries.get(group, {}).get(name) if isinstance(name, str) else None


def check_known(
    key: str, known: Set[str], hints: Set[str], source: str, group: str = ""
) -> None:
    """Refuse an override key that nothing in ``known`` has: fairseq would ignore it. The hint
    names the nearest of ``hints`` (the checkpoint's own options, not every component's);
    ``group`` is the group whose dict holds ``key``."""
    check_text_key(key, source, group)
    if key in known:
        return
    hint = nearest_key_hint(key, hints, fallback="check its spelling", prefix=group)
    raise UsageError(
        f"unknown option '{group}{key}' {source}: neither this checkpoint's model nor any "
        f"fairseq component has it, and fairseq would ignore it; {hint}"
    )


def check_text_key(key: Any, source: str, group: str = "") -> None:
    """Refuse a key that is no text (``{1: 2}``): no option is named so, and the hint's difflib
    failed on it (``TypeError: 'int' object is not iterable``)."""
    if isinstance(key, str):
        return
    where = f" in {group.rstrip('.')}" if group else ""
    raise UsageError(
        f"key {key!r}{where} {source} is of type {type(key).__name__}: options are named by "
        "text, e.g. {'dropout': 0.1}"
    )


def wanted_type(action: argparse.Action) -> Optional[Tuple[type, str]]:
    """(accepted Python type, its name in a message) for an option that takes an int, a number
    or True/False; None for the others (text, lists), whose type is not checked."""
    if action.nargs == 0 and isinstance(action.const, bool):  # store_true, store_false
        return bool, "True or False"
    if action.type is int:
        return int, "an int"
    if action.type is float:
        return (int, float), "a number"
    return None


def fits(value: Any, accepted, trained: Any) -> bool:
    """Whether ``value`` can stand where an option takes ``accepted``: that type (True/False not
    for a number, 0/1 for True/False), or the type of the checkpoint's own value (``trained``)."""
    if trained is not None and type(value) is type(trained):
        return True
    if accepted is bool:
        return isinstance(value, bool) or value in (0, 1)
    return isinstance(value, accepted) and not isinstance(value, bool)


def check_value(key: str, value: Any, action: argparse.Action, trained: Any, source: str) -> None:
    """Refuse a value the model's option ``action`` cannot take: another type, a value outside
    its choices or its range (``option_ranges``: ``dropout`` 1.5 failed at the first forward
    pass with ``--retain-dropout``). None is left to the model (several options are optional)."""
    if value is None:
        return
    wanted = wanted_type(action)
    if wanted is not None and not fits(value, wanted[0], trained):
        example = "" if trained is None else f" (this checkpoint has {{'{key}': {trained!r}}})"
        raise UsageError(
            f"{key} {value!r} {source} is of type {type(value).__name__}, but {key} takes "
            f"{wanted[1]}{example}"
        )
    if action.choices and value not in action.choices:
        raise not_a_choice(key, value, list(action.choices), source)
    valid = OPTION_RANGES.get(key)
    bad = out_of_range(given_values(value), valid) if valid is not None else []
    if bad:
        said = valid.said_for(bad[0])
        raise UsageError(f"{key} {value!r} {source} is out of range: it must be {said}")


def group_dataclasses(cfg: DictConfig) -> Iterator[type]:
    """The dataclasses of the groups ``cfg`` holds: fairseq's plain groups (``common``,
    ``dataset``, ...) and the components its groups name (the task's, the criterion's, ...); not
    the generation options, which are refused as overrides (``check_no_decoding_option``, the
    hub's ``check_no_decoding_keyword``)."""
    from fairseq.dataclass.configs import FairseqConfig

    for group, field in FairseqConfig.__dataclass_fields__.items():
        if group == "generation":
            continue
        if hasattr(field.type, "__dataclass_fields__"):
            yield field.type
        elif group in cfg and isinstance(cfg[group], DictConfig):
            dataclass = component_dataclass(group, cfg[group].get("_name"))
            if dataclass is not None:
                yield dataclass


def fairseq_choices(cfg: DictConfig) -> Dict[str, List[str]]:
    """The choices of fairseq's options in ``cfg``'s groups that take one of a few values (their
    type a ``ChoiceEnum``: ``log_format``, ``ddp_backend``, a language model's
    ``sample_break_mode``), by name. fairseq sets an override of them unchecked: ``'jsn'`` loaded
    without a word. The plugin's own (``san_decoding``) are its task's to check, in its words."""
    choices = {}
    for dataclass in group_dataclasses(cfg):
        for name, field in dataclass.__dataclass_fields__.items():
            if name in options.OPTIONS:
                continue
            for kind in getattr(field.type, "__args__", None) or (field.type,):  # Optional[...]
                if isinstance(kind, type) and issubclass(kind, enum.Enum):
                    choices[name] = [member.value for member in kind]
    return choices


def check_group(cfg: DictConfig, group: str, overrides: Dict[str, Any], source: str) -> None:
    """Refuse a dict for a group that fairseq would not read key by key (the model's options,
    an ``argparse.Namespace``), and a key of the dict that the group has not (nor the component
    its ``_name`` switches to)."""
    held = cfg[group] if group in cfg else None
    if isinstance(held, argparse.Namespace):
        raise UsageError(
            f"{group} {overrides!r} {source}: fairseq does not read this checkpoint's {group} "
            f"options from a dict, and would ignore it; give each as a key of its own: "
            f"{{{as_keys(overrides)}}}"
        )
    if held is None:
        check_unset_component(group, overrides, source)
    if not isinstance(held, DictConfig):
        return
    if "_name" in overrides:
        check_switch(held, group, overrides["_name"], source)
    name = overrides.get("_name", held.get("_name"))
    known = set(held.keys()) | component_fields(group, name) | {"_name"}
    for key in overrides:
        check_known(key, known, set(held.keys()), source, group=f"{group}.")


def as_keys(overrides: Dict[str, Any]) -> str:
    """``overrides`` as keys of the overrides' own dict, without its braces."""
    return ", ".join(f"{key!r}: {value!r}" for key, value in overrides.items())


def check_unset_component(group: str, overrides: Dict[str, Any], source: str) -> None:
    """Refuse a dict for a component the checkpoint has none of (``{'bpe': {'_name':
    'sentencepiece'}}``): fairseq looks the dict up in the component's registry (``TypeError:
    unhashable type: 'dict'``); it switches one on by its name, whose options it reads from the
    overrides' own keys."""
    from fairseq.registry import REGISTRIES

    if group not in REGISTRIES:
        return
    given = {key: value for key, value in overrides.items() if key != "_name"}
    name = repr(overrides["_name"]) if "_name" in overrides else "NAME"
    example = ", ".join(filter(None, [f"'{group}': {name}", as_keys(given)]))
    raise UsageError(
        f"{group} {overrides!r} {source}: this checkpoint has no {group}, and fairseq switches "
        f"one on by its name only, not from a dict, with its options as keys of their own: "
        f"{{{example}}}"
    )


def check_switch(held: DictConfig, group: str, name: Any, source: str) -> None:
    """Refuse switching a component the checkpoint holds (``held``) to one that lacks some of
    its options: fairseq keeps them, and fails on them where it builds the component
    (omegaconf's ``ConfigKeyError``), save for the task, whose loader drops them."""
    check_component_name(group, name, source)
    if group == "task" or held.get("_name") in (None, name):
        return
    fields = component_fields(group, name)
    lacking = sorted(key for key in held.keys() if key != "_name" and key not in fields)
    if not lacking:
        return
    raise UsageError(
        f"{group} {name!r} {source}: this checkpoint's {group} ({held.get('_name')}) has options "
        f"that {name} has not ({', '.join(lacking)}): fairseq keeps them, and fails on them "
        f"where it builds the {group}; it cannot switch this checkpoint's {group} to {name}"
    )


def check_component_name(group: str, value: Any, source: str) -> None:
    """Refuse a name that fairseq has not registered for a component (``bpe='bogus'``: a
    ``KeyError`` when the hub builds it). fairseq-validate's own overrides name the task and
    other groups from its command line, whose parser took registered names only."""
    from fairseq.registry import REGISTRIES
    from fairseq.tasks import TASK_REGISTRY  # not among REGISTRIES

    components = TASK_REGISTRY if group == "task" else REGISTRIES.get(group, {}).get("registry", {})
    if components and isinstance(value, str) and value not in components:
        raise UsageError(
            f"{group} {value!r} {source} is not one of fairseq's {group} components: "
            + nearest_key_hint(value, components)
        )


def model_name(model_cfg: Any) -> Optional[str]:
    """The model fairseq builds for a checkpoint (``models.build_model``): the ``_name`` its
    configuration saved, else its ``arch``."""
    return getattr(model_cfg, "_name", None) or getattr(model_cfg, "arch", None)


def check_model_name(key: str, value: Any, model_cfg: Any, source: str) -> None:
    """Refuse another model (``{'arch': 'transformer'}``, ``{'model': 'transformer'}``) than the
    one fairseq builds for the checkpoint: it builds the one its ``_name`` names, and reads
    ``arch`` only without it (``model`` never)."""
    if value == model_name(model_cfg) or (key == "arch" and not getattr(model_cfg, "_name", None)):
        return
    raise UsageError(
        f"{key} {value!r} {source}: fairseq builds this checkpoint's model as it was trained "
        f"({model_name(model_cfg)}), and would ignore it; leave {key} out of the overrides"
    )


def an_option(group: DictConfig) -> Tuple[str, Any]:
    """(name, value) of the first option a group of a checkpoint's configuration has set."""
    # "key in group" is False for a mandatory value not set ("???")
    return next((key, group[key]) for key in group.keys() if key in group and key != "_name")


def check_group_name(cfg: DictConfig, group: str, value: str, source: str) -> None:
    """Refuse a name for a group the checkpoint holds, other than its own: fairseq takes a name
    only for an unset group (``{'bpe': 'sentencepiece'}``) and ignores it for the others: a
    component (switched only from a dict, ``{'task': {'_name': ...}}``), a plain group of options
    (``generation``), the model (built as its ``_name`` says)."""
    held = cfg[group] if group in cfg else None
    if isinstance(held, argparse.Namespace):
        check_model_name(group, value, held, source)
    if not isinstance(held, DictConfig) or value == held.get("_name"):
        return
    if held.get("_name") is None:
        key, example = an_option(held)
        raise UsageError(
            f"{group} {value!r} {source}: {group} is a group of options, not a component "
            f"fairseq could switch, and it would ignore the name; give its options in a dict, "
            f"e.g. {{'{group}': {{'{key}': {example!r}}}}}"
        )
    check_switch(held, group, value, source)
    raise UsageError(
        f"{group} {value!r} {source}: fairseq takes this checkpoint's {group} as a dict of its "
        f"options, and would ignore a name; switch it with {{'{group}': {{'_name': {value!r}}}}}"
    )


def given_overrides(overrides: Dict[str, Any]) -> Dict[str, Any]:
    """The overrides the user gave. fairseq-validate's are the options of its command line
    (``--path``, ``--task NAME``), updated with its ``--model-overrides``, which it keeps as text
    (``model_overrides``); no other caller's hold ``path``."""
    if "path" not in overrides:
        return overrides
    return evaluate(overrides.get("model_overrides", "{}"))


def check_names(cfg: DictConfig, overrides: Dict[str, Any], source: str) -> None:
    """Refuse a name the user gave for a group or the model that fairseq would ignore, and a
    ``_name`` of its own: fairseq sets it on every group (the model it builds, the task, ...)."""
    for key, value in given_overrides(overrides).items():
        if key == "_name":
            raise UsageError(
                f"_name {value!r} {source}: fairseq would give every group of this checkpoint's "
                "configuration that name (its model, its task, ...); leave it out, and name a "
                "group's component in that group's dict ({'task': {'_name': ...}})"
            )
        if key == "arch":
            check_model_name(key, value, cfg.model, source)
        elif key in cfg.keys() and isinstance(value, str):
            check_group_name(cfg, key, value, source)


def check_bos_override(model_cfg: Any, overrides: Dict[str, Any], source: str) -> None:
    """Refuse an ``add_bos_token`` unlike the language model's training. fairseq sets it on the
    model's options and the task's alike, which the model's own check then finds equal
    (``option_checks.check_bos_token``): fairseq-validate, whose overrides are its command line
    (``--add-bos-token`` given or not), and the hub's keyword scored the samples with another
    start token than the model learned with (another perplexity), without a word."""
    from fairseq_san.models.option_checks import bos_token_unlike_training

    trained = getattr(model_cfg, "add_bos_token", None)
    given = overrides.get("add_bos_token")
    if trained is None or given is None or bool(trained) == bool(given):
        return
    command_line = "path" in overrides  # fairseq-validate's (``given_overrides``)
    raise bos_token_unlike_training(bool(trained), "" if command_line else source)


# The fairseq commands that decode with the generation options of their own command line, not
# those of the checkpoint's configuration that --model-overrides sets.
DECODING_COMMANDS = {"fairseq_cli.generate": "fairseq-generate",
                     "fairseq_cli.interactive": "fairseq-interactive"}  # fmt: skip


# The fairseq commands that build their task from their own command line: the checkpoint's task
# options that --model-overrides sets reach the model only (fairseq-validate keeps the task).
TASK_FROM_COMMAND_LINE = {**DECODING_COMMANDS, "fairseq_cli.eval_lm": "fairseq-eval-lm"}


def check_no_analysis_option(overrides: Dict[str, Any]) -> None:
    """Refuse an option of the attention analysis (``san_analysis_dir``) in the
    ``--model-overrides`` of a command of ``TASK_FROM_COMMAND_LINE``: the analysis is its task's,
    which the overrides do not reach, and the command ran and wrote none, exit 0."""
    command = next((name for module, name in TASK_FROM_COMMAND_LINE.items()
                    if running_command(module) is not None), None)  # fmt: skip
    if command is None:
        return
    for option in options.ANALYSIS_OPTIONS:
        if overrides.get(option.name) is not None:
            raise UsageError(
                f"{option.name} {overrides[option.name]!r} (from --model-overrides): "
                f"{analysis_elsewhere(command)}"
            )


def check_no_decoding_option(overrides: Dict[str, Any], own: Set[str]) -> None:
    """Refuse a generation option (``beam``, ``lenpen``, ...) in fairseq-generate's or
    -interactive's ``--model-overrides``: it sets the checkpoint's stored configuration, and the
    command decodes with its own command line's (test_bleu.sh's ``NAME=CKPT:{'beam': 3}``
    decoded at beam 4, without a word). ``own``: the model's options, which stay allowed."""
    from fairseq.dataclass.configs import GenerationConfig

    command = next((name for module, name in DECODING_COMMANDS.items()
                    if running_command(module) is not None), None)  # fmt: skip
    if command is None:
        return
    for key, value in overrides.items():
        if key in GenerationConfig.__dataclass_fields__ and key not in own:
            flag = "--" + key.replace("_", "-")
            raise UsageError(
                f"{key} {value!r} (from --model-overrides) is a decoding option, which {command} "
                f"takes from its own command line, not the checkpoint's: pass {flag} instead"
            )


# Options a plugin model's architecture sets whatever they are given (fairseq's
# base_lm_architecture: "Model training is not stable without this"), by the model's registered
# name: an override of another value was ignored without a word.
SET_BY_ARCHITECTURE = {"transformer_lm_san": {"decoder_normalize_before": True}}


def check_not_set_by_architecture(
    model_class: type, overrides: Dict[str, Any], source: str
) -> None:
    """Refuse an override of an option that ``model_class``'s architecture sets itself
    (``SET_BY_ARCHITECTURE``) to another value than the one it sets."""
    from fairseq.models import MODEL_REGISTRY

    name = next((name for name, cls in MODEL_REGISTRY.items() if cls is model_class), None)
    for key, fixed in SET_BY_ARCHITECTURE.get(name, {}).items():
        if key in overrides and overrides[key] != fixed:
            raise UsageError(
                f"{key} {overrides[key]!r} {source}: {name} always has {key} {fixed!r} (fairseq's "
                "base_lm_architecture sets it), so the value would be ignored: leave it out"
            )


# Model options that change what the model computes and none of its weights: another value than
# the training's loads the same weights into another function (more heads over the same
# projections, cross-attention over the target too, another activation), without a word.
WEIGHTLESS_OPTIONS = (
    "encoder_attention_heads", "decoder_attention_heads", "cross_self_attention", "activation_fn",
    "no_scale_embedding", "no_token_positional_embeddings",
)  # fmt: skip


def check_weightless_options(model_cfg: Any, overrides: Dict[str, Any], source: str) -> None:
    """Refuse an override of one of ``WEIGHTLESS_OPTIONS`` unlike the checkpoint's training."""
    for key in WEIGHTLESS_OPTIONS:
        trained = getattr(model_cfg, key, None)
        if key in overrides and trained is not None and overrides[key] != trained:
            raise UsageError(
                f"{key} {overrides[key]!r} {source}: this checkpoint was trained with {key} "
                f"{trained!r}, and its weights fit either, so the model would compute another "
                "function than it learned: leave it out"
            )


def check_overrides(
    cfg: DictConfig, overrides: Dict[str, Any], source: str = OVERRIDE_SOURCE
) -> None:
    """Refuse an override of a plugin's checkpoint (``cfg``, before it is overwritten) that
    fairseq would ignore or that the model's option cannot take; ``source`` says where the
    overrides came from."""
    model_cfg = cfg.get("model")
    own_class = plugin_model_class(model_cfg) if overrides else None
    if own_class is None:
        check_no_plugin_option(model_cfg, overrides, source)
        return
    by_class = {model_class: model_options(model_class) for model_class in plugin_model_classes()}
    own = by_class[own_class]
    held = set(configuration_keys(cfg))
    # Any plugin model's options: fairseq-generate --lm-path gives the translation model's
    # overrides to the language model too; the models check their own.
    plugin = set(options.OPTIONS).union(*by_class.values())
    known = held | set(cfg.keys()) | plugin | component_fields() | HUB_KEYWORDS
    choices = fairseq_choices(cfg)
    for key, value in overrides.items():
        if isinstance(value, dict) and key in cfg.keys():
            check_group(cfg, key, value, source)
            continue
        if key in cfg.keys():
            check_component_name(key, value, source)
            continue
        # the decoders' options are the model's too (the hub's and --model-overrides' keys),
        # also where a checkpoint of --task translation holds none of them
        check_known(key, known, held | set(own) | set(options.DECODER_OPTION_NAMES), source)
        if key in own and key not in options.OPTIONS:
            check_value(key, value, own[key], getattr(model_cfg, key, None), source)
        elif key in choices and value is not None and value not in choices[key]:
            raise not_a_choice(key, value, choices[key], source)
    check_names(cfg, overrides, source)
    check_bos_override(model_cfg, overrides, source)
    check_not_set_by_architecture(own_class, overrides, source)
    check_weightless_options(model_cfg, overrides, source)
    check_no_decoding_option(overrides, set(own) | set(options.OPTIONS))
    check_no_analysis_option(overrides)


def check_no_plugin_option(model_cfg: Any, overrides: Dict[str, Any], source: str) -> None:
    """Refuse a plugin's model or decoding option among the overrides of a translation
    checkpoint of another model (fairseq's own ``transformer``): its model reads none of them,
    and fairseq decoded it as trained, without a word (a policy that shared nothing, fairseq's
    generator). Not a language model's: fairseq-generate ``--lm-path`` gives it the translation
    model's overrides. In an ensemble the refusal waits for the others
    (``_deferring_to_the_ensemble``)."""
    from fairseq.models import ARCH_MODEL_REGISTRY, FairseqEncoderDecoderModel

    arch = getattr(model_cfg, "arch", None)
    model_class = ARCH_MODEL_REGISTRY.get(arch) if isinstance(arch, str) else None
    if not (isinstance(model_class, type) and issubclass(model_class, FairseqEncoderDecoderModel)):
        return
    for key, value in given_overrides(overrides).items():
        option = options.OPTIONS.get(key)
        if option is None or option in options.ANALYSIS_OPTIONS or not option.is_set(value):
            continue
        advice = foreign_model_advice(option, value)
        error = NotThePluginsModel(
            f"{key}={value!r} {source}: this checkpoint's model ({arch}) is none of the plugin's "
            f"and reads no option of it, and fairseq would decode it as trained; {advice}",
            key,
            value,
        )
        deferred = _ENSEMBLE_REFUSALS.get()
        if deferred is None:
            raise error
        deferred.append(error)
        return


def foreign_model_advice(option: options.Option, value: object) -> str:
    """What to do instead of giving plugin ``option`` = ``value`` to a model that is none of the
    plugin's: the plugin's task applies the static decoder to any model, and nothing else (the
    command line's task, or the hub's ``task`` keyword: it has no command line)."""
    if option not in options.DECODER_OPTIONS:
        return "attention sharing needs a model trained as transformer_san or transformer_lm_san"
    if str(value) in options.MODEL_DECODINGS:
        return "only the plugin's models apply it: decode with --san-decoding fairseq or static"
    return (
        f"give {option.flag} on the command line (with --task translation_san), or to the hub "
        f"in its task (task={{'_name': 'translation_san', '{option.name}': {str(value)!r}}})"
    )


# What ``check_no_plugin_option`` refused while an ensemble loads (``_deferring_to_the_ensemble``);
# None outside one.
_ENSEMBLE_REFUSALS: contextvars.ContextVar[Optional[List[UsageError]]] = contextvars.ContextVar(
    "ensemble_refusals", default=None
)


def ensemble_trained_alike(checkpoints: str = "--path A.pt:B.pt") -> str:
    """What a start token unlike an ensemble model's training adds, the rule of the command line
    and the hub alike; ``checkpoints`` says how the command takes an ensemble's."""
    return (
        f"an ensemble's checkpoints ({checkpoints}) read one task, so they must all be trained "
        "with --add-bos-token or all without"
    )


def _deferring_to_the_ensemble(load_model_ensemble_and_task):
    """fairseq's ensemble loader: fairseq gives the overrides to every model of an ensemble
    (``--path SAN.pt:BASELINE.pt``), so a plugin option that fairseq's own model beside a plugin
    model ignores is refused only where no model of the ensemble reads it. A start token unlike
    a model's training says that the ensemble's models must be trained alike: "add
    --add-bos-token" for one model and "drop" it for the other went round in a circle."""

    @functools.wraps(load_model_ensemble_and_task)
    def wrapper(filenames, *args, **kwargs):
        if len(filenames) < 2:
            return load_model_ensemble_and_task(filenames, *args, **kwargs)
        deferred = []
        token = _ENSEMBLE_REFUSALS.set(deferred)
        try:
            loaded = load_model_ensemble_and_task(filenames, *args, **kwargs)
        except BosTokenUnlikeTask as error:
            said = f"{error}; {ensemble_trained_alike()}"
            raise BosTokenUnlikeTask(said, error.trained) from None
        finally:
            _ENSEMBLE_REFUSALS.reset(token)
        if deferred and not any(isinstance(model, plugin_model_classes()) for model in loaded[0]):
            raise deferred[0]
        return loaded

    return wrapper


def forget_training_decoding(cfg: DictConfig) -> None:
    """A plugin checkpoint's decoder options (``options.DECODER_OPTIONS``) back to their defaults.

    fairseq saves a legacy model's configuration as the whole command line of its training, the
    task's options among it: how the training validated (``--eval-bleu --san-decoding static``)
    is no choice of a command that loads the checkpoint, which decodes as its own options say
    (``--san-decoding``, ``--model-overrides``). Kept, a stored ``static`` made every other
    decoding refused (``option_checks.check_decoder_overrides``), and a stored ``no-cache``
    outlived an explicit ``--san-decoding fairseq``. The deprecated model options
    (``san_no_cache``, ``san_fast_decoding``) are kept: the model still applies them.
    """
    model_cfg = cfg.get("model")
    if plugin_model_class(model_cfg) is None:
        return
    for option in options.DECODER_OPTIONS:
        if getattr(model_cfg, option.name, None) not in (None, option.default):
            setattr(model_cfg, option.name, option.default)


def with_flat_options(cfg: DictConfig, overrides: Dict[str, Any]) -> Dict[str, Any]:
    """``overrides`` where each group given as a dict (``{'task': {...}}``) also holds the flat
    keys (fairseq-validate's command-line flags: ``DATA``, ``--sample-break-mode``) that the
    checkpoint's group has, unless the dict sets them: fairseq applies only the dict's keys to
    such a group. A plugin checkpoint only (others load as fairseq loads them)."""
    if plugin_model_class(cfg.get("model")) is None:
        return overrides
    flat = {key: value for key, value in overrides.items() if not isinstance(value, dict)}
    merged = dict(overrides)
    for group, given in overrides.items():
        held = cfg.get(group) if group in cfg.keys() else None
        if isinstance(given, dict) and isinstance(held, DictConfig):
            merged[group] = {**{k: v for k, v in flat.items() if k in held}, **given}
    return merged


def _checking(overwrite_args_by_name):
    @functools.wraps(overwrite_args_by_name)
    def wrapper(cfg, overrides, *args, **kwargs):
        check_overrides(cfg, overrides)
        forget_training_decoding(cfg)
        overrides = with_flat_options(cfg, overrides)
        return overwrite_args_by_name(cfg, overrides, *args, **kwargs)

    return wrapper


def install() -> None:
    """Check overrides where ``load_checkpoint_to_cpu`` applies them, after the checkpoint's own
    decoder options are dropped, and an ensemble's as a whole (idempotent)."""
    from fairseq import checkpoint_utils  # here: importing fairseq is what runs this

    wrap_once(checkpoint_utils, "overwrite_args_by_name", _checking)
    wrap_once(checkpoint_utils, "load_model_ensemble_and_task", _deferring_to_the_ensemble)
