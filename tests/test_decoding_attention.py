"""Tests for the fast incremental-decoding attention (``fairseq_san.modules.decoding_attention``,
``--san-decoding fast``): same translations as fairseq's step, same state dict and training.
"""

from argparse import Namespace
from typing import Dict

import pytest
import torch

from fairseq.modules import MultiheadAttention
from helpers import (
    AAN,
    ATOL,
    BEAM_BATCH,
    assert_same_hypotheses,
    build,
    decoder_logits,
    favour_eos,
    generate,
    make_dictionary,
    policy_argv,
    record_reorders,
    shrank,
    source_batch,
    staggering_eos_bonus,
    target_prefixes,
)
from fairseq_san.modules.decoding_attention import DecodingAttention

DICT = make_dictionary(24)


def count_fast_steps(root: torch.nn.Module) -> Dict[str, int]:
    """Count the fast self-attention and encoder-decoder steps that ``root``'s modules take."""
    counts = {"_self_step": 0, "_encoder_step": 0}
    for module in root.modules():
        if isinstance(module, DecodingAttention):
            for name in counts:
                method = getattr(module, name)

                def counted(*args, _method=method, _name=name, **kwargs):
                    counts[_name] += 1
                    return _method(*args, **kwargs)

                setattr(module, name, counted)
    return counts


@pytest.mark.parametrize(
    "argv",
    [[], policy_argv("1,5", "3,3", "2,4"), policy_argv("2,2,2", "1,5", share="weights"),
     AAN + ["--san-decoder-encdec-policy", "3,3"]],
    ids=["baseline", "san-output", "san-weights", "aan-encdec33"],
)  # fmt: skip
def test_fast_decoding_gives_the_same_translations(argv):
    """--san-decoding fast keeps the encoder-decoder keys/values once per sentence and fuses the
    self-attention step; the n-best lists (sentences finishing at different steps, so the batch
    shrinks) must be those of the plain model, and the fast path must really have run."""
    plain, _ = build(argv, dictionary=DICT, seed=101)
    fast, args = build(argv + ["--san-fast-decoding"], dictionary=DICT, seed=102)
    assert args.san_fast_decoding
    fast.load_state_dict(plain.state_dict(), strict=True, model_cfg=None)
    src_tokens, src_lengths = source_batch(DICT, BEAM_BATCH, seed=103)
    kwargs = dict(beam=4, min_len=1, max_len_a=0, max_len_b=10)
    favour_eos(fast, staggering_eos_bonus(plain, src_tokens, src_lengths, **kwargs))
    expected = generate(plain, DICT, src_tokens, src_lengths, **kwargs)
    orders = record_reorders(fast)
    steps = count_fast_steps(fast.decoder)
    actual = generate(fast, DICT, src_tokens, src_lengths, **kwargs)
    assert_same_hypotheses(expected, actual, atol=ATOL)
    assert shrank(orders, len(BEAM_BATCH) * 4)
    assert steps["_encoder_step"] > 0
    assert (steps["_self_step"] > 0) == ("aan" not in argv)
    assert any(getattr(m, "beam_size", 1) == 4 for m in fast.decoder.modules())


def test_fast_decoding_asked_for_by_the_generator_decodes_in_eval_mode_at_each_beam():
    """fairseq-generate makes the model ready for inference (eval mode, ``train`` disabled) before
    the task builds the generator, where ``--san-decoding fast`` rebuilds fairseq's attention:
    the new modules must be in eval mode too (else no fast step and attention dropout while
    decoding), and a beam-1 generator after a beam-4 one must not keep beam 4 (fairseq sets a
    model's beam size only above 1). Each beam's n-best must be the plain model's."""
    from fairseq_san.tasks.translation_san import TranslationSANConfig, TranslationSANTask

    plain, _ = build(["--attention-dropout", "0.3"], dictionary=DICT, seed=101)
    fast, _ = build(["--attention-dropout", "0.3"], dictionary=DICT, seed=101)
    fast.make_generation_fast_()
    task = TranslationSANTask(TranslationSANConfig(), DICT, DICT)
    src_tokens, src_lengths = source_batch(DICT, [5, 3, 6, 4], seed=103)
    sample = {"net_input": {"src_tokens": src_tokens, "src_lengths": src_lengths}}
    for beam in (4, 1):
        options = dict(beam=beam, max_len_a=0, max_len_b=10, min_len=1)
        expected = generate(plain, DICT, src_tokens, src_lengths, **options)
        generator = task.build_generator([fast], Namespace(san_decoding="fast", **options))
        steps = count_fast_steps(fast.decoder)
        with torch.no_grad():
            actual = generator.generate([fast], sample)
        assert_same_hypotheses(expected, actual, atol=ATOL)
        assert steps["_self_step"] > 0 and steps["_encoder_step"] > 0


