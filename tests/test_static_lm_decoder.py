"""The static decoder for language models (``--san-decoding static`` with ``language_modeling_san``):
the same output as fairseq's SequenceGenerator (greedy, beam) given a prompt as prefix tokens, as
the language modelling task calls it; the prompt prefilled in one pass; V-only caches for SAN
followers, none for KV followers; sampling restricted and seeded."""

import itertools
import logging
from functools import partial
from types import SimpleNamespace

import pytest
import torch
from fairseq.search import Sampling
from fairseq.sequence_generator import SequenceGenerator

from helpers import (
    ATOL,
    assert_same_hypotheses,
    build,
    build_lm,
    calls_of,
    counting_backend,
    graphed_generator,
    make_dictionary,
    recording_capture,
)
from fairseq_san.errors import UsageError
from fairseq_san.static_decoding.caches import allocate_cache
from fairseq_san.static_decoding.errors import StaticDecoderError
from fairseq_san.static_decoding.lm_generator import StaticLMGenerator, build_static_lm_generator
from fairseq_san.static_decoding.step import StaticDecoderStep

DICT = make_dictionary(40)
# The generator of a CUDA-graph execution on the CPU (stand-in capture).
graphed_lm = partial(graphed_generator, StaticLMGenerator, DICT)
HEADS, HEAD_DIM = 2, 8  # TINY_LM: 16 dimensions, 2 heads
SYSTEMS = {
    "baseline": [],
    "san 2,4": ["--san-decoder-self-policy", "2,4"],
    "san 6": ["--san-decoder-self-policy", "6"],
    "kv 2,2,2": ["--san-decoder-self-policy", "2,2,2", "--san-self-share", "kv"],
    "kv 3,1,1,1": ["--san-decoder-self-policy", "3,1,1,1", "--san-self-share", "kv"],
}


def language_model(system: str):
    """A tiny transformer_lm_san whose distributions are far from uniform (scaled embeddings)."""
    model, _ = build_lm(SYSTEMS[system], dictionary=DICT)
    with torch.no_grad():
        model.decoder.embed_tokens.weight.mul_(4)
    return model


def prompts(lengths, seed: int = 0) -> torch.Tensor:
    """Random prompts (no start token), padded on the right as the LM task's batches are."""
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.full((len(lengths), max(lengths)), DICT.pad(), dtype=torch.long)
    for row, length in enumerate(lengths):
        tokens[row, :length] = torch.randint(DICT.nspecial, len(DICT), (length,), generator=generator)
    return tokens


def sample_of(prefix: torch.Tensor) -> dict:
    """The batch the LM task decodes: the start token, then the prompt."""
    start = torch.full((prefix.size(0), 1), DICT.eos(), dtype=torch.long)
    src_tokens = torch.cat([start, prefix], dim=1)
    return {"net_input": {"src_tokens": src_tokens, "src_lengths": src_tokens.ne(DICT.pad()).sum(1)}}


def generate(generator, model, prefix: torch.Tensor):
    with torch.no_grad():
        return generator.generate([model], sample_of(prefix), prefix_tokens=prefix, bos_token=DICT.eos())


@pytest.mark.parametrize("system", list(SYSTEMS))
@pytest.mark.parametrize("lengths", [(5, 5, 5), (2, 6, 4), (0, 0)], ids=["equal", "ragged", "none"])
@pytest.mark.parametrize("execution", ["eager", "fixed"])
def test_greedy_equals_fairseqs_generator(system, lengths, execution):
    model = language_model(system)
    prefix = prompts(lengths)
    options = dict(beam_size=1, max_len_b=14, min_len=3)
    theirs = generate(SequenceGenerator([model], DICT, **options), model, prefix)
    ours = generate(StaticLMGenerator([model], DICT, execution=execution, **options), model, prefix)
    assert_same_hypotheses(ours, theirs, ATOL)
    assert all(len(hypos[0]["tokens"]) > length for hypos, length in zip(ours, lengths))


@pytest.mark.parametrize("system", ["baseline", "san 2,4", "kv 3,1,1,1"])
def test_beam_search_with_a_prompt_equals_fairseqs(system):
    model = language_model(system)
    prefix = prompts((3, 5))
    options = dict(beam_size=4, max_len_b=12)
    theirs = generate(SequenceGenerator([model], DICT, **options), model, prefix)
    ours = generate(StaticLMGenerator([model], DICT, **options), model, prefix)
    assert_same_hypotheses(ours, theirs, ATOL)


@pytest.mark.parametrize("decoder", [SequenceGenerator, StaticLMGenerator])
@pytest.mark.parametrize("beam", [1, 3])
def test_min_len_holds_for_a_prompt_shorter_than_its_batchs_longest(decoder, beam):
    """fairseq applied no min_len up to the batch's longest prompt: a shorter prompt's
    hypotheses ended there before min_len, and its output depended on the prompts beside it."""
    model = language_model("san 2,4")
    projection = model.decoder.output_projection  # EOS the likeliest: only min_len holds it
    projection.bias = torch.nn.Parameter(torch.zeros(projection.out_features))
    projection.bias.data[DICT.eos()] = 50.0
    prefix = prompts((1, 6), seed=3)
    options = dict(beam_size=beam, max_len_b=12, min_len=8)
    together = generate(decoder([model], DICT, **options), model, prefix)
    alone = generate(decoder([model], DICT, **options), model, prefix[:1, :1])
    assert_same_hypotheses(together[:1], alone, ATOL)
    assert all(len(hypo["tokens"]) > 8 for hypos in together for hypo in hypos)


@pytest.mark.parametrize("beam", [1, 3])
def test_a_prompt_ending_in_eos_finishes_every_hypothesis_as_fairseqs(beam):
    """fairseq-generate --prefix-size N forces a language model's targets, EOS included when a
    sentence is shorter than N: forcing had left all hypotheses but the first at -inf, so EOS
    finished one and beam search failed at max_len; fairseq copies the first hypothesis to the
    others. EOS inside the prompt every sentence has (its one pass) and after it."""
    model = language_model("san 2,4")
    prefix = prompts((6, 6, 6), seed=3)
    prefix[0, 2], prefix[0, 3:] = DICT.eos(), DICT.pad()
    prefix[1, 4], prefix[1, 5:] = DICT.eos(), DICT.pad()
    options = dict(beam_size=beam, max_len_b=12)
    theirs = generate(SequenceGenerator([model], DICT, **options), model, prefix)
    ours = generate(StaticLMGenerator([model], DICT, **options), model, prefix)
    assert_same_hypotheses(ours, theirs, ATOL)
    assert [len(hypos) for hypos in ours] == [beam] * 3


