"""A report table as HTML: text left-aligned, numbers right-aligned, within the page's width.

A table's text can be anything a model wrote. Prose columns (prompts, continuations, a
reasoning trace's sentences) wrap at a readable width. Every other text cell (ids, names,
tokens), index label and header word stays on one line: it is cut
(:func:`~mechscope.report.text_fit.cut`) with its whole text in a ``title``. How far is
decided per table: :data:`~mechscope.report.text_fit.CELL_WIDTH` columns, less when the
table's columns together would not fit across the report's section, so a table of many
long ids still fits the page. Numbers are never cut.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence

import pandas as pd
from markupsafe import Markup, escape
from pandas.api.types import is_numeric_dtype

from mechscope.report.text_fit import CELL_WIDTH, cut, cut_words, width

TABLE_WIDTH = 140  #: columns of text across the report's section (1,124 px at 0.86 rem)
MIN_CELL_WIDTH = 12  #: the narrowest a short text cell is cut to, however wide the table
PROSE_WIDTH = 28  #: columns a prose column takes at least (its CSS ``min-width``)
PADDING = 3  #: columns a cell's padding takes
_TD = re.compile(r"<(td)>")
_TH = re.compile(r"<(th)>")
_TEXT = {"td": '<td class="text">', "th": '<th class="text">'}
_ROW = re.compile(r"<tr\b.*?</tr>", re.S)
_OPEN, _CLOSE = "\ue000", "\ue001"  # private-use characters around a cut text's number
_PLACEHOLDER = re.compile(f"{_OPEN}(\\d+){_CLOSE}")
_BREAKS = re.compile(r"[\s_]+")  # a header breaks at spaces and after underscores


def table_html(
    df: pd.DataFrame, max_rows: int, prose: Sequence[str] | None = None
) -> tuple[Markup, str]:
    """The first ``max_rows`` rows as an HTML table, and a note on rows left out.

    Text columns are marked ``class="text"`` (left-aligned) so that prompts and names read
    naturally while numbers stay right-aligned in their columns. Prose columns (``prose``
    names them; by default a text column with a value of several words wider than
    :data:`CELL_WIDTH`) are also marked ``long`` and wrap; every other text cell, index label
    and header word is cut to one line (see the module docstring). Headers may break after
    an underscore, so a wide table stays within the page.
    """
    shown = df.head(max_rows).copy()
    keep_index = not isinstance(df.index, pd.RangeIndex)
    if not keep_index and any(n is not None for n in shown.columns.names):
        # pandas draws an empty index column for a named column axis even with index=False.
        shown.columns.names = [None] * shown.columns.nlevels
    text_cols = [i for i, dtype in enumerate(shown.dtypes) if not is_numeric_dtype(dtype)]
    long_cols = _prose_columns(shown, text_cols, prose)
    limit = cell_limit(shown, set(text_cols) - long_cols, long_cols, keep_index)
    cuts = _Cuts(limit)
    for i in text_cols:
        if i not in long_cols:
            shown.isetitem(i, shown.iloc[:, i].map(cuts.cell))
    shown.columns = cuts.labels(shown.columns)
    if keep_index:
        shown.index = cuts.labels(shown.index)
    body = shown.to_html(
        index=keep_index,
        border=0,
        classes="data",
        na_rep="–",
        float_format=_number,
        escape=True,
    )
    flat = shown.columns.nlevels == 1
    body = _mark_text_columns(body, text_cols, long_cols, len(shown.columns), flat)
    head, sep, rest = body.partition("</thead>")
    body = cuts.restore(head.replace("_", "_<wbr>"), wbr=True) + sep + cuts.restore(rest)
    note = f"Showing {len(shown)} of {len(df)} rows." if len(df) > len(shown) else ""
    return Markup(body), note


def _number(value: float) -> str:
    return f"{value:.4g}"


def _prose_columns(df: pd.DataFrame, text_cols: list[int], prose: Sequence[str] | None) -> set:
    """Positions of the columns that wrap: those named in ``prose``, or (``None``) the text
    columns holding a value of several words wider than :data:`CELL_WIDTH`."""
    if prose is not None:
        return {i for i in text_cols if df.columns[i] in set(prose)}

    def wordy(value: object) -> bool:
        return isinstance(value, str) and len(value.split()) > 1 and width(value) > CELL_WIDTH

    return {i for i in text_cols if df.iloc[:, i].map(wordy).any()}


def cell_limit(df: pd.DataFrame, short: set[int], prose: set[int], keep_index: bool) -> int:
    """The widest (in columns) short text cells and header words of ``df`` may be, from
    :data:`CELL_WIDTH` down to :data:`MIN_CELL_WIDTH`, for its columns to fit in
    :data:`TABLE_WIDTH` (numbers and prose take what they take)."""

    def cells(values: pd.Series | pd.Index, i: int | None, limit: int) -> int:
        if i in prose:
            return PROSE_WIDTH
        if i is None or i in short:
            return max((width(cut(v, limit)) for v in values if isinstance(v, str)), default=1)
        return max((len(_number(v) if isinstance(v, float) else str(v)) for v in values), default=1)

    def header(label: object, limit: int) -> int:
        parts = label if isinstance(label, tuple) else (label,)
        words = [w for p in parts for w in _BREAKS.split(cut_words(str(p), limit))]
        return max((width(w) for w in words), default=1)

    def needed(limit: int) -> int:
        total = (PADDING + cells(df.index, None, limit)) if keep_index else 0
        for i, label in enumerate(df.columns):
            total += PADDING + max(header(label, limit), cells(df.iloc[:, i], i, limit))
        return total

    fits = (n for n in range(CELL_WIDTH, MIN_CELL_WIDTH - 1, -1) if needed(n) <= TABLE_WIDTH)
    return next(fits, MIN_CELL_WIDTH)


class _Cuts:
    """Cut text put into a table as placeholders, which :meth:`restore` turns into the cut
    text with the whole text in a ``title`` (pandas escapes whatever it writes, so the
    markup goes in after it has written the table)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.texts: list[tuple[str, str]] = []  # (shown, whole)
        self.index: dict[tuple[str, str], str] = {}

    def _mark(self, whole: str, shown: str) -> str:
        if shown == whole:
            return whole
        key = (shown, whole)
        if key not in self.index:
            self.index[key] = f"{_OPEN}{len(self.texts)}{_CLOSE}"
            self.texts.append(key)
        return self.index[key]

    def cell(self, value: object) -> object:
        """A short text cell's value (anything but text is left as it is)."""
        return self._mark(value, cut(value, self.limit)) if isinstance(value, str) else value

    def labels(self, axis: pd.Index) -> pd.Index:
        """Column or index labels with every overlong word cut (all levels of a MultiIndex)."""

        def one(label: object) -> object:
            if not isinstance(label, str):
                return label
            return self._mark(label, cut_words(label, self.limit))

        if isinstance(axis, pd.MultiIndex):
            return pd.MultiIndex.from_tuples(
                [tuple(one(v) for v in t) for t in axis], names=axis.names
            )
        return pd.Index([one(v) for v in axis], name=axis.name)

    def restore(self, html: str, *, wbr: bool = False) -> str:
        def span(m: re.Match) -> str:
            shown, whole = self.texts[int(m[1])]
            text = str(escape(shown))
            text = text.replace("_", "_<wbr>") if wbr else text
            return f'<span class="cut" title="{escape(whole)}">{text}</span>'

        return _PLACEHOLDER.sub(span, html)


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
