"""Pure functions that apply one intervention to one activation tensor.

Kept apart from the hook plumbing so each edit can be tested on plain tensors.
"""

from __future__ import annotations

import torch

from mechscope.engine.interventions import Ablate, Patch
from mechscope.engine.sites import Site


def select(act: torch.Tensor, site: Site) -> torch.Tensor:
    """The slice of ``act`` a site addresses (positions on dim 1, head on dim 2 for z)."""
    out = act
    if site.positions is not None:
        out = out[:, list(site.positions)]
    if site.head is not None and site.name == "z":
        out = out[:, :, site.head]
    return out


def apply_patch(act: torch.Tensor, patch: Patch) -> torch.Tensor:
    site = patch.site
    value = patch.value.to(device=act.device, dtype=act.dtype)
    if patch.mask is not None:
        mask = patch.mask.to(act.device)
        while mask.dim() < act.dim():
            mask = mask.unsqueeze(-1)
        return torch.where(mask, value, act)
    if site.positions is None and site.head is None:
        return value.expand_as(act).clone() if value.shape != act.shape else value
    out = act.clone()
    pos = slice(None) if site.positions is None else list(site.positions)
    if site.name == "z" and site.head is not None:
        out[:, pos, site.head] = value
    else:
        out[:, pos] = value
    return out


def apply_ablation(act: torch.Tensor, ablate: Ablate) -> torch.Tensor:
    site = ablate.site
    if ablate.mode == "zero":
        replacement = torch.zeros_like(act)
    else:
        if ablate.reference is None:
            raise ValueError(f"{ablate.mode} ablation of {site} needs a reference activation")
        ref = ablate.reference.to(device=act.device, dtype=act.dtype)
        if ablate.mode == "mean":
            mean = ref.mean(dim=0, keepdim=True)  # [1, seq, ...]
            if ablate.over_positions:
                mean = mean.mean(dim=1, keepdim=True)  # [1, 1, ...]
            replacement = mean.expand_as(act)
        elif ablate.mode == "resample":
            gen = torch.Generator().manual_seed(ablate.seed)
            rows = torch.randint(0, ref.shape[0], (act.shape[0],), generator=gen)
            replacement = ref[rows.to(ref.device)]
        else:
            raise ValueError(f"unknown ablation mode {ablate.mode!r}: zero, mean or resample")
    return apply_patch(act, Patch(site, select(replacement, site)))


def apply_gate(z: torch.Tensor, alpha: torch.Tensor, layer: int) -> torch.Tensor:
    """``z [batch, seq, heads, d_head]`` scaled by ``alpha[layer]`` (or per-row alpha)."""
    a = alpha[layer] if alpha.dim() == 2 else alpha[:, layer]  # [heads] or [batch, heads]
    a = a.to(device=z.device, dtype=z.dtype)
    a = a[None, None, :, None] if a.dim() == 1 else a[:, None, :, None]
    return z * a
