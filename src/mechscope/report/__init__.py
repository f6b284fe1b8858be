"""Figures of results and the self-contained HTML report of a run."""

from mechscope.report.builders import bars, curves, graph, heatmap, panels, scatter
from mechscope.report.figure import Figure
from mechscope.report.html import build_report
from mechscope.report.registry import load_sections
from mechscope.report.sections import (
    Block,
    DetailsBlock,
    FigureBlock,
    FindingBlock,
    KeyValueBlock,
    TableBlock,
    TextBlock,
    register_section,
    registered_sections,
    unregister_section,
    walk,
)
from mechscope.report.specs import Edge, Node, Series

__all__ = [
    "Block",
    "DetailsBlock",
    "Edge",
    "Figure",
    "FigureBlock",
    "FindingBlock",
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
    "panels",
    "register_section",
    "registered_sections",
    "scatter",
    "unregister_section",
    "walk",
]
