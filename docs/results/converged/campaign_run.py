"""One slice of the converged campaign, scheduled: ``docs/results/converged/run.sh SLICE``.

A slice runs the whole learn-to-share loop for its systems in one or two calls of the device
tool (about 9 minutes each); each call packs everything worth keeping (logs, policies, js.json,
heatmaps, scores, hypotheses, benchmark, provenance; never checkpoints) into ONE archive,
``$OUT/converged-SLICE.tar.gz``:

* stage 1: baselines (the loop's iteration 0) side by side, each trained for UPDATES updates (or
  to its validation plateau, or to the wall cap CAP_MIN); JS analysis; the policy at the paper's
  thresholds (0.4 / 0.5);
* stage 2: SAN from scratch with the learned policy (iteration 1), side by side, the same budget

(tables and bench learn no policy of their own: theirs come from the en-de slice's loop). A
system starts only when the call has time left for its cap and its evaluation (CAP_MIN and
EVAL_S); what does not start runs in the slice's next call, which skips what finished. Every
system, as soon as it is trained: test BLEU and chrF on test (test_2016_flickr) and test1
(test_2017_flickr), every sentence, hypotheses kept (sacreBLEU's --paired-bs); En->X systems also
translate each HELDOUT/*.en into PAIR/SYSTEM/heldout/NAME.hyp (no score), beside the tests.

Slices, in order:

* ``en-de``: stage 1 baseline seeds 1-3 and uniform SAN {6}/{6}; stage 2 learned-policy SAN seeds
  1-3, all with the policy that seed 1's baseline learns, and baseline seed STAGE2_SEED (4)
  beside them;
* ``pairs``: De->En, En->Fr, En->Cs: baseline, then SAN, one seed each; beside the three
  trainings of a stage, the en-de loop's next iteration while its policy still changes, else
  (stage 2) En->De SAN seed 2 with the policy of the mean of the En->De baselines' analyses;
* ``tables``: En->De Tables 3-6 against the en-de slice's baselines and SAN, each policy from the
  en-de loop's collected analysis (so that every row trains as they did, to the same update
  budget, four at a time): stage 1 baseline seed 5 (every checkpoint kept, for Figure 5), the
  headline's SAN seed 4, AAN+SAN (Table 6), own V (Table 4); stage 2 the policies at other
  thresholds that no system trained yet (Table 3), uniform {6}/{3,3}, AAN, the encoder side at
  0.4 (Table 5), and in free places the mean policy's SAN seeds 3, 4; beside baseline seed 5's
  training, Figure 5 from its checkpoints as they are written, then its policy learned from the
  test sentences;
* ``bench``: fairseq-san-bench --gpu (fairseq, --san-decoding fast, the static decoder eager and
  as CUDA graphs; fp32 at batch 16 and 128, then fp16 at 128) of an En->De baseline, SAN and
  AAN+SAN:
  right after tables' first call, on the same warm machine, its stage 1's converged baseline
  seed 5, SAN seed 4 and AAN+SAN (nothing trained; into en-de/bench), then the 2-rank multi-GPU
  smoke runs where time is left; on another machine, its own three trained side by side for a
  2.5-minute cap (the policies from the en-de loop's: the headline SAN's), the smoke runs beside
  them, then the benchmark into en-de/bench-trained, never over the converged models' (what the
  call's time does not hold: in a second call on the same warm machine).

Ctrl-C or SIGTERM stops every command the slice runs, packs what ran and exits 130. A slice
cut short runs again and skips what finished (RUN/done.iter<k>: trained and tested; a
held-out translation stopped at the deadline leaves what it wrote and is not redone): on the
same machine from RUNS, on a fresh one from the run dirs collected here (RESULTS), restored
without what did not finish (checkpoints never travel). ``collect`` unpacks the archives given
and SHARED/converged/converged-SLICE*.tar.gz, each only after checking that it records this
run.sh, this file and campaign_slices.py (sha256) running its slice on a GPU with the preset's
models (ALLOW_CPU_ARCHIVES=1: also a toy run's archive, made without one or with TRAIN_EXTRA), then
writes summary.json, summary.md,
headline.md and the Figure 2 heatmaps (campaign_figures.py).

Environment (run.sh's callers set these): OUT (archive folder; runs), RUNS
(runs/converged/SLICE), RESULTS (docs/results/converged), DATA_ROOT (data-bin, else
build/offline-bundle/data-bin), SHARED (../shared), HELDOUT (SHARED/heldout, else
build/offline-bundle/heldout; none: no held-out translation), PRESET
(examples/presets/gpu-converge.args), UPDATES (training updates of every system: 3000; bench:
the cap alone), CAP_MIN (wall-time cap of every system's training, minutes: 6.5, bench 2.5),
EVAL_S (seconds a system needs besides its training: fairseq's start, the analysis, validation
BLEU, the test sets with the held-out sources beside them; 130, measured: 127 with four systems
ending together on an H100), DECODE_BATCH_SIZE (sentences per batch of every decoding: 128;
fairseq's beam search costs about the same per step on a GPU at 16 and 128), SLICE_S (seconds
the slice may take, 540: every job is stopped at that deadline, then the archive is packed),
JOB_S (seconds one job may take), SEEDS ("2 3": the en-de slice's other seeds; "": none),
STAGE2_SEED (4: the baseline seed of en-de's stage 2), BENCH_S (140: the seconds below which a
run of the bench slice's benchmark does not start; each took 50-55 s on an H200 with eight
systems, without its profile, --no-profile, and writes its results only at its end),
TABLES_RUNS (runs/converged/tables: where bench looks for the tables slice's models), ONLY
("en-de/loop en-de/baseline-s2": only these run dirs), EVALUATE (0: no test sets nor held-out
sources), TRAIN_EXTRA (fairseq-train args put last: the tests' --cpu and
tiny sizes). A setting no slice can run with (a number that is none, EVALUATE other than 0 or
1, a seed that is no integer) stops the call in one line, exit 2; a run dir of ONLY that the
slice never asked for is said at its end (a dry run says it before a GPU call). A system whose
commands failed is said in the call's output with its log's last line ("== NAME: failed (exit
N): ..."), and the call exits 1 after packing; one stopped at the deadline is said so.
"""

import dataclasses
import datetime
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import IO, Callable, Dict, List, Optional, Sequence, Set

from campaign_slices import PRESET, SLICES, restore, unsettled, untrained
from fairseq_san.files import glob_in