def test_fast_decoding_samples_what_fairseq_samples_from_the_same_seed():
    """fairseq-generate seeds torch (``--seed``) before it loads the model and the task builds
    the generator, where ``--san-decoding fast`` rebuilds fairseq's attention modules: their
    initial weights, replaced at once, drew from that seed, so ``--sampling`` drew other samples
    than fairseq's decoding with the same ``--seed`` (every sentence of a fairseq-generate run)."""
    from fairseq_san.tasks.translation_san import TranslationSANConfig, TranslationSANTask

    task = TranslationSANTask(TranslationSANConfig(), DICT, DICT)
    src_tokens, src_lengths = source_batch(DICT, [5, 3, 6, 4], seed=105)
    sample = {"net_input": {"src_tokens": src_tokens, "src_lengths": src_lengths}}
    options = dict(beam=2, sampling=True, max_len_a=0, max_len_b=10)

    def sampled(decoding: str):
        model, _ = build(dictionary=DICT, seed=104)
        torch.manual_seed(5)
        generator = task.build_generator([model], Namespace(san_decoding=decoding, **options))
        with torch.no_grad():
            return generator.generate([model], sample)

    assert_same_hypotheses(sampled("fairseq"), sampled("fast"), atol=ATOL)


@pytest.mark.parametrize("argv", [[], policy_argv("2,4", "3,3")], ids=["baseline", "san"])
def test_fast_decoding_keeps_the_attention_dropout_that_retain_dropout_keeps(argv):
    """fairseq-generate --retain-dropout (Monte Carlo dropout) switches dropout on before the
    task builds the generator: the fast step skipped attention dropout, the modules it rebuilt
    had it off again, and SAN's modules, named after their own classes, were not among
    ``--retain-dropout-modules MultiheadAttention``. Now every attention module keeps it and
    decodes as fairseq does from the same seed."""
    from fairseq_san.tasks.translation_san import TranslationSANConfig, TranslationSANTask

    task = TranslationSANTask(TranslationSANConfig(), DICT, DICT)
    src_tokens, src_lengths = source_batch(DICT, [5, 3, 6, 4], seed=106)
    sample = {"net_input": {"src_tokens": src_tokens, "src_lengths": src_lengths}}
    options = dict(beam=2, max_len_a=0, max_len_b=10, retain_dropout=True,
                   retain_dropout_modules=["MultiheadAttention"], no_beamable_mm=False)  # fmt: skip

    def decoded(decoding: str, seed: int):
        model, _ = build(argv + ["--attention-dropout", "0.5", "--dropout", "0"], dictionary=DICT,
                         seed=107)  # fmt: skip
        model.prepare_for_inference_(Namespace(generation=Namespace(**options)))
        generator = task.build_generator([model], Namespace(san_decoding=decoding, **options))
        attention = [m for m in model.modules() if isinstance(m, MultiheadAttention)]
        assert all(m.dropout_module.apply_during_inference for m in attention)
        torch.manual_seed(seed)
        with torch.no_grad():
            return generator.generate([model], sample)

    assert_same_hypotheses(decoded("fairseq", 5), decoded("fast", 5), atol=ATOL)
    other_seed = decoded("fast", 6)
    assert any(
        not torch.equal(a[0]["positional_scores"], b[0]["positional_scores"])
        for a, b in zip(decoded("fast", 5), other_seed)
    )  # dropout applied: another seed, other scores


