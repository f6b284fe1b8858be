"""Render a figure description as an interactive plotly figure (for the HTML report).

Every string from the caller (tick labels, names, titles, hover texts) is plain text
and is escaped: tokens such as ``<s>`` or ``</b>`` must show as written, not as plotly
markup. In hover texts a newline starts a new line.
"""

from __future__ import annotations

import html
import math
from collections import defaultdict
from functools import singledispatch

import numpy as np
import plotly.graph_objects as go

from mechscope.report.figure import (
    NEGATIVE_COLOR,
    PALETTE,
    POSITIVE_COLOR,
    BarsSpec,
    CurvesSpec,
    Figure,
    GraphSpec,
    HeatmapSpec,
    ScatterSpec,
    color_for,
)
from mechscope.report.layout import arrow_anchor, edge_points, edge_width, node_size

_FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif"
_AXIS = {"gridcolor": "#ececec", "zerolinecolor": "#c8c8c8", "linecolor": "#9a9a9a"}
_AXIS |= {"automargin": True, "showline": True}
TEMPLATE = go.layout.Template(
    layout={
        "font": {"family": _FONT, "size": 13, "color": "#222"},
        "paper_bgcolor": "white",
        "plot_bgcolor": "white",
        "colorway": list(PALETTE),
        "hovermode": "closest",
        "xaxis": _AXIS,
        "yaxis": _AXIS,
        "margin": {"l": 60, "r": 20, "t": 56, "b": 50},
    }
)
MAX_TICKS = 80


def esc(text: str) -> str:
    """Escape plain text for plotly's pseudo-HTML labels."""
    return html.escape(str(text), quote=False)


def esc_hover(text: str) -> str:
    """Escape a hover text; its newlines become line breaks."""
    return esc(text).replace("\n", "<br>")


def _rgba(hex_color: str, alpha: float) -> str:
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def _ticks(labels: list[str]) -> dict:
    """Tick values at every index (thinned beyond ``MAX_TICKS``); labels escaped."""
    step = max(1, math.ceil(len(labels) / MAX_TICKS))
    idx = list(range(0, len(labels), step))
    return {"tickmode": "array", "tickvals": idx, "ticktext": [esc(labels[i]) for i in idx]}


def render_plotly(figure: Figure) -> go.Figure:
    """The plotly figure of ``figure`` (title and shared styling applied)."""
    fig = _render(figure.spec)
    fig.update_layout(template=TEMPLATE, title={"text": esc(figure.title), "x": 0.0})
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
            f"{esc(spec.y_labels[r])} · {esc(spec.x_labels[c])}"
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
        colorscale="RdBu_r" if spec.diverging else "Viridis",
        zmid=spec.zmid if spec.diverging else None,
        colorbar={"title": {"text": esc(spec.colorbar_title)}},
    )
    fig = go.Figure(trace)
    fig.update_xaxes(title_text=esc(spec.x_title), showgrid=False, **_ticks(spec.x_labels))
    fig.update_yaxes(
        title_text=esc(spec.y_title), showgrid=False, autorange="reversed", **_ticks(spec.y_labels)
    )
    fig.update_layout(height=int(min(900, max(320, 160 + 22 * rows))))
    return fig


@_render.register
def _curves(spec: CurvesSpec) -> go.Figure:
    fig = go.Figure()
    x = list(spec.x)
    seen_groups: set[str] = set()
    for i, s in enumerate(spec.series):
        color, group = color_for(i), s.group or s.name
        mean = np.asarray(s.mean)
        custom, interval = None, ""
        if s.low is not None and s.high is not None:
            low, high = np.asarray(s.low), np.asarray(s.high)
            keep = np.isfinite(low) & np.isfinite(high)
            bx = [v for v, k in zip(x, keep, strict=True) if k]
            fig.add_trace(
                go.Scatter(
                    x=bx + bx[::-1],
                    y=np.concatenate([high[keep], low[keep][::-1]]),
                    mode="lines",  # plotly's default adds markers to short traces
                    fill="toself",
                    fillcolor=_rgba(color, 0.18),
                    line={"width": 0},
                    hoverinfo="skip",
                    showlegend=False,
                    legendgroup=group,
                    name=f"{esc(s.name)} interval",
                )
            )
            custom = np.stack([low, high], axis=-1)  # [n, 2]
            interval = " [%{customdata[0]:.4g}, %{customdata[1]:.4g}]"
        title = esc(s.group) if s.group and s.group not in seen_groups else None
        seen_groups.add(group)
        fig.add_trace(
            go.Scatter(
                x=x,
                y=mean,
                mode="lines+markers" if len(x) <= 60 else "lines",
                name=esc(s.name),
                legendgroup=group,
                legendgrouptitle_text=title,
                line={"color": color, "width": 2},
                marker={"size": 5},
                customdata=custom,
                hovertemplate=f"{esc(s.name)}<br>%{{x}}: %{{y:.4g}}{interval}<extra></extra>",
            )
        )
    if spec.hline is not None:
        fig.add_hline(y=spec.hline, line_dash="dash", line_color="#888", line_width=1)
    fig.update_xaxes(title_text=esc(spec.x_title))
    fig.update_yaxes(title_text=esc(spec.y_title))
    fig.update_layout(height=440, legend={"groupclick": "togglegroup"})
    return fig


