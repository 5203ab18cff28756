"""transformer_lm_san through fairseq's commands: train, fairseq-eval-lm, fairseq-validate with
the analysis, fairseq-interactive and the hub; the one-line refusals (slow: runs the CLIs)."""

import fcntl
import json
import logging
import random
import re
import shlex

import pytest
from fairseq import checkpoint_utils

from fairseq_san.cores import available_cores
from fairseq_san.policy import block_leaders
from helpers import (
    REPO,
    TINY_LM,
    best_hypotheses,
    cli_env,
    lm_train_argv,
    output_of,
    preprocess_lm,
    read_json,
    run_cli,
    run_script,
    write_corpus,
)

pytestmark = pytest.mark.slow

SHARING = {
    "san": ["--san-decoder-self-policy", "2,4"],
    "kv": ["--san-decoder-self-policy", "2,4", "--san-self-share", "kv"],
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(data, {name: checkpoint}) for a SAN and a KV-sharing language model."""
    root = tmp_path_factory.mktemp("lm")
    data = preprocess_lm(write_corpus(root / "raw"), root / "data-bin")
    checkpoints = {}
    for name, argv in SHARING.items():
        result = run_cli("fairseq-train", *lm_train_argv(data, root / name, *argv))
        assert result.returncode == 0, result.stderr[-3000:]
        checkpoints[name] = root / name / "checkpoint_last.pt"
    return data, checkpoints


def test_test_bleu_refuses_a_language_model_before_decoding_any_system(trained, tmp_path):
    """test_bleu.sh's checks (fairseq-san-loop test-systems) took a language model's checkpoint,
    which failed only when its turn to decode came, after the systems before it."""
    _, checkpoints = trained
    data = tmp_path / "data"
    (data / "text").mkdir(parents=True)
    (data / "text" / "test.raw.de").write_text("Ein Hund .\n")
    for extension in ("idx", "bin"):
        (data / f"test.en-de.de.{extension}").write_bytes(b"")
    result = run_cli("fairseq-san-loop", "test-systems", str(data), "de",
                     f"lm={checkpoints['kv']}")  # fmt: skip
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.strip().splitlines()[-1] == (  # after fairseq's import-time log line
        f"test_bleu.sh: lm: {checkpoints['kv']} is a language model (task language_modeling_san, "
        "arch transformer_lm_san): test_bleu.sh scores translation models (a language model's "
        "perplexity: fairseq-eval-lm)"
    )


def test_resuming_with_other_embedding_sharing_names_the_language_models_flag(trained, tmp_path):
    """A language model resumed with --share-decoder-input-output-embed (its training had not)
    was told of its "--share-all-embeddings", a flag transformer_lm_san does not have."""
    data, checkpoints = trained
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "checkpoint_last.pt").write_bytes(checkpoints["san"].read_bytes())
    argv = lm_train_argv(data, tmp_path / "run", *SHARING["san"],
                         "--share-decoder-input-output-embed", max_update=35)  # fmt: skip
    result = run_cli("fairseq-train", *argv)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == (
        "fairseq-san: error: the checkpoint's optimizer state is for other parameters than this "
        "model's: this run's flags build another model than the training's (its "
        "--share-all-embeddings or --share-decoder-input-output-embed, sizes or sharing policy): "
        "pass the training's flags to resume it; --reset-optimizer would go on with its weights "
        "in this model, with a new optimizer"
    )


def test_eval_lm_gives_the_perplexity(trained, tmp_path):
    data, checkpoints = trained
    result = run_cli(
        "fairseq-eval-lm", str(data), "--user-dir", "fairseq_san", "--path",
        str(checkpoints["kv"]), "--gen-subset", "test", "--sample-break-mode", "eos",
        "--max-tokens", "500", "--cpu",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    (tmp_path / "eval.log").write_text(result.stdout + result.stderr)
    score = run_cli("fairseq-san-loop", "perplexity", str(tmp_path / "eval.log"),
                    "-o", str(tmp_path / "valid.json"))  # fmt: skip
    assert score.returncode == 0, score.stderr
    assert 1 < json.loads((tmp_path / "valid.json").read_text())["perplexity"] < 200


def eval_lm(trained, *options: str, command: str = "fairseq-eval-lm"):
    """fairseq-eval-lm of the SAN language model on the test split, with ``options``; ``command``
    "python -m" runs it as ``python -m fairseq_cli.eval_lm``."""
    data, checkpoints = trained
    program = ["python", "-m", "fairseq_cli.eval_lm"] if command == "python -m" else [command]
    return run_cli(
        *program, str(data), "--user-dir", "fairseq_san", "--path", str(checkpoints["san"]),
        "--gen-subset", "test", "--cpu", *options,
    )  # fmt: skip


@pytest.mark.parametrize(
    "options, fix",
    [([], "pass --tokens-per-sample 16 or fewer (its default, 1024, is for models with as many"),
     (["--tokens-per-sample", "24"], "pass --tokens-per-sample 16 or fewer"),
     (["--tokens-per-sample", "20", "--context-window", "8"],
      "pass --tokens-per-sample 16 or fewer (with --context-window, it counts the context)")],
)  # fmt: skip
def test_eval_lm_refuses_samples_longer_than_the_model(trained, options, fix):
    """fairseq-eval-lm skipped them with a warning and printed the perplexity of the rest: of
    nothing (1.00) with its default --tokens-per-sample for a model of fewer positions. With a
    context window (20 - 8 tokens scored after 8 of context) it fed 20 tokens to a model of 16
    positions without a word (sinusoidal positions extend themselves)."""
    result = eval_lm(trained, *options)
    assert result.returncode == 1, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert re.fullmatch(
        r"fairseq-san: error: \d+ of the \d+ samples are longer than the model's 16 positions"
        r"( with the --context-window 8 tokens of context before each)?, "
        r"and fairseq-eval-lm would skip them \(the perplexity of the rest\): " + re.escape(fix)
        + ".*", last
    ), last


@pytest.mark.parametrize("task", ["language_modeling", "language_modeling_san"])
def test_generate_refuses_samples_longer_than_the_model_naming_the_fix(trained, task):
    """At the default --tokens-per-sample (1024) for a model of 16 positions, fairseq-generate's
    batching said "Size of sample #K is invalid ... skip this example with
    --skip-invalid-size-inputs-valid-test": every sample was too long, and skipping them left
    nothing to batch. (fairseq-validate takes the checkpoint's sample size.)"""
    data, checkpoints = trained
    result = run_cli("fairseq-generate", str(data), "--user-dir", "fairseq_san", "--path",
                     str(checkpoints["san"]), "--gen-subset", "test", "--task", task, "--beam",
                     "1", "--batch-size", "8", "--cpu")  # fmt: skip
    assert result.returncode == 1, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert re.fullmatch(
        r"fairseq-san: error: (\d+) of the \1 samples are longer than the model's 16 positions: "
        + re.escape("pass --tokens-per-sample 16 or fewer (its default, 1024, is for models with "
                    "as many positions)"), last
    ), last


def test_train_names_sentences_longer_than_a_complete_block_as_the_fix(trained, tmp_path):
    """--sample-break-mode complete makes a sentence longer than --tokens-per-sample a sample of
    its own: with 4 tokens a sample (and so 4 positions), the refusal advised "pass
    --tokens-per-sample 4 or fewer", the value given."""
    data, _ = trained
    argv = lm_train_argv(data, tmp_path, "--sample-break-mode", "complete",
                         "--tokens-per-sample", "4", max_update=1)  # fmt: skip
    result = run_cli("fairseq-train", *argv)
    assert result.returncode == 1, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert re.fullmatch(
        r"fairseq-san: error: \d+ of the \d+ samples are longer than the model's 4 positions: "
        + re.escape("with --sample-break-mode complete a sentence longer than --tokens-per-sample "
                    "is a sample of its own: pass --sample-break-mode none (blocks of "
                    "--tokens-per-sample, at most 4)"), last
    ), last


@pytest.mark.parametrize("task", [[], ["--task", "language_modeling_san"]])
def test_eval_lm_refuses_another_add_bos_token_than_the_models(trained, task):
    """fairseq-eval-lm builds its task from its own command line: a model trained without
    --add-bos-token was scored with a start token it never saw (and one trained with it
    without), another perplexity, silently. fairseq's language_modeling task (eval-lm's
    default) too."""
    result = eval_lm(trained, *task, "--add-bos-token", "--tokens-per-sample", "16")
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1] == (
        "fairseq-san: error: the model was trained without --add-bos-token, and this command's "
        "task has it (the commands that load a language model build their task from their own "
        "command line): drop --add-bos-token"
    )


@pytest.mark.parametrize("trained_with", [True, False])
def test_a_start_token_unlike_an_ensembles_model_says_to_train_them_alike(trained_with):
    """fairseq-generate --path A.pt:B.pt of language models trained with and without
    --add-bos-token said "add --add-bos-token" without the flag and "drop" it with it: round in
    a circle. An ensemble's refusal says its models must be trained alike; one model's does not."""
    from fairseq_san.errors import BosTokenUnlikeTask
    from fairseq_san.fairseq_fixes.model_overrides import (
        _deferring_to_the_ensemble,
        ensemble_trained_alike,
    )
    from fairseq_san.models.option_checks import bos_token_unlike_training

    def refusing(filenames, *args, **kwargs):
        raise bos_token_unlike_training(trained_with)

    load = _deferring_to_the_ensemble(refusing)
    with pytest.raises(BosTokenUnlikeTask) as refused:
        load(["a.pt", "b.pt"])
    assert str(refused.value).endswith(
        " --add-bos-token; an ensemble's checkpoints (--path A.pt:B.pt) read one task, so they "
        "must all be trained with --add-bos-token or all without"
    )
    assert refused.value.trained == trained_with  # the hub words it again from this
    with pytest.raises(BosTokenUnlikeTask) as refused:
        load(["a.pt"])
    assert ensemble_trained_alike() not in str(refused.value)


def test_validate_and_the_hub_refuse_another_add_bos_token_than_the_models(trained):
    """fairseq-validate gives its command line to the checkpoint as overrides, the hub its
    keywords: the model's options took --add-bos-token with the task's, so the model's check
    found them equal, and the samples were scored after a start token the model never saw
    (another perplexity, without a word)."""
    from fairseq_san.errors import UsageError
    from fairseq_san.models.transformer_lm_san import TransformerLMSANModel

    data, checkpoints = trained
    result = run_cli(
        "fairseq-validate", str(data), "--user-dir", "fairseq_san", "--task",
        "language_modeling_san", "--path", str(checkpoints["san"]), "--valid-subset", "test",
        "--max-tokens", "500", "--cpu", "--add-bos-token", "--tokens-per-sample", "15",
    )  # fmt: skip
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1] == (
        "fairseq-san: error: the model was trained without --add-bos-token, and this command's "
        "task has it (the commands that load a language model build their task from their own "
        "command line): drop --add-bos-token"
    )
    with pytest.raises(UsageError) as refused:
        TransformerLMSANModel.from_pretrained(
            str(checkpoints["san"].parent), "checkpoint_last.pt", str(data), add_bos_token=True
        )
    assert str(refused.value) == (
        "add_bos_token=True (from --model-overrides or a keyword argument): the model was "
        "trained without --add-bos-token, and would be fed its samples after a start token it "
        "never saw: leave add_bos_token out"
    )


