"""Figures of the anchors workflow: functions of results or of their saved tables, never of
a model.

Each entry point takes a result (:class:`ResamplingResult`, :class:`ReceiverResult`,
:class:`SuppressionResult`) or its main table as the report reads it back from the run
(:func:`as_frame`), so a fresh result and a finished run draw the same figure.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from mechscope.anchors.result import ReceiverResult, ResamplingResult, SuppressionResult
from mechscope.anchors.traces.taxonomy import CATEGORIES
from mechscope.report import Edge, Figure, Node, Series, bars, curves, graph, heatmap
from mechscope.report.text_fit import cut
from mechscope.stats import mean_ci as stats_mean_ci

SENTENCE_HOVER_WIDTH = 240  # a sentence in a node's hover label (wrapped into lines)
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
    "receiver_score": "receiver score (attention from later sentences)",
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
    """Mean of the finite values and its 95% percentile bootstrap CI
    (:func:`mechscope.stats.mean_ci`); NaN bounds with fewer than 3 finite values or none
    that differ."""
    mean, low, high, n = stats_mean_ci(values, seed=seed)
    return (mean, low, high) if n >= 3 else (mean, np.nan, np.nan)


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


#: Past this many sentences the graph becomes a matrix (target × source): arcs between
#: hundreds of sentences no longer say which depends on which.
MATRIX_FROM = 150
LABELLED = 12  # sentences labelled beside their node (the most important); others on hover


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


def spaced_top(size: np.ndarray, k: int, gap: int) -> list[str]:
    """The ``k`` largest nodes, skipping any within ``gap`` positions of one already taken,
    so their numbers never print over each other."""
    taken: list[int] = []
    for i in np.argsort(-size, kind="stable"):
        if all(abs(int(i) - j) >= gap for j in taken):
            taken.append(int(i))
        if len(taken) == k:
            break
    return [str(i) for i in sorted(taken)]


def edge_budget(n: int) -> tuple[int, int]:
    """``(per_target, most)``: strongest dependencies kept into each sentence, and in all.
    A short trace shows two per sentence; a long one the strongest few dozen overall, so
    arcs stay countable."""
    return (2 if n <= 30 else 1), max(20, min(60, n))


def sentence_graph(
    chunks: ResamplingResult | pd.DataFrame,
    trace: str,
    texts: list[str],
    categories: list[str],
    matrix: np.ndarray | None,
    *,
    source_major: bool,
    edge_source: str,
) -> Figure:
    """Sentences of one trace as nodes (size: importance, colour: category) and their
    strongest dependencies as arcs; past :data:`MATRIX_FROM` sentences, the dependency
    matrix instead."""
    chunks = as_frame(chunks)
    col = importance_column(chunks)
    n = len(texts)
    imp = np.full(n, np.nan)
    part = chunks[chunks["trace"] == trace]
    if col is not None:
        imp[part["chunk_index"].to_numpy(int)] = part[col].to_numpy(dtype=float)
    if n > MATRIX_FROM and matrix is not None:
        return dependency_matrix(trace, matrix, source_major, edge_source, imp, col)
    size = np.where(np.isfinite(imp), np.abs(imp), 0.0) + 1e-3
    nodes = [
        Node(
            str(i),
            str(i),
            float(size[i]),
            categories[i],
            f"{i} [{categories[i]}] {cut(texts[i], SENTENCE_HOVER_WIDTH)}\n"
            f"importance: {imp[i]:.3g}",
        )
        for i in range(n)
    ]
    per_target, most = edge_budget(n)
    edges = [] if matrix is None else _edges_from(matrix, per_target, source_major)
    kept = sorted(edges, key=lambda e: -e.weight)[:most]
    labelled = spaced_top(size, LABELLED, gap=math.ceil(n / 30)) if n > 30 else None
    sized = LABELS.get(col, "importance") if col else "a constant (no importance computed)"
    more = f" (the {most} strongest of {len(edges)} shown)" if len(edges) > len(kept) else ""
    return graph(
        nodes,
        kept,
        f"Sentence graph — trace {trace} ({n} sentences)",
        layout="line",
        labelled=labelled,
        caption=f"Sentences in order from left to right, each a dot sized by {sized} and "
        f"coloured by category"
        + ("; the most important are numbered" if labelled is not None else "")
        + f". Arcs run from an earlier sentence to a later one that depends on it: the "
        f"{per_target} strongest positive dependencies of every sentence ({edge_source}){more}; "
        "wider is stronger. Hover a dot for its text.",
    )


def dependency_matrix(
    trace: str,
    matrix: np.ndarray,
    source_major: bool,
    edge_source: str,
    importance: np.ndarray,
    column: str | None,
) -> Figure:
    """The sentence graph of a long trace as a matrix: cell (target, source) is how much the
    later sentence depends on the earlier one; hover gives the source's importance."""
    m = matrix.T if source_major else matrix  # [target, source]
    n = m.shape[0]
    what = LABELS.get(column, "importance") if column else "importance"
    hover = [[f"source importance: {importance[i]:.3g}" for i in range(n)] for _ in range(n)]
    return heatmap(
        m,
        [str(i) for i in range(n)],
        [str(j) for j in range(n)],
        f"Sentence dependencies — trace {trace} ({n} sentences, matrix view)",
        diverging=True,
        hover_text=hover,
        colorbar_title="dependency",
        x_title="earlier sentence (source)",
        y_title="later sentence (target)",
        caption=f"With {n} sentences the graph is drawn as its matrix: cell (target, source) "
        f"is how much the later sentence depends on the earlier one ({edge_source}); red "
        f"above 0, blue below. Hover a cell for the source's {what}.",
    )
