"""fairseq-eval-lm's ``--remove-bpe`` joins subword-nmt's pieces into words, as it says.

Upstream behaviour corrected: fairseq-eval-lm takes a piece as continued where it ends in the
``--post-process`` value stripped of its spaces, which for ``subword_nmt`` (the value of
``--remove-bpe`` alone in fairseq main) is that name itself: no piece ends so, nothing was
joined, and the perplexity stayed one of pieces, without a word; only ``--post-process '@@ '``
joined them. Both now join the pieces that end in ``@@``. A value fairseq-eval-lm does not
implement is refused as it is parsed (``command_options.check_eval_lm_post_process``).
"""

import functools
import inspect

from fairseq_san.fairseq_fixes.wrapping import running_command, wrap_once

# subword-nmt's marker of a continued piece, as fairseq's own post_process("subword_nmt") reads it
SUBWORD_NMT = "subword_nmt"
SUBWORD_NMT_MARKER = "@@ "


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
