"""fairseq-san-bench end to end on a tiny sentencepiece corpus and a tiny trained checkpoint.

One checkpoint without sharing is decoded as six systems: itself, itself again (its speed ratio
to itself must be near 1), with the decode-time policy {1,5}/{3,3} (fewer parameters, a smaller
cache), without the decoding cache (no cache at all), by the static decoder (the same
translations), and with the policy by the static decoder at int8. The yardstick test checks that
a system's speed does not depend on which other systems (CTranslate2) are in the run.
"""

import json
import os
import re
import shutil
import sys

import pytest
import torch

from helpers import lm_train_argv, make_dictionary, preprocess, preprocess_lm, run_cli, train_argv
from helpers import drawn_figures, write_corpus

POLICY = json.dumps({"decoder_self": [1, 5], "decoder_encdec": [3, 3]})
STATIC = {"san_decoder": "static"}
SAN_STATIC_INT8 = {"san_policy": POLICY, **STATIC, "san_decoder_precision": "int8"}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def bench_data(tmp_path_factory):
    """(data dir with spm.model and text/test.raw.tgt, checkpoint): the recipe's layout."""
    from fairseq_san.cli import subwords

    root = tmp_path_factory.mktemp("bench")
    raw = write_corpus(root / "raw")
    pieces = root / "pieces"
    pieces.mkdir()
    spm_prefix = str(root / "spm")
    subwords.train([str(raw / "train.src"), str(raw / "train.tgt")], spm_prefix, 30, "bpe")
    for split in ("train", "valid", "test"):
        for side in ("src", "tgt"):
            subwords.encode(spm_prefix + ".model", str(raw / f"{split}.{side}"),
                            str(pieces / f"{split}.{side}"))  # fmt: skip
    data = preprocess(pieces, root / "data")
    shutil.copy(spm_prefix + ".model", data / "spm.model")
    (data / "text").mkdir()
    shutil.copy(raw / "test.tgt", data / "text" / "test.raw.tgt")
    result = run_cli("fairseq-train", *train_argv(data, root / "ckpt", max_update=3))
    assert result.returncode == 0, result.stderr[-3000:]
    return data, root / "ckpt" / "checkpoint_last.pt"


@pytest.fixture(scope="module")
def bench_results(bench_data, tmp_path_factory):
    from fairseq_san.cli import bench

    data, checkpoint = bench_data
    out_dir = tmp_path_factory.mktemp("bench-out")
    bench.main([
        "--data", str(data), "--subset", "test",
        "--system", f"base={checkpoint}",
        "--system", f"base-again={checkpoint}",
        "--system", f"san={checkpoint}:" + json.dumps({"san_policy": POLICY}),
        "--system", f"nocache={checkpoint}:" + json.dumps({"san_no_cache": True}),
        "--system", f"static={checkpoint}:" + json.dumps(STATIC),
        "--system", f"san-static-int8={checkpoint}:" + json.dumps(SAN_STATIC_INT8),
        "--baseline", "base",
        "--beams", "1", "4", "--cache-beams", "4", "20",
        "--batch-size", "6", "--max-sentences", "12", "--repeats", "3",
        "--max-len-b", "12", "--fixed-length", "6",
        "--out-dir", str(out_dir), "--cpu", "--threads", "1",
    ])  # fmt: skip
    with open(out_dir / "results.json", encoding="utf-8") as handle:
        return out_dir, json.load(handle)


def test_static_systems_are_paired_with_fairseq_decoding_the_same_model():
    """A static decoder row is compared with the first fairseq row of its checkpoint and model
    overrides (what it is built to reproduce), not with another model or decoding."""
    from fairseq_san.benchmark.config import fairseq_twins, parse_system

    fast = json.dumps({"san_decoding": "fast"})
    systems = [parse_system(text) for text in (
        "base=a.pt", "base-again=a.pt", f"base-fast=a.pt:{fast}", "san=b.pt",
        "base-static=a.pt:" + json.dumps(STATIC), "san-static-int8=b.pt:" + json.dumps(
            {**STATIC, "san_decoder_precision": "int8"}),
        "other-static=c.pt:" + json.dumps(STATIC),
        "policy-static=a.pt:" + json.dumps(SAN_STATIC_INT8),
    )]  # fmt: skip
    assert fairseq_twins(systems) == {"base-static": "base", "san-static-int8": "san"}
    spelt_otherwise = [parse_system(text) for text in (
        "base=a.pt:" + json.dumps({"san_decoding": "fairseq"}),
        "base-static=./a.pt:" + json.dumps(STATIC),
    )]  # fmt: skip
    assert fairseq_twins(spelt_otherwise) == {"base-static": "base"}  # the column was empty


def test_a_policy_spelt_otherwise_decodes_the_same_model(tmp_path):
    """The policy compared as text: JSON spaced otherwise, a file holding it or a per-kind flag
    left the static row's ``= fairseq`` column empty."""
    from fairseq_san.benchmark.config import fairseq_twins, parse_system

    policy_file = tmp_path / "p.json"
    policy_file.write_text('{"decoder_self": [2]}')
    spellings = ['{"decoder_self": [2]}', '{"decoder_self":[2]}', str(policy_file)]
    other = {**STATIC, "san_policy": '{"decoder_self": [1, 1]}'}
    for fairseq_spelling in spellings:
        for static_spelling in spellings:
            systems = [parse_system(text) for text in (
                "pol=a.pt:" + json.dumps({"san_policy": fairseq_spelling}),
                "pol-static=a.pt:" + json.dumps({**STATIC, "san_policy": static_spelling}),
                "other-static=a.pt:" + json.dumps(other),
            )]  # fmt: skip
            assert fairseq_twins(systems) == {"pol-static": "pol"}
    flag = [parse_system(text) for text in (
        "pol=a.pt:" + json.dumps({"san_decoder_self_policy": "2"}),
        "pol-static=a.pt:" + json.dumps({**STATIC, "san_policy": '{"decoder_self": [2]}'}),
    )]  # fmt: skip
    assert fairseq_twins(flag) == {"pol-static": "pol"}


def test_parse_system():
    from fairseq_san.benchmark.config import parse_system

    spec = parse_system('nocache=/ckpt/dir/model.pt:{"san_no_cache": true}')
    assert (spec.name, spec.checkpoint, spec.overrides) == (
        "nocache", "/ckpt/dir/model.pt", {"san_no_cache": True}
    )
    assert parse_system("base=a:b/c.pt").overrides == {}
    spaced = parse_system('s=a:b/c.pt:  {"san_no_cache": true}')  # was a checkpoint's name
    assert (spaced.checkpoint, spaced.overrides) == ("a:b/c.pt", {"san_no_cache": True})
    static = parse_system("s=m.pt:" + json.dumps(SAN_STATIC_INT8))
    assert static.model_overrides == {"san_policy": POLICY}
    assert (static.decoder, static.decoder_precision) == ("static", "int8")
    assert (spec.decoder, spec.decoder_precision) == ("fairseq", "fp32")
    for bad in ("no-checkpoint", "=x.pt", "x=y.pt:{not json"):
        with pytest.raises(ValueError):
            parse_system(bad)
    # a RecursionError and a ValueError of Python's digit limit, as tracebacks
    deep, digits = '{"a": ' + "[" * 5000 + "]" * 5000 + "}", '{"a": 1' + "0" * 5000 + "}"
    with pytest.raises(ValueError, match=r"^system x: overrides nest too deeply to be JSON$"):
        parse_system(f"x=y.pt:{deep}")
    with pytest.raises(ValueError, match=r"^system x: overrides are not JSON: Exceeds the limit"):
        parse_system(f"x=y.pt:{digits}")


def test_unknown_override_key_names_the_nearest_valid_key():
    from fairseq_san.benchmark.config import parse_system

    valid, precisions = {"san_policy", "san_no_cache", "dropout"}, ("fp32", "bf16", "int8")
    spec = parse_system('san=model.pt:{"san_polcy": "{}"}')
    with pytest.raises(ValueError) as error:
        spec.check_overrides(valid, precisions)
    assert str(error.value) == (
        "system san: override of model.pt: unknown key 'san_polcy' (did you mean 'san_policy'?)"
    )
    # The generation keys are valid for every checkpoint, and their typos are caught too.
    for typo, key in (("san_decodr", "san_decoder"),
                      ("san_decoder_precison", "san_decoder_precision")):  # fmt: skip
        with pytest.raises(ValueError, match=f"unknown key '{typo}' .did you mean '{key}'"):
            parse_system(f's=model.pt:{{"{typo}": "static"}}').check_overrides(valid, precisions)
    parse_system('san=model.pt:{"san_no_cache": true}').check_overrides(valid, precisions)
    parse_system("s=model.pt:" + json.dumps(SAN_STATIC_INT8)).check_overrides(valid, precisions)


def test_a_plugin_option_on_a_fairseq_model_and_a_key_near_none_are_one_short_line():
    """A policy override on a checkpoint of fairseq's transformer said "unknown key 'san_policy'"
    and listed its whole configuration (some 330 keys, those the benchmark refuses among them);
    a key near no valid one listed them too. The static decoder stays open to it."""
    from fairseq_san.benchmark.config import parse_system

    fairseqs = {f"key_{index}" for index in range(300)} | {"dropout", "encoder_layers"}
    precisions = ("fp32", "int8")
    spec = parse_system('fs=model.pt:{"san_decoder_self_policy": "1,5"}')
    with pytest.raises(ValueError) as error:
        spec.check_overrides(fairseqs, precisions)
    assert str(error.value) == (
        "system fs: override of model.pt: san_decoder_self_policy is an option of the plugin's "
        "models, and this checkpoint's model is none of them (fairseq's own) and reads none: "
        "attention sharing needs a model trained as transformer_san"
    )
    with pytest.raises(ValueError) as error:
        parse_system('fs=model.pt:{"zzz": 1}').check_overrides(fairseqs, precisions)
    assert str(error.value) == (
        "system fs: override of model.pt: unknown key 'zzz' (no option of the checkpoint's model "
        "or of the decoder is named so)"
    )
    parse_system("fs=model.pt:" + json.dumps(STATIC)).check_overrides(fairseqs, precisions)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"san_decoder": "statc"}, "san_decoder must be one of ('fairseq', 'static'), not 'statc'"),
        ({**STATIC, "san_decoder_precision": "int4"},
         "san_decoder_precision must be one of ('fp32', 'bf16', 'int8'), not 'int4'"),
        ({"san_decoder_precision": "bf16"}, '"san_decoder_precision": "bf16" is an option of '
         '"san_decoding": "static", not of "san_decoding": "fairseq", which decodes here: add '
         '"san_decoding": "static", or drop "san_decoder_precision"'),
        ({"san_decoder_execution": "graph"}, '"san_decoder_execution": "graph" is an option of '
         '"san_decoding": "static", not of "san_decoding": "fairseq", which decodes here: add '
         '"san_decoding": "static", or drop "san_decoder_execution"'),
        # a TypeError (unhashable) in the lookup; a list quoted as its text
        ({**STATIC, "san_decoder_precision": ["bf16"]},
         "san_decoder_precision must be one of ('fp32', 'bf16', 'int8'), not ['bf16']"),
        ({**STATIC, "san_decoder_execution": ["eager"]},
         "san_decoder_execution must be text (an execution's name), not ['eager']"),
    ],
)  # fmt: skip
def test_bad_decoder_or_precision_is_named(overrides, message):
    from fairseq_san.benchmark.config import SystemSpec
    from fairseq_san.benchmark.fairseq_system import STATIC_PRECISIONS

    precisions = {name: STATIC_PRECISIONS[name] for name in ("fp32", "bf16", "int8")}
    with pytest.raises(ValueError) as error:
        SystemSpec("s", "m.pt", overrides).check_overrides(set(), precisions)
    assert str(error.value) == f"system s: override of m.pt: {message}"


