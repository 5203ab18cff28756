"""``--san-decoding static`` (fairseq_san.static_decoding) against fairseq's SequenceGenerator.

Tiny random models would tie: their outputs are made decisive (output projection x3) and EOS
likely at varying steps (a random direction added to the EOS row), so that the sentences of a
batch finish at different steps and the n-best lists are not decided by rounding.
"""

import argparse
import itertools
import logging
import math
import re
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import torch

from helpers import (
    assert_same_hypotheses,
    build,
    build_fairseq_transformer,
    build_lm,
    NoHostSync,
    calls_of,
    generate,
    counting_backend,
    graphed_generator,
    lm_train_argv,
    make_dictionary,
    recording_capture,
    run_cli,
    single_process_base_layers,
    source_batch,
    train_argv,
)
from fairseq_san.errors import UsageError
from fairseq_san.static_decoding import StaticDecoderError, StaticSequenceGenerator
from fairseq_san.static_decoding.beam_search import TensorBeamSearch
from fairseq_san.static_decoding.precision import PackedLinear, apply_precision, can_pack
from fairseq_san.static_decoding.step import StaticDecoderStep

MODELS = {
    "baseline": [],
    "san-1,5-3,3": ["--san-decoder-self-policy", "1,5", "--san-decoder-encdec-policy", "3,3"],
    "san-6-6": ["--san-decoder-self-policy", "6", "--san-decoder-encdec-policy", "6"],
    "san-encdec-weights": [
        "--san-decoder-self-policy", "2,4",
        "--san-decoder-encdec-policy", "3,3",
        "--san-encdec-share", "weights",
    ],
    "aan": ["--decoder-self-attention-type", "aan"],
    "aan-san": ["--decoder-self-attention-type", "aan", "--san-decoder-encdec-policy", "6"],
    "pre-norm-learned-pos": [
        "--decoder-normalize-before",
        "--decoder-learned-pos",
        "--layernorm-embedding",
        "--share-decoder-input-output-embed",
        "--san-decoder-self-policy", "3,3", "--san-decoder-encdec-policy", "2,4",
    ],
}  # fmt: skip

# Generation settings: length penalty, min-len and max-len-a/b.
SETTINGS = [
    dict(max_len_b=12),
    dict(max_len_b=12, len_penalty=0.5),
    dict(max_len_b=12, len_penalty=1.5, unk_penalty=0.5),
    dict(min_len=4, max_len_a=0.5, max_len_b=3),
]
SOURCE_LENGTHS = [5, 9, 3, 7, 6, 2]
DICTIONARY = make_dictionary()
# The translation generator of a CUDA-graph execution on the CPU (stand-in capture).
graphed_translator = partial(graphed_generator, StaticSequenceGenerator, DICTIONARY)


def decisive(model):
    """``model`` with sharper output distributions and EOS likely at some steps (module doc)."""
    weight = model.decoder.output_projection.weight.data
    weight *= 3
    direction = torch.randn(weight.size(1), generator=torch.Generator().manual_seed(0))
    weight[DICTIONARY.eos()] += 2 * direction
    return model


def static_generate(model, beam: int, src_tokens, src_lengths, **kwargs):
    generator = StaticSequenceGenerator([model], DICTIONARY, beam_size=beam, **kwargs)
    sample = {"net_input": {"src_tokens": src_tokens, "src_lengths": src_lengths}}
    return generator.generate([model], sample)


@pytest.mark.parametrize("name", MODELS)
def test_same_nbest_as_fairseq(name, monkeypatch):
    """Same n-best tokens, scores and positional scores as SequenceGenerator, beams 1/4/8, with
    done sentences leaving the batch on the way (caches and search, as fairseq's batch; here as
    soon as one is done: the batches shrink for every model whose sentences end at different
    steps, checked below)."""
    from fairseq_san.static_decoding import generator
    from fairseq_san.static_decoding.caches import DecoderCache

    monkeypatch.setattr(generator, "DROP_DONE_AT", 1.0)
    dropped = calls_of(monkeypatch, DecoderCache, "keep_sentences")
    model = decisive(build(MODELS[name], dictionary=DICTIONARY, seed=1)[0])
    src_tokens, src_lengths = source_batch(DICTIONARY, SOURCE_LENGTHS, seed=1)
    best_lengths = set()
    for beam in (1, 4, 8):
        for settings in SETTINGS:
            expected = generate(model, DICTIONARY, src_tokens, src_lengths, beam, **settings)
            actual = static_generate(model, beam, src_tokens, src_lengths, **settings)
            assert_same_hypotheses(expected, actual)
            assert [len(n) for n in actual] == [beam] * len(SOURCE_LENGTHS)
            best_lengths |= {len(nbest[0]["tokens"]) for nbest in expected}
    # The batches really had sentences finishing at different steps, and done ones left the
    # batch (not with SAN {1,5}/{3,3} and AAN+SAN, whose sentences all stay live to the end
    # in these batches).
    assert len(best_lengths) >= 3, best_lengths
    assert bool(dropped) == (name not in ("san-1,5-3,3", "aan-san")), dropped


@pytest.mark.parametrize("name", ["baseline", "san-6-6", "aan-san"])
def test_repeated_ngrams_are_blocked_as_fairseq_blocks_them(name):
    """--no-repeat-ngram-size 2 and 3 (fairseq's NGramRepeatBlock, its CPU path mended by
    fairseq_fixes.ngram_blocking): fairseq's n-best at beams 1, 4 and 8 with the position as an
    int (eager and fixed layouts) and as a tensor (the captured search, stand-in capture); the
    blocking changed the best translation of many sentences."""
    model = decisive(build(MODELS[name], dictionary=DICTIONARY, seed=1)[0])
    src_tokens, src_lengths = source_batch(DICTIONARY, SOURCE_LENGTHS, seed=1)
    sample = {"net_input": {"src_tokens": src_tokens, "src_lengths": src_lengths}}
    changed = 0
    for beam, size, settings in itertools.product((1, 4, 8), (2, 3), SETTINGS[1:3]):
        blocking = dict(no_repeat_ngram_size=size, **settings)
        expected = generate(model, DICTIONARY, src_tokens, src_lengths, beam, **blocking)
        for execution in ("eager", "fixed"):
            static = static_generate(model, beam, src_tokens, src_lengths, execution=execution,
                                     **blocking)  # fmt: skip
            assert_same_hypotheses(expected, static)
        graphed = graphed_translator(model, recording_capture([]), beam_size=beam, **blocking)
        assert_same_hypotheses(expected, graphed.generate([model], sample))
        unblocked = generate(model, DICTIONARY, src_tokens, src_lengths, beam, **settings)
        changed += sum(a[0]["tokens"].tolist() != b[0]["tokens"].tolist()
                       for a, b in zip(expected, unblocked))  # fmt: skip
    assert changed >= 12, changed


@pytest.mark.parametrize("name", ["baseline", "san-1,5-3,3", "aan-san"])
def test_prefix_tokens_are_forced_as_fairseq_forces_them(name, monkeypatch):
    """fairseq-generate --prefix-size N: the first tokens of each reference forced (EOS and
    padding where a reference is shorter; EOS allowed before --min-len there), then beam search:
    fairseq's n-best at beams 1, 4 and 8, a prefix of 1 and of 3 tokens, longer than max_len too,
    with done sentences leaving the batch, the position an int (eager, fixed) or, after the
    prefix, a tensor (the captured search, stand-in capture)."""
    from fairseq.sequence_generator import SequenceGenerator

    from fairseq_san.static_decoding import generator
    from fairseq_san.static_decoding.caches import DecoderCache

    monkeypatch.setattr(generator, "DROP_DONE_AT", 1.0)
    dropped = calls_of(monkeypatch, DecoderCache, "keep_sentences")
    model = decisive(build(MODELS[name], dictionary=DICTIONARY, seed=1)[0])
    src_tokens, src_lengths = source_batch(DICTIONARY, SOURCE_LENGTHS, seed=1)
    sample = {"net_input": {"src_tokens": src_tokens, "src_lengths": src_lengths}}
    references = torch.randint(DICTIONARY.nspecial, len(DICTIONARY), (6, 3),
                               generator=torch.Generator().manual_seed(0))  # fmt: skip
    references[1, 1:] = torch.tensor([DICTIONARY.eos(), DICTIONARY.pad()])
    references[3, 2] = DICTIONARY.eos()
    for beam, width, settings in itertools.product(
        (1, 4, 8), (1, 3), [SETTINGS[1], SETTINGS[3], dict(max_len_b=2)]
    ):
        prefix = references[:, :width]
        with torch.no_grad():
            fairseqs = SequenceGenerator([model], DICTIONARY, beam_size=beam, **settings)
            expected = fairseqs.generate([model], sample, prefix_tokens=prefix)
        for execution in ("eager", "fixed"):
            static = StaticSequenceGenerator([model], DICTIONARY, beam_size=beam,
                                             execution=execution, **settings)  # fmt: skip
            assert_same_hypotheses(expected, static.generate([model], sample, prefix))
        graphed = graphed_translator(model, recording_capture([]), beam_size=beam, **settings)
        assert_same_hypotheses(expected, graphed.generate([model], sample, prefix))
        assert [hypos[0]["tokens"][:1].tolist() for hypos in expected] == prefix[:, :1].tolist()
    assert dropped  # done sentences left the batch while others were forced or searched


@pytest.mark.parametrize("name", ["baseline", "san-1,5-3,3", "aan"])
def test_sampling_draws_fairseqs_tokens_from_the_same_seed(name, monkeypatch):
    """--sampling (plain, top-k, top-p; greedy and several samples per sentence): what fairseq's
    generator draws from the same seed, batch after batch, with done sentences leaving the batch
    (as soon as one is), the position an int (eager, fixed) or the step alone replayed (CUDA
    graphs, stand-in capture: sampling takes the host's position). Top-p holds where both
    steps' probabilities agree to the last bit, as here (docs/lm.md)."""
    from fairseq.search import Sampling
    from fairseq.sequence_generator import SequenceGenerator

    from fairseq_san.static_decoding import generator
    from fairseq_san.static_decoding.caches import DecoderCache

    monkeypatch.setattr(generator, "DROP_DONE_AT", 1.0)
    dropped = calls_of(monkeypatch, DecoderCache, "keep_sentences")
    model = decisive(build(MODELS[name], dictionary=DICTIONARY, seed=1)[0])
    batches = list(two_batches())
    for seed, beam, topk, topp in ((0, 1, -1, -1.0), (2, 4, -1, -1.0), (0, 4, 5, -1.0),
                                   (1, 3, -1, 0.8)):  # fmt: skip
        settings = dict(max_len_b=12, len_penalty=0.5)
        torch.manual_seed(seed)
        fairseqs = SequenceGenerator([model], DICTIONARY, beam, **settings,
                                     search_strategy=Sampling(DICTIONARY, topk, topp))  # fmt: skip
        with torch.no_grad():
            theirs = [fairseqs.generate([model], batch) for batch in batches]
        for execution in ("eager", "fixed", "graph"):
            torch.manual_seed(seed)
            sampling = dict(beam_size=beam, search_strategy=Sampling(DICTIONARY, topk, topp))
            if execution == "graph":
                ours = graphed_translator(model, recording_capture([]), **sampling, **settings)
            else:
                ours = StaticSequenceGenerator([model], DICTIONARY, execution=execution,
                                               **sampling, **settings)  # fmt: skip
            for batch, expected in zip(batches, theirs):
                assert_same_hypotheses(expected, ours.generate([model], batch))
    assert dropped


# Diverse searches (fairseq's task builds the search from these options): beam, groups or rate.
DIVERSE_SEARCHES = [
    (4, dict(diverse_beam_groups=2)),
    (8, dict(diverse_beam_groups=2, diverse_beam_strength=1.5)),
    (6, dict(diverse_beam_groups=3)),
    (4, dict(diverse_beam_groups=4)),
    (1, dict(diversity_rate=0.0)),
    (4, dict(diversity_rate=0.5)),
    (8, dict(diversity_rate=2.0)),
]


@pytest.mark.parametrize("name", ["baseline", "san-1,5-3,3", "aan-san"])
def test_diverse_searches_choose_fairseqs_hypotheses(name, monkeypatch):
    """--diverse-beam-groups (with --diverse-beam-strength) and --diversity-rate: fairseq's own
    DiverseBeamSearch and DiverseSiblingsSearch, called on the hypotheses in fairseq's order,
    give fairseq's n-best batch after batch (their state is per batch), with done sentences
    leaving the batch (as soon as one is), the position an int (eager, fixed) or the step alone
    replayed (CUDA graphs, stand-in capture: the searches take the host's position). The n-best
    differ from beam search's, so the searches were the ones that ran."""
    from fairseq.search import DiverseBeamSearch, DiverseSiblingsSearch
    from fairseq.sequence_generator import SequenceGenerator

    from fairseq_san.static_decoding import generator
    from fairseq_san.static_decoding.caches import DecoderCache

    monkeypatch.setattr(generator, "DROP_DONE_AT", 1.0)
    dropped = calls_of(monkeypatch, DecoderCache, "keep_sentences")
    model = decisive(build(MODELS[name], dictionary=DICTIONARY, seed=3)[0])
    batches = list(two_batches())
    settings = dict(max_len_b=12, len_penalty=0.5)
    for beam, diverse in DIVERSE_SEARCHES:
        groups = diverse.get("diverse_beam_groups")

        def search():
            if groups:
                strength = diverse.get("diverse_beam_strength", 0.5)
                return DiverseBeamSearch(DICTIONARY, groups, strength)
            return DiverseSiblingsSearch(DICTIONARY, diverse["diversity_rate"])

        fairseqs = SequenceGenerator([model], DICTIONARY, beam, search_strategy=search(), **settings)
        with torch.no_grad():
            expected = [fairseqs.generate([model], batch) for batch in batches]
        for execution in ("eager", "fixed", "graph"):
            options = dict(beam_size=beam, search_strategy=search(), **settings)
            if execution == "graph":
                ours = graphed_translator(model, recording_capture([]), **options)
            else:
                ours = StaticSequenceGenerator([model], DICTIONARY, execution=execution, **options)
            for batch, theirs in zip(batches, expected):
                assert_same_hypotheses(theirs, ours.generate([model], batch))
        if beam > 1 and diverse.get("diversity_rate", 1) > 0:
            plain = generate(model, DICTIONARY, *batches[0]["net_input"].values(), beam, **settings)
            assert ranked_tokens(plain) != ranked_tokens(expected[0]), (beam, diverse)
    assert dropped
    with pytest.raises(UsageError, match=r"^--beam 3 is not a multiple of --diverse-beam-groups 2"):
        StaticSequenceGenerator([model], DICTIONARY, beam_size=3,
                                search_strategy=DiverseBeamSearch(DICTIONARY, 2, 0.5))  # fmt: skip
    capped = len(DICTIONARY) + 1  # a beam above the dictionary's entries but one: capped there
    with pytest.raises(UsageError, match=rf"^--beam {capped}, capped at {len(DICTIONARY) - 1} "
                       r"\(the target dictionary's entries but one\), is not a multiple of "
                       rf"--diverse-beam-groups {capped}"):  # fmt: skip
        StaticSequenceGenerator([model], DICTIONARY, beam_size=capped,
                                search_strategy=DiverseBeamSearch(DICTIONARY, capped, 0.5))


def ranked_tokens(nbests):
    return [[hypothesis["tokens"].tolist() for hypothesis in nbest] for nbest in nbests]


# Per sentence of two_batches' batches, the constraints' tokens (some sentences have none).
CONSTRAINTS = [
    [[5, 6], [], [7, 9, 10], [11], [], [4, 5, 6]],
    [[], [8, 12], [13], [], [6, 6], [9]],
]


def packed_constraints(batch: int, representation: str) -> torch.Tensor:
    """fairseq's packed constraints for batch ``batch`` (``pack_constraints``): the unordered
    representation gets a few one-token constraints, the ordered one a sequence of them."""
    from fairseq.token_generation_constraints import pack_constraints

    return pack_constraints([
        [] if not tokens else [torch.tensor(tokens)] if representation == "ordered" else
        [torch.tensor([token]) for token in tokens]
        for tokens in CONSTRAINTS[batch]
    ])  # fmt: skip


@pytest.mark.parametrize("name", ["baseline", "san-1,5-3,3", "aan-san"])
def test_constraints_are_met_as_fairseq_meets_them(name, monkeypatch):
    """--constraints ordered and unordered: fairseq's own LexicallyConstrainedBeamSearch, its
    states following fairseq's hypotheses (pruned as sentences finish, updated with those that
    continue), gives fairseq's n-best batch after batch, with done sentences leaving the batch
    (as soon as one is), eager, fixed and with the step alone replayed (stand-in capture); the
    best hypotheses hold their constraints, which plain beam search's did not."""
    from fairseq.search import LexicallyConstrainedBeamSearch
    from fairseq.sequence_generator import SequenceGenerator

    from fairseq_san.static_decoding import generator
    from fairseq_san.static_decoding.caches import DecoderCache

    monkeypatch.setattr(generator, "DROP_DONE_AT", 1.0)
    dropped = calls_of(monkeypatch, DecoderCache, "keep_sentences")
    model = decisive(build(MODELS[name], dictionary=DICTIONARY, seed=3)[0])
    batches = list(two_batches())
    for representation, beam in itertools.product(("ordered", "unordered"), (4, 8)):
        search = LexicallyConstrainedBeamSearch(DICTIONARY, representation)
        options = dict(beam_size=beam, max_len_b=12)
        fairseqs = SequenceGenerator([model], DICTIONARY, search_strategy=search, **options)
        constraints = [packed_constraints(index, representation) for index in range(2)]
        with torch.no_grad():
            expected = [fairseqs.generate([model], batch, constraints=packed)
                        for batch, packed in zip(batches, constraints)]  # fmt: skip
        for execution in ("eager", "fixed", "graph"):
            options["search_strategy"] = LexicallyConstrainedBeamSearch(DICTIONARY, representation)
            if execution == "graph":
                ours = graphed_translator(model, recording_capture([]), **options)
            else:
                ours = StaticSequenceGenerator([model], DICTIONARY, execution=execution, **options)
            for batch, packed, theirs in zip(batches, constraints, expected):
                assert_same_hypotheses(theirs, ours.generate([model], batch, constraints=packed))
        for index, nbests in enumerate(expected):
            for tokens, nbest in zip(CONSTRAINTS[index], nbests):
                assert holds(nbest[0]["tokens"].tolist(), tokens, representation), tokens
    plain = generate(model, DICTIONARY, *batches[0]["net_input"].values(), 4, max_len_b=12)
    assert not all(holds(nbest[0]["tokens"].tolist(), tokens, "unordered")
                   for tokens, nbest in zip(CONSTRAINTS[0], plain))  # fmt: skip
    assert dropped


@pytest.mark.parametrize("name", ["baseline", "aan-san"])
def test_prefix_allowed_tokens_restrict_as_fairseqs(name, monkeypatch):
    """``prefix_allowed_tokens_fn`` (``task.build_generator``'s argument, the hub's; fairseq's
    PrefixConstrainedBeamSearch): called with the same sample ids and hypotheses, in the same
    order, as fairseq's generator calls it, it gives fairseq's n-best, with done sentences
    leaving the batch; where it leaves a hypothesis no token at the maximum length, the search
    stops there as fairseq's does (fewer n-best, no error)."""
    from fairseq.search import PrefixConstrainedBeamSearch
    from fairseq.sequence_generator import SequenceGenerator

    from fairseq_san.static_decoding import generator

    monkeypatch.setattr(generator, "DROP_DONE_AT", 1.0)
    model = decisive(build(MODELS[name], dictionary=DICTIONARY, seed=3)[0])
    batches = list(two_batches())
    for batch, ids in zip(batches, ([7, 3, 12, 0, 5, 9], [1, 8, 2, 11, 4, 6])):
        batch["id"] = torch.tensor(ids)

    def allowed_after(calls, ending):
        def allowed(batch_id, tokens):
            calls.append((int(batch_id), tokens.tolist()))
            last = int(tokens[-1])
            words = [t for t in range(4, len(DICTIONARY)) if (t + last + batch_id) % 3]
            return words + [DICTIONARY.eos()] if ending or batch_id % 2 else words

        return allowed

    for beam, ending in itertools.product((2, 4), (True, False)):
        theirs, ours = [], []
        search = PrefixConstrainedBeamSearch(DICTIONARY, allowed_after(theirs, ending))
        fairseqs = SequenceGenerator([model], DICTIONARY, beam, max_len_b=8, search_strategy=search)
        with torch.no_grad():
            expected = [fairseqs.generate([model], batch) for batch in batches]
        search = PrefixConstrainedBeamSearch(DICTIONARY, allowed_after(ours, ending))
        static = StaticSequenceGenerator([model], DICTIONARY, beam, max_len_b=8,
                                         search_strategy=search)  # fmt: skip
        for batch, nbests in zip(batches, expected):
            assert_same_hypotheses(nbests, static.generate([model], batch))
        assert ours == theirs
        assert ending or {len(nbest) for nbests in expected for nbest in nbests} == {0, beam}


