"""The offline bundle for GPU machines without a package registry (scripts/build_offline_bundle.py).

The end-to-end test builds the bundle for this Python, with the synthetic corpus in it, and sources
its activate.sh in a fresh virtual environment that has only torch and numpy (and pip and
setuptools), as the GPU machine has, with pip barred from any index. There fairseq-train trains
with the plugin from the bundle, and the plugin's commands run.
"""

import gzip
import hashlib
import io
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Dict

import pytest

from helpers import REPO, load_builder, load_script, train_argv

PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


def machine_with_its_own_packages(root: Path) -> Dict[str, str]:
    """A fresh virtual environment (no system site-packages) that sees, of this one, only what a
    GPU machine provides (the builder's MACHINE_PROVIDES: torch, numpy, matplotlib, lxml), pip
    and setuptools, with their requirements; the environment variables that make it the ``python3``
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


def run_install(bundle: Path, python: str, wheels: Dict[str, str], prefix: Path):
    """install.py of ``bundle`` (its wheels/ as they are), with a manifest for ``python`` that
    lists ``wheels`` (name: sha256), run into ``prefix``."""
    bundle.mkdir(exist_ok=True)
    shutil.copy2(REPO / "scripts" / "offline_bundle" / "install.py", bundle / "install.py")
    manifest = {"python": python, "machine_provides": ["torch", "numpy"], "extensions": {},
                "wheels": wheels}  # fmt: skip
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    return subprocess.run([sys.executable, str(bundle / "install.py"), str(prefix)],
                          capture_output=True, text=True)  # fmt: skip


def test_bundle_for_another_python_stops_with_one_line(tmp_path):
    result = run_install(tmp_path / "bundle", "3.1", {}, tmp_path / "prefix")
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
        (["--out", "{tmp}/file/bundle"], "--out {tmp}/file/bundle: {tmp}/file is a file"),
        (["--out", "{tmp}"], "--out {tmp} holds {tmp}: name a folder of its own"),  # cwd
        (["--out", "{tmp}/a", "--data", "{tmp}/a/data"],
         "--data {tmp}/a/data lies in --out {tmp}/a, which a build replaces"),
        (["--out", "{tmp}/a", "--heldout", "{tmp}/a/heldout"],
         "--heldout {tmp}/a/heldout lies in --out {tmp}/a, which a build replaces"),
        # the copy copied itself until its path was too long: a traceback of 300 KB
        (["--out", "{tmp}/a/data/bundle", "--data", "{tmp}/a/data"],
         "--out {tmp}/a/data/bundle lies in --data {tmp}/a/data, which the build copies into the "
         "bundle: name a folder outside it"),
        # "fairseq is not installed here: run this with the project's Python", which it was
        (["--python-version", "3.10"], "--python-version 3.10: the bundle ships fairseq-fixed, "
         "which the project installs on Python 3.11 or newer (PyPI's fairseq below)"),
        (["--data", "{tmp}/a/heldout"], "--data {tmp}/a/heldout: not a binarized data directory "
         "(no dict.*.txt or dict.txt)"),
        # an OSError traceback after the whole build ("Cannot call rmtree on a symbolic link")
        (["--out", "{tmp}/link"], "--out {tmp}/link is a symbolic link (to {tmp}/notes): name "
         "the folder itself"),
        # deleted without a word
        (["--out", "{tmp}/mine"], "{tmp}/mine.partial holds notes.txt, which no build writes"),
        (["--out", "/"], "--out / is the file system's root: name a folder"),  # StopIteration
        # full-width digits passed isdigit(): a bundle without fairseq (3.12 < 3.11 as text)
        (["--python-version", "\uff13.\uff11\uff12"],
         "--python-version \uff13.\uff11\uff12: expected MAJOR.MINOR, e.g. 3.12"),
        # built, and its manifest's "3.012" refused by install.py on the Python 3.12 it was for
        (["--python-version", "3.012"], "--python-version 3.012: expected MAJOR.MINOR, e.g. 3.12"),
        (["--data", "{tmp}/nowhere"], "--data {tmp}/nowhere: no such folder"),
        # a FileExistsError traceback where the sdist was to be downloaded, mid-build
        (["--cache", "{tmp}/file"], "--cache {tmp}/file is a file: name a folder for the"),
        # the folder x.en was copied as a file: an IsADirectoryError traceback
        (["--heldout", "{tmp}/folders"], "--heldout {tmp}/folders: no held-out sources (*.en)"),
    ],
    ids=["out a file", "out a folder", "out a folder with a manifest", "data twice",
         "max-mib nan", "max-mib negative", "out below a file", "out the current folder",
         "data in out", "heldout in out", "out in data", "python below 3.11", "no dictionary",
         "out a link", "a partial folder of the user's", "out the root", "full-width digits",
         "python with a leading zero", "data missing", "cache a file", "heldout of folders"],
)  # fmt: skip
def test_bundle_options_that_would_lose_files_or_limits_are_refused(
    tmp_path, capsys, monkeypatch, argv, said
):
    """A folder holding any manifest.json was deleted as a bundle; --out a file, two data folders
    of one name failed with tracebacks (the second after the whole build); --max-mib nan lifted
    the limit; --data in --out was deleted before it was copied, --out . deleted the folder's
    files, then failed."""
    (tmp_path / "file").write_text("")
    for folder in ("notes", "manifest-only"):
        (tmp_path / folder).mkdir()
    (tmp_path / "notes" / "notes.txt").write_text("mine")
    (tmp_path / "manifest-only" / "manifest.json").write_text("{}")
    (tmp_path / "link").symlink_to(tmp_path / "notes")
    (tmp_path / "mine.partial").mkdir()
    (tmp_path / "mine.partial" / "notes.txt").write_text("mine")
    for side in ("a", "b"):
        (tmp_path / side / "data").mkdir(parents=True)
        (tmp_path / side / "data" / "dict.en.txt").write_text("a 1\n")
    (tmp_path / "a" / "heldout").mkdir()
    (tmp_path / "a" / "heldout" / "h.en").write_text("a sentence\n")
    (tmp_path / "folders" / "x.en").mkdir(parents=True)
    argv = [arg.format(tmp=tmp_path) for arg in argv]
    builder = load_builder()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as error:
        builder.build(builder.parse_args(argv))  # refused before anything is built or removed
    assert said.format(tmp=tmp_path) in capsys.readouterr().err + str(error.value)
    assert (tmp_path / "notes" / "notes.txt").exists()
    assert (tmp_path / "mine.partial" / "notes.txt").exists()
    assert not (tmp_path / "manifest-only" / "wheels").exists()


def test_a_language_models_data_is_a_data_directory(tmp_path, monkeypatch):
    """examples/lm/prepare.sh writes dict.txt alone: --data refused it (no dict.*.txt), so
    learn_to_share_lm.sh's data could not travel."""
    lm_data = tmp_path / "lm"
    lm_data.mkdir()
    (lm_data / "dict.txt").write_text("a 1\n")
    monkeypatch.chdir(tmp_path)
    args = load_builder().parse_args(["--out", str(tmp_path / "bundle"), "--data", str(lm_data)])
    assert args.data == [lm_data]


