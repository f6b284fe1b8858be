"""Figures fit for a paper: one colour-blind-safe style shared by both renderers, fonts
embedded in PDF and SVG, small multiples, marks for intervals that exclude 0, no whisker
without an interval, no tick label wider than its figure."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import matplotlib.image
import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure as MplFigure

from mechscope.report import Series, bars, curves, heatmap, panels
from mechscope.report.layout import line_node_sizes
from mechscope.report.render_static import _draw
from mechscope.report.style import PALETTE, color_for, plotly_template
from mechscope.report.text_fit import LABEL_WIDTH, cut

OKABE_ITO = {"#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000"}


def _drawn(figure) -> MplFigure:
    fig = MplFigure(layout="constrained")
    FigureCanvasAgg(fig)
    _draw(figure.spec, fig)
    return fig


def test_one_colour_blind_safe_palette_for_both_renderers():
    assert set(PALETTE) - {"#999999"} <= OKABE_ITO  # Okabe & Ito, grey for an 8th series
    assert "#F0E442" not in PALETTE  # its yellow is unreadable as a line on white
    assert list(plotly_template().layout.colorway) == list(PALETTE)
    m = np.array([0.0, 1.0, 0.5])
    fig = curves([0, 1, 2], [Series("a", m), Series("b", m + 1)], "c")
    plotly_colors = [t.line.color for t in fig.to_plotly().data if t.mode != "lines" or t.fill]
    assert [c for c in plotly_colors if c] == [color_for(0), color_for(1)]
    static = [ln.get_color() for ln in _drawn(fig).axes[0].get_lines()]
    assert [c.upper() for c in static[:2]] == [color_for(0).upper(), color_for(1).upper()]


def test_pdf_embeds_truetype_fonts_and_svg_draws_glyphs_as_paths(tmp_path):
    fig = heatmap(np.eye(3), ["a", "b", "c"], ["x", "y", "z"], "Fonts", diverging=True)
    png, svg, pdf = fig.save_static(tmp_path, "f")
    assert [p.suffix for p in (png, svg, pdf)] == [".png", ".svg", ".pdf"]
    raw = pdf.read_bytes()
    assert raw.startswith(b"%PDF")
    assert b"/FontFile2" in raw  # TrueType program embedded (pdf.fonttype 42)
    assert b"/Type3" not in raw and b"/Subtype /Type3" not in raw
    assert b"CreationDate" not in raw  # reproducible
    root = ET.fromstring(svg.read_bytes())
    assert not any(el.tag.endswith("}text") for el in root.iter())  # text drawn as paths


def test_pdf_is_reproducible(tmp_path):
    fig = bars(["a", "b"], [Series("s", [1.0, 2.0], [0.5, 1.5], [1.5, 2.5])], "b")
    a = fig.save_static(tmp_path / "a", "f")[2].read_bytes()
    b = fig.save_static(tmp_path / "b", "f")[2].read_bytes()
    assert a == b


def test_small_multiples_share_names_colours_and_one_legend():
    x = [0.0, 0.25, 0.5]
    line = np.array([1.0, 2.0, 3.0])
    by_panel = {
        f"ranked by {r}": [
            Series("least first", line, line - 0.1, line + 0.1),
            Series("most first", line * 2, line * 2 - 0.1, line * 2 + 0.1),
            Series("random", line * 1.5, line * 1.4, line * 1.6),
        ]
        for r in ("per_layer", "joint", "gradient")
    }
    fig = panels(x, by_panel, "Pruning", "fraction removed", "objective")
    plot = fig.to_plotly()
    lines = [t for t in plot.data if t.mode and "lines" in t.mode and t.fill is None]
    assert len(lines) == 9  # three series in each of three panels
    assert {t.xaxis for t in lines} == {"x", "x2", "x3"}  # one panel each
    shown = [t.name for t in lines if t.showlegend is not False]
    assert shown == ["least first", "most first", "random"]  # one legend entry per name
    for name in ("least first", "most first", "random"):
        assert len({t.line.color for t in lines if t.name == name}) == 1
    assert plot.layout.legend.y < 0  # below the panels, never over the data
    static = _drawn(fig)
    assert len([ax for ax in static.axes if ax.get_visible()]) == 3
    assert len(static.legends) == 1


def test_one_panel_legend_of_long_names_stays_inside_the_file(tmp_path):
    """The demo's pruning figure with one ranking: its legend of three long names used to
    run past both edges of the PNG."""
    line = np.array([1.0, 2.0, 3.0])
    names = ("least important first", "most important first", "random orders (3 seeds)")
    fig = panels([0.0, 0.25, 0.5], {"ranked by per_layer": [Series(n, line) for n in names]}, "P")
    static = _drawn(fig)
    static.canvas.draw()
    (legend,) = static.legends
    box, page = legend.get_window_extent(), static.bbox
    assert box.x0 >= page.x0 and box.x1 <= page.x1, (box, page)
    assert legend._ncols < len(names)  # stacked, not one row wider than the figure
    png = fig.save_static(tmp_path, "p")[0]
    width, _ = matplotlib.image.imread(png).shape[1::-1]
    assert width >= box.width * 150 / static.dpi - 2  # the file holds the whole legend


def test_heatmap_marks_cells_whose_interval_excludes_zero():
    z = np.array([[0.5, 0.0], [-0.3, 0.1]])
    marks = np.array([[True, False], [True, False]])
    fig = heatmap(z, ["a", "b"], ["r0", "r1"], "m", diverging=True, marks=marks, mark_label="CI")
    dots = [t for t in fig.to_plotly().data if t.type == "scatter"]
    assert len(dots) == 1 and list(dots[0].x) == [0, 0] and list(dots[0].y) == [0, 1]
    ax = _drawn(fig).axes[0]
    offsets = ax.collections[-1].get_offsets()
    assert sorted(map(tuple, np.asarray(offsets))) == [(0.0, 0.0), (0.0, 1.0)]
    with pytest.raises(Exception, match="marks"):
        heatmap(z, ["a", "b"], ["r0", "r1"], "m", marks=np.ones((3, 2), bool))


def test_bars_without_an_interval_draw_no_whisker():
    nan = np.array([np.nan, np.nan])
    one_seed = Series("one seed", [0.4, 0.6], nan, nan)
    fig = bars(["a", "b"], [one_seed], "b")
    ax = _drawn(fig).axes[0]
    whiskers = [c for c in ax.containers if type(c).__name__ == "ErrorbarContainer"]
    assert all(len(c.lines[2][0].get_segments()) == 0 for c in whiskers)
    mixed = Series("mixed", [0.4, 0.6], [0.3, np.nan], [0.5, np.nan])
    ax = _drawn(bars(["a", "b"], [mixed], "b")).axes[0]
    (container,) = [c for c in ax.containers if type(c).__name__ == "ErrorbarContainer"]
    assert len(container.lines[2][0].get_segments()) == 1  # the bar with an interval only
    error = fig.to_plotly().data[0].error_y
    assert all(np.isnan(v) for v in error.array)  # plotly draws no whisker for NaN


def test_long_tick_labels_are_cut_not_clipped():
    long = "a prompt that goes on and on and on → ' Paris'"
    fig = heatmap(np.ones((1, 1)), ["x"], [long], "t")
    ticks = fig.to_plotly().layout.yaxis.ticktext
    assert ticks == (cut(long),) and len(cut(long)) == LABEL_WIDTH


def test_nodes_in_a_row_never_overlap():
    for n in (20, 64, 400):
        sizes = list(np.random.default_rng(n).gamma(1.0, size=n))
        diam = line_node_sizes(sizes, 1000.0)
        assert max(diam) <= 0.9 * 1000.0 / n + 1e-9 or max(diam) <= 2.0
        assert min(diam) > 0


def test_svg_ids_and_text_stay_reproducible(tmp_path):
    fig = curves(["a", "b"], [Series("s", [1.0, 2.0])], "t")
    svg = fig.save_static(tmp_path, "c")[1].read_text()
    assert not re.search(r"<dc:date>", svg)