def holds(output, tokens, representation):
    """Whether ``output`` holds the constraint ``tokens``: as one sequence (ordered), or each
    token somewhere (unordered)."""
    if representation == "unordered":
        return all(output.count(token) >= tokens.count(token) for token in set(tokens))
    return not tokens or any(output[i : i + len(tokens)] == tokens for i in range(len(output)))


@pytest.mark.parametrize("name", ["baseline", "san-6-6", "san-encdec-weights", "aan-san"])
def test_alignments_are_fairseqs(name, monkeypatch):
    """--print-alignment hard and soft: fairseq's SequenceGeneratorWithAlignment aligns each
    hypothesis from the attention its search recorded; the static decoder from teacher-forced
    passes of the decoder over the n-best (here 5 hypotheses a pass, sorted by length): the
    same hard alignments, attention and soft alignments within rounding (greedy and beam 4, two
    batches)."""
    from fairseq.sequence_generator import SequenceGeneratorWithAlignment

    from fairseq_san.static_decoding import alignment

    monkeypatch.setattr(alignment, "ROWS_PER_PASS", 5)
    model = decisive(build(MODELS[name], dictionary=DICTIONARY, seed=1)[0])
    encodings = calls_of(monkeypatch, type(model.encoder), "forward_torchscript")
    pairs = set()
    for kind, beam in itertools.product(("hard", "soft"), (1, 4)):
        options = dict(beam_size=beam, max_len_b=12, print_alignment=kind)
        fairseqs = SequenceGeneratorWithAlignment([model], DICTIONARY, **options)
        static = StaticSequenceGenerator([model], DICTIONARY, **options)
        for batch in two_batches():
            expected = fairseqs.generate([model], batch)
            encodings.clear()
            actual = static.generate([model], batch)
            assert len(encodings) == 1  # the search's encoder output serves the alignments
            assert_same_hypotheses(expected, actual)
            for theirs, ours in zip(itertools.chain(*expected), itertools.chain(*actual)):
                assert torch.allclose(ours["attention"], theirs["attention"], atol=1e-5)
                if kind == "hard":
                    assert ours["alignment"] == theirs["alignment"]
                    pairs |= set(ours["alignment"])
                else:
                    assert numbers(ours["alignment"]) == pytest.approx(
                        numbers(theirs["alignment"]), abs=2e-6)  # fmt: skip
    assert len(pairs) > 10  # alignments of many source and target positions


def numbers(soft_alignment):
    return [float(p) for row in soft_alignment for p in row]


def test_alignments_of_a_prefix_that_forces_the_end_are_the_forced_targets():
    """--print-alignment with --prefix-size where a reference is shorter than the prefix (EOS
    forced): every hypothesis of the sentence is the forced target, and its attention that of a
    pass over it (the static decoder's). fairseq's generator gave the other hypotheses (at beam
    5, the best one too) the attention of the rows they replaced (fairseq_fixes.
    constrained_alignment): another source word aligned. Beside a sentence whose hypotheses are
    longer, each keeps the attention of its own target words (no row of padding)."""
    from fairseq.sequence_generator import SequenceGeneratorWithAlignment

    model = build(dictionary=DICTIONARY, seed=1)[0]
    src_tokens, src_lengths = source_batch(DICTIONARY, [5, 6], seed=1)
    sample = {"net_input": {"src_tokens": src_tokens, "src_lengths": src_lengths}}
    prefix = torch.tensor([[7, DICTIONARY.eos()], [7, 8]])
    options = dict(beam_size=2, max_len_b=10, print_alignment="soft")
    with torch.no_grad():
        fairseqs = SequenceGeneratorWithAlignment([model], DICTIONARY, **options)
        expected = fairseqs.generate([model], sample, prefix_tokens=prefix)
    static = StaticSequenceGenerator([model], DICTIONARY, **options)
    actual = static.generate([model], sample, prefix)
    assert_same_hypotheses(expected, actual)
    for theirs, ours in zip(expected[0] + expected[1], actual[0] + actual[1]):
        assert theirs["attention"].shape == ours["attention"].shape
        assert torch.allclose(ours["attention"], theirs["attention"], atol=1e-5)


@pytest.mark.parametrize("name", ["baseline", "san-6-6", "aan-san"])
def test_match_source_len_scores_as_fairseq_scores(name, monkeypatch):
    """--match-source-len (fairseq's task builds a LengthConstrainedBeamSearch: EOS forbidden
    before a sentence's source length, free from it on): outputs up to the batch's longest
    source, a hypothesis that ends after its own source's length scored -inf (fairseq's
    finalize): fairseq's n-best at beams 1, 4 and 8, with done sentences leaving the batch, the
    position an int (eager, fixed) or a tensor (the captured search, stand-in capture); a
    --min-len above the longest source is one line."""
    from fairseq.search import LengthConstrainedBeamSearch
    from fairseq.sequence_generator import SequenceGenerator

    from fairseq_san.static_decoding import generator

    monkeypatch.setattr(generator, "DROP_DONE_AT", 1.0)
    model = decisive(build(MODELS[name], dictionary=DICTIONARY, seed=1)[0])
    src_tokens, src_lengths = source_batch(DICTIONARY, SOURCE_LENGTHS, seed=1)
    sample = {"net_input": {"src_tokens": src_tokens, "src_lengths": src_lengths}}
    scores = set()
    for beam, settings in itertools.product((1, 4, 8), (dict(len_penalty=0.5), dict(min_len=3))):
        matching = dict(beam_size=beam, match_source_len=True, **settings)
        lengths = LengthConstrainedBeamSearch(DICTIONARY, 1, 0, 1, 0)  # as the task builds it
        fairseqs = SequenceGenerator([model], DICTIONARY, search_strategy=lengths, **matching)
        with torch.no_grad():
            expected = fairseqs.generate([model], sample)
        for execution in ("eager", "fixed"):
            static = StaticSequenceGenerator([model], DICTIONARY, execution=execution, **matching)
            assert_same_hypotheses(expected, static.generate([model], sample))
        graphed = graphed_translator(model, recording_capture([]), **matching)
        assert_same_hypotheses(expected, graphed.generate([model], sample))
        scores |= {math.isinf(hypothesis["score"]) for nbest in expected for hypothesis in nbest}
    assert scores == {True, False}
    longest = StaticSequenceGenerator([model], DICTIONARY, match_source_len=True, min_len=11)
    with pytest.raises(UsageError, match=r"^--min-len 11 is above the longest source of a batch "
                       r"\(10 tokens\), the longest output --match-source-len allows: lower "):
        longest.generate([model], sample)


def test_match_source_len_decodes_past_the_models_positions_as_fairseq_does():
    """A source longer than --max-target-positions: fairseq's sinusoidal positions grow on
    demand, and the fixed layout's table (the model's positions) was indexed past its end (an
    IndexError, the GPU's graph execution's too)."""
    from fairseq.search import LengthConstrainedBeamSearch
    from fairseq.sequence_generator import SequenceGenerator

    short = ["--decoder-layers", "2", "--encoder-layers", "1", "--max-target-positions", "4"]
    model = build(short, dictionary=DICTIONARY, seed=1)[0]
    src_tokens, src_lengths = source_batch(DICTIONARY, [2, 8], seed=1)
    sample = {"net_input": {"src_tokens": src_tokens, "src_lengths": src_lengths}}
    matching = dict(beam_size=2, max_len_b=5, match_source_len=True)
    lengths = LengthConstrainedBeamSearch(DICTIONARY, 1, 0, 1, 0)
    fairseqs = SequenceGenerator([model], DICTIONARY, search_strategy=lengths, **matching)
    with torch.no_grad():
        expected = fairseqs.generate([model], sample)
    assert max(len(nbest[0]["tokens"]) for nbest in expected) > 4
    for execution in ("eager", "fixed"):
        static = StaticSequenceGenerator([model], DICTIONARY, execution=execution, **matching)
        assert_same_hypotheses(expected, static.generate([model], sample))


