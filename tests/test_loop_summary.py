"""The loop summary: its table's range of theta, which thresholds learn the policy an iteration
learned (``fairseq_san.loop.summary.learned_theta_ranges``), from the run's own record and
analysis; and a run dir that is not there."""

import json

import pytest

from fairseq_san.loop.summary import format_theta_ranges, learned_theta_ranges, write_summary
from fairseq_san.policy import learn_policy, theta_range, write_policy
from paper import PAPER_ENCDEC, PAPER_SELF

# Different thresholds per kind, so that a kind read with another kind's theta learns otherwise.
THETAS = {"decoder_self": 0.3, "decoder_encdec": 0.5, "encoder_self": None}


def run_dir_with(tmp_path, learned: dict):
    """A run dir as learn_to_share.sh leaves it after analysing iteration 0: run.json with the
    thetas, iter0/analysis/js.json (the paper's Figure 2), iter1/policy.json."""
    (tmp_path / "iter0" / "analysis").mkdir(parents=True)
    (tmp_path / "iter1").mkdir()
    options = {"--theta-self": "0.3", "--theta-encdec": "0.5", "--theta-encoder": ""}
    (tmp_path / "run.json").write_text(json.dumps({"options": options}))
    js = {"decoder_self": PAPER_SELF, "decoder_encdec": PAPER_ENCDEC, "encoder_self": None}
    (tmp_path / "iter0" / "analysis" / "js.json").write_text(json.dumps(js))
    write_policy(learned, str(tmp_path / "iter1" / "policy.json"))
    return str(tmp_path)


def test_the_range_of_the_recorded_thetas(tmp_path):
    js = {"decoder_self": PAPER_SELF, "decoder_encdec": PAPER_ENCDEC}
    run_dir = run_dir_with(tmp_path, learn_policy(js, THETAS))
    ranges = learned_theta_ranges(run_dir, 0)
    assert ranges == {
        "decoder_self": theta_range(PAPER_SELF, 0.3),
        "decoder_encdec": theta_range(PAPER_ENCDEC, 0.5),
    }
    assert format_theta_ranges(ranges) == (
        "decoder_self [0, 0.4892]  decoder_encdec [0.4967, 0.5243]"
    )
    # summary.json holds the ranges as JSON lists; they format the same.
    assert format_theta_ranges(json.loads(json.dumps(ranges))) == format_theta_ranges(ranges)


def test_no_range_for_a_policy_the_thetas_do_not_learn(tmp_path):
    """A policy placed by hand as iteration 1's: no range is claimed for it."""
    run_dir = run_dir_with(tmp_path, {"decoder_self": [6], "decoder_encdec": [6]})
    assert learned_theta_ranges(run_dir, 0) is None
    assert format_theta_ranges(None) == "-"


def test_no_range_before_the_policy_or_without_the_analysis(tmp_path):
    run_dir = run_dir_with(tmp_path, {"decoder_self": [1, 5], "decoder_encdec": [3, 3]})
    assert learned_theta_ranges(run_dir, 1) is None  # iteration 1 has learned nothing yet
    (tmp_path / "iter0" / "analysis" / "js.json").unlink()
    assert learned_theta_ranges(run_dir, 0) is None


def test_a_summary_names_a_run_dir_that_is_not_there(tmp_path):
    """``fairseq-san-loop summary DIR`` with a mistyped DIR said "no trained iteration ... in DIR"
    as of a run that trained nothing; a run dir without one still says that."""
    missing = tmp_path / "runs" / "en-de"
    with pytest.raises(FileNotFoundError, match=f"^{missing}: no such run dir"):
        write_summary(str(missing))
    missing.mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="^no trained iteration "):
        write_summary(str(missing))
