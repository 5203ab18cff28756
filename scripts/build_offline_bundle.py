#!/usr/bin/env python3
"""Build an offline bundle of fairseq-san for a GPU machine without a package registry.

Run on a connected machine, with the project's Python (fairseq-fixed and the plugin installed):

    python scripts/build_offline_bundle.py --out build/offline-bundle --data data-bin/multi30k.en-de

The bundle holds wheels of fairseq-san and of everything it needs except what the GPU machine has
(MACHINE_PROVIDES: torch and numpy, large and tied to its CUDA, matplotlib, lxml). fairseq-fixed
travels without its compiled extensions but with their C++ sources (its two Cython modules
translated to C++ here), so the GPU machine needs only a C++ compiler and Python's headers, no
Cython. On the GPU machine, ``source offline-bundle/activate.sh`` installs the wheels into a
prefix without network, compiles the extensions and puts the console commands on PATH
(``install.py``, copied into the bundle).
"""

import argparse
import base64
import email.parser
import hashlib
import importlib.metadata
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Tuple

try:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
except ImportError as missing:  # a Python without the project installed
    sys.exit(f"build_offline_bundle.py: error: {missing}: run this with the project's Python "
             "(.venv/bin/python after make setup)")

REPO = Path(__file__).resolve().parents[1]
TARGET_SIDE = Path(__file__).resolve().parent / "offline_bundle"  # activate.sh, install.py
MIB = 1 << 20
NO_CACHE = shutil.ignore_patterns("__pycache__")

# The GPU machine's own packages: never shipped, checked by install.py. matplotlib: every
# attention analysis draws its heatmaps (the learn-to-share loop's fairseq-validate). lxml:
# sacrebleu's, 5 MiB of wheel, which the device tool's 64 MiB (the tree and the bundle) could not
# hold beside the collected results; the GPU image has it (the device library's KINDS.md).
MACHINE_PROVIDES = ("torch", "numpy", "matplotlib", "lxml")
# Requirements of fairseq-san or fairseq-fixed that translation never imports, left out for size.
LEFT_OUT = {
    "torchaudio": "fairseq's speech tasks only",
    "scikit-learn": "imported only by the fairseq modules in FAIRSEQ_LEFT_OUT",
    "cffi": "never imported by fairseq",
    "cython": "the Cython modules are translated to C++ on the build machine",
}
# fairseq's extensions that translation needs: module -> sources in the fairseq-fixed sdist.
# libbleu is fairseq-generate's default scorer; libbase and libnat (torch C++ extensions of other
# models) are left out.
EXTENSIONS = {
    "fairseq.data.data_utils_fast": ["fairseq/data/data_utils_fast.pyx"],
    "fairseq.data.token_block_utils_fast": ["fairseq/data/token_block_utils_fast.pyx"],
    "fairseq.libbleu": ["fairseq/clib/libbleu/libbleu.cpp", "fairseq/clib/libbleu/module.cpp"],
}
FAIRSEQ = "fairseq-fixed"
# fairseq modules left out of its wheel: fairseq imports every task and criterion when it starts,
# and these import scikit-learn and scipy (about 50 MB of wheels) at module level.
FAIRSEQ_LEFT_OUT = (
    "fairseq/tasks/audio_classification.py",
    "fairseq/criterions/sentence_prediction.py",
    "fairseq/criterions/sentence_prediction_adapters.py",
)
PROG = "build_offline_bundle.py"  # its errors, argparse's too, start with "PROG: error:"


def fail(message: str) -> None:
    sys.exit(f"{PROG}: error: {message}")


def run(*command: str, cwd: Optional[Path] = None, failed: str = "") -> None:
    """Run a command; on failure, show its output and stop with one error line (``failed``,
    where given: what failed, in words)."""
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.stderr.write(result.stdout[-3000:] + result.stderr[-3000:])
        fail(failed or f"{' '.join(command[:6])} ... exited with {result.returncode}")


# ---------------------------------------------------------------------------------------------
# Wheels


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def write_wheel(path: Path, files: Dict[str, bytes], dist_info: str) -> Path:
    """A wheel (a zip with a RECORD of every file's hash) holding ``files``."""
    record = f"{dist_info}/RECORD"
    lines = [record_line(name, data) for name, data in files.items()] + [f"{record},,"]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
        wheel.writestr(record, "\n".join(lines) + "\n")
    return path


