"""The offline bundle for GPU machines without a package registry (scripts/build_offline_bundle.py).

The end-to-end test builds the bundle for this Python, with the synthetic corpus in it, and sources
its activate.sh in a fresh virtual environment that has only torch and numpy (and pip and
setuptools), as the GPU machine has, with pip barred from any index. There fairseq-train trains
with the plugin from the bundle, and the plugin's commands run.
"""

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict

import pytest

from helpers import REPO, load_builder, train_argv

PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


def machine_with_its_own_packages(root: Path) -> Dict[str, str]:
    """A fresh virtual environment (no system site-packages) that sees, of this one, only what a
    GPU machine provides (the builder's MACHINE_PROVIDES: torch, numpy, matplotlib), pip and
    setuptools, with their requirements; the environment variables that make it the ``python3``
    on PATH and keep pip off every index and configuration."""
    site = root / "machine-site"
    site.mkdir()
    builder = load_builder()
    for dist in builder.dependencies([*builder.MACHINE_PROVIDES, "pip", "setuptools"], PYTHON):
        tops = {Path(str(file)).parts[0] for file in dist.files if not str(file).startswith("..")}
        for top in tops:
            source = Path(dist.locate_file(top))
            if source.exists() and not (site / top).exists():
                (site / top).symlink_to(source)
    base_python = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base_python, "-m", "venv", "--without-pip", str(root / "machine")], check=True)
    purelib = next((root / "machine" / "lib").glob("python3*/site-packages"))
    (purelib / "machine-site.pth").write_text(f"{site}\n")
    dropped = ("PIP_", "PYTHON", "VIRTUAL_ENV")
    environment = {key: value for key, value in os.environ.items() if not key.startswith(dropped)}
    environment.update(
        PATH=f"{root / 'machine' / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin",
        PIP_NO_INDEX="1",
        PIP_CONFIG_FILE=os.devnull,
        OMP_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
    )
    return environment