COMPILED = "Root-Is-Purelib: false\nTag: cp311-cp311-{}\n"


@pytest.mark.parametrize(
    "wheel, python, platform, repacked",
    [("Root-Is-Purelib: true", "3.1", "macosx_11_0_arm64", True),  # pure: anywhere
     (COMPILED.format("manylinux_2_17_x86_64"), PYTHON, "manylinux_2_28_x86_64", True),
     (COMPILED.format("manylinux2014_x86_64"), PYTHON, "manylinux_2_28_x86_64", True),
     (COMPILED.format("manylinux_2_31_x86_64"), PYTHON, "manylinux_2_28_x86_64", False),  # newer
     (COMPILED.format("linux_x86_64"), PYTHON, "manylinux_2_28_x86_64", False),  # built here
     (COMPILED.format("manylinux_2_17_x86_64"), PYTHON, "manylinux_2_28_aarch64", False),
     (COMPILED.format("manylinux_2_17_x86_64"), "3.1", "manylinux_2_28_x86_64", False)],
    ids=["pure", "older glibc", "manylinux2014", "newer glibc", "linux", "other architecture",
         "other Python"],
)  # fmt: skip
def test_a_compiled_package_is_repacked_only_where_its_wheel_runs_on_the_target(
    wheel, python, platform, repacked
):
    """--platform was ignored for this machine's Python: its x86-64 binaries were repacked into
    a bundle for another platform, which failed only on the GPU machine; and a wheel for a newer
    glibc than the target's was repacked where this machine ran it."""
    from types import SimpleNamespace

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


