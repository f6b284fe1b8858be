"""Pure functions that apply one intervention to one activation tensor.

Kept apart from the hook plumbing so each edit can be tested on plain tensors. Positions and
heads index the axes the site names (:attr:`Site.pos_dim`, :attr:`Site.head_dim`):
``[batch, seq, heads, d]`` for z/q/k/v, ``[batch, heads, q, k]`` for attn_scores/pattern.
"""

from __future__ import annotations

import torch

from mechscope.engine.core.sites import Site
from mechscope.engine.interventions.function import Edit, EditContext
from mechscope.engine.interventions.values import Ablate, Patch, Steer
from mechscope.errors import InputError


def _index(site: Site, ndim: int) -> tuple:
    """The advanced index of a site's positions and head (None where it selects nothing)."""
    idx: list = [slice(None)] * ndim
    if site.positions is not None:
        idx[site.pos_dim] = list(site.positions)
    if site.unit is not None:
        idx[site.head_dim] = site.unit
    return tuple(idx)


def select(act: torch.Tensor, site: Site) -> torch.Tensor:
    """The slice of ``act`` a site addresses: ``[b, P, ...]`` for positions, the head axis
    dropped for a head (``[b, P, d]`` for z/q/k/v, ``[b, P, k]`` for attn_scores) and for
    one feature of a feature site (``[b, P]``; ``[b, P, n]`` for several)."""
    if site.positions is None and site.unit is None:
        return act
    if _two_lists(site):
        return act[:, list(site.positions)][:, :, site.unit]  # type: ignore[arg-type]
    return act[_index(site, act.dim())]


def _two_lists(site: Site) -> bool:
    """Whether a site selects several positions and several features (a block)."""
    return site.positions is not None and isinstance(site.unit, list)


def apply_patch(act: torch.Tensor, patch: Patch) -> torch.Tensor:
    site = patch.site
    value = patch.value
    if patch.rows is not None:  # one value per source, gathered to the batch rows here
        value = value.index_select(0, patch.rows.to(value.device))
    value = value.to(device=act.device, dtype=act.dtype)
    if patch.mask is not None:
        mask = patch.mask.to(act.device)
        while mask.dim() < act.dim():
            mask = mask.unsqueeze(-1)
        return torch.where(mask, value, act)
    if site.positions is None and site.unit is None:
        return value.expand_as(act).clone() if value.shape != act.shape else value
    out = act.clone()
    if _two_lists(site):  # positions × features: a block, not pairs
        block = out[:, list(site.positions)]  # type: ignore[arg-type]
        block[:, :, site.unit] = value
        out[:, list(site.positions)] = block  # type: ignore[arg-type]
        return out
    out[_index(site, act.dim())] = value  # head and positions are adjacent axes
    return out


def apply_ablation(act: torch.Tensor, ablate: Ablate) -> torch.Tensor:
    site = ablate.site
    if ablate.mode == "zero":
        replacement = torch.zeros_like(act)
    else:
        ref = ablate.reference
        assert isinstance(ref, torch.Tensor)  # a Cache was resolved when the Ablate was made
        if ablate.mode == "mean":
            mean = reference_mean(ref, ablate.reference_mask, site, ablate.over_positions)
            replacement = mean.to(device=act.device, dtype=act.dtype).expand_as(act)
        else:
            gen = torch.Generator().manual_seed(ablate.seed)
            rows = torch.randint(0, ref.shape[0], (act.shape[0],), generator=gen)
            replacement = ref[rows.to(ref.device)].to(device=act.device, dtype=act.dtype)
    return apply_patch(act, Patch(site, select(replacement, site)))