HERE = os.path.dirname(os.path.abspath(__file__))
CAMPAIGN_SLICES = ["python", os.path.join(os.path.relpath(HERE), "campaign_slices.py")]
SMALL, AAN = "transformer_san_small", "transformer_aan_small"
CHECKPOINT = os.path.join("iter0", "checkpoints", "checkpoint_best.pt")  # a run dir's model
USAGE = "usage: run.sh en-de|pairs|tables|bench [--dry-run] | run.sh collect [ARCHIVE...]"
THETAS = ("--theta-decoder-self", "0.4", "--theta-decoder-encdec", "0.5")  # the loop's own
TABLE_3_THETAS = ((0.3, 0.4), (0.3, 0.5), (0.4, 0.4))  # 0.4 / 0.5 is the loop's own policy
# The bench slice's benchmark runs, in order: (folder, sentences a batch, sentences, precision
# flags); fp16 at batch 128 only, where a call cut short loses least.
BENCH_RUNS = (("batch16", 16, 64, ()), ("batch128", 128, 256, ()),
              ("batch128-fp16", 128, 256, ("--fp16",)))  # fmt: skip
# The static decoder's executions that the benchmark runs, as --system overrides.
STATIC_EXECUTIONS = {execution: json.dumps({"san_decoding": "static",
                                            "san_decoder_execution": execution})
                     for execution in ("eager", "graph")}  # fmt: skip
SMOKE_JOB_S = 120  # seconds one multi-GPU smoke run may take (where JOB_S is not set)
DEADLINE_STATUS = 124  # timeout's: a command stopped at the slice's deadline
INTERRUPTED_STATUS = 130  # the slice's, stopped by Ctrl-C or SIGTERM (128 + SIGINT, as bash's)
POLL_S = 10  # how often Figure 5 looks for new checkpoints
# The settings a slice's provenance keeps.
RECORDED = ("CAP_MIN", "UPDATES", "EVAL_S", "DECODE_BATCH_SIZE", "SLICE_S", "PRESET", "SEEDS",
            "STAGE2_SEED", "ONLY", "TRAIN_EXTRA")  # fmt: skip


class SettingError(ValueError):
    """A setting of the environment that no slice can run with."""


# Settings whose empty value says something (SEEDS="": no other seeds); the others' is unset.
SAID_WHEN_EMPTY = ("SEEDS",)


@dataclasses.dataclass(frozen=True)
class Limits:
    """What a system may take: its training's wall cap (minutes), the seconds it needs besides
    (EVAL_S), at most JOB_S seconds a command, and whether it is tested after training."""

    cap_min: float
    eval_s: float
    job_s: Optional[int]
    evaluate: bool

    def needs(self) -> int:
        """Seconds a system needs: its cap and its evaluation."""
        return int(self.cap_min * 60 + self.eval_s)


@dataclasses.dataclass
class Settings:
    """The slice's settings, from the environment (the module's docstring lists them)."""

    slice: str
    dry_run: bool
    run_sh: str
    runs: str
    out: str
    results: str
    shared: str
    data_root: str
    heldout: str
    preset: List[str]
    train_extra: List[str]
    updates: int
    limits: Limits
    slice_s: int
    bench_s: int
    decode_batch_size: int
    seeds: List[str]
    stage2_seed: str
    only: List[str]
    tables_runs: str

    recorded: List[str]  # what the provenance keeps of them, NAME=VALUE

    @classmethod
    def from_environment(cls, slice_name: str, dry_run: bool, run_sh: str) -> "Settings":
        bench = slice_name == "bench"
        text = {  # each setting as given, else its default
            "CAP_MIN": "2.5" if bench else "6.5", "UPDATES": "1000000" if bench else "3000",
            "EVAL_S": "130", "DECODE_BATCH_SIZE": "128", "SLICE_S": "540",
            "PRESET": PRESET, "SEEDS": "2 3", "STAGE2_SEED": "4",
            "ONLY": "", "TRAIN_EXTRA": "", "BENCH_S": "140", "JOB_S": "", "EVALUATE": "1",
        }  # fmt: skip
        text.update({name: value for name, value in os.environ.items()
                     if name in text and (value or name in SAID_WHEN_EMPTY)})  # fmt: skip
        problem = setting_problem(text)
        if problem is not None:
            raise SettingError(problem)
        get = os.environ.get
        data_root = get("DATA_ROOT") or "data-bin"
        if not get("DATA_ROOT") and not os.path.isdir(os.path.join(data_root, "multi30k.en-de")):
            data_root = os.path.join("build", "offline-bundle", "data-bin")
        shared = get("SHARED") or os.path.join("..", "shared")
        heldout = get("HELDOUT") or os.path.join(shared, "heldout")
        if not os.path.isdir(heldout):
            heldout = os.path.join("build", "offline-bundle", "heldout")
        return cls(
            slice=slice_name, dry_run=dry_run, run_sh=run_sh,
            runs=get("RUNS") or os.path.join("runs", "converged", slice_name),
            out=get("OUT") or "runs", results=get("RESULTS") or os.path.relpath(HERE),
            shared=shared, data_root=data_root, heldout=heldout,
            preset=preset_args(text["PRESET"]),
            train_extra=split_words("TRAIN_EXTRA", text["TRAIN_EXTRA"]),
            updates=int(text["UPDATES"]),
            limits=Limits(
                cap_min=float(text["CAP_MIN"]), eval_s=float(text["EVAL_S"]),
                job_s=int(text["JOB_S"]) if text["JOB_S"] else None,
                evaluate=text["EVALUATE"] == "1",
            ),
            slice_s=int(text["SLICE_S"]), bench_s=int(text["BENCH_S"]),
            decode_batch_size=int(text["DECODE_BATCH_SIZE"]), seeds=text["SEEDS"].split(),
            stage2_seed=text["STAGE2_SEED"], only=text["ONLY"].split(),
            tables_runs=get("TABLES_RUNS") or os.path.join("runs", "converged", "tables"),
            recorded=[f"{name}={text[name]}" for name in RECORDED],
        )  # fmt: skip


# The settings that are numbers: whole counts, at least 1 (0 for BENCH_S: every batch size
# starts; JOB_S may be unset), and minutes or seconds (CAP_MIN above 0, EVAL_S at least 0).
COUNTS = {"UPDATES": 1, "DECODE_BATCH_SIZE": 1, "SLICE_S": 1, "BENCH_S": 0, "JOB_S": 1}
# Each amount's least value, and how it is said: a CAP_MIN below 0.006 minutes was printed as
# --stop-time-hours 0.0000, which fairseq reads as no cap.
AMOUNTS = {
    "CAP_MIN": (0.006, "at least 0.006 (--stop-time-hours 0.0001; 0 hours is no cap to fairseq)"),
    "EVAL_S": (0.0, "at least 0"),
}
WHOLE_NUMBER = re.compile(r"[0-9]+")  # ASCII digits ("²".isdigit() is true, int("²") fails)


