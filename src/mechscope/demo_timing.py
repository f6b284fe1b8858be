"""How long the demo's parts take: the time-left estimate while it runs, the table at the end.

The estimate starts from reference times of each part (smollm2-135m on two CPU cores) and
is rescaled by how fast the parts that already ran in this session went compared with
their reference, so it adapts to a faster machine, a GPU or another model after the first
part.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from rich.table import Table

from mechscope.report.html import format_seconds

#: Reference wall seconds per part, ``(quick, full)``, on smollm2-135m with 2 idle CPU cores
#: (measured). They only seed the time-left display, which rescales them as parts finish;
#: an unlisted part counts as ``DEFAULT_SECONDS``.
REFERENCE_SECONDS: dict[str, tuple[float, float]] = {
    "overview": (1.0, 1.0),
    "lens": (16.0, 47.0),
    "lens_study": (24.0, 192.0),
    "patching": (5.0, 23.0),
    "heads": (16.0, 66.0),
    "anchors": (23.0, 133.0),
    "distill": (32.0, 170.0),
}
DEFAULT_SECONDS = (30.0, 120.0)


def reference_seconds(part: str, quick: bool) -> float:
    quick_s, full_s = REFERENCE_SECONDS.get(part, DEFAULT_SECONDS)
    return quick_s if quick else full_s


@dataclass
class TimeLeft:
    """Time-left estimate for the remaining parts, calibrated on the finished ones."""

    quick: bool
    actual: float = 0.0  # seconds the calibrating parts took
    reference: float = 0.0  # what the reference said they would take

    @property
    def speed(self) -> float:
        """Actual over reference time so far (1 until a part has finished)."""
        return self.actual / self.reference if self.reference > 0 else 1.0

    def observe(self, part: str, seconds: float) -> None:
        """A part ran from scratch in ``seconds``: use it to calibrate."""
        self.actual += seconds
        self.reference += reference_seconds(part, self.quick)

    def finish_at(self, parts: Sequence[str]) -> float:
        """``time.monotonic()`` at which ``parts`` (the current one first) should be done."""
        left = sum(reference_seconds(p, self.quick) for p in parts)
        return time.monotonic() + self.speed * left


@dataclass
class Session:
    """What one ``mechscope demo`` invocation did to each part, for the closing table."""

    status: dict[str, str] = field(default_factory=dict)  # ran | resumed | reused | failed
    seconds: dict[str, float] = field(default_factory=dict)  # this session's wall time
    steps: dict[str, float] = field(default_factory=dict)  # model loading, report

    def table(self, parts: dict[str, dict], total: float) -> Table:
        """Part, what happened, this session's time, the time over all sessions."""
        table = Table(title="demo: time per part", title_justify="left")
        for col, justify in (("part", "left"), ("status", "left"), ("now", "right")):
            table.add_column(col, justify=justify)
        table.add_column("all sessions", justify="right")
        for step, seconds in self.steps.items():
            if step != "report":
                table.add_row(step, "", format_seconds(seconds), "")
        for name, status in self.status.items():
            saved = parts.get(name, {})
            table.add_row(
                name,
                status,
                format_seconds(self.seconds.get(name, 0.0)),
                format_seconds(float(saved.get("seconds", 0.0))),
            )
        if "report" in self.steps:
            table.add_row("report", "", format_seconds(self.steps["report"]), "")
        all_parts = sum(float(e.get("seconds", 0.0)) for e in parts.values())
        table.add_row("total", "", format_seconds(total), format_seconds(all_parts), style="bold")
        return table