@pytest.mark.slow
def test_bundle_installs_offline_and_trains(binarized_corpus, tmp_path):
    built = subprocess.run(
        [sys.executable, "scripts/build_offline_bundle.py", "--out", str(tmp_path / "bundle"),
         "--python-version", PYTHON, "--data", str(binarized_corpus), "--tests"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-3000:]
    bundle = tmp_path / "bundle"
    prefix = bundle / "prefix"
    data = bundle / "data-bin" / binarized_corpus.name
    # Run where no fairseq_san folder is: --user-dir fairseq_san is then the installed plugin.
    work = tmp_path / "work"
    work.mkdir()
    train = shlex.join(["fairseq-train", *train_argv(data, work / "checkpoints", max_update=2)])
    script = f"""
        set -e
        source {bundle}/activate.sh
        source {bundle}/activate.sh
        command -v fairseq-train python
        python -c 'import fairseq as f, fairseq_san as s; print(f.__file__); print(s.__file__)'
        {train}
        fairseq-san-policy --help
        python -m pytest --version
    """
    environment = machine_with_its_own_packages(tmp_path)
    result = subprocess.run(
        ["bash", "-c", script], cwd=work, env=environment, capture_output=True, text=True,
        timeout=400,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-5000:]
    # installed once: the second activation finds the prefix ready
    assert output.count("installing the bundle into") == 1, output[-3000:]
    lines = result.stdout.splitlines()
    assert lines[:4] == [
        f"{prefix}/bin/fairseq-train",
        f"{prefix}/bin/python",
        f"{prefix}/fairseq/__init__.py",
        f"{prefix}/fairseq_san/__init__.py",
    ], output[-3000:]
    # fairseq's extensions were compiled on the "machine": its wheel carries none
    compiled = sorted(str(path.relative_to(prefix)).split(".")[0] for path in prefix.rglob("*.so"))
    assert [name for name in compiled if name.startswith("fairseq")] == [
        "fairseq/data/data_utils_fast", "fairseq/data/token_block_utils_fast", "fairseq/libbleu"
    ]  # fmt: skip
    assert not (prefix / "build").exists()
    assert "num_updates 2" in output or "num_updates': 2" in output, output[-3000:]
    assert (work / "checkpoints" / "checkpoint_last.pt").exists()
    assert "usage: fairseq-san-policy" in result.stdout
    assert result.stdout.splitlines()[-1].startswith("pytest ")  # --tests: CUDA tests can run


def test_bundle_for_another_python_stops_with_one_line(tmp_path):
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    shutil.copy2(REPO / "scripts" / "offline_bundle" / "install.py", bundle / "install.py")
    manifest = {"python": "3.1", "machine_provides": ["torch", "numpy"], "extensions": {}}
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    result = subprocess.run(
        [sys.executable, str(bundle / "install.py"), str(tmp_path / "prefix")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"install.py: error: this bundle is for Python 3.1 and {sys.executable} is {PYTHON}: "
        f"set PYTHON to a Python 3.1 that has torch, or rebuild the bundle with --python-version "
        f"{PYTHON}"
    ]
    assert not (tmp_path / "prefix").exists()


@pytest.mark.parametrize(
    "argv, said",
    [
        (["--out", "{tmp}/file"], "--out {tmp}/file is a file: name a folder for the bundle"),
        (["--out", "{tmp}/notes"], "--out {tmp}/notes holds files that are not a bundle"),
        (["--out", "{tmp}/manifest-only"], "--out {tmp}/manifest-only holds files that are not a"),
        (["--data", "{tmp}/a/data", "--data", "{tmp}/b/data"],
         "--data: two data directories named data: give each once"),
        (["--max-mib", "nan"], "--max-mib nan: must be a positive number"),
        (["--max-mib", "-5"], "--max-mib -5: must be a positive number"),
    ],
    ids=["out a file", "out a folder", "out a folder with a manifest", "data twice",
         "max-mib nan", "max-mib negative"],
)  # fmt: skip
def test_bundle_options_that_would_lose_files_or_limits_are_refused(tmp_path, capsys, argv, said):
    """A folder holding any manifest.json was deleted as a bundle; --out a file, two data folders
    of one name failed with tracebacks (the second after the whole build); --max-mib nan lifted
    the limit."""
    (tmp_path / "file").write_text("")
    for folder in ("notes", "manifest-only"):
        (tmp_path / folder).mkdir()
    (tmp_path / "notes" / "notes.txt").write_text("mine")
    (tmp_path / "manifest-only" / "manifest.json").write_text("{}")
    for side in ("a", "b"):
        (tmp_path / side / "data").mkdir(parents=True)
        (tmp_path / side / "data" / "dict.en.txt").write_text("a 1\n")
    argv = [arg.format(tmp=tmp_path) for arg in argv]
    builder = load_builder()
    with pytest.raises(SystemExit) as error:
        builder.build(builder.parse_args(argv))  # refused before anything is built or removed
    assert said.format(tmp=tmp_path) in capsys.readouterr().err + str(error.value)
    assert (tmp_path / "notes" / "notes.txt").exists()
    assert not (tmp_path / "manifest-only" / "wheels").exists()


@pytest.mark.parametrize(
    "wheel, python, platform, repacked",
    [("Root-Is-Purelib: true", "3.1", "macosx_11_0_arm64", True),  # pure: anywhere
     ("Root-Is-Purelib: false", PYTHON, "manylinux_2_28_x86_64", True),  # compiled for here
     ("Root-Is-Purelib: false", PYTHON, "manylinux_2_28_aarch64", False),  # this Python, not here
     ("Root-Is-Purelib: false", "3.1", "manylinux_2_28_x86_64", False)],  # another Python
)  # fmt: skip
def test_a_compiled_package_is_repacked_only_for_this_python_and_platform(
    wheel, python, platform, repacked
):
    """--platform was ignored for this machine's Python: its x86-64 binaries were repacked into
    a bundle for another platform, which failed only on the GPU machine."""
    from types import SimpleNamespace

    if platform == "manylinux_2_28_x86_64" and os.uname().machine != "x86_64":
        pytest.skip("an x86-64 platform of this machine's")
    builder = load_builder()
    dist = SimpleNamespace(read_text=lambda name: wheel)
    assert builder.repackable(dist, python, platform) == repacked


def test_bundle_over_the_size_limit_is_an_error(tmp_path, capsys):
    builder = load_builder()
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "big.whl").write_bytes(b"\0" * (3 << 20))
    assert builder.check_size(tmp_path, max_mib=4) == pytest.approx(3.0)
    with pytest.raises(SystemExit) as error:
        builder.check_size(tmp_path, max_mib=2)
    assert str(error.value) == (
        f"build_offline_bundle.py: error: the bundle {tmp_path} is 3.0 MiB, over --max-mib 2 (MiB: wheels 3.0)"
    )
