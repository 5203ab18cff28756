"""fairseq-san-plot-js: JS divergence between layers against training steps (paper Figure 5).

Takes one analysis directory per checkpoint (written by ``fairseq-validate --task translation_san
--san-analysis-dir DIR``), reads ``DIR/js.json`` and plots, for decoder self-attention and
encoder-decoder attention, the JS divergence between a reference layer and other layers against
the checkpoint's training steps (``num_updates``). Layers are numbered from 1. The analyses are
one model's series: one per training step, of one subset, of one training (its ``--seed``), of
one model (the same kinds of attention and layer counts, as fairseq-san-policy averages them);
anything else is refused. Two trainings of one seed are told apart by the ``--save-dir`` they
were trained with, as js.json records it, not by their checkpoints' folders: one training's may
lie in two, snapshots kept while it trained beside its checkpoint_last.pt, as
docs/results/de-en-figure5 plots them.

    fairseq-san-plot-js analysis/step*/ -o fig5.png --reference-layer 4 --layers 5 6
"""

import argparse
import os
import shutil
import sys
from typing import Dict, List, Optional, Tuple

from fairseq_san.cli import analysis_file, quiet_when_output_closes, said_when_interrupted
from fairseq_san.errors import UsageError, abbreviated, repeated
from fairseq_san.files import DASH, file_given_twice, output_problem, read_json
from fairseq_san.plots import DECODER_PANELS, figure_formats, matplotlib_module
from fairseq_san.policy import (
    KINDS,
    PolicyError,
    bits_note,
    check_js,
    check_one_source,
    mean_js,
    recorded_difference,
    unrecorded_note,
)

# The paper's Figure 5: layers 5 and 6 of a six-layer decoder against layer 4.
DEFAULT_REFERENCE, DEFAULT_LAYERS = 4, (5, 6)
# The most training steps an analysis can be at: fairseq counts them in an int64 (numpy's, as
# the figure draws them, too: a 400-digit step failed there with OverflowError).
MAX_STEPS = 2**63 - 1