def test_batches_shrink_once_half_their_sentences_are_done(monkeypatch):
    """At the default threshold a batch drops its done sentences once at most half are live,
    and translates as fairseq does."""
    from fairseq_san.static_decoding.caches import DecoderCache

    dropped = calls_of(monkeypatch, DecoderCache, "keep_sentences")
    model = decisive(build(MODELS["pre-norm-learned-pos"], dictionary=DICTIONARY, seed=1)[0])
    src_tokens, src_lengths = source_batch(DICTIONARY, SOURCE_LENGTHS, seed=1)
    settings = dict(max_len_b=40, len_penalty=0.5)
    expected = generate(model, DICTIONARY, src_tokens, src_lengths, 4, **settings)
    assert_same_hypotheses(expected, static_generate(model, 4, src_tokens, src_lengths, **settings))
    kept = [len(sentences) for sentences, _, _ in dropped]
    assert kept and all(count <= len(SOURCE_LENGTHS) // 2 for count in kept), kept


@pytest.mark.parametrize("execution", ["eager", "fixed"])
def test_batches_decode_in_the_memory_of_the_batches_before(execution):
    """One generator, batches of other sizes in turn (stale states of the batch before in the
    memory each takes): fairseq's n-best each time; the self-attention state and the steps'
    log-probabilities of a batch that fits in the memory kept (a quarter more than the batch that
    took it) are there, not new."""
    model = decisive(build(MODELS["san-6-6"], dictionary=DICTIONARY, seed=1)[0])
    generator = StaticSequenceGenerator(
        [model], DICTIONARY, beam_size=4, max_len_b=12, execution=execution
    )
    memories = []
    for lengths in ([5, 9, 3, 7, 6, 2], [5, 9, 3], [4, 8, 2, 6, 6, 3, 5], [3, 5, 7, 9, 2, 4, 6, 8]):
        src_tokens, src_lengths = source_batch(DICTIONARY, lengths, seed=len(lengths))
        sample = {"net_input": {"src_tokens": src_tokens, "src_lengths": src_lengths}}
        expected = generate(model, DICTIONARY, src_tokens, src_lengths, 4, max_len_b=12)
        assert_same_hypotheses(expected, generator.generate([model], sample))
        memories.append((generator._memory.memory, generator._log_probs_memory.memory))
    # 24 rows take memory for 30; 12 and 28 fit in it; 32 take new memory
    for kept in zip(*memories):
        assert kept[0] is kept[1] is kept[2] and kept[3] is not kept[0]


@pytest.mark.parametrize("name", ["baseline", "aan-san"])
def test_a_float64_model_decodes_in_float64(name):
    """A float64 model (reference runs) gets fairseq's float64 n-best within 1e-10: the AAN
    layers' running sums were float32, 1.9e-6 away."""
    model = decisive(build(MODELS[name], dictionary=DICTIONARY, seed=1)[0]).double()
    src_tokens, src_lengths = source_batch(DICTIONARY, SOURCE_LENGTHS, seed=1)
    for beam in (1, 4):
        expected = generate(model, DICTIONARY, src_tokens, src_lengths, beam)
        actual = static_generate(model, beam, src_tokens, src_lengths)
        assert_same_hypotheses(expected, actual, atol=1e-10)


def test_aan_sums_are_float32_but_for_a_float64_model():
    """The AAN module's running sums: float32 at fp16, bf16 and float32 (fairseq's), float64
    for a float64 model."""
    from fairseq_san.static_decoding.caches import allocate_cache

    for dtype, summed in ((torch.float16, torch.float32), (torch.bfloat16, torch.float32),
                          (torch.float32, torch.float32), (torch.float64, torch.float64)):
        cache = allocate_cache(2, 4, 0, 2, 3, 8, dtype, torch.device("cpu"))
        assert cache.sums.tensor.dtype == summed, dtype


def test_kept_memory_is_new_for_another_dtype_or_inference_mode():
    """What ``KeptMemory`` hands out: the start of its memory where that fits the shape, dtype,
    device and inference mode; new memory otherwise (an inference tensor cannot be written
    outside inference mode)."""
    from fairseq_san.static_decoding.caches import KeptMemory

    kept = KeptMemory()
    with torch.inference_mode():
        first = kept.take((2, 3, 4), torch.float32, "cpu")
        assert kept.take((4, 5), torch.float32, "cpu").data_ptr() == first.data_ptr()
        assert kept.memory.numel() == 30  # 24 and a quarter more
        assert kept.take((31,), torch.float32, "cpu").data_ptr() != first.data_ptr()
        bfloat16 = kept.take((4,), torch.bfloat16, "cpu")
        assert bfloat16.dtype == torch.bfloat16 and kept.memory.dtype == torch.bfloat16
    outside = kept.take((4,), torch.bfloat16, "cpu")
    assert not outside.is_inference() and outside.data_ptr() != bfloat16.data_ptr()
    outside.zero_()


# The position-independent (fixed-layout) step against the sliced one: every attention role.
LAYOUT_MODELS = ["baseline", "san-1,5-3,3", "san-6-6", "san-encdec-weights", "aan", "aan-san"]


@pytest.mark.parametrize("name", LAYOUT_MODELS)
def test_fixed_layout_equals_sliced(name):
    """The step with the position as a tensor (index_put_ into the cache, masked attention over
    a length bucket, whole-tensor gathers for beam search) gives the int-position step's n-best:
    identical tokens, scores within 1e-5 (each token's within 1e-5 or a millionth), at beams 1,
    4 and 8."""
    model = decisive(build(MODELS[name], dictionary=DICTIONARY, seed=1)[0])
    src_tokens, src_lengths = source_batch(DICTIONARY, SOURCE_LENGTHS, seed=1)
    for beam in (1, 4, 8):
        for settings in SETTINGS[1:3]:
            sliced = static_generate(model, beam, src_tokens, src_lengths, **settings)
            fixed = static_generate(
                model, beam, src_tokens, src_lengths, execution="fixed", **settings
            )
            assert_same_hypotheses(sliced, fixed, atol=1e-5, rtol=1e-6)


@pytest.mark.parametrize("length", [1, 6, 7, 20])
def test_one_query_products_equal_bmm_on_either_side_of_torchs_scalar_loop(length, monkeypatch):
    """``caches.bmm`` of one query (a step's Q K^T and S V over a cache slot's first
    ``length`` positions, 64 per head): torch.bmm's values; torch.bmm itself at or above
    SMALL_PRODUCT multiply-adds a matrix (64 x 7 = 448), the broadcast sum below it; several
    queries, another dtype and torch.bmm's result on other shapes go to torch.bmm."""
    from fairseq_san.static_decoding.caches import SMALL_PRODUCT, bmm

    generator = torch.Generator().manual_seed(length)
    cache = torch.randn(3, 10, 4, 24, 64, generator=generator)  # slots, rows, heads, positions
    keys = cache[0, :, :, :length].reshape(40, length, 64)  # a view, as Position.read gives
    values = cache[1, :, :, :length].view(40, length, 64)
    query = torch.randn(40, 1, 64, generator=generator)
    weights = torch.softmax(torch.randn(40, 1, length, generator=generator), dim=-1)
    torch_bmm, calls = torch.bmm, []
    monkeypatch.setattr(torch, "bmm", lambda a, b: calls.append(a.shape) or torch_bmm(a, b))
    for a, b in ((query, keys.transpose(1, 2)), (weights, values)):
        product = bmm(a, b)
        assert product.shape == (40, 1, b.size(2))
        torch.testing.assert_close(product, torch_bmm(a, b), rtol=1e-5, atol=1e-5)
    assert len(calls) == (0 if 64 * length < SMALL_PRODUCT else 2)
    calls.clear()
    bmm(query.repeat(1, 2, 1), keys.transpose(1, 2))
    bmm(weights.double(), values.double())
    assert len(calls) == 2


def test_length_buckets():
    """A fixed-layout step attends over the smallest bucket that holds its positions."""
    from fairseq_san.static_decoding.caches import length_bucket

    assert [length_bucket(n) for n in (1, 32, 33, 64, 65, 200, 256)] == [
        32, 32, 64, 64, 128, 256, 256
    ]  # fmt: skip
    assert length_bucket(257) == 512 and length_bucket(513) == 768
    with pytest.raises(ValueError):
        length_bucket(0)


def test_fixed_layout_reorders_without_row_copies(monkeypatch):
    """The fixed layout follows beam search with whole-tensor gathers, never the sliced layout's
    row copies (whose ``nonzero().tolist()`` is a host sync per step; that no host sync is left
    is ``test_whole_position_captured_...``'s), and finds the sliced layout's n-best."""
    from fairseq_san.static_decoding.caches import Reorderable

    model = decisive(build(MODELS["aan-san"], dictionary=DICTIONARY, seed=1)[0])
    src_tokens, src_lengths = source_batch(DICTIONARY, SOURCE_LENGTHS, seed=1)
    sliced = static_generate(model, 4, src_tokens, src_lengths, max_len_b=12)

    def refuse(*args, **kwargs):
        raise AssertionError("row copies in the fixed layout")

    monkeypatch.setattr(Reorderable, "copy_rows", refuse)
    fixed = static_generate(model, 4, src_tokens, src_lengths, execution="fixed", max_len_b=12)
    assert_same_hypotheses(sliced, fixed, atol=1e-5)


@pytest.mark.parametrize("fixed_address", [False, True])
def test_fixed_layout_reorder_moves_the_written_positions_only(fixed_address):
    """``reorder(order, length)``: every row takes its source row's positions ``:length`` (two
    reorders in a row, as at two positions); the positions after stay zero in whichever buffer
    holds the cache, and a fixed-address cache keeps its memory (a captured graph reads it)."""
    from fairseq_san.static_decoding.caches import Reorderable

    cache = Reorderable((2, 4, 3, 8, 5), torch.float32, "cpu", 1, 3, fixed_address)
    cache.tensor.zero_()
    cache.tensor[:, :, :, :3] = torch.randn(2, 4, 3, 3, 5)
    addresses, expected = {cache.tensor.data_ptr()}, cache.tensor.clone()
    for order in (torch.tensor([1, 1, 3, 0]), torch.tensor([2, 0, 0, 3])):
        cache.reorder(order, 3)
        expected = expected.index_select(1, order)
        assert torch.equal(cache.tensor, expected)
        assert not cache.tensor[:, :, :, 3:].any()
        addresses.add(cache.tensor.data_ptr())
    assert len(addresses) == (1 if fixed_address else 2)  # else: the spare buffer in turn


@pytest.mark.parametrize("name", ["san-1,5-3,3", "aan-san"])
def test_compiled_step_compiles_once_per_shape(name):
    """torch.compile(fullgraph=True) of the fixed step: one compilation for two batches of one
    length bucket (source lengths differ, every position of both decodes, the second batch may
    decode longer: one position table for both), none per position, and the eager fixed step's
    n-best. A backend that counts the graphs dynamo hands it stands in for inductor (whose
    compile takes minutes here; the benchmark runs it)."""
    graphs = []

    model = decisive(build(MODELS[name], dictionary=DICTIONARY, seed=1)[0])
    settings = dict(beam_size=4, max_len_a=1, max_len_b=4, execution="compile")
    compiled = StaticSequenceGenerator(
        [model], DICTIONARY, compile_backend=counting_backend(graphs), **settings
    )
    eager = StaticSequenceGenerator([model], DICTIONARY, **{**settings, "execution": "fixed"})
    for lengths in (SOURCE_LENGTHS, [8, 4, 11, 6, 9, 3]):
        src_tokens, src_lengths = source_batch(DICTIONARY, lengths, seed=len(lengths))
        sample = {"net_input": {"src_tokens": src_tokens, "src_lengths": src_lengths}}
        expected = eager.generate([model], sample)
        assert_same_hypotheses(expected, compiled.generate([model], sample), atol=1e-5)
        assert max(len(nbest[0]["tokens"]) for nbest in expected) >= 8
    assert len(graphs) == 1


def test_int8_in_a_compiled_step_is_one_error_before_any_compilation():
    """torch.compile cannot trace torch.ao's quantized linear layers: int8 with the compile
    execution (the benchmark's override, the step timer's row) was a traceback from inside dynamo
    at the first batch; now the generator refuses it when built, and the step timer offers no
    such row."""
    from fairseq_san.benchmark.step_timer import STATIC_DECODERS

    def never(graph, inputs):
        raise AssertionError("compiled")

    model = build(MODELS["san-1,5-3,3"], dictionary=DICTIONARY, seed=1)[0]
    way_out = "choose the execution eager or fixed for int8, or another precision"
    with pytest.raises(StaticDecoderError, match=rf"int8 in a compiled step .*; {way_out}$"):
        StaticSequenceGenerator([model], DICTIONARY, precision="int8", execution="compile",
                                compile_backend=never)  # fmt: skip
    assert "static-int8-fixed" in STATIC_DECODERS and "static-bf16-compile" in STATIC_DECODERS
    assert "static-int8-compile" not in STATIC_DECODERS


def test_compiled_step_compiles_every_batch_size_past_dynamos_default_limit():
    """Nine batch sizes are nine shapes of the compiled step (one per number of rows), past
    dynamo's default limit of 8 compilations (an error under fullgraph=True, met on an H100 by a
    benchmark's natural-length batches): each compiled once, the eager fixed step's n-best."""
    graphs = []
    model = decisive(build(MODELS["san-1,5-3,3"], dictionary=DICTIONARY, seed=1)[0])
    settings = dict(beam_size=2, max_len_b=6, execution="compile")
    compiled = StaticSequenceGenerator(
        [model], DICTIONARY, compile_backend=counting_backend(graphs), **settings
    )
    eager = StaticSequenceGenerator([model], DICTIONARY, **{**settings, "execution": "fixed"})
    for sentences in range(1, 10):
        src_tokens, src_lengths = source_batch(DICTIONARY, [4] * sentences, seed=sentences)
        sample = {"net_input": {"src_tokens": src_tokens, "src_lengths": src_lengths}}
        assert_same_hypotheses(eager.generate([model], sample), compiled.generate([model], sample))
    assert len(graphs) == 9


def test_execution_table_picks_the_layout_and_refuses_the_wrong_device():
    """A GPU captures graphs by default (fixed layout), a CPU runs the sliced eager step; the
    graph execution on a CPU and an unknown execution are refused with one error."""
    from fairseq_san.static_decoding.execution import execution_for, offered_executions

    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    on_gpu, on_cpu = execution_for(None, cuda), execution_for(None, cpu)
    assert on_gpu.name == "graph" and on_gpu.fixed_layout(cuda)
    assert on_cpu.name == "eager" and not on_cpu.fixed_layout(cpu)
    assert execution_for("eager", cuda).fixed_layout(cuda)
    compile_ = execution_for("compile", cpu)
    assert compile_.fixed_layout(cpu) and not compile_.pack
    choose = "choose --san-decoder-execution eager or fixed on CPU"  # the way out: what runs here
    for graphs in ("graph", "compile-graph"):
        with pytest.raises(StaticDecoderError, match=f"execution '{graphs}' on CPU; {choose}$"):
            execution_for(graphs, cpu)
    assert not execution_for("compile-graph", cuda).pack
    with pytest.raises(StaticDecoderError, match=f"the execution 'jit'; {choose}$"):
        execution_for("jit", cpu)
    # compile: measured slower than eager on the CPU; compile-graph: faster than graph on a GPU
    assert offered_executions() == ["eager", "fixed", "graph", "compile-graph"]


class HostReads(NoHostSync):
    """Counts what NoHostSync refuses, in ``reads``, instead of failing."""

    def __init__(self):
        super().__init__()
        self.reads = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        try:
            return super().__torch_dispatch__(func, types, args, kwargs)
        except AssertionError:
            self.reads += 1
            return func(*args, **(kwargs or {}))

    def __enter__(self):
        entered = super().__enter__()  # keeps the real tolist in self.tolist, restored on exit

        def counted(tensor):
            self.reads += 1
            return self.tolist(tensor)

        torch.Tensor.tolist = counted
        return entered


def two_batches():
    """Two samples of 6 sentences with different sources (one source length bucket)."""
    for lengths, seed in ((SOURCE_LENGTHS, 1), ([8, 4, 11, 6, 9, 3], 2)):
        src_tokens, src_lengths = source_batch(DICTIONARY, lengths, seed=seed)
        yield {"net_input": {"src_tokens": src_tokens, "src_lengths": src_lengths}}


@pytest.mark.parametrize("name", ["san-1,5-3,3", "aan-san", "san-encdec-weights"])
def test_graph_bookkeeping_replays_the_eager_step(name):
    """CUDA-graph bookkeeping on the CPU (stand-in capture): one capture per (rows, length
    bucket) for position 0's step (one row per sentence, on the first-step cache kept with the
    cache) and one for the positions after it, both reused by a second batch on the cache kept
    for its shape, and the eager fixed step's n-best (AAN's running sums restored after the
    warm-up runs; tokens and position copied into the static buffers; the second batch's encoder
    state copied into the kept cache). The first batch's n-best is checked after the second
    batch decoded in the memory kept for their shape (fairseq-interactive's buffer holds it)."""
    model = decisive(build(MODELS[name], dictionary=DICTIONARY, seed=1)[0])
    settings = dict(beam_size=4, max_len_b=12)
    captures = []
    graphed = graphed_translator(model, recording_capture(captures), **settings)
    eager = StaticSequenceGenerator([model], DICTIONARY, execution="fixed", **settings)
    decoded = [
        (eager.generate([model], sample), graphed.generate([model], sample))
        for sample in two_batches()
    ]
    for expected, actual in decoded:
        assert_same_hypotheses(expected, actual, atol=1e-6)
    assert len(captures) == 2 and len(graphed._caches) == 1 and len(graphed._searches) == 1
    assert len(graphed.run_first_step.replays) == len(graphed.run_search_step.replays) == 1


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("limit", ["shapes", "memory"])
def test_shapes_beyond_the_kept_ones_are_freed_and_decode_as_the_eager_step(
    monkeypatch, limit, fused
):
    """With --max-tokens nearly every batch has a shape of its own, and each kept a cache (and
    graphs) until the GPU's memory ran out: beyond KEPT_SHAPES, or beyond the memory the kept
    caches may hold (KEPT_MEMORY of a GPU's; here 10.5 sentences' caches, which this sequence of
    shapes meets where two shapes do), the least recently used shapes' caches and searches are
    freed with the graphs that read them, and the batches after it, the freed shape's too,
    decode as the eager fixed step. The kept shapes keep their graphs (every graph was dropped at
    each eviction: with shapes in rotation every batch captured again). A fused language model's
    cache (``--lm-path``) is kept, counted and freed with the translation's."""
    from fairseq_san.static_decoding import generator

    budget = math.inf
    if limit == "shapes":
        monkeypatch.setattr(generator, "KEPT_SHAPES", 2)
    else:
        monkeypatch.setattr(generator, "kept_memory_budget", lambda device: budget)
    model = decisive(build(MODELS["san-1,5-3,3"], dictionary=DICTIONARY, seed=1)[0])
    settings = dict(beam_size=4, max_len_b=12)
    if fused:
        settings.update(lm_model=fusion_language_model(), lm_weight=0.7)
    captures = []
    graphed = graphed_translator(model, recording_capture(captures), **settings)
    eager = StaticSequenceGenerator([model], DICTIONARY, execution="fixed", **settings)
    captured = []
    for sentences in (6, 5, 4, 6, 4):
        src_tokens, src_lengths = source_batch(DICTIONARY, SOURCE_LENGTHS[:sentences], sentences)
        sample = {"net_input": {"src_tokens": src_tokens, "src_lengths": src_lengths}}
        expected = eager.generate([model], sample)
        before = len(captures)
        assert_same_hypotheses(expected, graphed.generate([model], sample), atol=1e-6)
        captured.append(len(captures) - before)
        if limit == "memory" and budget == math.inf:  # a cache's bytes go with its sentences
            budget = 10.5 * graphed._kept_bytes() / sentences
    assert captured == [2, 2, 2, 2, 0]  # 6 again after its eviction; 4 kept, with its graphs
    assert [key[0] for key in graphed._caches] == [6, 4]  # 5 was the least recently used
    assert sorted(key[0] for key in graphed._searches) == [4, 6]
    assert len(graphed.run_first_step.replays) == len(graphed.run_search_step.replays) == 2
    if fused:
        assert set(graphed.fused_lm.kept) == set(graphed._caches)


def test_a_batch_outside_inference_mode_after_one_inside_it():
    """A hub user's batch under torch.inference_mode, then one outside it: the cache and search
    kept from the first (CUDA graphs) are ordinary tensors that the second may write (made in
    inference mode, the second batch stopped: "Inplace update to inference tensor outside
    InferenceMode"); both decode as the eager fixed step."""
    model = decisive(build(MODELS["san-6-6"], dictionary=DICTIONARY, seed=1)[0])
    settings = dict(beam_size=4, max_len_b=12)
    with torch.inference_mode():
        graphed = graphed_translator(model, recording_capture([]), **settings)
    eager = StaticSequenceGenerator([model], DICTIONARY, execution="fixed", **settings)
    first, second = two_batches()
    with torch.inference_mode():
        assert_same_hypotheses(eager.generate([model], first), graphed.generate([model], first))
    assert_same_hypotheses(eager.generate([model], second), graphed.generate([model], second))


@pytest.mark.parametrize("name", LAYOUT_MODELS)
def test_whole_position_captured_with_the_search_equals_the_int_position_search(name):
    """A position as the GPU captures it (the step, beam search with the position as a tensor and
    the caches' reordering, with no host sync: checked operator by operator) gives the n-best of
    the same fixed-layout step with beam search at int positions: identical tokens, scores within
    1e-6, at beams 1, 4 and 8, with length penalties and min/max lengths (the fixed layout
    against the sliced one: ``test_fixed_layout_equals_sliced``); a second batch with another
    max_len reuses the cache and the search kept for its shape."""
    model = decisive(build(MODELS[name], dictionary=DICTIONARY, seed=1)[0])
    for beam in (1, 4, 8):
        for settings in (dict(max_len_a=1, max_len_b=3, len_penalty=0.5), SETTINGS[2], SETTINGS[3]):
            captures = []
            graphed = graphed_translator(
                model, recording_capture(captures), beam_size=beam, **settings
            )
            on_host = StaticSequenceGenerator(
                [model], DICTIONARY, beam_size=beam, execution="fixed", **settings
            )
            for sample in two_batches():
                expected = on_host.generate([model], sample)
                assert_same_hypotheses(expected, graphed.generate([model], sample), atol=1e-6)
            # position 0's step and the positions after it; a longer max_len than the first
            # batch's (max_len_a) reads the same position table: nothing captured again
            assert len(captures) == 2, (beam, settings)
            assert len(graphed._searches) == 1 and len(graphed._caches) == 1


def test_no_host_sync_check_catches_a_sync():
    """The check the captured bodies run under fails on a host sync, as capture would."""
    with pytest.raises(AssertionError, match="_local_scalar_dense"):
        with NoHostSync():
            bool(torch.ones(2).gt(0).all())
    with pytest.raises(AssertionError, match="aten::index"):
        with NoHostSync():
            torch.arange(4)[torch.arange(4) > 1]
    with pytest.raises(AssertionError, match="tolist"):
        with NoHostSync():
            torch.arange(4).tolist()
    with NoHostSync():
        torch.arange(4)[torch.tensor([1, 2])]  # an index tensor: no sync


def test_graph_key_names_the_memory_a_graph_reads():
    """A captured step is replayed only on what it was captured on: another length bucket, rows,
    temperature, cache or position table (a longer batch replaces it) is another key."""
    from fairseq_san.static_decoding.caches import allocate_cache
    from fairseq_san.static_decoding.graphs import graph_key

    model = build(MODELS["pre-norm-learned-pos"], dictionary=DICTIONARY)[0]
    step = StaticDecoderStep(model.decoder)
    src_tokens, src_lengths = source_batch(DICTIONARY, [4, 6], seed=3)
    encoder_out = model.encoder(src_tokens, src_lengths)

    def prepared(positions: int):
        cache = allocate_cache(
            8, 32, step.self_slots, step.heads, 0, step.embed_dim, step.dtype, "cpu", fixed=True
        )
        padding = encoder_out["encoder_padding_mask"][0]
        step.prepare(encoder_out["encoder_out"][0], padding, cache, positions)
        return cache

    cache, tokens = prepared(20), torch.zeros(8, dtype=torch.long)
    key = graph_key(step, tokens, cache, 32, 1.0)
    assert graph_key(step, tokens, cache, 32, 1.0) == key
    assert graph_key(step, tokens, cache, 64, 1.0) != key
    assert graph_key(step, tokens[:4], cache, 32, 1.0) != key
    assert graph_key(step, tokens, cache, 32, 0.5) != key
    assert graph_key(step, tokens, prepared(20), 32, 1.0) != key
    prepared(60)  # a longer batch: a longer position table
    assert graph_key(step, tokens, cache, 32, 1.0) != key


@pytest.mark.parametrize("layers", [[], [torch.zeros(8, 5, 4)]])
def test_a_kept_cache_takes_the_next_batchs_encoder_state_in_its_own_memory(layers):
    """A cache kept for its shape holds the next batch's encoder state and padding mask in the
    tensors it holds (a captured graph reads their memory), also where the decoder holds no
    encoder keys or values (an empty list: its mask was replaced, and a graph captured anew at
    every batch)."""
    from fairseq_san.static_decoding.caches import DecoderCache

    cache = DecoderCache(None, None, fixed=True)
    first_padding = torch.zeros(2, 1, 1, 5, dtype=torch.bool)
    cache.hold_encoder([layer.clone() for layer in layers], first_padding)
    held = [first_padding] + cache.encoder
    second_padding = torch.ones(2, 1, 1, 5, dtype=torch.bool)
    cache.hold_encoder([layer + 1 for layer in layers], second_padding)
    assert [t.data_ptr() for t in [cache.source_padding] + cache.encoder] == [
        t.data_ptr() for t in held
    ]  # fmt: skip
    assert bool(cache.source_padding.all())
    assert all(bool(layer.eq(1).all()) for layer in cache.encoder)


def test_fixed_step_writes_its_caches_without_building_indices():
    """A fixed-layout step at a tensor position builds one index tensor, its mask's: the caches'
    slot, row and head indices are the cache's own (on a GPU each arange is a kernel of the
    captured graph), and the step still writes every layer's keys and values."""
    from torch.profiler import ProfilerActivity, profile

    from fairseq_san.static_decoding.caches import allocate_cache

    model = build(MODELS["san-1,5-3,3"], dictionary=DICTIONARY)[0]
    step = StaticDecoderStep(model.decoder)
    src_tokens, src_lengths = source_batch(DICTIONARY, [4, 6], seed=3)
    encoder_out = model.encoder(src_tokens, src_lengths)
    cache = allocate_cache(
        8, 32, step.self_slots, step.heads, 0, step.embed_dim, step.dtype, "cpu", fixed=True
    )
    step.prepare(encoder_out["encoder_out"][0], encoder_out["encoder_padding_mask"][0], cache, 20)
    tokens, index = torch.full((8,), 5), torch.tensor([3])
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof:
        step(tokens, index, cache, 1.0, 32)
    parents = [event.cpu_parent for event in prof.events()]
    names = [e.name for e, parent in zip(prof.events(), parents) if parent is None]  # top level
    assert names.count("aten::arange") == 1 and names.count("aten::index_put_") == model.decoder.num_layers
    written = cache.self_attention.tensor[:, :, :, 3]
    assert bool(written.ne(0).flatten(1).any(1).all())  # every slot: its position 3 written


def test_compiled_step_inside_the_captured_position_compiles_and_captures_once_per_shape():
    """``compile-graph`` (CUDA only) on the CPU, a counting backend standing in for inductor and a
    stand-in capture: the compiled step runs inside the captured position, compiled once and
    captured once for two batches; position 0 (one row per sentence) is captured uncompiled (one
    step a batch does not repay a compilation); the eager fixed step's n-best."""
    graphs, captures = [], []

    model = decisive(build(MODELS["san-1,5-3,3"], dictionary=DICTIONARY, seed=1)[0])
    settings = dict(beam_size=4, max_len_a=1, max_len_b=4)  # the second batch decodes longer
    calling = recording_capture(captures, record=False)  # dynamo compiles nothing under a record
    graphed = graphed_translator(model, calling, execution="compile-graph",
                                 compile_backend=counting_backend(graphs), **settings)  # fmt: skip
    eager = StaticSequenceGenerator([model], DICTIONARY, execution="fixed", **settings)
    for sample in two_batches():
        expected = eager.generate([model], sample)
        assert_same_hypotheses(expected, graphed.generate([model], sample), atol=1e-5)
    assert len(captures) == 2 and len(graphs) == 1  # captures: position 0, the rest
    assert not any(isinstance(m, PackedLinear) for m in graphed.step.modules())  # inductor's


def test_graph_capture_failure_falls_back_to_eager_and_says_so(caplog):
    """A capture that fails is logged and its shape runs eagerly: same n-best; no capture is
    tried after it (a failed CUDA capture leaves the device's state in doubt), the next shape
    (the positions after position 0's step) logged as running eagerly too."""
    model = decisive(build(MODELS["san-6-6"], dictionary=DICTIONARY, seed=1)[0])
    captures = []
    settings = dict(beam_size=4, max_len_b=12)
    graphed = graphed_translator(model, recording_capture(captures, fail=True), **settings)
    eager = StaticSequenceGenerator([model], DICTIONARY, execution="fixed", **settings)
    with caplog.at_level("WARNING", logger="fairseq_san.static_decoding.graphs"):
        for sample in two_batches():
            expected = eager.generate([model], sample)
            assert_same_hypotheses(expected, graphed.generate([model], sample))
    assert len(captures) == 1
    assert caplog.text.count("CUDA graph capture of the static decoder step failed") == 2
    assert caplog.text.count("an earlier capture failed: operation not permitted") == 1
    assert "runs eagerly" in caplog.text


def test_a_batch_decodes_in_inference_mode_but_with_cuda_graphs(monkeypatch):
    """The CPU's executions keep nothing across batches and decode in torch.inference_mode (its
    operators skip autograd's bookkeeping: a faster step); CUDA graphs keep their caches, which
    must stay writable by a batch outside it. Either way the n-best are ordinary tensors, which
    fairseq-generate may change in place (it divides the positional scores by ln 2)."""
    model = decisive(build(MODELS["san-6-6"], dictionary=DICTIONARY, seed=1)[0])
    settings = dict(beam_size=4, max_len_b=12)
    modes = []
    advance = TensorBeamSearch.advance

    def recording_the_mode(search, step, lprobs):
        modes.append(torch.is_inference_mode_enabled())
        return advance(search, step, lprobs)

    monkeypatch.setattr(TensorBeamSearch, "advance", recording_the_mode)
    eager = StaticSequenceGenerator([model], DICTIONARY, **settings)
    graphed = graphed_translator(model, recording_capture([]), **settings)
    for generator, in_inference_mode in ((eager, True), (graphed, False)):
        modes.clear()
        for nbest in generator.generate([model], next(two_batches())):
            for hypothesis in nbest:
                assert not any(value.is_inference() for value in hypothesis.values())
                hypothesis["positional_scores"].div_(math.log(2))
        assert modes and set(modes) == {in_inference_mode}


def test_the_stand_in_capture_keeps_what_the_body_read_on_the_host():
    """The CPU tests' stand-in for CUDA graph capture replays what it recorded, as a graph does:
    a tensor's new values are read, a Python number changed since capture is not (a stand-in
    that called the body again saw it, and passed a step that read the batch's max_len on the
    host instead of the search's tensor)."""
    limit, values, out = {"max_len": 3}, torch.zeros(4), torch.empty(4)

    def body() -> None:
        torch.add(values, limit["max_len"], out=out)

    replay = recording_capture([])(body, 1, lambda: None)
    values.fill_(1)
    limit["max_len"] = 10
    replay()
    assert out.tolist() == [4.0] * 4


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize(
    "dtype, atol", [(torch.float32, 1e-4), (torch.float16, 1e-2), (torch.bfloat16, 5e-2)]
)
@pytest.mark.parametrize("name", ["baseline", "san-6-6", "aan-san"])
@pytest.mark.parametrize("ngram", [0, 2], ids=["ngram-off", "no-repeat-2"])
def test_cuda_graph_equals_eager(name, ngram, dtype, atol):
    """On a GPU, the captured positions (step, beam search and reordering: the default there;
    position 0 the step alone) give the eager fixed step's n-best: identical tokens, scores
    within 1e-4 at fp32; fp16 and bf16 models too; with --no-repeat-ngram-size 2 too; every
    shape captured (no fall-back)."""
    model = decisive(build(MODELS[name], dictionary=DICTIONARY, seed=1)[0]).to("cuda", dtype)
    # buckets 32 and 64
    settings = dict(beam_size=4, min_len=33, max_len_b=40, no_repeat_ngram_size=ngram)
    graphed = StaticSequenceGenerator([model], DICTIONARY, **settings)
    assert graphed.execution.name == "graph"
    eager = StaticSequenceGenerator([model], DICTIONARY, execution="fixed", **settings)
    for sample in two_batches():
        sample = {"net_input": {k: v.cuda() for k, v in sample["net_input"].items()}}
        expected = eager.generate([model], sample)
        assert_same_hypotheses(expected, graphed.generate([model], sample), atol=atol)
    replays = graphed.run_search_step.replays
    assert len(replays) == 2 and None not in replays.values()
    first = graphed.run_first_step.replays
    assert len(first) == 1 and None not in first.values()


# A position whose beam search reads a value back to the host, which CUDA cannot capture: its
# capture fails on a GPU. Run in a process of its own (a failed capture may leave the CUDA context
# unusable: torch's own tests of capture errors say so).
FAILING_CAPTURE = """
import logging, sys
import torch
sys.path.insert(0, {tests!r})
from helpers import assert_same_hypotheses, build
from test_static_decoder import DICTIONARY, MODELS, decisive, two_batches
from fairseq_san.static_decoding import StaticSequenceGenerator
from fairseq_san.static_decoding.beam_search import TensorBeamSearch

logging.basicConfig()
advance = TensorBeamSearch.advance


def advance_with_a_host_sync(self, step, lprobs):
    float(lprobs.sum())
    return advance(self, step, lprobs)


TensorBeamSearch.advance = advance_with_a_host_sync
model = decisive(build(MODELS["san-6-6"], dictionary=DICTIONARY, seed=1)[0]).cuda()
settings = dict(beam_size=4, max_len_b=12)
graphed = StaticSequenceGenerator([model], DICTIONARY, **settings)
eager = StaticSequenceGenerator([model], DICTIONARY, execution="fixed", **settings)
for sample in two_batches():
    sample = {{"net_input": {{k: v.cuda() for k, v in sample["net_input"].items()}}}}
    expected = eager.generate([model], sample)
    assert_same_hypotheses(expected, graphed.generate([model], sample), atol=1e-4)
assert torch.cuda.current_stream() == torch.cuda.default_stream()
assert list(graphed.run_search_step.replays.values()) == [None]
torch.cuda.synchronize()
"""


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_capture_that_fails_falls_back_to_eager(tmp_path):
    """On a GPU, a capture that CUDA refuses (a host sync in the captured position) is logged,
    and the process decodes on: the eager fixed step's n-best, on the caller's stream
    (``torch.cuda.graph`` leaves its capture stream current when ending a capture fails)."""
    script = tmp_path / "failing_capture.py"
    script.write_text(FAILING_CAPTURE.format(tests=str(Path(__file__).parent)))
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert "capture of the static decoder step failed" in result.stderr


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_inductor_compiled_graph_equals_eager():
    """On a GPU, the inductor-compiled step captured with the search (``compile-graph``) gives the
    eager fixed step's n-best: identical tokens, scores within 1e-4 at fp32; captured, no
    fall-back (one length bucket: inductor compiles each shape, about a minute), and the second
    batch, which may decode longer, replays the first's captures."""
    model = decisive(build(MODELS["san-6-6"], dictionary=DICTIONARY, seed=1)[0]).to("cuda")
    settings = dict(beam_size=4, max_len_a=1, max_len_b=12)
    graphed = StaticSequenceGenerator([model], DICTIONARY, execution="compile-graph", **settings)
    eager = StaticSequenceGenerator([model], DICTIONARY, execution="fixed", **settings)
    for sample in two_batches():
        sample = {"net_input": {k: v.cuda() for k, v in sample["net_input"].items()}}
        expected = eager.generate([model], sample)
        assert_same_hypotheses(expected, graphed.generate([model], sample), atol=1e-4)
    for replays in (graphed.run_first_step.replays, graphed.run_search_step.replays):  # 0, the rest
        assert len(replays) == 1 and None not in replays.values()


@pytest.mark.slow
def test_inductor_compiled_step_equals_eager():
    """The step as the compile execution ships it (inductor, frozen prepacked weights) gives the
    eager fixed step's n-best: identical tokens, scores within 1e-5 (slow: inductor compiles)."""
    model = decisive(build(MODELS["aan-san"], dictionary=DICTIONARY, seed=1)[0])
    src_tokens, src_lengths = source_batch(DICTIONARY, SOURCE_LENGTHS, seed=1)
    expected = static_generate(model, 4, src_tokens, src_lengths, execution="fixed", max_len_b=12)
    actual = static_generate(model, 4, src_tokens, src_lengths, execution="compile", max_len_b=12)
    assert_same_hypotheses(expected, actual, atol=1e-5)


def test_compiled_bf16_full_step_stays_in_bfloat16():
    """Unpacked (for torch.compile), a bf16-full step keeps its bfloat16 linear layers as they
    are (not float32-out wrappers, which the fixed layout's cache writes refuse), and decodes
    as the same step run eagerly (bfloat16 products of other kernels would round otherwise)."""
    model = decisive(build(MODELS["san-1,5-3,3"], dictionary=DICTIONARY, seed=1)[0])
    src_tokens, src_lengths = source_batch(DICTIONARY, SOURCE_LENGTHS, seed=1)
    settings = dict(max_len_b=8, precision="bf16-full")
    generator = StaticSequenceGenerator(
        [model], DICTIONARY, beam_size=4, execution="compile", compile_backend="eager", **settings
    )
    linears = [m for m in generator.step.modules() if isinstance(m, torch.nn.Linear)]
    assert linears and {m.weight.dtype for m in linears} == {torch.bfloat16}
    sample = {"net_input": {"src_tokens": src_tokens, "src_lengths": src_lengths}}
    compiled = generator.generate([model], sample)
    generator.run_step = generator.step
    assert_same_hypotheses(generator.generate([model], sample), compiled, atol=1e-5)


def test_fairseq_transformer_and_temperature():
    """fairseq's own ``transformer`` architecture, with a sampling temperature."""
    model = decisive(build_fairseq_transformer(dictionary=DICTIONARY, seed=2)[0])
    src_tokens, src_lengths = source_batch(DICTIONARY, SOURCE_LENGTHS, seed=2)
    settings = dict(max_len_b=10, temperature=0.7)
    expected = generate(model, DICTIONARY, src_tokens, src_lengths, 4, **settings)
    assert_same_hypotheses(expected, static_generate(model, 4, src_tokens, src_lengths, **settings))


def generation_args(**options) -> argparse.Namespace:
    """Generation options: ``options`` over beam 4, outputs of at most 10 tokens (the default
    length limit with ``match_source_len``, which ignores it and refuses another)."""
    limit = 200 if options.get("match_source_len") else 10
    defaults = dict(beam=4, max_len_a=0, max_len_b=limit, min_len=1, lenpen=1.0)
    return argparse.Namespace(**{**defaults, **options})


@pytest.fixture(scope="module")
def task():
    """A translation_san task over the test dictionary (what fairseq-generate builds)."""
    from fairseq_san.tasks.translation_san import TranslationSANConfig, TranslationSANTask

    return TranslationSANTask(TranslationSANConfig(), DICTIONARY, DICTIONARY)


@pytest.mark.parametrize("half, said", [(False, "fp32"),
                                         (True, "fp32: the model's own, float16")])  # fmt: skip
def test_the_log_names_the_half_precision_a_model_decodes_in(task, half, said, caplog):
    """After fairseq-generate's --fp16 (the model converted to float16) the static decoder
    decodes in float16, whose sums differ from fairseq's: the log said "precision fp32"."""
    model = build(dictionary=DICTIONARY, seed=1)[0]
    model = model.half() if half else model
    with caplog.at_level(logging.INFO, logger="fairseq_san.tasks.decoding"):
        task.build_generator([model], generation_args(san_decoding="static"))
    assert f"SAN decoding: static (StaticSequenceGenerator, precision {said}, execution " in (
        caplog.text
    )


def test_a_prefix_that_repeats_a_blocked_ngram_is_refused(task):
    """fairseq-generate --prefix-size with --no-repeat-ngram-size: a prefix that repeats an
    n-gram (the start token counts) had its forced token blocked, and fairseq's generator failed
    at max_len with an AssertionError. One line naming the sample, the n-gram and the smallest
    size that would not block it; a prefix without repeats decodes."""
    from fairseq.sequence_generator import SequenceGenerator

    model = decisive(build(dictionary=DICTIONARY, seed=1)[0])
    src_tokens, src_lengths = source_batch(DICTIONARY, [5, 4], seed=1)
    sample = {"id": torch.tensor([3, 8]),
              "net_input": {"src_tokens": src_tokens, "src_lengths": src_lengths}}  # fmt: skip
    prefix = torch.tensor([[5, 6, 7, 8], [9, 10, 9, 10]])
    generator = SequenceGenerator([model], DICTIONARY, beam_size=2, no_repeat_ngram_size=2)
    with pytest.raises(AssertionError):  # fairseq's generator alone
        generator.generate([model], sample, prefix_tokens=prefix)
    with pytest.raises(UsageError) as refused:
        task.inference_step(generator, [model], sample, prefix)
    assert str(refused.value) == (
        f"--no-repeat-ngram-size 2 would block the forced tokens of sample 8 (its prefix, or a "
        f"language model's prompt): they repeat the 2-gram \"{DICTIONARY.string(prefix[1, :2])}\", "
        "whose forced token gets no probability (the search then fails); pass "
        "--no-repeat-ngram-size 3 or more, or 0 (no blocking)"
    )
    hypotheses = task.inference_step(generator, [model], sample, prefix[:, :2])
    assert [hypos[0]["tokens"][:2].tolist() for hypos in hypotheses] == prefix[:, :2].tolist()


def test_a_prefix_that_ends_a_sentence_above_beam_1_is_one_line(task):
    """fairseq-generate --prefix-size on a test set with an empty target (its prefix: EOS):
    above beam 1 neither generator can finish the sentence, fairseq's failed its assertion at
    max_len and the static decoder raised a RuntimeError, both tracebacks. One line naming the
    sample, not one whose prefix ends later (its whole target: the search finishes it); at beam
    1 both decode it, alike."""
    model = build(dictionary=DICTIONARY, seed=1)[0]
    src_tokens, src_lengths = source_batch(DICTIONARY, [4, 6], seed=1)
    sample = {"id": torch.tensor([3, 8]),
              "net_input": {"src_tokens": src_tokens, "src_lengths": src_lengths}}  # fmt: skip
    prefix = torch.tensor([[DICTIONARY.eos(), DICTIONARY.pad()], [7, DICTIONARY.eos()]])
    said = ("--prefix-size: the prefix of sentence 3 forces its end (EOS), which beam search at "
            "--beam 2 cannot finish: use --beam 1, or leave out sentences whose target is empty")
    for decoding in ("fairseq", "static"):
        generators = {beam: task.build_generator([model], generation_args(
            san_decoding=decoding, beam=beam, max_len_b=5)) for beam in (1, 2)}  # fmt: skip
        with pytest.raises(UsageError) as refused:
            task.inference_step(generators[2], [model], sample, prefix)
        assert str(refused.value) == said
        decoded = task.inference_step(generators[1], [model], sample, prefix)
        assert decoded[0][0]["tokens"].tolist() == [DICTIONARY.eos()]
    with torch.no_grad():  # the search's own check, outside the task
        with pytest.raises(UsageError, match="^--prefix-size: the prefix of sentence 0 forces"):
            StaticSequenceGenerator([model], DICTIONARY, beam_size=2, max_len_b=5).generate(
                [model], {"net_input": sample["net_input"]}, prefix_tokens=prefix)  # fmt: skip


def test_fairseqs_translation_task_names_a_prefix_that_ends_a_sentence(caplog):
    """fairseq-generate --task translation (the plugin loaded) --prefix-size on an empty target:
    above beam 1 fairseq's generator failed its assertion at max_len (``AssertionError: 200 <
    200``); translation_san's one line now, its warning of a whole target forced at beam 1, and
    the same hypotheses as fairseq's unwrapped ``inference_step``."""
    import inspect

    from fairseq.sequence_generator import SequenceGenerator
    from fairseq.tasks.translation import TranslationConfig, TranslationTask

    task = TranslationTask(TranslationConfig(), DICTIONARY, DICTIONARY)
    model = build(dictionary=DICTIONARY, seed=1)[0]
    src_tokens, src_lengths = source_batch(DICTIONARY, [4, 6], seed=1)
    sample = {"id": torch.tensor([3, 8]),
              "net_input": {"src_tokens": src_tokens, "src_lengths": src_lengths}}  # fmt: skip
    prefix = torch.tensor([[DICTIONARY.eos(), DICTIONARY.pad()], [7, DICTIONARY.eos()]])
    with pytest.raises(UsageError) as refused:
        task.inference_step(SequenceGenerator([model], DICTIONARY, beam_size=2, max_len_b=5),
                            [model], sample, prefix)  # fmt: skip
    assert str(refused.value) == (
        "--prefix-size: the prefix of sentence 3 forces its end (EOS), which beam search at "
        "--beam 2 cannot finish: use --beam 1, or leave out sentences whose target is empty"
    )
    greedy = SequenceGenerator([model], DICTIONARY, beam_size=1, max_len_b=5)
    fairseqs = inspect.unwrap(TranslationTask.inference_step)
    with caplog.at_level(logging.WARNING):
        decoded = task.inference_step(greedy, [model], sample, prefix)
    assert [hypos[0]["tokens"].tolist() for hypos in decoded] == [
        hypos[0]["tokens"].tolist() for hypos in fairseqs(task, greedy, [model], sample, prefix)
    ]
    assert [record.getMessage() for record in caplog.records] == [
        "--prefix-size: the prefix of sentence 3, 8 holds its whole target (its end of sentence "
        "included), which the search forces: its hypothesis is its reference, and the BLEU score "
        "counts it as translated; pass a smaller --prefix-size (said of the first batch with "
        "such sentences only)"
    ]


def test_fairseqs_translation_task_words_no_other_assertion_as_a_forced_end():
    """The wrapper names forced ends only: fairseq's other assertions (``min_len`` above the
    maximum length) keep their own words, not a prefix's refusal of no sentence."""
    from fairseq.sequence_generator import SequenceGenerator
    from fairseq.tasks.translation import TranslationConfig, TranslationTask

    task = TranslationTask(TranslationConfig(), DICTIONARY, DICTIONARY)
    model = build(dictionary=DICTIONARY, seed=1)[0]
    src_tokens, src_lengths = source_batch(DICTIONARY, [4, 6], seed=1)
    sample = {"id": torch.tensor([3, 8]),
              "net_input": {"src_tokens": src_tokens, "src_lengths": src_lengths}}  # fmt: skip
    generator = SequenceGenerator([model], DICTIONARY, beam_size=2, max_len_b=5, min_len=50)
    with pytest.raises(AssertionError, match="^min_len cannot be larger than max_len"):
        task.inference_step(generator, [model], sample, torch.tensor([[7], [8]]))


def match_source_len_batch():
    """A model and a batch of two sources (ids 3 and 8: 4 and 2 tokens, and EOS)."""
    model = build(dictionary=DICTIONARY, seed=1)[0]
    src_tokens, src_lengths = source_batch(DICTIONARY, [4, 2], seed=1)
    sample = {"id": torch.tensor([3, 8]),
              "net_input": {"src_tokens": src_tokens, "src_lengths": src_lengths}}  # fmt: skip
    return model, sample


def match_source_len_generators(task, model) -> list:
    """The task's generators under --match-source-len: both decoders, at beams 1 and 2."""
    return [
        task.build_generator([model], generation_args(
            san_decoding=decoding, beam=beam, match_source_len=True))
        for decoding in ("fairseq", "static") for beam in (1, 2)
    ]  # fmt: skip


def test_a_prefix_that_ends_before_the_source_length_under_match_source_len_is_one_line(task):
    """--match-source-len forbids the end of sentence before the source's length: a prefix that
    forces it there left no hypothesis to finish, at any beam; fairseq's generator failed its
    assertion at max_len (a traceback), the static decoder said to use --beam 1, which failed
    alike. Both name the sentences whose prefix ends early, not one that ends at its length
    or holds no end."""
    model, sample = match_source_len_batch()
    eos, pad = DICTIONARY.eos(), DICTIONARY.pad()
    said = ("--prefix-size: the prefix of sentence 3 holds its end (EOS) before its source's "
            "length, where --match-source-len forbids it: no hypothesis of it can finish; leave "
            "out --match-source-len, or pass a smaller --prefix-size")
    for ends_at_its_length in ([7, 8, pad, pad], [7, 8, 9, eos]):  # sentence 8's: 3 with EOS
        prefix = torch.tensor([[7, eos, pad, pad], ends_at_its_length])
        assert_every_decoder_refuses(task, model, sample, prefix, said)


def assert_every_decoder_refuses(task, model, sample, prefix, said: str) -> None:
    """Both decoders under --match-source-len refuse ``prefix`` with the one line ``said``."""
    for generator in match_source_len_generators(task, model):
        with pytest.raises(UsageError) as refused:
            task.inference_step(generator, [model], sample, prefix)
        assert str(refused.value) == said, generator


def test_a_prefix_longer_than_the_source_under_match_source_len_is_one_line(task):
    """--match-source-len frees the end of sentence at the source's length and scores a longer
    hypothesis -inf: a prefix longer than that (a target longer than its source) ended there,
    cut short, silently (the hypothesis with the whole prefix printed at -inf beside it where a
    longer source shared the batch), with both decoders. One line naming the sentence, not one
    whose prefix fills its source's length or is padded (the hub's prefixes of unequal lengths),
    and none without --match-source-len."""
    from fairseq.search import LengthConstrainedBeamSearch
    from fairseq.sequence_generator import SequenceGenerator

    model, sample = match_source_len_batch()
    prefix = torch.tensor([[7, 8, 9, 10], [7, 8, 9, 10]])  # sentence 8's source: 2 tokens + EOS
    lengths = LengthConstrainedBeamSearch(DICTIONARY, 1, 0, 1, 0)  # as the task builds it
    alone = SequenceGenerator([model], DICTIONARY, beam_size=2, match_source_len=True,
                              search_strategy=lengths)  # fmt: skip
    with torch.no_grad():  # fairseq's generator alone: sentence 8's prefix cut at its length
        cut = alone.generate([model], sample, prefix_tokens=prefix)[1][0]["tokens"]
    assert cut.tolist() == [7, 8, 9, DICTIONARY.eos()]
    said = ("--prefix-size: the prefix of sentence 8 is longer than its source's length, where "
            "--match-source-len ends the output: no hypothesis of it can hold its prefix; leave "
            "out --match-source-len, or pass a smaller --prefix-size")
    assert_every_decoder_refuses(task, model, sample, prefix, said)
    pad = DICTIONARY.pad()
    within = torch.tensor([[7, 8, 9, 10], [7, 8, pad, pad]])  # padding is no forced token
    for forced in (prefix[:, :3], within):
        kept = [row[row.ne(pad)].tolist() for row in forced]
        for generator in match_source_len_generators(task, model):
            decoded = task.inference_step(generator, [model], sample, forced)
            assert [hypos[0]["tokens"][:len(row)].tolist()
                    for hypos, row in zip(decoded, kept)] == kept  # fmt: skip
    unmatched = task.build_generator([model], generation_args(beam=2, max_len_b=5))
    decoded = task.inference_step(unmatched, [model], sample, prefix)  # no length to pass
    assert [hypos[0]["tokens"][:4].tolist() for hypos in decoded] == prefix.tolist()


def test_min_len_above_the_source_length_under_match_source_len_names_it():
    """fairseq's decoder's error said to raise --max-len-b, which --match-source-len ignores."""
    from fairseq_san.tasks.decoding import min_len_above_max_len

    settings = argparse.Namespace(min_len=3, max_len_a=0, max_len_b=200, match_source_len=True)
    assert str(min_len_above_max_len(settings)) == (
        "--min-len 3 is above the longest source of a batch, the longest output "
        "--match-source-len allows: lower --min-len"
    )


@pytest.mark.parametrize("decoding", ["fairseq", "static"])
def test_prefixes_that_force_whole_targets_are_named_once(decoding, caplog):
    """fairseq-generate --prefix-size longer than a target forces the whole target, EOS
    included: at beam 1 its hypothesis is its reference, scored as a translation, without a
    word. A warning names the first batch's such sentences, once a task."""
    from fairseq_san.tasks.translation_san import TranslationSANConfig, TranslationSANTask

    task = TranslationSANTask(TranslationSANConfig(), DICTIONARY, DICTIONARY)
    model = build(dictionary=DICTIONARY, seed=1)[0]
    src_tokens, src_lengths = source_batch(DICTIONARY, [4, 6, 5], seed=1)
    sample = {"id": torch.tensor([3, 8, 9]),
              "net_input": {"src_tokens": src_tokens, "src_lengths": src_lengths}}  # fmt: skip
    eos, pad = DICTIONARY.eos(), DICTIONARY.pad()
    prefix = torch.tensor([[7, eos, pad], [7, 8, 9], [5, 6, eos]])
    generator = task.build_generator([model], generation_args(
        san_decoding=decoding, beam=1, max_len_b=5))  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="fairseq_san.tasks.decoding"):
        decoded = task.inference_step(generator, [model], sample, prefix)
        task.inference_step(generator, [model], sample, prefix)
    assert [hypos[0]["tokens"].tolist() for hypos in (decoded[0], decoded[2])] == [
        [7, eos], [5, 6, eos]
    ]
    assert [record.getMessage() for record in caplog.records] == [
        "--prefix-size: the prefix of sentence 3, 9 holds its whole target (its end of sentence "
        "included), which the search forces: its hypothesis is its reference, and the BLEU score "
        "counts it as translated; pass a smaller --prefix-size (said of the first batch with "
        "such sentences only)"
    ]


