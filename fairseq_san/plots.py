"""Figures of fairseq-san, drawn with matplotlib's Agg backend (imported only when drawing).

* ``js_heatmap``: the JS divergence between every pair of layers, like the paper's Figure 2.
* ``js_heatmap_grid``: several such matrices on one grey scale, a row per model, the blocks of a
  sharing policy outlined (Figure 2 for several models side by side).
* ``policy_map``: the policy learned against theta, a bar per model, like a map of how near
  each learned policy lies to the next.
* ``js_training_curves``: the JS divergence between a reference layer and others against
  training steps, for decoder self- and encoder-decoder attention, like the paper's Figure 5.
* ``speed_curves``: translation speed against beam size or BLEU, like the paper's Figure 4.
"""

import os
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq_san.errors import UsageError, first_line
from fairseq_san.files import write_whole
from fairseq_san.policy import LN2, format_blocks

Matrix = Sequence[Sequence[float]]

OUTLINE_INSET = 0.08  # how far (in cells) a block's outline lies inside its cells
BAR_INCHES = 1.0  # right of a grid of heatmaps: its colour bar, ticks ("ln 2 = 0.693") and label
JS_LABEL = "JS divergence (nats)"

# The decoder's kinds of attention that the paper's Figures 2 and 5 show, and their labels.
DECODER_PANELS = (
    ("decoder_self", "Self-Attention"),
    ("decoder_encdec", "Enc-Dec Attention"),
)


def matplotlib_module():
    """matplotlib, imported. Where it finds no writable cache folder (MPLCONFIGDIR, HOME and every
    temporary folder unwritable) its OSError, a traceback, is a UsageError that says so."""
    try:
        import matplotlib
    except OSError as err:
        raise UsageError(f"cannot draw figures: {first_line(err)}") from None
    return matplotlib


def _pyplot():
    """matplotlib.pyplot on the Agg backend (no display needed), every text drawn as written: a
    title or label with two "$" (``--title "cost $5 and $6"``, a subset or system named so) was
    set as mathematics, and one matplotlib's mathtext cannot parse (``$\\foo$``) was a
    ValueError traceback."""
    matplotlib = matplotlib_module()
    matplotlib.use("Agg")
    matplotlib.rcParams["text.parse_math"] = False
    import matplotlib.pyplot as plt

    return plt


def figure_formats() -> List[str]:
    """The extensions of the formats matplotlib writes figures in (png, pdf, svg, ...)."""
    matplotlib_module()
    from matplotlib.backend_bases import FigureCanvasBase

    return sorted(FigureCanvasBase.get_supported_filetypes())


def save(fig, path: str) -> None:
    """``fig`` written to ``path`` whole or not at all (``files.write_whole``: a full disk left a
    truncated figure where the last one was), in the format its extension names (png without
    one)."""
    extension = os.path.splitext(path)[1][1:].lower() or "png"
    write_whole(path, lambda name: fig.savefig(name, dpi=150, format=extension))


def _wrapped(title: str, width: float) -> str:
    """``title`` wrapped to ``width`` inches of 9pt characters (about 0.6 em wide): a title wider
    than its figure lost its ends."""
    import textwrap

    return textwrap.fill(title, max(int(width * 72 / (9 * 0.6)), 12))


def _draw_js(ax, matrix: Matrix, top: float, blocks: Optional[Sequence[int]] = None,
             digits: int = 4, fontsize: float = 7) -> None:
    """One JS matrix on ``ax``: grey from 0 (black) to ``top`` (white), every cell's value written,
    layers numbered 1..L (columns on top, as in the paper), ``blocks`` (a policy's block sizes)
    outlined in red along the diagonal, ``OUTLINE_INSET`` inside their cells: an outline on the
    cells' edges lay under the axes' frame, a block of every layer ({6}) invisible."""
    from matplotlib.patches import Rectangle

    ax.imshow(matrix, cmap="gray", vmin=0.0, vmax=top)
    for i, row in enumerate(matrix):
        for j, value in enumerate(row):
            colour = "white" if value < top / 2 else "black"
            ax.text(j, i, f"{value:.{digits}f}", ha="center", va="center", color=colour,
                    fontsize=fontsize)  # fmt: skip
    labels = [str(layer) for layer in range(1, len(matrix) + 1)]
    ax.set_xticks(range(len(matrix)), labels)
    ax.set_yticks(range(len(matrix)), labels)
    ax.xaxis.tick_top()
    ax.tick_params(length=0)
    start = 0
    for size in blocks or ():
        corner = start - 0.5 + OUTLINE_INSET
        ax.add_patch(Rectangle((corner, corner), size - 2 * OUTLINE_INSET, size - 2 * OUTLINE_INSET,
                               fill=False, edgecolor="red", linewidth=1.5))  # fmt: skip
        start += size


