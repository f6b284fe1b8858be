"""Fixtures for the end-to-end tests: a real quick demo, and its report in headless Chromium.

The demo runs as a user would run it (``mechscope demo --quick`` in a subprocess) on a tiny
model every part accepts (``demo_model.py``), with every part, so the report holds every
section the demo can produce. ``$MECHSCOPE_E2E_RUN`` points the tests at a finished demo
run directory instead (e.g. the full demo on smollm2-135m); ``$MECHSCOPE_E2E_PARTS``
(comma-separated) limits the parts. The browser is Debian's ``/usr/bin/chromium`` driven
by Playwright's Python API; without either the browser tests skip and say which is missing
(``scripts/install_browser.sh``, run by ``make test``, installs Chromium).

The layout test also reads two more reports: the parts that print what the model wrote
(overview, steering, anchors) on the demo model trained from another seed, so it passes for
more than the text one model on one processor happens to write; and the adversarial-text
demo (``adversarial_demo.py``: 40-character tokens, CJK and emoji in its samples).

With pytest-xdist each model and demo is built once for all workers (a file lock in the
session's shared temporary folder).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from adversarial_demo import PARTS as ADVERSARIAL_PARTS
from browser_helpers import (
    CHROMIUM,
    CHROMIUM_ARGS,
    FITTED_JS,
    LOCAL_SCHEMES,
    OPEN_ALL_JS,
    VIEWPORT,
    LoadedPage,
    Report,
)
from demo_helpers import demo_command, demo_env
from demo_model import save_demo_model
from filelock import FileLock

HERE = Path(__file__).parent
SEED_PARTS = ["overview", "steering", "anchors"]  # the parts whose tables hold generated text


def _shared_root(tmp_path_factory) -> Path:
    """A folder all xdist workers of this session see (each has its own basetemp below it)."""
    root = tmp_path_factory.getbasetemp()
    return root.parent if os.environ.get("PYTEST_XDIST_WORKER") is not None else root


def _parts() -> list[str]:
    raw = os.environ.get("MECHSCOPE_E2E_PARTS", "").strip()
    return [p.strip() for p in raw.split(",") if p.strip()] if raw and raw != "all" else []


@pytest.fixture(scope="session")
def demo_model(tmp_path_factory) -> Path:
    """The tiny demo model's directory, built once per session."""
    return _model_dir(tmp_path_factory)


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory) -> Path:
    """A finished quick demo: ``$MECHSCOPE_E2E_RUN``, or one run now on the tiny demo model."""
    given = os.environ.get("MECHSCOPE_E2E_RUN")
    if given:
        if not (Path(given) / "report.html").is_file():
            pytest.fail(f"MECHSCOPE_E2E_RUN={given} has no report.html")
        return Path(given)
    out = _shared_root(tmp_path_factory) / "e2e-demo"
    return _built(out, lambda: demo_command(out, _model_dir(tmp_path_factory), _parts()))


def _built(out: Path, command) -> Path:
    """``out``, a finished demo: run ``command()`` once for all workers unless it is there."""
    with FileLock(f"{out}.lock"):
        if not (out / "report.html").is_file():
            cmd = [str(part) for part in command()]
            done = subprocess.run(
                cmd, env=demo_env(), capture_output=True, text=True, timeout=900, check=False
            )
            if done.returncode != 0:
                pytest.fail(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return out


def _model_dir(tmp_path_factory, seed: int = 0) -> Path:
    """Build the tiny demo model (from ``seed``) once for all workers (written aside, then
    renamed)."""
    root = _shared_root(tmp_path_factory)
    path = root / ("e2e-model" if seed == 0 else f"e2e-model-seed-{seed}")
    with FileLock(f"{path}.lock"):
        if not (path / "config.json").is_file():
            tmp = path.with_name(f"{path.name}.tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            save_demo_model(tmp, seed)
            tmp.rename(path)
    return path


@pytest.fixture(scope="session")
def demo_report(demo_run: Path) -> Report:
    """The demo's ``report.html`` and the parts its config says it ran."""
    return _report(demo_run)


def _report(run: Path) -> Report:
    config = yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8")) or {}
    return Report(run / "report.html", tuple(config.get("parts") or ()))


@pytest.fixture(scope="session")
def seed_report(tmp_path_factory) -> Report:
    """The parts of the quick demo that show what the model wrote, on the demo model trained
    from seed 1: other predictions, continuations and reasoning traces."""
    out = _shared_root(tmp_path_factory) / "e2e-demo-seed-1"
    return _report(
        _built(out, lambda: demo_command(out, _model_dir(tmp_path_factory, 1), SEED_PARTS))
    )


@pytest.fixture(scope="session")
def adversarial_report(tmp_path_factory) -> Report:
    """The adversarial-text demo (``adversarial_demo.py``), its model built with it."""
    out = _shared_root(tmp_path_factory) / "e2e-adversarial"
    report = _report(_built(out, lambda: [sys.executable, HERE / "adversarial_demo.py", out]))
    assert report.parts == ADVERSARIAL_PARTS
    return report


def _chromium_runs() -> str | None:
    """Why ``/usr/bin/chromium`` cannot be used here, or None when it starts."""
    if not CHROMIUM.exists():
        return f"{CHROMIUM} not found (scripts/install_browser.sh installs it; needs root + apt)"
    try:
        done = subprocess.run(
            [str(CHROMIUM), "--headless", "--no-sandbox", "--version"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{CHROMIUM} does not start: {exc}"
    if done.returncode != 0:
        return f"{CHROMIUM} --version exited {done.returncode}: {done.stderr.strip()[:200]}"
    return None


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    """Headless Debian Chromium (never a browser downloaded by Playwright)."""
    why = _chromium_runs()
    if why:
        pytest.skip(why)
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
    """The report loaded with every disclosure open and every figure drawn at its width; every
    non-local request blocked and recorded."""
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
    page.set_default_timeout(120_000)  # a full demo's report on two busy cores is slow to draw
    page.goto(demo_report.path.resolve().as_uri(), wait_until="load")
    page.wait_for_function(
        "() => [...document.querySelectorAll('.js-plotly-plot, .plotly-graph-div')]"
        ".every(d => d.querySelector('.main-svg'))",
        timeout=30_000,
    )
    page.evaluate(OPEN_ALL_JS)  # these tests look at everything; the layout test at less
    page.wait_for_function(FITTED_JS, timeout=30_000)
    yield state
    context.close()
