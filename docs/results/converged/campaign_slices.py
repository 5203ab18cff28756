"""What ``docs/results/converged/campaign_run.py`` (run.sh) asks while it runs a slice of the
converged campaign, and what it prints as commands of its own.

A slice (``en-de``, ``pairs``, ``tables``, ``bench``) is one or two calls of a lent GPU that
train its systems, test them and pack one archive each; the archives are later collected on
another machine.

    python docs/results/converged/campaign_slices.py record RUNS --slice S --run-sh FILE
        --started T -- CMD...
    python docs/results/converged/campaign_slices.py collect RESULTS --run-sh FILE [--allow-cpu]
        [--data-root D] ARCHIVE...
    python docs/results/converged/campaign_slices.py heldout RUN_DIR ITERATION --data D
        --sources DIR [--batch-size N]
    python docs/results/converged/campaign_slices.py aan-policy POLICY -o OUT

* ``record``: the slice's provenance (``RUNS/provenance/SLICE-STAMP.json``): the command line, the
  sha256 of the campaign's code that runs on the GPU machine (``CODE``), the dates, the GPU
  (nvidia-smi), the settings, the run dirs it holds;
* ``collect``: unpacks archives into RESULTS after checking, for every archive first, that its
  provenance names one of the SLICES run by this very code on a GPU (``--allow-cpu``: also an
  archive made without one, a toy run's); refuses with one line otherwise; each run dir an
  archive holds replaces the collected one whole (``replaced_folders``); then gzips the test
  sets' hypotheses (``compress_hypotheses``);
* ``heldout``: translates every ``*.en`` of a folder with a system's best checkpoint, the test
  sets' decoding settings, and keeps the detokenized hypotheses as
  ``PAIR/SYSTEM/heldout/NAME.hyp`` (one line per source line, the count checked);
* ``aan-policy``: the policy an AAN+SAN system trains with: the learned one without decoder
  self-attention sharing (AAN has no decoder self-attention to share).

The scheduler calls these in its own process:

* ``restore``: copies a run dir of an earlier call (committed after ``collect``) without what
  did not finish: a fresh machine retrains only that (its checkpoints never travel);
* ``unsettled``: the next iteration of a learn-to-share loop whose policy still changed at its
  last iteration (none once it learns a policy it or an earlier iteration was trained with, or
  one that another run dir of the pair trained with the loop's recipe and learned back), so that
  a slice can train it in a free place beside its own systems;
* ``untrained``: which of a slice's policy files no run dir of the pair trained with a given run
  dir's recipe (nor an earlier file of the list): what it still trains.
"""

import argparse
import datetime
import fnmatch
import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import fairseq_san
from campaign_summary import (
    ITERATION,
    PAIR_DIR,
    REPO,
    TEST_SPLITS,
    campaign_systems,
    finished_iterations,
    paired_reference,
    paired_runs,
    refused,
    stand_in,
    system_label,
    system_names,
    trained_iterations,
    trained_with,
)
from fairseq_san.errors import UsageError
from fairseq_san.files import glob_in
from fairseq_san.loop.stopping import loop_stop, policy_path
from fairseq_san.policy import load_policy, write_policy
from fairseq_san.scoring import read_generate_output, read_lines

BUNDLE = os.path.join("build", "offline-bundle")  # results.md's "How to run a slice" builds it here
DEVICE_MIB = 64  # what one call of the device tool takes: the working tree and what it carries
MIB = 1 << 20
SLICES = ("en-de", "pairs", "tables", "bench")
PROVENANCE = "provenance"
# What runs a slice besides run.sh (the scheduler, and this file's record and heldout): a change to
# any of them refuses the archives it did not make.
CODE = ("campaign_run.py", "campaign_slices.py")
# The fairseq-train arguments of every converged model (campaign_run.py's PRESET default): an
# archive trained with other arguments (PRESET set to a toy run's) is no converged evidence.
PRESET = os.path.join("examples", "presets", "gpu-converge.args")
ARCHIVE_NAME = re.compile(r"^converged-(en-de|pairs|tables|bench)[^/]*\.tar\.gz$")
# What an archive may hold, as collect unpacks it into the folder of run.sh and its programs:
# folders and regular files only (a link may point anywhere, and Python's tarfile "data" filter
# can be walked around with chains of them: CVE-2025-4517), under a pair's folder, the
# provenance or the multi-GPU smoke runs, and no program.
TOP_FOLDER = re.compile(r"^([a-z]{2}-[a-z]{2}|%s|smoke)$" % PROVENANCE)
PROGRAM_SUFFIXES = (".py", ".pyc", ".pth", ".sh", ".so", ".pt")
# The most an archive may unpack to: a slice's logs and hypotheses are a few MB, and what collect
# commits travels to every later GPU call (DEVICE_MIB); a received archive asking more is refused
# before anything is written (a few KB of gzip can unpack to gigabytes).
UNPACKED_MIB = 256
# A slice's archive holds a few hundred members; a received one held 50,000 empty files.
MAX_MEMBERS = 10_000
# What Linux's file systems take: a name's bytes, a path's.
NAME_MAX, PATH_MAX = 255, 4096
# The decoding settings of examples/multi30k/test_bleu.sh, for the held-out sources too (its
# batch size, DECODE_BATCH_SIZE there, is --batch-size here).
DECODING = (
    "--beam", "4", "--max-len-a", "1.2", "--max-len-b", "10", "--required-batch-size-multiple", "1",
)  # fmt: skip


