"""BLEU and chrF with sacrebleu on detokenized text, with the signatures printed beside scores;
sacreBLEU's paired bootstrap of one system against another, with the interval of the difference."""

import contextlib
import gzip
import io
import itertools
import math
import os
import re
import statistics
import unicodedata
import zlib
from typing import BinaryIO, Dict, Iterator, List, NamedTuple, Optional, Sequence, Set, Tuple
from typing import TYPE_CHECKING, TextIO

from fairseq_san.errors import UsageError, utf8_text
from fairseq_san.files import GZIP_MAGIC, line_text

if TYPE_CHECKING:  # numpy is imported by the significance tests, not for a score or the spm
    import numpy as np

GENERATE_DETOKENIZED = re.compile(r"^D-(\d+)\t[^\t]*\t(.*)$")
GENERATE_TARGET = re.compile(r"^T-(\d+)\t(.*)$")
GENERATE_SOURCE = re.compile(r"^S-(\d+)\t")
GENERATE_HYPOTHESIS = re.compile(r"^H-(\d+)\t[^\t]*\t(.*)$")
# fairseq-generate logs its configuration first (into its output where its log goes there too):
# with --score-reference its D- lines are the references, which score as a perfect translation.
SCORED_REFERENCES = re.compile(r"fairseq_cli\.generate\W.*'score_reference': True")

SENTENCEPIECE_MARK = "\u2581"  # sentencepiece's mark of a piece that begins a word

# Subword marks left in fairseq-generate's D- lines when it ran without --post-process (the mark as
# shown, how it is found), and the value that removes them. One row per segmentation.
# subword-nmt's "@@" ends a piece of a word (before a space or the line's end): after a space or
# alone it is text a model wrote (sentencepiece data has "@" pieces), not a mark.
SUBWORD_MARKS = {
    (SENTENCEPIECE_MARK, re.compile(SENTENCEPIECE_MARK)): "sentencepiece",
    ("@@", re.compile(r"(?<=\S)@@( |$)")): "subword_nmt",
}


def open_text(path: str) -> TextIO:
    r"""``path`` opened as UTF-8 text, through gzip where it is gzip-compressed (kept hypotheses
    are: docs/results/converged; so are Multi30k's raw files), a byte-order mark dropped (it
    would stick to the first sentence and lower its score). The file is opened once and its
    first bytes peeked at, not read: a pipe (``--reference <(zcat ref.gz)``) cannot be read
    again. Lines end at "\n" alone, as sacreBLEU reads them: a bare "\r" inside a sentence
    would make two of it (``line_text`` drops a Windows line end's "\r")."""
    raw = open(path, "rb")
    head = raw.read(len(GZIP_MAGIC))  # all of it (a pipe's first read may bring one byte)
    stream = io.BufferedReader(ReadAgain(head, raw))
    if head == GZIP_MAGIC:
        return gzip.open(stream, "rt", encoding="utf-8-sig", newline="\n")
    return io.TextIOWrapper(stream, encoding="utf-8-sig", newline="\n")


class ReadAgain(io.RawIOBase):
    """A stream's bytes ``head``, already read from it, then the rest of ``stream``."""

    def __init__(self, head: bytes, stream: BinaryIO) -> None:
        super().__init__()
        self.head, self.stream = head, stream

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if not self.head:
            return self.stream.readinto(buffer)
        size = min(len(buffer), len(self.head))
        buffer[:size], self.head = self.head[:size], self.head[size:]
        return size

    def close(self) -> None:
        self.stream.close()
        super().close()


@contextlib.contextmanager
def text_lines(path: str) -> Iterator[TextIO]:
    """The lines of ``path`` (``open_text``); text that is not UTF-8, or a gzip file cut short,
    is a UsageError naming the file."""
    try:
        with utf8_text(path), open_text(path) as lines:
            yield lines
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:
        raise UsageError(
            f"{path} is not a whole gzip file ({err}): compress it again, or give the text "
            "uncompressed"
        ) from None


class GenerateOutput(NamedTuple):
    """What fairseq-generate printed: the best detokenized hypothesis of each sentence, in corpus
    order, and each sentence's target (its ``T-`` line), by sentence id (none without
    references)."""

    hypotheses: List[str]
    targets: Dict[int, str]
    hypotheses_are_targets: bool  # every sentence's best H- line is its T- line, token for token


