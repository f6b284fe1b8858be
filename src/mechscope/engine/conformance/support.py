"""Which architectures mechscope supports, measured on tiny models rather than claimed.

For a ``model_type`` of the installed transformers, :func:`support_row` builds a tiny random
model from the family's own config class and modeling code, loads it as a user's model would
be loaded (built-in card, or one derived from the module tree) and runs the conformance
probe. The row says whether every check holds, how prefix resume and generation run, what
is refused and why, or why the family is refused as a whole. Tiny configs declare every
sliding window and attention chunk 8 tokens long and turn ALiBi on
(:mod:`mechscope.models.tiny_types`), so the probe's 10-token input runs past them.
``mechscope models --support`` prints these rows; the table in docs/engine.md is generated
from them (``scripts/support_table.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from mechscope.engine.conformance.probe import ProbeReport, apply_probe
from mechscope.engine.core.spans import attention_span
from mechscope.engine.generation.batching import LOCKSTEP
from mechscope.engine.interventions.forward import Forward
from mechscope.errors import MechscopeError
from mechscope.models import load_model


@dataclass(frozen=True)
class SupportRow:
    """One architecture: ``status`` is ``exact`` (every check holds, resume and generation
    included), ``partial`` (exact, some interventions refused), ``refused`` (no card passes
    the probe) or ``not built`` (no tiny model). ``resume``: ``exact``, ``below window``
    (sequences shorter than the window or chunk; longer ones are recomputed), ``recomputed``
    (never resumed: a layer kind of unknown reach) or ``refused``. ``generation``:
    ``exact`` (continuous batching and lock step both equal transformers' ``generate``),
    ``lock step`` (only lock step does; rollouts decode that way) or ``refused``."""

    model_type: str
    status: str
    card: str
    resume: str = "—"
    generation: str = "—"
    refused: tuple[str, ...] = ()
    note: str = ""

    def markdown(self) -> str:
        refused = ", ".join(self.refused) or "—"
        cells = (self.status, self.card, self.resume, self.generation, refused, self.note)
        return f"| `{self.model_type}` | {' | '.join(cells)} |"


HEADER = (
    "| model_type | status | card | resume | generation | refused | why |\n"
    "|---|---|---|---|---|---|---|"
)


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
    try:  # every card is probed here, built-in ones too (the engine probes derived ones)
        report = apply_probe(Forward(lm))
    except MechscopeError as exc:
        return SupportRow(model_type, "refused", lm.card_source, note=_short(str(exc)))
    failed = [n for n, result in report.results.items() if result.startswith("failed")]
    card = lm.card.family if lm.card_source == "built-in" else lm.card_source
    if set(failed) - {"slots"} and not lm.refused:
        return SupportRow(model_type, "refused", card, note=f"probe failed: {', '.join(failed)}")
    resume, generation = _resume(lm, report), _generation(lm, report)
    proven = resume in ("exact", "below window") and generation in ("exact", "lock step")
    status = "exact" if proven and not lm.refused else "partial"
    refused = tuple(sorted(lm.refused))
    return SupportRow(model_type, status, card, resume, generation, refused, _why(lm.refused))


def _resume(lm, report: ProbeReport) -> str:
    if "resume" in lm.refused:
        return "refused"
    if not report.results.get("resume", "").startswith("ok"):
        return "—" if not lm.causal else "recomputed"
    return "exact" if attention_span(lm.config) is None else "below window"


def _generation(lm, report: ProbeReport) -> str:
    if "generate" in lm.refused:
        return "refused"
    if not report.results.get("generate", "").startswith("ok"):
        return "—"
    return "lock step" if LOCKSTEP in lm.extra else "exact"


def _short(text: str, limit: int = 160) -> str:
    line = text.splitlines()[0] if text else ""
    line = line.replace("|", "/")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def support_table(rows: list[SupportRow]) -> str:
    """The markdown table of ``rows``."""
    return "\n".join([HEADER, *(row.markdown() for row in rows)])