def code_sha256(run_sh: str) -> str:
    """The sha256 of the campaign's code: run.sh, then the files of ``CODE`` beside it."""
    digest = hashlib.sha256()
    for path in (run_sh, *(os.path.join(os.path.dirname(run_sh), name) for name in CODE)):
        with open(path, "rb") as handle:
            digest.update(handle.read())
    return digest.hexdigest()


def preset_sha256(preset: str) -> Optional[str]:
    """The sha256 of the PRESET file ``preset`` (relative: to the repository's root, where run.sh
    runs), or None where there is none."""
    try:
        with open(os.path.join(REPO, preset), "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        return None


def gpu_name() -> str:
    """The GPUs nvidia-smi names (one per line, joined), or "none"."""
    try:
        result = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return "none"
    names = [line.strip() for line in result.stdout.splitlines() if line.strip()]
    return "; ".join(names) if result.returncode == 0 and names else "none"


def run_dirs(runs: str) -> List[str]:
    """``PAIR/RUN`` of every run dir under ``runs`` (one that holds an ``iter<k>`` folder)."""
    found = []
    for pair in sorted(os.listdir(runs)):
        if not os.path.isdir(os.path.join(runs, pair)):
            continue
        for name in sorted(os.listdir(os.path.join(runs, pair))):
            folder = os.path.join(runs, pair, name)
            if os.path.isdir(folder) and any(ITERATION.match(n) for n in os.listdir(folder)):
                found.append(f"{pair}/{name}")
    return found


def plugin_folder() -> str:
    """Where the fairseq_san that runs lives: "fairseq_san" for this checkout's, else the absolute
    path of an installed one (the bundle's wheel, which run.sh puts behind the checkout)."""
    folder = os.path.dirname(os.path.abspath(fairseq_san.__file__))
    repo = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
    return "fairseq_san" if folder == os.path.join(repo, "fairseq_san") else folder


def utc_stamp(started: str) -> str:
    """``started`` (ISO 8601) as the UTC stamp of a record's name: another zone's time was
    written as if it were UTC; no zone is read as UTC, as run.sh writes it."""
    if not is_iso_time(started):
        raise UsageError(f"--started {started}: not an ISO 8601 time (run.sh: date -u -Iseconds)")
    return utc_time(started).strftime("%Y%m%dT%H%M%SZ")


def record(
    runs: str, slice_name: str, run_sh: str, command: Sequence[str], started: str,
    settings: Dict[str, str],
) -> str:  # fmt: skip
    """Write the call's provenance into ``runs/provenance/`` and return its path: one record per
    call, named by its start (``started``), written again by each of its archives."""
    stamp = utc_stamp(started)  # before anything is made
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    provenance = {
        "slice": slice_name,
        "command": list(command),
        "code_sha256": code_sha256(run_sh),
        "preset_sha256": preset_sha256(settings.get("PRESET", PRESET)),
        "started": started,
        "finished": now.isoformat(),
        "gpu": gpu_name(),
        "plugin": plugin_folder(),
        "settings": settings,
        "run_dirs": run_dirs(runs),
    }
    folder = os.path.join(runs, PROVENANCE)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{slice_name}-{stamp}.json")
    with open(path, "w", encoding="utf-8") as out:
        json.dump(provenance, out, indent=1)
        out.write("\n")
    return path


def archive_provenance(archive: str) -> List[dict]:
    """The provenance records inside an archive (``./provenance/*.json``)."""
    with tarfile.open(archive) as tar:
        members = [
            member for member in tar.getmembers()
            if member.isfile() and os.path.normpath(member.name).startswith(PROVENANCE + "/")
            and member.name.endswith(".json")
        ]  # fmt: skip
        records = [json.load(tar.extractfile(member)) for member in members]
    for record in records:
        problem = provenance_problem(record)
        if problem is not None:
            raise UsageError(f"{archive}: provenance record {problem}: refused")
    return records


def provenance_problem(record) -> Optional[str]:
    """Why a provenance record read from an archive is not one that ``record`` writes, or None."""
    if not isinstance(record, dict):
        return f"is a JSON {type(record).__name__}, not an object"
    command = record.get("command", [])
    if not (isinstance(command, list) and all(isinstance(word, str) for word in command)):
        return "has a command that is not a list of strings"
    if not isinstance(record.get("settings", {}), dict):
        return "has settings that are not an object"
    for field in ("slice", "gpu"):  # the summary's table of slices names both
        if not isinstance(record.get(field), str):
            return f"has no {field} named (its {field} is {record.get(field)!r})"
    for field in ("started", "finished"):  # collect orders archives by them, the summary too
        if not is_iso_time(record.get(field)):
            return f"has no ISO 8601 {field} time (its {field} is {record.get(field)!r})"
    return None


def is_iso_time(value: object) -> bool:
    """Whether ``value`` is a time as ``record`` writes it (ISO 8601 text)."""
    try:
        return isinstance(value, str) and bool(datetime.datetime.fromisoformat(value))
    except ValueError:
        return False


def utc_time(text: str) -> datetime.datetime:
    """ISO 8601 ``text`` as a UTC time (one without a zone read as UTC, as ``utc_stamp``)."""
    when = datetime.datetime.fromisoformat(text)
    if when.tzinfo is None:
        return when.replace(tzinfo=datetime.timezone.utc)
    return when.astimezone(datetime.timezone.utc)


def started_at(archive: str) -> datetime.datetime:
    """When the call that packed ``archive`` started (its provenance, checked): the newest of its
    records, for it holds those of every earlier call on the same RUNS too (by the oldest, a
    second call's archive tied with the first's, and the first's, unpacked after it, replaced
    its results)."""
    return max(utc_time(record["started"]) for record in archive_provenance(archive))


def member_problem(member: tarfile.TarInfo) -> Optional[str]:
    """Why collect must not unpack ``member`` of an archive (``TOP_FOLDER``), or None."""
    parts = [part for part in member.name.split("/") if part not in ("", ".")]
    if not (member.isfile() or member.isdir()):
        return "is a link or a special file"
    if member.issparse():
        return "is a sparse file"
    if member.name.startswith("/") or ".." in parts:
        return "lies outside the archive's folder"
    if parts and not TOP_FOLDER.match(parts[0]):
        return "is outside a pair's folder, provenance/ and smoke/"
    if len(parts) == 1 and not member.isdir():
        return "is a file where a folder belongs"
    if parts and fnmatch.fnmatchcase(parts[-1], HYPOTHESES) and not member.isfile():
        return "is no file of hypotheses"
    if member.isfile() and parts[-1].endswith(PROGRAM_SUFFIXES):
        return "is a program or a checkpoint"
    return None


def check_members(archive: str) -> List[str]:
    """UsageError naming the first member of ``archive`` that collect must not unpack, or one it
    holds as a file and a folder both, or the size of the whole where it is above
    ``UNPACKED_MIB``; else the members' names. Opened as gzip alone (its name's): tarfile's guess
    at the compression said why each of four failed, on five lines."""
    with tarfile.open(archive, "r:gz") as tar:
        members = tar.getmembers()
    folders = {os.path.normpath(member.name) for member in members if member.isdir()}
    for member in members:  # every folder above a member
        folders.update(str(parent) for parent in Path(os.path.normpath(member.name)).parents)
    for member in members:
        problem = member_problem(member)
        if problem is None and member.isfile() and os.path.normpath(member.name) in folders:
            problem = "is a file and a folder both"  # unpacking failed half-way
        if problem is not None:
            raise UsageError(f"{archive}: member {member.name!r} {problem}: refused")
    if len(members) > MAX_MEMBERS:
        raise UsageError(
            f"{archive}: holds {len(members):,} members, more than a slice's results "
            f"({MAX_MEMBERS:,} at most): refused"
        )
    unpacked = sum(member.size for member in members if member.isfile())
    if unpacked > UNPACKED_MIB * MIB:
        raise UsageError(
            f"{archive}: unpacks to {unpacked / MIB:.0f} MiB, more than a slice's results "
            f"({UNPACKED_MIB} MiB at most): refused"
        )
    return [member.name for member in members]


def check_archive(archive: str, sha256: str, allow_cpu: bool = False) -> None:
    """UsageError (one line) unless the archive holds only run dirs' data (``check_members``) and
    was packed by this code (``code_sha256``) running its slice, on a GPU and with the preset's
    models (PRESET, no TRAIN_EXTRA) unless ``allow_cpu``. The provenance is text in the archive,
    written by whoever packed it: it tells slices apart, it does not prove where they ran."""
    name = os.path.basename(archive)
    found = ARCHIVE_NAME.match(name)
    if not found:
        raise UsageError(f"{archive}: not a slice archive (converged-SLICE*.tar.gz, {SLICES})")
    try:
        read_to_its_end(archive)
        names = check_members(archive)
        records = archive_provenance(archive)
    except UsageError:
        raise
    # EOFError: truncated; RecursionError: JSON nested too deep
    except (OSError, EOFError, tarfile.TarError, ValueError, RecursionError) as err:
        raise UsageError(f"{archive}: unreadable archive ({err or type(err).__name__})") from err
    if not records:
        raise UsageError(f"{archive}: no provenance record: not packed by run.sh, refused")
    check_recorded_contents(archive, found.group(1), records, names)
    preset_here = preset_sha256(PRESET)
    for provenance in records:
        command = provenance.get("command") or []
        if provenance.get("code_sha256") != sha256:
            raise UsageError(
                f"{archive}: made by another run.sh or campaign_run.py (sha256 "
                f"{provenance.get('code_sha256')}), refused: rerun the slice with these"
            )
        if command[1:] != [found.group(1)] or os.path.basename(command[0]) != "run.sh":
            raise UsageError(
                f"{archive}: recorded command {' '.join(command)!r} is not "
                f"'run.sh {found.group(1)}', refused"
            )
        if provenance.get("gpu") in (None, "none") and not allow_cpu:
            raise UsageError(
                f"{archive}: made where nvidia-smi named no GPU (a toy run's archive), refused: "
                "ALLOW_CPU_ARCHIVES=1 collects it anyway"
            )
        settings = provenance.get("settings") or {}
        if provenance.get("preset_sha256") != preset_here and not allow_cpu:
            preset = settings.get("PRESET", PRESET)
            raise UsageError(
                f"{archive}: trained with PRESET {preset!r}, whose arguments are not those of "
                f"{PRESET} here (sha256 {provenance.get('preset_sha256')}), refused: "
                "ALLOW_CPU_ARCHIVES=1 collects it anyway"
            )
        extra = settings.get("TRAIN_EXTRA")
        if extra and not allow_cpu:
            raise UsageError(
                f"{archive}: made with TRAIN_EXTRA {extra!r} (fairseq-train arguments put last: "
                "a toy run's sizes), refused: ALLOW_CPU_ARCHIVES=1 collects it anyway"
            )


def read_to_its_end(archive: str) -> None:
    """Decompress the whole archive: one cut short by a few bytes (its gzip trailer) read member
    by member as whole (EOFError where it ends before its end-of-stream marker)."""
    with gzip.open(archive) as stream:
        while stream.read(1 << 20):
            pass


def check_recorded_contents(
    archive: str, slice_name: str, records: Sequence[dict], names: Sequence[str]
) -> None:
    """UsageError for an archive whose records name another slice than its name does (the
    summary's table of slices said so), or whose members (``names``) hold a pair no record's run
    dirs are of (an en-de run dir copied under fr-en was published as fr-en's)."""
    other = next((record["slice"] for record in records if record["slice"] != slice_name), None)
    if other is not None:
        raise UsageError(f"{archive}: its provenance names the slice {other}, its name "
                         f"{slice_name}, refused")  # fmt: skip
    recorded = {
        run_dir.split("/")[0]
        for record in records
        for run_dir in record.get("run_dirs") or []
        if isinstance(run_dir, str)
    }
    held = {os.path.normpath(name).split(os.sep)[0] for name in names}
    unrecorded = sorted(pair for pair in held if PAIR_DIR.match(pair) and pair not in recorded)
    if recorded and unrecorded:
        raise UsageError(f"{archive}: holds {unrecorded[0]}, of no run dir its provenance "
                         "records, refused")  # fmt: skip


def collect(
    results: str, run_sh: str, archives: Sequence[str], allow_cpu: bool = False,
    data_root: Optional[str] = None,
) -> List[str]:  # fmt: skip
    """Check every archive (``check_archive``), that they unpack whole (``check_unpacking``) and,
    where ``data_root`` is given, that the summary can be written from them (``check_summary``),
    then unpack each into ``results`` in the order their calls started (an older call's archive
    unpacked after a newer one's replaced its results: the shared folder's came after those
    named, in name order), each run dir it holds replacing the collected one whole, with the
    held-out hypotheses of the iterations it trained again (``replaced_folders``); the archives
    unpacked, in that order."""
    digest = code_sha256(run_sh)
    for archive in archives:
        check_archive(archive, digest, allow_cpu)
    archives = sorted(dict.fromkeys(archives), key=started_at)
    check_unpacking(results, archives)
    if data_root is not None:
        check_summary(results, data_root, archives)
    unpack(results, archives)
    return list(archives)


def unpack(results: str, archives: Sequence[str]) -> None:
    """Unpack the checked ``archives`` into ``results`` in their order, each run dir one holds
    replacing the collected one whole (``replaced_folders``); then gzip the hypotheses."""
    for archive in archives:
        with tarfile.open(archive) as tar:
            for folder in replaced_folders(results, tar):
                shutil.rmtree(os.path.join(results, folder), ignore_errors=True)
            tar.extractall(results, filter="data")
    compress_hypotheses(results)


def check_unpacking(results: str, archives: Sequence[str]) -> None:
    """UsageError naming the first member of ``archives`` that could not be unpacked into
    ``results`` beside the others: a file where another archive or ``results`` has a folder (or
    the reverse), or a name longer than the file system takes. Found half-way, the archives
    before it were unpacked, and the slice looked collected."""
    kinds: Dict[str, Tuple[bool, str]] = {}  # path: (a folder?, the archive that holds it)
    for archive in archives:
        with tarfile.open(archive) as tar:
            members = tar.getmembers()
        replaced = run_dirs_in([member.name for member in members])
        for member in members:
            path = os.path.normpath(member.name)
            problem = unpacking_problem(results, path, member.isdir(), kinds, replaced)
            if problem is not None:
                raise UsageError(f"{archive}: member {member.name!r} {problem}: refused")
            for parent in Path(path).parents:
                kinds.setdefault(str(parent), (True, archive))
            kinds.setdefault(path, (member.isdir(), archive))


def unpacking_problem(
    results: str, path: str, folder: bool, kinds: Dict[str, Tuple[bool, str]],
    replaced: Sequence[str],
) -> Optional[str]:  # fmt: skip
    """Why ``path`` (a folder or not) cannot be unpacked into ``results`` after the members of
    ``kinds``, or None. ``replaced``: the run dirs its archive replaces whole."""
    if any(len(part.encode()) > NAME_MAX for part in path.split(os.sep)):
        return f"has a name longer than {NAME_MAX} bytes"
    if len(os.path.join(os.path.abspath(results), path).encode()) >= PATH_MAX:
        return f"would lie at a path longer than {PATH_MAX} bytes"
    for named in [path, *map(str, Path(path).parents)]:
        is_folder = folder if named == path else True
        earlier = kinds.get(named)
        if earlier is not None and earlier[0] != is_folder:
            return f"is a {kind(is_folder)} where {earlier[1]} has a {kind(earlier[0])}"
        target = os.path.join(results, named)
        kept = not any(named == r or named.startswith(r + os.sep) for r in replaced)
        if kept and os.path.lexists(target) and os.path.isdir(target) != is_folder:
            return f"is a {kind(is_folder)} where {results} has a {kind(not is_folder)}"
    return None


def check_summary(results: str, data_root: str, archives: Sequence[str]) -> None:
    """UsageError, before anything is unpacked, where campaign_summary.py would refuse what
    ``results`` holds with ``archives`` unpacked (``unpack``, into a copy of its pairs' folders):
    no trained run dir at all, a system it cannot read, or a paired test whose hypotheses are at
    hand without its reference in ``data_root`` (``paired_runs``: only the systems it tests, on
    the test sets it tests them on). Refused after unpacking, the archives looked collected, and
    the summary was the old one."""
    with tempfile.TemporaryDirectory() as stage:
        for pair in os.listdir(results) if os.path.isdir(results) else ():
            if PAIR_DIR.match(pair) and os.path.isdir(os.path.join(results, pair)):
                shutil.copytree(os.path.join(results, pair), os.path.join(stage, pair))
        unpack(stage, archives)
        try:
            systems = campaign_systems(stage)
            if not systems:
                raise UsageError(f"no trained run dir (PAIR/RUN/iter*/train.log) in {stage} nor "
                                 "in the archives: nothing to summarize")  # fmt: skip
            for pair, rows in systems.items():
                for _, _, _, runs in paired_runs(rows):
                    for split in TEST_SPLITS:
                        what = f"the paired tests on {split}"
                        paired_reference(pair, runs, split, data_root, what)
        except UsageError as err:  # said of the results, not of the copy
            raise UsageError(f"{str(err).replace(stage, results)}; nothing unpacked") from None


def kind(folder: bool) -> str:
    return "folder" if folder else "file"


# A pair's folders that are no run dir: its policies (learned by the tables slice; the bench
# slice writes one of them, aan-san.json), which an archive adds to, file by file.
POLICIES = "policies"


def run_dirs_in(members: Sequence[str]) -> List[str]:
    """The run dirs (``PAIR/RUN``) that an archive's ``members`` hold: a pair's folders with
    anything below them but its ``POLICIES`` and held-out hypotheses (``PAIR/LABEL/heldout``,
    beside a loop's run dir). A call holds the whole of each run dir it touched: the finished
    iterations that it restored, what it trained. A call on a fresh machine retrains an
    unfinished iteration from scratch (``restore`` keeps finished iterations only), and its files
    unpacked over an earlier call's left that training's test scores, Figure 5 steps or learned
    policy beside the new one in the summary."""
    found = set()
    for member in members:
        parts = os.path.normpath(member).split(os.sep)
        if len(parts) >= 3 and parts[1] != POLICIES and parts[2] != "heldout":
            found.add(os.path.join(*parts[:2]))
    return sorted(found)


def replaced_folders(results: str, tar: tarfile.TarFile) -> List[str]:
    """What unpacking ``tar`` replaces in ``results``: each run dir it holds (``run_dirs_in``)
    and, where a collected iteration of one is not in ``tar`` finished with the same training
    log, that system's held-out hypotheses, which came from a model the call trained again or
    dropped. Held-out folders of iterations it holds finished stay (they do not travel to the
    call that restores them)."""
    members = {os.path.normpath(member.name): member for member in tar.getmembers()}
    folders = []
    for run_dir in run_dirs_in(list(members)):
        collected = os.path.join(results, run_dir)
        iterations = trained_iterations(collected) if os.path.isdir(collected) else []
        for system, seed, k in system_names(os.path.basename(run_dir), iterations):
            log = os.path.join(run_dir, f"iter{k}", "train.log")
            finished = os.path.join(run_dir, f"done.iter{k}") in members and log in members
            if finished and tar.extractfile(members[log]).read() == Path(results, log).read_bytes():
                continue
            folders.append(os.path.join(os.path.dirname(run_dir), system_label(system, seed),
                                        "heldout"))  # fmt: skip
        folders.append(run_dir)
    return folders


# fairseq-generate's output in a run dir, which collect compresses.
HYPOTHESES = "generate-*.txt"


def compress_hypotheses(results: str) -> None:
    """gzip every fairseq-generate output under ``results`` (``generate-SPLIT.txt`` becomes
    ``generate-SPLIT.txt.gz``, the same bytes each time: no name or date in the header). What is
    committed here travels to every later GPU call, at most 64 MiB with the bundle, and the test
    sets' hypotheses were more than half of it (10.3 of 18.8 MB after the en-de slice); gzip
    keeps about a third."""
    for path in glob_in(results, "**", HYPOTHESES, recursive=True):
        with open(path, "rb") as text, open(path + ".gz", "wb") as raw:
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as packed:
                shutil.copyfileobj(text, packed)
        os.remove(path)


def travel_report(repo: str = REPO, bundle: str = BUNDLE) -> str:
    """What a slice's call sends to the GPU machine, against the device tool's DEVICE_MIB: the
    working tree (the builder's ``travelling_tree_mib``: collected results included) and the
    bundle it carries. Printed by ``collect``, where the tree grows, so that the next session
    builds a bundle that fits (``--data`` of the pairs its slice needs only). The builder is
    imported here only: it needs ``packaging``, which a GPU machine running a slice may lack."""
    sys.path.append(os.path.join(REPO, "scripts"))
    from build_offline_bundle import size_mib, travelling_tree_mib

    carried = Path(repo, bundle)
    tree = travelling_tree_mib(carried, Path(repo))
    line = f"== the working tree that travels to a GPU call is {tree:.1f} MiB"
    if not carried.is_dir():
        return f"{line} of {DEVICE_MIB} (no {bundle} yet)"
    total = tree + size_mib(carried)
    line += f", with {bundle} {total:.1f} MiB of {DEVICE_MIB}"
    if total > DEVICE_MIB:
        line += ": over, so rebuild the bundle with the --data of the next slice's pairs only"
    return line


def restore(source: str, target: str) -> bool:
    """Copy run dir ``source`` to ``target`` with only its finished iterations (``done.iter<k>``)
    and the policy learned from the last of them; False (nothing copied) when none finished."""
    finished = finished_iterations(source)
    if not finished:
        return False
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("checkpoints", "last"))
    for folder in (target, os.path.join(target, "test-bleu")):
        for name in os.listdir(folder) if os.path.isdir(folder) else ():
            match = ITERATION.match(name)
            if match and int(match.group(1)) not in finished:
                shutil.rmtree(os.path.join(folder, name))
    learned = os.path.join(f"iter{finished[-1] + 1}", "policy.json")
    if os.path.exists(os.path.join(source, learned)):  # the next iteration's: never relearned
        os.makedirs(os.path.join(target, os.path.dirname(learned)))
        shutil.copy2(os.path.join(source, learned), os.path.join(target, learned))
    return True