def test_a_start_token_takes_a_position_of_its_own(trained, tmp_path):
    """--add-bos-token puts a start token before each sample after fairseq measured it: a block
    of --sample-break-mode none as long as the positions (the model's default: the sample size)
    failed training with learned positions (IndexError), and eval-lm's check let such samples
    through. The model takes a position more for it; the checks count it. The model learned to
    predict the start token after itself (fairseq's dataset): generating from it is warned."""
    from fairseq_san.errors import UsageError
    from fairseq_san.fairseq_fixes.tokens_per_sample import check_tokens_per_sample
    from fairseq_san.tasks.language_modeling_san import START_TOKEN_GENERATED

    data, _ = trained
    bos = ["--add-bos-token", "--sample-break-mode", "none", "--decoder-learned-pos"]
    argv = lm_train_argv(data, tmp_path / "bos", *bos, max_update=2)
    trained_bos = run_cli("fairseq-train", *argv)
    assert trained_bos.returncode == 0, trained_bos.stderr[-3000:]

    def eval_bos(tokens: int):
        return run_cli(
            "fairseq-eval-lm", str(data), "--user-dir", "fairseq_san", "--path",
            str(tmp_path / "bos" / "checkpoint_last.pt"), "--gen-subset", "test", "--cpu",
            "--add-bos-token", "--sample-break-mode", "none", "--tokens-per-sample", str(tokens),
        )  # fmt: skip

    assert eval_bos(16).returncode == 0
    interactive = run_cli(
        "fairseq-interactive", str(data), "--user-dir", "fairseq_san", "--task",
        "language_modeling_san", "--path", str(tmp_path / "bos" / "checkpoint_last.pt"),
        "--add-bos-token", "--tokens-per-sample", "16", "--cpu", "--max-len-b", "8",
        input="tok1 tok2\n",
    )  # fmt: skip
    assert interactive.returncode == 0, interactive.stderr[-3000:]
    assert START_TOKEN_GENERATED in interactive.stderr  # what the model learned, said
    refused = eval_bos(17)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert refused.stderr.strip().splitlines()[-1].endswith(
        "pass --tokens-per-sample 16 or fewer (the position of --add-bos-token's start token is "
        "one of the model's)"
    )
    with pytest.raises(UsageError) as too_long:
        check_tokens_per_sample(16, 16, start=1)
    assert str(too_long.value) == (
        "--tokens-per-sample 16 and --add-bos-token's start token (17 in all) is more than "
        "--max-target-positions 16, the model's positions: no sample that long fits the model; "
        "lower --tokens-per-sample to at most 15, or pass --max-target-positions 17"
    )  # left out, fairseq's own language models would have 16 positions, none for the start