def wheel_tag(wheel_metadata: str) -> str:
    """The compressed tag of a WHEEL file's Tag lines, e.g. cp311-cp311-manylinux_2_17_x86_64."""
    parts: List[List[str]] = [[], [], []]
    for line in wheel_metadata.splitlines():
        if line.startswith("Tag:"):
            for index, part in enumerate(line.split(":", 1)[1].strip().split("-")):
                if part not in parts[index]:
                    parts[index].append(part)
    return "-".join(".".join(part) for part in parts)


def installed_files(dist: importlib.metadata.Distribution) -> Iterator[str]:
    """The files an installed distribution's RECORD lists inside site-packages, less caches and
    the installer's own records (pip writes them again on the GPU machine)."""
    for file in dist.files or ():
        name = str(file)
        if name.startswith("..") or "__pycache__" in name or name.endswith(".pyc"):
            continue
        if ".dist-info/" in name and Path(name).name in (
            "RECORD", "INSTALLER", "REQUESTED", "direct_url.json"
        ):  # fmt: skip
            continue
        yield name


def repack(
    dist: importlib.metadata.Distribution,
    wheels: Path,
    keep: Callable[[str], bool] = lambda name: True,
    extra: Optional[Dict[str, bytes]] = None,
    pure: bool = False,
) -> Path:
    """A wheel of an installed distribution, made from its installed files that ``keep`` accepts
    plus ``extra``; ``pure`` retags it py3-none-any (its compiled parts are built on the target)."""
    root = Path(dist.locate_file(""))
    files = {name: (root / name).read_bytes() for name in installed_files(dist) if keep(name)}
    files.update(extra or {})
    dist_info = next(name for name in files if name.endswith(".dist-info/WHEEL")).rsplit("/", 1)[0]
    if pure:
        files[f"{dist_info}/WHEEL"] = (
            b"Wheel-Version: 1.0\nGenerator: fairseq-san build_offline_bundle\n"
            b"Root-Is-Purelib: true\nTag: py3-none-any\n"
        )
    tag = wheel_tag(files[f"{dist_info}/WHEEL"].decode())
    name = canonicalize_name(dist.metadata["Name"]).replace("-", "_")
    return write_wheel(wheels / f"{name}-{dist.version}-{tag}.whl", files, dist_info)


def is_pure(dist: importlib.metadata.Distribution) -> bool:
    wheel = dist.read_text("WHEEL") or ""
    return "Root-Is-Purelib: true" in wheel


def repackable(dist: importlib.metadata.Distribution, python: str, platform: str) -> bool:
    """Whether the installed ``dist`` runs on the target (``python``, ``platform``) as it is: pure
    Python, or compiled here for that Python by a wheel whose platform tags include one the
    target runs (else its wheel for the target is downloaded)."""
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    wheel = dist.read_text("WHEEL") or ""
    return is_pure(dist) or (python == here and runs_on(wheel_tag(wheel), platform))


# manylinux's first names for the glibc they need (PEP 600).
LEGACY_MANYLINUX = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
MANYLINUX = re.compile(r"manylinux_(\d+)_(\d+)_(\w+)")


def runs_on(tag: str, platform: str) -> bool:
    """Whether a wheel of the compressed ``tag`` (``wheel_tag``) runs on ``platform``: one of its
    platforms is ``platform``, or a manylinux of the same architecture and an older glibc (a
    manylinux_2_31 wheel installed here does not run on manylinux_2_28)."""
    target = manylinux_glibc(platform)
    for own in tag.rsplit("-", 1)[-1].split("."):
        needs = manylinux_glibc(own)
        if own == platform or (target and needs and needs[1] == target[1] and needs <= target):
            return True
    return False


def manylinux_glibc(platform: str) -> Optional[Tuple[Tuple[int, int], str]]:
    """((glibc major, minor), architecture) of a manylinux platform tag, None for another."""
    found = MANYLINUX.fullmatch(platform)
    if found:
        return (int(found.group(1)), int(found.group(2))), found.group(3)
    legacy, _, arch = platform.partition("_")
    return (LEGACY_MANYLINUX[legacy], arch) if legacy in LEGACY_MANYLINUX else None


