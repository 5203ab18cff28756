"""fairseq's ``--retain-dropout-modules`` checked against the model it is applied to.

Upstream behaviour corrected: fairseq keeps a dropout on while decoding where its module's name
is ``in`` the option's value (``FairseqDropout.make_generation_fast_``), which the command line
gives as one string: no module's name is in a misspelt one (``TransformerDecodr``), and every
dropout was off, without a word. ``install()`` wraps ``BaseFairseqModel.prepare_for_inference_``
(fairseq-generate, fairseq-interactive and the hub's ``generation_args`` reach it): a name that no
dropout of the model bears is refused in one line naming those it has.
"""

import functools
import re
from collections.abc import Iterable
from typing import List, Optional, Set

from fairseq_san.errors import UsageError
from fairseq_san.fairseq_fixes.wrapping import wrap_once

# A module name in the option's text: "TransformerDecoder,MultiheadAttention", "['A', 'B']".
MODULE_NAME = re.compile(r"\w+")


def given_names(value: object) -> List[str]:
    """The module names ``--retain-dropout-modules`` holds: a text's words, or a list's items
    (none in anything else: the hub's ``retain_dropout_modules=5``)."""
    if isinstance(value, str):
        return MODULE_NAME.findall(value)
    return [str(name) for name in value] if isinstance(value, Iterable) else []


def dropout_names(model: object) -> Set[str]:
    """The names of ``model``'s dropouts that ``--retain-dropout-modules`` can keep."""
    from fairseq.modules import FairseqDropout

    return {
        module.module_name
        for module in model.modules()
        if isinstance(module, FairseqDropout) and module.module_name is not None
    }


def check_retained_modules(model: object, value: object, given_as: Optional[str] = None) -> None:
    """Refuse a name of ``value`` (``--retain-dropout-modules``) that none of ``model``'s
    dropouts bears, naming those it has. ``given_as``: where the hub's keyword was given (the
    line names the keyword there, not the flag)."""
    if value is None:
        return
    names, given = dropout_names(model), given_names(value)
    unknown = ", ".join(name for name in given if name not in names)
    if unknown or not given:
        option = (
            f"--retain-dropout-modules {unknown or repr(value)}: no dropout of this "
            f"{type(model).__name__} is named so"
            if given_as is None
            else f"retain_dropout_modules={value!r}{given_as}: no dropout of this "
            f"{type(model).__name__} is named {unknown or repr(value)}"
        )
        raise UsageError(
            f"{option}, and fairseq would keep none for it; its modules with dropout are "
            f"{', '.join(sorted(names))}"
        )


def checking_retained_modules(prepare_for_inference_):
    """fairseq's ``prepare_for_inference_`` (wrapped), which first checks the names to keep."""

    @functools.wraps(prepare_for_inference_)
    def prepare(self, cfg, *args, **kwargs):
        generation = getattr(cfg, "generation", None)
        if getattr(generation, "retain_dropout", False):
            check_retained_modules(self, getattr(generation, "retain_dropout_modules", None))
        return prepare_for_inference_(self, cfg, *args, **kwargs)

    return prepare


def install() -> None:
    """Wrap ``BaseFairseqModel.prepare_for_inference_`` (idempotent)."""
    from fairseq.models import BaseFairseqModel

    wrap_once(BaseFairseqModel, "prepare_for_inference_", checking_retained_modules)