def read_generate(path: str, sentences: Optional[int] = None) -> GenerateOutput:
    """fairseq-generate's output in ``path`` (gzip-compressed or not, a pipe too: read once) of
    a subset of ``sentences`` sentences where known (its references' count; else up to its last
    sentence id): a sentence without a ``D-`` line before the last one is refused, the count of
    those missing said among them all.

    The best hypothesis is a sentence's first ``D-`` line (with ``--nbest N`` fairseq-generate
    prints N hypotheses per sentence, best first). Text that still holds subword marks is
    refused: it was not detokenized, and its score would mean nothing; so is the output of
    ``--score-reference`` where it holds fairseq-generate's log (its configuration says so).
    """
    by_id: Dict[int, str] = {}
    targets: Dict[int, str] = {}
    tokens: Dict[int, str] = {}  # each sentence's best H- line
    sources: Set[int] = set()
    with text_lines(path) as lines:
        for line in lines:
            text = line_text(line)
            match = GENERATE_DETOKENIZED.match(text)
            if match:
                by_id.setdefault(int(match.group(1)), match.group(2))
            target = GENERATE_TARGET.match(text)
            if target:
                targets[int(target.group(1))] = target.group(2)
            hypothesis = GENERATE_HYPOTHESIS.match(text)
            if hypothesis:
                tokens.setdefault(int(hypothesis.group(1)), hypothesis.group(2))
            source = GENERATE_SOURCE.match(text)
            if source:
                check_one_source(path, int(source.group(1)), sources)
            elif SCORED_REFERENCES.search(text):
                raise UsageError(
                    f"{path} is fairseq-generate --score-reference output (its logged "
                    "configuration says so): its D- lines are the references, not translations; "
                    "generate again without --score-reference"
                )
    if not by_id:
        raise UsageError(f"{path} holds no D- lines: it is not fairseq-generate's output")
    first_missing = next(i for i in itertools.count() if i not in by_id)
    if first_missing < max(by_id):  # ids are the corpus's 0..N-1: a gap would pair text with
        # another line (the last ones missing alone: a count mismatch, said with its cause)
        total = max(max(by_id) + 1, sentences or 0)  # more ids than sentences: a mismatch too
        raise UsageError(
            f"{path}: no D- line for sentence {first_missing} ({total - len(by_id)} of "
            f"sentences 0-{total - 1} missing): score the whole subset (fairseq-generate must "
            "not skip sentences, and the file must be complete)"
        )
    # T- lines too: fairseq-generate detokenizes them with the D- lines, and a weak model's
    # hypotheses may hold no word-initial piece ("in in in"), scored as words without a word
    lines = [(f"{kind}-{i}", text) for kind, texts in (("D", by_id), ("T", targets))
             for i, text in sorted(texts.items())]  # fmt: skip
    for (mark, pattern), post_process in SUBWORD_MARKS.items():
        piece = next((label for label, text in lines if pattern.search(text)), None)
        if piece:
            raise UsageError(
                f"{path}: {piece} holds {post_process} pieces ({mark!r}): rerun "
                f"fairseq-generate with --post-process {post_process}, or detokenize"
            )
    hypotheses = [by_id[i] for i in sorted(by_id)]
    return GenerateOutput(hypotheses, targets, bool(targets) and tokens == targets)


def check_one_source(path: str, sentence: int, seen: Set[int]) -> None:
    """Refuse a second ``S-`` line of ``sentence`` (one per sentence, whatever ``--nbest``): two
    fairseq-generate outputs in one file (``>>``), of which the first D- lines were scored."""
    if sentence in seen:
        raise UsageError(
            f"{path}: sentence {sentence} is there twice (two S-{sentence} lines): two "
            "fairseq-generate outputs in one file? Score each run's own file"
        )
    seen.add(sentence)


def read_generate_output(path: str) -> List[str]:
    """The best detokenized hypothesis of each sentence in fairseq-generate's output, in corpus
    order (``read_generate``)."""
    return read_generate(path).hypotheses


def targets_read_otherwise(
    targets: Dict[int, str], references: List[str], what: str, label: str
) -> Optional[str]:
    """Where most of the ``targets`` (sentence id: text) that can be compared with the
    ``references`` (no unknown word or subword mark) read otherwise than their reference lines
    (``comparable_text``): how many of ``what``, and the first (``label`` formatted with its id);
    else None."""
    comparable = {
        i: text for i, text in targets.items()
        if i < len(references) and "<unk>" not in text
        and not any(pattern.search(text) for _, pattern in SUBWORD_MARKS)
    }  # fmt: skip
    differing = [
        i for i, text in sorted(comparable.items())
        if comparable_text(text) != comparable_text(references[i])
    ]  # fmt: skip
    if 2 * len(differing) <= len(comparable):
        return None
    first = differing[0]
    return (
        f"{len(differing)} of its {len(comparable)} {what} read otherwise, the first at line "
        f"{first + 1} ({label.format(first)}: {comparable[first][:50]!r}, the reference: "
        f"{references[first][:50]!r})"
    )


