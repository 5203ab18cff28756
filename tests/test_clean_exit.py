"""A fairseq command with the plugin loaded exits cleanly while fairseq's batch loader is busy.

fairseq-train stops at --max-update mid-epoch while its background loader (a daemon thread of
fairseq's BufferedIterator) may still be collating the next batch. At interpreter exit CPython
ends that thread inside torch's C++ code and the process aborts ("terminate called without an
active exception", status 134) after the checkpoint was written: once, 7 tests of a clean-clone
run failed this way. The script below makes the loader busy at exit every time, and reports at
exit, after the plugin's own exit handler, how many loader threads are still alive: that the
plugin stops them is tested everywhere; that a live one aborts the process only where this
Python and torch do abort.
"""

import subprocess
import sys
from typing import Dict

import pytest

from helpers import REPO, cli_env

SCRIPT = """
import atexit
import sys
import threading
import torch
import fairseq
from fairseq.data.iterators import BackgroundConsumer, BufferedIterator


def report_loaders():
    alive = [t for t in threading.enumerate() if isinstance(t, BackgroundConsumer) and t.is_alive()]
    print(f"loaders alive at exit: {len(alive)}", flush=True)


atexit.register(report_loaders)  # before the plugin's handler, so it runs after it (LIFO)
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
    script = tmp_path / f"train_stops_mid_epoch_{mode}.py"
    script.write_text(SCRIPT)
    env = cli_env()
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [sys.executable, str(script), mode], cwd=tmp_path, env=env, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Dict[str, subprocess.CompletedProcess]:
    """The script without the plugin ("fairseq") and with it ("plugin")."""
    tmp_path = tmp_path_factory.mktemp("clean-exit")
    return {mode: run(mode, tmp_path) for mode in ("fairseq", "plugin")}


def test_busy_batch_loader_is_stopped_before_exit(runs):
    """On every platform: the loader is busy at exit, and the plugin has stopped it before the
    interpreter finalizes (what keeps the abort below from happening)."""
    assert runs["fairseq"].stdout == "done training\nloaders alive at exit: 1\n"
    with_plugin = runs["plugin"]
    assert with_plugin.returncode == 0, with_plugin.stderr[-2000:]
    assert with_plugin.stdout == "done training\nloaders alive at exit: 0\n"


def test_busy_batch_loader_at_exit_does_not_abort(runs):
    bare = runs["fairseq"]
    if bare.returncode == 0:
        pytest.skip(
            "this Python and torch do not abort a busy daemon thread at exit; "
            "test_busy_batch_loader_is_stopped_before_exit shows the plugin stops it"
        )
    assert bare.returncode == -6 and "terminate called without an active exception" in bare.stderr
    with_plugin = runs["plugin"]
    assert with_plugin.returncode == 0, with_plugin.stderr[-2000:]
    assert "terminate called" not in with_plugin.stderr