def test_the_size_limit_holds_the_working_tree_that_travels_with_the_bundle(
    tmp_path, monkeypatch
):
    """The 64 MiB a device call takes hold the working tree and the carried bundle: a bundle of
    27 MiB beside a tree of 38 passed the builder's check and could not be sent. The tree is what
    git tracks or does not ignore, the bundle itself left out (ignored or not); a bundle built
    outside the checkout travels with none."""
    builder = load_builder()
    repo = tmp_path / "repo"
    (repo / "build").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".gitignore").write_text("/ignored\n")
    for name, mib in (("tracked", 2), ("untracked", 1), ("ignored", 4), ("bundle/wheel", 8)):
        (repo / name).parent.mkdir(exist_ok=True)
        (repo / name).write_bytes(b"\0" * (mib << 20))
    subprocess.run(["git", "-C", str(repo), "add", "tracked"], check=True)
    monkeypatch.setattr(builder, "REPO", repo)
    travels = builder.travelling_tree_mib(repo / "bundle")
    assert travels == 3.0 + len("/ignored\n") / 2**20  # tracked, untracked and .gitignore
    assert builder.travelling_tree_mib(tmp_path / "elsewhere") == 0.0
    with pytest.raises(SystemExit) as error:
        builder.check_size(repo / "bundle", max_mib=10, tree_mib=travels)
    assert str(error.value) == (
        f"build_offline_bundle.py: error: the bundle {repo / 'bundle'} is 8.0 MiB, and the "
        "working tree that travels with it 3.0 MiB: 11.0, over --max-mib 10 (MiB: )"
    )
    assert builder.check_size(repo / "bundle", max_mib=12, tree_mib=travels) == 8.0


def quick_builder(monkeypatch, fails: bool = False):
    """The builder with a plugin wheel of a few bytes and nothing else to ship (or, ``fails``, a
    plugin wheel that fails to build): a build in a second."""
    builder = load_builder()

    def plugin_wheel(wheels: Path) -> Path:
        if fails:
            builder.fail("building the plugin's wheel failed")
        wheel = wheels / "fairseq_san-0-py3-none-any.whl"
        wheel.write_bytes(b"a wheel")
        return wheel

    monkeypatch.setattr(builder, "plugin_wheel", plugin_wheel)
    monkeypatch.setattr(builder, "wheel_requirements", lambda wheel: [])
    monkeypatch.setattr(builder, "dependencies", lambda *args, **kwargs: [])
    return builder


def test_a_failed_or_too_large_build_leaves_the_bundle_before_it(tmp_path, monkeypatch):
    """The build deleted --out first and wrote the manifest last: a build that failed (or was
    stopped) left a folder that every rerun refused as "not a bundle", and one over --max-mib a
    complete-looking bundle."""
    out = tmp_path / "bundle"
    builder = quick_builder(monkeypatch)
    builder.main(["--out", str(out)])
    before = (out / "manifest.json").read_text()
    assert json.loads(before)["wheels"] == {
        "fairseq_san-0-py3-none-any.whl": hashlib.sha256(b"a wheel").hexdigest()
    }
    with pytest.raises(SystemExit) as error:
        builder.main(["--out", str(out), "--max-mib", "0.000001"])
    assert str(error.value).startswith(f"build_offline_bundle.py: error: the bundle {out} is ")
    monkeypatch.setattr(builder, "travelling_tree_mib", lambda folder: 63.99 * (folder == out))
    with pytest.raises(SystemExit) as error:
        builder.main(["--out", str(out)])
    assert "and the working tree that travels with it 64.0 MiB: 64.0, over --max-mib 64" in str(
        error.value)  # fmt: skip
    monkeypatch.undo()
    builder = quick_builder(monkeypatch)
    with pytest.raises(SystemExit):
        quick_builder(monkeypatch, fails=True).main(["--out", str(out)])
    assert (out / "manifest.json").read_text() == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["bundle"]  # no bundle.partial
    builder.main(["--out", str(out), "--archive"])  # a rebuild replaces it
    assert (tmp_path / "bundle.tar.gz").is_file() and not (tmp_path / "bundle.partial").exists()
    builder.main(["--out", str(out)])  # the archive of the bundle replaced would pass for it
    assert not (tmp_path / "bundle.tar.gz").exists()


