"""Turn report blocks into HTML fragments (and static figure files) for the template."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.io as pio
from markupsafe import Markup, escape

from mechscope.report.sections import Block, FigureBlock, KeyValueBlock, TableBlock, TextBlock
from mechscope.runs.rundir import check_name

_PLOTLY_CONFIG = {"displaylogo": False, "responsive": True}


def markdown_html(text: str) -> Markup:
    """CommonMark (with tables) to HTML; raw HTML in the text passes through."""
    from markdown_it import MarkdownIt

    return Markup(MarkdownIt("commonmark", {"html": True}).enable("table").render(text))


def format_value(value: Any) -> str:
    """A compact, human-readable string for a key-value cell."""
    if isinstance(value, float):
        return "–" if math.isnan(value) else f"{value:.6g}"
    if isinstance(value, list | tuple):
        return ", ".join(format_value(v) for v in value)
    if isinstance(value, Mapping):
        return json.dumps(value, ensure_ascii=False, default=str)
    return "–" if value is None else str(value)


def kv_html(items: Mapping[str, Any]) -> Markup:
    """A two-column key/value table."""
    rows = "".join(
        f"<tr><th>{escape(str(k))}</th><td>{escape(format_value(v))}</td></tr>"
        for k, v in items.items()
    )
    return Markup(f'<table class="kv"><tbody>{rows}</tbody></table>')


def table_html(df: pd.DataFrame, max_rows: int) -> tuple[Markup, str]:
    """The first ``max_rows`` rows as an HTML table, and a note on rows left out."""
    shown = df.head(max_rows)
    keep_index = not isinstance(df.index, pd.RangeIndex)
    body = shown.to_html(
        index=keep_index,
        border=0,
        classes="data",
        na_rep="–",
        float_format=lambda v: f"{v:.4g}",
        escape=True,
    )
    note = f"Showing {len(shown)} of {len(df)} rows." if len(df) > len(shown) else ""
    return Markup(body), note


def figure_html(block: FigureBlock, div_id: str, static_dir: Path | None, stem: str) -> dict:
    """The plotly div (no plotly.js in it) and, if asked, its static PNG/SVG copies."""
    fig = block.figure.to_plotly()
    height = fig.layout.height or 440
    div = pio.to_html(
        fig,
        full_html=False,
        include_plotlyjs=False,
        div_id=div_id,
        config=_PLOTLY_CONFIG | {"toImageButtonOptions": {"format": "svg", "filename": stem}},
        default_width="100%",
        default_height=f"{height}px",
    )
    files: list[str] = []
    if static_dir is not None:
        for path in block.figure.save_static(static_dir, stem):
            files.append(f"{static_dir.name}/{path.name}")
    caption = block.caption if block.caption is not None else block.figure.caption
    return {"kind": "figure", "html": Markup(div), "caption": caption, "files": files}


def render_block(
    block: Block, section_key: str, index: int, static_dir: Path | None
) -> dict[str, Any]:
    """One block as a dict the template understands (``kind`` plus its parts)."""
    if isinstance(block, FigureBlock):
        stem = check_name(block.name or f"{section_key}-{index:02d}", field="figure name")
        return figure_html(block, f"fig-{section_key}-{index}", static_dir, stem)
    if isinstance(block, TableBlock):
        body, note = table_html(block.df, block.max_rows)
        return {"kind": "table", "html": body, "caption": block.caption, "note": note}
    if isinstance(block, TextBlock):
        return {"kind": "text", "html": markdown_html(block.content)}
    if isinstance(block, KeyValueBlock):
        return {"kind": "kv", "html": kv_html(block.items), "caption": block.caption}
    raise TypeError(
        f"section {section_key!r} returned a {type(block).__name__}, expected a report block"
    )