@pytest.mark.parametrize("decoding, said", [
    # the benchmark decoded with the static decoder, where fairseq-generate refuses the pair
    ("fast", "--san-decoding fast and --san-decoder static (deprecated: --san-decoding static) "
             "choose two decoders: pass --san-decoding alone"),
    # it decoded with the static one: the override named fairseq's, read as the default
    ("fairseq", '"san_decoding": "fairseq" and the deprecated "san_decoder": "static" choose two '
                'decoders: give "san_decoding" alone'),
])  # fmt: skip
def test_two_decoders_are_refused_as_the_task_refuses_them(decoding, said):
    """``san_decoding`` beside the deprecated ``san_decoder`` static."""
    from fairseq_san.benchmark.config import SystemSpec

    spec = SystemSpec("s", "m.pt", {"san_decoding": decoding, "san_decoder": "static"})
    with pytest.raises(ValueError) as error:
        spec.check_overrides({"san_policy"}, ("fp32",))
    assert str(error.value) == f"system s: override of m.pt: {said}"
    SystemSpec("s", "m.pt", {"san_decoder": "static"}).check_overrides({"san_policy"}, ("fp32",))


def test_every_option_default_comes_from_the_config():
    """The parser writes no default of its own: a bare command line gives BenchmarkConfig's."""
    from fairseq_san.benchmark.config import BenchmarkConfig, SystemSpec
    from fairseq_san.cli import bench

    args = bench.build_parser().parse_args(["--data", "d", "--system", "a=a.pt", "--out-dir", "o"])
    config = bench.config_from_args(args, "cmd")
    expected = BenchmarkConfig(data="d", systems=[SystemSpec("a", "a.pt")], out_dir="o",
                               command="cmd")  # fmt: skip
    for name, value in vars(expected).items():
        got = getattr(config, name)
        assert (list(got) if isinstance(got, (list, tuple)) else got) == (
            list(value) if isinstance(value, (list, tuple)) else value
        ), name


def test_cache_bytes_count_a_storage_once():
    from fairseq_san.benchmark.meters import incremental_state_bytes

    keys = torch.zeros(2, 3, 4)  # 96 bytes
    state = {"a": {"prev_key": keys, "prev_view": keys.view(6, 4), "none": None},
             "b": {"sum": torch.zeros(5, dtype=torch.float64)}}  # fmt: skip
    assert incremental_state_bytes(state) == (96 + 40, 96 + 40)
    assert incremental_state_bytes({"a": {"head": keys[0]}}) == (96, 48)


def test_agreement_counts_sentences_that_read_the_same():
    """Agreement compares detokenized text: an engine that leaves out eos (CTranslate2) agrees."""
    from fairseq.data import Dictionary

    from fairseq_san.benchmark.data import Detokenizer, TextSide

    dictionary = Dictionary()
    a, b = dictionary.add_symbol("a"), dictionary.add_symbol("b")
    text = TextSide.__new__(TextSide)
    text.ids, text.detokenize = [0, 1, 2, 3], Detokenizer(dictionary, None)
    ours = {0: [a, b, dictionary.eos()], 1: [a], 2: [b], 3: [a, a]}
    theirs = {0: [a, b], 1: [a, dictionary.eos()], 2: [a], 3: [a]}
    assert text.agreement(ours, theirs) == 0.5


@pytest.mark.slow
def test_without_matplotlib_only_the_figures_are_left_out(bench_results, tmp_path, monkeypatch,
                                                          caplog):  # fmt: skip
    """The offline bundle for GPU machines has no matplotlib: the tables are still written."""
    from fairseq_san.benchmark.run import write_results

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    write_results(bench_results[1], tmp_path)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["results.json", "results.md"]
    assert "matplotlib is not installed" in caplog.text


@pytest.mark.slow
def test_outputs_written(bench_results):
    out_dir, results = bench_results
    for name in ("results.json", "results.md", "speed_vs_beam.png", "speed_vs_bleu.png"):
        assert (out_dir / name).stat().st_size > 0, name
    for name in ("speed_vs_beam.png", "speed_vs_bleu.png"):
        assert (out_dir / name).read_bytes()[:8] == PNG_MAGIC
    report = (out_dir / "results.md").read_text()
    for name in ("base", "base-again", "san", "nocache", "static", "san-static-int8", "BLEU",
                 "self-attn", "ctranslate2"):  # fmt: skip
        assert name.lower() in report.lower()
    assert results["command"].startswith("fairseq-san-bench --data")
    machine = results["machine"]
    for key in ("cpu", "torch_threads", "torch", "fairseq", "date", "torch_cpu_capability"):
        assert machine[key], key
    assert isinstance(machine["cpu_flags"], list)
    assert f"Processor: {machine['cpu']} (" in report
    assert machine["torch_cpu_capability"] in report
    assert f"large CPU buffers: {machine['huge_pages']}." in report
    assert results["config"]["sentences"] == 12
    assert results["bleu_signature"].startswith("nrefs:1")
    assert results["config"]["spm_model"].endswith("spm.model")


