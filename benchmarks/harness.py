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
    unavailable: str | None = None  # why the peer could not run this case (no timing, no check)
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


def unavailable(case: str, peer_label: str, reason: str, ours_s: float = 0.0) -> Case:
    """A row for a peer that cannot run ``case`` (no such feature, family not supported,
    package would not install): the table shows the reason instead of leaving a gap."""
    return Case(case=case, ours_s=ours_s, peer=peer_label, unavailable=reason, tolerance="-")


def case_from_check(
    timings: Timings, ours: str, peer: str, check: Agreement, **fields: Any
) -> Case:
    """:func:`compare` with ``agree``, ``tolerance`` and the measured difference from
    ``check`` (any ``note`` given is put after it)."""
    note = "; ".join(n for n in (check.note, fields.pop("note", "")) if n)
    extra = {"max_abs_diff": check.max_abs, **fields.pop("extra", {})}
    return compare(
        timings,
        ours,
        peer,
        agree=check.ok,
        tolerance=check.tolerance,
        note=note,
        extra=extra,
        **fields,
    )


# --- agreement ----------------------------------------------------------------------------
@dataclass
class Agreement:
    """Whether two results match within a tolerance, with the numbers a reader needs."""

    ok: bool
    max_abs: float  # largest |ours - peer| over cells both define (inf: shapes differ)
    tolerance: str  # in words, for the RESULT line
    note: str  # "max |dname| 3.1e-06" (plus what went wrong, when it did)

    def __and__(self, other: Agreement) -> Agreement:
        return Agreement(
            ok=self.ok and other.ok,
            max_abs=max(self.max_abs, other.max_abs),
            tolerance=", ".join(t for t in (self.tolerance, other.tolerance) if t),
            note=", ".join(n for n in (self.note, other.note) if n),
        )


def agreement(
    ours: Any,
    peer: Any,
    *,
    atol: float | None = None,
    depth: int | None = None,
    scale: float | None = None,
    dtype: Any = None,
    name: str = "value",
) -> Agreement:
    """Compare two results cell by cell: equal shapes, the same undefined (NaN) cells and
    ``max |ours - peer| <= atol`` over the rest.

    ``atol`` may hold one bound per cell (an array of the results' shape), derived by the
    caller where the rounding of a cell depends on its own value.

    Two computations of the same numbers give ``depth``: the bound is what rounding alone
    explains, ``K · eps · scale · √depth`` (:func:`mechscope.tolerance.rounding_tolerance`;
    ``scale`` defaults to the largest magnitude on either side: pass the operands' where a
    result is a difference of larger terms, as a logit difference is of logits; ``dtype``
    the one both sides round in, fp32 by default), so the check holds on any CPU's
    summation order. A fixed ``atol`` is for what is not rounding (a second implementation
    of the model, a quadrature).

    Every benchmark checks its peer through this one function, so the test that perturbs
    a result and expects a failure (``tests/benchmarks``) covers the check the runs use.
    Arrays are compared in float64; torch tensors and sequences are converted first.
    """
    import numpy as np
    import torch

    from mechscope.tolerance import rounding_tolerance, scale_of

    if (atol is None) == (depth is None):
        raise ValueError("give either atol or depth (a rounding tolerance)")
    a, b = _as_array(ours), _as_array(peer)
    if depth is not None:
        s = scale_of(a, b) if scale is None else scale
        atol = rounding_tolerance(s, depth, dtype or torch.float32)
        tolerance = f"{name} rounding {atol:.2g} (K·eps·scale·√depth: scale {s:.3g}, depth {depth})"
    elif np.ndim(atol):
        tolerance = f"{name} within a bound per cell (largest {np.nanmax(atol):.2g})"
    else:
        tolerance = f"{name} atol {atol:g}"
    if a.shape != b.shape:
        note = f"{name}: shapes differ, {list(a.shape)} vs {list(b.shape)}"
        return Agreement(False, float("inf"), tolerance, note)
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    if not np.array_equal(nan_a, nan_b):
        n = int((nan_a != nan_b).sum())
        return Agreement(False, float("inf"), tolerance, f"{name}: {n} cells undefined on one side")
    both = ~nan_a
    if not both.any():
        return Agreement(False, float("inf"), tolerance, f"{name}: no defined cells to compare")
    cells = np.abs(a[both] - b[both])
    diff = float(cells.max())
    ok = bool(np.all(cells <= np.broadcast_to(atol, a.shape)[both]))  # NaN (inf - inf) fails
    return Agreement(ok, diff, tolerance, f"max |d{name}| {diff:.1e}")


#: What :func:`lens_agreement` allows, in words.
LENS_TOLERANCE = (
    "NLL rounding at the log-probabilities' scale, JS and KL within divergence_bound of it "
    "(K·eps·scale·√depth)"
)