def test_fairseqs_language_model_without_a_start_position_is_refused_before_training(
    trained, tmp_path
):
    """fairseq's own language models take --tokens-per-sample as their positions: with
    --add-bos-token, every block of --sample-break-mode none was one token too long, so training
    skipped them all with fairseq's "invalid sizes" warning and validation refused only at the
    end of the first epoch. The built model is refused before any update, naming both fixes."""
    data, _ = trained
    bos = ["--task", "language_modeling", "--arch", "transformer_lm", "--sample-break-mode", "none",
           "--add-bos-token"]  # fmt: skip
    result = run_cli("fairseq-train", *lm_train_argv(data, tmp_path / "bos", *bos, max_update=2))
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    log = result.stdout + result.stderr
    assert "invalid sizes" not in log and "num_updates" not in log  # before any update
    assert result.stderr.strip().splitlines()[-1] == (
        "fairseq-san: error: --tokens-per-sample 16 and --add-bos-token's start token make "
        "samples of 17 tokens, more than the model's 16 positions (fairseq's language models "
        "take --tokens-per-sample as their positions): with --sample-break-mode none every "
        "sample is that long, and training would skip them all; pass --max-target-positions 17, "
        "or --tokens-per-sample 15 with --max-target-positions 16"
    )
    fixed = lm_train_argv(data, tmp_path / "fixed", *bos, "--max-target-positions", "17",
                          max_update=2)  # fmt: skip
    trained_fixed = run_cli("fairseq-train", *fixed)
    assert trained_fixed.returncode == 0, trained_fixed.stderr[-3000:]
    assert "invalid sizes" not in trained_fixed.stdout + trained_fixed.stderr


def test_eval_lm_with_a_context_window_within_the_positions_runs(trained):
    """16 tokens a sample, 8 of them context: every sample fits the model's 16 positions."""
    result = eval_lm(trained, "--context-window", "8", "--tokens-per-sample", "16")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Loss (base 2)" in result.stdout + result.stderr


def test_eval_lm_with_a_context_window_names_the_sample_longer_than_max_tokens(trained):
    """fairseq's context-window dataset counts its samples' tokens one at a time (no
    ``num_tokens_vec``): its sample longer than --max-tokens is named with the subset it wraps,
    not a traceback from inside the error's own wording."""
    result = eval_lm(trained, "--context-window", "4", "--tokens-per-sample", "8",
                     "--max-tokens", "3")  # fmt: skip
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert re.fullmatch(
        r"fairseq-san: error: sentence \d+ of subset test is (\d+) tokens long \(its longest\), "
        r"and a batch holds at most 3 \(--max-tokens; --max-tokens-valid in validation\): "
        r"fairseq batches whole sentences; pass \1 or more",
        result.stderr.strip().splitlines()[-1],
    ), result.stderr[-2000:]


@pytest.mark.parametrize("command", ["fairseq-eval-lm", "python -m"])
def test_eval_lm_refuses_a_shard_that_holds_no_batch(trained, command):
    """20 sentences in batches of 4 make 5 batches: fairseq-eval-lm's shard 8 of 9 scored no token
    and printed "Loss (base 2): 0.0000, Perplexity: 1.00", exit 0."""
    result = eval_lm(trained, "--sample-break-mode", "eos", "--batch-size", "4",
                     "--num-shards", "9", "--shard-id", "8", command=command)  # fmt: skip
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == (
        "fairseq-san: error: --shard-id 8 of --num-shards 9 holds no sentence: the subset makes 5 "
        "batch(es), and each shard takes whole batches in turn; pass at most --num-shards 5, or a "
        "smaller --batch-size or --max-tokens"
    )


def test_eval_lm_refuses_a_context_window_beside_shards(trained):
    """fairseq's context window takes a batch's context from the batch before it in the
    iteration: in a shard, another part of the text. Shards 0 and 1 of 2 (--context-window 4,
    batches of 2) scored 72 and 50 tokens at losses 4.3594 and 4.2406, 4.3107 together; the
    whole subset's was 4.3102, exit 0 each."""
    result = eval_lm(trained, "--context-window", "4", "--tokens-per-sample", "16",
                     "--batch-size", "2", "--num-shards", "2", "--shard-id", "0")  # fmt: skip
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == (
        "fairseq-san: error: --context-window 4 with --num-shards 2: fairseq-eval-lm takes a "
        "batch's context from the batch before it in the shard, another part of the text, so the "
        "shards' perplexities would not make the subset's; leave out one of them"
    )


