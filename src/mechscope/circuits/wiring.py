"""Where each receiver reads the residual stream, in the model's own modules.

A head's query, key and value each read the residual stream through the norm before
attention and one linear projection; everything after the projection (a q/k norm, rotary
embeddings) acts on each head alone. So giving receiver ``r`` its own residual stream
``x + δ_r`` changes only its columns of the projection's output, by

    ``Δ_r = W_r (ln1(x + δ_r) − ln1(x))``

(the norm in fp32 from its proven factors, :func:`~mechscope.engine.core.norms.norm_factors`;
``W_r`` the projection's rows of that head). The edit adds ``Δ_r`` at the projection's output,
and the model computes the rest; ``δ_r = 0`` adds an exact zero, so the unedited pass is
kept bit for bit. An MLP reads its input at the norm before it (its ``input`` is edited: the
residual stream itself is left alone), the logits at the last layer's output.

Three layouts of the projections are known: separate ``q_proj``/``k_proj``/``v_proj``
(Llama, Mistral, Qwen, Gemma and most decoders), GPT-2's fused ``c_attn`` (``[q | k | v]``)
and GPT-NeoX's fused ``query_key_value`` (per head ``[q k v]``). Any other is refused in one
line; each is also checked on the first pass against the projection's real output
(:meth:`ReceiverWiring.check`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mechscope.circuits.graph import EdgeGraph
from mechscope.engine.analysis.decompose import projection_weight
from mechscope.engine.core.norms import NormFactors, norm_factors
from mechscope.errors import UnsupportedInterventionError
from mechscope.models.loaded import LoadedModel

WHAT = "edge circuits"
SEPARATE = (("q_proj", "k_proj", "v_proj"), ("query", "key", "value"))


@dataclass(frozen=True)
class Projection:
    """One linear module feeding some receivers of a layer."""

    path: str  #: as ``named_modules()`` spells it
    weight: torch.Tensor  # [out, d_model]
    bias: torch.Tensor | None  # [out]
    receivers: list[int]  #: graph receiver indices it serves, in column-block order
    columns: torch.Tensor  # [len(receivers), d_head] long: each receiver's output columns


@dataclass(frozen=True)
class LayerWiring:
    """How layer ``layer``'s attention receivers read the residual stream."""

    layer: int
    norm: NormFactors  #: ln1
    projections: list[Projection]


def _module_path(lm: LoadedModel, module: torch.nn.Module) -> str:
    for path, m in lm.model.named_modules():
        if m is module:
            return path
    raise UnsupportedInterventionError(f"{WHAT} is not supported for {lm.spec}: module not found")


def _block_columns(start: int, count: int, d_head: int, stride: int) -> torch.Tensor:
    """``[count, d_head]``: head ``i``'s columns start at ``start + i * stride``."""
    return start + torch.arange(count)[:, None] * stride + torch.arange(d_head)[None, :]


def _projection(lm: LoadedModel, module: torch.nn.Module, receivers: list[int], cols: torch.Tensor):
    weight = projection_weight(module, WHAT, lm)
    bias = getattr(module, "bias", None)
    return Projection(
        _module_path(lm, module),
        weight,
        bias.detach() if isinstance(bias, torch.Tensor) else None,
        receivers,
        cols,
    )


