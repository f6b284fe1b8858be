"""How tall a report is in screens, where each section's key figure lands, and screenshots.

Used by the layout test (``test_report_layout.py``) and runnable on any report, e.g. to keep
screenshots of an older report beside the current one::

    python tests/e2e/report_screens.py runs/demo-quick/report.html test-artifacts/before

It writes ``full-page.png``, one ``screen-NN-<section>.png`` per section (the first screen of
the section, as a reader lands on it from the summary) and ``layout.json`` (the page height
in screens, and per section where its first figure ends relative to the section's top).

With ``--figure ID`` it writes one figure of the report (its plot and caption) to a PNG
instead, showing the hover label of the first point whose label holds ``--hover TEXT``::

    python tests/e2e/report_screens.py runs/dallas/report.html docs/img/graphs-dallas.png \
        --figure fig-graphs-01 --hover "feature 195"
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from browser_helpers import VIEWPORT

#: Per section: its top, its height, and its first figure outside any disclosure (the key
#: figure): where its plot ends; plus whether the section opens with its finding.
LAYOUT_JS = """() => [...document.querySelectorAll('main > section')].map(s => {
  const top = s.getBoundingClientRect().top + window.scrollY;
  const first = s.querySelector(':scope > .block');
  const key = s.querySelector(':scope > figure.block .main-svg');
  const r = key ? key.getBoundingClientRect() : null;
  return {
    id: s.id,
    top: top,
    height: s.getBoundingClientRect().height,
    opens_with_finding: !!first && first.classList.contains('finding'),
    key_figure_bottom: r ? r.bottom + window.scrollY - top : null,
  };
})"""


#: Marks the widest data table (the one with more columns on a tie) and returns its width.
WIDEST_TABLE_JS = """() => {
  let best = null, key = [-1, -1];
  for (const t of document.querySelectorAll('main table.data')) {
    const k = [Math.round(t.getBoundingClientRect().width), t.rows[0].cells.length];
    if (k[0] > key[0] || (k[0] === key[0] && k[1] > key[1])) { best = t; key = k; }
  }
  if (best) best.closest('details').setAttribute('data-widest-table', '');
  return key[0];
}"""


def page_height(page) -> int:
    """The document's height in CSS pixels."""
    return int(page.evaluate("() => document.documentElement.scrollHeight"))


def layout(page) -> dict:
    """The page height (px and screens) and :data:`LAYOUT_JS`'s record of every section."""
    height = page_height(page)
    return {
        "viewport": VIEWPORT,
        "height_px": height,
        "screens": round(height / VIEWPORT["height"], 2),
        "sections": page.evaluate(LAYOUT_JS),
    }


def capture(page, out: Path) -> dict:
    """Full-page and per-section first-screen screenshots into ``out``; return :func:`layout`."""
    out.mkdir(parents=True, exist_ok=True)
    page.mouse.move(0, 0)
    page.screenshot(path=str(out / "full-page.png"), full_page=True)
    record = layout(page)
    for i, section in enumerate(record["sections"]):
        page.evaluate(f"() => window.scrollTo(0, {section['top']})")
        page.wait_for_timeout(100)
        page.screenshot(path=str(out / f"screen-{i + 1:02d}-{section['id']}.png"))
    page.evaluate("() => window.scrollTo(0, 0)")
    (out / "layout.json").write_text(json.dumps(record, indent=2), encoding="utf-8")
    return record


def widest_table(page, path: Path) -> None:
    """A screenshot of the widest data table with its title and caption (its disclosure must
    be open), to ``path``; none when the report has no table."""
    if page.evaluate(WIDEST_TABLE_JS) < 0:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    page.mouse.move(0, 0)
    page.locator("[data-widest-table]").first.screenshot(path=str(path))


#: Show the hover label of the first point (of a node trace) whose label holds the text.
HOVER_JS = """([div, text]) => {
  const d = document.getElementById(div);
  for (const [i, t] of d.data.entries()) {
    const j = (t.hovertext || []).findIndex(h => typeof h === 'string' && h.includes(text));
    if (j >= 0) { Plotly.Fx.hover(d, [{curveNumber: i, pointNumber: j}]); return true; }
  }
  return false;
}"""


def figure_png(page, div_id: str, path: Path, hover: str | None = None) -> None:
    """One figure of the report (its plot and caption) to ``path``, with the hover label of
    the first point whose label holds ``hover`` shown."""
    block = page.locator(f"figure.block:has(#{div_id})")
    block.scroll_into_view_if_needed()
    page.mouse.move(0, 0)
    if hover is not None and not page.evaluate(HOVER_JS, [div_id, hover]):
        raise SystemExit(f"no point of {div_id} has {hover!r} in its hover label")
    page.wait_for_timeout(300)
    path.parent.mkdir(parents=True, exist_ok=True)
    block.screenshot(path=str(path))


def open_report(browser, report: Path):
    """A page of ``browser`` at :data:`VIEWPORT` with ``report`` loaded and every plot drawn."""
    context = browser.new_context(viewport=VIEWPORT, device_scale_factor=1)
    page = context.new_page()
    page.set_default_timeout(120_000)  # a full demo's report on two busy cores is slow to draw
    page.goto(report.resolve().as_uri(), wait_until="load")
    page.wait_for_function(
        "() => [...document.querySelectorAll('.js-plotly-plot, .plotly-graph-div')]"
        ".every(d => d.querySelector('.main-svg'))",
        timeout=60_000,
    )
    return context, page


def main(argv: list[str]) -> None:
    from browser_helpers import CHROMIUM, CHROMIUM_ARGS
    from playwright.sync_api import sync_playwright

    report, out = Path(argv[0]), Path(argv[1])
    options = dict(zip(argv[2::2], argv[3::2], strict=True))  # --figure ID, --hover TEXT
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        context, page = open_report(browser, report)
        if "--figure" in options:
            figure_png(page, options["--figure"], out, options.get("--hover"))
        else:
            record = capture(page, out)
        context.close()
        browser.close()
    if "--figure" in options:
        print(f"{out}: {options['--figure']} of {report}")
        return
    print(f"{record['height_px']} px = {record['screens']} screens of {VIEWPORT['height']} px")
    for s in record["sections"]:
        print(f"  {s['id']}: {s['height']:.0f} px, key figure ends at {s['key_figure_bottom']}")


if __name__ == "__main__":
    main(sys.argv[1:])