@pytest.mark.parametrize("command", ["fairseq-eval-lm", "python -m"])
def test_eval_lm_runs_no_code_from_its_model_overrides(trained, tmp_path, command):
    """fairseq-eval-lm eval()s --model-overrides; run as ``python -m fairseq_cli.eval_lm`` it is
    ``__main__``, which the literal-only evaluation skipped: the code ran."""
    marker = tmp_path / "ran"
    result = eval_lm(
        trained, "--model-overrides", f"open({str(marker)!r}, 'w') and {{}}", command=command
    )
    assert result.returncode == 1, result.stderr[-3000:]
    assert "refusing to evaluate" in result.stderr.strip().splitlines()[-1]
    assert not marker.exists()


def test_eval_lm_refuses_a_post_norm_override_the_architecture_ignores(trained):
    """``--model-overrides "{'decoder_normalize_before': False}"`` gave the perplexity of the
    pre-norm model: fairseq's base_lm_architecture sets the option True whatever it is given."""
    result = eval_lm(trained, "--model-overrides", "{'decoder_normalize_before': False}")
    assert result.returncode == 1, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == (
        "fairseq-san: error: decoder_normalize_before False (from --model-overrides or a keyword "
        "argument): transformer_lm_san always has decoder_normalize_before True (fairseq's "
        "base_lm_architecture sets it), so the value would be ignored: leave it out"
    )


@pytest.mark.parametrize("command", ["fairseq-eval-lm", "python -m"])
def test_eval_lm_names_the_context_window_that_leaves_nothing_to_score(trained, command):
    """fairseq-eval-lm takes the window from the sample size before the task sees it: the
    refusal named --tokens-per-sample 0 (also where the command runs as ``__main__``)."""
    result = eval_lm(trained, "--context-window", "8", "--tokens-per-sample", "8", command=command)
    assert result.returncode == 1, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == (
        "fairseq-san: error: --context-window 8 leaves no tokens of --tokens-per-sample 8 to "
        "score: fairseq-eval-lm scores tokens-per-sample minus context-window tokens per sample; "
        "pass a --context-window below --tokens-per-sample"
    )


def test_eval_lm_remove_bpe_joins_subword_nmt_pieces(tmp_path):
    """fairseq-eval-lm --remove-bpe (--post-process subword_nmt) took the pieces ending in
    "subword_nmt" as continued: none, and the loss stayed per piece, as without it, silently;
    it is now per word, as with --post-process '@@ ' (the same summed loss over fewer words)."""
    rng = random.Random(0)
    pieces = ["ab@@", "cd", "ef@@", "gh", "ij", "kl@@", "mn"]
    raw = tmp_path / "raw"
    raw.mkdir()
    for split, size in (("train", 200), ("valid", 20), ("test", 20)):
        lines = [" ".join(rng.choice(pieces) for _ in range(6)) + " zz" for _ in range(size)]
        (raw / f"{split}.src").write_text("".join(line + "\n" for line in lines))
    data = preprocess_lm(raw, tmp_path / "data-bin")
    trained = run_cli("fairseq-train", *lm_train_argv(data, tmp_path / "lm", max_update=5))
    assert trained.returncode == 0, trained.stderr[-3000:]

    def loss(*options: str) -> str:
        result = run_cli(
            "fairseq-eval-lm", str(data), "--user-dir", "fairseq_san", "--path",
            str(tmp_path / "lm" / "checkpoint_last.pt"), "--gen-subset", "test", "--cpu",
            "--sample-break-mode", "eos", "--tokens-per-sample", "16", *options,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-3000:]
        return re.search(r"Loss \(base 2\): ([\d.]+)", result.stderr).group(1)

    per_piece, per_word = loss(), loss("--post-process", "@@ ")
    assert float(per_word) > float(per_piece)
    assert loss("--remove-bpe") == loss("--post-process", "subword_nmt") == per_word


@pytest.mark.parametrize("given", [["--remove-bpe", ""], ["--remove-bpe", "sentencepiece"],
                                   ["--post-process", "none"]])
def test_eval_lm_refuses_a_post_process_it_does_not_implement(trained, given):
    """fairseq-eval-lm joins subword-nmt pieces only: another --post-process (--remove-bpe) was
    a NotImplementedError traceback once the model had loaded."""
    result = eval_lm(trained, *given)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == (
        f"fairseq-san: error: --post-process {given[1]!r} (or --remove-bpe): fairseq-eval-lm "
        "joins subword-nmt pieces only: pass subword_nmt (or --remove-bpe alone), or leave it out "
        "for words"
    )


def test_analysis_writes_the_decoder_self_attention_js(trained, tmp_path):
    data, checkpoints = trained
    result = run_cli(
        "fairseq-validate", str(data), "--user-dir", "fairseq_san", "--task",
        "language_modeling_san", "--sample-break-mode", "eos", "--path",
        str(checkpoints["san"]), "--valid-subset", "valid", "--max-tokens", "500", "--cpu",
        "--san-analysis-dir", str(tmp_path),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    js = json.loads((tmp_path / "js.json").read_text())
    assert js["decoder_encdec"] is None and js["encoder_self"] is None
    assert len(js["decoder_self"]) == 6 and js["sentences"] == 30
    assert js["decoder_self"][0][1] == pytest.approx(0, abs=1e-6)  # layer 2 reuses S of layer 1
    assert (tmp_path / "js-decoder_self.png").exists()


@pytest.mark.parametrize("given, said", [
    (["--san-analysis-dir", ""], "--san-analysis-dir is empty: name the folder to write the "
     "analysis to (leave the option out for none)"),  # exit 0, nothing written
    # its "sentences" were blocks of tokens across lines, said to be lines
    (["--san-analysis-dir", "{dir}", "--sample-break-mode", "none"], "--san-analysis-dir with "
     "--sample-break-mode none: the analysis reads each sample as a sentence of the subset (its "
     "id a line number), and this mode makes samples of blocks of tokens across lines; pass "
     "--sample-break-mode eos"),
])  # fmt: skip
def test_an_analysis_that_would_write_nothing_or_blocks_is_refused(trained, tmp_path, given, said):
    data, checkpoints = trained
    result = run_cli(
        "fairseq-validate", str(data), "--user-dir", "fairseq_san", "--task",
        "language_modeling_san", "--path", str(checkpoints["san"]), "--valid-subset", "valid",
        "--max-tokens", "500", "--cpu", *[word.format(dir=tmp_path / "a") for word in given],
    )  # fmt: skip
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1] == f"fairseq-san: error: {said}"
    assert not (tmp_path / "a").exists()


