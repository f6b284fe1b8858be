"""Steps until plateau: when a training curve stops moving, to tell "slow" from "never".

A method weight that leaves the student's margin near 0 after 150 steps may be learning
slowly or not at all. :func:`plateau_step` reads one logged curve (the KL on each step's
batch, the margin on the logged steps): its trailing mean over the last ``END_WINDOW`` of
its points (batch-to-batch noise averaged out) and the first step from which that mean
stays within ``PLATEAU_TOL`` of its largest departure from the final value. A plateau
near the last step is a curve still moving when training stopped (slow); an early
plateau at a low margin is one that stopped (never, in that run's length).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

#: The share of a curve's last points that a trailing mean averages: here and in the
#: training losses' end values of :func:`~mechscope.distill.gradients.train_summary`.
END_WINDOW = 0.1
#: The band around the final value, as a share of the curve's largest departure from it.
PLATEAU_TOL = 0.1


def plateau_step(
    steps: Sequence[float], values: Sequence[float], tol: float = PLATEAU_TOL
) -> float:
    """The first of ``steps`` from which the trailing mean of ``values`` stays within
    ``tol × max |mean − final|`` of its final value (non-finite values left out); NaN for
    no points."""
    x = np.asarray(values, dtype=np.float64)
    keep = np.isfinite(x)
    x, s = x[keep], np.asarray(steps, dtype=np.float64)[keep]
    if x.size == 0:
        return float("nan")
    w = max(1, math.ceil(END_WINDOW * x.size))
    csum = np.concatenate([[0.0], np.cumsum(x)])
    starts = np.maximum(np.arange(x.size) - w + 1, 0)
    mean = (csum[1:] - csum[starts]) / (np.arange(x.size) + 1 - starts)  # [n] trailing
    away = np.abs(mean - mean[-1])
    outside = np.flatnonzero(away > tol * away.max())
    return float(s[outside[-1] + 1]) if outside.size else float(s[0])
