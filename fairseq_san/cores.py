"""How many CPU cores this process may use: its affinity, capped by a container's CPU quota.

``os.cpu_count()`` counts the host's cores. A container may be limited two ways: a CPU set (the
affinity ``os.sched_getaffinity`` reports) or a CPU quota (cgroup ``cpu.max`` in v2,
``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` in v1: quota / period cores' worth of time), which
the affinity does not show. The quota may be set on the process's own cgroup or any above it
(``/proc/self/cgroup`` names it): the smallest counts. Read by ``fairseq-san-cpu-ranks`` and the
learn-to-share recipes (one training process per core) and by the benchmark's machine record.
"""

import math
import os
from pathlib import Path
from typing import List, Optional

CGROUP = Path("/sys/fs/cgroup")
MEMBERSHIP = Path("/proc/self/cgroup")


def available_cores(cgroup: Path = CGROUP, membership: Path = MEMBERSHIP) -> int:
    """The CPU cores this process may run on: its affinity, or fewer under a CPU quota."""
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    cores = affinity or os.cpu_count() or 1
    quota = cpu_quota(cgroup, membership)
    return min(cores, max(1, math.ceil(quota))) if quota else cores


def threads_problem(threads: int) -> Optional[str]:
    """Why ``--threads`` cannot time decoding here, or None: more threads than the host has
    processors (``os.cpu_count()``) is a typo, which torch took as an overflow or OpenMP as an
    allocation it could not make (the process aborted)."""
    processors = os.cpu_count() or 1
    if threads > processors:
        return f"--threads {threads}: more than the {processors} processors of this machine"
    return None


def cpu_quota(cgroup: Path = CGROUP, membership: Path = MEMBERSHIP) -> Optional[float]:
    """Cores' worth of CPU time the process's cgroups allow (the smallest quota / period of its
    own and those above it); None when unlimited or unreadable."""
    quotas = [quota_of(directory) for directory in cpu_cgroups(cgroup, membership)]
    return min((quota for quota in quotas if quota), default=None)


def cpu_cgroups(cgroup: Path, membership: Path) -> List[Path]:
    """The directories of the process's CPU cgroups, its own first, then each above it up to the
    mount point: v2's unified tree (``0::/PATH``), v1's ``cpu`` tree (``N:cpu,cpuacct:/PATH``)."""
    directories = []
    for line in (read_text(membership) or "").splitlines():
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if not path or (controllers and "cpu" not in controllers.split(",")):
            continue
        root = cgroup / "cpu" if controllers else cgroup
        own = root / path.lstrip("/")
        directories += [own, *(above for above in own.parents if root in (above, *above.parents))]
    return directories or [cgroup, cgroup / "cpu"]


def quota_of(directory: Path) -> Optional[float]:
    """quota / period of one cgroup: v2's ``cpu.max`` ("QUOTA PERIOD" or "max PERIOD"), else
    v1's ``cpu.cfs_quota_us`` and ``cpu.cfs_period_us``; None when unlimited or unreadable."""
    v2 = read_text(directory / "cpu.max")
    if v2:
        quota, _, period = v2.partition(" ")
        return ratio(quota, period)
    v1 = [read_text(directory / name) for name in ("cpu.cfs_quota_us", "cpu.cfs_period_us")]
    return ratio(*v1)


def ratio(quota: Optional[str], period: Optional[str]) -> Optional[float]:
    """quota / period, or None for "max", -1 (v1's unlimited) or anything unreadable."""
    try:
        value = int(quota) / int(period)
    except (TypeError, ValueError, ZeroDivisionError):
        return None
    return value if value > 0 else None


def read_text(path: Path) -> Optional[str]:
    """The stripped text of a cgroup file; None when it is not there or cannot be read."""
    try:
        return path.read_text().strip()
    except OSError:
        return None