def test_interactive_generates_and_refuses_a_too_long_prompt(trained):
    data, checkpoints = trained
    argv = ["fairseq-interactive", str(data), "--user-dir", "fairseq_san", "--task",
            "language_modeling_san", "--path", str(checkpoints["san"]), "--cpu", "--beam", "1"]
    ok = run_cli(*argv, input="tok1 tok2 tok3\n")
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert any(line.startswith("H-0") for line in ok.stdout.splitlines())
    long = run_cli(*argv, input=" ".join(["tok1"] * 20) + "\n")  # 16 positions
    assert long.returncode != 0
    assert long.stderr.strip().splitlines()[-1] == (
        "fairseq-san: error: a prompt of 20 tokens is longer than the model's 16 positions "
        "leave room for (the start token and one generated token): shorten it to at most 14 tokens"
    )
    # --skip-invalid-size-inputs-valid-test: the prompt is skipped, as fairseq's batching skips
    # it, and the lines after it generate (the refusal above ended the command there); so is one
    # of 15 tokens, which fairseq's batching kept (it fits the positions, and leaves no room to
    # generate in: the command stopped there), and one of 14 generates
    for tokens in (20, 15):
        prompts = "tok1 tok2\n" + " ".join(["tok1"] * tokens) + "\ntok3\n"
        skipped = run_cli(*argv, "--skip-invalid-size-inputs-valid-test", input=prompts)
        assert skipped.returncode == 0, skipped.stderr[-3000:]
        assert [line.split("\t")[0] for line in skipped.stdout.splitlines()
                if line.startswith("H-")] == ["H-0", "H-2"]  # fmt: skip
        assert "S-1: too long for the model's positions (the start token, the prompt and one " \
            "generated token), nothing generated" in skipped.stderr
    fits = run_cli(*argv, "--skip-invalid-size-inputs-valid-test", input="tok1 " * 14 + "\n")
    assert fits.returncode == 0 and "H-0" in fits.stdout, fits.stderr[-3000:]


@pytest.mark.parametrize("task", ["language_modeling_san", "language_modeling"])
def test_eval_lm_refuses_an_analysis_among_its_model_overrides(trained, task, tmp_path):
    """fairseq-eval-lm builds its task from its command line: ``--model-overrides
    "{'san_analysis_dir': DIR}"`` reached the model only, and the run wrote no analysis, exit 0
    (under fairseq's task, the refusal named fairseq-validate and a training task it was not)."""
    data, checkpoints = trained
    analysis = tmp_path / "analysis"
    result = run_cli(
        "fairseq-eval-lm", str(data), "--user-dir", "fairseq_san", "--task", task,
        "--sample-break-mode", "eos", "--path", str(checkpoints["san"]), "--cpu",
        "--model-overrides", repr({"san_analysis_dir": str(analysis)}),
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"fairseq-san: error: san_analysis_dir {str(analysis)!r} (from --model-overrides): "
        "--san-analysis-dir is for fairseq-validate (its teacher-forced pass): fairseq-eval-lm "
        "would analyse nothing; drop it, and run fairseq-validate DATA --task translation_san (or "
        "language_modeling_san) --path CKPT --san-analysis-dir DIR"
    )
    assert not analysis.exists()


@pytest.mark.parametrize("task", ["language_modeling_san", "language_modeling"])
def test_interactive_refuses_constraints_for_a_language_model(trained, task):
    """fairseq's language-modelling task drops a prompt's constraints: a TypeError traceback from
    its search ("'NoneType' object is not iterable"), with either decoder."""
    data, checkpoints = trained
    result = run_cli(
        "fairseq-interactive", str(data), "--user-dir", "fairseq_san", "--task", task,
        "--path", str(checkpoints["san"]), "--cpu", "--beam", "2", "--constraints",
        input="tok1 tok2\ttok3\n",
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "fairseq-san: error: --constraints: a language model decodes no constraints (fairseq's "
        "language-modelling task refuses them); leave --constraints out"
    )


@pytest.mark.parametrize("task", ["language_modeling_san", "language_modeling"])
def test_generate_refuses_an_alignment_for_a_language_model(trained, task):
    """fairseq's own language-modelling task (the plugin loaded) failed in the alignment pass of
    --print-alignment: an IndexError traceback ("Dimension out of range")."""
    data, checkpoints = trained
    result = run_cli(
        "fairseq-generate", str(data), "--user-dir", "fairseq_san", "--task", task,
        "--sample-break-mode", "eos", "--path", str(checkpoints["san"]), "--gen-subset", "test",
        "--beam", "2", "--max-len-b", "12", "--print-alignment", "--cpu",
    )  # fmt: skip
    assert_refused_before_output(
        result, "--print-alignment: a language model has no source to align its output to"
    )