def download(name: str, version: str, wheels: Path, python: str, platform: str) -> None:
    """The binary wheel of ``name==version`` for the target's Python and platform, from PyPI."""
    run(
        sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
        "--python-version", python, "--platform", platform, "--dest", str(wheels),
        f"{name}=={version}",
        failed=f"pip found no wheel of {name} {version} for Python {python} on {platform} (its "
        "output above): give a --python-version and --platform it has wheels for (or the "
        "network it needs)",
    )  # fmt: skip


def plugin_wheel(wheels: Path) -> Path:
    """fairseq-san's own wheel, built from a copy of the repository's sources (no build files
    land in the working tree)."""
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "fairseq-san"
        source.mkdir()
        for name in ("setup.py", "README.md"):
            shutil.copy2(REPO / name, source / name)
        shutil.copytree(REPO / "fairseq_san", source / "fairseq_san", ignore=NO_CACHE)
        run(
            sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-index",
            "--no-build-isolation", "--wheel-dir", str(wheels), str(source),
        )  # fmt: skip
    return next(wheels.glob("fairseq_san-*.whl"))


def wheel_requirements(wheel: Path) -> List[str]:
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(name for name in archive.namelist() if name.endswith(".dist-info/METADATA"))
        message = email.parser.BytesParser().parsebytes(archive.read(metadata))
    return message.get_all("Requires-Dist") or []


def dependencies(
    requirements: Iterable[str], python: str, skip: Iterable[str] = ()
) -> List[importlib.metadata.Distribution]:
    """The installed distributions that ``requirements`` need on a Python ``python`` machine,
    transitively, less ``skip`` (names) and what only they need."""
    skip = {canonicalize_name(name) for name in skip}
    environment = {"python_version": python, "python_full_version": f"{python}.0", "extra": ""}
    found: Dict[str, importlib.metadata.Distribution] = {}
    pending = list(requirements)
    while pending:
        requirement = Requirement(pending.pop())
        name = canonicalize_name(requirement.name)
        if name in skip or name in found:
            continue
        if requirement.marker is not None and not requirement.marker.evaluate(environment):
            continue
        try:
            found[name] = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            fail(f"{name} is not installed here: run this with the project's Python (make setup)")
        pending.extend(found[name].requires or ())
    return sorted(found.values(), key=lambda dist: canonicalize_name(dist.metadata["Name"]))


# ---------------------------------------------------------------------------------------------
# fairseq-fixed: Python sources, extension sources


def fairseq_sdist(version: str, given: Optional[Path], cache: Path) -> Path:
    """The fairseq-fixed sdist (it holds the .pyx and .cpp sources that the wheel lacks): the one
    given, or downloaded once into ``cache``."""
    if given is not None:
        return given
    sdist = cache / f"fairseq_fixed-{version}.tar.gz"
    if not sdist.exists():
        cache.mkdir(parents=True, exist_ok=True)
        run(
            sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary=:all:",
            "--no-build-isolation", "--dest", str(cache), f"{FAIRSEQ}=={version}",
        )  # fmt: skip
    return sdist


def opened_sdist(sdist: Path) -> Tuple[tarfile.TarFile, List[tarfile.TarInfo]]:
    """The sdist and its members, or one error line for a file that is no whole .tar.gz (a
    download into --cache that was cut short stays there)."""
    try:
        archive = tarfile.open(sdist)
        return archive, archive.getmembers()
    except (tarfile.TarError, EOFError, OSError) as error:
        fail(f"{sdist} is not a whole .tar.gz ({error}): remove it, or give fairseq-fixed's sdist "
             "with --fairseq-sdist")


def extension_sources(sdist: Path, version: str) -> Dict[str, bytes]:
    """EXTENSIONS' sources from the sdist, each .pyx with the C++ that Cython makes of it."""
    from Cython.Build import cythonize
    from setuptools import Extension

    archive, members = opened_sdist(sdist)
    with tempfile.TemporaryDirectory() as tmp, archive:
        top = f"fairseq_fixed-{version}"
        wanted = {f"{top}/{source}" for sources in EXTENSIONS.values() for source in sources}
        # regular files only, written here: extractall(filter=...) needs Python 3.11.4 or newer
        # (Debian 12's python3.11 is 3.11.2)
        files = {member.name: member for member in members
                 if member.name in wanted and member.isfile()}  # fmt: skip
        if len(files) != len(wanted):
            fail(f"{sdist} lacks some of {sorted(wanted)}: is it fairseq-fixed {version}?")
        for member in files.values():
            target = Path(tmp, member.name)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(archive.extractfile(member).read())
        root = Path(tmp) / top
        pyx = [
            Extension(module, [str(root / source) for source in sources], language="c++")
            for module, sources in EXTENSIONS.items()
            if sources[0].endswith(".pyx")
        ]
        cythonize(pyx, quiet=True)
        return {
            str(path.relative_to(root)): path.read_bytes()
            for path in sorted(root.rglob("*"))
            if path.is_file()
        }