def lens_agreement(got: Any, want: Any, *, logit_scale: float, vocab: int, depth: int) -> Any:
    """The lens' ``[5, ...]`` NLL A, NLL B, JS, KL(A‖B), KL(B‖A) against a float64
    reference from the same hidden states: ``(ok, max |dNLL|, max |dJS|, |dKL|)``. An fp32
    readout rounds the log-probabilities at their own magnitude
    (:func:`mechscope.tolerance.logprob_scale` of logits up to ``logit_scale``): the NLLs
    differ by that rounding, and a divergence moves with it as with its logits' rounding
    (:func:`mechscope.tolerance.divergence_bound`, first order in ``‖p − q‖₁``)."""
    import numpy as np

    from mechscope.tolerance import divergence_bound, logprob_scale, rounding_tolerance

    g, w = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    scale = logprob_scale(logit_scale, vocab)
    err = np.abs(g - w)
    bound = np.empty_like(w)
    bound[:2] = rounding_tolerance(scale, depth)
    bound[2] = divergence_bound(w[2], scale, depth, js=True)
    bound[3:] = divergence_bound(w[3:], scale, depth)
    ok = bool(np.all(err <= bound))  # NaN on either side fails
    return ok, float(err[:2].max()), float(err[2:].max())


def score_scale_of(lm: Any, ids: Any, *, layers_per_pass: int = 4) -> float:
    """The largest |attention score| of any layer on ``ids``: the scale at which attention
    probabilities (and sums of them) are rounded (:func:`mechscope.tolerance.score_scale`).
    A few layers per pass, so ``[layers × heads × T × T]`` never exists."""
    from mechscope.engine import Engine, Read, Site
    from mechscope.tolerance import score_scale

    eng, out = Engine.of(lm), 1.0
    for first in range(0, lm.n_layers, layers_per_pass):
        layers = range(first, min(first + layers_per_pass, lm.n_layers))
        sites = [Site("attn_scores", layer) for layer in layers]
        read = eng.run(ids, [Read(site) for site in sites], logits=False)
        out = max(out, *(score_scale(read[site]) for site in sites))
    return out


def _as_array(x: Any) -> Any:
    import numpy as np

    if hasattr(x, "detach"):  # a torch tensor, without importing torch here
        x = x.detach().to("cpu").double().numpy()
    return np.asarray(x, dtype=np.float64)


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


def peak_of(run: Callable[[], Any], warmup: Callable[[], Any] | None = None) -> dict[str, Any]:
    """Peak resident memory of one call of ``run`` in this (fresh) process: after
    ``warmup`` (pages the weights in, starts the thread pool) the high-water mark is reset,
    so the peak is the model plus what ``run`` allocates."""
    if warmup is not None:
        warmup()
    base = rss_mb()
    reset = reset_peak_rss()
    result = run()
    peak = rss_mb("VmHWM")
    del result
    return {
        "peak_mb": round(peak, 1),
        "model_mb": round(base, 1),
        "beyond_mb": round(peak - base, 1),
        "hwm_reset": reset,
    }


def run_child(
    script: str, args: list[str], *, timeout: float = 3600, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Run ``script`` with ``args`` in a fresh interpreter (``env`` added to this process'
    environment); its last stdout line is JSON."""
    proc = subprocess.run(
        [sys.executable, script, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
    if proc.returncode != 0:
        raise RuntimeError(f"child {args} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


#: glibc's malloc for the memory children: blocks of at least this many bytes are mapped
#: and unmapped on free. By default glibc raises that threshold as large blocks are freed,
#: so a peak also depends on which freed blocks it kept in its heap: the same run then
#: peaks anywhere within about ±40 MB (seen on pattern capture). With the threshold fixed
#: the peak measures live tensors and repeats within 1 MB; both sides get the same setting.
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(128 * 1024)}


def peak_in_child(script: str, variant: str, threads: int, **sizes: int) -> dict[str, Any]:
    """:func:`peak_of` for one ``variant`` of ``script``, measured in a fresh process
    (``script --mem-child VARIANT --threads N --<size> V ...``), so nothing this process
    allocated before counts; malloc set up by :data:`MALLOC_ENV`."""
    print(f"  peak memory of {variant} in a fresh process", file=sys.stderr, flush=True)
    args = ["--mem-child", variant, "--threads", str(threads)]
    for name, value in sizes.items():
        args += [f"--{name}", str(value)]
    return {**run_child(script, args, env=MALLOC_ENV), "malloc_env": MALLOC_ENV}


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
                "n/a" if c.unavailable else ("yes" if c.agree else "NO"),
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in rows)


def _num(x: float | None, digits: int) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def exit_code(result: dict[str, Any]) -> int:
    """1 when a case that ran disagrees with its peer (after the RESULT line is out)."""
    failed = [c["case"] for c in result["cases"] if not c["agree"] and not c.get("unavailable")]
    if failed:
        print(f"agreement check failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def emit(bench: str, cases: list[Case], **info: Any) -> dict[str, Any]:
    """Print the table, then the ``RESULT {json}`` line (last line of stdout); return it."""
    result = {"bench": bench, "machine": machine(), "cases": [asdict(c) for c in cases], **info}
    print(table(cases))
    for c in cases:
        if c.note or c.unavailable:
            print(f"  {c.case}: {c.unavailable or c.note}")
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    return result
