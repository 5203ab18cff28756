"""fairseq-eval-lm's ``--remove-bpe`` joins subword-nmt's pieces into words, as it says.

Upstream behaviour corrected: fairseq-eval-lm takes a piece as continued where it ends in the
``--post-process`` value stripped of its spaces, which for ``subword_nmt`` (the value of
``--remove-bpe`` alone in fairseq main) is that name itself: no piece ends so, nothing was
joined, and the perplexity stayed one of pieces, without a word; only ``--post-process '@@ '``
joined them. Both now join the pieces that end in ``@@``. A value fairseq-eval-lm does not
implement (a ``NotImplementedError`` traceback once the model had loaded) is refused as the
command line is parsed (``check_eval_lm_post_process``, called by ``command_options``).
"""

import argparse
import functools
import inspect

from fairseq_san.errors import UsageError
from fairseq_san.fairseq_fixes.wrapping import running_command, wrap_once

# subword-nmt's marker of a continued piece, as fairseq's own post_process("subword_nmt") reads it
SUBWORD_NMT = "subword_nmt"
SUBWORD_NMT_MARKER = "@@ "
# The --post-process (--remove-bpe) values fairseq-eval-lm implements: subword-nmt's pieces.
EVAL_LM_POST_PROCESS = (SUBWORD_NMT, SUBWORD_NMT_MARKER)


def check_eval_lm_post_process(args: argparse.Namespace) -> None:
    """Refuse a ``--post-process`` (``--remove-bpe``) other than ``EVAL_LM_POST_PROCESS``, which
    fairseq-eval-lm raised as a ``NotImplementedError`` once the model had loaded."""
    value = getattr(args, "post_process", None)
    if value is not None and value not in EVAL_LM_POST_PROCESS:
        raise UsageError(
            f"--post-process {value!r} (or --remove-bpe): fairseq-eval-lm joins subword-nmt "
            "pieces only: pass subword_nmt (or --remove-bpe alone), or leave it out for words"
        )


def _joining(eval_lm):
    signature = inspect.signature(eval_lm)

    @functools.wraps(eval_lm)
    def wrapper(*args, **kwargs):
        given = signature.bind(*args, **kwargs)
        if given.arguments.get("post_process") == SUBWORD_NMT:
            given.arguments["post_process"] = SUBWORD_NMT_MARKER
        return eval_lm(*given.args, **given.kwargs)

    return wrapper


def install() -> None:
    """Join subword-nmt's pieces in fairseq-eval-lm, where it runs (idempotent)."""
    command = running_command("fairseq_cli.eval_lm")
    if getattr(command, "eval_lm", None) is not None:
        wrap_once(command, "eval_lm", _joining)
