"""How a projection's output reaches the residual stream, and what it is made of.

Per-head results (``z @ W_O`` per head) and per-neuron contributions are exact only where
what lies between the projection and the residual is linear. A card says where the
projection (``o_proj``, ``mlp_down``) and the contribution (``attn_out``, ``mlp_out``) live;
a :class:`Writer` reads the map between them off the model:

- the contribution *is* the projection's output, or its parent's (llama, GPT-2, NeoX):
  parts sum to the contribution minus the projection's bias;
- times a residual scale (Granite's ``residual_multiplier``): parts are scaled alike;
- a post-norm (Gemma's ``post_attention_layernorm``): a norm is not linear, but with its
  scale frozen at the run's value it is (:mod:`mechscope.engine.core.norms`), so parts pass
  through it at that scale and still sum to the contribution exactly — the same convention
  as the final norm's frozen scale in direct logit attribution.

Anything else (a nonlinearity the engine cannot factor) is refused in one line, and every
decomposition is checked against the contribution read in the same pass before it is
returned: a sum that does not match raises instead of giving a wrong split.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mechscope.engine.core.norms import NormFactors, norm_factors
from mechscope.errors import UnsupportedInterventionError
from mechscope.models.loaded import LoadedModel

#: Which projection feeds which contribution.
SIDES = {"attn_out": "o_proj", "mlp_out": "mlp_down"}


def tolerance(dtype: torch.dtype) -> float:
    """Relative error allowed between a sum of parts (fp32) and the contribution the model
    computed in ``dtype`` (its own rounding)."""
    return 1e-4 if dtype == torch.float32 else 2e-2


@dataclass(frozen=True)
class Writer:
    """``contribution = scale * post(x @ weight.T + bias)`` for one layer's projection."""

    weight: torch.Tensor  # [d_model, d_in], the model's dtype
    bias: torch.Tensor | None  # [d_model]
    post: NormFactors | None
    scale: float

    def raw(self, x: torch.Tensor) -> torch.Tensor:
        """The projection's output ``[..., d_model]`` fp32 for its input ``x [..., d_in]``."""
        w = self.weight.to(x.device).float()
        out = x.float() @ w.T
        return out if self.bias is None else out + self.bias.to(x.device).float()

    def post_scale(self, raw: torch.Tensor) -> torch.Tensor | None:
        """The post-norm's scale ``[..., 1]`` at this run (None without a post-norm)."""
        return None if self.post is None else self.post.scale(raw)

    def map_parts(self, parts: torch.Tensor, s_post: torch.Tensor | None) -> torch.Tensor:
        """Bias-free parts of the projection's output ``[..., d_model]`` as they reach the
        residual (through the frozen post-norm and the scale): linear in ``parts``."""
        if self.post is not None:
            parts = self.post.linear(parts, s_post)  # type: ignore[arg-type]
        return parts * self.scale

    def rest(self, s_post: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
        """What the contribution holds beyond the parts: the projection's bias (and a
        post-norm's own bias), ``[..., d_model]`` broadcast like ``s_post``/``like``."""
        d = like.shape[-1]
        bias = torch.zeros(d, device=like.device) if self.bias is None else self.bias.float()
        bias = bias.to(like.device)
        if self.post is None:
            return (bias * self.scale).expand_as(like)
        out = self.post.linear(bias.expand_as(like), s_post) + self.post.bias.to(like.device)  # type: ignore[arg-type]
        return out * self.scale

    def fold(self, u: torch.Tensor) -> torch.Tensor:
        """The direction ``v [..., d_in]`` with ``map_parts(x W^T) · u = (x · v) / s_post``:
        ``u [..., d_model]`` pulled back through the scale, the post-norm's gain and centring,
        and the projection."""
        u = u.float() * self.scale
        if self.post is not None:
            u = self.post.gain.to(u.device) * u
            if self.post.center:
                u = u - u.mean(-1, keepdim=True)
        return u @ self.weight.to(u.device).float()


def projection_weight(module: torch.nn.Module, what: str, lm: LoadedModel) -> torch.Tensor:
    """``[out, in]`` weight of a linear map (``nn.Linear``; GPT-2's ``Conv1D`` transposed)."""
    if isinstance(module, torch.nn.Linear):
        return module.weight.detach()
    weight = getattr(module, "weight", None)
    if type(module).__name__ == "Conv1D" and isinstance(weight, torch.Tensor):
        return weight.detach().T
    raise UnsupportedInterventionError(
        f"{what} is not supported for {lm.spec}: {type(module).__name__} is not a linear map"
    )


def writer(lm: LoadedModel, site: str, layer: int, what: str) -> Writer:
    """How layer ``layer``'s projection reaches ``site`` (``attn_out`` or ``mlp_out``)."""
    role = SIDES[site]
    proj_path, out_path = getattr(lm.card, role), getattr(lm.card, site)
    if proj_path is None:
        raise UnsupportedInterventionError(
            f"{what} is not supported for {lm.spec}: the {lm.card.family} card names no {role}"
        )
    module = lm.layer_part(role, layer)
    weight = projection_weight(module, what, lm)
    bias = getattr(module, "bias", None)
    bias = bias.detach() if isinstance(bias, torch.Tensor) else None
    inside = proj_path == out_path or proj_path.startswith(out_path + ".")
    post = None if inside else norm_factors(lm, site, layer, what)
    return Writer(weight, bias, post, float(lm.residual_scale or 1.0))


def check_sum(
    lm: LoadedModel,
    total: torch.Tensor,
    expected: torch.Tensor,
    what: str,
    where: str,
    *,
    scale: float = 0.0,
) -> None:
    """Raise in one line when parts that must sum to a contribution do not (``scale``: the
    magnitude rounding is relative to, at least ``expected``'s largest entry)."""
    exp = expected.float().to(total.device)
    scale = max(float(exp.abs().max()), scale, 1e-6)
    err = float((total - exp).abs().max())
    if err > tolerance(lm.dtype) * scale:
        raise UnsupportedInterventionError(
            f"{what} is not exact for {lm.spec}: {where} does not sum to what the model adds "
            f"to the residual (off by {err:.2g} of {scale:.2g}): the model does more than a "
            "projection, a residual scale or a norm between them"
        )


def head_results(
    lm: LoadedModel, layer: int, z: torch.Tensor, attn_out: torch.Tensor, what: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each head's write into the residual, ``[b, p, heads, d_model]`` fp32, and the rest
    (bias) ``[b, p, d_model]``, from ``z [b, p, heads, d_head]``; checked to sum to
    ``attn_out [b, p, d_model]``."""
    w = writer(lm, "attn_out", layer, what)
    heads, d_head = z.shape[-2], z.shape[-1]
    weight = w.weight.to(z.device).float().view(-1, heads, d_head)  # [d, heads, d_head]
    parts = torch.einsum("bphk,dhk->bphd", z.float(), weight)  # [b, p, heads, d]
    s_post = w.post_scale(w.raw(z.flatten(-2)))  # [b, p, 1] or None
    mapped = w.map_parts(parts, None if s_post is None else s_post[..., None, :])
    rest = w.rest(s_post, attn_out.float())
    check_sum(lm, mapped.sum(-2) + rest, attn_out, what, f"layer {layer}'s heads")
    return mapped, rest
