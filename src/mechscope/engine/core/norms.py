"""Norm scales: the normalisation factor of an RMS or layer norm, read and patched exactly.

TransformerLens exposes each norm's divisor as ``hook_scale``; transformers' norms compute it
inside their forward, where no hook reaches. So the engine factors a norm module once into

    ``y = gain ⊙ (x - centre(x)) / scale(x) + bias``,
    ``scale(x) = sqrt(mean((x - centre)²) + eps)``

(``centre`` is the mean for a layer norm, 0 for an RMS norm), and proves the factoring on
seeded inputs through an fp32 twin of the module before using it: a norm that does not
factor so (another formula, an ``eps`` it does not name) is refused in one line. The same
factors make a norm linear once its scale is frozen, which is how per-head results pass
through Gemma's post-norms and how direct logit attribution reads the final norm
(:mod:`mechscope.engine.analysis.decompose`).

A read of a ``*_scale`` site is ``scale(x)`` of the norm's input, ``[batch, seq, 1]`` fp32;
a patch rebuilds the norm's output from its input with the patched scale.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from mechscope.engine.core.unembed import fp32_twin
from mechscope.errors import UnsupportedInterventionError
from mechscope.models.loaded import LoadedModel

#: Attribute names under which norm modules keep their epsilon.
EPS_NAMES = ("variance_epsilon", "eps", "epsilon", "layer_norm_eps", "norm_eps")
#: Relative error allowed when the factoring is checked on seeded fp32 inputs.
FACTOR_RTOL = 1e-5
#: Card role of each scale site's norm (``final_norm`` is not in a layer).
SCALE_ROLES = {"ln1_scale": "ln1", "ln2_scale": "ln2", "ln_final_scale": "final_norm"}


@dataclass(frozen=True)
class NormFactors:
    """One norm as ``gain ⊙ (x - centre) / scale + bias`` (all fp32, ``[d]``)."""

    center: bool
    eps: float
    gain: torch.Tensor  # [d]
    bias: torch.Tensor  # [d]

    def centred(self, x: torch.Tensor) -> torch.Tensor:
        """``x - mean(x)`` for a layer norm, ``x`` for an RMS norm (fp32)."""
        x = x.float()
        return x - x.mean(-1, keepdim=True) if self.center else x

    def scale(self, x: torch.Tensor) -> torch.Tensor:
        """``[..., 1]`` fp32: the divisor the norm applies to ``x [..., d]``."""
        return (self.centred(x).pow(2).mean(-1, keepdim=True) + self.eps).sqrt()

    def apply(self, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        """The norm's output (fp32) for input ``x`` with the divisor ``scale``."""
        g, b = self.gain.to(x.device), self.bias.to(x.device)
        return g * self.centred(x) / scale.float() + b

    def linear(self, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        """The norm's output without its bias, at a frozen ``scale``: linear in ``x``, so a
        sum of parts of ``x`` maps to the sum of their images."""
        return self.gain.to(x.device) * self.centred(x) / scale.float()


def factor_norm(module: nn.Module, d_model: int) -> NormFactors | str:
    """The factors of ``module`` (a norm over the last axis of width ``d_model``), or why it
    does not factor. Gain and bias are read off the module's own outputs (an fp32 twin), so
    Gemma's ``1 + weight`` and a bias-free layer norm need no special case."""
    eps = next(
        (getattr(module, n) for n in EPS_NAMES if isinstance(getattr(module, n, None), float)), None
    )
    if eps is None:
        return f"{type(module).__name__} names no epsilon ({', '.join(EPS_NAMES)})"
    device = next((p.device for p in module.parameters()), torch.device("cpu"))
    twin = fp32_twin(module)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(8, d_model, generator=gen, dtype=torch.float32).to(device)  # [8, d]
    x = x * torch.logspace(-2, 2, 8, device=device)[:, None] + 0.3  # scales around eps too
    try:
        with torch.no_grad():
            bias = twin(torch.zeros(1, d_model, device=device))[0].float()  # [d]
            y = twin(x).float()  # [8, d]
    except Exception as exc:  # a module that is not a plain norm over the last axis
        return f"{type(module).__name__} does not run as a norm ({type(exc).__name__}: {exc})"
    reasons = []
    for center in (False, True):
        probe = NormFactors(center, float(eps), torch.ones(d_model, device=device), bias)
        xc, s = probe.centred(x), probe.scale(x)
        gain = ((y - bias) * s * xc).sum(0) / xc.pow(2).sum(0).clamp_min(1e-30)  # [d] least squares
        factors = NormFactors(center, float(eps), gain, bias)
        err = (factors.apply(x, s) - y).abs().max() / y.abs().max().clamp_min(1e-30)
        if float(err) <= FACTOR_RTOL:
            return NormFactors(center, float(eps), gain.cpu(), bias.cpu())
        reasons.append(f"{'layer' if center else 'RMS'} norm off by {float(err):.1e}")
    return f"{type(module).__name__} is neither an RMS nor a layer norm ({'; '.join(reasons)})"


def norm_module(lm: LoadedModel, role: str, layer: int | None) -> nn.Module:
    """The norm a scale site or a post-norm lives on (``final_norm``, or a layer's ``ln1``,
    ``ln2``, ``attn_out`` / ``mlp_out`` post-norm)."""
    return lm.final_norm() if role == "final_norm" else lm.layer_part(role, layer)  # type: ignore[arg-type]


def norm_factors(lm: LoadedModel, role: str, layer: int | None, what: str) -> NormFactors:
    """The proven factors of a norm of ``lm`` (cached per module), or a one-line refusal of
    ``what`` naming why."""
    module = norm_module(lm, role, layer)
    store: dict[int, NormFactors | str] = lm.extra.setdefault("norm_factors", {})
    key = id(module)
    if key not in store:
        store[key] = factor_norm(module, lm.d_model)
    found = store[key]
    if isinstance(found, str):
        raise UnsupportedInterventionError(f"{what} is not supported for {lm.spec}: {found}")
    return found


def install_scale(
    lm: LoadedModel, name: str, layer: int | None, transform: Any
) -> list[RemovableHandle]:
    """A hook on the norm of scale site ``name``: the transform sees ``scale(x)``
    ``[batch, seq, 1]``; when it returns another tensor, the norm's output is rebuilt from
    its input with that scale (in the output's dtype)."""
    role = SCALE_ROLES[name]
    factors = norm_factors(lm, role, layer, name)

    def hook(module: nn.Module, args: tuple, kwargs: dict, output: Any) -> Any:
        x = args[0] if args else next(v for v in kwargs.values() if isinstance(v, torch.Tensor))
        s = factors.scale(x)  # [b, s, 1] fp32
        new = transform(s)
        if new is s:
            return None
        y = factors.apply(x, new.to(s.device)).to(output.dtype)
        return y.reshape(output.shape)

    return [norm_module(lm, role, layer).register_forward_hook(hook, with_kwargs=True)]
