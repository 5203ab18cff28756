"""The tests' warm fairseq commands (``warm_cli``) end as the commands do when started cold.

* the same exit status, standard output and standard error as the real command, for a help
  page, an argument fairseq refuses with a traceback and a one-line error of the plugin;
* a signal sent to a stand-in reaches its command; a stand-in killed takes its command with it;
* a command whose environment changes a start-up variable runs cold;
* a command's own PYTHONPATH comes first on its sys.path, warm; cold where it holds a package
  the server has imported.
"""

import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import List

import pytest

from helpers import BIN, REPO, cli_env, command_path
from warm_cli import _server

pytestmark = pytest.mark.skipif(
    os.environ.get("FAIRSEQ_SAN_TEST_COLD") == "1", reason="FAIRSEQ_SAN_TEST_COLD=1: no server"
)
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \| ", re.MULTILINE)


def run(program: Path, *args: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([str(program), *args], cwd=REPO, env=env or cli_env(),
                          capture_output=True, text=True, timeout=240)  # fmt: skip


def comparable(text: str) -> str:
    """Output without log timestamps and without the first frame of a traceback (the console
    script cold, warm_cli warm)."""
    text = TIMESTAMP.sub("", text)
    return re.sub(r'Traceback \(most recent call last\):\n  File "[^"]+", line \d+, in <module>\n'
                  r"    [^\n]*\n(?: *\^+\n)?", "Traceback (most recent call last):\n", text)  # fmt: skip


def supervisors() -> List[int]:
    """The server's children: one per command running warm."""
    server = _server["process"].pid
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == server:
            children.append(int(stat.parent.name))
    return children


@pytest.mark.parametrize(
    "argv",
    [
        ["fairseq-generate", "--help"],
        ["fairseq-train", "--no-such-option"],  # fairseq's own RuntimeError, a traceback
        ["fairseq-validate", "no-such-data", "--user-dir", "fairseq_san", "--path", "x.pt"],
    ],
    ids=["help", "traceback", "plugin-error"],
)
def test_a_warm_command_ends_as_the_cold_one(argv):
    warm = run(command_path(argv[0]), *argv[1:])
    assert command_path(argv[0]).parent != BIN
    cold = run(BIN / argv[0], *argv[1:])
    assert warm.returncode == cold.returncode
    assert comparable(warm.stdout) == comparable(cold.stdout)
    assert comparable(warm.stderr) == comparable(cold.stderr)
    assert "warm_cli" in warm.stderr or "Traceback" not in warm.stderr


def test_a_signal_reaches_the_command_and_a_killed_stand_in_takes_its_command_along(tmp_path):
    for sent in (signal.SIGTERM, signal.SIGKILL):
        stand_in = subprocess.Popen(
            [str(command_path("fairseq-preprocess")), "--only-source", "--trainpref", "/dev/stdin",
             "--destdir", str(tmp_path / sent.name), "--workers", "1"],
            cwd=REPO, env=cli_env(), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip  (reads standard input until it closes)
        deadline = time.monotonic() + 60
        while not supervisors() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert supervisors(), "the command did not start warm"
        stand_in.send_signal(sent)
        assert stand_in.wait(timeout=60) == -sent
        while supervisors() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not supervisors(), f"the command outlived its stand-in ({sent.name})"
        stand_in.stdin.close()


def test_a_command_with_another_thread_count_runs_cold():
    env = {**cli_env(), "OMP_NUM_THREADS": "2"}
    result = run(command_path("fairseq-train"), "--no-such-option", env=env)
    assert result.returncode == 1
    assert f'File "{BIN / "fairseq-train"}"' in result.stderr



def test_a_pythonpath_of_its_own_comes_first_warm_and_cold_where_it_hides_an_imported_package(
    tmp_path,
):
    first = tmp_path / "first"
    (first / "fairseq_cli").mkdir(parents=True)  # not imported by the server
    (first / "fairseq_cli" / "__init__.py").write_text("")
    (first / "fairseq_cli" / "train.py").write_text(
        "import sys\n\n\ndef cli_main():\n"
        "    print('from PYTHONPATH', 'warm' if 'torch' in sys.modules else 'cold')\n"
    )  # fmt: skip
    env = {**cli_env(), "PYTHONPATH": f"{first}{os.pathsep}{REPO}"}
    for runs in ("warm", "cold"):
        if runs == "cold":
            (first / "numpy").mkdir()  # a numpy of its own: the server has imported numpy
        result = run(command_path("fairseq-train"), env=env)
        assert (result.returncode, result.stdout) == (0, f"from PYTHONPATH {runs}\n"), result.stderr