def test_an_out_that_cannot_be_written_is_one_line(monkeypatch):
    """An --out where no folder can be made (/proc here, an unwritable one for a user): an
    OSError traceback from the build's first mkdir."""
    out = Path("/proc/fairseq-san-bundle")
    with pytest.raises(SystemExit) as error:
        quick_builder(monkeypatch).main(["--out", str(out)])
    assert str(error.value) == (
        f"build_offline_bundle.py: error: --out {out}: cannot write {out}.partial (No such file "
        "or directory): choose another --out"
    )


def test_a_wheel_that_pip_cannot_find_names_the_package_and_target(tmp_path, monkeypatch):
    """A --python-version that a compiled package has no wheel for (3.99): the error line said
    "python -m pip download --quiet --no-deps ... exited with 1", naming neither."""
    builder = load_builder()
    refused = subprocess.CompletedProcess([], 1, "", "ERROR: No matching distribution found\n")
    monkeypatch.setattr(builder.subprocess, "run", lambda *args, **kwargs: refused)
    with pytest.raises(SystemExit) as error:
        builder.download("bitarray", "3.12.3", tmp_path, "3.99", "manylinux_2_28_x86_64")
    assert str(error.value) == (
        "build_offline_bundle.py: error: pip found no wheel of bitarray 3.12.3 for Python 3.99 "
        "on manylinux_2_28_x86_64 (its output above): give a --python-version and --platform it "
        "has wheels for (or the network it needs)"
    )


def test_a_bundle_holding_more_than_a_build_writes_is_not_replaced(tmp_path, monkeypatch):
    """A rebuild deleted the whole folder, with the runs the docs' flow makes inside it."""
    out = tmp_path / "bundle"
    builder = quick_builder(monkeypatch)
    builder.main(["--out", str(out)])
    (out / "prefix").mkdir()  # activate.sh's default prefix: the build's own
    (out / "runs" / "en-de").mkdir(parents=True)
    with pytest.raises(SystemExit) as error:
        builder.main(["--out", str(out)])
    assert str(error.value) == (
        f"build_offline_bundle.py: error: --out {out} holds runs, which no build writes: move it "
        "out of the bundle, or choose another --out"
    )
    assert (out / "runs" / "en-de").is_dir()


def test_an_sdist_cut_short_is_one_line(tmp_path):
    """A download into --cache that was cut short stays there: tarfile's traceback at every build."""
    sdist = tmp_path / "fairseq_fixed-0.12.3.1.tar.gz"
    sdist.write_bytes(gzip.compress(b"x" * 5000)[:200])
    with pytest.raises(SystemExit) as error:
        load_builder().extension_sources(sdist, "0.12.3.1")
    assert str(error.value).startswith(f"build_offline_bundle.py: error: {sdist} is not a whole "
                                       ".tar.gz (")  # fmt: skip
    assert str(error.value).endswith("remove it, or give fairseq-fixed's sdist with --fairseq-sdist")


def test_extension_sources_are_read_on_a_python_before_the_extraction_filters(
    tmp_path, monkeypatch
):
    """extractall(filter="data") was a TypeError traceback before Python 3.11.4 (Debian 12's
    python3.11 is 3.11.2): the sources are read from the sdist as files."""
    extractall = tarfile.TarFile.extractall

    def before_the_filters(self, path=".", members=None):  # Python 3.11.3's signature
        return extractall(self, path, members)

    monkeypatch.setattr(tarfile.TarFile, "extractall", before_the_filters)
    builder = load_builder()
    sdist = tmp_path / "fairseq_fixed-0.12.3.1.tar.gz"
    with tarfile.open(sdist, "w:gz") as archive:
        for sources in builder.EXTENSIONS.values():
            for source in sources:
                data = b"def one():\n    return 1\n" if source.endswith(".pyx") else b"// C++\n"
                member = tarfile.TarInfo(f"fairseq_fixed-0.12.3.1/{source}")
                member.size = len(data)
                archive.addfile(member, io.BytesIO(data))
    sources = builder.extension_sources(sdist, "0.12.3.1")
    translated = [name for names in builder.compiled_sources().values() for name in names]
    assert set(translated) <= set(sources)
    assert sources["fairseq/clib/libbleu/module.cpp"] == b"// C++\n"


