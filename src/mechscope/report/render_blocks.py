"""Turn report blocks into HTML fragments (and static figure files) for the template."""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.io as pio
from markupsafe import Markup, escape
from pandas.api.types import is_numeric_dtype

from mechscope.report.sections import Block, FigureBlock, KeyValueBlock, TableBlock, TextBlock
from mechscope.runs.rundir import check_name

_TD = re.compile(r"<(td)>")
_TH = re.compile(r"<(th)>")
_TEXT = {"td": '<td class="text">', "th": '<th class="text">'}
_ROW = re.compile(r"<tr\b.*?</tr>", re.S)
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
    """The first ``max_rows`` rows as an HTML table, and a note on rows left out.

    Text columns are marked ``class="text"`` (left-aligned, wrapping) so that prompts and
    names read naturally while numbers stay right-aligned in their columns.
    """
    shown = df.head(max_rows)
    keep_index = not isinstance(df.index, pd.RangeIndex)
    if not keep_index and any(n is not None for n in shown.columns.names):
        # pandas draws an empty index column for a named column axis even with index=False.
        shown = shown.copy()
        shown.columns.names = [None] * shown.columns.nlevels
    body = shown.to_html(
        index=keep_index,
        border=0,
        classes="data",
        na_rep="–",
        float_format=lambda v: f"{v:.4g}",
        escape=True,
    )
    text_cols = [i for i, dtype in enumerate(shown.dtypes) if not is_numeric_dtype(dtype)]
    flat = shown.columns.nlevels == 1
    body = _mark_text_columns(body, text_cols, len(shown.columns), flat)
    note = f"Showing {len(shown)} of {len(df)} rows." if len(df) > len(shown) else ""
    return Markup(body), note


def _mark_text_columns(body: str, cols: list[int], n_cols: int, flat: bool) -> str:
    """Add ``class="text"`` to the cells (and, for flat columns, headers) of ``cols``.

    In pandas' HTML every data cell is a bare ``<td>`` and index cells are ``<th>``, so the
    k-th ``<td>`` of a body row is column k whatever the index looks like; in the first
    header row the last ``n_cols`` headers are the columns'.
    """
    if not cols:
        return body
    wanted = set(cols)

    def mark(row: str, cell: re.Pattern, first: int) -> str:
        position = itertools.count(first)
        return cell.sub(lambda m: _TEXT[m.group(1)] if next(position) in wanted else m[0], row)

    head, sep, rest = body.partition("<tbody>")
    rest = _ROW.sub(lambda row: mark(row[0], _TD, 0), rest)
    if flat:
        n_th = len(_TH.findall(_ROW.search(head)[0]))
        head = _ROW.sub(lambda row: mark(row[0], _TH, n_cols - n_th), head, count=1)
    return head + sep + rest


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
