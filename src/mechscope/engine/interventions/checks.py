"""What a pass is checked for before any forward work: ranges and refusals.

A site or intervention a model cannot support exactly is refused in one line
(:class:`~mechscope.errors.UnsupportedInterventionError`) rather than returning something
silently wrong: ``LoadedModel.refused`` (from the card and the conformance probe), plus
what the engine can tell itself — a parallel block has no ``resid_mid``, a card without
``mlp_down`` has no ``mlp_post``, one without ``experts`` no router, and a model whose
class ignores transformers' attention interface has no attention sites.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from mechscope.engine.core.module_sites import resolve
from mechscope.engine.core.moe import n_experts
from mechscope.engine.core.sites import ATTENTION_SITES, KV_SITES
from mechscope.engine.core.spans import absolute_position_scaling
from mechscope.engine.interventions.values import (
    Gate,
    Intervention,
    Read,
    ReduceAttention,
    SuppressAttention,
)
from mechscope.errors import SiteError, UnsupportedInterventionError
from mechscope.models.loaded import LoadedModel

ATTENTION_WORK = (*ATTENTION_SITES, "SuppressAttention", "ReduceAttention")
#: Sites that live on a module only some layers have (a mixture-of-experts layer has no
#: single MLP down projection, a dense one no experts).
LAYER_MODULE_SITES = ("router", "expert_out", "mlp_post")


def engine_refusals(lm: LoadedModel, attention_reached: bool) -> dict[str, str]:
    """Refusals the engine derives from the card and the model (name -> one-line reason)."""
    card, out = lm.card, {}
    if lm.parallel:
        out["resid_mid"] = (
            f"{card.family} runs attention and MLP in parallel on the same input, so there is "
            "no residual between them"
        )
    if card.mlp_down is None:
        out["mlp_post"] = f"the {card.family} card names no MLP down projection (mlp_down)"
    for name, role, what in (
        ("mlp_pre", "mlp_act", "MLP activation module (mlp_act)"),
        ("ln1_scale", "ln1", "norm before attention (ln1)"),
        ("ln2_scale", "ln2", "norm before the MLP (ln2)"),
    ):
        if getattr(card, role) is None:
            out[name] = f"the {card.family} card names no {what}"
    if card.mlp_act is not None and lm.n_layers > 1 and _shared(lm, "mlp_act"):
        out["mlp_pre"] = f"the {card.family} layers share one activation module"
    if card.experts is None:
        for name in ("router", "expert_out"):
            out[name] = f"the {card.family} card names no experts module (not a mixture of experts)"
    if not attention_reached:
        impl = getattr(lm.model.config, "_attn_implementation", None)
        for name in ATTENTION_WORK:
            out[name] = (
                f"{type(lm.model).__name__} does not call transformers' attention interface "
                f"(it runs {impl!r} attention in its own code)"
            )
    return out


def _shared(lm: LoadedModel, role: str) -> bool:
    """Whether the first two layers hold the same module object at ``role`` (a hook on it
    would fire once per layer)."""
    try:
        return lm.layer_part(role, 0) is lm.layer_part(role, 1)
    except AttributeError:
        return False


def refusal_keys(iv: Intervention) -> list[str]:
    """The names ``LoadedModel.refused`` may list that ``iv`` touches."""
    if isinstance(iv, SuppressAttention | ReduceAttention):
        return [type(iv).__name__]
    if isinstance(iv, Gate):
        return ["z"]
    site = getattr(iv, "site", None)
    return [] if site is None else [site.name]


def check_pass(
    lm: LoadedModel,
    refused: dict[str, str],
    interventions: Sequence[Intervention],
    seq: int,
    *,
    keep_cache: bool,
) -> None:
    """Raise before any forward work if ``interventions`` cannot run exactly on ``lm``."""
    for iv in interventions:
        for name in refusal_keys(iv):
            if name in refused:
                raise UnsupportedInterventionError(
                    f"{name} is not supported for {lm.spec}: {refused[name]}"
                )
        site = getattr(iv, "site", None)
        if site is None:
            continue
        if site.name == "module":
            resolve(lm, site.path)  # type: ignore[arg-type]
        if site.layer is not None:
            lm.check_layer(site.layer)
        if site.head is not None:
            n = lm.n_kv_heads if site.name in KV_SITES else lm.n_heads
            if not 0 <= site.head < n:
                raise SiteError(f"head {site.head} out of range: valid heads are 0..{n - 1}")
        for p in site.positions or ():
            if not -seq <= p < seq:
                raise SiteError(f"position {p} out of range: valid positions are 0..{seq - 1}")
        if site.name in LAYER_MODULE_SITES:
            _check_module(lm, site.name, site.layer, site.expert)
        if keep_cache and site.name in KV_SITES and not isinstance(iv, Read):
            raise UnsupportedInterventionError(
                f"{site.name} cannot be edited in a pass that keeps its cache (cache=True): the "
                "cache would hold the unedited keys and values"
            )


def layer_refusal(lm: LoadedModel, name: str, layer: int) -> str | None:
    """Why site ``name`` is not supported at ``layer`` (one line), None where it is: the
    module it lives on is missing from that layer (models mixing dense and MoE layers)."""
    if name not in LAYER_MODULE_SITES:
        return None
    role = "mlp_down" if name == "mlp_post" else "experts"
    try:
        lm.layer_part(role, layer)
    except AttributeError:
        kind = "mixture-of-experts" if role == "mlp_down" else "dense"
        return (
            f"{name} is not supported at layer {layer} of {lm.spec}: it has no {role} module "
            f"where the {lm.card.family} card says (a {kind} layer)"
        )
    return None


def _check_module(lm: LoadedModel, name: str, layer: int | None, expert: int | None) -> None:
    why = layer_refusal(lm, name, layer)  # type: ignore[arg-type]
    if why is not None:
        raise UnsupportedInterventionError(why)
    if expert is not None:
        n = n_experts(lm.layer_part("experts", layer))  # type: ignore[arg-type]
        if not 0 <= expert < n:
            raise SiteError(f"expert {expert} out of range: valid experts are 0..{n - 1}")


def check_padding(lm: LoadedModel, attention_mask: torch.Tensor | None) -> None:
    """Refuse a left-padded pass where the model scales attention by absolute token indices
    (:func:`~mechscope.engine.core.spans.absolute_position_scaling`) and the batch is long
    enough for padding to change the scale: a padded row would not compute what it
    computes alone (Llama 4: off by 0.01 in the logits)."""
    if attention_mask is None or attention_mask.dim() != 2:
        return
    start = absolute_position_scaling(lm.config)
    width = int(attention_mask.shape[1])
    if start is None or width < start:
        return
    mask = attention_mask.bool()
    shifted = bool((mask[:, 1:] & ~mask[:, :-1]).any())  # a token after a masked column
    if shifted:
        raise UnsupportedInterventionError(
            f"left padding is not supported for {lm.spec} at {width} tokens: its attention "
            f"temperature is computed from absolute token indices (from index {start - 1} "
            "on), which padding shifts; run rows of different lengths one at a time"
        )
