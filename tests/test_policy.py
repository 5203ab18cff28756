"""Tests for sharing policies: parsing, files, leaders and learning (section 3.3)."""

import json
import math
import os
import pickle
import random
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy
import pytest

from paper import PAPER_ENCDEC, PAPER_SELF
from fairseq_san.cli.policy import explanation, main as policy_main, policy_map_line
from fairseq_san.policy import (
    KINDS,
    LN2,
    PolicyError,
    block_leaders,
    block_similarity,
    blocks_beyond,
    dump_policy,
    format_blocks,
    format_policy,
    learn_blocks,
    learn_policy,
    load_policy,
    mean_js,
    parse_blocks,
    policy_segments,
    recorded_difference,
    resolve_policy,
    theta_range,
    theta_ranges,
    unrecorded_note,
    validate_blocks,
    write_policy,
)

REPO = Path(__file__).resolve().parents[1]

def write_json(path: Path, data) -> str:
    path.write_text(json.dumps(data))
    return str(path)


def test_a_recorded_nan_agrees_with_itself_and_differs_from_a_number():
    """A NaN is not equal to itself: one analysis recording "seed": NaN was named as of another
    training than itself ("a.json (seed nan) and a.json (seed nan)")."""
    nan = {"seed": float("nan")}
    assert recorded_difference([nan], ["a.json"], "seed") is None
    assert recorded_difference([nan, {"seed": float("nan")}], ["a", "b"], "seed") is None
    assert recorded_difference([nan, {"seed": 1}], ["a", "b"], "seed")[1] == ("b", 1)


# --- parse_blocks / validate_blocks -------------------------------------


@pytest.mark.parametrize(
    "value, expected",
    [
        ("1,5", [1, 5]),
        (" 1, 5 ", [1, 5]),
        ("6", [6]),
        ([3, 3], [3, 3]),
        ((2, 2, 2), [2, 2, 2]),
        (None, None),
        ("none", None),
        ("None", None),
    ],
)
def test_parse_blocks_accepts(value, expected):
    assert parse_blocks(value, "decoder_self") == expected


@pytest.mark.parametrize(
    "value, shown",
    [
        ("1,a", '"1,a"'),
        ("1.5", '"1.5"'),
        ("1,,5", '"1,,5"'),
        ("0,6", '"0,6"'),
        ("-1,7", '"-1,7"'),
        ([1, 0], "[1, 0]"),
        ([2, -1], "[2, -1]"),
        ([1.0, 5.0], "[1.0, 5.0]"),
        ([True, 5], "[True, 5]"),
        (["1", "5"], "['1', '5']"),
    ],
)
def test_parse_blocks_rejects_non_positive_integers(value, shown):
    with pytest.raises(PolicyError) as err:
        parse_blocks(value, "decoder_self")
    assert str(err.value) == (
        f"decoder_self policy {shown}: block sizes must be positive integers"
    )


def test_parse_blocks_rejects_empty_list_and_other_types():
    with pytest.raises(PolicyError, match=r"decoder_encdec policy \[\]: needs at least one block"):
        parse_blocks([], "decoder_encdec")
    with pytest.raises(PolicyError, match="expected a list of block sizes"):
        parse_blocks(6, "decoder_self")
    with pytest.raises(PolicyError, match="expected a list of block sizes"):
        parse_blocks(1.5)


def test_the_papers_braced_notation_says_what_to_write():
    """fairseq-san-policy prints "{1,5}"; copied into a flag it was "block sizes must be positive
    integers", into --san-policy "malformed JSON"."""
    from fairseq_san.policy import load_policy

    with pytest.raises(PolicyError) as err:
        parse_blocks(" {1, 5} ", "decoder_self")
    assert str(err.value) == (
        'decoder_self policy " {1, 5} ": write the block sizes without braces: "1, 5"'
    )
    with pytest.raises(PolicyError) as err:
        load_policy("{6}")
    assert str(err.value) == (
        "policy '{6}': the paper's notation; a policy is a JSON object of block sizes per kind, "
        'e.g. \'{"decoder_self": [6]}\', or a file holding one'
    )


def test_the_papers_policy_line_says_what_json_to_write(tmp_path, monkeypatch):
    """fairseq-san-policy's summary line given as a policy read as a file name ("policy file ...
    not found"), and braced blocks inside JSON as "malformed JSON"; both name the JSON now."""
    from fairseq_san.policy import load_policy

    monkeypatch.chdir(tmp_path)
    printed = format_policy({"decoder_self": [1, 5], "decoder_encdec": [3, 3]})
    with pytest.raises(PolicyError) as err:
        load_policy(printed)
    assert str(err.value) == (
        f"policy {printed!r}: the paper's notation; as JSON: "
        '\'{"decoder_self": [1, 5], "decoder_encdec": [3, 3], "encoder_self": null}\''
    )
    with pytest.raises(PolicyError) as err:
        load_policy('{"decoder_self": {1,5}}')
    assert str(err.value).endswith("the paper's notation; as JSON: '{\"decoder_self\": [1, 5]}'")


def test_parse_blocks_default_label():
    with pytest.raises(PolicyError) as err:
        parse_blocks("x")
    assert str(err.value) == 'policy "x": block sizes must be positive integers'


def test_validate_blocks():
    assert validate_blocks([1, 5], 6, "decoder_self") == [1, 5]
    with pytest.raises(PolicyError) as err:
        validate_blocks([1, 4], 6, "decoder_self")
    assert str(err.value) == "decoder_self policy [1, 4] sums to 5 but the decoder has 6 layers"
    with pytest.raises(PolicyError) as err:
        validate_blocks([3, 3, 3], 6, "decoder_encdec")
    assert str(err.value) == (
        "decoder_encdec policy [3, 3, 3] sums to 9 but the decoder has 6 layers"
    )
    with pytest.raises(PolicyError) as err:
        validate_blocks([6], 12, "encoder_self")
    assert str(err.value) == "encoder_self policy [6] sums to 6 but the encoder has 12 layers"
    with pytest.raises(PolicyError, match='unknown attention kind "decoder"'):
        validate_blocks([6], 6, "decoder")


# --- policy files --------------------------------------------------------


def test_load_policy(tmp_path):
    path = write_json(
        tmp_path / "p.json",
        {"decoder_self": [1, 5], "decoder_encdec": "3,3", "encoder_self": None},
    )
    assert load_policy(path) == {"decoder_self": [1, 5], "decoder_encdec": [3, 3]}
    assert load_policy(write_json(tmp_path / "empty.json", {})) == {}
    marked = tmp_path / "bom.json"  # a byte-order mark (Notepad): "Unexpected UTF-8 BOM" before
    marked.write_bytes(b"\xef\xbb\xbf" + Path(path).read_bytes())
    assert load_policy(str(marked)) == {"decoder_self": [1, 5], "decoder_encdec": [3, 3]}


def test_load_policy_from_json_text():
    assert load_policy('{"decoder_self": [1, 5], "encoder_self": null}') == {"decoder_self": [1, 5]}
    assert load_policy(dump_policy({"decoder_encdec": [3, 3]})) == {"decoder_encdec": [3, 3]}
    with pytest.raises(PolicyError, match="malformed JSON at line 1"):
        load_policy('{"decoder_self": [1, 5}')


def test_load_policy_from_a_dict():
    """The natural Python form (the hub's ``san_policy`` keyword), read like JSON text."""
    assert load_policy({"decoder_self": [1, 5], "encoder_self": None}) == {"decoder_self": [1, 5]}
    with pytest.raises(PolicyError, match='policy: unknown key "cross"'):
        load_policy({"cross": [6]})
    with pytest.raises(PolicyError, match=r"decoder_self policy \[1, 0\]: block sizes must be"):
        load_policy({"decoder_self": [1, 0]})


def test_load_policy_of_no_policy_names_the_accepted_ones():
    """None (a list and a number, through a model's build: test_errors.py)."""
    with pytest.raises(PolicyError, match="expected a JSON file, JSON text or a dict"):
        load_policy(None)


@pytest.mark.parametrize("spec", ["null", "None"])
def test_load_policy_of_json_null_says_how_to_share_nothing(spec):
    """``--san-policy null`` was read as a file name: 'policy file "null" not found'."""
    with pytest.raises(PolicyError) as err:
        load_policy(spec)
    said = f"policy '{spec}': to share nothing, leave the policy out (or give '{{}}')"
    assert str(err.value) == said


def test_load_policy_missing(tmp_path):
    path = str(tmp_path / "nope.json")
    with pytest.raises(PolicyError) as err:
        load_policy(path)
    assert str(err.value) == f'policy file "{path}" not found'


@pytest.mark.parametrize("spec", ["[1,5]", "1,5", "6"])
def test_load_policy_of_block_sizes_alone_says_what_a_policy_is(spec):
    """Block sizes where a policy is read (``--san-policy '[1,5]'``) read as a file name before."""
    with pytest.raises(PolicyError) as err:
        load_policy(spec)
    assert str(err.value).startswith(f"policy {spec!r}: a policy is a JSON object of block sizes")