def layer_wiring(lm: LoadedModel, graph: EdgeGraph, layer: int) -> LayerWiring:
    """The projections of layer ``layer`` and each receiver's columns, or a one-line refusal."""
    attn = lm.layer_part("attn", layer)
    children = dict(attn.named_children())
    h, kv = graph.n_heads, graph.n_kv_heads
    rec = {
        kind: [graph.qkv_receiver(layer, kind, i) for i in range(n)]
        for kind, n in (("q", h), ("k", kv), ("v", kv))
    }
    projections: list[Projection] = []
    for names in SEPARATE:
        if all(n in children for n in names):
            for kind, name in zip("qkv", names, strict=True):
                module = children[name]
                out = projection_weight(module, WHAT, lm).shape[0]
                n = len(rec[kind])
                if out % n:
                    break
                cols = _block_columns(0, n, out // n, out // n)
                projections.append(_projection(lm, module, rec[kind], cols))
            break
    if not projections and "c_attn" in children:  # GPT-2: [q | k | v], each heads × d_head
        module = children["c_attn"]
        d = projection_weight(module, WHAT, lm).shape[0] // 3
        dh = d // h
        cols = torch.cat([_block_columns(i * d, h, dh, dh) for i in range(3)])
        projections.append(_projection(lm, module, rec["q"] + rec["k"] + rec["v"], cols))
    if not projections and "query_key_value" in children and h == kv:  # NeoX: per head [q k v]
        module = children["query_key_value"]
        dh = projection_weight(module, WHAT, lm).shape[0] // (3 * h)
        cols = torch.cat([_block_columns(i * dh, h, dh, 3 * dh) for i in range(3)])
        projections.append(_projection(lm, module, rec["q"] + rec["k"] + rec["v"], cols))
    if not projections:
        raise UnsupportedInterventionError(
            f"{WHAT} is not supported for {lm.spec}: its attention ({type(attn).__name__}) has "
            "no q/k/v projections mechscope knows (q_proj/k_proj/v_proj, c_attn, "
            "query_key_value)"
        )
    return LayerWiring(layer, norm_factors(lm, "ln1", layer, WHAT), projections)


def receiver_delta(
    wiring: LayerWiring, proj: Projection, x: torch.Tensor, delta: torch.Tensor
) -> torch.Tensor:
    """``[b, p, R, d_head]`` fp32: what each receiver's own residual ``x + δ_r`` changes in
    its columns of ``proj``'s output. ``x [b, p, d]`` the layer's input, ``delta [b, p, R, d]``
    one offset per receiver of ``proj`` (fp32)."""
    norm = wiring.norm
    base = norm.apply(x, norm.scale(x))  # [b, p, d] fp32
    moved = x.float()[:, :, None, :] + delta  # [b, p, R, d]
    diff = norm.apply(moved, norm.scale(moved)) - base[:, :, None, :]  # [b, p, R, d]
    w = proj.weight.to(x.device).float()[proj.columns.to(x.device)]  # [R, d_head, d]
    return torch.einsum("bprd,rkd->bprk", diff, w)


class _ProbeGradient(torch.autograd.Function):
    """The identity on a projection's output whose backward also gives each receiver's zero
    probe ``δ_r`` the gradient its own stream ``x + δ_r`` gets at ``δ_r = 0``:
    ``J_norm(x)ᵀ W_rᵀ ∂/∂out_r`` (``out_r`` its columns). These are the numbers
    differentiating :func:`receiver_delta` gives, without computing the zero it adds in
    the forward: an EAP pass runs at the cost of the model's own."""

    @staticmethod
    def forward(ctx, out, probe, x, w, columns, norm):  # probe: an input for its gradient
        ctx.save_for_backward(x, w)
        ctx.columns, ctx.norm = columns, norm  # the wiring's own index: nothing new to save
        return out.view_as(out)

    @staticmethod
    def backward(ctx, grad_out):  # [b, p, out]
        x, w = ctx.saved_tensors
        g = grad_out.float()[..., ctx.columns]  # [b, p, R, d_head]
        v = torch.einsum("bprk,rkd->bprd", g, w)  # [b, p, R, d]
        with torch.enable_grad():
            xx = x[:, :, None, :].expand_as(v).contiguous().requires_grad_()  # [b, p, R, d]
            y = ctx.norm.apply(xx, ctx.norm.scale(xx))
            (gx,) = torch.autograd.grad(y, xx, v)
        return grad_out, gx, None, None, None, None


def probe_gradient(
    wiring: LayerWiring,
    proj: Projection,
    x: torch.Tensor,
    out: torch.Tensor,
    probe: torch.Tensor,
) -> torch.Tensor:
    """``out [b, p, out]`` unchanged, with ``probe [b, p, R, d]`` (the zero offsets of
    ``proj``'s receivers) differentiable through it as if each receiver read ``x + δ_r``."""
    w = proj.weight.to(x.device).float()[proj.columns.to(x.device)]  # [R, d_head, d]
    cols = proj.columns.to(out.device)  # [R, d_head]
    return _ProbeGradient.apply(out, probe, x.detach().float(), w, cols, wiring.norm)


def check(
    lm: LoadedModel, wiring: LayerWiring, proj: Projection, x: torch.Tensor, out: torch.Tensor
):
    """Refuse in one line unless ``proj`` applied to ``ln1(x)`` gives the output the model
    computed (``out [b, p, out]``): the receivers then read exactly what the edit assumes."""
    norm = wiring.norm
    y = norm.apply(x, norm.scale(x))  # [b, p, d] fp32
    want = y @ proj.weight.to(x.device).float().T
    if proj.bias is not None:
        want = want + proj.bias.to(x.device).float()
    err = float((want - out.float()).abs().max())
    scale = max(float(out.float().abs().max()), 1e-6)
    tol = 1e-4 if lm.dtype == torch.float32 else 3e-2
    if err > tol * scale:
        raise UnsupportedInterventionError(
            f"{WHAT} is not exact for {lm.spec}: layer {wiring.layer}'s {proj.path} does not "
            f"read the norm before attention of the layer's input (off by {err:.2g} of "
            f"{scale:.2g})"
        )
