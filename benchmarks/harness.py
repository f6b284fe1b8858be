"""Shared pieces of the benchmark scripts: interleaved timing, peak memory, the RESULT line.

Timings on a shared machine drift with its load, so variants are timed in interleaved
repetitions (each repetition runs every variant once, in a rotating order) and ratios are
taken per repetition before the median: a load change hits both sides of a ratio alike.
The contract every ``bench_*.py`` follows is written in ``benchmarks/README.md``.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

RESULT_PREFIX = "RESULT "


@dataclass
class Case:
    """One row of a benchmark: ours against a peer doing the same computation."""

    case: str
    ours_s: float
    peer: str | None = None
    peer_s: float | None = None
    ratio: float | None = None  # median over repetitions of ours_s / peer_s (lower is better)
    spread: float | None = None  # IQR of the per-repetition ratios (of ours_s / median: no peer)
    mem_ours_mb: float | None = None
    mem_peer_mb: float | None = None
    agree: bool = True
    tolerance: str = ""
    note: str = ""
    target: float | None = None  # ratio at or below which the target is met
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Timings:
    """Wall and CPU seconds of each variant, one entry per repetition."""

    wall: dict[str, list[float]]
    cpu: dict[str, list[float]]
    last: dict[str, Any]  # each variant's return value in the last repetition


def interleaved(
    variants: dict[str, Callable[[], Any]], *, reps: int, warmup: int = 1, log: bool = True
) -> Timings:
    """Time ``variants`` in ``reps`` interleaved repetitions after ``warmup`` untimed ones.

    The order rotates each repetition so no variant always runs first (after an idle gap)
    or last.
    """
    names = list(variants)
    for _ in range(warmup):
        for name in names:
            variants[name]()
    wall: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}
    last: dict[str, Any] = {}
    for rep in range(reps):
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            c0, w0 = time.process_time(), time.perf_counter()
            last[name] = variants[name]()
            wall[name].append(time.perf_counter() - w0)
            cpu[name].append(time.process_time() - c0)
        if log:
            done = ", ".join(f"{n} {wall[n][-1]:.2f}s" for n in names)
            print(f"  rep {rep + 1}/{reps}: {done}", file=sys.stderr, flush=True)
    return Timings(wall=wall, cpu=cpu, last=last)


def iqr(values: list[float]) -> float:
    if len(values) < 2:
        return 0.0
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[2] - q[0]


def paired_ratio(ours: list[float], peer: list[float]) -> tuple[float, float]:
    """(median, IQR) of the per-repetition ratios ``ours[i] / peer[i]``."""
    ratios = [o / p for o, p in zip(ours, peer, strict=True)]
    return statistics.median(ratios), iqr(ratios)


def compare(
    timings: Timings,
    ours: str,
    peer: str,
    *,
    case: str,
    peer_label: str,
    target: float | None = None,
    **fields: Any,
) -> Case:
    """A :class:`Case` from interleaved timings of variant ``ours`` against ``peer``."""
    o, p = timings.wall[ours], timings.wall[peer]
    ratio, spread = paired_ratio(o, p)
    cpu_ratio, _ = paired_ratio(timings.cpu[ours], timings.cpu[peer])
    extra = {"cpu_ratio": round(cpu_ratio, 4), "reps": len(o), "wall_ours": o, "wall_peer": p}
    extra.update(fields.pop("extra", {}))
    of_medians = statistics.median(o) / statistics.median(p)
    if abs(of_medians / ratio - 1) > 0.1:  # the load changed between repetitions
        shift = f"load shifted during the run: medians {of_medians:.2f}x apart, paired {ratio:.2f}x"
        fields["note"] = "; ".join(x for x in (fields.get("note", ""), shift) if x)
    return Case(
        case=case,
        ours_s=statistics.median(o),
        peer=peer_label,
        peer_s=statistics.median(p),
        ratio=ratio,
        spread=spread,
        target=target,
        extra=extra,
        **fields,
    )


# --- memory --------------------------------------------------------------------------------
def reset_peak_rss() -> bool:
    """Reset this process's resident high-water mark (Linux ``clear_refs``); False if not."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def rss_mb(field_name: str = "VmRSS") -> float:
    """``VmRSS`` (now) or ``VmHWM`` (peak since start or last reset) in MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"{field_name} not in /proc/self/status")


def run_child(script: str, args: list[str], *, timeout: float = 3600) -> dict[str, Any]:
    """Run ``script`` with ``args`` in a fresh interpreter; its last stdout line is JSON."""
    proc = subprocess.run(
        [sys.executable, script, *args], capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode != 0:
        raise RuntimeError(f"child {args} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --- output --------------------------------------------------------------------------------
def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    import torch

    info: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "ram_gb": _ram_gb(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "loadavg": _loadavg(),
    }
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        pass
    return info


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ram_gb() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def table(cases: list[Case]) -> str:
    """A plain-text table of the cases, for the terminal."""
    head = ["case", "ours s", "peer", "peer s", "ratio", "target", "spread", "mem ours", "mem peer"]
    head += ["agree"]
    rows = [head]
    for c in cases:
        rows.append(
            [
                c.case,
                _num(c.ours_s, 3),
                c.peer or "-",
                _num(c.peer_s, 3),
                _num(c.ratio, 3),
                "-" if c.target is None else f"<= {c.target:g}",
                _num(c.spread, 3),
                _num(c.mem_ours_mb, 0),
                _num(c.mem_peer_mb, 0),
                "yes" if c.agree else "NO",
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in rows)


def _num(x: float | None, digits: int) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def emit(bench: str, cases: list[Case], **info: Any) -> dict[str, Any]:
    """Print the table, then the ``RESULT {json}`` line (last line of stdout); return it."""
    result = {"bench": bench, "machine": machine(), "cases": [asdict(c) for c in cases], **info}
    print(table(cases))
    for c in cases:
        if c.note:
            print(f"  {c.case}: {c.note}")
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    return result
