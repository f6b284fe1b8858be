"""Turn report blocks into HTML fragments (and static figure files) for the template.

Each block becomes one fragment; a disclosure renders the blocks inside it the same way,
so sections nest figures, tables and prose behind ``<details>`` as deep as they like.
"""

from __future__ import annotations

import ast
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

from mechscope.report.sections import (
    Block,
    DetailsBlock,
    FigureBlock,
    FindingBlock,
    KeyValueBlock,
    TableBlock,
    TextBlock,
)
from mechscope.runs.rundir import check_name

_TD = re.compile(r"<(td)>")
_TH = re.compile(r"<(th)>")
_TEXT = {"td": '<td class="text">', "th": '<th class="text">'}
_ROW = re.compile(r"<tr\b.*?</tr>", re.S)
_PLOTLY_CONFIG = {"displaylogo": False, "responsive": True}
SHORT_TEXT = 32  # a text column no longer than this never wraps (ids, names, categories)
_FIRST_SENTENCE = re.compile(r"^(.+?[.:;])(\s|$)")


def markdown_html(text: str) -> Markup:
    """CommonMark (with tables) to HTML; raw HTML in the text passes through."""
    from markdown_it import MarkdownIt

    return Markup(MarkdownIt("commonmark", {"html": True}).enable("table").render(text))


def inline_markdown_html(text: str) -> Markup:
    """One line of Markdown (emphasis, code) without a paragraph: a disclosure's title."""
    from markdown_it import MarkdownIt

    return Markup(MarkdownIt("commonmark").renderInline(text))


