"""One site's interventions as one ``transform(act) -> act``, for the hook on that site.

The hooks (:mod:`mechscope.engine.core.hooks`, the attention function, the norm, module and
expert sites) apply a transform without knowing what it does; this is where a site's list
of interventions becomes one, in list order, so a ``Read`` sees the edits listed before it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from mechscope.engine.core.hooks import Transform
from mechscope.engine.core.sites import Site
from mechscope.engine.interventions.edits import (
    apply_ablation,
    apply_edit,
    apply_gate,
    apply_patch,
    apply_steer,
    select,
)
from mechscope.engine.interventions.function import Edit, EditContext, PassValues, real_tokens
from mechscope.engine.interventions.join import Join
from mechscope.engine.interventions.values import Ablate, Gate, Patch, Read, Steer


@dataclass
class Expand:
    """Repeat a one-row batch to ``n`` rows, or gather input rows by an index."""

    n: int | torch.Tensor

    def apply(self, act: torch.Tensor) -> torch.Tensor:
        if isinstance(self.n, torch.Tensor):
            return act.index_select(0, self.n.to(act.device))
        return act.expand(self.n, *act.shape[1:])


@dataclass
class Splice:
    """One dictionary spliced into one pass: its feature-level interventions, in list order,
    and the change they made to its features, ``delta = f' - f`` ``[b, s, d_sae]`` (None:
    nothing changed), which its output sites add through their decoders."""

    dictionary: Any
    items: list[Any]
    delta: torch.Tensor | None = None


@dataclass
class FeatureIn:
    """At a dictionary's input site: encode, apply the feature interventions, keep the
    change (the activation itself passes unchanged)."""

    splice: Splice


@dataclass
class FeatureOut:
    """At one of a dictionary's output sites: add the change of its reconstruction,
    ``delta @ w_dec`` (over ``input_scale``), and nothing else: the error term stays."""

    splice: Splice
    w_dec: torch.Tensor  # [d_sae, d_out]


def encode_features(
    act: torch.Tensor, splice: Splice, reads: dict[Any, torch.Tensor], values: Any
) -> None:
    """``act`` (``[b, s, d_in]``; the heads of ``z`` flattened) encoded, the splice's
    interventions applied to the features ``[b, s, d_sae]``, the change kept. Under
    gradients the change is ``f' - f.detach()``: zero where nothing changed, with the
    features (and their reads) upstream of the output."""
    x = act.flatten(-2) if act.dim() == 4 else act
    f = splice.dictionary.encode(x)  # [b, s, d_sae], the dictionary's dtype
    new = make_transform(splice.items, reads, None, values)(f)
    for item in splice.items:
        if isinstance(item, Read) and item.sparse and item.site in reads:
            reads[item.site] = reads[item.site].detach().to_sparse()
    graph = torch.is_grad_enabled() and f.requires_grad
    splice.delta = None if new is f and not graph else new - f.detach()


def add_features(act: torch.Tensor, out: FeatureOut) -> torch.Tensor:
    """``act`` plus the change of the reconstruction at this output site, computed in the
    dictionary's dtype and cast back: ``act`` itself when no feature changed."""
    delta = out.splice.delta
    if delta is None:
        return act
    add = delta @ out.w_dec.to(delta.dtype)  # [b, s, d_out]
    scale = out.splice.dictionary.config.input_scale
    if scale is not None:
        add = add / scale
    if act.dim() == 4:  # z: [b, s, heads, d_head]
        add = add.unflatten(-1, tuple(act.shape[-2:]))
    return (act.to(add.dtype) + add.to(act.device)).to(act.dtype)


@dataclass
class Peek:
    """A site an :class:`Edit` reads (``reads=``): kept in ``store`` for the pass only."""

    site: Site
    store: dict[Site, torch.Tensor]


def make_transform(
    items: list[Any],
    reads: dict[Any, torch.Tensor],
    layer: Any,
    values: PassValues | None = None,
) -> Transform:
    """One site's interventions, in list order: a ``Read`` sees the edits listed before it.
    ``values``: what an :class:`Edit`'s context reads (the pass's peeks and reads)."""

    def transform(act: torch.Tensor) -> torch.Tensor:
        kept = False  # a read of this very tensor was kept: an Edit gets a copy
        for item in items:
            if isinstance(item, Expand | Join):
                act = item.apply(act)
            elif isinstance(item, Read):
                value = select(act, item.site)
                reads[item.site] = value if item.device is None else value.to(item.device)
                kept = True
            elif isinstance(item, Peek):
                item.store[item.site] = select(act, item.site)
                kept = True
            elif isinstance(item, Edit):
                where = real_tokens(act, item.site)
                context = EditContext(item.site, item.site.layer, where, values or {})
                act = apply_edit(act, item, context, copy=kept)
            elif isinstance(item, Patch):
                act = apply_patch(act, item)
            elif isinstance(item, Ablate):
                act = apply_ablation(act, item)
            elif isinstance(item, Gate):
                act = apply_gate(act, item.alpha, layer)
            elif isinstance(item, Steer):
                act = apply_steer(act, item)
            elif isinstance(item, FeatureIn):
                encode_features(act, item.splice, reads, values)
            elif isinstance(item, FeatureOut):
                act = add_features(act, item)
        return act

    transform.reads_any = any(isinstance(item, Read | Peek) for item in items)  # type: ignore[attr-defined]
    transform.edits_any = not all(isinstance(item, Read | Peek | FeatureIn) for item in items)  # type: ignore[attr-defined]
    return transform
