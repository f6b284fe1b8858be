"""Text of any shape in a report: labels cut to their width (whole on hover), prose wrapped,
numbers never cut; the one cutting rule and every renderer that uses it."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure as MplFigure

from mechscope.report import Node, Series, bars, curves, graph, heatmap, panels, scatter
from mechscope.report.plotly_text import esc_hover
from mechscope.report.render_static import _draw
from mechscope.report.render_table import (
    MIN_CELL_WIDTH,
    PADDING,
    TABLE_WIDTH,
    cell_limit,
    table_html,
)
from mechscope.report.text_fit import (
    CELL_WIDTH,
    ELLIPSIS,
    HOVER_WIDTH,
    LABEL_WIDTH,
    cut,
    cut_words,
    is_number,
    width,
    wrap,
)

TOKEN = "Donaudampfschifffahrtsgesellschaftskapit"  # one token of 40 characters
CJK = "東京都の天気は晴れです、明日も晴れるでしょう。"  # 23 wide characters: 46 columns
FAMILY = "👩\u200d👩\u200d👧\u200d👦"  # one emoji of seven code points
EMOJI = FAMILY * 24
ADVERSARIAL = [TOKEN, CJK, EMOJI, f"{TOKEN} {CJK} {FAMILY}"]


def test_a_label_wider_than_its_limit_is_cut_with_an_ellipsis():
    assert len(TOKEN) == 40 and cut(TOKEN, 40) == TOKEN  # exactly the limit: whole
    for text in ADVERSARIAL:
        shown = cut(text, 20)
        assert shown.endswith(ELLIPSIS) and width(shown) <= 20
        assert text.startswith(shown[:-1].rstrip())  # a prefix of the text, nothing invented
    assert cut("short") == "short"
    assert width(CJK) == 2 * len(CJK) and width(FAMILY) == 2  # columns, not characters
    assert len(cut(CJK, LABEL_WIDTH)) <= LABEL_WIDTH // 2 + 1  # 40 columns: 19 characters + …


def test_a_cut_never_splits_a_character_cluster():
    shown = cut(EMOJI, 21)
    assert shown[:-1] == FAMILY * (len(shown[:-1]) // len(FAMILY))  # whole emoji only
    accents = "e\u0301" * 30  # é as e + combining acute
    assert not cut(accents, 9)[:-1].endswith("e")  # the mark stays with its letter
    flags = "🇯🇵" * 10
    assert len(cut(flags, 6)[:-1]) % 2 == 0  # flags are pairs of regional indicators


@pytest.mark.parametrize("number", [3.141592653589793, -123456789012345678, "1.25e-05", "-0.4249"])
def test_numbers_are_never_cut(number):
    assert is_number(number)
    assert cut(number, 3) == str(number)
    assert not is_number("ioi-train-0-00001") and not is_number(True) and not is_number("")


def test_cut_words_cuts_only_runs_that_cannot_break():
    header = f"resampling_importance_accuracy of {TOKEN}"
    shown = cut_words(header, CELL_WIDTH)
    assert shown.startswith("resampling_importance_accuracy of ")  # breaks after "_"
    assert shown.endswith(ELLIPSIS) and width(shown.split()[-1]) <= CELL_WIDTH


def test_prose_is_wrapped_within_its_width_and_loses_nothing():
    text = f"The model wrote {TOKEN} and {CJK} then {EMOJI} before the answer."
    lines = wrap(text, 30)
    assert all(width(line) <= 30 for line in lines)
    assert "".join(lines).replace(" ", "") == text.replace(" ", "")
    assert wrap("", 10) == []


class _Cells(HTMLParser):
    """(tag, class, title of a cut span or "", text) of every th/td."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: list[list] = []
        self._cell: list | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag in ("td", "th"):
            self._cell = [tag, attrs.get("class", ""), "", ""]
        elif tag == "span" and self._cell is not None and attrs.get("class") == "cut":
            self._cell[2] = attrs["title"]

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[3] += data

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.cells.append(self._cell)
            self._cell = None


def _cells(df: pd.DataFrame, prose=None) -> dict[str, list]:
    parser = _Cells()
    parser.feed(str(table_html(df, 10, prose)[0]))
    return {c[3]: c for c in parser.cells}


def test_short_table_cells_are_cut_with_the_whole_text_as_title():
    long_number = "-0.000123456789012345678901234567890123"
    df = pd.DataFrame(
        {
            "token": [TOKEN, CJK, EMOJI, "ok"],
            "mixed": [long_number, "x", None, 12345678901234567890123456789012345678],
            "p": [0.5, 0.25, 0.125, 1.0],
        }
    )
    cells = _cells(df)
    for whole in (TOKEN, CJK, EMOJI):
        shown = cut(whole, CELL_WIDTH)
        assert cells[shown][:3] == ["td", "text", whole]  # cut, whole text on hover
    assert cells["ok"][2] == ""  # short enough: as it is
    assert cells[long_number][2] == ""  # numbers never cut, even stored as text
    assert "12345678901234567890123456789012345678" in cells
    assert cells["0.125"][1] == ""  # numeric columns untouched


def test_prose_columns_wrap_whole_and_are_marked_long():
    sentence = f"step by step {TOKEN} {CJK} {EMOJI}"
    df = pd.DataFrame({"prompt": ["I think", "a b"], "alpha 0": [sentence, "stepus aboxed"]})
    guessed = _cells(df)  # no declaration: a column of several-word text wider than a cell
    assert guessed[sentence][:3] == ["td", "text long", ""]
    assert guessed["I think"][1] == "text"
    declared = _cells(df, prose=["prompt", "alpha 0"])  # whatever the model wrote this time
    assert declared["I think"][1] == declared["stepus aboxed"][1] == "text long"
    assert _cells(df, prose=[])[cut(sentence, CELL_WIDTH)][2] == sentence  # declared short