def test_load_policy_nested_too_deeply_is_one_line(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(PolicyError) as err:
        load_policy(str(path))
    assert str(err.value) == f'policy file "{path}": JSON nested too deeply to be one'
    with pytest.raises(PolicyError, match="JSON nested too deeply"):
        load_policy('{"decoder_self": ' + "[" * 100_000 + "]" * 100_000 + "}")


def test_a_policy_of_a_block_of_hundreds_of_digits_is_one_short_line():
    """Refused, but the line showed every digit, twice (about 880 characters)."""
    with pytest.raises(PolicyError) as refused:
        validate_blocks([10**400], 6, "decoder_self")
    assert str(refused.value) == (
        f"decoder_self policy [{'1' + '0' * 78}... sums to {'1' + '0' * 79}... but the decoder "
        "has 6 layers"
    )


def test_load_policy_malformed_json(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{\n  "decoder_self": [1, 5\n}\n')
    with pytest.raises(PolicyError) as err:
        load_policy(str(path))
    assert str(err.value).startswith(f'policy file "{path}": malformed JSON at line 3 column 1')


def test_load_policy_with_a_key_given_twice_is_refused(tmp_path):
    """json reads the last of the two: the file looked like one policy and was another."""
    text = '{"decoder_self": [6], "decoder_encdec": [3, 3], "decoder_self": [1, 5]}'
    path = tmp_path / "twice.json"
    path.write_text(text)
    with pytest.raises(PolicyError) as err:
        load_policy(str(path))
    assert str(err.value) == f'policy file "{path}": key "decoder_self" is given twice'
    with pytest.raises(PolicyError, match='key "decoder_self" is given twice$'):
        load_policy(text)


def test_load_policy_of_a_device_reads_nothing():
    """``--model-overrides "{'san_policy': '/dev/zero'}"`` read until the process was killed for
    its memory (run with 1 GiB, in a process of its own)."""
    code = (
        "import resource\n"
        "resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30))\n"
        "from fairseq_san.policy import PolicyError, load_policy\n"
        "try:\n"
        "    load_policy('/dev/zero')\n"
        "except PolicyError as error:\n"
        "    print(error)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert result.stdout == (
        'policy file "/dev/zero" is a device, pipe or socket, not a file: give a JSON file\n'
    ), result.stderr[-2000:]


@pytest.mark.parametrize("what", ["folder", "large file"])
def test_load_policy_of_no_policy_file_is_refused_before_it_is_read(tmp_path, what):
    """A folder said "[Errno 21] Is a directory"; a file of any size was read whole."""
    path = tmp_path / "policy.json"
    if what == "folder":
        path.mkdir()
        said = f'policy file "{path}" is a folder, not a file: give a JSON file'
    else:
        path.write_text('{"decoder_self": [6]}' + " " * 1_000_000)
        said = (
            f'policy file "{path}" is over 1,000,000 bytes, more than a policy file holds: '
            "check the path"
        )
    with pytest.raises(PolicyError) as err:
        load_policy(str(path))
    assert str(err.value) == said


def test_load_policy_of_a_path_that_cannot_be_opened_says_why(tmp_path):
    """A policy path through a file, or a link to itself: one line with the system's reason
    (``files.read_json``), as for any file that cannot be read."""
    (tmp_path / "f").touch()
    (tmp_path / "loop.json").symlink_to(tmp_path / "loop.json")
    cases = [(tmp_path / "f" / "policy.json", "Not a directory"),
             (tmp_path / "loop.json", "Too many levels of symbolic links")]
    for path, reason in cases:
        with pytest.raises(PolicyError) as err:
            load_policy(str(path))
        assert str(err.value) == f'policy file "{path}" cannot be read ({reason}): give a JSON file'


def test_load_policy_not_an_object(tmp_path):
    path = write_json(tmp_path / "list.json", [1, 5])
    with pytest.raises(PolicyError) as err:
        load_policy(path)
    assert str(err.value) == (
        f'policy file "{path}" holds a JSON array, not a JSON object: give a JSON file'
    )


def test_load_policy_unknown_key(tmp_path):
    path = write_json(tmp_path / "p.json", {"decoder_self": [6], "decoder_cross": [3, 3]})
    with pytest.raises(PolicyError) as err:
        load_policy(path)
    assert str(err.value) == (
        f'policy file "{path}": unknown key "decoder_cross" '
        "(valid keys: decoder_self, decoder_encdec, encoder_self)"
    )


@pytest.mark.parametrize("extra", [{"num_updates": 660, "subset": "valid", "policy": {}}, {}])
def test_load_policy_of_an_analysis_says_to_learn_one(tmp_path, extra):
    """A js.json given where a policy is read (``fairseq-san-loop show``, ``--san-policy``) was
    'unknown key "num_updates"', or without it "[[0, 0.54, ...]]: block sizes must be positive
    integers"."""
    path = write_json(tmp_path / "js.json", {**extra, "decoder_self": PAPER_SELF,
                                             "decoder_encdec": PAPER_ENCDEC})  # fmt: skip
    with pytest.raises(PolicyError) as err:
        load_policy(path)
    assert str(err.value) == (
        f'policy file "{path}" holds JS matrices (an analysis, what fairseq-validate '
        "--san-analysis-dir writes), not block sizes: learn a policy from it with "
        "fairseq-san-policy"
    )


def test_load_policy_bad_value(tmp_path):
    path = write_json(tmp_path / "p.json", {"decoder_encdec": [3, 0, 3]})
    with pytest.raises(PolicyError) as err:
        load_policy(path)
    assert str(err.value) == (
        f'policy file "{path}": decoder_encdec policy [3, 0, 3]: '
        "block sizes must be positive integers"
    )


def test_resolve_policy_flag_wins_over_file(tmp_path):
    path = write_json(
        tmp_path / "p.json",
        {"decoder_self": [1, 5], "decoder_encdec": [3, 3], "encoder_self": [6]},
    )
    flags = {"decoder_self": "2,4", "decoder_encdec": None, "encoder_self": "none"}
    assert resolve_policy(path, flags) == {"decoder_self": [2, 4], "decoder_encdec": [3, 3]}


@pytest.mark.parametrize("empty", ["", " "])
def test_an_empty_flag_is_refused_not_read_as_no_sharing(tmp_path, empty):
    """``--san-decoder-self-policy "$BLOCKS"`` with the variable unset unshared the kind that
    ``--san-policy`` shares, unsaid; "none" still switches it off."""
    path = write_json(tmp_path / "p.json", {"decoder_self": [1, 5]})
    with pytest.raises(PolicyError) as refused:
        resolve_policy(path, {"decoder_self": empty})
    assert str(refused.value) == (
        f'decoder_self policy "{empty}" is empty: give block sizes such as "1,5", or "none" to '
        "share nothing"
    )
    assert resolve_policy(path, {"decoder_self": "none"}) == {}


def test_resolve_policy_without_file():
    assert resolve_policy(None, {"decoder_encdec": "3, 3", "decoder_self": None}) == {
        "decoder_encdec": [3, 3]
    }
    with pytest.raises(PolicyError, match='unknown attention kind "cross"'):
        resolve_policy(None, {"cross": "6"})
    with pytest.raises(PolicyError, match='decoder_self policy "1,x"'):
        resolve_policy(None, {"decoder_self": "1,x"})


@pytest.mark.parametrize("empty", ["", "  "])
def test_an_empty_policy_is_refused_not_read_as_no_sharing(empty):
    """``--san-policy "$POLICY"`` with the variable unset trained a model without sharing."""
    with pytest.raises(PolicyError, match=f"^policy {empty!r} is empty: leave --san-policy out"):
        resolve_policy(empty, {"decoder_self": None})


def test_dump_and_write_round_trip(tmp_path):
    policy = {"decoder_encdec": [3, 3], "decoder_self": [1, 5]}
    text = dump_policy(policy)
    assert text == (
        '{\n  "decoder_self": [1, 5],\n  "decoder_encdec": [3, 3],\n'
        '  "encoder_self": null\n}\n'
    )
    assert tuple(json.loads(text)) == KINDS
    path = str(tmp_path / "policy.json")
    write_policy(policy, path)
    assert load_policy(path) == policy
    with pytest.raises(PolicyError, match='unknown attention kind "cross"'):
        dump_policy({"cross": [6]})


def test_write_follows_a_link_and_writes_into_a_pipe(tmp_path):
    """The write through a temporary file and a rename replaced a symbolic link (its target kept
    the old policy) and, as root, a device such as /dev/stdout with a plain file."""
    policy = {"decoder_self": [1, 5]}
    target, link = tmp_path / "target.json", tmp_path / "link.json"
    target.write_text("{}")
    link.symlink_to(target)
    write_policy(policy, str(link))
    assert link.is_symlink() and load_policy(str(target)) == policy
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    read = []
    reader = threading.Thread(target=lambda: read.append(pipe.read_text()), daemon=True)
    reader.start()
    write_policy(policy, str(pipe))
    reader.join(timeout=10)
    assert pipe.is_fifo() and read == [dump_policy(policy)]


@pytest.mark.parametrize("opened", ["a", "w"], ids=[">> log", "> log"])
def test_a_policy_written_to_dev_stdout_lands_after_what_was_printed(tmp_path, opened):
    """`fairseq-san-policy ... -o /dev/stdout >> log`: /dev/stdout names the log itself, which the
    rename replaced (the lines the shell and the command wrote before were lost)."""
    log = tmp_path / "log"
    log.write_text("earlier\n")
    program = (
        "from fairseq_san.policy import write_policy\n"
        "print('printed')\n"
        "write_policy({'decoder_self': [6]}, '/dev/stdout')\n"
        "print('after')\n"
    )
    with open(log, opened) as output:
        subprocess.run([sys.executable, "-c", program], stdout=output, check=True)
    earlier = "earlier\n" if opened == "a" else ""
    assert log.read_text() == f"{earlier}printed\n{dump_policy({'decoder_self': [6]})}after\n"


def test_a_policy_that_cannot_be_written_is_named_not_its_temporary_file():
    """The error named the temporary file: "[Errno 2] No such file or directory: 'P.json.tmp'"."""
    with pytest.raises(PolicyError) as refused:
        write_policy({"decoder_self": [6]}, "/proc/policy.json")  # no new file under /proc
    assert str(refused.value) == (
        'cannot write policy file "/proc/policy.json": No such file or directory'
    )


def test_format_policy():
    policy = {"decoder_self": [1, 5], "decoder_encdec": [3, 3]}
    assert format_policy(policy) == "decoder_self {1,5}  decoder_encdec {3,3}  encoder_self none"
    assert format_policy({}) == "decoder_self none  decoder_encdec none  encoder_self none"


# --- leaders -------------------------------------------------------------


@pytest.mark.parametrize(
    "blocks, expected",
    [
        (None, [0, 1, 2, 3, 4, 5]),
        ([1, 5], [0, 1, 1, 1, 1, 1]),
        ([3, 3], [0, 0, 0, 3, 3, 3]),
        ([6], [0, 0, 0, 0, 0, 0]),
        ([2, 1, 3], [0, 0, 2, 3, 3, 3]),
        ([1, 1, 1, 1, 1, 1], [0, 1, 2, 3, 4, 5]),
    ],
)
def test_block_leaders(blocks, expected):
    assert block_leaders(blocks, 6) == expected


def test_block_leaders_rejects_wrong_sum():
    with pytest.raises(PolicyError, match=r"policy \[3, 2\] sums to 5 but there are 6 layers"):
        block_leaders([3, 2], 6)


# --- policy learning (Eq. 6) ---------------------------------------------


def test_paper_figure_2_gives_paper_policies():
    assert learn_blocks(PAPER_SELF, 0.5) == [1, 5]
    assert learn_blocks(PAPER_ENCDEC, 0.5) == [3, 3]
    assert learn_policy(
        {"decoder_self": PAPER_SELF, "decoder_encdec": PAPER_ENCDEC},
        {"decoder_self": 0.5, "decoder_encdec": 0.5, "encoder_self": None},
    ) == {"decoder_self": [1, 5], "decoder_encdec": [3, 3]}


def test_block_similarity_matches_hand_computation():
    # Layers 1-3 of Fig. 2b: six ordered pairs, each JS appearing twice.
    expected = ((LN2 - 0.0175) + (LN2 - 0.2239) + (LN2 - 0.1442)) * 2 / (3 * 2)
    assert block_similarity(PAPER_ENCDEC, 0, 2) == pytest.approx(expected)
    assert block_similarity(PAPER_ENCDEC, 0, 2) == pytest.approx(0.5646, abs=1e-4)
    # Adding layer 4 drops the block below 0.5, which is why Fig. 2b gives {3,3}.
    assert block_similarity(PAPER_ENCDEC, 0, 3) == pytest.approx(0.4966, abs=1e-4)
    assert block_similarity(PAPER_SELF, 4, 5) == pytest.approx(LN2 - 0.0389)


def test_single_layer_block_always_qualifies():
    assert block_similarity(PAPER_SELF, 2, 2) == pytest.approx(LN2)
    # Layer 1 of Fig. 2a is far from all others; at theta = ln 2 every block is one layer.
    assert learn_blocks(PAPER_SELF, LN2) == [1] * 6
    assert learn_blocks([[0.0]], 0.3) == [1]


class CountingRow(list):
    """A JS matrix row that counts how many of its values the search reads."""

    reads = 0

    def __getitem__(self, index):
        CountingRow.reads += 1
        return super().__getitem__(index)

    def __iter__(self):
        for value in super().__iter__():
            CountingRow.reads += 1
            yield value


def test_the_search_reads_each_js_value_a_few_times_however_many_layers(monkeypatch):
    """Every one of the O(layers^2) blocks the search meets summed its pairs anew: O(layers^4)
    reads, and --map searched anew for each policy: 100 s for --map 0.7 over 96 layers. Each
    value is now read once per call."""
    import fairseq_san.policy as policy

    layers = 40
    js = [[0.0 if i == j else 0.01 + 0.001 * abs(i - j) for j in range(layers)]
          for i in range(layers)]  # fmt: skip
    monkeypatch.setattr(policy, "check_js", lambda m: [CountingRow(map(float, r)) for r in m])
    CountingRow.reads = 0
    assert learn_blocks(js, LN2) == [1] * layers  # every block of one layer: the most blocks met
    assert theta_range(js, LN2).high == LN2
    assert len(policy_segments(js, 0.0, LN2)) > layers // 2  # --map: a search per segment
    assert CountingRow.reads <= 4 * layers**2


def test_block_similarity_is_the_correctly_rounded_mean_of_its_pairs():
    """A block's sim is ln 2 less math.fsum of its pairs over their number, bit for bit: the
    policies learned before the sums were kept whole stay the same (ties at theta included)."""
    rng = random.Random(0)
    for _ in range(50):
        layers = rng.randint(2, 9)
        js = [[0.0] * layers for _ in range(layers)]
        for i in range(layers):
            for j in range(i + 1, layers):
                js[i][j] = js[j][i] = rng.choice([0.0, 5e-324, 0.1, 0.3, LN2, rng.random() * LN2])
        m = rng.randrange(layers - 1)
        n = rng.randrange(m + 1, layers)
        pairs = [js[i][j] for i in range(m, n + 1) for j in range(m, n + 1) if i != j]
        assert block_similarity(js, m, n) == LN2 - math.fsum(pairs) / len(pairs)


def test_block_similarity_rejects_out_of_range_block():
    with pytest.raises(PolicyError, match=r"block 4\.\.6 is not within layers 0\.\.5"):
        block_similarity(PAPER_SELF, 4, 6)
    with pytest.raises(PolicyError, match=r"block 3\.\.2"):
        block_similarity(PAPER_SELF, 3, 2)


@pytest.mark.parametrize("js", [PAPER_SELF, PAPER_ENCDEC])
def test_theta_extremes(js):
    assert learn_blocks(js, 0.0) == [6]
    assert learn_blocks(js, LN2) == [1] * 6


@pytest.mark.parametrize("js", [PAPER_SELF, PAPER_ENCDEC])
def test_larger_theta_shares_less(js):
    thetas = [i * LN2 / 40 for i in range(41)]
    policies = [learn_blocks(js, theta) for theta in thetas]
    counts = [len(blocks) for blocks in policies]
    assert counts == sorted(counts)
    first_blocks = [blocks[0] for blocks in policies]
    assert first_blocks == sorted(first_blocks, reverse=True)
    assert all(sum(blocks) == 6 for blocks in policies)


def test_a_larger_theta_can_share_more_above_the_first_block_as_its_help_allows(capsys):
    # Section 3.3's search is greedy: at 0.6 layers 1-2 no longer form a block, and layers 2-4
    # then do, so the larger theta learns fewer blocks; the first block alone never grows.
    js = [[0, 0.1, 0.5, 0.1], [0.1, 0, 0, 0], [0.5, 0, 0, 0.2], [0.1, 0, 0.2, 0]]
    assert learn_blocks(js, 0.55) == [2, 1, 1]
    assert learn_blocks(js, 0.6) == [1, 3]
    with pytest.raises(SystemExit):
        policy_main(["--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert "--theta-decoder-self T" in said and "shares less" not in said


def test_biggest_block_is_taken_even_past_a_failing_one():
    # sim(0,1) is low but sim(0,2) is high: the search must look past n = 1.
    js = [[0, 0.6, 0.0], [0.6, 0, 0.0], [0.0, 0.0, 0]]
    assert block_similarity(js, 0, 1) < 0.3 <= block_similarity(js, 0, 2)
    assert learn_blocks(js, 0.3) == [3]


@pytest.mark.parametrize(
    "js, message",
    [
        ([], "JS matrix must be a non-empty list of rows"),
        ("abc", "JS matrix must be a non-empty list of rows"),
        ([[0, 0.1], [0.1]], "JS matrix is not square: row 1 has 1 values but there are 2 rows"),
        ([[0, 0.1, 0.2], [0.1, 0, 0.3]], "JS matrix is not square: row 0 has 3 values"),
        ([1, 5], r"JS matrix must be a list of rows, lists of numbers: row 0 is 1 \(block sizes "
         r"are a policy, not an attention analysis\)"),
        ([[0, 0.1], [0.2, 0]], r"is not symmetric: \[0\]\[1\] = 0.1 but \[1\]\[0\] = 0.2"),
        ([[0, "a"], ["a", 0]], r"JS matrix value \[0\]\[1\] = 'a' is not a finite number"),
        ([[0, True], [True, 0]], r"value \[0\]\[1\] = True is not a finite number"),
        ([[0, math.nan], [math.nan, 0]], "is not a finite number"),
        ([[0, math.inf], [math.inf, 0]], "is not a finite number"),
        ([[0, 1.2], [1.2, 0]], r"JS matrix value \[0\]\[1\] = 1.2 is outside \[0, 1.0\]"),
        ([[0, -0.1], [-0.1, 0]], r"value \[0\]\[1\] = -0.1 is outside"),
        # math.isfinite raised OverflowError; the message showed every digit
        ([[0, 10**400], [10**400, 0]], r"value \[0\]\[1\] = 1" + "0" * 79 + r"\.\.\. is "
         r"outside \[0, 1.0\]$"),
        ([[0.1, 0.2], [0.2, 0]], r"JS matrix diagonal \[0\]\[0\] = 0.1 should be 0"),
    ],
)
def test_bad_js_matrix(js, message):
    with pytest.raises(PolicyError, match=message):
        learn_blocks(js, 0.5)


def test_tolerances_accept_rounding_noise():
    js = [[1e-9, 0.1], [0.1 + 1e-9, -1e-9]]
    assert learn_blocks(js, 0.5) == [2]


@pytest.mark.parametrize("theta", [-0.01, 0.7, 1.0, math.nan, True, "0.5", None])
def test_bad_theta(theta):
    with pytest.raises(PolicyError, match=r"theta .* must be a number in \[0, ln 2 = 0\.6931\]"):
        learn_blocks(PAPER_SELF, theta)


def test_learn_policy_errors():
    with pytest.raises(PolicyError, match='unknown attention kind "decoder_cross"'):
        learn_policy({"decoder_self": PAPER_SELF}, {"decoder_cross": 0.5})
    with pytest.raises(PolicyError) as err:
        learn_policy({"decoder_self": PAPER_SELF}, {"decoder_encdec": 0.5})
    assert str(err.value) == "no JS matrix for decoder_encdec, but a theta is given for it"
    with pytest.raises(PolicyError, match=r"^decoder_self: theta 0\.9 must be a number in"):
        learn_policy({"decoder_self": PAPER_SELF}, {"decoder_self": 0.9})
    with pytest.raises(PolicyError, match=r"^encoder_self: JS matrix is not square"):
        learn_policy({"encoder_self": [[0, 0.1]]}, {"encoder_self": 0.5})
    # Beside a matrix of the same stack, a matrix that is not square is named as such (it read
    # "decoder_self is 5x5 but decoder_encdec is 6x6").
    five_rows = {"decoder_self": PAPER_SELF[:5], "decoder_encdec": PAPER_ENCDEC}
    with pytest.raises(PolicyError, match=r"^decoder_self: JS matrix is not square: row 0 has 6"):
        learn_policy(five_rows, {"decoder_self": 0.5, "decoder_encdec": 0.5})


def test_learn_policy_skips_unshared_kinds_and_extra_keys():
    js = {"decoder_self": PAPER_SELF, "encoder_self": "ignored", "sentences": 100}
    assert learn_policy(js, {"decoder_self": 0.3, "encoder_self": None}) == {"decoder_self": [6]}


def test_learn_policy_leaves_a_kind_without_weights_unshared():
    """AAN's decoder self-attention has no weights: the analysis writes null, and a theta for
    it learns no sharing instead of failing the loop."""
    js = {"decoder_self": None, "decoder_encdec": PAPER_SELF}
    policy = learn_policy(js, {"decoder_self": 0.4, "decoder_encdec": 0.3})
    assert policy == {"decoder_encdec": [6]}


# --- how far theta is from another policy ---------------------------------


def test_theta_range_of_the_papers_figure_2():
    """{3,3} at 0.5 on Fig. 2b: taken, layers 1-3 (0.5646) and 4-6 (0.5243); passed over, layers
    1-4 (0.4967), 1-5 and 1-6. So the paper's own theta is 0.003 above another policy."""
    same = theta_range(PAPER_ENCDEC, 0.5)
    assert same.low == block_similarity(PAPER_ENCDEC, 0, 3) == pytest.approx(0.4967, abs=1e-4)
    assert same.high == block_similarity(PAPER_ENCDEC, 3, 5) == pytest.approx(0.5243, abs=1e-4)
    assert str(same) == "[0.4967, 0.5243]"  # rounded inwards: (0.49666, 0.52431]
    assert (same.low_block, same.high_block) == ((0, 3), (3, 5))
    assert learn_blocks(PAPER_ENCDEC, same.low) == [4, 2]
    # {1,5} on Fig. 2a: the one-layer block counts as ln 2; layers 2-6 give the upper end.
    assert theta_range(PAPER_SELF, 0.5).high == block_similarity(PAPER_SELF, 1, 5)


def test_theta_range_without_a_block_passed_over_starts_at_0():
    same = theta_range(PAPER_SELF, 0.1)
    assert learn_blocks(PAPER_SELF, 0.1) == [6]
    assert same.low is None and str(same) == "[0, 0.4892]"  # 0.48928: rounded down


def test_theta_range_above_a_block_of_sim_0_leaves_0_out():
    """Two layers of JS ln 2 (sim 0): {1,1} for theta in (0, ln 2], but {2} at theta 0 itself,
    so the range is open at 0 and does not start at 0."""
    js = [[0.0, LN2], [LN2, 0.0]]
    same = theta_range(js, 0.5)
    assert (same.low, same.low_block) == (0.0, (0, 1))
    assert learn_blocks(js, 0.0) == [2] != learn_blocks(js, 0.5) == [1, 1]


def random_js(rng: random.Random, size: int) -> list:
    js = [[0.0] * size for _ in range(size)]
    for i in range(size):
        for j in range(i + 1, size):
            js[i][j] = js[j][i] = rng.uniform(0, LN2)
    return js


def test_policy_segments_map_the_papers_figure_2b_from_low_to_high_theta():
    segments = policy_segments(PAPER_ENCDEC, 0.3, 0.6)
    assert [blocks for *_, blocks in segments] == [[6], [4, 2], [3, 3], [3, 1, 2], [2, 2, 2],
                                                   [2, 1, 1, 2]]  # fmt: skip
    (three_three,) = [segment for segment in segments if segment.blocks == [3, 3]]
    same = theta_range(PAPER_ENCDEC, 0.5)
    assert (three_three.low, three_three.high) == (same.low, same.high)
    assert segments[0].low == 0.3 and segments[-1].high == 0.6
    assert policy_segments(PAPER_SELF, 0.1, 0.2) == [(0.1, 0.2, [6])]


def test_policy_segments_are_contiguous_and_each_learns_its_blocks():
    rng = random.Random(11)
    for _ in range(100):
        js = random_js(rng, rng.randint(1, 8))
        low, high = sorted((rng.uniform(0, LN2), rng.uniform(0, LN2)))
        segments = policy_segments(js, low, high)
        assert segments[0].low == low and segments[-1].high == high
        for before, after in zip(segments, segments[1:]):
            assert before.high == after.low and before.blocks != after.blocks
        for segment in segments:
            assert learn_blocks(js, segment.high) == segment.blocks
            assert learn_blocks(js, math.nextafter(segment.low, 1)) == segment.blocks


def test_policy_segments_refuse_an_empty_or_impossible_range():
    with pytest.raises(PolicyError, match=r"theta range is empty: 0.5 > 0.4"):
        policy_segments(PAPER_SELF, 0.5, 0.4)
    with pytest.raises(PolicyError, match=r"theta 0.8 must be a number in \[0, ln 2"):
        policy_segments(PAPER_SELF, 0.4, 0.8)


def test_theta_range_is_exactly_where_the_same_blocks_are_learned():
    """Inside the range (both ends checked to the last float) the blocks stay; just outside it
    they change."""
    rng = random.Random(7)
    for _ in range(300):
        js, theta = random_js(rng, rng.randint(1, 8)), rng.uniform(0, LN2)
        blocks, same = learn_blocks(js, theta), theta_range(js, theta)
        assert (same.low or 0) <= theta <= same.high
        assert block_similarity(js, *same.high_block) == same.high
        assert same.low is None or block_similarity(js, *same.low_block) == same.low
        assert learn_blocks(js, same.high) == blocks
        if same.high < LN2:
            assert learn_blocks(js, math.nextafter(same.high, 1)) != blocks
        if same.low is not None:
            assert learn_blocks(js, math.nextafter(same.low, 1)) == blocks
            assert learn_blocks(js, same.low) != blocks
        else:
            assert learn_blocks(js, 0.0) == blocks


def thetas_shown(shown: str) -> tuple[float, float, bool]:
    """The low end, high end and whether the low end is closed, of a range printed "(L, H]"."""
    low, high = shown[1:-1].split(", ")
    return float(low), float(high), shown[0] == "["


NEAR_TIES = (LN2 - 0.2011, LN2 - 0.1999)  # the block similarities of a near_ties_js


def near_ties_js(rng: random.Random, size: int) -> list:
    """A JS matrix whose block similarities lie within 1e-5 of one another, often: ranges of theta
    narrower than four decimals show."""
    js = [[0.0] * size for _ in range(size)]
    for i in range(size):
        for j in range(i + 1, size):
            js[i][j] = js[j][i] = 0.2 + rng.choice([0, 1e-6, 3e-6, 5e-5, 1e-3])
    return js


def test_each_theta_range_and_policy_beyond_it_is_shown_at_thetas_that_learn_it():
    """The ends of a range are rounded inwards and a policy beyond is shown at a theta that learns
    it: on Figure 2b (0.49666, 0.52431] was printed (0.4967, 0.5243], and 0.4967 learns {3,3}'s
    neighbour, not {4,2}; a narrower range gets more decimals."""
    rng = random.Random(3)
    decimals = set()
    for _ in range(300):
        js = (near_ties_js if rng.random() < 0.5 else random_js)(rng, rng.randint(2, 6))
        theta = rng.uniform(*NEAR_TIES) if rng.random() < 0.5 else rng.uniform(0, LN2)
        blocks, same = learn_blocks(js, theta), theta_range(js, theta)
        if same.low is None:
            assert str(same).startswith("[0, ") and learn_blocks(js, 0.0) == blocks
            low, high = 0.0, float(str(same)[4:-1])
        else:
            low, high, closed = thetas_shown(str(same))
            assert low <= high and learn_blocks(js, low if closed else math.nextafter(low, 1)) \
                == blocks
        assert learn_blocks(js, high) == blocks
        decimals.add(len(str(same).split(", ")[1]) - 3)
        line = explanation("decoder_self", blocks, theta, same, js)
        for beyond, at in re.findall(r"(\{[\d,]+\}) at ([\d.]+) \(layers", line):
            assert format_blocks(learn_blocks(js, float(at))) == beyond != format_blocks(blocks)
    assert 4 in decimals and max(decimals) > 4


def test_every_policy_map_segment_shown_learns_its_blocks():
    rng = random.Random(5)
    for _ in range(100):
        js, theta = near_ties_js(rng, rng.randint(2, 6)), rng.uniform(*NEAR_TIES)
        line = policy_map_line("decoder_self", theta, 0.01, js)
        for blocks, shown in re.findall(r"(\{[\d,]+\}) ([\[(][\d.]+, [\d.]+\])", line):
            low, high, closed = thetas_shown(shown)
            assert format_blocks(learn_blocks(js, high)) == blocks
            assert format_blocks(learn_blocks(js, low if closed else math.nextafter(low, 1))) \
                == blocks


def test_theta_range_names_the_block_that_forms_when_similarities_tie():
    """Layers 2-4 and 3-4 are passed over at the same similarity: at theta = low the search
    forms the block of the lower start, 2-4 (--explain named 3-4, a block that never forms)."""
    js = [[0, 0.35, 0, 0.6], [0.35, 0, 0.6, 0], [0, 0.6, 0, 0.3], [0.6, 0, 0.3, 0]]
    same = theta_range(js, 0.61)
    assert block_similarity(js, 1, 3) == block_similarity(js, 2, 3) == same.low
    assert learn_blocks(js, same.low) == [1, 3] and same.low_block == (1, 3)


def test_blocks_beyond_are_the_neighbouring_policies():
    assert blocks_beyond(PAPER_ENCDEC, theta_range(PAPER_ENCDEC, 0.5)) == ([4, 2], [3, 1, 2])
    # Nothing below 0 or above ln 2: every layer its own block is the last policy of all.
    assert blocks_beyond(PAPER_SELF, theta_range(PAPER_SELF, 0.1))[0] is None
    assert blocks_beyond(PAPER_SELF, theta_range(PAPER_SELF, LN2)) == ([1, 1, 1, 2, 1], None)


def test_theta_ranges_follow_learn_policy():
    js = {"decoder_self": PAPER_SELF, "decoder_encdec": None, "encoder_self": PAPER_ENCDEC}
    thetas = {"decoder_self": 0.5, "decoder_encdec": 0.5, "encoder_self": None}
    assert theta_ranges(js, thetas) == {"decoder_self": theta_range(PAPER_SELF, 0.5)}
    with pytest.raises(PolicyError, match=r"^decoder_self: theta 0\.9 must be a number in"):
        theta_ranges(js, {"decoder_self": 0.9})


def test_mean_js_averages_each_kind_element_by_element():
    other = [[value / 2 for value in row] for row in PAPER_SELF]
    analyses = [{"decoder_self": PAPER_SELF, "sentences": 10},
                {"decoder_self": other, "encoder_self": None}]  # fmt: skip
    averaged = mean_js(analyses, ["a.json", "b.json"])
    assert averaged == {  # decoder_encdec: in no analysis, so not in their mean either
        "decoder_self": [[0.75 * value for value in row] for row in PAPER_SELF],
        "encoder_self": None,
    }
    with pytest.raises(PolicyError, match="no JS matrix for decoder_encdec, but a theta is given"):
        learn_policy(averaged, {"decoder_self": 0.5, "decoder_encdec": 0.5})
    same = mean_js([{"decoder_self": PAPER_SELF}] * 3, ["a", "b", "c"])["decoder_self"]
    assert learn_blocks(same, 0.5) == [1, 5]
    assert sum(same, []) == pytest.approx(sum(PAPER_SELF, []))
    # A file given twice weighs twice (each analysis the same), not once.
    twice = mean_js([analyses[0], analyses[1], analyses[1]], ["a.json", "b.json", "b.json"])
    expected = [[2 * value / 3 for value in row] for row in PAPER_SELF]
    assert sum(twice["decoder_self"], []) == pytest.approx(sum(expected, []))


@pytest.mark.parametrize(
    "second, message",
    [
        ({"decoder_self": None},
         r"^decoder_self: b\.json has no JS matrix but a\.json has one"),
        ({"decoder_self": [[0.0]]},
         r"^decoder_self: matrices of different sizes \(\{'a\.json': 6, 'b\.json': 1\}\)"),
        ({"decoder_self": [[0, 0.1], [0.2, 0]]},
         r"^decoder_self of b\.json: JS matrix is not symmetric"),
    ],
)
def test_mean_js_refuses_analyses_of_other_architectures(second, message):
    with pytest.raises(PolicyError, match=message):
        mean_js([{"decoder_self": PAPER_SELF}, second], ["a.json", "b.json"])


@pytest.mark.parametrize(
    "first, second, said",
    [
        ({"subset": "valid"}, {"subset": "test"}, "a.json (subset valid) and b.json (subset test) "
         "are analyses of different subsets"),  # a policy learned partly on the test set
        ({"sentences": 500}, {"sentences": 1014}, "a.json (sentences 500) and b.json (sentences "
         "1014) are analyses of different numbers of sentences"),  # other sentences' attention
        ({"policy": {}}, {"policy": {"decoder_self": [2, 4]}}, 'a.json (policy {}) and b.json '
         '(policy {"decoder_self": [2, 4]}) are analyses of different sharing policies'),
    ],
)  # fmt: skip
def test_mean_js_refuses_analyses_of_other_subsets_or_policies(first, second, said):
    """Analyses of the same matrices' shapes were averaged whatever text and model they measured;
    an analysis that records none of those (written before they were recorded) is taken beside
    any."""
    analyses = [{"decoder_self": PAPER_SELF, **first}, {"decoder_self": PAPER_SELF, **second}]
    with pytest.raises(PolicyError) as refused:
        mean_js(analyses + [{"decoder_self": PAPER_SELF}], ["a.json", "b.json", "c.json"])
    assert str(refused.value) == (
        f"{said}: take the analyses of the same sentences of one subset (one "
        "--san-analysis-max-sentences) and of models of one policy"
    )
    assert mean_js([analyses[0], {"decoder_self": PAPER_SELF}], ["a.json", "c.json"])


def test_an_older_analysis_beside_one_that_records_its_policy_is_warned_of(tmp_path, capsys):
    """An analysis written before js.json recorded the model's sharing policy (an old run dir's)
    averaged beside a shared model's, without a word: the policy learned from zeros it cannot
    tell from the unshared model's JS. It is taken, as before, and said."""
    older, shared = tmp_path / "old.json", tmp_path / "new.json"
    older.write_text(json.dumps({"decoder_self": PAPER_SELF, "subset": "valid"}))
    shared.write_text(json.dumps({"decoder_self": PAPER_SELF, "subset": "valid",
                                  "policy": {"decoder_self": [6]}}))  # fmt: skip
    policy_main([str(older), str(shared), "--theta-decoder-self", "0.3"])
    assert capsys.readouterr().err == (
        f"fairseq-san-policy: warning: {older} records no policy (an analysis written by an "
        f"older version) but {shared} does: they are taken as if of one policy, unchecked; to "
        f"check, analyse {older}'s checkpoint again\n"
    )
    policy_main([str(older), "--theta-decoder-self", "0.3"])  # alone, or among its own version's
    assert capsys.readouterr().err == ""
    for field in ("subset", "sentences"):  # recorded before the policy was: older still
        recorded = {"decoder_self": PAPER_SELF, field: 30}
        assert unrecorded_note([{"decoder_self": PAPER_SELF}, recorded], ["a", "b"]) == (
            f"a records no {field} (an analysis written by an older version) but b does: they "
            f"are taken as if of one {field}, unchecked; to check, analyse a's checkpoint again"
        )


# --- import weight and CLI ------------------------------------------------


def test_policy_module_does_not_import_torch():
    from helpers import heavy_modules_imported

    # Loaded from its file so the package __init__ (which imports models) is not run.
    path = str(REPO / "fairseq_san" / "policy.py")
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('policy', {path!r})\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)\n"
        "assert module.learn_blocks([[0.0]], 0.5) == [1]\n"
    )
    assert heavy_modules_imported(code) == []


@pytest.fixture
def js_file(tmp_path):
    return write_json(
        tmp_path / "js.json",
        {"decoder_self": PAPER_SELF, "decoder_encdec": PAPER_ENCDEC, "sentences": 500},
    )


def run_policy_cli(*args, stdin: str = ""):
    pythonpath = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=pythonpath)
    return subprocess.run(
        [sys.executable, "-m", "fairseq_san.cli.policy", *args],
        capture_output=True, text=True, cwd=REPO, env=env, input=stdin,
    )


def test_cli_prints_and_writes_policy(js_file, tmp_path):
    out = tmp_path / "policy.json"
    result = run_policy_cli(
        js_file, "--theta-decoder-self", "0.5", "--theta-decoder-encdec", "0.5", "-o", str(out)
    )
    assert result.returncode == 0, result.stderr
    expected = {"decoder_self": [1, 5], "decoder_encdec": [3, 3]}
    assert result.stdout == format_policy(expected) + "\n" + dump_policy(expected)
    assert load_policy(str(out)) == expected
    assert json.loads(out.read_text()) == {**expected, "encoder_self": None}


def test_cli_writes_the_policy_alone_to_stdout_with_o_dash(js_file, tmp_path):
    """`-o -` wrote a file named "-" and printed the policy; it is the JSON alone on standard
    output (`-o - | jq`), the paper's notation and --explain's lines on standard error."""
    result = run_policy_cli(js_file, "--theta-decoder-self", "0.5", "--theta-decoder-encdec", "0.5",
                            "--explain", "-o", "-")  # fmt: skip
    assert result.returncode == 0, result.stderr
    expected = {"decoder_self": [1, 5], "decoder_encdec": [3, 3]}
    assert result.stdout == dump_policy(expected)
    assert format_policy(expected) in result.stderr.splitlines()
    assert "decoder_self: {1,5} at theta 0.5" in result.stderr and "wrote" not in result.stderr
    assert not (REPO / "-").exists()


def test_cli_reads_the_analysis_from_stdin_given_dash(js_file):
    """`zcat js.json.gz | fairseq-san-policy - ...` said 'JS file "-" not found'; "-" is standard
    input, as `-o -` is standard output, and given twice is one line (it holds one analysis)."""
    thetas = ("--theta-decoder-self", "0.5", "--theta-decoder-encdec", "0.5")
    text = Path(js_file).read_text()
    result = run_policy_cli("-", *thetas, "-o", "-", stdin=text)
    assert result.returncode == 0, result.stderr
    assert result.stdout == dump_policy({"decoder_self": [1, 5], "decoder_encdec": [3, 3]})
    for second in ("-", "/dev/stdin"):  # another name of it was read twice, the second empty
        twice = run_policy_cli("-", second, *thetas, stdin=text)
        assert twice.returncode == 2
        assert twice.stderr.splitlines()[-1] == (
            "fairseq-san-policy: error: standard input is given twice: it holds one analysis"
        )


def test_cli_main_in_process(js_file, capsys):
    policy_main([js_file, "--theta-decoder-self", "0.3", "--theta-decoder-encdec", "0.6"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "decoder_self {6}  decoder_encdec {2,1,1,2}  encoder_self none"


def test_cli_explain_prints_the_range_of_each_kind(js_file, capsys):
    policy_main([js_file, "--theta-decoder-self", "0.5", "--theta-decoder-encdec", "0.5",
                 "--explain"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[1:3] == [
        "decoder_self: {1,5} at theta 0.5, the same for theta in [0.4893, 0.6448]; "
        "{6} at 0.4892 (layers 1-6 one block), {1,1,4} at 0.6449 (layers 2-6 no longer "
        "one block)",
        "decoder_encdec: {3,3} at theta 0.5, the same for theta in [0.4967, 0.5243]; "
        "{4,2} at 0.4966 (layers 1-4 one block), {3,1,2} at 0.5244 (layers 4-6 no "
        "longer one block)",
    ]
    assert json.loads("\n".join(lines[3:])) == {
        "decoder_self": [1, 5], "decoder_encdec": [3, 3], "encoder_self": None,
    }


def test_cli_explain_reads_a_theta_of_minus_zero_as_zero(js_file, capsys):
    """argparse takes -0.0 as a number, in [0, ln 2]: --explain said "at theta -0"."""
    policy_main([js_file, "--theta-decoder-self", "-0.0", "--explain"])
    assert capsys.readouterr().out.splitlines()[1].startswith("decoder_self: {6} at theta 0, ")


def test_cli_map_prints_every_policy_near_each_theta_and_marks_the_one_learned(js_file, capsys):
    """Figure 2 of the paper over theta 0.4-0.6: self-attention's {1,5} from 0.4893 (as
    --explain gives it), and encoder-decoder attention's {3,3} between {4,2} and {3,1,2}."""
    policy_main([js_file, "--theta-decoder-self", "0.5", "--theta-decoder-encdec", "0.5",
                 "--map", "0.1"])  # fmt: skip
    lines = capsys.readouterr().out.splitlines()
    assert lines[1:3] == [
        "decoder_self, theta 0.4000-0.6000: {6} [0.4000, 0.4892]; {1,5} [0.4893, 0.6000] (at 0.5)",
        "decoder_encdec, theta 0.4000-0.6000: {4,2} [0.4000, 0.4966]; {3,3} [0.4967, 0.5243] "
        "(at 0.5); {3,1,2} [0.5244, 0.5646]; {2,2,2} [0.5647, 0.5960]; {2,1,1,2} [0.5961, 0.6000]",
    ]


def test_cli_map_window_ends_carry_no_float_noise(js_file, capsys):
    """theta 0.4, --map 0.1: 0.4 - 0.1 is 0.30000000000000004 in floats, and the range was
    shown from 0.3001 (rounded inwards) under a header of 0.3000, as if 0.3 learned another
    policy."""
    policy_main([js_file, "--theta-decoder-self", "0.4", "--map", "0.1"])
    (line,) = [line for line in capsys.readouterr().out.splitlines()
               if line.startswith("decoder_self, theta")]
    assert line.startswith("decoder_self, theta 0.3000-0.5000: {6} [0.3000, ")


def test_cli_map_header_shows_the_ends_its_ranges_show(js_file, capsys):
    """theta ln 2, --map 0.05: the window starts at 0.643147..., which the header rounded to
    0.6431 and the first range, rounded inwards, to [0.6432, ...]."""
    policy_main([js_file, "--theta-decoder-self", repr(math.log(2)), "--map", "0.05"])
    (line,) = [line for line in capsys.readouterr().out.splitlines()
               if line.startswith("decoder_self, theta")]
    header, first = re.match(r"decoder_self, theta ([\d.]+)-([\d.]+): \{[\d,]+\} \[([\d.]+),",
                             line).group(1, 3)
    assert header == first == "0.6432" and line.endswith(", 0.6931] (at 0.693147)")


def test_cli_map_stays_within_0_and_ln2_and_refuses_a_width_that_is_not_positive(js_file, capsys):
    policy_main([js_file, "--theta-decoder-self", "0.05", "--map", "0.1"])
    (line,) = [line for line in capsys.readouterr().out.splitlines() if "theta 0" in line]
    assert line == "decoder_self, theta 0.0000-0.1500: {6} [0.0000, 0.1500] (at 0.05)"
    with pytest.raises(SystemExit) as stopped:
        policy_main([js_file, "--theta-decoder-self", "0.5", "--map", "0"])
    assert stopped.value.code == 2
    assert "--map 0.0: the width must be positive" in capsys.readouterr().err


@pytest.mark.parametrize("key", ["decoder_selff", "decoder-encdec", "Encoder_Self"])
def test_cli_refuses_a_misspelt_kind_naming_the_kind_meant(tmp_path, capsys, key):
    """A kind's key misspelt was read as a kind without a matrix: the policy said "none" for it
    and exited 0. The analysis' own other keys (checkpoint, updates, ...) are no kinds."""
    js = {"decoder_self": [[0, 0.1], [0.1, 0]], key: [[0]], "sentences": 2, "subset": "valid"}
    path = write_json(tmp_path / "js.json", js)
    with pytest.raises(SystemExit) as stopped:
        policy_main([path, "--theta-decoder-self", "0.15"])
    assert stopped.value.code == 2
    meant = key.lower().replace("-", "_").replace("selff", "self")
    assert f'{path}: unknown key "{key}": did you mean "{meant}"?' in capsys.readouterr().err


def test_cli_names_a_gzipped_analysis_as_such(tmp_path, capsys):
    """A gzipped js.json was "cannot be read: 'utf-8' codec can't decode byte 0x8b"."""
    import gzip

    path = tmp_path / "js.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"decoder_self": [[0.0]]}).encode()))
    with pytest.raises(SystemExit) as stopped:
        policy_main([str(path), "--theta-decoder-self", "0.15"])
    assert stopped.value.code == 2
    assert f'JS file "{path}" is gzip-compressed: give it unpacked' in capsys.readouterr().err


def test_cli_names_a_checkpoint_given_as_the_analysis(tmp_path, capsys):
    """A zip archive of text (torch.save's format) was "malformed JSON at line 1 column 1"."""
    import zipfile

    path = tmp_path / "checkpoint_best.pt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", "text")
    with pytest.raises(SystemExit) as stopped:
        policy_main([str(path), "--theta-decoder-self", "0.15"])
    assert stopped.value.code == 2
    assert (f'JS file "{path}" is a zip archive (a PyTorch checkpoint?), not text: give the text '
            "file") in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["npy", "pickle"])
def test_cli_names_a_binary_analysis_as_such(tmp_path, capsys, kind):
    """numpy's file of the divergences, or a pickle, was "cannot be read: 'utf-8' codec can't
    decode byte 0x93 in position 0: invalid start byte"; nothing in it is loaded."""
    path = tmp_path / f"js.{kind}"
    if kind == "npy":
        numpy.save(path, numpy.zeros((2, 2)))
    else:
        path.write_bytes(pickle.dumps({"decoder_self": [[0.0]]}))
    with pytest.raises(SystemExit) as stopped:
        policy_main([str(path), "--theta-decoder-self", "0.15"])
    assert stopped.value.code == 2
    first = path.read_bytes()[0]
    assert (f'JS file "{path}" is binary, not JSON text (byte {first:#04x} at 0: a .npy or .npz '
            "array, a pickle, a checkpoint?): give a JSON file") in capsys.readouterr().err


def shifted(js: list, shift: float) -> list:
    """``js`` with ``shift`` added off the diagonal."""
    return [[value + shift * (i != j) for j, value in enumerate(row)] for i, row in enumerate(js)]


def test_cli_learns_from_the_mean_of_several_analyses(tmp_path, capsys):
    """Fig. 2b learns {3,3} alone; with a copy 0.06 further apart, the mean is Fig. 2b 0.03
    further apart, whose layers 4-6 fall below 0.5 (0.5243 - 0.03)."""
    first = write_json(tmp_path / "a.json", {"decoder_encdec": PAPER_ENCDEC, "decoder_self": None})
    second = write_json(tmp_path / "b.json",
                        {"decoder_encdec": shifted(PAPER_ENCDEC, 0.06), "decoder_self": None})
    policy_main([first, second, "--theta-decoder-self", "0.5", "--theta-decoder-encdec", "0.5"])
    expected = learn_blocks(shifted(PAPER_ENCDEC, 0.03), 0.5)
    assert expected != [3, 3]
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == format_policy({"decoder_encdec": expected})


def test_cli_refuses_an_analysis_given_twice(tmp_path, capsys):
    """The mean counted an analysis given twice (a file and its folder, a seed's listed twice) as
    two seeds' without a word."""
    folder = tmp_path / "seed1"
    folder.mkdir()
    analysis = write_json(folder / "js.json", {"decoder_encdec": PAPER_ENCDEC})
    other = write_json(tmp_path / "b.json", {"decoder_encdec": shifted(PAPER_ENCDEC, 0.06)})
    for given in ([analysis, other, analysis], [str(folder), analysis]):
        with pytest.raises(SystemExit) as refused:
            policy_main([*given, "--theta-decoder-self", "0.5", "--theta-decoder-encdec", "0.5"])
        assert refused.value.code == 2
        assert capsys.readouterr().err.splitlines()[-1] == (
            f"fairseq-san-policy: error: {analysis} is given twice: give each analysis once"
        )
    copy = tmp_path / "copy.json"  # the same analysis under another name: counted twice
    shutil.copy(analysis, copy)
    with pytest.raises(SystemExit):
        policy_main([analysis, other, str(copy), "--theta-decoder-self", "0.5"])
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"fairseq-san-policy: error: {analysis} and {copy} hold the same analysis (a copy): give "
        "each analysis once"
    )
    hard_link = tmp_path / "hard.json"  # another name of the same file: counted twice
    os.link(analysis, hard_link)
    with pytest.raises(SystemExit):
        policy_main([analysis, str(hard_link), "--theta-decoder-self", "0.5"])
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"fairseq-san-policy: error: {hard_link} (one file with {analysis}) is given twice: give "
        "each analysis once"
    )


def test_cli_a_language_models_js_needs_only_the_decoder_self_theta(js_file, tmp_path, capsys):
    """A language model's js.json has no encoder-decoder attention (null): no theta for it."""
    lm = tmp_path / "js.json"
    lm.write_text(json.dumps({**json.loads(open(js_file).read()), "decoder_encdec": None}))
    policy_main([str(lm), "--theta-decoder-self", "0.5"])
    assert capsys.readouterr().out.splitlines()[0] == (
        "decoder_self {1,5}  decoder_encdec none  encoder_self none"
    )


def test_cli_warns_that_a_theta_for_attention_the_analysis_has_not_is_ignored(tmp_path, capsys):
    """A language model's analysis (encoder-decoder and encoder attention null) took
    --theta-decoder-encdec and --theta-encoder-self without a word; an AAN's (decoder
    self-attention null) required --theta-decoder-self, then ignored it without a word."""
    lm = write_json(tmp_path / "lm.json",
                    {"decoder_self": PAPER_SELF, "decoder_encdec": None, "encoder_self": None})
    policy_main([lm, "--theta-decoder-self", "0.5", "--theta-decoder-encdec", "0.5",
                 "--theta-encoder-self", "0.25"])  # fmt: skip
    captured = capsys.readouterr()
    assert captured.out.splitlines()[0] == (
        "decoder_self {1,5}  decoder_encdec none  encoder_self none"
    )
    assert captured.err.splitlines() == [
        "fairseq-san-policy: warning: --theta-decoder-encdec 0.5 is ignored: the analysis has no "
        f"encoder-decoder attention (decoder_encdec is null in {lm}; a language model has no "
        "encoder)",
        "fairseq-san-policy: warning: --theta-encoder-self 0.25 is ignored: the analysis has no "
        f"encoder self-attention (encoder_self is null in {lm}; a language model has no encoder)",
    ]
    aan = write_json(tmp_path / "aan.json", {"decoder_self": None, "decoder_encdec": PAPER_SELF,
                                             "encoder_self": PAPER_SELF})  # fmt: skip
    policy_main([aan, "--theta-decoder-encdec", "0.5", "--theta-encoder-self", "0.5"])
    assert capsys.readouterr().err == ""
    policy_main([aan, "--theta-decoder-self", "0.5", "--theta-decoder-encdec", "0.5"])
    assert capsys.readouterr().err.splitlines() == [
        "fairseq-san-policy: warning: --theta-decoder-self 0.5 is ignored: the analysis has no "
        f"decoder self-attention (decoder_self is null in {aan}; an AAN decoder has no "
        "self-attention weights)"
    ]
    with pytest.raises(SystemExit):  # an analysis of decoder self-attention wants its theta
        policy_main([lm, "--theta-decoder-encdec", "0.5"])
    assert capsys.readouterr().err.splitlines()[-1] == (
        "fairseq-san-policy: error: --theta-decoder-self is required: the analysis has decoder "
        "self-attention (only an AAN decoder's has none)"
    )


def test_cli_takes_an_analysis_folder_for_its_js_json(js_file, tmp_path, capsys):
    """fairseq-san-plot-js takes the folders --san-analysis-dir wrote; so does the learner (it
    said '[Errno 21] Is a directory')."""
    policy_main([str(tmp_path), "--theta-decoder-self", "0.5", "--theta-decoder-encdec", "0.5"])
    assert capsys.readouterr().out.splitlines()[0] == (
        "decoder_self {1,5}  decoder_encdec {3,3}  encoder_self none"
    )


def test_cli_refuses_to_write_the_policy_over_its_analysis(js_file, tmp_path, capsys):
    before = (tmp_path / "js.json").read_text()
    for output in (js_file, str(tmp_path / "." / "js.json")):
        with pytest.raises(SystemExit) as stopped:
            policy_main([str(tmp_path), "--theta-decoder-self", "0.5", "-o", output])
        assert stopped.value.code == 2
        assert capsys.readouterr().err.splitlines()[-1] == (
            f"fairseq-san-policy: error: -o {output}: is the input {tmp_path}/js.json: write the "
            "policy to another file"
        )
    assert (tmp_path / "js.json").read_text() == before


def test_cli_refuses_a_file_with_no_js_matrix(tmp_path, capsys):
    """A policy file (every kind null) given for an analysis learned "no sharing", exit 0."""
    policy = write_json(tmp_path / "policy.json", {kind: None for kind in KINDS})
    with pytest.raises(SystemExit) as stopped:
        policy_main([policy, "--theta-decoder-self", "0.5"])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"fairseq-san-policy: error: {policy}: no JS matrix (keys decoder_self, decoder_encdec, "
        "encoder_self null or missing): give the js.json that fairseq-validate --san-analysis-dir "
        "writes"
    )


@pytest.mark.parametrize("value, shown", [("abc", "str 'abc'"), ({"a": 1}, "dict {'a': 1}")])
def test_cli_names_a_kind_that_is_no_matrix(tmp_path, capsys, value, shown):
    """A kind holding text or a dict was read as missing: "no JS matrix (keys ... null or
    missing)", beside the matrix the file does hold, or alone."""
    analysis = write_json(tmp_path / "js.json", {"decoder_self": value,
                                                 "decoder_encdec": [[0, 0.1], [0.1, 0]]})
    with pytest.raises(SystemExit) as stopped:
        policy_main([analysis, "--theta-decoder-self", "0.5", "--theta-decoder-encdec", "0.5"])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"fairseq-san-policy: error: {analysis}: decoder_self is {shown}, not a JS matrix (a "
        "list of rows) or null"
    )