def setting_problem(text: Dict[str, str]) -> Optional[str]:
    """What is wrong with the settings as given (``text``), before anything runs: a number that
    is none (UPDATES=abc was a traceback), EVALUATE other than 0 or 1 (EVALUATE=yes tested no
    system), a seed that is no integer (SEEDS=2,3 made run dir baseline-s2,3)."""
    for name, least in COUNTS.items():
        value = text[name]
        if name == "JOB_S" and not value:
            continue
        if not (WHOLE_NUMBER.fullmatch(value) and int(value) >= least):
            return f"{name}={value}: a whole number, at least {least}"
    for name, (least, bound) in AMOUNTS.items():
        try:
            amount = float(text[name])
        except ValueError:
            amount = math.nan
        if not (math.isfinite(amount) and amount >= least):
            return f"{name}={text[name]}: a number, {bound}"
    if text["EVALUATE"] not in ("0", "1"):
        return f"EVALUATE={text['EVALUATE']}: 1 (test every system) or 0 (none)"
    seeds = text["SEEDS"].split()
    for seed in [*seeds, text["STAGE2_SEED"]]:
        if not WHOLE_NUMBER.fullmatch(seed):
            return f"seed {seed} (SEEDS, STAGE2_SEED): a whole number; SEEDS lists them by spaces"
    twice = next((seed for index, seed in enumerate(seeds) if seed in seeds[:index]), None)
    if twice is not None:  # its second training failed on the first's lock, said in its log only
        return f"SEEDS={text['SEEDS']}: seed {twice} is given twice"
    return None


def split_words(name: str, text: str) -> List[str]:
    """A setting's words as a shell splits them; SettingError for an unclosed quote (a
    traceback)."""
    try:
        return shlex.split(text)
    except ValueError as error:
        raise SettingError(f"{name}: {error} in {text!r} (words quoted as in a shell)") from None


def preset_args(path: str) -> List[str]:
    """A preset file's fairseq-train arguments (``#`` starts a comment); SettingError for a
    PRESET that is no file (a traceback)."""
    if not os.path.isfile(path):
        problem = "a folder" if os.path.isdir(path) else "no such file"
        raise SettingError(f"PRESET={path}: {problem} (a file of fairseq-train arguments)")
    try:
        with open(path, encoding="utf-8") as preset:
            text = "\n".join(line.split("#", 1)[0] for line in preset)
    except (OSError, UnicodeDecodeError) as error:
        raise SettingError(f"PRESET={path}: cannot be read as UTF-8 text ({error})") from None
    return split_words(f"PRESET={path}", text)


class Job(threading.Thread):
    """A function run in the background; ``result`` holds what it returned."""

    def __init__(self, work: Callable[[], Optional[int]]):
        super().__init__(daemon=True)
        self.work, self.result = work, None

    def run(self) -> None:
        self.result = self.work()


def last_line(log: str) -> str:
    """The last line of ``log`` that holds anything (a failed command's error), or what says
    there is none."""
    try:
        with open(log, encoding="utf-8", errors="replace") as lines:
            written = [line.strip() for line in lines if line.strip()]
    except OSError as err:
        return f"{log}: {err.strerror}"
    return written[-1] if written else f"{log} is empty"


