"""fairseq-preprocess / fairseq-train / fairseq-generate with ``--user-dir fairseq_san``.

A tiny synthetic corpus (target = reversed source) is binarized once per session; two tiny
models (sharing {1,5}/{3,3}, and no sharing) are trained once for this module, side by side.
fairseq-generate gets no policy flag: the policy comes from the checkpoint, or from
``--model-overrides``.
"""

import json
import re

import pytest
import torch

from helpers import REPO, best_hypotheses, fairseq_generate, run_cli, run_parallel, train_argv

SHARING = ["--san-decoder-self-policy", "1,5", "--san-decoder-encdec-policy", "3,3"]
SHARING_LOG = "attention sharing: decoder_self {1,5}  decoder_encdec {3,3}  encoder_self none"
NO_SHARING_LOG = "attention sharing: decoder_self none  decoder_encdec none  encoder_self none"
BLEU_LINE = re.compile(r"Generate test with beam=4: BLEU = \d+(\.\d+)?")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trained(binarized_corpus, tmp_path_factory):
    """{name: (checkpoint path, training log)} for a sharing and a non-sharing model."""
    root = tmp_path_factory.mktemp("trained")
    runs = {"sharing": SHARING, "no-sharing": []}
    logs = run_parallel(
        {
            name: ["fairseq-train", *train_argv(binarized_corpus, root / name, 40, policy)]
            for name, policy in runs.items()
        }
    )
    return {name: (root / name / "checkpoint_last.pt", logs[name]) for name in runs}


def test_training_builds_the_shared_modules(trained):
    checkpoint, log = trained["sharing"]
    assert checkpoint.is_file()
    assert SHARING_LOG in log
    assert "(self_attn): SharedWeightsAttention(" in log
    assert "(encoder_attn): SharedContextAttention(" in log
    from fairseq import checkpoint_utils  # the plugin's safe loader

    state = checkpoint_utils.load_checkpoint_to_cpu(str(checkpoint))
    assert state["optimizer_history"][-1]["num_updates"] == 40  # "done training" said nothing
    _, log = trained["no-sharing"]
    assert NO_SHARING_LOG in log
    assert "SharedWeightsAttention" not in log and "BlockLeaderAttention" not in log


def test_checkpoint_carries_the_policy(trained):
    checkpoint, _ = trained["sharing"]
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)
    model_args = state["cfg"]["model"]
    assert json.loads(model_args.san_policy) == {
        "decoder_self": [1, 5],
        "decoder_encdec": [3, 3],
        "encoder_self": None,
    }
    assert model_args.san_decoder_self_policy is None
    assert model_args.san_decoder_encdec_policy is None


@pytest.fixture(scope="module")
def generated(binarized_corpus, trained):
    """fairseq-generate on the sharing checkpoint with no policy flag (run once)."""
    checkpoint, _ = trained["sharing"]
    return fairseq_generate(binarized_corpus, checkpoint)


def test_generate_takes_the_policy_from_the_checkpoint(generated):
    output = generated.stdout + generated.stderr
    assert generated.returncode == 0, output[-4000:]
    assert BLEU_LINE.search(generated.stdout), generated.stdout[-2000:]
    assert SHARING_LOG in output
    assert len(best_hypotheses(generated.stdout)) == 20


def test_generate_translates_the_shard_it_is_given(binarized_corpus, trained, generated):
    """fairseq-generate --num-shards 2 --shard-id K translated the whole subset in each shard."""
    checkpoint, _ = trained["sharing"]
    shards = [
        fairseq_generate(binarized_corpus, checkpoint, "--batch-size", "4", "--num-shards", "2",
                         "--shard-id", str(shard))
        for shard in (0, 1)
    ]  # fmt: skip
    ids = [set(best_hypotheses(shard.stdout)) for shard in shards]
    assert ids[0] and ids[1] and not ids[0] & ids[1], ids
    assert ids[0] | ids[1] == set(best_hypotheses(generated.stdout))


