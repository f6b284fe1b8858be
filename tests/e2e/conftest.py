"""Fixtures for the report's end-to-end test: a real demo report, opened in headless Chromium.

The report is built by ``mechscope demo`` in a subprocess (as a user would run it), or taken
from ``$MECHSCOPE_E2E_RUN`` (a finished demo run directory, e.g. the full demo in CI). The
browser is Debian's ``/usr/bin/chromium`` driven by Playwright's Python API; without either
the tests skip and say which is missing (``scripts/install_browser.sh`` installs Chromium).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser_helpers import (
    CHROMIUM,
    CHROMIUM_ARGS,
    DEFAULT_PARTS,
    LOCAL_SCHEMES,
    VIEWPORT,
    LoadedPage,
    Report,
)
from filelock import FileLock


def _parts() -> tuple[str, ...]:
    raw = os.environ.get("MECHSCOPE_E2E_PARTS", "").strip()
    if raw == "all":
        return ()
    return tuple(p.strip() for p in raw.split(",") if p.strip()) if raw else DEFAULT_PARTS


@pytest.fixture(scope="session")
def demo_report(tmp_path_factory) -> Report:
    """``report.html`` of ``$MECHSCOPE_E2E_RUN``, or of a fresh quick demo on ``tiny:llama``."""
    given = os.environ.get("MECHSCOPE_E2E_RUN")
    if given:
        path = Path(given) / "report.html"
        if not path.is_file():
            pytest.fail(f"MECHSCOPE_E2E_RUN={given} has no report.html")
        return Report(path, ())
    # Parallel workers share one build: each session fixture runs once per worker.
    shared = os.environ.get("PYTEST_XDIST_WORKER") is not None
    root = tmp_path_factory.getbasetemp()
    root = root.parent if shared else root
    out, parts = root / "e2e-demo", _parts()
    with FileLock(str(root / "e2e-demo.lock")):
        if not (out / "report.html").is_file():
            _run_demo(out, parts)
    return Report(out / "report.html", parts)


def _run_demo(out: Path, parts: tuple[str, ...]) -> None:
    """``mechscope demo --quick`` on ``tiny:llama``, as a user would run it."""
    script = Path(sys.executable).with_name("mechscope")  # the installed command, if any
    cmd = [str(script)] if script.is_file() else [sys.executable, "-m", "mechscope.cli"]
    cmd += ["demo", "--quick", "--model", "tiny:llama"]
    cmd += ["--out", str(out)] + [arg for p in parts for arg in ("--only", p)]
    env = os.environ | {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env |= {"MECHSCOPE_PROGRESS": "0"}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200, check=False)
    if done.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stderr[-3000:]}")


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    """Headless Debian Chromium (never a browser downloaded by Playwright)."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} not found (run scripts/install_browser.sh as root)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        pytest.skip(f"playwright is not importable ({exc}); pip install playwright")
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def loaded(browser, demo_report: Report) -> Iterator[LoadedPage]:
    """The report loaded, every figure drawn, every non-local request blocked and recorded."""
    context = browser.new_context(viewport=VIEWPORT, device_scale_factor=1)
    page = context.new_page()
    state = LoadedPage(page, demo_report)

    def route(r) -> None:
        if r.request.url.startswith(LOCAL_SCHEMES):
            r.continue_()
        else:
            state.blocked.append(r.request.url)
            r.abort()

    context.route("**/*", route)
    page.on("console", lambda m: m.type == "error" and state.console_errors.append(m.text))
    page.on("pageerror", lambda e: state.page_errors.append(str(e)))
    page.on("request", lambda r: state.requests.append(r.url))
    page.on("requestfailed", lambda r: state.failed.append(f"{r.url}: {r.failure}"))
    page.goto(demo_report.path.resolve().as_uri(), wait_until="load")
    page.wait_for_function(
        "() => [...document.querySelectorAll('.js-plotly-plot, .plotly-graph-div')]"
        ".every(d => d.querySelector('.main-svg'))",
        timeout=30_000,
    )
    yield state
    context.close()