def js_heatmap(matrix: Matrix, path: str, title: Optional[str] = None) -> None:
    """Write an L x L JS matrix as a heatmap: a dark cell means similar attention (small JS).

    Layers are numbered 1..L (columns on top, as in the paper) and every cell shows its value.
    The grey scale runs from 0 (black) to ln 2 (white), the largest JS in nats, or to the largest
    value where one is above it (bits), with a colour bar: a scale of the matrix's own largest
    value drew a JS of 0.02 white, as different as two layers can be. The title is wrapped to the
    figure's width but for the bar's top tick (a one- or two-layer model's lost its ends).
    """
    plt = _pyplot()
    cell = 0.75
    width = 1.9 + cell * len(matrix)
    tick = 0.5  # inches right of the bar for its top tick, "ln 2 = 0.693"
    fig, ax = plt.subplots(figsize=(width + tick, 1.0 + cell * len(matrix)))
    _draw_js(ax, matrix, _scale_top([matrix]))
    _label_js_bar(fig.colorbar(ax.get_images()[0], ax=ax, fraction=0.046, pad=0.04))
    if title:
        ax.set_title(_wrapped(title, width), fontsize=9, pad=18)
    fig.tight_layout()
    save(fig, path)
    plt.close(fig)


HeatmapPanel = Tuple[str, Matrix, Optional[Sequence[int]]]  # title, JS matrix, blocks outlined


def js_heatmap_grid(
    rows: Sequence[Tuple[str, Sequence[HeatmapPanel]]], path: str, title: Optional[str] = None
) -> None:
    """Write JS heatmaps in a grid, a row per model (its label on the left), all on one grey scale
    with one colour bar at the right, so that a darker cell anywhere means more similar attention;
    each panel's ``blocks`` (a sharing policy's block sizes, or None) outlined in red. The scale
    runs from 0 to ln 2, or to the largest value of any panel above it, as ``js_heatmap``'s.
    """
    plt = _pyplot()
    matrices = [matrix for _, panels in rows for _, matrix, _ in panels]
    top = _scale_top(matrices)
    columns = max(len(panels) for _, panels in rows)
    side = 0.5 * max(len(matrix) for matrix in matrices) + 0.9
    width = 0.3 + BAR_INCHES + side * columns
    fig, axes = plt.subplots(
        len(rows), columns, figsize=(width, 0.3 + side * len(rows)), squeeze=False
    )
    for axes_row, (label, panels) in zip(axes, rows):
        for ax, (panel_title, matrix, blocks) in zip(axes_row, panels):
            _draw_js(ax, matrix, top, blocks, digits=2, fontsize=6)
            ax.set_title(panel_title, fontsize=7, pad=12)
        axes_row[0].set_ylabel(label, fontsize=8)
        for ax in axes_row[len(panels):]:
            ax.axis("off")
    if title:  # at the top edge: at matplotlib's y=0.98 of a tall grid it met the first titles
        fig.suptitle(title, fontsize=9, y=1.0 - 0.08 / fig.get_figheight())
    _shared_colour_bar(fig, axes[0][0].get_images()[0])
    save(fig, path)
    plt.close(fig)


def _shared_colour_bar(fig, image) -> None:
    """Lay ``fig``'s panels out left of its last ``BAR_INCHES`` and put one colour bar of
    ``image``'s scale there: a colour bar per panel would repeat one scale. Its gap and width are
    in inches: fractions of a wide grid's width pushed its label off the figure."""
    inch = 1.0 / fig.get_figwidth()
    fig.tight_layout(rect=(0.0, 0.0, 1.0 - BAR_INCHES * inch, 1.0))
    drawn = [ax for ax in fig.axes if ax.get_images()]
    for ax in drawn:
        ax.apply_aspect()  # the square panels' boxes, narrower than their cells of the layout
    boxes = [ax.get_position() for ax in drawn]
    left, bottom = max(box.x1 for box in boxes), min(box.y0 for box in boxes)
    height = max(box.y1 for box in boxes) - bottom
    bar = fig.add_axes((left + 0.1 * inch, bottom, 0.12 * inch, height))
    _label_js_bar(fig.colorbar(image, cax=bar))