def test_generate_refuses_a_shard_that_holds_no_batch(binarized_corpus, trained):
    """Shards take whole batches: the second of the test subset's one batch failed dividing by
    zero after translating nothing (a traceback)."""
    checkpoint, _ = trained["sharing"]
    result = fairseq_generate(binarized_corpus, checkpoint, "--num-shards", "2", "--shard-id", "1")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == (
        "fairseq-san: error: --shard-id 1 of --num-shards 2 holds no sentence: the subset makes "
        "1 batch(es), and each shard takes whole batches in turn; pass at most --num-shards 1, "
        "or a smaller --batch-size or --max-tokens"
    )


def test_generate_names_the_sentence_longer_than_max_tokens(binarized_corpus, trained):
    """fairseq's "Sentences lengths should not exceed max_tokens=3" named neither the subset nor
    the sentence's length, the value to pass."""
    checkpoint, _ = trained["sharing"]
    lines = (binarized_corpus.parent / "raw" / "test.src").read_text().splitlines()
    lengths = [len(line.split()) + 1 for line in lines]  # its end of sentence; targets as long
    result = fairseq_generate(binarized_corpus, checkpoint, "--max-tokens", "3")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == (
        f"fairseq-san: error: sentence {lengths.index(max(lengths))} of subset test is "
        f"{max(lengths)} tokens long (its longest), and a batch holds at most 3 (--max-tokens; "
        f"--max-tokens-valid in validation): fairseq batches whole sentences; pass "
        f"{max(lengths)} or more"
    )


def test_validate_names_the_sentence_longer_than_max_tokens(binarized_corpus, trained):
    """fairseq-validate batches a subset as fairseq-generate does, and said fairseq's "Sentences
    lengths should not exceed max_tokens=3" too."""
    lines = (binarized_corpus.parent / "raw" / "valid.src").read_text().splitlines()
    lengths = [len(line.split()) + 1 for line in lines]  # its end of sentence; targets as long
    result = run_cli("fairseq-validate", str(binarized_corpus), "--user-dir", "fairseq_san",
                     "--task", "translation", "--path", str(trained["sharing"][0]),
                     "--max-tokens", "3", "--cpu")  # fmt: skip
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1].startswith(
        f"fairseq-san: error: sentence {lengths.index(max(lengths))} of subset valid is "
        f"{max(lengths)} tokens long (its longest), and a batch holds at most 3 (--max-tokens"
    ), result.stderr[-2000:]


def test_train_names_max_tokens_below_every_training_sentence(binarized_corpus, tmp_path):
    """fairseq-train skips the training sentences longer than --max-tokens: where that was every
    one, it said "no sentence to batch" and advised the model's positions and
    --skip-invalid-size-inputs-valid-test, neither given."""
    lines = (binarized_corpus.parent / "raw" / "train.src").read_text().splitlines()
    shortest = min(len(line.split()) + 1 for line in lines)  # targets as long
    limit = shortest - 1
    result = run_cli("fairseq-train", *train_argv(binarized_corpus, tmp_path, 1,
                                                  ["--max-tokens", str(limit)]))  # fmt: skip
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == (
        f"fairseq-san: error: every sentence of subset train is longer than --max-tokens {limit} "
        f"(the shortest is {shortest} tokens), and fairseq-train skips the training sentences "
        f"longer than a batch holds: pass {shortest} or more (fairseq batches whole sentences)"
    )


def test_a_sentence_skipped_as_too_long_is_not_the_one_named(binarized_corpus):
    """With --skip-invalid-size-inputs-valid-test the longest sentence may be skipped: the one
    named (and the --max-tokens advised) is the longest that is batched."""
    from fairseq.tasks import FairseqTask
    from fairseq.tasks.translation import TranslationConfig, TranslationTask

    from fairseq_san.errors import UsageError
    from fairseq_san.fairseq_fixes.batch_tokens import _naming_the_longest_sentence

    config = TranslationConfig(data=str(binarized_corpus), train_subset="train",
                               dataset_impl=None, required_seq_len_multiple=1)  # fmt: skip
    task = TranslationTask.setup_task(config)
    task.load_dataset("test")
    dataset = task.dataset("test")
    lengths = [int(dataset.num_tokens(index)) for index in range(len(dataset))]
    longest, below = max(lengths), max(length for length in lengths if length < max(lengths))
    batches = _naming_the_longest_sentence(FairseqTask.get_batch_iterator)
    with pytest.raises(UsageError) as refused:
        batches(task, dataset, max_tokens=2, max_positions=(below, below),
                ignore_invalid_inputs=True)  # fmt: skip
    assert f"sentence {lengths.index(below)} of subset test is {below} tokens long" in str(
        refused.value), (longest, below)  # fmt: skip


