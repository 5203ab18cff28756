"""Loading the plugin and checkpoints.

* ``import fairseq_san`` registers the model, its architectures and the task whatever the import
  order, while ``fairseq_san.policy`` stays torch-free;
* torch's safe loader (``weights_only``, torch >= 2.6's default) loads the checkpoints of fairseq's
  own transformer and of ours with no environment variable;
* a checkpoint that cannot be loaded (a foreign global, missing, a directory, empty, truncated) is
  one line naming the file, not a torch traceback; a SAN checkpoint records the plugin that made
  it.
"""

import argparse
import fractions
import io
import logging
import os
import pickle
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy
import pytest
import torch

import fairseq_san
from fairseq_san import checkpoints
from helpers import REPO, build, cli_env, fairseq_generate, run_cli, train_argv

UNSAFE_VARIABLE = "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"


@pytest.fixture(autouse=True)
def safe_loader(monkeypatch):
    """No test here may pass because torch's safe loader was switched off."""
    monkeypatch.delenv(UNSAFE_VARIABLE, raising=False)


def python(code: str) -> subprocess.CompletedProcess:
    env = cli_env()
    env.pop(UNSAFE_VARIABLE, None)
    return subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip


REGISTERED = (
    "from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY\n"
    "from fairseq.tasks import TASK_REGISTRY\n"
    "print('transformer_san' in MODEL_REGISTRY, 'transformer_san_small' in ARCH_MODEL_REGISTRY,"
    " 'transformer_aan_base' in ARCH_MODEL_REGISTRY, 'translation_san' in TASK_REGISTRY)\n"
)


@pytest.mark.parametrize(
    "imports",
    [
        "import fairseq_san\n",
        "import fairseq\nimport fairseq_san\n",
        "from fairseq_san.static_decoding import StaticSequenceGenerator\n",
        "from fairseq_san.models.transformer_san import TransformerSANModel\n",
        "from fairseq_san.benchmark.meters import matmul_flops\n",
        "from fairseq_san.analysis import AttentionCapture\n",
        "from fairseq_san.modules.shared_attention import BlockLeaderAttention\n",
        "from fairseq_san.modules.average_attention import AverageAttention\n",
    ],
    ids=[
        "plugin first", "fairseq first", "static decoder first", "model first", "meters first",
        "analysis first", "shared attention first", "average attention first",
    ],
)  # fmt: skip
def test_import_registers_model_architectures_and_task(imports):
    result = python(imports + REGISTERED)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["True"] * 4


