"""The demo's report.html in a real browser: it loads cleanly, draws, responds, stays offline.

Generic over sections: whatever workflows the run holds, every part of the demo needs its
section with a title and content, every plotly figure an SVG of real size with its caption
underneath, and every heatmap or point figure a hover label where a reader points. The
header must give the time of every part, and the anchors section its sentence graph.
Screenshots of the page and of each section are kept in ``test-artifacts/report/`` for a
person to look at.
"""

from __future__ import annotations

import itertools
import struct
from pathlib import Path

import pytest
from browser_helpers import ARTIFACTS, LOCAL_SCHEMES, VIEWPORT, LoadedPage

pytestmark = [pytest.mark.browser]

PLOTS = ".plotly-graph-div"
SECTIONS_JS = """() => [...document.querySelectorAll('main > section')].map(s => ({
  id: s.id,
  title: (s.querySelector(':scope > h2') || {}).textContent || '',
  blocks: s.querySelectorAll(':scope > .block').length,
  height: s.getBoundingClientRect().height,
}))"""
TOC_JS = "() => [...document.querySelectorAll('nav.toc a')].map(a => a.getAttribute('href'))"
FIGURES_JS = """() => {
  const main = document.querySelector('main').getBoundingClientRect();
  return [...document.querySelectorAll('figure.block')].map(f => {
    const plot = f.querySelector('.plotly-graph-div');
    const svg = plot && plot.querySelector('.main-svg');
    const r = svg ? svg.getBoundingClientRect() : null;
    const cap = f.querySelector('figcaption');
    return {
      id: plot ? plot.id : null,
      svg: r ? [r.left - main.left, r.width, r.height, r.bottom] : null,
      main_width: main.width,
      drawn: plot ? plot.querySelectorAll(
        '.heatmaplayer image, .scatterlayer .trace path, .barlayer .point path').length : 0,
      title: ((plot && plot.querySelector('.gtitle')) || {}).textContent || '',
      caption: cap ? cap.textContent.trim() : '',
      caption_top: cap ? cap.getBoundingClientRect().top : null,
      links: cap ? [...cap.querySelectorAll('a')].map(a => a.getAttribute('href')) : [],
    };
  });
}"""
HEADER_JS = """() => Object.fromEntries([...document.querySelectorAll('.header-table')].map(t => [
  t.querySelector('h3').textContent,
  Object.fromEntries([...t.querySelectorAll('tr')].map(r =>
    [r.querySelector('th').textContent, r.querySelector('td').textContent])),
]))"""
# Sentence graphs: node markers carry the sentence text; arcs are line traces.
GRAPHS_JS = """() => [...document.querySelectorAll('#anchors .plotly-graph-div')]
  .filter(d => ((d.querySelector('.gtitle') || {}).textContent || '').startsWith('Sentence graph'))
  .map(d => ({
    id: d.id,
    nodes: d.data.filter(t => t.mode === 'markers+text')
      .reduce((n, t) => n + t.x.length, 0),
    edges: d.data.filter(t => t.mode === 'lines').length,
  }))"""
BLOCK_RECTS_JS = """() => [...document.querySelectorAll('main > section')].map(s =>
  [...s.querySelectorAll(':scope > .block')].map(b => {
    const r = b.getBoundingClientRect(); return [r.top, r.bottom];
  }))"""
# Where a reader points: the heatmap cell with a value nearest the centre (blank NaN cells,
# e.g. the upper triangle of a suppression matrix, have no label), else the marker or bar
# nearest the centre.
TARGET_JS = """(div) => {
  const area = div.querySelector('.nsewdrag').getBoundingClientRect();
  const cx = area.left + area.width / 2, cy = area.top + area.height / 2;
  let best = null, bestD = Infinity;
  const keep = (x, y) => {
    const d = (x - cx) ** 2 + (y - cy) ** 2;
    if (d < bestD) { bestD = d; best = [x, y]; }
  };
  const hm = div.calcdata.find(cd => cd[0].trace.type === 'heatmap');  // decoded values
  if (hm) {
    const box = div.getBoundingClientRect(), xa = div._fullLayout.xaxis, ya = div._fullLayout.yaxis;
    hm[0].z.forEach((row, i) => Array.from(row).forEach((v, j) => {
      if (v !== null && Number.isFinite(v)) {
        keep(box.left + xa._offset + xa.l2p(j), box.top + ya._offset + ya.l2p(i));
      }
    }));
    return best;
  }
  for (const p of div.querySelectorAll('.scatterlayer .point, .barlayer .point')) {
    const r = p.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) continue;
    keep(r.left + r.width / 2, r.top + r.height / 2);
  }
  return best;
}"""


def test_no_console_or_page_errors(loaded: LoadedPage):
    assert loaded.console_errors == []
    assert loaded.page_errors == []
    assert loaded.failed == []


def test_nothing_leaves_the_local_file(loaded: LoadedPage):
    assert loaded.blocked == []
    assert [u for u in loaded.requests if not u.startswith(LOCAL_SCHEMES)] == []
    assert loaded.requests[0] == loaded.report.path.resolve().as_uri()


def test_every_section_has_a_title_and_content(loaded: LoadedPage):
    sections = loaded.page.evaluate(SECTIONS_JS)
    assert sections, "the report has no sections"
    for s in sections:
        assert s["title"].strip(), f"section {s['id']!r} has no title"
        assert s["blocks"] > 0 and s["height"] > 50, f"section {s['id']!r} is empty"
    assert loaded.page.evaluate(TOC_JS) == [f"#{s['id']}" for s in sections]
    missing = set(loaded.report.parts) - {s["id"] for s in sections}
    assert not missing, f"demo parts without a section: {sorted(missing)}"