def small_vocabulary_task():
    """A translation_san task, a tiny model and a batch over a 6-entry dictionary (2 words)."""
    from fairseq_san.tasks.translation_san import TranslationSANConfig, TranslationSANTask

    dictionary = make_dictionary(6)
    model = build(dictionary=dictionary, seed=1)[0]
    src_tokens, src_lengths = source_batch(dictionary, [4, 6, 3], seed=1)
    sample = {"id": torch.tensor([0, 1, 2]),
              "net_input": {"src_tokens": src_tokens, "src_lengths": src_lengths}}  # fmt: skip
    return TranslationSANTask(TranslationSANConfig(), dictionary, dictionary), model, sample


def test_searches_of_twice_the_beam_refuse_a_smaller_dictionary():
    """--diversity-rate and --constraints take the 2 x beam best tokens of a hypothesis: above
    the target dictionary's entries both decoders failed inside torch's topk ("selected index k
    out of range"). One line, before decoding; at the largest beam it names, both decode."""
    from fairseq.token_generation_constraints import pack_constraints

    task, model, sample = small_vocabulary_task()
    constraints = pack_constraints([[torch.tensor([4])], [torch.tensor([5])], []])
    for flag, search, keywords in (("--diversity-rate", dict(diversity_rate=0.5), {}),
                                   ("--constraints", dict(constraints="ordered"),
                                    dict(constraints=constraints))):  # fmt: skip
        for decoding in ("fairseq", "static"):
            with pytest.raises(UsageError) as refused:
                task.build_generator([model], generation_args(san_decoding=decoding, **search))
            assert str(refused.value) == (
                f"{flag} with --beam 4: its search takes the 2 x beam best tokens of each "
                "hypothesis, more than the target dictionary's 6 entries: pass --beam 3 or less"
            )
            generator = task.build_generator(
                [model], generation_args(san_decoding=decoding, beam=3, **search)
            )
            with torch.no_grad():
                decoded = task.inference_step(generator, [model], sample, **keywords)
            assert len(decoded) == 3 and all(decoded)