@pytest.mark.slow
def test_speed_and_ratios(bench_results):
    _, results = bench_results
    systems = results["systems"]
    for name, system in systems.items():
        for beam in (1, 4):
            for mode in ("natural", "fixed"):
                run = system["settings"][f"beam{beam}_{mode}"]
                assert run["tokens_per_second"] > 0
                assert len(run["ratio_repeats"]) == 3
                assert all(ratio > 0 for ratio in run["ratio_repeats"])
                if mode == "fixed":  # exactly L tokens + eos for every sentence
                    assert run["tokens"] == 12 * (6 + 1)
                if name == "base":
                    assert run["ratio_to_baseline"] == pytest.approx(1.0)
    # The same model timed as another system: the median of its ratios over the four settings
    # is near 1. Single settings of a model this tiny take milliseconds and are too noisy to
    # bound, and the median too moves with the machine's other load (1.41 in a CI run beside
    # other test processes on 2 cores), so the bound is loose: within 2x either way.
    again = [run["ratio_to_baseline"] for run in systems["base-again"]["settings"].values()
             if "ratio_to_baseline" in run]  # fmt: skip
    assert 0.5 < sorted(again)[len(again) // 2] < 2


@pytest.mark.slow
def test_quality_params_and_cache(bench_results):
    _, results = bench_results
    systems = results["systems"]
    base, san, nocache = systems["base"], systems["san"], systems["nocache"]
    for system in systems.values():
        run = system["settings"]["beam4_natural"]
        assert 0.0 <= run["bleu"] <= 100.0 and 0.0 <= run["chrf"] <= 100.0
    assert san["params"] < base["params"] == systems["base-again"]["params"]
    assert san["san_policy"] == json.loads(POLICY) and base["san_policy"] == {}
    for beam in (4, 20):
        key = f"beam{beam}_fixed"
        assert 0 < san["settings"][key]["cache_bytes"] < base["settings"][key]["cache_bytes"]
        assert nocache["settings"][key]["cache_bytes"] == 0
    assert base["settings"]["beam20_fixed"]["cache_bytes"] > base["settings"]["beam4_fixed"][
        "cache_bytes"
    ]


@pytest.mark.slow
def test_profile(bench_results):
    _, results = bench_results
    for name in ("base", "san", "nocache", "static", "san-static-int8"):
        profile = results["systems"][name]["profile"]["fixed"]
        assert profile["steps"] > 0 and profile["ms_per_step"] > 0
        shares = profile["decoder_step_share"]
        assert set(shares) == {"self_attn", "encdec_attn", "ffn", "output_proj", "rest"}
        assert all(0.0 <= share <= 1.0 for share in shares.values())
        assert sum(shares.values()) == pytest.approx(1.0, abs=0.05)
        # the encoder that ran is timed: the static int8 system's is a converted copy
        assert profile["generate_share"]["encoder"] > 0, name
    base = results["systems"]["base"]["profile"]["natural"]
    assert 0.0 < base["removable_share_of_decode"] < base["attention_share_of_decode"] < 1.0
    assert base["max_speedup_from_sharing"] > 1.0


@pytest.mark.parametrize(
    "overrides, generator_execution, in_place_of",
    [
        ({}, "", None),  # fairseq's decoder
        ({**STATIC}, "", None),  # the device's own: eager on the CPU
        ({**STATIC, "san_decoder_execution": "fixed"}, "", None),
        ({**STATIC, "san_decoder_execution": "compile"}, "fixed", "compile"),
        ({**STATIC, "san_decoder_execution": "graph", "device": "cuda"}, "fixed", "graph"),
        ({**STATIC, "device": "cuda"}, "fixed", "graph"),  # a GPU's own
    ],
)
def test_a_static_row_that_compiles_or_replays_graphs_is_profiled_eager(
    monkeypatch, overrides, generator_execution, in_place_of
):
    """A replayed CUDA graph calls no module's hook: the bench slice's graph rows were profiled
    with no step counted (ms/step NaN), or captured with the profiler's syncs inside (a failed
    capture, eager steps mixed in). They are profiled eager, the row says so, and the pass is
    warmed over every batch first, as the timed passes are."""
    from types import SimpleNamespace

    from fairseq_san.benchmark import fairseq_system
    from fairseq_san.benchmark.config import parse_system
    from fairseq_san.benchmark.fairseq_system import FairseqSystem

    monkeypatch.setattr(fairseq_system, "clock", lambda device: 0.0)  # no device to wait for
    built, decoded = [], []
    system = FairseqSystem.__new__(FairseqSystem)  # no checkpoint: the generator stands in
    overrides = dict(overrides)
    device = overrides.pop("device", "cpu")  # only its type is read: no GPU needed
    system.spec = parse_system("s=model.pt:" + json.dumps(overrides))
    system.device, system.model = torch.device(device), None
    generator = SimpleNamespace(generate=lambda models, sample: decoded.append(sample))

    class Profiler:
        generate_seconds = 0.0

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            decoded.append("profiled")

        def summary(self):
            return {"steps": 1}

    monkeypatch.setattr(
        system, "_generator",
        lambda setting, options, execution="": built.append(execution) or generator,
    )  # fmt: skip
    monkeypatch.setattr(system, "_profiler", lambda generator: Profiler())
    summary = system.profile(SimpleNamespace(samples=["a", "b"]), None, None)
    assert built == [generator_execution]
    assert summary == {"steps": 1, "eager_in_place_of": in_place_of}
    assert decoded == ["a", "b", "a", "b", "profiled"]  # warmed over every batch


def test_a_profiled_row_without_hook_overhead_shows_a_dash():
    """A compiled or graph-replaying row has no hook overhead: its cell read "-x"."""
    from fairseq_san.benchmark.meters import PARTS
    from fairseq_san.benchmark.report import _profile_row

    step = {part: 0.1 for part in (*PARTS, "rest")}
    whole = {"encoder": 0.1, "cache_reorder": 0.1, "search_and_other": 0.1}
    prof = {"decoder_step_share": step, "generate_share": whole, "ms_per_step": 1.0, "beam": 4,
            "eager_in_place_of": "compile"}  # fmt: skip
    system = {"decoder": "static", "precision": "fp32", "settings": {}}
    cells = _profile_row("c", system, prof, None, "natural", None).split(" | ")
    assert cells[4 + len(PARTS) + 4] == "-"
    overhead = _profile_row("c", system, {**prof, "overhead": 1.5}, None, "natural", None)
    assert overhead.split(" | ")[4 + len(PARTS) + 4] == "1.50x"


def test_a_systems_ratio_is_its_speed_over_the_baselines_in_each_repeat():
    """``ratio_to_baseline`` is the median over repeats of system tok/s / baseline tok/s of the
    same repeat (the end-to-end test's base-again ratio, near 1, holds either way round): a
    system twice as fast is 2.0, whatever the machine's speed does between repeats."""
    from types import SimpleNamespace

    from fairseq_san.benchmark.config import BenchmarkConfig, Setting, parse_system
    from fairseq_san.benchmark.timing import PassResult, time_setting

    seconds = {"base": iter([1.0, 1.0, 3.0, 0.5]), "fast": iter([1.0, 0.5, 1.5, 0.25])}
    pool = SimpleNamespace(  # each pass decodes 100 tokens; the repeats' pace changes
        call=lambda name, *args, **kwargs: PassResult(next(seconds[name]), 100, 4),
        engine=lambda name: "ctranslate2",  # no cache to measure
    )
    config = BenchmarkConfig(data="d", out_dir="o", repeats=3,
                             systems=[parse_system("base=a.pt"), parse_system("fast=b.pt")])  # fmt: skip
    runs = time_setting(pool, ["base", "fast"], "base", Setting.of(4, "fixed", 10), config, None)
    assert runs["fast"]["ratio_repeats"] == [2.0, 2.0, 2.0]
    assert runs["fast"]["ratio_to_baseline"] == 2.0 and runs["base"]["ratio_to_baseline"] == 1.0
    assert runs["fast"]["tokens_per_second"] == 200.0  # the median of 200, 66.7 and 400


def test_each_setting_and_repeat_says_its_place_and_the_time_left(caplog):
    """A grid of settings timed for hours logged "beam 4, natural lengths, repeat 3: ..." with
    neither how many settings and repeats there are nor how long the rest takes."""
    import logging
    import time
    from types import SimpleNamespace

    from fairseq_san.benchmark.config import BenchmarkConfig, parse_system
    from fairseq_san.benchmark.run import _time_settings
    from fairseq_san.benchmark.timing import PassResult, time_left

    pool = SimpleNamespace(
        call=lambda name, *args, **kwargs: PassResult(1.0, 100, 4),
        engine=lambda name: "ctranslate2", names=["base"], systems={"base": {}},
    )  # fmt: skip
    config = BenchmarkConfig(data="d", out_dir="o", repeats=2, beams=(1, 4), modes=("fixed",),
                             systems=[parse_system("base=a.pt")])  # fmt: skip
    with caplog.at_level(logging.INFO, logger="fairseq_san.benchmark"):
        _time_settings(pool, "base", config, None, 10)
    said = [record.getMessage() for record in caplog.records]
    assert said[0] == "setting 1/2: beam 1, fixed lengths: warm-up"
    assert re.fullmatch(r"beam 1, fixed lengths, repeat 2/2: base 100\.0 tok/s", said[2])
    assert re.fullmatch(r"setting 2/2: beam 4, fixed lengths: warm-up \(about \d+ s left to "
                        r"time\)", said[3])  # fmt: skip
    assert time_left(time.monotonic() - 120, 1, 4) == "about 6 min left"
    assert time_left(time.monotonic() - 10, 2, 3) == "about 5 s left"
    assert time_left(time.monotonic(), 0, 3) == ""


def test_a_speed_up_over_ctranslate2_is_the_median_of_its_per_repeat_ratios():
    """Published by hand as a ratio of two medians (passes timed apart paired), which read a
    noisy run's 2.90 as 3.66; the report now gives the per-repeat median beside every row."""
    from types import SimpleNamespace

    from fairseq_san.benchmark.config import BenchmarkConfig, Setting, parse_system
    from fairseq_san.benchmark.report import ctranslate2_table
    from fairseq_san.benchmark.timing import PassResult, time_setting

    seconds = {  # a warm-up, then 3 repeats of 100 tokens each
        "base": iter([1.0, 1.0, 1.0, 1.0]),
        "static": iter([1.0, 1 / 3, 0.25, 1.0]),  # 300, 400, 100 tok/s: median 300
        "ct2": iter([1.0, 1.0, 0.25, 2.0]),  # 100, 400, 50 tok/s: median 100
    }
    pool = SimpleNamespace(
        call=lambda name, *args, **kwargs: PassResult(next(seconds[name]), 100, 4),
        engine=lambda name: "ctranslate2" if name == "ct2" else "fairseq",
    )
    names = ["base", "static", "ct2"]
    config = BenchmarkConfig(data="d", out_dir="o", repeats=3,
                             systems=[parse_system(f"{name}=a.pt") for name in names])  # fmt: skip
    runs = time_setting(pool, names, "base", Setting.of(4, "fixed", 10), config, None)
    assert runs["static"]["ratio_to"]["ct2"] == pytest.approx(2.0)  # 3, 1, 2: not 300 / 100
    assert runs["ct2"]["ratio_to"]["ct2"] == 1.0
    systems = {
        "static": {"decoder": "static", "precision": "int8",
                   "settings": {"beam4_fixed": runs["static"]}},
        "ct2": {"kind": "ctranslate2", "decoder": "ctranslate2", "precision": "int8",
                "settings": {"beam4_fixed": runs["ct2"]}},
    }  # fmt: skip
    table = ctranslate2_table({"config": {"beams": [4]}, "systems": systems}, "fixed")
    assert "| static | static | int8 | 2.00 |" in table
    assert ctranslate2_table({"config": {"beams": [4]}, "systems": {}}, "fixed") == ""


def test_fixed_lengths_alone_draw_no_speed_against_bleu(monkeypatch, tmp_path):
    """Fixed lengths have no BLEU: ``--modes fixed`` drew an empty speed-vs-BLEU figure."""
    pytest.importorskip("matplotlib")
    from fairseq_san.benchmark import run

    drawn = []
    monkeypatch.setattr(run, "markdown_report", lambda results: "")
    monkeypatch.setattr(run, "plot_speed_vs_beam", lambda results, path: drawn.append(path.name))
    monkeypatch.setattr(run, "plot_speed_vs_bleu", lambda results, path: drawn.append(path.name))
    run.write_results({"config": {"modes": ["fixed"]}}, tmp_path)
    assert drawn == ["speed_vs_beam.png"]
    run.write_results({"config": {"modes": ["fixed", "natural"]}}, tmp_path)
    assert drawn[1:] == ["speed_vs_beam.png", "speed_vs_bleu.png"]


def test_a_figure_that_cannot_be_written_is_named(monkeypatch, tmp_path):
    """A full disk at a figure ended the benchmark with "[Errno 27] File too large", naming no
    file and not saying that the results were written."""
    pytest.importorskip("matplotlib")
    import errno

    from fairseq_san.benchmark import run

    def full_disk(results, path):
        raise OSError(errno.EFBIG, "File too large", str(path))

    monkeypatch.setattr(run, "markdown_report", lambda results: "")
    monkeypatch.setattr(run, "plot_speed_vs_beam", full_disk)
    with pytest.raises(ValueError) as refused:
        run.write_results({"config": {"modes": ["fixed"]}}, tmp_path)
    assert str(refused.value) == (
        f"cannot write {tmp_path / 'speed_vs_beam.png'}: File too large (results.json and "
        f"results.md are written in {tmp_path})"
    )
    assert (tmp_path / "results.json").exists()


def test_results_that_cannot_be_written_leave_no_earlier_runs_beside_them(monkeypatch, tmp_path):
    """A full disk at results.md left the new results.json beside an earlier run's results.md
    and figures, with a bare "[Errno 28] No space left on device"; now the folder holds no
    results, and the line names the file."""
    import errno

    from fairseq_san.benchmark import run

    def full_disk_at_markdown(path, text):
        if path.endswith(run.RESULTS_MD):
            raise OSError(errno.ENOSPC, "No space left on device", path)
        (tmp_path / run.RESULTS_JSON).write_text(text)

    for name in run.RESULT_FILES + run.FIGURES:
        (tmp_path / name).write_text("an earlier run's")
    monkeypatch.setattr(run, "markdown_report", lambda results: "")
    monkeypatch.setattr(run, "write_text", full_disk_at_markdown)
    with pytest.raises(ValueError) as refused:
        run.write_results({"config": {"modes": ["fixed"]}}, tmp_path)
    assert str(refused.value) == (
        f"cannot write {tmp_path / 'results.md'}: No space left on device (no results written "
        f"in {tmp_path})"
    )
    assert list(tmp_path.iterdir()) == []


def test_every_bleu_row_names_its_decoder_and_precision():
    """The BLEU table named the system alone: an int8 row read as the fp32 system's quality."""
    from fairseq_san.benchmark.report import bleu_table

    runs = {"beam4_natural": {"bleu": 30.0}}
    systems = {"base": {"decoder": "fairseq", "precision": "fp32", "settings": runs},
               "q": {"decoder": "static", "precision": "int8",
                     "settings": {"beam4_natural": {"bleu": 29.5}}}}  # fmt: skip
    table = bleu_table({"config": {"beams": [4]}, "systems": systems}).splitlines()
    assert table[2] == "| system | decoder | precision | beam 4 |"
    assert table[4:] == ["| base | fairseq | fp32 | 30.00 |", "| q | static | int8 | 29.50 |"]


@pytest.mark.parametrize("key", ["fp16", "bf16", "cpu", "sampling"])
def test_a_run_or_generation_option_as_a_systems_override_is_refused(key):
    """fairseq's run options (``fp16``, ``cpu``) are keys of a checkpoint's configuration, so
    they passed as overrides, and the system decoded as every other: an ``fp16`` row at fp32."""
    from omegaconf import OmegaConf

    from fairseq_san.benchmark.config import parse_system
    from fairseq_san.benchmark.fairseq_system import check_no_generation_or_run_options

    # a model configuration converted from a legacy checkpoint's arguments holds them all
    cfg = OmegaConf.create({"model": {"encoder_layers": 2, "fp16": False, "bf16": False,
                                      "cpu": False}})  # fmt: skip
    spec = parse_system(f"half=a.pt:{{\"{key}\": true}}")
    with pytest.raises(ValueError, match=f"^system half: override '{key}' is "):
        check_no_generation_or_run_options(spec, cfg)
    check_no_generation_or_run_options(parse_system('m=a.pt:{"encoder_layers": 3}'), cfg)


def test_the_report_names_ctranslate2s_fixed_length_only_beside_its_row():
    from fairseq_san.benchmark.report import fixed_lengths_said

    config = {"modes": ["fixed"], "fixed_length": 12, "mean_reference_length": 11.6}
    assert fixed_lengths_said(config, ctranslate2=False) == (
        " Fixed lengths: every hypothesis 12 tokens + eos (mean reference length 11.6)."
    )
    assert "(CTranslate2: 13 tokens, the same decoder steps" in fixed_lengths_said(config, True)
    assert fixed_lengths_said({**config, "modes": ["natural"]}, True) == ""


def test_matmul_peak_measures_the_precisions_asked_for_and_a_slow_product_once(monkeypatch):
    from fairseq_san.benchmark import machine

    assert set(machine.matmul_peak(torch.device("cpu"), ["fp32"])) == {"fp32"}
    clock = iter(range(0, 1000, 2))  # every run of the work takes 2 s of this clock
    monkeypatch.setattr(machine, "clock", lambda device: next(clock))
    runs = []
    assert machine._best_seconds(lambda: runs.append(1), torch.device("cpu")) == 2
    assert len(runs) == 2  # a warm-up and one timed run, not 2 + 5
    fast = iter(i / 1000 for i in range(1000))  # 1 ms a run
    monkeypatch.setattr(machine, "clock", lambda device: next(fast))
    runs.clear()
    machine._best_seconds(lambda: runs.append(1), torch.device("cpu"))
    assert len(runs) == 2 + 5


@pytest.mark.slow
def test_compute_counts(bench_results):
    """The shared system does fewer matrix multiplies per token; the same model the same."""
    out_dir, results = bench_results
    compute = {n: s["profile"]["fixed"]["compute"] for n, s in results["systems"].items()
               if "profile" in s}  # fmt: skip
    assert compute["base"]["mflop_per_token"] > 0
    assert compute["base-again"]["flops"] == compute["base"]["flops"]
    assert compute["san"]["mflop_per_token"] < compute["base"]["mflop_per_token"]
    report = (out_dir / "results.md").read_text(encoding="utf-8")
    assert "compute x base" in report
    # The arithmetic bound: each precision's peak, and each row's share of its own.
    peaks = results["machine"]["matmul_peak_gflops"]
    assert set(peaks) >= {"fp32", "bf16"} and all(value > 0 for value in peaks.values())
    shares = re.findall(r"\| (\d+)% \|$", report, flags=re.MULTILINE)
    tables = len(results["config"]["modes"])  # one profile table per length mode
    assert len(shares) == tables * len(compute) and all(0 <= int(share) < 100 for share in shares)


@pytest.mark.slow
def test_ctranslate2_row_or_note(bench_results):
    out_dir, results = bench_results
    try:
        import ctranslate2
    except ImportError:
        assert results["ctranslate2"] == {
            "status": "skipped",
            "note": "ctranslate2 not installed (pip install ctranslate2)",
        }
        assert any("ctranslate2 not installed" in note for note in results["notes"])
    else:
        assert results["ctranslate2"]["status"] == "ok", results["ctranslate2"]
        report = (out_dir / "results.md").read_text(encoding="utf-8")
        fairseq = results["machine"]["fairseq"]
        assert f"fairseq {fairseq}, CTranslate2 {ctranslate2.__version__};" in report
        names = ["base (CTranslate2 float32)", "base (CTranslate2 int8)"]
        assert results["ctranslate2"]["systems"] == names
        for name in names:
            system = results["systems"][name]
            assert system["kind"] == "ctranslate2"
            for run in system["settings"].values():
                assert run["tokens_per_second"] > 0 and run["ratio_to_baseline"] > 0
                assert len(run["tokens_per_second_repeats"]) == 3


@pytest.mark.slow
def test_a_baseline_ctranslate2_would_convert_into_another_model_is_not_converted(
    bench_data, tmp_path
):
    """CTranslate2's converter ignores --cross-self-attention: the rows of the model it made
    agreed with the baseline on no sentence, and the speed-ups over CTranslate2 compared two
    models. They are left out with the report's note, as for a shared baseline."""
    pytest.importorskip("ctranslate2")
    from fairseq_san.cli import bench

    data, _ = bench_data
    argv = train_argv(data, tmp_path / "ckpt", max_update=2, extra=["--cross-self-attention"])
    trained = run_cli("fairseq-train", *argv)
    assert trained.returncode == 0, trained.stderr[-3000:]
    out = tmp_path / "out"
    bench.main([
        "--data", str(data), "--system", f"cross={tmp_path / 'ckpt' / 'checkpoint_last.pt'}",
        "--modes", "natural", "--beams", "1", "--repeats", "1", "--max-sentences", "4",
        "--no-profile", "--cpu", "--threads", "1", "--out-dir", str(out),
    ])  # fmt: skip
    results = json.loads((out / "results.json").read_text())
    assert results["ctranslate2"] == {
        "status": "skipped",
        "note": "baseline cross uses --cross-self-attention: CTranslate2 converts only "
        "fairseq's plain transformer",
    }
    assert list(results["systems"]) == ["cross"]


# What ``FairseqSystem.describe()`` says of a plain transformer, in the keys CTranslate2 reads.
PLAIN = {"arch": "transformer_san_small", "san_policy": {},
         "decoder_self_attention_type": "dot", "no_cache": False,
         "cross_self_attention": False}  # fmt: skip


def test_a_baseline_ctranslate2_cannot_convert_is_noted_with_what_it_does():
    """The note named every reason a baseline might have (sharing, AAN, no cache or
    --cross-self-attention), not the baseline's own."""
    from types import SimpleNamespace

    from fairseq_san.benchmark.ctranslate2_system import not_converted

    def note(**what):
        return not_converted(SimpleNamespace(name="b", describe=lambda: {**PLAIN, **what}))

    assert note() is None
    plain = ": CTranslate2 converts only fairseq's plain transformer"
    shares = "baseline b shares attention (san_policy)"
    assert note(san_policy={"decoder_self": [3, 3]}) == shares + plain
    assert note(decoder_self_attention_type="aan") == "baseline b has an AAN decoder" + plain
    assert note(no_cache=True, cross_self_attention=True) == (
        "baseline b decodes without the cache and uses --cross-self-attention" + plain
    )
    # an lstm's weights were "conversion failed: AttributeError", which named no reason
    for arch in ("lstm_wiseman_iwslt_de_en", "lightconv_iwslt_de_en", "fconv"):
        assert note(arch=arch) == f"baseline b is no transformer (--arch {arch})" + plain
    assert note(arch="transformer") is None


def test_a_compute_type_the_device_does_not_run_leaves_the_others_row(monkeypatch):
    """int8 on a GPU without it: CTranslate2 refuses to load that compute type, and the float32
    row went too, noted as a failed conversion (the model had converted)."""
    pytest.importorskip("ctranslate2")
    from types import SimpleNamespace

    from fairseq_san.benchmark import ctranslate2_system

    class NoInt8(ctranslate2_system.CTranslate2System):
        def __init__(self, base, model_dir, compute_type, threads):
            if compute_type == "int8":
                raise ValueError("Requested int8 compute type, but the target device or "
                                 "backend do not support efficient int8 computation.")  # fmt: skip
            self.name, self.version = compute_type, "4"

        @classmethod
        def convert(cls, base, work_dir):
            return work_dir

    monkeypatch.setattr(ctranslate2_system, "CTranslate2System", NoInt8)
    base = SimpleNamespace(name="base", describe=lambda: PLAIN, device=torch.device("cuda"))
    systems, info = ctranslate2_system.ctranslate2_systems(SimpleNamespace(threads=1), base)
    assert [system.name for system in systems] == ["float32"]
    assert info == {
        "status": "ok", "systems": ["float32"], "version": "4",
        "note": "int8 not loaded on cuda: ValueError: Requested int8 compute type, but the target "
        "device or backend do not support efficient int8 computation.",
    }  # fmt: skip


def test_a_ctranslate2_rows_precision_is_what_ctranslate2_runs():
    """CTranslate2 picks the compute type it runs from the one asked for (int8 may run with
    float16 on a GPU): the row said the one asked for."""
    from types import SimpleNamespace

    from fairseq_san.benchmark.ctranslate2_system import CTranslate2System

    system = object.__new__(CTranslate2System)
    system.compute_type, system.version = "int8", "4"
    system.translator = SimpleNamespace(compute_type="int8_float16")
    assert system.describe()["precision"] == "int8+fp16"
    assert system.describe()["compute_type"] == "int8_float16"


def stub_ctranslate2_system(translate_batch, max_output_tokens: int):
    """A CTranslate2System on the CPU whose translator is ``translate_batch``, with a made-up
    dictionary on both sides: its decoding without CTranslate2 or a checkpoint."""
    from types import SimpleNamespace

    from fairseq_san.benchmark.ctranslate2_system import CTranslate2System

    system = object.__new__(CTranslate2System)
    dictionary = make_dictionary()
    system.device, system._sources = torch.device("cpu"), {}
    system.max_output_tokens = max_output_tokens
    system.task = SimpleNamespace(source_dictionary=dictionary, target_dictionary=dictionary)
    system.translator = SimpleNamespace(translate_batch=translate_batch)
    return system


def test_ctranslate2_natural_lengths_are_capped_as_fairseqs():
    """fairseq decodes at most the model's positions but one, whatever ``a * source + b`` allows;
    CTranslate2 was given the uncapped limit, and the two engines decoded different lengths."""
    from types import SimpleNamespace

    from fairseq_san.benchmark.config import NATURAL, Setting

    asked = []

    def translate_batch(sources, **kwargs):
        asked.append(kwargs["max_decoding_length"])
        return [SimpleNamespace(hypotheses=[["w0"]]) for _ in sources]

    system = stub_ctranslate2_system(translate_batch, max_output_tokens=15)
    sample = {"net_input": {"src_tokens": torch.full((2, 10), 5)}, "id": torch.tensor([0, 1])}
    batches = SimpleNamespace(samples=[sample], batch_size=2)
    for max_len_b, cap in ((100, 15), (4, 14)):  # 1.0 * 10 + b, at most 15
        options = SimpleNamespace(max_len_a=1.0, max_len_b=max_len_b, lenpen=1.0)
        decoded = system.decode(batches, Setting(4, NATURAL), options)
        assert asked[-1] == cap
        assert decoded.tokens == 2 * 2  # one token and EOS per sentence
    at_limit = SimpleNamespace(max_len_a=0.0, max_len_b=1, lenpen=1.0)  # the token, no EOS
    assert system.decode(batches, Setting(4, NATURAL), at_limit).tokens == 2


def test_ctranslate2_batches_are_the_collated_ones_whatever_the_batch_size():
    """--batch-size beyond the test set is allowed; one beyond CTranslate2's size_t (2**66) was
    given to it as max_batch_size, a TypeError traceback from its worker."""
    from types import SimpleNamespace

    from fairseq_san.benchmark.config import NATURAL, Setting

    asked = []

    def translate_batch(sources, max_batch_size, **kwargs):
        asked.append(max_batch_size)
        return [SimpleNamespace(hypotheses=[["w0"]]) for _ in sources]

    system = stub_ctranslate2_system(translate_batch, max_output_tokens=15)
    sample = {"net_input": {"src_tokens": torch.full((2, 10), 5)}, "id": torch.tensor([0, 1])}
    batches = SimpleNamespace(samples=[sample], batch_size=2**66)
    options = SimpleNamespace(max_len_a=0.0, max_len_b=4, lenpen=1.0)
    system.decode(batches, Setting(1, NATURAL), options)
    assert asked == [2]  # the batch's sentences

def test_ctranslate2_reads_sources_longer_than_1024_tokens_whole():
    """CTranslate2 cuts a source at ``max_input_length`` tokens, 1024 unless told: a model of more
    positions (checked against the subset before) read 1100 in fairseq, and its CTranslate2 rows
    translated the first 1024 (other translations, the encoder's work cut short), exit 0."""
    from types import SimpleNamespace

    from fairseq_san.benchmark.config import NATURAL, Setting

    read = []

    def translate_batch(sources, max_input_length=1024, **kwargs):  # CTranslate2's default
        read.extend(len(s[:max_input_length] if max_input_length else s) for s in sources)
        return [SimpleNamespace(hypotheses=[["w0"]]) for _ in sources]

    system = stub_ctranslate2_system(translate_batch, max_output_tokens=2047)
    eos = system.task.source_dictionary.eos()
    source = torch.cat([torch.full((1, 1100), 5), torch.tensor([[eos]])], dim=1)
    sample = {"net_input": {"src_tokens": source}, "id": torch.tensor([0])}
    batches = SimpleNamespace(samples=[sample], batch_size=1)
    options = SimpleNamespace(max_len_a=0.0, max_len_b=10, lenpen=1.0)
    system.decode(batches, Setting(4, NATURAL), options)
    assert read == [1100]  # every word (CTranslate2 adds the EOS)


def test_a_failed_conversion_is_noted_in_one_line(monkeypatch):
    """CTranslate2's converter gives its reasons on lines of their own: the note was three lines,
    the reason a stray item of the report's notes (a pre-norm encoder, a post-norm decoder)."""
    pytest.importorskip("ctranslate2")
    from types import SimpleNamespace

    from ctranslate2.converters import fairseq as ct2_fairseq

    from fairseq_san.benchmark import ctranslate2_system

    def convert(base, work_dir):
        args = SimpleNamespace(arch="transformer", encoder_normalize_before=True,
                               decoder_normalize_before=False, encoder_attention_heads=4,
                               decoder_attention_heads=4)  # fmt: skip
        ct2_fairseq._get_model_spec(args)

    monkeypatch.setattr(ctranslate2_system.CTranslate2System, "convert", convert)
    base = SimpleNamespace(name="base", describe=lambda: PLAIN)
    systems, info = ctranslate2_system.ctranslate2_systems(SimpleNamespace(threads=1), base)
    assert systems == [] and info["status"] == "skipped"
    assert info["note"] == (
        "conversion failed: ValueError: The model you are trying to convert is not supported by "
        "CTranslate2. We identified the following reasons: - Options --encoder-normalize-before "
        "and --decoder-normalize-before must have the same value"
    )


def test_a_ctrl_c_while_a_worker_starts_prints_no_traceback(capfd):
    """Ctrl-C reaches the workers too: one still importing torch (a run's first seconds) printed
    KeyboardInterrupt's traceback, one per worker, above the parent's "interrupted". A worker
    ignores it until it serves; the parent, interrupted, stops the workers."""
    import multiprocessing
    import signal
    import time
    from types import SimpleNamespace

    from fairseq_san.benchmark.config import FAIRSEQ
    from fairseq_san.benchmark.workers import Worker, WorkerJob

    job = WorkerJob(FAIRSEQ, [], SimpleNamespace(threads=1), "cpu")  # no system: it fails
    worker = Worker(multiprocessing.get_context("spawn"), job)
    try:
        time.sleep(0.3)  # it imports torch
        os.kill(worker.process.pid, signal.SIGINT)
        with pytest.raises(RuntimeError, match="IndexError"):  # it went on, to its job
            worker.receive()
    finally:
        worker.close(at_once=True)
    assert "Traceback" not in capfd.readouterr().err


def test_ctranslate2_steps_are_counted_as_decoded():
    """A hypothesis that reached CTranslate2's limit decoded no EOS: counted as one more step,
    CTranslate2 read too fast where sentences hit the limit (a 1-token limit: 2x)."""
    from fairseq_san.benchmark.ctranslate2_system import decoded_steps

    assert decoded_steps(3, 10, fixed=False) == 4  # ended by EOS, a step of its own
    assert decoded_steps(10, 10, fixed=False) == 10  # stopped at the limit: no EOS
    assert decoded_steps(1, 1, fixed=False) == 1
    assert decoded_steps(15, 15, fixed=True) == 15  # fixed lengths: L + 1 steps, no EOS


@pytest.mark.slow
def test_every_row_has_its_precision(bench_results):
    out_dir, results = bench_results
    precisions = {name: system["precision"] for name, system in results["systems"].items()}
    decoders = {name: system["decoder"] for name, system in results["systems"].items()}
    for name in ("base", "base-again", "san", "nocache", "static"):
        assert precisions[name] == "fp32"
        assert decoders[name] == ("static" if name == "static" else "fairseq")
    assert (decoders["san-static-int8"], precisions["san-static-int8"]) == ("static", "int8")
    if results["ctranslate2"]["status"] == "ok":
        assert precisions["base (CTranslate2 float32)"] == "fp32"
        assert precisions["base (CTranslate2 int8)"] == "int8"
    report = (out_dir / "results.md").read_text(encoding="utf-8")
    assert "| system | decoder | precision |" in report and "| base | fairseq | fp32 |" in report
    assert "| = base | = fairseq |" in report
    assert "| static | static | fp32 |" in report
    assert "| san-static-int8 | static | int8 |" in report


@pytest.mark.slow
def test_static_decoder_rows(bench_results):
    """The static decoder translates as fairseq does (same BLEU, chrF and token count at natural
    lengths); its cache is measured from its preallocated tensors; the model overrides of a
    static system (the policy) still reach the model."""
    _, results = bench_results
    systems = results["systems"]
    base, static, san = systems["base"], systems["static"], systems["san"]
    san_int8 = systems["san-static-int8"]
    for beam in (1, 4):
        key = f"beam{beam}_natural"
        ours, theirs = static["settings"][key], base["settings"][key]
        assert (ours["bleu"], ours["chrf"], ours["tokens"]) == (
            theirs["bleu"], theirs["chrf"], theirs["tokens"]
        ), beam
        assert ours["agreement_with_baseline"] == theirs["agreement_with_baseline"] == 1.0
        assert ours["agreement_with_fairseq"] == 1.0 and "agreement_with_fairseq" not in theirs
        assert 0 <= san_int8["settings"][key]["agreement_with_fairseq"] <= 1  # there, not NaN
    assert san_int8["params"] == san["params"] and san_int8["san_policy"] == san["san_policy"]
    for beam in (4, 20):
        key = f"beam{beam}_fixed"
        assert 0 < san_int8["settings"][key]["cache_bytes"] < static["settings"][key]["cache_bytes"]
    assert static["settings"]["beam20_fixed"]["cache_bytes"] > static["settings"]["beam4_fixed"][
        "cache_bytes"
    ]
    flops = {name: systems[name]["profile"]["fixed"]["compute"]["mflop_per_token"]
             for name in ("base", "static", "san-static-int8")}  # fmt: skip
    # The static decoder skips only the per-step encoder-decoder key/value projections: its
    # packed linear layers must be counted (FlopCounterMode alone does not see them).
    assert 0.7 * flops["base"] < flops["static"] < flops["base"]
    assert 0 < flops["san-static-int8"] < flops["static"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "overrides, said",
    [
        ({"san_polcy": POLICY}, "system san: override of {checkpoint}: unknown key 'san_polcy' "
                                r"\(did you mean 'san_policy'\?\)"),
        ({"encoder_layers": "2"}, r"encoder_layers '2' \(system san's overrides\) is of type str, "
                                  "but encoder_layers takes an int"),
        # named --san-decoder-execution (the benchmark has no such flag), left out compile
        ({**STATIC, "san_decoder_execution": "graph"},
         'system san: "san_decoder_execution": "graph" is not an execution the static decoder '
         r"runs on CPU \(those are: eager, fixed, compile\)"),
        ({**STATIC, "san_decoder_execution": "foo"},
         'system san: "san_decoder_execution": "foo" is not an execution the static decoder '),
        # met in the worker as the model is built: it named no system
        ({"san_policy": "no-such-policy"}, 'system san: policy file "no-such-policy" not found'),
        # the checkpoint's configuration holds them: every row decoded as the baseline, 100%
        ({"sampling": True, "temperature": 5.0},
         "system san: override 'sampling' is a generation option, which the benchmark sets for "
         r"every system alike \(--beams, --lenpen, --max-len-a, --max-len-b, ...\): the "
         "overrides take the model's options and san_decoding, "),
    ],
    ids=["misspelt key", "wrong type", "graph on the CPU", "unknown execution", "policy",
         "generation option"],
)  # fmt: skip
def test_bad_override_stops_the_benchmark(bench_data, tmp_path, overrides, said):
    """A typo or a wrong type in a system's overrides is one line naming it, before any worker
    starts (a wrong type failed in the worker, naming no system)."""
    data, checkpoint = bench_data
    result = run_cli(
        "fairseq-san-bench", "--data", str(data), "--out-dir", str(tmp_path / "out"),
        "--system", f"base={checkpoint}",
        "--system", f"san={checkpoint}:" + json.dumps(overrides), "--cpu",
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 1
    error = result.stderr.strip().splitlines()[-1]
    assert re.fullmatch("fairseq-san-bench: error: " + said.format(checkpoint=re.escape(str(checkpoint))) + ".*",
                        error), error  # fmt: skip
    assert not (tmp_path / "out" / "results.json").exists()


def test_the_processor_is_named_with_its_identity():
    """Two hosts that a virtual machine names alike ("AMD EPYC") are told apart by family, model,
    stepping and clock; reports of earlier runs, without the identity, still read."""
    from fairseq_san.benchmark.machine import processor_identity
    from fairseq_san.benchmark.report import processor_line

    fields = {"cpu family": "25", "model": "17", "stepping": "1", "cpu MHz": "2596.140"}
    assert processor_identity(fields) == "family 25, model 17, stepping 1, 2596 MHz"
    assert processor_identity({}) == ""
    machine = {"cpu": "AMD EPYC", "cpu_identity": "family 25, model 17", "cpu_flags": ["avx2"],
               "torch_cpu_capability": "AVX2"}  # fmt: skip
    assert processor_line(machine) == "AMD EPYC (family 25, model 17; avx2; torch kernels AVX2)"
    del machine["cpu_identity"]
    assert processor_line(machine) == "AMD EPYC (avx2; torch kernels AVX2)"


def test_the_report_says_whether_large_buffers_had_huge_pages(tmp_path, monkeypatch):
    """torch's THP_MEM_ALLOC_ENABLE and the kernel's mode change a CPU decoder's speed (page
    faults): a report names both; reports of earlier runs, without them, still read."""
    from fairseq_san.benchmark import machine
    from fairseq_san.benchmark.report import huge_pages_clause

    kernel = tmp_path / "enabled"
    kernel.write_text("always [madvise] never\n")
    monkeypatch.setattr(machine, "KERNEL_THP", str(kernel))
    monkeypatch.setenv("THP_MEM_ALLOC_ENABLE", "1")
    recorded = machine.huge_pages()
    assert recorded == "THP_MEM_ALLOC_ENABLE=1, kernel transparent huge pages madvise"
    assert huge_pages_clause({"huge_pages": recorded}) == f"; large CPU buffers: {recorded}"
    monkeypatch.delenv("THP_MEM_ALLOC_ENABLE")
    monkeypatch.setattr(machine, "KERNEL_THP", str(tmp_path / "missing"))
    unset = "THP_MEM_ALLOC_ENABLE=unset, kernel transparent huge pages unknown"
    assert machine.huge_pages() == unset
    assert huge_pages_clause({}) == ""


@pytest.mark.slow
def test_a_fixed_length_beyond_the_models_positions_stops_the_benchmark(bench_data, tmp_path):
    """One line naming the system and its limit, before any decoding (it was an assertion deep in
    fairseq's generator, a worker's traceback)."""
    data, checkpoint = bench_data
    result = run_cli(
        "fairseq-san-bench", "--data", str(data), "--out-dir", str(tmp_path / "out"),
        "--system", f"base={checkpoint}", "--fixed-length", "2000", "--modes", "fixed", "--cpu",
        "--no-ctranslate2", timeout=120,
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "fairseq-san-bench: error: fixed length 2000: system base decodes at most 1023 tokens "
        "(its max_target_positions 1024 less one): give a smaller --fixed-length"
    )
    assert not (tmp_path / "out" / "results.json").exists()


@pytest.mark.slow
def test_a_source_beyond_a_models_positions_stops_the_benchmark(bench_data, tmp_path):
    """One line naming the system, its limit and the longest source (it was torch's "index out of
    range" in the encoder's embeddings, a worker's traceback after every system had loaded)."""
    data, checkpoint = bench_data
    result = run_cli(
        "fairseq-san-bench", "--data", str(data), "--out-dir", str(tmp_path / "out"),
        "--system", f"base={checkpoint}", "--system", f'short={checkpoint}:'
        '{"max_source_positions": 2}', "--modes", "natural", "--cpu", "--no-ctranslate2",
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 1
    assert re.fullmatch(
        r"fairseq-san-bench: error: system short reads at most 2 source tokens \(its "
        r"max_source_positions\), and the longest sentence of --subset test has \d+ with its EOS: "
        r"benchmark it on shorter sentences, or a model with more positions",
        result.stderr.strip().splitlines()[-1],
    )
    assert not (tmp_path / "out" / "results.json").exists()


@pytest.mark.slow
def test_a_subset_binarized_from_empty_files_stops_the_benchmark_in_one_line(bench_data,
                                                                             tmp_path):
    """fairseq's reader cannot map an empty file: a traceback from its dataset's ``__del__`` and
    "cannot mmap an empty file", which named neither the subset nor the data."""
    data, checkpoint = bench_data
    empty = tmp_path / "data"
    shutil.copytree(data, empty)
    for binarized in empty.glob("test.*.bin"):
        binarized.write_bytes(b"")
    result = run_cli(
        "fairseq-san-bench", "--data", str(empty), "--out-dir", str(tmp_path / "out"),
        "--system", f"base={checkpoint}", "--cpu", "--no-ctranslate2", timeout=120,
    )  # fmt: skip
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == (
        f"fairseq-san-bench: error: --subset test of {empty} holds no sentence "
        "(fairseq-preprocess binarized empty files): give a subset with sentences"
    )


@pytest.fixture(scope="module")
def language_model(binarized_corpus, tmp_path_factory):
    """(monolingual data: fairseq-preprocess --only-source of the corpus's source side, a
    transformer_lm_san checkpoint trained 2 updates on it)."""
    root = tmp_path_factory.mktemp("bench-lm")
    data = preprocess_lm(binarized_corpus.parent / "raw", root / "lm-bin")
    result = run_cli("fairseq-train", *lm_train_argv(data, root / "ckpt", max_update=2))
    assert result.returncode == 0, result.stderr[-3000:]
    return data, root / "ckpt" / "checkpoint_last.pt"


TRANSLATION_ONLY = (
    "fairseq-san-bench: error: the benchmark times translation models on translation data "
    "(binarized by fairseq-preprocess with a source and a target language): "
)


@pytest.mark.slow
@pytest.mark.parametrize(
    "data, model", [("lm", "lm"), ("translation", "lm"), ("lm", "translation")]
)
def test_a_language_model_or_its_data_stops_the_benchmark_before_any_checkpoint_loads(
    binarized_corpus, san_checkpoint, language_model, tmp_path, monkeypatch, data, model
):  # fmt: skip
    """The benchmark times translation: a language model on its data failed in the batches
    (``'MonolingualDataset' object has no attribute 'src_sizes'``), on translation data without
    dict.txt, and a translation model on a language model's data with fairseq's "Could not infer
    language pair" (as ``fairseq-san: error``). One line names each of the two that is not
    translation's, before a checkpoint is loaded into a task or the output folder is made."""
    from fairseq_san.benchmark import run
    from fairseq_san.cli import bench

    def loaded(*args):
        raise AssertionError("a checkpoint was loaded into a task")

    monkeypatch.setattr(run, "load_checkpoint_task", loaded)
    lm_data, lm_checkpoint = language_model
    data_dir = lm_data if data == "lm" else binarized_corpus
    checkpoint = lm_checkpoint if model == "lm" else san_checkpoint
    out = tmp_path / "out"
    systems = ["--system", f"a={checkpoint}"]
    if data == model == "lm":  # a checkpoint of two systems is read once, both named
        systems += ["--system", f"b={checkpoint}"]
    with pytest.raises(SystemExit) as stopped:
        bench.main(["--data", str(data_dir), *systems, "--out-dir", str(out), "--cpu"])
    said = []
    if data == "lm":
        said.append(f"--data {lm_data} is monolingual data (dict.txt: fairseq-preprocess "
                    "--only-source)")  # fmt: skip
    if model == "lm":
        who = "systems a, b" if data == model else "system a"
        said.append(f"{who}: checkpoint {lm_checkpoint} is a language model (task "
                    "language_modeling_san, arch transformer_lm_san)")  # fmt: skip
    assert stopped.value.code == TRANSLATION_ONLY + "; ".join(said)
    assert not out.exists()


@pytest.mark.slow
def test_bleu_without_a_sentencepiece_model_is_noted_in_the_report(bench_data, tmp_path):
    """A data folder without spm.model: BLEU on the dictionary's tokens, against the binarized
    targets (raw references were read where DATA/text held them), said in the log and the
    report's notes (not comparable with BLEU on detokenized text)."""
    data, checkpoint = bench_data
    pieces = tmp_path / "data"
    shutil.copytree(data, pieces, ignore=shutil.ignore_patterns("spm.model"))
    out = tmp_path / "out"
    result = run_cli(
        "fairseq-san-bench", "--data", str(pieces), "--out-dir", str(out), "--system",
        f"base={checkpoint}", "--modes", "natural", "--beams", "1", "--repeats", "1",
        "--max-sentences", "4", "--no-profile", "--no-ctranslate2", "--cpu", "--threads", "1",
        timeout=180,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "no sentencepiece model (--spm, DATA/spm.model)" in result.stderr
    results = json.loads((out / "results.json").read_text())
    assert results["config"]["spm_model"] is None
    # Not the raw text of DATA/text, which the dictionary's tokens ("▁Ein ▁Mann") never match.
    assert results["config"]["references"] == "binarized targets, detokenized like hypotheses"
    assert any(note.startswith("no sentencepiece model") for note in results["notes"])
    assert "- no sentencepiece model (--spm, DATA/spm.model): BLEU and chrF are scored" in (
        (out / "results.md").read_text()
    )


@pytest.mark.slow
def test_references_or_a_sentencepiece_model_of_other_text_are_one_line(bench_data, tmp_path):
    """--references of another split or the source side (the same number of lines), and --spm
    of another sentencepiece model (the hypotheses kept its marks), were scored as the subset's
    without a word; each is refused in one line, before anything is decoded."""
    from fairseq_san.cli import subwords

    data, checkpoint = bench_data
    raw = data.parent / "raw"
    other_text = tmp_path / "other.txt"  # words of other letters: no piece in common
    other_text.write_text("abc defgh ijq cba xyz\n" * 50)
    other_spm = str(tmp_path / "other")
    subwords.train([str(other_text)], other_spm, 16, "unigram")
    out = tmp_path / "out"
    common = ["--data", str(data), "--out-dir", str(out), "--system", f"base={checkpoint}",
              "--modes", "natural", "--beams", "1", "--repeats", "1", "--no-profile",
              "--no-ctranslate2", "--cpu", "--threads", "1"]  # fmt: skip
    for extra, said in (
        (["--references", str(raw / "test.src")], f"--references {raw / 'test.src'} is not the "
         "target side of the subset: "),
        (["--spm", other_spm + ".model"], f"sentencepiece model {other_spm}.model does not "
         "detokenize the subset's binarized targets: "),
    ):  # fmt: skip
        result = run_cli("fairseq-san-bench", *common, *extra, timeout=180)
        assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
        assert said in result.stderr.strip().splitlines()[-1]
        assert not (out / "results.json").exists()
    result = run_cli("fairseq-san-bench", *common, "--references", str(raw / "test.tgt"),
                     timeout=180)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]


def test_a_pipe_in_the_data_folder_the_benchmark_reads_is_one_line(binarized_corpus, tmp_path):
    """DATA/spm.model and DATA/text/SUBSET.raw.TGT, which the benchmark reads where --spm and
    --references are not given, may be pipes in a data folder received from elsewhere: reading
    one without a writer hung the benchmark. Each is refused in one line naming it, the model
    before anything loads."""
    from fairseq_san.benchmark.config import BenchmarkConfig, parse_system, references_file

    data = tmp_path / "data"
    shutil.copytree(binarized_corpus, data)
    os.mkfifo(data / "spm.model")
    out = tmp_path / "out"
    result = run_cli("fairseq-san-bench", "--data", str(data), "--subset", "test",
                     "--out-dir", str(out), "--system", "base=absent.pt", "--cpu",
                     "--no-ctranslate2", timeout=60)  # fmt: skip
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == (
        f"fairseq-san-bench: error: {data / 'spm.model'} is a pipe or a device, not a regular "
        "file, and the benchmark would read it (--spm not given): give the file with --spm, or "
        "replace it with the file itself"
    )
    assert not out.exists()
    os.remove(data / "spm.model")
    (data / "spm.model").write_bytes(b"")
    (data / "text").mkdir()
    os.mkfifo(data / "text" / "test.raw.tgt")
    config = BenchmarkConfig(data=str(data), subset="test", out_dir=str(out),
                             systems=[parse_system("base=absent.pt")])  # fmt: skip
    with pytest.raises(ValueError, match=r"test\.raw\.tgt is a pipe or a device, not a regular "
                       r"file, and the benchmark would read it \(--references not given\)"):
        references_file(config, "tgt")


@pytest.mark.slow
def test_speed_does_not_depend_on_the_company(bench_data, tmp_path):
    """The baseline decodes as fast alone as beside SAN and CTranslate2 (with
    CTranslate2 loaded in the process that timed torch, torch ran at half speed).

    One thread per engine and fixed lengths: on a loaded machine two threads per engine make
    torch's speed swing tenfold from pass to pass (threads waiting at barriers for a preempted
    sibling), which no tolerance absorbs. Load only slows a pass down, so the best pass of each
    run is taken (of 5 repeats), and each run beside the others is compared with the run alone
    just before it, under the same load, over up to 3 attempts (the other tests' load comes and
    goes: comparing the best of all runs alone with the best beside failed once, 1,653 tok/s
    alone in a lull of a training beside the CI, against 870 and 1,016 in the other runs alone).
    A systematic slow-down fails every attempt. Only a slow-down beside the others is the fault:
    the baseline faster beside them (1.48x in one CI run) says that load hit the run alone.
    """
    pytest.importorskip("ctranslate2")
    data, checkpoint = bench_data

    def best_speed(out_dir, *extra):
        result = run_cli(
            "fairseq-san-bench", "--data", str(data), "--system", f"base={checkpoint}",
            "--beams", "4", "--modes", "fixed", "--fixed-length", "16", "--batch-size", "8",
            "--max-sentences", "16", "--repeats", "5", "--cache-beams", "--no-profile",
            "--threads", "1", "--cpu", "--out-dir", str(out_dir), *extra,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-3000:]
        results = json.loads((out_dir / "results.json").read_text(encoding="utf-8"))
        assert len(results["systems"]) == (1 if "--no-ctranslate2" in extra else 4)
        run = results["systems"]["base"]["settings"]["beam4_fixed"]
        return max(run["tokens_per_second_repeats"])

    san = f"san={checkpoint}:" + json.dumps({"san_policy": POLICY})
    ratios = []
    for attempt in range(3):
        alone = best_speed(tmp_path / f"alone{attempt}", "--no-ctranslate2")
        ratios.append(best_speed(tmp_path / f"beside{attempt}", "--system", san) / alone)
        if ratios[-1] >= 0.7:
            break
    assert max(ratios) >= 0.7, ratios


@pytest.mark.slow
def test_ctranslate2_never_shares_the_process_that_times_torch(bench_results):
    _, results = bench_results
    if results["ctranslate2"]["status"] != "ok":
        pytest.skip(results["ctranslate2"].get("note", "no CTranslate2 row"))
    processes = {name: system["process"] for name, system in results["systems"].items()}
    torch_pids = {p["pid"] for name, p in processes.items() if "CTranslate2" not in name}
    ct2_pids = {p["pid"] for name, p in processes.items() if "CTranslate2" in name}
    assert len(torch_pids) == 1 and len(ct2_pids) == 1 and torch_pids != ct2_pids
    assert os.getpid() not in torch_pids | ct2_pids
    for name, process in processes.items():
        assert process["ctranslate2_loaded"] == ("CTranslate2" in name), name


def test_step_timer_is_a_mode_of_the_benchmark_with_every_precision(capsys):
    """``fairseq-san-bench steps`` times fairseq and the static decoder at each precision."""
    from fairseq_san.cli.bench import main
    from fairseq_san.static_decoding.precision import PRECISIONS

    main(["steps", "--vocab", "40", "--batch", "1", "--batches", "1", "--length", "2",
          "--source-length", "3", "--rounds", "1", "--threads", "1"])  # fmt: skip
    rows = [line.split()[:2] for line in capsys.readouterr().out.splitlines() if "ms/step" in line]
    decoders = ["fairseq", *(f"static-{name}" for name in PRECISIONS)]
    assert rows == [[policy, decoder] for policy in ("baseline", "san-6-6") for decoder in decoders]


def test_step_timer_of_an_aan_decoder_times_the_baseline_by_default(capsys):
    """The default policies held san-6-6, which shares decoder self-attention: the default command
    failed for an AAN --arch."""
    from fairseq_san.cli.bench import main

    main(["steps", "--arch", "transformer_aan_small", "--vocab", "40", "--batch", "1",
          "--batches", "1", "--length", "2", "--source-length", "3", "--rounds", "1",
          "--threads", "1", "--decoders", "fairseq", "static-fp32"])  # fmt: skip
    rows = [line.split()[:2] for line in capsys.readouterr().out.splitlines() if "ms/step" in line]
    assert rows == [["baseline", "fairseq"], ["baseline", "static-fp32"]]


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_step_timer_names_the_models_weights(capsys, dtype):
    """With ``--dtype bf16`` the rows read ``static-fp32`` and nothing said bf16."""
    from fairseq_san.cli.bench import main

    main(["steps", "--vocab", "40", "--batch", "1", "--batches", "1", "--length", "2",
          "--source-length", "3", "--rounds", "1", "--threads", "1", "--policies", "baseline",
          "--dtype", dtype])  # fmt: skip
    header = next(line for line in capsys.readouterr().out.splitlines() if "beam 4" in line)
    weights = {"fp32": "with fp32 weights,",
               "bf16": "with bf16 weights (--dtype bf16: static-fp32 rows compute in bf16 too),"}
    assert header.startswith(f"transformer_san_small {weights[dtype]} beam 4, batch 1, L=2, ")


def test_step_timer_counts_the_page_faults_of_each_configuration():
    """A generator that touches a fresh 64 MiB mapping per batch is counted its pages (16,384 of
    4 KiB, fewer if huge); one that allocates nothing, none to speak of."""
    import mmap

    from fairseq_san.benchmark.step_timer import time_rounds

    class Touches:
        def generate(self, models, sample):
            with mmap.mmap(-1, 64 << 20) as fresh:
                fresh[:: mmap.PAGESIZE] = b"x" * (len(fresh) // mmap.PAGESIZE)

    class Idle:
        def generate(self, models, sample):
            pass

    times, faults = time_rounds({"touches": Touches(), "idle": Idle()}, [None], 2, 4)
    assert set(times) == set(faults) == {"touches", "idle"}
    assert min(faults["touches"]) >= 32 / 4  # 64 MiB in 2 MiB pages at the least, over 4 steps
    assert max(faults["idle"]) < 1


@pytest.mark.parametrize(
    "argv, said",
    [
        (["--beam", "0"], "--beam 0: must be at least 1"),
        # timed once and printed once: the row asked for twice was silently one
        (["--decoders", "fairseq", "static-fp32", "fairseq"], "--decoders: fairseq is given twice"),
        (["--policies", "baseline", "baseline"], "--policies: baseline is given twice"),
        (["--length", "0"], "--length 0: must be at least 1"),
        (["--vocab", "3"], "--vocab 3: must be more than the 4 special symbols"),
        # fairseq searches at most vocab - 1 hypotheses: the report said "beam 50" of beam 5
        (["--vocab", "6", "--beam", "50"], "--beam 50: fairseq's search keeps at most --vocab "
         "minus 1 hypotheses (5); raise --vocab or lower --beam"),
        (["--threads", "99999999999"], "--threads 99999999999: more than the "
         f"{os.cpu_count()} processors of this machine"),
        (["--decoders", "static-fp32-graph"],
         "--decoders static-fp32-graph: precision 'fp32' in execution 'graph' does not run on "
         "cpu"),
        (["--length", "1100"], "--length 1100: transformer_san_small decodes at most 1023 tokens"),
        (["--source-length", "1100"],
         "--source-length 1100: transformer_san_small reads at most 1024"),
        (["--dtype", "fp16", "--decoders", "static-int8"],
         "--decoders static-int8 casts or quantizes a float32 model; --dtype fp16 makes the "
         "model's weights another precision already: leave --dtype fp32"),
        # the model failed to build, in the words of fairseq-train ("fairseq-san: error")
        (["--arch", "transformer_aan_small", "--policies", "san-6-6"],
         "--policies san-6-6: san-6-6 shares decoder self-attention, which an AAN decoder (--arch "
         "transformer_aan_small) has not: give --policies baseline"),
        (["--arch", "transformer"], "argument --arch: invalid choice: 'transformer' (choose from "
                                    "'transformer_aan_base', 'transformer_aan_small', "
                                    "'transformer_san', 'transformer_san_base', "
                                    "'transformer_san_small')"),
    ],
)  # fmt: skip
def test_step_timer_refuses_bad_arguments_in_one_line(capsys, argv, said):
    """Before anything is timed, most before any model is built (they were a reshape or random_
    traceback, or timings of 0 steps); lengths beyond the model's positions once its first model
    is built (fairseq's generator's assertion, an index error in the encoder's embeddings)."""
    from fairseq_san.cli.bench import main

    with pytest.raises(SystemExit) as exit:
        main(["steps", *argv])
    assert exit.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"fairseq-san-bench steps: error: {said}"
    )


def test_step_timer_offers_and_defaults_to_decoders_that_run_on_the_device(monkeypatch, capsys):
    """On a GPU the default decoders held static-int8 (CPU only): the run failed once its models
    were built; static-int8-graph (CPU precision, GPU execution) ran nowhere."""
    from fairseq_san.benchmark.step_timer import STATIC_DECODERS, default_decoders
    from fairseq_san.cli.bench import main

    assert "static-int8" in default_decoders("cpu")
    assert default_decoders("cuda") == [
        "fairseq", "static-fp32", "static-bf16", "static-bf16-fp32-logits", "static-bf16-full"
    ]
    assert "static-int8-graph" not in STATIC_DECODERS and "static-int8-fixed" in STATIC_DECODERS
    assert default_decoders("cuda", "fp16") == ["fairseq", "static-fp32"]  # an fp16 model
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    with pytest.raises(SystemExit):
        main(["steps", "--device", "cuda", "--decoders", "fairseq", "static-int8"])
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "fairseq-san-bench steps: error: --decoders static-int8: precision 'int8' in execution "
        "'eager' does not run on cuda"
    )


def test_step_timer_profile_prints_the_host_view_of_each_system_on_a_cpu(capsys):
    """``--profile``: one table per system by host time; the device view is a GPU's only."""
    from fairseq_san.cli.bench import main

    main(["steps", "--vocab", "40", "--batch", "1", "--batches", "1", "--length", "2",
          "--source-length", "3", "--rounds", "1", "--threads", "1", "--policies", "baseline",
          "--decoders", "fairseq", "static-fp32", "--profile"])  # fmt: skip
    out = capsys.readouterr().out
    assert out.count("--- baseline ") == 2 and out.count("Self CPU time total") == 2
    assert "device busy" not in out and "Self CUDA" not in out
    assert out.count("x the bound") == 2


def test_step_timer_profile_sets_each_step_against_its_bound(capsys):
    """``--profile``: a position's bound is its matrix products at the measured matmul peak or its
    decoder weights at the measured copy bandwidth; SAN {6}/{6} needs fewer of both."""
    from fairseq_san.cli.bench import main

    main(["steps", "--vocab", "40", "--batch", "2", "--batches", "1", "--length", "3",
          "--source-length", "3", "--rounds", "1", "--threads", "1", "--decoders", "fairseq",
          "--profile"])  # fmt: skip
    pattern = re.compile(r"^(\S+) fairseq: bound ([\d.]+) GFLOP at ([\d,]+) GFLOP/s, ([\d.]+) MB of "
                         r"decoder weights at ([\d,.]+) GB/s: ([\d.]+) ms per position; the timed "
                         r"step ([\d.]+) ms, ([\d.]+)x the bound$")  # fmt: skip
    found = {m[1]: [float(x.replace(",", "")) for x in m.groups()[1:]]
             for m in map(pattern.match, capsys.readouterr().out.splitlines()) if m}  # fmt: skip
    assert set(found) == {"baseline", "san-6-6"}
    for gflop, gflops, weight_mb, gbs, bound_ms, step_ms, ratio in found.values():
        assert gflop > 0 and gflops > 0 and weight_mb > 0 and gbs > 0
        assert bound_ms == pytest.approx(1e3 * max(gflop / gflops, weight_mb / 1e3 / gbs), rel=0.05)
        assert ratio == pytest.approx(step_ms / bound_ms, rel=0.06)
    (base_gflop, _, base_mb, *_), (san_gflop, _, san_mb, *_) = found["baseline"], found["san-6-6"]
    assert san_gflop < base_gflop and san_mb < base_mb


def test_peak_of_a_row_comes_from_the_table_of_precisions():
    from fairseq_san.benchmark.report import peak_precision

    assert [peak_precision(name) for name in ("fp32", "bf16-full", "bf16-fp32-logits", "int8")] == [
        "fp32", "bf16", "bf16", "int8"
    ]
    assert peak_precision("fp16") == "fp16"  # fairseq's model dtype, not a static precision


def test_report_and_plots_do_not_import_each_other():
    import ast
    from helpers import REPO

    def imports(name: str) -> set:
        tree = ast.parse((REPO / "fairseq_san" / "benchmark" / f"{name}.py").read_text())
        return {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}

    assert "fairseq_san.benchmark.plots" not in imports("report")


def test_fewer_than_three_repeats_are_said_to_give_no_medians():
    """The header said "1 timed repeats (medians; ...)" for a single pass."""
    from fairseq_san.benchmark.report import timed_repeats

    assert timed_repeats(3) == "3 timed repeats, medians"
    assert timed_repeats(1) == "1 timed repeat: no medians, speeds not comparable"
    assert timed_repeats(2) == "2 timed repeats: no medians, speeds not comparable"


def test_systems_of_another_direction_or_beams_wider_than_the_vocabulary_are_refused():
    """A De->En system beside an En->De one was fed the first one's English sources and scored
    against German references, and a beam above the target dictionary's entries minus one was
    reported as measured (fairseq's search and the static decoder keep no more; CTranslate2's
    rows decoded it): each ratio compared unlike things, exit 0."""
    from types import SimpleNamespace

    from fairseq_san.benchmark.config import BenchmarkConfig, parse_system
    from fairseq_san.benchmark.run import check_beams_fit, check_one_direction

    def task(source: str, target: str) -> SimpleNamespace:
        return SimpleNamespace(cfg=SimpleNamespace(source_lang=source, target_lang=target))

    config = BenchmarkConfig(data="d", out_dir="o", systems=[parse_system("base=a.pt"),
                                                            parse_system("deen=b.pt")])  # fmt: skip
    check_one_direction(config, [task("en", "de"), task("en", "de")])
    with pytest.raises(ValueError) as refused:
        check_one_direction(config, [task("en", "de"), task("de", "en")])
    assert str(refused.value) == (
        "system deen translates de->en, and system base en->de: every system is fed the first "
        "one's sources and scored against its references; benchmark one direction per run"
    )
    config.beams, config.cache_beams = [4, 8], [20]
    check_beams_fit(config, 21)
    with pytest.raises(ValueError) as refused:
        check_beams_fit(config, 20)
    assert str(refused.value) == (
        "--cache-beams 20: fairseq's search keeps at most the target dictionary's entries minus "
        "1 hypotheses (19); give beams up to that"
    )


@pytest.mark.parametrize(
    "overrides, said",
    [
        ({"source_lang": "xx", "target_lang": "tgt"},
         "system b: {data}/dict.xx.txt: no such file (the languages it translates, xx->tgt, are "
         "to be those of --data)"),
        ({"source_lang": "tgt", "target_lang": "src"},
         "system b: this checkpoint was trained to translate src into tgt (its "
         "cfg.model.language_pair), and the task asks for tgt into src: give -s src -t tgt "
         "(source_lang='src', target_lang='tgt' to from_pretrained or in a fairseq-san-bench "
         "system's JSON)"),
        ({"data": "/elsewhere"},
         "system b: override of {checkpoint}: override 'data': every system decodes the "
         "sentences of --data, batched once for all; benchmark other data in a run of its own"),
    ],
)  # fmt: skip
def test_a_systems_languages_or_data_are_checked_before_the_workers_start(
    binarized_corpus, san_checkpoint, tmp_path, overrides, said
):  # fmt: skip
    """A system's ``source_lang``/``target_lang`` were met only in its worker: two nested
    tracebacks for a language the data lacks, or a line naming no system for the reverse of the
    trained pair; its ``data`` was decoded there while the report scored --data's references."""
    from fairseq_san.cli import bench

    argv = ["--data", str(binarized_corpus), "--system", f"a={san_checkpoint}",
            "--system", f"b={san_checkpoint}:{json.dumps(overrides)}",
            "--out-dir", str(tmp_path / "out"), "--cpu", "--no-ctranslate2"]  # fmt: skip
    with pytest.raises(SystemExit) as stopped:
        bench.main(argv)
    assert stopped.value.code == "fairseq-san-bench: error: " + said.format(
        data=binarized_corpus, checkpoint=san_checkpoint
    )


# What the speed figures read of a benchmark's results.json besides its systems.
FIGURE_CONFIG = {"beams": [4, 20], "modes": ["natural"], "subset": "test", "sentences": 64,
                 "data": "data-bin/multi30k.en-de", "batch_size": 16}  # fmt: skip
FIGURE_MACHINE = {"cpu": "AMD EPYC", "torch_threads": 2}


def test_speed_against_beam_is_ticked_at_the_beams(monkeypatch, tmp_path):
    """Beams 4 and 20 were ticked 5.0, 7.5, ..., 17.5: beam sizes no run had."""
    pytest.importorskip("matplotlib")
    from fairseq_san.benchmark.plots import plot_speed_vs_beam

    drawn = drawn_figures(monkeypatch)
    settings = {f"beam{b}_natural": {"tokens_per_second": 100.0 / b} for b in (4, 20)}
    results = {"config": FIGURE_CONFIG, "machine": FIGURE_MACHINE,
               "systems": {"base": {"settings": settings}}}  # fmt: skip
    plot_speed_vs_beam(results, tmp_path / "speed_vs_beam.png")
    (fig,) = drawn
    assert [[float(tick) for tick in ax.get_xticks()] for ax in fig.axes] == [[4.0, 20.0]]


@pytest.mark.parametrize("machine, device", [
    (FIGURE_MACHINE, "AMD EPYC, 2 threads"),
    (dict(FIGURE_MACHINE, gpu="NVIDIA H200"), "NVIDIA H200"),
])  # fmt: skip
def test_speed_figures_say_what_was_decoded_where_and_tell_every_system_apart(
    monkeypatch, tmp_path, machine, device
):  # fmt: skip
    """The figures named neither the data nor the device measured; an eleventh system was drawn
    in the first's colour and marker (a benchmark of eleven systems: CTranslate2 int8 and the
    baseline both blue circles)."""
    pytest.importorskip("matplotlib")
    from fairseq_san.benchmark.plots import plot_speed_vs_beam, plot_speed_vs_bleu

    drawn = drawn_figures(monkeypatch)
    run = {"tokens_per_second": 100.0, "bleu": 30.0}
    systems = {f"s{k}": {"settings": {"beam4_natural": run, "beam20_natural": run}}
               for k in range(11)}  # fmt: skip
    results = {"config": FIGURE_CONFIG, "machine": machine, "systems": systems}
    plot_speed_vs_beam(results, tmp_path / "speed_vs_beam.png")
    plot_speed_vs_bleu(results, tmp_path / "speed_vs_bleu.png")
    title = f"test of data-bin/multi30k.en-de: 64 sentences, batches of 16; {device}"
    assert [fig.get_suptitle() for fig in drawn] == [title, title]
    for fig in drawn:
        styles = {(line.get_color(), line.get_marker()) for line in fig.axes[0].lines}
        assert len(styles) == 11


def test_a_system_has_one_colour_in_every_panel_of_speed_against_beam(monkeypatch, tmp_path):
    """A system without natural-length runs shifted the next system's colour in that panel, off
    the legend, drawn from the fixed-length panel: b's line read as a's."""
    pytest.importorskip("matplotlib")
    from fairseq_san.benchmark.plots import plot_speed_vs_beam

    drawn = drawn_figures(monkeypatch)
    fixed = {f"beam{b}_fixed": {"tokens_per_second": 100.0} for b in (4, 20)}
    both = {**fixed, **{f"beam{b}_natural": {"tokens_per_second": 90.0} for b in (4, 20)}}
    results = {"config": dict(FIGURE_CONFIG, modes=["natural", "fixed"]),
               "machine": FIGURE_MACHINE,
               "systems": {"a": {"settings": fixed}, "b": {"settings": both}}}  # fmt: skip
    plot_speed_vs_beam(results, tmp_path / "speed_vs_beam.png")
    (fig,) = drawn
    natural, fixed_panel = ({line.get_label(): line.get_color() for line in ax.lines}
                            for ax in fig.axes)  # fmt: skip
    assert list(natural) == ["b"] and natural["b"] == fixed_panel["b"] != fixed_panel["a"]


def test_speed_against_bleu_writes_no_label_over_another(monkeypatch, tmp_path):
    """Beside every point, san's and san-fast's "b4" and "b20" overprinted each other."""
    pytest.importorskip("matplotlib")
    from fairseq_san import plots
    from fairseq_san.benchmark.plots import plot_speed_vs_bleu

    drawn = drawn_figures(monkeypatch)
    measured = {"san": ((37.96, 2370.0), (38.25, 2090.0)),  # batch16's, nearly on each other
                "san-fast": ((37.97, 2270.0), (38.24, 2150.0)),
                "san-graph": ((37.97, 8830.0), (38.25, 6010.0))}  # fmt: skip
    systems = {name: {"settings": {f"beam{b}_natural": {"bleu": bleu, "tokens_per_second": speed}
                                   for b, (bleu, speed) in zip((4, 20), points)}}
               for name, points in measured.items()}  # fmt: skip
    plot_speed_vs_bleu({"config": FIGURE_CONFIG, "machine": FIGURE_MACHINE, "systems": systems},
                       tmp_path / "speed_vs_bleu.png")  # fmt: skip
    (fig,) = drawn
    renderer = fig.canvas.get_renderer()
    labels = [text for text in fig.axes[0].texts if text.get_text()]
    assert sorted(text.get_text() for text in labels) == ["b20"] * 3 + ["b4"] * 3
    boxes = [text.get_window_extent(renderer) for text in labels]
    assert not [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:] if a.overlaps(b)]
    plots._pyplot().close(fig)
