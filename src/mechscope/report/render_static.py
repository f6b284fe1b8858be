"""Render a figure description with matplotlib: PNG and SVG for papers and slides.

Uses ``matplotlib.figure.Figure`` with the Agg canvas directly, never pyplot, so no
global backend or figure state is touched (safe in notebooks, threads and servers).
Math text is off: a token like ``$x`` is a label, not LaTeX. Output is reproducible:
no timestamps in the files and a fixed SVG id salt.
"""

from __future__ import annotations

import math
import textwrap
import warnings
from functools import singledispatch
from pathlib import Path

import matplotlib as mpl
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import TwoSlopeNorm
from matplotlib.figure import Figure as MplFigure
from matplotlib.lines import Line2D

from mechscope.report.figure import (
    NEGATIVE_COLOR,
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
from mechscope.runs.atomic import atomic_path

_RC = {"text.parse_math": False, "svg.hashsalt": "mechscope", "font.size": 9}
MAX_TICKS = 40
LABEL_POINTS_UP_TO = 25  # scatter: write per-point text beside points when this few


def _clamp(v: float, lo: float, hi: float) -> float:
    return max(lo, min(hi, v))


def _tick_idx(n: int) -> list[int]:
    return list(range(0, n, max(1, math.ceil(n / MAX_TICKS))))


def wrap_title(title: str, width_in: float, fontsize: float = 11) -> str:
    """``title`` broken into lines that fit ``width_in`` inches (a character is about 0.55 of
    the font size wide), so a long title is wrapped, not cut at the figure's edge."""
    chars = max(20, int(width_in * 72 / (0.55 * fontsize)))
    return "\n".join(textwrap.wrap(title, chars)) or title


def save_static(figure: Figure, directory: Path, stem: str) -> list[Path]:
    """Draw ``figure`` and write ``<stem>.png`` (150 dpi) and ``<stem>.svg`` atomically."""
    with mpl.rc_context(_RC), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Glyph .* missing from")
        fig = MplFigure(layout="constrained")
        FigureCanvasAgg(fig)
        _draw(figure.spec, fig)
        fig.suptitle(wrap_title(figure.title, fig.get_figwidth()), fontsize=11, x=0.01, ha="left")
        written = []
        for ext, extra in (("png", {"dpi": 150}), ("svg", {})):
            path = directory / f"{stem}.{ext}"
            meta = {"Software": None} if ext == "png" else {"Date": None}
            with atomic_path(path) as tmp:
                fig.savefig(tmp, format=ext, metadata=meta, **extra)
            written.append(path)
    return written


@singledispatch
def _draw(spec, fig: MplFigure) -> None:
    raise TypeError(f"no static renderer for {type(spec).__name__}")


@_draw.register
def _heatmap(spec: HeatmapSpec, fig: MplFigure) -> None:
    rows, cols = spec.z.shape
    fig.set_size_inches(_clamp(3 + 0.22 * cols, 5, 16), _clamp(1.8 + 0.22 * rows, 3, 12))
    ax = fig.add_subplot()
    z = np.ma.masked_invalid(spec.z)  # NaN cells stay blank
    if spec.diverging:
        spread = float(np.nanmax(np.abs(spec.z - spec.zmid))) if z.count() else 1.0
        spread = spread or 1.0
        norm = TwoSlopeNorm(spec.zmid, spec.zmid - spread, spec.zmid + spread)
        image = ax.imshow(z, cmap="RdBu_r", norm=norm, aspect="auto", interpolation="nearest")
    else:
        image = ax.imshow(z, cmap="viridis", aspect="auto", interpolation="nearest")
    xi, yi = _tick_idx(cols), _tick_idx(rows)
    ax.set_xticks(xi, [spec.x_labels[i] for i in xi], rotation=90 if cols > 8 else 0)
    ax.set_yticks(yi, [spec.y_labels[i] for i in yi])
    ax.set_xlabel(spec.x_title)
    ax.set_ylabel(spec.y_title)
    fig.colorbar(image, ax=ax, label=spec.colorbar_title, shrink=0.9)


@_draw.register
def _curves(spec: CurvesSpec, fig: MplFigure) -> None:
    fig.set_size_inches(6.5, 4)
    ax = fig.add_subplot()
    categorical = bool(spec.x) and isinstance(spec.x[0], str)
    x = np.arange(len(spec.x)) if categorical else np.asarray(spec.x)
    for i, s in enumerate(spec.series):
        color = color_for(i)
        if s.low is not None and s.high is not None:
            ax.fill_between(x, s.low, s.high, color=color, alpha=0.18, linewidth=0)
        marker = "o" if len(spec.x) <= 60 else None
        ax.plot(x, s.mean, color=color, label=s.name, marker=marker, markersize=3, linewidth=1.6)
    if categorical:
        idx = _tick_idx(len(spec.x))
        ax.set_xticks(idx, [spec.x[i] for i in idx], rotation=45, ha="right")
    if spec.hline is not None:
        ax.axhline(spec.hline, color="#888", linestyle="--", linewidth=0.8)
    ax.set_xlabel(spec.x_title)
    ax.set_ylabel(spec.y_title)
    ax.grid(alpha=0.3)
    if len(spec.series) > 1:
        ax.legend(frameon=False, fontsize=8)


@_draw.register
def _bars(spec: BarsSpec, fig: MplFigure) -> None:
    n, k = len(spec.categories), len(spec.series)
    long_side = _clamp(1.5 + 0.3 * n * k, 4, 14)
    fig.set_size_inches(*((6.5, long_side) if spec.horizontal else (max(6.5, long_side), 4)))
    ax = fig.add_subplot()
    pos = np.arange(n)
    width = 0.8 / k
    for i, s in enumerate(spec.series):
        offset = pos - 0.4 + width * (i + 0.5)
        mean = np.asarray(s.mean)
        err = None
        if s.low is not None and s.high is not None:
            err = np.stack([mean - np.asarray(s.low), np.asarray(s.high) - mean])  # [2, n]
        style = {"color": color_for(i), "label": s.name, "ecolor": "#444", "capsize": 2}
        if spec.horizontal:
            ax.barh(offset, mean, height=width, xerr=err, **style)
        else:
            ax.bar(offset, mean, width=width, yerr=err, **style)
    if spec.horizontal:
        ax.set_yticks(pos, spec.categories)
        ax.invert_yaxis()
        ax.axvline(0, color="#888", linewidth=0.6)
    else:
        ax.set_xticks(
            pos, spec.categories, rotation=45 if n > 6 else 0, ha="right" if n > 6 else "center"
        )
        ax.axhline(0, color="#888", linewidth=0.6)
    ax.set_xlabel(spec.x_title)
    ax.set_ylabel(spec.y_title)
    if k > 1:
        ax.legend(frameon=False, fontsize=8)


@_draw.register
def _scatter(spec: ScatterSpec, fig: MplFigure) -> None:
    fig.set_size_inches(5.5, 4.5)
    ax = fig.add_subplot()
    groups = spec.groups or [""] * len(spec.x)
    for i, g in enumerate(dict.fromkeys(groups)):
        idx = [k for k, gg in enumerate(groups) if gg == g]
        ax.scatter(spec.x[idx], spec.y[idx], s=16, color=color_for(i), alpha=0.8, label=g or None)
    if spec.text is not None and len(spec.x) <= LABEL_POINTS_UP_TO:
        for xv, yv, t in zip(spec.x, spec.y, spec.text, strict=True):
            ax.annotate(
                t.replace("\n", " "),
                (xv, yv),
                fontsize=6,
                xytext=(3, 3),
                textcoords="offset points",
            )
    if spec.diagonal:
        both = np.concatenate([spec.x, spec.y])
        both = both[np.isfinite(both)]
        if both.size:
            ax.plot([both.min(), both.max()], [both.min(), both.max()], "--", color="#888", lw=0.8)
    ax.set_xlabel(spec.x_title)
    ax.set_ylabel(spec.y_title)
    ax.grid(alpha=0.3)
    if spec.groups is not None:
        ax.legend(frameon=False, fontsize=8)


@_draw.register
def _graph(spec: GraphSpec, fig: MplFigure) -> None:
    fig.set_size_inches(6.5, 6.5 if not spec.curved else 4)
    ax = fig.add_subplot()
    pos = spec.positions
    largest_w = max((abs(e.weight) for e in spec.edges), default=0.0)
    coords = np.array(list(pos.values()) or [(0.0, 0.0)])  # [nodes, 2]
    head_len = 0.04 * max(1.0, float(np.ptp(coords, axis=0).max()))
    for e in spec.edges:
        pts = edge_points(pos[e.src], pos[e.dst], spec.curved)
        color = POSITIVE_COLOR if e.weight >= 0 else NEGATIVE_COLOR
        width = edge_width(e.weight, largest_w) * 0.6  # px → pt-ish, as in the report
        ax.plot([p[0] for p in pts], [p[1] for p in pts], color=color, alpha=0.55, lw=width)
        if spec.directed and e.src != e.dst:
            hx, hy, angle = arrow_anchor(pts, 0.8)
            rad = math.radians(angle)
            tail = (hx - head_len * math.sin(rad), hy - head_len * math.cos(rad))
            ax.annotate(
                "",
                xy=(hx, hy),
                xytext=tail,
                arrowprops={
                    "arrowstyle": "-|>",
                    "color": color,
                    "lw": 0,
                    "mutation_scale": 16,
                    "shrinkA": 0,
                    "shrinkB": 0,
                },
            )
    largest_s = max((n.size for n in spec.nodes), default=0.0)
    handles = []
    for i, g in enumerate(dict.fromkeys(n.color_group for n in spec.nodes)):
        members = [n for n in spec.nodes if n.color_group == g]
        diam = [0.75 * node_size(n.size, largest_s) for n in members]  # px → pt
        xy = np.array([pos[n.id] for n in members])  # [members, 2]
        style = {"color": color_for(i), "edgecolors": "white", "linewidths": 0.8, "zorder": 3}
        ax.scatter(xy[:, 0], xy[:, 1], s=[d**2 for d in diam], **style)
        for n, d in zip(members, diam, strict=True):
            ax.annotate(
                n.label,
                pos[n.id],
                fontsize=7,
                ha="center",
                va="bottom",
                zorder=4,
                xytext=(0, d / 2 + 1),
                textcoords="offset points",
            )
        handles.append(Line2D([], [], marker="o", ls="", color=color_for(i), label=g or "nodes"))
    ax.set_aspect("equal", adjustable="datalim")
    ax.axis("off")
    if len(handles) > 1:
        ax.legend(handles=handles, frameon=False, fontsize=8, loc="upper right")
