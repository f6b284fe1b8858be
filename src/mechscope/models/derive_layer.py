"""Where the sites of one decoder layer live, read off one traced forward pass.

Part of card derivation (:mod:`mechscope.models.derive`): for each layer, the attention's
output projection, the two modules whose outputs add up to what the layer writes to the
residual (``attn_out`` first), the MLP's down projection or experts, and whether attention and
MLP run in parallel. Every choice is checked against the traced values, not against names
alone, so a family that puts a norm after each sublayer (Gemma, OLMo 2) or adds the residual
inside its blocks (Bloom) is read right.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

import torch
from torch import nn

from mechscope.models.trace import Trace
from mechscope.tolerance import rounding_margin, scale_of

_ATTN = re.compile(r"attn|attention", re.IGNORECASE)
_NORM = re.compile(r"norm|ln", re.IGNORECASE)
_ACT = re.compile(r"(^|_)act", re.IGNORECASE)


def _out_dim(module: nn.Module) -> tuple[int, int] | None:
    """(in, out) features of a linear map (nn.Linear or GPT-2's Conv1D)."""
    if isinstance(module, nn.Linear):
        return module.in_features, module.out_features
    weight = getattr(module, "weight", None)
    if type(module).__name__ == "Conv1D" and isinstance(weight, torch.Tensor):
        return int(weight.shape[0]), int(weight.shape[1])
    return None


def close(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype, scale: float | None = None) -> bool:
    """Equal up to one stage of the model's own rounding in ``dtype``
    (:func:`mechscope.tolerance.rounding_tolerance`), at ``scale`` or the values' own."""
    if a.shape != b.shape:
        return False
    err, tol = rounding_margin(a, b, 1, scale=scale, dtype=dtype)
    return err <= tol


def _as_tokens(t: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor | None:
    """``t`` as ``[batch, seq, d]`` when it is the same activation flattened over tokens."""
    if t is None:
        return None
    if t.shape == like.shape:
        return t.float()
    if t.dim() == 2 and t.shape[0] == like.shape[0] * like.shape[1] and t.shape[1] == like.shape[2]:
        return t.reshape(like.shape).float()
    return None


def layer_parts(
    layer: nn.Module,
    prefix: str,
    trace: Trace,
    d_model: int,
    residual_scale: float,
    dtype: torch.dtype,
) -> dict[str, Any] | str:
    """Where the sites of one layer live, relative to the layer; or why they cannot be found."""
    call = trace.calls.get(prefix)
    resid_pre, resid_post = (None, None) if call is None else (call.inp, call.out)
    if resid_pre is None or resid_post is None or resid_pre.shape != resid_post.shape:
        return "its input and output are not residual streams of the same shape"
    delta = (resid_post.double() - resid_pre.double()).float()  # [batch, seq, d_model]
    rel = {path: m for path, m in layer.named_modules() if path and path.count(".") < 3}
    outs: dict[str, torch.Tensor] = {}
    for path in rel:
        t = _as_tokens(trace.out(f"{prefix}.{path}"), delta)
        if t is not None:
            outs[path] = t
    order = {p: trace.calls[f"{prefix}.{p}"].order for p in outs}
    o_proj = _o_proj(rel, outs, order, d_model)
    if o_proj is None:
        return (
            "no attention output projection (a linear map into the residual inside a module "
            "named like attention)"
        )
    attn = o_proj.rsplit(".", 1)[0]
    magnitude = scale_of(resid_pre, resid_post)  # where the residual adds were rounded
    pair = _contribution_pair(outs, order, delta, residual_scale, dtype, magnitude)
    if pair is None:
        return (
            "no two modules' outputs add up to what the layer writes to the residual "
            "(post-norm residual stream or an unknown scale?)"
        )
    attn_out, mlp_out = pair
    experts = next((p for p, m in rel.items() if _is_experts(m)), None)
    mlp_down = None if experts else _mlp_down(rel, outs, attn, mlp_out, d_model)
    mlp_root = (experts or mlp_down or mlp_out).split(".")[0]
    parallel = _is_parallel(trace, prefix, attn.split(".")[0], mlp_root, resid_pre)
    return {
        "ln1": _norm_feeding(layer, prefix, trace, attn.split(".")[0]),
        "ln2": _norm_feeding(layer, prefix, trace, mlp_root),
        "mlp_act": None if experts else _activation(rel, prefix, trace, mlp_root),
        "attn": attn,
        "o_proj": o_proj,
        "attn_out": attn_out,
        "mlp_out": mlp_out,
        "mlp_down": mlp_down,
        "experts": experts,
        "parallel": parallel,
    }


def _o_proj(
    rel: dict[str, nn.Module], outs: dict[str, torch.Tensor], order: dict[str, int], d_model: int
) -> str | None:
    """The attention block's output projection: the linear map into the residual inside a
    module named like attention whose output is that module's output, or else the last such
    map to run (Bloom's attention adds the residual itself)."""
    found: list[tuple[bool, int, str]] = []
    for path, module in rel.items():
        dims = _out_dim(module)
        if dims is None or dims[1] != d_model or "." not in path or path not in outs:
            continue
        parent = path.rsplit(".", 1)[0]
        named = _ATTN.search(parent.rsplit(".", 1)[-1]) or _ATTN.search(type(rel[parent]).__name__)
        if not named:
            continue
        last = parent in outs and torch.equal(outs[path], outs[parent])
        found.append((last, order[path], path))
    return max(found)[2] if found else None


def _contribution_pair(
    outs: dict[str, torch.Tensor],
    order: dict[str, int],
    delta: torch.Tensor,
    scale: float,
    dtype: torch.dtype,
    magnitude: float,
) -> tuple[str, str] | None:
    """The two modules (attention side first) whose outputs sum to the layer's residual write.

    Among modules with equal outputs (an attention block and its own output projection) the
    one nearest the layer wins, so sites hook the block, as the built-in cards do. The sum is
    compared up to rounding at the residual stream's ``magnitude``.
    """
    if float(delta.abs().max()) == 0:
        return None
    paths = sorted(outs, key=lambda p: (p.count("."), order[p]))
    for i, a in enumerate(paths):
        for b in paths[i + 1 :]:
            if a.startswith(b + ".") or b.startswith(a + "."):
                continue
            if close((outs[a] + outs[b]) * scale, delta, dtype, magnitude):
                return (a, b) if order[a] < order[b] else (b, a)
    return None


def _is_experts(module: nn.Module) -> bool:
    """A mixture-of-experts bank called as ``experts(hidden, top_k_index, top_k_weights)``."""
    if not type(module).__name__.endswith("Experts"):
        return False
    params = [p for p in inspect.signature(module.forward).parameters if p != "self"]
    return len(params) == 3 and any(p.dim() == 3 for p in module.parameters(recurse=False))


def _mlp_down(
    rel: dict[str, nn.Module], outs: dict[str, torch.Tensor], attn: str, mlp_out: str, d_model: int
) -> str | None:
    """The MLP's down projection: a linear map from a wider space into the residual whose
    output is its parent MLP block's whole output (so its input is every neuron), or the
    ``mlp_out`` module itself when that is such a map (OPT's fc2, Bloom's dense_4h_to_h)."""
    dims = _out_dim(rel[mlp_out])
    if dims is not None and dims[1] == d_model and dims[0] > d_model:
        return mlp_out
    for path, module in rel.items():
        dims = _out_dim(module)
        if dims is None or dims[1] != d_model or dims[0] <= d_model or path.startswith(attn + "."):
            continue
        parent = path.rsplit(".", 1)[0] if "." in path else ""
        if "." in parent:  # inside a part of the MLP block (a shared expert), not all of it
            continue
        if path in outs and parent in outs and torch.equal(outs[path], outs[parent]):
            return path
    return None


def _norm_feeding(layer: nn.Module, prefix: str, trace: Trace, block: str) -> str | None:
    """The layer's own norm (a direct child named like one) whose output is the input of
    ``block`` (its attention or MLP): the norm of the ``ln1_scale`` / ``ln2_scale`` site. Of
    norms with equal outputs (a parallel block's two norms, alike at initialisation) the
    last to run before the block is taken."""
    call = trace.calls.get(f"{prefix}.{block}")
    if call is None or call.inp is None:
        return None
    found = []
    for name, module in layer.named_children():
        norm = trace.calls.get(f"{prefix}.{name}")
        if norm is None or norm.out is None or not _NORM.search(name + type(module).__name__):
            continue
        same = norm.out.shape == call.inp.shape and torch.equal(norm.out, call.inp)
        if same and norm.order < call.order:
            found.append((norm.order, name))
    return max(found)[1] if found else None


def _activation(rel: dict[str, nn.Module], prefix: str, trace: Trace, mlp_root: str) -> str | None:
    """The MLP's activation: the first parameter-free module inside the MLP block named like
    one (``act``, ``act_fn``) that ran (its input is ``mlp_pre``)."""
    found = [
        (trace.calls[f"{prefix}.{path}"].order, path)
        for path, module in rel.items()
        if path.startswith(mlp_root + ".")
        and _ACT.search(path.rsplit(".", 1)[-1])
        and not any(True for _ in module.parameters())
        and f"{prefix}.{path}" in trace.calls
    ]
    return min(found)[1] if found else None


def _is_parallel(
    trace: Trace, prefix: str, attn_root: str, mlp_root: str, resid_pre: torch.Tensor
) -> bool:
    """True when the MLP block ran before attention finished, or reads the same normed input
    as the attention block (parallel attention and MLP)."""
    attn_call = trace.calls.get(f"{prefix}.{attn_root}")
    mlp_call = trace.calls.get(f"{prefix}.{mlp_root}")
    if attn_call is None or mlp_call is None or attn_call.inp is None or mlp_call.inp is None:
        return False
    if mlp_call.order < attn_call.order:
        return True
    a = _as_tokens(attn_call.inp, resid_pre)
    m = _as_tokens(mlp_call.inp, resid_pre)
    return a is not None and m is not None and torch.equal(a, m)
