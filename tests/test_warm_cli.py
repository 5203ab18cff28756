"""The tests' warm fairseq commands (``warm_cli``) end as the commands do when started cold.

* the same exit status, standard output and standard error as the real command, for a help
  page, an argument fairseq refuses with a traceback and a one-line error of the plugin, and
  for two of the plugin's own commands;
* a signal sent to a stand-in reaches its command; a stand-in killed takes its command with it;
* a command whose environment changes a start-up variable runs cold;
* a command's own PYTHONPATH comes first on its sys.path, warm; cold where it holds a package
  the server has imported, or, where the server has a PYTHONPATH, where it does not end with it;
* a file descriptor the command inherits is open in it under the same number;
* a command ends after its threads and exit handlers, its output flushed, with its status.
"""

import os
import re
import signal
import subprocess
import textwrap
import time
from pathlib import Path
from typing import Dict, List

import pytest

from helpers import BIN, REPO, cli_env, command_path
from warm_cli import _server, added_python_path

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
        ["fairseq-san-loop", "summary", "no-such-run"],  # the plugin's own: one line
        ["fairseq-san-bench", "steps", "--help"],  # the plugin's, importing torch and fairseq
    ],
    ids=["help", "traceback", "plugin-error", "plugin-command", "plugin-command-help"],
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
    unwritten = tmp_path / "unwritten"
    os.mkfifo(unwritten)  # opening it for reading waits for a writer, which never comes
    for sent in (signal.SIGTERM, signal.SIGKILL):
        stand_in = subprocess.Popen(
            [str(command_path("fairseq-preprocess")), "--only-source", "--workers", "1",
             "--trainpref", str(unwritten), "--destdir", str(tmp_path / sent.name)],
            cwd=REPO, env=cli_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while not supervisors() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert supervisors(), "the command did not start warm"
        stand_in.send_signal(sent)
        assert stand_in.wait(timeout=60) == -sent
        while supervisors() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not supervisors(), f"the command outlived its stand-in ({sent.name})"


def test_a_command_with_another_thread_count_runs_cold():
    env = {**cli_env(), "OMP_NUM_THREADS": "2"}
    result = run(command_path("fairseq-train"), "--no-such-option", env=env)
    assert result.returncode == 1
    assert f'File "{BIN / "fairseq-train"}"' in result.stderr


def fairseq_train_of_its_own(folder: Path, body: str) -> Dict[str, str]:
    """An environment whose PYTHONPATH puts ``folder`` first, where a ``fairseq_cli.train`` (not
    imported by the server) runs ``body``, in which ``how`` says whether the command runs warm
    (torch imported) or cold."""
    (folder / "fairseq_cli").mkdir(parents=True)
    (folder / "fairseq_cli" / "__init__.py").write_text("")
    (folder / "fairseq_cli" / "train.py").write_text(
        "import atexit\nimport os\nimport sys\nimport threading\nimport time\n\n\n"
        "def cli_main():\n    how = 'warm' if 'torch' in sys.modules else 'cold'\n"
        + textwrap.indent(textwrap.dedent(body), "    ")
    )
    return {**cli_env(), "PYTHONPATH": f"{folder}{os.pathsep}{REPO}"}


def test_a_pythonpath_of_its_own_comes_first_warm_and_cold_where_it_hides_an_imported_package(
    tmp_path,
):
    first = tmp_path / "first"
    env = fairseq_train_of_its_own(first, "print('from PYTHONPATH', how)")
    for runs in ("warm", "cold"):
        if runs == "cold":
            (first / "numpy").mkdir()  # a numpy of its own: the server has imported numpy
        result = run(command_path("fairseq-train"), env=env)
        assert (result.returncode, result.stdout) == (0, f"from PYTHONPATH {runs}\n"), result.stderr


def test_a_pythonpath_before_the_servers_adds_its_own_folders_only():
    """A server started with a PYTHONPATH (a pytest run given one): a recipe's
    ``PYTHONPATH=REPO:$PYTHONPATH`` ran every command in it cold."""
    server = {"PYTHONPATH": "/repo:/other"}
    assert added_python_path({"PYTHONPATH": "/first:/repo:/other"}, server) == ["/first"]
    assert added_python_path({"PYTHONPATH": "/repo:/repo:/other"}, server) == []
    assert added_python_path({"PYTHONPATH": "/repo"}, server) is None  # /other missing: cold
    assert added_python_path({"PYTHONPATH": "/other:/repo"}, server) is None  # another order
    assert added_python_path({"PYTHONPATH": "/first"}, {}) == ["/first"]


def test_a_descriptor_it_inherited_is_open_under_the_same_number(tmp_path):
    """As learn_to_share.sh's lock on fd 9, which every command it starts keeps."""
    env = fairseq_train_of_its_own(tmp_path / "first", "print(os.read(9, 64).decode(), how)")
    (tmp_path / "lock").write_text("fd 9")
    result = subprocess.run(
        ["bash", "-c", 'exec "$0" 9<"$1"', str(command_path("fairseq-train")), tmp_path / "lock"],
        env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert (result.returncode, result.stdout) == (0, "fd 9 warm\n"), result.stderr


def test_a_command_ends_after_its_threads_and_exit_handlers_with_its_output_flushed(tmp_path):
    """The runner skips only the interpreter's teardown of the modules (end_without_teardown)."""
    env = fairseq_train_of_its_own(tmp_path / "first", """
        atexit.register(print, "at exit", how)
        threading.Thread(target=lambda: time.sleep(0.5) or print("thread done")).start()
        sys.stdout.write("buffered, no newline ")
        sys.exit("a message")
    """)  # fmt: skip
    for how, env in (("warm", env), ("cold", {**env, "OMP_NUM_THREADS": "2"})):
        result = run(command_path("fairseq-train"), env=env)
        assert result.returncode == 1
        assert result.stdout == f"buffered, no newline thread done\nat exit {how}\n"
        assert result.stderr.endswith("a message\n")
