"""A language model's validation score for the learn-to-share loop: the perplexity that
``fairseq-eval-lm`` prints, kept as ``valid.json`` (``examples/learn_to_share_lm.sh``)."""

import json
import re
from typing import Dict

from fairseq_san.errors import UsageError, utf8_text

# fairseq-eval-lm's last line: "Evaluated 15188 tokens in 3.2s (...), Loss (base 2): 5.0, Perplexity: 32.1"
RESULT = re.compile(
    r"Evaluated (?P<tokens>\d+) tokens in .*Loss \(base 2\): (?P<loss>[\d.]+), "
    r"Perplexity: (?P<ppl>[\d.]+)"
)


def read_perplexity(log: str) -> Dict[str, float]:
    """{"perplexity", "loss_base2", "tokens"} from the output of fairseq-eval-lm in ``log``."""
    with utf8_text(log), open(log, encoding="utf-8") as handle:
        found = [RESULT.search(line) for line in handle]
    found = [match for match in found if match]
    if not found:
        raise UsageError(f"{log}: no 'Evaluated N tokens ... Perplexity: P' line of fairseq-eval-lm")
    last = found[-1]
    return {
        "perplexity": float(last.group("ppl")),
        "loss_base2": float(last.group("loss")),
        "tokens": int(last.group("tokens")),
    }


def write_perplexity(log: str, output: str) -> Dict[str, float]:
    """``read_perplexity(log)`` written to ``output`` as JSON."""
    score = read_perplexity(log)
    with open(output, "w", encoding="utf-8") as out:
        json.dump(score, out, indent=2)
    return score