class Slice:
    """The running slice: its deadline, its background jobs, the commands it prints and runs."""

    def __init__(self, settings: Settings):
        self.s = settings
        self.deadline = time.monotonic() + settings.slice_s
        self.started = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
        self.jobs: List[Job] = []
        self.stage_jobs = 0  # systems the current stage started
        self.printing = threading.Lock()
        self.commands = 0  # commands run (printed, with --dry-run)
        self.packed_after: Optional[int] = None  # ``commands`` when the last archive was packed
        self.asked: List[str] = []  # the run dirs the slice's schedule asked for (``selected``)
        self.failed: List[str] = []  # run dirs whose commands failed (not stopped by the deadline)
        self.children: Set[subprocess.Popen] = set()  # the commands running now
        self.starting = threading.Lock()  # a command starts, or the slice is interrupted
        self.interrupted = False

    # --- printing, running, waiting -----------------------------------------------------------

    def say(self, line: str, out: Optional[IO[str]] = None) -> None:
        with self.printing:
            print(line, file=out or sys.stdout, flush=True)

    def run(self, words: Sequence[str], out: Optional[IO[str]] = None, log: str = "") -> int:
        """Print ``+ COMMAND`` (``> LOG``); run it unless --dry-run, its output into ``out`` or
        LOG; its exit status."""
        self.say("+ " + shlex.join(words) + (f" > {shlex.quote(log)}" if log else ""), out)
        self.commands += 1
        if self.s.dry_run:
            return 0
        if log:
            with open(log, "w", encoding="utf-8") as handle:
                return self.child(words, handle, subprocess.STDOUT)
        errors = subprocess.STDOUT if out else None  # a job's log takes both
        return self.child(words, out or sys.stdout, errors)

    def child(self, words: Sequence[str], out: IO[str], errors: Optional[int]) -> int:
        """``words`` run to its end, its exit status; once the slice is interrupted, a job's
        command does not start (``INTERRUPTED_STATUS``), and only the main thread's (the
        archive's) do."""
        with self.starting:
            if self.interrupted and threading.current_thread() is not threading.main_thread():
                return INTERRUPTED_STATUS
            process = subprocess.Popen(words, stdout=out, stderr=errors)
            self.children.add(process)
        try:
            return process.wait()
        except KeyboardInterrupt:  # the main thread's own command: stopped with the jobs'
            process.terminate()
            raise
        finally:
            with self.starting:
                self.children.discard(process)

    def interrupt(self) -> None:
        """Stop every command running (Ctrl-C or SIGTERM): ``timeout`` runs a job's command in
        a process group of its own, which the terminal's Ctrl-C does not reach, so a training
        kept running after the slice ended; timeout passes the SIGTERM to its group."""
        with self.starting:
            self.interrupted = True
            for process in self.children:
                process.terminate()

    def run_or_stop(self, words: Sequence[str]) -> None:
        """``run``; a failure ends the slice with the command's exit status."""
        status = self.run(words)
        if status:
            sys.exit(status)

    def left_s(self) -> int:
        return int(self.deadline - time.monotonic())

    def timed(self, words: Sequence[str], limits: Limits) -> List[str]:
        """``words`` stopped at the slice's deadline (or after JOB_S seconds)."""
        seconds = self.left_s() if limits.job_s is None else min(self.left_s(), limits.job_s)
        return ["timeout", "-k", "10", str(max(seconds, 1)), *words]

    def beside(self, work: Callable[[], Optional[int]]) -> Optional[Job]:
        """``work`` in the background (with --dry-run: now, printing its commands in order)."""
        if self.s.dry_run:
            work()
            return None
        job = Job(work)
        self.jobs.append(job)
        job.start()
        return job

    def wait(self) -> None:
        """Until every background job has ended (also those that jobs started)."""
        while any(job.is_alive() for job in self.jobs):
            for job in list(self.jobs):
                job.join()

    def finish_stage(self) -> None:
        """Wait for the stage's jobs, then pack what they left (``pack``): a call that the device
        stops in the next stage, before its own last archive, still returns this one."""
        self.wait()
        self.pack()
        self.stage_jobs = 0

    def selected(self, name: str) -> bool:
        self.asked.append(name)
        return not self.s.only or name in self.s.only

    def unknown_only(self) -> List[str]:
        """The run dirs of ONLY that the slice's schedule never asked for: a misspelt one ran
        nothing without a word (a dry run shows it before a GPU call). A real call may leave out
        one whose turn depends on what ran (Table 3's thresholds whose policy a system has), and
        the bench slice asks for none of the tables slice's models that it benchmarks: said, not
        refused; nothing where it asked for no run dir at all."""
        if not self.asked:
            return []
        return [name for name in self.s.only if name not in self.asked]

    # --- systems ------------------------------------------------------------------------------

    def system(
        self, name: str, pair: str, arch: str, policy: Optional[str], iteration: int,
        options: Sequence[str] = (), train_args: Sequence[str] = (),
        limits: Optional[Limits] = None,
    ) -> Optional[Job]:  # fmt: skip
        """Bring run dir RUNS/NAME up to iteration ``iteration`` (0: the baseline, or a system
        trained with ``policy``, a policy file; 1: the loop's SAN, from the policy its iteration
        0 learned) with learn_to_share.sh under the preset, capped at CAP_MIN minutes, then test
        and translate that iteration: a background job, its output in RUNS/NAME/run.log."""
        if not self.selected(name):
            return None
        limits = limits or self.s.limits
        options = [*options, *(["--extend"] if iteration else [])]
        run_dir = os.path.join(self.s.runs, name)

        def work(out: Optional[IO[str]] = None) -> None:
            self.job(name, pair, arch, iteration, options, train_args, limits, out)

        if self.s.dry_run:  # its commands, printed in order
            work()
            self.stage_jobs += 1
            return None
        collected = os.path.join(self.s.results, name)
        if not os.path.exists(run_dir) and os.path.isdir(collected) and self.s.slice != "bench":
            if restore(collected, run_dir):  # bench: its benchmark needs the checkpoints
                self.say(f"== {run_dir}: restored from {collected}")
        why_not = self.why_not_started(run_dir, policy, iteration, limits)
        if why_not:
            self.say(f"== {name}: {why_not}")
            return None
        os.makedirs(os.path.join(run_dir, "iter0"), exist_ok=True)
        start_policy = os.path.join(run_dir, "iter0", "policy.json")
        if policy and not os.path.isfile(start_policy):
            shutil.copy(policy, start_policy)
        self.say(f"== {name}: iteration {iteration} started at {clock()}")
        self.stage_jobs += 1

        def logged() -> None:
            with open(os.path.join(run_dir, "run.log"), "a", encoding="utf-8") as out:
                work(out)

        return self.beside(logged)

    def why_not_started(self, run_dir: str, policy: Optional[str], k: int, limits: Limits) -> str:
        """Why a system does not start now ("" when it starts)."""
        if os.path.isfile(os.path.join(run_dir, f"done.iter{k}")):
            return f"iteration {k} done in an earlier run"
        if k and not os.path.isfile(os.path.join(run_dir, f"done.iter{k - 1}")):
            return f"skipped, iteration {k - 1} did not finish"
        if policy and not os.path.isfile(policy):
            return f"skipped, no policy {policy}"
        if self.left_s() < limits.needs():
            return (f"not started: {self.left_s()} s left, it needs {limits.needs()} (CAP_MIN, "
                    "EVAL_S); the slice's next call runs it")  # fmt: skip
        return ""

    def job(
        self, name: str, pair: str, arch: str, k: int, options: Sequence[str],
        train_args: Sequence[str], limits: Limits, out: Optional[IO[str]],
    ) -> None:  # fmt: skip
        """The commands of ``system``: train, then test (and translate the held-out sources
        beside the tests); RUN/done.iter<k> when both succeeded."""
        run_dir = os.path.join(self.s.runs, name)
        data = os.path.join(self.s.data_root, f"multi30k.{pair}")
        batch = str(self.s.decode_batch_size)
        train = [
            "examples/learn_to_share.sh", "--data", data, "--run-dir", run_dir, "--arch", arch,
            "--updates", str(self.s.updates), "--max-iterations", str(k + 1),
            "--decode-batch-size", batch, *options, "--", *self.s.preset,
            "--stop-time-hours", f"{limits.cap_min / 60:.4f}", *self.s.train_extra, *train_args,
        ]  # fmt: skip
        status = self.run(self.timed(train, limits), out)
        if limits.evaluate and status == 0:
            translating = None
            if os.path.isdir(self.s.heldout) and pair.startswith("en-"):  # no score waits for it
                heldout = [*CAMPAIGN_SLICES, "heldout", run_dir, str(k), "--data", data,
                           "--sources", self.s.heldout, "--batch-size", batch]  # fmt: skip
                translating = self.beside(lambda: self.run(self.timed(heldout, limits), out))
            best = os.path.join(run_dir, f"iter{k}", "checkpoints", "checkpoint_best.pt")
            test_bleu = ["examples/multi30k/test_bleu.sh", data, pair.split("-")[1],
                         os.path.join(run_dir, "test-bleu"), f"iter{k}={best}"]  # fmt: skip
            status = self.run(self.timed(test_bleu, limits), out)
            if translating is not None:
                translating.join()
                if translating.result:
                    self.say(f"== {name}: held-out translation stopped (exit "
                             f"{translating.result}): what it wrote is kept; not redone "
                             "elsewhere (checkpoints never travel)", out)  # fmt: skip
        if self.s.dry_run:
            return
        if status:
            self.said_failed(name, status, out)  # its log's last line, before this one
        self.say(f"== {name}: exit {status} at {clock()}", out)
        if status == 0:
            open(os.path.join(run_dir, f"done.iter{k}"), "a").close()

    def said_failed(self, name: str, status: int, out: Optional[IO[str]]) -> None:
        """A system's failure in the call's own output, not only in its run.log (a GPU call
        returns its output and an archive: a training that failed said "started" alone, and
        the call exited 0); one stopped at the deadline is said so, and resumes next call."""
        if status == DEADLINE_STATUS or self.interrupted:
            why = "interrupted" if self.interrupted else "stopped at the deadline"
            self.say(f"== {name}: {why} (exit {status}); the slice's next call resumes it")
            return
        if out is not None:
            out.flush()
        self.failed.append(name)
        log = os.path.join(self.s.runs, name, "run.log")
        self.say(f"== {name}: failed (exit {status}): {last_line(log)}")

    def loop(self, pair: str, k: int, train_args: Sequence[str] = ()) -> Optional[Job]:
        """The pair's learn-to-share run dir (PAIR/loop), iteration ``k``, with the same
        fairseq-train args in both stages (run.json refuses others)."""
        return self.system(f"{pair}/loop", pair, SMALL, None, k, train_args=train_args)

    def again(self, pair: str) -> bool:
        """Beside the trainings this stage started (none: nothing), the next iteration of the
        pair's loop while its policy still changes (``campaign_slices.unsettled``): the paper's
        loop runs until the learned policy is not new, and a stage of three trainings has a
        fourth place on the GPU. False when it starts nothing, so that the place goes to another
        system."""
        if not self.stage_jobs:
            return False
        run_dir = os.path.join(self.s.runs, pair, "loop")
        if not os.path.isdir(run_dir):
            run_dir = os.path.join(self.s.results, pair, "loop")
        others = [os.path.join(self.s.runs, pair), os.path.join(self.s.results, pair)]
        k = unsettled(run_dir, [folder for folder in others if os.path.isdir(folder)])
        if k is None:
            return False
        self.loop(pair, k)
        return True

    def mean_san(self, seed: str) -> None:
        """En->De SAN trained with the policy that the mean of the en-de slice's baseline seeds'
        analyses (1, SEEDS, STAGE2_SEED: the same four for every seed) learns at the loop's
        thresholds (fairseq-san-policy averages the JS matrices), seed ``seed`` (run dir
        en-de/san-mean-sSEED). The en-de slice's SAN seeds all trained with seed 1's policy; the
        seeds' analyses and their mean learn another (results.md, "Figure 2 at convergence")."""
        policy = os.path.join(self.s.runs, "en-de", "policies", "mean.json")
        runs = ["loop", *(f"baseline-s{s}" for s in [*self.s.seeds, self.s.stage2_seed])]
        analyses = [os.path.join(self.s.results, "en-de", run, "iter0", "analysis", "js.json")
                    for run in runs]  # fmt: skip
        analyses = [js for js in analyses if self.s.dry_run or os.path.isfile(js)]
        if analyses and not os.path.isfile(policy):  # once a call: the same analyses
            self.makedirs(os.path.dirname(policy))
            self.run(["fairseq-san-policy", *analyses, *THETAS, "-o", policy])
        self.system(f"en-de/san-mean-s{seed}", "en-de", SMALL, policy, 0,
                    train_args=["--seed", seed])  # fmt: skip

    def makedirs(self, folder: str) -> None:
        if not self.s.dry_run:
            os.makedirs(folder, exist_ok=True)

    # --- policies -----------------------------------------------------------------------------

    def aan_policy(self, learned: str, output: str) -> None:
        """Policy ``learned`` less decoder self-attention (AAN has none), as ``output``."""
        if not self.s.dry_run and not os.path.isfile(learned):
            return
        self.makedirs(os.path.dirname(output))
        self.run([*CAMPAIGN_SLICES, "aan-policy", learned, "-o", output])

    def policies(self, loop_dir: str, out: str) -> None:
        """Tables 3, 5 and 6's policies from ``loop_dir``'s iteration 0."""
        js = os.path.join(loop_dir, "iter0", "analysis", "js.json")
        if not self.s.dry_run and not os.path.isfile(js):
            self.say(f"== {loop_dir}: no JS analysis, no policies")
            return
        self.makedirs(out)
        for self_theta, encdec_theta in TABLE_3_THETAS:
            policy = os.path.join(out, f"theta-{self_theta}-{encdec_theta}.json")
            self.run(["fairseq-san-policy", js, "--theta-decoder-self", str(self_theta),
                      "--theta-decoder-encdec", str(encdec_theta), "-o", policy])  # fmt: skip
        self.run(["fairseq-san-policy", js, *THETAS, "--theta-encoder-self", "0.4",
                  "-o", os.path.join(out, "enc-0.4.json")])  # Table 5  # fmt: skip
        self.aan_policy(os.path.join(loop_dir, "iter1", "policy.json"),
                        os.path.join(out, "aan-san.json"))  # Table 6  # fmt: skip

    # --- Figure 5 and the policy on other sentences (tables) -----------------------------------
    # They analyse a baseline's checkpoints on the machine that trains it, beside its training
    # (its checkpoints never travel, and the slice's next call runs on a fresh machine).

    def training_here(self, run_dir: str) -> bool:
        """Whether ``run_dir``'s iteration 0 started training in this call."""
        iter0 = os.path.join(run_dir, "iter0")
        done = os.path.join(run_dir, "done.iter0")
        return self.s.dry_run or (os.path.isdir(iter0) and not os.path.isfile(done))

    def trained(self, run_dir: str) -> bool:
        """Whether ``run_dir``'s iteration 0 has trained (iter0/trained), or the deadline passed."""
        trained = os.path.isfile(os.path.join(run_dir, "iter0", "trained"))
        return self.s.dry_run or trained or self.left_s() <= 0

    def validate(self, checkpoint: str, subset: str, analysis: str, *extra: str) -> int:
        """fairseq-validate's JS analysis of ``checkpoint`` on ``subset``, its log beside it."""
        words = ["fairseq-validate", os.path.join(self.s.data_root, "multi30k.en-de"),
                 "--task", "translation_san", "--user-dir", "fairseq_san", "--path", checkpoint,
                 "--valid-subset", subset, "--max-tokens", "4096", "--san-analysis-dir", analysis,
                 *extra]  # fmt: skip
        return self.run(self.timed(words, self.s.limits), log=analysis + ".log")

    def other_sentences(self, run_dir: str) -> None:
        """``run_dir``'s baseline, once trained, analysed on test (test_2016_flickr, 1,000
        sentences) as well as valid, and the policy learned from that: does what the loop learns
        depend on the sentences analysed? (It learns from valid; nothing is tuned on test.)"""
        analysis = os.path.join(run_dir, "iter0", "analysis-test")
        while not self.trained(run_dir):
            time.sleep(POLL_S)
        if not self.s.dry_run and os.path.isfile(os.path.join(analysis, "js.json")):
            return
        self.makedirs(os.path.join(run_dir, "policies"))
        if self.validate(os.path.join(run_dir, CHECKPOINT), "test", analysis):
            return
        self.run(["fairseq-san-policy", os.path.join(analysis, "js.json"), *THETAS, "--explain",
                  "-o", os.path.join(run_dir, "policies", "test-sentences.json")])  # fmt: skip

    def figure5(self, run_dir: str) -> None:
        """Figure 5, JS between layers against training steps: each checkpoint of ``run_dir``'s
        baseline (iteration 0) analysed on 500 validation sentences as soon as its training
        writes it, one at a time (beside four trainings sharing the GPU), until it has trained
        and every checkpoint is analysed (or the deadline)."""
        folder = os.path.join(run_dir, "figure5")
        self.makedirs(folder)
        last = False
        while not last:
            last = self.trained(run_dir)  # then one more pass: the checkpoints written last
            self.new_checkpoints(run_dir, folder)
            if not last:
                time.sleep(POLL_S)

    def new_checkpoints(self, run_dir: str, folder: str) -> None:
        """Analyse ``run_dir``'s interval checkpoints not analysed yet, one at a time: two at a
        time, beside four trainings, slowed them towards their wall cap (an H200's four ran at
        9.2 updates/s each, against 11 for three)."""
        parts = ("iter0", "checkpoints", "checkpoint_*_*.pt")
        dry = [os.path.join(run_dir, *parts)] if self.s.dry_run else []
        checkpoints = sorted(glob_in(run_dir, *parts)) or dry
        steps = [(path, os.path.join(folder, os.path.basename(path)[: -len(".pt")]))
                 for path in checkpoints]  # fmt: skip
        for path, step in steps:
            if not os.path.isfile(os.path.join(step, "js.json")):
                self.validate(path, "valid", step, "--san-analysis-max-sentences", "500")

    def figure5_command(self, folder: str) -> Optional[List[str]]:
        """Figure 5's plot of the analyses in ``folder``'s subfolders that were written whole (an
        analysis stopped at a deadline leaves its folder without js.json); None without one."""
        found = sorted(glob_in(folder, "*", "js.json"))
        analyses = [os.path.dirname(path) + os.sep for path in found]
        if not analyses:
            return None
        return ["fairseq-san-plot-js", *analyses, "--reference-layer", "4", "--layers", "5", "6",
                "-o", os.path.join(folder, "js_vs_steps.png")]  # fmt: skip

    # --- bench ---------------------------------------------------------------------------------

    def smoke(self) -> None:
        """Multi-GPU, 2 ranks on one GPU, one loop iteration each, one at a time: fairseq's own
        spawning (more ranks than GPUs: refused in one line), then torchrun, which fairseq maps to
        device rank % GPUs = 0 for both ranks, with gloo and with NCCL (which cannot put two ranks
        on one GPU: refused in one line). Each capped at JOB_S (else SMOKE_JOB_S) seconds, its
        training's wall cap too: a run needs no more time than its command may take."""
        job_s = self.s.limits.job_s or SMOKE_JOB_S
        cap_min = min(self.s.limits.cap_min, job_s / 60)
        limits = dataclasses.replace(
            self.s.limits, cap_min=cap_min, job_s=job_s, eval_s=0, evaluate=False
        )
        runs = [("smoke/spawn-gloo", ["--updates", "100"], ["--distributed-world-size", "2",
                 "--ddp-backend", "pytorch_ddp", "--distributed-backend", "gloo"])]
        for backend in ("gloo", "nccl"):
            runs.append((f"smoke/torchrun-{backend}", ["--updates", "100", "--launcher",
                         "torchrun --nproc_per_node 2"], ["--ddp-backend", "pytorch_ddp",
                         "--distributed-backend", backend]))  # fmt: skip
        for name, options, train_args in runs:
            job = self.system(name, "en-de", SMALL, None, 0, options, train_args, limits)
            if job is not None:
                job.join()

    def checkpoints_here(self, run_dirs: Sequence[str]) -> bool:
        """Whether each run dir has trained and has its best checkpoint here."""
        return all(os.path.isfile(os.path.join(run_dir, "iter0", "trained"))
                   and os.path.isfile(os.path.join(run_dir, CHECKPOINT))
                   for run_dir in run_dirs)  # fmt: skip

    def benchmark(self, baseline: str, san: str, aan_san: str, name: str) -> None:
        """The bench slice's decoding benchmark of three run dirs into RUNS/en-de/NAME: fairseq,
        --san-decoding fast and the static decoder, eager and as CUDA graphs; beams 4, 20; runs
        of ``BENCH_RUNS``, each started only with BENCH_S seconds left; else the slice's next
        call on this machine (its checkpoints still there) runs it. Checkpoints never travel:
        without them, no benchmark."""
        if not self.s.dry_run and not self.checkpoints_here([baseline, san, aan_san]):
            self.say("== bench: not run: a model without its trained checkpoint here among "
                     f"{baseline} {san} {aan_san}")  # fmt: skip
            return
        models = zip(("baseline", "san", "aan-san"), (baseline, san, aan_san))
        systems = [word for label, run_dir in models
                   for word in bench_systems(label, os.path.join(run_dir, CHECKPOINT))]  # fmt: skip
        folder = os.path.join(self.s.runs, "en-de", name)
        for run_name, batch, sentences, precision in BENCH_RUNS:
            if os.path.isfile(os.path.join(folder, run_name, "results.json")):
                continue
            if not self.s.dry_run and self.left_s() < self.s.bench_s:
                self.say(f"== bench {run_name}: not started: {self.left_s()} s left, it "
                         f"needs {self.s.bench_s} (BENCH_S); the slice's next call on this "
                         "machine runs it")  # fmt: skip
                continue
            self.makedirs(folder)
            log = os.path.join(folder, f"{run_name}.log")
            status = self.run(self.timed([
                "fairseq-san-bench", "--gpu", *precision,
                "--data", os.path.join(self.s.data_root, "multi30k.en-de"),
                "--subset", "test", "--batch-size", str(batch), "--max-sentences", str(sentences),
                "--beams", "4", "20", "--modes", "natural", "fixed", "--cache-beams", "4", "20",
                "--repeats", "3", "--max-len-a", "1.2", "--max-len-b", "10", "--no-ctranslate2",
                "--no-profile",
                *systems, "--out-dir", os.path.join(folder, run_name),
            ], self.s.limits), log=log)  # kept if cut short
            if status != 0:  # said in the call's reply, not only in the archived log
                self.say(f"== bench {run_name}: failed (exit {status}): {last_line(log)}")
            self.pack()  # a call stopped in the next run still returns this one

    # --- the archive ---------------------------------------------------------------------------

    def pack(self) -> None:
        """After every job: the provenance, then one archive of RUNS for OUT: no checkpoints,
        nor the attention and heatmaps that Figure 5's analyses write (about 390 kB per
        checkpoint; their JS matrices, js.json, go). Written to a temporary name and renamed: a
        call killed while packing leaves no truncated archive under the real one. Nothing ran
        since the last archive: nothing to pack (the call's margin after its deadline kept)."""
        self.wait()
        if self.packed_after == self.commands:
            return
        settings = [word for setting in self.s.recorded for word in ("--setting", setting)]
        self.run_or_stop([
            *CAMPAIGN_SLICES, "record", self.s.runs, "--slice", self.s.slice,
            "--run-sh", self.s.run_sh, "--started", self.started.isoformat(), *settings,
            "--", self.s.run_sh, self.s.slice,
        ])  # fmt: skip
        excluded = ["*.pt", "checkpoints", "generate-valid.txt", "generate.log", "last",
                    "*.partial", "figure5/*.npz", "figure5/*.png"]  # fmt: skip
        archive = os.path.join(self.s.out, f"converged-{self.s.slice}.tar.gz")
        self.run_or_stop([
            "tar", "czf", archive + ".part",
            *(f"--exclude={pattern}" for pattern in excluded), "-C", self.s.runs, ".",
        ])  # fmt: skip
        self.run_or_stop(["mv", archive + ".part", archive])
        self.packed_after = self.commands