def check_references(
    output: str, targets: Dict[int, str], reference: str, references: List[str]
) -> None:
    """Refuse references that are not those of the subset fairseq-generate decoded into
    ``output``: where its ``targets`` (``T-`` lines) have no unknown word or subword mark, at least
    half of them must read as the reference file's lines (``targets_read_otherwise``). Another
    split of the same size (test and test1 of Multi30k, 1,000 lines each) or the source side
    scored without a word."""
    otherwise = targets_read_otherwise(targets, references, "targets (T- lines)", "T-{}")
    if otherwise is not None:
        raise UsageError(
            f"{reference} is not the reference of {output}: {otherwise}: give the raw references "
            "of the subset decoded (--gen-subset test1: text/test1.raw.TGT)"
        )
    shifted = shifted_targets(targets, references)
    if len(shifted) >= 2:  # one could be a near-copy of its neighbour
        target, line = shifted[0]
        raise UsageError(
            f"{reference} is out of line with {output}: {len(shifted)} targets (T- lines) read as "
            f"another line of it, the first T-{target} as line {line + 1}, not {target + 1}: a "
            "line added or lost before it; give the raw references of the subset, as they were "
            "binarized"
        )


# How far from its own line a target is looked for among the references (``shifted_targets``).
SHIFT_WINDOW = 3


def shifted_targets(targets: Dict[int, str], references: List[str]) -> List[Tuple[int, int]]:
    """(sentence id, reference line) of each target (``T-`` line) that reads otherwise than its
    own reference line but as one of the ``SHIFT_WINDOW`` lines either side
    (``comparable_text``): references out of line from a line added or lost (under half of the
    targets, which ``targets_read_otherwise`` lets pass, where it happened in the second half)."""
    texts = [comparable_text(line) for line in references]
    shifted = []
    for i, text in sorted(targets.items()):
        wanted = comparable_text(text)
        if i >= len(texts) or wanted == texts[i]:
            continue
        window = range(max(0, i - SHIFT_WINDOW), min(len(texts), i + SHIFT_WINDOW + 1))
        near = next((j for j in window if texts[j] == wanted), None)
        if near is not None:
            shifted.append((i, near))
    return shifted


def check_spaces_kept(output: str, targets: Dict[int, str], references: List[str]) -> None:
    """Refuse output whose targets (``T-`` lines) lost their spaces where their references have
    several words: fairseq's ``--post-process sentencepiece`` deletes every space before it turns
    pieces' marks into spaces, and text that was not sentencepiece pieces came out glued
    ("EinMannmiteinem..."), its BLEU near 0 (chrF, which ignores spaces, unchanged)."""
    worded = [i for i in targets if i < len(references) and len(references[i].split()) > 1
              and re.search("[A-Za-z]", references[i])]  # words of a script written unspaced
    glued = [i for i in sorted(worded) if len(targets[i].split()) == 1]
    if glued and 2 * len(glued) > len(worded):
        first = glued[0]
        raise UsageError(
            f"{output}: {len(glued)} of its {len(worded)} targets (T- lines) have lost the "
            f"spaces their references have (T-{first}: {targets[first][:50]!r}): "
            "fairseq-generate's --post-process sentencepiece removes every space of text that "
            "is not sentencepiece pieces; rerun it with the --post-process of your data's "
            "segmentation (subword_nmt, or none for words)"
        )


def normalization_differences(
    targets: Dict[int, str], references: List[str], form: str
) -> List[int]:
    """The lines whose reference differs from its target (``T-`` line) in Unicode normalization
    ``form`` alone; spaces are left out of the comparison, as a tokenizer adds them."""

    def unspaced(text: str, form: Optional[str] = None) -> str:
        return "".join((unicodedata.normalize(form, text) if form else text).split())

    return [
        i for i, text in sorted(targets.items())
        if i < len(references) and unspaced(text) != unspaced(references[i])
        and unspaced(text, form) == unspaced(references[i], form)
    ]  # fmt: skip


