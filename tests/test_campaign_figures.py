"""The converged campaign's Figure 2 (``docs/results/converged/campaign_figures.py``) and the grid
of heatmaps it draws with (``fairseq_san.plots.js_heatmap_grid``)."""

import json
import sys
from pathlib import Path

import pytest

from fairseq_san import plots
from fairseq_san.policy import LN2, policy_segments
from helpers import REPO, drawn_figures
from paper import PAPER_ENCDEC, PAPER_JS, PAPER_SELF

sys.path.insert(0, str(REPO / "docs" / "results" / "converged"))
import campaign_figures  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"
SHARED_JS = {  # what a model trained with {6}/{3,3} shows: zero inside each block
    "decoder_self": [[0.0] * 6 for _ in range(6)],
    "decoder_encdec": [[0.0 if (i < 3) == (j < 3) else 0.3 for j in range(6)] for i in range(6)],
    "encoder_self": None,
}


def write_run_json(loop: Path, theta_self: str = "0.4", theta_encdec: str = "0.5") -> None:
    """The loop's run.json, with the thetas it learns with."""
    options = {"--theta-self": theta_self, "--theta-encdec": theta_encdec, "--theta-encoder": None}
    (loop / "run.json").write_text(json.dumps({"options": options}))


def write_iteration(loop: Path, iteration: int, policy: dict, js=None) -> None:
    """``loop/iter<k>/policy.json`` and, where ``js`` is given, a trained iteration (its
    train.log) with ``analysis/js.json``."""
    folder = loop / f"iter{iteration}"
    folder.mkdir(parents=True)
    (folder / "policy.json").write_text(json.dumps(policy))
    if js is not None:
        (folder / "train.log").write_text("")
        (folder / "analysis").mkdir()
        (folder / "analysis" / "js.json").write_text(json.dumps(js))


@pytest.fixture
def results(tmp_path) -> Path:
    """en-de: a loop analysed at iterations 0 and 1 (iteration 2's policy learned) and baseline
    seed 2; de-en: a baseline analysed whose policy is not learned yet; xx-yy: no analysis."""
    loop = tmp_path / "en-de" / "loop"
    write_iteration(loop, 0, {}, PAPER_JS)
    write_iteration(loop, 1, {"decoder_self": [6], "decoder_encdec": [3, 3]}, SHARED_JS)
    write_iteration(loop, 2, {"decoder_self": [6], "decoder_encdec": [6]})
    write_iteration(tmp_path / "en-de" / "baseline-s2", 0, {}, SHARED_JS)
    write_iteration(tmp_path / "de-en" / "loop", 0, {}, PAPER_JS)
    for pair in ("en-de", "de-en"):
        write_run_json(tmp_path / pair / "loop")
    (tmp_path / "xx-yy" / "loop" / "iter0").mkdir(parents=True)
    return tmp_path


def test_pairs_figure_has_a_row_per_analysed_baseline_with_its_learned_blocks(results):
    rows = campaign_figures.pairs_rows(str(results), campaign_figures.pair_order(str(results)))
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


def test_main_writes_every_figure_and_a_loop_figure_only_where_a_loop_has_two_iterations(
    results, capsys
):
    assert campaign_figures.main([str(results)]) == 0
    written = [results / "figure2.png", results / "en-de" / "loop" / "figure2-loop.png",
               results / "theta-policies.png"]  # fmt: skip
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
    outlines = [patch.get_bbox().extents for patch in ax.patches]
    plt.close(fig)
    inset = plots.OUTLINE_INSET  # inside the cells, off the axes' frame
    cells = [(-0.5, 1.5), (1.5, 2.5), (2.5, 5.5)]  # blocks {2,1,3} along the diagonal
    assert [list(extents) for extents in outlines] == [
        pytest.approx([low + inset, low + inset, high - inset, high - inset]) for low, high in cells]


def test_grid_has_one_colour_bar_in_nats_and_outlines_a_whole_matrix_inside_the_frame(
    monkeypatch,
):
    """A {6} outline lay on the axes' frame, unseen, and the grid's one scale had no colour bar."""
    drawn = drawn_figures(monkeypatch)
    small = [[0.1 * (i != j) for j in range(6)] for i in range(6)]
    plots.js_heatmap_grid([("a", [("self", small, [6]), ("encdec", small, [3, 3])])], "grid.png")
    (fig,) = drawn
    bars = [ax for ax in fig.axes if ax.get_ylabel() == "JS divergence (nats)"]
    assert len(bars) == 1 and bars[0].get_ylim() == pytest.approx((0.0, LN2))  # js_heatmap's scale
    (whole,) = fig.axes[0].patches
    left, bottom, right, top = whole.get_bbox().extents
    assert -0.5 < left < right < 5.5 and -0.5 < bottom < top < 5.5
    plots._pyplot().close(fig)


