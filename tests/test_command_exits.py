"""The console commands end alike, as a script relies on: an interrupt is one line and status 130,
a reader of standard output that stops is status 141 and nothing said, an output with no room is
one line and status 1 (``fairseq_san.cli``), whether a command prints or writes "-"."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


def scored_files(folder: Path) -> list:
    """fairseq-san-score's arguments for one hypothesis and its reference, written to -."""
    (folder / "gen.txt").write_text("S-0\ta b\nH-0\t-0.1\ta b c\nD-0\t-0.1\ta b c\n")
    (folder / "ref.txt").write_text("a b c\n")
    return [str(BIN / "fairseq-san-score"), str(folder / "gen.txt"), "--reference",
            str(folder / "ref.txt"), "-o", "-"]  # fmt: skip


@pytest.mark.parametrize("command", [["fairseq-san-policy", "-"], ["fairseq-san-loop", "perplexity",
                                     "-", "-o", "-"]])  # fmt: skip
def test_an_interrupt_is_one_line_and_status_130(command):
    """Ctrl-C while a command read its input printed a KeyboardInterrupt traceback."""
    process = subprocess.Popen(
        [str(BIN / command[0]), *command[1:]], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    time.sleep(3)  # reading standard input, which stays open
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert (process.returncode, err, out) == (130, f"{command[0]}: interrupted\n", "")


def test_an_interrupt_that_a_library_turned_into_another_error_is_one_line(capsys):
    """Ctrl-C while fairseq imported numpy inside a command (fairseq-san-average's first
    seconds) ended in numpy's RecursionError, a traceback of some 90 lines, status 1. Another
    error, with no interrupt, keeps its traceback."""
    from fairseq_san.cli import said_when_interrupted

    def importing(error: Exception):
        def main():
            try:
                signal.raise_signal(signal.SIGINT)
            except KeyboardInterrupt:
                raise error from None

        return said_when_interrupted(main)

    with pytest.raises(SystemExit) as ended:
        importing(RecursionError("maximum recursion depth exceeded"))()
    assert ended.value.code == 130
    assert capsys.readouterr().err.endswith(": interrupted\n")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler

    def failing():
        raise RecursionError("no interrupt")

    with pytest.raises(RecursionError, match="no interrupt"):
        said_when_interrupted(failing)()


def test_a_command_whose_interrupts_are_ignored_ignores_them():
    """A command started with SIGINT ignored (``nohup``, a script's background job) must go on
    through Ctrl-C: the handler that says "interrupted" is only Python's own one's stand-in."""
    analysis = json.dumps({"decoder_self": [[0, 0.1], [0.1, 0]], "decoder_encdec": None,
                           "encoder_self": None})  # fmt: skip
    process = subprocess.Popen(
        [str(BIN / "fairseq-san-policy"), "-", "--theta-decoder-self", "0.5"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )  # fmt: skip
    time.sleep(3)  # reading standard input, which stays open
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(analysis, timeout=60)
    assert process.returncode == 0, err
    assert '"decoder_self": [2]' in out


def test_a_command_run_in_another_thread_runs():
    """Only the main thread may set a signal handler: a command's ``main`` called in another
    thread (a notebook's worker) runs without one (setting it would raise ValueError)."""
    from concurrent.futures import ThreadPoolExecutor

    from fairseq_san.cli import said_when_interrupted

    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(said_when_interrupted(lambda: 7)).result() == 7
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_closed_reader_of_dash_ends_the_command_quietly(tmp_path):
    """``-o -`` is written through /dev/stdout, not ``print``: a reader that stopped was a usage
    error, status 2, ``-o -: cannot write it: Broken pipe``, where ``print``'s is status 141."""
    reader, writer = os.pipe()
    os.close(reader)
    result = subprocess.run(scored_files(tmp_path), stdout=writer, stderr=subprocess.PIPE,
                            text=True, timeout=60)  # fmt: skip
    os.close(writer)
    assert result.returncode == 128 + signal.SIGPIPE, result.stderr
    assert "error" not in result.stderr, result.stderr


def test_a_full_output_of_dash_is_one_line_and_status_1(tmp_path):
    """An output with no room for ``-o -`` was a usage error, status 2, with the usage text."""
    with open("/dev/full", "w") as full:
        result = subprocess.run(scored_files(tmp_path), stdout=full, stderr=subprocess.PIPE,
                                text=True, timeout=60)  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        "fairseq-san-score: error: cannot write the standard output: No space left on device"
    )
    assert "usage:" not in result.stderr


@pytest.mark.parametrize("loop", [True, False])
def test_a_closed_output_is_one_line_and_status_1(tmp_path, loop):
    """Started with standard output closed (``>&-``), every printing command ended in an
    AttributeError traceback (Python's sys.stdout is None); coreutils say "Bad file descriptor"."""
    argv = [str(BIN / "fairseq-san-loop"), "user-dir"] if loop else scored_files(tmp_path)[:-2]
    result = subprocess.run(argv, stderr=subprocess.PIPE, text=True, timeout=60,
                            preexec_fn=lambda: os.close(1))  # fmt: skip
    name = os.path.basename(argv[0])
    assert (result.returncode, result.stderr) == (
        1, f"{name}: error: cannot write the standard output: Bad file descriptor\n"
    )


@pytest.mark.parametrize("command, said", [
    (["fairseq-san-policy", "-"], 'JS file "standard input" cannot be read: '),
    (["fairseq-san-loop", "train-log", "-"], ""),
    (["fairseq-san-score", "-", "--reference", "REF"], ""),
])  # fmt: skip
def test_a_closed_input_of_dash_is_named_closed(tmp_path, command, said):
    """Started with standard input closed (``<&-``), "-" was "No such file or directory" (or "JS
    file "standard input" not found"): the device /dev/stdin names nothing then."""
    (tmp_path / "REF").write_text("a b c\n")
    result = subprocess.run([str(BIN / command[0]), *command[1:]], stderr=subprocess.PIPE,
                            text=True, timeout=60, cwd=tmp_path,
                            preexec_fn=lambda: os.close(0))  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        f"{command[0]}: error: {said}standard input is closed (the command was started without"
        " one): name a file"
    )


def test_a_command_that_prints_nothing_runs_with_its_output_closed(monkeypatch):
    """Standard output closed (``>&-``, sys.stdout None) and nothing printed: the command ends as
    it would, its output not flushed (an AttributeError traceback of None's flush)."""
    from fairseq_san.cli import quiet_when_output_closes

    monkeypatch.setattr("sys.stdout", None)
    assert quiet_when_output_closes(lambda: 7)() == 7
    assert sys.stdout is None


def test_a_word_for_a_positive_integer_is_said_without_the_functions_name(capsys):
    """argparse said "invalid positive_int value: 'x'", the name of the type's function."""
    from fairseq_san.cli.loop import main

    with pytest.raises(SystemExit) as exit:
        main(["log-tail", "log", "--lines", "x"])
    assert exit.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "fairseq-san-loop log-tail: error: argument -n/--lines: x is not a positive integer"
    )
