"""Write the API reference (HTML, pdoc) of the public API into a folder (default build/api).

The reference covers ``mechscope`` (the everyday kit: every name of ``mechscope.__all__``,
documented where it is re-exported, with the module it comes from) and the packages a
researcher's own experiments use: ``mechscope.engine`` and ``mechscope.models``. The
workflows have their own pages in ``docs/``.

Run: ``python scripts/api_docs.py [OUT]`` (``make docs-api``).
"""

from __future__ import annotations

import sys
from pathlib import Path

#: Modules documented, and the subpackages left out (workflows, CLI, report machinery).
MODULES = ("mechscope", "mechscope.engine", "mechscope.models")
EXCLUDED = (
    "anchors",
    "cli",
    "data",
    "demo",
    "demo_timing",
    "distill",
    "heads",
    "lazy",
    "lens",
    "overview",
    "patching",
    "progress",
    "report",
    "runs",
    "stats",
    "steering",
    "studies",
    "workflows",
)


def build(out: Path, modules: tuple[str, ...] = MODULES) -> Path:
    """Render the reference of ``modules`` into ``out``; returns the page of ``mechscope``."""
    import importlib

    import pdoc

    for module in modules:  # resolve the lazy exports, so pdoc sees them
        package = importlib.import_module(module)
        for name in getattr(package, "__all__", ()):
            getattr(package, name)
    pdoc.render.configure(docformat="markdown", footer_text="mechscope API reference")
    excluded = [f"!mechscope.{name}" for name in EXCLUDED]
    pdoc.pdoc(*modules, *excluded, output_directory=out)
    return out / "mechscope.html"


if __name__ == "__main__":
    page = build(Path(sys.argv[1] if len(sys.argv) > 1 else "build/api"))
    print(f"wrote {page}")