@pytest.mark.parametrize("buffer", [[], ["--buffer-size", "2", "--batch-size", "2"]])
def test_interactive_names_a_prompt_by_its_output_number(trained, buffer):
    """fairseq-interactive numbers its output across buffers (S-2 for the third line), each
    buffer's dataset from 0: the warning of a prompt that holds EOS named the third line
    "sample 0" at the default --buffer-size 1."""
    data, checkpoints = trained
    result = run_cli(
        "fairseq-interactive", str(data), "--user-dir", "fairseq_san", "--task",
        "language_modeling_san", "--path", str(checkpoints["san"]), "--cpu", "--beam", "1",
        "--max-len-b", "8", *buffer, input="tok1 tok2\ntok2 tok3\ntok1 </s> tok2\n",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert [line[:4] for line in result.stdout.splitlines() if line.startswith("S-")] == [
        "S-0\t", "S-1\t", "S-2\t"
    ]
    assert "the prompt of sample 2 holds the end of sentence (EOS)" in result.stderr


def assert_refused_before_output(result, said: str) -> None:
    """The command failed with ``said`` as its last line, before printing a hypothesis."""
    assert result.returncode != 0
    assert not any(line.startswith("H-") for line in result.stdout.splitlines())
    assert result.stderr.strip().splitlines()[-1] == f"fairseq-san: error: {said}"


@pytest.mark.parametrize("decoding", ["fairseq", "static"])
def test_interactive_refuses_a_prompt_longer_than_max_len_b(trained, decoding):
    """Both decoders printed the prompt cut to --max-len-b tokens as the hypothesis. A typed
    prompt gets no word on fairseq-generate's --prefix-size (it said one)."""
    data, checkpoints = trained
    result = run_cli(
        "fairseq-interactive", str(data), "--user-dir", "fairseq_san", "--task",
        "language_modeling_san", "--path", str(checkpoints["san"]), "--cpu", "--beam", "1",
        "--max-len-b", "5", "--san-decoding", decoding, input=" ".join(["tok1"] * 12) + "\n",
    )  # fmt: skip
    assert_refused_before_output(
        result, "a prompt of 12 tokens is longer than --max-len-b 5 allows: the output would be "
        "the prompt cut to 5 tokens; raise --max-len-b above 12 (it counts the prompt)",
    )  # fmt: skip


@pytest.mark.parametrize("decoding", ["fairseq", "static"])
@pytest.mark.parametrize("sampling", [[], ["--sampling"]])
def test_a_temperature_beyond_floats_is_refused_in_one_line(trained, decoding, sampling):
    """At --temperature 1e-38 the model's scores divided by it overflow 32-bit floats (NaN
    log-probabilities, which the search drops): fairseq's generator failed its assertion
    "15 < 15", the static decoder at its maximum length (tracebacks); the hub alike."""
    from fairseq_san.errors import UsageError
    from fairseq_san.models.transformer_lm_san import TransformerLMSANModel

    data, checkpoints = trained
    result = run_cli(
        "fairseq-interactive", str(data), "--user-dir", "fairseq_san", "--task",
        "language_modeling_san", "--path", str(checkpoints["san"]), "--cpu", "--beam", "1",
        "--temperature", "1e-38", "--san-decoding", decoding, *sampling,
        input="tok1 tok2 tok3\n",
    )  # fmt: skip
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert_refused_before_output(
        result, "--temperature 1e-38: a sentence had no token left to choose (the model's scores "
        "divided by it went beyond floats' range, 16-bit ones with --fp16, and the search drops "
        "them): pass a larger --temperature",
    )  # fmt: skip
    hub = TransformerLMSANModel.from_pretrained(
        str(checkpoints["san"].parent), "checkpoint_last.pt", str(data)
    )
    with pytest.raises(UsageError, match=r"^temperature=1e-38: a sentence had no token left"):
        hub.sample("tok1 tok2 tok3", beam=1, temperature=1e-38, san_decoding=decoding,
                   sampling=bool(sampling))  # fmt: skip


@pytest.mark.parametrize("decoding", ["fairseq", "static"])
@pytest.mark.parametrize("weights, temperature", [("one nan", 0.5), ("huge", 1.0)])
def test_weights_that_are_not_finite_are_not_blamed_on_the_temperature(
    trained, decoding, weights, temperature
):
    """A model with a NaN weight (one tensor: the rest finite) fails at its maximum length at any
    temperature, and so does one of finite weights whose scores overflow at temperature 1: the
    error is not worded as a temperature beyond floats' range, which a larger one would not mend."""
    import torch

    from fairseq_san.errors import UsageError
    from fairseq_san.models.transformer_lm_san import TransformerLMSANModel

    data, checkpoints = trained
    hub = TransformerLMSANModel.from_pretrained(
        str(checkpoints["san"].parent), "checkpoint_last.pt", str(data)
    )
    with torch.no_grad():
        if weights == "one nan":
            next(hub.models[0].parameters()).fill_(float("nan"))
        else:
            for weight in hub.models[0].parameters():
                weight.fill_(1e37)
    with pytest.raises(Exception) as raised:
        hub.sample("tok1 tok2 tok3", beam=1, temperature=temperature, san_decoding=decoding)
    assert not isinstance(raised.value, UsageError), raised.value


def test_generate_refuses_the_longest_sample_before_any_output(trained):
    """fairseq-generate batches the shortest samples first: the refusal of a sample that
    --max-len-b 6 leaves no room came at the batch of 6-token samples, after the shorter ones'
    hypotheses, advising "above 6", which the 8-token samples after it needed more than."""
    data, checkpoints = trained
    result = run_cli(
        "fairseq-generate", str(data), "--user-dir", "fairseq_san", "--task",
        "language_modeling_san", "--path", str(checkpoints["san"]), "--cpu", "--beam", "1",
        "--sample-break-mode", "eos", "--max-len-b", "6", "--batch-size", "2",
    )  # fmt: skip
    assert_refused_before_output(
        result, "a prompt of 8 tokens is longer than --max-len-b 6 allows: the output would be "
        "the prompt cut to 6 tokens; raise --max-len-b above 8 (it counts the prompt) (without "
        "--prefix-size, fairseq-generate prompts with each whole sample)",
    )  # fmt: skip


def test_the_hub_names_its_keywords_where_a_checkpoint_check_names_model_overrides(trained):
    """from_pretrained(san_self_share='weights') of a KV-sharing model said to leave it out of
    --model-overrides, which the hub's user never gave."""
    from fairseq_san.models.transformer_lm_san import TransformerLMSANModel
    from fairseq_san.policy import PolicyError

    data, checkpoints = trained
    with pytest.raises(PolicyError) as refused:
        TransformerLMSANModel.from_pretrained(
            str(checkpoints["kv"].parent), checkpoint_file=checkpoints["kv"].name,
            data_name_or_path=str(data), san_self_share="weights",
        )  # fmt: skip
    assert str(refused.value).endswith(
        "to decode it, leave san_self_share out of from_pretrained's keywords."
    )


@pytest.mark.parametrize(
    "options, remedy",
    [
        (["--sample-break-mode", "none"], "without --prefix-size, fairseq-generate prompts with "
         "each whole sample: pass --prefix-size N (N at most 14) to prompt with each sample's "
         "first N tokens, or --tokens-per-sample 14 or less"),
        (["--sample-break-mode", "none", "--prefix-size", "15"], "pass --prefix-size 14 or less"),
    ],
    ids=["whole samples", "prefix"],
)  # fmt: skip
def test_a_generate_prompt_without_room_names_the_options_that_make_it(trained, options, remedy):
    """fairseq-generate's prompts are its samples (blocks of --tokens-per-sample here) or their
    first --prefix-size tokens: "shorten it" named nothing its user had typed."""
    data, checkpoints = trained
    result = run_cli(
        "fairseq-generate", str(data), "--user-dir", "fairseq_san", "--task",
        "language_modeling_san", "--path", str(checkpoints["san"]), "--gen-subset", "test",
        "--tokens-per-sample", "16", "--beam", "1", "--max-len-b", "30", "--cpu", *options,
    )  # fmt: skip
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1].endswith(
        "positions leave room for (the start token and one generated token): " + remedy
    )