def test_a_model_decodes_as_the_latest_generator_asked_and_the_log_says_how(caplog):
    """A model decodes as the generator built last asks (the hub's and the benchmark's models
    decode several ways): one that decoded with no-cache kept recomputing the prefix when
    fairseq's decoding was asked next, and one switched to fast kept the fast step. fairseq's
    decoding means the model's own (a checkpoint trained with the deprecated --san-no-cache,
    or --model-overrides), which the log names as such: it said "fairseq"."""
    from fairseq_san.tasks.translation_san import TranslationSANConfig, TranslationSANTask

    task = TranslationSANTask(TranslationSANConfig(), DICT, DICT)
    src_tokens, src_lengths = source_batch(DICT, [5, 3, 6, 4], seed=109)
    sample = {"net_input": {"src_tokens": src_tokens, "src_lengths": src_lengths}}
    options = dict(beam=2, max_len_a=0, max_len_b=8)
    own = "(the model's own options: --model-overrides or the checkpoint)"

    def decode(model, decoding: str):
        caplog.clear()
        with caplog.at_level("INFO", logger="fairseq_san.tasks.decoding"):
            generator = task.build_generator([model], Namespace(san_decoding=decoding, **options))
        with torch.no_grad():
            hypotheses = generator.generate([model], sample)
        (said,) = [m for m in caplog.messages if m.startswith("SAN decoding: ")]
        fast = {m.fast_decoding for m in model.modules() if isinstance(m, DecodingAttention)}
        return hypotheses, said, model.decoder.recompute_prefix, fast

    expected = decode(build(policy_argv("2,4"), dictionary=DICT, seed=110)[0], "fairseq")[0]
    for argv, fairseqs in (([], ("fairseq (SequenceGenerator)", False)),
                           (["--san-no-cache"], (f"no-cache {own} (SequenceGenerator)", True))):
        model, _ = build(policy_argv("2,4") + argv, dictionary=DICT, seed=110)
        for decoding, (said, recomputes, fast) in (
            ("no-cache", ("no-cache (SequenceGenerator)", True, {False})),
            ("fast", ("fast (SequenceGenerator)", False, {True})),
            ("fairseq", (*fairseqs, {False})),
        ):  # fmt: skip
            hypotheses, *how = decode(model, decoding)
            assert how == [f"SAN decoding: {said}", recomputes, fast], (argv, decoding)
            assert_same_hypotheses(expected, hypotheses, atol=ATOL)


@pytest.mark.parametrize("mode", ["eval", "train"])
def test_fast_decoding_keeps_the_state_dict_and_trains_like_fairseq(mode):
    """The flag changes no parameter, and outside incremental decoding nothing changes at all:
    the same output in evaluation and in training (dropout 0), and the same gradients."""
    plain, _ = build(["--dropout", "0"], dictionary=DICT, seed=101)
    fast, _ = build(["--san-fast-decoding", "--dropout", "0"], dictionary=DICT, seed=102)
    assert plain.state_dict().keys() == fast.state_dict().keys()
    fast.load_state_dict(plain.state_dict(), strict=True, model_cfg=None)
    assert isinstance(fast.decoder.layers[0].self_attn, DecodingAttention)
    assert not isinstance(plain.decoder.layers[0].self_attn, DecodingAttention)
    src_tokens, src_lengths = source_batch(DICT, [5, 3], seed=7)
    prev = source_batch(DICT, [4, 4], seed=8)[0]
    getattr(plain, mode)(), getattr(fast, mode)()
    expected = plain(src_tokens, src_lengths, prev)[0]
    actual = fast(src_tokens, src_lengths, prev)[0]
    assert torch.equal(expected, actual)
    expected.logsumexp(-1).sum().backward()
    actual.logsumexp(-1).sum().backward()
    for (name, weight), other in zip(plain.named_parameters(), fast.parameters()):
        assert torch.equal(weight.grad, other.grad), name


def test_fast_decoding_after_an_update_of_fairseqs_optimizer_decodes_with_its_weights():
    """fairseq's optimizers write the weights through ``.data``, which no tensor's version counts:
    the fused q/k/v of ``--san-decoding fast`` kept the weights of fairseq-train --eval-bleu's first
    validation for every later one. A pass in training mode drops them."""
    from fairseq.optim.adam import Adam

    plain, _ = build(["--dropout", "0"], dictionary=DICT, seed=101)
    fast, _ = build(["--san-fast-decoding", "--dropout", "0"], dictionary=DICT, seed=102)
    fast.load_state_dict(plain.state_dict(), strict=True, model_cfg=None)
    src_tokens, src_lengths = source_batch(DICT, [5, 3, 6], seed=7)
    kwargs = dict(beam=4, min_len=1, max_len_a=0, max_len_b=8)
    generate(fast, DICT, src_tokens, src_lengths, **kwargs)  # fuses q/k/v
    fast.train()
    fast(src_tokens, src_lengths, src_tokens)  # fairseq-train's pass before its update
    torch.manual_seed(0)
    for parameter in fast.parameters():
        parameter.grad = torch.randn_like(parameter)
    Adam(list(fast.parameters()), lr=0.1).step()
    fast.eval()
    plain.load_state_dict(fast.state_dict(), strict=True, model_cfg=None)
    expected = generate(plain, DICT, src_tokens, src_lengths, **kwargs)
    assert_same_hypotheses(expected, generate(fast, DICT, src_tokens, src_lengths, **kwargs),
                           atol=ATOL)  # fmt: skip


