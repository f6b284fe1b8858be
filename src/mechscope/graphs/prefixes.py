"""Prefix passes for the feature rows: a target's backward over only the positions it sees.

A feature at position ``p`` of layer ``l`` reads the residual stream at positions ``0 … p``
only (the model is causal), so its row has no gradient after ``p``; a backward pass through
the whole prompt spends the same products on the positions after it. The rows of the
features at the first ``t`` positions are therefore taken through a pass over the first
``t`` tokens alone, whose values (attention patterns, norm scales, the MLPs' inputs and
outputs) are the whole prompt's at those positions: the same linear model, cut short. The
rows equal those of the whole pass to rounding.

A pass costs its own forward: :func:`prefix_lengths` picks the prefixes (at most
:data:`MAX_PASSES`, the whole prompt last) that minimise the estimated work, in units of
one target's backward through one layer at one position: a batch of ``n`` rows whose
deepest target sits at layer ``l`` costs ``l·(n·t + BACKWARD_FIXED)`` through a prefix of
``t`` tokens; a pass
through ``l`` layers costs ``l·(FORWARD_FIXED + FORWARD_PER_TOKEN·t)`` (weights read once
per layer, then the tokens: both measured on Gemma 3 270M on the CPU; only the speed
depends on them, never the graph).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import torch

#: At most this many passes over prefixes of one prompt (the whole prompt included).
MAX_PASSES = 4
#: A layer of one backward call before its rows (autograd's own work), in backward units.
BACKWARD_FIXED = 24
#: A layer of the pass before its tokens (reading its weights), in backward units.
FORWARD_FIXED = 128
#: A layer of the pass per token, in backward units (its MLP and transcoder's products
#: against the attention's and skip's transposed ones of one backward row).
FORWARD_PER_TOKEN = 6


@dataclass(frozen=True)
class Prefix:
    """A pass over the first ``tokens`` tokens through the first ``layers`` layers, and
    the feature rows taken through it."""

    tokens: int
    layers: int
    batches: tuple[torch.Tensor, ...]  # [n] each: feature indices, ascending


def prefix_lengths(
    active: torch.Tensor, n_layers: int, n_pos: int, batch: int
) -> tuple[Prefix, ...]:
    """The passes for the rows of every feature of ``active [n, 3]`` (layer, position,
    feature; sorted), the whole prompt's last (module docstring): each feature once, in
    batches of at most ``batch`` rows (in node order, so a batch spans few layers)."""
    positions = active[:, 1]
    best: tuple[int, tuple[Prefix, ...]] | None = None
    for k in range(1, min(MAX_PASSES, n_pos) + 1):
        ends = _quantile_ends(positions, n_pos, k)
        bounds = pairwise([0, *ends])
        plan = tuple(_prefix(active, lo, hi, n_pos, n_layers, batch) for lo, hi in bounds)
        plan = tuple(p for p in plan if p.batches or p.tokens == n_pos)
        cost = sum(_cost(p, active, n_pos) for p in plan)
        if best is None or cost < best[0]:
            best = (cost, plan)
    assert best is not None
    return best[1]


def _quantile_ends(positions: torch.Tensor, n_pos: int, k: int) -> list[int]:
    """``k`` prefix lengths, the last ``n_pos``, splitting the features about evenly."""
    if k == 1 or positions.numel() == 0:
        return [n_pos]
    ordered = positions.sort().values
    ends = {int(ordered[min(len(ordered) - 1, (len(ordered) * j) // k)]) + 1 for j in range(1, k)}
    return [*sorted(e for e in ends if e < n_pos), n_pos]


def _prefix(
    active: torch.Tensor, lo: int, hi: int, n_pos: int, n_layers: int, batch: int
) -> Prefix:
    """The pass over ``hi`` tokens for the features at positions ``lo … hi - 1``: up to
    their deepest layer, or the whole model for the whole prompt (the pass the nodes and
    the logit rows come from)."""
    inside = ((active[:, 1] >= lo) & (active[:, 1] < hi)).nonzero(as_tuple=True)[0]
    batches = tuple(inside[a : a + batch] for a in range(0, len(inside), batch))
    deepest = int(active[inside, 0].max()) if len(inside) else 0
    return Prefix(hi, n_layers if hi == n_pos else deepest + 1, batches)


def _cost(prefix: Prefix, active: torch.Tensor, n_pos: int) -> int:
    """Estimated work of one pass and its rows, in backward units (module docstring); the
    whole prompt's pass runs anyway."""
    rows = 0
    for b in prefix.batches:
        depth = int(active[b, 0].max())
        rows += depth * (len(b) * prefix.tokens + BACKWARD_FIXED)
    if prefix.tokens == n_pos:
        return rows
    return rows + prefix.layers * (FORWARD_FIXED + FORWARD_PER_TOKEN * prefix.tokens)
