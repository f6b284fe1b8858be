"""Interventions are values, not callbacks: a forward pass takes a list of them.

The engine turns them into hooks (and attention work) for one pass and removes everything
when the pass ends. Order matters within a site: edits apply in list order, and a ``Read`` sees
the value after the edits listed before it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

from mechscope.engine.sites import Site


@dataclass(eq=False)
class Read:
    """Record the value at ``site`` (kept in the autograd graph when gradients are on).
    ``device``: where to keep it, moved the moment it is read (a GPU pass then never holds
    every layer's reads at once); None keeps it where the model computed it."""

    site: Site
    device: torch.device | str | None = None


@dataclass(eq=False)
class Patch:
    """Overwrite ``site`` with ``value``.

    Three ways to say where:
    - ``site.positions`` (and ``site.head`` for head sites): ``value`` broadcasts to that
      slice;
    - ``mask``: a bool tensor ``[batch, seq]`` (``[batch, seq, heads]`` for z/q/k/v,
      ``[batch, heads, q]`` or ``[batch, heads, q, k]`` for attn_scores; trailing axes
      broadcast) with a full-shape ``value``; entries where the mask is True take ``value``.
      This is how sweeps patch a different position in every batch row in one forward;
    - neither: the whole activation is replaced.
    """

    site: Site
    value: torch.Tensor
    mask: torch.Tensor | None = None


@dataclass(eq=False)
class Gate:
    """Scale every head's ``z`` by ``alpha`` (differentiable): ``[layers, heads]`` for all rows
    or ``[batch, layers, heads]`` for one gate vector per row (batched IG steps). ``layers``
    limits it to those layers (default all): a pass expanded at ``resid_pre[k]`` gates the
    shared one-row prefix below ``k`` and the per-row batch from ``k`` on separately."""

    alpha: torch.Tensor
    layers: Sequence[int] | None = None


@dataclass(eq=False)
class Ablate:
    """Replace ``site`` by zeros, by a mean, or by resampled rows.

    - ``mode="zero"``: zeros (``reference`` unused);
    - ``mode="mean"``: the mean of ``reference`` (the site's activations on a reference
      batch, the full site shape ``[rows, seq, ...]``, e.g. a ``Read`` of the same site)
      over its rows; with ``over_positions=True`` also over its positions, so one vector
      replaces every position (use it when the reference prompts differ in length or
      alignment);
    - ``mode="resample"``: each row of the pass takes a row of ``reference`` drawn with
      ``seed`` (the same seed, the same rows).

    ``site.positions`` / ``site.head`` limit the replacement to that slice.
    """

    site: Site
    mode: Literal["zero", "mean", "resample"] = "zero"
    reference: torch.Tensor | None = None
    over_positions: bool = False
    seed: int = 0


@dataclass(eq=False)
class SuppressAttention:
    """Mask attention to a key span pre-softmax, for the queries after the span.

    ``spans`` is one ``(start, end)`` (end exclusive) for every row, or a ``[batch, 2]`` tensor
    with one span per row (a batch of suppressed sentences). ``layers`` / ``heads`` default
    to all.
    """

    spans: tuple[int, int] | torch.Tensor
    layers: Sequence[int] | None = None
    heads: Sequence[int] | None = None


@dataclass(eq=False)
class ReduceAttention:
    """Call ``fn(layer, probs)`` with each ``[batch, heads, q, k]`` fp32 probability block the
    moment it exists; its return values are collected per layer, the block is dropped."""

    fn: Callable[[int, torch.Tensor], Any]
    layers: Sequence[int] | None = None


Intervention = Read | Patch | Gate | Ablate | SuppressAttention | ReduceAttention
"""Any intervention :meth:`Engine.run <mechscope.engine.forward.Engine.run>` takes: a pass
gets a list of them, applied in list order within a site."""
