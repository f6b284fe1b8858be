"""The parts the anchors section is assembled from, and the adaptive design's part.

Each analysis of a run (resampling, adaptive resampling, receiver heads, suppression) gives a
:class:`Part`; the section puts the parts' findings first, then the key figure, and the rest
behind disclosures.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from mechscope.report import FigureBlock, TableBlock, TextBlock
from mechscope.runs import RunDir

MAX_TRACE_FIGURES = 3


@dataclass
class Part:
    """What one analysis adds to the section: finding sentences, figures, cautions shown
    beside the key figure, method notes and tables."""

    rank: int  # where its finding goes in the section's (lower first)
    finding: list[str] = field(default_factory=list)
    figures: list[FigureBlock] = field(default_factory=list)
    cautions: list[TextBlock] = field(default_factory=list)
    method: list[TextBlock] = field(default_factory=list)
    tables: list[TableBlock] = field(default_factory=list)


def _cap(first: pd.Series) -> int:
    cap = first.get("cap", float("nan"))
    return int(first["n"] if pd.isna(cap) else cap)


def _target_text(first: pd.Series) -> str:
    """The stopping rule of a run's ``anchors_adaptive_traces`` row, in words."""
    target = first.get("target", "threshold")
    width = f"an importance interval at most {first['width']:g} wide"
    if target in ("topk", "topk-bayes"):
        how = "interval" if target == "topk" else "posterior probability at the level"
        return (
            f"the top-{int(first['k'])} question (its |importance| surely above or below the "
            f"boundary of the top {int(first['k'])}, by its {how}) or {width}"
        )
    tau = first["threshold"]
    if target == "ranking" or pd.isna(tau):
        return width
    return f"{width} or surely inside ±{tau:g}"


def adaptive_part(run: RunDir) -> Part:
    """Adaptive resampling: the rollouts it saved against the fixed design, per-chunk
    importances with the intervals it stopped with, and its per-trace and per-position
    tables."""
    from mechscope.anchors.adaptive import figures as FA
    from mechscope.anchors.adaptive.result import AdaptiveResult

    result = AdaptiveResult.from_run(run)
    drawn, fixed = result.total
    first = result.traces.iloc[0]
    part = Part(
        3,
        finding=[
            f"Adaptive resampling drew {drawn} rollouts against {fixed} for the fixed design "
            f"({1 - drawn / fixed:.0%} fewer)."
        ],
        method=[
            TextBlock(
                f"**Adaptive resampling.** Positions were sampled in rounds of {first['step']} "
                f"after {first['n_min']}, and a position stopped once each chunk it enters was "
                f"settled for {_target_text(first)}, at the cap of {_cap(first)} per position, "
                f"or out of budget. Intervals: Newcombe's, at "
                f"{first['decision_confidence']:.4f} per look ({first['correction']} "
                f"correction of {first['confidence']:g})."
            )
        ],
    )
    for k, trace in enumerate(result.traces["trace"].head(MAX_TRACE_FIGURES)):
        part.figures.append(
            FigureBlock(FA.importance_figure(result, trace), name=f"anchors-ad-imp-{k}")
        )
        part.figures.append(
            FigureBlock(FA.rollouts_figure(result, trace), name=f"anchors-ad-n-{k}")
        )
    trace_cols = ["trace", "positions", "rollouts", "fixed_rollouts", "saving", "rounds",
                  "narrow", "negligible", "above", "below", "open"]  # fmt: skip
    part.tables.append(
        TableBlock(
            result.traces[[c for c in trace_cols if c in result.traces.columns]],
            caption="Per trace: rollouts against the fixed design, chunks by status.",
            title="Adaptive resampling per trace",
        )
    )
    cols = ["trace", "position", "rollouts", "rounds", "accuracy", "accuracy_low",
            "accuracy_high", "status", "importance", "importance_low", "importance_high",
            "chunk_status"]  # fmt: skip
    part.tables.append(
        TableBlock(
            result.positions[cols],
            caption="Per position: rollouts used, accuracy with its Wilson interval, how it "
            "ended; the importance of the chunk at that position with the interval reached.",
            title="Adaptive resampling per position",
            source="tables/anchors_adaptive.parquet",
        )
    )
    return part