@pytest.mark.parametrize("system", ["baseline", "san 2,4", "kv 3,1,1,1"])
def test_done_prompts_leave_the_batch_and_the_output_stays_fairseqs(system, monkeypatch):
    """Prompts whose search is done leave the batch (here as soon as one is), caches and search
    together, ragged prompts still being forced; fairseq's output all the same."""
    from fairseq_san.static_decoding import generator
    from fairseq_san.static_decoding.caches import DecoderCache

    monkeypatch.setattr(generator, "DROP_DONE_AT", 1.0)
    dropped = calls_of(monkeypatch, DecoderCache, "keep_sentences")
    model = language_model(system)
    with torch.no_grad():  # EOS likely at some positions: prompts end at different steps
        weight = model.decoder.output_projection.weight
        direction = torch.randn(weight.size(1), generator=torch.Generator().manual_seed(0))
        weight[DICT.eos()] += 1.5 * direction
    prefix = prompts((2, 6, 4, 3, 5, 1), seed=3)  # forced up to 6 positions, 1 for all
    for beam in (1, 4):
        options = dict(beam_size=beam, max_len_b=20)
        theirs = generate(SequenceGenerator([model], DICT, **options), model, prefix)
        ours = generate(StaticLMGenerator([model], DICT, **options), model, prefix)
        assert_same_hypotheses(ours, theirs, ATOL)
    kept = [len(sentences) for sentences, _, _ in dropped]
    assert len(set(kept)) >= 3, kept  # several times per batch


@pytest.mark.parametrize("system", ["baseline", "san 2,4", "kv 3,1,1,1"])
def test_positions_after_the_longest_prompt_are_captured_with_the_search(system):
    """With CUDA graphs (stand-in capture; no host sync, checked operator by operator), a
    position after the longest prompt is one captured position (step, search, reordering), a
    ragged prompt's forced one the step alone; fairseq's output, greedy and beam, and a second
    batch of the same shape replays both on the search and cache kept for it."""
    model = language_model(system)
    for beam in (1, 4):
        captures = []
        options = dict(beam_size=beam, max_len_b=14)
        graphed = graphed_lm(model, recording_capture(captures), **options)
        for lengths, seed in (((2, 6, 4), 0), ((5, 1, 3), 1)):
            prefix = prompts(lengths, seed)
            theirs = generate(SequenceGenerator([model], DICT, **options), model, prefix)
            assert_same_hypotheses(generate(graphed, model, prefix), theirs, ATOL)
        assert len(graphed.run_search_step.replays) == len(graphed.run_step.replays) == 1
        assert len(captures) == 2 and len(graphed._searches) == len(graphed._caches) == 1


def test_a_kept_cache_starts_the_next_batch_clean():
    """A language model's cache kept for its shape was never zeroed between batches (only the
    encoder's hand-over did it, for translation): a NaN left in a slot by one batch turned the
    next batch's masked positions (weight 0 times NaN) into NaN."""
    model = language_model("san 2,4")
    options = dict(beam_size=4, max_len_b=14)
    graphed = graphed_lm(model, recording_capture([]), **options)
    for lengths, seed in (((2, 6, 4), 0), ((5, 1, 3), 1)):
        prefix = prompts(lengths, seed)
        theirs = generate(SequenceGenerator([model], DICT, **options), model, prefix)
        assert_same_hypotheses(generate(graphed, model, prefix), theirs, ATOL)
        for cache in graphed._caches.values():
            cache.self_attention.tensor.fill_(float("nan"))  # what an earlier batch may leave


def test_compiled_step_captured_for_a_language_model_gives_fairseqs_output():
    """``compile-graph``, offered to language models too (CUDA only; on the CPU a counting
    backend stands in for inductor, and a stand-in capture for CUDA's that replays by calling
    the step again: dynamo compiles nothing under the recording one): fairseq's beam output
    with ragged prompts; two captures (the forced positions' step alone, and the search's) of a
    step compiled once, as both run it on the same rows; a second batch of the same shape
    compiles nothing more."""
    graphs, captures = [], []

    model = language_model("san 2,4")
    options = dict(beam_size=4, max_len_b=14)
    calling = recording_capture(captures, record=False)
    graphed = graphed_lm(model, calling, execution="compile-graph",
                         compile_backend=counting_backend(graphs), **options)  # fmt: skip
    for lengths, seed in (((2, 6, 4), 0), ((5, 1, 3), 1)):
        prefix = prompts(lengths, seed)
        theirs = generate(SequenceGenerator([model], DICT, **options), model, prefix)
        assert_same_hypotheses(generate(graphed, model, prefix), theirs, ATOL)
    assert len(captures) == 2 and len(graphs) == 1


def test_sampling_with_cuda_graphs_captures_the_step_alone():
    """Sampling draws on the host's position: its positions replay the step alone, and the
    draws, seeded, are those of the uncaptured fixed-layout step."""
    model = language_model("san 2,4")
    options = dict(beam_size=2, max_len_b=12)
    captures = []
    graphed = graphed_lm(model, recording_capture(captures), **options,
                         search_strategy=Sampling(DICT, 5))  # fmt: skip
    eager = StaticLMGenerator([model], DICT, execution="fixed", **options,
                              search_strategy=Sampling(DICT, 5))  # fmt: skip
    prefix = prompts((3, 3, 3, 3))
    torch.manual_seed(1)
    expected = generate(eager, model, prefix)
    torch.manual_seed(1)
    assert_same_hypotheses(generate(graphed, model, prefix), expected, ATOL)
    assert not graphed.run_search_step.replays and len(graphed.run_step.replays) == 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize(
    "system, execution",
    [("san 2,4", None), ("kv 3,1,1,1", None), ("san 2,4", "compile-graph")],
)
def test_cuda_graphs_of_a_language_model_equal_eager(system, execution):
    """On a GPU (CUDA graphs, the default there; and the inductor-compiled step captured),
    ragged prompts greedy and beam: the eager fixed step's n-best (scores within 1e-5; compiled,
    1e-4, as for translation); both captures made, no fall-back."""
    model = language_model(system).cuda()
    prefix = prompts((2, 6, 4)).cuda()
    for beam in (1, 4):
        options = dict(beam_size=beam, max_len_b=14)
        graphed = StaticLMGenerator([model], DICT, execution=execution, **options)
        assert graphed.execution.name == (execution or "graph")
        eager = StaticLMGenerator([model], DICT, execution="fixed", **options)
        sample = {"net_input": {k: v.cuda() for k, v in sample_of(prefix.cpu())["net_input"].items()}}
        with torch.no_grad():
            expected, actual = (
                generator.generate([model], sample, prefix_tokens=prefix, bos_token=DICT.eos())
                for generator in (eager, graphed)
            )
            assert_same_hypotheses(list(actual), list(expected), 1e-4 if execution else 1e-5)
        for replays in (graphed.run_step.replays, graphed.run_search_step.replays):
            assert len(replays) == 1 and None not in replays.values()


