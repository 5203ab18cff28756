"""What the package's source distribution holds (setup.py, MANIFEST.in)."""

import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from helpers import REPO

NO_CACHE = shutil.ignore_patterns("__pycache__")


def test_the_sdist_holds_the_package_and_no_tests_cut_from_their_helpers(tmp_path):
    """setuptools puts tests/test_*.py in an sdist by default, without helpers.py and conftest.py
    that they import: the tests run from a clone, none travel in the sdist."""
    source = tmp_path / "fairseq-san"
    source.mkdir()
    for name in ("setup.py", "README.md", "MANIFEST.in"):
        shutil.copy2(REPO / name, source / name)
    for folder in ("fairseq_san", "tests"):
        shutil.copytree(REPO / folder, source / folder, ignore=NO_CACHE)
    built = subprocess.run(
        [sys.executable, "setup.py", "-q", "sdist", "--dist-dir", str(tmp_path / "dist")],
        cwd=source, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    with tarfile.open(next((tmp_path / "dist").glob("fairseq_san-*.tar.gz"))) as sdist:
        names = {Path(*Path(name).parts[1:]).as_posix() for name in sdist.getnames()}
    assert not [name for name in names if name.startswith("tests")]
    modules = {path.relative_to(source).as_posix() for path in source.glob("fairseq_san/**/*.py")}
    assert modules <= names
    assert {"setup.py", "README.md", "MANIFEST.in"} <= names