def clock() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%H:%M:%S")


# --- the slices ---------------------------------------------------------------------------------


def en_de(run: Slice) -> None:
    s = run.s
    run.loop("en-de", 0)
    for seed in s.seeds:
        run.system(f"en-de/baseline-s{seed}", "en-de", SMALL, None, 0, train_args=["--seed", seed])
    uniform = os.path.join(HERE, "policy-uniform-6-6.json")
    run.system("en-de/uniform-6-6", "en-de", SMALL, uniform, 0)
    run.finish_stage()
    run.loop("en-de", 1)
    learned = os.path.join(s.runs, "en-de", "loop", "iter1", "policy.json")
    for seed in s.seeds:
        run.system(f"en-de/san-s{seed}", "en-de", SMALL, learned, 0, train_args=["--seed", seed])
    # Beside them, one more baseline seed: four trainings share the GPU as in stage 1 (the same
    # pace at the same wall cap), and the machine holds a baseline for gpu-steps' decoding.
    run.system(f"en-de/baseline-s{s.stage2_seed}", "en-de", SMALL, None, 0,
               train_args=["--seed", s.stage2_seed])  # fmt: skip


def pairs(run: Slice) -> None:
    others = ("de-en", "en-fr", "en-cs")
    for pair in others:
        run.loop(pair, 0)
    run.again("en-de")
    run.finish_stage()
    for pair in others:
        run.loop(pair, 1)
    if not run.again("en-de"):  # the fourth place: the loop while it runs, else the mean's SAN
        run.mean_san("2")


