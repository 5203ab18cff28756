"""Fixtures shared by the test files. Heavy imports (torch, fairseq) stay inside the fixtures so
that the pure-Python tests (policy) do not pay for them."""

import pytest


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "slow: runs fairseq's command-line tools end to end (preprocess, train, generate, "
        "validate) or several processes; `make test-fast` leaves these out",
    )


@pytest.fixture(scope="session")
def binarized_corpus(tmp_path_factory):
    """The synthetic parallel corpus (target = reversed source), fairseq-preprocessed once."""
    from helpers import preprocess, write_corpus

    root = tmp_path_factory.mktemp("corpus")
    raw = write_corpus(root / "raw")
    return preprocess(raw, root / "data-bin")


# The toy Multi30k prepared by examples/multi30k/prepare.sh, once per test module that uses it.
@pytest.fixture(scope="module")
def multi30k_raw(tmp_path_factory):
    from helpers import write_fake_multi30k

    return write_fake_multi30k(tmp_path_factory.mktemp("multi30k-raw"))


@pytest.fixture(scope="module")
def prepared(multi30k_raw, tmp_path_factory):
    """(OUT, result of the first prepare.sh run), shared with the loop tests."""
    from helpers import PREPARE, output_of, prepare_env, run_script

    out = tmp_path_factory.mktemp("multi30k") / "data-bin"
    result = run_script(PREPARE, "en", "de", str(out), env=prepare_env(multi30k_raw))
    assert result.returncode == 0, output_of(result)[-4000:]
    return out, result


@pytest.fixture(scope="module")
def data(prepared):
    return prepared[0]


@pytest.fixture(scope="session")
def san_checkpoint(binarized_corpus, tmp_path_factory):
    """A transformer_san checkpoint of --task translation_san, trained 3 updates on the corpus
    with fairseq-train (read-only: tests that change it work on a copy)."""
    from helpers import run_cli, train_argv

    save_dir = tmp_path_factory.mktemp("san-checkpoint")
    argv = train_argv(binarized_corpus, save_dir, 3, ["--task", "translation_san"])
    result = run_cli("fairseq-train", *argv)
    assert result.returncode == 0, result.stderr[-3000:]
    return save_dir / "checkpoint_last.pt"


def pytest_unconfigure(config):
    """Stop the warm fairseq commands' server of this pytest process, if it started one."""
    from warm_cli import stop_server

    stop_server()
