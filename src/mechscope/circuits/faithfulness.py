"""How much of the behaviour a circuit keeps, over circuit sizes, with intervals.

For a circuit ``C`` (every edge outside it patched from the corrupt run,
:mod:`mechscope.circuits.evaluate`) the *faithfulness* is the model-relative share

    ``F(C) = (m̄(C) − m̄(∅)) / (m̄(M) − m̄(∅))``

of the mean metric over examples: 1 is the whole model ``M`` (the clean run), 0 the empty
circuit (the corrupt run). The curve takes circuits of a growing share of the graph's edges
(MIB's grid, 0.1 % to 100 %); from it, as the MIB benchmark's circuit track does:

- **CPR** (circuit performance ratio): the area under ``F`` over the share of edges
  (trapezoids; higher is better);
- **CMD** (circuit-model difference): the area under ``|1 − F|`` (lower is better);
- the smallest circuit on the grid whose ``F`` reaches ``target`` (0.8).

Intervals resample the examples (paired: each example's clean, corrupt and circuit values
move together) with :func:`scipy.stats.bootstrap`; every number of the curve, and CPR and
CMD, is a statistic of the same resamples.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from scipy import stats

from mechscope.circuits.edge_pass import Wiring
from mechscope.circuits.evaluate import Prepared, baselines, evaluate
from mechscope.circuits.metrics import Metric
from mechscope.circuits.select import select
from mechscope.engine import Engine

#: MIB's grid of circuit sizes, as shares of the graph's edges.
SHARES = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


@dataclass(frozen=True)
class Curve:
    """The metric of each example on circuits of growing size.

    ``values [sizes, examples]``: the metric with each circuit; ``clean``, ``corrupt``
    ``[examples]``: on the two runs; ``requested`` the edges asked for at each share,
    ``kept`` the edges left after pruning."""

    shares: np.ndarray  # [sizes]
    requested: np.ndarray  # [sizes] int
    kept: np.ndarray  # [sizes] int
    values: np.ndarray  # [sizes, examples]
    clean: np.ndarray  # [examples]
    corrupt: np.ndarray  # [examples]
    rule: str = "topn"

    @property
    def faithfulness(self) -> np.ndarray:
        """``[sizes]``: F of each circuit (module docstring)."""
        return _faithfulness(self.values, self.clean, self.corrupt)

    @property
    def cpr(self) -> float:
        return float(_area(self.shares, self.faithfulness))

    @property
    def cmd(self) -> float:
        return float(_area(self.shares, np.abs(1 - self.faithfulness)))

    def edges_reaching(self, target: float = 0.8) -> int | None:
        """The kept edges of the smallest circuit on the grid with F ≥ ``target`` (None:
        none reaches it)."""
        hits = np.nonzero(self.faithfulness >= target)[0]
        return int(self.kept[hits[0]]) if hits.size else None

    def summary(self, *, confidence: float = 0.95, n_resamples: int = 2000, seed: int = 0):
        """``(curve, areas)``: a table of F per size with its interval, and one of CPR and
        CMD with theirs (module docstring)."""
        low, high = _intervals(self, confidence, n_resamples, seed)
        f = self.faithfulness
        curve = pd.DataFrame(
            {
                "share": self.shares,
                "edges_requested": self.requested,
                "edges": self.kept,
                "faithfulness": f,
                "low": low[: f.size],
                "high": high[: f.size],
                "metric": self.values.mean(1),
            }
        )
        areas = pd.DataFrame(
            {
                "measure": ["CPR", "CMD"],
                "value": [self.cpr, self.cmd],
                "low": low[f.size :],
                "high": high[f.size :],
            }
        )
        return curve, areas


def _faithfulness(values: np.ndarray, clean: np.ndarray, corrupt: np.ndarray) -> np.ndarray:
    """``[..., sizes]`` from ``values [..., sizes, n]``, ``clean``/``corrupt`` ``[..., n]``."""
    c, z = clean.mean(-1)[..., None], corrupt.mean(-1)[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        return (values.mean(-1) - z) / (c - z)


def _area(shares: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Trapezoids of ``y [..., sizes]`` over ``shares [sizes]``."""
    return np.trapezoid(y, shares, axis=-1)


def _intervals(curve: Curve, confidence: float, n_resamples: int, seed: int):
    """``(low, high)`` ``[sizes + 2]``: F at each size, then CPR and CMD. The examples are
    resampled as indices, so each one's clean, corrupt and circuit values move together."""
    n = curve.clean.size
    if n < 2:
        nan = np.full(curve.shares.size + 2, np.nan)
        return nan, nan.copy()

    def statistic(idx: np.ndarray, axis: int = -1) -> np.ndarray:
        idx = idx.astype(np.int64)  # [(batch,) n]
        v = np.moveaxis(curve.values[:, idx], 0, -2)  # [(batch,) sizes, n]
        f = _faithfulness(v, curve.clean[idx], curve.corrupt[idx])  # [(batch,) sizes]
        areas = np.stack([_area(curve.shares, f), _area(curve.shares, np.abs(1 - f))], -1)
        return np.moveaxis(np.concatenate([f, areas], -1), -1, 0)  # [points, (batch)]

    res = stats.bootstrap(
        (np.arange(n, dtype=np.float64),),
        statistic,
        vectorized=True,
        n_resamples=n_resamples,
        confidence_level=confidence,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    return np.asarray(res.confidence_interval.low), np.asarray(res.confidence_interval.high)


def curve_point(
    eng: Engine,
    wiring: Wiring,
    prepared: list[Prepared],
    scores: torch.Tensor,
    share: float,
    *,
    metric: str | Metric = "logit_diff",
    rule: str = "topn",
    absolute: bool = True,
) -> dict:
    """One size of the curve: the edges asked for (``requested``), those pruning kept
    (``kept``) and every example's metric with that circuit (``values [examples]``)."""
    g = wiring.graph
    n = int(share * g.n_edges)
    circuit = select(scores, g, rule=rule, n=n, absolute=absolute)
    values = evaluate(eng, wiring, prepared, circuit, metric).double().numpy()
    return {"requested": n, "kept": int(circuit.sum()), "values": values}


def faithfulness_curve(
    eng: Engine,
    wiring: Wiring,
    prepared: list[Prepared],
    scores: torch.Tensor,
    *,
    metric: str | Metric = "logit_diff",
    rule: str = "topn",
    shares: tuple[float, ...] = SHARES,
    absolute: bool = True,
) -> Curve:
    """The metric of every example on the circuit of each share of the graph's edges,
    selected from ``scores [senders, receivers]`` by ``rule`` (``topn`` or ``greedy``)."""
    clean, corrupt = baselines(prepared, metric)
    points = [
        curve_point(eng, wiring, prepared, scores, s, metric=metric, rule=rule, absolute=absolute)
        for s in shares
    ]
    return curve_of(points, shares, clean.double().numpy(), corrupt.double().numpy(), rule)


def curve_of(
    points: list[dict], shares, clean: np.ndarray, corrupt: np.ndarray, rule: str
) -> Curve:
    """The :class:`Curve` of :func:`curve_point`'s results, one per share."""
    return Curve(
        np.asarray(shares, dtype=np.float64),
        np.asarray([p["requested"] for p in points]),
        np.asarray([p["kept"] for p in points]),
        np.stack([np.asarray(p["values"]) for p in points]),
        clean,
        corrupt,
        rule,
    )