def test_diverse_groups_must_divide_the_capped_beam_in_both_decoders():
    """Both generators cap the beam at the target dictionary's entries but one (5 of 6): 2
    groups divide --beam 6, not the 5 searched; fairseq's diverse search failed at the first
    step with a message naming no number, the static decoder refused it in one line. The same
    line from both; groups that divide both beams decode."""
    task, model, sample = small_vocabulary_task()
    for decoding in ("fairseq", "static"):
        with pytest.raises(UsageError) as refused:
            task.build_generator([model], generation_args(
                san_decoding=decoding, beam=6, diverse_beam_groups=2))  # fmt: skip
        assert str(refused.value) == (
            "--beam 6, capped at 5 (the target dictionary's entries but one), is not a multiple "
            "of --diverse-beam-groups 2: diverse beam search splits the beam into groups of "
            "equal size"
        )
        generator = task.build_generator([model], generation_args(
            san_decoding=decoding, beam=10, diverse_beam_groups=5))  # fmt: skip
        with torch.no_grad():
            decoded = task.inference_step(generator, [model], sample)
        assert [len(hypos) for hypos in decoded] == [5, 5, 5]


def test_ngram_blocking_that_leaves_no_token_before_min_len_is_one_line():
    """--no-repeat-ngram-size with --min-len on a small dictionary: a sentence whose every
    continuation repeats an n-gram while EOS waits for --min-len has no token left; fairseq's
    generator failed its assertion at max_len, the static decoder raised a RuntimeError, and
    sampling failed in torch's multinomial in both. One line; with a shorter --min-len both
    decode."""
    task, model, sample = small_vocabulary_task()
    said = ("--no-repeat-ngram-size 2 with --min-len 10: a sentence had no token left to choose "
            "(each continuation repeated a 2-gram, and the end of sentence waits for --min-len; "
            "a small target dictionary runs out first): lower --min-len, or raise "
            "--no-repeat-ngram-size")  # fmt: skip
    for decoding, search in itertools.product(("fairseq", "static"), ({}, dict(sampling=True))):
        settings = dict(san_decoding=decoding, beam=2, no_repeat_ngram_size=2, max_len_b=12)
        generator = task.build_generator([model], generation_args(min_len=10, **settings))
        torch.manual_seed(0)
        with torch.no_grad(), pytest.raises(UsageError) as refused:
            task.inference_step(generator, [model], sample)
        assert str(refused.value) == said, (decoding, search)
        generator = task.build_generator([model], generation_args(min_len=2, **settings))
        with torch.no_grad():
            assert len(task.inference_step(generator, [model], sample)) == 3


def test_build_generator_chooses_the_decoder(task):
    """``san_decoder`` in the generation args (the benchmark) or the task options selects it."""
    model = build(dictionary=DICTIONARY)[0]
    static = task.build_generator([model], generation_args(san_decoding="static"))
    assert isinstance(static, StaticSequenceGenerator)
    assert static.beam_size == 4 and static.max_len_b == 10
    assert not isinstance(task.build_generator([model], generation_args()), StaticSequenceGenerator)
    assert static.execution.name == "eager" and not static.execution.fixed_layout(torch.device("cpu"))
    fixed = task.build_generator(
        [model], generation_args(san_decoding="static", san_decoder_execution="fixed")
    )
    assert fixed.execution.name == "fixed"
    task.cfg.san_decoder = "static"
    try:
        assert isinstance(task.build_generator([model], generation_args()), StaticSequenceGenerator)
    finally:
        task.cfg.san_decoder = "fairseq"


@pytest.mark.parametrize(
    "options, named",
    [
        (dict(retain_dropout=True), "--retain-dropout"),
    ],
)
def test_unsupported_option_is_named(task, options, named):
    model = build(dictionary=DICTIONARY)[0]
    with pytest.raises(StaticDecoderError, match=f"not support {named}.*--san-decoding fairseq"):
        task.build_generator([model], generation_args(san_decoding="static", **options))


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(san_decoder_precision="bf16"), "--san-decoder-precision bf16 is an option of "
         "--san-decoding static, not of --san-decoding fairseq, which decodes here: add "
         "--san-decoding static, or drop --san-decoder-precision"),
        (dict(san_decoding="fast", san_decoder_execution="fixed"), "--san-decoder-execution fixed "
         "is an option of --san-decoding static, not of --san-decoding fast, which decodes "
         "here"),
        (dict(san_decoding="fast", san_decoder="static"), "--san-decoding fast and --san-decoder "
         "static (deprecated: --san-decoding static) choose two decoders: pass --san-decoding "
         "alone"),
        (dict(san_decoding="static", sampling_topk=5), "--sampling-topk 5 is read by sampling "
         "only: pass --sampling too"),
        (dict(sampling=True, sampling_topk=25, beam=2, nbest=2), "--sampling-topk 25 is more than "
         "the target dictionary's 24 entries: pass at most 24"),
        (dict(beam=30, nbest=30), "--nbest 30: the search keeps at most the target dictionary's "
         "24 entries but one, 23 hypotheses per sentence: pass --nbest 23 or less"),
        (dict(san_decoding="static", sampling=True, beam=24, nbest=24), "--nbest 24: the search "
         "keeps at most"),
        (dict(san_decoding="fast", score_reference=True), "--san-decoding fast with "
         "--score-reference: scoring the references is one teacher-forced pass, which decodes "
         "nothing; drop --san-decoding"),
        (dict(retain_iter_history=True), "--retain-iter-history is an option of fairseq's "
         "iterative refinement of non-autoregressive models (--task translation_lev); this model "
         "decodes left to right, without it: drop it"),
        (dict(san_decoding="static", print_step=True), "--print-step is an option of fairseq's"),
        (dict(iter_decode_max_iter=3), "--iter-decode-max-iter is an option of fairseq's"),
    ],
)  # fmt: skip
def test_options_that_would_be_ignored_are_refused(task, options, message):
    """Each was accepted and decoded as if it had not been given (fp32 fairseq decoding, the fast
    step, or beam search instead of sampling), or failed inside torch (a top-k above the
    vocabulary) or fairseq-generate (``KeyError: 'history'`` from --retain-iter-history,
    ``'steps'`` from --print-step)."""
    model = build(dictionary=DICTIONARY)[0]
    with pytest.raises(UsageError) as refused:
        task.build_generator([model], generation_args(**options))
    assert str(refused.value).startswith(message)


@pytest.mark.parametrize("kind", ["translation", "language_modeling"])
@pytest.mark.parametrize(
    "options, message",
    [
        (dict(sampling=True, sampling_topk=25, beam=1), "--sampling-topk 25 is more than the "
         "target dictionary's 24 entries: pass at most 24"),
        (dict(sampling=True, sampling_topk=2**63, beam=1), "--sampling-topk 9223372036854775808 "
         "is more than the target dictionary's 24 entries"),
        (dict(beam=30, nbest=30), "--nbest 30: the search keeps at most the target dictionary's "
         "24 entries but one"),
    ],
)  # fmt: skip
def test_fairseqs_own_tasks_check_the_searches_against_the_vocabulary(kind, options, message):
    """fairseq's ``translation`` and ``language_modeling`` tasks, the plugin loaded, as the
    plugin's: fairseq-generate failed inside torch's topk ("selected index k out of range",
    "Overflow when unpacking long long") and printed 23 hypotheses for --nbest 30."""
    from fairseq.tasks.language_modeling import LanguageModelingConfig, LanguageModelingTask
    from fairseq.tasks.translation import TranslationConfig, TranslationTask

    task = (TranslationTask(TranslationConfig(), DICTIONARY, DICTIONARY) if kind == "translation"
            else LanguageModelingTask(LanguageModelingConfig(), DICTIONARY))  # fmt: skip
    model = build(dictionary=DICTIONARY)[0]
    with pytest.raises(UsageError) as refused:
        task.build_generator([model], generation_args(**options))
    assert str(refused.value).startswith(message)


@pytest.mark.parametrize("decoding", ["fairseq", "static", "translation"])
def test_a_length_penalty_beyond_32_bit_floats_is_refused(task, decoding):
    """--lenpen 1e30: fairseq's generator failed with "OverflowError: (34, 'Numerical result out
    of range')" at the first finished hypothesis; 40 divided scores by up to 11 ** 40, beyond
    float32 (scores of -0, silently), where 30 (11 ** 30, about 1.7e31) fits. ``translation``:
    fairseq's own task, the plugin loaded."""
    from fairseq.tasks.translation import TranslationConfig, TranslationTask

    if decoding == "translation":
        task, decoding = TranslationTask(TranslationConfig(), DICTIONARY, DICTIONARY), "fairseq"
    model = build(dictionary=DICTIONARY)[0]
    for lenpen in (1e30, -40.0):
        with pytest.raises(UsageError) as refused:
            task.build_generator([model], generation_args(lenpen=lenpen, san_decoding=decoding))
        assert str(refused.value).startswith(
            f"--lenpen {lenpen}: a score is divided by its output's length ** lenpen, beyond "
            "32-bit floats for outputs of up to 11 tokens: pass one between -37 and 37"
        ), str(refused.value)
    task.build_generator([model], generation_args(lenpen=30.0, san_decoding=decoding))


@pytest.mark.parametrize("decoding", ["fairseq", "static"])
def test_a_beam_above_the_dictionary_is_said_capped(task, decoding, caplog):
    """Both generators search at most the target dictionary's entries but one hypotheses: a
    larger beam was searched as that one without a word (23 hypotheses of --beam 30)."""
    model = build(dictionary=DICTIONARY)[0]
    with caplog.at_level(logging.WARNING):
        generator = task.build_generator([model], generation_args(beam=30, san_decoding=decoding))
    assert generator.beam_size == len(DICTIONARY) - 1 == 23
    assert "beam 30 is capped at 23, the target dictionary's 24 entries but one" in caplog.text


def hub_generation_args(**keywords):
    """The generation config that the hub's translate()/generate() hands build_generator: a
    checkpoint's GenerationConfig (untyped, as fairseq reads it back) with each keyword set on
    it, unchecked."""
    from fairseq.dataclass.configs import GenerationConfig
    from omegaconf import OmegaConf, open_dict

    args = OmegaConf.create(OmegaConf.to_container(OmegaConf.structured(GenerationConfig)))
    with open_dict(args):
        for key, value in keywords.items():
            setattr(args, key, value)
    return args


@pytest.mark.parametrize(
    "keywords, message",
    [
        (dict(bema=1), "unknown generation option 'bema' (a keyword of translate(), sample() or "
         "generate()): did you mean 'beam'?"),
        (dict(zzz=1), "unknown generation option 'zzz' (a keyword of translate(), sample() or "
         "generate()): see fairseq's GenerationConfig"),
        (dict(lenpen=math.nan), "--lenpen nan: it must be a finite number"),
        (dict(lenpen="1.0"), "--lenpen '1.0': it must be a finite number"),  # as --beam '4'
        (dict(beam=-1), "--beam -1: it must be an integer of at least 1"),
        (dict(beam="4"), "--beam '4': it must be an integer of at least 1"),
        (dict(beam=4.5), "--beam 4.5: it must be an integer of at least 1"),
        (dict(sampling=True, sampling_topp=2.0), "--sampling-topp 2.0: it must be in (0, 1] (-1, "
         "the default, samples from every token)"),
        (dict(sampling=True, sampling_topk="5"), "--sampling-topk '5': it must be an integer of "
         "at least 1 (-1, the default, samples from every token)"),
        (dict(san_policy="{}"), "san_policy is an option of the model, which translate(), "
         "sample() and generate() cannot change: give it to from_pretrained(..., san_policy=...)"),
        (dict(san_fast_decoding=True), "san_fast_decoding is deprecated: pass san_decoding='fast'"),
        (dict(san_analysis_dir="js"), "san_analysis_dir is an option of the attention analysis, "
         "which runs in fairseq-validate only: translate(), sample() and generate() would ignore "
         "it"),
    ],
    ids=["misspelt", "unknown", "nan", "text for a number", "negative beam", "text beam",
         "fractional beam", "top-p above 1", "text top-k", "model option", "deprecated option", "analysis option"],
)  # fmt: skip
def test_hub_keywords_a_search_cannot_take_are_refused(task, keywords, message):
    """The hub's keywords reach the generator unparsed: a misspelt one decoded at the default
    beam, lenpen=nan gave NaN scores, a beam of -1, "4" or 4.5 failed inside fairseq, a model's
    option was ignored."""
    model = build(dictionary=DICTIONARY)[0]
    with pytest.raises(UsageError) as refused:
        task.build_generator([model], hub_generation_args(**keywords))
    assert str(refused.value) == message
    assert task.build_generator([model], hub_generation_args(beam=2, lenpen=0.5))


def test_a_temperature_or_min_len_out_of_range_is_one_usage_error(task):
    """fairseq's generator asserts on these (a traceback); the static decoder names the option,
    also where it is built without the task (the benchmark)."""
    from fairseq_san.static_decoding.generator import StaticSequenceGenerator

    model = build(dictionary=DICTIONARY)[0]
    refused = r"^--temperature 0: it must be greater than 0 \(greedy decoding is --beam 1 without"
    with pytest.raises(UsageError, match=refused):
        task.build_generator([model], generation_args(san_decoding="static", temperature=0))
    with pytest.raises(UsageError, match=refused):
        StaticSequenceGenerator([model], DICTIONARY, temperature=0)
    src_tokens, src_lengths = source_batch(DICTIONARY, [4, 6], seed=3)
    longest = r"^--min-len 12 is above the longest output of a batch of source length 7 \(10: "
    with pytest.raises(UsageError, match=longest + r"--max-len-a 0 x 7 \+ --max-len-b 10"):
        static_generate(model, 2, src_tokens, src_lengths, min_len=12, max_len_a=0, max_len_b=10)
    positions = model.max_decoder_positions()  # raising --max-len-b cannot help
    above = rf"^--min-len {positions} is above the longest output the model's {positions} "
    with pytest.raises(UsageError, match=above + rf"positions hold \({positions - 1} tokens"):
        static_generate(model, 2, src_tokens, src_lengths, min_len=positions,
                        max_len_b=2 * positions)  # fmt: skip


@pytest.mark.parametrize(
    "argv, change, named",
    [
        (["--adaptive-softmax-cutoff", "10", "--criterion", "adaptive_loss", "--ddp-backend",
          "legacy_ddp"], None, "--adaptive-softmax-cutoff"),  # how fairseq-train trains it
        (["--quant-noise-pq", "0.1"], None, "--quant-noise-pq"),
        ([], "attn_ln", r"decoder layers with attn_ln \(--scale-\* options\)"),
        ([], "ffn_layernorm", r"decoder layers with ffn_layernorm \(--scale-\* options\)"),
        (["--cross-self-attention"], None, "--cross-self-attention"),
        ([], "heads", "decoder layers with different numbers of heads"),
        ([], "bias_kv", "attention with add_bias_kv or add_zero_attn"),
        ([], "attention", "decoder attention of type Identity"),
        ([], "decoder", "decoders of type Sequential"),
        (["--base-layers", "1"], None, "--base-layers"),
    ],
)  # fmt: skip
def test_a_model_the_step_cannot_reproduce_is_refused(argv, change, named, monkeypatch):
    """Each would decode something other than fairseq's model: one line naming it, when the
    generator is built."""
    single_process_base_layers(monkeypatch)  # --base-layers: an AttributeError ('self_attn')
    model = build(argv, dictionary=DICTIONARY)[0]
    if change in ("attn_ln", "ffn_layernorm"):  # NormFormer's layer norms (fairseq's scale_attn,
        setattr(model.decoder.layers[1], change, torch.nn.LayerNorm(16))  # scale_fc: no flags)
    elif change == "heads":  # a layer of its own width per head (not a flag of fairseq's)
        model.decoder.layers[2].self_attn.num_heads //= 2
    elif change == "bias_kv":
        attention = model.decoder.layers[0].self_attn
        attention.bias_k = attention.bias_v = torch.nn.Parameter(torch.zeros(1, 1, 16))
    elif change == "attention":  # a module of one's own in a layer
        model.decoder.layers[3].encoder_attn = torch.nn.Identity()
    elif change == "decoder":
        model.decoder = torch.nn.Sequential(torch.nn.Linear(16, 16))
    with pytest.raises(StaticDecoderError, match=f"not support {named}; "):
        StaticSequenceGenerator([model], DICTIONARY, beam_size=2)
    # Built before the model moves to its device (fairseq-train --eval-bleu), the step waits for
    # the first batch; the refusal came then, at the first validation, after training began.
    with pytest.raises(StaticDecoderError, match=f"not support {named}; "):
        StaticSequenceGenerator([model], DICTIONARY, beam_size=2, device=torch.device("cuda"))


