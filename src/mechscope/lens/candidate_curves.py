"""Per-layer curves of the candidate readout: win-rates and margins, with CIs.

Per layer, the winner is the candidate with the highest score; win-rates count how often
it is label A, label B or another candidate. The margin is ``score(B) - score(A)``
(positive: the layer leans to label B). Curves average over samples with bootstrap CIs
that resample samples.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from mechscope.lens.aggregate import AggregateOptions, ci_rows
from mechscope.stats.finite import require_finite

CURVE_METRICS = ("win_a", "win_b", "win_other", "margin", "restricted_p_a", "restricted_p_b")


def per_sample_curves(scores: np.ndarray, a: int, b: int) -> dict[str, np.ndarray]:
    """``[L]`` curves of one sample: win indicators, margin, restricted probabilities."""
    winner = scores.argmax(axis=1)  # [L]
    restricted = scores - np.logaddexp.reduce(scores, axis=1, keepdims=True)  # [L, K]
    return {
        "win_a": (winner == a).astype(np.float64),
        "win_b": (winner == b).astype(np.float64),
        "win_other": ((winner != a) & (winner != b)).astype(np.float64),
        "margin": scores[:, b].astype(np.float64) - scores[:, a],
        "restricted_p_a": np.exp(restricted[:, a]),
        "restricted_p_b": np.exp(restricted[:, b]),
    }


def candidate_curves(samples: Sequence[dict], opts: AggregateOptions) -> pd.DataFrame:
    """Every curve of :data:`CURVE_METRICS`, mean over samples with CI rows per layer. A
    sample whose scores are not all finite is refused, naming it and the layer: a winner
    (argmax) of NaN scores would be an arbitrary candidate, counted as a win."""
    for s in samples:
        require_finite(s["scores"], "candidate score", sample=s.get("sample_id"))
    frames = []
    per = [per_sample_curves(np.asarray(s["scores"]), s["label_a"], s["label_b"]) for s in samples]
    for metric in CURVE_METRICS:
        values = np.stack([p[metric] for p in per])  # [n, L]
        frames.append(ci_rows(values, opts, metric=metric))
    return pd.concat(frames, ignore_index=True)
