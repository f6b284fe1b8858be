"""Figures of features results (never of the model): training curves, the metrics per
dictionary with their intervals."""

from __future__ import annotations

import numpy as np

from mechscope.features.result import EvalResult, TrainingResult
from mechscope.report import Figure, Series, bars, panels

CURVES = {"fvu": "fraction of variance unexplained", "l0": "L0", "dead": "dead fraction"}


def training_curves(result: TrainingResult) -> Figure:
    """FVU, L0 and the dead fraction of each dictionary against training tokens."""
    log = result.log
    names = list(dict.fromkeys(log["name"]))
    tokens = log[log["name"] == names[0]]["tokens"].to_numpy()
    by_panel = {}
    for key, label in CURVES.items():
        series = []
        for name in names:
            rows = log[log["name"] == name]
            series.append(Series(name, rows[key].to_numpy()[: len(tokens)]))
        by_panel[label] = series
    return panels(
        tokens, by_panel, "training curves", "training tokens", "",
        caption="Each dictionary's training loss (the fraction of its batch's variance "
        "unexplained, before the auxiliary loss), features active per token and the fraction "
        "of features that have not fired in the last dead_tokens tokens, logged every step.",
    )  # fmt: skip


def metric_bars(result: EvalResult, metric: str, label: str) -> Figure:
    """One bar per dictionary with its bootstrap interval over contexts."""
    rows = result.metrics[result.metrics["metric"] == metric]
    return bars(
        list(rows["name"]),
        [Series(label, rows["value"].to_numpy(), rows["low"].to_numpy(), rows["high"].to_numpy())],
        f"{label} per dictionary", "", label,
        caption=f"{label} on held-out tokens; whiskers: 95% bootstrap intervals resampling "
        "contexts.",
    )  # fmt: skip


def summary_values(result: EvalResult, metric: str) -> np.ndarray:
    return result.metrics[result.metrics["metric"] == metric]["value"].to_numpy()