def check_normalization_kept(
    output: str, targets: Dict[int, str], reference: str, references: List[str]
) -> None:
    """Refuse references that differ from ``output``'s targets (``T-`` lines) in their Unicode
    normalization alone (NFD "e\u0301" for NFC "\u00e9", text exported on a Mac): sentencepiece
    normalizes what it encodes, so the hypotheses are in the targets' form, and each accented
    word scored as wrong (58.54 BLEU read 45.49, sacreBLEU's CLI agreeing, without a word)."""
    differing = normalization_differences(targets, references, "NFC")
    if differing:
        first = differing[0]
        form = "NFC" if unicodedata.is_normalized("NFC", targets[first]) else "NFD"
        raise UsageError(
            f"{reference} is in another Unicode normalization than {output}'s text: "
            f"{len(differing)} of its lines differ from their targets (T- lines) in it alone, "
            f"the first line {first + 1} (T-{first}: {targets[first][:50]!r}), so the same "
            f"words score as different; normalize the references to {form} first (uconv -x "
            f"any-{form.lower()})"
        )


def compatibility_note(
    output: str, targets: Dict[int, str], reference: str, references: List[str]
) -> Optional[str]:
    """Where references differ from ``output``'s targets in NFKC alone (a ligature "\ufb01", a
    full-width comma, which sentencepiece writes as "fi", ","), how many lines and the first:
    the model cannot write those characters, which score as different; else None. A note, not
    a refusal: they are the references' own characters, as sacreBLEU scores them."""
    differing = normalization_differences(targets, references, "NFKC")
    if not differing:
        return None
    first = differing[0]
    return (
        f"{reference}: {len(differing)} of its lines differ from {output}'s targets (T- lines) in "
        f"their NFKC normalization alone, the first line {first + 1} (T-{first}: "
        f"{targets[first][:50]!r}): characters sentencepiece writes otherwise score as "
        "different; to score them as the model writes them, normalize the references to NFKC "
        "(uconv -x any-nfkc)"
    )


def comparable_text(text: str) -> str:
    """``text`` as a target and its reference agree: NFKC-normalized, as sentencepiece normalizes
    what it encodes (a full-width comma becomes ","), without spaces, which a tokenizer adds
    (Moses' "man , in" for "man, in")."""
    return "".join(unicodedata.normalize("NFKC", text).split())


def read_lines(path: str) -> List[str]:
    """The lines of a reference file (``open_text``: it may be gzip-compressed, as Multi30k's
    raw files are); an empty one is refused."""
    with text_lines(path) as lines:
        found = [line_text(line) for line in lines]
    if not found:
        raise UsageError(f"{path} is empty: give the raw references, one sentence per line")
    return found


def check_plain_references(path: str, references: Sequence[str]) -> None:
    """Refuse a reference file that is fairseq-generate's output (a ``D-`` line): the arguments
    swapped, or the output given as the reference too, read as references ("300 hypotheses but
    1200 references: score the whole subset")."""
    line = next((i for i, text in enumerate(references) if GENERATE_DETOKENIZED.match(text)), None)
    if line is not None:
        raise UsageError(
            f"{path} is fairseq-generate's output (line {line + 1} is a D- line), not raw "
            "references: give it as GENERATE_OUTPUT and the raw text of the subset decoded as "
            "--reference (text/SPLIT.raw.TGT)"
        )


def count_mismatch_cause(hypotheses: int, references: List[str]) -> str:
    """What to do about a count mismatch: references that end in empty lines beyond the
    hypotheses (a blank line at the end of the file) are named as such, and fewer references
    than hypotheses as references cut short (it said fairseq-generate had skipped sentences)."""
    kept = len(references)
    while kept and references[kept - 1] == "":
        kept -= 1
    empty_tail = len(references) - kept
    if empty_tail and kept == hypotheses:
        return (
            f"the references end with {empty_tail} empty line(s): remove them (a sentence "
            "per line, no blank line at the end)"
        )
    if hypotheses > len(references):
        return "give the raw references of every sentence decoded (the file is cut short?)"
    return "score the whole subset (fairseq-generate must not skip sentences)"


