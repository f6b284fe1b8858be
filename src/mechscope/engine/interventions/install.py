"""A pass's interventions turned into attention work and module hooks.

Each intervention lands where it acts: reads, patches, ablations, steering and edits at
their site's hook (or, for ``q``/``k``/``v`` and attention scores, in the engine's attention
function), gates at ``z``, suppressions and reductions in the attention work of their
layers, a feature site's intervention in its dictionary's splice. The hooks are returned in
``handles`` for the pass to remove when it ends.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.hooks import RemovableHandle

from mechscope.engine.core import attention, hooks, module_sites, moe
from mechscope.engine.core.feature_sites import hook_site
from mechscope.engine.core.norms import SCALE_ROLES, install_scale
from mechscope.engine.core.sites import FEATURE, Site
from mechscope.engine.interventions.edits import select
from mechscope.engine.interventions.function import PassValues
from mechscope.engine.interventions.join import Join
from mechscope.engine.interventions.transform import (
    Expand,
    FeatureIn,
    FeatureOut,
    Peek,
    Splice,
    make_transform,
)
from mechscope.engine.interventions.values import (
    Ablate,
    Edit,
    Gate,
    Intervention,
    Patch,
    Read,
    ReduceAttention,
    Steer,
    SuppressAttention,
)
from mechscope.errors import SiteError
from mechscope.models.loaded import LoadedModel


def install_interventions(
    lm: LoadedModel,
    interventions: Sequence[Intervention],
    reads: dict[Site, torch.Tensor],
    reductions: dict[int, list[Any]],
    handles: list[RemovableHandle],
    work: dict[int, attention.AttentionWork],
    expand: tuple[int, int | torch.Tensor] | None,
    joins: Sequence[Join],
    seq: int,
    calls: module_sites.ModuleCalls,
) -> None:
    """Turn the pass's interventions into attention work and module hooks. ``seq``: the
    positions of this pass's input (the tail when resuming). Reads land in ``reads``,
    attention reductions in ``reductions`` (the pass's output)."""
    ops: dict[tuple[str, int], list[Any]] = defaultdict(list)
    values = PassValues({}, reads)  # what an Edit's context reads
    splices: dict[int, Splice] = {}  # by dictionary: one encode per dictionary
    for iv in interventions:
        if isinstance(iv, Read | Patch | Ablate | Steer | Edit):
            site = iv.site
            if site.name == FEATURE:
                _splice(lm, iv, splices, ops)
            elif site.name == "pattern":
                if not isinstance(iv, Read):
                    raise ValueError("pattern can only be read; use SuppressAttention")
                work[site.layer].reducers.append(_pattern_reader(site, reads))  # type: ignore[index]
            elif site.name == "logits":
                if not isinstance(iv, Read):
                    raise ValueError("logits can only be read")
                reads[site] = torch.empty(0)
            else:
                ops[site.key].append(iv)  # type: ignore[index]
        elif isinstance(iv, Gate):
            for layer in iv.layers if iv.layers is not None else range(lm.n_layers):
                lm.check_layer(layer)
                ops[("z", layer)].append(iv)
        elif isinstance(iv, SuppressAttention):
            span = _span_tensor(iv.spans)
            heads = _head_mask(iv.heads, lm.n_heads, lm.device)
            for layer in iv.layers if iv.layers is not None else range(lm.n_layers):
                lm.check_layer(layer)
                work[layer].suppress.append((span, heads))
        elif isinstance(iv, ReduceAttention):
            for layer in iv.layers if iv.layers is not None else range(lm.n_layers):
                lm.check_layer(layer)
                work[layer].reducers.append(_reducer(layer, iv.fn, reductions))
        else:
            raise TypeError(f"not an intervention: {iv!r}")
    for site in {s for iv in interventions if isinstance(iv, Edit) for s in iv.reads}:
        if site.name == "pattern":  # last at its site: the value the pass goes on with
            work[site.layer].reducers.append(_pattern_reader(site, values.peeks))  # type: ignore[index]
        else:
            ops[site.key].append(Peek(site, values.peeks))  # type: ignore[index]
    for j in reversed(joins):  # in layer order after an expansion at the same layer
        ops[("resid_pre", j.layer)].insert(0, j)
    if expand is not None:
        ops.setdefault(("resid_pre", expand[0]), []).insert(0, Expand(expand[1]))
    # resid_mid last: its hooks must see the layer input and attn_out after their edits
    for (name, layer), items in sorted(ops.items(), key=lambda kv: kv[0][0] == "resid_mid"):
        if name == "expert_out":
            by_expert: dict[int, list[Any]] = defaultdict(list)
            for item in items:
                by_expert[item.site.expert].append(item)
            fns = {e: make_transform(i, reads, layer, values) for e, i in by_expert.items()}
            experts = lm.layer_part("experts", layer)
            handles.append(moe.install_expert_out(experts, fns, seq))
            continue
        fn = make_transform(items, reads, layer, values)
        if name == "module":
            path, io = str(layer).rsplit(":", 1)
            handles.extend(module_sites.install(lm, path, io, fn, calls))
        elif name in SCALE_ROLES:
            handles.extend(install_scale(lm, name, layer, fn))
        elif name in ("q", "k", "v"):
            work[layer].qkv[name] = fn
        elif name == "attn_scores":
            work[layer].scores = fn
        elif name == "router":
            handles.append(moe.install_router(lm.layer_part("experts", layer), fn, seq))
        else:
            handles.extend(hooks.install(lm, name, layer, fn, seq))


def _splice(
    lm: LoadedModel, iv: Any, splices: dict[int, Splice], ops: dict[Any, list[Any]]
) -> None:
    """A feature site's intervention joins its dictionary's splice: the first one puts
    the encoder at the input site and the decoders at the output sites (list order)."""
    d = iv.site.dictionary
    splice = splices.get(id(d))
    if splice is None:
        splice = splices[id(d)] = Splice(d, [])
        ops[hook_site(lm, d.config.hook_in, "input").key].append(FeatureIn(splice))
        for hook, w_dec in d.writes():
            ops[hook_site(lm, hook, "output").key].append(FeatureOut(splice, w_dec))
    splice.items.append(iv)


def _pattern_reader(site: Site, reads: dict[Site, torch.Tensor]) -> Any:
    def read(probs: torch.Tensor) -> None:  # [b, h, q, k]; positions select queries
        reads[site] = select(probs, site)

    return read


def _reducer(layer: int, fn: Any, reductions: dict[int, list[Any]]) -> Any:
    def reduce(probs: torch.Tensor) -> None:
        reductions.setdefault(layer, []).append(fn(layer, probs))

    return reduce


def _span_tensor(spans: tuple[int, int] | torch.Tensor) -> torch.Tensor:
    t = spans if isinstance(spans, torch.Tensor) else torch.tensor([spans])
    return t.reshape(-1, 2).long()


def _head_mask(
    heads: Sequence[int] | None, n_heads: int, device: torch.device
) -> torch.Tensor | None:
    """``[n_heads]`` bool on ``device`` (made there: a recorded decode step copies nothing
    from the host)."""
    if heads is None:
        return None
    mask = torch.zeros(n_heads, dtype=torch.bool, device=device)
    for h in heads:
        if not 0 <= h < n_heads:
            raise SiteError(f"head {h} out of range: valid heads are 0..{n_heads - 1}")
        mask[h] = True
    return mask
