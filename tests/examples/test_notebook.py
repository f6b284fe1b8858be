"""The example notebook runs top to bottom, and its results render as HTML and figures."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "research_api.ipynb"
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("nbclient") is None or importlib.util.find_spec("ipykernel") is None,
    reason="nbclient and ipykernel (dev extras) are needed to run notebooks",
)


def test_example_notebook_executes_and_renders(stories_path: Path, monkeypatch) -> None:
    import nbclient
    import nbformat

    monkeypatch.setenv("MECHSCOPE_NOTEBOOK_MODEL", str(stories_path))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3").execute(
        cwd=str(NOTEBOOK.parent), env=dict(os.environ)
    )
    html = [
        out["data"]["text/html"]
        for cell in nb.cells
        for out in cell.get("outputs", [])
        if "text/html" in out.get("data", {})
    ]
    assert any("<strong>Cache</strong>" in h for h in html)
    assert any("<strong>LogitAttribution</strong>" in h for h in html)
    assert any("<strong>Components</strong>" in h for h in html)
    assert any("plotly" in h for h in html)  # the figure
    texts = "".join(
        "".join(out.get("text", "")) + str(out.get("data", {}).get("text/plain", ""))
        for cell in nb.cells
        for out in cell.get("outputs", [])
    )
    assert "True" in texts  # the module site's input is mlp_pre
