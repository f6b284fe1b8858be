"""The HTML report: offline, plotly.js once, one section per workflow that ran."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from plotly.offline import get_plotlyjs

from mechscope.report import (
    DetailsBlock,
    FigureBlock,
    FindingBlock,
    KeyValueBlock,
    Series,
    TableBlock,
    TextBlock,
    build_report,
    curves,
    heatmap,
    register_section,
)
from mechscope.report import html as report_html
from mechscope.runs import has_table, read_table, write_table


@pytest.fixture
def toy_sections(isolated_sections, monkeypatch):
    """A section with results, one whose results are absent, one with prose only."""
    monkeypatch.setattr(report_html, "load_sections", lambda: [])

    @register_section("toy", "Toy workflow", order=2)
    def toy(run):
        if not has_table(run, "toy"):
            return None
        df = read_table(run, "toy")
        z = df.pivot(index="layer", columns="token", values="value").to_numpy()  # [layers, tokens]
        mean = df.groupby("layer")["value"].mean().to_numpy()
        return [
            KeyValueBlock({"model": "tiny:llama", "samples": 2}, caption="What was run"),
            FigureBlock(heatmap(z, ["a", "b", "c"], ["L0", "L1"], "Toy heatmap", diverging=True)),
            FigureBlock(
                curves([0, 1], [Series("mean", mean, mean - 1, mean + 1)], "Toy curve"),
                caption="Custom caption: read me first.",
                name="toy-curve",
            ),
            TableBlock(df, "All values", max_rows=4),
        ]

    @register_section("absent", "Absent workflow", order=1)
    def absent(run):
        return [] if not has_table(run, "absent") else [TextBlock("never")]

    @register_section("notes", "Notes", order=3)
    def notes(run):
        return [TextBlock("Plain **markdown** and a <em>raw</em> tag.")]

    return isolated_sections


def _toy_table() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "layer": np.repeat([0, 1], 3),
            "token": np.tile(["a", "b", "c"], 2),
            "value": np.array([0.5, -0.25, 1.0, 2.0, -1.5, 0.125]),
        }
    )


def test_report_is_self_contained_with_sections_and_static_figures(run, toy_sections):
    write_table(run, "toy", _toy_table())
    run.record_timing("toy", 2.5)
    run.finish()
    path = build_report(run)
    assert path == run.path / "report.html"
    html = path.read_text(encoding="utf-8")

    assert html.count(get_plotlyjs()) == 1  # inlined once, from the installed package
    assert not re.search(r"<script[^>]*\bsrc=", html, re.I)  # no external scripts at all
    assert not re.search(r"<link[^>]*href=[\"']?https?://", html, re.I)  # no CDN, no web fonts
    assert "@import" not in html and "fonts.googleapis" not in html

    assert '<section id="toy">' in html and "Toy workflow" in html
    assert 'href="#toy"' in html and 'href="#notes"' in html  # table of contents
    assert "Absent workflow" not in html and 'id="absent"' not in html
    assert html.index('id="toy"') < html.index('id="notes"')  # registered order
    assert html.count('class="plotly-graph-div"') == 2
    assert "Custom caption: read me first." in html
    assert "red is above 0" in html  # the heatmap's default caption
    assert "Showing 4 of 6 rows." in html
    assert "<strong>markdown</strong>" in html and "<em>raw</em>" in html
    assert "tiny:llama" in html and "0123456789abcdef" in html  # manifest header
    assert "mechscope lens --config toy.yaml" in html and "2.5 s" in html

    figs = run.path / "figures"
    expected = {f"toy-{k}.{ext}" for k in ("01", "curve") for ext in ("png", "svg", "pdf")}
    assert {p.name for p in figs.iterdir()} == expected
    assert all((figs / name).stat().st_size > 500 for name in expected)
    assert 'href="figures/toy-curve.svg"' in html and 'href="figures/toy-curve.pdf"' in html
    assert [p.name for p in run.path.glob(".*")] == []  # no temp files left


def test_report_from_path_without_figures_has_no_plotly(run, isolated_sections, monkeypatch):
    monkeypatch.setattr(report_html, "load_sections", lambda: [])
    path = build_report(run.path, static_figures=False)
    html = path.read_text(encoding="utf-8")
    assert "Plotly.newPlot" not in html and len(html) < 100_000
    assert "No workflow results were found" in html


def test_failing_section_propagates_and_writes_nothing(run, isolated_sections, monkeypatch):
    monkeypatch.setattr(report_html, "load_sections", lambda: [])

    @register_section("broken", "Broken")
    def broken(run):
        raise ValueError("bad result file")

    with pytest.raises(ValueError, match="bad result file"):
        build_report(run)
    assert not (run.path / "report.html").exists()


def test_section_returning_a_non_block_is_an_error(run, isolated_sections, monkeypatch):
    monkeypatch.setattr(report_html, "load_sections", lambda: [])
    register_section("odd", "Odd")(lambda run: ["not a block"])
    with pytest.raises(TypeError, match="section 'odd' returned a str"):
        build_report(run)


def test_labels_cannot_inject_html(run, isolated_sections, monkeypatch):
    monkeypatch.setattr(report_html, "load_sections", lambda: [])
    evil = "</script><script>alert(1)</script>"

    @register_section("inj", "Injection <b>title</b>")
    def inj(run):
        df = pd.DataFrame({"token": [evil]})
        fig = heatmap([[1.0]], [evil], [evil], evil)
        return [FigureBlock(fig, caption=evil), TableBlock(df), KeyValueBlock({"k": evil})]

    html = build_report(run, static_figures=False).read_text(encoding="utf-8")
    assert "<script>alert(1)" not in html
    assert "Injection &lt;b&gt;title&lt;/b&gt;" in html


def test_header_gives_the_time_of_each_part_and_of_each_step(run, isolated_sections):
    run.record_part("overview", 1.5, done=True)
    run.record_part("patching", 75.0, done=False)
    run.record_timing("patching_spans", 12.0)
    tables = {t["title"]: str(t["html"]) for t in report_html.manifest_tables(run.manifest)}
    parts = tables["Time per part"]
    assert "<th>overview</th><td>1.5 s</td>" in parts
    assert "<th>patching</th><td>1 min 15 s (unfinished)</td>" in parts
    assert "<th>total</th><td>1 min 16 s</td>" in parts
    assert "<th>patching_spans</th><td>12.0 s</td>" in tables["Time per step"]
    html = report_html.build_report(run).read_text(encoding="utf-8")
    assert "Time per part" in html and "1 min 15 s (unfinished)" in html


def test_findings_open_sections_and_the_summary_lists_them(run, isolated_sections, monkeypatch):
    monkeypatch.setattr(report_html, "load_sections", lambda: [])

    @register_section("first", "First", order=1)
    def first(run):
        fig = heatmap([[1.0]], ["a"], ["b"], "Key figure")
        more = DetailsBlock("More figures (1)", [FigureBlock(heatmap([[2.0]], ["a"], ["b"], "x"))])
        return [FindingBlock("The effect is **0.93 [0.81, 1.02]**."), FigureBlock(fig), more]

    @register_section("second", "Second", order=2)
    def second(run):
        return [FindingBlock("Nothing at 0.05."), TextBlock("prose")]

    html = build_report(run, static_figures=False).read_text(encoding="utf-8")
    summary = html[html.index('<nav class="toc">') : html.index("</nav>")]
    assert summary.index('href="#first"') < summary.index("0.93") < summary.index('href="#second"')
    assert "<strong>0.93 [0.81, 1.02]</strong>" in summary and "Nothing at 0.05." in summary
    section = html[html.index('<section id="first">') :]
    assert section.index('class="block finding"') < section.index('class="plotly-graph-div"')
    details = section[section.index('<details class="block more">') :]
    assert (
        "<summary>More figures (1)</summary>" in details and 'class="details-body grid"' in details
    )
    assert html.count('class="plotly-graph-div"') == 2  # the one behind the disclosure too
    assert 'addEventListener("toggle"' in html  # figures drawn closed are fitted on opening


def test_tables_and_settings_are_disclosures_with_readable_values(
    run, isolated_sections, monkeypatch
):
    monkeypatch.setattr(report_html, "load_sections", lambda: [])
    df = pd.DataFrame({"pair_id": ["ioi-train-0-00001"] * 30, "clean_logit_diff": np.arange(30.0)})

    @register_section("tab", "Tables", order=1)
    def tab(run):
        settings = {"directions": "('denoising',)", "heads": "None", "exact": True, "n": None}
        return [
            TableBlock(df, "Unpatched runs per pair.", source="tables/x.parquet"),
            KeyValueBlock(settings, "Settings"),
        ]

    html = build_report(run, static_figures=False).read_text(encoding="utf-8")
    summary = '<summary>Unpatched runs per pair <span class="count">(30 rows)</span></summary>'
    assert '<details class="block table">' + summary in html
    assert "Showing 20 of 30 rows. All rows: tables/x.parquet." in html
    assert "clean_<wbr>logit_<wbr>diff" in html  # headers break after underscores
    assert '<td class="text">ioi-train-0-00001</td>' in html  # short text: never wrapped
    kv = html[html.index('<details class="block kv">') :]
    assert "<td>denoising</td>" in kv and "<td>–</td>" in kv and "<td>yes</td>" in kv
    assert "None" not in kv and "(&#39;" not in kv and "('" not in kv
