r"""Arguments that fairseq writes out as hydra overrides read back as they were, or one line.

Upstream behaviour corrected: ``fairseq.dataclass.utils._override_attr`` turns each argument
of an argparse Namespace (every command line's, and the ``args`` of a checkpoint saved before
fairseq's dataclass configurations) into a hydra override ``group.name='value'``. It escapes
a quote but not the backslashes before it, which hydra reads as escaping that quote (or the
closing one): ``--save-dir 'runs\'``, or an argument holding ``\'``, was hydra's
OverrideParseException after a page of every override. And a checkpoint's argument of a
non-text option is read with ``ast.literal_eval``: a value that is no literal (nested too deep,
an integer of 5,000 digits) was a SyntaxError traceback from inside fairseq's loader.

``install()`` wraps ``_override_attr``: the backslashes before a quote or the end of a text are
doubled, as hydra's grammar reads them back, and an argument fairseq would read as a literal
and cannot is a ``NotALiteralArgument`` (``checkpoints.problem_with`` names the checkpoint).

A text argument holding ``${`` (``--save-dir 'a${x}'``, ``'a${x'``) was omegaconf's
InterpolationKeyError or hydra's ConfigCompositionException traceback, or an interpolation
resolved (``${oc.env:HOME}``). Escaping it (``\${``) would carry it into the configuration, but
fairseq saves its configuration resolved: its checkpoints would hold the interpolation. So it is
refused in one line: ``check_no_interpolation`` for a command line (``command_options``), an
``InterpolatedArgument`` for a checkpoint's ``args``, ``check_no_interpolated_override`` for an
override (``--model-overrides`` of a program, the hub's keywords: fairseq sets them on the
checkpoint's configuration, and they were refused as an interpolation of the checkpoint's own,
"not a configuration fairseq wrote").
"""

import argparse
import ast
import functools
import inspect
import re
from enum import Enum
from typing import Any, Dict

from fairseq_san.checkpoints import INTERPOLATED, InterpolatedArgument, NotALiteralArgument
from fairseq_san.errors import OVERRIDE_SOURCE, UsageError
from fairseq_san.options import flag_of
from fairseq_san.pickled_fields import fields, shown
from fairseq_san.fairseq_fixes.wrapping import wrap_once

# A run of backslashes before a quote or the end of a text: hydra's quoted values read each pair
# there as one backslash (and one alone as escaping the quote).
BEFORE_QUOTE = re.compile(r"(\\+)(?='|$)")
# What ast.literal_eval raises for a text that is no literal, or too big or deep to be read.
LITERAL_ERRORS = (SyntaxError, ValueError, TypeError, MemoryError, RecursionError)


def hydra_text(value: str) -> str:
    """``value`` with the backslashes before a quote or its end doubled: ``_override_attr``
    then escapes its quotes, and hydra reads ``value`` back."""
    return BEFORE_QUOTE.sub(lambda found: found.group(1) * 2, value)


def option_types(data_class: type) -> Dict[str, object]:
    """The type of each public option of a fairseq dataclass, as ``_override_attr`` reads it."""
    from fairseq.dataclass.utils import interpret_dc_type

    options = getattr(data_class, "__dataclass_fields__", {})
    return {name: interpret_dc_type(option.type) for name, option in options.items()
            if not name.startswith("_")}  # fmt: skip


def read_as_literal(kind: object, value: object) -> bool:
    """Whether ``_override_attr`` reads ``value`` of an option of type ``kind`` with
    ``ast.literal_eval`` (text given to an option of another type, not an interpolation)."""
    if not isinstance(value, str) or value.startswith("${") or kind is str:
        return False
    return not (inspect.isclass(kind) and issubclass(kind, Enum))


def interpolation_refused(said: str) -> UsageError:
    """The refusal of a text that holds ``${``; ``said`` names it and its value."""
    return UsageError(f"{said} holds '${{', {INTERPOLATED}: give it without '${{'")


def check_no_interpolation(args: argparse.Namespace) -> None:
    """UsageError naming a command line's text argument that holds ``${`` (the data folder by
    its place, ``DATA``: there is no ``--data``)."""
    for name, value in sorted(vars(args).items()):
        if isinstance(value, str) and "${" in value:
            said = "DATA" if name == "data" else flag_of(name)
            raise interpolation_refused(f"{said} {shown(value)}")


def check_no_interpolated_override(overrides: Dict[str, Any]) -> None:
    """UsageError naming an override (``--model-overrides``, the hub's keywords; one in a group
    given as a dict or in a list by its dotted name) whose text holds ``${``: fairseq sets it on
    the checkpoint's configuration, which resolves it as it is read."""
    for name, _, value in fields(overrides):
        if isinstance(value, str) and "${" in value:
            raise interpolation_refused(f"{name}={shown(value)} {OVERRIDE_SOURCE}")


def checked_arguments(data_class: type, args: argparse.Namespace) -> argparse.Namespace:
    """``args`` with its text options' backslashes made hydra's (``hydra_text``); an
    ``InterpolatedArgument`` for a text holding ``${``, a ``NotALiteralArgument`` for an option
    read as a literal that is none."""
    escaped = {}
    for name, kind in option_types(data_class).items():
        value = getattr(args, name, None)
        if isinstance(value, str) and kind is str and "${" in value:
            raise InterpolatedArgument(name, value)
        if isinstance(value, str) and kind is str:
            escaped[name] = hydra_text(value)
        elif read_as_literal(kind, value):
            try:
                ast.literal_eval(value)
            except LITERAL_ERRORS as error:
                raise NotALiteralArgument(name, value, error) from None
    return argparse.Namespace(**{**vars(args), **escaped})


def _reading_back(override_attr):
    @functools.wraps(override_attr)
    def wrapper(sub_node, data_class, args):
        if isinstance(args, argparse.Namespace):
            args = checked_arguments(data_class, args)
        return override_attr(sub_node, data_class, args)

    return wrapper


def install() -> None:
    """Make fairseq's overrides read back as the arguments were (idempotent)."""
    from fairseq.dataclass import utils

    wrap_once(utils, "_override_attr", _reading_back)
