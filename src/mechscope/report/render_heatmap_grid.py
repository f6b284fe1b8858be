"""Small multiples of heatmaps (:class:`~mechscope.report.specs.HeatmapGridSpec`) for both
renderers: plotly for the report and notebooks, matplotlib for papers.

Tick labels are cut by :func:`~mechscope.report.text_fit.cut` (a token of 40 characters
does not push the panels apart); a cell's hover label names its row, column and panel
whole. The lowest panel of each column carries the column's tick labels.
"""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
from matplotlib.figure import Figure as MplFigure

from mechscope.report.plotly_text import (
    COLORBAR_TITLE_CHARS,
    Y_TITLE_CHARS,
    axis_title,
    esc,
    esc_hover,
    ticks,
)
from mechscope.report.specs import HeatmapGridSpec
from mechscope.report.style import SEQUENTIAL_MPL, SEQUENTIAL_PLOTLY
from mechscope.report.text_fit import cut, width

MAX_COLUMNS = 4  #: panels side by side
MAX_STATIC_TICKS = 40


def _grid(n: int) -> tuple[int, int]:
    ncols = min(n, MAX_COLUMNS)
    return math.ceil(n / ncols), ncols


def heatmap_grid_plotly(spec: HeatmapGridSpec) -> go.Figure:
    """The panels as plotly subplots sharing one colour axis."""
    from plotly.subplots import make_subplots

    nrows, ncols = _grid(len(spec.panels))
    rows, cols = spec.panels[0][1].shape
    fig = make_subplots(
        nrows, ncols, shared_xaxes=True, shared_yaxes=True,
        subplot_titles=[esc(cut(t)) for t, _ in spec.panels],
        horizontal_spacing=0.03, vertical_spacing=0.1 if nrows > 1 else 0.0,
    )  # fmt: skip
    for k, (title, z) in enumerate(spec.panels):
        text = [
            [esc_hover(f"{title}\n{spec.y_labels[r]} · {spec.x_labels[c]}") for c in range(cols)]
            for r in range(rows)
        ]
        trace = go.Heatmap(
            z=z,
            x=list(range(cols)),  # indices: repeated tokens stay separate columns
            y=list(range(rows)),
            text=text,
            hovertemplate="%{text}<br>value: %{z:.4g}<extra></extra>",
            hoverongaps=False,
            coloraxis="coloraxis",
        )
        fig.add_trace(trace, row=k // ncols + 1, col=k % ncols + 1)
    colorbar = {"title": {"text": axis_title(spec.colorbar_title, COLORBAR_TITLE_CHARS)}}
    fig.update_layout(
        coloraxis={
            "colorscale": SEQUENTIAL_PLOTLY,
            "cmin": spec.zmin,
            "cmax": spec.zmax,
            "colorbar": colorbar,
        }
    )
    cells = {"showgrid": False, "zeroline": False}
    fig.update_xaxes(range=[-0.5, cols - 0.5], **cells, **ticks(spec.x_labels))
    fig.update_yaxes(range=[rows - 0.5, -0.5], **cells, **ticks(spec.y_labels))
    n = len(spec.panels)
    for k in range(max(0, n - ncols), n):  # the lowest panel of each column
        at = {"row": k // ncols + 1, "col": k % ncols + 1}
        fig.update_xaxes(showticklabels=True, title_text=axis_title(spec.x_title), **at)
    fig.update_yaxes(title_text=axis_title(spec.y_title, Y_TITLE_CHARS), col=1)
    fig.update_layout(height=int(min(1400, max(360, 140 + nrows * (60 + 16 * rows)))))
    return fig


def _tick_idx(n: int) -> list[int]:
    return list(range(0, n, max(1, math.ceil(n / MAX_STATIC_TICKS))))


def heatmap_grid_static(spec: HeatmapGridSpec, fig: MplFigure) -> None:
    """The panels as matplotlib subplots with one colour bar."""
    n = len(spec.panels)
    nrows, ncols = _grid(n)
    rows, cols = spec.panels[0][1].shape
    # room for the longest tick label (cut to LABEL_WIDTH columns, about 0.07 in each)
    x_room = 0.07 * max(width(cut(t)) for t in spec.x_labels)
    y_room = 0.07 * max(width(cut(t)) for t in spec.y_labels)
    wide = min(18.0, max(5.0, 1.6 + y_room + ncols * (0.9 + 0.14 * cols)))
    fig.set_size_inches(wide, min(16.0, max(3.0, 1.2 + x_room + nrows * (0.9 + 0.14 * rows))))
    axes = fig.subplots(nrows, ncols, sharex=True, sharey=True, squeeze=False).ravel()
    image = None
    for ax, (title, z) in zip(axes, spec.panels, strict=False):
        image = ax.imshow(
            np.ma.masked_invalid(z), cmap=SEQUENTIAL_MPL, vmin=spec.zmin, vmax=spec.zmax,
            aspect="auto", interpolation="nearest",
        )  # fmt: skip
        ax.set_title(cut(title), loc="left", fontsize=9)
    for ax in axes[n:]:
        ax.set_visible(False)
    xi, yi = _tick_idx(cols), _tick_idx(rows)
    axes[0].set_xticks(xi, [cut(spec.x_labels[i]) for i in xi], rotation=90)
    axes[0].set_yticks(yi, [cut(spec.y_labels[i]) for i in yi])
    for ax in axes[:n]:
        ax.tick_params(axis="x", labelrotation=90)
    for k in range(max(0, n - ncols), n):  # the lowest panel of each column
        axes[k].tick_params(labelbottom=True)
        axes[k].set_xlabel(spec.x_title)
    for ax in axes[:n:ncols]:
        ax.set_ylabel(spec.y_title)
    fig.colorbar(image, ax=list(axes[:n]), label=spec.colorbar_title, shrink=0.9)
