"""Figure builders: the plotly figures carry exactly the input numbers, labels escaped."""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
import pytest

from mechscope.errors import InputError
from mechscope.report import Edge, Node, Series, bars, curves, graph, heatmap, scatter
from mechscope.report.layout import arrow_anchor, circular_layout, edge_points
from tolerance import assert_exact, assert_fp64_close


def _valid(fig: go.Figure) -> go.Figure:
    """Re-validate through plotly's schema and its JSON (as the report embeds it)."""
    go.Figure(fig.to_dict())  # raises on any property plotly does not know
    assert len(pio.from_json(pio.to_json(fig)).data) == len(fig.data)
    return fig


def test_heatmap_z_labels_and_scale():
    z = np.arange(12, dtype=np.float64).reshape(3, 4) - 5  # [rows, cols]
    z[1, 2] = np.nan
    hover = [[f"r{r}c{c}\n<extra>" for c in range(4)] for r in range(3)]
    fig = heatmap(
        z,
        ["the", "<s>", "the", "$x"],
        ["L0", "L1", "L2"],
        "t",
        diverging=True,
        zmid=1.0,
        hover_text=hover,
        colorbar_title="ΔNLL",
    )
    pfig = _valid(fig.to_plotly())
    trace = pfig.data[0]
    np.testing.assert_array_equal(np.asarray(trace.z, dtype=float), z)  # NaN in the same cell
    assert trace.zmid == 1.0 and trace.colorbar.title.text == "ΔNLL"
    assert list(pfig.layout.xaxis.ticktext) == ["the", "&lt;s&gt;", "the", "$x"]
    assert list(trace.x) == [0, 1, 2, 3]  # repeated tokens stay separate columns
    assert list(pfig.layout.yaxis.range) == [2.5, -0.5]  # row 0 on top, as in the PNG
    assert list(pfig.layout.xaxis.range) == [-0.5, 3.5]  # the cells fill the axes
    assert pfig.layout.xaxis.zeroline is False and pfig.layout.yaxis.zeroline is False
    assert trace.text[2][3] == "L2 · $x<br>r2c3<br>&lt;extra&gt;"
    assert "red is above 1" in fig.caption


def test_heatmap_sequential_has_no_midpoint():
    fig = heatmap([[1, 2]], ["a", "b"], ["r"], "t").to_plotly()
    assert fig.data[0].zmid is None


@pytest.mark.parametrize(
    "kwargs",
    [
        {"z": np.zeros(3), "x_labels": ["a"], "y_labels": ["b"]},
        {"z": np.zeros((2, 3)), "x_labels": ["a", "b"], "y_labels": ["r", "s"]},
        {"z": np.zeros((1, 2)), "x_labels": ["a", "b"], "y_labels": ["r"], "hover_text": [["x"]]},
    ],
)
def test_heatmap_shape_errors(kwargs):
    with pytest.raises(InputError):
        heatmap(title="t", **kwargs)


def test_curves_band_equals_interval():
    x = [0, 1, 2, 3]
    mean = np.array([0.0, 1.0, 2.0, 1.5])
    low = mean - np.array([0.1, 0.2, 0.3, 0.4])
    high = mean + np.array([0.5, 0.6, 0.7, 0.8])
    fig = curves(x, [Series("agentic", mean, low, high), Series("assisted", -mean)], "t", "layer")
    pfig = _valid(fig.to_plotly())
    band, line, other = pfig.data
    assert band.fill == "toself" and band.showlegend is False
    assert band.mode == "lines"  # a band has no markers of its own
    # The figure carries the given numbers themselves: equal bit for bit.
    assert_exact(np.asarray(band.y), np.concatenate([high, low[::-1]]))
    assert_exact(np.asarray(band.x), np.array([0, 1, 2, 3, 3, 2, 1, 0]))
    assert_exact(np.asarray(line.y), mean)
    assert_exact(np.asarray(line.customdata), np.stack([low, high], -1))
    assert band.legendgroup == line.legendgroup == "agentic"  # the legend toggles both
    assert other.legendgroup == "assisted" and other.customdata is None
    assert "shaded bands" in fig.caption


def test_curves_band_skips_missing_points_and_groups_toggle_together():
    mean = np.array([1.0, 2.0, 3.0])
    low, high = np.array([0.0, np.nan, 2.0]), np.array([2.0, np.nan, 4.0])
    fig = curves(
        ["a", "b", "c"],
        [Series("s", mean, low, high, group="g"), Series("u", mean, group="g")],
        "t",
    )
    band, line, second = fig.to_plotly().data
    assert list(band.x) == ["a", "c", "c", "a"]
    assert_exact(np.asarray(band.y), np.array([2.0, 4.0, 2.0, 0.0]))  # the given bounds
    assert line.legendgroup == second.legendgroup == "g"
    assert line.legendgrouptitle.text == "g" and second.legendgrouptitle.text is None