def test_a_prefix_is_installed_again_for_another_bundle_or_python(tmp_path):
    """A prefix was kept when its manifest equalled the bundle's: same commit and wheel names, so
    a rebuilt bundle of a changed working tree (or another PYTHON) ran the old install."""
    installer = load_script("scripts/offline_bundle/install.py")
    manifest = {"wheels": {"a.whl": "1" * 64}}
    prefix = tmp_path / "prefix"
    assert not installer.installed(prefix, manifest)  # none yet
    prefix.mkdir()
    stamp = prefix / installer.STAMP
    stamp.write_text(json.dumps(installer.stamped(manifest)))
    assert installer.installed(prefix, manifest)
    assert not installer.installed(prefix, {"wheels": {"a.whl": "2" * 64}})  # another wheel
    stamp.write_text(json.dumps({**manifest, "installed_with": "/usr/bin/python3.0"}))
    assert not installer.installed(prefix, manifest)  # another Python
    stamp.write_text('{"wheels": ')  # cut short
    assert not installer.installed(prefix, manifest)
    (tmp_path / "file").write_text("")
    with pytest.raises(SystemExit) as error:
        installer.installed(tmp_path / "file", manifest)
    assert str(error.value) == f"install.py: error: {tmp_path}/file is a file: set FAIRSEQ_SAN_PREFIX to a folder"


def test_activate_takes_a_relative_prefix_and_any_cdpath(tmp_path):
    """A relative FAIRSEQ_SAN_PREFIX went onto PATH as given (lost after a cd); with CDPATH set,
    cd printed the folder and the bundle's path held two lines."""
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    shutil.copy2(REPO / "scripts" / "offline_bundle" / "activate.sh", bundle)
    (bundle / "install.py").write_text("import sys; print(sys.argv[1])\n")  # stands in
    work = tmp_path / "work"
    work.mkdir()
    script = "CDPATH=.:/tmp; FAIRSEQ_SAN_PREFIX=relative; source ../bundle/activate.sh; echo $PATH"
    result = subprocess.run(["bash", "-c", script], cwd=work, capture_output=True, text=True,
                            env={**os.environ, "PYTHON": sys.executable})  # fmt: skip
    assert result.returncode == 0, result.stderr
    installed_into, path = result.stdout.splitlines()
    assert installed_into == f"{work}/relative"
    assert path.startswith(f"{work}/relative/bin:")


def test_activate_sourced_twice_puts_each_path_on_once(tmp_path):
    """A second ``source activate.sh`` (a new tmux pane of the same shell, a script that sources
    it again) put the prefix on PATH and PYTHONPATH a second time."""
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    shutil.copy2(REPO / "scripts" / "offline_bundle" / "activate.sh", bundle)
    (bundle / "install.py").write_text("")  # stands in: installed
    script = ("source bundle/activate.sh; source bundle/activate.sh; "
              'echo "$PATH"; echo "$PYTHONPATH"')  # fmt: skip
    near = f"{bundle}/prefix/bin0:{os.environ['PATH']}"  # a path that holds the prefix's
    env = {**os.environ, "PYTHON": sys.executable, "PYTHONPATH": f"{bundle}/prefix0", "PATH": near}
    result = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True,
                            env=env)  # fmt: skip
    assert result.returncode == 0, result.stderr
    path, python_path = result.stdout.splitlines()
    assert path == f"{bundle}/prefix/bin:{near}"
    assert python_path == f"{bundle}/prefix:{bundle}/prefix0"


def test_install_refuses_a_prefix_holding_a_colon(tmp_path):
    """PATH and PYTHONPATH split a prefix holding ':' in two: every fairseq command was then
    not found, or another Python's fairseq ran, after the install said nothing wrong."""
    prefix = tmp_path / "a:b"
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "offline_bundle" / "install.py"), str(prefix)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert (result.returncode, result.stdout) == (1, ""), result.stderr
    assert result.stderr.splitlines() == [
        f"install.py: error: {prefix} holds ':', which PATH and PYTHONPATH read between two "
        "folders: set FAIRSEQ_SAN_PREFIX to a path without one"
    ]
    assert not prefix.exists()


