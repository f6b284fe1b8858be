"""Rows that enter a pass partway up: a batch that grows layer by layer.

A sweep of variants that branch off one run at different layers wants each variant to pay
only for the layers from its own on. ``expand=(layer, index)`` starts every variant at the
lowest of them, so a variant patched at layer 20 of a chunk whose lowest layer is 0 runs
twenty layers that only recompute the unedited run. A :class:`Join` instead adds rows at a
higher layer's ``resid_pre``, with the residual stream the caller already holds for them
there (the unedited run's, read once), so at every layer the batch holds only the rows
that have begun.

The rows keep one order: the expanded rows first, then each join's rows in layer order. A
row's index is the same at every layer where it exists, so a ``Patch`` mask at a layer
covers the rows present there: the first ``rows_at(layer)`` rows of the final batch.
A joined row is exact when its values are what its own pass would hold at that layer: in
a causal model resumed from a prefix cache, the tail of the unedited run's ``resid_pre``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from mechscope.models.loaded import LoadedModel
from mechscope.runs.summary import SummaryRepr


@dataclass(frozen=True, eq=False)
class Join(SummaryRepr):
    """Rows that begin at ``resid_pre[layer]`` with ``values`` ``[rows, seq, d_model]`` (whole
    sequence coordinates; a resumed pass keeps the tail), each continuing input row
    ``index[r]`` (its prefix cache and padding)."""

    layer: int
    values: torch.Tensor  # [rows, seq, d_model]
    index: torch.Tensor  # [rows] long

    def __post_init__(self) -> None:
        if self.values.dim() != 3 or self.index.dim() != 1:
            raise ValueError("a Join takes values [rows, seq, d_model] and an index [rows]")
        if self.values.shape[0] != self.index.shape[0]:
            raise ValueError(
                f"a Join of {self.values.shape[0]} rows of values needs as many input rows, "
                f"got {self.index.shape[0]}"
            )

    def apply(self, act: torch.Tensor) -> torch.Tensor:  # [b, s, d] -> [b + rows, s, d]
        return torch.cat([act, self.values.to(device=act.device, dtype=act.dtype)])

    def tail(self, start: int) -> Join:
        """The join of a pass resumed at ``start``: its positions ``start …``."""
        return Join(self.layer, self.values[:, start:], self.index)


@dataclass(frozen=True)
class RowLayout:
    """Which input row each batch row continues, layer by layer: ``index`` over the final
    batch (expanded rows, then joined rows in layer order) and the batch size from each
    join layer on."""

    expand_layer: int
    index: torch.Tensor  # [rows] long: the final batch's input rows
    steps: tuple[tuple[int, int], ...]  # (layer, rows from that layer on), increasing

    def rows_at(self, layer: int) -> torch.Tensor | None:
        """The input row of each of the batch's rows at ``layer`` (None below the
        expansion: the input rows themselves)."""
        if layer < self.expand_layer:
            return None
        n = 0
        for at, rows in self.steps:
            if at > layer:
                break
            n = rows
        return self.index[:n]


def row_layout(
    expand_layer: int, expand_index: torch.Tensor, joins: Sequence[Join], n_layers: int
) -> RowLayout:
    """The layout of ``expand=(expand_layer, expand_index)`` followed by ``joins`` (in
    layer order, each at or above the expansion)."""
    steps = [(expand_layer, int(expand_index.shape[0]))]
    parts = [expand_index.long().cpu()]
    last = expand_layer
    for join in joins:
        if not expand_layer <= join.layer < n_layers:
            raise ValueError(
                f"a Join at layer {join.layer} must lie in {expand_layer}..{n_layers - 1} "
                f"(at or above the expansion at {expand_layer})"
            )
        if join.layer < last:
            raise ValueError("Joins must come in layer order")
        last = join.layer
        parts.append(join.index.long().cpu())
        total = steps[-1][1] + int(join.index.shape[0])
        if steps[-1][0] == join.layer:
            steps[-1] = (join.layer, total)
        else:
            steps.append((join.layer, total))
    return RowLayout(expand_layer, torch.cat(parts), tuple(steps))


def join_layout(
    lm: LoadedModel, expand: tuple[int, int | torch.Tensor] | None, joins: list[Join], seq: int
) -> RowLayout:
    """The rows of a pass with ``joins``: ``expand`` (needed: the rows below the first
    join come from somewhere) gathers the lowest rows, the joins add theirs."""
    if expand is None:
        raise ValueError("join needs expand=(layer, rows): the rows the batch starts from")
    for j in joins:
        if tuple(j.values.shape[1:]) != (seq, lm.d_model):
            raise ValueError(
                f"a Join at layer {j.layer} takes values [rows, {seq}, {lm.d_model}] (the "
                f"whole sequence), got {list(j.values.shape)}"
            )
    lm.check_layer(expand[0])
    index = expand[1]
    if not isinstance(index, torch.Tensor):
        index = torch.zeros(int(index), dtype=torch.long)
    return row_layout(expand[0], index, joins, lm.n_layers)


def state_rows(
    expand: tuple[int, int | torch.Tensor] | None, layout: RowLayout | None
) -> torch.Tensor | None:
    """The input row of every row of the final batch (None: a repeated single row)."""
    if layout is not None:
        return layout.index
    if expand is not None and isinstance(expand[1], torch.Tensor):
        return expand[1]
    return None