def tables(run: Slice) -> None:
    s = run.s
    loop = os.path.join(s.results, "en-de", "loop")
    policies = os.path.join(s.runs, "en-de", "policies")
    learned = os.path.join(loop, "iter1", "policy.json")
    run.policies(loop, policies)
    # Stage 1 holds what the bench slice benchmarks on this machine in the session's next call: a
    # baseline (every checkpoint kept, each 100 updates, for Figure 5), the headline's SAN (seed
    # 4: paired with the en-de slice's baseline seed 4) and AAN+SAN, converged.
    run.system("en-de/baseline-s5", "en-de", SMALL, None, 0,
               train_args=["--seed", "5", "--keep-interval-updates", "1000"])  # fmt: skip
    figure5 = os.path.join(s.runs, "en-de", "baseline-s5")
    if run.training_here(figure5):
        run.beside(lambda: run.figure5(figure5))
        run.beside(lambda: run.other_sentences(figure5))
    run.system("en-de/san-s4", "en-de", SMALL, learned, 0, train_args=["--seed", "4"])
    run.system("en-de/aan-san", "en-de", AAN, os.path.join(policies, "aan-san.json"), 0)  # 6
    run.system("en-de/own-v", "en-de", SMALL, learned, 0,
               train_args=["--san-encdec-share", "weights"])  # Table 4  # fmt: skip
    run.finish_stage()
    thetas = [os.path.join(policies, f"theta-{a}-{b}.json") for a, b in TABLE_3_THETAS]
    if s.dry_run:  # the policies are learned by the commands above, which it only prints
        run.say("== Table 3: a real run trains only the thresholds whose policy no system "
                "trained yet; this dry run lists all of them")  # fmt: skip
    else:  # Table 3: what no system trained yet
        pair_dirs = [os.path.join(s.results, "en-de"), os.path.join(s.runs, "en-de")]
        thetas = untrained(thetas, loop, [folder for folder in pair_dirs if os.path.isdir(folder)])
    for policy in thetas:
        run.system(f"en-de/{os.path.basename(policy)[: -len('.json')]}", "en-de", SMALL, policy, 0)
    uniform = os.path.join(HERE, "policy-uniform-6-3-3.json")
    run.system("en-de/uniform-6-3-3", "en-de", SMALL, uniform, 0)  # Table 3
    run.system("en-de/aan", "en-de", AAN, None, 0)  # Table 6
    run.system("en-de/enc-0.4", "en-de", SMALL, os.path.join(policies, "enc-0.4.json"), 0)  # 5
    for seed in ("3", "4"):  # free places: more seeds of the mean policy (2 trains in pairs)
        if run.stage_jobs < 4:
            run.mean_san(seed)


