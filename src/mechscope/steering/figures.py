"""Figures of steering results (never of the model): the metric against alpha, with 95 %
bootstrap intervals over prompts."""

from __future__ import annotations

import numpy as np

from mechscope.report import Figure, Series, curves
from mechscope.runs.tensors import array
from mechscope.stats import curve_ci
from mechscope.steering.result import SteeringResult

LABELS = {
    "logit_diff": "logit difference (target − versus)",
    "target_logprob": "log-probability of the target",
    "target_prob": "probability of the target",
}


def alpha_curve(result: SteeringResult, metric: str = "logit_diff", *, seed: int = 0) -> Figure:
    """Mean ``metric`` over prompts at each alpha, with a bootstrap band (resampling unit:
    the prompt)."""
    values = array(result.metrics[metric])  # [prompts, alphas]
    keep = ~np.isnan(values).all(axis=1)
    values = values[keep]
    what = LABELS.get(metric, metric)
    if values.shape[0] >= 2:
        ci = curve_ci(values, seed=seed)
        series = [Series(what, ci.mean, ci.low, ci.high)]
    else:
        series = [Series(what, values[0])]
    where = f"{result.site}[{result.layer}]" + (
        "" if result.head is None else f" head {result.head}"
    )
    how = {
        "add": "The direction is added (h + α v)",
        "project": "The direction is projected out (h − α (h·d̂) d̂)",
        "clamp": f"Feature {result.feature} is clamped to α",
    }[result.mode]
    zero = "the feature off" if result.mode == "clamp" else "the unsteered run"
    if result.feature is not None and result.mode != "clamp":
        how += f", v feature {result.feature}'s decoder row,"
        where = f"feature {result.feature} → {where}"
    return curves(
        result.alphas.tolist(),
        series,
        f"steering at {where}: {what} by α",
        "α",
        what,
        hline=float(np.nanmean(values[:, result.unsteered])),
        caption=f"{how} at every position of every prompt; α = 0 is {zero} (dashed line: its "
        f"mean). Mean over {values.shape[0]} prompts, read at the next token in fp32; shaded: "
        "95% bootstrap intervals resampling prompts.",
    )