def reference_mean(
    ref: torch.Tensor, mask: torch.Tensor | None, site: Site, over_positions: bool
) -> torch.Tensor:
    """The fp32 mean of ``ref [rows, seq, ...]`` over its rows (``[1, seq, ...]``), or over
    rows and positions (``[1, 1, ...]``); ``mask [rows, seq]`` (True = real token, only with
    ``over_positions``: :func:`mechscope.engine.interventions.values.checked_mask`) keeps the
    padding out."""
    x = ref.float()
    if not over_positions:
        return x.mean(dim=0, keepdim=True)
    if mask is None:
        return x.mean(dim=(0, site.pos_dim), keepdim=True)
    real = mask.to(x.device).reshape(*mask.shape, *([1] * (x.dim() - 2)))  # [rows, seq, 1...]
    total = torch.where(real, x, 0.0).sum(dim=(0, 1), keepdim=True)  # padding may be NaN
    return total / real.sum()


def apply_gate(z: torch.Tensor, alpha: torch.Tensor, layer: int) -> torch.Tensor:
    """``z [batch, seq, heads, d_head]`` scaled by ``alpha[layer]`` (or per-row alpha)."""
    a = alpha[layer] if alpha.dim() == 2 else alpha[:, layer]  # [heads] or [batch, heads]
    a = a.to(device=z.device, dtype=z.dtype)
    a = a[None, None, :, None] if a.dim() == 1 else a[:, None, :, None]
    return z * a


def apply_steer(act: torch.Tensor, steer: Steer) -> torch.Tensor:
    """``act`` with :class:`Steer` applied to its site's slice (fp32, cast back)."""
    site = steer.site
    part = select(act, site)  # [b, P, *trail]: positions kept, a head dropped
    vec = steer.vector.to(device=act.device, dtype=torch.float32)
    if tuple(vec.shape) != tuple(part.shape[2:]):
        raise InputError(
            f"a steering vector of shape {list(part.shape[2:])} for {site} (its slice per "
            f"position), got {list(vec.shape)}",
            field="vector",
        )
    if steer.per_row:
        alpha = steer.alpha.to(device=act.device, dtype=torch.float32)  # type: ignore[union-attr]
        if alpha.shape[0] != part.shape[0]:
            raise ValueError(
                f"{alpha.shape[0]} steering scales for a batch of {part.shape[0]} rows at {site}"
            )
        scale = alpha.reshape(-1, *([1] * (part.dim() - 1)))  # [b, 1, ...]
    else:
        if float(steer.alpha) == 0.0:
            return act
        scale = torch.tensor(float(steer.alpha), device=act.device)
    x = part.float()
    if steer.mode == "add":
        new = x + scale * vec
    else:
        unit = vec / vec.norm()
        coef = (x * unit).flatten(2).sum(-1)  # [b, P]: the component along the direction
        new = x - scale * coef.reshape(*coef.shape, *([1] * vec.dim())) * unit
    return apply_patch(act, Patch(site, new.to(act.dtype)))


def apply_edit(act: torch.Tensor, edit: Edit, context: EditContext, *, copy: bool) -> torch.Tensor:
    """``act`` with ``edit.fn`` applied to its site's slice. ``copy``: hand ``fn`` a copy
    (a read of this activation was kept earlier in the hook, and ``fn`` may edit in place).

    None from ``fn`` returns ``act`` itself (bit for bit). An in-place edit returned as the
    very tensor that came in is handed back as a new view of it, so that a derived site
    (``resid_mid``, a scaled contribution) sees that something changed."""
    site = edit.site
    part = select(act, site)
    given = part.clone() if copy and part is act else part
    new = edit.fn(given, context)
    if new is None:
        return act
    if not isinstance(new, torch.Tensor) or tuple(new.shape) != tuple(part.shape):
        got = list(new.shape) if isinstance(new, torch.Tensor) else type(new).__name__
        raise InputError(
            f"expected fn at {site} to return None or a tensor of the activation's shape "
            f"{list(part.shape)}, got {got}",
            field="fn",
        )
    new = new.to(device=act.device, dtype=act.dtype)
    if part is act:
        return new.view_as(new) if new is act else new
    return apply_patch(act, Patch(site, new))
