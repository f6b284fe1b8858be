"""When a chunk is known well enough, by the question asked of the run (``target``).

Every function takes the chunks' estimates and intervals (arrays ``[..., C]``, one row per
simulated run or a single trace) and returns a status code per chunk (:data:`STATUSES`
indexes them). A chunk that is not ``OPEN`` is *settled*: its positions need no more
rollouts for it.

- ``threshold`` (the first adaptive design): *narrow* when the interval is at most
  ``width`` wide, *negligible* when it lies inside ``(-threshold, threshold)``.
- ``ranking``: *narrow* only: every chunk to the same precision, whatever its size.
- ``topk`` (which ``k`` chunks are the anchors): the *boundary* ``b`` is the midpoint of the
  ``k``-th and ``k+1``-th largest ``|estimate|``; the interval of ``|I_i|`` is ``[L, H]``
  when ``L > 0``, ``[-H, -L]`` when ``H < 0``, else ``[0, max(-L, H)]``. The chunk is *above*
  when that interval lies wholly above ``b``, *below* when wholly below, else *narrow* when
  the interval is at most ``width`` wide. With ``k`` chunks or fewer every chunk is above.
- ``topk-bayes``: the same boundary, from the posterior means; each rate has the posterior
  ``Beta(c + 1, u - c + 1)`` (uniform prior), ``I_i`` the normal approximation with the
  difference of their means and the sum of their variances, and the chunk is *above* when
  its posterior mean is above ``b`` and ``P(|I_i| > b) >= level``, *below* when ``P(|I_i| >
  b) <= 1 - level`` (``level``: the rule's per-look confidence), else *narrow* as above.
  (Without the first condition a boundary of 0, as when fewer than ``k + 1`` chunks have
  moved at all, would settle every chunk above it: ``P(|I_i| > 0) = 1``.)
"""

from __future__ import annotations

import numpy as np
from scipy import special

from mechscope.anchors.config import AdaptiveSettings

NARROW, NEGLIGIBLE, OPEN, ABOVE, BELOW = "narrow", "negligible", "open", "above", "below"
#: status names by code (the arrays below hold codes)
STATUSES = np.array([OPEN, NARROW, NEGLIGIBLE, ABOVE, BELOW], dtype=object)
C_OPEN, C_NARROW, C_NEGLIGIBLE, C_ABOVE, C_BELOW = range(5)
#: slack of the comparisons with a written setting (``width``): intervals are fp64 sums
SLACK = 1e-12


def boundary(size: np.ndarray, k: int) -> np.ndarray:
    """Midpoint of the ``k``-th and ``k+1``-th largest of ``size`` ``[..., C]`` (NaN as 0),
    ``[..., 1]``; ``-inf`` when there are ``k`` chunks or fewer (every chunk is above)."""
    size = np.nan_to_num(np.asarray(size, dtype=float), nan=0.0)
    if size.shape[-1] <= k:
        return np.full((*size.shape[:-1], 1), -np.inf)
    top = -np.partition(-size, (k - 1, k), axis=-1)  # [..., C]: positions k-1 and k in order
    return (top[..., k - 1 : k] + top[..., k : k + 1]) / 2


def abs_interval(low: np.ndarray, high: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The interval of ``|I|`` from the interval ``[low, high]`` of ``I``."""
    a_low = np.where(low > 0, low, np.where(high < 0, -high, 0.0))
    return a_low, np.maximum(np.abs(low), np.abs(high))


def threshold_status(low, high, adaptive: AdaptiveSettings) -> np.ndarray:
    """``threshold`` (and, without a threshold, ``ranking``): narrow, negligible or open."""
    status = np.full(np.shape(low), C_OPEN, dtype=np.int8)
    if adaptive.threshold is not None and adaptive.target == "threshold":
        tau = adaptive.threshold
        status[(low > -tau) & (high < tau)] = C_NEGLIGIBLE
    status[high - low <= adaptive.width + SLACK] = C_NARROW
    return status


def topk_status(importance, low, high, adaptive: AdaptiveSettings) -> np.ndarray:
    """``topk``: above, below, narrow or open (module doc)."""
    b = boundary(np.abs(importance), adaptive.k)
    a_low, a_high = abs_interval(low, high)
    status = np.full(np.shape(low), C_OPEN, dtype=np.int8)
    status[high - low <= adaptive.width + SLACK] = C_NARROW
    status[a_low > b] = C_ABOVE
    status[a_high < b] = C_BELOW
    return status


def posterior_difference(usable, correct) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation of ``I_i = p_{i+1} - p_i`` under the positions' posteriors
    ``Beta(c + 1, u - c + 1)`` (``[..., P]`` counts; ``[..., P-1]`` each)."""
    u, c = np.asarray(usable, dtype=float), np.asarray(correct, dtype=float)
    mean = (c + 1) / (u + 2)
    var = mean * (1 - mean) / (u + 3)
    return mean[..., 1:] - mean[..., :-1], np.sqrt(var[..., 1:] + var[..., :-1])


def bayes_status(usable, correct, low, high, adaptive: AdaptiveSettings, level: float):
    """``topk-bayes``: above, below, narrow or open (module doc)."""
    mean, sd = posterior_difference(usable, correct)
    b = boundary(np.abs(mean), adaptive.k)
    with np.errstate(invalid="ignore"):  # b = -inf: every chunk is above
        p_above = special.ndtr((mean - b) / sd) + special.ndtr((-b - mean) / sd)
    p_above = np.where(np.isfinite(b), p_above, 1.0)
    status = np.full(np.shape(low), C_OPEN, dtype=np.int8)
    status[high - low <= adaptive.width + SLACK] = C_NARROW
    status[(p_above >= level) & (np.abs(mean) > b)] = C_ABOVE
    status[p_above <= 1 - level] = C_BELOW
    return status


def chunk_status(importance, low, high, usable, correct, adaptive, level: float) -> np.ndarray:
    """Status codes ``[..., C]`` of the chunks for ``adaptive.target``."""
    if adaptive.target == "topk":
        return topk_status(importance, low, high, adaptive)
    if adaptive.target == "topk-bayes":
        return bayes_status(usable, correct, low, high, adaptive, level)
    return threshold_status(low, high, adaptive)