def test_cli_names_the_file_of_a_bad_value(tmp_path, capsys):
    """One analysis' bad value was said without its file ("decoder_self: JS matrix value [0][1]
    = 'a' ..."), where the mean of several named it."""
    analysis = write_json(tmp_path / "js.json", {"decoder_self": [[0, "a"], ["a", 0]]})
    with pytest.raises(SystemExit):
        policy_main([analysis, "--theta-decoder-self", "0.5"])
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"fairseq-san-policy: error: decoder_self of {analysis}: JS matrix value [0][1] = 'a' is "
        "not a finite number"
    )


def test_cli_notes_js_values_above_ln2(tmp_path, capsys):
    """The analysis writes nats (at most ln 2); a matrix in bits (the paper's Figure 2b holds
    0.7986) meets thresholds in nats: said on stderr, for the kinds learned only."""
    bits = write_json(tmp_path / "bits.json", {"decoder_self": [[0, 0.9], [0.9, 0]],
                                               "decoder_encdec": [[0, 0.8], [0.8, 0]]})  # fmt: skip
    policy_main([bits, "--theta-decoder-self", "0.5"])
    assert capsys.readouterr().err.splitlines() == [
        "fairseq-san-policy: note: decoder_self holds JS values above ln 2 = 0.6931, the largest "
        "in nats (what fairseq-validate --san-analysis-dir writes): values in bits would meet "
        "thresholds in nats"
    ]
    nats = write_json(tmp_path / "nats.json", {"decoder_self": [[0, 0.6], [0.6, 0]]})
    policy_main([nats, "--theta-decoder-self", "0.5"])
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    "args, message",
    [
        (["--theta-decoder-self", "0.9", "--theta-decoder-encdec", "0.5"],
         "decoder_self: theta 0.9 must be a number in [0, ln 2 = 0.6931]"),
        (["--theta-decoder-self", "0.5", "--theta-decoder-encdec", "0.5",
          "--theta-encoder-self", "0.5"],
         "no JS matrix for encoder_self, but a theta is given for it"),
        (["--theta-decoder-self", "abc", "--theta-decoder-encdec", "0.5"],
         "argument --theta-decoder-self: invalid float value: 'abc'"),
    ],
)
def test_cli_bad_input_exits_2(js_file, args, message):
    result = run_policy_cli(js_file, *args)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1] == f"fairseq-san-policy: error: {message}"
    assert result.stdout == ""