@pytest.mark.parametrize("system", list(SYSTEMS))
def test_the_prefill_equals_one_step_per_position(system):
    """The prompt's log-probabilities and caches from one pass equal those of the steps."""
    step = StaticDecoderStep(language_model(system).decoder)
    tokens = torch.cat([torch.full((3, 1), DICT.eos()), prompts((6, 6, 6))], dim=1)

    def cache():
        made = allocate_cache(3, 8, step.self_slots, HEADS, 0, 16, torch.float32, torch.device("cpu"))
        step.prepare(None, None, made, 8)
        return made

    by_prefill, by_steps = cache(), cache()
    with torch.no_grad():
        prefilled = step.prefill(tokens, by_prefill)
        stepped = torch.stack([step(tokens[:, i], i, by_steps) for i in range(tokens.size(1))], 1)
    torch.testing.assert_close(prefilled, stepped, atol=1e-5, rtol=1e-5)
    written = slice(0, tokens.size(1))
    torch.testing.assert_close(
        by_prefill.self_attention.tensor[..., written, :],
        by_steps.self_attention.tensor[..., written, :],
        atol=1e-5,
        rtol=1e-5,
    )


@pytest.mark.parametrize(
    "system, slots",
    [("baseline", 12), ("san 2,4", 2 * 2 + 4), ("san 6", 2 + 5), ("kv 2,2,2", 6),
     ("kv 3,1,1,1", 2 * 4)],  # fmt: skip
)
def test_caches_hold_values_only_for_san_followers_and_nothing_for_kv_followers(system, slots):
    """Cache slots per position (HEADS x HEAD_DIM numbers each): keys and values for a layer with
    its own, values for a SAN follower, none for a KV follower."""
    assert StaticDecoderStep(language_model(system).decoder).self_slots == slots


def options(**overrides):
    defaults = dict(beam=1, sampling=True, sampling_topk=-1, sampling_topp=-1.0, max_len_b=12)
    return SimpleNamespace(**{**defaults, **overrides})


def modeling_task():
    """A language-modeling task of ``DICT`` (no model built)."""
    from fairseq_san.tasks.language_modeling_san import (
        LanguageModelingSANConfig,
        LanguageModelingSANTask,
    )

    return LanguageModelingSANTask(LanguageModelingSANConfig(tokens_per_sample=16), DICT)


def sampled(model, seed: int, **overrides):
    torch.manual_seed(seed)
    generator = build_static_lm_generator(modeling_task(), [model], options(**overrides))
    return [hypos[0]["tokens"].tolist() for hypos in generate(generator, model, prompts((3, 3, 3, 3)))]


def test_sampling_is_seeded_and_restricted():
    model = language_model("san 2,4")
    greedy = sampled(model, 0, sampling=False)
    assert sampled(model, 1) == sampled(model, 1)
    assert sampled(model, 1) != sampled(model, 2)
    assert sampled(model, 1) != greedy
    assert sampled(model, 1, sampling_topk=1) == greedy  # top-1: the most probable token
    assert sampled(model, 1, sampling_topp=1e-6) == greedy  # the smallest nucleus: the same


@pytest.mark.parametrize("system", ["baseline", "kv 3,1,1,1"])
def test_sampling_draws_fairseqs_tokens_from_the_same_seed(system):
    """Sampling (plain, top-k, top-p; greedy and with several hypotheses, some of which end
    before others) draws what fairseq's generator draws from the same seed, batch after batch
    (one seed for a whole fairseq-generate run). fairseq's batch holds only the sentences not
    done, so a done sentence must draw no random number: its rows drew them, and every later
    draw differed. Top-p holds
    where both steps' probabilities agree to the last bit, as here: its nucleus's width follows
    them (docs/lm.md)."""
    model = language_model(system)
    lengths = []
    for seed, beam, topk, topp in ((0, 1, -1, -1.0), (2, 3, -1, -1.0), (0, 3, 5, -1.0),
                                   (1, 3, -1, 0.8)):  # fmt: skip
        batches = [prompts((3, 5, 2), seed=seed), prompts((4, 1, 3, 2), seed=seed + 1)]
        torch.manual_seed(seed)
        fairseqs = SequenceGenerator([model], DICT, beam, max_len_b=10,
                                     search_strategy=Sampling(DICT, topk, topp))  # fmt: skip
        theirs = [generate(fairseqs, model, prefix) for prefix in batches]
        torch.manual_seed(seed)
        ours = StaticLMGenerator([model], DICT, beam_size=beam, max_len_b=10,
                                 search_strategy=Sampling(DICT, topk, topp))  # fmt: skip
        for prefix, expected in zip(batches, theirs):
            assert_same_hypotheses(generate(ours, model, prefix), expected, ATOL)
        lengths += [{len(hypos[0]["tokens"]) for hypos in nbest} for nbest in theirs]
    assert any(len(batch) > 1 for batch in lengths)  # sentences of a batch ended apart


