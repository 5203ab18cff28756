"""A clean exit for fairseq's commands: fairseq's background batch loaders stop first.

Upstream behaviour corrected: fairseq's ``fairseq.data.iterators.BufferedIterator`` (fairseq
main) prefetches batches in a daemon thread (``BackgroundConsumer``) that nothing stops before
the interpreter exits. When training stops mid-epoch (``--max-update``), that thread can still be
collating a batch when the interpreter exits. CPython up to 3.13 ends a daemon thread with
``pthread_exit`` when it asks for the GIL during finalization; inside torch's C++ code (a
``noexcept`` GIL guard) that unwinding calls ``std::terminate``: "terminate called without an
active exception", exit status 134, after the final checkpoint was written. So at exit, before
finalization, each live loader is told to stop after the batch it is making, and its queue is
drained until it has ended.
"""

import atexit
import queue
import sys
import threading
import time

STOP_SECONDS = 60.0  # a loader waiting longer on its data workers is left as it is


def stop_background_loaders(timeout: float = STOP_SECONDS) -> None:
    """Tell each of fairseq's live background loaders to stop after its batch, and drain its
    queue until it has ended (at most ``timeout`` seconds in all)."""
    iterators = sys.modules.get("fairseq.data.iterators")
    if iterators is None:
        return
    deadline = time.monotonic() + timeout
    for thread in threading.enumerate():
        if not isinstance(thread, iterators.BackgroundConsumer):
            continue
        thread._max_len = 0  # its loop ends after the next put, then it puts the end marker
        while thread.is_alive() and time.monotonic() < deadline:
            try:
                thread._queue.get(timeout=0.05)  # room for that batch and the end marker
            except queue.Empty:
                pass


def install() -> None:
    """Stop fairseq's loaders at exit, for this process (idempotent)."""
    atexit.unregister(stop_background_loaders)
    atexit.register(stop_background_loaders)