def test_cli_bad_js_file(tmp_path):
    bad = tmp_path / "js.json"
    bad.write_text('{"decoder_self": [[0, .5], [.5, 0]]}')
    huge = tmp_path / "huge.json"  # json's int() refused it with a traceback
    huge.write_text('{"decoder_self": [[0, 1' + "0" * 5000 + '], [0, 0]]}')
    empty = tmp_path / "empty.json"  # an analysis whose writing was stopped
    empty.write_text("\n")
    for path, message in [
        (str(bad), f'JS file "{bad}": malformed JSON at line 1 column 23: Expecting value'),
        (str(huge), f'JS file "{huge}": Exceeds the limit (4300 digits) for integer string '
         "conversion: value has 5001 digits"),
        (str(tmp_path / "missing.json"), f'JS file "{tmp_path / "missing.json"}" not found'),
        # was 'malformed JSON at line 1 column 1: Expecting value'
        (str(empty), f'JS file "{empty}" is empty: give a JSON file'),
    ]:
        result = run_policy_cli(path, "--theta-decoder-self", "0.5", "--theta-decoder-encdec", "0.5")
        assert result.returncode == 2
        assert "Traceback" not in result.stderr
        assert result.stderr.splitlines()[-1] == f"fairseq-san-policy: error: {message}"


