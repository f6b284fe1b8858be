"""Module hooks for the sites that live at module boundaries.

Each site's interventions become one ``transform(act) -> act`` (reads record, patches and
ablations replace: :mod:`mechscope.engine.interventions.transform`) applied by a torch hook
on the module the card names. Sites keep TransformerLens' shapes whatever the module hands
over: outputs flattened to
``[batch*seq, d]`` (OPT's ``fc2``) are viewed as ``[batch, seq, d]``, and where the model
scales a sublayer's output before the residual add (Granite's ``residual_multiplier``),
``attn_out`` / ``mlp_out`` are the scaled contributions and a patch writes ``value / scale``
back.

Reads under ``grad=True`` must stay upstream of the logits; where a site is derived (a
scaled contribution, ``resid_mid``) the model's tensor is rebuilt from the read with the
exact value kept (:func:`through`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from mechscope.models.loaded import LoadedModel

Transform = Callable[[torch.Tensor], torch.Tensor]


def through(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``x``'s exact value with ``y``'s gradient (``y`` equals ``x`` up to rounding): a read
    from which ``y`` was computed stays in the graph without perturbing the pass."""
    return x.detach() + (y - y.detach())


def as_bsd(x: torch.Tensor, seq: int) -> torch.Tensor:
    """``[batch, seq, d]`` view of a per-token tensor (``[batch*seq, d]`` when flattened)."""
    return x.view(x.shape[0] // seq, seq, x.shape[-1]) if x.dim() == 2 else x


def install(
    lm: LoadedModel, name: str, layer: int, transform: Transform, seq: int
) -> list[RemovableHandle]:
    """Hooks that apply ``transform`` to site ``name`` of ``layer``."""
    keep = bool(getattr(transform, "reads_any", False))
    if name == "resid_pre":
        hook = pre_hook(transform, keep)
        return [lm.layer_module(layer).register_forward_pre_hook(hook, with_kwargs=True)]
    if name == "resid_post":
        return [lm.layer_module(layer).register_forward_hook(post_hook(transform, keep))]
    if name == "z":
        n_heads, d_head = lm.n_heads, lm.d_head

        def z_transform(x: torch.Tensor) -> torch.Tensor:  # [b, s, heads * d_head]
            z = as_bsd(x, seq).unflatten(-1, (n_heads, d_head))  # [b, s, heads, d_head]
            return transform(z).reshape(x.shape)

        module = lm.layer_part("o_proj", layer)
        return [module.register_forward_pre_hook(pre_hook(z_transform, keep), with_kwargs=True)]
    if name in ("mlp_post", "mlp_pre"):

        def post_transform(x: torch.Tensor) -> torch.Tensor:  # [b, s, d_mlp] or [b*s, d_mlp]
            return transform(as_bsd(x, seq)).reshape(x.shape)

        module = lm.layer_part("mlp_down" if name == "mlp_post" else "mlp_act", layer)
        hook = pre_hook(post_transform, keep)
        return [module.register_forward_pre_hook(hook, with_kwargs=True)]
    if name in ("attn_out", "mlp_out"):
        fn = _contribution(transform, lm.residual_scale, seq)
        return [lm.layer_part(name, layer).register_forward_hook(post_hook(fn, keep))]
    if name == "resid_mid":
        return _resid_mid(lm, layer, transform, seq)
    raise ValueError(f"no module hook for site {name!r}")


def _contribution(transform: Transform, scale: float | None, seq: int) -> Transform:
    """attn_out / mlp_out: what the sublayer adds to the residual, ``[batch, seq, d_model]``."""

    def apply(x: torch.Tensor) -> torch.Tensor:  # the module's output
        site = as_bsd(x, seq)
        scaled = site if scale is None else site * scale
        new = transform(scaled)
        if new is scaled:
            if scale is None:
                return new.reshape(x.shape)  # x itself, or a view of the read ([b*s, d])
            if not torch.is_grad_enabled():
                return x
            return through(x, (new / scale).reshape(x.shape))
        return (new if scale is None else new / scale).reshape(x.shape)

    return apply


def _resid_mid(
    lm: LoadedModel, layer: int, transform: Transform, seq: int
) -> list[RemovableHandle]:
    """resid_mid = resid_pre + attn_out: the layer's input is kept by a pre-hook (installed
    after any resid_pre hook, so it sees the edited input), and the attention contribution is
    rewritten so that the model's own residual add yields the patched value."""
    stash: dict[str, torch.Tensor] = {}
    scale = lm.residual_scale

    def keep(x: torch.Tensor) -> torch.Tensor:
        stash["pre"] = x
        return x

    def apply(x: torch.Tensor) -> torch.Tensor:  # the attn_out module's output
        pre = stash.pop("pre")  # [b, s, d]
        contrib = as_bsd(x, seq)
        if scale is not None:
            contrib = contrib * scale
        mid = pre + contrib  # [b, s, d]: the sum the model forms
        new = transform(mid)
        if new is mid and not torch.is_grad_enabled():
            return x
        back = new - pre
        if scale is not None:
            back = back / scale
        back = back.reshape(x.shape)
        return through(x, back) if new is mid else back

    layer_module = lm.layer_module(layer)
    return [
        layer_module.register_forward_pre_hook(pre_hook(keep), with_kwargs=True),
        lm.layer_part("attn_out", layer).register_forward_hook(post_hook(apply)),
    ]


def guard(transform: Transform, keep: bool) -> Transform:
    """With ``keep``, a value handed back to the model that shares memory with what went in
    (and so with a read) is a copy: some families edit a module's output in place after it
    returns (Falcon's ``mlp_output += attention_output``), which would silently rewrite the
    read. The read keeps the original, which stays upstream of the logits for gradients."""
    if not keep:
        return transform

    def guarded(x: torch.Tensor) -> torch.Tensor:
        new = transform(x)
        if new.untyped_storage().data_ptr() == x.untyped_storage().data_ptr():
            return new.clone()
        return new

    return guarded


def pre_hook(transform: Transform, keep: bool = False) -> Any:
    transform = guard(transform, keep)

    def hook(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        if args:
            return (transform(args[0]), *args[1:]), kwargs
        kwargs = dict(kwargs)
        name = next(k for k in ("hidden_states", "input", "x") if k in kwargs)
        kwargs[name] = transform(kwargs[name])
        return args, kwargs

    return hook


def post_hook(transform: Transform, keep: bool = False) -> Any:
    transform = guard(transform, keep)

    def hook(module: nn.Module, args: tuple, output: Any) -> Any:
        if isinstance(output, tuple):
            return (transform(output[0]), *output[1:])
        return transform(output)

    return hook
