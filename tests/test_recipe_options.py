"""The recipes' one option list (fairseq_san/loop/recipe_options.py): parsed for the shell,
shown by --help, and what `fairseq-san-loop start` records."""

import shlex
import subprocess
from typing import Optional

import pytest
from helpers import REPO, cli_env

from fairseq_san.cli.loop import build_parser, run_options
from fairseq_san.loop.recipe_options import (
    LM_LOOP,
    LOOP,
    RECIPE_OPTIONS,
    parse_recipe_args,
    shell_assignments,
    start_options,
)


def in_bash(recipe: str, *args: str, show: str) -> subprocess.CompletedProcess:
    """Eval what `fairseq-san-loop options` prints for ``args``, as the recipes do, then run
    ``show``."""
    script = (f'set -euo pipefail; OPTIONS=$(fairseq-san-loop options {recipe} "$@"); '
              f'eval "$OPTIONS"; {show}')  # fmt: skip
    return subprocess.run(["bash", "-c", script, "recipe", *args], env=cli_env(), cwd=REPO,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def test_values_with_spaces_and_the_train_arguments_reach_the_shell_unchanged(tmp_path):
    result = in_bash(
        LOOP, "--data", str(tmp_path / "my data"), "--run-dir", "r", "--launcher",
        "torchrun --nproc_per_node 8", "--warm-start", "--dry-run", "--", "--adam-betas",
        "(0.9, 0.98)", "--seed", "2",
        show='printf "%s|" "$DATA" "$LAUNCHER" "$WARM_START" "$DRY_RUN" "$THETA_SELF" "$@"',
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("|")[:-1] == [
        str(tmp_path / "my data"), "torchrun --nproc_per_node 8", "1", "1", "0.4",
        "--adam-betas", "(0.9, 0.98)", "--seed", "2"]  # fmt: skip


@pytest.mark.parametrize(
    "launcher, train_args, gpus, said",
    [
        ("torchrun --nproc_per_node 2", [], 1,
         "--launcher 'torchrun --nproc_per_node 2' starts 2 ranks on a machine with 1 GPU: "
         "fairseq-train puts rank R on GPU R % 1, and NCCL (--distributed-backend nccl, "
         "fairseq's default) refuses two ranks on one GPU; start at most 1 a machine "
         "(--nproc_per_node), or pass --distributed-backend gloo (after --)"),
        ("python3 -u -m torch.distributed.run --nproc-per-node=3", ["--distributed-backend=nccl"],
         2, "--launcher 'python3 -u -m torch.distributed.run --nproc-per-node=3' starts 3 ranks "
         "on a machine with 2 GPUs"),
        ("torchrun --nproc_per_node 1 --nproc_per_node 4", [], 2,
         "--launcher 'torchrun --nproc_per_node 1 --nproc_per_node 4' starts 4 ranks"),  # the last
        ("torchrun --nproc-per-node 4 --nproc_per_node 1", [], 0, None),  # one option: the last
        ("torchrun --nproc_per_node 1 --nproc-per-node=4", [], 2,
         "--launcher 'torchrun --nproc_per_node 1 --nproc-per-node=4' starts 4 ranks"),
        ("torchrun --nproc_per_node 2", ["--cpu", "--distributed-backend", "gloo"], 0,
         "--launcher 'torchrun --nproc_per_node 2' starts 2 ranks, and this machine has no GPU"),
        ("torchrun --nproc_per_node 2", ["--distributed-backend", "gloo"], 0,
         "--launcher 'torchrun --nproc_per_node 2' starts 2 ranks, and this machine has no GPU "
         "(fairseq-train puts each rank on one); on CPUs, give --cpu-ranks 2 instead"),
        ("torchrun --nproc_per_node 2", ["--distributed-backend", "gloo"], 1, None),
        ("torchrun --nproc_per_node 2", [], 2, None),
        ("torchrun --nproc_per_node gpu", [], 1, None),  # torchrun counts them itself
        ("srun --ntasks 4", [], 0, None),  # not torchrun: its ranks are not counted here
        ("srun torchrun --nproc_per_node 4", [], 0, None),  # torchrun on other machines
    ],
)  # fmt: skip
def test_torchrun_ranks_that_cannot_meet_here_are_refused_before_anything_starts(
    tmp_path, monkeypatch, capsys, launcher, train_args, gpus, said
):
    """Each rank was refused in one line by fairseq-train, then torchrun printed its own
    ChildFailedError traceback after them; a dry run (for another machine) is not checked."""
    from fairseq_san.loop import recipe_options

    monkeypatch.setattr(recipe_options, "cuda_devices", lambda: gpus)
    monkeypatch.setattr(recipe_options.shutil, "which", lambda command: f"/usr/bin/{command}")
    argv = ["--data", str(tmp_path), "--run-dir", "r", "--launcher", launcher, "--", *train_args]
    line = launcher_refusal(capsys, argv)
    assert line is None if said is None else line.startswith(f"{LOOP}: {said}"), line


def launcher_refusal(capsys, argv: list) -> Optional[str]:
    """The one line (exit 2) that the loop's recipe refuses ``argv`` (``--data D --run-dir R
    --launcher L`` first) with, None where it takes it; a dry run (planned for another machine:
    its devices not counted) takes it either way."""
    try:
        parse_recipe_args(LOOP, argv)
    except SystemExit as refused:
        (line,) = capsys.readouterr().err.splitlines()
        assert refused.code == 2, line
        parse_recipe_args(LOOP, argv[:6] + ["--dry-run"] + argv[6:])
        return line
    return None


@pytest.mark.parametrize(
    "words, cores, gpus, said",
    [
        ("--nproc_per_node cpu", 2, 0, "starts 2 ranks, and this machine has no GPU "
         "(fairseq-train puts each rank on one); on CPUs, give --cpu-ranks 2 instead"),
        ("--nproc-per-node=auto", 3, 0, "starts 3 ranks, and this machine has no GPU"),
        ("--nproc_per_node gpu", 2, 0, "--nproc_per_node gpu starts one rank per GPU, and this "
         "machine has no GPU; on CPUs, give --cpu-ranks N instead"),
        ("--nproc_per_node cpu", 1, 0, None),  # one rank: fairseq-train trains it on the CPU
        ("--nproc_per_node auto", 8, 1, None),  # the GPU, not the cores
        ("--nproc_per_node cpu", 4, 4, None),  # 4 ranks on 4 GPUs
        ("--nproc_per_node cpu", 4, 2, "starts 4 ranks"),  # the cores, not the 2 GPUs
    ],
)  # fmt: skip
def test_torchrun_device_words_are_counted_as_torchrun_counts_them(
    tmp_path, monkeypatch, capsys, words, cores, gpus, said
):
    """torchrun's --nproc_per_node cpu and auto (on a machine without GPUs) start a rank per core,
    and gpu, there, none (its ValueError traceback): they were not counted, so the run dir was
    made and every rank refused by fairseq-train, then torchrun's ChildFailedError traceback."""
    from fairseq_san.loop import recipe_options

    monkeypatch.setattr(recipe_options, "cuda_devices", lambda: gpus)
    monkeypatch.setattr(recipe_options.os, "sched_getaffinity", lambda pid: set(range(cores)))
    monkeypatch.setattr(recipe_options.shutil, "which", lambda command: f"/usr/bin/{command}")
    line = launcher_refusal(capsys, ["--data", str(tmp_path), "--run-dir", "r", "--launcher",
                                     f"torchrun {words}"])  # fmt: skip
    if said is None:
        assert line is None, line
    else:
        assert line and line.startswith(f"{LOOP}: --launcher 'torchrun {words}'"), line
        assert said in line, line


@pytest.mark.parametrize("value", ["0", "-1", "x", "2.5", "", "GPU", None])
def test_a_torchrun_rank_count_torchrun_cannot_start_is_one_line(tmp_path, monkeypatch, capsys,
                                                                   value):
    """--nproc_per_node 0 or -1 (torchrun's bare AssertionError traceback) and a word it does not
    know (its ValueError traceback), after the run dir was made; refused in a dry run too."""
    from fairseq_san.loop import recipe_options

    monkeypatch.setattr(recipe_options, "cuda_devices", lambda: 0)
    monkeypatch.setattr(recipe_options.shutil, "which", lambda command: f"/usr/bin/{command}")
    # None: no value, and torchrun read the word after it, fairseq-train's path
    launcher = "torchrun --nproc_per_node" + ("" if value is None else f"={value}")
    value = "fairseq-train" if value is None else value
    for dry_run in ([], ["--dry-run"]):
        argv = ["--data", str(tmp_path), "--run-dir", "r", "--launcher", launcher, *dry_run]
        with pytest.raises(SystemExit) as refused:
            parse_recipe_args(LOOP, argv)
        (line,) = capsys.readouterr().err.splitlines()
        assert refused.value.code == 2 and line == (
            f"{LOOP}: --launcher {shlex.quote(launcher)}: --nproc_per_node {value}: torchrun "
            "takes a number of ranks of at least 1, or one of gpu, cpu, auto"
        ), line


def test_defaults_follow_the_other_options(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.en-fr.en.idx").touch()
    values, train_args = parse_recipe_args(LOOP, ["--data", str(data), "--run-dir", "r",
                                                  "--updates", "301"])  # fmt: skip
    assert values["WARM_UPDATES"] == "150" and train_args == []
    values, _ = parse_recipe_args(LOOP, ["--data", str(data), "--run-dir", "r", "--updates", "1"])
    assert values["WARM_UPDATES"] == "1"  # half of 1 was 0: "--warm-updates 0" refused
    assert values["VALID_REF"] == str(data / "text" / "valid.raw.fr")
    values, _ = parse_recipe_args(LOOP, ["--data", str(data), "--run-dir", "r", "--valid-ref", "v"])
    assert values["VALID_REF"] == "v"


@pytest.mark.parametrize("recipe", [LOOP, LM_LOOP])
def test_analysis_sentences_reach_fairseq_validate_and_an_older_record_resumes(recipe, tmp_path):
    """--analysis-sentences N is fairseq-validate's --san-analysis-max-sentences N (a decimal
    count: "010" is 10), none without it; a run recorded before the option resumes without it."""
    from fairseq_san.loop.recipe_options import recipe_defaults
    from fairseq_san.loop.run_record import differences

    show = 'echo "${#ANALYSIS_ARGS[@]}:${ANALYSIS_ARGS[*]}"'
    run = ("--data", str(tmp_path), "--run-dir", "r")
    given = in_bash(recipe, *run, "--analysis-sentences", "010", show=show)
    assert given.stdout == "2:--san-analysis-max-sentences 10\n", given.stderr
    assert in_bash(recipe, *run, show=show).stdout == "0:\n"
    values, _ = parse_recipe_args(recipe, list(run))
    now = run_options(build_parser().parse_args(["start", "r", *start_options(recipe, values)]), [])
    older = {name: value for name, value in now.items() if name != "--analysis-sentences"}
    assert differences(older, now, {}, recipe_defaults(recipe)) == []
    now["--analysis-sentences"] = "10"
    assert differences(older, now, {}, recipe_defaults(recipe)) == ["--analysis-sentences"]


@pytest.mark.parametrize("recipe", [LOOP, LM_LOOP])
def test_start_records_what_the_recipe_parsed(recipe, tmp_path):
    """START_OPTIONS, parsed by `fairseq-san-loop start`, record the recipe's values."""
    values, _ = parse_recipe_args(recipe, ["--data", str(tmp_path), "--run-dir", "r",
                                           "--theta-self", "0.3", "--extend"])  # fmt: skip
    args = build_parser().parse_args(["start", "r", *start_options(recipe, values)])
    recorded = run_options(args, [])
    assert args.extend and args.lm == (recipe == LM_LOOP)
    for option in RECIPE_OPTIONS[recipe]:
        if option.recorded and option.metavar:
            value = values[option.variable]
            expected = str(tmp_path) if option.flag == "--data" else value or None
            assert recorded[option.flag] == expected, option.flag
    assert recorded["--theta-self"] == "0.3"


@pytest.mark.parametrize("recipe", [LOOP, LM_LOOP])
@pytest.mark.parametrize("empty", ["--data", "--run-dir"])
def test_an_empty_data_or_run_dir_is_one_line(recipe, empty, tmp_path, capsys):
    """An empty --data was read as none (a TypeError in start's input check); an empty
    --run-dir printed the dry run's commands at "/" and stopped a real run on a closed file."""
    argv = {"--data": str(tmp_path), "--run-dir": "r", empty: ""}
    with pytest.raises(SystemExit) as exit:
        parse_recipe_args(recipe, [word for pair in argv.items() for word in pair])
    assert exit.value.code == 2
    assert capsys.readouterr().err == (
        f"{recipe}: {empty} is empty: name a folder ({recipe} --help lists the options)\n"
    )


@pytest.mark.parametrize("recipe", [LOOP, LM_LOOP])
def test_help_lists_every_option_and_runs_nothing(recipe):
    result = subprocess.run(["bash", str(REPO / "examples" / recipe), "--help"], env=cli_env(),
                            cwd=REPO, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: examples/{recipe} --data DATA --run-dir RUN")
    for option in RECIPE_OPTIONS[recipe]:
        assert option.flag in result.stdout
    after = shell_assignments(recipe, ["--data", "d", "--run-dir", "r", "--", "--help"])
    assert after.endswith("\nset -- --help\n")  # fairseq-train's --help, after --


@pytest.mark.parametrize(
    "args, message",
    [
        (["--data", "d", "--run-dir", "r", "--theta", "0.3"], "unrecognized arguments: --theta 0.3"),
        (["--data", "d"], "the following arguments are required: --run-dir"),
        # the unknown option first: it was the missing --data and --run-dir, --bogus unnamed
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["--data", "d", "--run-dir", "r", "--updates"], "argument --updates: expected one argument"),
    ],
)  # fmt: skip
def test_a_bad_command_line_is_one_line_before_anything_runs(args, message, tmp_path):
    result = subprocess.run(["bash", str(REPO / "examples" / LOOP), *args], env=cli_env(),
                            cwd=tmp_path, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"{LOOP}: {message} ({LOOP} --help lists the options)"]  # fmt: skip
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("recipe, given, message", [
    (LOOP, ["--san-policy", "p.json"], "--san-policy after --: the recipe sets it itself (each "
     "iteration's policy: P_0 shares nothing, then the learned one), and fairseq would take the "
     "value after -- instead, unrecorded: leave it out"),
    (LOOP, ["--san-decoder-self-policy=1,5"], "--san-decoder-self-policy after --: the recipe "
     "sets it itself (each iteration's policy"),
    # another plugin's folder: fairseq-train knew neither the task nor the model, its usage
    # printed after the run dir was made
    (LM_LOOP, ["--user-dir", "my_plugin"], "--user-dir after --: the recipe sets it itself (the "
     "plugin, fairseq_san, which every step loads)"),
    (LOOP, ["--cpu", "--save-dir", "x"], "--save-dir after --: the recipe sets it itself (each "
     "iteration's checkpoints, under --run-dir)"),
    (LOOP, ["--arch", "transformer_san_base"], "--arch after --: the recipe sets it itself (the "
     "model, from its own --arch), and fairseq would take the value after -- instead, "
     "unrecorded: give --arch before --"),
    (LM_LOOP, ["--san-self-share", "kv"], "--san-self-share after --: the recipe sets it itself "
     "(from its own --self-share)"),
    (LM_LOOP, ["--task", "language_modeling"], "--task after --: the recipe sets it itself "
     "(language_modeling_san, which its analysis and scoring need)"),
    (LOOP, ["--task=translation"], "--task after --: the recipe sets it itself "
     "(translation_san, which its analysis and scoring need), and fairseq would take the value "
     "after -- instead, unrecorded: leave it out"),
    (LOOP, ["--cross-self-attention"], "--cross-self-attention after --: fairseq-train refuses "
     "it beside sharing decoder self-attention, which the loop learns (iteration 0 would train, "
     "then iteration 1 stop at its policy): leave it out"),
    (LOOP, ["--theta-encoder", "0.4", "--", "--encoder-layerdrop", "0.2"], "--encoder-layerdrop "
     "after --: fairseq-train refuses it beside sharing the encoder's attention"),
    # trained iteration 0, then its validation BLEU failed (fairseq-generate reads no argument
    # after --), at every rerun
    (LOOP, ["-s", "de", "-t", "en"], "-s after --: the recipe sets it itself (the language pair, "
     "--data's only one, which every step reads from it)"),
    (LOOP, ["--target-lang=en"], "--target-lang after --: the recipe sets it itself"),
    # every warm-started iteration restarted from that model, the record saying otherwise
    (LOOP, ["--warm-start", "--", "--finetune-from-model", "m.pt"], "--finetune-from-model after "
     "-- with --warm-start: each warm-started iteration fine-tunes the one before it (the recipe "
     "gives fairseq-train its model), and fairseq would take yours instead, unrecorded: give one "
     "of them"),
    (LM_LOOP, ["--decoder-layerdrop=0.1", "--seed", "2"], "--decoder-layerdrop after --"),
    (LM_LOOP, ["--checkpoint-activations"], "--checkpoint-activations after --: fairseq-train "
     "refuses it beside sharing any attention"),
    # the first of the command line (its table's order named --decoder-layerdrop)
    (LOOP, ["--offload-activations", "--decoder-layerdrop", "0.1"], "--offload-activations "
     "after --: fairseq-train refuses it beside sharing any attention"),
])  # fmt: skip
def test_a_train_argument_the_recipe_sets_itself_is_refused_after_the_dashes(
    recipe, given, message, tmp_path
):
    """learn_to_share.sh ... -- --san-policy FILE trained every iteration under FILE while
    loop.md named the loop's own policies (fairseq takes an option's last value): refused in
    one line before anything runs, as are the checkpoints' folder and the model."""
    result = subprocess.run(
        ["bash", str(REPO / "examples" / recipe), "--data", "d", "--run-dir", "r",
         *(given if "--" in given else ["--", *given])],
        env=cli_env(), cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"{recipe}: {message}")
    assert list(tmp_path.iterdir()) == []
    allowed = parse_recipe_args(recipe, ["--data", "d", "--run-dir", "r", "--", "--seed", "2"])
    assert allowed[1] == ["--seed", "2"]
    no_drop = ["--data", "d", "--run-dir", "r", "--", "--decoder-layerdrop", "0", "--seed", "2"]
    assert parse_recipe_args(recipe, no_drop)[1] == no_drop[5:]  # LayerDrop 0 drops nothing
    dropped_last = no_drop[:5] + ["--decoder-layerdrop=0.1", "--decoder-layerdrop", "0"]
    assert parse_recipe_args(recipe, dropped_last)[1] == dropped_last[5:]  # fairseq's: the last


def test_the_encoders_layerdrop_is_refused_only_where_the_loop_shares_the_encoder():
    """Without --theta-encoder the loop never shares the encoder's attention, and fairseq-train
    trains a shared decoder beside an encoder's LayerDrop: it was refused, for a false reason."""
    for flag in ("--encoder-layerdrop", "--encoder-layers-to-keep"):
        argv = ["--data", "d", "--run-dir", "r", "--", flag, "0.1" if "drop" in flag else "0,1"]
        assert parse_recipe_args(LOOP, argv)[1] == argv[5:]
    with_warm_model = ["--data", "d", "--run-dir", "r", "--", "--finetune-from-model", "m.pt"]
    assert parse_recipe_args(LOOP, with_warm_model)[1] == with_warm_model[5:]  # no --warm-start


def test_a_launcher_a_shell_cannot_split_is_one_line(capsys):
    """--launcher is split as a shell splits it (quotes kept together): an open quote is named."""
    with pytest.raises(SystemExit) as exit_info:
        shell_assignments(LOOP, ["--data", "d", "--run-dir", "r", "--launcher", "torchrun 'x"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        f"{LOOP}: --launcher torchrun 'x: No closing quotation"]  # fmt: skip


@pytest.mark.parametrize(
    "arch, extra, thetas",
    [
        ("transformer_san_small", [], "--theta-decoder-self|0.4|--theta-decoder-encdec|0.5|"),
        ("transformer_san_small", ["--theta-encoder", "0.3"],
         "--theta-decoder-self|0.4|--theta-decoder-encdec|0.5|--theta-encoder-self|0.3|"),
        ("transformer_aan_small", [], "--theta-decoder-encdec|0.5|"),
        # the model's option after -- decides: fairseq-train takes it over the architecture's
        ("transformer_san_small", ["--", "--decoder-self-attention-type", "aan"],
         "--theta-decoder-encdec|0.5|"),
        ("transformer_aan_small", ["--", "--decoder-self-attention-type=dot"],
         "--theta-decoder-self|0.4|--theta-decoder-encdec|0.5|"),
    ],
    ids=["san", "san, encoder", "aan", "san made aan", "aan made dot"],
)  # fmt: skip
def test_the_loop_learns_with_the_thresholds_its_decoder_has_attention_for(arch, extra, thetas):
    """An AAN decoder has no self-attention weights: fairseq-san-policy warned at every
    iteration that it ignored --theta-decoder-self, which the recipe passed anyway."""
    result = in_bash(LOOP, "--data", "d", "--run-dir", "r", "--arch", arch, *extra,
                     show='printf "%s|" "${POLICY_THETAS[@]}"')  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout == thetas


@pytest.mark.parametrize("given", [["--theta-self", "0.3"], ["--theta-self=0.3"]])
def test_a_theta_for_an_aan_decoders_self_attention_is_one_line(given, capsys):
    """It would be ignored: the AAN decoder's self-attention has no weights to share."""
    with pytest.raises(SystemExit) as exit_info:
        shell_assignments(LOOP, ["--data", "d", "--run-dir", "r", "--arch",
                                 "transformer_aan_small", *given])  # fmt: skip
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        f"{LOOP}: --theta-self 0.3: an AAN decoder (--arch transformer_aan_small) has no "
        "self-attention weights to share; leave it out"
    ]


def test_a_launcher_not_found_is_refused_before_anything_starts(tmp_path, capsys):
    """bash said "command not found" at the first training (exit 127), after run.json was
    written; a dry run (for another machine) is not checked."""
    argv = ["--data", str(tmp_path), "--run-dir", "r", "--launcher", "torchrunx --nproc_per_node 2"]
    with pytest.raises(SystemExit):
        parse_recipe_args(LOOP, argv)
    (line,) = capsys.readouterr().err.splitlines()
    assert line == f"{LOOP}: --launcher 'torchrunx --nproc_per_node 2': command not found: torchrunx"
    parse_recipe_args(LOOP, argv + ["--dry-run"])


@pytest.mark.parametrize("use_env", [[], ["--use-env"], ["--use_env"]])
def test_the_launch_module_passing_local_rank_is_refused(tmp_path, monkeypatch, capsys, use_env):
    """``python -m torch.distributed.launch`` gives each rank --local-rank=R, which fairseq-train
    has not: every rank refused it after the run dir was made, then torchrun's ChildFailedError
    traceback. With --use-env it gives none (the ranks read LOCAL_RANK)."""
    launcher = " ".join(["python", "-m", "torch.distributed.launch", *use_env,
                         "--nproc_per_node", "1"])  # fmt: skip
    from fairseq_san.loop import recipe_options

    monkeypatch.setattr(recipe_options.shutil, "which", lambda command: f"/usr/bin/{command}")
    argv = ["--data", str(tmp_path), "--run-dir", "r", "--launcher", launcher]
    if use_env:
        parse_recipe_args(LOOP, argv)
        return
    with pytest.raises(SystemExit):
        parse_recipe_args(LOOP, argv)
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (
        f"{LOOP}: --launcher '{launcher}': torch.distributed.launch gives fairseq-train "
        "--local-rank, which it has not (it reads --local_rank): add --use-env, or use torchrun"
    )


def test_the_cpu_ranks_tool_as_a_launcher_is_refused_for_cpu_ranks(tmp_path, capsys):
    """``--launcher "fairseq-san-cpu-ranks 2 --"`` trained, its ranks' logs written into the
    folder the recipe was started from (--cpu-ranks gives it the iteration's)."""
    argv = ["--data", str(tmp_path), "--run-dir", "r", "--launcher", "fairseq-san-cpu-ranks 2 --"]
    with pytest.raises(SystemExit):
        parse_recipe_args(LOOP, argv)
    assert capsys.readouterr().err.splitlines() == [
        f"{LOOP}: --launcher 'fairseq-san-cpu-ranks 2 --': pass --cpu-ranks N instead (it writes "
        "each rank's log into the iteration's folder; this launcher would write them where the "
        "recipe was started)"
    ]
