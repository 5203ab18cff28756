"""A language model's validation score in the learn-to-share loop: fairseq-eval-lm's perplexity
(``fairseq_san.loop.perplexity``) and the loop table's perplexity column."""

import array

import pytest

from fairseq_san.errors import UsageError
from fairseq_san.loop.perplexity import read_perplexity
from fairseq_san.loop.summary import summary_table
from helpers import run_cli

EVAL_LM = (
    "INFO:fairseq_cli.eval_lm:Evaluated 15,188 tokens in 2.1s (7232.38 tokens/s)\n"
    "INFO:fairseq_cli.eval_lm:Loss (base 2): 5.1234, Perplexity: 34.86\n"
)


def test_the_perplexity_of_fairseq_eval_lm(tmp_path):
    log = tmp_path / "eval.log"
    log.write_text("INFO:fairseq_cli.eval_lm:loading model\n" + EVAL_LM)
    assert read_perplexity(str(log)) == {"perplexity": 34.86, "loss_base2": 5.1234, "tokens": 15188}


def test_a_log_without_the_result_is_one_error(tmp_path):
    log = tmp_path / "eval.log"
    log.write_text(EVAL_LM.splitlines()[0] + "\n")  # stopped before the loss line
    with pytest.raises(UsageError, match="no 'Evaluated N tokens' and 'Loss"):
        read_perplexity(str(log))


@pytest.mark.parametrize(
    "lines, said",
    [
        ("Evaluated 15,188 tokens in 2.1s\nLoss (base 2): nan, Perplexity: nan\n",
         "the perplexity is nan: the model diverged"),
        ("Evaluated 15,188 tokens in 2.1s\nLoss (base 2): inf, Perplexity: inf\n",
         "the perplexity is inf: the model diverged"),
        ("Evaluated 0 tokens in 0.0s\nLoss (base 2): 0.0000, Perplexity: 1.00\n",
         "fairseq-eval-lm evaluated 0 tokens"),
    ],
    ids=["nan", "inf", "no tokens"],
)  # fmt: skip
def test_a_result_that_is_no_score_is_named(tmp_path, lines, said):
    """A diverged model's "nan" was said to be no result line at all; 0 tokens scored 1.00."""
    log = tmp_path / "eval.log"
    log.write_text(lines)
    with pytest.raises(UsageError, match=said):
        read_perplexity(str(log))


@pytest.mark.parametrize(
    "lines",
    [
        "Evaluated 15 tokens in 2.1s\nLoss (base 2): 5.0, Perplexity: 1e+300\n",
        "Evaluated 15 tokens in 2.1s\nLoss (base 2): 5.0, Perplexity: 1.2.3\n",
        "Evaluated , tokens in 2.1s\nLoss (base 2): 5.0, Perplexity: 32.00\n",
    ],
    ids=["exponent", "two points", "no digits"],
)  # fmt: skip
def test_a_number_no_line_of_fairseq_eval_lm_holds_is_one_error(tmp_path, lines):
    """A log edited by hand: "1e+300" was read as a perplexity of 1, "1.2.3" and "," were
    ValueError tracebacks."""
    log = tmp_path / "eval.log"
    log.write_text(lines)
    result = run_cli("fairseq-san-loop", "perplexity", str(log), "-o", str(tmp_path / "v.json"))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"fairseq-san-loop: error: {log}: no 'Evaluated N tokens' and 'Loss (base 2): L, "
        "Perplexity: P' lines of fairseq-eval-lm"
    ]
    assert not (tmp_path / "v.json").exists()


def test_a_long_perplexity_is_said_abbreviated(tmp_path):
    """A perplexity past a float's range (inf) was quoted whole: hundreds of digits."""
    log = tmp_path / "eval.log"
    log.write_text(f"Evaluated 15 tokens in 2.1s\nLoss (base 2): 5.0, Perplexity: {'9' * 400}\n")
    with pytest.raises(UsageError, match=f"the perplexity is {'9' * 80}\\.\\.\\.: the model"):
        read_perplexity(str(log))


def row(iteration, perplexity=None, bleu=None):
    return dict(
        iteration=iteration, policy="decoder_self none", learned="-", learned_for="-", parameters=1000,
        num_updates=10, train_seconds=60, valid_loss=5.0, bleu=bleu, chrf=None,
        signature=None, perplexity=perplexity, trained=True,
    )  # fmt: skip


