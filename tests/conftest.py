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
