"""A small description of a figure, rendered twice: plotly for the report, matplotlib for papers.

A :class:`Figure` holds *what* to draw (a spec: data and labels, already validated)
and a caption saying how to read it. Renderers decide *how*. Keeping the two apart
means the interactive report and the static PNG/SVG/PDF always show the same numbers,
and figures never touch a model: they are functions of results.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import plotly.graph_objects as go


@dataclass(frozen=True)
class Series:
    """One line (or bar set): ``mean`` per x, with an optional interval ``[low, high]``.

    Series sharing a ``group`` are shown and hidden together from the legend.
    """

    name: str
    mean: Sequence[float] | np.ndarray
    low: Sequence[float] | np.ndarray | None = None
    high: Sequence[float] | np.ndarray | None = None
    group: str | None = None


@dataclass(frozen=True)
class Node:
    """A graph node; ``size`` is relative (scaled to the largest), ``hover`` free text."""

    id: str
    label: str
    size: float = 1.0
    color_group: str = ""
    hover: str = ""


@dataclass(frozen=True)
class Edge:
    """A directed, weighted edge; width shows ``|weight|``, colour its sign."""

    src: str
    dst: str
    weight: float = 1.0


@dataclass(frozen=True)
class HeatmapSpec:
    z: np.ndarray  # [rows, cols] float64, NaN = missing
    x_labels: list[str]
    y_labels: list[str]
    diverging: bool
    zmid: float
    hover_text: list[list[str]] | None  # [rows][cols]
    colorbar_title: str
    x_title: str
    y_title: str
    marks: np.ndarray | None = None  # [rows, cols] bool: cells drawn with a dot
    mark_label: str = ""  # what a dot means, for the legend
    spread: float | None = None  # diverging: colours span zmid ± spread (beyond: saturated)


@dataclass(frozen=True)
class CurvesSpec:
    x: list[float] | list[str]
    series: list[Series]  # mean/low/high as float64 arrays of len(x)
    x_title: str
    y_title: str
    hline: float | None


@dataclass(frozen=True)
class PanelsSpec:
    """Small multiples: one panel of curves per entry, sharing x, y and the legend."""

    x: list[float] | list[str]
    panels: list[tuple[str, list[Series]]]  # (panel title, its series)
    x_title: str
    y_title: str
    hline: float | None


@dataclass(frozen=True)
class BarsSpec:
    categories: list[str]
    series: list[Series]  # mean/low/high as float64 arrays of len(categories)
    x_title: str
    y_title: str
    horizontal: bool


@dataclass(frozen=True)
class ScatterSpec:
    x: np.ndarray  # [n]
    y: np.ndarray  # [n]
    text: list[str] | None
    groups: list[str] | None
    x_title: str
    y_title: str
    diagonal: bool


@dataclass(frozen=True)
class GraphSpec:
    nodes: list[Node]
    edges: list[Edge]
    positions: dict[str, tuple[float, float]]
    directed: bool
    curved: bool  # arcs instead of straight edges (line layouts)
    labelled: frozenset[str] | None = None  # node ids whose label is written (None: all)


FigureSpec = HeatmapSpec | CurvesSpec | PanelsSpec | BarsSpec | ScatterSpec | GraphSpec


@dataclass(frozen=True)
class Figure:
    """A figure of results: render it with :meth:`to_plotly` or :meth:`save_static`."""

    spec: FigureSpec
    title: str
    caption: str
    height: int | None = field(default=None)

    def to_plotly(self) -> go.Figure:
        """An interactive plotly figure (hover, zoom, legend toggling)."""
        from mechscope.report.render_plotly import render_plotly

        return render_plotly(self)

    def show(self) -> None:
        """Display the interactive figure (a notebook cell's output, or the browser)."""
        self.to_plotly().show()

    def _repr_html_(self) -> str:
        """A notebook shows the figure itself (plotly from its CDN; the report inlines it)."""
        return self.to_plotly().to_html(full_html=False, include_plotlyjs="cdn")

    def save_static(self, directory: Path | str, stem: str) -> list[Path]:
        """Write ``<stem>.png``, ``.svg`` and ``.pdf`` (matplotlib, Agg, fonts embedded)
        atomically; return their paths."""
        from mechscope.report.render_static import save_static

        return save_static(self, Path(directory), stem)