@pytest.mark.parametrize("shards, said", [
    (["--num-shards", "2", "--shard-id", "2"],
     "--shard-id 2 of --num-shards 2: the shards are 0 to N - 1, N at least 1"),
    (["--num-shards", "2", "--shard-id", "1", "--distributed-world-size", "3",
      "--distributed-rank", "1"],
     "--num-shards 2 --shard-id 1 and --distributed-world-size 3 --distributed-rank 1 name two "
     "shardings: give --num-shards and --shard-id only"),
])  # fmt: skip
def test_generate_refuses_a_shard_that_does_not_exist_or_two_shardings(shards, said):
    """A shard id out of range was accepted (each job translated the whole subset)."""
    from fairseq import options

    from fairseq_san.errors import UsageError
    from fairseq_san.fairseq_fixes.generation_shards import apply_shards

    parser = options.get_generation_parser()
    with pytest.raises(UsageError) as refused:  # a shard out of range: as it is parsed
        apply_shards(options.parse_args_and_arch(parser, ["data", "--path", "x.pt", *shards]))
    assert str(refused.value) == said


def test_loaded_checkpoint_contains_the_shared_modules(binarized_corpus, trained):
    """What fairseq-generate loads (checkpoint_utils.load_model_ensemble), in process."""
    import fairseq_san  # noqa: F401
    from fairseq import checkpoint_utils, tasks, utils
    from fairseq_san.modules.shared_attention import (
        BlockLeaderAttention,
        SharedContextAttention,
        SharedWeightsAttention,
    )

    utils.import_user_module(type("Args", (), {"user_dir": str(REPO / "fairseq_san")})())
    checkpoint, _ = trained["sharing"]
    models, _ = checkpoint_utils.load_model_ensemble(
        [str(checkpoint)], arg_overrides={"data": str(binarized_corpus)}
    )
    layers = models[0].decoder.layers
    assert [type(layer.self_attn) for layer in layers][1:] == [BlockLeaderAttention] + [
        SharedWeightsAttention
    ] * 4
    assert [type(layer.encoder_attn) for layer in layers] == [
        BlockLeaderAttention,
        SharedContextAttention,
        SharedContextAttention,
    ] * 2
    assert tasks  # imported for the side effect of registering the translation task


def test_the_deprecated_no_cache_override_gives_the_same_translations(
    binarized_corpus, trained, generated
):
    """``--model-overrides "{'san_no_cache': True}"``, the key of checkpoints and commands from
    before ``--san-decoding no-cache`` (whose own test is in test_static_decoder.py), still decodes
    without the cache, to the same translations."""
    checkpoint, _ = trained["sharing"]
    cached = generated
    uncached = fairseq_generate(
        binarized_corpus, checkpoint, "--model-overrides", "{'san_no_cache': True}"
    )
    assert cached.returncode == 0 and uncached.returncode == 0, uncached.stderr[-3000:]
    texts = [{i: h.text for i, h in best_hypotheses(r.stdout).items()} for r in (cached, uncached)]
    assert texts[0] == texts[1] and len(texts[0]) == 20