def bench(run: Slice) -> None:
    s = run.s
    tables_models = [os.path.join(s.tables_runs, "en-de", name)
                     for name in ("baseline-s5", "san-s4", "aan-san")]  # fmt: skip
    if os.path.isdir(os.path.join(s.tables_runs, "en-de")):  # tables ran here: none trained
        run.say(f"== bench: the tables slice's models on this machine: {' '.join(tables_models)}")
        run.benchmark(*tables_models, "bench")  # the converged models: the headline's speed
        run.smoke()  # after the benchmark, never beside it, where time is left
        return
    loop = os.path.join(s.results, "en-de", "loop")
    policy = os.path.join(s.runs, "en-de", "policies", "aan-san.json")
    learned = os.path.join(loop, "iter1", "policy.json")
    run.aan_policy(learned, policy)
    run.beside(run.smoke)
    run.system("en-de/baseline-bench", "en-de", SMALL, None, 0)
    run.system("en-de/san-bench", "en-de", SMALL, learned, 0)  # the headline SAN's policy
    run.system("en-de/aan-san-bench", "en-de", AAN, policy, 0)
    run.finish_stage()
    trained = ("baseline-bench", "san-bench", "aan-san-bench")
    # models of the bench cap, not converged: their own folder, never over the converged models'
    run.benchmark(*(os.path.join(s.runs, "en-de", name) for name in trained), "bench-trained")