@pytest.mark.parametrize("sharing", list(SHARING))
def test_the_static_decoder_generates_what_fairseq_does(trained, sharing):
    """fairseq-generate on the test prompts (the first 3 tokens of each sentence), greedy, at
    least 6 tokens: the static decoder's hypotheses and scores are fairseq's."""
    data, checkpoints = trained
    argv = ["fairseq-generate", str(data), "--user-dir", "fairseq_san", "--task",
            "language_modeling_san", "--sample-break-mode", "eos", "--path",
            str(checkpoints[sharing]), "--gen-subset", "test", "--prefix-size", "3", "--beam", "1",
            "--min-len", "6", "--max-len-b", "10", "--batch-size", "8", "--cpu"]  # fmt: skip
    outputs = {}
    for decoding, generator in (("fairseq", "SequenceGenerator"), ("static", "StaticLMGenerator")):
        result = run_cli(*argv, "--san-decoding", decoding)
        assert result.returncode == 0, result.stderr[-3000:]
        assert f"SAN decoding: {decoding} ({generator}" in result.stderr  # not fairseq's twice
        outputs[decoding] = best_hypotheses(result.stdout)
    ours, theirs = outputs["static"], outputs["fairseq"]
    assert len(ours) == 20  # the test sentences
    assert {i: h.text for i, h in ours.items()} == {i: h.text for i, h in theirs.items()}
    for i, hypothesis in ours.items():
        assert len(hypothesis.text.split()) >= 6
        scores = [hypothesis.score, *hypothesis.positional_scores]
        expected = [theirs[i].score, *theirs[i].positional_scores]
        assert len(scores) > 6 and scores == pytest.approx(expected, abs=1.01e-4)  # 4 decimals


def test_the_static_decoder_of_a_language_model_refuses_options_it_lacks(trained):
    data, checkpoints = trained
    result = run_cli(
        "fairseq-interactive", str(data), "--user-dir", "fairseq_san", "--task",
        "language_modeling_san", "--path", str(checkpoints["san"]), "--cpu",
        "--san-decoding", "static", "--retain-dropout", input="tok1\n",
    )  # fmt: skip
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1] == (
        "fairseq-san: error: --san-decoding static does not support --retain-dropout; decode "
        "with fairseq's own decoder (--san-decoding fairseq, the default) to use it"
    )


def test_the_hub_samples(trained, caplog):
    from fairseq_san.models.transformer_lm_san import TransformerLMSANModel

    data, checkpoints = trained
    hub = TransformerLMSANModel.from_pretrained(
        str(checkpoints["kv"].parent), "checkpoint_last.pt", str(data)
    )
    sampled = hub.sample("tok1 tok2", beam=1, max_len_b=6)
    assert sampled.startswith("tok1 tok2")
    with caplog.at_level(logging.INFO, logger="fairseq_san.tasks.decoding"):
        assert hub.sample("tok1 tok2", beam=1, max_len_b=6, san_decoding="static") == sampled
    assert "SAN decoding: static (StaticLMGenerator" in caplog.text  # not fairseq's twice


def test_the_hub_refuses_a_decoding_the_language_model_has_not(trained):
    """A keyword reaches the task unparsed: fairseq's generator ran for any value."""
    from fairseq_san.errors import UsageError
    from fairseq_san.models.transformer_lm_san import TransformerLMSANModel

    data, checkpoints = trained
    hub = TransformerLMSANModel.from_pretrained(
        str(checkpoints["kv"].parent), "checkpoint_last.pt", str(data)
    )
    with pytest.raises(UsageError) as refused:
        hub.sample("tok1 tok2", beam=1, max_len_b=6, san_decoding="fast")
    assert str(refused.value) == (
        "san_decoding='fast' is not valid; valid values: fairseq, static"
    )


@pytest.mark.parametrize("trained_with, override", [("san", "kv"), ("kv", "weights")])
def test_another_kind_of_sharing_is_refused_in_one_line(trained, trained_with, override):
    data, checkpoints = trained
    result = run_cli(
        "fairseq-eval-lm", str(data), "--user-dir", "fairseq_san", "--path",
        str(checkpoints[trained_with]), "--gen-subset", "test", "--cpu",
        "--model-overrides", str({"san_self_share": override}),
    )  # fmt: skip
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("fairseq-san: error: the checkpoint was trained with "), last
    assert "Traceback" not in result.stderr


def test_an_encoder_decoder_policy_key_is_refused_in_one_line(trained, tmp_path):
    data, _ = trained
    result = run_cli("fairseq-train", *lm_train_argv(
        data, tmp_path, "--san-policy", '{"decoder_encdec": [3, 3]}'))  # fmt: skip
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1] == (
        'fairseq-san: error: policy key "decoder_encdec" is for encoder-decoder models: a '
        'language model (transformer_lm_san) shares only decoder self-attention ("decoder_self")'
    )


LOOP_TRAINING = (
    *TINY_LM, "--tokens-per-sample", "16", "--optimizer", "adam", "--lr", "0.005",
    "--max-tokens", "500", "--cpu", "--num-workers", "0",
    "--no-epoch-checkpoints", "--log-format", "simple",
)  # fmt: skip


def lm_loop(data, run, *options: str):
    return run_script(
        REPO / "examples" / "learn_to_share_lm.sh", "--data", str(data), "--run-dir", str(run),
        "--arch", "transformer_lm_san", "--updates", "20", *options, "--", *LOOP_TRAINING,
    )  # fmt: skip


