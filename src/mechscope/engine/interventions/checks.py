"""What a pass is checked for before any forward work: ranges and refusals.

A site or intervention a model cannot support exactly is refused in one line
(:class:`~mechscope.errors.UnsupportedInterventionError`) rather than returning something
silently wrong: ``LoadedModel.refused`` (from the card and the conformance probe), plus
what the engine can tell itself — a parallel block has no ``resid_mid``, a card without
``mlp_down`` has no ``mlp_post``, one without ``experts`` no router, and a model whose
class ignores transformers' attention interface has no attention sites.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import torch
from torch import nn

from mechscope.engine.core.feature_sites import check_fits, hook_site
from mechscope.engine.core.module_sites import resolve
from mechscope.engine.core.moe import n_experts
from mechscope.engine.core.sites import ATTENTION_SITES, KV_SITES, Site
from mechscope.engine.core.spans import absolute_position_scaling
from mechscope.engine.interventions.values import (
    Ablate,
    Gate,
    Intervention,
    Read,
    ReduceAttention,
    Steer,
    SuppressAttention,
)
from mechscope.errors import InputError, SiteError, UnsupportedInterventionError
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
    return [site.name for site in _sites(iv)]


def _sites(iv: Intervention) -> list[Site]:
    """The sites ``iv`` touches: its own, and those an ``Edit`` reads."""
    site = getattr(iv, "site", None)
    return ([] if site is None else [site]) + list(getattr(iv, "reads", ()))


def _feature_hooks(lm: LoadedModel, site: Site) -> list[Site]:
    """The sites a feature site's dictionary reads and writes (checked to fit ``lm``)."""
    d = site.dictionary
    check_fits(lm, d)
    ends = [hook_site(lm, d.config.hook_in, "input")]
    return ends + [hook_site(lm, hook, "output") for hook, _ in d.writes()]


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
        names = refusal_keys(iv)
        for site in _sites(iv):
            if site.name == "feature":
                names += [s.name for s in _feature_hooks(lm, site)]
        for name in names:
            if name in refused:
                raise UnsupportedInterventionError(
                    f"{name} is not supported for {lm.spec}: {refused[name]}"
                )
        for site in _sites(iv):
            _check_site(lm, iv, site, seq, keep_cache)
        if isinstance(iv, Steer):
            check_steer(lm, iv)
        if isinstance(iv, Ablate):
            check_reference(lm, iv, seq)


def _check_site(lm: LoadedModel, iv: Intervention, site: Site, seq: int, keep_cache: bool) -> None:
    """Ranges of one site of ``iv`` (layer, head, positions, expert, module path)."""
    if site.name == "module":
        resolve(lm, site.path)  # type: ignore[arg-type]
    if site.name == "feature":
        for end in _feature_hooks(lm, site):
            if end.name == "module":
                resolve(lm, end.path)  # type: ignore[arg-type]
        n = site.dictionary.d_sae
        units = site.index if isinstance(site.index, tuple) else (site.index,)
        for i in (u for u in units if u is not None):
            if not 0 <= i < n:
                raise SiteError(f"feature {i} out of range: valid features are 0..{n - 1}")
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
    if keep_cache and site.name in KV_SITES and site is iv.site and not isinstance(iv, Read):
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


def site_width(lm: LoadedModel, site: Site) -> tuple[int, ...] | None:
    """The trailing shape of ``site``'s slice per position (one head's where the site names
    one), where the model's sizes say it for sure (None: q/k/v, whose head sizes
    multi-head latent attention changes, scores, norm scales, module sites)."""
    if site.name in ("resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out"):
        return (lm.d_model,)
    if site.name == "z":
        return (lm.d_head,) if site.head is not None else (lm.n_heads, lm.d_head)
    if site.name == "mlp_post" and site.layer is not None:
        down = lm.layer_part("mlp_down", site.layer)
        return (down.in_features,) if isinstance(down, nn.Linear) else None
    return None


def check_steer(lm: LoadedModel, steer: Steer) -> None:
    """A steering vector of the site's width, and a steered value the model's norms can
    square: past ``sqrt(float32 max / width)`` the sum of squares overflows, the norm's
    scale becomes infinite and its output exactly 0 (alpha 1e30 read as no effect at all)."""
    vec = torch.as_tensor(steer.vector)
    want = site_width(lm, steer.site)
    if want is not None and tuple(vec.shape) != want:
        raise InputError(
            f"a steering vector of shape {list(want)} for {steer.site}, got {list(vec.shape)}",
            field="vector",
        )
    alpha = torch.as_tensor(steer.alpha, dtype=torch.float64).abs().max()
    if steer.mode == "project":
        return  # removes at most alpha times the component already there
    width = vec.numel()
    largest = float(alpha) * float(vec.double().abs().max())
    bound = min(
        torch.finfo(lm.dtype).max, math.sqrt(torch.finfo(torch.float32).max / max(width, 1))
    )
    if largest >= bound:
        raise InputError(
            f"|alpha| x the vector's largest entry below {bound:.3g} (past it the model's "
            f"norms overflow and read the steered value as 0), got {largest:.3g} at alpha "
            f"{float(alpha):g}",
            field="alpha",
        )


def check_reference(lm: LoadedModel, ablate: Ablate, seq: int) -> None:
    """A mean or resampled reference of the site's width and, unless averaged over its
    positions, of the pass's length (the replacement is laid position by position)."""
    ref, site = ablate.reference, ablate.site
    if ablate.mode == "zero" or not isinstance(ref, torch.Tensor):
        return
    want = site_width(lm, replace(site, head=None))
    if want is not None and tuple(ref.shape[2:]) != want:
        raise InputError(
            f"a reference [rows, seq, {', '.join(map(str, want))}] of {site.name}, got "
            f"{list(ref.shape)}",
            field="reference",
        )
    positions = int(ref.shape[site.pos_dim])
    if (ablate.mode == "resample" or not ablate.over_positions) and positions != seq:
        raise InputError(
            f"a reference of the pass's {seq} positions (or over_positions=True), got {positions}",
            field="reference",
        )
