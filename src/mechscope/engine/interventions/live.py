"""Rows resumed at their own positions: each row of a resumed pass computes only what differs.

A resumed pass (:mod:`mechscope.engine.interventions.prefix`) computes the positions
``start …`` of every row, ``start`` being the earliest edited position of the batch. A row
whose own edits begin later, at ``s_r``, holds the unedited pass at ``start … s_r − 1``:
those positions are padding that a sweep of variants patched at many positions pays for in
every product of every layer (a seventh of a patching sweep's work).

``Resume(cache, start, row_starts)`` names each row's own first position. The engine then
treats a row's positions before it as *dead*: their keys and values at every layer are the
cached pass's (put in place in the attention function), so nothing read at a live position
depends on the dead positions' hidden states, and the per-position products — each
layer's MLP, its attention's query/key/value projections and output projection — run at
the live positions only (gathered, then put back with zeros). Only the attention itself,
the norms and the residual adds keep the dense ``[rows, tail]`` layout.

Dead positions hold no meaningful value, so a pass with row starts takes masked ``Patch``es
only (none may touch a row before its start), returns logits at positions every row has
live, and keeps no cache. Every layer must reach the engine's attention function, or the
dead keys would never be replaced: a pass where one did not raises.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from mechscope.engine.core import attention
from mechscope.engine.interventions.join import RowLayout, state_rows
from mechscope.engine.interventions.prefix import KVCache, Resume
from mechscope.engine.interventions.values import Intervention, Patch
from mechscope.errors import SiteError, UnsupportedInterventionError
from mechscope.models.loaded import LoadedModel


def check_row_starts(
    starts: torch.Tensor,
    start: int,
    seq: int,
    rows: int,
    present: Callable[[Any], int | None],
    interventions: Sequence[Intervention],
    logits: bool | int | torch.Tensor,
    keep_cache: bool,
) -> None:
    """Refuse, in one line, a pass whose row starts could hide an edit or return a dead
    position: ``starts [rows]`` absolute positions in ``start … seq − 1``; ``present(layer)``:
    the final batch's rows present at a layer (its first ones), None below the expansion."""
    if starts.dim() != 1 or starts.shape[0] != rows:
        raise ValueError(
            f"row_starts needs one position per batch row ({rows}), got {list(starts.shape)}"
        )
    lo, hi = int(starts.min()), int(starts.max())
    if lo < start or hi >= seq:
        raise ValueError(
            f"row_starts must lie in {start}..{seq - 1} (the resumed tail), got {lo}..{hi}"
        )
    if keep_cache:
        raise UnsupportedInterventionError(
            "a pass with row_starts keeps no cache: its dead positions' keys are the cache's"
        )
    for iv in interventions:
        if not isinstance(iv, Patch) or iv.mask is None or iv.rows is not None:
            raise UnsupportedInterventionError(
                f"a pass with row_starts takes masked Patches only (positions before a row's "
                f"start hold no value), got {type(iv).__name__} at {getattr(iv, 'site', '?')}"
            )
        _check_mask(iv, starts, seq, present(iv.site.layer))
    positions = _logit_positions(logits, seq)
    if positions is not None and bool((positions < hi).any()):
        raise SiteError(
            f"logits at position {int(positions.min())} lie before a row's start: ask for "
            f"positions >= {hi}"
        )


def _check_mask(patch: Patch, starts: torch.Tensor, seq: int, present: int | None) -> None:
    """``present``: the rows at the patch's layer, the first of the final batch (a one-row
    mask broadcasts to them); None below the expansion, where a row is an input row that
    every later row continues: its edits must then lie at or after every row's start."""
    mask, dim = patch.mask, patch.site.pos_dim
    assert mask is not None
    if mask.shape[dim] != seq:  # broadcast over positions: it touches every one
        raise SiteError(f"a patch of {patch.site} covers every position, before a row's start")
    hit = mask.movedim(dim, 1).reshape(mask.shape[0], seq, -1).any(-1).cpu()  # [b, seq]
    if present is None:
        own = starts.max().reshape(1)
    elif hit.shape[0] in (1, present):
        own = starts[:present]
    else:
        raise ValueError(f"a patch of {patch.site} has {hit.shape[0]} rows for {present}")
    before = torch.arange(seq)[None, :] < own[:, None]  # [rows, seq]
    if bool((hit & before).any()):
        raise SiteError(f"a patch of {patch.site} edits a row before its start (row_starts)")


def _logit_positions(logits: bool | int | torch.Tensor, seq: int) -> torch.Tensor | None:
    if logits is False:
        return None
    if logits is True:
        return torch.arange(seq)
    if isinstance(logits, int):
        return torch.arange(seq - logits, seq)
    return torch.as_tensor(logits).reshape(-1).long() % seq