@pytest.mark.parametrize("layers", [1, 6, 12])
def test_grids_colour_bar_says_its_white_end_and_its_label_stays_on_the_figure(
    monkeypatch, layers
):  # fmt: skip
    """The bar's ticks stopped at 0.6, where ln 2 is its white end; a twelve-layer grid's bar,
    placed in fractions of the figure's width, pushed its label off the figure."""
    drawn = drawn_figures(monkeypatch)
    small = [[0.1 * (i != j) for j in range(layers)] for i in range(layers)]
    plots.js_heatmap_grid([("a", [("self", small, None), ("encdec", small, None)])], "grid.png")
    (fig,) = drawn
    bar = fig.axes[-1]
    assert bar.get_yticks()[-1] == pytest.approx(LN2)
    assert bar.get_yticklabels()[-1].get_text() == "ln 2 = 0.693"
    fig.canvas.draw()
    label = bar.yaxis.label.get_window_extent(fig.canvas.get_renderer())
    assert fig.bbox.x0 <= label.x0 and label.x1 <= fig.bbox.x1
    plots._pyplot().close(fig)


def test_a_tall_grids_title_clears_the_first_rows_panel_titles(monkeypatch):
    """figure2.png's four rows: the title, at matplotlib's y=0.98 of the figure's height, sat on
    the first row's panel titles."""
    drawn = drawn_figures(monkeypatch)
    rows = [(pair, [("self", PAPER_SELF, [1, 5]), ("encdec", PAPER_ENCDEC, [3, 3])])
            for pair in ("en-de", "de-en", "en-cs", "en-fr")]  # fmt: skip
    plots.js_heatmap_grid(rows, "grid.png", title="JS divergence between decoder layers")
    (fig,) = drawn
    renderer = fig.canvas.get_renderer()
    title = fig._suptitle.get_window_extent(renderer)
    for ax in fig.axes[:2]:
        assert title.y0 > ax.title.get_window_extent(renderer).y1  # above, not overlapping
    assert title.y1 <= fig.bbox.y1  # on the figure
    plots._pyplot().close(fig)


def test_policies_with_as_many_blocks_each_have_their_own_colour_named_in_a_legend(monkeypatch):
    """A shade by number of blocks drew {4,2}, {3,3} and {2,4} alike; the map did not say whose
    policies it drew."""
    drawn = drawn_figures(monkeypatch)
    bars = [("seed 1", [(0.4, 0.45, [4, 2]), (0.45, 0.5, [3, 3]), (0.5, 0.501, [2, 4])]),
            ("seed 2", [(0.4, 0.5, [3, 3]), (0.5, 0.501, [6])])]  # fmt: skip
    plots.policy_map([("Enc-Dec", 0.5, bars)], "map.png", "seeds 1 and 2")
    (fig,) = drawn
    styles = [(tuple(collection.get_facecolor()[0]), collection.get_hatch())
              for collection in fig.axes[0].collections]  # fmt: skip
    assert len(set(styles[:3])) == 3 and styles[1] == styles[3]  # {3,3} alike in both bars
    (legend,) = fig.legends
    assert [text.get_text() for text in legend.get_texts()] == ["{6}", "{2,4}", "{3,3}", "{4,2}"]
    assert (fig.get_suptitle(), fig.axes[0].get_title()) == ("seeds 1 and 2", "Enc-Dec")
    plots._pyplot().close(fig)


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


def test_theta_map_has_a_bar_per_baseline_seed_and_the_mean_of_a_pairs_seeds(results):
    pairs = campaign_figures.pair_order(str(results))
    bars = campaign_figures.theta_bars(campaign_figures.seed_analyses(str(results), pairs),
                                       "decoder_encdec")  # fmt: skip
    assert [name for name, _ in bars] == [
        "en-de seed 1", "en-de seed 2", "en-de mean of 2 seeds", "de-en seed 1"]  # fmt: skip
    seed1, seed2, mean, _ = [segments for _, segments in bars]
    assert (seed1[0][0], seed1[-1][1]) == campaign_figures.THETA_SPANS["decoder_encdec"]
    assert [blocks for *_, blocks in seed1] == [[4, 2], [3, 3], [3, 1, 2]]  # Figure 2b near 0.5
    # {3,3}'s JS: 0 within each block, 0.3 between them; Eq. 6 over layers 1-6 is ln 2 - 0.18
    # (18 of 30 ordered pairs across), over layers 1-4 ln 2 - 0.15 (6 of 12)
    assert [blocks for *_, blocks in seed2] == [[6], [4, 2], [3, 3]]
    assert [high for _, high, _ in seed2[:2]] == pytest.approx([LN2 - 0.18, LN2 - 0.15])
    pairs = zip(PAPER_ENCDEC, SHARED_JS["decoder_encdec"])
    halves = [[(a + b) / 2 for a, b in zip(*rows)] for rows in pairs]
    assert mean == [tuple(segment) for segment in policy_segments(halves, 0.44, 0.56)]
    assert campaign_figures.loop_thetas(str(results), ["en-de", "de-en"]) == {
        "decoder_self": 0.4, "decoder_encdec": 0.5}  # fmt: skip


def test_loops_learned_with_different_thetas_are_not_drawn_on_one_map(results, capsys):
    write_run_json(results / "de-en" / "loop", theta_encdec="0.45")
    assert campaign_figures.main([str(results)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == ("fairseq-san: error: the loops learned with different thetas: "
                    "{'decoder_encdec': [0.45, 0.5]}")  # fmt: skip
