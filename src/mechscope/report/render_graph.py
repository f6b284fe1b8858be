"""Graphs (nodes and weighted edges) for both renderers: plotly for the report, matplotlib
for papers. Layouts are deterministic (:mod:`mechscope.report.layout`).

On a line layout (sentences in order) edges are arcs that rise above the row and run left
to right, so no arrowheads are drawn; nodes are no wider than the gap between neighbours,
and only the nodes the figure names are labelled, so a row of hundreds stays legible. Node
labels and legend entries are cut (:func:`~mechscope.report.text_fit.cut`); a node's hover
label gives its whole text.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import plotly.graph_objects as go
from matplotlib.figure import Figure as MplFigure
from matplotlib.lines import Line2D

from mechscope.report.layout import (
    arrow_anchor,
    edge_points,
    edge_width,
    line_node_sizes,
    node_size,
)
from mechscope.report.plotly_text import esc, esc_hover, rgba
from mechscope.report.specs import GraphSpec, Node
from mechscope.report.style import NEGATIVE_COLOR, POSITIVE_COLOR, color_for
from mechscope.report.text_fit import cut

GRAPH_WIDTH_PX = 1000  # about the report's figure width: the spacing of a row of nodes
RING_COLOR = "#000000"  # the outline of a highlighted (pinned) node
RING_WIDTH = 2.5  # px


def thinned(spec: GraphSpec) -> float:
    """Edge widths are scaled down when there are many, so crossing arcs stay apart."""
    return 1.0 if len(spec.edges) <= 30 else 0.5


def diameters_of(spec: GraphSpec, width: float, scale: float = 1.0) -> dict[str, float]:
    """Node diameters (px, or points with ``scale`` 0.75): area grows with size; on a line no
    wider than the gap between neighbours of a row ``width`` across."""
    sizes = [n.size for n in spec.nodes]
    if spec.curved:
        diam = line_node_sizes(sizes, width)
    else:
        largest = max(sizes, default=0.0)
        low, high = spec.node_px or (12.0, 40.0)
        diam = [scale * node_size(v, largest, low, high) for v in sizes]
    return {n.id: d for n, d in zip(spec.nodes, diam, strict=True)}


def ring(
    spec: GraphSpec, members: list[Node], width: float, ring_width: float = RING_WIDTH
) -> dict[str, list]:
    """Each node's outline: a dark ring on a highlighted node, else a thin white one."""
    marked = [n.id in spec.highlighted for n in members]
    return {
        "color": [RING_COLOR if m else "white" for m in marked],
        "width": [ring_width if m else width for m in marked],
    }


def graph_plotly(spec: GraphSpec) -> go.Figure:
    """The interactive graph: edges as lines (hover markers on them), nodes as markers."""
    fig = go.Figure()
    pos = spec.positions
    largest_w = max((abs(e.weight) for e in spec.edges), default=0.0)
    lines: dict[tuple[bool, float], tuple[list, list]] = defaultdict(lambda: ([], []))
    heads: dict[str, list] = defaultdict(list)
    arrows = spec.directed and not spec.curved  # arcs of a line layout run left to right
    for e in spec.edges:
        pts = edge_points(pos[e.src], pos[e.dst], spec.curved)
        xs, ys = lines[(e.weight >= 0, thinned(spec) * edge_width(e.weight, largest_w))]
        xs.extend([p[0] for p in pts] + [None])
        ys.extend([p[1] for p in pts] + [None])
        hx, hy, angle = arrow_anchor(pts, 0.8 if arrows else 0.5)
        heads["x"].append(hx)
        heads["y"].append(hy)
        heads["angle"].append(angle)
        heads["color"].append(POSITIVE_COLOR if e.weight >= 0 else NEGATIVE_COLOR)
        heads["text"].append(f"{esc(e.src)} → {esc(e.dst)}: {e.weight:.4g}")
    for (positive, width), (xs, ys) in sorted(lines.items()):
        color = POSITIVE_COLOR if positive else NEGATIVE_COLOR
        line = {"color": rgba(color, 0.55), "width": width}
        fig.add_trace(
            go.Scatter(x=xs, y=ys, mode="lines", line=line, hoverinfo="skip", showlegend=False)
        )
    if spec.edges:
        marker = {"color": heads["color"], "size": 10 if arrows else 5}
        marker |= {"symbol": "triangle-up" if arrows else "circle"}
        marker |= {"angle": heads["angle"] if arrows else 0}
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
    diameters = diameters_of(spec, GRAPH_WIDTH_PX)
    groups = list(dict.fromkeys(n.color_group for n in spec.nodes))
    for i, g in enumerate(groups):
        members = [n for n in spec.nodes if n.color_group == g]
        shown = [spec.labelled is None or n.id in spec.labelled for n in members]
        fig.add_trace(
            go.Scatter(
                x=[pos[n.id][0] for n in members],
                y=[pos[n.id][1] for n in members],
                mode="markers+text",
                text=[esc(cut(n.label)) if k else "" for n, k in zip(members, shown, strict=True)],
                textposition="bottom center" if spec.curved else "top center",
                hovertext=[esc_hover(n.hover or n.label) for n in members],
                hoverinfo="text",
                name=esc(cut(g)) or "nodes",
                marker={
                    "size": [diameters[n.id] for n in members],
                    "color": color_for(i),
                    "line": ring(spec, members, 1 if len(spec.nodes) < 100 else 0),
                },
            )
        )
    hidden = {"showgrid": False, "zeroline": False, "showticklabels": False, "showline": False}
    fig.update_xaxes(**hidden)
    legend = {"orientation": "h", "yanchor": "top", "y": -0.02, "x": 0}
    if spec.curved:
        fig.update_yaxes(**hidden)
        fig.update_layout(height=400, showlegend=len(groups) > 1, legend=legend)
    else:
        fig.update_yaxes(scaleanchor="x", scaleratio=1, **hidden)
        fig.update_layout(height=560, showlegend=len(groups) > 1)
    return fig


