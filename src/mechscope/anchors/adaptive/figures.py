"""Figures of the adaptive design: functions of its results, never of a model.

- :func:`frontier_figure`: the simulation's designs (``anchors simulate``) as points of cost
  (share of the fixed design's rollouts) against recovery of the published importances;
- :func:`importance_figure` and :func:`rollouts_figure`: one adaptive run's trace, chunk
  importances with the intervals the rule stopped with, and the rollouts each position used.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from mechscope.anchors.adaptive.result import AdaptiveResult
from mechscope.report import Figure, Series, bars, curves, scatter

METRIC_LABELS = {
    "top5": "published top-5 chunks recovered (share)",
    "spearman": "Spearman ρ with the published importances",
    "coverage": "intervals holding the published importance (share)",
}


def frontier_figure(summary: pd.DataFrame, metric: str, n: int) -> Figure:
    """One point per design (index of ``summary``, :func:`~mechscope.anchors.adaptive.tables.
    design_summary`): its mean share of the fixed design's rollouts against its mean
    ``metric``."""
    names = [str(x) for x in summary.index]
    groups = ["fixed" if x.startswith("fixed") else "adaptive" for x in names]
    return scatter(
        summary["share"].to_numpy(float),
        summary[metric].to_numpy(float),
        f"Cost against recovery of the published importances ({metric})",
        f"rollouts, share of the fixed design ({n} per position)",
        METRIC_LABELS.get(metric, metric),
        text=names,
        groups=groups,
        caption=(
            "Each point is a design, averaged over the published traces and the simulated "
            f"seeds: the fixed design with N rollouts per position, or an adaptive rule "
            "(named by the question it answers; 'cap' lets contested positions go past the "
            f"fixed design's {n}). Higher and further left is better."
        ),
    )


def _trace_part(result: AdaptiveResult, trace: str) -> pd.DataFrame:
    part = result.positions[result.positions["trace"] == trace]
    return part.sort_values("position")


def importance_figure(result: AdaptiveResult, trace: str) -> Figure:
    """Chunk importances of ``trace`` with the intervals the rule stopped with."""
    part = _trace_part(result, trace)
    chunks = part[part["chunk_status"] != ""]
    series = Series(
        "importance",
        chunks["importance"].to_numpy(float),
        chunks["importance_low"].to_numpy(float),
        chunks["importance_high"].to_numpy(float),
    )
    return curves(
        chunks["position"].to_numpy(int).tolist(),
        [series],
        f"Resampling importance and its interval by chunk — {trace}",
        "chunk",
        "Δ accuracy (chunk kept − resampled)",
        hline=0.0,
        caption=(
            "Line: importance of each chunk (accuracy with it kept minus resampled); band: the "
            "Newcombe interval the adaptive rule stopped with, at its per-look level. Narrow "
            "bands were resolved; wide ones near 0 were stopped as surely small or at the cap."
        ),
    )


def rollouts_figure(result: AdaptiveResult, trace: str) -> Figure:
    """Rollouts drawn at each position of ``trace``."""
    part = _trace_part(result, trace)
    values = part["rollouts"].to_numpy(float)
    row = result.traces[result.traces["trace"] == trace]
    cap = int(row["n"].iloc[0]) if len(row) else int(np.nanmax(values, initial=0))
    return bars(
        [str(p) for p in part["position"]],
        [Series("rollouts", values)],
        f"Rollouts per position — {trace}",
        "position",
        "rollouts",
        caption=(
            f"Rollouts the adaptive design drew at each position ({int(values.sum())} in all, "
            f"against {cap * len(values)} for the fixed design's {cap} per position). Positions "
            "next to an important or uncertain chunk get more."
        ),
    )