def corpus_scores(hypotheses: List[str], references: List[str]) -> Dict[str, object]:
    """BLEU and chrF of ``hypotheses`` against one reference each, with sacrebleu signatures."""
    from sacrebleu.metrics import BLEU, CHRF

    if len(hypotheses) != len(references):
        raise ValueError(
            f"{len(hypotheses)} hypotheses but {len(references)} references: "
            + count_mismatch_cause(len(hypotheses), references)
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


def sentence_statistics(hypotheses: Sequence[str], references: Sequence[str]):
    """BLEU's sufficient statistics of each sentence (matches and totals per n-gram order,
    hypothesis and reference lengths), from sacreBLEU's public sentence scores: summed over any
    set of sentences they give that set's corpus BLEU."""
    import numpy as np
    from sacrebleu.metrics import BLEU

    metric = BLEU(effective_order=True)  # counts as the corpus's; only a sentence's score differs
    rows = []
    for hypothesis, reference in zip(hypotheses, references):
        score = metric.sentence_score(hypothesis, [reference])
        rows.append([*score.counts, *score.totals, score.sys_len, score.ref_len])
    return np.array(rows, dtype=np.int64)


def corpus_bleu(statistics_sum: Sequence[int]) -> float:
    """Corpus BLEU (sacreBLEU's defaults, as ``BLEU().corpus_score``) from summed
    ``sentence_statistics``."""
    from sacrebleu.metrics import BLEU

    metric = BLEU()
    order = metric.max_ngram_order
    counts, totals = statistics_sum[:order], statistics_sum[order : 2 * order]
    sys_len, ref_len = statistics_sum[2 * order :]
    return BLEU.compute_bleu(
        [int(c) for c in counts], [int(t) for t in totals], int(sys_len), int(ref_len),
        smooth_method=metric.smooth_method, smooth_value=metric.smooth_value,
        max_ngram_order=order,
    ).score  # fmt: skip


def sacrebleu_seed() -> Optional[int]:
    """SACREBLEU_SEED read as sacreBLEU reads it (12345 unless set; "None", any case: a random
    seed), a value it cannot read a ValueError naming it (sacreBLEU's named nothing); so is 0,
    which sacreBLEU's paired test takes as no seed, its resamples then not the interval's."""
    seed = os.environ.get("SACREBLEU_SEED", "12345")
    if seed.lower() == "none":
        return None
    refused = ValueError(
        f"SACREBLEU_SEED={seed!r}: give a non-negative integer, or None for a random seed"
    )
    try:
        value = int(seed)
    except ValueError:
        raise refused from None
    if value < 0:  # numpy's "expected non-negative integer" named neither
        raise refused
    if value == 0:  # sacreBLEU's paired test seeds with None where its seed is false
        raise ValueError(
            f"SACREBLEU_SEED={seed!r}: sacreBLEU's paired bootstrap takes 0 as no seed (its p "
            "changes from run to run, its signature saying seed:0): give another integer, or None "
            "for a random seed"
        )
    return value


def paired_bootstrap(
    baseline: Sequence[str],
    system: Sequence[str],
    references: Sequence[str],
    samples: int = 1000,
    name: str = "system",
) -> Dict[str, object]:
    """sacreBLEU's paired bootstrap (``--paired-bs``) of ``system`` (called ``name``) against
    ``baseline``, plus the 95% interval of the BLEU difference over resamples of the test set (the
    same sentences for both systems, SACREBLEU_SEED as sacreBLEU seeds its own), and a verdict:
    "NAME better" or "NAME worse" only when that interval excludes 0, else "inconclusive"."""
    import numpy as np
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    seed = sacrebleu_seed()
    test = PairedTest(
        [("baseline", list(baseline)), (name, list(system))], {"BLEU": BLEU()},
        [list(references)], test_type="bs", n_samples=samples,
    )  # fmt: skip
    signatures, results = test()
    base, other = results["BLEU"]
    resamples = np.random.default_rng(seed).choice(len(baseline), size=(samples, len(baseline)))
    stats = [sentence_statistics(hyps, references) for hyps in (baseline, system)]
    differences = [
        corpus_bleu(stats[1][rows].sum(0)) - corpus_bleu(stats[0][rows].sum(0))
        for rows in resamples
    ]
    low, high = (float(x) for x in np.percentile(differences, [2.5, 97.5]))
    verdict = f"{name} better" if low > 0 else f"{name} worse" if high < 0 else "inconclusive"
    return {
        "system": name,
        "baseline_bleu": rounded(base.score),
        "system_bleu": rounded(other.score),
        "difference": rounded(other.score - base.score),
        "interval_95": [rounded(low), rounded(high)],
        "p_value": round(other.p_value, 4),
        "verdict": verdict,
        "signature": str(signatures["BLEU"]),
    }


def rounded(score: float) -> float:
    """``score`` to 2 decimals, as sacreBLEU prints them; -0.0 as 0.0."""
    return round(score, 2) + 0.0


# The resolution, in BLEU, of the seed-level interval (the permutation test inverted on a grid).
SHIFT_STEP = 0.01


# Above this many splits of the pooled seeds (10 against 10: 184,756) the permutation test takes
# SAMPLED_SPLITS random ones (seeded, beside the observed one): every split of 12 against 12 is
# 2.7 million, for each step of the interval's search, minutes to hours without a word.
MAX_EXACT_SPLITS = 200_000
SAMPLED_SPLITS = 100_000


def split_members(pooled: int, size: int) -> "np.ndarray":
    """The first groups (rows of ``size`` indices of ``pooled`` scores, the system's first) of
    the permutation test: every split, or the observed one and ``SAMPLED_SPLITS`` random ones
    where there are more than ``MAX_EXACT_SPLITS``."""
    import numpy as np

    if math.comb(pooled, size) <= MAX_EXACT_SPLITS:
        return np.array(list(itertools.combinations(range(pooled), size)), dtype=np.int64)
    rng = np.random.default_rng(0)
    sampled = np.argsort(rng.random((SAMPLED_SPLITS, pooled)), axis=1)[:, :size]
    return np.vstack([np.arange(size)[None], sampled])


def permutation_p(
    system: Sequence[float], baseline: Sequence[float], members: Optional["np.ndarray"] = None
) -> float:
    """The two-sided permutation test over seeds: the share of the splits of the pooled scores
    into groups of these sizes (``members``: ``split_members``'s, made here where not given) whose
    difference of means is at least as far from 0 as the observed one (the observed split
    counted): exact, or a Monte Carlo estimate of it above ``MAX_EXACT_SPLITS``."""
    import numpy as np

    pooled, size, rest = np.array([*system, *baseline], dtype=float), len(system), len(baseline)
    if members is None:
        members = split_members(len(pooled), size)
    observed = abs(statistics.mean(system) - statistics.mean(baseline))
    first = pooled[members].sum(axis=1)
    differences = np.abs(first / size - (pooled.sum() - first) / rest)
    return float(np.mean(differences >= observed - 1e-9))


def permutation_interval(
    system: Sequence[float], baseline: Sequence[float], members: Optional["np.ndarray"] = None
) -> Optional[List[float]]:
    """The shifts d (multiples of SHIFT_STEP, from the observed difference outwards) for which
    the system's scores minus d are not rejected against the baseline's at 0.05: the
    permutation test's 95% confidence interval for the difference of means (``interval_95``;
    ``members`` as ``permutation_p`` takes them). None when no shift can be rejected (too few
    seeds: 2 against 2 give 6 splits, p never below 1/3)."""
    alpha = 0.05
    splits = math.comb(len(system) + len(baseline), len(system))
    # Far from the observed difference only its own split (and its mirror, for equal sizes) is
    # as extreme: the smallest p the test can give.
    if (2 if len(system) == len(baseline) else 1) / splits > alpha:
        return None
    observed = round((statistics.mean(system) - statistics.mean(baseline)) / SHIFT_STEP)
    if members is None:
        members = split_members(len(system) + len(baseline), len(system))

    def accepted(steps: int) -> bool:
        shifted = [score - steps * SHIFT_STEP for score in system]
        return permutation_p(shifted, baseline, members) > alpha

    bounds = []
    for direction in (-1, 1):
        steps = observed
        while accepted(steps + direction):
            steps += direction
        bounds.append(round(steps * SHIFT_STEP, 2))
    return bounds


def seed_comparison(system: Sequence[float], baseline: Sequence[float]) -> Dict[str, object]:
    """``system``'s BLEU over seeds against ``baseline``'s: the difference of the means, the
    permutation test's p (over ``splits`` splits of the pooled scores: every one where ``exact``,
    else random ones) and its 95% interval (None: too few seeds for one). The spread of training,
    which a paired bootstrap on one pair of models does not see, is in this interval."""
    members = split_members(len(system) + len(baseline), len(system))  # for the p and interval
    return {
        "seeds": len(system), "against_seeds": len(baseline),
        "difference": rounded(statistics.mean(system) - statistics.mean(baseline)),
        "p_value": round(permutation_p(system, baseline, members), 4),
        "splits": len(members),
        "exact": len(members) == math.comb(len(system) + len(baseline), len(system)),
        "interval_95": permutation_interval(system, baseline, members),
    }  # fmt: skip

