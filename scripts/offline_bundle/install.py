"""Install an offline fairseq-san bundle into a prefix, without network (run by activate.sh).

The bundle, made by scripts/build_offline_bundle.py on a connected machine, holds wheels and
fairseq's extension sources. This installs the wheels with pip (no index, no dependency
resolution: the bundle is the complete set), compiles the extensions in the prefix with the
machine's C++ compiler, writes PREFIX/bin/python (the recipes call ``python``), and checks that
everything imports. The wheels are checked against the manifest's sha256 first. A prefix that
already holds this bundle, installed with this Python, is left as it is; another bundle (a wheel
of other bytes) or another Python installs it again.

    python3 install.py PREFIX
"""

import argparse
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Dict, List

BUNDLE = Path(__file__).resolve().parent
STAMP = "bundle-manifest.json"  # in the prefix: the manifest of the bundle installed there
PROG = "install.py"  # its errors, argparse's too, start with "PROG: error:"


def fail(message: str) -> None:
    sys.exit(f"{PROG}: error: {message}")


MANIFEST_KEYS = ("python", "machine_provides", "extensions", "wheels")  # what this reads of it


def read_manifest() -> dict:
    """The bundle's manifest, or one error line where it is missing or cut short (a copy to the
    GPU machine that stopped early): json's traceback before."""
    path = BUNDLE / "manifest.json"
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else error
        fail(f"{path} is missing or cut short ({reason}): copy the bundle again")
    if not (isinstance(manifest, dict) and all(key in manifest for key in MANIFEST_KEYS)):
        fail(f"{path} is no bundle's manifest (it lacks {', '.join(MANIFEST_KEYS)}): copy the "
             "bundle again, or rebuild it")
    return manifest


def check_machine(manifest: dict) -> None:
    """The machine has what the bundle expects of it: its Python version, torch and numpy, the
    headers and setuptools that compiling the extensions needs."""
    have = f"{sys.version_info.major}.{sys.version_info.minor}"
    if manifest["python"] != have:
        fail(
            f"this bundle is for Python {manifest['python']} and {sys.executable} is {have}: "
            f"set PYTHON to a Python {manifest['python']} that has torch, or rebuild the bundle "
            f"with --python-version {have}"
        )
    for module in (*manifest["machine_provides"], "setuptools", "pip"):
        if importlib.util.find_spec(module) is None:
            fail(f"{sys.executable} has no {module}: the bundle uses the machine's own {module}")
    if not Path(sysconfig.get_paths()["include"], "Python.h").exists():
        fail(f"no Python.h for {sys.executable}: install Python's headers (python3-dev)")


def check_wheels(manifest: dict) -> None:
    """The bundle's wheels are those its manifest lists, byte for byte: a copy cut short on the
    way to the machine, or a wheel added or lost, is named before pip sees it."""
    shipped = {wheel.name: wheel for wheel in (BUNDLE / "wheels").glob("*.whl")}
    listed = manifest["wheels"]
    for name in sorted(listed.keys() - shipped.keys()):
        fail(f"{BUNDLE / 'wheels'} lacks {name}, which the manifest lists: copy the bundle again")
    for name in sorted(shipped.keys() - listed.keys()):
        fail(f"{shipped[name]} is not in the bundle's manifest: remove it, or rebuild the bundle")
    for name in sorted(listed):
        if hashlib.sha256(shipped[name].read_bytes()).hexdigest() != listed[name]:
            fail(f"{shipped[name]} is not the wheel the bundle was built with (its sha256 "
                 "differs from the manifest's): copy the bundle again")  # fmt: skip


def install_wheels(prefix: Path) -> None:
    wheels = sorted(str(wheel) for wheel in (BUNDLE / "wheels").glob("*.whl"))
    run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
         "--disable-pip-version-check", "--target", str(prefix), *wheels],
        "pip install",
    )  # fmt: skip