def compiled_sources() -> Dict[str, List[str]]:
    """EXTENSIONS as install.py compiles them: each .pyx replaced by its C++ translation."""
    return {
        module: [source.replace(".pyx", ".cpp") for source in sources]
        for module, sources in EXTENSIONS.items()
    }


def fairseq_wheel(
    dist: importlib.metadata.Distribution, sources: Dict[str, bytes], wheels: Path
) -> Path:
    """fairseq-fixed as installed here, less its examples, compiled files and FAIRSEQ_LEFT_OUT,
    plus the sources of the extensions that install.py compiles on the GPU machine."""

    def keep(name: str) -> bool:
        return not (
            name.startswith("fairseq/examples/") or name.endswith(".so") or name in FAIRSEQ_LEFT_OUT
        )

    return repack(dist, wheels, keep=keep, extra=sources, pure=True)


# ---------------------------------------------------------------------------------------------
# The bundle


def copy_data(data: Path, destination: Path) -> None:
    """A binarized data directory, with of its ``text/`` only the raw references of the
    evaluation splits (valid, test, test1), which learn_to_share.sh and test_bleu.sh score
    against; the training text is already binarized."""

    def ignore(directory: str, names: List[str]) -> List[str]:
        if Path(directory).name != "text":
            return [name for name in names if name == "__pycache__"]
        return [name for name in names if ".raw." not in name or name.startswith("train.")]

    shutil.copytree(data, destination, ignore=ignore)


def heldout_sources(folder: Path) -> List[str]:
    """The names of the held-out source files (``*.en``) in ``folder``: files only (a folder
    named ``x.en`` was copied as one, an IsADirectoryError traceback)."""
    return sorted(path.name for path in folder.glob("*.en") if path.is_file())


def copy_heldout(sources: Path, destination: Path) -> List[str]:
    """The held-out source files (``*.en``, raw text) into ``destination``: a GPU machine gets
    the working tree without ../shared, so docs/results/converged/run.sh finds them here."""
    destination.mkdir(parents=True, exist_ok=True)
    names = heldout_sources(sources)
    for name in names:
        shutil.copy2(sources / name, destination / name)
    return names


def size_mib(path: Path) -> float:
    return sum(file.stat().st_size for file in path.rglob("*") if file.is_file()) / MIB


def check_size(bundle: Path, max_mib: float, named: Optional[Path] = None,
               tree_mib: float = 0.0) -> float:  # fmt: skip
    """The bundle's size in MiB; stops with an error, naming it ``named`` (default: its folder),
    when it is over ``max_mib``, or over what ``max_mib`` leaves beside the working tree that
    travels with it (``tree_mib``: ``travelling_tree_mib``)."""
    size = size_mib(bundle)
    if size + tree_mib > max_mib:
        folders = sorted(part for part in bundle.iterdir() if part.is_dir())
        parts = ", ".join(f"{part.name} {size_mib(part):.1f}" for part in folders)
        over = f"over --max-mib {max_mib:g}"
        if tree_mib:
            over = (f"and the working tree that travels with it {tree_mib:.1f} MiB: "
                    f"{size + tree_mib:.1f}, {over}")  # fmt: skip
        fail(f"the bundle {named or bundle} is {size:.1f} MiB, {over} (MiB: {parts})")
    return size


