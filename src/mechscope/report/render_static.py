"""Render a figure description with matplotlib: PNG, SVG and PDF for papers and slides.

Uses ``matplotlib.figure.Figure`` with the Agg canvas directly, never pyplot, so no
global backend or figure state is touched (safe in notebooks, threads and servers).
Style (palette, colour maps, fonts, embedding) comes from :mod:`mechscope.report.style`.
Math text is off: a token like ``$x`` is a label, not LaTeX. Labels (ticks, legend entries,
panel titles, graph nodes) are cut by :func:`~mechscope.report.text_fit.cut`, as in the
report; a paper figure has no hover, so it shows the cut text alone. Titles and axis titles
are wrapped. Output is reproducible: no timestamps in the files and a fixed SVG id salt.
"""

from __future__ import annotations

import math
import warnings
from functools import singledispatch
from pathlib import Path

import matplotlib as mpl
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import TwoSlopeNorm
from matplotlib.figure import Figure as MplFigure
from matplotlib.lines import Line2D

from mechscope.report.render_graph import graph_static
from mechscope.report.render_heatmap_grid import heatmap_grid_static
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
    DIVERGING_MPL,
    MARK_COLOR,
    MUTED_COLOR,
    SEQUENTIAL_MPL,
    color_for,
    mpl_rc,
)
from mechscope.report.text_fit import cut, width, wrap
from mechscope.runs.atomic import atomic_path

MAX_TICKS = 40
#: The files every figure is written as, with their ``savefig`` options and the metadata that
#: would make two runs' files differ (dates, software versions) left out.
FORMATS = {
    "png": ({"dpi": 150}, {"Software": None}),
    "svg": ({}, {"Date": None}),
    "pdf": ({}, {"CreationDate": None}),
}
LABEL_POINTS_UP_TO = 25  # scatter: write per-point text beside points when this few


def _clamp(v: float, lo: float, hi: float) -> float:
    return max(lo, min(hi, v))


def _tick_idx(n: int) -> list[int]:
    return list(range(0, n, max(1, math.ceil(n / MAX_TICKS))))


def wrap_title(title: str, width_in: float, fontsize: float = 11) -> str:
    """``title`` broken into lines that fit ``width_in`` inches (a character is about 0.55 of
    the font size wide), so a long title is wrapped, not cut at the figure's edge."""
    chars = max(20, int(width_in * 72 / (0.55 * fontsize)))
    return "\n".join(wrap(title, chars)) or title


def save_static(figure: Drawable, directory: Path, stem: str) -> list[Path]:
    """Draw ``figure`` and write ``<stem>.png`` (150 dpi), ``.svg`` and ``.pdf`` atomically."""
    with mpl.rc_context(mpl_rc()), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Glyph .* missing from")
        fig = MplFigure(layout="constrained")
        FigureCanvasAgg(fig)
        _draw(figure.spec, fig)
        fig.suptitle(wrap_title(figure.title, fig.get_figwidth()), fontsize=11, x=0.01, ha="left")
        written = []
        for ext, (extra, meta) in FORMATS.items():
            path = directory / f"{stem}.{ext}"
            with atomic_path(path) as tmp:
                # the tight box takes in every artist (a legend below the axes, a long
                # colour-bar title), so no label is cut at the file's edge
                fig.savefig(
                    tmp, format=ext, metadata=meta, bbox_inches="tight", pad_inches=0.05, **extra
                )
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
        spread = spec.spread or spread or 1.0
        norm = TwoSlopeNorm(spec.zmid, spec.zmid - spread, spec.zmid + spread)
        image = ax.imshow(z, cmap=DIVERGING_MPL, norm=norm, aspect="auto", interpolation="nearest")
    else:
        image = ax.imshow(z, cmap=SEQUENTIAL_MPL, aspect="auto", interpolation="nearest")
    xi, yi = _tick_idx(cols), _tick_idx(rows)
    xt = [cut(spec.x_labels[i]) for i in xi]
    ax.set_xticks(xi, xt, rotation=90 if cols > 8 else 0)
    ax.set_yticks(yi, [cut(spec.y_labels[i]) for i in yi])
    ax.set_xlabel(spec.x_title)
    ax.set_ylabel(spec.y_title)
    for side in ("top", "right"):
        ax.spines[side].set_visible(True)
    extend = "both" if spec.spread is not None else "neither"  # saturated ends drawn as arrows
    fig.colorbar(image, ax=ax, label=spec.colorbar_title, shrink=0.9, extend=extend)
    if spec.marks is not None and spec.marks.any():
        r, c = np.nonzero(spec.marks)
        dot = max(2.0, min(14.0, 60.0 / max(rows, cols)))
        label = cut(spec.mark_label)
        ax.scatter(c, r, s=dot, color=MARK_COLOR, marker="o", linewidths=0, label=label)
        if spec.mark_label:
            ax.legend(loc="upper left", bbox_to_anchor=(0, -0.12), fontsize=7, handletextpad=0.2)


