"""The converged campaign's Figure 2 (``docs/results/converged/campaign_figures.py``) and the grid
of heatmaps it draws with (``fairseq_san.plots.js_heatmap_grid``)."""

import json
import sys
from pathlib import Path

import pytest

from fairseq_san import plots
from helpers import REPO
from test_policy import PAPER_ENCDEC, PAPER_SELF

sys.path.insert(0, str(REPO / "docs" / "results" / "converged"))
import campaign_figures  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"
PAPER_JS = {"decoder_self": PAPER_SELF, "decoder_encdec": PAPER_ENCDEC, "encoder_self": None}
SHARED_JS = {  # what a model trained with {6}/{3,3} shows: zero inside each block
    "decoder_self": [[0.0] * 6 for _ in range(6)],
    "decoder_encdec": [[0.0 if (i < 3) == (j < 3) else 0.3 for j in range(6)] for i in range(6)],
    "encoder_self": None,
}


def write_iteration(loop: Path, iteration: int, policy: dict, js=None) -> None:
    """``loop/iter<k>/policy.json`` and, where ``js`` is given, ``analysis/js.json``."""
    folder = loop / f"iter{iteration}"
    folder.mkdir(parents=True)
    (folder / "policy.json").write_text(json.dumps(policy))
    if js is not None:
        (folder / "analysis").mkdir()
        (folder / "analysis" / "js.json").write_text(json.dumps(js))


@pytest.fixture
def results(tmp_path) -> Path:
    """en-de: a loop analysed at iterations 0 and 1 (iteration 2's policy learned); de-en: a
    baseline analysed whose policy is not learned yet; xx-yy: no analysis."""
    loop = tmp_path / "en-de" / "loop"
    write_iteration(loop, 0, {}, PAPER_JS)
    write_iteration(loop, 1, {"decoder_self": [6], "decoder_encdec": [3, 3]}, SHARED_JS)
    write_iteration(loop, 2, {"decoder_self": [6], "decoder_encdec": [6]})
    write_iteration(tmp_path / "de-en" / "loop", 0, {}, PAPER_JS)
    (tmp_path / "xx-yy" / "loop" / "iter0").mkdir(parents=True)
    return tmp_path


def test_pairs_figure_has_a_row_per_analysed_baseline_with_its_learned_blocks(results):
    rows = campaign_figures.pairs_rows(str(results))
    assert [label for label, _ in rows] == ["en-de baseline", "de-en baseline"]  # En->De first
    (self_title, self_js, self_blocks), (encdec_title, encdec_js, encdec_blocks) = rows[0][1]
    assert (self_js, encdec_js) == (PAPER_SELF, PAPER_ENCDEC)
    assert (self_blocks, encdec_blocks) == ([6], [3, 3])
    assert (self_title, encdec_title) == ("Self-Attention: learned {6}",
                                          "Enc-Dec Attention: learned {3,3}")  # fmt: skip
    assert [(title, blocks) for title, _, blocks in rows[1][1]] == [
        ("Self-Attention", None), ("Enc-Dec Attention", None)]  # fmt: skip


def test_loop_figure_labels_each_iteration_with_the_policy_it_was_trained_with(results):
    rows = campaign_figures.loop_rows(str(results / "en-de" / "loop"))
    assert [label for label, _ in rows] == ["iteration 0: baseline", "iteration 1: {6}/{3,3}"]
    assert [blocks for _, _, blocks in rows[1][1]] == [[6], [6]]


def test_main_writes_the_pairs_figure_and_a_loop_figure_where_a_loop_has_two_iterations(results,
                                                                                         capsys):  # fmt: skip
    assert campaign_figures.main([str(results)]) == 0
    written = [results / "figure2.png", results / "en-de" / "loop" / "figure2-loop.png"]
    assert capsys.readouterr().out.split() == [str(path) for path in written]
    for path in written:
        assert path.read_bytes()[:8] == PNG
    assert not (results / "de-en" / "loop" / "figure2-loop.png").exists()  # one iteration only


def test_no_analysis_and_a_bad_matrix_each_give_one_line_naming_the_problem(tmp_path, capsys):
    assert campaign_figures.main([str(tmp_path)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (f"fairseq-san: error: no pair in {tmp_path} has a baseline analysis "
                    "(PAIR/loop/iter0/analysis/js.json)")  # fmt: skip
    write_iteration(tmp_path / "en-de" / "loop", 0, {}, dict(PAPER_JS, decoder_self=[[0, 1]]))
    assert campaign_figures.main([str(tmp_path)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    path = tmp_path / "en-de" / "loop" / "iter0" / "analysis" / "js.json"
    assert line.startswith(f'fairseq-san: error: analysis "{path}", decoder_self: JS matrix')


def test_heatmap_outlines_each_block_of_a_policy_on_the_diagonal():
    plt = plots._pyplot()
    fig, ax = plt.subplots()
    plots._draw_js(ax, PAPER_ENCDEC, 0.8, [2, 1, 3])
    outlines = [(patch.get_xy(), patch.get_width(), patch.get_height()) for patch in ax.patches]
    plt.close(fig)
    assert outlines == [((-0.5, -0.5), 2, 2), ((1.5, 1.5), 1, 1), ((2.5, 2.5), 3, 3)]


def test_grid_shares_one_grey_scale_and_leaves_missing_panels_blank(tmp_path, monkeypatch):
    scales = []
    draw = plots._draw_js
    monkeypatch.setattr(plots, "_draw_js", lambda ax, matrix, top, *args, **kwargs: (
        scales.append(top), draw(ax, matrix, top, *args, **kwargs)))  # fmt: skip
    rows = [("a", [("self", PAPER_SELF, None), ("encdec", PAPER_ENCDEC, [2, 4])]),
            ("b", [("self", SHARED_JS["decoder_self"], [6])])]  # fmt: skip
    plots.js_heatmap_grid(rows, str(tmp_path / "grid.png"))
    assert scales == [0.7986] * 3  # the largest value of any panel, PAPER_ENCDEC's
    assert (tmp_path / "grid.png").read_bytes()[:8] == PNG