def travelling_tree_mib(out: Path, repo: Optional[Path] = None) -> float:
    """The size in MiB of the working tree of checkout ``repo`` (default: this one) that a
    device call sends beside a bundle at ``out`` (the files git tracks or does not ignore: the
    64 MiB the device tool takes hold both), 0 where ``out`` lies outside the checkout (or it is
    no git checkout): no call carries it. The converged campaign's collect reports it too."""
    repo = (repo or REPO).resolve()
    if repo not in out.resolve().parents:
        return 0.0
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=repo, capture_output=True,
    )  # fmt: skip
    if listed.returncode != 0:
        return 0.0
    bundle = out.resolve()
    own = (bundle, bundle.with_name(bundle.name + ".partial"))  # counted as the bundle, if listed
    paths = (repo / os.fsdecode(name) for name in listed.stdout.split(b"\0") if name)
    return sum(
        path.stat().st_size for path in paths
        if path.is_file() and not any(path.resolve().is_relative_to(folder) for folder in own)
    ) / MIB  # fmt: skip


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def git_commit() -> str:
    result = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return result.stdout.strip() if result.returncode == 0 else "unknown"


def is_bundle(folder: Path) -> bool:
    """Whether ``folder`` holds a bundle that ``build`` wrote (its manifest and activate.sh), which
    a new build may replace; any other folder is kept."""
    try:
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (
        isinstance(manifest, dict)
        and "fairseq_san_commit" in manifest
        and (folder / "activate.sh").is_file()
    )


# What a build writes into a bundle, and what sourcing its activate.sh adds there (its default
# prefix, BUNDLE/prefix, which install.py writes as prefix.partial first): a rebuild replaces a
# folder that holds only these.
BUNDLE_ENTRIES = {
    "wheels", "examples", "data-bin", "heldout", "activate.sh", "install.py", "manifest.json",
    "prefix", "prefix.partial",
}  # fmt: skip


def check_replaceable(out: Path) -> None:
    """Stop before anything is built where a build would delete what it did not write: a folder
    that holds no bundle, or a bundle that holds more (a run dir made inside it)."""
    if not out.exists() or not any(out.iterdir()):
        return
    if not is_bundle(out):
        fail(f"--out {out} holds files that are not a bundle: choose another --out")
    others = sorted(entry.name for entry in out.iterdir() if entry.name not in BUNDLE_ENTRIES)
    if others:
        fail(f"--out {out} holds {', '.join(others)}, which no build writes: move it out of the "
             "bundle, or choose another --out")


def check_partial_replaceable(partial: Path) -> None:
    """Stop where ``--out``.partial, the folder a build writes first and deletes, holds anything
    a build does not write (a folder of the user's own: ``mine.partial`` beside ``--out mine``)."""
    if not (partial.exists() or partial.is_symlink()):
        return
    if partial.is_symlink() or not partial.is_dir():
        fail(f"{partial} is not a folder, and a build writes its bundle there first: move it")
    others = sorted(entry.name for entry in partial.iterdir() if entry.name not in BUNDLE_ENTRIES)
    if others:
        fail(f"{partial} holds {', '.join(others)}, which no build writes, and a build writes its "
             "bundle there first: move it, or choose another --out")


def build(args: argparse.Namespace) -> Path:
    """The bundle in ``--out``, built in ``--out``.partial and renamed when whole and within
    ``--max-mib``: a build that fails, is stopped or is too large leaves the bundle before it as
    it was (it was deleted first, and a rerun refused what was left)."""
    out: Path = args.out
    check_replaceable(out)
    partial = out.with_name(out.name + ".partial")
    check_partial_replaceable(partial)
    shutil.rmtree(partial, ignore_errors=True)
    try:  # a folder it may not write in: an OSError traceback from fill's first mkdir
        partial.mkdir(parents=True)
    except OSError as error:
        fail(f"--out {out}: cannot write {partial} ({error.strerror}): choose another --out")
    try:
        fill(partial, args)
        check_size(partial, args.max_mib, named=out, tree_mib=travelling_tree_mib(out))
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    if out.exists():
        shutil.rmtree(out)
    partial.rename(out)
    return out


