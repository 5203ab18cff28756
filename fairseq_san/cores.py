"""How many CPU cores this process may use: its affinity, capped by a container's CPU quota.

``os.cpu_count()`` counts the host's cores. A container may be limited two ways: a CPU set (the
affinity ``os.sched_getaffinity`` reports) or a CPU quota (cgroup ``cpu.max`` in v2,
``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` in v1: quota / period cores' worth of time), which
the affinity does not show. Read by ``fairseq-san-cpu-ranks`` and the learn-to-share recipes
(one training process per core) and by the benchmark's machine record.
"""

import math
import os
from pathlib import Path
from typing import Optional

CGROUP = Path("/sys/fs/cgroup")


def available_cores(cgroup: Path = CGROUP) -> int:
    """The CPU cores this process may run on: its affinity, or fewer under a CPU quota."""
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    cores = affinity or os.cpu_count() or 1
    quota = cpu_quota(cgroup)
    return min(cores, max(1, math.ceil(quota))) if quota else cores


def cpu_quota(cgroup: Path = CGROUP) -> Optional[float]:
    """Cores' worth of CPU time the cgroup allows (quota / period); None when unlimited or
    unreadable. cgroup v2 first (``cpu.max``: "QUOTA PERIOD" or "max PERIOD"), then v1."""
    v2 = read_text(cgroup / "cpu.max")
    if v2:
        quota, _, period = v2.partition(" ")
        return ratio(quota, period)
    v1 = cgroup / "cpu"
    return ratio(read_text(v1 / "cpu.cfs_quota_us"), read_text(v1 / "cpu.cfs_period_us"))


def ratio(quota: Optional[str], period: Optional[str]) -> Optional[float]:
    """quota / period, or None for "max", -1 (v1's unlimited) or anything unreadable."""
    try:
        value = int(quota) / int(period)
    except (TypeError, ValueError, ZeroDivisionError):
        return None
    return value if value > 0 else None


def read_text(path: Path) -> Optional[str]:
    try:
        return path.read_text().strip()
    except OSError:
        return None
