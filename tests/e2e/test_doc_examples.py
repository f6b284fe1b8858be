"""Every Python example of README.md and of the patching, attribution and circuit pages runs as
written, so the documentation never goes stale.

The examples name the demo model; here they run on the tiny demo model (``demo_model.py``:
same family as smollm2-135m, with single-token names and a long context), each in a fresh
namespace and a fresh working directory. A block that needs an optional cluster package
(Ray) is left out.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = ("README.md", "docs/patching.md", "docs/heads.md", "docs/circuits.md")
BLOCK = re.compile(r"^ *```python\n(.*?)^ *```", re.S | re.M)
HEADING = re.compile(r"^#+ (.+)$", re.M)
DEMO_MODEL = '"smollm2-135m"'
OPTIONAL = ("import ray",)


def examples(page: str) -> list[tuple[str, str]]:
    """``(id, code)`` for every Python block of ``page`` (id: the page and its heading)."""
    text = (REPO / page).read_text(encoding="utf-8")
    out = []
    for m in BLOCK.finditer(text):
        headings = HEADING.findall(text[: m.start()])
        title = headings[-1].split(":")[0].strip() if headings else "top"
        out.append((f"{Path(page).stem}: {title}", m.group(1)))
    return out


EXAMPLES = [e for page in PAGES for e in examples(page)]
RUNNABLE = [(i, code) for i, code in EXAMPLES if not any(o in code for o in OPTIONAL)]


def test_the_readme_has_an_example_per_workflow():
    titles = " ".join(i for i, _ in EXAMPLES if i.startswith("README")).lower()
    for workflow in ("lens", "patching", "attribution", "anchors", "distill"):
        assert workflow in titles, f"no README example for {workflow}"
    assert all(DEMO_MODEL in code for _, code in RUNNABLE), "an example without the demo model"


@pytest.mark.parametrize("code", [c for _, c in RUNNABLE], ids=[i for i, _ in RUNNABLE])
def test_doc_example_runs(code: str, demo_model: Path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    source = code.replace(DEMO_MODEL, repr(str(demo_model)))
    exec(compile(source, "documentation example", "exec"), {})