def test_fairseq_imported_after_the_plugin_leaves_logging_to_the_program():
    """fairseq's import set the root logger to DEBUG with a handler on standard error
    (wav2vec2_classification's ``logging.basicConfig``): every library's debug messages printed
    (matplotlib's font search, some 150 lines for one plot) and the program's own basicConfig did
    nothing. Imported before the plugin, fairseq still does so (the first lines show it)."""
    fairseq_first = python("import logging, fairseq, fairseq_san\nprint(logging.root.level)\n")
    assert fairseq_first.stdout.split() == [str(logging.DEBUG)], fairseq_first.stderr[-2000:]
    result = python(
        "import logging, fairseq_san\n"
        "from fairseq_san.models.transformer_san import TransformerSANModel\n"
        "logging.getLogger('matplotlib.font_manager').debug('findfont: score')\n"
        "logging.basicConfig(level=logging.INFO, format='%(levelname)s %(name)s %(message)s')\n"
        "logging.getLogger('program').info('configured by the program')\n"
        "logging.getLogger('library').debug('below the level the program chose')\n"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "DEBUG" not in result.stderr and "findfont" not in result.stderr
    assert "INFO program configured by the program" in result.stderr


# A module of ours, found by a finder of the test's: ``exec_module`` is its code.
FAKE_MODULE = (
    "import importlib.abc, importlib.util, sys, threading, time\n"
    "import fairseq_san\n"
    "class Fake(importlib.abc.MetaPathFinder, importlib.abc.Loader):\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name == 'fairseq_san.fake':\n"
    "            return importlib.util.spec_from_loader(name, self)\n"
    "    def create_module(self, spec):\n"
    "        return None\n"
    "sys.meta_path.append(Fake())\n"
)


def test_a_module_of_ours_that_fails_to_import_leaves_the_plugin_registered():
    """One of our modules imported fairseq, then failed (a missing optional dependency): the
    hook waited for it to finish and never registered, for the rest of the process."""
    result = python(
        FAKE_MODULE
        + "def exec_module(self, module):\n"
        "    import fairseq\n"
        "    raise ImportError('optional dependency missing')\n"
        "Fake.exec_module = exec_module\n"
        "try:\n"
        "    import fairseq_san.fake\n"
        "except ImportError as error:\n"
        "    print(error)\n"
        + REGISTERED
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split("\n")[0] == "optional dependency missing"
    assert result.stdout.split()[-4:] == ["True"] * 4


def test_a_module_of_ours_executing_in_another_thread_does_not_delay_registration():
    """The count of our modules being executed was one for all threads: while another thread
    ran one (even a pure-Python one), this thread's ``import fairseq`` registered nothing."""
    result = python(
        FAKE_MODULE
        + "started, release = threading.Event(), threading.Event()\n"
        "def exec_module(self, module):\n"
        "    started.set()\n"
        "    release.wait(60)\n"
        "Fake.exec_module = exec_module\n"
        "other = threading.Thread(target=lambda: __import__('fairseq_san.fake'))\n"
        "other.start()\n"
        "started.wait(60)\n"
        "import fairseq\n"
        + REGISTERED
        + "release.set()\n"
        "other.join()\n"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["True"] * 4


def test_fairseq_half_imported_in_another_thread_is_not_registered_with():
    """While one thread runs fairseq's own import, another thread that finished a module of ours
    found "fairseq" in sys.modules and registered the models from a half-imported fairseq. A
    stand-in fairseq that pauses half-way shows who registers, and when: the importing thread,
    once fairseq has run to its end."""
    result = python(
        "import importlib.abc, importlib.util, sys, threading\n"
        "import fairseq_san\n"
        "registered = []\n"
        "fairseq_san._register = lambda: registered.append(\n"
        "    (threading.current_thread().name, getattr(sys.modules['fairseq'], 'ran', False)))\n"
        "started, release = threading.Event(), threading.Event()\n"
        "class HalfWay(importlib.abc.MetaPathFinder, importlib.abc.Loader):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'fairseq':\n"
        "            return importlib.util.spec_from_loader(name, self)\n"
        "    def create_module(self, spec):\n"
        "        return None\n"
        "    def exec_module(self, module):\n"
        "        started.set()\n"
        "        release.wait(60)\n"
        "        module.ran = True\n"
        "sys.meta_path.insert(1, HalfWay())\n"
        "def other():\n"
        "    started.wait(60)\n"
        "    import fairseq_san.policy\n"
        "    release.set()\n"
        "thread = threading.Thread(target=other, name='other')\n"
        "thread.start()\n"
        "import fairseq\n"
        "thread.join()\n"
        "print(registered)\n"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[('MainThread', True)]"


def test_policy_modules_do_not_import_torch():
    result = python(
        "import sys, fairseq_san.policy, fairseq_san.cli.policy\n"
        "print(sorted(m for m in ('torch', 'fairseq') if m in sys.modules))"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]"


# --- checkpoints -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained(binarized_corpus, san_checkpoint, tmp_path_factory):
    """{"fairseq": fairseq's transformer, trained without the plugin; "san": ours}: checkpoints."""
    save_dir = tmp_path_factory.mktemp("loading")
    argv = train_argv(binarized_corpus, save_dir, 3)
    at = argv.index("--user-dir")
    del argv[at : at + 2]
    argv[argv.index("transformer_san")] = "transformer"
    result = run_cli("fairseq-train", *argv)
    assert result.returncode == 0, f"fairseq:\n{result.stderr[-3000:]}"
    return {"fairseq": save_dir / "checkpoint_last.pt", "san": san_checkpoint}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["fairseq", "san"])
def test_safe_loader_loads_fairseq_and_san_checkpoints(trained, name):
    state = torch.load(trained[name], map_location="cpu", weights_only=True)
    assert state["cfg"]["model"].arch == {"fairseq": "transformer", "san": "transformer_san"}[name]
    assert state["model"]["encoder.embed_tokens.weight"].dim() == 2


@pytest.mark.slow
def test_a_run_of_fairseqs_transformer_resumes_as_transformer_san(
    binarized_corpus, trained, tmp_path
):
    """With no policy transformer_san is fairseq's transformer: a run trained with --arch
    transformer resumes under it (its weights, optimizer and update count); a policy that shares
    is refused as for any resumed run."""
    save_dir = tmp_path / "save"
    restore = ["--restore-file", str(trained["fairseq"])]
    result = run_cli("fairseq-train", *train_argv(binarized_corpus, save_dir, 4, restore))
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(r"Loaded checkpoint .*checkpoint_last\.pt \(epoch \d+ @ 3 updates\)",
                     result.stdout + result.stderr)  # fmt: skip
    sharing = restore + ["--san-decoder-self-policy", "3,3"]
    result = run_cli("fairseq-train", *train_argv(binarized_corpus, save_dir, 5, sharing))
    assert result.returncode == 1, result.stderr[-3000:]
    assert "was trained with attention sharing decoder_self none" in result.stderr


@pytest.mark.slow
def test_a_loaded_checkpoint_reaches_the_other_ranks_through_the_safe_loader(san_checkpoint):
    """A distributed fairseq-train that resumes sends rank 0's loaded checkpoint to the other
    ranks (``broadcast_object``: tensors split out, the rest saved and read with torch.load); the
    safe loader refused what fairseq put in it, and every other rank failed."""
    from fairseq import checkpoint_utils
    from fairseq.distributed import utils
    from omegaconf import OmegaConf

    from fairseq_san.fairseq_fixes.checkpoint_broadcast import _through_safe_loader

    def received(obj, src_rank, group, dist_device):  # a receiving rank's end of the broadcast
        buffer = io.BytesIO()
        torch.save(obj, buffer)
        buffer.seek(0)
        return torch.load(buffer, map_location="cpu")

    state = checkpoint_utils.load_checkpoint_to_cpu(str(san_checkpoint))
    state["extra_state"]["bleu_counts"] = numpy.array([3, 2, 1])  # --eval-bleu's statistics
    tensors = []
    sent = utils._split_tensors_from_obj(state, tensors)
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        received(sent, 0, None, None)
    got = utils._put_tensors_in_obj(_through_safe_loader(received)(sent, 0, None, None), tensors)
    assert OmegaConf.is_config(got["cfg"]) and got["cfg"] == state["cfg"]
    assert got["cfg"].model.san_policy == state["cfg"].model.san_policy  # a Namespace in it
    assert got["model"].keys() == state["model"].keys()
    assert all(torch.equal(got["model"][key], value) for key, value in state["model"].items())
    assert numpy.array_equal(got["extra_state"]["bleu_counts"], [3, 2, 1])


@pytest.mark.slow
def test_generate_loads_fairseq_checkpoint_with_the_plugin(binarized_corpus, trained):
    result = run_cli(
        "fairseq-generate", str(binarized_corpus), "--user-dir", "fairseq_san",
        "--path", str(trained["fairseq"]), "--beam", "2", "--batch-size", "8", "--cpu",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Translated 20 sentences" in result.stderr


@pytest.mark.slow
def test_san_checkpoint_records_the_plugin(trained):
    state = checkpoints.load_state(str(trained["san"]))
    assert state["cfg"]["model"].plugin == f"fairseq-san {fairseq_san.__version__}"


def generate_error(data: Path, checkpoint: Path) -> str:
    """The stderr of a failing fairseq-generate run (asserting that it fails)."""
    result = run_cli(
        "fairseq-generate", str(data), "--user-dir", "fairseq_san", "--path", str(checkpoint),
        "--beam", "2", "--batch-size", "8", "--cpu",
    )  # fmt: skip
    assert result.returncode != 0
    return result.stderr


def changed_checkpoint_refusal(data: Path, checkpoint: Path, tmp_path: Path, change) -> str:
    """The one line fairseq-generate refuses a copy of ``checkpoint`` with, its state dict
    changed by ``change`` (asserting no traceback)."""
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    change(state)
    odd = tmp_path / "odd.pt"
    torch.save(state, odd)
    stderr = generate_error(data, odd)
    assert "Traceback" not in stderr, stderr[-3000:]
    return stderr.strip().splitlines()[-1]


def assert_one_line(stderr: str, expected: str) -> None:
    assert "Traceback" not in stderr, stderr[-3000:]
    assert stderr.strip().splitlines()[-1] == expected


@pytest.mark.slow
def test_checkpoint_with_a_foreign_global_is_one_line_naming_it(
    binarized_corpus, trained, tmp_path
):
    state = torch.load(trained["san"], map_location="cpu", weights_only=True)
    state["extra_state"]["odd"] = fractions.Fraction(1, 3)
    foreign = tmp_path / "foreign.pt"
    torch.save(state, foreign)
    assert_one_line(
        generate_error(binarized_corpus, foreign),
        f"fairseq-san: error: cannot load checkpoint {foreign}: it contains fractions.Fraction, "
        "which torch's safe loader (weights_only) refuses; fairseq checkpoints need only "
        "argparse.Namespace and numpy's arrays, which fairseq-san reads as data, and fairseq-san "
        "reads nothing else",
    )


# numpy values as fairseq's checkpoints hold them (--eval-bleu's statistics, a best score).
NUMPY_VALUES = {
    "counts": numpy.array([3, 2, 1, 0]), "totals": numpy.array([4.0, 3.0]),
    "flags": numpy.array([True, False]), "big_endian": numpy.array([1, 2], dtype=">i4"),
    "fortran": numpy.asfortranarray(numpy.arange(6.0).reshape(2, 3)),
    "complex": numpy.array([1 + 2j]),
    "best": numpy.float64(1.5), "score": numpy.float32(2.5), "count": numpy.int64(7),
    "empty": numpy.array([]), "no_rows": numpy.zeros((0, 3), dtype=numpy.int64),  # bytes()
}  # fmt: skip


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
def test_numpy_arrays_and_scalars_of_numbers_load_as_they_were_saved(tmp_path, legacy):
    """fairseq's translation task keeps --eval-bleu's statistics as numpy arrays in a
    checkpoint's metrics: the safe loader refused every such checkpoint, to resume or decode."""
    path = tmp_path / "metrics.pt"
    shared = [numpy.array([9])]
    shared.append(shared)  # a cycle: visited once
    tensor = torch.zeros(2)
    tensor.note = numpy.array([1, 2])  # a tensor's attribute: it stayed a record
    torch.save({"extra_state": {"metrics": {"valid": NUMPY_VALUES}}, "shared": shared,
                "tensor": tensor}, path, _use_new_zipfile_serialization=not legacy)  # fmt: skip
    state = checkpoints.load_state(str(path))
    assert numpy.array_equal(state["tensor"].note, [1, 2])
    loaded = state["extra_state"]["metrics"]["valid"]
    for name, value in NUMPY_VALUES.items():
        assert type(loaded[name]) is type(value) and loaded[name].dtype == value.dtype, name
        assert numpy.array_equal(loaded[name], value) and loaded[name].shape == value.shape, name
    assert loaded["fortran"].flags.f_contiguous
    assert numpy.array_equal(state["shared"][0], [9]) and state["shared"][1] is state["shared"]


class PickledAs:
    """Unpickles as ``function(*arguments)`` (then ``state`` by BUILD, where given): a pickle
    that numpy's own objects would not write."""

    def __init__(self, function, arguments: tuple, state=None):
        self.made = (function, arguments) if state is None else (function, arguments, state)

    def __reduce__(self):
        return self.made


def object_dtype():
    return PickledAs(numpy.dtype, ("O",))


# Pickles of numpy's names that ran numpy's constructors (a security review's files): an object
# array over an address of the file's choosing (a segfault as it loaded, inside a set), 2**62
# elements over one byte (a hang), a dtype copy given a field 1 TiB past its item, a 16 GiB
# object array, an object array given as a list.
CRAFTED = {
    "object array over an address": PickledAs(numpy.ndarray, ((1,), "O", b"\x40" * 8)),
    "2**62 elements over a byte": PickledAs(numpy.ndarray, ((2**62,), "u1", b"A", 0, (0,))),
    "a field past the item": PickledAs(
        numpy.ndarray, ((1,), PickledAs(numpy.dtype, ("f8", False, True), (
            3, "<", None, ("a",), {"a": (numpy.dtype("<u8"), 1 << 40)}, 8, 8, 0)), b"A" * 8)),
    "16 GiB of objects": PickledAs(numpy._core.multiarray._reconstruct,
                                   (numpy.ndarray, (2**31,), "O")),
    "objects from a list": PickledAs(numpy._core.multiarray._reconstruct,
                                     (numpy.ndarray, (0,), "b"),
                                     (1, (2,), object_dtype(), False, [{"k": 1}, "s"])),
    "fewer bytes than the shape": PickledAs(numpy._core.multiarray._reconstruct,
                                            (numpy.ndarray, (0,), "b"),
                                            (1, (4,), PickledAs(numpy.dtype, ("i8", False, True)),
                                             False, b"\0" * 8)),
    "an object scalar": PickledAs(numpy._core.multiarray.scalar, (object_dtype(), b"\0" * 8)),
}  # fmt: skip


def over_bytes(data) -> PickledAs:
    """A numpy array of bytes as numpy pickles one, over ``data``."""
    dtype = PickledAs(numpy.dtype, ("u1", False, True))
    return PickledAs(numpy._core.multiarray._reconstruct, (numpy.ndarray, (0,), "b"),
                     (1, (len(data),), dtype, False, data))  # fmt: skip


SHARED = b"\1" * 1000
# The second review's files: what the records' walk made of them.
CRAFTED.update({
    "arrays sharing their bytes": [over_bytes(SHARED), over_bytes(SHARED)],  # copies of one MB
    "a key of a dict": {PickledAs(numpy._core.multiarray.scalar,
                                  (PickledAs(numpy.dtype, ("i8", False, True)), b"\0" * 8)): 1},
    "in a set": {over_bytes(b"\0" * 100)},
    # The fourth: records inside tuples in a set or a key stayed records, not refused.
    "in a tuple in a set": {(1, (over_bytes(b"\0" * 8),))},
    "in a tuple as a key": {(2, (over_bytes(b"\1" * 8),)): 1},
})  # fmt: skip


@pytest.mark.parametrize("crafted", list(CRAFTED))
def test_numpy_values_no_numpy_pickle_holds_are_refused_in_one_line(tmp_path, crafted):
    path = tmp_path / "crafted.pt"
    torch.save({"model": {}, "extra_state": {"x": CRAFTED[crafted]}}, path)
    with pytest.raises(checkpoints.CheckpointError) as refused:
        checkpoints.load_state(str(path))
    assert str(refused.value).startswith(
        f"cannot load checkpoint {path}: it holds objects the safe loader refuses: "
    )
    assert "numpy" in str(refused.value)


@pytest.mark.parametrize("size", [1, 2**40])
def test_bytes_are_called_with_no_arguments_or_refused_in_one_line(tmp_path, size):
    """An empty numpy array's data is ``bytes()`` in a pickle (the safe loader refused every
    checkpoint with one); ``bytes(2**40)`` would allocate a terabyte."""
    path = tmp_path / "bytes.pt"
    torch.save({"model": {}, "extra_state": {"x": PickledAs(bytes, (size,))}}, path)
    with pytest.raises(checkpoints.CheckpointError) as refused:
        checkpoints.load_state(str(path))
    assert str(refused.value) == (
        f"cannot load checkpoint {path}: it holds objects the safe loader refuses: "
        f"builtins.bytes({size},): a pickle of numpy's data calls it without arguments; fairseq "
        "saves numpy arrays of numbers only, which fairseq-san reads as data"
    )


# Where a pickle may call bytearray: a value of its own, and the data of a numpy array.
BYTEARRAYS = {"a value": PickledAs(bytearray, (2**40,)), "numpy's data": over_bytes(bytearray(100))}


@pytest.mark.parametrize("zip_format", [True, False], ids=["zip", "legacy"])
@pytest.mark.parametrize("where", list(BYTEARRAYS))
def test_a_pickle_calling_bytearray_is_refused_before_torch_reads_it(tmp_path, where, zip_format):
    """torch's safe loader calls ``bytearray`` with the file's arguments (its own allow-list comes
    before the plugin's stand-ins): ``bytearray(2_000_000_000)`` filled 2 GB as a file of 1.2 KB
    loaded. Every reader of checkpoints now reads the pickle's names first, in both of torch's
    formats, and refuses the file (here ``2**40`` would have been a MemoryError, not the line)."""
    from fairseq import checkpoint_utils

    path = tmp_path / "bytearray.pt"
    saved = {"model": {}, "extra_state": {"x": BYTEARRAYS[where]}}
    torch.save(saved, path, _use_new_zipfile_serialization=zip_format)
    for load in (checkpoints.load_state, checkpoint_utils.load_checkpoint_to_cpu,
                 checkpoint_utils.load_ema_from_checkpoint):  # fmt: skip
        with pytest.raises(checkpoints.CheckpointError) as refused:
            load(str(path))
        assert str(refused.value) == (
            f"cannot load checkpoint {path}: its pickle calls builtins.bytearray, which makes a "
            "bytearray of any size the file asks for (fairseq saves none): refused before "
            "torch's safe loader reads it"
        )


def test_the_names_a_pickle_calls_on_are_read_as_torch_reads_them(tmp_path):
    """A zip archive is read with torch's reader whatever Python's zipfile would find in it, a
    Python 2 name (pickle's protocol 2, torch.save's, writes ``__builtin__``) is mapped as torch
    maps it, and a file of no pickle gives no name."""
    from fairseq_san.pickle_globals import globals_in

    path = tmp_path / "legacy.pt"
    torch.save({"x": PickledAs(bytearray, (1,))}, path, _use_new_zipfile_serialization=False)
    assert b"c__builtin__\nbytearray\n" in path.read_bytes()
    assert globals_in(str(path)) == {"builtins.bytearray"}

    archive = tmp_path / "archive.pt"
    torch.save({"x": PickledAs(bytearray, (1,))}, archive)
    with zipfile.ZipFile(archive, "a") as appended:  # Python's zipfile reads the last copy
        appended.writestr("archive/data.pkl", pickle.dumps({"x": 1}, protocol=2))
    assert "builtins.bytearray" in globals_in(str(archive))

    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"\x80\x02not a pickle")
    assert globals_in(str(garbage)) == set()


def test_a_pickle_refers_to_an_object_as_often_as_it_likes_and_it_is_walked_once(tmp_path):
    """A tuple of a tuple of ... shared at each of 24 levels (a kilobyte) took time doubling with
    each level (at 60, for ever); one array referred to 50 times was copied 50 times."""
    import time

    nested, array = (), numpy.arange(10_000)
    for _ in range(24):
        nested = (nested, nested)
    path = tmp_path / "shared.pt"
    torch.save({"model": {}, "extra_state": {"nested": nested, "arrays": [array] * 50}}, path)
    started = time.monotonic()
    state = checkpoints.load_state(str(path))
    assert time.monotonic() - started < 10
    arrays = state["extra_state"]["arrays"]
    assert all(loaded is arrays[0] for loaded in arrays) and numpy.array_equal(arrays[0], array)


def received(**fields) -> dict:
    """A checkpoint as fairseq's loader reads it, with ``fields`` in place of its own."""
    history = [{"criterion_name": "c", "optimizer_name": "o", "lr_scheduler_state": {},
                "num_updates": 0}]  # fmt: skip
    config = {"model": argparse.Namespace(arch="transformer", _name="transformer"),
              "task": {"_name": "translation"}, "common": {}}  # fmt: skip
    return {"model": {}, "cfg": config, "optimizer_history": history, "extra_state": {}, **fields}


def test_a_configuration_a_pickle_refers_to_many_times_is_read_once(tmp_path):
    """The third security review: a dict of dicts shared at 40 levels inside cfg.model (a
    kilobyte) hung the checks of strings fairseq evaluates; a key of a megabyte shared above
    100,000 values asked for its dotted name 100,000 times; a shape of tuples shared at 40
    levels hung the message that named it; a namespace whose attribute was named 1 was a
    TypeError."""
    import time

    from fairseq import checkpoint_utils

    shared = {"adam_betas": "(0.9, 0.98)"}
    for _ in range(40):
        shared = {"a": shared, "b": shared}
    odd = argparse.Namespace()
    vars(odd)[1] = numpy.array([1])  # the safe loader fills a namespace's __dict__ as it is told
    state = received(extra_state={"odd": odd, "long": {"k" * 1_000_000: [None] * 100_000}})
    state["cfg"]["model"].nested = shared
    path = tmp_path / "shared.pt"
    torch.save(state, path)
    started = time.monotonic()
    loaded = checkpoint_utils.load_checkpoint_to_cpu(str(path))
    assert time.monotonic() - started < 20
    assert numpy.array_equal(vars(loaded["extra_state"]["odd"])[1], [1])
    shape = ()
    for _ in range(40):
        shape = (shape, shape)
    torch.save({"model": {}, "x": PickledAs(numpy._core.multiarray._reconstruct,
                                            (numpy.ndarray, (0,), "b"),
                                            (1, shape, PickledAs(numpy.dtype, ("i8",)), False,
                                             b"\\0" * 8))}, path)  # fmt: skip
    with pytest.raises(checkpoints.CheckpointError, match=r"^cannot load checkpoint .* of shape "):
        checkpoints.load_state(str(path))


def assert_shared_container_refused_at_once(path: Path, second: str) -> None:
    """fairseq's loader refuses the checkpoint at ``path`` within 10 s, naming ``second``, the
    second place of a container it holds twice."""
    import time

    from fairseq import checkpoint_utils

    started = time.monotonic()
    with pytest.raises(checkpoints.CheckpointError) as refused:
        checkpoint_utils.load_checkpoint_to_cpu(str(path))
    assert time.monotonic() - started < 10
    assert str(refused.value).startswith(
        f"cannot load checkpoint {path}: its configuration holds one container at two places "
        f"(the second: {second}), which fairseq-train never saves"
    )


@pytest.mark.parametrize("kind", [list, tuple, dict])
def test_a_configuration_holding_one_container_at_two_places_is_one_line(tmp_path, kind):
    """omegaconf copies a shared container at every place it is held: lists (tuples, dicts) of
    two references to one below them, 40 levels deep (a kilobyte), hung fairseq's loader (at 14
    levels it took 4 s). A fresh container at each place is what fairseq-train saves."""
    from fairseq import checkpoint_utils

    shared = kind() if kind is not dict else {"x": 1}
    for _ in range(40):
        shared = kind([shared, shared]) if kind is not dict else {"a": shared, "b": shared}
    state = received()
    state["cfg"]["common"]["nested"] = shared
    path = tmp_path / "shared.pt"
    torch.save(state, path)
    # the innermost empty list or tuple is not counted: the first shared one is a level above
    second = "cfg.common.nested" + (".a" * 39 + ".b" if kind is dict else "[0]" * 38 + "[1]")
    assert_shared_container_refused_at_once(path, second)
    state["cfg"]["common"]["nested"] = [[1, 2], [1, 2], (), ()]  # equal, not one; Python's ()
    torch.save(state, path)
    loaded = checkpoint_utils.load_checkpoint_to_cpu(str(path))
    assert list(loaded["cfg"]["common"]["nested"][0]) == [1, 2]


def test_arguments_of_an_old_checkpoint_holding_one_container_at_two_places_are_one_line(
    tmp_path,
):
    """A checkpoint saved before fairseq's dataclass configurations (``args``, no ``cfg``):
    fairseq's upgrade writes every argument out as text, and a list shared at each of 18 levels
    (a megabyte with its weights) took longer than 300 s."""
    shared = [0]
    for _ in range(40):
        shared = [shared, shared]
    state = received()
    state["args"] = argparse.Namespace(arch="transformer", task="translation", source_lang=shared)
    state["cfg"] = None
    path = tmp_path / "old.pt"
    torch.save(state, path)
    assert_shared_container_refused_at_once(path, f"args.source_lang{'[0]' * 39}[1]")


def old_checkpoint(tmp_path: Path, **arguments) -> Path:
    """A checkpoint saved before fairseq's dataclass configurations (``args``, no ``cfg``)."""
    state = received()
    state["args"] = argparse.Namespace(arch="transformer", task="translation", **arguments)
    state["cfg"] = None
    path = tmp_path / "old.pt"
    torch.save(state, path)
    return path


@pytest.mark.parametrize("text", ["src\\", "a\\'b", "\\\\", "it's"])
def test_arguments_with_backslashes_before_a_quote_or_the_end_read_back_as_they_were(
    tmp_path, text
):
    """fairseq writes each argument out as a hydra override ``key='text'`` and escaped quotes, not
    the backslashes before them: hydra's OverrideParseException traceback, for a checkpoint's
    argument (a red-team pass) as for a command line's (``--results-path 'runs\'``)."""
    from fairseq import checkpoint_utils, options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    path = old_checkpoint(tmp_path, source_lang=text)
    assert checkpoint_utils.load_checkpoint_to_cpu(str(path))["cfg"]["task"]["source_lang"] == text
    parser = options.get_generation_parser()
    args = options.parse_args_and_arch(parser, ["data", "--path", "x.pt", "--results-path", text])
    assert convert_namespace_to_omegaconf(args).common_eval.results_path == text


@pytest.mark.parametrize("text", ["a$", "$x", "a\\$", "it's\\"])
def test_text_arguments_with_a_dollar_not_before_a_brace_read_back_as_they_were(tmp_path, text):
    from fairseq import checkpoint_utils, options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    path = old_checkpoint(tmp_path, source_lang=text)
    assert checkpoint_utils.load_checkpoint_to_cpu(str(path))["cfg"]["task"]["source_lang"] == text
    parser = options.get_generation_parser()
    args = options.parse_args_and_arch(parser, ["data", "--path", "x.pt", "--results-path", text])
    assert convert_namespace_to_omegaconf(args).common_eval.results_path == text


@pytest.mark.parametrize("text", ["a${x}", "a${x", "${oc.env:HOME}"])
def test_text_arguments_holding_an_interpolation_are_one_line(tmp_path, text):
    """``--results-path 'a${x}'`` (or ``'a${x'``, or a checkpoint's argument) was omegaconf's
    InterpolationKeyError or hydra's ConfigCompositionException traceback, ``${oc.env:HOME}``
    resolved: fairseq saves its configuration resolved, so none can be carried literally."""
    from fairseq import checkpoint_utils, options

    path = old_checkpoint(tmp_path, source_lang=text)
    with pytest.raises(checkpoints.CheckpointError) as refused:
        checkpoint_utils.load_checkpoint_to_cpu(str(path))
    assert str(refused.value) == (
        f"cannot load checkpoint {path}: its args' source_lang {text!r} holds '${{', which "
        "fairseq's configuration reads as an omegaconf interpolation (and its checkpoints would "
        "keep as one)"
    )
    parser = options.get_generation_parser()
    with pytest.raises(fairseq_san.errors.UsageError) as refused:
        options.parse_args_and_arch(parser, ["data", "--path", "x.pt", "--results-path", text])
    assert str(refused.value).startswith(f"--results-path {text!r} holds '${{', which fairseq")
    with pytest.raises(fairseq_san.errors.UsageError) as refused:  # it named a --data flag
        options.parse_args_and_arch(options.get_generation_parser(), [f"data{text}", "--path", "x"])
    assert str(refused.value).startswith(f"DATA 'data{text}' holds '${{', which fairseq")


@pytest.mark.parametrize(
    "value, reason",
    [
        ("(" * 1000 + ")" * 1000, "too many nested parentheses"),
        ("9" * 5000, "Exceeds the limit"),
        ("abc", "malformed node or string"),
        ("-" * 200_000 + "1", "MemoryError"),
    ],
)
def test_an_old_checkpoints_argument_fairseq_reads_as_a_literal_and_is_none_is_one_line(
    tmp_path, value, reason
):
    """fairseq reads an old checkpoint's argument of an option that is not text (``seed``) with
    ``ast.literal_eval``: one that is no literal was a SyntaxError (ValueError, MemoryError)
    traceback from its loader."""
    from fairseq import checkpoint_utils

    path = old_checkpoint(tmp_path, seed=value)
    with pytest.raises(checkpoints.CheckpointError) as refused:
        checkpoint_utils.load_checkpoint_to_cpu(str(path))
    said = str(refused.value)
    assert said.startswith(f"cannot load checkpoint {path}: its args' seed '{value[:3]}")
    assert "is not a Python literal" in said and reason in said and "\n" not in said


def test_a_configuration_that_holds_itself_is_one_line(tmp_path):
    """fairseq's omegaconf raised a RecursionError traceback."""
    from fairseq import checkpoint_utils

    state = received()
    state["cfg"]["common"]["me"] = state["cfg"]["common"]
    path = tmp_path / "cycle.pt"
    torch.save(state, path)
    with pytest.raises(checkpoints.CheckpointError) as refused:
        checkpoint_utils.load_checkpoint_to_cpu(str(path))
    assert str(refused.value) == (
        f"cannot load checkpoint {path}: its configuration's containers nest too deep or hold "
        "themselves"
    )


def test_numpy_in_a_configuration_is_one_line(tmp_path):
    """fairseq-train saves numbers there, never numpy's; fairseq's loader compared a numpy record
    of train_iterator.epoch with a number (a TypeError) before the plugin restored it."""
    from fairseq import checkpoint_utils

    path = tmp_path / "configured.pt"
    torch.save({"model": {}, "cfg": {"common": {"seed": numpy.int64(1)}}}, path)
    with pytest.raises(checkpoints.CheckpointError) as refused:
        checkpoints.load_state(str(path))
    assert str(refused.value) == (
        f"cannot load checkpoint {path}: its configuration's cfg.common.seed is a numpy value, "
        "which fairseq-train never saves there"
    )
    args = argparse.Namespace(arch="transformer", task="translation")
    torch.save(received(args=args, cfg=None,
                        extra_state={"train_iterator": {"epoch": numpy.int64(1)}}), path)  # fmt: skip
    with pytest.raises(checkpoints.CheckpointError) as refused:
        checkpoint_utils.load_checkpoint_to_cpu(str(path))
    assert str(refused.value) == (
        f"cannot load checkpoint {path}: its extra_state.train_iterator.epoch is a numpy value "
        "where fairseq-train saves a plain number"
    )


@pytest.mark.slow
def test_a_run_with_eval_bleu_resumes_and_decodes(binarized_corpus, tmp_path):
    save_dir = tmp_path / "checkpoints"
    extra = ["--task", "translation_san", "--eval-bleu", "--eval-bleu-args", '{"beam": 1}']
    for updates in (2, 4):
        result = run_cli("fairseq-train", *train_argv(binarized_corpus, save_dir, updates, extra))
        assert result.returncode == 0, result.stderr[-3000:]
    assert "num_updates 4" in result.stdout + result.stderr
    decoded = fairseq_generate(binarized_corpus, save_dir / "checkpoint_last.pt")
    assert decoded.returncode == 0, decoded.stderr[-3000:]


@pytest.mark.parametrize(
    "layers, said",
    [
        (10**6, r"its configuration asks for 1000000 decoder layers, its weights hold \d+: not "
                r"a checkpoint that fairseq-train wrote \(or --model-overrides sets "
                r"decoder_layers\)"),
        ("2", r"decoder_layers '2' \(in the checkpoint\) is text, but decoder_layers takes an int"),
        (-1, "its configuration's decoder_layers -1 is no number of layers"),
    ],
)  # fmt: skip
def test_a_checkpoint_asking_for_layers_its_weights_lack_is_one_line(
    binarized_corpus, san_checkpoint, tmp_path, layers, said
):
    """fairseq builds every layer a checkpoint's configuration asks for before it reads the
    weights: a received file saying 1,000,000 decoder layers ran fairseq-generate until it was
    killed, and a count that was no number failed deep inside it. One line, before any build."""
    state = torch.load(san_checkpoint, map_location="cpu", weights_only=True)
    state["cfg"]["model"].decoder_layers = layers
    odd = tmp_path / "odd.pt"
    torch.save(state, odd)
    stderr = generate_error(binarized_corpus, odd)
    assert "Traceback" not in stderr, stderr[-3000:]
    assert re.fullmatch(
        rf"fairseq-san: error: cannot load checkpoint {re.escape(str(odd))}: {said}",
        stderr.strip().splitlines()[-1],
    )


@pytest.mark.parametrize(
    "field, value, said",
    [
        ("decoder_ffn_embed_dim", 5_000_000, "its configuration's decoder_ffn_embed_dim 5000000 "
         "is more than its weights' 64 (decoder.layers.0.fc1): not a checkpoint that "
         "fairseq-train wrote"),
        ("encoder_embed_dim", 0, "its configuration's encoder_embed_dim 0 is no width"),
        ("decoder_output_dim", -16, "its configuration's decoder_output_dim -16 is no width"),
        ("max_target_positions", 10**10, "its configuration's max_target_positions "
         "10,000,000,000 is not from 1 to 1,048,576"),
        # no layer's fc1 holds it: 6.6 GB and 25 s, then a missing weight
        ("decoder_output_dim", 5 * 10**7, "its configuration's decoder_output_dim 50000000 is "
         "more than its weights' 32 (decoder.output_projection.weight)"),
        # the model's check named --decoder-attention-heads, a flag the checkpoint was not given
        ("decoder_attention_heads", 5, "its configuration's decoder_attention_heads 5 does not "
         "divide its decoder_embed_dim 32: not a checkpoint that fairseq-train wrote"),
        ("encoder_attention_heads", 0, "its configuration's encoder_attention_heads 0 does not "
         "divide its encoder_embed_dim 32"),
    ],
)  # fmt: skip
def test_a_checkpoint_asking_for_sizes_no_memory_holds_is_one_line(
    binarized_corpus, san_checkpoint, tmp_path, field, value, said
):
    """A received file's widths and positions: fairseq builds the model before it reads the
    weights, and 5,000,000 for the FFN took 4.2 GB before the size mismatch, 10**10 positions
    asked for a 40 GB table, a width of 0 was a ZeroDivisionError deep inside fairseq."""
    refusal = changed_checkpoint_refusal(binarized_corpus, san_checkpoint, tmp_path,
                                         lambda state: setattr(state["cfg"]["model"], field, value))
    odd = tmp_path / "odd.pt"
    assert refusal.startswith(f"fairseq-san: error: cannot load checkpoint {odd}: {said}")


@pytest.mark.parametrize(
    "arch, refused", [("transformer_lm_san", True), ("transformer_san", False)]
)
def test_a_language_models_input_width_is_bounded_by_its_embeddings(arch, refused):
    """A language model's embeddings are decoder_input_dim wide (built before the weights are
    read); a translation model's are decoder_embed_dim wide, and its decoder_input_dim unread."""
    from argparse import Namespace

    state = {"model": {"decoder.embed_tokens.weight": torch.zeros(10, 8)},
             "cfg": {"model": Namespace(arch=arch, decoder_input_dim=10**6)}}  # fmt: skip
    if not refused:
        checkpoints.refuse_sizes_beyond_weights_in("c.pt", state)
        return
    with pytest.raises(checkpoints.CheckpointError) as refusal:
        checkpoints.refuse_sizes_beyond_weights_in("c.pt", state)
    assert str(refusal.value) == (
        "cannot load checkpoint c.pt: its configuration's decoder_input_dim 1000000 is more than "
        "its weights' 8 (decoder.embed_tokens.weight): not a checkpoint that fairseq-train wrote "
        "(or --model-overrides sets decoder_input_dim)"
    )


def test_a_model_of_a_package_not_installed_is_one_line(tmp_path):
    """A received checkpoint naming fairseq's ``hf_gpt2`` (the transformers package missing) was
    a traceback ending in fairseq's "Please install huggingface/transformers": one line naming
    the file, the model and the package."""
    state = {"model": {}, "cfg": {"model": argparse.Namespace(_name="hf_gpt2", arch="hf_gpt2"),
                                  "task": {"_name": "language_modeling"}}}  # fmt: skip
    path = tmp_path / "hf.pt"
    torch.save(state, path)
    error = ImportError("\n\nPlease install huggingface/transformers with:\n\n  pip install "
                        "transformers\n")  # fmt: skip
    assert checkpoints.problem_with(str(path), error) == (
        "its model 'hf_gpt2' needs a package this Python lacks: Please install "
        "huggingface/transformers with: pip install transformers"
    )


def test_sizes_that_fairseq_builds_otherwise_are_not_refused():
    """A language model gives no positions of its own (its samples' length is used), a model
    without layers has no FFN to compare, and a narrower configuration fails as fairseq says."""
    weights = {"decoder.layers.0.fc1.weight": torch.zeros(8, 4)}
    for model_cfg, task_cfg in (
        (argparse.Namespace(decoder_ffn_embed_dim=8, decoder_embed_dim=4,
                            max_target_positions=None), {"tokens_per_sample": 512}),
        (argparse.Namespace(encoder_ffn_embed_dim=10**6, encoder_layers=0), {}),
        (argparse.Namespace(decoder_ffn_embed_dim=6, max_source_positions=1024), {}),
    ):  # fmt: skip
        checkpoints.refuse_sizes_beyond_weights_in(
            "x.pt", {"model": weights, "cfg": {"model": model_cfg, "task": task_cfg}}
        )
    with pytest.raises(checkpoints.CheckpointError, match="tokens_per_sample 2,000,000 is not"):
        checkpoints.refuse_sizes_beyond_weights_in("x.pt", {
            "model": weights, "cfg": {"model": argparse.Namespace(max_target_positions=None),
                                      "task": {"tokens_per_sample": 2_000_000}}})  # fmt: skip


def test_layer_counts_that_fairseq_builds_otherwise_are_not_refused():
    """What the layer check must let through (the review of the check found the first two
    refused): fairseq's convolutional models give their layers as text; a stack trained with
    --decoder-layers-to-keep holds the kept layers beside the count it was given (a dataclass
    model, fairseq's transformer_lm, saves the count unchanged); an empty stack."""
    weights = {f"decoder.layers.{i}.w": torch.zeros(1) for i in range(2)}
    for model_cfg in (
        argparse.Namespace(arch="fconv_wmt_en_de", encoder_layers="[(512, 3)] * 9 + [(1024, 3)]",
                           decoder_layers="[(512, 3)] * 9"),  # fmt: skip
        argparse.Namespace(arch="transformer_lm", decoder_layers=4, decoder_layers_to_keep="0,1"),
        argparse.Namespace(arch="transformer", encoder_layers=0, decoder_layers=2),
    ):
        checkpoints.refuse_layers_beyond_weights_in("x.pt", {"model": weights, "args": model_cfg})
    with pytest.raises(checkpoints.CheckpointError, match="asks for 3 decoder layers, its weights "
                       "hold 2"):  # fmt: skip
        checkpoints.refuse_layers_beyond_weights_in(
            "x.pt", {"model": weights, "args": argparse.Namespace(decoder_layers=3)}
        )


def test_a_failure_is_blamed_on_an_unregistered_name_only_where_fairseq_looked_it_up(tmp_path):
    """A checkpoint naming a task nothing registered, loaded with the task given on the command
    line, failed on something else (a size mismatch): the review of the explanation found it said
    "its task ... is not one that fairseq ... registers", hiding the cause. It names the task only
    where fairseq's lookup failed; a legacy-format file naming an unregistered model is named so,
    not "truncated"."""
    state = {"model": {}, "cfg": {"model": argparse.Namespace(arch="no_such_model"),
                                  "task": {"_name": "no_such_task"}}}  # fmt: skip
    for legacy in (False, True):
        path = tmp_path / f"odd-{legacy}.pt"
        torch.save(state, path, _use_new_zipfile_serialization=not legacy)
        assert checkpoints.problem_with(str(path), RuntimeError("size mismatch for w")) is None
        assert checkpoints.problem_with(
            str(path), IndexError("Replacement index 1 out of range for positional args tuple")
        ) == "its model 'no_such_model' is not one that fairseq or a --user-dir given registers"
    state["cfg"]["model"].arch = "transformer"
    torch.save(state, tmp_path / "task.pt")
    assert checkpoints.problem_with(
        str(tmp_path / "task.pt"), AssertionError("Could not infer task type from {...}")
    ) == "its task 'no_such_task' is not one that fairseq or a --user-dir given registers"


def set_model_option(name: str, value):
    def change(state: dict) -> None:
        setattr(state["cfg"]["model"], name, value)

    return change


def set_weight(name, value):
    def change(state: dict) -> None:
        state["model"][name] = value

    return change


def set_field(name: str, value):
    def change(state: dict) -> None:
        state[name] = value

    return change


def unset_model_configuration(state: dict) -> None:
    state["cfg"]["model"] = None


def name_an_option_by_a_number(state: dict) -> None:
    vars(state["cfg"]["model"])[1] = "x"


def fill_with_nan(name: str):
    def change(state: dict) -> None:
        state["model"][name].fill_(float("nan"))

    return change


def make_weight(name: str, kind: str):
    """A change making weight ``name`` a tensor of ``kind`` (sparse, meta, bool, complex)."""

    def change(state: dict) -> None:
        weight = state["model"][name]
        state["model"][name] = {
            "sparse": weight.to_sparse, "meta": lambda: torch.empty(weight.shape, device="meta"),
            "bool": lambda: weight > 0, "complex": lambda: weight.to(torch.complex64),
        }[kind]()  # fmt: skip

    return change


FC1 = "encoder.layers.0.fc1.weight"


@pytest.mark.parametrize(
    "change, said",
    [
        (set_field("cfg", [1, 2]), "its 'cfg' is a list, not what fairseq-train saves there"),
        (set_field("cfg", None), "it holds no configuration ('cfg' and 'args' are None)"),
        (set_field("model", [1]), "its 'model' is a list, not what fairseq-train saves there"),
        # each a traceback inside fairseq or the checks after loading
        (set_field("model", None), "its 'model' is None, not what fairseq-train saves there"),
        (unset_model_configuration, "it holds no model configuration (its cfg.model is None)"),
        (name_an_option_by_a_number, "its cfg.model holds an option named 1, which is no text"),
        (set_model_option("arch", 123), "its model configuration's arch 123 is no name"),
        (make_weight(FC1, "sparse"), f"its weight {FC1} is a sparse_coo tensor; fairseq-train "
         "saves dense floating-point weights"),
        (make_weight(FC1, "meta"), f"its weight {FC1} is a meta tensor, which holds no values"),
        # decoded with 0/1 weights, without a word
        (make_weight(FC1, "bool"), f"its weight {FC1} is a tensor of bool; fairseq-train saves"),
        (make_weight(FC1, "complex"), f"its weight {FC1} is a tensor of complex numbers "
         "(complex64)"),
        # a training that diverged: fairseq's beam search failed on "assert 4 < 4"
        (fill_with_nan(FC1), f"its weight {FC1} holds NaN or infinite values (the training "
         "diverged before saving it): take an earlier checkpoint"),
        (set_field("optimizer_history", "x"),
         "its 'optimizer_history' is a str, not what fairseq-train saves there"),
        (set_model_option("_name", "no_such_model"),
         "its model 'no_such_model' is not one that fairseq or a --user-dir given registers"),
        (set_model_option("dropout", "abc"),
         "dropout 'abc' (in the checkpoint) is text, but dropout takes a number"),
        (set_model_option("activation_fn", "sigmoidal"),
         "activation_fn 'sigmoidal' (in the checkpoint) is not one of relu, gelu"),
        (set_model_option("encoder_embed_dim", 16.0),
         "encoder_embed_dim 16.0 (in the checkpoint) is of type float, but encoder_embed_dim "
         "takes an int"),
        (set_model_option("dropout", [0.1]),
         "dropout [0.1] (in the checkpoint) is of type list, but dropout takes a number"),
        (set_model_option("decoder_attention_heads", None),
         "decoder_attention_heads None (in the checkpoint) is no value, but transformer_san sets "
         "one (8 where no option is given)"),
        (set_weight("decoder.embed_tokens.weight", 5),
         "its weights hold 'decoder.embed_tokens.weight', a int; fairseq-train saves tensors "
         "named by text"),
        (set_weight(7, torch.zeros(1)), "its weights hold 7, a Tensor; fairseq-train saves"),
    ],
)  # fmt: skip
def test_a_checkpoint_whose_fields_fairseq_train_would_not_save_is_one_line(
    binarized_corpus, san_checkpoint, tmp_path, change, said
):
    """A received file whose configuration or weights are of other types, name a model nothing
    registered, or hold a value the model's option would not take: tracebacks from inside fairseq
    (omegaconf's KeyValidationError, "Neither args nor cfg exist", IndexError on formatting
    "Could not infer model type") or from the model's first forward (dropout "abc")."""
    refusal = changed_checkpoint_refusal(binarized_corpus, san_checkpoint, tmp_path, change)
    odd = tmp_path / "odd.pt"
    assert refusal.startswith(f"fairseq-san: error: cannot load checkpoint {odd}: {said}")


@pytest.mark.parametrize(
    "arch", ["transformer_san_small", "transformer_aan_small", "transformer_lm_san"]
)
def test_a_stored_none_is_refused_where_the_architecture_sets_a_value(arch):
    """``decoder_layers`` None in a received checkpoint was a TypeError in the model's
    constructor (``decoder_attention_heads``, ``*_embed_dim``, ``quant_noise_pq``, ... likewise),
    for a language model too; an option its architecture leaves None is the model's to read."""
    from fairseq_san.models.option_checks import architecture_defaults

    model = architecture_defaults(arch)
    model.arch = arch
    state = {"model": {}, "cfg": {"model": model}}
    model.adaptive_softmax_cutoff = None  # the architecture leaves it unset: optional
    checkpoints.refuse_stored_values_in("x.pt", state)
    model.decoder_layers = None
    with pytest.raises(checkpoints.CheckpointError) as refused:
        checkpoints.refuse_stored_values_in("x.pt", state)
    assert str(refused.value) == (
        f"cannot load checkpoint x.pt: decoder_layers None (in the checkpoint) is no value, but "
        f"{arch} sets one (6 where no option is given)"
    )


def test_a_language_models_stored_values_are_checked_as_its_architecture_sets_them():
    """A language model's stored values other than text went unchecked (fairseq's dataclass
    stores ``base_shuffle`` False for an option its parser declares an int): ``decoder_layers``
    2.0 was a TypeError in its constructor. A value of the type its architecture sets passes."""
    from fairseq_san.models.option_checks import architecture_defaults

    model = architecture_defaults("transformer_lm_san")
    model.arch = "transformer_lm_san"
    state = {"model": {}, "cfg": {"model": model}}
    assert model.base_shuffle is False
    checkpoints.refuse_stored_values_in("lm.pt", state)
    model.decoder_layers = 2.0
    with pytest.raises(checkpoints.CheckpointError) as refused:
        checkpoints.refuse_stored_values_in("lm.pt", state)
    assert str(refused.value) == (
        "cannot load checkpoint lm.pt: decoder_layers 2.0 (in the checkpoint) is of type float, "
        "but decoder_layers takes an int"
    )


def test_whole_number_buffers_load_and_whole_number_weights_do_not(san_checkpoint):
    """fairseq's adaptive softmax keeps an int64 ``version`` buffer: every checkpoint trained
    with --adaptive-softmax-cutoff was refused as holding a weight of int64."""
    state = torch.load(san_checkpoint, map_location="cpu", weights_only=True)
    state["model"]["decoder.adaptive_softmax.version"] = torch.LongTensor([1])
    checkpoints.refuse_weights_that_are_not_in("c.pt", state)
    state["model"]["decoder.layers.0.fc1.weight"] = torch.ones(2, 2, dtype=torch.int64)
    with pytest.raises(checkpoints.CheckpointError, match="fc1.weight is a tensor of int64"):
        checkpoints.refuse_weights_that_are_not_in("c.pt", state)


def test_a_stored_model_name_that_is_no_text_names_no_plugin_model():
    """``arch`` ['transformer_san'] in a received checkpoint: an unhashable-type TypeError where
    the checks looked the name up (fairseq builds the model its ``_name`` names)."""
    from fairseq_san.fairseq_fixes.model_overrides import plugin_model_class

    assert plugin_model_class(argparse.Namespace(arch=["transformer_san"])) is None
    assert plugin_model_class(argparse.Namespace(arch="transformer_san")) is not None


class WritesAFile:
    """Unpickled, it opens ``path`` for writing: what a checkpoint that runs code would do."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))


@pytest.fixture
def code_in_a_pickle(tmp_path):
    """(a torch.save file that runs code when unpickled, the file that code creates)."""
    marker = tmp_path / "ran"
    path = tmp_path / "evil.pt"
    torch.save({"model": {}, "payload": WritesAFile(marker)}, path)
    return path, marker


SWITCHED_OFF = (
    f"{UNSAFE_VARIABLE} is set: it switches torch's safe loader off, so a checkpoint could run "
    "code as it is read; fairseq-san reads checkpoints only with the safe loader (unset the "
    "variable)"
)


@pytest.mark.parametrize("value", ["1", "true", "TRUE", "Yes"])  # torch lower-cases it
def test_nothing_is_read_with_the_safe_loader_switched_off(monkeypatch, code_in_a_pickle, value):
    """fairseq calls torch.load without weights_only, which the variable turns into pickle; so
    does its EMA loader (fairseq-train --store-ema --ema-seed-model FILE), which ran the code."""
    from fairseq import checkpoint_utils

    path, marker = code_in_a_pickle
    loaders = (checkpoint_utils.load_checkpoint_to_cpu, checkpoint_utils.load_ema_from_checkpoint)
    monkeypatch.setenv(UNSAFE_VARIABLE, value)
    for load in (*loaders, checkpoints.load_state):
        with pytest.raises(checkpoints.CheckpointError) as refused:
            load(str(path))
        assert str(refused.value) == SWITCHED_OFF
    assert not marker.exists()
    monkeypatch.delenv(UNSAFE_VARIABLE)
    for load in loaders:
        with pytest.raises(checkpoints.CheckpointError, match="which torch's safe loader"):
            load(str(path))  # the safe loader refuses it
    assert not marker.exists()


def test_nothing_is_read_with_a_torch_whose_loader_is_not_safe_by_default(
    monkeypatch, code_in_a_pickle
):
    from fairseq import checkpoint_utils

    path, marker = code_in_a_pickle
    monkeypatch.setattr(torch, "__version__", "2.5.1+cpu")
    with pytest.raises(checkpoints.CheckpointError) as refused:
        checkpoint_utils.load_checkpoint_to_cpu(str(path))
    assert str(refused.value) == (
        "torch 2.5.1+cpu reads checkpoints with pickle by default, so a checkpoint could run code "
        "as it is read; fairseq-san needs torch >= 2.6, whose loader is safe by default"
    )
    assert not marker.exists()


@pytest.mark.slow
def test_generate_with_the_safe_loader_switched_off_is_one_line(
    monkeypatch, binarized_corpus, code_in_a_pickle
):
    path, marker = code_in_a_pickle
    monkeypatch.setenv(UNSAFE_VARIABLE, "1")
    assert_one_line(generate_error(binarized_corpus, path), f"fairseq-san: error: {SWITCHED_OFF}")
    assert not marker.exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    "size, problem",
    [
        (0, "the file is empty (0 bytes; was saving it interrupted?)"),
        (4096, "the file is not a complete torch.save archive (truncated, or not a checkpoint)"),
    ],
    ids=["empty", "truncated"],
)
def test_empty_or_truncated_checkpoint_is_one_line_naming_it(
    binarized_corpus, trained, tmp_path, size, problem
):
    broken = tmp_path / "broken.pt"
    broken.write_bytes(trained["san"].read_bytes()[:size])
    expected = f"cannot load checkpoint {broken}: {problem}"
    assert_one_line(generate_error(binarized_corpus, broken), f"fairseq-san: error: {expected}")
    with pytest.raises(checkpoints.CheckpointError) as error:  # our own commands' loader
        checkpoints.load_state(str(broken))
    assert str(error.value) == expected


def damaged_pickle(path) -> None:
    """A torch.save archive of a checkpoint-shaped dict whose pickle is overwritten with zeros."""
    buffer = io.BytesIO()
    torch.save({"model": {}, "cfg": {}}, buffer)
    source = zipfile.ZipFile(io.BytesIO(buffer.getvalue()))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for entry in source.infolist():
            data = source.read(entry)
            damaged = entry.filename.endswith("data.pkl")
            archive.writestr(entry, bytes(len(data)) if damaged else data)


@pytest.mark.parametrize(
    "content, problem",
    [
        ("state dict", "it holds a dict (keys: decoder.w, encoder.w), not a fairseq checkpoint: a "
                       "dict with 'model' and 'cfg' (a model's state dict alone is not one; "
                       "fairseq-train saves checkpoints)"),
        ("list", "it holds a list, not a fairseq checkpoint"),
        ("other zip", "the file is not a readable torch.save archive ("),
        ("damaged pickle", "its pickle cannot be read: the archive is damaged, or torch.save did "
                           "not write it"),
    ],
)  # fmt: skip
def test_a_file_that_is_not_a_fairseq_checkpoint_is_one_line_naming_it(tmp_path, content, problem):
    """fairseq's loader failed with KeyError: 'best_loss' (a state dict), a TypeError (a list),
    torch's RuntimeError or UnpicklingError (an archive torch cannot read)."""
    from fairseq import checkpoint_utils

    path = tmp_path / "file.pt"
    if content == "state dict":
        torch.save({"encoder.w": torch.zeros(1), "decoder.w": torch.zeros(1)}, path)
    elif content == "list":
        torch.save([torch.zeros(1)], path)
    elif content == "other zip":
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("notes.txt", "not a checkpoint")
    else:
        damaged_pickle(path)
    with pytest.raises(checkpoints.CheckpointError) as error:
        checkpoint_utils.load_checkpoint_to_cpu(str(path))
    assert str(error.value).startswith(f"cannot load checkpoint {path}: {problem}"), error.value


@pytest.mark.slow
def test_san_checkpoint_without_the_plugin_gives_the_documented_error(binarized_corpus, trained):
    """fairseq alone cannot know the plugin; the troubleshooting guide explains its error."""
    result = run_cli(
        "fairseq-generate", str(binarized_corpus), "--path", str(trained["san"]),
        "--beam", "2", "--batch-size", "8", "--cpu",
    )  # fmt: skip
    assert result.returncode != 0
    message = "Unsupported global: GLOBAL argparse.Namespace"
    assert message in result.stderr
    assert message in (REPO / "docs" / "troubleshooting.md").read_text()


@pytest.mark.slow
@pytest.mark.parametrize(
    "kind, problem",
    [
        ("missing", "no such file"),
        ("directory", "it is a directory; a checkpoint is a file (for example "
                      "DIR/checkpoint_best.pt)"),
    ],
)  # fmt: skip
def test_a_path_that_is_missing_or_a_directory_is_one_line_naming_it(
    binarized_corpus, tmp_path, kind, problem
):
    path = tmp_path / ("missing.pt" if kind == "missing" else "checkpoints")
    if kind == "directory":
        path.mkdir()
    expected = f"fairseq-san: error: cannot load checkpoint {path}: {problem}"
    assert_one_line(generate_error(binarized_corpus, path), expected)


def test_a_checkpoint_records_the_dictionaries_of_the_first_data_folder():
    """fairseq's DATA1:DATA2 reads the dictionaries in DATA1: a checkpoint records their files
    there (a mismatch names them), not in a folder named 'DATA1:DATA2'."""
    from types import SimpleNamespace

    from fairseq.data import Dictionary

    from fairseq_san.fairseq_fixes.dictionary_words import dictionaries_record

    task = SimpleNamespace(
        cfg=SimpleNamespace(data=os.pathsep.join(["first", "second"]), source_lang="de",
                            target_lang="en"),
        source_dictionary=Dictionary(), target_dictionary=Dictionary(),
    )  # fmt: skip
    record = dictionaries_record(task)
    assert [record[side]["file"] for side in ("source", "target")] == [
        os.path.join("first", "dict.de.txt"), os.path.join("first", "dict.en.txt")
    ]


def test_a_checkpoint_of_other_dictionaries_is_named_by_fairseqs_loader(tmp_path):
    """The model that refuses the embeddings' sizes does not know its file; the loader names it."""
    from fairseq_san.fairseq_fixes.safe_loading import _explaining_ensemble
    from fairseq_san.checkpoints import VocabularyMismatch

    def refusing(filenames, *args, **kwargs):  # fairseq's loader, as the model leaves it
        raise VocabularyMismatch("the checkpoint was trained with other dictionaries")

    path = str(tmp_path / "checkpoint_best.pt")
    with pytest.raises(VocabularyMismatch) as error:
        _explaining_ensemble(refusing)([path])
    assert str(error.value) == f"checkpoint {path}: the checkpoint was trained with other dictionaries"


def planted_checkpoint(source: Path, target: Path, group: str, **values) -> Path:
    """``source`` saved as ``target`` with options of its ``group`` configuration ("model",
    "task") set to ``values``: what a checkpoint from elsewhere may store."""
    state = torch.load(source, map_location="cpu", weights_only=True)
    for name, value in values.items():
        checkpoints.set_stored_value(state, group, name, value)
    torch.save(state, target)
    return target


@pytest.mark.slow
def test_a_checkpoint_naming_a_policy_file_is_refused_and_the_command_line_may(
    san_checkpoint, tmp_path
):
    """A checkpoint stores its policy as JSON text; one that names a file would make loading read
    it (its first key would show in the error). Only the command line may name a file."""
    from fairseq import checkpoint_utils

    secret = tmp_path / "secret.json"
    secret.write_text('{"the-secret": 1}')
    naming = planted_checkpoint(san_checkpoint, tmp_path / "naming.pt", "model",
                                san_policy=str(secret))  # fmt: skip
    with pytest.raises(checkpoints.CheckpointError) as refused:
        checkpoint_utils.load_checkpoint_to_cpu(str(naming))
    assert str(refused.value) == (
        f"checkpoint {naming}: cfg.model.san_policy = {str(secret)[:40]!r} is a file name; a "
        "checkpoint stores its policy as JSON text, and only the command line may name a policy "
        "file: refused"
    )
    assert "the-secret" not in str(refused.value)
    policy = tmp_path / "policy.json"
    policy.write_text('{"decoder_self": [6]}')
    loaded = checkpoint_utils.load_checkpoint_to_cpu(str(naming), {"san_policy": str(policy)})
    assert loaded["cfg"]["model"].san_policy == str(policy)
    stored = checkpoint_utils.load_checkpoint_to_cpu(str(san_checkpoint))["cfg"]["model"]
    assert stored.san_policy.lstrip().startswith("{")  # what the plugin itself stores


@pytest.mark.slow
@pytest.mark.parametrize("name, stored", [("eval_bleu_args", "{not json"),
                                          ("eval_bleu_detok_args", "[1]")])  # fmt: skip
def test_a_checkpoint_validating_bleu_with_options_that_are_no_json_is_refused(
    san_checkpoint, tmp_path, name, stored
):
    """fairseq's translation task reads a checkpoint's --eval-bleu options with json.loads where
    fairseq-validate and the hub build its model: a JSONDecodeError or TypeError traceback."""
    from fairseq import checkpoint_utils

    storing = planted_checkpoint(san_checkpoint, tmp_path / "storing.pt", "task",
                                 eval_bleu=True, **{name: stored})  # fmt: skip
    with pytest.raises(checkpoints.CheckpointError) as refused:
        checkpoint_utils.load_checkpoint_to_cpu(str(storing))
    said = str(refused.value)
    assert said.startswith(f"checkpoint {storing}: cfg.task.{name} {stored!r}"), said
    assert said.endswith("refused (load it with --model-overrides \"{'eval_bleu': False}\")")
    loaded = checkpoint_utils.load_checkpoint_to_cpu(str(storing), {"eval_bleu": False})
    assert loaded["cfg"]["task"].eval_bleu is False


@pytest.mark.slow
def test_a_checkpoint_validating_bleu_with_a_misspelt_option_is_refused_where_it_decodes_bleu(
    binarized_corpus, san_checkpoint, tmp_path
):
    """fairseq sets each key of a checkpoint's ``eval_bleu_args`` unchecked: ``{"bema": 2}``
    (saved before fairseq-train checked them, or edited) made fairseq-validate report BLEU at
    beam 1. It is refused there; the override replaces it, and fairseq-generate, which never
    decodes with it, loads the checkpoint."""
    storing = planted_checkpoint(san_checkpoint, tmp_path / "storing.pt", "task",
                                 eval_bleu=True, eval_bleu_args='{"bema": 2}')  # fmt: skip
    validate = ["fairseq-validate", str(binarized_corpus), "--user-dir", "fairseq_san",
                "--task", "translation_san", "--path", str(storing), "--cpu", "--max-tokens", "500"]
    refused = run_cli(*validate)
    assert refused.returncode != 0 and refused.stderr.strip().splitlines()[-1] == (
        "fairseq-san: error: unknown generation option 'bema' (cfg.task.eval_bleu_args of the "
        "checkpoint, which fairseq-validate decodes BLEU with): did you mean 'beam'? "
        "(--model-overrides \"{'eval_bleu_args': '{\\\"beam\\\": 4}'}\" replaces them)"
    )
    replaced = run_cli(*validate, "--model-overrides", "{'eval_bleu_args': '{\"beam\": 2}'}")
    assert replaced.returncode == 0, replaced.stderr[-3000:]
    assert re.search(r"\| bleu \d", replaced.stdout + replaced.stderr)
    decoded = fairseq_generate(binarized_corpus, storing)
    assert decoded.returncode == 0, decoded.stderr[-3000:]


@pytest.mark.slow
def test_a_checkpoint_storing_an_analysis_folder_is_refused_and_the_command_line_may(
    binarized_corpus, san_checkpoint, tmp_path, monkeypatch
):
    """fairseq-validate and the hub build the task from the checkpoint's configuration: a stored
    ``san_analysis_dir`` (training refuses the option) made them create that folder and write the
    analysis into it, with no flag given."""
    from fairseq import checkpoint_utils

    from fairseq_san.fairseq_fixes.model_overrides import TASK_FROM_COMMAND_LINE

    for module in TASK_FROM_COMMAND_LINE:  # this process loads as fairseq-validate does
        monkeypatch.delitem(sys.modules, module, raising=False)

    planted = tmp_path / "planted" / "by" / "checkpoint"
    storing = planted_checkpoint(san_checkpoint, tmp_path / "storing.pt", "task",
                                 san_analysis_dir=str(planted))  # fmt: skip
    said = (
        f"checkpoint {storing}: cfg.task.san_analysis_dir = {str(planted)[:60]!r} names a folder "
        "to write to, which only the command line may name: refused (load it with "
        "--san-analysis-dir DIR, or with --model-overrides \"{'san_analysis_dir': None}\" to "
        "analyse nothing)"
    )
    with pytest.raises(checkpoints.CheckpointError, match=re.escape(said)):
        checkpoint_utils.load_checkpoint_to_cpu(str(storing))
    result = run_cli("fairseq-validate", str(binarized_corpus), "--user-dir", "fairseq_san",
                     "--task", "translation_san", "--path", str(storing), "--cpu",
                     "--max-tokens", "500")  # fmt: skip
    assert result.returncode != 0 and result.stderr.strip().splitlines()[-1] == (
        f"fairseq-san: error: {said}")  # fmt: skip
    assert not (tmp_path / "planted").exists()
    chosen = tmp_path / "chosen"
    loaded = checkpoint_utils.load_checkpoint_to_cpu(str(storing), {"san_analysis_dir": str(chosen)})
    assert loaded["cfg"]["task"].san_analysis_dir == str(chosen)
    cleared = checkpoint_utils.load_checkpoint_to_cpu(str(storing), {"san_analysis_dir": None})
    assert cleared["cfg"]["task"].san_analysis_dir is None


@pytest.mark.slow
def test_the_embedding_files_a_checkpoint_names_are_not_read(binarized_corpus, san_checkpoint,
                                                             tmp_path):  # fmt: skip
    """fairseq's build read the ``--encoder-embed-path`` a checkpoint stores, whose weights then
    replaced what it read: a pipe hung fairseq-generate, a folder was a traceback. The stored
    names are unset; a name the user gives is theirs."""
    from fairseq import checkpoint_utils

    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    naming = planted_checkpoint(san_checkpoint, tmp_path / "naming.pt", "model",
                                encoder_embed_path=str(pipe), decoder_embed_path=str(tmp_path))
    loaded = checkpoint_utils.load_checkpoint_to_cpu(str(naming))["cfg"]["model"]
    assert (loaded.encoder_embed_path, loaded.decoder_embed_path) == (None, None)
    given = checkpoint_utils.load_checkpoint_to_cpu(str(naming), {"encoder_embed_path": "e.txt"})
    assert given["cfg"]["model"].encoder_embed_path == "e.txt"
    outputs = []
    for path in (san_checkpoint, naming):
        result = run_cli("fairseq-generate", str(binarized_corpus), "--user-dir", "fairseq_san",
                         "--path", str(path), "--cpu", "--beam", "2", "--max-len-b", "5",
                         timeout=120)  # fmt: skip
        assert result.returncode == 0, result.stderr[-2000:]
        outputs.append(sorted(line for line in result.stdout.splitlines() if line[:2] == "H-"))
    assert outputs[0] == outputs[1] and outputs[0]


@pytest.mark.parametrize(
    "field,value",
    [("source_lang", "${nope.key}"), ("data", "${oc.env:HOME}"), ("data", "${broken")],
    ids=["missing key", "environment", "unparsable"],
)  # fmt: skip
def test_an_interpolation_in_a_checkpoints_configuration_is_refused(san_checkpoint, tmp_path,
                                                                    field, value):  # fmt: skip
    """fairseq saves its configuration resolved; an interpolation resolved as the checkpoint
    loaded failed deep in omegaconf (InterpolationKeyError) or read the environment."""
    from fairseq import checkpoint_utils

    planted = planted_checkpoint(san_checkpoint, tmp_path / "planted.pt", "task", **{field: value})
    with pytest.raises(checkpoints.CheckpointError) as refused:
        checkpoint_utils.load_checkpoint_to_cpu(str(planted))
    assert str(refused.value) == (
        f"cannot load checkpoint {planted}: its configuration's task.{field} is an omegaconf "
        "interpolation (${...}), which fairseq resolves before it saves one: not a configuration "
        "fairseq wrote"
    )


# The refusal of an override holding "${", named: it was refused as the checkpoint's own.
INTERPOLATED_OVERRIDE = (
    "{said} (from --model-overrides or a keyword argument) holds '${{', which fairseq's "
    "configuration reads as an omegaconf interpolation (and its checkpoints would keep as one): "
    "give it without '${{'"
)


@pytest.mark.parametrize(
    "overrides, said",
    [({"save_dir": "a${x}"}, "save_dir='a${x}'"), ({"save_dir": "a${x"}, "save_dir='a${x'"),
     ({"results_path": "${oc.env:HOME}"}, "results_path='${oc.env:HOME}'"),
     ({"task": {"_name": "translation_san", "data": "${oc.env:HOME}"}},
      "task.data='${oc.env:HOME}'")],
)  # fmt: skip
def test_an_override_holding_an_interpolation_is_named(san_checkpoint, overrides, said):
    """``--model-overrides`` (and the hub's keywords, which fairseq passes as overrides) holding
    ``${`` was refused as the checkpoint's own interpolation, "not a configuration fairseq
    wrote": the override is named, with the command line's refusal."""
    from fairseq import checkpoint_utils

    with pytest.raises(fairseq_san.errors.UsageError) as refused:
        checkpoint_utils.load_checkpoint_to_cpu(str(san_checkpoint), overrides)
    assert str(refused.value) == INTERPOLATED_OVERRIDE.format(said=said)


@pytest.mark.parametrize("text", ["$x", "a$"])
def test_an_override_with_a_dollar_not_before_a_brace_is_kept(san_checkpoint, text):
    from fairseq import checkpoint_utils

    state = checkpoint_utils.load_checkpoint_to_cpu(str(san_checkpoint), {"save_dir": text})
    assert state["cfg"].checkpoint.save_dir == text


def test_a_foreign_global_in_torchs_legacy_format_is_named(tmp_path):
    """torch.save(..., _use_new_zipfile_serialization=False), as old fairseq checkpoints are: the
    global is named, not "truncated" (the archive check is for zip files only)."""
    from fairseq import checkpoint_utils

    legacy = tmp_path / "legacy.pt"
    torch.save({"model": {}, "best": fractions.Fraction(1, 3)}, legacy,
               _use_new_zipfile_serialization=False)  # fmt: skip
    with pytest.raises(checkpoints.CheckpointError) as refused:
        checkpoint_utils.load_checkpoint_to_cpu(str(legacy))
    assert re.fullmatch(
        rf"cannot load checkpoint {re.escape(str(legacy))}: it contains fractions\.Fraction, which "
        r"torch's safe loader \(weights_only\) refuses; .*",
        str(refused.value),
    )


class MakesADirectory:
    """Unpickled, it calls os.mkdir (posix.mkdir: a module torch's safe loader blocks)."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return (os.mkdir, (str(self.path),))


def test_code_in_torchs_legacy_format_is_named_not_blamed_on_a_truncation(tmp_path):
    """A legacy-format checkpoint whose pickle calls os.mkdir: refused, nothing made, and the
    global named (torch 2.13 words a blocked module's global as "unsupported GLOBAL posix.mkdir
    whose module posix is blocked", which was said as a truncated file)."""
    from fairseq import checkpoint_utils

    marker = tmp_path / "ran"
    legacy = tmp_path / "legacy.pt"
    torch.save({"model": {}, "payload": MakesADirectory(marker)}, legacy,
               _use_new_zipfile_serialization=False)  # fmt: skip
    with pytest.raises(checkpoints.CheckpointError) as refused:
        checkpoint_utils.load_checkpoint_to_cpu(str(legacy))
    assert not marker.exists()
    assert re.fullmatch(
        rf"cannot load checkpoint {re.escape(str(legacy))}: it contains \w+\.mkdir, which "
        r"torch's safe loader \(weights_only\) refuses; .*",
        str(refused.value),
    )


@pytest.mark.parametrize("protocol", [2, pickle.DEFAULT_PROTOCOL])
def test_a_plain_pickle_is_named_one_not_blamed_on_a_truncation(tmp_path, protocol, recwarn):
    """A file of ``pickle.dump`` given as a checkpoint, at protocol 2 (torch.save's) and at
    Python's default, whose framing torch cannot read (a crafted one calls os.mkdir: its global
    is not named): nothing made, and said as a plain pickle, not as a truncated archive; without
    torch's two lines of warning of another protocol before it."""
    from fairseq import checkpoint_utils

    marker = tmp_path / "ran"
    plain = tmp_path / "plain.pkl"
    payload = MakesADirectory(marker) if protocol > 2 else 1  # at 2 torch names the global
    plain.write_bytes(pickle.dumps({"model": {}, "x": payload}, protocol))
    with pytest.raises(checkpoints.CheckpointError) as refused:
        checkpoint_utils.load_checkpoint_to_cpu(str(plain))
    assert not marker.exists()
    assert str(refused.value) == (
        f"cannot load checkpoint {plain}: it is a plain pickle (protocol {protocol}), not a "
        "torch.save archive: fairseq-san reads checkpoints only with torch's safe loader, which "
        "refuses it (a plain pickle can run code as it is read)"
    )
    assert not [w for w in recwarn if "pickle protocol" in str(w.message)]


def test_torch_saves_legacy_format_past_the_safe_loaders_protocol_is_named(tmp_path):
    """A legacy torch.save at pickle protocol 4 (framed, which the safe loader refuses) was "not
    a complete torch.save archive (truncated, or not a checkpoint)"."""
    from fairseq import checkpoint_utils

    legacy = tmp_path / "legacy.pt"
    torch.save({"model": {}}, legacy, _use_new_zipfile_serialization=False, pickle_protocol=4)
    with pytest.raises(checkpoints.CheckpointError) as refused:
        checkpoint_utils.load_checkpoint_to_cpu(str(legacy))
    assert str(refused.value) == (
        f"cannot load checkpoint {legacy}: it is torch.save's legacy format pickled at protocol "
        "4, which torch's safe loader does not read (it reads that format up to protocol 3): "
        "save it again with torch.save's default format"
    )


@pytest.mark.parametrize("text", ["hello 12\nworld 7\n", '{"decoder_self": [1, 5]}'])
def test_a_text_file_given_as_a_checkpoint_is_named_one(tmp_path, text):
    """A dictionary or a policy given as ``--path``: said as a text file, not as a truncated
    archive."""
    from fairseq import checkpoint_utils

    given = tmp_path / "given.txt"
    given.write_text(text)
    with pytest.raises(checkpoints.CheckpointError) as refused:
        checkpoint_utils.load_checkpoint_to_cpu(str(given))
    assert str(refused.value) == (
        f"cannot load checkpoint {given}: it is a text file, not a torch.save archive (a "
        "checkpoint is a checkpoint*.pt that fairseq-train wrote)"
    )


def test_an_error_after_a_legacy_format_checkpoint_loaded_is_not_blamed_on_the_file(tmp_path):
    """Any failure while a checkpoint in torch's legacy format was in use (a model that cannot
    take its weights, say) was said as "the file is not a complete torch.save archive
    (truncated ...)": the file is read again first, and only a file that does not read is."""
    legacy = tmp_path / "legacy.pt"
    stored = {"model": {}, "cfg": {"model": {"_name": "transformer_san"}}}
    torch.save(stored, legacy, _use_new_zipfile_serialization=False)
    with pytest.raises(RuntimeError, match="size mismatch"):
        with checkpoints.explained(str(legacy)):
            raise RuntimeError("size mismatch for decoder.embed_tokens.weight")
    legacy.write_bytes(legacy.read_bytes()[:40])  # truncated: that is the cause
    with pytest.raises(checkpoints.CheckpointError, match="not a complete torch.save archive"):
        with checkpoints.explained(str(legacy)):
            raise RuntimeError("unexpected EOF")


def test_model_overrides_that_are_not_a_dict_are_one_line(code_in_a_pickle):
    """fairseq-generate passes --model-overrides "[1, 2]" on as it is; fairseq's loader then failed
    on its .items(). The plugin refuses it before reading the file."""
    from fairseq import checkpoint_utils

    path, marker = code_in_a_pickle
    with pytest.raises(checkpoints.UsageError, match=r"^--model-overrides \[1, 2\]: must be a dict"):
        checkpoint_utils.load_checkpoint_to_cpu(str(path), [1, 2])
    assert not marker.exists()


def test_installing_the_fixes_again_wraps_nothing_twice():
    """fairseq_fixes.install runs whenever the plugin registers; each fix wraps fairseq once, also
    a function that two fixes wrap (Sampling.step)."""
    from fairseq import checkpoint_utils, options
    from fairseq.data import data_utils
    from fairseq.search import PrefixConstrainedBeamSearch, Sampling
    from fairseq.tasks.language_modeling import LanguageModelingTask

    from fairseq_san import fairseq_fixes

    def wrapped_now():
        return [checkpoint_utils.load_checkpoint_to_cpu,
                checkpoint_utils.load_model_ensemble_and_task, checkpoint_utils.load_checkpoint,
                data_utils.batch_by_size, options.parse_args_and_arch,
                LanguageModelingTask.__init__, PrefixConstrainedBeamSearch.step,
                Sampling.step]  # fmt: skip

    fairseq_fixes.install()  # what a command imported since the plugin registered adds
    wrapped = wrapped_now()
    assert all(getattr(function, "wrapped_by", None) for function in wrapped)
    fairseq_fixes.install()
    fairseq_fixes.install()
    assert wrapped_now() == wrapped


def test_a_checkpoint_given_through_a_pipe_is_one_line_naming_it(tmp_path):
    """``--path <(zcat checkpoint.pt.gz)``: fairseq's loader failed on a file it cannot seek in,
    and the error said the file was empty (a pipe's size is 0); the plugin's own loader read the
    pipe to look for a zip archive and then waited for another writer to open it again."""
    pipe = tmp_path / "checkpoint.pt"
    os.mkfifo(pipe)
    expected = f"cannot load checkpoint {pipe}: {checkpoints.NOT_A_FILE}"
    assert checkpoints.NOT_A_FILE.startswith("it is no regular file (a pipe or a device)")
    from fairseq import checkpoint_utils

    # nothing writes the pipe: a read would wait forever (fairseq's loaders waited too)
    for load in (checkpoints.load_state, checkpoint_utils.load_checkpoint_to_cpu,
                 checkpoint_utils.load_ema_from_checkpoint):  # fmt: skip
        with pytest.raises(checkpoints.CheckpointError) as refused:
            load(str(pipe))
        assert str(refused.value) == expected
    assert checkpoints.problem_with(str(pipe), RuntimeError("not seekable")) == (
        checkpoints.NOT_A_FILE
    )


@pytest.mark.slow
def test_a_policy_override_decodes_an_ensemble_of_a_shared_and_a_fairseq_model(trained):
    """fairseq gives --model-overrides to every model of an ensemble (--path A.pt:B.pt): the
    plugin's model shares as the policy says, fairseq's beside it reads none; it was refused."""
    from fairseq import checkpoint_utils

    from fairseq_san.errors import UsageError

    overrides = {"san_policy": '{"decoder_self": [6]}'}
    paths = [str(trained["san"]), str(trained["fairseq"])]
    models, _, _ = checkpoint_utils.load_model_ensemble_and_task(paths, arg_overrides=overrides)
    assert [type(model).__name__ for model in models] == ["TransformerSANModel", "TransformerModel"]
    assert "decoder.layers.5.self_attn.k_proj.weight" not in models[0].state_dict()
    with pytest.raises(UsageError, match=r"^san_policy=.* \(transformer\) is none of the plugin"):
        checkpoint_utils.load_model_ensemble_and_task(paths[1:] * 2, arg_overrides=overrides)


def test_a_weight_beyond_float16s_range_is_refused_by_half():
    """``--fp16`` (fairseq's ``model.half()``) made a weight above 65504 infinite: every
    translation then failed inside fairseq's beam search (``AssertionError: 12 < 12``)."""
    from fairseq_san.checkpoints import refuse_beyond_float16
    from fairseq_san.errors import UsageError

    model, _ = build()
    with torch.no_grad():
        model.decoder.layers[0].fc1.bias[0] = 1e6
    with pytest.raises(UsageError, match=r"weight decoder\.layers\.0\.fc1\.bias holds 1e\+06, "
                       r"beyond float16's range \(65504\)"):
        model.half()
    assert model.decoder.layers[0].fc1.bias.dtype == torch.float32  # left as it was
    with torch.no_grad():
        model.decoder.layers[0].fc1.bias[0] = -1e6
    with pytest.raises(UsageError, match="beyond float16's range"):
        model.half()
    with torch.no_grad():
        model.decoder.layers[0].fc1.bias[0] = 65504.0
    assert model.half().decoder.layers[0].fc1.bias.dtype == torch.float16
    # half() leaves integers as they are, and an empty weight has no largest value
    refuse_beyond_float16([("steps", torch.tensor([10**6])), ("empty", torch.empty(0))])
