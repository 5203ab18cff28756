"""A language model's validation score for the learn-to-share loop: the perplexity that
``fairseq-eval-lm`` prints, kept as ``valid.json`` (``examples/learn_to_share_lm.sh``)."""

import re
from typing import Dict

from fairseq_san.errors import UsageError, utf8_text
from fairseq_san.files import write_json

# fairseq-eval-lm's last lines: "Evaluated 15,188 tokens in 3.2s (...)" and
# "Loss (base 2): 5.0, Perplexity: 32.1".
TOKENS = re.compile(r"Evaluated (?P<tokens>[\d,]+) tokens in ")  # "17,067" from fairseq 0.12
RESULT = re.compile(r"Loss \(base 2\): (?P<loss>[\d.]+), Perplexity: (?P<ppl>[\d.]+)")


def read_perplexity(log: str) -> Dict[str, float]:
    """{"perplexity", "loss_base2", "tokens"} from the output of fairseq-eval-lm in ``log``."""
    with utf8_text(log), open(log, encoding="utf-8") as handle:
        text = handle.read()
    tokens, results = TOKENS.findall(text), list(RESULT.finditer(text))
    if not tokens or not results:
        raise UsageError(
            f"{log}: no 'Evaluated N tokens' and 'Loss (base 2): L, Perplexity: P' lines of "
            "fairseq-eval-lm"
        )
    return {
        "perplexity": float(results[-1].group("ppl")),
        "loss_base2": float(results[-1].group("loss")),
        "tokens": int(tokens[-1].replace(",", "")),
    }


def write_perplexity(log: str, output: str) -> Dict[str, float]:
    """``read_perplexity(log)`` written to ``output`` as JSON, whole or not at all (the LM recipe
    takes the file as the step done)."""
    score = read_perplexity(log)
    write_json(output, score)
    return score