def _scale_top(matrices: Sequence[Matrix]) -> float:
    """The white end of the heatmaps' grey scale: ln 2, the largest JS in nats, or the largest
    value where one is above it (bits); the matrices' own largest value drew a JS of 0.02 white."""
    return max(LN2, *(value for matrix in matrices for row in matrix for value in row))


def _label_js_bar(bar) -> None:
    """A heatmap's colour bar, labelled with the JS's unit, its white end ticked with its value
    (``ln 2 = 0.693``): the ticks stopped at 0.6, the end of the scale not said."""
    top = bar.mappable.get_clim()[1]
    ticks = [tick for tick in bar.get_ticks() if 0.0 <= tick <= 0.9 * top]
    top_label = f"ln 2 = {LN2:.3f}" if top == LN2 else f"{top:.3g}"
    bar.set_ticks(ticks + [top], labels=[f"{tick:g}" for tick in ticks] + [top_label])
    bar.set_label(JS_LABEL, fontsize=7)
    bar.ax.tick_params(labelsize=6)


PolicyBar = Tuple[str, Sequence[Tuple[float, float, Sequence[int]]]]  # model, [(low, high, blocks)]


# Hatches that tell policies apart where colour does not (greyscale print), cycled with colours.
POLICY_HATCHES = ("", "////", "....")


def _policy_styles(policies: Sequence[Sequence[int]]) -> Dict[Tuple[int, ...], Tuple]:
    """{blocks: (colour, hatch)}, one of each per distinct policy, ordered by number of blocks:
    a shade by number of blocks alone drew {4,2}, {3,3} and {2,4} alike. tab20's neighbours
    alternate dark and light, and the hatch changes too, so that they differ in greyscale."""
    from matplotlib import colormaps

    palette = colormaps["tab20"].colors
    distinct = sorted({tuple(blocks) for blocks in policies}, key=lambda key: (len(key), key))
    return {blocks: (palette[index % len(palette)], POLICY_HATCHES[index % len(POLICY_HATCHES)])
            for index, blocks in enumerate(distinct)}  # fmt: skip


def _policy_legend(fig, styles: Dict[Tuple[int, ...], Tuple]) -> None:
    """A legend of every policy's colour and hatch below the panels: a narrow segment has no room
    for its policy's name."""
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=colour, hatch=hatch, edgecolor="white", label=format_blocks(blocks))
               for blocks, (colour, hatch) in styles.items()]  # fmt: skip
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 9), fontsize=7,
               title="policy (block sizes)", title_fontsize=7, frameon=False)  # fmt: skip