class PlotError(ValueError):
    """Bad input to the plot; the message names the file or flag."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fairseq-san-plot-js",
        description="Plot the JS divergence between a reference layer and other layers against "
        "training steps (Xiao et al. 2019, Figure 5), one analysis directory per checkpoint.",
    )
    parser.add_argument(
        "dirs", nargs="+", metavar="DIR",
        help="analysis directories holding js.json (fairseq-validate --san-analysis-dir), or the "
        "js.json files",
    )  # fmt: skip
    parser.add_argument("-o", "--output", required=True, metavar="PNG", help="figure to write")
    parser.add_argument(
        "--reference-layer", type=int, default=DEFAULT_REFERENCE, metavar="L",
        help=f"layer the others are compared with, from 1 (default: {DEFAULT_REFERENCE})",
    )  # fmt: skip
    parser.add_argument(
        "--layers", type=int, nargs="+", default=list(DEFAULT_LAYERS), metavar="L",
        help=f"layers to plot, from 1 (default: {' '.join(map(str, DEFAULT_LAYERS))})",
    )  # fmt: skip
    parser.add_argument(
        "--title", metavar="TEXT",
        help="the figure's title (default: the layers drawn, and the subset and number of "
        "sentences the analyses record)",
    )  # fmt: skip
    parser.add_argument(
        "--one-training", action="store_true",
        help="the analyses are of one training whose --save-dir changed (moved to another "
        "folder and resumed there): take them whatever --save-dir they record (their seeds "
        "must still agree)",
    )  # fmt: skip
    return parser


def read_analysis(path: str) -> dict:
    """The analysis in ``path`` (a js.json, or its folder), checked to hold the training steps."""
    if not os.path.exists(path):
        folder = os.path.dirname(path) if path.endswith("js.json") else path
        raise PlotError(
            f'"{path}" not found: give an analysis folder or its js.json (fairseq-validate '
            f"--task translation_san --san-analysis-dir {folder or '.'} writes them)"
        )
    data = read_json(path, "analysis", PlotError, streamed=True)
    if is_policy(data):
        raise PlotError(
            f'"{path}" holds block sizes (a sharing policy), not JS matrices: give the js.json '
            "that fairseq-validate --task translation_san --san-analysis-dir writes"
        )
    steps = data.get("num_updates")
    if not isinstance(steps, int) or isinstance(steps, bool) or not 0 <= steps <= MAX_STEPS:
        shown = abbreviated(repr(steps))
        raise PlotError(f'"{path}" has no training steps ("num_updates": {shown})')
    return data


def is_policy(data: dict) -> bool:
    """Whether ``data`` reads as a sharing policy (block sizes per kind), not an analysis."""
    values = [data.get(kind) for kind in KINDS if data.get(kind) is not None]
    return bool(values) and all(
        isinstance(value, list) and value and all(type(size) is int for size in value)
        for value in values
    )  # fmt: skip


def check_layers(reference: int, layers: List[int], size: int, kind: str, path: str) -> None:
    """PlotError naming the option (and whether it is the default, the paper's six layers)
    whose layer ``kind``'s matrix in ``path``, of ``size`` layers, lacks."""
    asked = [("--reference-layer", reference, reference == DEFAULT_REFERENCE)]
    asked += [("--layers", layer, tuple(layers) == DEFAULT_LAYERS) for layer in layers]
    for flag, layer, default in asked:
        if not 1 <= layer <= size:
            raise PlotError(
                f"{flag}: layer {layer}{' (the default)' if default else ''} is out of range: "
                f"{kind} in {path} has {size} layers (1..{size}); give --reference-layer and "
                "--layers among them"
            )


def check_one_series(
    analyses: List[Tuple[str, dict]], layers: List[int], moved: bool = False
) -> None:
    """PlotError for analyses that are not one model's series: one given twice, two at one
    training step (the same checkpoint twice, or two models: their points were stacked), of
    different subsets, sentences or sharing policies (where they name theirs:
    ``check_one_source``), of different trainings (``check_one_training``; ``moved``: one
    training whatever its --save-dir), or of different models (``check_one_model``); or a layer
    asked for twice."""
    twice = repeated(layers)
    if twice is not None:
        raise PlotError(f"--layers: layer {twice} is given twice")
    given_twice = file_given_twice([path for path, _ in analyses])
    if given_twice is not None:  # its points were drawn twice, at one step
        raise PlotError(f"{given_twice} is given twice: one analysis per training step")
    at_step: Dict[int, str] = {}
    for path, data in analyses:
        earlier = at_step.setdefault(data["num_updates"], path)
        if earlier != path:
            raise PlotError(
                f"{earlier} and {path} are both at step {data['num_updates']}: one analysis per "
                "training step (the same checkpoint twice?)"
            )
    check_matrices(analyses)
    try:
        check_one_source([data for _, data in analyses], [path for path, _ in analyses])
    except PolicyError as err:  # a shared model's zeros drawn inside a baseline's curve
        raise PlotError(str(err)) from None
    note = unrecorded_note([data for _, data in analyses], [path for path, _ in analyses])
    if note is not None:
        print(f"fairseq-san-plot-js: warning: {note}", file=sys.stderr)
    check_one_training(analyses, moved)
    check_one_model(analyses)


def check_one_training(analyses: List[Tuple[str, dict]], moved: bool = False) -> None:
    """PlotError naming two analyses of checkpoints trained with different seeds or into
    different ``--save-dir`` (unless ``moved``: one training moved and resumed), where they
    record theirs: two trainings' kept checkpoints of one recipe were drawn as one curve."""
    paths = [path for path, _ in analyses]
    data = [{**data, "save_dir": saved_in(data)} for _, data in analyses]
    fields = [("seed", "seed")] + ([] if moved else [("save_dir", "--save-dir")])
    for field, said in fields:
        differing = recorded_difference(data, paths, field)
        if differing is not None:
            (first, value), (path, other) = differing
            moved_hint = (" (or, one training moved to another --save-dir and resumed there: "
                          "--one-training)" if field == "save_dir" else "")  # fmt: skip
            raise PlotError(
                f"{first} ({said} {value}) and {path} ({said} {other}) are analyses of different "
                f"trainings: plot the checkpoints of one training{moved_hint}"
            )


def saved_in(data: dict) -> Optional[str]:
    """The ``--save-dir`` an analysis's checkpoint was trained with, normalised ("./run" is
    "run"); None where it records none."""
    save_dir = data.get("save_dir")
    return os.path.normpath(save_dir) if isinstance(save_dir, str) and save_dir else None


def check_matrices(analyses: List[Tuple[str, dict]]) -> None:
    """PlotError naming the file and the kind of a JS matrix that is not one (``check_js``)."""
    for path, data in analyses:
        for kind in KINDS:
            if data.get(kind) is not None:
                try:
                    matrix = check_js(data[kind])
                except PolicyError as err:
                    raise PlotError(f"{path}: {kind}: {err}") from None
                note = bits_note(matrix, f"{path}: {kind}", "values in bits are drawn beside "
                                 "the others as if in nats")  # fmt: skip
                if note is not None:
                    print(f"fairseq-san-plot-js: note: {note}", file=sys.stderr)


def model_of(data: dict) -> str:
    """What an analysis records about its model: the layers of each kind of attention, or that
    it has none (a language model: no encoder; AAN: no decoder self-attention weights)."""
    return ", ".join(
        f"{kind} {len(data[kind])} layers" if data.get(kind) is not None else f"no {kind}"
        for kind in KINDS
    )


def check_one_model(analyses: List[Tuple[str, dict]]) -> None:
    """PlotError naming the first analysis and one of another model: kinds of attention or
    layer counts that differ, which fairseq-san-policy refuses to average (``mean_js``); their
    points were drawn as one curve. Called after ``check_matrices``, which names a bad matrix."""
    (first_path, first), *others = analyses
    for path, data in others:
        try:
            mean_js([first, data], [first_path, path])
        except PolicyError:
            raise PlotError(
                f"{first_path} ({model_of(first)}) and {path} ({model_of(data)}) are analyses of "
                "different models: plot the checkpoints of one model"
            ) from None


def curves(
    analyses: List[Tuple[str, dict]], reference: int, layers: List[int]
) -> Dict[str, Optional[Dict[int, List[Tuple[int, float]]]]]:
    """Per panel kind, ``{layer: [(steps, JS(reference, layer)), ...]}``, or None without weights.

    A kind counts as without weights only if no analysis has a matrix for it. The analyses have
    passed ``check_one_series`` (their matrices checked).
    """
    panels: Dict[str, Optional[Dict[int, List[Tuple[int, float]]]]] = {}
    for kind, _ in DECODER_PANELS:
        series: Dict[int, List[Tuple[int, float]]] = {layer: [] for layer in layers}
        for path, data in analyses:
            matrix = data.get(kind)
            if matrix is None:
                continue
            check_layers(reference, layers, len(matrix), kind, path)
            for layer in layers:
                series[layer].append((data["num_updates"], float(matrix[reference - 1][layer - 1])))
        panels[kind] = series if any(series.values()) else None
    return panels


def figure_title(analyses: List[Tuple[str, dict]], reference: int, layers: List[int]) -> str:
    """What the figure draws, and of which data where the analyses record it (one subset, one
    number of sentences: ``check_one_series``): ``JS divergence of decoder layers 5, 6 from
    layer 4 against training steps (valid, 500 sentences)``."""
    plural = "s" if len(layers) > 1 else ""
    drawn = (f"JS divergence of decoder layer{plural} {', '.join(map(str, layers))} from layer "
             f"{reference} against training steps")  # fmt: skip
    subset, sentences = (next((data[field] for _, data in analyses if data.get(field) is not None),
                              None) for field in ("subset", "sentences"))  # fmt: skip
    data = [str(subset)] if subset is not None else []
    data += [f"{sentences} sentences"] if sentences is not None else []
    return f"{drawn} ({', '.join(data)})" if data else drawn


def check_output(path: str, inputs: List[str]) -> None:
    """The figure can be written to ``path``, said before any analysis is read: a name, in a
    folder that is there, ending in a format matplotlib writes (it would add ".png" to any
    other), and no input (a js.json named so was overwritten)."""
    if path == DASH:  # its format would be a guess, and binary on a terminal
        raise PlotError(
            "-o -: the figure is not written to standard output (its format is read from the "
            "file name's extension): name a file, e.g. -o fig5.png"
        )
    problem = output_problem(path, "the figure", inputs)
    if problem:
        raise PlotError(f"-o {path}: {problem}")
    extension = os.path.splitext(path)[1][1:].lower()
    formats = figure_formats()
    if extension not in formats:
        raise PlotError(
            f"-o {path}: end the name in a figure format's extension ({', '.join(formats)})"
        )
    if extension == "pgf":  # matplotlib's pgf backend runs LaTeX: a RuntimeError traceback
        texsystem = matplotlib_module().rcParams["pgf.texsystem"]
        if shutil.which(texsystem) is None:
            raise PlotError(
                f"-o {path}: a .pgf figure needs {texsystem}, which is not installed: write a "
                ".pdf or .svg"
            )


@said_when_interrupted
@quiet_when_output_closes
def main(argv: Optional[List[str]] = None) -> None:
    """Read the analyses, write the figure; bad input exits with status 2."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        paths = [analysis_file(path) for path in args.dirs]
        check_output(args.output, paths)
        if args.reference_layer in args.layers:  # a flat line at 0
            raise PlotError(
                f"--layers {args.reference_layer} is the --reference-layer: its JS with itself "
                "is 0; give the other layers"
            )
        analyses = [(path, read_analysis(path)) for path in paths]
        check_one_series(analyses, args.layers, args.one_training)
        panels = curves(analyses, args.reference_layer, args.layers)
        if all(series is None for series in panels.values()):
            raise PlotError("no decoder attention matrices in the given js.json files")
    except (PlotError, UsageError) as err:  # UsageError: matplotlib cannot start
        parser.error(str(err))
    from fairseq_san.plots import js_training_curves

    try:
        title = args.title or figure_title(analyses, args.reference_layer, args.layers)
        js_training_curves(panels, args.reference_layer, args.output, title)
    except OSError as err:
        parser.error(f"cannot write {args.output}: {err.strerror or err}")
    count = f"{len(analyses)} checkpoint" + ("s" if len(analyses) > 1 else "")
    print(f"wrote {args.output} ({count})", file=sys.stderr)


if __name__ == "__main__":
    main()
