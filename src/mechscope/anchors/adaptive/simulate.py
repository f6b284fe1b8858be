"""Validation of the adaptive design on the published traces, by simulation.

The published per-position accuracies (:mod:`mechscope.anchors.adaptive.published`) are
taken as each position's true answer rate; a rollout is a Bernoulli draw from it. For every
trace and seed the simulation runs the adaptive rule
(:func:`mechscope.anchors.adaptive.rule.decide`, the same function the sampler's driver
calls) round by round, and, as the reference, the fixed design with ``N`` rollouts per
position. Each estimate is scored against the published importances (themselves the
fixed-100 design's result):

- ``spearman``: Spearman correlation of the estimated and the published importances over the
  trace's chunks;
- ``top5``: share of the published top-5 chunks (largest ``|importance|``, ties by position)
  found in the estimate's top-5;
- ``coverage``: share of chunks whose interval (the one the rule stopped with; for the fixed
  design its Newcombe interval at the same level) holds the published importance;
- ``rollouts`` and ``share``: rollouts drawn, and their share of the fixed-100 design's.

Everything is seeded (``numpy.random.default_rng([seed, trace index])``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats

from mechscope.anchors.adaptive.published import PublishedTrace
from mechscope.anchors.adaptive.rule import chunk_intervals, decide
from mechscope.anchors.config import AdaptiveSettings
from mechscope.progress import track

TOP_K = 5


def top_overlap(estimate: np.ndarray, truth: np.ndarray, k: int = TOP_K) -> float:
    """Share of the ``k`` chunks of largest ``|truth|`` among the ``k`` of largest
    ``|estimate|`` (stable: ties go to the earlier chunk)."""
    k = min(k, truth.size)
    top = lambda v: set(np.argsort(-np.abs(np.nan_to_num(v)), kind="stable")[:k])  # noqa: E731
    return len(top(estimate) & top(truth)) / k


def spearman(estimate: np.ndarray, truth: np.ndarray) -> float:
    """Spearman's rho (NaN when either side is constant)."""
    if np.ptp(estimate) == 0 or np.ptp(truth) == 0:
        return float("nan")
    return float(stats.spearmanr(estimate, truth).statistic)


def simulate_adaptive(
    accuracy: np.ndarray, n: int, adaptive: AdaptiveSettings, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One adaptive run on true rates ``accuracy`` ``[P]``: ``(drawn [P], importance [P-1],
    low, high)`` as the rule stopped."""
    drawn = np.zeros(accuracy.size, dtype=np.int64)
    correct = np.zeros_like(drawn)
    while True:
        d = decide(drawn, drawn, correct, n, adaptive)
        if d.done:
            return drawn, d.importance, d.low, d.high
        correct += rng.binomial(d.add, accuracy)
        drawn += d.add


def simulate_fixed(
    accuracy: np.ndarray, n: int, confidence: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The fixed design with ``n`` rollouts per position, same outputs as the adaptive one."""
    drawn = np.full(accuracy.size, n, dtype=np.int64)
    correct = rng.binomial(drawn, accuracy)
    imp, low, high = chunk_intervals(drawn, correct, confidence)
    return drawn, imp, low, high


def _score(trace: PublishedTrace, out, fixed_total: int) -> dict[str, float]:
    drawn, imp, low, high = out
    truth = trace.importance
    return {
        "rollouts": int(drawn.sum()),
        "share": float(drawn.sum()) / fixed_total,
        "spearman": spearman(imp, truth),
        "top5": top_overlap(imp, truth),
        "coverage": float(np.mean((low <= truth + 1e-12) & (truth - 1e-12 <= high))),
    }


def simulate(
    traces: Sequence[PublishedTrace],
    designs: dict[str, AdaptiveSettings | int],
    *,
    n: int = 100,
    seeds: int = 20,
    seed: int = 0,
    confidence: float = 0.95,
) -> pd.DataFrame:
    """One row per (design, trace, seed): the scores above. A design is adaptive settings
    (capped at ``n`` per position) or an int ``N`` (the fixed design with ``N``, whose
    intervals are Newcombe's at ``confidence``: one look)."""
    rows = []
    for t_index, trace in enumerate(track(traces, "anchors: simulating")):
        fixed_total = n * trace.n_positions
        for name, design in designs.items():
            for s in range(seeds):
                rng = np.random.default_rng([seed, t_index, s])
                if isinstance(design, AdaptiveSettings):
                    out = simulate_adaptive(trace.accuracy, n, design, rng)
                else:
                    out = simulate_fixed(trace.accuracy, int(design), confidence, rng)
                row = {"design": name, "trace": trace.id, "seed": s}
                row["positions"] = trace.n_positions
                rows.append(row | _score(trace, out, fixed_total))
    return pd.DataFrame(rows)


def per_trace_table(frame: pd.DataFrame, adaptive: str, fixed: str) -> pd.DataFrame:
    """The validation table: per trace, the fixed design's rollouts and the adaptive
    design's mean rollouts, saving, and both designs' mean scores (over seeds)."""
    mean = frame.groupby(["design", "trace"], sort=False).mean(numeric_only=True)
    a, f = mean.loc[adaptive], mean.loc[fixed]
    table = pd.DataFrame(
        {
            "positions": f["positions"].astype(int),
            "fixed_rollouts": f["rollouts"].round().astype(int),
            "adaptive_rollouts": a["rollouts"].round().astype(int),
            "saving": 1 - a["rollouts"] / f["rollouts"],
            "spearman_fixed": f["spearman"],
            "spearman_adaptive": a["spearman"],
            "top5_fixed": f["top5"],
            "top5_adaptive": a["top5"],
            "coverage_adaptive": a["coverage"],
        }
    )
    total = table.sum(numeric_only=True)
    table.loc["all"] = table.mean(numeric_only=True)
    for col in ("positions", "fixed_rollouts", "adaptive_rollouts"):
        table.loc["all", col] = total[col]
    table.loc["all", "saving"] = 1 - total["adaptive_rollouts"] / total["fixed_rollouts"]
    return table


def design_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per design: share of the fixed-100 rollouts and the mean scores over traces and seeds."""
    return frame.groupby("design", sort=False)[["share", "spearman", "top5", "coverage"]].mean()


def short_name(trace_id: str) -> str:
    """``deepseek-r1-distill-qwen-14b/correct_base_solution/problem_1591`` ->
    ``qwen-14b/correct/1591``."""
    parts = trace_id.split("/")
    if len(parts) != 3:
        return trace_id
    model, solution, problem = parts
    return "/".join(
        [model.removeprefix("deepseek-r1-distill-"), solution.removesuffix("_base_solution"),
         problem.removeprefix("problem_")]
    )  # fmt: skip


def markdown(table: pd.DataFrame, digits: int = 2) -> str:
    """``table`` as a GitHub Markdown table: integers with thousands separators, shares and
    correlations to ``digits`` decimals."""

    def cell(v) -> str:
        if isinstance(v, str):
            return v
        if pd.isna(v):
            return ""
        if float(v).is_integer() and abs(v) >= 10:
            return f"{int(v):,}"
        return f"{v:.{digits}f}"

    head = [table.index.name or ""] + [str(c) for c in table.columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, row in table.iterrows():
        lines.append("| " + " | ".join([str(name)] + [cell(v) for v in row]) + " |")
    return "\n".join(lines) + "\n"
