"""On the CPU the static decoder keeps the memory a step frees for the next one
(``fairseq_san/static_decoding/host_memory.py``): measured as page faults in a fresh process,
which glibc's default thresholds cause and the raised ones take away."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from helpers import build, make_dictionary
from fairseq_san.static_decoding import StaticSequenceGenerator, generator, host_memory

# Allocates and frees 64 MiB four times (above the 32 MiB that glibc's own moving mmap threshold
# reaches at most, so glibc maps and unmaps it each time), after keep_freed_memory() where
# asked; prints what keep_freed_memory returned and the fewest page faults of the last three.
FAULTS = textwrap.dedent(
    """
    import resource, sys, torch
    from fairseq_san.static_decoding.host_memory import keep_freed_memory
    kept = keep_freed_memory() if sys.argv[1] == "keep" else None
    faults = []
    for _ in range(4):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        torch.ones(16 << 20)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    print(kept, min(faults[1:]))
    """
)
on_glibc = pytest.mark.skipif(
    host_memory.glibc_version() is None, reason="glibc's allocator only (Linux)"
)


def faults_in_a_fresh_process(mode: str, **environ: str) -> tuple:
    """(what keep_freed_memory returned, page faults of a 64 MiB buffer allocated again)."""
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in host_memory.USER_VARIABLES and name != "GLIBC_TUNABLES"
    }
    result = subprocess.run(
        [sys.executable, "-c", FAULTS, mode],
        capture_output=True,
        text=True,
        timeout=300,
        env={**env, **environ},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    kept, faults = result.stdout.split()
    return kept, int(faults)


@on_glibc
def test_kept_memory_is_not_faulted_in_again():
    """glibc's defaults fault a freed 64 MiB buffer in again at each allocation; after
    keep_freed_memory, at most a few pages are (the heap keeps it)."""
    _, faults_by_default = faults_in_a_fresh_process("default")
    kept, faults_kept = faults_in_a_fresh_process("keep")
    assert kept == "True"
    assert faults_by_default >= 32  # 64 MiB in 2 MiB pages at the least
    assert faults_kept * 10 < faults_by_default


@on_glibc
@pytest.mark.parametrize(
    "environ",
    [
        {"MALLOC_MMAP_THRESHOLD_": "131072"},
        {"MALLOC_TRIM_THRESHOLD_": "131072"},
        {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=131072"},
    ],
)
def test_thresholds_the_user_set_stand(environ):
    """A user's own threshold (glibc's environment) is kept: nothing raised, pages faulted in."""
    kept, faults = faults_in_a_fresh_process("keep", **environ)
    assert kept == "False"
    assert faults >= 32


def test_another_c_library_is_left_as_it_is(monkeypatch):
    """Without glibc, keep_freed_memory changes nothing and says so by returning False."""
    monkeypatch.setattr(host_memory, "glibc_version", lambda: None)
    for name in host_memory.USER_VARIABLES + ("GLIBC_TUNABLES",):
        monkeypatch.delenv(name, raising=False)
    host_memory.keep_freed_memory.cache_clear()
    try:
        assert host_memory.keep_freed_memory() is False
    finally:
        host_memory.keep_freed_memory.cache_clear()


def test_a_cpu_step_keeps_freed_memory(monkeypatch):
    """A generator whose step is built for the CPU raises the thresholds (once per build)."""
    calls = []
    monkeypatch.setattr(generator, "keep_freed_memory", lambda: calls.append("kept"))
    dictionary = make_dictionary()
    model, _ = build(dictionary=dictionary)
    static = StaticSequenceGenerator([model], dictionary, beam_size=2, max_len_b=3)
    tokens = torch.tensor([[5, 6, 7, dictionary.eos()]])
    static.generate([model], {"net_input": {"src_tokens": tokens, "src_lengths": torch.tensor([4])}})
    assert calls == ["kept"]