def build_extensions(extensions: Dict[str, List[str]]) -> None:
    """Compile ``extensions`` (module -> C++ sources) in place, in the current directory, with
    fairseq's own flags."""
    import numpy
    from setuptools import Extension, setup

    modules = [
        Extension(module, sources, language="c++", include_dirs=[numpy.get_include()],
                  extra_compile_args=["-std=c++11", "-O3"])
        for module, sources in extensions.items()
    ]  # fmt: skip
    with tempfile.TemporaryDirectory() as build:
        setup(
            script_args=["--quiet", "build_ext", "--inplace", "--build-temp", f"{build}/temp",
                         "--build-lib", f"{build}/lib", "--parallel", str(os.cpu_count() or 1)],
            ext_modules=modules,
        )  # fmt: skip


def run(command: List[str], what: str, **kwargs) -> None:
    """Run a command; on failure, show the end of its output and stop with one error line."""
    result = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        sys.stderr.write((result.stdout + result.stderr)[-4000:])
        fail(f"{what} failed (exit {result.returncode}); its output is above")


def write_python(prefix: Path) -> None:
    """PREFIX/bin/python: this Python, the one with torch, under the name the recipes call."""
    python = prefix / "bin" / "python"
    python.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    python.chmod(0o755)


def check_imports(prefix: Path, manifest: dict) -> None:
    """Import the compiled extensions, the plugin's models and the module of every console
    command: a module that the machine lacks fails now, not in the middle of a run."""
    commands = {
        entry.module
        for dist in importlib.metadata.distributions(path=[str(prefix)])
        for entry in dist.entry_points
        if entry.group == "console_scripts"
    }
    modules = [*manifest["extensions"], "fairseq_san.models", *sorted(commands)]
    code = "import importlib, sys\nfor module in sys.argv[1:]: importlib.import_module(module)"
    environment = dict(os.environ, PYTHONPATH=str(prefix))
    run([sys.executable, "-c", code, *modules], "importing the installed bundle", env=environment)


def install(prefix: Path, manifest: dict) -> None:
    """Install into PREFIX.partial, then rename: a stopped install leaves no half prefix."""
    partial = prefix.with_name(prefix.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    install_wheels(partial)
    extensions = json.dumps(manifest["extensions"])
    command = [sys.executable, str(Path(__file__).resolve()), "--build-extensions", extensions]
    run(command, "compiling fairseq's extensions", cwd=partial)
    write_python(partial)
    check_imports(partial, manifest)
    (partial / STAMP).write_text(json.dumps(stamped(manifest), indent=1) + "\n")
    if prefix.exists():
        shutil.rmtree(prefix)
    partial.rename(prefix)


def stamped(manifest: dict) -> dict:
    """What a prefix records of its install: the bundle's manifest and the Python it ran."""
    return {**manifest, "installed_with": sys.executable}


def installed(prefix: Path, manifest: dict) -> bool:
    """Whether ``prefix`` holds this bundle installed with this Python; a prefix of another
    kind (a file, a folder of something else) is refused in one line."""
    stamp = prefix / STAMP
    if prefix.exists() and not prefix.is_dir():
        fail(f"{prefix} is a file: set FAIRSEQ_SAN_PREFIX to a folder")
    if prefix.exists() and any(prefix.iterdir()) and not stamp.is_file():
        fail(f"{prefix} exists and holds no bundle: set FAIRSEQ_SAN_PREFIX to a new folder")
    try:
        return json.loads(stamp.read_text()) == stamped(manifest)
    except (OSError, ValueError):  # none yet, or one cut short: install (again)
        return False


def main() -> None:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("prefix", nargs="?", type=Path)
    parser.add_argument("--build-extensions", metavar="JSON", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.build_extensions:
        build_extensions(json.loads(args.build_extensions))
        return
    if args.prefix is None:
        parser.error("PREFIX is required")
    prefix = args.prefix.resolve()
    if ":" in str(prefix):  # activate.sh puts it on PATH and PYTHONPATH, split at each ':'
        fail(f"{prefix} holds ':', which PATH and PYTHONPATH read between two folders: set "
             "FAIRSEQ_SAN_PREFIX to a path without one")
    manifest = read_manifest()
    if installed(prefix, manifest):
        return
    check_wheels(manifest)
    check_machine(manifest)
    print(f"install.py: installing the bundle into {prefix} (once)", file=sys.stderr)
    install(prefix, manifest)


if __name__ == "__main__":
    main()
