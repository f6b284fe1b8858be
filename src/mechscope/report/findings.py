"""Numbers in a finding's words: a value with its interval, said the same way in every section.

A finding is the sentence a section opens with (and the report's summary lists). It gives
the number and its interval as ``0.93 [0.81, 1.02]`` with what the interval is, or says that
there is none (one sample, one seed) rather than drawing or writing a fake one.
"""

from __future__ import annotations

import math

import numpy as np


def number(value: float, digits: int = 2) -> str:
    """``value`` to ``digits`` decimals, fewer for large values (``242``, ``31.4``) and two
    significant digits for small ones (``0.00018``); "–" for NaN."""
    if value is None or not math.isfinite(value):
        return "–"
    size = abs(value)
    if size >= 100:
        return f"{value:.0f}"
    if size >= 10:
        return f"{value:.{min(digits, 1)}f}"
    if value != 0 and size < 0.01:
        return f"{value:.2g}"
    return f"{value:.{digits}f}"


def with_interval(
    mean: float, low: float, high: float, digits: int = 2, missing: str = " (no interval)"
) -> str:
    """``"0.93 [0.81, 1.02]"``; with an undefined bound the value and ``missing`` (leave it
    empty where the sentence says why there is no interval, :func:`ci_words`)."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return f"{number(mean, digits)}{missing}"
    return f"{number(mean, digits)} [{number(low, digits)}, {number(high, digits)}]"


def ci_words(n: int, unit: str, kind: str = "bootstrap") -> str:
    """What the brackets mean: ``"95% bootstrap CI over 12 pairs"``, or why there is none
    (``unit`` is plural; one of them is said in the singular)."""
    if n < 2:
        one = unit[:-1] if unit.endswith("s") else unit
        return f"n = {n} {one if n == 1 else unit}, so no interval"
    return f"95% {kind} CI over {n} {unit}"


def pct(value: float) -> str:
    """A share as a percentage with no decimals (``0.134`` → ``"13%"``)."""
    return "–" if not math.isfinite(value) else f"{100 * value:.0f}%"


def interval_marks(
    low: np.ndarray, high: np.ndarray, n: int, unit: str
) -> tuple[np.ndarray, list[list[str]], str]:
    """For a heatmap of means with 95% intervals ``[low, high]`` (``[rows, cols]``) over
    ``n`` ``unit``: the cells whose interval excludes 0 (to mark with a dot), every cell's
    interval as hover text, and the caption's sentence on the dots."""
    with np.errstate(invalid="ignore"):
        marks = (low > 0) | (high < 0)
    hover = [
        [f"95% CI [{lo:.3g}, {hi:.3g}] over {n} {unit}" for lo, hi in zip(lr, hr, strict=True)]
        for lr, hr in zip(low, high, strict=True)
    ]
    if n < 2:
        return marks, hover, f" One of {unit}: no intervals, so no dots."
    rough = " (with so few, a rough guide)" if n < 5 else ""
    note = (
        f" A dot marks a cell whose 95% bootstrap interval over the {n} {unit} excludes 0{rough}."
    )
    return marks, hover, note
