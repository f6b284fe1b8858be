"""Build the self-contained HTML report of a run directory.

One file, no network: plotly.js is inlined once from the installed plotly package,
CSS is inlined, fonts are the reader's system fonts. The report can be mailed,
archived or opened on an air-gapped machine years later and still work. Every
figure also gets static PNG, SVG and PDF copies in ``figures/``.

The page opens with the findings of every section (each links to its section), then the
sections, each led by its finding and key figure; the run's details (command, environment,
times) and everything secondary sit behind disclosures.
"""

from __future__ import annotations

import datetime as _dt
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from mechscope.report.registry import load_sections
from mechscope.report.render_blocks import kv_html, markdown_html, render_block
from mechscope.report.sections import FindingBlock, registered_sections
from mechscope.runs.atomic import atomic_write_text
from mechscope.runs.manifest import now_iso, package_version
from mechscope.runs.rundir import RunDir

TEMPLATE = "report.html.j2"
STYLESHEET = "report.css"


def _asset(name: str) -> str:
    return (resources.files("mechscope.report") / "assets" / name).read_text(encoding="utf-8")


def _duration(start: str | None, end: str | None) -> str | None:
    if not start or not end:
        return None
    seconds = (_dt.datetime.fromisoformat(end) - _dt.datetime.fromisoformat(start)).total_seconds()
    return format_seconds(seconds)


def format_seconds(seconds: float) -> str:
    """``3723.4`` → ``"1 h 02 min 03 s"``; short times keep one decimal."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, sec = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min {sec:02d} s" if hours else f"{minutes} min {sec:02d} s"


def manifest_tables(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The header's key-value tables: the run, its environment, its timings."""
    model = manifest.get("model") or {}
    fingerprint = model.get("fingerprint")
    run = {
        "model": model.get("spec"),
        "weights fingerprint": f"{fingerprint[:16]}…" if fingerprint else None,
        "seed": manifest.get("seed"),
        "status": manifest.get("status"),
        "start": manifest.get("start"),
        "end": manifest.get("end"),
        "duration": _duration(manifest.get("start"), manifest.get("end")),
        "resumed": manifest.get("resumed") or None,
        "command": manifest.get("command"),
    }
    run = {k: v for k, v in run.items() if v is not None}
    env = dict(manifest.get("versions") or {})
    env["platform"] = manifest.get("platform")
    tables = [
        {"title": "Run", "html": kv_html(run)},
        {"title": "Environment", "html": kv_html(env)},
    ]
    parts = manifest.get("parts") or {}
    if parts:
        tables.append({"title": "Time per part", "html": kv_html(part_times(parts))})
    timings = manifest.get("timings") or {}
    if timings:
        shown = {part: format_seconds(float(s)) for part, s in timings.items()}
        tables.append(
            {"title": "Timings" if not parts else "Time per step", "html": kv_html(shown)}
        )
    return tables


def part_times(parts: dict[str, Any]) -> dict[str, str]:
    """Wall time of each top-level part (summed over sessions) and their total; a part that
    never finished says so."""
    shown = {}
    for name, entry in parts.items():
        text = format_seconds(float(entry.get("seconds", 0.0)))
        shown[name] = text if entry.get("done") else f"{text} (unfinished)"
    shown["total"] = format_seconds(sum(float(e.get("seconds", 0.0)) for e in parts.values()))
    return shown


def run_line(manifest: dict[str, Any]) -> str:
    """The header's one line: model, status, duration, when it ended."""
    model = (manifest.get("model") or {}).get("spec")
    duration = _duration(manifest.get("start"), manifest.get("end"))
    end = (manifest.get("end") or "")[:16].replace("T", " ")
    parts = [model, manifest.get("status"), duration, end and f"ended {end}"]
    return " · ".join(str(p) for p in parts if p)


def collect_sections(run: RunDir, static_dir: Path | None) -> list[dict[str, Any]]:
    """Call every registered section; keep those with results, rendered for the template,
    each with the HTML of its finding (its first :class:`FindingBlock`) for the summary."""
    out = []
    for section in registered_sections():
        blocks = section.fn(run) or []
        if not blocks:
            continue
        rendered = [
            render_block(b, section.key, f"{i:02d}", static_dir) for i, b in enumerate(blocks)
        ]
        finding = next((b.content for b in blocks if isinstance(b, FindingBlock)), None)
        out.append(
            {
                "key": section.key,
                "title": section.title,
                "blocks": rendered,
                "finding": markdown_html(finding) if finding else None,
            }
        )
    return out


def render_report_html(run: RunDir, sections: list[dict[str, Any]]) -> str:
    """Fill the template; plotly.js is included (once) only when there is a figure."""
    from plotly.offline import get_plotlyjs

    has_figures = any('class="plotly-graph-div"' in b for s in sections for b in s["blocks"])
    jinja = jinja2.Environment(
        autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True
    )
    template = jinja.from_string(_asset(TEMPLATE))
    manifest = run.manifest
    return template.render(
        name=run.name,
        css=Markup(_asset(STYLESHEET)),
        plotly_js=Markup(get_plotlyjs()) if has_figures else None,
        header_tables=manifest_tables(manifest),
        run_line=run_line(manifest),
        sections=sections,
        version=package_version("mechscope") or "unknown",
        generated=now_iso(),
    )


def build_report(run: RunDir | Path | str, *, static_figures: bool = True) -> Path:
    """Write ``report.html`` (atomically) for ``run``; return its path.

    Sections come from the installed workflows (see :func:`load_sections`) and any
    registered by the caller. With ``static_figures`` every figure is also written to
    ``figures/<section>-<index>.png``, ``.svg`` and ``.pdf``.
    """
    run = run if isinstance(run, RunDir) else RunDir.open(run)
    load_sections()
    static_dir = run.figures_dir if static_figures else None
    if static_dir is not None:
        static_dir.mkdir(parents=True, exist_ok=True)
    sections = collect_sections(run, static_dir)
    html = render_report_html(run, sections)
    return atomic_write_text(run.report_path, html)
