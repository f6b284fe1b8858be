"""Turn report blocks into HTML fragments (and static figure files) for the template.

Each block becomes one fragment; a disclosure renders the blocks inside it the same way,
so sections nest figures, tables and prose behind ``<details>`` as deep as they like.
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import plotly.io as pio
from markupsafe import Markup, escape

from mechscope.report.render_table import table_html
from mechscope.report.sections import (
    Block,
    DetailsBlock,
    FigureBlock,
    FindingBlock,
    KeyValueBlock,
    TableBlock,
    TextBlock,
)
from mechscope.report.text_fit import cut
from mechscope.runs.rundir import check_name

_PLOTLY_CONFIG = {"displaylogo": False, "responsive": True}
SUMMARY_WIDTH = 110  # a table's title taken from its caption's first sentence
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
    body, note = table_html(block.df, block.max_rows, block.prose)
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


def _first_sentence(text: str) -> str:
    """The caption's first sentence, cut to :data:`SUMMARY_WIDTH` (the caption itself is
    shown whole once the table is open)."""
    m = _FIRST_SENTENCE.match(text.strip())
    return cut((m.group(1) if m else text.strip()).rstrip(".:;"), SUMMARY_WIDTH)


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