@pytest.mark.parametrize("system", ["baseline", "kv 3,1,1,1"])
def test_diverse_searches_choose_fairseqs_continuations(system):
    """--diverse-beam-groups and --diversity-rate after ragged prompts (fairseq's own searches,
    forced through the prompts): fairseq's n-best, batch after batch, eager and with the
    positions after the prompts replayed (stand-in capture)."""
    from fairseq.search import DiverseBeamSearch, DiverseSiblingsSearch

    model = language_model(system)
    batches = [prompts((3, 5, 0, 2), seed=1), prompts((4, 1, 2), seed=2)]
    for beam, diverse in ((4, dict(diverse_beam_groups=2)), (6, dict(diverse_beam_groups=3)),
                          (4, dict(diversity_rate=0.5))):  # fmt: skip
        groups = diverse.get("diverse_beam_groups")

        def search():
            if groups:
                return DiverseBeamSearch(DICT, groups, 0.5)
            return DiverseSiblingsSearch(DICT, diverse["diversity_rate"])

        fairseqs = SequenceGenerator([model], DICT, beam, max_len_b=12, search_strategy=search())
        theirs = [generate(fairseqs, model, prefix) for prefix in batches]
        options = dict(beam_size=beam, max_len_b=12)
        for ours in (StaticLMGenerator([model], DICT, **options, search_strategy=search()),
                     graphed_lm(model, recording_capture([]), **options,
                                search_strategy=search())):  # fmt: skip
            for prefix, expected in zip(batches, theirs):
                assert_same_hypotheses(expected, generate(ours, model, prefix), ATOL)


@pytest.mark.parametrize("representation", ["ordered", "unordered"])
def test_constraints_are_met_as_fairseq_meets_them(representation):
    """--constraints after ragged prompts (fairseq's LexicallyConstrainedBeamSearch; one-token
    constraints, in order or not: this sharp model never completes a phrase, and fairseq's
    generator fails at max_len): fairseq's n-best, eager and with the positions after the
    prompts replayed (stand-in capture)."""
    from fairseq.search import LexicallyConstrainedBeamSearch
    from fairseq.token_generation_constraints import pack_constraints

    model = language_model("san 2,4")
    prefix = prompts((3, 5, 0, 2), seed=1)
    tokens = [[5], [], [7, 9], [11]]
    constraints = pack_constraints([[torch.tensor([word]) for word in words] for words in tokens])
    search = LexicallyConstrainedBeamSearch(DICT, representation)
    fairseqs = SequenceGenerator([model], DICT, 4, max_len_b=24, search_strategy=search)
    with torch.no_grad():
        expected = fairseqs.generate([model], sample_of(prefix), prefix_tokens=prefix,
                                     constraints=constraints, bos_token=DICT.eos())  # fmt: skip
    def constrained():
        search = LexicallyConstrainedBeamSearch(DICT, representation)
        return dict(beam_size=4, max_len_b=24, search_strategy=search)

    for ours in (StaticLMGenerator([model], DICT, **constrained()),
                 graphed_lm(model, recording_capture([]), **constrained())):  # fmt: skip
        actual = ours.generate([model], sample_of(prefix), prefix_tokens=prefix,
                               constraints=constraints, bos_token=DICT.eos())  # fmt: skip
        assert_same_hypotheses(expected, actual, ATOL)
    for words, nbest in zip(tokens, expected):
        best = nbest[0]["tokens"].tolist()
        assert all(word in best for word in words), (words, best)


@pytest.mark.parametrize("system", ["baseline", "san 2,4", "kv 3,1,1,1"])
def test_repeated_ngrams_are_blocked_as_fairseq_blocks_them(system):
    """--no-repeat-ngram-size 2 and 3 after ragged prompts, whose n-grams count (the start token
    too): fairseq's output with beam search (eager, and the positions after the prompts captured
    with the search) and with top-k sampling from the same seed; the blocking changed outputs."""
    model = language_model(system)
    changed = 0
    for size, beam in itertools.product((2, 3), (1, 4)):
        prefix = prompts((3, 5, 0, 2), seed=size)
        options = dict(beam_size=beam, max_len_b=14, no_repeat_ngram_size=size)
        theirs = generate(SequenceGenerator([model], DICT, **options), model, prefix)
        assert_same_hypotheses(generate(StaticLMGenerator([model], DICT, **options), model, prefix),
                               theirs, ATOL)  # fmt: skip
        graphed = graphed_lm(model, recording_capture([]), **options)
        assert_same_hypotheses(generate(graphed, model, prefix), theirs, ATOL)
        unblocked = SequenceGenerator([model], DICT, beam_size=beam, max_len_b=14)
        changed += best_tokens(theirs) != best_tokens(generate(unblocked, model, prefix))
        torch.manual_seed(size)
        fairseqs = SequenceGenerator([model], DICT, search_strategy=Sampling(DICT, 5), **options)
        theirs = generate(fairseqs, model, prefix)
        torch.manual_seed(size)
        ours = StaticLMGenerator([model], DICT, search_strategy=Sampling(DICT, 5), **options)
        assert_same_hypotheses(generate(ours, model, prefix), theirs, ATOL)
    assert changed >= 2, changed


@pytest.mark.parametrize("system", ["baseline", "kv 3,1,1,1"])
def test_a_fused_language_model_continues_as_fairseqs(system):
    """--lm-path and --lm-weight after ragged prompts (shallow fusion, counted at the prompts'
    forced positions too, as fairseq's generator counts it): fairseq's n-best at beams 1 and 4,
    eager and with the positions after the prompts' captured whole, the language model's step
    in them (stand-in capture); the fusion changed the output."""
    model, fused = language_model(system), language_model("san 2,4")
    prefix = prompts((3, 5, 0, 2), seed=1)
    for beam in (1, 4):
        options = dict(beam_size=beam, max_len_b=12)
        fusion = dict(lm_model=fused, lm_weight=0.7)
        theirs = generate(SequenceGenerator([model], DICT, **options, **fusion), model, prefix)
        plain = generate(SequenceGenerator([model], DICT, **options), model, prefix)
        assert best_tokens(plain) != best_tokens(theirs)
        graphed = graphed_lm(model, recording_capture([]), **options, **fusion)
        for ours in (StaticLMGenerator([model], DICT, **options, **fusion), graphed):
            assert_same_hypotheses(theirs, generate(ours, model, prefix), ATOL)
        replays = graphed.run_search_step.replays
        assert len(replays) == 1 and None not in replays.values()


