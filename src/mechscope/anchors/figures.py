"""Figures of the anchors workflow: functions of results or of their saved tables, never of
a model.

Each entry point takes a result (:class:`ResamplingResult`, :class:`ReceiverResult`,
:class:`SuppressionResult`) or its main table as the report reads it back from the run
(:func:`as_frame`), so a fresh result and a finished run draw the same figure.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from mechscope.anchors.result import ReceiverResult, ResamplingResult, SuppressionResult
from mechscope.anchors.taxonomy import CATEGORIES
from mechscope.report import Edge, Figure, Node, Series, bars, curves, graph, heatmap
from mechscope.stats import curve_ci

IMPORTANCE_COLUMNS = (
    "counterfactual_importance_kl",
    "resampling_importance_kl",
    "resampling_importance_accuracy",
)
LABELS = {
    "counterfactual_importance_kl": "counterfactual importance (KL, nats)",
    "counterfactual_importance_accuracy": "counterfactual importance (Δ accuracy)",
    "resampling_importance_kl": "resampling importance (KL, nats)",
    "resampling_importance_accuracy": "resampling importance (Δ accuracy)",
    "forced_importance_accuracy": "forced-answer importance (Δ accuracy)",
    "receiver_score": "receiver score (mean attention from ≥ proximity later sentences)",
}


def as_frame(
    data: ResamplingResult | ReceiverResult | SuppressionResult | pd.DataFrame,
) -> pd.DataFrame:
    """A result's main table (``to_frame()``); a table read back from the run passes as is."""
    return data if isinstance(data, pd.DataFrame) else data.to_frame()


def importance_column(chunks: ResamplingResult | pd.DataFrame) -> str | None:
    """The first importance metric with a finite value (counterfactual KL when embedded)."""
    chunks = as_frame(chunks)
    for col in IMPORTANCE_COLUMNS:
        if col in chunks and np.isfinite(chunks[col].to_numpy(dtype=float)).any():
            return col
    return None


def mean_ci(values: np.ndarray, seed: int = 0) -> tuple[float, float, float]:
    """Mean of the finite values and its 95% percentile bootstrap CI (:func:`curve_ci`); NaN
    bounds with fewer than 3 finite values or none that differ."""
    v = values[np.isfinite(values)]
    if v.size == 0:
        return np.nan, np.nan, np.nan
    if v.size < 3 or np.all(v == v[0]):
        return float(v.mean()), np.nan, np.nan
    ci = curve_ci(v, seed=seed)
    return float(v.mean()), float(ci.low), float(ci.high)


def by_category(frame: pd.DataFrame, column: str) -> pd.DataFrame:
    """Per category (taxonomy order): n, mean and CI of ``column``."""
    rows = []
    for cat in CATEGORIES:
        vals = frame.loc[frame["category"] == cat, column].to_numpy(dtype=float)
        if np.isfinite(vals).any():
            mean, low, high = mean_ci(vals)
            rows.append(
                {
                    "category": cat,
                    "n": int(np.isfinite(vals).sum()),
                    "mean": mean,
                    "low": low,
                    "high": high,
                }
            )
    return pd.DataFrame(rows, columns=["category", "n", "mean", "low", "high"])


def category_bars(frame: ResamplingResult | pd.DataFrame, column: str, title: str) -> Figure | None:
    """Mean of ``column`` per sentence category, with bootstrap CIs over sentences (``frame``:
    chunks, or any table with ``category`` and ``column``)."""
    table = by_category(as_frame(frame), column)
    if table.empty:
        return None
    has_ci = table["low"].notna().all()
    series = Series(
        LABELS.get(column, column),
        table["mean"].to_numpy(),
        table["low"].to_numpy() if has_ci else None,
        table["high"].to_numpy() if has_ci else None,
    )
    cats = [f"{c} (n={n})" for c, n in zip(table["category"], table["n"], strict=True)]
    caption = (
        f"Bar: mean {LABELS.get(column, column)} of the sentences of each category (rule-based "
        "labels); n counts sentences. "
        + ("Whiskers: 95% bootstrap CI over sentences. " if has_ci else "")
        + "Higher bars: sentences of that kind matter more (or receive more attention)."
    )
    return bars(
        cats, [series], title, LABELS.get(column, column), "category", horizontal=True,
        caption=caption,
    )  # fmt: skip


def position_curves(chunks: ResamplingResult | pd.DataFrame, column: str) -> Figure:
    """``column`` against chunk index, one line per trace."""
    chunks = as_frame(chunks)
    n = int(chunks["chunk_index"].max()) + 1
    series = []
    for trace, part in chunks.groupby("trace", sort=False):
        y = np.full(n, np.nan)
        y[part["chunk_index"].to_numpy(dtype=int)] = part[column].to_numpy(dtype=float)
        series.append(Series(str(trace), y))
    return curves(
        list(range(n)),
        series,
        f"{LABELS.get(column, column)} by position in the trace",
        "chunk index (sentence position)",
        LABELS.get(column, column),
        hline=0.0,
        caption="Each line is one trace: the importance of its k-th sentence. Peaks are "
        "candidate thought anchors; gaps are sentences that were not resampled.",
    )


