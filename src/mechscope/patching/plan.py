"""Group patch variants into forward passes so that the sweep does the least work.

A variant patched at layer ``l`` from position ``s`` on shares with the unpatched base run
everything below layer ``l`` and — in a causal model — every position before ``s``. So a
chunk whose lowest layer is ``a`` and earliest patched position is ``f`` runs only the
positions ``f …`` (on top of the base run's key/value cache, ``Engine.run(resume=…)``),
layers ``< a`` once on a single row and layers ``>= a`` on all ``n`` rows
(``Engine.run(expand=(a, n))``). Its cost in token-layers is::

    cost(chunk) = n_layers * overhead * seq + (seq - f) * (a + (n_layers - a) * n)

where ``overhead`` is the fixed per-layer cost of one forward expressed in rows. When rows
can begin at their own layers (``joins``: :mod:`mechscope.engine.interventions.join`),
a row of layer ``l`` pays ``n_layers - l`` layers instead of ``n_layers - a``::

    cost(chunk) = n_layers * overhead * seq + (seq - f) * (a + sum over rows of (n_layers - l))

When every row computes only its own positions (``dead``: rows resumed at their own
starts, :mod:`mechscope.engine.interventions.live`), a row patched from ``s`` pays
``seq - s`` positions in full and the ``s - f`` before them at the fraction ``dead`` of a
position (attention, the norms and the residual adds keep the dense layout)::

    (seq - f) * n  ->  sum over rows of ((seq - s) + dead * (s - f))

Mixing an early position into a chunk makes every row pay for it (and, without joins, a
low layer too); splitting too finely pays the fixed cost many times. The planner minimises
the total over contiguous groupings of the variants in two orders — layer-major and
position-major — and keeps the cheaper plan. Exact dynamic programming over each order,
vectorised over the last chunk's start, takes milliseconds for thousands of variants.
Without prefix reuse every start is 0 and the cost reduces to grouping by layer alone.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: Fixed per-layer cost of one forward, in rows (measured on CPU: a 1-row forward costs
#: about as much as 3-5 extra rows of a batched one).
OVERHEAD_ROWS = 4.0
#: What a row's position before its own start costs when it is not computed (attention,
#: the norms and the residual adds keep the dense layout there), as a fraction of a
#: computed position. 0.15 to 0.35 plan the same chunks of the IOI benchmark sweep; 0.5
#: plans more and ran 2 % slower (benchmarks/README.md).
DEAD_COST = 0.25


def chunk_cost(
    layers: Sequence[int],
    starts: Sequence[int],
    n_layers: int,
    seq: int,
    overhead_rows: float,
    joins: bool = False,
    dead: float = 1.0,
) -> float:
    """Token-layers of one forward over the rows with these layers and first positions;
    ``dead``: the cost of a row's position before its own start (1: computed in full)."""
    a, f = min(layers), min(starts)
    span = [(seq - s) + dead * (s - f) for s in starts]  # per row: positions paid
    if joins:
        rows = sum((n_layers - l) * p for l, p in zip(layers, span, strict=True))
    else:
        rows = (n_layers - a) * sum(span)
    return n_layers * overhead_rows * seq + (seq - f) * a + rows


def plan_chunks(
    row_layers: Sequence[int],
    n_layers: int,
    max_rows: int,
    *,
    row_starts: Sequence[int] | None = None,
    seq: int = 1,
    overhead_rows: float = OVERHEAD_ROWS,
    joins: bool = False,
    dead: float = 1.0,
) -> list[list[int]]:
    """Partition variant indices into chunks (each a list of indices into ``row_layers``).

    ``row_starts``: each variant's earliest patched position (None: all 0, no prefix
    reuse); ``seq``: the sequence length. Chunks hold at most ``max_rows`` variants.
    ``joins``: rows begin at their own layers; ``dead``: what a row's position before
    its own start costs (the costs above).
    """
    if max_rows < 1:
        raise ValueError(f"max_rows must be >= 1, got {max_rows}")
    starts = [0] * len(row_layers) if row_starts is None else list(row_starts)
    if len(starts) != len(row_layers):
        raise ValueError("one start position per variant expected")
    seq = max(seq, max(starts, default=0) + 1)
    idx = range(len(row_layers))
    orders = [sorted(idx, key=lambda i: (row_layers[i], starts[i], i))]
    if any(starts):
        orders.append(sorted(idx, key=lambda i: (starts[i], row_layers[i], i)))
    plans = [
        _best_split(o, row_layers, starts, n_layers, seq, max_rows, overhead_rows, joins, dead)
        for o in orders
    ]
    return min(plans, key=lambda plan: plan[0])[1]


def _best_split(
    order: list[int],
    row_layers: Sequence[int],
    starts: Sequence[int],
    n_layers: int,
    seq: int,
    max_rows: int,
    overhead_rows: float,
    joins: bool,
    dead: float,
) -> tuple[float, list[list[int]]]:
    """Cheapest contiguous partition of ``order``: ``(cost, chunks)``."""
    a = np.asarray([row_layers[i] for i in order], dtype=np.float64)  # [rows]
    f = np.asarray([starts[i] for i in order], dtype=np.float64)  # [rows]
    n = len(order)
    w = n_layers - a if joins else np.ones(n)  # [rows]: each row's layers (joins) or 1

    def cum(x: np.ndarray) -> np.ndarray:  # [rows + 1] prefix sums
        return np.concatenate([[0.0], np.cumsum(x)])

    own, own_start, own_tail = cum(w), cum(w * f), cum(w * (seq - f))
    best = np.full(n + 1, np.inf)  # best[j]: cost of the first j rows
    best[0] = 0.0
    cut = np.zeros(n + 1, dtype=np.int64)
    fixed = n_layers * overhead_rows * seq
    for j in range(1, n + 1):  # the last chunk is rows i..j-1
        lo = max(0, j - max_rows)
        i = np.arange(lo, j)
        low = np.minimum.accumulate(a[lo:j][::-1])[::-1]  # min layer over i..j-1
        first = np.minimum.accumulate(f[lo:j][::-1])[::-1]  # min start over i..j-1
        span = own_tail[j] - own_tail[i] + dead * (own_start[j] - own_start[i])
        span = span - dead * first * (own[j] - own[i])  # Σ w·((seq - s) + dead·(s - f))
        rows = span if joins else (n_layers - low) * span
        cost = best[lo:j] + fixed + (seq - first) * low + rows
        k = int(np.argmin(cost))
        best[j], cut[j] = cost[k], lo + k
    chunks: list[list[int]] = []
    j = n
    while j > 0:
        i = int(cut[j])
        chunks.append(order[i:j])
        j = i
    return float(best[n]), chunks[::-1]