@pytest.mark.parametrize("system", ["baseline", "kv 3,1,1,1"])
def test_match_source_len_decodes_as_fairseqs(system):
    """--match-source-len with ragged prompts (the task's LengthConstrainedBeamSearch: EOS
    forbidden before each sample's length, free from it on; longer hypotheses scored -inf):
    fairseq's output, eager and with the positions after the prompts captured."""
    from fairseq.search import LengthConstrainedBeamSearch

    model = language_model(system)
    prefix = prompts((3, 5, 0, 2), seed=1)
    for beam in (1, 4):
        options = dict(beam_size=beam, match_source_len=True)
        lengths = LengthConstrainedBeamSearch(DICT, 1, 0, 1, 0)  # as the task builds it
        fairseqs = SequenceGenerator([model], DICT, search_strategy=lengths, **options)
        theirs = generate(fairseqs, model, prefix)
        assert [len(hypos[0]["tokens"]) for hypos in theirs] == [5, 7, 2, 4]
        ours = generate(StaticLMGenerator([model], DICT, **options), model, prefix)
        assert_same_hypotheses(ours, theirs, ATOL)
        graphed = graphed_lm(model, recording_capture([]), **options)
        assert_same_hypotheses(generate(graphed, model, prefix), theirs, ATOL)


def test_top_k_samples_only_among_the_k_most_probable_tokens():
    model = language_model("kv 2,2,2")
    for tokens in sampled(model, 3, sampling_topk=3):
        inputs = torch.tensor([[DICT.eos()] + tokens[:-1]])
        with torch.no_grad():
            logits = model(inputs)[0][0]
        logits[:, DICT.pad()] = -float("inf")  # never generated
        ranks = (logits > logits.gather(1, torch.tensor(tokens).unsqueeze(1))).sum(1)
        if len(tokens) == 12 + 1:  # the end forced at max_len (--max-len-b 12)
            ranks = ranks[:-1]
        assert ranks[3:].max() < 3  # after the prompt's 3 tokens


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(sampling=False, sampling_topk=5), "--sampling-topk needs --sampling"),
        (dict(sampling=False, sampling_topp=0.9), "--sampling-topp needs --sampling"),
        (dict(retain_dropout=True), "--retain-dropout"),
    ],
)
def test_options_it_cannot_honour_are_named(overrides, message):
    model = language_model("baseline")
    with pytest.raises(UsageError, match=message):
        build_static_lm_generator(modeling_task(), [model], options(**overrides))


@pytest.mark.parametrize("decoding", ["fairseq", "static"])
def test_alignments_of_a_language_model_are_one_line(decoding):
    """--print-alignment: a language model has no source (fairseq's generator failed inside its
    alignment pass); refused as the task builds either decoder, and by the static generator."""
    task = modeling_task()
    args = options(sampling=False, print_alignment="hard", san_decoding=decoding)
    refused = "^--print-alignment: a language model has no source to align its output to$"
    with pytest.raises(UsageError, match=refused):
        task.build_generator([language_model("baseline")], args)
    with pytest.raises(UsageError, match=refused):
        StaticLMGenerator([language_model("baseline")], DICT, print_alignment="hard")


# Input and output widths other than the layers' (fairseq's transformer_lm defaults them to 512
# whatever --decoder-embed-dim: project_in_dim and project_out_dim).
OTHER_WIDTHS = ["--decoder-input-dim", "8", "--decoder-output-dim", "24"]


@pytest.mark.parametrize("arch", ["transformer_lm", "transformer_lm_san"])
def test_input_and_output_widths_other_than_the_layers_decode_as_fairseqs(arch):
    """The caches are as wide as the layers (--decoder-embed-dim), not as the input embeddings:
    sized by the input's width, the first prompt's keys did not fit them (a RuntimeError)."""
    model, _ = build_lm(OTHER_WIDTHS, arch=arch, dictionary=DICT)
    assert model.decoder.project_in_dim is not None and model.decoder.project_out_dim is not None
    with torch.no_grad():
        model.decoder.embed_tokens.weight.mul_(4)
    prefix = prompts((2, 5, 3))
    for beam in (1, 3):
        options = dict(beam_size=beam, max_len_b=12)
        theirs = generate(SequenceGenerator([model], DICT, **options), model, prefix)
        ours = generate(StaticLMGenerator([model], DICT, **options), model, prefix)
        assert_same_hypotheses(ours, theirs, ATOL)


@pytest.mark.parametrize(
    "argv, named",
    [(["--adaptive-input", "--adaptive-input-cutoff", "10,20"], "--adaptive-input"),
     (["--character-embeddings", "--character-filters", "[(1, 4), (2, 8)]",
       "--character-embedding-dim", "4", "--char-embedder-highway-layers", "1"],
      "--character-embeddings")],
)  # fmt: skip
def test_input_embeddings_other_than_one_table_are_refused(argv, named):
    """The step looks a token's vector up in one table: an AttributeError ('AdaptiveInput'
    object has no attribute 'weight') when the generator was built, before."""
    model, _ = build_lm(argv, arch="transformer_lm", dictionary=DICT)
    with pytest.raises(StaticDecoderError, match=f"^--san-decoding static does not support {named}; "):
        StaticLMGenerator([model], DICT, beam_size=2)


def test_a_decoder_with_encoder_attention_has_no_prefill():
    step = StaticDecoderStep(build([])[0].decoder)
    with pytest.raises(StaticDecoderError, match="prefill with AAN or encoder-decoder attention"):
        step.check_prefill()


# --- the task's refusal of a prompt that fills the output length (--max-len-b) ---------------

GENERATORS = {"fairseq": SequenceGenerator, "static": StaticLMGenerator}


def lm_task():
    """(language_modeling_san's task, a tiny model of 16 positions it built): the task keeps the
    model's positions for ``check_prompt``."""
    task = modeling_task()
    _, args = build_lm(["--tokens-per-sample", "16"], dictionary=DICT)
    return task, task.build_model(args).eval()


def best_tokens(hypotheses) -> list:
    return [hypos[0]["tokens"].tolist() for hypos in hypotheses]


# Prompts that are the batch's samples (fairseq-interactive's lines, fairseq-generate's sentences).
WHOLE = " (without --prefix-size, fairseq-generate prompts with each whole sample)"
CUT = (
    "a prompt of 12 tokens is longer than --max-len-b 5 allows: the output would be the prompt "
    "cut to 5 tokens; raise --max-len-b above 12 (it counts the prompt)" + WHOLE
)