def test_cli_output_that_is_a_directory_leaves_no_temporary_file(js_file, tmp_path):
    """An output it cannot write is said before learning, as the path given: a folder or a
    missing one were "[Errno 21] Is a directory: 'DIR.tmp' -> 'DIR'", the temporary name; an
    empty one (-o "$UNSET") wrote nothing, with exit status 0."""
    folder = tmp_path / "policies"
    folder.mkdir()
    for output, said in ((folder, "is a folder: name the policy to write"),
                         (tmp_path / "none" / "p.json",
                          f"no folder {tmp_path / 'none'} (create it first)"),
                         ("", "is empty: name the policy to write"),
                         # written as a file named "pol", said "wrote .../pol/"
                         (f"{tmp_path / 'pol'}/", "ends in '/', a folder's name: name the policy "
                          "to write (a file)")):  # fmt: skip
        result = run_policy_cli(js_file, "--theta-decoder-self", "0.5", "--theta-decoder-encdec",
                                "0.5", "-o", str(output))  # fmt: skip
        assert result.returncode == 2 and "Traceback" not in result.stderr
        assert result.stderr.splitlines()[-1] == f"fairseq-san-policy: error: -o {output}: {said}"
    assert not (tmp_path / "policies.tmp").exists() and not list(folder.iterdir())
    assert not (tmp_path / "pol").exists()