def unsettled(run_dir: str, pair_dirs: Sequence[str] = ()) -> Optional[int]:
    """The next iteration of a learn-to-share loop whose policy still changes: k + 1, where k >= 1
    is its newest finished iteration and the policy k learned (``iter<k+1>/policy.json``) is new,
    neither k's nor an earlier iteration's (``fairseq_san.loop.stopping``), nor trained already by
    a run dir of ``pair_dirs`` with the loop's recipe (``campaign_summary.stand_in``, said on
    stderr); None otherwise (iteration 1 is its slice's own stage 2)."""
    finished = finished_iterations(run_dir) if os.path.isdir(run_dir) else []
    if not finished or finished[-1] < 1:
        return None
    newest = finished[-1]
    learned = os.path.exists(policy_path(run_dir, newest + 1))
    if not learned or loop_stop(run_dir, newest) is not None:
        return None
    other = stand_in(run_dir, newest, pair_dirs)
    if other:
        print(f"== {run_dir}: iteration {newest}'s policy was trained by {other} with the loop's "
              "recipe, and learned back: the loop ends there", file=sys.stderr)  # fmt: skip
        return None
    return newest + 1


def untrained(policies: Sequence[str], like: str, pair_dirs: Sequence[str]) -> List[str]:
    """The policy files of ``policies`` that a slice still has to train: those that no run dir of
    ``pair_dirs`` trained with the recipe of run dir ``like`` (``campaign_summary.trained_with``)
    and that no earlier file of the list holds. Each other one is said on stderr, with the
    system that trained it."""
    new: List[str] = []
    for path in policies:
        if not os.path.exists(path):
            print(f"== {path}: no such policy, nothing to train", file=sys.stderr)
            continue
        policy = load_policy(path)
        trained = trained_with(policy, like, pair_dirs)
        same = [other for other in new if load_policy(other) == policy]
        if trained:
            run_dir, k = trained[0]
            print(f"== {path}: trained already, as {iteration_label(run_dir, k)} ({run_dir}, "
                  f"iteration {k}), with the recipe of {like}", file=sys.stderr)  # fmt: skip
        elif same:
            print(f"== {path}: the policy of {same[0]}, trained once", file=sys.stderr)
        else:
            new.append(path)
    return new


