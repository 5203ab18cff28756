"""Freed memory kept in the process for the next step on the CPU (glibc's allocator).

A step on the CPU allocates and frees buffers of megabytes at every position: the logits and
log-probabilities (rows x vocabulary), fbgemm's int32 products in the int8 linear layers. glibc
gives such a buffer back to the kernel when it is freed (a chunk above the mmap threshold is
unmapped; the heap's free top is trimmed above the trim threshold; glibc moves both as it goes,
up to 32 MiB), so the next step faults each of its pages in again: at beam 20 over 16 sentences
and 7,796 words, about 5,600 page faults a step, a third of the int8 step's time
(docs/results/cpu-yardstick/host-memory-2026-11-30). PyTorch's performance tuning guide
recommends jemalloc or TCMalloc for CPU inference for this reason; with glibc itself, raising
the two thresholds (``mallopt``) does the same: the process keeps the memory of its largest step
for the next one, as CUDA's caching allocator keeps a GPU's.

Done once per process, when the static decoder first builds a step for the CPU. Where the user
has set either threshold (glibc's ``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``, or
``GLIBC_TUNABLES``), theirs stands; with another C library, nothing changes.
"""

import ctypes
import functools
import logging
import os
from typing import Mapping, Optional

logger = logging.getLogger(__name__)

# mallopt's parameters (glibc's malloc.h).
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
# A chunk below MMAP_THRESHOLD comes from the heap, not from a mapping of its own that free
# unmaps; the heap's free top goes back to the kernel only above TRIM_THRESHOLD. A step's largest
# buffer stays below them (128 sentences at beam 20 over 32,000 words: 330 MB of logits).
MMAP_THRESHOLD = 1 << 30
TRIM_THRESHOLD = 1 << 31
# How a user sets the thresholds themselves: glibc's environment variables and tunables.
USER_VARIABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
USER_TUNABLES = ("glibc.malloc.mmap_threshold", "glibc.malloc.trim_threshold")


def thresholds_set_by_user(environ: Mapping[str, str]) -> bool:
    """Whether ``environ`` sets glibc's mmap or trim threshold (then glibc read it at start)."""
    tunables = environ.get("GLIBC_TUNABLES", "")
    return any(name in environ for name in USER_VARIABLES) or any(
        name in tunables for name in USER_TUNABLES
    )


def glibc_version() -> Optional[str]:
    """``"glibc 2.36"`` where the C library is glibc, else None (musl, macOS, Windows)."""
    try:
        return os.confstr("CS_GNU_LIBC_VERSION")
    except (AttributeError, ValueError, OSError):
        return None


@functools.lru_cache(maxsize=None)
def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds, once per process (module doc); whether they are
    raised now (not where the user set them, nor with another C library)."""
    if thresholds_set_by_user(os.environ):
        logger.info("static decoder: glibc's malloc thresholds as set in the environment")
        return False
    version = glibc_version()
    if version is None or not version.startswith("glibc"):
        return False
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    raised = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
    if raised:
        logger.info(
            "static decoder: %s keeps freed memory for the next step (malloc's mmap threshold "
            "1 GiB, trim threshold 2 GiB; MALLOC_MMAP_THRESHOLD_ chooses otherwise)",
            version,
        )
    else:
        logger.info("static decoder: %s refused to raise its malloc thresholds", version)
    return raised