def test_model_overrides_policy_sharing_more_than_the_checkpoint(binarized_corpus, trained, tmp_path):
    checkpoint, _ = trained["no-sharing"]
    policy = tmp_path / "more.json"
    policy.write_text(json.dumps({"decoder_self": [1, 5], "decoder_encdec": [3, 3]}))
    result = fairseq_generate(
        binarized_corpus, checkpoint, "--model-overrides", f"{{'san_policy': '{policy}'}}"
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert SHARING_LOG in output
    assert BLEU_LINE.search(result.stdout), result.stdout[-2000:]
    assert len(best_hypotheses(result.stdout)) == 20


def test_model_overrides_policy_that_moves_the_checkpoints_blocks_fails(
    binarized_corpus, trained, tmp_path
):
    """{1,5} -> {3,3}: layer 4 would lead a block, and followed one in the checkpoint."""
    checkpoint, _ = trained["sharing"]
    policy = tmp_path / "less.json"
    policy.write_text(json.dumps({"decoder_self": [3, 3], "decoder_encdec": [3, 3]}))
    result = fairseq_generate(
        binarized_corpus, checkpoint, "--model-overrides", f"{{'san_policy': '{policy}'}}"
    )
    assert result.returncode != 0
    assert not best_hypotheses(result.stdout)
    error_lines = [line for line in result.stderr.splitlines() if "other borders" in line]
    assert len(error_lines) == 1, result.stderr[-3000:]
    assert "decoder.layers.3.self_attn" in error_lines[0]
    assert "decoder.layers.1.self_attn" not in error_lines[0]
    # A PolicyError is a user error: one line, no traceback.
    assert "Traceback" not in result.stderr, result.stderr[-3000:]


def test_fine_tuning_under_a_policy_whose_blocks_moved_trains(binarized_corpus, trained, tmp_path):
    """What the learn-to-share loop's --warm-start does when P_k+1 moves P_k's blocks:
    fairseq-train --finetune-from-model under {3,3}/{2,4} from the {1,5}/{3,3} checkpoint (which
    decoding refuses: the test above). Layer 4 followed layer 2's block: it starts with its q/k;
    layer 2 led a block and now follows one: its trained q/k are dropped, as the log says."""
    checkpoint, _ = trained["sharing"]
    moved = ["--san-decoder-self-policy", "3,3", "--san-decoder-encdec-policy", "2,4"]
    start = ["--finetune-from-model", str(checkpoint), *moved]
    argv = train_argv(binarized_corpus, tmp_path, 2, start)
    output = run_parallel({"fine-tuned": ["fairseq-train", *argv]})["fine-tuned"]
    assert "attention sharing: decoder_self {3,3}  decoder_encdec {2,4}" in output
    started = [line.split("fine-tuning from a checkpoint that shared otherwise: ")[1] for line in output.splitlines()
               if "fine-tuning from a checkpoint that shared otherwise" in line]  # fmt: skip
    assert started == [
        "decoder.layers.2.encoder_attn starts with decoder.layers.0.encoder_attn's q_proj, k_proj, "
        "v_proj",
        "decoder.layers.3.self_attn starts with decoder.layers.1.self_attn's q_proj, k_proj",
        "decoder.layers.1.self_attn drops its trained q_proj, k_proj (this policy shares that "
        "attention)",
        "decoder.layers.3.encoder_attn drops its trained q_proj, k_proj, v_proj (this policy "
        "shares that attention)",
    ]
    state = torch.load(tmp_path / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    assert state["optimizer_history"][-1]["num_updates"] == 2
    assert "decoder.layers.3.self_attn.k_proj.weight" in state["model"]


def test_training_validates_with_the_static_decoder(binarized_corpus, tmp_path):
    """fairseq-train --eval-bleu --san-decoding static: the generator is built before training
    (told the training device), its step at the first validation and again after the weights
    changed; each validation reports a BLEU."""
    argv = train_argv(binarized_corpus, tmp_path / "save", 4, ["--task", "translation_san"])
    argv = [arg for arg in argv if arg != "--disable-validation"] + [
        "--validate-interval-updates", "2", "--eval-bleu", "--san-decoding", "static",
        "--eval-bleu-args", '{"beam": 2, "max_len_a": 1, "max_len_b": 5}',
    ]  # fmt: skip
    result = run_cli("fairseq-train", *argv)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    validations = re.findall(r"valid on 'valid' subset .*\| bleu [\d.]+ .*num_updates (\d+)", output)
    assert validations == ["2", "4"], output[-3000:]
    # How the training validated is not the checkpoint's decoding: it decodes with fairseq's
    # generator too (every other decoding was refused: "san_decoding 'static' is a model option").
    for task in ((), ("--task", "translation_san", "--san-decoding", "fairseq")):
        generated = fairseq_generate(binarized_corpus, tmp_path / "save" / "checkpoint_last.pt",
                                     *task)  # fmt: skip
        assert generated.returncode == 0, generated.stderr[-3000:]
        assert "Generate test with beam=4" in generated.stdout