def test_the_loop_table_shows_perplexity_for_a_language_model_and_bleu_otherwise():
    lm = summary_table([row(0, perplexity=34.861), row(1, perplexity=35.2)])
    assert "| valid ppl | learned policy |" in lm and "| 34.86 |" in lm and "BLEU" not in lm.split("\n")[0]
    mt = summary_table([row(0, bleu=30.0)])
    assert "| valid BLEU | valid chrF |" in mt and "ppl" not in mt
    # the two scores of a language model come from two programs, which with --add-bos-token
    # count different targets: 10.479 beside 2006.89 (2 ** 10.479 is 1428), said nowhere
    assert "with --add-bos-token the loss counts a first target, <s> after <s>" in lm
    assert "add-bos-token" not in mt
    # a language model's run (its record's --lm) stopped before its first perplexity: it showed
    # the translation columns
    unscored = summary_table([row(0)], language_model=True)
    assert "| valid ppl | learned policy |" in unscored and "BLEU" not in unscored


def test_an_output_the_loop_cannot_write_is_named_as_given(tmp_path):
    """fairseq-san-loop perplexity -o into a missing folder said "[Errno 2] No such file or
    directory: 'OUT.json.tmp'", the temporary file the write goes through; a folder, "'DIR.tmp'
    -> 'DIR'". Both are said before the log is read now. No temporary file is left."""
    log = tmp_path / "eval.log"
    log.write_text(EVAL_LM)
    (tmp_path / "folder").mkdir()
    for output, said in (
        (tmp_path / "none" / "ppl.json", f"no folder {tmp_path / 'none'} (create it first)"),
        (tmp_path / "folder", "is a folder: name the JSON file to write"),
    ):
        result = run_cli("fairseq-san-loop", "perplexity", str(log), "-o", str(output))
        assert result.returncode == 2 and result.stdout == "", result.stderr
        assert result.stderr.strip() == f"fairseq-san-loop: error: -o {output} {said}"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["eval.log", "folder"]
    assert not list((tmp_path / "folder").iterdir())


def test_lm_task_args_names_a_data_directory_that_is_not_there(tmp_path):
    """``--data`` of a typo (or a file) checked no sentence and printed the options: exit 0, as
    for a sample long enough."""
    (tmp_path / "file").write_text("x\n")
    for data in (tmp_path / "nodata", tmp_path / "file"):
        result = run_cli("fairseq-san-loop", "lm-task-args", "--data", str(data), "--",
                         "--tokens-per-sample", "64")  # fmt: skip
        assert (result.returncode, result.stdout) == (2, ""), result.stderr
        assert result.stderr.splitlines() == [
            f"fairseq-san-loop: error: no data directory {data} (--data)"
        ]



def test_lm_task_args_names_sharded_data_as_such(tmp_path):
    """learn_to_share_lm.sh's --data DATA1:DATA2 (both there) was "no data directory", where the
    translation loop says what ':' is."""
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    data = f"{tmp_path}/a:{tmp_path}/b"
    result = run_cli("fairseq-san-loop", "lm-task-args", "--data", data, "--",
                     "--tokens-per-sample", "64")  # fmt: skip
    assert (result.returncode, result.stdout) == (2, ""), result.stderr
    assert result.stderr.splitlines() == [
        f"fairseq-san-loop: error: --data {data} holds ':', which fairseq reads between two data "
        "folders: choose a path without one"
    ]

@pytest.mark.parametrize(
    "after, said",
    [(["--max-target-positions", "20"], "--tokens-per-sample 128 is more than "
      "--max-target-positions 20, the model's positions"),
     (["--max-target-positions", "128", "--add-bos-token"], "--tokens-per-sample 128 and "
      "--add-bos-token's start token (129 in all) is more than --max-target-positions 128"),
     (["--max-target-positions", "128"], None)],
)  # fmt: skip
def test_lm_task_args_refuses_samples_longer_than_the_models_positions(after, said):
    """learn_to_share_lm.sh's --tokens-per-sample 128 beside --max-target-positions 20 after --
    passed the recipe's checks, its dry run included, and the task refused it once the run dir
    was made (a rerun with other arguments is then refused as another run)."""
    result = run_cli("fairseq-san-loop", "lm-task-args", "--",
                     "--tokens-per-sample", "128", *after)  # fmt: skip
    if said is None:
        assert result.returncode == 0, result.stderr
        return
    assert (result.returncode, result.stdout) == (2, ""), result.stderr
    assert result.stderr.splitlines()[-1].startswith(f"fairseq-san-loop: error: {said}")