@pytest.mark.parametrize(
    "argv", [policy_argv("2,4", "3,3"), policy_argv("2,4", "3,3", share="weights")],
    ids=["san-output", "san-weights"],
)  # fmt: skip
@pytest.mark.parametrize("sentences", [5, 4])
def test_a_generators_beam_does_not_reach_a_full_sequence_pass(argv, sentences):
    """fairseq-train --eval-bleu --san-decoding fast builds a beam-5 generator before training:
    the beam stayed on the attention modules, and every training forward after it attended each
    sentence to every fifth sentence's encoder output (or failed, at 4 sentences)."""
    model, _ = build(argv + ["--dropout", "0"], dictionary=DICT, seed=104)
    src_tokens, src_lengths = source_batch(DICT, [5, 9, 3, 7, 4][:sentences], seed=105)
    prev = target_prefixes(DICT, sentences, 6, seed=106)
    model.train()
    expected = decoder_logits(model, src_tokens, src_lengths, prev)
    model.set_decoding("fast")
    model.set_beam_size(5)
    assert torch.equal(decoder_logits(model, src_tokens, src_lengths, prev), expected)


def test_fast_decoding_of_a_model_built_in_inference_mode():
    """A model built under torch.inference_mode has inference tensors, which count no in-place
    writes: the fused projection's check for changed weights raised "Inference tensors do not
    track version counter" at the first step."""
    plain, _ = build([], dictionary=DICT, seed=107)
    with torch.inference_mode():
        fast, _ = build(["--san-fast-decoding"], dictionary=DICT, seed=107)
    src_tokens, src_lengths = source_batch(DICT, [4, 6], seed=108)
    expected = generate(plain, DICT, src_tokens, src_lengths, beam=3, max_len_b=8)
    with torch.inference_mode():
        actual = generate(fast, DICT, src_tokens, src_lengths, beam=3, max_len_b=8)
    assert_same_hypotheses(expected, actual, atol=ATOL)


@pytest.mark.parametrize("need_head_weights", [False, True])
@pytest.mark.parametrize("beam", [1, 3])
def test_fast_attention_step_equals_fairseq_step(beam, need_head_weights):
    """One module, several steps with a reorder in between: the fast step's output and returned
    weights equal fairseq's, for self-attention and for encoder-decoder attention."""
    torch.manual_seed(0)
    sentences, embed, heads, src_len = 2, 16, 4, 5
    hypotheses = sentences * beam
    encoder_out = torch.randn(src_len, sentences, embed).repeat_interleave(beam, dim=1)
    padding = torch.zeros(sentences, src_len, dtype=torch.bool)
    padding[1, -2:] = True
    padding = padding.repeat_interleave(beam, dim=0)
    order = torch.arange(hypotheses).view(sentences, beam).flip(1).reshape(-1)
    for kind in ("self_attention", "encoder_decoder_attention"):
        reference = MultiheadAttention(embed, heads, **{kind: True}).eval()
        fast = DecodingAttention(embed, heads, **{kind: True}).eval()
        fast.load_state_dict(reference.state_dict())
        fast.fast_decoding = True
        fast.set_beam_size(beam)
        steps = count_fast_steps(fast)
        states = ({}, {})
        for step in range(3):
            query = torch.randn(1, hypotheses, embed)
            extra = dict(key=encoder_out, value=encoder_out, key_padding_mask=padding,
                         static_kv=True) if kind != "self_attention" else dict(key=query, value=query)
            outputs = [
                module(query, incremental_state=state, need_weights=True,
                       need_head_weights=need_head_weights, **extra)
                for module, state in zip((reference, fast), states)
            ]  # fmt: skip
            for expected, actual in zip(*outputs):
                assert torch.allclose(expected, actual, atol=1e-6), (kind, step)
            for module, state in zip((reference, fast), states):
                module.reorder_incremental_state(state, order)
        fast_step = "_self_step" if kind == "self_attention" else "_encoder_step"
        assert steps[fast_step] == 3, (kind, steps)  # the fast step ran, not fairseq's


def test_rebuilt_attention_keeps_an_extra_key_value_bias_or_refuses_it():
    """fairseq's attention with add_bias_kv: fast decoding's module keeps the learned biases
    (the same output), a shared module refuses them (its block's S would not cover them)."""
    from fairseq_san.models.transformer_san import rebuild_attention
    from fairseq_san.modules.shared_attention import BlockLeaderAttention, BlockShare

    torch.manual_seed(0)
    old = MultiheadAttention(16, 4, self_attention=True, add_bias_kv=True).eval()
    new = rebuild_attention(old, DecodingAttention)
    x = torch.randn(5, 2, 16)
    assert torch.equal(old(x, x, x)[0], new(x, x, x)[0])
    with pytest.raises(ValueError, match="does not support add_bias_kv"):
        rebuild_attention(old, BlockLeaderAttention, block=BlockShare())
