"""Report tables: no phantom index column, text columns marked for left alignment."""

from __future__ import annotations

from html.parser import HTMLParser

import pandas as pd

from mechscope.report.render_table import table_html


class _Cells(HTMLParser):
    """Rows of (tag, class, text) for every th/td, split into header and body rows."""

    def __init__(self) -> None:
        super().__init__()
        self.head: list[list[tuple[str, str, str]]] = []
        self.body: list[list[tuple[str, str, str]]] = []
        self._in_body = False
        self._cell: list | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "tbody":
            self._in_body = True
        elif tag == "tr":
            (self.body if self._in_body else self.head).append([])
        elif tag in ("td", "th"):
            self._cell = [tag, dict(attrs).get("class", ""), ""]

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[2] += data

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            (self.body if self._in_body else self.head)[-1].append(tuple(self._cell))
            self._cell = None


def _cells(df: pd.DataFrame) -> _Cells:
    parser = _Cells()
    parser.feed(str(table_html(df, max_rows=10)[0]))
    return parser


def test_named_column_axis_adds_no_empty_column():
    df = pd.DataFrame({"metric": ["a", "b"], "joint": [1.0, 2.5]})
    df.columns.name = "method"  # what a pivot followed by reset_index leaves behind
    parsed = _cells(df)
    assert [[c[2] for c in row] for row in parsed.head] == [["metric", "joint"]]
    assert [[c[2] for c in row] for row in parsed.body] == [["a", "1"], ["b", "2.5"]]
    assert all(c[0] == "td" for row in parsed.body for c in row)  # no index cells
    assert df.columns.name == "method"  # the caller's frame is untouched


def test_text_columns_are_marked_numbers_are_not():
    df = pd.DataFrame({"prompt": ["x y", "z"], "p": [0.5, 0.25], "n": [1, 2], "ok": [True, False]})
    parsed = _cells(df)
    expected = ["text", "", "", ""]
    assert [c[1] for c in parsed.head[0]] == expected
    assert all([c[1] for c in row] == expected for row in parsed.body)


def test_kept_index_shifts_nothing():
    df = pd.DataFrame({"n": [1, 2], "token": ["a", "b"]}, index=pd.Index(["s0", "s1"], name="id"))
    parsed = _cells(df)
    assert [(c[0], c[1]) for c in parsed.body[0]] == [("th", ""), ("td", ""), ("td", "text")]
    assert [c[1] for c in parsed.head[0]] == ["", "", "text"]  # blank corner, n, token
    assert [c[2] for c in parsed.head[0]][1:] == ["n", "token"]


def test_multiindex_columns_mark_cells_only():
    cols = pd.MultiIndex.from_tuples([("a", "name"), ("a", "value")])
    df = pd.DataFrame([["u", 1.0], ["v", 2.0]], columns=cols)
    parsed = _cells(df)
    assert all([c[1] for c in row] == ["text", ""] for row in parsed.body)
    assert all(c[1] == "" for row in parsed.head for c in row)
