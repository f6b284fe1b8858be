"""What a figure draws: its data and labels, already validated, one spec per kind of figure.

A spec says *what* to draw; :class:`mechscope.report.figure.Figure` pairs it with a title and
a caption, and the renderers (:mod:`mechscope.report.render_plotly`,
:mod:`mechscope.report.render_static`) decide *how*. The builders
(:mod:`mechscope.report.builders`) check their inputs and make the specs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np


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
    highlighted: frozenset[str] = frozenset()  # node ids drawn with a dark ring (pinned)
    node_px: tuple[float, float] | None = None  # smallest and largest diameter (default 12, 40)


@dataclass(frozen=True)
class HeatmapGridSpec:
    """Small multiples of heatmaps: one panel per entry, sharing axes and one colour scale
    (sequential, from ``zmin`` to ``zmax``)."""

    panels: list[tuple[str, np.ndarray]]  # (panel title, [rows, cols] float64, NaN = blank)
    x_labels: list[str]
    y_labels: list[str]
    x_title: str
    y_title: str
    colorbar_title: str
    zmin: float
    zmax: float


FigureSpec = (
    HeatmapSpec | CurvesSpec | PanelsSpec | BarsSpec | ScatterSpec | GraphSpec | HeatmapGridSpec
)


class Drawable(Protocol):
    """What a renderer reads of a figure (:class:`mechscope.report.figure.Figure`): its
    spec, its title and its height. The renderers take this, not ``Figure``, whose methods
    call them."""

    @property
    def spec(self) -> FigureSpec: ...

    @property
    def title(self) -> str: ...

    @property
    def height(self) -> int | None: ...