def test_cli_does_not_write_output_on_error(js_file, tmp_path):
    out = tmp_path / "policy.json"
    result = run_policy_cli(
        js_file, "--theta-decoder-self", "0.5", "--theta-decoder-encdec", "-1", "-o", str(out)
    )
    assert result.returncode == 2
    assert not out.exists()


@pytest.mark.parametrize("layers", [6, 7, 8])
def test_layers_of_identical_attention_are_one_block_at_theta_ln2(layers):
    """JS 0 between every pair: sim = ln 2 (Eq. 6), so one block at every theta up to ln 2.
    Summing the pairs' mu = ln 2 - 0 in floats landed an ulp below ln 2: {5,1} at theta ln 2
    for a trained {6} model."""
    zeros = [[0.0] * layers for _ in range(layers)]
    assert block_similarity(zeros, 0, layers - 1) == LN2
    assert learn_blocks(zeros, LN2) == [layers]
    assert theta_range(zeros, LN2).high == LN2


def test_an_analysis_is_read_from_a_pipe(tmp_path):
    """A JS file has no size cap, and may come through a pipe (``<(zcat js.json.gz)``): only a
    policy file must be a regular file (a device was read until memory ran out)."""
    import threading

    from fairseq_san.files import read_json

    pipe = tmp_path / "js.fifo"
    os.mkfifo(pipe)
    writer = threading.Thread(target=lambda: pipe.write_text('{"decoder_self": [[0.0]]}'))
    writer.start()
    assert read_json(str(pipe), "analysis file", streamed=True) == {"decoder_self": [[0.0]]}
    writer.join()


