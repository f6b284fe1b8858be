"""``mechscope demo``: every workflow on the demo model, one run directory, one report.

Each part is a ``demo(run, lm, quick)`` function of its workflow; parts save their results in
the run directory (sharded where they loop over samples), so an interrupted demo resumes and
a finished one rebuilds its report in seconds.
"""

from __future__ import annotations

import importlib
import time
from pathlib import Path

from rich.console import Console

from mechscope.errors import InputError
from mechscope.models import load_model
from mechscope.runs import RunDir, weights_fingerprint

#: (part name, module holding ``demo(run, lm, quick)``), in report order.
PARTS = [
    ("overview", "mechscope.overview.demo"),
    ("lens", "mechscope.lens.demo"),
    ("lens_study", "mechscope.lens.study.demo"),
    ("patching", "mechscope.patching.demo"),
    ("attribution", "mechscope.attribution.demo"),
    ("anchors", "mechscope.anchors.demo"),
    ("distill", "mechscope.distill.demo"),
]


def available_parts() -> list[str]:
    parts = []
    for name, module in PARTS:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name is None or not module.startswith(exc.name):
                raise
            continue
        parts.append(name)
    return parts


def run_demo(
    out: Path,
    *,
    model: str,
    quick: bool = False,
    only: list[str] | None = None,
    argv: list[str] | None = None,
) -> Path:
    """Run the demo parts into ``out`` (resuming it if it exists) and build its report."""
    from mechscope.report import build_report

    console = Console(stderr=True)
    parts = available_parts()
    unknown = sorted(set(only or []) - {name for name, _ in PARTS})
    if unknown:
        raise InputError(
            f"parts among {', '.join(n for n, _ in PARTS)}", field=f"--only {unknown[0]}"
        )
    selected = [p for p in parts if not only or p in only]
    lm = load_model(model)
    config = {"model": model, "quick": quick, "parts": selected}
    run = RunDir.create(
        out.parent,
        out.name,
        config,
        model_spec=model,
        model_fingerprint=weights_fingerprint(lm.model),
        argv=argv,
    )
    for name in selected:
        module = importlib.import_module(dict(PARTS)[name])
        console.print(f"[bold]demo[/bold] {name} …")
        start = time.perf_counter()
        with run.timed(name):
            module.demo(run, lm, quick)
        console.print(f"[bold]demo[/bold] {name} done in {time.perf_counter() - start:.1f}s")
    run.finish()
    return build_report(run)
