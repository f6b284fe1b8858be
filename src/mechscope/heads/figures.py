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
from mechscope.heads.postprocess import orient
from mechscope.heads.result import HeadsResult
from mechscope.report import Figure, Series, heatmap, panels, scatter
from mechscope.report.findings import interval_marks
from mechscope.runs.tensors import arrays
from mechscope.stats import cell_ci

KIND_NAMES = {
    "least_first": "least important first",
    "most_first": "most important first",
    "random": "random orders (mean)",
}
#: The ranking IG paths in the order the report leads with them: per-layer IG meets
#: completeness; joint IG often does not (see the completeness table).
LEAD_ORDER = ("per_layer", "staggered", "joint", "random", "gradient")
SATURATE = 0.98  # head maps: colours span the 98th percentile of |importance|


def head_heatmap(
    values: np.ndarray, title: str, what: str, per_sample: np.ndarray | None = None
) -> Figure:
    """A layer × head map of one ``[layers, heads]`` score (red helps, blue hurts); with
    ``per_sample`` (``[n, layers, heads]``, oriented, whose mean is ``values``) a dot marks
    the heads whose 95% bootstrap interval over samples excludes 0."""
    n_layers, n_heads = values.shape
    marks = hover = None
    caption = (
        f"Each cell is {what} of one head: red helps the objective, blue hurts it, white is near 0."
    )
    if per_sample is not None:
        ci = cell_ci(per_sample)
        marks, hover, note = interval_marks(ci.low, ci.high, per_sample.shape[0], "samples")
        caption += note
    size = np.abs(values[np.isfinite(values)])
    spread = float(np.quantile(size, SATURATE)) if size.size else None
    if spread and size.max() > 2 * spread:  # a few heads dwarf the rest: let them saturate
        caption += (
            f" Colours saturate at ±{spread:.3g}: the strongest {1 - SATURATE:.0%} of heads go "
            f"beyond (up to {size.max():.3g}; hover for values)."
        )
    else:
        spread = None
    return heatmap(
        values,
        [f"h{h}" for h in range(n_heads)],
        [f"L{layer}" for layer in range(n_layers)],
        title,
        diverging=True,
        hover_text=hover,
        colorbar_title=what,
        x_title="head",
        y_title="layer",
        marks=marks,
        mark_label="95% interval excludes 0",
        spread=spread,
        caption=caption + " Hover a cell for its value and interval.",
    )


def lead_path(result: HeadsResult) -> str | None:
    """The IG path the report leads with (:data:`LEAD_ORDER`), or None without IG."""
    return next((k for k in LEAD_ORDER if k in result.attributions), None)


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
    """Small multiples: one panel per ranking (joint, per-layer, gradient ...), each with its
    least- and most-important-first curves and the random orders, ``metric`` against the
    fraction of heads removed."""
    part = bands[bands["metric"] == metric]
    by_kind = {str(k): g.sort_values("fraction") for k, g in part.groupby("kind", sort=False)}
    x = sorted(part["fraction"].unique())

    def series(kind: str) -> Series:
        g = by_kind[kind].set_index("fraction").reindex(x)
        name = KIND_NAMES.get(kind.rpartition("/")[2], kind)
        return Series(name, g["mean"].to_numpy(), g["low"].to_numpy(), g["high"].to_numpy())

    rankings = list(dict.fromkeys(k.split("/")[0] for k in by_kind if "/" in k))
    rankings.sort(key=lambda r: LEAD_ORDER.index(r) if r in LEAD_ORDER else len(LEAD_ORDER))
    by_panel = {}
    for ranking in rankings:
        kinds = [f"{ranking}/least_first", f"{ranking}/most_first", "random"]
        by_panel[f"ranked by {ranking}"] = [series(k) for k in kinds if k in by_kind]
    caption = (
        "One panel per importance ranking. Heads are switched off cumulatively in each order; "
        "lines are means over samples with bootstrap 95% bands (resampling samples), and the "
        "random orders are the same in every panel. A good ranking stays near the start when "
        "the least important heads go first and collapses early when the most important go "
        "first, compared with random orders."
    )
    return panels(x, by_panel, title, "fraction of heads removed", y_title, caption=caption)


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
    """``(name, figure)`` pairs: an importance heatmap per method, the lead path's first
    (:func:`lead_path`; and, for IG, one scaled per layer), the per-sample similarity of
    every IG path, and the agreement of the first two paths."""
    out: list[tuple[str, Figure]] = []
    labels = [f"{i}:{t}" for i, t in enumerate(result.tasks)]  # short labels; ids in tables
    attributions, importances = arrays(result.attributions), arrays(result.importance)
    kinds = sorted(importances, key=lambda k: (k != lead_path(result), k == "gradient"))
    for kind in kinds:
        importance = importances[kind]
        what = "gradient importance" if kind == "gradient" else "mean IG (helps +)"
        per_sample = None
        if kind in attributions:  # signed IG: the mean of the oriented samples
            per_sample = orient(attributions[kind], result.higher_is_better)
            # aggregate's signed mean is these operations on these numbers: equal bit for
            # bit; abs or relu changed some sample (no interval of the samples to draw)
            if not np.array_equal(per_sample.mean(axis=0), importance, equal_nan=True):
                per_sample = None
        title = f"Head importance: {kind} IG" if kind != "gradient" else "Head importance: gradient"
        out.append(
            (f"attribution-heatmap-{kind}", head_heatmap(importance, title, what, per_sample))
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
    paths = [k for k in importances if k in attributions]
    if len(result.sample_ids) >= 2:
        for kind in paths:
            m = similarity_matrix(attributions[kind])
            title = f"Per-sample similarity of {kind} attributions"
            out.append((f"attribution-similarity-{kind}", similarity_figure(m, labels, title)))
    if len(paths) >= 2:
        a, b = paths[0], paths[1]
        fig = agreement_figure(importances[a], importances[b], a, b)
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