def fill(bundle: Path, args: argparse.Namespace) -> None:
    """Write the bundle into ``bundle``: wheels of the plugin and what it needs beyond the GPU
    machine's own packages, fairseq as sources to compile there, the recipes, data, held-out
    sources, activate.sh, install.py and the manifest (each wheel's sha256: install.py installs
    again where a wheel changed)."""
    wheels = bundle / "wheels"
    wheels.mkdir()  # in the bundle folder build() made
    plugin = plugin_wheel(wheels)
    requirements = wheel_requirements(plugin) + (["pytest"] if args.tests else [])
    shipped = dependencies(requirements, args.python_version, skip=(*MACHINE_PROVIDES, *LEFT_OUT))
    for dist in shipped:
        name = canonicalize_name(dist.metadata["Name"])
        if name == FAIRSEQ:
            sdist = fairseq_sdist(dist.version, args.fairseq_sdist, args.cache)
            fairseq_wheel(dist, extension_sources(sdist, dist.version), wheels)
        elif repackable(dist, args.python_version, args.platform):
            repack(dist, wheels)
        else:
            download(name, dist.version, wheels, args.python_version, args.platform)
        print(f"  {name} {dist.version}")

    shutil.copytree(REPO / "examples", bundle / "examples", ignore=NO_CACHE)
    for data in args.data:
        copy_data(data, bundle / "data-bin" / data.resolve().name)
    heldout = copy_heldout(args.heldout, bundle / "heldout") if args.heldout else []
    for name in ("activate.sh", "install.py"):
        shutil.copy2(TARGET_SIDE / name, bundle / name)
    manifest = {
        "python": args.python_version,
        "platform": args.platform,
        "fairseq_san_commit": git_commit(),
        "machine_provides": list(MACHINE_PROVIDES),
        "left_out": LEFT_OUT,
        "fairseq_left_out": list(FAIRSEQ_LEFT_OUT),
        "distributions": {canonicalize_name(d.metadata["Name"]): d.version for d in shipped},
        "extensions": compiled_sources(),
        "wheels": {wheel.name: sha256(wheel) for wheel in sorted(wheels.glob("*.whl"))},
        "heldout": heldout,
        "tests": args.tests,
    }
    (bundle / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


def check_out(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """argparse errors for an --out that a build cannot replace safely: a file, a folder below a
    file, one that holds the current folder or the repository, one that holds --data or
    --heldout (deleted before they were copied), or one inside them (the copy copied itself until
    the path was too long)."""
    if args.out.is_symlink():  # a build renames its new bundle onto --out: the link's name
        parser.error(f"--out {args.out} is a symbolic link (to {os.readlink(args.out)}): name "
                     "the folder itself")  # fmt: skip
    out = args.out.resolve()
    if out.exists() and not out.is_dir():
        parser.error(f"--out {args.out} is a file: name a folder for the bundle")
    if out == Path(out.anchor):  # it has no folder above (a StopIteration below)
        parser.error(f"--out {args.out} is the file system's root: name a folder for the bundle")
    above = next(folder for folder in out.parents if folder.exists())
    if not above.is_dir():
        parser.error(f"--out {args.out}: {above} is a file")
    for folder in (Path.cwd(), REPO):
        if folder == out or out in folder.parents:
            parser.error(
                f"--out {args.out} holds {folder}: name a folder of its own for the bundle"
            )
    inputs = [("--data", data) for data in args.data] + [("--heldout", args.heldout)]
    for option, path in inputs:
        if path is not None and (path.resolve() == out or out in path.resolve().parents):
            parser.error(f"{option} {path} lies in --out {args.out}, which a build replaces: "
                         "copy it elsewhere first")
        if path is not None and path.resolve() in out.parents:  # copied into itself, endlessly
            parser.error(f"--out {args.out} lies in {option} {path}, which the build copies into "
                         "the bundle: name a folder outside it")


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=__doc__.split("\n\n")[0],
        epilog="On the GPU machine: source BUNDLE/activate.sh (docs/offline-bundle.md).",
    )
    parser.add_argument("--out", type=Path, default=Path("build/offline-bundle"),
                        help="bundle folder, replaced if it holds a bundle (%(default)s)")
    parser.add_argument("--python-version", default="3.12",
                        help="the GPU machine's Python, MAJOR.MINOR (%(default)s)")
    parser.add_argument("--platform", default="manylinux_2_28_x86_64",
                        help="the GPU machine's pip platform tag, compiled wheels (%(default)s)")
    parser.add_argument("--data", type=Path, action="append", default=[],
                        help="binarized data directory to copy into BUNDLE/data-bin/ (repeatable)")
    parser.add_argument("--heldout", type=Path,
                        help="a folder of held-out sources (*.en) to copy into BUNDLE/heldout/")
    parser.add_argument("--fairseq-sdist", type=Path,
                        help="the fairseq-fixed sdist (.tar.gz) of the installed version (default: "
                        "downloaded once with pip into --cache)")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "fairseq-san",
                        help="where the downloaded sdist is kept (%(default)s)")
    parser.add_argument("--max-mib", type=float, default=64,
                        help="fail when the bundle (data included) is larger, with the working "
                        "tree that travels with it where --out lies inside this checkout "
                        "(%(default)s MiB)")
    parser.add_argument("--archive", action="store_true", help="also write BUNDLE.tar.gz")
    parser.add_argument("--tests", action="store_true",
                        help="also ship pytest, to run the project's CUDA tests on the GPU "
                        "machine (tests/ travels with the working tree)")
    args = parser.parse_args(argv)
    # ASCII: "３.１２".isdigit(); no leading zero: "3.012", written in the manifest, was refused
    # by install.py on Python 3.12 after the build
    if not re.fullmatch(r"[1-9][0-9]*\.(0|[1-9][0-9]*)", args.python_version):
        parser.error(f"--python-version {args.python_version}: expected MAJOR.MINOR, e.g. 3.12")
    if tuple(map(int, args.python_version.split("."))) < (3, 11):  # setup.py's requirement
        parser.error(f"--python-version {args.python_version}: the bundle ships fairseq-fixed, "
                     "which the project installs on Python 3.11 or newer (PyPI's fairseq below)")
    if args.fairseq_sdist is not None and not args.fairseq_sdist.is_file():
        parser.error(f"--fairseq-sdist {args.fairseq_sdist}: no such file")
    if args.cache.exists() and not args.cache.is_dir():  # its mkdir's traceback, mid-build
        parser.error(f"--cache {args.cache} is a file: name a folder for the downloaded sdist")
    if args.heldout is not None and not heldout_sources(args.heldout):
        parser.error(f"--heldout {args.heldout}: no held-out sources (*.en) there")
    for data in args.data:
        if not data.is_dir():
            parser.error(f"--data {data}: no such folder")
        if not (any(data.glob("dict.*.txt")) or (data / "dict.txt").is_file()):  # LM: dict.txt
            parser.error(f"--data {data}: not a binarized data directory (no dict.*.txt or "
                         "dict.txt)")  # fmt: skip
    names = [data.resolve().name for data in args.data]
    twice = next((name for name in names if names.count(name) > 1), None)
    if twice is not None:  # each is copied to BUNDLE/data-bin/NAME
        parser.error(
            f"--data: two data directories named {twice}: give each once, each its own name"
        )
    if not (math.isfinite(args.max_mib) and args.max_mib > 0):
        parser.error(f"--max-mib {args.max_mib:g}: must be a positive number")
    check_out(parser, args)
    return args


