"""``mechscope demo``: every workflow on the demo model, one run directory, one report.

Each part is a ``demo(run, lm, quick)`` function of its workflow; parts save their results in
the run directory (sharded where they loop over samples), so an interrupted demo resumes
where it stopped. A part that returned is marked done in the manifest with its wall time;
a rerun skips it, and a rerun of a finished demo loads no model and only rebuilds the
report, in seconds.
"""

from __future__ import annotations

import importlib
import time
from pathlib import Path

from rich.console import Console

from mechscope.demo_timing import Session, TimeLeft
from mechscope.errors import InputError
from mechscope.models.options import ModelOptions
from mechscope.progress import shared_progress
from mechscope.runs import RunDir, weights_fingerprint
from mechscope.runs.rundir import MANIFEST_FILE
from mechscope.workflows import import_optional, workflows


def demo_parts() -> list[tuple[str, str]]:
    """(part name, module holding ``demo(run, lm, quick)``) of every registered workflow with a
    demo part, in report order (see :mod:`mechscope.workflows`)."""
    return [(w.name, w.module("demo")) for w in workflows() if w.demo]


def available_parts() -> list[str]:
    """The parts whose workflow is installed, in report order."""
    return [name for name, module in demo_parts() if import_optional(module) is not None]


def select_parts(only: list[str] | None) -> list[str]:
    """``only`` (checked against the known parts) in report order, or every available part."""
    names = [name for name, _ in demo_parts()]
    unknown = sorted(set(only or []) - set(names))
    if unknown:
        raise InputError(f"parts among {', '.join(names)}", field=f"--only {unknown[0]}")
    return [p for p in available_parts() if not only or p in only]


def finished(out: Path, parts: list[str]) -> bool:
    """Whether ``out`` is a run in which every one of ``parts`` is marked done."""
    if not (out / MANIFEST_FILE).is_file():
        return False
    run = RunDir.open(out)
    return all(run.part_done(p) for p in parts)


def run_demo(
    out: Path,
    *,
    model: str | ModelOptions,
    quick: bool = False,
    only: list[str] | None = None,
    argv: list[str] | None = None,
    console: Console | None = None,
) -> Path:
    """Run the demo parts into ``out`` (resuming it if it exists) and build its report.

    Prints a live display (part, sample, time left) while it runs and a table of the time
    of each part at the end; the same times go to the manifest and the report. ``model`` is
    a spec or the full :class:`~mechscope.models.options.ModelOptions` (dtype, device,
    threads, memory, card).
    """
    from mechscope.report import build_report

    options = model if isinstance(model, ModelOptions) else ModelOptions(model=model)
    model = options.model
    console = console or Console(stderr=True)
    start = time.perf_counter()
    selected = select_parts(only)
    config = {"model": model, "quick": quick, "parts": selected}
    session = Session()
    lm = None
    if finished(out, selected):  # nothing to compute: check the config, skip the model
        run = RunDir.create(out.parent, out.name, config, model_spec=model, argv=argv)
    else:
        t0 = time.perf_counter()
        lm = options.load()
        fingerprint = weights_fingerprint(lm.model)
        session.steps["load model"] = time.perf_counter() - t0
        run = RunDir.create(
            out.parent,
            out.name,
            config,
            model_spec=model,
            model_fingerprint=fingerprint,
            argv=argv,
        )
        run.record_timing("load model", session.steps["load model"])
    try:
        _run_parts(run, lm, selected, quick, session, console)
    except KeyboardInterrupt:
        run.finish("interrupted")
        raise
    except Exception:
        run.finish("failed")
        raise
    run.finish()
    t0 = time.perf_counter()
    report = build_report(run)
    session.steps["report"] = time.perf_counter() - t0
    parts = run.manifest.get("parts", {})
    console.print(session.table(parts, time.perf_counter() - start))
    return report


def _run_parts(
    run: RunDir,
    lm,
    selected: list[str],
    quick: bool,
    session: Session,
    console: Console,
) -> None:
    """Each part not yet done, under one live display; times into the manifest."""
    eta = TimeLeft(quick)
    with shared_progress(console) as progress:
        overall = progress.add_task("demo", total=len(selected))
        for i, name in enumerate(selected):
            if run.part_done(name):
                session.status[name] = "reused"
                progress.advance(overall)
                continue
            label = f"demo {i + 1}/{len(selected)} · {name}"
            progress.update(overall, description=label, finish_at=eta.finish_at(selected[i:]))
            progress.console.print(f"[bold]{label}[/bold] …")
            fresh = name not in run.manifest.get("parts", {})
            module = importlib.import_module(dict(demo_parts())[name])
            t0 = time.perf_counter()
            done = False
            try:
                module.demo(run, lm, quick)
                done = True
            finally:
                seconds = time.perf_counter() - t0
                run.record_part(name, seconds, done=done)
                session.seconds[name] = seconds
                session.status[name] = ("ran" if fresh else "resumed") if done else "stopped"
            if fresh:
                eta.observe(name, seconds)
            progress.console.print(f"[bold]{label}[/bold] done in {seconds:.1f} s")
            progress.advance(overall)
        progress.update(overall, description="demo", finish_at=None)