@_render.register
def _bars(spec: BarsSpec) -> go.Figure:
    fig = go.Figure()
    cats = [esc(c) for c in spec.categories]
    for i, s in enumerate(spec.series):
        mean = np.asarray(s.mean)
        error = None
        if s.low is not None and s.high is not None:
            error = {
                "type": "data",
                "symmetric": False,
                "array": np.asarray(s.high) - mean,
                "arrayminus": mean - np.asarray(s.low),
                "color": "#444",
            }
        common = {"name": esc(s.name), "marker_color": color_for(i), "legendgroup": s.group}
        if spec.horizontal:
            fig.add_trace(go.Bar(x=mean, y=cats, orientation="h", error_x=error, **common))
        else:
            fig.add_trace(go.Bar(x=cats, y=mean, error_y=error, **common))
    fig.update_xaxes(title_text=esc(spec.x_title))
    fig.update_yaxes(title_text=esc(spec.y_title))
    if spec.horizontal:
        fig.update_yaxes(autorange="reversed")
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
                name=esc(g) or "points",
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
                    line={"dash": "dash", "color": "#888", "width": 1},
                    name="y = x",
                    hoverinfo="skip",
                )
            )
    fig.update_xaxes(title_text=esc(spec.x_title))
    fig.update_yaxes(title_text=esc(spec.y_title))
    fig.update_layout(height=460, showlegend=len(order) > 1 or spec.diagonal)
    return fig


@_render.register
def _graph(spec: GraphSpec) -> go.Figure:
    fig = go.Figure()
    pos = spec.positions
    largest_w = max((abs(e.weight) for e in spec.edges), default=0.0)
    lines: dict[tuple[bool, float], tuple[list, list]] = defaultdict(lambda: ([], []))
    heads: dict[str, list] = defaultdict(list)
    for e in spec.edges:
        pts = edge_points(pos[e.src], pos[e.dst], spec.curved)
        xs, ys = lines[(e.weight >= 0, edge_width(e.weight, largest_w))]
        xs.extend([p[0] for p in pts] + [None])
        ys.extend([p[1] for p in pts] + [None])
        hx, hy, angle = arrow_anchor(pts, 0.8 if spec.directed else 0.5)
        heads["x"].append(hx)
        heads["y"].append(hy)
        heads["angle"].append(angle)
        heads["color"].append(POSITIVE_COLOR if e.weight >= 0 else NEGATIVE_COLOR)
        heads["text"].append(f"{esc(e.src)} → {esc(e.dst)}: {e.weight:.4g}")
    for (positive, width), (xs, ys) in sorted(lines.items()):
        color = POSITIVE_COLOR if positive else NEGATIVE_COLOR
        line = {"color": _rgba(color, 0.55), "width": width}
        fig.add_trace(
            go.Scatter(x=xs, y=ys, mode="lines", line=line, hoverinfo="skip", showlegend=False)
        )
    if spec.edges:
        marker = {"color": heads["color"], "size": 10 if spec.directed else 6}
        marker |= {"symbol": "triangle-up" if spec.directed else "circle"}
        marker |= {"angle": heads["angle"] if spec.directed else 0}
        fig.add_trace(
            go.Scatter(
                x=heads["x"],
                y=heads["y"],
                mode="markers",
                marker=marker,
                hovertext=heads["text"],
                hoverinfo="text",
                showlegend=False,
                name="edges",
            )
        )
    largest_s = max((n.size for n in spec.nodes), default=0.0)
    groups = list(dict.fromkeys(n.color_group for n in spec.nodes))
    for i, g in enumerate(groups):
        members = [n for n in spec.nodes if n.color_group == g]
        fig.add_trace(
            go.Scatter(
                x=[pos[n.id][0] for n in members],
                y=[pos[n.id][1] for n in members],
                mode="markers+text",
                text=[esc(n.label) for n in members],
                textposition="top center",
                hovertext=[esc_hover(n.hover or n.label) for n in members],
                hoverinfo="text",
                name=esc(g) or "nodes",
                marker={
                    "size": [node_size(n.size, largest_s) for n in members],
                    "color": color_for(i),
                    "line": {"color": "white", "width": 1},
                },
            )
        )
    hidden = {"showgrid": False, "zeroline": False, "showticklabels": False, "showline": False}
    fig.update_xaxes(**hidden)
    fig.update_yaxes(scaleanchor="x", scaleratio=1, **hidden)
    fig.update_layout(height=560, showlegend=len(groups) > 1)
    return fig
