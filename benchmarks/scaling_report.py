"""The scaling table and figure from ``bench_scaling.py``'s result.

``write_docs(result)`` redraws ``docs/img/bench-scaling.png`` and rewrites the table between
the ``<!-- scaling:start -->`` / ``<!-- scaling:end -->`` markers of ``benchmarks/README.md``;
``python benchmarks/scaling_report.py`` does it again from ``results/scaling.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FIGURE = HERE.parent / "docs" / "img" / "bench-scaling.png"
README = HERE / "README.md"
START, END = "<!-- scaling:start -->", "<!-- scaling:end -->"
JOBS = ("cache", "patching", "lens")


def points(result: dict[str, Any]) -> list[dict[str, Any]]:
    """One dict per row: axis, job, tokens, layers, both times and peaks (None where the peer
    did not run), agreement, and the reason the peer did not run."""
    out = []
    for c in result["cases"]:
        axis = c["extra"]["scaling"]
        out.append(
            {
                **{k: axis[k] for k in ("axis", "job", "tokens", "layers")},
                "ours_s": c["ours_s"],
                "peer_s": c["peer_s"],
                "ratio": c["ratio"],
                "mem_ours_mb": c["mem_ours_mb"],
                "mem_peer_mb": c["mem_peer_mb"],
                "agree": c["agree"],
                "why": c["unavailable"],
                "peer": c["peer"],
            }
        )
    return out


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def table(pts: list[dict[str, Any]], key: str) -> str:
    """A Markdown table of one axis (``key``: ``tokens`` or ``layers``)."""
    peer = next((p["peer"] for p in pts if p["peer"]), "peer")
    head = f"| job | {key} | mechscope s | {peer} s | ratio | mechscope MB | {peer} MB | agree |"
    lines = [head, "|---|---|---|---|---|---|---|---|"]
    for job in JOBS:
        for p in sorted((p for p in pts if p["job"] == job), key=lambda p: p[key]):
            agree = "yes" if p["agree"] else "**no**"
            if p["why"]:
                agree = f"- ({p['why']})"
            lines.append(
                f"| {job} | {p[key]:,} | {p['ours_s']:.3f} | {_num(p['peer_s'], '.3f')} | "
                f"{_num(p['ratio'], '.3f')} | {_num(p['mem_ours_mb'], '.0f')} | "
                f"{_num(p['mem_peer_mb'], '.0f')} | {agree} |"
            )
    return "\n".join(lines)


def figure(seq: list[dict], depth: list[dict], path: Path) -> None:
    """Time and peak memory against tokens, time against layers: one column per job,
    mechscope solid, the peer dashed, both axes logarithmic."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, grid = plt.subplots(3, 3, figsize=(11, 9), constrained_layout=True)
    panels = (
        (seq, "tokens", ("ours_s", "peer_s"), "seconds"),
        (seq, "tokens", ("mem_ours_mb", "mem_peer_mb"), "peak beyond the model (MB)"),
        (depth, "layers", ("ours_s", "peer_s"), "seconds"),
    )
    peer = next((p["peer"] for p in seq + depth if p["peer"]), "peer").split(" (")[0]
    for row, (pts, key, (mine, theirs), ylabel) in enumerate(panels):
        for col, job in enumerate(JOBS):
            ax = grid[row][col]
            mine_pts = sorted((p for p in pts if p["job"] == job), key=lambda p: p[key])
            for field, label, style in ((mine, "mechscope", "-o"), (theirs, peer, "--s")):
                xy = [(p[key], p[field]) for p in mine_pts if p[field]]
                if xy:
                    ax.plot(*zip(*xy, strict=True), style, label=label)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel(key)
            ax.set_ylabel(ylabel)
            if row == 0:
                ax.set_title(job)
            ax.grid(True, which="both", alpha=0.3)
            if row == 0 and col == 0:
                ax.legend()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_docs(result: dict[str, Any]) -> None:
    pts = points(result)
    seq_rows = [p for p in pts if p["axis"] == "sequence"]
    depth_rows = [p for p in pts if p["axis"] == "depth"]
    figure(seq_rows, depth_rows, FIGURE)
    machine = result["machine"]
    cpu = f"{machine['cores']} × {machine['cpu']}, {machine['torch_threads']} thread"
    when = f"{machine['date']}, {cpu}"
    block = "\n\n".join(
        [
            START,
            f"Measured {when} (`benchmarks/bench_scaling.py`; the rows are also in RESULTS.md).",
            "**As the sequence doubles** (SmolLM2-135M, 30 layers):",
            table(seq_rows, "tokens"),
            "**As the layers double** (random models of SmolLM2's width):",
            table(depth_rows, "layers"),
            f"![Scaling](../docs/img/{FIGURE.name})",
            END,
        ]
    )
    text = README.read_text()
    if START in text:
        head, rest = text.split(START, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n## `bench_scaling.py`\n\n" + block + "\n"
    README.write_text(text)


if __name__ == "__main__":
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "results" / "scaling.json"
    write_docs(json.loads(path.read_text()))