@_draw.register
def _curves(spec: CurvesSpec, fig: MplFigure) -> None:
    fig.set_size_inches(6.5, 4)
    ax = fig.add_subplot()
    _lines(ax, spec.x, [(color_for(i), s) for i, s in enumerate(spec.series)], spec.hline)
    ax.set_xlabel(spec.x_title)
    ax.set_ylabel(spec.y_title)
    if len(spec.series) > 1:
        ax.legend(fontsize=8)


def _lines(ax, xs: list, series: list, hline: float | None) -> None:
    """Each ``(colour, series)`` as a line with its band; categorical x as ticks."""
    categorical = bool(xs) and isinstance(xs[0], str)
    x = np.arange(len(xs)) if categorical else np.asarray(xs)
    for color, s in series:
        if s.low is not None and s.high is not None:
            ax.fill_between(x, s.low, s.high, color=color, alpha=BAND_ALPHA, linewidth=0)
        marker = "o" if len(xs) <= 60 else None
        style = {"marker": marker, "markersize": 3, "linewidth": 1.6}
        ax.plot(x, s.mean, color=color, label=cut(s.name), **style)
    if categorical:
        idx = _tick_idx(len(xs))
        ax.set_xticks(idx, [cut(xs[i]) for i in idx], rotation=45, ha="right")
    if hline is not None:
        ax.axhline(hline, color=MUTED_COLOR, linestyle="--", linewidth=0.8)
    ax.grid(alpha=0.3)


@_draw.register
def _panels(spec: PanelsSpec, fig: MplFigure) -> None:
    n = len(spec.panels)
    ncols = min(n, 3)
    nrows = math.ceil(n / ncols)
    fig.set_size_inches(2.6 * ncols + 0.6, 2.4 * nrows + 0.9)
    axes = fig.subplots(nrows, ncols, sharex=True, sharey=True, squeeze=False).ravel()
    colors = _name_colors(spec)
    for ax, (title, series) in zip(axes, spec.panels, strict=False):
        _lines(ax, spec.x, [(colors[s.name], s) for s in series], spec.hline)
        ax.set_title(cut(title), loc="left")
    for ax in axes[n:]:
        ax.set_visible(False)
    for ax in axes[(nrows - 1) * ncols :]:
        ax.set_xlabel(spec.x_title)
    for ax in axes[::ncols]:
        ax.set_ylabel(spec.y_title)
    names = {name: cut(name) for name in colors}
    handles = [Line2D([], [], color=c, lw=1.6, label=names[n]) for n, c in colors.items()]
    ncols = legend_columns(list(names.values()), fig.get_figwidth())
    fig.legend(handles=handles, loc="outside lower center", ncols=ncols)


def legend_columns(labels: list[str], width_in: float, fontsize: float = 10) -> int:
    """How many legend entries fit side by side in ``width_in`` inches (at most 4): an entry
    is its handle (about 3 font sizes) and its text (a character about 0.55 of the font
    size), so a one-panel figure stacks long names instead of running past its edges."""
    entry_in = max((3 + 0.55 * width(label)) * fontsize / 72 for label in labels)
    return max(1, min(len(labels), 4, int(width_in / entry_in)))


