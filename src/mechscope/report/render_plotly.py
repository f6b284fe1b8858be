"""Render a figure description as an interactive plotly figure (for the HTML report).

Every string from the caller (tick labels, names, titles, hover texts) is plain text
and is escaped: tokens such as ``<s>`` or ``</b>`` must show as written, not as plotly
markup. In hover texts a newline starts a new line. Labels (ticks, legend entries, panel
titles) are cut by :func:`~mechscope.report.text_fit.cut` with their whole text in the hover
label; titles are wrapped, since plotly wraps none of them.
"""

from __future__ import annotations

import math
from functools import singledispatch

import numpy as np
import plotly.graph_objects as go

from mechscope.report.plotly_text import (
    COLORBAR_TITLE_CHARS,
    Y_TITLE_CHARS,
    axis_title,
    category_ticks,
    esc,
    esc_hover,
    legend_name,
    rgba,
    ticks,
)
from mechscope.report.render_graph import graph_plotly
from mechscope.report.render_heatmap_grid import heatmap_grid_plotly
from mechscope.report.specs import (
    BarsSpec,
    CurvesSpec,
    Drawable,
    GraphSpec,
    HeatmapGridSpec,
    HeatmapSpec,
    PanelsSpec,
    ScatterSpec,
)
from mechscope.report.style import (
    BAND_ALPHA,
    DIVERGING_PLOTLY,
    MARK_COLOR,
    MUTED_COLOR,
    SEQUENTIAL_PLOTLY,
    color_for,
    plotly_template,
)
from mechscope.report.text_fit import cut, wrap

TEMPLATE = plotly_template()
TITLE_SIZE = 14  # px
TITLE_CHARS = 62  # about 480 px at TITLE_SIZE: a title line fits a figure half the page wide


def _range(spec: HeatmapSpec) -> dict:
    """A diverging map's colour limits when the spec narrows them (``spread``)."""
    if not spec.diverging or spec.spread is None:
        return {}
    return {"zmin": spec.zmid - spec.spread, "zmax": spec.zmid + spec.spread}


def render_plotly(figure: Drawable) -> go.Figure:
    """The plotly figure of ``figure`` (title and shared styling applied). A long title is
    broken into lines that fit half the report's width (figures sit two by two behind a
    disclosure), since plotly never wraps a title and would draw it past the figure."""
    fig = _render(figure.spec)
    lines = wrap(figure.title, TITLE_CHARS) or [figure.title]
    title = {"text": "<br>".join(esc(line) for line in lines), "x": 0.0, "xanchor": "left"}
    fig.update_layout(template=TEMPLATE, title=title | {"font": {"size": TITLE_SIZE}})
    fig.update_layout(margin={"t": 30 + 20 * len(lines)})
    if figure.height is not None:
        fig.update_layout(height=figure.height)
    return fig


@singledispatch
def _render(spec) -> go.Figure:
    raise TypeError(f"no plotly renderer for {type(spec).__name__}")


