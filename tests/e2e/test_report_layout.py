"""The demo's report reads as results, not as a log: measured in Chromium at 1,400 × 1,000.

As a reader first sees it (every disclosure closed): at most 12 screens; a summary at the
top with every section's finding; every section opening with its finding, then its key
figure, ending within the section's first screen; every table behind a disclosure. With
everything open: no tick label or title outside its figure, no short table cell wrapped, no
header label running into its value. Screenshots (full page, each section's first screen)
and the measured layout go to ``test-artifacts/report/layout/``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from browser_helpers import ARTIFACTS, FITTED_JS, OPEN_ALL_JS, VIEWPORT, Report
from report_screens import capture, open_report

pytestmark = [pytest.mark.browser]

MAX_SCREENS = 12
SHOTS = ARTIFACTS / "layout"
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
      '.cbtitle text');
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
# Table cells of short text (ids, names) and numbers: one line each.
WRAPPED_JS = """() => [...document.querySelectorAll('table.data td:not(.long)')].filter(td => {
  const line = parseFloat(getComputedStyle(td).lineHeight) || 20;
  return td.getBoundingClientRect().height > 1.6 * line + 8;
}).map(td => td.textContent.slice(0, 40))"""
TABLE_WIDTH_JS = """() => [...document.querySelectorAll('main table.data')].filter(t =>
  t.getBoundingClientRect().width > t.closest('section').getBoundingClientRect().width + 1
).map(t => t.closest('details').querySelector('summary').textContent.slice(0, 60))"""
HEADER_OVERLAP_JS = """() => [...document.querySelectorAll('.header-table tr')].filter(r => {
  const th = r.querySelector('th'), td = r.querySelector('td');
  return th.scrollWidth > th.clientWidth + 1 ||
    th.getBoundingClientRect().right > td.getBoundingClientRect().left + 1;
}).map(r => r.querySelector('th').textContent)"""


@pytest.fixture(scope="module")
def first_view(browser, demo_report: Report) -> Iterator[tuple[object, dict]]:
    """The report as a reader first sees it, screenshotted, and its measured layout."""
    context, page = open_report(browser, demo_report.path)
    record = capture(page, SHOTS)
    yield page, record
    context.close()


def test_the_report_is_at_most_12_screens(first_view):
    _, record = first_view
    assert record["viewport"] == VIEWPORT
    assert record["screens"] <= MAX_SCREENS, (
        f"the report is {record['height_px']} px = {record['screens']} screens of "
        f"{VIEWPORT['height']} px (at most {MAX_SCREENS}); see {SHOTS}/full-page.png"
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
    page, _ = first_view
    page.evaluate(OPEN_ALL_JS)
    page.wait_for_function(FITTED_JS, timeout=30_000)
    assert page.evaluate(CLIPPED_JS) == [], "labels drawn outside their figure"
    assert page.evaluate(WRAPPED_JS) == [], "short table cells wrapped over several lines"
    assert page.evaluate(TABLE_WIDTH_JS) == [], "tables wider than their section"
    assert page.evaluate(HEADER_OVERLAP_JS) == [], "header labels running into their values"
