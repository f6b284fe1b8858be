"""The rows of one chunk of an exact patching sweep: which grid cells, where each enters
the pass, and the patch each gets.

A chunk's rows are grid cells (pair, layer, unit, head) of the pairs it holds
(:class:`PairGrid`). Rows of the chunk's lowest layer are gathered from their pairs' base
rows (``expand``); with ``resid_pre`` patched, a row of a higher layer joins there with its
pair's base residual (:func:`joined_rows`, :class:`~mechscope.engine.interventions.join.Join`)
instead of recomputing the layers below it. :func:`chunk_patches` gives every row its own
value and mask at its own layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mechscope.engine import Patch
from mechscope.engine.interventions.join import Join
from mechscope.patching.cache import RunCache
from mechscope.patching.config import PatchSpec
from mechscope.patching.features import patch_site
from mechscope.patching.metrics import Reference
from mechscope.patching.prepare import PreparedPair
from mechscope.patching.result import PairResult


@dataclass
class PairGrid:
    """One pair's sweep while it is being filled: its grid, values and skipped variants."""

    p: PreparedPair
    res: PairResult
    ref: Reference
    base: RunCache
    values: dict[int, torch.Tensor]  # layer -> [1|units, seq, ...] in base coordinates
    base_pos: list[list[int]]
    starts: list[int]  # per unit: its earliest patched position
    skip: np.ndarray  # [layers, units, heads]
    metrics: dict[str, np.ndarray]
    kept: np.ndarray | None


def can_join(spec: PatchSpec, grids: list[PairGrid]) -> bool:
    """Whether a chunk's rows can begin at their own layers (:class:`Join`): the sweep
    patches ``resid_pre``, so the base run's read values are each row's residual stream
    where it begins, and no pair has further model inputs (an image's features enter below
    the first layer)."""
    return spec.site == "resid_pre" and not any(g.p.base_inputs for g in grids)


def joined_rows(
    rows: list[tuple[int, int, int, int]],
    grids: list[PairGrid],
    slot: dict[int, int],
    low: int,
) -> tuple[tuple[int, torch.Tensor], list[Join]]:
    """``expand`` for the rows of the chunk's lowest layer and one :class:`Join` per higher
    layer, whose rows begin there with their pair's base ``resid_pre`` (rows in layer
    order)."""
    by_layer: dict[int, list[int]] = {}
    for j, li, _, _ in rows:
        by_layer.setdefault(grids[j].res.layers[li], []).append(j)
    joins = [
        Join(
            layer,
            torch.cat([grids[j].base.acts[layer] for j in members]),  # [rows, seq, d]
            torch.tensor([slot[j] for j in members]),
        )
        for layer, members in sorted(by_layer.items())
        if layer != low
    ]
    return (low, torch.tensor([slot[j] for j in by_layer[low]])), joins


def chunk_patches(
    spec: PatchSpec,
    rows: list[tuple[int, int, int, int]],
    grids: list[PairGrid],
    seq: int,
    *,
    joined: bool = False,
) -> list[Patch]:
    """One masked ``Patch`` per layer present in the chunk; row ``r`` takes its own pair's
    (and, for spans, its own unit's) value.

    A layer's value is one gather on the values' device (``[rows, seq, ...]``, every row
    from its pair's ``[1|U, seq, ...]`` values); the mask is built on the host from the
    rows' positions and heads. Rows of other layers take any value: their mask is False.
    ``joined``: rows begin at their own layers (in layer order), so a layer's patch covers
    the rows present there only.
    """
    by_layer: dict[int, list[int]] = {}
    for r, (j, li, _, _) in enumerate(rows):
        by_layer.setdefault(grids[j].res.layers[li], []).append(r)
    patches = []
    for layer, members in by_layer.items():
        n = max(members) + 1 if joined else len(rows)
        offset: dict[int, int] = {}  # pair -> its first row in the concatenated values
        bank: list[torch.Tensor] = []  # [1|U, seq, ...] per pair
        for j in sorted({rows[r][0] for r in members}):
            offset[j] = sum(v.shape[0] for v in bank)
            bank.append(grids[j].values[layer])
        source = [0] * n  # per row: its row of the concatenated values
        mask_rows: list[int] = []
        mask_pos: list[int] = []
        mask_heads: list[int] = []
        for r in members:
            j, _, ui, hi = rows[r]
            g = grids[j]
            source[r] = offset[j] + (ui if g.values[layer].shape[0] > 1 else 0)
            mask_rows += [r] * len(g.base_pos[ui])
            mask_pos += list(g.base_pos[ui])
            mask_heads += [g.res.heads[hi]] * len(g.base_pos[ui])
        values = bank[0] if len(bank) == 1 else torch.cat(bank)  # [ΣU, seq, ...]
        value = values[torch.tensor(source, device=values.device)]  # [rows, seq, ...]
        sample = bank[0]
        shape = (n, seq, sample.shape[2]) if spec.per_head else (n, seq)
        mask = torch.zeros(shape, dtype=torch.bool)
        if spec.per_head:
            mask[mask_rows, mask_pos, mask_heads] = True
        else:
            mask[mask_rows, mask_pos] = True
        patches.append(Patch(patch_site(spec, layer), value, mask=mask))
    return patches
