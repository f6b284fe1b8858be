"""Figures of results and the self-contained HTML report of a run."""

from mechscope.report.builders import bars, curves, graph, heatmap, scatter
from mechscope.report.figure import Edge, Figure, Node, Series
from mechscope.report.html import build_report
from mechscope.report.registry import load_sections
from mechscope.report.sections import (
    Block,
    FigureBlock,
    KeyValueBlock,
    TableBlock,
    TextBlock,
    register_section,
    registered_sections,
    unregister_section,
)

__all__ = [
    "Block",
    "Edge",
    "Figure",
    "FigureBlock",
    "KeyValueBlock",
    "Node",
    "Series",
    "TableBlock",
    "TextBlock",
    "bars",
    "build_report",
    "curves",
    "graph",
    "heatmap",
    "load_sections",
    "register_section",
    "registered_sections",
    "scatter",
    "unregister_section",
]