@pytest.mark.parametrize("argv", [["--decoder-output-dim", "8"], ["--decoder-output-dim", "24",
                                  "--san-decoder-self-policy", "2,4"]])  # fmt: skip
def test_an_output_width_other_than_the_layers_decodes_as_fairseqs(argv):
    """--decoder-output-dim: the layers' output projected (project_out_dim) before the vocabulary,
    as fairseq's decoder does; the caches stay as wide as the layers. (A translation decoder's
    input width is always its layers': it has no --decoder-input-dim.)"""
    model = decisive(build(argv, dictionary=DICTIONARY)[0])
    assert model.decoder.project_out_dim is not None
    src_tokens, src_lengths = source_batch(DICTIONARY, SOURCE_LENGTHS, seed=1)
    for beam in (1, 4):
        expected = generate(model, DICTIONARY, src_tokens, src_lengths, beam, max_len_b=12)
        assert_same_hypotheses(expected, static_generate(model, beam, src_tokens, src_lengths,
                                                         max_len_b=12))  # fmt: skip


def test_build_generator_takes_fairseqs_searches_and_refuses_other_generators(task):
    """``task.build_generator``'s own arguments: a function restricting each step's tokens and
    ``--constraints`` give the static generator fairseq's searches for them; a generator class
    of the caller's is refused; constraints given to a generator built without ``--constraints``
    are one line (fairseq's generator raised NotImplementedError)."""
    from fairseq.search import LexicallyConstrainedBeamSearch, PrefixConstrainedBeamSearch
    from fairseq.sequence_generator import SequenceGeneratorWithAlignment

    model = build(dictionary=DICTIONARY)[0]
    args = generation_args(san_decoding="static")
    with pytest.raises(StaticDecoderError, match=r"a custom generator class \(SequenceGeneratorWit"):
        task.build_generator([model], args, seq_gen_cls=SequenceGeneratorWithAlignment)
    allowed = task.build_generator([model], args, prefix_allowed_tokens_fn=lambda batch, ids: [4])
    assert isinstance(allowed.search, PrefixConstrainedBeamSearch)
    constrained = task.build_generator([model], generation_args(san_decoding="static",
                                                                constraints="unordered"))  # fmt: skip
    assert isinstance(constrained.search, LexicallyConstrainedBeamSearch)
    assert constrained.search.representation == "unordered"
    sample = next(two_batches())
    with pytest.raises(UsageError, match="^constraints were given to a generator built without "):
        allowed.generate([model], sample, constraints=packed_constraints(0, "ordered"))


def test_the_search_is_the_one_fairseqs_task_chooses(task, monkeypatch):
    """The static generator gets its search from fairseq's ``FairseqTask.build_generator``, as
    fairseq's generator does, so fairseq's choice reaches it unchanged (here a search class
    replaced in ``fairseq.search``: a copy of fairseq's choosing would have missed it); beam
    search and --match-source-len's length-constrained search are the static search's own, and
    a length-constrained search of other lengths is refused."""
    from fairseq import search

    class ChosenSiblingsSearch(search.DiverseSiblingsSearch):
        pass

    monkeypatch.setattr(search, "DiverseSiblingsSearch", ChosenSiblingsSearch)
    model = build(dictionary=DICTIONARY)[0]
    siblings = task.build_generator([model], generation_args(san_decoding="static",
                                                             diversity_rate=0.5))  # fmt: skip
    assert type(siblings.search) is ChosenSiblingsSearch and siblings.search.diversity_rate == 0.5
    for options in (dict(), dict(match_source_len=True)):
        generator = task.build_generator([model], generation_args(san_decoding="static", **options))
        assert generator.search is None and generator.match_source_len == bool(options)
    other_lengths = search.LengthConstrainedBeamSearch(DICTIONARY, 0, 1, 2, 3)
    with pytest.raises(StaticDecoderError, match=r"length-constrained beam search of lengths "
                       r"\(0, 1, 2, 3\) .*: only --match-source-len's \(1, 0, 1, 0\)"):  # fmt: skip
        StaticSequenceGenerator([model], DICTIONARY, search_strategy=other_lengths)


@pytest.mark.parametrize("decoding", ["fairseq", "static"])
def test_constraints_not_met_within_the_maximum_length_are_one_line(task, decoding):
    """Constraints a sentence cannot meet within its maximum output length (the search holds its
    end of sentence back): fairseq's generator failed its assertion ``step < max_len``, a
    traceback; both decoders now give one line naming the length and the way out."""
    model = decisive(build(dictionary=DICTIONARY, seed=1)[0])
    args = generation_args(san_decoding=decoding, constraints="ordered", max_len_b=2)
    generator = task.build_generator([model], args)
    sample = next(two_batches())
    with pytest.raises(UsageError, match=r"^--constraints: a sentence's constraints were not all "
                       r"met within its 2 output tokens \(the end of sentence waits for them\): "
                       "raise --max-len-a or --max-len-b"):  # fmt: skip
        task.inference_step(generator, [model], sample, constraints=packed_constraints(0, "ordered"))


def test_ensembles_and_other_generator_arguments_are_refused(task):
    model = build(dictionary=DICTIONARY)[0]
    args = generation_args(san_decoding="static")
    with pytest.raises(StaticDecoderError, match="ensembles"):
        task.build_generator([model, model], args)
    with pytest.raises(StaticDecoderError, match=r"generator options \['eos'\]"):
        task.build_generator([model], args, extra_gen_cls_kwargs={"eos": 3})


def fusion_language_model(dictionary=DICTIONARY, argv=()):
    """A tiny language model over ``dictionary`` whose distributions are far from uniform."""
    language_model = build_lm(argv, dictionary=dictionary, seed=4)[0]
    with torch.no_grad():
        language_model.decoder.embed_tokens.weight.mul_(4)
    return language_model


@pytest.mark.parametrize(
    "name, lm_policy",
    [("baseline", []), ("san-1,5-3,3", ["--san-decoder-self-policy", "2,4"]),
     ("aan-san", ["--san-decoder-self-policy", "3,1,1,1", "--san-self-share", "kv"])],
)  # fmt: skip
def test_a_fused_language_model_gives_fairseqs_output(task, name, lm_policy, monkeypatch):
    """fairseq-generate's --lm-path and --lm-weight (shallow fusion; ``task.build_generator``'s
    ``extra_gen_cls_kwargs``, as fairseq-generate passes them): the language model (baseline,
    SAN, KV sharing) over each hypothesis' tokens so far, weighted, added to the step's
    log-probabilities, gives fairseq's n-best batch after batch, at beams 1 and 4, with done
    sentences leaving the batch, eager, fixed and with each position captured whole, the
    language model's step in it (stand-in capture, which refuses a host sync); the fusion
    changed the output. The static decoder refused --lm-path before."""
    from fairseq_san.static_decoding import generator

    monkeypatch.setattr(generator, "DROP_DONE_AT", 1.0)
    model = decisive(build(MODELS[name], dictionary=DICTIONARY, seed=3)[0])
    fusion = {"lm_model": fusion_language_model(argv=lm_policy), "lm_weight": 0.7}
    batches = list(two_batches())
    for beam in (1, 4):
        args = dict(beam=beam, max_len_b=12, lenpen=0.5)
        fairseqs = task.build_generator([model], generation_args(san_decoding="fairseq", **args),
                                        extra_gen_cls_kwargs=fusion)  # fmt: skip
        with torch.no_grad():
            expected = [fairseqs.generate([model], batch) for batch in batches]
        plain = task.build_generator([model], generation_args(san_decoding="fairseq", **args))
        with torch.no_grad():
            assert ranked_tokens(plain.generate([model], batches[0])) != ranked_tokens(expected[0])
        settings = dict(beam_size=beam, max_len_b=12, len_penalty=0.5, **fusion)
        static = task.build_generator([model], generation_args(san_decoding="static", **args),
                                      extra_gen_cls_kwargs=fusion)  # fmt: skip
        graphed = graphed_translator(model, recording_capture([]), **settings)
        for ours in (static,
                     StaticSequenceGenerator([model], DICTIONARY, execution="fixed", **settings),
                     graphed):  # fmt: skip
            for batch, theirs in zip(batches, expected):
                assert_same_hypotheses(theirs, ours.generate([model], batch))
        # the positions after 0 replayed whole (one key: both batches have one shape), the
        # language model's step and cache in the graph, kept with the translation's
        replays = graphed.run_search_step.replays
        assert len(replays) == 1 and None not in replays.values() and not graphed.run_step.replays
        assert set(graphed.fused_lm.kept) == set(graphed._caches)


@pytest.mark.parametrize("execution", ["eager", "fixed"])
def test_a_fused_language_model_with_fewer_learned_positions_decodes_as_fairseq(execution):
    """A language model with learned positions, 64 of them (--tokens-per-sample 64), fused with
    a model of 1,024: the step's table asked it for the decoded model's positions (fixed: all
    of them; eager: the batch's max length, 200 by default), an IndexError at the first batch,
    where fairseq runs it over the tokens so far and decodes."""
    from fairseq.sequence_generator import SequenceGenerator

    dictionary = make_dictionary()
    model = build([], dictionary=dictionary, seed=1)[0]
    with torch.no_grad():  # one output vector, EOS's: outputs of 2 tokens, inside 64 positions
        last_norm = model.decoder.layers[-1].final_layer_norm
        last_norm.weight.zero_()
        seeded = torch.Generator().manual_seed(0)
        last_norm.bias.copy_(torch.randn(last_norm.bias.numel(), generator=seeded))
        model.decoder.output_projection.weight[dictionary.eos()] = 100 * last_norm.bias
    language_model = build_lm(["--decoder-learned-pos", "--tokens-per-sample", "64"],
                              dictionary=dictionary, seed=4)[0]  # fmt: skip
    assert language_model.max_decoder_positions() < model.max_decoder_positions()
    src_tokens, src_lengths = source_batch(dictionary, [4, 6], seed=1)
    batch = {"net_input": {"src_tokens": src_tokens, "src_lengths": src_lengths}}
    settings = dict(beam_size=2, max_len_b=200, lm_model=language_model, lm_weight=0.5)
    with torch.no_grad():
        expected = SequenceGenerator([model], dictionary, **settings).generate([model], batch)
    assert {len(hypothesis["tokens"]) for n_best in expected for hypothesis in n_best} == {2}
    ours = StaticSequenceGenerator([model], dictionary, execution=execution, **settings)
    assert_same_hypotheses(expected, ours.generate([model], batch))


@pytest.mark.parametrize("execution", ["eager", "fixed"])
def test_outputs_stop_at_a_fused_language_models_positions(execution, caplog):
    """Outputs that would run past the fused language model's 8 learned positions (its model
    never ends a sentence): fairseq caps the output at the translation model's positions only,
    and both decoders failed with an IndexError at the language model's ninth position. Capped
    at its positions now, as fairseq caps them at the translation model's, and said."""
    from fairseq.sequence_generator import SequenceGenerator

    dictionary = make_dictionary()
    model = build([], dictionary=dictionary, seed=1)[0]
    with torch.no_grad():  # one output vector, far from EOS's: no sentence ends
        last_norm = model.decoder.layers[-1].final_layer_norm
        last_norm.weight.zero_()
        seeded = torch.Generator().manual_seed(0)
        last_norm.bias.copy_(torch.randn(last_norm.bias.numel(), generator=seeded))
        model.decoder.output_projection.weight[dictionary.eos()] = -100 * last_norm.bias
    language_model = build_lm(["--decoder-learned-pos", "--tokens-per-sample", "8"],
                              dictionary=dictionary, seed=4)[0]  # fmt: skip
    src_tokens, src_lengths = source_batch(dictionary, [4, 6], seed=1)
    batch = {"net_input": {"src_tokens": src_tokens, "src_lengths": src_lengths}}
    settings = dict(beam_size=2, max_len_b=200, lm_model=language_model, lm_weight=0.5)
    with caplog.at_level(logging.INFO, logger="fairseq_san.fairseq_fixes.lm_fusion"), \
            torch.no_grad():  # fmt: skip
        expected = SequenceGenerator([model], dictionary, **settings).generate([model], batch)
    assert {len(hypothesis["tokens"]) for n_best in expected for hypothesis in n_best} == {8}
    assert caplog.messages == [
        "--lm-path: the language model has 8 positions, fewer than the 1024 the translation "
        "allows: outputs are at most 7 tokens"
    ]
    ours = StaticSequenceGenerator([model], dictionary, execution=execution, **settings)
    assert_same_hypotheses(expected, ours.generate([model], batch))


def test_a_fused_language_model_runs_one_token_a_position():
    """The language model is a static step of its own whose cache follows the search: one
    token per row at each position the translation's step runs, never fairseq's pass over the
    whole prefix (which fairseq's generator runs at every position). The language model is
    prepared as fairseq-generate prepares it (``make_generation_fast_``, after which its
    ``eval()`` returns None)."""
    model = decisive(build(MODELS["san-1,5-3,3"], dictionary=DICTIONARY, seed=3)[0])
    language_model = fusion_language_model()
    language_model.make_generation_fast_()
    language_model.forward = None  # fairseq's pass over the prefix: not called
    ours = StaticSequenceGenerator([model], DICTIONARY, beam_size=4, max_len_b=12,
                                   lm_model=language_model, lm_weight=0.7)  # fmt: skip
    steps = {"translation": [], "language model": []}
    for name, step in (("translation", ours.step), ("language model", ours.fused_lm.step)):
        step.register_forward_hook(lambda module, inputs, out, seen=steps[name]: seen.append(
            (inputs[0].dim(), inputs[0].size(0))))  # fmt: skip
    ours.generate([model], next(two_batches()))
    assert len(steps["translation"]) > 5
    assert steps["language model"] == steps["translation"]  # one token per row, the same rows
    assert {dim for dim, _ in steps["language model"]} == {1}


@pytest.mark.parametrize("precision", ["bf16-full", "int8"])
def test_a_fused_language_model_runs_at_the_decoded_models_precision(precision):
    """--san-decoder-precision converts the language model's step as it converts the
    translation's (its linear layers, its activations' dtype), and fusion decodes there."""
    model = decisive(build(MODELS["baseline"], dictionary=DICTIONARY, seed=3)[0])
    settings = dict(beam_size=4, max_len_b=12, precision=precision)
    language_model = fusion_language_model()
    ours = StaticSequenceGenerator([model], DICTIONARY, lm_model=language_model, **settings)
    fused, decoded = ours.fused_lm.step, ours.step
    assert fused.dtype == decoded.dtype
    assert type(fused.output_projection) is type(decoded.output_projection)
    assert type(fused.layers[0].fc1) is type(decoded.layers[0].fc1)
    hypotheses = ours.generate([model], next(two_batches()))
    ends = [nbest[0]["tokens"][-1] for nbest in hypotheses]
    assert [len(nbest) for nbest in hypotheses] == [4] * 6 and ends == [DICTIONARY.eos()] * 6


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", ["baseline", "aan-san"])
def test_cuda_a_fused_language_model_gives_fairseqs_output(name):
    """On a GPU (CUDA graphs, the default there), --lm-path fusion: each position after 0
    replayed whole (the translation's step, the language model's, the search, the reordering)
    gives fairseq's n-best at beams 1 and 4; every shape captured (no fall-back)."""
    from fairseq.sequence_generator import SequenceGenerator

    model = decisive(build(MODELS[name], dictionary=DICTIONARY, seed=3)[0]).cuda()
    fusion = dict(lm_model=fusion_language_model().cuda(), lm_weight=0.7)
    for beam in (1, 4):
        settings = dict(beam_size=beam, max_len_b=12, len_penalty=0.5, **fusion)
        fairseqs = SequenceGenerator([model], DICTIONARY, **settings)
        ours = StaticSequenceGenerator([model], DICTIONARY, **settings)
        assert ours.execution.name == "graph"
        for sample in two_batches():
            sample = {"net_input": {k: v.cuda() for k, v in sample["net_input"].items()}}
            with torch.no_grad():
                expected = fairseqs.generate([model], sample)
            assert_same_hypotheses(expected, ours.generate([model], sample), atol=1e-4)
        replays = ours.run_search_step.replays
        assert replays and None not in replays.values()


def test_a_fused_language_model_the_step_cannot_run_is_refused_in_one_line():
    model = build(dictionary=DICTIONARY)[0]
    adaptive = build_lm(["--adaptive-input", "--adaptive-input-cutoff", "10,20"],
                        arch="transformer_lm", dictionary=DICTIONARY)[0]  # fmt: skip
    with pytest.raises(StaticDecoderError) as refused:
        StaticSequenceGenerator([model], DICTIONARY, lm_model=adaptive)
    assert str(refused.value) == (
        "--san-decoding static does not support --adaptive-input in the --lm-path language "
        "model; decode with fairseq's own decoder (--san-decoding fairseq, the default) to use it"
    )


def test_a_fused_language_model_over_another_vocabulary_is_one_line():
    model = build(dictionary=DICTIONARY)[0]
    other = fusion_language_model(make_dictionary(len(DICTIONARY) + 3))
    with pytest.raises(UsageError, match=r"^--lm-path: the language model's dictionary \("):
        StaticSequenceGenerator([model], DICTIONARY, lm_model=other)


def test_a_language_model_given_to_the_translation_generator_names_the_lm_one():
    """From Python: an AttributeError ("'NoneType' object has no attribute ...") at the first
    batch before."""
    language_model = build_lm([], dictionary=DICTIONARY)[0]
    with pytest.raises(StaticDecoderError, match="StaticLMGenerator"):
        StaticSequenceGenerator([language_model], DICTIONARY)


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_a_generator_built_before_training_decodes_with_the_trained_weights(precision):
    """fairseq-train --eval-bleu builds its generator once, then trains: the step's fused,
    converted and packed copies kept the first weights while the rest followed the model. The
    step is built again when a weight has changed, and only then."""
    model = decisive(build(MODELS["san-1,5-3,3"], dictionary=DICTIONARY, seed=1)[0])
    sample = next(two_batches())
    settings = dict(beam_size=4, max_len_b=12, precision=precision)
    built_early = StaticSequenceGenerator([model], DICTIONARY, **settings)
    built_early.generate([model], sample)
    step = built_early.step
    built_early.generate([model], sample)
    assert built_early.step is step
    torch.manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():  # an optimizer's step: in place
            parameter.add_(0.3 * torch.randn_like(parameter))
    expected = StaticSequenceGenerator([model], DICTIONARY, **settings).generate([model], sample)
    assert_same_hypotheses(expected, built_early.generate([model], sample), atol=1e-6)


def train_with_fairseqs_adam(model, sample: dict) -> None:
    """One update as fairseq-train makes it: a pass in training mode, then fairseq's Adam, which
    writes the weights through ``.data`` (no tensor's version counts it)."""
    from fairseq.optim.adam import Adam

    net_input = sample["net_input"]
    model.train()
    model(net_input["src_tokens"], net_input["src_lengths"], net_input["src_tokens"])
    torch.manual_seed(0)
    for parameter in model.parameters():  # gradients of the size a loss gives, none NaN
        parameter.grad = torch.randn_like(parameter)
    Adam(list(model.parameters()), lr=0.1).step()
    model.eval()


