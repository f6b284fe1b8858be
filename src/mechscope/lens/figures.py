"""Figures of the lens workflows: functions of results, never of a model.

The entry points (:func:`sample_figure`, :func:`curves_figure`, :func:`progress_figure`,
:func:`attention_figures`, :func:`candidate_figures`) take a
:class:`~mechscope.lens.result.DiffResult` or :class:`~mechscope.lens.result.CandidateResult`,
as the report reopens it from a run directory. They draw through the functions of one
frame (:func:`sample_heatmap`, :func:`metric_curves_figure`, :func:`aligned_heatmap`,
:func:`attention_figure`: the frames of ``DiffResult.to_frame()`` and its ``tables``), which
the HumanEval study also draws its own tables with.

Layer heatmaps put the last layer at the top (the model's output), so reading upward
follows the forward pass.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from mechscope.lens.result import CandidateResult, DiffResult
from mechscope.report import Figure, Series, curves, heatmap
from mechscope.report.text_fit import cut

LABELS = {
    "dnll": "ΔNLL ({a} − {b}, nats)",
    "js": "JS divergence (nats)",
    "kl_ab": "KL({a}‖{b}) (nats)",
    "kl_ba": "KL({b}‖{a}) (nats)",
    "nll_a": "NLL under {a} (nats)",
    "nll_b": "NLL under {b} (nats)",
}
Names = tuple[str, str] | None  # the conditions A and B, by name
TOKEN_WIDTH = 12  # a token beside its index under a heatmap column of a few pixels


def label(metric: str, names: Names = None) -> str:
    """The metric's axis label with the conditions named (``A`` and ``B`` when unknown)."""
    a, b = names or ("A", "B")
    return LABELS[metric].format(a=a, b=b)


def _axis_labels(texts: list[str]) -> list[str]:
    """Unique column labels: the token's index and its text (whitespace shown as ``⏎``/``·``).

    Every column carries its text; the renderers thin the ticks (the static one to at most
    40), so whichever ticks are drawn show a token, not a bare index."""
    return [f"{i} {_shown(t)}" for i, t in enumerate(texts)]


def _shown(text: str) -> str:
    """A token's text for an axis label: at most :data:`TOKEN_WIDTH` columns, whitespace
    made visible (the hover label gives the whole token)."""
    t = text.strip() or text.replace("\n", "⏎").replace(" ", "·")
    return cut(t, TOKEN_WIDTH)


def sample_heatmap(
    tokens: pd.DataFrame, sample: str, metric: str, contrast: str, names: Names = None
) -> Figure:
    """Layer × token heatmap of one sample (ΔNLL: diverging, centred at 0)."""
    part = tokens[(tokens["sample"] == sample) & (tokens["metric"] == metric)]
    z = part.pivot(index="layer", columns="token", values="value").sort_index()  # [L, T]
    texts = (
        part[part["layer"] == part["layer"].min()]
        .sort_values("token")["token_text"]
        .astype(str)
        .tolist()
    )
    hover = [[f"token {j}: {t!r}" for j, t in enumerate(texts)] for _ in range(z.shape[0])]
    diverging = metric == "dnll"
    return heatmap(
        z.to_numpy()[::-1],
        _axis_labels(texts),
        [str(v) for v in z.index[::-1]],
        f"{label(metric, names)} per layer and continuation token — sample {sample} ({contrast})",
        diverging=diverging,
        hover_text=hover[::-1],
        colorbar_title=metric,
        x_title="continuation token (index, text)",
        y_title="layer",
        caption=_token_caption(metric, names),
    )


def _token_caption(metric: str, names: Names) -> str:
    """How to read one cell of a layer × token heatmap of ``metric``."""
    a, b = names or ("A", "B")
    lens = (
        "read through the model's own final norm and unembedding at that layer (logit lens), "
        "with the continuation teacher-forced after each condition's prefix."
    )
    if metric == "dnll":
        return (
            f"Each cell is {label(metric, names)} of the true next token, {lens} Blue: "
            f"condition {a} predicts the token better than {b}; red: worse."
        )
    if metric in ("js", "kl_ab", "kl_ba"):
        return (
            f"Each cell is {label(metric, names)} between the two conditions' next-token "
            f"distributions at that position (whatever the true token), {lens} Brighter: the "
            "conditions predict more differently."
        )
    return f"Each cell is {label(metric, names)} of the true next token, {lens}"


def aligned_heatmap(
    aligned: pd.DataFrame, metric: str, alignment: str = "progress", names: Names = None
) -> Figure:
    """Layer × progress-bin (or first-K / anchor) heatmap averaged over samples."""
    part = aligned[(aligned["alignment"] == alignment) & (aligned["metric"] == metric)]
    z = part.pivot(index="layer", columns="column", values="mean").sort_index()
    x_title = {
        "progress": "progress through the continuation (bin)",
        "first_k": "semantic token",
        "anchor": "semantic tokens from the anchor",
    }[alignment]
    return heatmap(
        z.to_numpy()[::-1],
        [str(c) for c in z.columns],
        [str(v) for v in z.index[::-1]],
        f"{label(metric, names)} by layer, aligned by {alignment.replace('_', ' ')} "
        "(mean over samples)",
        diverging=metric == "dnll",
        colorbar_title=metric,
        x_title=x_title,
        y_title="layer",
        caption=(
            "Semantic tokens only (whitespace-only tokens dropped); each sample's tokens are "
            "mapped to columns, then columns are averaged over the samples that reach them. "
            "Blank cells: no sample reaches that column."
        ),
    )