@pytest.mark.parametrize(
    "change, said",
    [
        (lambda wheels: (wheels / "a-1-py3-none-any.whl").write_bytes(b"cut sh"),
         "{wheels}/a-1-py3-none-any.whl is not the wheel the bundle was built with (its sha256 "
         "differs from the manifest's): copy the bundle again"),
        (lambda wheels: (wheels / "a-1-py3-none-any.whl").unlink(),
         "{wheels} lacks a-1-py3-none-any.whl, which the manifest lists: copy the bundle again"),
        (lambda wheels: (wheels / "b-1-py3-none-any.whl").write_bytes(b"other"),
         "{wheels}/b-1-py3-none-any.whl is not in the bundle's manifest: remove it, or rebuild "
         "the bundle"),
    ],
    ids=["cut short", "lost", "added"],
)  # fmt: skip
def test_wheels_unlike_the_manifest_are_named_before_pip_runs(tmp_path, change, said):
    """A wheel cut short on its way to the GPU machine reached pip, whose error named a zip file."""
    wheels = tmp_path / "bundle" / "wheels"
    wheels.mkdir(parents=True)
    wheel = b"a whole wheel"
    (wheels / "a-1-py3-none-any.whl").write_bytes(wheel)
    change(wheels)
    listed = {"a-1-py3-none-any.whl": hashlib.sha256(wheel).hexdigest()}
    result = run_install(tmp_path / "bundle", PYTHON, listed, tmp_path / "prefix")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "install.py: error: " + said.format(wheels=wheels)
    ]
    assert not (tmp_path / "prefix").exists()


@pytest.mark.parametrize(
    "manifest, said",
    [(None, "is missing or cut short (No such file or directory): copy the bundle again"),
     ('{"python": "3', "is missing or cut short (Unterminated string starting at: line 1 "
      "column 12 (char 11)): copy the bundle again"),
     ("[]", "is no bundle's manifest (it lacks python, machine_provides, extensions, wheels): "
      "copy the bundle again, or rebuild it"),
     # a KeyError traceback (one key of four), a TypeError one (no container)
     ('{"python": "3.12"}', "is no bundle's manifest (it lacks python, machine_provides, "
      "extensions, wheels): copy the bundle again, or rebuild it"),
     ("1", "is no bundle's manifest (it lacks python, machine_provides, extensions, wheels): "
      "copy the bundle again, or rebuild it")],
    ids=["missing", "cut short", "no manifest", "a key of four", "a number"],
)  # fmt: skip
def test_a_manifest_missing_or_cut_short_is_one_line(tmp_path, manifest, said):
    """A bundle copied to the GPU machine only in part: json's traceback from install.py."""
    bundle = tmp_path / "bundle"
    (bundle / "wheels").mkdir(parents=True)
    shutil.copy2(REPO / "scripts" / "offline_bundle" / "install.py", bundle / "install.py")
    if manifest is not None:
        (bundle / "manifest.json").write_text(manifest)
    result = subprocess.run([sys.executable, str(bundle / "install.py"), str(tmp_path / "prefix")],
                            capture_output=True, text=True)  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"install.py: error: {bundle}/manifest.json {said}"
    ]
    assert not (tmp_path / "prefix").exists()


def test_the_bundles_python_runs_one_whose_path_holds_shell_characters(tmp_path, monkeypatch):
    """PREFIX/bin/python put the Python's path in double quotes: a '"', '$' or '`' in it broke
    the script or ran as shell."""
    odd = tmp_path / 'py "$(touch ran)" `x`'
    odd.mkdir()
    (odd / "python").symlink_to(sys.executable)
    installer = load_script("scripts/offline_bundle/install.py")
    monkeypatch.setattr(installer.sys, "executable", str(odd / "python"))
    (tmp_path / "prefix" / "bin").mkdir(parents=True)
    installer.write_python(tmp_path / "prefix")
    said = subprocess.run([str(tmp_path / "prefix" / "bin" / "python"), "-c", "print(6 * 7)"],
                          cwd=tmp_path, capture_output=True, text=True)  # fmt: skip
    assert (said.returncode, said.stdout) == (0, "42\n"), said.stderr
    assert not (tmp_path / "ran").exists()