@pytest.mark.parametrize("decoder", list(GENERATORS))
@pytest.mark.parametrize(
    "lengths, max_len, kept, said",
    [((12,), dict(max_len_b=5), 5, CUT),
     ((3, 12), dict(max_len_b=5), 5, CUT),  # the longest prompt of the batch
     ((12,), dict(max_len_b=12), 12, "a prompt of 12 tokens is as long as --max-len-b 12 allows: "
      "the output would be the prompt, nothing generated; raise --max-len-b above 12 (it counts "
      "the prompt)" + WHOLE),
     ((3,), dict(max_len_a=0.5, max_len_b=1), 3, "a prompt of 3 tokens is as long as --max-len-a "
      "0.5 x 4 + --max-len-b 1 (= 3 tokens) allows: the output would be the prompt, nothing "
      "generated; raise --max-len-b above 1 (it counts the prompt)" + WHOLE)],
)  # fmt: skip
def test_a_prompt_that_fills_the_output_length_is_refused(decoder, lengths, max_len, kept, said):
    """Both generators force prompt tokens below --max-len-a x width + --max-len-b only, then
    end the output: the hypothesis of the longest prompt was its first ``kept`` tokens, printed
    as a generation (the prompt cut, or alone). The task refuses it before decoding."""
    task, model = lm_task()
    generator = GENERATORS[decoder]([model], DICT, beam_size=1, **max_len)
    prefix = prompts(lengths)
    longest = best_tokens(generate(generator, model, prefix))[-1]
    assert longest == prefix[-1, :kept].tolist() + [DICT.eos()]
    with pytest.raises(UsageError) as refused:
        task.inference_step(generator, [model], sample_of(prefix))
    assert str(refused.value) == said


@pytest.mark.parametrize("decoder", list(GENERATORS))
def test_a_prompt_with_room_under_the_output_length_decodes_alike(decoder):
    """A prompt one token shorter than --max-len-b: one token generated, fairseq's output."""
    task, model = lm_task()
    prefix = prompts((12, 4))
    generator = GENERATORS[decoder]([model], DICT, beam_size=1, max_len_b=13, min_len=13)
    hypotheses = best_tokens(task.inference_step(generator, [model], sample_of(prefix)))
    theirs = SequenceGenerator([model], DICT, beam_size=1, max_len_b=13, min_len=13)
    assert hypotheses == best_tokens(generate(theirs, model, prefix))
    assert hypotheses[0][:12] == prefix[0].tolist() and len(hypotheses[0]) == 14  # one generated


def test_the_prompt_checked_is_the_one_the_generator_forces():
    """fairseq-generate --prefix-size 3 on a 15-token sentence (16 positions): the prompt is 3
    tokens, not the sentence (refused before as 15 tokens leaving no position to generate in);
    --max-len-b 3 leaves it no room. --score-reference forces no prompt: it scores the sentence."""
    from fairseq.sequence_scorer import SequenceScorer

    task, model = lm_task()
    sentence = prompts((15,))
    sample = sample_of(sentence)
    prefix = sentence[:, :3]
    generator = SequenceGenerator([model], DICT, beam_size=1, max_len_b=10, min_len=6)
    hypotheses = best_tokens(task.inference_step(generator, [model], sample, prefix_tokens=prefix))
    assert hypotheses[0][:3] == prefix[0].tolist() and len(hypotheses[0]) > 6
    short = SequenceGenerator([model], DICT, beam_size=1, max_len_b=3)
    with pytest.raises(UsageError) as refused:
        task.inference_step(short, [model], sample, prefix_tokens=prefix)
    assert str(refused.value).startswith("a prompt of 3 tokens is as long as --max-len-b 3 ")
    assert str(refused.value).endswith("(it counts the prompt)")  # --prefix-size's prompt
    scored = {**sample, "target": torch.cat([sentence, torch.tensor([[DICT.eos()]])], dim=1)}
    hypotheses = task.inference_step(SequenceScorer(DICT), [model], scored)
    assert hypotheses[0][0]["positional_scores"].numel() == 16
    with pytest.raises(UsageError, match=r"^a prompt of 15 tokens is longer than the model's 16 "):
        task.inference_step(generator, [model], sample)  # the sentence is the prompt


@pytest.mark.parametrize("decoder", list(GENERATORS))
def test_a_prompt_that_repeats_a_blocked_ngram_is_refused(decoder):
    """Both generators force a prompt's tokens, then block repeated n-grams: a prompt that
    repeats one (the start token counts) was left no token to take, and fairseq's generator
    failed at the output's maximum length with an AssertionError. The task refuses it in one
    line naming the sample, the n-gram and the smallest size that would not block it."""
    task, model = lm_task()
    prefix = prompts((6, 6, 4), seed=1)
    prefix[1, 3:6] = prefix[1, 0:3]  # a 3-gram twice
    sample = {**sample_of(prefix), "id": torch.tensor([4, 7, 9])}
    for size in (2, 3):
        generator = GENERATORS[decoder]([model], DICT, beam_size=2, max_len_b=12,
                                        no_repeat_ngram_size=size)  # fmt: skip
        with pytest.raises(UsageError) as refused:
            task.inference_step(generator, [model], sample)
        repeated = DICT.string(prefix[1, : size])
        assert str(refused.value) == (
            f"--no-repeat-ngram-size {size} would block the forced tokens of sample 7 (its "
            f"prefix, or a language model's prompt): they repeat the {size}-gram \"{repeated}\", "
            "whose forced token gets no probability (the search then fails); pass "
            "--no-repeat-ngram-size 4 or more, or 0 (no blocking)"
        )
    generator = GENERATORS[decoder]([model], DICT, beam_size=2, max_len_b=12,
                                    no_repeat_ngram_size=4)  # fmt: skip
    assert all(len(hypos) == 2 for hypos in task.inference_step(generator, [model], sample))