@pytest.mark.parametrize("after", [[], ["--", "--lr", "1e-4"]], ids=["nothing after --", "--lr"])
def test_the_loop_trains_with_the_measured_recipe(trained, tmp_path, after):
    """The README's command (no fairseq-train arguments after --) stopped at once ("Must
    specify batch size"): the recipe trains with the measured recipe, then at most --updates
    updates, and the arguments after -- come last (fairseq takes the last value)."""
    data, _ = trained
    stub, argv_file = tmp_path / "bin" / "fairseq-train", tmp_path / "argv"
    stub.parent.mkdir()
    stub.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {argv_file}\nexit 3\n')
    stub.chmod(0o755)
    env = cli_env()
    env["PATH"] = f"{stub.parent}:{env['PATH']}"
    result = run_script(
        REPO / "examples" / "learn_to_share_lm.sh", "--data", str(data), "--run-dir",
        str(tmp_path / "run"), "--updates", "7", *after, env=env,
    )  # fmt: skip
    assert result.returncode != 0  # the stand-in fairseq-train fails: the loop stops
    assert not (tmp_path / "run" / "last").exists()  # it names the last trained iteration
    argv = argv_file.read_text().splitlines()
    assert argv[argv.index("--max-update") + 1] == "7"
    assert argv[argv.index("--optimizer") + 1] == "adam" and "--patience" in argv
    assert argv[argv.index("--max-tokens") + 1] == "4096"
    assert argv[-2:] == (after[1:] or ["--max-update", "7"])


def test_the_loop_scores_perplexity_with_the_task_options_it_trained_with(trained, tmp_path):
    """fairseq-eval-lm builds its task from its command line, not from the checkpoint: a model
    trained with -- --add-bos-token was scored without it (another perplexity than its own), and
    the recipe's own --tokens-per-sample 128 was not given either. Only the task's options are
    passed (fairseq-eval-lm refuses fairseq-train's --lr)."""
    data, _ = trained
    result = run_script(
        REPO / "examples" / "learn_to_share_lm.sh", "--data", str(data), "--run-dir",
        str(tmp_path / "run"), "--dry-run", "--", "--add-bos-token", "--lr", "1e-4",
        "--tokens-per-sample=64",
    )  # fmt: skip
    assert result.returncode == 0, output_of(result)[-3000:]
    (command,) = [line for line in result.stderr.splitlines() if "fairseq-eval-lm" in line]
    words = shlex.split(command)
    scored = words[words.index("--sample-break-mode"):words.index("--path")]
    assert scored == ["--sample-break-mode", "eos", "--tokens-per-sample", "128",
                      "--add-bos-token", "--tokens-per-sample=64"]  # fmt: skip


def test_the_loop_learns_a_policy_scored_by_perplexity(trained, tmp_path):
    """learn_to_share_lm.sh: P_0, its analysis and perplexity, P_1 learned at theta, trained; the
    options recorded (run.json), a re-run with others refused, one loop at a time."""
    data, _ = trained
    run = tmp_path / "run"
    result = lm_loop(data, run, "--theta-self", "0.6", "--max-iterations", "2")
    assert result.returncode == 0, output_of(result)[-4000:]
    assert read_json(run / "iter0" / "valid.json")["perplexity"] > 1
    assert sum(read_json(run / "iter1" / "policy.json")["decoder_self"]) == 6  # learned, 6 layers
    assert (run / "iter1" / "trained").exists()
    table = (run / "loop.md").read_text()
    assert "| valid ppl |" in table and "| 0 | decoder_self none | " in table
    assert "decoder_encdec" not in table and "encoder_self" not in table  # kinds it has not
    options = read_json(run / "run.json")["options"]
    assert options["--lm"] is True and options["--theta-self"] == "0.6"
    assert options["--self-share"] == "weights" and "--valid-ref" in options

    other = lm_loop(data, run, "--theta-self", "0.5", "--max-iterations", "2")
    assert other.returncode == 2
    assert other.stderr.strip().splitlines()[-1].startswith(
        f"fairseq-san-loop: error: {run} was made with --theta-self 0.6, not 0.5"
    )
    with open(run / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        busy = lm_loop(data, run, "--theta-self", "0.6", "--max-iterations", "2")
    assert busy.returncode == 2 and "is in use by another" in busy.stderr


@pytest.mark.skipif(available_cores() < 2, reason="--cpu-ranks 2 needs two CPU cores")
def test_the_loop_trains_on_two_cpu_ranks_and_warm_starts(trained, tmp_path):
    """--cpu-ranks and --warm-start, the translation loop's, in the language model's: iteration 0
    trains as two CPU processes, iteration 1 fine-tunes iteration 0's best model for
    --warm-updates, without the projections that P_1 does not use."""
    data, _ = trained
    run = tmp_path / "run"
    result = lm_loop(data, run, "--theta-self", "0.6", "--max-iterations", "2", "--cpu-ranks",
                     "2", "--warm-start", "--warm-updates", "5")  # fmt: skip
    assert result.returncode == 0, output_of(result)[-4000:]
    assert "distributed init (rank 1)" in (run / "iter0" / "rank-1.log").read_text()
    best = [run / f"iter{k}" / "checkpoints" / "checkpoint_best.pt" for k in (0, 1)]
    state0, state1 = (checkpoint_utils.load_checkpoint_to_cpu(str(path)) for path in best)
    assert state0["cfg"]["distributed_training"]["distributed_world_size"] == 2
    assert state1["optimizer_history"][-1]["num_updates"] == 5  # --warm-updates
    log = (run / "iter1" / "train.log").read_text()
    assert f"loading pretrained model from {best[0]}" in log
    followers = [layer for layer, leader in enumerate(block_leaders(
        read_json(run / "iter1" / "policy.json")["decoder_self"], 6)) if layer != leader]
    assert followers  # theta 0.6 shares: P_1 drops projections
    dropped = {f"decoder.layers.{layer}.self_attn.{name}_proj.{param}"
               for layer in followers for name in "qk" for param in ("weight", "bias")}  # fmt: skip
    assert set(state1["model"]) == set(state0["model"]) - dropped


@pytest.mark.parametrize("present", [(), ("dict.txt",)])
def test_the_loop_without_binarized_data_stops_in_one_line(tmp_path, present):
    """A dictionary without the binarized sentences (train.idx) failed after the run dir was
    made, with the usage text of ``fairseq-san-loop start``."""
    for name in present:
        (tmp_path / name).write_text("tok 1\n")
    result = lm_loop(tmp_path, tmp_path / "run")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"fairseq-san-loop: error: {tmp_path} holds no fairseq-preprocess --only-source output "
        "(dict.txt, train.idx): run examples/lm/prepare.sh first (--data)"
    ]
    assert not (tmp_path / "run").exists()
