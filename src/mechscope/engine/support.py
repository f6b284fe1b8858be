"""Which architectures mechscope supports, measured on tiny models rather than claimed.

For a ``model_type`` of the installed transformers, :func:`support_row` builds a tiny random
model from the family's own config class and modeling code, loads it as a user's model would
be loaded (built-in card, or one derived from the module tree) and runs the conformance
probe. The row says whether every check holds, what is refused and why, or why the family is
refused as a whole. ``mechscope models --support`` prints these rows; the table in
docs/engine.md is generated from them (``scripts/support_table.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from mechscope.engine.forward import Engine
from mechscope.engine.probe import apply_probe
from mechscope.errors import MechscopeError
from mechscope.models import load_model


@dataclass(frozen=True)
class SupportRow:
    """One architecture: ``status`` is ``exact``, ``partial`` (exact, some interventions
    refused), ``refused`` (no card passes the probe) or ``not built`` (no tiny model)."""

    model_type: str
    status: str
    card: str
    refused: tuple[str, ...] = ()
    note: str = ""

    def markdown(self) -> str:
        refused = ", ".join(self.refused) or "—"
        return f"| `{self.model_type}` | {self.status} | {self.card} | {refused} | {self.note} |"


HEADER = "| model_type | status | card | refused | why |\n|---|---|---|---|---|"


def _why(refused: dict[str, str]) -> str:
    return _short("; ".join(sorted(set(refused.values()))), 200)


def support_row(model_type: str) -> SupportRow:
    """Load ``tiny:<model_type>`` and probe it (a few seconds at most)."""
    try:
        lm = load_model(f"tiny:{model_type}")
    except MechscopeError as exc:
        status = "refused" if "card" in str(exc) else "not built"
        return SupportRow(model_type, status, "—", note=_short(str(exc)))
    except Exception as exc:  # the family's own modeling code fails on a tiny config
        return SupportRow(model_type, "not built", "—", note=_short(f"{type(exc).__name__}: {exc}"))
    try:
        eng = Engine.of(lm)
    except MechscopeError as exc:
        return SupportRow(model_type, "refused", lm.card_source, note=_short(str(exc)))
    try:
        report = lm.extra.get("probe") or apply_probe(eng)
    except MechscopeError as exc:
        return SupportRow(model_type, "refused", lm.card_source, note=_short(str(exc)))
    failed = [name for name, result in report.results.items() if result.startswith("failed")]
    card = lm.card.family if lm.card_source == "built-in" else lm.card_source
    if failed and not lm.refused:
        return SupportRow(model_type, "refused", card, note=f"probe failed: {', '.join(failed)}")
    status = "partial" if lm.refused else "exact"
    return SupportRow(model_type, status, card, tuple(sorted(lm.refused)), _why(lm.refused))


def _short(text: str, limit: int = 160) -> str:
    line = text.splitlines()[0] if text else ""
    line = line.replace("|", "/")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def support_table(rows: list[SupportRow]) -> str:
    """The markdown table of ``rows``."""
    return "\n".join([HEADER, *(row.markdown() for row in rows)])