def analyses_at_steps(tmp_path: Path, recorded: dict) -> list:
    """Two analyses of the paper's self-attention, at steps 100 and 500, each recording
    ``recorded`` (a checkpoint's ``{steps}`` filled in)."""
    return [
        write_json(tmp_path / f"step{steps}.json", {
            "decoder_self": PAPER_SELF, "num_updates": steps,
            **{key: value.format(steps=steps) if isinstance(value, str) else value
               for key, value in recorded.items()},
        })
        for steps in (100, 500)
    ]  # fmt: skip


@pytest.mark.parametrize("recorded, training", [
    ({"seed": 1}, "seed 1"),
    # older analyses record no seed: the checkpoints' folder tells the training; the 30 of
    # docs/results/converged/en-de/baseline-s5/figure5 (steps 100..3000) were averaged into
    # encoder-decoder {6} (its converged checkpoint learns {2,1,3})
    ({"checkpoint": "run/checkpoints/checkpoint_{steps}.pt"}, "checkpoints in run/checkpoints"),
])  # fmt: skip
def test_policy_refuses_checkpoints_of_one_training(tmp_path, capsys, recorded, training):
    """fairseq-san-policy analysis/step*/ (the series fairseq-san-plot-js takes) averaged one
    training's attention early and late into one policy without a word."""
    paths = analyses_at_steps(tmp_path, recorded)
    with pytest.raises(SystemExit):
        policy_main([*paths, "--theta-decoder-self", "0.4"])
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"fairseq-san-policy: error: {paths[0]} (step 100) and {paths[1]} (step 500) are "
        f"checkpoints of one training ({training}): average the analyses of several seeds' "
        "models, one checkpoint each"
    )