def policy_map(
    panels: Sequence[Tuple[str, float, Sequence[PolicyBar]]], path: str, title: str
) -> None:
    """Write the policy learned against theta under ``title`` (of which models: the panels alone
    did not say): a panel per ``(its title, theta used, bars)``, a bar per model whose segments are
    the theta ranges of its policies (block sizes), the theta used as a red dashed line. Each
    policy has its own colour and hatch (``_policy_styles``), named in the legend below and
    written on its segment where it fits."""
    plt = _pyplot()
    styles = _policy_styles([blocks for _, _, bars in panels for _, segments in bars
                             for *_, blocks in segments])  # fmt: skip
    rows = max(len(bars) for _, _, bars in panels)
    legend_rows = -(-len(styles) // 9)
    legend_height = 0.3 + 0.17 * legend_rows
    height = 0.6 + 0.3 * rows + legend_height
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), height), squeeze=False)
    for ax, (panel, used, bars) in zip(axes[0], panels):
        lows, highs = zip(*((low, high) for _, segments in bars for low, high, _ in segments))
        span = max(highs) - min(lows)
        for row, (_, segments) in enumerate(bars):
            for low, high, blocks in segments:
                colour, hatch = styles[tuple(blocks)]
                ax.broken_barh([(low, high - low)], (row - 0.4, 0.8), facecolors=colour,
                               edgecolors="white", linewidth=0.8, hatch=hatch)  # fmt: skip
                label = format_blocks(blocks)
                if high - low > 0.013 * span * len(label):  # a character: 1.3% of the panel
                    ax.text((low + high) / 2, row, label, ha="center", va="center", fontsize=6,
                            bbox=dict(boxstyle="square,pad=0.1", facecolor="white",
                                      edgecolor="none", alpha=0.8))  # fmt: skip
        ax.axvline(used, color="red", linestyle="--", linewidth=1)
        ax.set_yticks(range(len(bars)), [label for label, _ in bars], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel(f"theta (dashed: {used})", fontsize=8)
        ax.set_title(panel, fontsize=9)
        ax.tick_params(axis="x", labelsize=7)
    _policy_legend(fig, styles)
    fig.suptitle(_wrapped(title, fig.get_figwidth()), fontsize=9)
    fig.tight_layout(rect=(0.0, legend_height / height, 1.0, 1.0))
    save(fig, path)
    plt.close(fig)


Series = Dict[int, List[Tuple[int, float]]]  # layer -> [(training steps, JS)]

# A panel of Figure 5 holds a legend of this many layers in one column at its height (3.2
# inches); more layers take two columns, and the figure grows by a row's inches for each row
# beyond: a 12-layer decoder's legend ran past its panel, a 16-layer one's off the figure.
CURVE_LEGEND_ROWS = 9
CURVE_LEGEND_ROW_INCHES = 0.2
# A line's marker (a layer's in Figure 5, a system's in the speed figures); eleven of them against
# the ten colours of matplotlib's cycle ("C0".."C9"), so that no two of 110 lines look alike: with
# ten, the eleventh system was drawn as the first (blue circles both); with eight, the 41st layer.
MARKERS = ("o", "^", "s", "D", "v", "P", "X", "*", "<", ">", "h")


def _curve_legend_rows(panels: Dict[str, Optional[Series]]) -> Tuple[int, int]:
    """The legend's columns and rows of the panel with the most layers."""
    entries = max((len(series) for series in panels.values() if series), default=0)
    columns = 1 if entries <= CURVE_LEGEND_ROWS else 2
    return columns, -(-entries // columns)


def js_training_curves(
    panels: Dict[str, Optional[Series]], reference_layer: int, path: str, title: str
) -> None:
    """Write Figure 5: JS between ``reference_layer`` and other layers against training steps,
    under ``title`` (what is drawn, of which data: the figure alone did not say).

    ``panels`` maps each kind of ``DECODER_PANELS`` to ``{layer: [(steps, JS), ...]}``
    (layers 1-based) or to None when that kind has no attention weights (AAN).
    """
    from matplotlib.ticker import MaxNLocator

    plt = _pyplot()
    columns, rows = _curve_legend_rows(panels)
    height = 3.2 + CURVE_LEGEND_ROW_INCHES * max(rows - CURVE_LEGEND_ROWS, 0)
    fig, axes = plt.subplots(1, len(DECODER_PANELS), figsize=(8.0, height))
    for ax, (kind, label) in zip(axes, DECODER_PANELS):
        ax.set_xlabel(f"# of training steps\n({label})")
        ax.set_ylabel(JS_LABEL)
        # steps are whole: one checkpoint at step 3 was ticked 2.85, 2.90, ..., 3.15
        ax.xaxis.set_major_locator(
            MaxNLocator("auto", steps=[1, 2, 2.5, 5, 10], integer=True, min_n_ticks=1)
        )
        series = panels.get(kind)
        if series is None:
            ax.text(0.5, 0.5, "no attention weights", ha="center", va="center",
                    transform=ax.transAxes)  # fmt: skip
            continue
        for index, (layer, points) in enumerate(series.items()):
            steps, values = zip(*sorted(points))
            ax.plot(steps, values, marker=MARKERS[index % len(MARKERS)], linewidth=1,
                    label=f"L{layer}")  # fmt: skip
        ax.legend(title=f"vs L{reference_layer}", fontsize=8, title_fontsize=8, ncol=columns)
        ax.grid(alpha=0.3)
    fig.suptitle(_wrapped(title, fig.get_figwidth()), fontsize=9)
    fig.tight_layout()
    save(fig, path)
    plt.close(fig)


# Where a point's label may go, in points from it: rings of eight directions, nearest first.
LABEL_OFFSETS = [(radius * dx, radius * dy) for radius in (4, 10, 16, 24, 32)
                 for dx, dy in ((1, 1), (1, -1), (-1, 1), (-1, -1), (1, 0), (-1, 0), (0, 1),
                                (0, -1))]  # fmt: skip


def _label_points(ax, series: "SpeedSeries") -> None:
    """Write each point's label at the first of ``LABEL_OFFSETS`` where it overlaps no label or
    marker already there and stays in the axes: beside every point, nearby systems' "b4" and
    "b20" overprinted each other. A label moved past the first ring is tied to its point by a
    line, and each is in its line's colour, so that it is told whose it is."""
    from matplotlib.transforms import Bbox

    renderer = ax.figure.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    taken = [Bbox.from_bounds(x - 4, y - 4, 8, 8)  # the markers, about 8 pixels wide
             for line in ax.lines for x, y in ax.transData.transform(line.get_xydata())]
    for line, points in zip(ax.lines, (points for points in series.values() if points)):
        for x, speed, label in points:
            if not label:
                continue
            for dx, dy in LABEL_OFFSETS:
                text = ax.annotate(label, (x, speed), xytext=(dx, dy), textcoords="offset points",
                                   fontsize=7, color=line.get_color(),
                                   ha="left" if dx > 0 else "right" if dx < 0 else "center",
                                   va="bottom" if dy > 0 else "top" if dy < 0 else "center")
                box = text.get_window_extent(renderer)
                inside = frame.contains(box.x0, box.y0) and frame.contains(box.x1, box.y1)
                if inside and not any(box.overlaps(other) for other in taken):
                    break
                text.remove()
            else:
                continue  # nowhere free: left unlabelled rather than overprinted
            taken.append(box)
            if abs(dx) > LABEL_OFFSETS[0][0] or abs(dy) > LABEL_OFFSETS[0][1]:
                ax.annotate("", (x, speed), xytext=(dx, dy), textcoords="offset points",
                            arrowprops=dict(arrowstyle="-", color=line.get_color(), linewidth=0.5,
                                            shrinkA=0, shrinkB=3))  # fmt: skip


SpeedSeries = Dict[str, List[Tuple[float, float, str]]]  # system -> [(x, tokens/s, point label)]


def speed_curves(
    panels: Dict[str, SpeedSeries], xlabel: str, path: str, title: str,
    xticks: Optional[Sequence[float]] = None,
) -> None:
    """Translation speed (tokens/s) against beam size or BLEU, like the paper's Figure 4, under
    ``title`` (the data and machine measured: the panels alone did not say).

    One panel per entry of ``panels`` (its key is the title), one line per system, each with its
    own marker (eight systems' colours alone were hard to tell where lines overlap) and colour, the
    same in every panel (a system without points in one shifted the others' colours there, off
    the legend's); a point's label (the beam size on a speed-vs-BLEU plot) is written near it
    when not empty, in its line's colour, where it covers no other label (``_label_points``).
    ``xticks`` (the beam sizes measured) are the x axis's ticks: beams 4 and 20 were ticked 5.0,
    7.5, ... The legend stands right of the last panel, off the lines it covered.
    """
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels) + 1.8, 3.5),
                             squeeze=False)  # fmt: skip
    for ax, (panel, series) in zip(axes[0], panels.items()):
        for index, (system, points) in enumerate(series.items()):
            if not points:
                continue
            xs, speeds, _ = zip(*points)
            marker = MARKERS[index % len(MARKERS)]
            ax.plot(xs, speeds, color=f"C{index}", marker=marker, linewidth=1, label=system)
        if xticks is not None:
            ax.set_xticks(list(xticks), [f"{tick:g}" for tick in xticks])
        ax.set_xlabel(xlabel)
        ax.set_ylabel("tokens/s")
        ax.set_title(panel, fontsize=9)
        ax.grid(alpha=0.3)
    drawn = [ax for ax in axes[0] if ax.lines]  # a panel without points (no BLEU) has no legend
    if drawn:
        drawn[-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.suptitle(_wrapped(title, fig.get_figwidth()), fontsize=9)
    fig.tight_layout()
    for ax, series in zip(axes[0], panels.values()):
        _label_points(ax, series)
    save(fig, path)
    plt.close(fig)
