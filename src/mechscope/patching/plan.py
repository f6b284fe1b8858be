"""Group patch variants into forward passes so that the sweep does the least work.

A variant patched at layer ``l`` shares everything below ``l`` with the unpatched base run,
so a chunk whose lowest layer is ``a`` runs layers ``< a`` once on a single row and only
layers ``>= a`` on all ``n`` rows (``Engine.run(expand=(a, n))``). Mixing a low layer into a
chunk of high layers makes every row pay for the low layers; splitting too finely pays the
fixed per-forward cost many times. The planner minimises, over contiguous groupings of
the variants sorted by layer, the cost in row-layers::

    cost(chunk) = n_layers * overhead + a + (n_layers - a) * n

where ``overhead`` is the per-layer fixed cost of a forward expressed in rows. Exact
dynamic programming over the sorted rows, vectorised over the last chunk's start, takes
milliseconds for thousands of variants.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: Fixed per-layer cost of one forward, in rows (measured on CPU: a 1-row forward costs
#: about as much as 3-5 extra rows of a batched one).
OVERHEAD_ROWS = 4.0


def plan_chunks(
    row_layers: Sequence[int],
    n_layers: int,
    max_rows: int,
    *,
    overhead_rows: float = OVERHEAD_ROWS,
) -> list[list[int]]:
    """Partition variant indices into chunks (each a list of indices into ``row_layers``).

    Chunks hold at most ``max_rows`` variants and contiguous layers in ascending order.
    """
    if max_rows < 1:
        raise ValueError(f"max_rows must be >= 1, got {max_rows}")
    order = sorted(range(len(row_layers)), key=lambda i: (row_layers[i], i))
    a = np.asarray([row_layers[i] for i in order], dtype=np.float64)  # [rows], ascending
    n = len(order)
    best = np.full(n + 1, np.inf)  # best[j]: cost of the first j rows
    best[0] = 0.0
    cut = np.zeros(n + 1, dtype=np.int64)
    for j in range(1, n + 1):  # the last chunk is rows i..j-1, its lowest layer a[i]
        lo = max(0, j - max_rows)
        i = np.arange(lo, j)
        cost = best[lo:j] + n_layers * overhead_rows + a[i] + (n_layers - a[i]) * (j - i)
        k = int(np.argmin(cost))
        best[j], cut[j] = cost[k], lo + k
    chunks: list[list[int]] = []
    j = n
    while j > 0:
        i = int(cut[j])
        chunks.append(order[i:j])
        j = i
    return chunks[::-1]