def main(argv: Optional[List[str]] = None) -> None:
    args = parse_args(argv)
    print(f"build_offline_bundle.py: wheels for Python {args.python_version}:")
    bundle = build(args)
    print(f"build_offline_bundle.py: {bundle} is {size_mib(bundle):.1f} MiB")
    if args.archive:
        archive = write_archive(bundle)
        print(f"build_offline_bundle.py: {archive} is {archive.stat().st_size / MIB:.1f} MiB")
    else:
        remove_earlier_archive(bundle)


def archive_of(bundle: Path) -> Path:
    """BUNDLE.tar.gz, beside the bundle, which --archive writes."""
    return bundle.with_name(bundle.name + ".tar.gz")


def remove_earlier_archive(bundle: Path) -> None:
    """Remove BUNDLE.tar.gz, which an earlier build with --archive wrote: it holds the bundle this
    build replaced, and would pass for this one."""
    archive = archive_of(bundle)
    if archive.is_file():
        archive.unlink()
        print(f"build_offline_bundle.py: removed {archive}, the archive of the bundle this build "
              "replaced (--archive writes this one's)")  # fmt: skip


def write_archive(bundle: Path) -> Path:
    """BUNDLE.tar.gz, written whole or not at all; where it fails, the archive of an earlier
    bundle is removed (it would pass for this one)."""
    archive = archive_of(bundle)
    partial = archive.with_name(archive.name + ".partial")
    try:
        with tarfile.open(partial, "w:gz") as tar:
            tar.add(bundle, arcname=bundle.name)
        partial.replace(archive)
    except BaseException:
        partial.unlink(missing_ok=True)
        archive.unlink(missing_ok=True)
        raise
    return archive


if __name__ == "__main__":
    main()
