"""The demo's report reads as results, not as a log: measured in Chromium at 1,400 × 1,000.

As a reader first sees it (every disclosure closed): at most 12 screens; a summary at the
top with every section's finding; every section opening with its finding, then its key
figure, ending within the section's first screen; every table behind a disclosure. With
everything open: no label, title or graph node label outside its figure, no short table
cell wrapped, no text running out of its box, every cut text whole in its title, no header
label running into its value.

Every check runs on three reports, since a report must lay out whatever text a model writes
(``conftest.py``): the quick demo, its text-writing parts on a model trained from another
seed, and the adversarial-text demo (``adversarial_demo.py``), whose 40-character tokens, CJK
and emoji must reach table cells, captions, axis labels and the sentence graph. Screenshots
(full page, each section's first screen, the widest table) and the measured layout go to
``test-artifacts/report/layout/`` (the other two reports' to ``seed-1/`` and
``adversarial/`` below it).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from adversarial_demo import CJK, EMOJI, TOKEN
from browser_helpers import ARTIFACTS, FITTED_JS, OPEN_ALL_JS, VIEWPORT
from report_screens import capture, open_report, widest_table

pytestmark = [pytest.mark.browser]

MAX_SCREENS = 12
SHOTS = ARTIFACTS / "layout"
#: The reports laid out, by the name of their screenshots' folder, and their fixtures.
CONTENTS = {"demo": "demo_report", "seed-1": "seed_report", "adversarial": "adversarial_report"}
TOC_JS = """() => [...document.querySelectorAll('nav.toc li')].map(li => ({
  href: li.querySelector('a').getAttribute('href'),
  finding: (li.querySelector('.toc-finding') || {}).textContent || '',
}))"""
OUTSIDE_DISCLOSURES_JS = """() => ({
  tables: [...document.querySelectorAll('table.data, table.kv')]
    .filter(t => !t.closest('details')).length,
})"""
# Every label plotly drew (ticks, axis titles, figure title, legend) against its figure's box.
CLIPPED_JS = """() => {
  const out = [];
  for (const plot of document.querySelectorAll('.js-plotly-plot')) {
    const box = plot.querySelector('.main-svg').getBoundingClientRect();
    const labels = plot.querySelectorAll(
      '.xtick text, .ytick text, .g-xtitle text, .g-ytitle text, .gtitle, .legendtext, ' +
      '.cbtitle text, .annotation-text, .textpoint text');
    for (const t of labels) {
      const r = t.getBoundingClientRect();
      if (r.width === 0 || !t.textContent.trim()) continue;
      if (r.left < box.left - 1 || r.right > box.right + 1 || r.top < box.top - 1 ||
          r.bottom > box.bottom + 1) {
        out.push(`${plot.id}: '${t.textContent.slice(0, 40)}'`);
      }
    }
  }
  return out;
}"""
# Table cells of short text (ids, names, tokens) and numbers: their text on one line (the
# row may be taller, for a prose cell beside them).
WRAPPED_JS = """() => [...document.querySelectorAll(
  'table.data td:not(.long), table.data tbody th')].filter(td => {
  const line = parseFloat(getComputedStyle(td).lineHeight) || 20;
  const text = document.createRange();
  text.selectNodeContents(td);
  return text.getBoundingClientRect().height > 1.6 * line;
}).map(td => td.textContent.slice(0, 40))"""
# Text running out of its box: cells, captions, disclosure titles, findings.
OVERFLOW_JS = """() => [...document.querySelectorAll(
  'table.data td, table.data th, table.kv td, figcaption, .caption, .note, summary, ' +
  '.finding, .toc-finding, h1')].filter(el => el.scrollWidth > el.clientWidth + 1)
  .map(el => `${el.tagName.toLowerCase()}: ${el.textContent.trim().slice(0, 40)}`)"""
# A cut text: an ellipsis where it was cut, and every piece of it in its whole text (title).
CUT_JS = """() => [...document.querySelectorAll('.cut')].filter(el => {
  const pieces = el.textContent.split('…');
  return pieces.length < 2 || !pieces.every(p => el.title.includes(p.trim()));
}).map(el => el.textContent)"""
TABLE_WIDTH_JS = """() => [...document.querySelectorAll('main table.data')].filter(t =>
  t.getBoundingClientRect().width > t.closest('section').getBoundingClientRect().width + 1
).map(t => t.closest('details').querySelector('summary').textContent.slice(0, 60))"""
HEADER_OVERLAP_JS = """() => [...document.querySelectorAll('.header-table tr')].filter(r => {
  const th = r.querySelector('th'), td = r.querySelector('td');
  return th.scrollWidth > th.clientWidth + 1 ||
    th.getBoundingClientRect().right > td.getBoundingClientRect().left + 1;
}).map(r => r.querySelector('th').textContent)"""


@pytest.fixture(scope="module", params=list(CONTENTS))
def first_view(request, browser) -> Iterator[tuple[object, dict]]:
    """Each report as a reader first sees it, screenshotted, and its measured layout."""
    report = request.getfixturevalue(CONTENTS[request.param])
    context, page = open_report(browser, report.path)
    shots = SHOTS if request.param == "demo" else SHOTS / request.param
    record = capture(page, shots) | {"shots": shots}
    yield page, record
    context.close()


def test_the_report_is_at_most_12_screens(first_view):
    _, record = first_view
    assert record["viewport"] == VIEWPORT
    assert record["screens"] <= MAX_SCREENS, (
        f"the report is {record['height_px']} px = {record['screens']} screens of "
        f"{VIEWPORT['height']} px (at most {MAX_SCREENS}); see {record['shots']}/full-page.png"
    )


def test_every_section_opens_with_its_finding_then_its_key_figure(first_view):
    _, record = first_view
    assert record["sections"], "the report has no sections"
    for s in record["sections"]:
        assert s["opens_with_finding"], f"section {s['id']} does not open with its finding"
        bottom = s["key_figure_bottom"]
        assert bottom is not None, f"section {s['id']} shows no figure outside a disclosure"
        assert bottom <= VIEWPORT["height"], (
            f"section {s['id']}: its key figure ends {bottom:.0f} px below the section's top, "
            f"past its first screen ({VIEWPORT['height']} px)"
        )


def test_the_summary_lists_every_section_with_its_finding(first_view):
    page, record = first_view
    toc = page.evaluate(TOC_JS)
    assert [t["href"] for t in toc] == [f"#{s['id']}" for s in record["sections"]]
    for t in toc:
        assert len(t["finding"].strip()) > 20, f"{t['href']}: no finding in the summary"
        assert any(ch.isdigit() for ch in t["finding"]), f"{t['href']}: a finding without a number"


def test_tables_and_settings_sit_behind_disclosures(first_view):
    page, _ = first_view
    assert page.evaluate(OUTSIDE_DISCLOSURES_JS)["tables"] == 0


def test_opened_nothing_is_clipped_wrapped_or_cut_off(first_view):
    page, record = first_view
    page.evaluate(OPEN_ALL_JS)
    page.wait_for_function(FITTED_JS, timeout=30_000)
    widest_table(page, record["shots"] / "widest-table.png")
    assert page.evaluate(CLIPPED_JS) == [], "labels drawn outside their figure"
    assert page.evaluate(WRAPPED_JS) == [], "short table cells wrapped over several lines"
    assert page.evaluate(OVERFLOW_JS) == [], "text running out of its box"
    assert page.evaluate(CUT_JS) == [], "cut text without its whole text on hover"
    assert page.evaluate(TABLE_WIDTH_JS) == [], "tables wider than their section"
    assert page.evaluate(HEADER_OVERLAP_JS) == [], "header labels running into their values"


# Where the adversarial strings ended up: table cells (a cut cell's text is its title),
# captions, axis labels (ticks, axis and colour-bar titles) and the sentence graph (the
# sentences in its nodes' hover labels).
REACHED_JS = """() => {
  const texts = sel => [...document.querySelectorAll(sel)].map(e =>
    `${e.textContent} ${e.title || ''} ${(e.querySelector('.cut') || {}).title || ''}`);
  const graph = [...document.querySelectorAll('.js-plotly-plot')].find(d =>
    ((d.layout.title || {}).text || '').startsWith('Sentence graph'));
  return {
    cells: texts('table.data td'),
    captions: texts('figcaption, .caption'),
    axes: texts('.xtick text, .ytick text, .g-xtitle text, .g-ytitle text, .cbtitle text'),
    graph: graph ? graph.data.flatMap(t => [].concat(t.hovertext || [])) : [],
  };
}"""


@pytest.fixture(scope="module")
def adversarial_opened(browser, adversarial_report) -> Iterator[object]:
    """The adversarial-text demo's report with every disclosure open."""
    context, page = open_report(browser, adversarial_report.path)
    page.evaluate(OPEN_ALL_JS)
    page.wait_for_function(FITTED_JS, timeout=30_000)
    yield page
    context.close()


def test_the_adversarial_text_reaches_cells_captions_axes_and_the_sentence_graph(
    adversarial_opened,
):
    reached = adversarial_opened.evaluate(REACHED_JS)
    for where, texts in reached.items():
        joined = " ".join(texts)
        missing = [s for s in (TOKEN[:8], CJK[:4], EMOJI[:2]) if s not in joined]
        assert not missing, f"{where}: none of its texts holds {missing}"
