"""fairseq-generate's ``--lm-path`` language model checked against the target's dictionary.

Upstream behaviour corrected: fairseq-generate loads the ``--lm-path`` model with the ``dict.txt``
of the data it decodes and adds the model's log-probabilities to the translation's token by token
(shallow fusion, ``--lm-weight``), unchecked: a language model over another vocabulary failed at
the first step of the search ("The size of tensor a (7800) must match the size of tensor b
(1984)"), and one over as many other tokens fused the scores of other words, without a word.
``install()`` wraps ``SequenceGenerator.__init__`` (its subclasses' too): a language model whose
dictionary is not the target's is one line, and so are a model that is no language model and
one trained with ``--add-bos-token`` (fed ``</s>`` where it learned ``<s>``, silently). The
output's length is capped at the language model's positions too, as fairseq caps it at the
translation model's: a language model of fewer learned positions failed with an ``IndexError``
at the first longer output.
"""

import functools
import logging

from fairseq_san.errors import UsageError
from fairseq_san.fairseq_fixes.wrapping import wrap_once

logger = logging.getLogger(__name__)


def check_lm_dictionary(lm_model: object, tgt_dict: object) -> None:
    """Refuse a fusion model that is no language model (a translation model's decoder has the
    target's dictionary, and its forward wants a source: a TypeError at the first step, an
    IndexError in the static decoder), and a language model whose decoder's dictionary is not
    ``tgt_dict`` entry for entry (the search adds its scores to the target's, index by index)."""
    from fairseq.models import FairseqLanguageModel

    if not isinstance(lm_model, FairseqLanguageModel):
        raise UsageError(
            f"--lm-path: the model is a {type(lm_model).__name__}, not a language model: give a "
            "checkpoint of --task language_modeling_san (examples/learn_to_share_lm.sh) trained "
            "on the target language"
        )
    lm_dict = getattr(getattr(lm_model, "decoder", None), "dictionary", None)
    if lm_dict is None or lm_dict.symbols == tgt_dict.symbols:
        return
    sizes = f"{len(lm_dict)} entries"
    if len(lm_dict) == len(tgt_dict):  # as many: a shuffled dictionary, or another's words
        index = next(i for i, (a, b) in enumerate(zip(lm_dict.symbols, tgt_dict.symbols)) if a != b)
        sizes += f", entry {index} {lm_dict.symbols[index]!r} where the target's is "
        sizes += repr(tgt_dict.symbols[index])
    raise UsageError(
        f"--lm-path: the language model's dictionary ({sizes}) is not the "
        f"target's ({len(tgt_dict)} entries): shallow fusion adds the two models' scores token "
        "by token, so the language model must be trained on the target language with the "
        "target's dictionary (DATA/dict.TGT.txt, which fairseq-generate reads as DATA/dict.txt)"
    )


def check_lm_start_token(lm_model: object) -> None:
    """Refuse a fusion language model trained with ``--add-bos-token``: the search feeds it the
    decoded prefix, which starts with the end of sentence (``</s>``), not the ``<s>`` it learned
    every sample to start with, and its scores were fused without a word."""
    args = getattr(getattr(lm_model, "decoder", None), "args", None)
    if getattr(args, "add_bos_token", False):
        raise UsageError(
            "--lm-path: the language model was trained with --add-bos-token, and the search would "
            "feed it the end of sentence (</s>) as its start token, not the <s> it learned: give "
            "one trained without --add-bos-token"
        )


def check_fusion_model(lm_model: object, tgt_dict: object) -> None:
    """Refuse an ``--lm-path`` model that fusion cannot use as it learned: every check above
    (fairseq's generator and the static decoder's)."""
    check_lm_dictionary(lm_model, tgt_dict)
    check_lm_start_token(lm_model)


def positions_with(lm_model: object, max_len: int) -> int:
    """A generator's ``max_len`` (the decoded model's positions, or ``--max-len``'s cap) capped
    at the positions of its fusion model ``lm_model``, with a line where that lowers it."""
    positions = lm_model.max_decoder_positions()
    if positions < max_len:
        logger.info(
            "--lm-path: the language model has %d positions, fewer than the %d the translation "
            "allows: outputs are at most %d tokens", positions, max_len, positions - 1,
        )  # fmt: skip
    return min(positions, max_len)


def _checking(init):
    @functools.wraps(init)
    def wrapper(self, models, tgt_dict, *args, **kwargs):
        lm_model = kwargs.get("lm_model")
        if lm_model is not None:
            check_fusion_model(lm_model, tgt_dict)
        init(self, models, tgt_dict, *args, **kwargs)
        if lm_model is not None:
            self.max_len = positions_with(lm_model, self.max_len)

    return wrapper


def install() -> None:
    """Wrap ``SequenceGenerator.__init__`` (idempotent)."""
    from fairseq.sequence_generator import SequenceGenerator

    wrap_once(SequenceGenerator, "__init__", _checking)
