"""The data side of a benchmark: the subset collated once, references, detokenizer, scores.

Every system decodes the same pre-collated batches, so data loading is never timed. Quality is
BLEU and chrF with sacrebleu on detokenized text: sentencepiece-decoded hypotheses against the
raw reference file.
"""

import os
from typing import Dict, List, Optional, Sequence

import torch
from fairseq import utils

from fairseq_san.benchmark.config import BenchmarkConfig, references_file, sentencepiece_model
from fairseq_san.errors import UsageError
from fairseq_san.files import first_data_folder
from fairseq_san.scoring import (
    SENTENCEPIECE_MARK,
    corpus_scores,
    read_lines,
    targets_read_otherwise,
)


def binarized_empty(task, subset: str) -> bool:
    """Whether fairseq-preprocess binarized ``subset``'s source side of ``task``'s data from an
    empty file (in either order of the language pair that fairseq's reader tries)."""
    source, target = task.cfg.source_lang, task.cfg.target_lang
    data = first_data_folder(task.cfg.data) or ""
    for pair in (f"{source}-{target}", f"{target}-{source}"):
        path = os.path.join(data, f"{subset}.{pair}.{source}.bin")
        if os.path.isfile(path):
            return os.path.getsize(path) == 0
    return False


class Batches:
    """The subset's sentences, sorted by source length, collated once and moved to the device."""

    def __init__(
        self, task, subset: str, batch_size: int, device: torch.device,
        max_sentences: Optional[int] = None,
    ):  # fmt: skip
        if binarized_empty(task, subset):  # fairseq's reader cannot map an empty file: traceback
            raise ValueError(
                f"--subset {subset} of {task.cfg.data} holds no sentence (fairseq-preprocess "
                "binarized empty files): give a subset with sentences"
            )
        task.load_dataset(subset, combine=False)
        dataset = task.dataset(subset)
        if dataset.tgt is None:  # BLEU's references and the mean output length come from it
            raise ValueError(
                f"--subset {subset} of {task.cfg.data} has no target side (binarized without "
                f"{subset}.{task.cfg.target_lang}): binarize it with its references"
            )
        count = len(dataset) if max_sentences is None else min(max_sentences, len(dataset))
        ids = sorted(range(count), key=lambda i: (int(dataset.src_sizes[i]), i))
        self.dataset = dataset
        self.ids = list(range(count))
        self.batch_size = batch_size
        self.samples = []
        for start in range(0, count, batch_size):
            sample = dataset.collater([dataset[i] for i in ids[start : start + batch_size]])
            if device.type == "cuda":
                sample = utils.move_to_cuda(sample, device)
            self.samples.append(sample)

    def longest_source(self) -> int:
        """The longest source sentence, in tokens with its EOS."""
        return max(int(self.dataset.src_sizes[i]) for i in self.ids)

    def mean_target_length(self) -> float:
        """Mean reference length in target tokens, eos excluded."""
        sizes = self.dataset.tgt_sizes
        return float(sum(int(sizes[i]) - 1 for i in self.ids)) / max(len(self.ids), 1)


class Detokenizer:
    """Target dictionary tokens -> text: sentencepiece-decoded when a model is given."""

    def __init__(self, dictionary, spm_model: Optional[str]):
        self.dictionary = dictionary
        self.spm_model = spm_model
        self.processor = None
        if spm_model:
            import sentencepiece as spm

            try:
                self.processor = spm.SentencePieceProcessor(model_file=spm_model)
            except (RuntimeError, OSError) as err:
                message = f"sentencepiece model {spm_model} cannot be loaded: {err}"
                raise ValueError(message) from None

    def __call__(self, tokens: Sequence[int]) -> str:
        pieces = self.dictionary.string(torch.tensor(list(tokens), dtype=torch.long))
        if self.processor is None:
            return pieces
        return self.processor.decode(pieces.split())


def check_detokenized(targets: Dict[int, str], spm_model: Optional[str]) -> None:
    """Refuse a sentencepiece model that does not make the subset's binarized ``targets`` text:
    most of them keep its pieces' marks (pieces of another model), and every hypothesis was
    scored as pieces."""
    marked = [i for i, text in targets.items() if SENTENCEPIECE_MARK in text]
    if spm_model and 2 * len(marked) > len(targets):
        first = marked[0]
        raise ValueError(
            f"sentencepiece model {spm_model} does not detokenize the subset's binarized targets: "
            f"{len(marked)} of {len(targets)} keep its {SENTENCEPIECE_MARK} marks (sentence "
            f"{first}: {targets[first][:50]!r}): give --spm the model the data was made with"
        )


def load_references(path: Optional[str], batches: Batches, targets: Dict[int, str]) -> List[str]:
    """References for the benchmarked sentences: the raw file, refused where most of the
    detokenized binarized ``targets`` read otherwise than its lines (another split of the same
    size, the source side: scored without a word), or the ``targets`` themselves."""
    if not path:
        return [targets[i] for i in batches.ids]
    try:
        lines = read_lines(path)
    except UsageError as err:  # not UTF-8 (scoring.read_lines names the file)
        raise ValueError(f"--references {err}") from None
    if len(lines) != len(batches.dataset):
        raise ValueError(
            f"--references {path} has {len(lines)} lines but the subset has "
            f"{len(batches.dataset)} sentences: give the raw target side of that subset"
        )
    otherwise = targets_read_otherwise(targets, lines, "binarized targets", "the target")
    if otherwise is not None:
        raise ValueError(
            f"--references {path} is not the target side of the subset: {otherwise}: give the "
            "raw target side of that subset"
        )
    return [lines[i] for i in batches.ids]


def score(hypotheses: Dict[int, List[int]], references: List[str], ids, detokenize) -> Dict:
    """sacrebleu BLEU and chrF of the detokenized best hypotheses, with signatures."""
    texts = [detokenize(hypotheses[i]) for i in ids]
    return {**corpus_scores(texts, references), "first_hypotheses": texts[:3]}


class TextSide:
    """Detokenizer, references and scoring of one benchmark."""

    def __init__(self, config: BenchmarkConfig, task, batches: Batches):
        self.spm_model = sentencepiece_model(config)
        references = references_file(config, task.cfg.target_lang)
        self.references_source = references or "binarized targets, detokenized like hypotheses"
        self.detokenize = Detokenizer(task.target_dictionary, self.spm_model)
        targets = {i: self.detokenize(batches.dataset.tgt[i].tolist()) for i in batches.ids}
        check_detokenized(targets, self.spm_model)
        self.references = load_references(references, batches, targets)
        self.ids = batches.ids
        self.signatures: Dict[str, str] = {}

    def score(self, hypotheses: Dict[int, List[int]]) -> Dict:
        """BLEU and chrF of the best hypotheses (sample id -> target tokens)."""
        scores = score(hypotheses, self.references, self.ids, self.detokenize)
        for key in ("bleu_signature", "chrf_signature"):
            self.signatures[key] = scores.pop(key)
        return scores

    def agreement(self, hypotheses: Dict[int, List[int]], others: Dict[int, List[int]]) -> float:
        """Share of the sentences whose best hypothesis reads the same in both (detokenized, so
        that an engine that leaves out eos still agrees)."""
        same = sum(self.detokenize(hypotheses[i]) == self.detokenize(others[i]) for i in self.ids)
        return same / len(self.ids)

