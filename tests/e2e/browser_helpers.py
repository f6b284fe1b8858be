"""Shared constants and records of the report's browser test."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts" / "report"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1400, "height": 1000}  # the screen a report must read well on
#: Open every disclosure (tables, more figures, run details) and wait until each plot that
#: was drawn closed has been fitted to its place.
OPEN_ALL_JS = "() => document.querySelectorAll('details').forEach(d => { d.open = true; })"
FITTED_JS = """() => [...document.querySelectorAll('.js-plotly-plot')].every(d => {
  const svg = d.querySelector('.main-svg');
  return svg && Math.abs(svg.getBoundingClientRect().width - d.getBoundingClientRect().width) < 2;
})"""
#: URL schemes a self-contained report may load.
LOCAL_SCHEMES = ("file:", "data:", "blob:", "about:")


@dataclass
class Report:
    """A built report and the demo parts it was asked to contain (empty: unknown)."""

    path: Path
    parts: tuple[str, ...]


@dataclass
class LoadedPage:
    """The report open in Chromium, with everything the page said or asked for."""

    page: object  # playwright.sync_api.Page
    report: Report
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
