"""Worker processes: every engine decodes in a process of its own, driven over a pipe.

Why: with CTranslate2 loaded in the process that timed torch, torch decoded at half speed
(the CTranslate2 wheel brings its own OpenMP runtime, whose threads compete with
torch's for the cores). So the parent process never decodes. It reads the checkpoints' options,
prepares the text side, and starts one worker per engine: one for all fairseq systems and, when
there is a CTranslate2 row, one that converts the baseline and decodes it as float32 and int8.
``ctranslate2`` is imported in the CTranslate2 worker only; torch is never timed there.

Why long-lived workers driven round-robin, and not a fresh process per pass: a worker loads its
systems and collates its batches once, and warms up once per setting, while the parent still
interleaves the timed passes (A B C ... A B C ...) so that drift of the machine cancels in the
ratios. One call runs at a time: the other workers block on their pipes. A blocked worker uses
no CPU (measured from /proc/PID/stat: the CTranslate2 worker's CPU time grew by 0.00 s, at 10 ms
resolution, during each of the fairseq worker's passes), so the pass that runs has the cores to
itself.

Why the fairseq systems share one worker: they share torch's thread pool and decode one at a
time, as fairseq-generate would; ``test_speed_does_not_depend_on_the_company`` checks that the
baseline's speed is the same alone and beside SAN and CTranslate2.

Workers are spawned, never forked: a fork of a process whose OpenMP runtime has started threads
can hang.
"""

import contextlib
import importlib.util
import multiprocessing
import os
import signal
import sys
import threading
import traceback
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Tuple

import torch

from fairseq_san.benchmark.config import CTRANSLATE2, FAIRSEQ, BenchmarkConfig, SystemSpec
from fairseq_san.benchmark.ctranslate2_system import CTRANSLATE2_MISSING, ctranslate2_systems
from fairseq_san.benchmark.data import Batches
from fairseq_san.benchmark.fairseq_system import FairseqSystem
from fairseq_san.benchmark.system import System

# How the other end of a pipe going away shows: end of file, or the connection reset.
PIPE_GONE = (EOFError, ConnectionResetError, BrokenPipeError)


class WorkerDied(RuntimeError):
    """A worker process that ended before it answered (killed, out of memory)."""


@dataclass
class WorkerJob:
    """What a worker loads: its engine's systems (for CTranslate2, the baseline to convert)."""

    engine: str
    specs: List[SystemSpec]
    config: BenchmarkConfig
    device: str


def _build(job: WorkerJob) -> Tuple[List[System], Batches, Dict]:
    """(systems, batches, engine info) of a job, in the worker."""
    config, device = job.config, torch.device(job.device)
    if config.threads:
        torch.set_num_threads(config.threads)
    if job.engine == FAIRSEQ:
        systems = [loaded_system(spec, config, device, config.fp16) for spec in job.specs]
        task, info = systems[0].task, {}
        for system in systems[1:]:
            if system.task.target_dictionary.symbols != task.target_dictionary.symbols:
                first = systems[0].name
                raise ValueError(f"{system.name}: target dictionary differs from {first}'s")
    else:
        base = loaded_system(job.specs[0], config, device, fp16=False)
        task = base.task
        systems, info = ctranslate2_systems(config, base)
    batches = Batches(task, config.subset, config.batch_size, device, config.max_sentences)
    return systems, batches, info


def loaded_system(
    spec: SystemSpec, config: BenchmarkConfig, device: torch.device, fp16: bool
) -> FairseqSystem:
    """``spec``'s checkpoint loaded with its overrides; a ValueError of the model's own checks
    (a policy that does not fit its layers) names the system, as the parent's checks do."""
    try:
        return FairseqSystem(spec, config.data, device, fp16)
    except ValueError as err:
        raise ValueError(f"system {spec.name}: {err}") from None


def _serve(conn, job: WorkerJob) -> None:
    """The worker's loop: build, say ready, then run ``(system, method, args, kwargs)`` calls.
    A parent that is gone or interrupted (Ctrl-C reaches the workers too) ends it quietly: the
    parent says what happened."""
    signal.signal(signal.SIGINT, signal.default_int_handler)  # ignored while it started
    try:
        _answer(conn, job)
    except (*PIPE_GONE, KeyboardInterrupt):
        return


def _answer(conn, job: WorkerJob) -> None:
    """``_serve``'s loop."""
    try:
        systems, batches, info = _build(job)
    except Exception as err:  # noqa: BLE001  (reported to the parent, which raises it)
        conn.send(_failure(err))
        return
    conn.send(("ready", {
        "systems": {system.name: system.describe() for system in systems},
        "info": info,
        "sentences": len(batches.ids),
        "torch_threads": torch.get_num_threads(),
    }))  # fmt: skip
    by_name = {system.name: system for system in systems}
    while True:
        request = conn.recv()
        if request is None:
            return
        name, method, args, kwargs = request
        try:
            if name is None:  # a question about the worker itself
                result = {"pid": os.getpid(), "ctranslate2_loaded": "ctranslate2" in sys.modules}
            else:
                result = getattr(by_name[name], method)(batches, *args, **kwargs)
            conn.send(("ok", result))
        except Exception as err:  # noqa: BLE001
            conn.send(_failure(err))