def iteration_label(run_dir: str, iteration: int) -> str:
    """The folder name (``system_label``) of the system that iteration ``iteration`` of
    ``run_dir`` is in summary.json."""
    iterations = [
        k for k in range(iteration + 1) if os.path.isdir(os.path.join(run_dir, f"iter{k}"))
    ]
    for system, seed, k in system_names(os.path.basename(run_dir), iterations):
        if k == iteration:
            return system_label(system, seed)
    raise UsageError(f"{run_dir}: iteration {iteration} is no system of summary.json")


def translate(data: str, checkpoint: str, source: str, hypotheses: str, batch_size: int) -> int:
    """Translate ``source`` (raw text) with fairseq-interactive; write the detokenized hypotheses
    in source order to ``hypotheses``; their number, checked against the source's lines."""
    sentences = len(read_lines(source))
    user_dir = os.path.dirname(fairseq_san.__file__)
    with tempfile.TemporaryDirectory() as tmp:
        output = os.path.join(tmp, "interactive.txt")
        with open(source, encoding="utf-8") as stdin, open(output, "w", encoding="utf-8") as out:
            result = subprocess.run(
                ["fairseq-interactive", data, "--user-dir", user_dir, "--path", checkpoint,
                 "--task", "translation_san", "--bpe", "sentencepiece",
                 "--sentencepiece-model", os.path.join(data, "spm.model"),
                 "--buffer-size", "1024", "--batch-size", str(batch_size), *DECODING],
                stdin=stdin, stdout=out, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
        if result.returncode != 0:
            sys.stderr.write(result.stderr[-3000:])
            raise UsageError(f"fairseq-interactive on {source} exited with {result.returncode}")
        lines = read_generate_output(output)
    if len(lines) != sentences:
        raise UsageError(f"{source}: {sentences} sentences but {len(lines)} hypotheses")
    partial = hypotheses + ".partial"
    with open(partial, "w", encoding="utf-8") as out:
        out.writelines(line + "\n" for line in lines)
    os.replace(partial, hypotheses)
    return len(lines)


def heldout(
    run_dir: str, iteration: int, data: str, sources: str, batch_size: int = 16
) -> List[str]:
    """Held-out hypotheses of one system (every ``*.en`` of ``sources``, skipping those done)."""
    label = iteration_label(run_dir, iteration)
    folder = os.path.join(os.path.dirname(run_dir), label, "heldout")
    checkpoint = os.path.join(run_dir, f"iter{iteration}", "checkpoints", "checkpoint_best.pt")
    names = sorted(name for name in os.listdir(sources) if name.endswith(".en"))
    written = []
    os.makedirs(folder, exist_ok=True)
    for name in names:
        hypotheses = os.path.join(folder, name[: -len(".en")] + ".hyp")
        if not os.path.exists(hypotheses):
            count = translate(data, checkpoint, os.path.join(sources, name), hypotheses, batch_size)
            print(f"== {label}: {count} held-out hypotheses in {hypotheses}")
        written.append(hypotheses)
    return written


def aan_policy(policy: str, output: str) -> None:
    """The learned policy without decoder self-attention sharing, for AAN+SAN."""
    learned = load_policy(policy)
    learned["decoder_self"] = None
    write_policy(learned, output)


def positive_int(text: str) -> int:
    """argparse type: an integer above 0 (a batch size)."""
    if not text.isdigit() or int(text) == 0:
        raise argparse.ArgumentTypeError(f"a positive integer, not {text!r}")
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python docs/results/converged/campaign_slices.py", description=__doc__.splitlines()[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    rec = commands.add_parser("record", help="write the slice's provenance into RUNS")
    rec.add_argument("runs")
    rec.add_argument("--slice", required=True, choices=SLICES)
    rec.add_argument("--run-sh", required=True)
    rec.add_argument("--started", required=True, help="when the slice started (UTC, ISO 8601)")
    rec.add_argument("--setting", action="append", default=[], metavar="NAME=VALUE")
    rec.add_argument("slice_command", nargs="+", help="the command line, after --")
    col = commands.add_parser("collect", help="check and unpack slice archives into RESULTS")
    col.add_argument("results")
    col.add_argument("--run-sh", required=True)
    col.add_argument("--allow-cpu", action="store_true", help="also archives made without a GPU")
    col.add_argument(
        "--data-root",
        help="prepare.sh's folders, for the paired tests' references: "
        "checked before anything is unpacked (unchecked where not given)",
    )
    col.add_argument("archives", nargs="+")
    held = commands.add_parser("heldout", help="translate the held-out sources")
    held.add_argument("run_dir")
    held.add_argument("iteration", type=int)
    held.add_argument("--data", required=True)
    held.add_argument("--sources", required=True)
    held.add_argument("--batch-size", type=positive_int, default=16, help="sentences per batch")
    aan = commands.add_parser("aan-policy", help="a learned policy for AAN+SAN")
    aan.add_argument("policy")
    aan.add_argument("-o", "--output", required=True)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "record":
            settings = dict(setting.partition("=")[::2] for setting in args.setting)
            print(record(args.runs, args.slice, args.run_sh, args.slice_command, args.started,
                         settings))  # fmt: skip
        elif args.command == "collect":
            collected = collect(args.results, args.run_sh, args.archives, args.allow_cpu,
                                args.data_root)  # fmt: skip
            for archive in collected:
                print(f"== collected {archive}")
            print(travel_report())
        elif args.command == "heldout":
            heldout(args.run_dir, args.iteration, args.data, args.sources, args.batch_size)
        else:
            aan_policy(args.policy, args.output)
    except (UsageError, OSError) as err:
        return refused(err)
    return 0


if __name__ == "__main__":
    sys.exit(main())