def test_a_generator_follows_the_weights_that_fairseqs_optimizer_writes():
    """fairseq's optimizers write the weights through ``.data``: the step built at fairseq-train
    --eval-bleu's first validation decoded every later one with its first copies (fused q/k/v,
    layer norms, positions), since no tensor's version changed. A pass in training mode since it
    was built makes it build again."""
    model = decisive(build(MODELS["san-1,5-3,3"], dictionary=DICTIONARY, seed=1)[0])
    sample = next(two_batches())
    settings = dict(beam_size=4, max_len_b=12)
    built_early = StaticSequenceGenerator([model], DICTIONARY, **settings)
    built_early.generate([model], sample)
    train_with_fairseqs_adam(model, sample)
    expected = StaticSequenceGenerator([model], DICTIONARY, **settings).generate([model], sample)
    assert_same_hypotheses(expected, built_early.generate([model], sample), atol=1e-6)
    step = built_early.step
    built_early.generate([model], sample)
    assert built_early.step is step  # decoding alone builds nothing


def test_a_generator_told_its_device_checks_against_it_and_builds_at_the_first_batch():
    """fairseq-train builds --eval-bleu's generator on the CPU, then moves the model to the GPU:
    the static decoder checked its options against the CPU (refusing --san-decoder-execution
    graph, accepting int8 until the first validation). Told the device, it checks against it at
    once and builds its step at the first batch, on the model as it is then."""
    model = decisive(build(MODELS["san-1,5-3,3"], dictionary=DICTIONARY, seed=1)[0])
    cuda = torch.device("cuda")
    with pytest.raises(StaticDecoderError, match="int8 on a GPU"):
        StaticSequenceGenerator([model], DICTIONARY, precision="int8", device=cuda)
    waiting = StaticSequenceGenerator([model], DICTIONARY, execution="graph", device=cuda)
    assert waiting.built_from is None and not hasattr(waiting, "step")
    here = StaticSequenceGenerator([model], DICTIONARY, device=torch.device("cpu"))
    assert here.built_from is not None  # already where it decodes: built at once


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_generator_built_before_the_model_moved_decodes_as_one_built_after():
    """fairseq-train --eval-bleu --san-decoding static on a GPU: the generator is built on the
    CPU model, told the GPU; the first batch, after the model moved, builds the step there (CUDA
    graphs) and gives the n-best of a generator built after the move."""
    model = decisive(build(MODELS["san-1,5-3,3"], dictionary=DICTIONARY, seed=1)[0])
    settings = dict(beam_size=4, max_len_b=12)
    early = StaticSequenceGenerator([model], DICTIONARY, device=torch.device("cuda"), **settings)
    model.cuda()
    after = StaticSequenceGenerator([model], DICTIONARY, execution="fixed", **settings)
    for sample in two_batches():
        sample = {"net_input": {k: v.cuda() for k, v in sample["net_input"].items()}}
        expected = after.generate([model], sample)
        assert_same_hypotheses(expected, early.generate([model], sample), atol=1e-5)
    assert early.execution.graphs


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_cuda_graphs_of_a_model_on_a_gpu_that_is_not_current_decode_as_eager():
    """A hub user's ``model.to("cuda:1")`` while ``cuda:0`` is current: the graphs captured the
    current device's streams, empty, and their replays decoded nothing. The model's device is
    made current while it decodes."""
    model = decisive(build(MODELS["san-1,5-3,3"], dictionary=DICTIONARY, seed=1)[0])
    model.to("cuda:1")
    settings = dict(beam_size=4, max_len_b=12)
    graphs = StaticSequenceGenerator([model], DICTIONARY, execution="graph", **settings)
    eager = StaticSequenceGenerator([model], DICTIONARY, execution="fixed", **settings)
    with torch.cuda.device(0):
        for sample in two_batches():
            sample = {"net_input": {k: v.to("cuda:1") for k, v in sample["net_input"].items()}}
            expected = eager.generate([model], sample)
            assert_same_hypotheses(expected, graphs.generate([model], sample), atol=1e-5)
    assert graphs.execution.graphs


def prepared_cache(step: StaticDecoderStep, encoder_out, rows: int, positions: int):
    """A sliced CPU cache for ``rows`` hypotheses and ``positions`` positions, prepared by
    ``step`` for ``encoder_out`` (its encoder-decoder keys and values)."""
    from fairseq_san.static_decoding.caches import allocate_cache

    cache = allocate_cache(
        rows, positions, step.self_slots, step.heads, step.aan_layers, step.embed_dim,
        step.dtype, "cpu",
    )
    padding = encoder_out["encoder_padding_mask"][0]
    step.prepare(encoder_out["encoder_out"][0], padding, cache, positions)
    return cache


@pytest.mark.parametrize("precision", ["bf16", "bf16-fp32-logits", "bf16-full", "int8"])
def test_reduced_precision_step(precision):
    """bf16 / bf16-fp32-logits / bf16-full / int8 steps compute in that precision (the output
    projection of bf16-fp32-logits in fp32), close to fp32, and leave the model as is."""
    model = build(MODELS["san-1,5-3,3"], dictionary=DICTIONARY)[0]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    src_tokens, src_lengths = source_batch(DICTIONARY, [4, 6], seed=3)
    encoder_out = model.encoder(src_tokens, src_lengths)
    steps = {p: apply_precision(StaticDecoderStep(model.decoder), p) for p in ("fp32", precision)}
    lprobs = {}
    for name, step in steps.items():
        cache = prepared_cache(step, encoder_out, rows=2, positions=3)
        for position, token in enumerate([DICTIONARY.eos(), 7, 9]):
            out = step(torch.full((2,), token), position, cache)
        lprobs[name] = out
    linear = steps[precision].layers[0].fc1
    if precision == "bf16-fp32-logits":
        assert weight_dtype(linear) == torch.bfloat16 and out.dtype == torch.float32
        assert weight_dtype(steps[precision].output_projection) == torch.float32
    elif precision == "bf16":
        assert weight_dtype(linear) == torch.bfloat16 and out.dtype == torch.float32
        assert weight_dtype(steps[precision].output_projection) == torch.bfloat16
    elif precision == "bf16-full":
        assert {p.dtype for p in steps[precision].parameters()} == {torch.bfloat16}
        assert steps[precision].dtype == torch.bfloat16 and out.dtype == torch.float32
    else:
        assert type(linear).__module__.startswith("torch.ao.nn.quantized.dynamic")
    difference = (lprobs[precision] - lprobs["fp32"]).abs().max()
    assert 0 < difference < 0.1
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key


@pytest.mark.parametrize("precision", ["bf16", "int8"])
@pytest.mark.parametrize("policy", [[], ["--san-encoder-self-policy", "2"]])
def test_reduced_precision_runs_a_converted_copy_of_the_encoder(precision, policy):
    """Below fp32 the generator runs a copy of the encoder (fairseq's attention or SAN's shared
    one) whose linear layers compute at that precision, with outputs close to fp32's; the model's
    encoder is left as it is, and an fp32 generator runs it as loaded."""
    model = build(policy, dictionary=DICTIONARY)[0]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert StaticSequenceGenerator([model], DICTIONARY, beam_size=4).encoder is model.encoder
    encoder = StaticSequenceGenerator([model], DICTIONARY, beam_size=4, precision=precision).encoder
    assert encoder is not model.encoder
    assert not any(type(module) is torch.nn.Linear for module in encoder.modules())
    layer = encoder.layers[0]  # a block leader: every projection
    for linear in (layer.fc1, layer.self_attn.q_proj, layer.self_attn.out_proj):
        if precision == "int8":
            assert type(linear).__module__.startswith("torch.ao.nn.quantized.dynamic")
        else:
            assert weight_dtype(linear) == torch.bfloat16
    src_tokens, src_lengths = source_batch(DICTIONARY, [4, 6], seed=3)
    expected = model.encoder(src_tokens, src_lengths)["encoder_out"][0]
    actual = encoder(src_tokens, src_lengths)["encoder_out"][0]
    assert actual.dtype == torch.float32
    assert 0 < (actual - expected).abs().max() < 0.1
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key


def test_int8_without_torch_ao_is_one_clear_error(monkeypatch):
    """int8 is built on torch.ao's dynamic quantization, which torch deprecates: a torch without
    it refuses int8 in one line naming the cause and what still runs."""
    monkeypatch.setitem(sys.modules, "torch.ao.quantization", None)  # import -> ImportError
    model = build([], dictionary=DICTIONARY)[0]
    way_out = "choose --san-decoder-precision bf16 or bf16-fp32-logits or bf16-full"
    cause = "no longer has torch.ao's dynamic quantization"
    with pytest.raises(StaticDecoderError, match=f"{cause}; {way_out}$"):
        StaticSequenceGenerator([model], DICTIONARY, beam_size=4, precision="int8")
    StaticSequenceGenerator([model], DICTIONARY, beam_size=4, precision="bf16")


@pytest.mark.skipif(not can_pack(torch.device("cpu"), torch.float32), reason="no oneDNN")
def test_fp32_step_packs_its_linear_layers():
    """On a CPU with oneDNN every linear layer of an fp32 step runs on a packed weight (the
    n-best tests above check that it decodes as fairseq does), and the benchmark's FLOP count
    sees them as it sees nn.Linear."""
    from fairseq_san.benchmark.meters import matmul_flops

    model = build(MODELS["san-1,5-3,3"], dictionary=DICTIONARY)[0]
    step = apply_precision(StaticDecoderStep(model.decoder), "fp32")
    assert not [m for m in step.modules() if type(m) is torch.nn.Linear]
    packed = step.layers[0].fc1
    assert isinstance(packed, PackedLinear)
    x = torch.randn(3, packed.in_features)
    plain = model.decoder.layers[0].fc1
    assert torch.allclose(packed(x), plain(x), atol=1e-5)
    assert matmul_flops(lambda: packed(x))[0] == matmul_flops(lambda: plain(x))[0] > 0


def weight_dtype(linear: torch.nn.Module) -> torch.dtype:
    """The dtype a (packed or plain) linear layer of a step computes with."""
    return linear.packed.dtype if isinstance(linear, PackedLinear) else linear.weight.dtype


@pytest.mark.parametrize("name", ["baseline", "san-6-6", "aan-san"])
def test_candidates_from_chunks_give_fairseqs_nbest(name, monkeypatch):
    """The search's candidates taken from the best chunks of scores (``best_of_rows``, chunks of
    2 here so that the tiny vocabulary takes that path at every step after the first, whose
    candidates are one hypothesis' vocabulary) give SequenceGenerator's n-best."""
    from fairseq_san.static_decoding import beam_search

    chunked, calls = [], []  # per step after the first: whether the chunks' path ran
    rows, chunks = beam_search.best_of_rows, beam_search.best_of_chunks

    def best_of_rows(scores, k):
        before = len(calls)
        best = rows(scores, k, chunk=2)
        if scores.size(1) > len(DICTIONARY):  # beam x vocabulary: after the first step
            chunked.append(len(calls) > before)
        return best

    def best_of_chunks(scores, k, chunk):
        calls.append(k)
        return chunks(scores, k, chunk)

    monkeypatch.setattr(beam_search, "best_of_rows", best_of_rows)
    monkeypatch.setattr(beam_search, "best_of_chunks", best_of_chunks)
    model = decisive(build(MODELS[name], dictionary=DICTIONARY, seed=1)[0])
    src_tokens, src_lengths = source_batch(DICTIONARY, SOURCE_LENGTHS, seed=1)
    for beam in (1, 4, 8):
        for settings in SETTINGS:
            expected = generate(model, DICTIONARY, src_tokens, src_lengths, beam, **settings)
            actual = static_generate(model, beam, src_tokens, src_lengths, **settings)
            assert_same_hypotheses(expected, actual)
    assert chunked and all(chunked), chunked


@pytest.mark.parametrize("name", ["baseline", "san-6-6", "aan-san"])
def test_log_probs_in_blocks_of_rows_give_fairseqs_nbest(name, monkeypatch):
    """On the CPU the output projection and the log-softmax run on blocks of rows (5 here, so
    that a step at beams 4 and 8 has several, the last one short), with a temperature too:
    SequenceGenerator's n-best."""
    from fairseq_san.static_decoding import step

    monkeypatch.setattr(step, "LOG_PROBS_BLOCK_BYTES", 4 * len(DICTIONARY) * 5)
    blocks = calls_of(monkeypatch, StaticDecoderStep, "_log_probs")
    model = decisive(build(MODELS[name], dictionary=DICTIONARY, seed=1)[0])
    src_tokens, src_lengths = source_batch(DICTIONARY, SOURCE_LENGTHS, seed=1)
    for beam in (4, 8):
        for settings in (SETTINGS[2], dict(max_len_b=10, temperature=0.7)):
            expected = generate(model, DICTIONARY, src_tokens, src_lengths, beam, **settings)
            actual = static_generate(model, beam, src_tokens, src_lengths, **settings)
            assert_same_hypotheses(expected, actual)
    sizes = {len(x) for x, _, _ in blocks}  # 6 sentences x 4 or 8: 24 or 48 rows, 6 at first
    assert max(sizes) == 5 and len(sizes) > 1, sizes


@pytest.mark.parametrize("precision", ["bf16", "bf16-full", "int8"])
def test_log_probs_in_blocks_of_rows_at_reduced_precision(precision, monkeypatch):
    """The blocks' log-probabilities at each reduced precision: those of the whole rows at once
    (int8: close to them, each block's activations quantized with its own range)."""
    from fairseq_san.static_decoding import step as step_module

    model = build(MODELS["san-6-6"], dictionary=DICTIONARY, seed=2)[0]
    src_tokens, src_lengths = source_batch(DICTIONARY, [4, 6, 5, 3, 7], seed=3)
    encoder_out = model.encoder(src_tokens, src_lengths)
    step = apply_precision(StaticDecoderStep(model.decoder), precision)
    tokens = torch.tensor([DICTIONARY.eos(), 7, 9, 11, 8])
    lprobs = {}
    for rows in (2, 5):
        monkeypatch.setattr(step_module, "LOG_PROBS_BLOCK_BYTES", 4 * len(DICTIONARY) * rows)
        cache = prepared_cache(step, encoder_out, rows=5, positions=1)
        with torch.no_grad():
            lprobs[rows] = step(tokens, 0, cache)
    atol = 0.05 if precision == "int8" else 1e-6
    torch.testing.assert_close(lprobs[2], lprobs[5], atol=atol, rtol=0)
    assert lprobs[2].dtype == torch.float32 and lprobs[2].shape == (5, len(DICTIONARY))


@pytest.mark.parametrize("width", [640, 650, 64 * 16])
def test_best_of_rows_equals_topk(width, monkeypatch):
    """The k best scores of each row from its best chunks: torch.topk's values and columns
    (distinct scores), with -inf, a row of NaN first as topk ranks it, and widths after the last
    whole chunk; the chunks' path taken (torch.topk itself is the other)."""
    from fairseq_san.static_decoding import beam_search
    from fairseq_san.static_decoding.beam_search import best_of_rows

    chunked, chunks = [], beam_search.best_of_chunks
    monkeypatch.setattr(beam_search, "best_of_chunks",
                        lambda *args: chunked.append(True) or chunks(*args))  # fmt: skip

    scores = torch.randn(5, width, generator=torch.Generator().manual_seed(width))
    scores[1, ::3] = float("-inf")
    scores[2, :600] = float("-inf")  # the best of row 2 lie in few chunks
    scores[3, -3:] += 10.0  # and those of row 3 after the last whole chunk (width 650)
    scores[4, 7] = float("nan")
    for k in (1, 8, 16):
        expected = torch.topk(scores, k)
        values, columns = best_of_rows(scores, k, chunk=8)
        assert torch.equal(values[:4], expected.values[:4])
        assert torch.equal(columns[:4], expected.indices[:4])
        assert values[4, 0].isnan() and columns[4, 0] == 7
        assert torch.equal(values[4, 1:], expected.values[4, 1:])
    assert chunked == [True] * 3


def test_children_keep_their_parents_rows():
    """A hypothesis continuing a parent takes the parent's row if it is the first to continue it,
    a row left free otherwise: every parent row keeps its state, so caches copy only the others."""
    from fairseq_san.static_decoding.beam_search import place_children

    parents = torch.tensor([[2, 2, 0, 2], [1, 3, 0, 2], [3, 3, 3, 3]])
    rows = place_children(parents, torch.ones(4, 4, dtype=torch.bool).tril(-1))
    assert rows.tolist() == [[2, 1, 0, 3], [1, 3, 0, 2], [3, 0, 1, 2]]


def test_nan_scores_are_never_chosen():
    """Like fairseq, a NaN log-probability counts as -inf (never a candidate), though beam search
    looks for NaN only among the candidates."""
    from fairseq_san.static_decoding.beam_search import SearchSettings, TensorBeamSearch

    settings = SearchSettings(4, 1, 5, 1.0, True, 0.0, DICTIONARY.pad(), DICTIONARY.unk(), 2)
    search = TensorBeamSearch(settings, 2, DICTIONARY.eos(), "cpu")
    vocab = len(DICTIONARY)
    for step in range(3):
        logits = torch.randn(8, vocab, generator=torch.Generator().manual_seed(step))
        lprobs = torch.log_softmax(logits, dim=-1)
        lprobs[:, 7] = float("nan")
        search.advance(step, lprobs)
    tokens = search.tokens.tensor[:, 1:4]
    assert not tokens.eq(7).any() and search.scores.tensor[:, :3].isfinite().all()


def test_search_without_its_done_sentences_gives_the_same_nbest():
    """Sentences dropped from the search as they finish, one by one (``keep_sentences``), leave
    every sentence's n-best as the search that keeps them all gives it, in the batch's order."""
    from fairseq_san.static_decoding.beam_search import SearchSettings, TensorBeamSearch

    beam, max_len, eos, vocab = 2, 8, DICTIONARY.eos(), len(DICTIONARY)
    finish_at = [3, 1, 5, 2, 6, 4]  # the step at which each sentence has only EOS left
    shape, seeded = (max_len + 1, len(finish_at), beam, vocab), torch.Generator().manual_seed(0)
    logits = torch.randn(*shape, generator=seeded)
    table = torch.log_softmax(logits, dim=-1)
    for sentence, step in enumerate(finish_at):
        table[:step, sentence, :, eos] = float("-inf")  # no EOS before
        table[step, sentence] = float("-inf")
        table[step, sentence, :, eos] = 0.0
    pad, unk = DICTIONARY.pad(), DICTIONARY.unk()
    settings = SearchSettings(beam, 1, max_len, 1.0, True, 0.0, pad, unk, eos)
    searches = [TensorBeamSearch(settings, len(finish_at), eos, "cpu") for _ in range(2)]
    for step in range(max_len + 1):
        for search, dropping in zip(searches, (False, True)):
            if search.done.all():
                continue
            search.advance(step, table[step, search.origin].reshape(-1, vocab).clone())
            live = ~search.done
            if dropping and 0 < int(live.sum()) < search.sentences:
                search.keep_sentences(live.nonzero().view(-1))
    kept_all, dropped = (search.hypotheses() for search in searches)
    assert searches[1].sentences == 1 and len(searches[1].set_aside) == len(finish_at) - 1
    assert_same_hypotheses(kept_all, dropped)
    assert [len(nbest[0]["tokens"]) for nbest in dropped] == [step + 1 for step in finish_at]


def test_the_nbest_lists_are_read_from_the_device_in_a_few_reads():
    """The n-best lists of a batch cost the same few host reads whatever its size (on a GPU each
    read is a sync), and rank ties in the order the hypotheses finished (fairseq's stable
    sort)."""
    from fairseq_san.static_decoding.beam_search import SearchSettings, TensorBeamSearch

    eos, reads = DICTIONARY.eos(), []
    settings = SearchSettings(4, 1, 3, 1.0, True, 0.0, DICTIONARY.pad(), DICTIONARY.unk(), eos)
    for sentences in (2, 8):
        search = TensorBeamSearch(settings, sentences, eos, "cpu")
        for step in range(4):  # EOS forced at max_len 3: every sentence is done
            lprobs = torch.log_softmax(torch.randn(sentences * 4, len(DICTIONARY)), dim=-1)
            search.advance(step, lprobs)
        with HostReads() as counter:
            nbests = search.hypotheses()
        reads.append(counter.reads)
        assert [len(nbest) for nbest in nbests] == [4] * sentences
    assert reads[0] == reads[1] <= 4, reads
    search = TensorBeamSearch(settings, 1, eos, "cpu")
    search.final_count.fill_(3)
    search.final_scores.copy_(torch.tensor([[-1.0, -2.0, -1.0, 0.0, 5.0]]))
    search.final_lengths.copy_(torch.tensor([[1, 2, 3, 4, 4]]))
    lengths = [len(hypothesis["tokens"]) for hypothesis in search.hypotheses()[0]]
    assert lengths == [1, 3, 2]  # the tie (-1) in slot order; slot 3 and the spare are not stored


