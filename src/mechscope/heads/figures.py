"""Figures of a :class:`HeadsResult` (never of a model): heatmaps, similarity, agreement,
pruning curves.

:func:`attribution_figures` and :func:`pruning_figures` take the result and return named
figures (the report's figure blocks); the functions below them draw one figure from arrays
or frames.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from mechscope.heads.baselines import normalize_layers
from mechscope.heads.diagnostics import similarity_matrix
from mechscope.heads.result import HeadsResult
from mechscope.report import Figure, Series, curves, heatmap, scatter

KIND_NAMES = {
    "least_first": "least important first",
    "most_first": "most important first",
    "random": "random order (mean of orders)",
}


def order_label(kind: str) -> str:
    """``"joint/least_first"`` -> ``"joint: least important first"``."""
    ranking, _, order = kind.rpartition("/")
    name = KIND_NAMES.get(order, order)
    return f"{ranking}: {name}" if ranking else name


def head_heatmap(values: np.ndarray, title: str, what: str) -> Figure:
    """A layer × head map of one ``[layers, heads]`` score (red helps, blue hurts)."""
    n_layers, n_heads = values.shape
    return heatmap(
        values,
        [f"h{h}" for h in range(n_heads)],
        [f"L{layer}" for layer in range(n_layers)],
        title,
        diverging=True,
        colorbar_title=what,
        x_title="head",
        y_title="layer",
    )


def similarity_figure(matrix: np.ndarray, labels: Sequence[str], title: str) -> Figure:
    """Sample × sample Pearson correlation of per-sample attribution vectors."""
    caption = (
        "Each cell is the Pearson correlation between two samples' head attribution vectors "
        "(red: similar rankings, blue: opposite, white: unrelated). A uniformly red matrix "
        "means the method ranks heads the same way whatever the prompt. Axis labels are "
        "sample index and task."
    )
    return heatmap(
        matrix,
        list(labels),
        list(labels),
        title,
        diverging=True,
        zmid=0.0,
        colorbar_title="Pearson r",
        caption=caption,
    )


def pruning_figure(bands: pd.DataFrame, metric: str, title: str, y_title: str) -> Figure:
    """Objective or accuracy against the fraction of heads removed, one line per order."""
    series = []
    for kind, grp in bands[bands["metric"] == metric].groupby("kind", sort=False):
        grp = grp.sort_values("fraction")
        series.append(
            Series(
                order_label(str(kind)),
                grp["mean"].to_numpy(),
                grp["low"].to_numpy(),
                grp["high"].to_numpy(),
            )
        )
    x = sorted(bands["fraction"].unique())
    caption = (
        "Heads are switched off cumulatively in each order; lines are means over samples with "
        "bootstrap 95% bands (resampling samples). A good importance ranking stays near the "
        "start when the least important heads go first and collapses early when the most "
        "important go first, compared with random orders."
    )
    return curves(x, series, title, "fraction of heads removed", y_title, caption=caption)


def agreement_figure(a: np.ndarray, b: np.ndarray, name_a: str, name_b: str) -> Figure:
    """Mean attribution of every head under two methods (one point per head)."""
    n_heads = a.shape[-1]
    text = [f"L{i // n_heads} h{i % n_heads}" for i in range(a.size)]
    return scatter(
        a.reshape(-1),
        b.reshape(-1),
        f"Head attribution: {name_a} vs {name_b}",
        name_a,
        name_b,
        text=text,
        caption=(
            f"Each point is one head: its mean attribution under {name_a} (x) and {name_b} "
            "(y). Points along a line mean the two methods agree up to scale."
        ),
    )


def attribution_figures(result: HeadsResult) -> list[tuple[str, Figure]]:
    """``(name, figure)`` pairs: an importance heatmap per method (and, for IG, one scaled
    per layer), the per-sample similarity of every IG path, and the agreement of the first
    two paths."""
    out: list[tuple[str, Figure]] = []
    labels = [f"{i}:{t}" for i, t in enumerate(result.tasks)]  # short labels; ids in tables
    for kind, importance in result.importance.items():
        what = "gradient importance" if kind == "gradient" else "mean IG (helps +)"
        out.append(
            (
                f"attribution-heatmap-{kind}",
                head_heatmap(importance, f"Head importance: {kind}", what),
            )
        )
        if kind != "gradient":  # a few layers dominate raw IG; scaling each row shows the rest
            out.append(
                (
                    f"attribution-heatmap-{kind}-by-layer",
                    head_heatmap(
                        normalize_layers(importance),
                        f"Head importance within each layer: {kind}",
                        "mean IG / layer ℓ2 norm",
                    ),
                )
            )
    paths = [k for k in result.importance if k in result.attributions]
    if len(result.sample_ids) >= 2:
        for kind in paths:
            m = similarity_matrix(result.attributions[kind])
            title = f"Per-sample similarity of {kind} attributions"
            out.append((f"attribution-similarity-{kind}", similarity_figure(m, labels, title)))
    if len(paths) >= 2:
        a, b = paths[0], paths[1]
        fig = agreement_figure(result.importance[a], result.importance[b], a, b)
        out.append((f"attribution-agreement-{a}-{b}", fig))
    return out


def pruning_figures(result: HeadsResult) -> list[tuple[str, Figure]]:
    """``(name, figure)`` pairs: objective and accuracy against the fraction of heads
    removed (none when the run did not prune)."""
    bands = result.pruning_bands
    if bands is None:
        return []
    return [
        (
            "attribution-pruning-objective",
            pruning_figure(bands, "objective", "Pruning: objective", "objective"),
        ),
        (
            "attribution-pruning-accuracy",
            pruning_figure(bands, "accuracy", "Pruning: task accuracy", "accuracy"),
        ),
    ]