@pytest.mark.parametrize(
    "after, refused",
    [
        (["--sample-break-mode", "complete"], True),  # a longer sentence is a sample of its own
        (["--sample-break-mode", "complete_doc"], True),
        (["--sample-break-mode", "none"], True),  # blocks of 4, but analysed whole (eos)
        (["--sample-break-mode", "none", "--max-target-positions", "9"], False),
        (["--sample-break-mode", "none", "--max-target-positions", "9", "--add-bos-token"], True),
        (["--shorten-method", "truncate"], False),  # every split cut to 4 tokens
        (["--shorten-method", "random_crop", "--shorten-data-split-list", "train,valid"], False),
        (["--shorten-method", "truncate", "--shorten-data-split-list", "train"], True),
    ],
)  # fmt: skip
def test_lm_task_args_checks_whole_sentences_that_are_not_cut(tmp_path, after, refused):
    """--sample-break-mode complete keeps sentences whole as eos does (fairseq-train stopped at
    a valid one longer than a sample, after the run dir was made), and --shorten-method cuts them
    to --tokens-per-sample (the loop refused a run that trains). --sample-break-mode none trains
    on blocks, but the loop's analysis reads each valid sentence whole (fairseq-validate
    --sample-break-mode eos): it stopped after iteration 0 trained, telling to pass
    --sample-break-mode none."""
    from fairseq_san.loop.run_record import longest_sentence_problem

    write_valid_index(tmp_path, [3, 9])
    problem = longest_sentence_problem(str(tmp_path), ["--tokens-per-sample", "4", *after])
    assert (problem is not None) == refused, problem
    if refused and "--max-target-positions" in after:  # 9 positions: the start token's too many
        assert problem.startswith("--max-target-positions 9: the longest valid sentence of "
                                  f"{tmp_path} has 9 tokens with its end and the start token of "
                                  "--add-bos-token, more than"), problem  # fmt: skip
        assert "pass --max-target-positions 10 or more after --, or leave it out" in problem
    elif refused and "none" in after:
        assert "(--sample-break-mode none trains on blocks, but the loop analyses" in problem
        assert problem.endswith("or --max-target-positions 9 or more"), problem
    elif refused:
        mode = after[1] if after[0] == "--sample-break-mode" else "eos"
        assert f"a sample (--sample-break-mode {mode}; the loop" in problem, problem


def write_valid_index(data, sizes):
    """``data/valid.idx`` in fairseq's mmap format (magic, version, dtype code, count, int32
    sizes), of sentences ``sizes`` tokens long with their end."""
    from fairseq_san.loop.run_record import INDEX_MAGIC

    header = INDEX_MAGIC + (1).to_bytes(8, "little") + b"\x04" + len(sizes).to_bytes(8, "little")
    (data / "valid.idx").write_bytes(header + array.array("i", sizes).tobytes())


@pytest.mark.parametrize(
    "after",
    [["--tokens-per-sample", "128", "--sample-break-mode", "none", "--max-target-positions", "9"],
     ["--tokens-per-sample", "4", "--max-target-positions", "9"],
     ["--tokens-per-sample", "128", "--max-target-positions", "12", "--add-bos-token"],
     ["--tokens-per-sample", "4", "--sample-break-mode", "none"]],
)  # fmt: skip
def test_lm_task_args_advice_followed_is_not_refused_again(tmp_path, after):
    """Each refusal's first advice, taken, ends in a run lm-task-args accepts: with
    --max-target-positions 9 below the longest valid sentence (12 tokens), "lower
    --tokens-per-sample to at most 9" was refused next as too short for that sentence, whose
    advice "pass --tokens-per-sample 12 or more" was refused as more than the positions."""
    import argparse
    import re

    from fairseq_san.cli.loop import run_lm_task_args
    from fairseq_san.loop.run_record import longest_sentence_problem

    write_valid_index(tmp_path, [3, 12])
    said = []
    for _ in range(3):
        try:
            run_lm_task_args(argparse.Namespace(data=str(tmp_path)), after)
            assert longest_sentence_problem(str(tmp_path), after) is None, after  # data read
            return
        except UsageError as error:
            said.append(str(error))
        advice = re.search(r"(?:lower|pass) (--[a-z-]+) (?:to at most )?(\d+)", said[-1])
        flag, value = advice.groups()
        after = [*after, flag, value]
    pytest.fail(f"still refused after following {len(said)} pieces of advice: {said}")

