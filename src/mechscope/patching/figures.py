"""Figures of patching results (never of the model): heatmaps and per-layer curves.

- layer × position (or span) heatmap of a metric, averaged over pairs;
- head × layer heatmap for per-head ``z`` sweeps;
- feature × position heatmap for feature sweeps (one dictionary's features, one layer);
- per-layer curves (flip rates, Δlogit, ...) with bootstrap bands over pairs
  (:func:`mechscope.stats.curve_ci`, resampling unit = pair);
- attribution vs exact scatter.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mechscope.errors import InputError
from mechscope.patching.config import PER_HEAD_SITES
from mechscope.patching.result import PatchingResult
from mechscope.report import Figure, Series, curves, heatmap, scatter
from mechscope.report.findings import interval_marks
from mechscope.runs.tensors import array
from mechscope.stats import cell_ci, curve_ci

LABELS = {
    "logit_diff": "logit difference (correct − wrong)",
    "delta_logit": "Δ logit of the target",
    "target_logit": "target logit",
    "target_prob": "target probability",
    "target_logprob": "target log-probability",
    "flip_to_target": "flip to target (rate)",
    "flip_from_base": "flip from base (rate)",
    "kl_to_base": "KL(patched ‖ base), nats",
    "js_to_base": "JS to base, nats",
    "normalized_effect": "normalised patch effect",
}
NOISING_LABEL = "share of the clean effect removed (1 − normalised effect)"


_HEAD_SITE_WORDS = {
    "z": "output (z, before the output projection)",
    "q": "query (after rotary embeddings)",
    "k": "key (after rotary embeddings; a key/value head)",
    "v": "value (a key/value head)",
}


def _token(unit: str) -> str:
    return unit.split(":", 1)[-1].replace("Ġ", " ").replace("▁", " ").strip()


def unit_labels(result: PatchingResult, direction: str) -> list[str]:
    """Axis labels of the unit dimension: the span role where known; else the token, when
    every pair has the same one there, or the first pair's token marked with ``*`` (the
    caption says whose, :func:`label_note`)."""
    pairs = result.direction(direction)
    first = pairs[0]
    roles = first.roles or [""] * len(first.units)
    out = []
    for j, (unit, pos, role) in enumerate(zip(first.units, first.positions, roles, strict=True)):
        if pos < 0:
            out.append(unit)
        elif role:
            out.append(f"{pos} {role}")
        else:
            same = all(len(p.units) > j and _token(p.units[j]) == _token(unit) for p in pairs)
            out.append(f"{pos} {_token(unit)!r}" + ("" if same else "*"))
    return out


def label_note(result: PatchingResult, direction: str) -> str:
    """The caption's word on token labels that belong to one pair only (``*``)."""
    if not any(x.endswith("*") for x in unit_labels(result, direction)):
        return ""
    first = result.direction(direction)[0]
    return f" Labels marked * are pair {first.pair_id}'s tokens; other pairs differ there."


def shown_values(result: PatchingResult, metric: str, direction: str) -> tuple[np.ndarray, str]:
    """``[pairs, layers, units, heads]`` values a figure draws for ``metric``, and their label.

    Noising writes the corrupt activation into the clean run, so its normalised effect is 1
    where the patch changes nothing; drawn as is, a noising map is a wall of red with the real
    effects (0.93, 1.21) invisible. It is drawn as 1 − effect instead, the share of the clean
    logit difference the patch removes: 0 = no change, as in a denoising map, where 0 = no
    recovery."""
    arr = array(result.stack(metric, direction))
    if metric == "normalized_effect" and direction == "noising":
        return 1.0 - arr, NOISING_LABEL
    return arr, LABELS.get(metric, metric)


def position_heatmap(
    result: PatchingResult,
    metric: str = "normalized_effect",
    direction: str = "denoising",
    head: int = 0,
) -> Figure:
    """Rows = layers (top = first), columns = positions or spans; the mean over pairs, dots
    where its interval over pairs excludes 0 (noising drawn as 1 − effect,
    :func:`shown_values`)."""
    values, what = shown_values(result, metric, direction)
    arr = values[..., head]  # [pairs, layers, units]
    first = result.direction(direction)[0]
    ci = cell_ci(arr)  # [layers, units]
    mean = ci.mean
    marks, hover, note = interval_marks(ci.low, ci.high, arr.shape[0], "pairs")
    return heatmap(
        mean,
        unit_labels(result, direction),
        [str(x) for x in first.layers],
        f"{result.site} patching ({direction}): {what}, mean of {arr.shape[0]} pairs",
        diverging=True,
        hover_text=hover,
        colorbar_title=what,
        x_title="position / span",
        y_title="layer",
        marks=marks,
        mark_label="95% interval excludes 0",
        caption=_caption(result, direction, what) + " Rows are layers, columns what was "
        "patched; red is above 0, blue below, white near 0." + note + label_note(result, direction),
    )


def head_heatmap(
    result: PatchingResult,
    metric: str = "normalized_effect",
    direction: str = "denoising",
    unit: int = 0,
) -> Figure:
    """Rows = heads, columns = layers, for per-head sweeps (z, q, k, v; mean over pairs), dots
    where the interval over pairs excludes 0."""
    if result.site not in PER_HEAD_SITES:
        expected = ", ".join(PER_HEAD_SITES)
        raise InputError(
            f"expected a per-head sweep (site {expected}), got {result.site!r}", field="site"
        )
    values, what = shown_values(result, metric, direction)
    arr = values[:, :, unit, :]  # [pairs, layers, heads]
    first = result.direction(direction)[0]
    ci = cell_ci(arr)  # [layers, heads]
    mean = ci.mean
    marks, hover, note = interval_marks(ci.low.T, ci.high.T, arr.shape[0], "pairs")
    return heatmap(
        mean.T,
        [str(x) for x in first.layers],
        [f"H{h}" for h in first.heads],
        f"head {result.site} patching ({direction}, {unit_labels(result, direction)[unit]}): "
        f"{what}",
        diverging=True,
        hover_text=hover,
        colorbar_title=what,
        x_title="layer",
        y_title="head",
        marks=marks,
        mark_label="95% interval excludes 0",
        caption=_caption(result, direction, what) + f" Each cell patches one head's "
        f"{_HEAD_SITE_WORDS[result.site]} at one layer." + note,
    )


