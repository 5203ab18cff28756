"""BLEU and chrF with sacrebleu on detokenized text, with the signatures printed beside scores."""

import re
from typing import Dict, List

GENERATE_DETOKENIZED = re.compile(r"^D-(\d+)\t[^\t]*\t(.*)$")


def read_generate_output(path: str) -> List[str]:
    """Detokenized hypotheses (the ``D-`` lines of fairseq-generate) in corpus order."""
    by_id: Dict[int, str] = {}
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            match = GENERATE_DETOKENIZED.match(line.rstrip("\n"))
            if match:
                by_id[int(match.group(1))] = match.group(2)
    return [by_id[i] for i in sorted(by_id)]


def read_lines(path: str) -> List[str]:
    with open(path, encoding="utf-8") as lines:
        return [line.rstrip("\n") for line in lines]


def corpus_scores(hypotheses: List[str], references: List[str]) -> Dict[str, object]:
    """BLEU and chrF of ``hypotheses`` against one reference each, with sacrebleu signatures."""
    from sacrebleu.metrics import BLEU, CHRF

    if len(hypotheses) != len(references):
        raise ValueError(
            f"{len(hypotheses)} hypotheses but {len(references)} references: "
            "score the whole subset (fairseq-generate must not skip sentences)"
        )
    bleu, chrf = BLEU(), CHRF()
    bleu_score = bleu.corpus_score(hypotheses, [references])
    chrf_score = chrf.corpus_score(hypotheses, [references])
    return {
        "bleu": round(bleu_score.score, 2),
        "chrf": round(chrf_score.score, 2),
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
        "sentences": len(hypotheses),
    }
