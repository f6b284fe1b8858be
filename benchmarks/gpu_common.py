"""What the GPU suite's cases share: the time budget, synced interleaved timing, device
memory against the sizing's prediction, and tolerances derived from the dtype and scale.

Timings interleave the sides as ``harness.interleaved`` does (every repetition runs each
side once, in a rotating order), with a device synchronisation after each call, and stop
repeating once the case's deadline has passed (at least one repetition always runs), so a
case never spends more than its share of the suite's minutes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import harness
import torch


def tolerance(dtype: torch.dtype, scale: float, layers: int) -> tuple[float, str]:
    """``(atol, words)`` for values of magnitude ``scale`` computed through ``layers``: what
    rounding alone explains, ``K · eps · scale · √depth`` in the dtype both sides run in
    (:func:`mechscope.tolerance.rounding_tolerance`, depth ``layers + 1`` with the head)."""
    from mechscope.tolerance import pass_depth, rounding_tolerance

    depth = pass_depth(layers)
    atol = rounding_tolerance(scale, depth, dtype)
    return atol, f"{atol:.2g} (K·eps·scale·√depth: {dtype}, scale {scale:.3g}, depth {depth})"


@dataclass
class Budget:
    """The suite's wall-clock budget; a case asks how much is left before it starts."""

    total_s: float
    start: float = field(default_factory=time.perf_counter)

    def used(self) -> float:
        return time.perf_counter() - self.start

    def left(self) -> float:
        return self.total_s - self.used()


@dataclass
class Ctx:
    """What every case is given."""

    device: torch.device
    dtype: torch.dtype
    smoke: bool
    budget: Budget
    reps: int = 2

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def interleaved(
    ctx: Ctx,
    variants: dict[str, Callable[[], Any]],
    *,
    deadline: float,
    reps: int | None = None,
    warm: dict[str, Callable[[], Any]] | None = None,
) -> harness.Timings:
    """Wall and CPU seconds of each variant per repetition, synced, rotating order; no
    new repetition starts after ``deadline`` (``time.perf_counter()`` seconds). ``warm``:
    untimed calls first (a smaller version of a variant: kernels, handles, allocator)."""
    for fn in (warm or {}).values():
        fn()
    names = list(variants)
    wall: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}
    last: dict[str, Any] = {}
    for rep in range(reps or ctx.reps):
        if rep and time.perf_counter() > deadline:
            break
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            ctx.sync()
            c0, w0 = time.process_time(), time.perf_counter()
            last[name] = variants[name]()
            ctx.sync()
            wall[name].append(time.perf_counter() - w0)
            cpu[name].append(time.process_time() - c0)
        done = ", ".join(f"{n} {wall[n][-1]:.2f}s" for n in names)
        print(f"  rep {rep + 1}: {done}", flush=True)
    return harness.Timings(wall=wall, cpu=cpu, last=last)


@contextmanager
def attention(lm: Any, implementation: str) -> Iterator[None]:
    """The model with ``implementation`` (a peer's plain ``sdpa``), the engine's after."""
    from mechscope.engine.core.attention import ATTN_NAME

    lm.model.set_attn_implementation(implementation)
    try:
        yield
    finally:
        lm.model.set_attn_implementation(ATTN_NAME)


@dataclass
class Peak:
    """A run's device memory beyond what was allocated before it, and what the sizing
    predicted for its largest step (:func:`mechscope.engine.analysis.memory_model.recorded`)."""

    measured: int | None  # bytes (None: not on a CUDA device)
    predicted: int
    what: str  # the prediction's name
    result: Any = None

    @property
    def ratio(self) -> float | None:
        if self.measured is None or not self.predicted:
            return None
        return self.measured / self.predicted


def peak_of(ctx: Ctx, fn: Callable[[], Any]) -> Peak:
    """Run ``fn`` once with the sizing's predictions recorded and the device's peak reset."""
    from mechscope.engine.analysis.memory_model import recorded

    cuda = ctx.device.type == "cuda"
    ctx.sync()
    if cuda:
        torch.cuda.reset_peak_memory_stats(ctx.device)
        base = torch.cuda.memory_allocated(ctx.device)
    with recorded() as predictions:
        result = fn()
        ctx.sync()
    measured = torch.cuda.max_memory_allocated(ctx.device) - base if cuda else None
    top = max(predictions, key=lambda p: p.bytes, default=None)
    return Peak(measured, top.bytes if top else 0, top.what if top else "-", result)


def memory_case(label: str, peak: Peak, seconds: float, budget: int) -> harness.Case:
    """A row of measured / predicted peak (within 25 %: ``bench_memory.py``'s criterion)."""
    gib = 2.0**30
    if peak.measured is None:
        return harness.unavailable(
            f"{label}: measured / predicted peak",
            "prediction of the sizing",
            f"no CUDA device: predicted {peak.predicted / gib:.3f} GiB ({peak.what}), "
            "peak not measured",
            ours_s=seconds,
        )
    ratio = peak.ratio
    return harness.Case(
        case=f"{label}: measured / predicted peak",
        ours_s=seconds,
        peer="prediction of the sizing",
        ratio=ratio,
        mem_ours_mb=peak.measured / 2**20,
        mem_peer_mb=peak.predicted / 2**20,
        agree=ratio is not None and abs(ratio - 1) <= 0.25,
        tolerance="|measured / predicted - 1| <= 0.25",
        note=(
            f"torch.cuda.max_memory_allocated beyond the weights {peak.measured / gib:.2f} GiB, "
            f"predicted {peak.predicted / gib:.2f} GiB ({peak.what}), budget {budget / gib:.1f} GiB"
        ),
    )


def gib(nbytes: int | None) -> str:
    return "not measured (no CUDA device)" if nbytes is None else f"{nbytes / 2**30:.2f} GiB"


def skipped(case: str, reason: str) -> harness.Case:
    """A row for a case the budget (or the machine) left out: it says why."""
    return harness.unavailable(case, "-", f"skipped: {reason}")