@_render.register
def _heatmap(spec: HeatmapSpec) -> go.Figure:
    rows, cols = spec.z.shape
    text = [
        [
            esc_hover(f"{spec.y_labels[r]} · {spec.x_labels[c]}")
            + (f"<br>{esc_hover(spec.hover_text[r][c])}" if spec.hover_text is not None else "")
            for c in range(cols)
        ]
        for r in range(rows)
    ]
    trace = go.Heatmap(
        z=spec.z,
        x=list(range(cols)),  # indices, not labels: repeated tokens must stay separate columns
        y=list(range(rows)),
        text=text,
        hovertemplate="%{text}<br>value: %{z:.4g}<extra></extra>",
        hoverongaps=False,
        colorscale=DIVERGING_PLOTLY if spec.diverging else SEQUENTIAL_PLOTLY,
        zmid=spec.zmid if spec.diverging else None,
        **_range(spec),
        colorbar={"title": {"text": axis_title(spec.colorbar_title, COLORBAR_TITLE_CHARS)}},
    )
    fig = go.Figure(trace)
    if spec.marks is not None and spec.marks.any():
        r, c = np.nonzero(spec.marks)
        fig.add_trace(
            go.Scatter(
                x=c,
                y=r,
                mode="markers",
                marker={"color": MARK_COLOR, "size": max(3, min(8, 240 // max(rows, cols)))},
                name=legend_name(spec.mark_label) or "marked",
                hoverinfo="skip",
                showlegend=bool(spec.mark_label),
            )
        )
        top_right = {"yanchor": "bottom", "y": 1.0, "xanchor": "right", "x": 1.0}
        fig.update_layout(legend={"orientation": "h"} | top_right)  # clear of ticks and title
    # the cells fill the axes exactly: no zero lines through row or column 0, no margin the
    # dots' trace would add
    cells = {"showgrid": False, "zeroline": False}
    fig.update_xaxes(
        title_text=axis_title(spec.x_title),
        range=[-0.5, cols - 0.5],
        **cells,
        **ticks(spec.x_labels),
    )
    fig.update_yaxes(
        title_text=axis_title(spec.y_title, Y_TITLE_CHARS),
        range=[rows - 0.5, -0.5],  # row 0 at the top
        **cells,
        **ticks(spec.y_labels),
    )
    fig.update_layout(height=int(min(760, max(320, 160 + 18 * rows))))
    return fig


@_render.register
def _curves(spec: CurvesSpec) -> go.Figure:
    fig = go.Figure()
    seen_groups: set[str] = set()
    for i, s in enumerate(spec.series):
        group = s.group or s.name
        title = legend_name(s.group) if s.group and s.group not in seen_groups else None
        seen_groups.add(group)
        for trace in _line_traces(list(spec.x), s, color_for(i), group):
            fig.add_trace(trace)
        fig.data[-1].legendgrouptitle.text = title
    if spec.hline is not None:
        fig.add_hline(y=spec.hline, line_dash="dash", line_color=MUTED_COLOR, line_width=1)
    fig.update_xaxes(title_text=axis_title(spec.x_title))
    if spec.x and isinstance(spec.x[0], str):
        fig.update_xaxes(**category_ticks(list(spec.x)))
    fig.update_yaxes(title_text=axis_title(spec.y_title, Y_TITLE_CHARS))
    fig.update_layout(height=440, legend={"groupclick": "togglegroup"})
    return fig


def _line_traces(
    x: list, s, color: str, group: str, *, legend: bool = True, axes: dict | None = None
) -> list[go.Scatter]:
    """A series' band (if any) and its line; ``axes`` places them in a subplot. Category
    values of ``x`` are escaped, as their ticks are (``category_ticks``)."""
    where = axes or {}
    x = [esc(v) if isinstance(v, str) else v for v in x]
    mean = np.asarray(s.mean)
    out, custom, interval = [], None, ""
    if s.low is not None and s.high is not None:
        low, high = np.asarray(s.low), np.asarray(s.high)
        keep = np.isfinite(low) & np.isfinite(high)
        bx = [v for v, k in zip(x, keep, strict=True) if k]
        out.append(
            go.Scatter(
                x=bx + bx[::-1],
                y=np.concatenate([high[keep], low[keep][::-1]]),
                mode="lines",  # plotly's default adds markers to short traces
                fill="toself",
                fillcolor=rgba(color, BAND_ALPHA),
                line={"width": 0},
                hoverinfo="skip",
                showlegend=False,
                legendgroup=group,
                name=f"{esc(s.name)} interval",
                **where,
            )
        )
        custom = np.stack([low, high], axis=-1)  # [n, 2]
        interval = " [%{customdata[0]:.4g}, %{customdata[1]:.4g}]"
    out.append(
        go.Scatter(
            x=x,
            y=mean,
            mode="lines+markers" if len(x) <= 60 else "lines",
            name=legend_name(s.name),
            legendgroup=group,
            showlegend=legend,
            line={"color": color, "width": 2},
            marker={"size": 5},
            customdata=custom,
            hovertemplate=f"{esc(s.name)}<br>%{{x}}: %{{y:.4g}}{interval}<extra></extra>",
            **where,
        )
    )
    return out


@_render.register
def _panels(spec: PanelsSpec) -> go.Figure:
    from plotly.subplots import make_subplots

    n = len(spec.panels)
    ncols = min(n, 3)
    nrows = math.ceil(n / ncols)
    titles = [esc(cut(t)) for t, _ in spec.panels]
    fig = make_subplots(
        nrows, ncols, shared_xaxes=True, shared_yaxes=True, subplot_titles=titles,
        horizontal_spacing=0.04, vertical_spacing=0.12,
    )  # fmt: skip
    names = list(dict.fromkeys(s.name for _, series in spec.panels for s in series))
    shown: set[str] = set()
    for k, (_, series) in enumerate(spec.panels):
        row, col = k // ncols + 1, k % ncols + 1
        for s in series:
            color = color_for(names.index(s.name))
            traces = _line_traces(list(spec.x), s, color, s.name, legend=s.name not in shown)
            shown.add(s.name)
            for trace in traces:
                fig.add_trace(trace, row=row, col=col)
        if spec.hline is not None:
            fig.add_hline(
                y=spec.hline, line_dash="dash", line_color=MUTED_COLOR, line_width=1,
                row=row, col=col,
            )  # fmt: skip
    for annotation, (title, _) in zip(fig.layout.annotations, spec.panels, strict=False):
        if cut(title) != title:  # a cut panel title shows whole on hover
            annotation.hovertext = esc(title)
    if spec.x and isinstance(spec.x[0], str):
        fig.update_xaxes(**category_ticks(list(spec.x)))
    fig.update_xaxes(title_text=axis_title(spec.x_title), row=nrows)
    fig.update_yaxes(title_text=axis_title(spec.y_title, Y_TITLE_CHARS), col=1)
    legend = {"orientation": "h", "yanchor": "top", "y": -0.22, "x": 0}
    fig.update_layout(height=300 + 240 * nrows, legend=legend | {"groupclick": "togglegroup"})
    return fig


@_render.register
def _bars(spec: BarsSpec) -> go.Figure:
    fig = go.Figure()
    cats = [esc(c) for c in spec.categories]
    hover = "%{y}: %{x:.4g}" if spec.horizontal else "%{x}: %{y:.4g}"
    for i, s in enumerate(spec.series):
        mean = np.asarray(s.mean)
        error = None
        if s.low is not None and s.high is not None:
            up, down = np.asarray(s.high) - mean, mean - np.asarray(s.low)
            error = {
                "type": "data",
                "symmetric": False,
                "array": up,  # NaN (no interval, e.g. one seed): plotly draws no whisker
                "arrayminus": down,
                "color": "#444",
            }
        common = {"name": legend_name(s.name), "marker_color": color_for(i), "legendgroup": s.group}
        common["hovertemplate"] = f"{esc(s.name)}<br>{hover}<extra></extra>"  # names whole
        if spec.horizontal:
            fig.add_trace(go.Bar(x=mean, y=cats, orientation="h", error_x=error, **common))
        else:
            fig.add_trace(go.Bar(x=cats, y=mean, error_y=error, **common))
    fig.update_xaxes(title_text=axis_title(spec.x_title))
    fig.update_yaxes(title_text=axis_title(spec.y_title, Y_TITLE_CHARS))
    labels = category_ticks(spec.categories)
    if spec.horizontal:
        fig.update_yaxes(autorange="reversed", **labels)
    else:
        fig.update_xaxes(**labels)
    n = len(spec.categories)
    height = max(320, 120 + 24 * n * len(spec.series)) if spec.horizontal else 440
    fig.update_layout(barmode="group", height=int(min(height, 1400)))
    fig.update_layout(showlegend=len(spec.series) > 1)
    return fig


@_render.register
def _scatter(spec: ScatterSpec) -> go.Figure:
    fig = go.Figure()
    groups = spec.groups or [""] * len(spec.x)
    order = list(dict.fromkeys(groups))
    for i, g in enumerate(order):
        idx = [k for k, gg in enumerate(groups) if gg == g]
        text = [esc_hover(spec.text[k]) for k in idx] if spec.text is not None else None
        head = "%{text}<br>" if text is not None else ""
        fig.add_trace(
            go.Scatter(
                x=spec.x[idx],
                y=spec.y[idx],
                mode="markers",
                name=legend_name(g) or "points",
                text=text,
                marker={"color": color_for(i), "size": 7, "opacity": 0.8},
                hovertemplate=f"{head}x: %{{x:.4g}}, y: %{{y:.4g}}<extra>{esc(g)}</extra>",
            )
        )
    if spec.diagonal:
        both = np.concatenate([spec.x, spec.y])
        both = both[np.isfinite(both)]
        if both.size:
            lo, hi = float(both.min()), float(both.max())
            fig.add_trace(
                go.Scatter(
                    x=[lo, hi],
                    y=[lo, hi],
                    mode="lines",
                    line={"dash": "dash", "color": MUTED_COLOR, "width": 1},
                    name="y = x",
                    hoverinfo="skip",
                )
            )
    fig.update_xaxes(title_text=axis_title(spec.x_title))
    fig.update_yaxes(title_text=axis_title(spec.y_title, Y_TITLE_CHARS))
    fig.update_layout(height=460, showlegend=len(order) > 1 or spec.diagonal)
    return fig


_render.register(GraphSpec, graph_plotly)
_render.register(HeatmapGridSpec, heatmap_grid_plotly)
