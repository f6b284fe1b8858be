"""Figure builders: check the data once, attach a "how to read this" caption.

Every builder returns a :class:`~mechscope.report.figure.Figure`; shape mistakes
raise :class:`InputError` here, before any renderer runs, naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from mechscope.errors import InputError
from mechscope.report.figure import Figure
from mechscope.report.layout import circular_layout, line_layout
from mechscope.report.specs import (
    BarsSpec,
    CurvesSpec,
    Edge,
    GraphSpec,
    HeatmapSpec,
    Node,
    PanelsSpec,
    ScatterSpec,
    Series,
)


def _vector(values, n: int | None, field: str) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1 or (n is not None and arr.shape[0] != n):
        want = f"length {n}" if n is not None else "1-D"
        raise InputError(f"a 1-D sequence of {want}, got shape {arr.shape}", field=field)
    return arr


def _labels(labels: Sequence, n: int, field: str) -> list[str]:
    out = [str(v) for v in labels]
    if len(out) != n:
        raise InputError(f"{n} labels, got {len(out)}", field=field)
    return out


def _series(series: Sequence[Series], n: int, field: str) -> list[Series]:
    if not series:
        raise InputError("at least one series", field=field)
    out = []
    for s in series:
        where = f"{field}[{s.name}]"
        if (s.low is None) != (s.high is None):
            raise InputError("both low and high, or neither", field=where)
        low = None if s.low is None else _vector(s.low, n, f"{where}.low")
        high = None if s.high is None else _vector(s.high, n, f"{where}.high")
        out.append(Series(str(s.name), _vector(s.mean, n, f"{where}.mean"), low, high, s.group))
    return out


def heatmap(
    z,
    x_labels: Sequence,
    y_labels: Sequence,
    title: str,
    *,
    diverging: bool = False,
    zmid: float = 0.0,
    hover_text=None,
    colorbar_title: str = "",
    x_title: str = "",
    y_title: str = "",
    caption: str | None = None,
    marks=None,
    mark_label: str = "",
    spread: float | None = None,
) -> Figure:
    """A ``[rows, cols]`` heatmap; row 0 is drawn at the top. NaN cells stay blank.

    ``diverging`` centres a red/blue scale on ``zmid`` with symmetric limits, so equal
    colours mean equal distance from ``zmid``. ``hover_text`` (``[rows, cols]`` plain strings,
    newlines allowed) is added to each cell's hover label in the report. ``marks``
    (``[rows, cols]`` booleans) puts a dot on the cells it marks, e.g. those whose interval
    excludes ``zmid``; ``mark_label`` says so in the legend. ``spread`` (diverging only)
    sets the colour range to ``zmid ± spread`` instead of the largest distance, so a few
    extreme cells saturate rather than wash every other cell out to white.
    """
    arr = np.asarray(z, dtype=np.float64)  # [rows, cols]
    if arr.ndim != 2:
        raise InputError(f"a 2-D array [rows, cols], got shape {arr.shape}", field="z")
    rows, cols = arr.shape
    hover = None
    if hover_text is not None:
        hover = [[str(v) for v in row] for row in hover_text]
        if len(hover) != rows or any(len(row) != cols for row in hover):
            raise InputError(f"hover text of shape [{rows}, {cols}]", field="hover_text")
    mark_arr = None
    if marks is not None:
        mark_arr = np.asarray(marks, dtype=bool)  # [rows, cols]
        if mark_arr.shape != arr.shape:
            raise InputError(f"marks of shape {arr.shape}, got {mark_arr.shape}", field="marks")
    what = colorbar_title or "the value"
    if caption is None:
        if diverging:
            caption = (
                f"Each cell shows {what} for one row and column: red is above {zmid:g}, "
                f"blue below, white near {zmid:g}. Hover a cell for its exact value."
            )
        else:
            caption = (
                f"Each cell shows {what} for one row and column: brighter (yellow) is higher, "
                "darker (purple) lower. Hover a cell for its exact value."
            )
    spec = HeatmapSpec(
        z=arr,
        x_labels=_labels(x_labels, cols, "x_labels"),
        y_labels=_labels(y_labels, rows, "y_labels"),
        diverging=diverging,
        zmid=float(zmid),
        hover_text=hover,
        colorbar_title=colorbar_title,
        x_title=x_title,
        y_title=y_title,
        marks=mark_arr,
        mark_label=mark_label,
        spread=float(spread) if spread and np.isfinite(spread) and spread > 0 else None,
    )
    return Figure(spec, title, caption)


def curves(
    x: Sequence,
    series: Sequence[Series],
    title: str,
    x_title: str = "",
    y_title: str = "",
    *,
    hline: float | None = None,
    caption: str | None = None,
) -> Figure:
    """Lines over ``x`` (numbers or category labels), each with an optional shaded interval.

    ``hline`` draws a dashed horizontal reference (e.g. 0 for "no effect").
    """
    xs = _xs(x)
    checked = _series(series, len(xs), "series")
    if caption is None:
        has_band = any(s.low is not None for s in checked)
        caption = "Lines are means"
        caption += "; shaded bands are confidence intervals." if has_band else "."
        caption += " Click a legend entry to hide or show a series (and its band)."
    return Figure(CurvesSpec(xs, checked, x_title, y_title, hline), title, caption)


def panels(
    x: Sequence,
    by_panel: Mapping[str, Sequence[Series]],
    title: str,
    x_title: str = "",
    y_title: str = "",
    *,
    hline: float | None = None,
    caption: str | None = None,
) -> Figure:
    """Small multiples: one panel of curves per key of ``by_panel`` (its title), side by side,
    sharing the axes. A series name keeps one colour and one legend entry in every panel,
    so the panels compare like with like without bands drawn over each other."""
    if not by_panel:
        raise InputError("at least one panel", field="by_panel")
    xs = _xs(x)
    checked = [(str(k), _series(v, len(xs), f"by_panel[{k}]")) for k, v in by_panel.items()]
    if caption is None:
        caption = "One panel per group; lines are means, shaded bands confidence intervals."
    return Figure(PanelsSpec(xs, checked, x_title, y_title, hline), title, caption)


def _xs(x: Sequence) -> list:
    """Numbers as floats, anything else as category labels."""
    xs = list(x)
    if xs and all(isinstance(v, int | float | np.integer | np.floating) for v in xs):
        return [float(v) for v in xs]
    return [str(v) for v in xs]


def bars(
    categories: Sequence,
    series: Sequence[Series],
    title: str,
    x_title: str = "",
    y_title: str = "",
    *,
    horizontal: bool = False,
    caption: str | None = None,
) -> Figure:
    """Grouped bars: one bar per category and series; whiskers from ``low``/``high`` (a NaN
    bound draws no whisker for that bar: no interval, e.g. one seed)."""
    cats = [str(c) for c in categories]
    if len(set(cats)) != len(cats):
        raise InputError(
            "unique category labels (bars of equal labels would merge)", field="categories"
        )
    checked = _series(series, len(cats), "series")
    if caption is None:
        caption = "Bar length is the value"
        has_ci = any(s.low is not None for s in checked)
        caption += "; whiskers show confidence intervals." if has_ci else "."
    return Figure(BarsSpec(cats, checked, x_title, y_title, horizontal), title, caption)


def scatter(
    x,
    y,
    title: str,
    x_title: str = "",
    y_title: str = "",
    *,
    text: Sequence[str] | None = None,
    groups: Sequence[str] | None = None,
    diagonal: bool = False,
    caption: str | None = None,
) -> Figure:
    """Points ``(x[i], y[i])`` with optional hover ``text`` and colour ``groups``.

    ``diagonal`` draws the dashed line y = x (points on it agree on both axes).
    """
    xs = _vector(x, None, "x")
    ys = _vector(y, xs.shape[0], "y")
    txt = None if text is None else _labels(text, xs.shape[0], "text")
    grp = None if groups is None else _labels(groups, xs.shape[0], "groups")
    if caption is None:
        caption = "Each point is one item; hover it for details."
        if diagonal:
            caption += " Points on the dashed line have equal values on both axes."
    return Figure(ScatterSpec(xs, ys, txt, grp, x_title, y_title, diagonal), title, caption)


def graph(
    nodes: Sequence[Node | tuple],
    edges: Sequence[Edge | tuple],
    title: str,
    *,
    layout: str | Mapping[str, tuple[float, float]] = "circular",
    directed: bool = True,
    caption: str | None = None,
    labelled: Sequence[str] | None = None,
    highlighted: Sequence[str] = (),
    node_px: tuple[float, float] | None = None,
) -> Figure:
    """A network: ``nodes`` as ``Node`` or ``(id, label, size, color_group, hover)``,
    ``edges`` as ``Edge`` or ``(src, dst, weight)``.

    ``layout`` is ``"circular"`` (node order clockwise from the top), ``"line"`` (node
    order left to right) or a mapping of node id to ``(x, y)``; all are deterministic.
    ``labelled`` names the nodes whose label is written beside them (default: all); the
    others show theirs on hover, so a graph of hundreds of nodes stays legible.
    ``highlighted`` names nodes drawn with a dark ring (those a reader pinned); ``node_px``
    the smallest and largest node diameter in px, for a layout denser than the default's.
    """
    node_list = [n if isinstance(n, Node) else Node(*n) for n in nodes]
    edge_list = [e if isinstance(e, Edge) else Edge(*e) for e in edges]
    ids = [str(n.id) for n in node_list]
    if len(set(ids)) != len(ids):
        raise InputError("unique node ids", field="nodes")
    known = set(ids)
    for e in edge_list:
        for end in (e.src, e.dst):
            if end not in known:
                raise InputError(f"edge ends that are node ids, got {end!r}", field="edges")
        if not np.isfinite(e.weight):
            raise InputError(
                f"finite edge weights, got {e.weight} on {e.src}->{e.dst}", field="edges"
            )
    if isinstance(layout, Mapping):
        missing = known - set(layout)
        if missing:
            raise InputError(
                f"a position for every node, missing {sorted(missing)[:5]}", field="layout"
            )
        positions = {i: (float(layout[i][0]), float(layout[i][1])) for i in ids}
    elif layout == "circular":
        positions = dict(zip(ids, circular_layout(len(ids)), strict=True))
    elif layout == "line":
        positions = dict(zip(ids, line_layout(len(ids)), strict=True))
    else:
        raise InputError(f"'circular', 'line' or a mapping, got {layout!r}", field="layout")
    if caption is None:
        caption = (
            "Nodes are drawn larger for larger size, coloured by group; edges run from source "
            "to target"
            + (" (arrowhead at the target)" if directed else "")
            + ", wider for larger |weight|, blue for positive and red for negative weights."
        )
    shown = None
    if labelled is not None:
        shown = frozenset(str(i) for i in labelled)
        if not shown <= known:
            raise InputError(f"node ids, got {sorted(shown - known)[:5]}", field="labelled")
    ringed = frozenset(str(i) for i in highlighted)
    if not ringed <= known:
        raise InputError(f"node ids, got {sorted(ringed - known)[:5]}", field="highlighted")
    spec = GraphSpec(
        node_list, edge_list, positions, directed, layout == "line", shown, ringed, node_px
    )
    return Figure(spec, title, caption)