def graph_static(spec: GraphSpec, fig: MplFigure) -> None:
    """The paper graph, drawn into ``fig``."""
    fig.set_size_inches(6.5, 6.5 if not spec.curved else 3.2)
    ax = fig.add_subplot()
    pos = spec.positions
    largest_w = max((abs(e.weight) for e in spec.edges), default=0.0)
    coords = np.array(list(pos.values()) or [(0.0, 0.0)])  # [nodes, 2]
    head_len = 0.04 * max(1.0, float(np.ptp(coords, axis=0).max()))
    for e in spec.edges:
        pts = edge_points(pos[e.src], pos[e.dst], spec.curved)
        color = POSITIVE_COLOR if e.weight >= 0 else NEGATIVE_COLOR
        width = thinned(spec) * edge_width(e.weight, largest_w) * 0.6  # px → pt, as in the report
        ax.plot([p[0] for p in pts], [p[1] for p in pts], color=color, alpha=0.55, lw=width)
        if spec.directed and e.src != e.dst and not spec.curved:  # arcs: left to right
            hx, hy, angle = arrow_anchor(pts, 0.8)
            rad = math.radians(angle)
            tail = (hx - head_len * math.sin(rad), hy - head_len * math.cos(rad))
            arrow = {"arrowstyle": "-|>", "color": color, "lw": 0, "mutation_scale": 16}
            arrow |= {"shrinkA": 0, "shrinkB": 0}
            ax.annotate("", xy=(hx, hy), xytext=tail, arrowprops=arrow)
    diameters = diameters_of(spec, 0.85 * 6.5 * 72, 0.75)  # points
    handles = []
    for i, g in enumerate(dict.fromkeys(n.color_group for n in spec.nodes)):
        members = [n for n in spec.nodes if n.color_group == g]
        diam = [diameters[n.id] for n in members]
        xy = np.array([pos[n.id] for n in members])  # [members, 2]
        outline = ring(spec, members, 0.5, 0.75 * RING_WIDTH)  # points
        style = {"color": color_for(i), "edgecolors": outline["color"], "zorder": 3}
        style |= {"linewidths": outline["width"]}
        ax.scatter(xy[:, 0], xy[:, 1], s=[d**2 for d in diam], **style)
        for n, d in zip(members, diam, strict=True):
            if spec.labelled is not None and n.id not in spec.labelled:
                continue
            below = -1 if spec.curved else 1  # arcs rise above a line of nodes
            ax.annotate(
                cut(n.label),
                pos[n.id],
                fontsize=7,
                ha="center",
                va="top" if spec.curved else "bottom",
                zorder=4,
                xytext=(0, below * (d / 2 + 1)),
                textcoords="offset points",
            )
        label = cut(g) or "nodes"
        handles.append(Line2D([], [], marker="o", ls="", color=color_for(i), label=label))
    if not spec.curved:
        ax.set_aspect("equal", adjustable="datalim")
    ax.axis("off")
    if len(handles) > 1:
        where = {"loc": "outside lower center", "ncols": min(len(handles), 5)}
        fig.legend(handles=handles, fontsize=8, **where)
