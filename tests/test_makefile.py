"""``make setup``'s torch choice (TORCH=cpu|cuda|none), read from ``make -n`` (nothing runs)."""

import os
import re
import subprocess
from pathlib import Path
from typing import List

import pytest

REPO = Path(__file__).resolve().parents[1]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def setup_commands(tmp_path: Path, *variables: str) -> subprocess.CompletedProcess:
    """The commands ``make setup`` would run for a venv in ``tmp_path`` (-B: even if built)."""
    # a make of its own, not a sub-make of `make test` (which would print "Entering directory")
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    return subprocess.run(
        ["make", "-n", "-B", "setup", f"VENV={tmp_path / 'venv'}", *variables],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def torch_installs(commands: str) -> List[str]:
    """The pip commands that name torch as a requirement."""
    return [line for line in commands.splitlines() if re.search(r"pip install .*\btorch\b", line)]


def test_default_installs_the_cpu_build_from_the_cpu_index(tmp_path):
    result = setup_commands(tmp_path)
    assert result.returncode == 0, result.stderr
    (install,) = torch_installs(result.stdout)
    assert "torch==2.13.0+cpu" in install.split()
    assert CPU_INDEX in install.split()
    assert "--system-site-packages" not in result.stdout


def test_cuda_installs_pypi_torch(tmp_path):
    result = setup_commands(tmp_path, "TORCH=cuda")
    assert result.returncode == 0, result.stderr
    (install,) = torch_installs(result.stdout)
    assert "torch==2.13.0" in install.split()
    assert "+cpu" not in install and CPU_INDEX not in install


def test_none_installs_no_torch_and_sees_the_system_one(tmp_path):
    result = setup_commands(tmp_path, "TORCH=none")
    assert result.returncode == 0, result.stderr
    assert torch_installs(result.stdout) == []
    venv = next(line for line in result.stdout.splitlines() if " -m venv " in line)
    assert "--system-site-packages" in venv.split()
    assert "import torch" in result.stdout  # checked before anything is installed


@pytest.mark.parametrize("value", ["gpu", ""])
def test_unknown_choice_is_one_clear_error(tmp_path, value):
    result = setup_commands(tmp_path, f"TORCH={value}")
    assert result.returncode != 0
    assert "TORCH must be cpu, cuda or none" in result.stderr
    assert result.stdout == ""


def test_demo_passes_a_multi30k_folder_with_spaces_as_one_word(tmp_path):
    """``make demo MULTI30K_DIR="/data/my corpora"`` ran ``corpora`` as the command: the recipe's
    environment is quoted."""
    import shlex

    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    result = subprocess.run(
        ["make", "-n", "demo", f"VENV={tmp_path / 'venv'}", "MULTI30K_DIR=/data/my corpora"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    words = shlex.split(result.stdout.strip().splitlines()[-1])
    assert "MULTI30K_DIR=/data/my corpora" in words and words[-2:] == ["bash", "examples/demo.sh"]


def test_another_torch_for_a_made_venv_is_refused(tmp_path):
    """``make setup TORCH=cuda`` on a venv made with the CPU build said "Nothing to be done", and
    with its stamp stale pip kept torch 2.13.0+cpu as torch==2.13.0: the CPU build stayed."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("#!/bin/sh\nexit 1\n")  # nothing may run it
    (venv / "bin" / "python").chmod(0o755)
    (venv / ".torch").write_text("cpu\n")
    (venv / ".installed-cpu").touch()
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    result = subprocess.run(
        ["make", "setup", f"VENV={venv}", "TORCH=cuda"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.splitlines()[0] == (
        f"make setup TORCH=cuda: {venv} was made with TORCH=cpu; make clean-venv first"
    )
    assert sorted(path.name for path in venv.iterdir()) == [".installed-cpu", ".torch", "bin"]


@pytest.mark.parametrize("system_packages, torch_build", [(False, "cuda"), (True, "none")])
def test_a_venv_made_before_the_record_keeps_its_torch(tmp_path, system_packages, torch_build):
    """A venv made with TORCH=cuda (or none) before .torch recorded the choice: make setup,
    TORCH=cpu by default, would have installed the CPU build over its torch."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("#!/bin/sh\nexit 0\n")  # torch, not a +cpu build
    (venv / "bin" / "python").chmod(0o755)
    (venv / "pyvenv.cfg").write_text(
        f"include-system-site-packages = {str(system_packages).lower()}\n"
    )
    (venv / ".installed").touch()  # the stamp before the choice was recorded
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    result = subprocess.run(["make", "setup", f"VENV={venv}"], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.splitlines()[0] == (
        f"make setup TORCH=cpu: {venv} was made with TORCH={torch_build}; make clean-venv first"
    )
    assert (venv / ".torch").read_text() == f"{torch_build}\n"


def setup_requirements() -> List[str]:
    """setup.py's install_requires and extras, read from its source (nothing run)."""
    import ast

    call = next(
        node for node in ast.walk(ast.parse((REPO / "setup.py").read_text(encoding="utf-8")))
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setup"
    )
    given = {keyword.arg: ast.literal_eval(keyword.value) for keyword in call.keywords
             if keyword.arg in ("install_requires", "extras_require")}  # fmt: skip
    extras = [item for items in given["extras_require"].values() for item in items]
    return given["install_requires"] + extras


def test_setup_installs_every_requirement_setup_py_names(tmp_path):
    """``make setup`` installs the plugin with --no-deps after listing its requirements itself:
    one added to setup.py alone would be missing from every venv it makes (Python >= 3.11)."""
    from packaging.requirements import Requirement

    result = setup_commands(tmp_path)
    assert result.returncode == 0, result.stderr
    commands = result.stdout.replace("\\\n", " ").splitlines()  # a continued line as one
    installed = " ".join(line for line in commands if "pip install" in line)
    for text in setup_requirements():
        requirement = Requirement(text)
        if requirement.marker is None or requirement.marker.evaluate({"python_version": "3.11"}):
            assert re.search(rf"(^|[\s'\"]){re.escape(requirement.name)}\b", installed), text
