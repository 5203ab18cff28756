"""Tests for ``fairseq_san.cores``: the cores a process may use, a container's CPU quota included
(the affinity alone let fairseq-san-cpu-ranks start four ranks on a two-core quota)."""

import os

import pytest

from fairseq_san.cores import available_cores, cpu_quota

AFFINITY = len(os.sched_getaffinity(0))
V2 = "0::/"  # /proc/self/cgroup of a process in a cgroup namespace, unified hierarchy
V1 = "4:cpu,cpuacct:/\n3:memory:/x"


def cgroup(tmp_path, membership: str, files: dict):
    """(cgroup mount point, membership file) holding ``files`` ({path: text})."""
    for name, text in files.items():
        path = tmp_path / "fs" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    (tmp_path / "cgroup").write_text(membership + "\n")
    return tmp_path / "fs", tmp_path / "cgroup"


@pytest.mark.parametrize(
    "membership, files, quota",
    [
        (V2, {"cpu.max": "max 100000"}, None),  # unlimited
        (V2, {"cpu.max": "150000 100000"}, 1.5),  # one and a half cores' worth
        (V1, {"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000"}, None),
        (V1, {"cpu/cpu.cfs_quota_us": "50000", "cpu/cpu.cfs_period_us": "100000"}, 0.5),
        (V2, {"cpu.max": "garbled"}, None),
        (V2, {}, None),  # no cgroup files: not in a container, or unreadable
        # the process's own cgroup, and the smallest quota of those above it
        ("0::/slice/job", {"slice/job/cpu.max": "max 100000", "slice/cpu.max": "200000 100000",
                           "cpu.max": "400000 100000"}, 2.0),
        ("0::/slice/job", {"slice/job/cpu.max": "100000 100000", "slice/cpu.max": "max 100000"},
         1.0),
        ("4:cpu,cpuacct:/slurm/job", {"cpu/slurm/job/cpu.cfs_quota_us": "300000",
                                      "cpu/slurm/job/cpu.cfs_period_us": "100000"}, 3.0),
        ("0::/elsewhere", {"cpu.max": "100000 100000"}, 1.0),  # its own cgroup not mounted here
    ],
)  # fmt: skip
def test_cpu_quota_reads_the_process_cgroups_v2_and_v1(tmp_path, membership, files, quota):
    assert cpu_quota(*cgroup(tmp_path, membership, files)) == quota


@pytest.mark.parametrize(
    "files, cores",
    [
        ({"cpu.max": "max 100000"}, AFFINITY),
        ({"cpu.max": f"{100000 * (AFFINITY + 8)} 100000"}, AFFINITY),  # a quota above the set
        ({"cpu.max": "50000 100000"}, 1),  # at least 1
        ({"cpu.max": "150000 100000"}, min(AFFINITY, 2)),  # 1.5 cores' worth: two busy cores
    ],
)
def test_available_cores_is_the_affinity_capped_by_the_quota(tmp_path, files, cores):
    assert available_cores(*cgroup(tmp_path, V2, files)) == cores
