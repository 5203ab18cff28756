"""Tests for ``fairseq_san.cores``: the cores a process may use, a container's CPU quota included
(the affinity alone let fairseq-san-cpu-ranks start four ranks on a two-core quota)."""

import os

import pytest

from fairseq_san.cores import available_cores, cpu_quota

AFFINITY = len(os.sched_getaffinity(0))


def cgroup(tmp_path, files: dict):
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    return tmp_path


@pytest.mark.parametrize(
    "files, quota",
    [
        ({"cpu.max": "max 100000"}, None),  # v2, unlimited
        ({"cpu.max": "150000 100000"}, 1.5),  # v2: one and a half cores' worth
        ({"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000"}, None),  # v1
        ({"cpu/cpu.cfs_quota_us": "50000", "cpu/cpu.cfs_period_us": "100000"}, 0.5),
        ({"cpu.max": "garbled"}, None),
        ({}, None),  # no cgroup files: not in a container, or unreadable
    ],
)
def test_cpu_quota_reads_cgroup_v2_then_v1(tmp_path, files, quota):
    assert cpu_quota(cgroup(tmp_path, files)) == quota


@pytest.mark.parametrize(
    "files, cores",
    [
        ({"cpu.max": "max 100000"}, AFFINITY),
        ({"cpu.max": f"{100000 * (AFFINITY + 8)} 100000"}, AFFINITY),  # a quota above the set
        ({"cpu/cpu.cfs_quota_us": "50000", "cpu/cpu.cfs_period_us": "100000"}, 1),  # at least 1
        ({"cpu.max": "150000 100000"}, min(AFFINITY, 2)),  # 1.5 cores' worth: two busy cores
    ],
)
def test_available_cores_is_the_affinity_capped_by_the_quota(tmp_path, files, cores):
    assert available_cores(cgroup(tmp_path, files)) == cores