def _name_colors(spec: PanelsSpec) -> dict[str, str]:
    """One colour per series name, in order of first appearance over the panels."""
    names = dict.fromkeys(s.name for _, series in spec.panels for s in series)
    return {name: color_for(i) for i, name in enumerate(names)}


@_draw.register
def _bars(spec: BarsSpec, fig: MplFigure) -> None:
    n, k = len(spec.categories), len(spec.series)
    long_side = _clamp(1.5 + 0.3 * n * k, 4, 14)
    fig.set_size_inches(*((6.5, long_side) if spec.horizontal else (max(6.5, long_side), 4)))
    ax = fig.add_subplot()
    pos = np.arange(n)
    bar = 0.8 / k  # each bar's share of its category
    for i, s in enumerate(spec.series):
        offset = pos - 0.4 + bar * (i + 0.5)
        mean = np.asarray(s.mean)
        if spec.horizontal:
            ax.barh(offset, mean, height=bar, color=color_for(i), label=cut(s.name))
        else:
            ax.bar(offset, mean, width=bar, color=color_for(i), label=cut(s.name))
        if s.low is not None and s.high is not None:
            low, high = np.asarray(s.low), np.asarray(s.high)
            ok = np.isfinite(low) & np.isfinite(high) & np.isfinite(mean)  # no interval: none
            err = np.stack([mean[ok] - low[ok], high[ok] - mean[ok]])  # [2, finite]
            style = {"fmt": "none", "ecolor": "#444", "capsize": 2, "elinewidth": 0.9}
            if spec.horizontal:
                ax.errorbar(mean[ok], offset[ok], xerr=err, **style)
            else:
                ax.errorbar(offset[ok], mean[ok], yerr=err, **style)
    labels = [cut(c) for c in spec.categories]
    if spec.horizontal:
        ax.set_yticks(pos, labels)
        ax.invert_yaxis()
        ax.axvline(0, color=MUTED_COLOR, linewidth=0.6)
    else:
        ax.set_xticks(pos, labels, rotation=45 if n > 6 else 0, ha="right" if n > 6 else "center")
        ax.axhline(0, color=MUTED_COLOR, linewidth=0.6)
    ax.set_xlabel(spec.x_title)
    ax.set_ylabel(spec.y_title)
    if k > 1:
        ax.legend(fontsize=8)


@_draw.register
def _scatter(spec: ScatterSpec, fig: MplFigure) -> None:
    fig.set_size_inches(5.5, 4.5)
    ax = fig.add_subplot()
    groups = spec.groups or [""] * len(spec.x)
    for i, g in enumerate(dict.fromkeys(groups)):
        idx = [k for k, gg in enumerate(groups) if gg == g]
        label = cut(g) or None
        ax.scatter(spec.x[idx], spec.y[idx], s=16, color=color_for(i), alpha=0.8, label=label)
    if spec.text is not None and len(spec.x) <= LABEL_POINTS_UP_TO:
        for xv, yv, t in zip(spec.x, spec.y, spec.text, strict=True):
            ax.annotate(
                cut(t.replace("\n", " ")),
                (xv, yv),
                fontsize=6,
                xytext=(3, 3),
                textcoords="offset points",
            )
    if spec.diagonal:
        both = np.concatenate([spec.x, spec.y])
        both = both[np.isfinite(both)]
        if both.size:
            lims = [both.min(), both.max()]
            ax.plot(lims, lims, "--", color=MUTED_COLOR, lw=0.8)
    ax.set_xlabel(spec.x_title)
    ax.set_ylabel(spec.y_title)
    ax.grid(alpha=0.3)
    if spec.groups is not None:
        ax.legend(fontsize=8)


_draw.register(GraphSpec, graph_static)
_draw.register(HeatmapGridSpec, heatmap_grid_static)