def test_header_gives_the_time_of_every_part(loaded: LoadedPage):
    tables = loaded.page.evaluate(HEADER_JS)
    assert "Time per part" in tables, f"no time-per-part table in the header: {sorted(tables)}"
    times = tables["Time per part"]
    for part in loaded.report.parts:
        assert part in times, f"no time for part {part!r}"
        assert times[part].endswith(" s") and "unfinished" not in times[part], times[part]
    assert "total" in times


def test_anchors_sentence_graph_has_sentences_and_dependencies(loaded: LoadedPage):
    if "anchors" not in loaded.report.parts:
        pytest.skip("the demo ran without the anchors part")
    graphs = loaded.page.evaluate(GRAPHS_JS)
    assert graphs, "the anchors section has no sentence graph"
    for g in graphs:
        assert g["nodes"] >= 2, f"{g['id']}: {g['nodes']} sentence node(s)"
        assert g["edges"] >= 1, f"{g['id']}: no dependency arcs"
    plot = loaded.page.locator(f"#{graphs[0]['id']}")
    plot.scroll_into_view_if_needed()
    node = plot.locator(".scatterlayer .point").last
    box = node.bounding_box()
    assert box is not None, "the graph's nodes are not drawn"
    loaded.page.mouse.move(box["x"] + box["width"] / 2 - 6, box["y"] + box["height"] / 2 - 6)
    loaded.page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2, steps=3)
    label = plot.locator(".hoverlayer .hovertext")
    label.first.wait_for(state="visible", timeout=5_000)
    assert "importance" in (label.first.text_content() or ""), "node hover without its text"
    loaded.page.mouse.move(0, 0)


def test_every_figure_is_drawn_with_its_caption_below(loaded: LoadedPage):
    figures = loaded.page.evaluate(FIGURES_JS)
    assert figures, "the report has no figures"
    assert loaded.page.locator(PLOTS).count() == len(figures)
    report_dir = loaded.report.path.parent
    for f in figures:
        name = f["id"] or "a figure without a plot"
        assert f["svg"] is not None, f"{name}: no .main-svg"
        left, width, height, bottom = f["svg"]
        assert width > 200 and height > 200, f"{name}: drawn at {width}x{height}"
        assert left >= -1 and left + width <= f["main_width"] + 1, f"{name}: wider than the page"
        assert f["drawn"] > 0, f"{name}: no heatmap, markers, lines or bars drawn"
        assert f["title"].strip(), f"{name}: no title"
        assert f["caption"], f"{name}: no caption"
        assert f["caption_top"] >= bottom - 1, f"{name}: caption overlaps the figure"
        for href in f["links"]:
            assert (report_dir / href).is_file(), f"{name}: static copy {href} missing"


def test_blocks_do_not_overlap(loaded: LoadedPage):
    for blocks in loaded.page.evaluate(BLOCK_RECTS_JS):
        for (_, prev_bottom), (top, _) in itertools.pairwise(blocks):
            assert top >= prev_bottom - 1, f"blocks overlap: {prev_bottom} > {top}"


def test_hover_shows_a_label_on_every_heatmap_and_point_figure(loaded: LoadedPage):
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page = loaded.page
    hovered = 0
    for i in range(page.locator(PLOTS).count()):
        plot = page.locator(PLOTS).nth(i)
        plot.scroll_into_view_if_needed()
        target = plot.evaluate(TARGET_JS)
        if target is None:  # no heatmap, marker or bar to point at (e.g. lines only)
            continue
        name = plot.get_attribute("id")
        page.mouse.move(target[0] - 8, target[1] - 8)
        page.mouse.move(target[0], target[1], steps=4)
        label = plot.locator(".hoverlayer .hovertext")
        try:
            label.first.wait_for(state="visible", timeout=5_000)
        except PlaywrightTimeout:
            pytest.fail(f"{name}: no hover label at {target} (plot {i + 1} of the page)")
        text = label.first.text_content() or ""
        assert any(ch.isdigit() for ch in text), f"{name}: hover label {text!r} has no value"
        if hovered == 0:
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            plot.screenshot(path=str(ARTIFACTS / "hover.png"))
        hovered += 1
    page.mouse.move(0, 0)
    assert hovered > 0, "no figure to hover"


def test_narrow_window_reflows_without_horizontal_scrolling(loaded: LoadedPage):
    page = loaded.page
    page.set_viewport_size({"width": 720, "height": VIEWPORT["height"]})
    try:
        page.wait_for_function(
            "() => [...document.querySelectorAll('.main-svg')]"
            ".every(s => s.getBoundingClientRect().right <= window.innerWidth)",
            timeout=90_000,  # every figure of the report resizes, one after another
        )
        assert page.evaluate("() => document.documentElement.scrollWidth") <= 720
    finally:
        page.set_viewport_size(VIEWPORT)
        page.wait_for_timeout(300)  # plotly's debounced resize


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])


def test_screenshots_of_the_page_and_each_section(loaded: LoadedPage):
    page = loaded.page
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for old in ARTIFACTS.glob("*.png"):
        if old.name != "hover.png":
            old.unlink()
    page.mouse.move(0, 0)
    full = ARTIFACTS / "full-page.png"
    page.screenshot(path=str(full), full_page=True)
    width, height = _png_size(full)
    assert width == VIEWPORT["width"] and height > VIEWPORT["height"]
    sections = page.locator("main > section")
    for i in range(sections.count()):
        section = sections.nth(i)
        shot = ARTIFACTS / f"section-{i + 1:02d}-{section.get_attribute('id')}.png"
        section.screenshot(path=str(shot))
        assert min(_png_size(shot)) > 50