@dataclass
class LiveRows:
    """The live positions of a resumed pass, layer by layer (rows of a layer: the first
    ``b`` of the final batch at or above the expansion, the input rows below it)."""

    starts: torch.Tensor  # [rows] absolute first live position per final row
    start: int  # the tail's first position
    cache: KVCache  # the resumed pass's keys and values, [input rows|1, kv, seq, d] per layer
    rows: torch.Tensor | None  # [rows] the input row each final row continues
    expand_layer: int
    tail: int  # positions in this pass
    _live: dict[tuple[int, torch.device], torch.Tensor] = field(default_factory=dict)
    _index: dict[tuple[int, torch.device], torch.Tensor] = field(default_factory=dict)

    def live(self, batch: int, device: torch.device) -> torch.Tensor:
        """``[batch, tail]`` bool: True where a row of a ``batch``-row layer is live (made
        once per batch size and device: layers may sit on several devices)."""
        key = (batch, torch.device(device))
        if key not in self._live:
            pos = torch.arange(self.start, self.start + self.tail, device=device)
            self._live[key] = pos[None, :] >= self.starts[:batch, None].to(device)
        return self._live[key]

    def index(self, batch: int, device: torch.device) -> torch.Tensor:
        """Flat indices ``[live tokens]`` into ``[batch * tail]``."""
        key = (batch, torch.device(device))
        if key not in self._index:
            self._index[key] = self.live(batch, device).reshape(-1).nonzero().squeeze(1)
        return self._index[key]

    def fill(
        self, layer: int, key: torch.Tensor, value: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values ``[batch, kv, keys, d]`` (cached prefix + tail) with every dead
        position's taken from the cache: what the row's unedited pass holds there."""
        batch, hi = key.shape[0], int(self.starts.max())
        if layer < self.expand_layer or hi <= self.start:
            return key, value  # below the expansion the input rows are live everywhere
        ck, cv = self.cache.layers[layer]
        ck, cv = ck[:, :, self.start : hi], cv[:, :, self.start : hi]  # [B|1, kv, hi - start, d]
        if self.rows is not None:  # gathered rows: always by index (B may equal the batch)
            rows = self.rows[:batch].to(ck.device)
            ck, cv = ck.index_select(0, rows), cv.index_select(0, rows)
        elif ck.shape[0] != batch:  # one input row, repeated
            ck, cv = ck.expand(batch, -1, -1, -1), cv.expand(batch, -1, -1, -1)
        dead = ~self.live(batch, key.device)[:, None, : hi - self.start, None]  # [b, 1, n, 1]
        span = slice(self.start, hi)
        k = torch.where(dead, ck.to(key.dtype), key[:, :, span])
        v = torch.where(dead, cv.to(value.dtype), value[:, :, span])
        key = torch.cat([key[:, :, : self.start], k, key[:, :, hi:]], dim=2)
        value = torch.cat([value[:, :, : self.start], v, value[:, :, hi:]], dim=2)
        return key, value


def install_live(
    lm: LoadedModel, live: LiveRows, owner: attention.PassState, *, skip_last_mlp: bool
) -> list[RemovableHandle]:
    """Hooks that run each layer's MLP and attention projections at its live positions
    only, from the expansion on (``skip_last_mlp``: the last MLP is already cut to the kept
    positions). Returns the handles; the attention function fills the keys."""
    handles: list[RemovableHandle] = []
    for layer in range(live.expand_layer, lm.n_layers):
        o_proj = lm.layer_part("o_proj", layer)
        parts = [o_proj, *_input_projections(lm.layer_part("attn", layer), o_proj, lm.d_model)]
        mlp = getattr(lm.layer_module(layer), "mlp", None)
        last = layer == lm.n_layers - 1
        if isinstance(mlp, nn.Module) and lm.card.experts is None and not (last and skip_last_mlp):
            parts.append(mlp)
        for module in parts:
            handles += _gather_hooks(module, live, owner)
    return handles


def _input_projections(attn: nn.Module, o_proj: nn.Module, d_model: int) -> list[nn.Module]:
    """The attention module's own products of the residual stream (``q_proj`` … or a fused
    ``qkv_proj`` / ``c_attn``): its direct children taking ``d_model`` features, but
    ``o_proj``. Their outputs at dead positions are keys and values the attention function
    replaces, and queries whose outputs nothing reads."""
    out = []
    for child in attn.children():
        weight = getattr(child, "weight", None)
        if child is o_proj or not isinstance(weight, torch.Tensor) or weight.dim() != 2:
            continue
        if isinstance(child, nn.Linear) and child.in_features == d_model:
            out.append(child)
        elif type(child).__name__ == "Conv1D" and weight.shape[0] == d_model:
            out.append(child)  # GPT-2's fused projection: weight [in, out]
    return out


def _gather_hooks(
    module: nn.Module, live: LiveRows, owner: attention.PassState
) -> list[RemovableHandle]:
    """The module's first input cut to the live tokens ``[1, n, d]``; its output put back
    at them in ``[b, tail, d]`` zeros. The gather runs after any other pre-hook (edits of
    its input come first), the scatter before any other hook (they see the full shape)."""
    shape: dict[str, Any] = {}

    def cut(module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> Any:
        if attention.ACTIVE.get() is not owner:
            return None
        name = None if args else next(iter(kwargs))
        x = args[0] if args else kwargs[name]  # [b, tail, d]
        shape["bt"] = None
        if x.dim() < 3 or x.shape[1] != live.tail or x.shape[0] > live.starts.shape[0]:
            return None  # not the [rows, tail, d] stream: left whole
        shape["bt"] = x.shape[:2]
        idx = live.index(int(x.shape[0]), x.device)
        flat = x.reshape(-1, *x.shape[2:]).index_select(0, idx)[None]  # [1, n, d]
        if name is None:
            return (flat, *args[1:]), kwargs
        return args, {**kwargs, name: flat}

    def place(module: nn.Module, args: tuple, kwargs: dict, out: Any) -> Any:
        if attention.ACTIVE.get() is not owner:
            return None
        if shape["bt"] is None:
            return None
        first = out[0] if isinstance(out, tuple) else out  # [1, n, d]
        b, t = shape["bt"]
        idx = live.index(int(b), first.device)
        full = first.new_zeros(b * t, *first.shape[2:]).index_copy_(0, idx, first[0])
        full = full.reshape(b, t, *first.shape[2:])
        return (full, *out[1:]) if isinstance(out, tuple) else full

    return [
        module.register_forward_pre_hook(cut, with_kwargs=True),
        module.register_forward_hook(place, with_kwargs=True, prepend=True),
    ]


def live_rows(
    resume: Resume,
    seq: int,
    batch: int,
    expand: tuple[int, int | torch.Tensor] | None,
    layout: RowLayout | None,
    interventions: Sequence[Intervention],
    logits: bool | int | torch.Tensor,
    keep_cache: bool,
) -> LiveRows | None:
    """The checked :class:`LiveRows` of a pass resumed with ``row_starts`` (None without):
    ``seq`` whole-sequence positions, ``batch`` input rows, ``expand`` and ``layout`` (rows
    joining higher up) as the pass has them."""
    if resume.row_starts is None:
        return None
    rows = state_rows(expand, layout)  # the input row of each final row (None: no gather)
    final = batch if expand is None else (int(expand[1]) if rows is None else int(rows.shape[0]))

    def present(layer: Any) -> int | None:
        if expand is None:
            return final
        if not isinstance(layer, int) or layer < expand[0]:
            return None  # below the expansion (or a module path): the input rows
        at = layout.rows_at(layer) if layout is not None else None
        return final if at is None else int(at.shape[0])

    starts = torch.as_tensor(resume.row_starts).long().cpu()
    check_row_starts(starts, resume.start, seq, final, present, interventions, logits, keep_cache)
    return LiveRows(
        starts=starts,
        start=resume.start,
        cache=resume.cache,
        rows=rows,
        expand_layer=0 if expand is None else expand[0],
        tail=seq - resume.start,
    )


def check_reached(lm: LoadedModel, live: LiveRows, reached: set[int], stop: int | None) -> None:
    """After the pass: every layer from the expansion on (below ``stop``) called the
    engine's attention function, where the dead keys are filled; a layer that computes
    attention in its own code attended to dead positions' keys."""
    top = lm.n_layers if stop is None else stop
    missing = [l for l in range(live.expand_layer, top) if l not in reached]
    if missing:
        raise UnsupportedInterventionError(
            f"layer {missing[0]}: {type(lm.layer_part('attn', missing[0])).__name__} never "
            "called the engine's attention function, so row_starts cannot fill its keys"
        )


def refuse_own_attention(
    lm: LoadedModel,
    batch: int,
    expand: tuple[int, int | torch.Tensor] | None,
    resume: Resume | None,
) -> None:
    """Before the pass, for a family whose attention runs in its own code (never reaching
    the engine's attention function): rows gathered from several input rows would attend
    with their inputs' masks, not their own, and row starts could not fill dead keys."""
    attn = type(lm.layer_part("attn", 0)).__name__
    if resume is not None and resume.row_starts is not None:
        raise UnsupportedInterventionError(
            f"{attn} computes attention in its own code, so row_starts cannot fill the keys "
            "of the positions a row does not compute: resume without row_starts"
        )
    if expand is not None and isinstance(expand[1], torch.Tensor) and batch > 1:
        raise UnsupportedInterventionError(
            f"{attn} computes attention in its own code, so rows gathered from {batch} input "
            "rows (expand with an index, join) cannot get their own masks: one input row a pass"
        )