@pytest.mark.parametrize("decoder", list(GENERATORS))
def test_prompts_that_hold_the_end_of_sentence_are_named(decoder, caplog):
    """fairseq-generate without --prefix-size prompts a language model with each whole sample,
    which can hold sentence ends (the blocks of --sample-break-mode none; with --add-bos-token,
    mode eos begins each sample with one): the search forces the EOS and ends the hypothesis
    there, without a word; above beam 1 a prompt that begins with it failed, fairseq's generator
    at its maximum length (a traceback), the static decoder naming --prefix-size, not given.
    A warning (once a task) where they decode; one line naming the prompts that begin so."""
    task, model = lm_task()
    prefix = prompts((6, 6, 4), seed=1)
    prefix[1, 3] = DICT.eos()
    sample = {**sample_of(prefix), "id": torch.tensor([4, 7, 9])}
    generator = GENERATORS[decoder]([model], DICT, beam_size=2, max_len_b=12)
    with caplog.at_level(logging.WARNING, logger="fairseq_san.tasks.decoding"):
        decoded = best_tokens(task.inference_step(generator, [model], sample))
        task.inference_step(generator, [model], sample)
    assert decoded[1] == prefix[1, :4].tolist()  # the prompt up to its EOS, nothing generated
    whole = (
        " (without --prefix-size, fairseq-generate prompts a language model with each whole "
        "sample: with --add-bos-token, --sample-break-mode eos begins each with the end of the "
        "sentence before it, and the blocks of the other modes hold sentence ends)"
    )
    assert [record.getMessage() for record in caplog.records] == [
        f"the prompt of sample 7{whole} holds the end of sentence (EOS), which the search "
        "forces: the hypothesis ends there, with no token generated; pass --prefix-size N to "
        "prompt with each sample's first N target tokens (said of the first batch with such "
        "prompts only)"
    ]
    prefix[2, 0] = DICT.eos()
    sample = {**sample_of(prefix), "id": torch.tensor([4, 7, 9])}
    with pytest.raises(UsageError) as refused:
        task.inference_step(generator, [model], sample)
    assert str(refused.value) == (
        f"the prompt of sample 9{whole} begins with the end of sentence (EOS), which beam search "
        "at --beam 2 cannot finish: pass --prefix-size N to prompt with each sample's first N "
        "target tokens (at --beam 1 the hypothesis ends at once, with no token generated)"
    )
    greedy = GENERATORS[decoder]([model], DICT, beam_size=1, max_len_b=12)
    assert best_tokens(task.inference_step(greedy, [model], sample))[2] == [DICT.eos()]


@pytest.mark.parametrize("decoder", list(GENERATORS))
def test_prefixes_that_hold_the_end_of_sentence_are_named_as_a_language_models(decoder, caplog):
    """fairseq-generate --prefix-size on blocks that hold sentence ends (--sample-break-mode
    none): the translation's wording said "holds its whole target ... its hypothesis is its
    reference" of a 12-token block, and "leave out sentences whose target is empty" of one that
    was not."""
    task, model = lm_task()
    prefix = prompts((3, 3, 3), seed=1)
    prefix[1, 1] = DICT.eos()
    sample = {**sample_of(prompts((6, 6, 6), seed=2)), "id": torch.tensor([4, 7, 9])}
    generator = GENERATORS[decoder]([model], DICT, beam_size=2, max_len_b=12)
    with caplog.at_level(logging.WARNING, logger="fairseq_san.tasks.decoding"):
        task.inference_step(generator, [model], sample, prefix)
    prompt = (
        "--prefix-size: the prompt of sample {} (its first tokens, which reach past a sentence's "
        "end where the sample is shorter than --prefix-size or is a block of --sample-break-mode "
        "none or complete)"
    )
    remedy = "pass a smaller --prefix-size"
    assert [record.getMessage() for record in caplog.records] == [
        f"{prompt.format(7)} holds the end of sentence (EOS), which the search forces: the "
        f"hypothesis ends there, with no token generated; {remedy} (said of the first batch "
        "with such prompts only)"
    ]
    prefix[2, 0] = DICT.eos()
    with pytest.raises(UsageError) as refused:
        task.inference_step(generator, [model], sample, prefix)
    assert str(refused.value) == (
        f"{prompt.format(9)} begins with the end of sentence (EOS), which beam search at --beam "
        f"2 cannot finish: {remedy} (at --beam 1 the hypothesis ends at once, with no token "
        "generated)"
    )


@pytest.mark.parametrize("decoder", list(GENERATORS))
def test_a_prompt_that_begins_with_the_end_of_sentence_beside_others_is_one_line(decoder):
    """Blocks of --sample-break-mode none hold sentence ends, and the first begins with one:
    where the others' ends come later, fairseq's generator failed at that first forced EOS with
    a message-less AssertionError (its traceback), not at its maximum length. One line naming
    the prompt that begins with it."""
    task, model = lm_task()
    prefix = prompts((12, 12), seed=1)
    prefix[0, 0] = prefix[0, 5] = prefix[1, 3] = DICT.eos()
    sample = {**sample_of(prefix), "id": torch.tensor([4, 7])}
    generator = GENERATORS[decoder]([model], DICT, beam_size=2, max_len_b=14)
    with pytest.raises(UsageError, match="^the prompt of sample 4 .* begins with the end of"):
        task.inference_step(generator, [model], sample)
    # blocks after the first: fairseq takes no start token off where a row begins otherwise
    blocks = {"net_input": {"src_tokens": prefix, "src_lengths": torch.tensor([12, 12])},
              "id": torch.tensor([4, 7])}  # fmt: skip
    with pytest.raises(UsageError, match="^the prompt of sample 4 .* begins with the end of"):
        task.inference_step(generator, [model], blocks)


def test_a_prompt_after_the_begin_of_sentence_that_begins_with_the_end_is_one_line():
    """--add-bos-token: fairseq takes the begin-of-sentence token off each prompt, and one that
    then begins with EOS failed above beam 1 (``AssertionError``), as without the flag."""
    from fairseq.tasks.language_modeling import LanguageModelingConfig, LanguageModelingTask

    model = lm_task()[1]
    task = LanguageModelingTask(LanguageModelingConfig(tokens_per_sample=16, add_bos_token=True),
                                DICT)  # fmt: skip
    prefix = prompts((12, 12), seed=1)
    prefix[0, 0] = DICT.eos()
    src_tokens = torch.cat([torch.full((2, 1), DICT.bos()), prefix], dim=1)
    sample = {"net_input": {"src_tokens": src_tokens, "src_lengths": torch.tensor([13, 13])},
              "id": torch.tensor([4, 7])}  # fmt: skip
    generator = SequenceGenerator([model], DICT, beam_size=2, max_len_b=14)
    with pytest.raises(UsageError, match="^the prompt of sample 4 .* begins with the end of"):
        task.inference_step(generator, [model], sample)