def feature_heatmap(
    result: PatchingResult,
    metric: str = "normalized_effect",
    direction: str = "denoising",
) -> Figure:
    """Rows = the swept features, columns = positions or spans, for a feature sweep (its
    one layer; mean over pairs), dots where the interval over pairs excludes 0."""
    if result.site != "feature":
        raise InputError(f"expected a feature sweep, got site {result.site!r}", field="site")
    values, what = shown_values(result, metric, direction)
    arr = values[:, 0].transpose(0, 2, 1)  # [pairs, features, units]
    first = result.direction(direction)[0]
    ci = cell_ci(arr)  # [features, units]
    marks, hover, note = interval_marks(ci.low, ci.high, arr.shape[0], "pairs")
    return heatmap(
        ci.mean,
        unit_labels(result, direction),
        [f"f{f}" for f in first.heads],
        f"feature patching at layer {first.layers[0]} ({direction}): {what}, mean of "
        f"{arr.shape[0]} pairs",
        diverging=True,
        hover_text=hover,
        colorbar_title=what,
        x_title="position / span",
        y_title="feature",
        marks=marks,
        mark_label="95% interval excludes 0",
        caption=_caption(result, direction, what) + " Each cell patches one feature of the "
        "dictionary (spliced with its error term, so only that feature's decoder contribution "
        "changes) at one position or span." + note + label_note(result, direction),
    )


def layer_curves(
    result: PatchingResult,
    metrics: Sequence[str] = ("flip_to_target",),
    direction: str = "denoising",
    units: Sequence[int] | None = None,
    *,
    n_resamples: int = 2000,
    seed: int = 0,
) -> Figure:
    """Per-layer mean of ``metrics`` for each chosen unit, with 95% bootstrap bands over
    pairs (heads averaged). ``units`` default: every unit of span/all grids, else the
    unit with the largest mean |effect|."""
    first = result.direction(direction)[0]
    labels = unit_labels(result, direction)
    if units is None:
        if first.granularity == "position":
            eff = np.abs(np.nanmean(array(result.stack(metrics[0], direction)), axis=(0, 1, 3)))
            units = [int(np.nanargmax(eff))]
        else:
            units = list(range(len(first.units)))
    series = []
    for metric in metrics:
        arr = np.nanmean(array(result.stack(metric, direction)), axis=3)  # [pairs, layers, units]
        for u in units:
            values = arr[:, :, u]  # [pairs, layers]
            name = f"{LABELS.get(metric, metric)} · {labels[u]}"
            if values.shape[0] >= 2:
                ci = curve_ci(values, n_resamples=n_resamples, seed=seed)
                series.append(Series(name, ci.mean, ci.low, ci.high, group=metric))
            else:
                series.append(Series(name, values[0], group=metric))
    y = LABELS.get(metrics[0], metrics[0]) if len(metrics) == 1 else "value"
    return curves(
        first.layers,
        series,
        f"{result.site} patching ({direction}) by layer",
        "layer",
        y,
        hline=0.0,
        caption=f"Mean over {len(result.direction(direction))} pairs at each patched layer; "
        "shaded bands are 95% bootstrap intervals resampling pairs. "
        + _caption(result, direction, y),
    )


def attribution_scatter(result: PatchingResult, direction: str = "denoising") -> Figure:
    """Exact change vs its attribution-patching estimate, one point per grid cell."""
    items = [p for p in result.direction(direction) if p.attribution is not None]
    if not items:
        raise InputError("expected attribution results", field="attribution")
    metric = items[0].attribution_metric or "logit_diff"
    exact = np.concatenate([array(p.exact_change(metric)).ravel() for p in items])
    atp = np.concatenate([array(p.attribution).ravel() for p in items])
    unit_word = "f" if result.site == "feature" else "h"
    text = [
        f"{p.pair_id} L{layer} {unit} {unit_word}{h}"
        for p in items
        for layer in p.layers
        for unit in p.units
        for h in p.heads
    ]
    return scatter(
        exact,
        atp,
        f"attribution vs exact patching ({direction}, Δ {metric})",
        f"exact Δ {metric}",
        f"attribution estimate of Δ {metric}",
        text=text,
        diagonal=True,
        caption="Each point is one (pair, layer, position, head) patch. On the dashed line the "
        "gradient estimate equals the exact effect; far from it the metric is not linear "
        "in that activation.",
    )


def _caption(result: PatchingResult, direction: str, what: str) -> str:
    if direction == "denoising":
        how = (
            "the clean run's activation is written into the corrupt run (denoising: is it "
            "sufficient?)"
        )
        scale = (
            ""
            if what != LABELS["normalized_effect"]
            else (" 1 = the clean logit difference fully recovered, 0 = none recovered.")
        )
    else:
        how = (
            "the corrupt run's activation is written into the clean run (noising: is it necessary?)"
        )
        scale = (
            ""
            if what != NOISING_LABEL
            else (
                " 0 = no change from the clean run, 1 = the clean logit difference gone (as "
                "corrupt); the stored normalised effect is 1 minus this."
            )
        )
    return f"For each cell, {how}; the colour or height is {what}.{scale}"