def test_policy_learns_from_one_analysis_of_a_nan_step(tmp_path, capsys):
    """One js.json whose "num_updates" is NaN (edited by hand) was refused as two checkpoints of
    one training, that file named twice ("(step nan) and ... (step nan)")."""
    path = write_json(tmp_path / "js.json", {"decoder_self": PAPER_SELF, "seed": 1,
                                             "num_updates": float("nan")})  # fmt: skip
    policy_main([path, "--theta-decoder-self", "0.4", "-o", str(tmp_path / "policy.json")])
    assert json.loads((tmp_path / "policy.json").read_text())["decoder_self"] == [6]


def test_policy_refuses_two_analyses_of_one_model(tmp_path, capsys):
    """The analyses of checkpoint_last.pt and of the checkpoint it copies (one step of one
    training) were averaged, that model counted twice in a mean meant over seeds."""
    paths = [
        write_json(tmp_path / f"{name}.json", {
            "decoder_self": PAPER_SELF, "num_updates": 40, "seed": 1,
            "checkpoint": f"run/checkpoints/{name}.pt"})
        for name in ("checkpoint_last", "checkpoint_1_40")
    ]  # fmt: skip
    with pytest.raises(SystemExit):
        policy_main([*paths, "--theta-decoder-self", "0.4"])
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"fairseq-san-policy: error: {paths[0]} and {paths[1]} are analyses of one model (step 40 "
        "of one training: seed 1, checkpoints in run/checkpoints): give each model's analysis once"
    )


def test_policy_averages_two_systems_of_one_seed(tmp_path):
    """A baseline and a SAN of seed 1, stopped at different steps, are two trainings (their
    checkpoints' folders tell them apart): averaged, not refused."""
    paths = analyses_at_steps(tmp_path, {"seed": 1, "checkpoint": "{steps}/checkpoints/best.pt"})
    policy_main([*paths, "--theta-decoder-self", "0.4", "-o", str(tmp_path / "policy.json")])
    assert json.loads((tmp_path / "policy.json").read_text())["decoder_self"] == [6]
