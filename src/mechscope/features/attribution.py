"""Which features a metric depends on: attribution over feature activations.

The dictionary is spliced into the pass as the engine splices any dictionary
(:meth:`~mechscope.engine.Site.feature`): its input site is encoded, its output site gets
the change of the reconstruction and keeps the error term. An :class:`~mechscope.engine.Edit`
on the feature site exposes the features: it replaces ``f = encode(x)`` by ``z = α · f``, a
leaf of the autograd graph, so at ``α = 1`` the pass computes exactly what the model
computes and the metric's gradient reaches every feature of every position.

- ``attribution="grad_x_act"`` (attribution patching towards zero): ``f · ∂m/∂f`` at the
  clean pass, the first-order change of the metric when a feature is removed;
- ``attribution="ig"``: integrated gradients from all features at zero (the error term
  kept) to their value, ``f · mean_α ∂m/∂f(α f)`` over ``steps`` midpoints; the
  attributions of every feature at every position sum to ``m(α=1) − m(α=0)`` up to the
  quadrature's error (completeness).

``metric(logits [b, T, vocab]) -> [b]`` is any differentiable function of the logits (a
logit difference, a log-probability). Attributions are ``[b, T, d_sae]`` fp32.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from mechscope.dictionaries import Dictionary
from mechscope.engine import Edit, Engine, Site
from mechscope.engine.core.frozen import frozen_parameters
from mechscope.errors import InputError
from mechscope.models.loaded import LoadedModel

Metric = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class FeatureAttribution:
    """``scores [b, T, d_sae]``: each feature's attribution at each position; ``value``
    ``[b]``: the metric at α = 1; ``baseline [b]``: at α = 0 (IG only, else NaN)."""

    scores: torch.Tensor
    activations: torch.Tensor  # [b, T, d_sae]: f
    value: torch.Tensor
    baseline: torch.Tensor

    def top(self, n: int = 10) -> list[tuple[int, float]]:
        """The ``n`` features of largest total attribution in size (summed over positions
        and rows), with their totals."""
        total = self.scores.sum((0, 1))
        idx = total.abs().topk(min(n, total.numel())).indices
        return [(int(i), float(total[i])) for i in idx]


def exposed(d: Dictionary, holder: dict, alpha: float, scale: torch.Tensor | None = None) -> Edit:
    """The Edit of the module docstring on ``d``'s feature site: the features ``f`` become
    the leaf ``z = α · f`` (times ``scale [d_sae]`` where given); both kept in ``holder``."""

    def fn(f: torch.Tensor, ctx) -> torch.Tensor:
        f = f.detach().float()  # [b, T, d_sae]
        z = f * alpha if scale is None else f * alpha * scale.to(f.device)
        holder["f"], holder["z"] = f, z.requires_grad_(True)
        return holder["z"]

    return Edit(Site.feature(d), fn)


def feature_attribution(
    lm: LoadedModel,
    d: Dictionary,
    inputs,
    metric: Metric,
    *,
    method: str = "grad_x_act",
    steps: int = 16,
) -> FeatureAttribution:
    """Attribution of ``metric`` to every feature of ``d`` (placed by its own hooks) at
    every position of ``inputs`` (module docstring)."""
    if method not in ("grad_x_act", "ig"):
        raise InputError(f"'grad_x_act' or 'ig', got {method!r}", field="method")
    if steps < 1:
        raise InputError(f"at least one step, got {steps}", field="steps")
    eng = Engine.of(lm)

    def one(alpha: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        holder: dict = {}
        out = eng.run(inputs, [exposed(d, holder, alpha)], logits=True, grad=True)
        m = metric(out.logits.float())  # [b]
        (grad,) = torch.autograd.grad(m.sum(), holder["z"])  # ∂m/∂z at z = α f
        return m.detach(), holder["f"], grad

    with frozen_parameters(lm.model, d):
        value, f, grad = one(1.0)
        if method == "grad_x_act":
            nan = torch.full_like(value, float("nan"))
            return FeatureAttribution(f * grad, f, value, nan)
        total = torch.zeros_like(f)
        for i in range(steps):
            _, _, g = one((i + 0.5) / steps)
            total += g
        baseline, _, _ = one(0.0)
    return FeatureAttribution(f * total / steps, f, value, baseline)