def bench_systems(label: str, checkpoint: str) -> List[str]:
    """The --system words of one model in the bench slice's benchmark: fairseq's decoder, the
    static decoder eager and as CUDA graphs, and (shared attention only) --san-decoding fast."""
    named = [(label, checkpoint)]
    if label != "baseline":
        named.append((f"{label}-fast", f'{checkpoint}:{{"san_decoding": "fast"}}'))
    named += [(f"{label}-{execution}", f"{checkpoint}:{overrides}")
              for execution, overrides in STATIC_EXECUTIONS.items()]  # fmt: skip
    return [word for system, model in named for word in ("--system", f"{system}={model}")]


SLICE_RUNNERS = {"en-de": en_de, "pairs": pairs, "tables": tables, "bench": bench}
assert tuple(SLICE_RUNNERS) == SLICES


def collect(run_sh: str, archives: Sequence[str]) -> int:
    """Check and unpack the archives given and SHARED/converged's, then the summary and the
    figures (Figure 5 where its analyses came back)."""
    run = Slice(Settings.from_environment("collect", dry_run=False, run_sh=run_sh))
    s = run.s
    shared = sorted(glob_in(s.shared, "converged", "converged-*.tar.gz"))
    archives = [*archives, *shared]
    if not archives:
        print(f"run.sh collect: no archive given and none in {s.shared}/converged", file=sys.stderr)
        return 2
    here = os.path.relpath(HERE)
    allow_cpu = ["--allow-cpu"] if os.environ.get("ALLOW_CPU_ARCHIVES") == "1" else []
    run.run_or_stop([*CAMPAIGN_SLICES, "collect", s.results, "--run-sh", run_sh, *allow_cpu,
                     "--data-root", s.data_root, *archives])  # fmt: skip
    summary = os.path.join(s.results, "summary.json")
    run.run_or_stop(["python", os.path.join(here, "campaign_summary.py"), s.results,
                     "--data-root", s.data_root, "-o", summary])  # fmt: skip
    run.run_or_stop(["python", os.path.join(here, "campaign_figures.py"), s.results])
    for folder in sorted(glob_in(s.results, "*", "*", "figure5", "")):
        command = run.figure5_command(folder)
        if command is not None:
            run.run_or_stop(command)
    return 0


def main(argv: List[str]) -> int:
    """``campaign_run.py RUN_SH SLICE [--dry-run]`` or ``campaign_run.py RUN_SH collect
    [ARCHIVE...]``: run.sh passes its own path first (the provenance records it)."""
    run_sh, args = argv[0], argv[1:]
    if not args:
        print(f"run.sh: {USAGE}", file=sys.stderr)
        return 2
    name, rest = args[0], args[1:]
    if name == "collect":
        option = next((word for word in rest if word.startswith("-")), None)
        if option is not None:  # the inner command would read it as its option
            print(f"run.sh: collect takes archives only, not {option} (an archive's path "
                  "starting with '-': give it as ./NAME)", file=sys.stderr)  # fmt: skip
            return 2
        try:
            return collect(run_sh, rest)
        except SettingError as error:
            print(f"run.sh: {error}", file=sys.stderr)
            return 2
    if name not in SLICE_RUNNERS or rest not in ([], ["--dry-run"]):
        unknown = next((word for word in rest if word != "--dry-run"), rest[-1] if rest else "")
        what = f"unknown argument {unknown}" if name in SLICE_RUNNERS else f"unknown slice {name}"
        print(f"run.sh: {what} ({USAGE})", file=sys.stderr)
        return 2
    try:
        settings = Settings.from_environment(name, dry_run=bool(rest), run_sh=run_sh)
    except SettingError as error:
        print(f"run.sh: {error}", file=sys.stderr)
        return 2
    # examples/multi30k/test_bleu.sh reads its batch size from the environment
    os.environ["DECODE_BATCH_SIZE"] = str(settings.decode_batch_size)
    run = Slice(settings)
    for variable, folder in (("RUNS", settings.runs), ("OUT", settings.out)):
        try:
            run.makedirs(folder)
        except OSError as error:  # a traceback
            print(f"run.sh: {variable}={folder}: {error.strerror}", file=sys.stderr)
            return 2
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # as Ctrl-C: packed, then ended
    try:
        SLICE_RUNNERS[name](run)
    except KeyboardInterrupt:
        run.interrupt()
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # a second one ends the packing at once
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    finally:  # what ran is packed, also when the schedule stops on an error
        run.pack()
    if run.interrupted:
        run.say("== interrupted: what ran is packed; the slice's next call resumes it")
        return INTERRUPTED_STATUS
    unknown = run.unknown_only()
    if unknown:  # said, not refused: a real call's schedule may leave one out (``unknown_only``)
        run.say(f"== note: ONLY names no run dir that the {name} slice asked for: "
                f"{' '.join(unknown)} (it asked for: {' '.join(sorted(set(run.asked)))})")
    if run.failed:
        run.say(f"== failed: {' '.join(run.failed)} (each run dir's run.log says why)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
