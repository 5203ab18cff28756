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

``install()`` wraps ``parse_args_and_arch``: each of these is one line naming the option and the
fix (``UsageError``) before anything is loaded.
"""

import argparse
import functools
from typing import Callable, List, Optional

from fairseq_san.errors import UsageError
from fairseq_san.fairseq_fixes.wrapping import wrap_once
from fairseq_san.options import flag_of

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


def check_parsed(args: argparse.Namespace, command: str) -> None:
    """Refuse parsed arguments without the ``--path`` the command loads, or with
    ``--replace-unk``."""
    if hasattr(args, "path") and args.path is None:
        raise UsageError(f"{command} needs --path: {CHECKPOINT}")
    if getattr(args, "replace_unk", None) is not None:
        raise UsageError(REPLACE_UNK)


def _checking(parse_args_and_arch: Callable) -> Callable:
    """fairseq's parser, refusing what ``missing_to_parse`` and ``check_parsed`` find."""

    @functools.wraps(parse_args_and_arch)
    def wrapper(parser, input_args=None, *args, **kwargs):
        try:
            parsed = parse_args_and_arch(parser, input_args, *args, **kwargs)
        except Exception:
            dest = missing_to_parse(parser, input_args)
            if dest is not None:
                raise UsageError(
                    f"{parser.prog} needs {flag_of(dest)}: {NEEDED_TO_PARSE[dest]}"
                ) from None
            raise
        check_parsed(parsed[0] if isinstance(parsed, tuple) else parsed, parser.prog)
        return parsed

    return wrapper


def install() -> None:
    """Check the options of fairseq's commands as they are parsed (idempotent)."""
    from fairseq import options

    wrap_once(options, "parse_args_and_arch", _checking)
