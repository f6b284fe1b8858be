"""Static PNG, SVG and PDF copies: written, non-empty, valid, reproducible."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np
import pytest

from mechscope.report import Series, bars, curves, graph, heatmap, panels, scatter

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _figures():
    z = np.linspace(-1, 1, 24).reshape(4, 6)  # [rows, cols]
    z[0, 0] = np.nan
    m = np.array([0.0, 1.0, 0.5])
    return {
        "heat": heatmap(z, [f"$t{i}" for i in range(6)], list("abcd"), "h", diverging=True),
        "curves": curves([0, 1, 2], [Series("s", m, m - 0.1, m + 0.1)], "c", hline=0.0),
        "catcurves": curves(["a", "b", "c"], [Series("s", m)], "c"),
        "bars": bars(["x", "y", "z"], [Series("s", m, m - 0.1, m + 0.1), Series("t", m)], "b"),
        "scatter": scatter(m, m, "s", text=["a\n1", "b", "c"], groups=list("aab"), diagonal=True),
        "graph": graph([("a", "A", 1, "g1"), ("b", "B", 2, "g2")], [("a", "b", 1.0)], "g"),
        "line": graph([("a", "A"), ("b", "B"), ("c", "C")], [("a", "c", -1.0)], "l", layout="line"),
        "panels": panels(
            [0, 1, 2], {"p": [Series("s", m, m - 0.1, m + 0.1)], "q": [Series("s", m)]}, "p"
        ),
    }


@pytest.mark.parametrize("key", list(_figures()))
def test_png_svg_and_pdf_written_and_valid(tmp_path, key):
    fig = _figures()[key]
    paths = fig.save_static(tmp_path, key)
    names = [f"{key}.png", f"{key}.svg", f"{key}.pdf"]
    assert [p.name for p in paths] == names
    png, svg, pdf = paths
    assert png.read_bytes().startswith(PNG_MAGIC) and png.stat().st_size > 1000
    root = ET.fromstring(svg.read_bytes())
    assert root.tag.endswith("svg")
    assert pdf.read_bytes().startswith(b"%PDF") and pdf.stat().st_size > 1000
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)


def test_static_output_is_reproducible(tmp_path):
    fig = _figures()["heat"]
    a = fig.save_static(tmp_path / "a", "f")
    b = fig.save_static(tmp_path / "b", "f")
    for pa, pb in zip(a, b, strict=True):
        assert pa.read_bytes() == pb.read_bytes()
