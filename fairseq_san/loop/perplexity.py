"""A language model's validation score for the learn-to-share loop: the perplexity that
``fairseq-eval-lm`` prints, kept as ``valid.json`` (``examples/learn_to_share_lm.sh``)."""

import argparse
import math
import re
from typing import Dict, List

from fairseq_san.errors import UsageError, abbreviated, utf8_text
from fairseq_san.files import write_json

# fairseq-eval-lm's last lines: "Evaluated 15,188 tokens in 3.2s (...)" and
# "Loss (base 2): 5.0, Perplexity: 32.1".
TOKENS = re.compile(r"Evaluated (?P<tokens>\d[\d,]*) tokens in ")  # "17,067" from fairseq 0.12
# A diverged model's: "Loss (base 2): nan, Perplexity: nan" (inf too). Each number whole: of
# "1e+300" (no line of fairseq-eval-lm's) the perplexity read was 1, and "1.2.3" a traceback.
NUMBER = r"\d+(?:\.\d+)?|nan|inf"
RESULT = re.compile(
    rf"Loss \(base 2\): (?P<loss>{NUMBER}), Perplexity: (?P<ppl>{NUMBER})(?![\w.+-])"
)


def read_perplexity(log: str) -> Dict[str, float]:
    """{"perplexity", "loss_base2", "tokens"} from the output of fairseq-eval-lm in ``log``;
    ``tokens`` is the count its "Evaluated N tokens" line gives: every token of its samples,
    those a ``--context-window`` only conditions on included (its loss is over those scored)."""
    with utf8_text(log), open(log, encoding="utf-8") as handle:
        text = handle.read()
    tokens, results = TOKENS.findall(text), list(RESULT.finditer(text))
    if not tokens or not results:
        raise UsageError(
            f"{log}: no 'Evaluated N tokens' and 'Loss (base 2): L, Perplexity: P' lines of "
            "fairseq-eval-lm"
        )
    score = {
        "perplexity": float(results[-1].group("ppl")),
        "loss_base2": float(results[-1].group("loss")),
        "tokens": int(tokens[-1].replace(",", "")),
    }
    if not math.isfinite(score["perplexity"]):
        raise UsageError(
            f"{log}: the perplexity is {abbreviated(results[-1].group('ppl'))}: the model diverged "
            "(its training log shows where); no score to keep"
        )
    if score["tokens"] == 0:
        raise UsageError(f"{log}: fairseq-eval-lm evaluated 0 tokens: no score to keep")
    return score


def write_perplexity(log: str, output: str) -> Dict[str, float]:
    """``read_perplexity(log)`` written to ``output`` as JSON, whole or not at all (the LM recipe
    takes the file as the step done)."""
    score = read_perplexity(log)
    write_json(output, score)
    return score


def task_arguments(train_args: List[str]) -> List[str]:
    """The options of fairseq's language-modelling task among ``train_args`` (fairseq-train's
    arguments), each with its value, in order: fairseq-eval-lm builds its task from its own
    command line, not from the checkpoint, so a model trained with ``--add-bos-token`` (or
    another ``--tokens-per-sample``, ``--sample-break-mode``) was scored without it."""
    actions = task_options()
    kept: List[str] = []
    at = 0
    while at < len(train_args):
        word = train_args[at]
        action = actions.get(word.split("=", 1)[0])
        takes_value = action is not None and "=" not in word and action.nargs != 0
        if action is not None:
            kept += train_args[at : at + 1 + takes_value]
        at += 1 + takes_value
    return kept


def task_options() -> Dict[str, argparse.Action]:
    """The option strings of fairseq's ``language_modeling`` task (its dataclass's fields; the
    plugin's ``--san-*`` options decode or analyse, and do not change what is scored)."""
    from fairseq.dataclass.utils import gen_parser_from_dataclass
    from fairseq.tasks.language_modeling import LanguageModelingConfig

    parser = argparse.ArgumentParser(add_help=False)
    gen_parser_from_dataclass(parser, LanguageModelingConfig())
    return {name: action for action in parser._actions for name in action.option_strings}