@pytest.mark.parametrize("plugins", [True, False], ids=["language_modeling_san", "fairseqs"])
def test_scoring_the_targets_warns_of_no_forced_end(caplog, plugins):
    """--score-reference scores each sample whole and forces nothing: the warning that a
    prompt's end of sentence ends its hypothesis was printed for every such run (fairseq's own
    task too, the plugin loaded)."""
    from fairseq.sequence_scorer import SequenceScorer

    task, model = lm_task() if plugins else fairseqs_lm_task()
    prefix = prompts((6, 6), seed=1)
    prefix[1, 3] = DICT.eos()
    sample = {**sample_of(prefix), "target": prefix.clone(), "id": torch.tensor([4, 7])}
    with caplog.at_level(logging.WARNING, logger="fairseq_san"):
        scored = task.inference_step(SequenceScorer(DICT), [model], sample)
    assert [len(hypos) for hypos in scored] == [1, 1]
    assert not caplog.records


def test_a_sentence_to_score_may_fill_the_positions_that_a_prompt_may_not():
    """The hub's ``score`` builds a scorer, then the dataset of its sentences: one of 15 tokens
    (16 positions with its start token) was refused as a prompt that left no position to
    generate in; fairseq scores it. One of 16 does not fit: one line. A prompt keeps its rule."""
    from fairseq.dataclass.configs import GenerationConfig

    task, model = lm_task()

    def dataset(length: int):
        """The hub's sentence of ``length`` tokens, as ``encode`` gives it (EOS at its end)."""
        sentence = torch.cat([prompts((length,))[0], torch.tensor([DICT.eos()])])
        return task.build_dataset_for_inference([sentence], [len(sentence)])

    scorer = task.build_generator([model], GenerationConfig(score_reference=True))
    sentences = dataset(15)
    scored = task.inference_step(scorer, [model], sentences.collater([sentences[0]]))
    assert scored[0][0]["positional_scores"].numel() == 15
    with pytest.raises(UsageError) as refused:
        dataset(16)
    assert str(refused.value) == (
        "a sentence of 16 tokens is longer than the model's 16 positions hold (after the start "
        "token): shorten it to at most 15 tokens"
    )
    task.build_generator([model], GenerationConfig(beam=1))
    with pytest.raises(UsageError, match=r"^a prompt of 15 tokens is longer than the model's 16 "):
        dataset(15)


def fairseqs_lm_task():
    """(fairseq's own language_modeling task, a tiny model of 16 positions)."""
    from fairseq.tasks.language_modeling import LanguageModelingConfig, LanguageModelingTask

    task = LanguageModelingTask(LanguageModelingConfig(tokens_per_sample=16), DICT)
    return task, lm_task()[1]


def test_fairseqs_lm_task_names_prompts_that_begin_with_the_end_of_sentence(caplog):
    """fairseq-generate --task language_modeling on blocks that hold sentence ends: above beam 1
    a prompt that begins with EOS failed (``AssertionError: 15 < 15``, or none at all beside
    other prompts); language_modeling_san's one line now, and its warning of a held EOS."""
    task, model = fairseqs_lm_task()
    prefix = prompts((12, 12), seed=1)
    prefix[0, 0] = prefix[0, 5] = prefix[1, 3] = DICT.eos()
    sample = {**sample_of(prefix), "id": torch.tensor([4, 7])}
    generator = SequenceGenerator([model], DICT, beam_size=2, max_len_b=14)
    with pytest.raises(UsageError) as refused:
        task.inference_step(generator, [model], sample)
    with pytest.raises(UsageError) as plugins:
        lm_task()[0].inference_step(generator, [model], sample)
    assert str(refused.value) == str(plugins.value)
    assert str(refused.value).startswith("the prompt of sample 4 (without --prefix-size")
    greedy = SequenceGenerator([model], DICT, beam_size=1, max_len_b=14)
    with caplog.at_level(logging.WARNING):
        task.inference_step(greedy, [model], sample)
        task.inference_step(greedy, [model], sample)
    assert [record.getMessage() for record in caplog.records] == [
        lm_task()[0].forced_ends_warning([4, 7], None)
    ]
    with pytest.raises(UsageError, match=r"^--prefix-size: the prompt of sample 4 .* --beam 2 "):
        task.inference_step(generator, [model], sample, prefix_tokens=prefix[:, :3])


def test_fairseqs_lm_task_names_typed_prompts_that_hold_the_end_of_sentence_as_typed(caplog):
    """fairseq-interactive's and the hub's prompts (``build_dataset_for_inference``) under
    fairseq's own language_modeling task are typed: the warning of one that holds the end of
    sentence says to leave it out, as language_modeling_san's, not to pass --prefix-size."""
    from fairseq_san.tasks.language_modeling_san import prompt_ends_warning

    task, model = fairseqs_lm_task()
    typed = prompts((6,), seed=1)[0]
    typed[3] = DICT.eos()
    dataset = task.build_dataset_for_inference([typed], [len(typed)])
    sample = dataset.collater([dataset[0]])
    greedy = SequenceGenerator([model], DICT, beam_size=1, max_len_b=12)
    with caplog.at_level(logging.WARNING, logger="fairseq_san"):
        task.inference_step(greedy, [model], sample)
    said = [record.getMessage() for record in caplog.records]
    assert said == [prompt_ends_warning([0], whole_samples=False, prefix=False)]
    assert "leave the end-of-sentence symbol out of the prompt" in said[0]


@pytest.mark.parametrize("beam, eos_at", [(1, 3), (1, 0), (3, None)])
def test_fairseqs_lm_task_decodes_as_before(beam, eos_at):
    """The fix changes no output: greedy with prompts that hold or begin with EOS, beam search
    with prompts that hold none, decode as fairseq's unwrapped ``inference_step``."""
    import inspect

    from fairseq.tasks.language_modeling import LanguageModelingTask

    task, model = fairseqs_lm_task()
    prefix = prompts((6, 4), seed=2)
    if eos_at is not None:
        prefix[1, eos_at] = DICT.eos()
    sample = {**sample_of(prefix), "id": torch.tensor([0, 1])}
    generator = SequenceGenerator([model], DICT, beam_size=beam, max_len_b=12)
    fairseqs = inspect.unwrap(LanguageModelingTask.inference_step)
    expected = fairseqs(task, generator, [model], sample)
    assert_same_hypotheses(task.inference_step(generator, [model], sample), expected, ATOL)