def kurtosis_heatmap(heads: ReceiverResult | pd.DataFrame) -> Figure:
    """Mean kurtosis of every head's vertical scores (layer × head), last layer on top."""
    z = as_frame(heads).pivot(index="layer", columns="head", values="mean_kurtosis").sort_index()
    return heatmap(
        z.to_numpy()[::-1],
        [f"H{h}" for h in z.columns],
        [f"L{layer}" for layer in z.index[::-1]],
        "Head kurtosis of vertical attention scores",
        colorbar_title="kurtosis",
        x_title="head",
        y_title="layer",
        caption="Kurtosis (mean over traces) of each head's vertical scores. Bright cells are "
        "heads whose attention from later sentences lands on a few sentences (heavy-tailed "
        "vertical scores): receiver-head candidates. Blank: excluded layer (0) or undefined "
        "(too few sentences).",
    )


def suppression_heatmap(supp: SuppressionResult | pd.DataFrame, trace: str, n: int) -> Figure:
    """Row-normalised suppression matrix of one trace (rows: targets, columns: sources)."""
    supp = as_frame(supp)
    part = supp[supp["trace"] == trace]
    z = np.full((n, n), np.nan)
    z[part["target"].to_numpy(int), part["source"].to_numpy(int)] = part["normalized"]
    raw = np.full((n, n), np.nan)
    raw[part["target"].to_numpy(int), part["source"].to_numpy(int)] = part["mean_log_kl"]
    hover = [[f"mean log(KL+ε) = {raw[j, i]:.3g}" for i in range(n)] for j in range(n)]
    return heatmap(
        z,
        [str(i) for i in range(n)],
        [str(j) for j in range(n)],
        f"Attention suppression — trace {trace}",
        diverging=True,
        hover_text=hover,
        colorbar_title="row-centred mean log KL",
        x_title="suppressed sentence (source)",
        y_title="affected sentence (target)",
        caption="Cell (target, source): how much hiding the source sentence from all later "
        "tokens (every layer and head) changes the model's predictions of the target's "
        "tokens, as mean log(KL + ε), minus the row mean. Red: this earlier sentence matters "
        "more than the target's average source; blue: less. Hover for the raw value.",
    )


def _edges_from(matrix: np.ndarray, per_target: int, source_major: bool) -> list[Edge]:
    """Strongest positive edges into each target; ``matrix[src, dst]`` if ``source_major``
    else ``matrix[dst, src]``."""
    m = matrix if not source_major else matrix.T  # → [target, source]
    edges = []
    for j in range(m.shape[0]):
        row = np.where(np.isfinite(m[j]) & (m[j] > 0), m[j], -np.inf)
        for i in np.argsort(-row)[:per_target]:
            if np.isfinite(row[i]):
                edges.append(Edge(str(i), str(j), float(row[i])))
    return edges


def sentence_graph(
    chunks: ResamplingResult | pd.DataFrame,
    trace: str,
    texts: list[str],
    categories: list[str],
    matrix: np.ndarray | None,
    *,
    source_major: bool,
    edge_source: str,
    per_target: int = 2,
) -> Figure:
    """Sentences of one trace as nodes (size: importance, colour: category) and their
    strongest dependencies as edges."""
    chunks = as_frame(chunks)
    col = importance_column(chunks)
    imp = np.full(len(texts), np.nan)
    part = chunks[chunks["trace"] == trace]
    if col is not None:
        imp[part["chunk_index"].to_numpy(int)] = part[col].to_numpy(dtype=float)
    size = np.where(np.isfinite(imp), np.abs(imp), 0.0) + 1e-3
    nodes = [
        Node(
            str(i),
            str(i),
            float(size[i]),
            categories[i],
            f"{i} [{categories[i]}] {texts[i][:120]}\nimportance: {imp[i]:.3g}",
        )
        for i in range(len(texts))
    ]
    edges = [] if matrix is None else _edges_from(matrix, per_target, source_major)
    return graph(
        nodes,
        edges,
        f"Sentence graph — trace {trace}",
        layout="line",
        caption=f"Nodes are the trace's sentences in order, sized by "
        f"{LABELS.get(col, 'importance') if col else 'a constant (no importance computed)'} "
        f"and coloured by category. Arcs: for every sentence, its {per_target} strongest "
        f"positive dependencies on earlier sentences ({edge_source}); wider is stronger. "
        "Hover a node for its text.",
    )