def test_curves_errors():
    with pytest.raises(InputError, match="length 3"):
        curves([0, 1, 2], [Series("s", [1, 2])], "t")
    with pytest.raises(InputError, match="both low and high"):
        curves([0, 1], [Series("s", [1, 2], low=[0, 1])], "t")
    with pytest.raises(InputError, match="at least one"):
        curves([0, 1], [], "t")


def test_bars_error_bars_equal_interval():
    mean, low, high = np.array([1.0, -2.0]), np.array([0.5, -3.0]), np.array([2.0, -1.5])
    pfig = _valid(bars(["a", "b"], [Series("s", mean, low, high)], "t").to_plotly())
    bar = pfig.data[0]
    # The given means, and the same two subtractions for the whiskers: bit for bit.
    assert_exact(np.asarray(bar.y), mean)
    assert_exact(np.asarray(bar.error_y.array), high - mean)
    assert_exact(np.asarray(bar.error_y.arrayminus), mean - low)
    hbar = (
        bars(["a", "b"], [Series("s", mean, low, high)], "t", horizontal=True).to_plotly().data[0]
    )
    assert hbar.orientation == "h"
    assert_exact(np.asarray(hbar.x), mean)
    with pytest.raises(InputError, match="unique"):
        bars(["a", "a"], [Series("s", mean)], "t")


def test_scatter_groups_keep_every_point():
    x, y = np.arange(6.0), np.arange(6.0) ** 2
    text = [f"p{i}" for i in range(5)] + ["<p5>"]
    fig = scatter(x, y, "t", text=text, groups=list("ababab"), diagonal=True)
    pfig = _valid(fig.to_plotly())
    a, b, diag = pfig.data
    assert_exact(np.asarray(a.x), np.array([0.0, 2.0, 4.0]))  # the given points
    assert_exact(np.asarray(b.y), np.array([1.0, 9.0, 25.0]))
    assert list(b.text) == ["p1", "p3", "&lt;p5&gt;"]
    assert list(diag.x) == [0.0, 25.0] and list(diag.y) == [0.0, 25.0]
    with pytest.raises(InputError):
        scatter([1, 2], [1], "t")


def test_graph_nodes_edges_and_layout():
    nodes = [
        ("a", "A", 1.0, "attn", "head a"),
        Node("b", "<B>", 4.0, "mlp"),
        ("c", "C", 2.0, "attn"),
    ]
    edges = [("a", "b", 2.0), Edge("b", "c", -1.0)]
    fig = graph(nodes, edges, "t")
    pfig = _valid(fig.to_plotly())
    node_traces = [t for t in pfig.data if t.mode == "markers+text"]
    assert [t.name for t in node_traces] == ["attn", "mlp"]
    assert list(node_traces[1].text) == ["&lt;B&gt;"]
    assert list(node_traces[0].hovertext) == ["head a", "C"]
    xs = [x for t in node_traces for x in t.x]
    ys = [y for t in node_traces for y in t.y]
    # on the unit circle: sin and cos of angles up to 2π, rounded at the angle's magnitude
    assert_fp64_close(np.hypot(xs, ys), 1.0, terms=3, scale=2 * math.pi)
    heads = next(t for t in pfig.data if t.name == "edges")
    assert list(heads.hovertext) == ["a → b: 2", "b → c: -1"]
    assert graph(nodes, edges, "t").to_plotly().to_dict() == pfig.to_dict()  # deterministic
    with pytest.raises(InputError, match="node ids"):
        graph(nodes, [("a", "zz", 1.0)], "t")
    with pytest.raises(InputError, match="unique"):
        graph([("a", "A"), ("a", "B")], [], "t")
    with pytest.raises(InputError, match="position"):
        graph(nodes, edges, "t", layout={"a": (0, 0)})


def test_layout_geometry():
    pts = circular_layout(4)
    # sin and cos of 2πi/4: the angle rounds at its magnitude (up to 2π), then the sine
    want = np.array([(0, 1), (1, 0), (0, -1), (-1, 0)], dtype=float)
    assert_fp64_close(np.array(pts), want, terms=2, scale=2 * math.pi)
    line = edge_points((0.0, 0.0), (2.0, 0.0), curved=False)
    assert line[0] == (0.0, 0.0) and line[-1] == (2.0, 0.0)
    _, _, right = arrow_anchor(line)
    _, _, up = arrow_anchor(edge_points((0.0, 0.0), (0.0, 1.0), curved=False))
    # atan2 in radians, then degrees: two roundings at an angle's scale (180°)
    assert_fp64_close(np.array([right, up]), np.array([90.0, 0.0]), terms=2, scale=180.0)
    arc = edge_points((0.0, 0.0), (2.0, 0.0), curved=True)
    # apex = half the 0.6 bend: a quadratic curve's point, rounded at the coordinates (≤ 2)
    assert_fp64_close(max(p[1] for p in arc), 0.3, terms=4, scale=2.0)