def test_header_and_index_labels_are_cut_with_the_whole_text_as_title():
    df = pd.DataFrame({f"score_{TOKEN}": [1.0]}, index=pd.Index([CJK], name="sample"))
    cells = _cells(df)
    header = next(c for c in cells.values() if c[2] == f"score_{TOKEN}")
    assert header[0] == "th" and header[3] == f"score_{cut(TOKEN, CELL_WIDTH)}"
    assert cells[cut(CJK, CELL_WIDTH)][:3] == ["th", "", CJK]
    html = str(table_html(df, 10)[0])
    assert "score_<wbr>" in html and 'title="score_<wbr>' not in html  # <wbr> only in text


def test_a_table_of_many_long_ids_cuts_them_shorter_to_fit_the_page():
    ids = [f"{k}/{TOKEN}" for k in range(3)]
    few = pd.DataFrame({"sample": ids, "n": [1, 2, 3]})
    assert cell_limit(few, {0}, set(), False) == CELL_WIDTH
    many = pd.DataFrame({f"{name}_{TOKEN}": ids for name in "abcdef"} | {"n": [1, 2, 3]})
    limit = cell_limit(many, set(range(6)), set(), False)
    assert MIN_CELL_WIDTH <= limit < CELL_WIDTH
    assert 6 * (limit + PADDING) + 1 + PADDING <= TABLE_WIDTH  # six cut ids and a number
    cells = _cells(many)
    assert cells[cut(ids[0], limit)][2] == ids[0]  # cut shorter, whole on hover


def test_plotly_labels_are_cut_and_the_hover_gives_them_whole():
    labels = [TOKEN + "-suffix", CJK, EMOJI]
    fig = heatmap(np.ones((3, 3)), labels, labels, "t").to_plotly()
    assert list(fig.layout.xaxis.ticktext) == [cut(v) for v in labels]
    assert CJK in fig.data[0].text[1][1] and EMOJI in fig.data[0].text[2][2]
    names = [Series(TOKEN + " and more", [1.0, 2.0, 3.0]), Series(CJK, [2.0, 1.0, 0.0])]
    bar = bars(labels, names, "t").to_plotly()
    assert [t.name for t in bar.data] == [cut(s.name) for s in names]
    assert bar.data[0].hovertemplate.startswith(f"{TOKEN} and more<br>")
    assert list(bar.layout.xaxis.ticktext) == [cut(v) for v in labels]
    line = curves(labels, names, "t").to_plotly()
    assert list(line.layout.xaxis.ticktext) == [cut(v) for v in labels]
    assert line.data[0].name == cut(names[0].name) and TOKEN in line.data[0].hovertemplate
    small = panels([0, 1, 2], {f"{TOKEN} {CJK}": names}, "t").to_plotly()
    (title,) = small.layout.annotations
    assert title.text == cut(f"{TOKEN} {CJK}") and title.hovertext == f"{TOKEN} {CJK}"
    dots = scatter([1.0, 2.0], [1.0, 2.0], "t", groups=[EMOJI, "b"]).to_plotly()
    assert dots.data[0].name == cut(EMOJI) and EMOJI in dots.data[0].hovertemplate
    assert fig.layout.template.layout.hoverlabel.namelength == -1  # names whole in hover


def test_long_hover_lines_wrap_and_short_ones_stay_as_written():
    text = f"0 [plan] {TOKEN} " * 4 + "\n'   '"
    lines = esc_hover(text).split("<br>")
    assert all(width(line) <= HOVER_WIDTH for line in lines)
    assert lines[-1] == "'   '"  # a token of spaces keeps them


def test_sentence_graph_labels_and_legend_are_cut_hover_is_whole():
    nodes = [Node("0", TOKEN + "!", 1.0, CJK + CJK, f"0 {TOKEN} {CJK}"), Node("1", "1", 2.0)]
    fig = graph(nodes, [("0", "1", 1.0)], "Sentence graph", layout="line")
    plot = fig.to_plotly()
    traces = [t for t in plot.data if t.mode == "markers+text"]
    assert list(traces[0].text) == [cut(TOKEN + "!")] and traces[0].name == cut(CJK + CJK)
    assert CJK in traces[0].hovertext[0] and TOKEN in traces[0].hovertext[0]
    static = MplFigure(layout="constrained")
    FigureCanvasAgg(static)
    _draw(fig.spec, static)
    texts = [t.get_text() for t in static.axes[0].texts]
    assert cut(TOKEN + "!") in texts
    assert cut(CJK + CJK) in [t.get_text() for t in static.legends[0].get_texts()]


def test_static_figures_show_the_cut_labels_alone():
    labels = [TOKEN + "-suffix", CJK, EMOJI]
    names = [Series(TOKEN + " and more", [1.0, 2.0, 3.0]), Series(CJK, [2.0, 1.0, 0.0])]
    for figure in (bars(labels, names, "t"), curves(labels, names, "t")):
        static = MplFigure(layout="constrained")
        FigureCanvasAgg(static)
        _draw(figure.spec, static)
        ax = static.axes[0]
        assert [t.get_text() for t in ax.get_xticklabels()] == [cut(v) for v in labels]
        assert [t.get_text() for t in ax.get_legend().get_texts()] == [cut(s.name) for s in names]
    assert not any(re.search(ELLIPSIS, cut(v)) for v in ("1.0", "-3e-9", 12345678901234567890))
