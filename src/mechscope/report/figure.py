"""A small description of a figure, rendered twice: plotly for the report, matplotlib for papers.

A :class:`Figure` holds *what* to draw (a spec of :mod:`mechscope.report.specs`: data and
labels, already validated) and a caption saying how to read it. Renderers decide *how*.
Keeping the two apart means the interactive report and the static PNG/SVG/PDF always show
the same numbers, and figures never touch a model: they are functions of results.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from mechscope.report.specs import FigureSpec

if TYPE_CHECKING:
    import plotly.graph_objects as go


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
