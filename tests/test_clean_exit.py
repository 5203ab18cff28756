"""A fairseq command with the plugin loaded exits cleanly while fairseq's batch loader is busy.

fairseq-train stops at --max-update mid-epoch while its background loader (a daemon thread of
fairseq's BufferedIterator) may still be collating the next batch. At interpreter exit CPython
ends that thread inside torch's C++ code and the process aborts ("terminate called without an
active exception", status 134) after the checkpoint was written: once, 7 tests of a clean-clone
run failed this way. The script below makes the loader busy at exit every time.
"""

import subprocess
import sys

import pytest

from helpers import REPO, cli_env

SCRIPT = """
import sys
import torch
import fairseq
from fairseq.data.iterators import BufferedIterator

if sys.argv[1] == "plugin":
    import fairseq_san  # what --user-dir fairseq_san does


class Batches:
    \"\"\"An endless source whose every batch takes torch work, as collating does.\"\"\"

    def __len__(self):
        return 1000

    def __iter__(self):
        x = torch.randn(200, 200)
        while True:
            for _ in range(50):
                x = torch.tanh(x @ x)
            yield x


batches = BufferedIterator(1000, Batches())
next(batches)
print("done training", flush=True)
"""


def run(mode: str, tmp_path) -> subprocess.CompletedProcess:
    script = tmp_path / "train_stops_mid_epoch.py"
    script.write_text(SCRIPT)
    env = cli_env()
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [sys.executable, str(script), mode], cwd=tmp_path, env=env, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip


def test_busy_batch_loader_at_exit_does_not_abort(tmp_path):
    bare = run("fairseq", tmp_path)
    if bare.returncode == 0:
        pytest.skip("this Python and torch do not abort a busy daemon thread at exit")
    assert bare.returncode == -6 and "terminate called without an active exception" in bare.stderr
    with_plugin = run("plugin", tmp_path)
    assert with_plugin.returncode == 0, with_plugin.stderr[-2000:]
    assert with_plugin.stdout == "done training\n"
    assert "terminate called" not in with_plugin.stderr