def _failure(err: Exception) -> Tuple[str, str]:
    """A ValueError travels as its one-line message; anything else with its traceback."""
    if isinstance(err, ValueError):
        return "value_error", str(err)
    return "crash", traceback.format_exc()


@contextlib.contextmanager
def sigint_ignored() -> Iterator[None]:
    """SIGINT ignored meanwhile (in the main thread, the one that may set it), and by a process
    started meanwhile: a Ctrl-C while a worker imported torch, before ``_serve``, printed its
    traceback."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class Worker:
    """The parent's end of one worker process."""

    def __init__(self, context, job: WorkerJob):
        self.engine = job.engine
        self.conn, child_conn = context.Pipe()
        self.process = context.Process(
            target=_serve, args=(child_conn, job), name=f"fairseq-san-bench {job.engine}"
        )
        with sigint_ignored():  # inherited until ``_serve``: the parent, interrupted, stops it
            self.process.start()
        child_conn.close()

    def receive(self):
        try:
            tag, payload = self.conn.recv()
        except PIPE_GONE:
            raise self._died() from None
        if tag == "value_error":
            raise ValueError(payload)
        if tag == "crash":
            raise RuntimeError(f"the {self.engine} worker failed:\n{payload}")
        return payload

    def call(self, name: Optional[str], method: str, args: Tuple, kwargs: Dict):
        try:
            self.conn.send((name, method, args, kwargs))
        except PIPE_GONE:
            raise self._died() from None
        return self.receive()

    def _died(self) -> WorkerDied:
        self.process.join(timeout=5)
        return WorkerDied(f"the {self.engine} worker died (exit code {self.process.exitcode})")

    def close(self, at_once: bool = False) -> None:
        """End the worker: after its current request, or ``at_once`` (an interrupt, an error)."""
        if self.process.is_alive() and not at_once:
            try:
                self.conn.send(None)
            except (BrokenPipeError, OSError):
                pass
            self.process.join(timeout=30)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join()
        self.conn.close()


class WorkerPool:
    """The benchmark's workers, started together (they load in parallel), and which worker
    decodes which system. A context manager: leaving it stops the workers."""

    def __init__(self, config: BenchmarkConfig, baseline: str, device: torch.device):
        context = multiprocessing.get_context("spawn")
        jobs = [WorkerJob(FAIRSEQ, list(config.systems), config, str(device))]
        self.ctranslate2: Dict = {"status": "disabled"}
        if config.ctranslate2 and importlib.util.find_spec("ctranslate2") is None:
            self.ctranslate2 = {"status": "skipped", "note": CTRANSLATE2_MISSING}
        elif config.ctranslate2:
            base = next(spec for spec in config.systems if spec.name == baseline)
            jobs.append(WorkerJob(CTRANSLATE2, [base], config, str(device)))
        self.workers: List[Worker] = []
        self.systems: Dict[str, Dict] = {}  # name -> describe(), fairseq systems first
        self.sentences: Dict[str, int] = {}  # engine -> sentences in its batches
        self.torch_threads = None
        self._worker_of: Dict[str, Worker] = {}
        try:
            self.workers = [Worker(context, job) for job in jobs]
            for worker in list(self.workers):
                self._register(worker, worker.receive())
        except BaseException:
            self.close(at_once=True)
            raise

    def _register(self, worker: Worker, ready: Dict) -> None:
        if worker.engine == CTRANSLATE2:
            self.ctranslate2 = ready["info"]
            if not ready["systems"]:  # skipped: nothing for this worker to decode
                worker.close()
                self.workers.remove(worker)
                return
        else:
            self.torch_threads = ready["torch_threads"]
        self.sentences[worker.engine] = ready["sentences"]
        for name, description in ready["systems"].items():
            self.systems[name] = description
            self._worker_of[name] = worker

    @property
    def names(self) -> List[str]:
        return list(self.systems)

    def engine(self, name: str) -> str:
        return self.systems[name]["kind"]

    def call(self, name: str, method: str, *args, **kwargs):
        """``system.method(batches, *args, **kwargs)`` in the worker of system ``name``."""
        return self._worker_of[name].call(name, method, args, kwargs)

    def process(self, name: str) -> Dict:
        """The process that decodes ``name``: its pid and whether it imported ctranslate2."""
        return self._worker_of[name].call(None, "process", (), {})

    def close(self, at_once: bool = False) -> None:
        for worker in self.workers:
            worker.close(at_once)
        self.workers = []

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        self.close(at_once=exc_type is not None)  # a failed or ended run waits for no request
        return False
