"""``RESULTS.md`` from the benchmark records: one table of cases, the machine, the runs."""

from __future__ import annotations

from typing import Any

HEADER = """# Benchmark results

Written by `benchmarks/run_all.py` on {date}; do not edit by hand (raw numbers:
`benchmarks/results/*.json`).

- **ratio** = ours / peer wall time, the median over interleaved repetitions of the
  per-repetition ratio (lower is better; 0.25 means 4x faster). **target**: the ratio the
  case must stay at or below.
- **spread** = interquartile range of the per-repetition ratios (of ours / its median when
  there is no peer): how much the machine's load moved the ratio.
- **mem** = peak resident memory in MB of a fresh process doing the case once, model
  included, where measured.
- **agree**: both sides computed the same numbers within **tolerance**; a `NO` fails the run.
  `n/a`: the peer could not run the case; the note says why.
"""


def render(records: list[dict[str, Any]], machine: dict[str, Any], ran: set[str]) -> str:
    parts = [HEADER.format(date=machine.get("date", "?")), _machine(machine)]
    parts.append(_cases(records))
    parts.append(_runs(records, ran))
    failures = [r for r in records if r.get("status") in ("error", "skipped")]
    failures += [r for r in records if r.get("status") == "disagree"]
    if failures:
        lines = ["## Not passing", ""]
        for r in failures:
            if r["status"] != "disagree":
                lines.append(f"- **{r['bench']}**: {r['status']}: {r.get('error', '')}")
                continue
            for c in r["result"]["cases"]:
                if not c["agree"] and not c.get("unavailable"):
                    lines.append(f"- **{r['bench']}** / {c['case']}: disagrees ({c['tolerance']})")
        parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)


def _machine(m: dict[str, Any]) -> str:
    rows = [
        ("CPU", m.get("cpu")),
        ("cores", m.get("cores")),
        ("RAM", f"{m.get('ram_gb')} GB"),
        ("python", m.get("python")),
        ("torch", m.get("torch")),
        ("transformers", m.get("transformers")),
        ("load average (1, 5, 15 min) when written", m.get("loadavg")),
    ]
    lines = ["## Machine", "", "| | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in rows]
    lines.append("")
    lines.append("Torch threads and the load average when each script ended: runs table.")
    return "\n".join(lines) + "\n"


def cases_table(records: list[dict[str, Any]]) -> str:
    """The results table (``## Results`` and one row per case) of ``records``: each a dict
    with ``bench`` and ``result`` (a script's RESULT object with its ``cases``)."""
    return _cases(records)


def _cases(records: list[dict[str, Any]]) -> str:
    head = "| bench | case | ours (s) | peer | peer (s) | ratio | target | spread | "
    head += "mem ours (MB) | mem peer (MB) | agree | tolerance | note |"
    lines = ["## Results", "", head, "|" + "---|" * 13]
    for r in records:
        for c in (r.get("result") or {}).get("cases", []):
            lines.append(
                "| "
                + " | ".join(
                    [
                        r["bench"],
                        _esc(c["case"]),
                        _num(c.get("ours_s"), 3),
                        _esc(c.get("peer") or "-"),
                        _num(c.get("peer_s"), 3),
                        _num(c.get("ratio"), 3),
                        _target(c),
                        _num(c.get("spread"), 3),
                        _num(c.get("mem_ours_mb"), 0),
                        _num(c.get("mem_peer_mb"), 0),
                        _agree(c),
                        _esc(str(c.get("tolerance", ""))),
                        _esc(_note(c)),
                    ]
                )
                + " |"
            )
    return "\n".join(lines) + "\n"


def _runs(records: list[dict[str, Any]], ran: set[str]) -> str:
    lines = [
        "## Runs",
        "",
        "| bench | python | ran at | seconds | status | threads | load average at end | settings |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        result = r.get("result") or {}
        m = result.get("machine", {})
        when = r.get("ran_at", "?") + ("" if r["bench"] in ran else " (earlier run)")
        settings = "quick" if r.get("quick") else "full"
        lines.append(
            f"| {r['bench']} | {r.get('python', '-')} | {when} | {r.get('seconds', '-')} | "
            f"{r.get('status')} | {m.get('torch_threads', '-')} | {m.get('loadavg', '-')} | "
            f"{settings} |"
        )
    return "\n".join(lines) + "\n"


def _agree(c: dict[str, Any]) -> str:
    if c.get("unavailable"):
        return "n/a"
    return "yes" if c["agree"] else "**NO**"


def _note(c: dict[str, Any]) -> str:
    if c.get("unavailable"):
        return f"peer could not run this case: {c['unavailable']}"
    return c.get("note", "")


def _target(c: dict[str, Any]) -> str:
    target, ratio = c.get("target"), c.get("ratio")
    if target is None:
        return "-"
    if ratio is None:
        return f"<= {target:g}"
    return f"<= {target:g} {'met' if ratio <= target else '**missed**'}"


def _num(x: float | None, digits: int) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _esc(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
