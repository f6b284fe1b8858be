"""A head's queries and keys in the frozen replacement: what makes one attention score
bilinear in the nodes.

A score is ``s = α · q_i · k_j`` before the softmax (and before any soft-cap), with ``q``
and ``k`` as the engine's ``q`` / ``k`` sites see them: after the projection, any norm
inside the attention (Qwen 3's and Gemma 3's q/k norms, DeepSeek's latent norms) and the
rotary embedding, and ``α`` the scaling the attention module passes to the attention
function (the engine's ``d_qk^-½`` where it passes none). The norm before attention has
its scale frozen by the graph's pass (:mod:`mechscope.graphs.freeze`); the norms inside
the attention get theirs frozen here, the same way, in that layer and every layer
below it, so that ``q_i`` and ``k_j`` are affine in what the nodes write and their
gradients are the linear maps.

The card names the attention module, not what is inside it: a norm there is any module
of the card's ``attn`` whose class calls itself a norm, proven an RMS or layer norm by
the engine's factoring (:func:`~mechscope.engine.core.norms.factor_norm`) and refused in
one line where it is not (a gain per head, another formula). Whatever else nonlinear
might sit between the residual and the score is caught where the score is read: it must
equal ``α · q_i · k_j`` (after the soft-cap) as the model computed it
(:func:`mechscope.graphs.qk.qk_attribution`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from mechscope.engine import Edit, EditContext, Site
from mechscope.engine.core.norms import NormFactors, factor_norm
from mechscope.errors import UnsupportedInterventionError
from mechscope.graphs.freeze import Frozen, Mode, PassState
from mechscope.models.loaded import LoadedModel

WHAT = "QK attribution"


def attention_norms(lm: LoadedModel, layer: int) -> list[tuple[str, NormFactors]]:
    """The norms inside layer ``layer``'s attention module, each with its dotted path in
    the model and its proven factors; a one-line refusal where one does not factor."""
    attn = lm.layer_part("attn", layer)
    base = f"{lm.card.layers}.{layer}.{lm.card.attn}"
    store: dict[int, NormFactors | str] = lm.extra.setdefault("norm_factors", {})
    found = []
    for name, module in attn.named_modules():
        if not name or "norm" not in type(module).__name__.lower():
            continue
        weight = getattr(module, "weight", None)
        if isinstance(weight, torch.Tensor) and weight.dim() != 1:
            why = f"a gain of shape {list(weight.shape)}, not one per channel"
        else:
            width = int(weight.shape[0]) if isinstance(weight, torch.Tensor) else lm.d_head
            if id(module) not in store:
                store[id(module)] = factor_norm(module, width)
            why = store[id(module)]
        if isinstance(why, str):
            raise UnsupportedInterventionError(
                f"{WHAT} of {lm.spec}: layer {layer}'s {name} cannot be frozen ({why})"
            )
        found.append((f"{base}.{name}", why))
    return found


def score_scaling(lm: LoadedModel, layer: int, d_qk: int) -> tuple[float, float | None]:
    """``(α, soft-cap)`` of layer ``layer``'s scores: the scaling its attention module
    passes (``d_qk^-½`` where it has none, as the engine's attention takes it) and the
    soft-cap of Gemma 2's scores (None where there is none)."""
    attn = lm.layer_part("attn", layer)
    scaling = getattr(attn, "scaling", None)
    cap = getattr(attn, "attn_logit_softcapping", None)
    alpha = float(scaling) if isinstance(scaling, int | float) else d_qk**-0.5
    return alpha, float(cap) if isinstance(cap, int | float) else None


def qk_edits(
    lm: LoadedModel, layers: Sequence[int], mode: Mode, frozen: Frozen, state: PassState
) -> list[Edit]:
    """The queries and keys of ``layers`` kept in ``state.q`` / ``state.k`` (in the pass's
    graph), and every norm inside the attention of each layer up to the last of them held
    (``detach``: its scale detached and recorded in ``frozen``; ``replay``: the recorded
    scale): the values of DeepSeek's latent attention pass through one, so an earlier
    layer's output is linear in its input only with it held."""
    if mode == "replace":
        raise ValueError("queries and keys are held in detach and replay passes only")
    edits = []
    for layer in range(max(layers, default=-1) + 1):
        for path, factors in attention_norms(lm, layer):
            edits.append(_held_norm(path, factors, (path, layer), mode, frozen))
        if layer in layers:
            edits.append(Edit(Site("q", layer), _keep(state.q, layer)))
            edits.append(Edit(Site("k", layer), _keep(state.k, layer)))
    return edits


def _held_norm(
    path: str, factors: NormFactors, key: tuple[str, int], mode: Mode, frozen: Frozen
) -> Edit:
    """The norm at ``path`` rebuilt from its input with its scale held (``[..., 1]``)."""
    read = Site.module(path, "input")

    def fn(out: torch.Tensor, ctx: EditContext) -> torch.Tensor:
        x = ctx[read]
        scale = factors.scale(x)
        if mode == "detach":
            frozen.values[key] = scale.detach()[:1]
            scale = scale.detach()
        else:
            scale = frozen.values[key].to(scale.device).expand_as(scale)
        return factors.apply(x, scale).to(out.dtype)

    return Edit(Site.module(path, "output"), fn, [read])


def _keep(store: dict[int, torch.Tensor], layer: int):
    def fn(act: torch.Tensor, ctx: EditContext) -> None:
        store[layer] = act

    return fn