def test_tensor_steps_keep_minus_infinity_where_int_steps_do():
    """The device path turns NaN into -inf on every score (fairseq's rule) and must leave -inf as
    it is: torch's nan_to_num makes it the dtype's lowest finite number by default, and a
    forbidden EOS (before min_len) would then rank above NaN's -inf and finish hypotheses (on the
    host path too, once a NaN is among the candidates). Where one row of each sentence has one
    finite token and the rest are NaN, int and tensor steps give the same n-best, and no
    hypothesis ends before min_len."""
    from fairseq_san.static_decoding.beam_search import SearchSettings, TensorBeamSearch

    eos, vocab, beam, max_len = DICTIONARY.eos(), len(DICTIONARY), 4, 5
    min_len = 3
    settings = SearchSettings(beam, min_len, max_len, 1.0, True, 0.0, DICTIONARY.pad(),
                              DICTIONARY.unk(), eos)  # fmt: skip
    generator = torch.Generator().manual_seed(0)
    table = torch.log_softmax(torch.randn(max_len + 1, 2 * beam, vocab, generator=generator), -1)
    table[1] = float("nan")
    table[1, ::beam, eos + 1] = -1.0  # the first hypothesis of each sentence: one finite token
    searches = [TensorBeamSearch(settings, 2, eos, "cpu") for _ in range(2)]
    for step in range(max_len + 1):
        for search, position in zip(searches, (step, torch.tensor([step]))):
            search.advance(step if step == 0 else position, table[step].clone())  # 0: an int
    int_steps, tensor_steps = (search.hypotheses() for search in searches)
    for ours, theirs in zip(int_steps, tensor_steps):
        assert [h["tokens"].tolist() for h in ours] == [h["tokens"].tolist() for h in theirs]
        assert min(len(h["tokens"]) for h in ours) > min_len
        assert torch.equal(torch.stack([h["score"] for h in ours]),
                           torch.stack([h["score"] for h in theirs]))  # fmt: skip


@pytest.mark.parametrize("on_device", [False, True], ids=["int-steps", "tensor-steps"])
def test_live_sentences_after_max_len_are_an_error(on_device):
    """EOS is forced at max_len; a model that never gives EOS a finite log-probability leaves
    sentences live there, which both paths report in one error (not short n-best lists)."""
    from fairseq_san.static_decoding.beam_search import SearchSettings, TensorBeamSearch

    eos, max_len = DICTIONARY.eos(), 2
    pad, unk = DICTIONARY.pad(), DICTIONARY.unk()
    settings = SearchSettings(2, 1, max_len, 1.0, True, 0.0, pad, unk, eos)
    search = TensorBeamSearch(settings, 2, eos, "cpu")
    with pytest.raises(RuntimeError, match="reached max_len 2 with live sentences"):
        for step in range(max_len + 1):
            lprobs = torch.log_softmax(torch.randn(4, len(DICTIONARY)), dim=-1)
            lprobs[:, eos] = float("-inf")
            if on_device and step > 0:  # the generator after a replay (position 0: an int)
                search.advance(torch.tensor([step]), lprobs)
                assert not bool(search.done.all())
                search.check_max_len(step)
            else:
                search.advance(step, lprobs)
    assert step == max_len


def test_tensor_steps_refuse_sampling_and_prefix_tokens():
    """A device-tensor position (what a CUDA graph captures) serves beam search only: sampling
    and prefix forcing need the host's position, and say so rather than ignore it."""
    from fairseq.search import Sampling

    from fairseq_san.static_decoding.beam_search import SearchSettings, TensorBeamSearch

    settings = SearchSettings(2, 1, 5, 1.0, True, 0.0, DICTIONARY.pad(), DICTIONARY.unk(), 2)
    lprobs = torch.log_softmax(torch.randn(4, len(DICTIONARY)), dim=-1)
    prefix = torch.full((2, 6), DICTIONARY.pad())
    search = TensorBeamSearch(settings, 2, DICTIONARY.eos(), "cpu", prefix)
    with pytest.raises(ValueError, match="take int steps"):
        search.advance(torch.tensor([1]), lprobs)
    sampling = SearchSettings(2, 1, 5, 1.0, True, 0.0, DICTIONARY.pad(), DICTIONARY.unk(), 2,
                              Sampling(DICTIONARY))  # fmt: skip
    with pytest.raises(ValueError, match="take int steps"):
        TensorBeamSearch(sampling, 2, DICTIONARY.eos(), "cpu").advance(torch.tensor([1]), lprobs)


# --- through the command-line tools ----------------------------------------------------------


@pytest.fixture(scope="module")
def checkpoint(binarized_corpus, tmp_path_factory) -> Path:
    """A tiny SAN {1,5}/{3,3} model trained for 60 updates on the synthetic corpus."""
    save_dir = tmp_path_factory.mktemp("static")
    policy = ["--san-decoder-self-policy", "1,5", "--san-decoder-encdec-policy", "3,3"]
    result = run_cli("fairseq-train", *train_argv(binarized_corpus, save_dir, 60, policy))
    assert result.returncode == 0, result.stderr[-3000:]
    return save_dir / "checkpoint_last.pt"


def generate_cli(data: Path, checkpoint: Path, *extra: str) -> subprocess.CompletedProcess:
    """fairseq-generate's n-best 2 at beam 4 of the test split, with ``extra`` options; outputs
    of at most the source's length + 5 but with --match-source-len, which ignores (and refuses)
    the limit."""
    length = () if "--match-source-len" in extra else ("--max-len-a", "1", "--max-len-b", "5")
    return run_cli(
        "fairseq-generate", str(data),
        "--user-dir", "fairseq_san", "--task", "translation_san",
        "--path", str(checkpoint), "--gen-subset", "test",
        "--beam", "4", "--nbest", "2", "--batch-size", "8", "--cpu",
        *length, "--required-batch-size-multiple", "1",
        *extra,
    )  # fmt: skip


def output_lines(stdout: str):
    """The hypothesis and positional-score lines of fairseq-generate / interactive output."""
    return [line for line in stdout.splitlines() if line[:2] in ("H-", "P-", "D-")]


def assert_same_output(expected: str, actual: str) -> int:
    """Same hypothesis lines (text exact; scores, printed with 4 decimals, at most one unit of the
    last apart: two sums in float32 may fall either side of a rounding boundary); returns the
    number of H- lines."""
    expected_lines, actual_lines = output_lines(expected), output_lines(actual)
    assert len(expected_lines) == len(actual_lines)
    for a, b in zip(expected_lines, actual_lines):
        a_fields, b_fields = a.split("\t"), b.split("\t")
        assert a_fields[0] == b_fields[0] and a_fields[2:] == b_fields[2:], (a, b)
        scores_a = [float(x) for x in a_fields[1].split()]
        scores_b = [float(x) for x in b_fields[1].split()]
        assert scores_a == pytest.approx(scores_b, abs=1.01e-4, rel=0)
    return sum(line.startswith("H-") for line in actual_lines)


@pytest.mark.slow
def test_static_generate_refuses_what_it_cannot_do(binarized_corpus, checkpoint):
    """Options the static decoder does not support (its n-best: the next test)."""
    refused = generate_cli(
        binarized_corpus, checkpoint, "--san-decoding", "static", "--retain-dropout"
    )
    assert refused.returncode != 0
    assert refused.stderr.strip().splitlines()[-1] == (
        "fairseq-san: error: --san-decoding static does not support --retain-dropout; "
        "decode with fairseq's own decoder (--san-decoding fairseq, the default) to use it"
    )
    assert "Traceback" not in refused.stderr
    on_cpu = generate_cli(  # offered on the command line, a GPU's only
        binarized_corpus, checkpoint, "--san-decoding", "static",
        "--san-decoder-execution", "compile-graph",
    )  # fmt: skip
    assert on_cpu.returncode != 0 and "Traceback" not in on_cpu.stderr
    assert on_cpu.stderr.strip().splitlines()[-1].startswith(
        "fairseq-san: error: --san-decoding static does not support the execution 'compile-graph' "
        "on CPU"
    )


@pytest.mark.slow
def test_fairseq_generate_san_decoding(binarized_corpus, checkpoint):
    """Every value of --san-decoding prints fairseq's n-best (static with --prefix-size and
    --no-repeat-ngram-size, --match-source-len, diverse beam search and diverse siblings, its
    samples with --sampling --seed, and its alignments with --print-alignment);
    --san-decoder static still works and says once what replaces it."""
    fairseq = generate_cli(binarized_corpus, checkpoint)
    assert fairseq.returncode == 0, fairseq.stderr[-3000:]
    assert "SAN decoding: fairseq (SequenceGenerator)" in fairseq.stderr
    said = {"no-cache": "no-cache (SequenceGenerator)", "fast": "fast (SequenceGenerator)",
            "static": "static (StaticSequenceGenerator, precision fp32, execution eager)"}
    for decoding in ("no-cache", "fast", "static"):
        result = generate_cli(binarized_corpus, checkpoint, "--san-decoding", decoding)
        assert result.returncode == 0, result.stderr[-3000:]
        assert f"SAN decoding: {said[decoding]}" in result.stderr  # not fairseq's with itself
        assert assert_same_output(fairseq.stdout, result.stdout) == 40, decoding
        assert "is deprecated: use --san-decoding" not in result.stderr
    for options, hypotheses in (
        (("--prefix-size", "2", "--no-repeat-ngram-size", "2"), 40),
        (("--sampling", "--sampling-topk", "5", "--seed", "3", "--nbest", "4"), 80),
        (("--match-source-len",), 40),
        (("--diverse-beam-groups", "2", "--nbest", "4"), 80),
        (("--diversity-rate", "0.5", "--no-repeat-ngram-size", "2"), 40),
        (("--print-alignment",), 40),
    ):
        fairseqs, static = [
            generate_cli(binarized_corpus, checkpoint, "--san-decoding", decoding, *options)
            for decoding in ("fairseq", "static")
        ]
        assert assert_same_output(fairseqs.stdout, static.stdout) == hypotheses, options
        alignments = [line for line in static.stdout.splitlines() if line.startswith("A-")]
        assert alignments == [line for line in fairseqs.stdout.splitlines() if line[:2] == "A-"]
        assert len(alignments) == (hypotheses if "--print-alignment" in options else 0)
    old = generate_cli(binarized_corpus, checkpoint, "--san-decoder", "static")
    assert old.stderr.count("--san-decoder static is deprecated: use --san-decoding static") == 1


@pytest.mark.slow
def test_fairseq_generate_fuses_a_language_model(binarized_corpus, checkpoint, tmp_path):
    """fairseq-generate --lm-path --lm-weight: fairseq's n-best from the static decoder, with the
    language model as fairseq-generate loads and prepares it (``make_generation_fast_``, after
    which its ``eval()`` returns None: an AttributeError in the static decoder once); the
    fusion changed the output."""
    raw, lm_data, lm = binarized_corpus.parent / "raw", tmp_path / "lm-bin", tmp_path / "lm"
    preprocessed = run_cli(
        "fairseq-preprocess", "--only-source", "--srcdict", str(binarized_corpus / "dict.tgt.txt"),
        "--trainpref", f"{raw}/train.tgt", "--validpref", f"{raw}/valid.tgt",
        "--destdir", str(lm_data), "--workers", "1",
    )  # fmt: skip
    assert preprocessed.returncode == 0, preprocessed.stderr[-3000:]
    trained = run_cli("fairseq-train", *lm_train_argv(lm_data, lm))
    assert trained.returncode == 0, trained.stderr[-3000:]
    data = tmp_path / "data"  # fairseq-generate loads the language model with DATA/dict.txt
    data.mkdir()
    for path in binarized_corpus.iterdir():
        (data / path.name).symlink_to(path.resolve())
    (data / "dict.txt").symlink_to((binarized_corpus / "dict.tgt.txt").resolve())
    fusion = ("--lm-path", str(lm / "checkpoint_last.pt"), "--lm-weight", "0.5")
    fairseqs, static = [
        generate_cli(data, checkpoint, "--san-decoding", decoding, *fusion)
        for decoding in ("fairseq", "static")
    ]
    assert static.returncode == 0, static.stderr[-3000:]
    assert assert_same_output(fairseqs.stdout, static.stdout) == 40
    assert output_lines(static.stdout) != output_lines(generate_cli(data, checkpoint).stdout)


@pytest.mark.slow
def test_fairseq_interactive(binarized_corpus, checkpoint):
    """fairseq's n-best from the static decoder, and with --constraints (after a tab on each
    input line: here the last word of each reference) and --print-alignment."""
    raw = binarized_corpus.parent / "raw"
    source = (raw / "test.src").read_text()
    last_words = [line.split()[-1] for line in (raw / "test.tgt").read_text().splitlines()]
    constrained = "".join(
        f"{line}\t{word}\n" for line, word in zip(source.splitlines(), last_words)
    )

    def interactive(*extra: str, input: str = source) -> subprocess.CompletedProcess:
        return run_cli(
            "fairseq-interactive", str(binarized_corpus),
            "--user-dir", "fairseq_san", "--task", "translation_san",
            "--source-lang", "src", "--target-lang", "tgt",
            "--path", str(checkpoint), "--beam", "4", "--cpu", "--buffer-size", "4",
            "--batch-size", "4", "--max-len-a", "1", "--max-len-b", "5", *extra, input=input,
        )  # fmt: skip

    fairseq, static = interactive(), interactive("--san-decoding", "static")
    assert fairseq.returncode == 0 and static.returncode == 0, static.stderr[-3000:]
    assert "SAN decoding: static (StaticSequenceGenerator" in static.stderr
    assert assert_same_output(fairseq.stdout, static.stdout) == 20
    fairseqs, statics = [  # constrained search finishes some with fewer than 4 hypotheses
        interactive("--san-decoding", decoding, "--constraints", "--print-alignment",
                    input=constrained)
        for decoding in ("fairseq", "static")
    ]  # fmt: skip
    assert fairseqs.returncode == 0, fairseqs.stderr[-3000:]  # IndexError: fairseq's alignment
    assert statics.returncode == 0, statics.stderr[-3000:]
    assert assert_same_output(fairseqs.stdout, statics.stdout) == 20
    alignments = [re.findall(r"^A-.*$", run.stdout, re.M) for run in (fairseqs, statics)]
    assert len(alignments[0]) == 20 and alignments[0] == alignments[1]
    hypotheses = [line.split("\t")[2] for line in output_lines(statics.stdout) if line[0] == "H"]
    assert all(word in hypothesis.split() for word, hypothesis in zip(last_words, hypotheses))
    assert output_lines(statics.stdout) != output_lines(static.stdout)


def test_precision_table_drives_the_help_and_the_devices():
    """A precision is one row: the help names each, and its devices are checked from it."""
    from fairseq_san.static_decoding.precision import PRECISIONS, check_device, precision_help

    text = precision_help()
    for name, row in PRECISIONS.items():
        assert f"{name}: {row.cast}" in text
    check_device("int8", torch.device("cpu"))
    check_device("bf16", torch.device("cuda"))
    on_gpu = " or ".join(name for name, row in PRECISIONS.items() if "cuda" in row.devices)
    choose = f"choose --san-decoder-precision {on_gpu} on a GPU"
    with pytest.raises(StaticDecoderError, match=rf"int8 on a GPU \(CPU only\); {choose}$"):
        check_device("int8", torch.device("cuda"))


def test_a_precision_the_device_cannot_run_is_refused_before_a_fused_lm_is_converted(
    monkeypatch,
):
    """int8 asked for on a GPU with --lm-path: the language model was quantized (torch.ao's CPU
    kernels on CUDA weights) before the device was checked, a traceback from torch."""
    from fairseq_san.static_decoding import fusion

    model, _ = build([], dictionary=DICTIONARY, seed=1)
    lm, _ = build_lm([], dictionary=DICTIONARY, seed=4)
    converted = []
    monkeypatch.setattr(fusion, "apply_precision", lambda *args, **kwargs: converted.append(args))
    with pytest.raises(StaticDecoderError, match=r"int8 on a GPU \(CPU only\)"):
        StaticSequenceGenerator([model], DICTIONARY, beam_size=2, precision="int8", lm_model=lm,
                                lm_weight=0.5, device=torch.device("cuda"))  # fmt: skip
    assert converted == []


@pytest.mark.parametrize("kernels", [True, False])
def test_bfloat16_on_a_cpu_without_its_kernels_is_a_warning(monkeypatch, caplog, kernels):
    """Without oneDNN's bfloat16 kernels (a CPU without AVX-512) every bfloat16 row logs that it
    is slower than fp32 there, and names the faster ones; fp32 and int8 never warn, nor does a
    GPU, nor bfloat16 where the kernels are."""
    from fairseq_san.static_decoding import precision as precisions

    monkeypatch.setattr(precisions, "can_pack", lambda device, dtype: kernels)
    monkeypatch.setattr(precisions, "bfloat16_emulated", lambda device: False)
    for name, row in precisions.PRECISIONS.items():
        for device in ("cpu", "cuda"):
            caplog.clear()
            precisions.warn_if_slower_than_fp32(name, torch.device(device))
            warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
            expected = row.peak == "bf16" and device == "cpu" and not kernels
            assert len(warned) == expected, (name, device, warned)
            if expected:
                assert warned[0].startswith(f"--san-decoder-precision {name} on a CPU without")
                assert warned[0].endswith("--san-decoder-precision int8 or fp32 decode faster")


@pytest.mark.parametrize("kernels", [True, False])
def test_a_bfloat16_generator_warns_where_this_cpu_lacks_the_kernels(caplog, monkeypatch, kernels):
    """The generator checks the machine it runs on (the warning's own cases: the test above);
    the machine stands in, with and without oneDNN's bfloat16 kernels (on this one, with them,
    the test could not fail)."""
    from fairseq_san.static_decoding import precision

    monkeypatch.setattr(precision, "can_pack", lambda device, dtype: kernels)
    monkeypatch.setattr(precision, "bfloat16_emulated", lambda device: False)
    model = build([], dictionary=DICTIONARY)[0]
    StaticSequenceGenerator([model], DICTIONARY, beam_size=2, precision="bf16")
    warned = [r for r in caplog.records if "on a CPU without bfloat16 kernels" in r.getMessage()]
    assert len(warned) == (not kernels)


@pytest.mark.parametrize(
    "capability, avx512_bf16, amx, emulated",
    [("AVX512", False, False, True), ("AVX512", True, False, False),
     ("AVX512", False, True, False), ("SVE256", False, False, False)],
)  # fmt: skip
def test_bfloat16_emulated_by_onednn_is_a_warning(monkeypatch, caplog, capability, avx512_bf16,
                                                  amx, emulated):
    """An Intel Ice Lake (AVX-512, no AVX512-BF16, no AMX) has oneDNN's bfloat16 kernels, which
    emulate it there: the bfloat16 rows ran at about half fp32's speed without a word (0.93x
    fairseq against the static fp32 row's 1.72x, docs/results/cpu-yardstick/icelake-2026-12-04).
    A processor with the instructions, or not an x86 one, is not warned of."""
    from fairseq_san.static_decoding import precision as precisions

    monkeypatch.setattr(precisions, "can_pack", lambda device, dtype: True)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    assert precisions.bfloat16_emulated(torch.device("cpu")) == emulated
    precisions.warn_if_slower_than_fp32("bf16-full", torch.device("cpu"))
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warned == ([
        f"--san-decoder-precision bf16-full on a CPU without bfloat16 instructions (torch's CPU "
        f"capability: {capability}, without AVX512-BF16 or AMX: oneDNN emulates them): its "
        "products run slower than at fp32 here; --san-decoder-precision int8 or fp32 decode faster"
    ] if emulated else [])  # fmt: skip


def test_reduced_precision_of_a_model_not_in_float32_names_the_way_out():
    model = build([], dictionary=DICTIONARY)[0].to(torch.bfloat16)
    way_out = "--san-decoder-precision fp32 decodes it in its own precision"
    with pytest.raises(StaticDecoderError, match=f"bf16 with a model not float32; {way_out}$"):
        StaticSequenceGenerator([model], DICTIONARY, beam_size=4, precision="bf16")