def format_value(value: Any) -> str:
    """A compact, human-readable string for a key-value cell: no Python reprs (``None`` is
    "–", a tuple or list its items joined, ``True`` "yes"), also when a table stored them as
    strings."""
    if isinstance(value, str):
        value = _literal(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return "–" if math.isnan(value) else f"{value:.6g}"
    if isinstance(value, list | tuple):
        return ", ".join(format_value(v) for v in value) or "–"
    if isinstance(value, Mapping):
        return json.dumps(value, ensure_ascii=False, default=str)
    return "–" if value is None else str(value)


def _literal(text: str) -> Any:
    """A string that is the repr of None, a bool or a tuple/list of plain values, as that
    value (settings tables store some as text); any other string as it is."""
    stripped = text.strip()
    bracketed = stripped[:1] in ("(", "[") and stripped[-1:] in (")", "]")
    if stripped in ("None", "True", "False") or bracketed:
        try:
            value = ast.literal_eval(stripped)
        except (ValueError, SyntaxError):
            return text
        if value is None or isinstance(value, bool | list | tuple):
            return value
    return text


def kv_html(items: Mapping[str, Any]) -> Markup:
    """A two-column key/value table."""
    rows = "".join(
        f"<tr><th>{escape(str(k))}</th><td>{escape(format_value(v))}</td></tr>"
        for k, v in items.items()
    )
    return Markup(f'<table class="kv"><tbody>{rows}</tbody></table>')


def table_html(df: pd.DataFrame, max_rows: int) -> tuple[Markup, str]:
    """The first ``max_rows`` rows as an HTML table, and a note on rows left out.

    Text columns are marked ``class="text"`` (left-aligned) so that prompts and names read
    naturally while numbers stay right-aligned in their columns; short ones (ids, names,
    categories) never wrap, long ones (prompts) wrap at a readable width. Headers may break
    after an underscore, so a wide table stays within the page.
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
    long_cols = [i for i in text_cols if shown.iloc[:, i].astype(str).str.len().max() > SHORT_TEXT]
    flat = shown.columns.nlevels == 1
    body = _mark_text_columns(body, text_cols, set(long_cols), len(shown.columns), flat)
    head, sep, rest = body.partition("</thead>")
    body = head.replace("_", "_<wbr>") + sep + rest
    note = f"Showing {len(shown)} of {len(df)} rows." if len(df) > len(shown) else ""
    return Markup(body), note


def _mark_text_columns(body: str, cols: list[int], long: set[int], n_cols: int, flat: bool) -> str:
    """Add ``class="text"`` (``"text long"`` for the ``long`` ones) to the cells (and, for flat
    columns, headers) of ``cols``.

    In pandas' HTML every data cell is a bare ``<td>`` and index cells are ``<th>``, so the
    k-th ``<td>`` of a body row is column k whatever the index looks like; in the first
    header row the last ``n_cols`` headers are the columns'.
    """
    if not cols:
        return body
    wanted = set(cols)

    def tag(kind: str, col: int) -> str:
        return _TEXT[kind].replace('"text"', '"text long"') if col in long else _TEXT[kind]

    def mark(row: str, cell: re.Pattern, first: int) -> str:
        position = itertools.count(first)

        def one(m: re.Match) -> str:
            col = next(position)
            return tag(m.group(1), col) if col in wanted else m[0]

        return cell.sub(one, row)

    head, sep, rest = body.partition("<tbody>")
    rest = _ROW.sub(lambda row: mark(row[0], _TD, 0), rest)
    if flat:
        n_th = len(_TH.findall(_ROW.search(head)[0]))
        head = _ROW.sub(lambda row: mark(row[0], _TH, n_cols - n_th), head, count=1)
    return head + sep + rest


def figure_html(block: FigureBlock, div_id: str, static_dir: Path | None, stem: str) -> Markup:
    """The figure: its plotly div (no plotly.js in it), its caption and, if asked, links to
    its static PNG/SVG/PDF copies."""
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
    links = []
    if static_dir is not None:
        for path in block.figure.save_static(static_dir, stem):
            href = f"{static_dir.name}/{path.name}"
            links.append(f'<a href="{escape(href)}">{escape(path.suffix[1:].upper())}</a>')
    caption = block.caption if block.caption is not None else block.figure.caption
    files = f' <span class="files">{" · ".join(links)}</span>' if links else ""
    return Markup(
        f'<figure class="block">{div}<figcaption>{escape(caption)}{files}</figcaption></figure>'
    )


def table_block_html(block: TableBlock) -> Markup:
    """A table behind a disclosure: its title and row count, then caption, rows and note."""
    body, note = table_html(block.df, block.max_rows)
    if note and block.source:
        note += f" All rows: {block.source}."
    title = block.title or _first_sentence(block.caption) or "Table"
    rows = f"{len(block.df)} row{'s' if len(block.df) != 1 else ''}"
    parts = [f'<summary>{escape(title)} <span class="count">({rows})</span></summary>']
    if block.caption and block.caption != title:
        parts.append(f'<p class="caption">{escape(block.caption)}</p>')
    parts.append(f'<div class="table-wrap">{body}</div>')
    if note:
        parts.append(f'<p class="note">{escape(note)}</p>')
    return Markup(f'<details class="block table">{"".join(parts)}</details>')


def _first_sentence(text: str, limit: int = 110) -> str:
    m = _FIRST_SENTENCE.match(text.strip())
    first = (m.group(1) if m else text.strip()).rstrip(".:;")
    return first if len(first) <= limit else first[: limit - 1].rstrip() + "…"


def render_block(block: Block, section_key: str, index: str, static_dir: Path | None) -> Markup:
    """One block as an HTML fragment; ``index`` numbers it within its section (``3``, or
    ``3-1`` inside a disclosure) for its element id and default figure file name."""
    if isinstance(block, FigureBlock):
        stem = check_name(block.name or f"{section_key}-{index}", field="figure name")
        return figure_html(block, f"fig-{section_key}-{index}", static_dir, stem)
    if isinstance(block, TableBlock):
        return table_block_html(block)
    if isinstance(block, FindingBlock):
        return Markup(f'<div class="block finding">{markdown_html(block.content)}</div>')
    if isinstance(block, TextBlock):
        return Markup(f'<div class="block text">{markdown_html(block.content)}</div>')
    if isinstance(block, KeyValueBlock):
        caption = escape(block.caption or "Settings")
        return Markup(
            f'<details class="block kv"><summary>{caption}</summary>{kv_html(block.items)}'
            "</details>"
        )
    if isinstance(block, DetailsBlock):
        inner = [
            render_block(b, section_key, f"{index}-{k}", static_dir)
            for k, b in enumerate(block.blocks)
        ]
        grid = " grid" if all(isinstance(b, FigureBlock) for b in block.blocks) else ""
        state = " open" if block.open else ""
        return Markup(
            f'<details class="block more"{state}><summary>{inline_markdown_html(block.summary)}'
            f'</summary><div class="details-body{grid}">{"".join(inner)}</div></details>'
        )
    raise TypeError(
        f"section {section_key!r} returned a {type(block).__name__}, expected a report block"
    )