def metric_curves_figure(
    table: pd.DataFrame, metric: str, kind: str = "curve", names: Names = None
) -> Figure:
    """Per-layer curves (mean over semantic tokens, then samples) with CI bands per group."""
    part = table[(table["metric"] == metric) & (table["kind"] == kind)]
    series = []
    for group, g in part.groupby("group", sort=False):
        g = g.sort_values("layer")
        low, high = g["low"].to_numpy(), g["high"].to_numpy()
        has = not (np.all(np.isnan(low)) or np.all(np.isnan(high)))
        series.append(
            Series(
                f"{group} (n={int(g['n'].iloc[0])})",
                g["mean"].to_numpy(),
                low if has else None,
                high if has else None,
            )
        )
    layers = sorted(part["layer"].unique())
    what = "difference between groups" if kind == "difference" else "per group"
    return curves(
        layers,
        series,
        f"{label(metric, names)} per layer, {what}",
        "layer",
        label(metric, names),
        hline=0.0 if metric == "dnll" or kind == "difference" else None,
        caption=(
            "Each line is the mean over samples of the per-sample mean over "
            "semantic tokens; bands are 95% bootstrap CIs resampling samples "
            "(stratified by group for 'all'; a difference band resamples both "
            "groups in each replicate)."
        ),
    )


def attention_figure(table: pd.DataFrame, condition: str) -> Figure:
    """Attention mass per segment and layer (mean over heads and semantic tokens)."""
    part = table[(table["condition"] == condition) & (table["group"] == "all")]
    series = []
    for seg, g in part.groupby("segment", sort=True):
        g = g.sort_values("layer")
        low, high = g["low"].to_numpy(), g["high"].to_numpy()
        has = not np.all(np.isnan(low))
        series.append(
            Series(str(seg), g["mean"].to_numpy(), low if has else None, high if has else None)
        )
    layers = sorted(part["layer"].unique())
    return curves(
        layers,
        series,
        f"Attention mass by segment — condition {condition}",
        "layer",
        "attention probability",
        caption=(
            "For the query that predicts each continuation token, the attention "
            "probability summed over each segment's keys ('continuation' = the "
            "continuation so far, 'rest' = every other key), averaged over heads "
            "and semantic tokens, then samples; bands are 95% bootstrap CIs. The "
            "segments of a condition sum to 1."
        ),
    )


def sample_figure(result: DiffResult, metric: str) -> Figure:
    """Layer × token heatmap of ``metric`` for the result's first sample."""
    a, b = result.contrast
    first = result.samples[0].sample_id
    return sample_heatmap(result.to_frame(), first, metric, f"{a} − {b}", result.contrast)


def curves_figure(result: DiffResult, metric: str, kind: str = "curve") -> Figure:
    """Per-layer curves of ``metric`` (``kind``: per group, or the groups' difference)."""
    return metric_curves_figure(result.tables["curves"], metric, kind, result.contrast)


def progress_figure(result: DiffResult, metric: str) -> Figure:
    """Layer × progress-bin heatmap of ``metric`` averaged over samples."""
    return aligned_heatmap(result.tables["aligned"], metric, names=result.contrast)


def attention_figures(result: DiffResult) -> list[Figure]:
    """Attention mass by segment and layer, one figure per condition (in table order)."""
    table = result.tables["attention"]
    return [attention_figure(table, str(cond)) for cond in table["condition"].unique()]


def candidate_figures(result: CandidateResult) -> list[Figure]:
    """Win-rate and margin curves of the candidate readout, labels named by their fields."""
    table, a, b = result.curves, result.label_a, result.label_b

    def series(metric: str, name: str) -> Series:
        g = table[table["metric"] == metric].sort_values("layer")
        return Series(name, g["mean"].to_numpy(), g["low"].to_numpy(), g["high"].to_numpy())

    layers = sorted(table["layer"].unique())
    n = int(table["n"].iloc[0])
    wins = curves(
        layers,
        [series("win_a", a), series("win_b", b), series("win_other", "other")],
        f"Which candidate wins at each layer (K-way logit lens, n={n})",
        "layer",
        "win rate",
        caption=(
            "Share of samples whose highest-scoring candidate at that layer is "
            "label A, label B or another candidate; bands are 95% bootstrap CIs "
            "resampling samples."
        ),
    )
    margin = curves(
        layers,
        [series("margin", f"score({b}) − score({a})")],
        "Margin between the two labels per layer",
        "layer",
        "log-prob difference",
        hline=0.0,
        caption=(
            f"Positive: the layer prefers the {b} label; negative: the {a} "
            "label. Bands are 95% bootstrap CIs resampling samples."
        ),
    )
    return [wins, margin]
