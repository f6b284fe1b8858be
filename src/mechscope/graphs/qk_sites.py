"""A head's queries and keys in the frozen replacement: what makes one attention score
bilinear in the nodes.

A score is ``s = α · q_i · k_j`` before the softmax (and before any soft-cap), with ``q``
and ``k`` as the engine's ``q`` / ``k`` sites see them: after the projection, any norm
inside the attention (Qwen 3's and Gemma 3's q/k norms, DeepSeek's latent norms) and the
rotary embedding, and ``α`` the scaling the attention module passes to the attention
function (the engine's ``d_qk^-½`` where it passes none). The norm before attention has
its scale frozen by the graph's pass (:mod:`mechscope.graphs.freeze`), and so have the
norms inside the attention (:mod:`mechscope.graphs.attn_norms`) in every layer, so that
``q_i`` and ``k_j`` are affine in what the nodes write and their gradients are the linear
maps. Whatever else nonlinear
might sit between the residual and the score is caught where the score is read: it must
equal ``α · q_i · k_j`` (after the soft-cap) as the model computed it
(:func:`mechscope.graphs.qk.qk_attribution`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from mechscope.engine import Edit, EditContext, Site
from mechscope.graphs.freeze import Mode, PassState
from mechscope.models.loaded import LoadedModel

WHAT = "QK attribution"


def score_scaling(lm: LoadedModel, layer: int, d_qk: int) -> tuple[float, float | None]:
    """``(α, soft-cap)`` of layer ``layer``'s scores: the scaling its attention module
    passes (``d_qk^-½`` where it has none, as the engine's attention takes it) and the
    soft-cap of Gemma 2's scores (None where there is none)."""
    attn = lm.layer_part("attn", layer)
    scaling = getattr(attn, "scaling", None)
    cap = getattr(attn, "attn_logit_softcapping", None)
    alpha = float(scaling) if isinstance(scaling, int | float) else d_qk**-0.5
    return alpha, float(cap) if isinstance(cap, int | float) else None


def qk_edits(lm: LoadedModel, layers: Sequence[int], mode: Mode, state: PassState) -> list[Edit]:
    """The queries and keys of ``layers`` kept in ``state.q`` / ``state.k`` (in the pass's
    graph). The norms inside the attention are held by the graph's own pass
    (:func:`~mechscope.graphs.freeze.freeze_edits`) in every layer."""
    if mode == "replace":
        raise ValueError("queries and keys are held in detach and replay passes only")
    edits = []
    for layer in layers:
        edits.append(Edit(Site("q", layer), _keep(state.q, layer)))
        edits.append(Edit(Site("k", layer), _keep(state.k, layer)))
    return edits


def _keep(store: dict[int, torch.Tensor], layer: int):
    def fn(act: torch.Tensor, ctx: EditContext) -> None:
        store[layer] = act

    return fn
