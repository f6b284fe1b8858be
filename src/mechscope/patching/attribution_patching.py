"""Attribution patching: the first-order estimate of every patch on the grid at once.

``metric(patched) - metric(base) ≈ (source_act - base_act) · ∂metric/∂act`` at the base
run. Cost: the source activations come from the read pass the exact sweep already made,
plus one forward with gradients on the base and one backward, whatever the grid size.
The estimate is exact when the metric is linear in the patched activation, and it is
compared with exact patching (Pearson, top-k overlap) whenever both were run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from mechscope.engine import Engine, Read
from mechscope.patching.cache import RunCache
from mechscope.patching.config import PatchSpec
from mechscope.patching.exact import aligned_values, reference, unit_positions
from mechscope.patching.features import patch_site
from mechscope.patching.metrics import scalar_metric
from mechscope.patching.prepare import PreparedPair, units
from mechscope.patching.result import PairResult, PatchingResult
from mechscope.runs.tensors import array
from mechscope.stats import pearson


def attribute_pair(
    eng: Engine, p: PreparedPair, spec: PatchSpec, base: RunCache, source: RunCache, res: PairResult
) -> PairResult:
    """Fill ``res.attribution`` (``[layers, units, heads]``) for ``p``."""
    sites = [patch_site(spec, layer) for layer in res.layers]
    ids = torch.tensor([p.base_ids], dtype=torch.long)  # [1, seq]
    out = eng.run(ids, [Read(s) for s in sites], logits=torch.tensor([p.readout]), grad=True)
    metric = scalar_metric(out.logits[0, 0], reference(p, base), spec.attribution_metric)
    grads = torch.autograd.grad(metric, [out.reads[s] for s in sites])
    _, _, base_pos, _ = units(p, spec)
    act0 = out.reads[sites[0]]  # [1, seq, ...]
    member = unit_positions(base_pos, act0.shape[1]).to(act0.device, torch.float32)  # [U, seq]
    heads = torch.tensor(res.heads if spec.per_head else [0], device=act0.device)
    per_layer = []
    for layer, site, grad in zip(res.layers, sites, grads, strict=True):
        act = out.reads[site].detach()  # [1, seq, ...] (the base run, where grad is taken)
        values = aligned_values(p, spec, base, source, layer)  # [1|U, seq, ...]
        # fp32 before subtracting: a difference of two bf16 values is exact in fp32
        contrib = (values.float() - act.float()) * grad.float()  # [1|U, seq, ...]
        if spec.site != "feature":  # a feature site's last axis is its features
            contrib = contrib.sum(-1)  # [1|U, seq(, H)]
        if not spec.per_head:
            contrib = contrib[..., None]  # [1|U, seq, 1]
        # [U, heads]: each unit's own positions, the swept heads (features) only
        per_layer.append((member[:, :, None] * contrib[..., heads]).sum(1))
    est = torch.stack(per_layer).cpu().numpy()  # [layers, U, heads]: one transfer
    del out, grads
    res.attribution = est.astype(np.float32)
    res.attribution_metric = spec.attribution_metric
    return res


@dataclass(frozen=True)
class Agreement:
    """How well attribution patching ranks and sizes the exact effects."""

    direction: str
    metric: str
    pearson: float  # pooled over every cell of every pair
    pearson_per_pair: float  # mean of per-pair correlations
    top_k_overlap: float  # mean over pairs of |top-k(|atp|) ∩ top-k(|exact|)| / k
    k: int
    n_cells: int


def top_k_overlap(a: np.ndarray, b: np.ndarray, k: int) -> float:
    """Fraction of the ``k`` largest ``|a|`` cells that are among the ``k`` largest ``|b|``."""
    a, b = np.abs(np.ravel(a)), np.abs(np.ravel(b))
    k = min(k, a.size)
    ta = set(np.argsort(-a, kind="stable")[:k].tolist())
    tb = set(np.argsort(-b, kind="stable")[:k].tolist())
    return len(ta & tb) / k


def agreement(result: PatchingResult, k: int = 20) -> list[Agreement]:
    """One :class:`Agreement` per direction with both exact and attribution results."""
    out = []
    for direction in result.directions:
        items = [p for p in result.direction(direction) if p.attribution is not None and p.metrics]
        if not items:
            continue
        for p in items:  # no correlation or top-k ranking of NaN
            p.require_finite()
        metric = items[0].attribution_metric or "logit_diff"
        exact = [array(p.exact_change(metric)).ravel() for p in items]
        atp = [array(p.attribution).ravel() for p in items]
        per_pair = [pearson(a, e) for a, e in zip(atp, exact, strict=True)]
        out.append(
            Agreement(
                direction=direction,
                metric=metric,
                pearson=pearson(np.concatenate(atp), np.concatenate(exact)),
                pearson_per_pair=float(np.nanmean(per_pair))
                if np.isfinite(per_pair).any()
                else float("nan"),
                top_k_overlap=float(
                    np.mean([top_k_overlap(a, e, k) for a, e in zip(atp, exact, strict=True)])
                ),
                k=k,
                n_cells=int(sum(e.size for e in exact)),
            )
        )
    return out


def agreement_frame(result: PatchingResult, k: int = 20) -> pd.DataFrame:
    return pd.DataFrame([a.__dict__ for a in agreement(result, k)])
