"""TransformerLens' hook names read as mechscope's sites.

A TransformerLens user types ``cache["blocks.3.attn.hook_pattern"]`` or
``names_filter="blocks.10.hook_resid_pre"``; each hook name with an exact counterpart maps
to that site (``pattern`` of layer 3, ``resid_pre`` of layer 10). A hook with no exact
counterpart is refused in one line naming what to use instead, never taken for a module
path. A name is TransformerLens' when one of its dotted parts starts with ``hook_`` (no
module path of a transformers model has such a part).

Where the two differ, the name is refused rather than mapped to a near value: TL's
``hook_q`` / ``hook_k`` are the queries and keys *before* the rotary embedding (and any
q/k norm), mechscope's ``q`` / ``k`` after them (TL's ``hook_rot_q`` / ``hook_rot_k``), so
``hook_q`` maps to ``q`` only on a model that neither rotates nor normalises them (GPT-2).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from mechscope.engine.core.sites import Site
from mechscope.errors import SiteError
from mechscope.models.loaded import LoadedModel

#: ``blocks.L.<suffix>`` -> site name, wherever the model has the site.
LAYER_HOOKS = {
    "hook_resid_pre": "resid_pre",
    "hook_resid_mid": "resid_mid",
    "hook_resid_post": "resid_post",
    "hook_attn_out": "attn_out",
    "hook_mlp_out": "mlp_out",
    "attn.hook_z": "z",
    "attn.hook_v": "v",
    "attn.hook_rot_q": "q",
    "attn.hook_rot_k": "k",
    "attn.hook_attn_scores": "attn_scores",
    "attn.hook_pattern": "pattern",
    "mlp.hook_pre": "mlp_pre",
    "mlp.hook_post": "mlp_post",
    "ln1.hook_scale": "ln1_scale",
    "ln2.hook_scale": "ln2_scale",
}
#: Queries and keys before the rotary embedding: ``q`` / ``k`` only where nothing rotates
#: or normalises them.
UNROTATED_HOOKS = {"attn.hook_q": "q", "attn.hook_k": "k"}
#: Hooks with no exact site, and what to use instead (``{layer}`` filled in).
NO_SITE = {
    "attn.hook_result": "cache.stack_head_results(layer={layer}) (each head's z @ W_O as it "
    "reaches the residual stream)",
    "hook_attn_in": "resid_pre (the attention reads it through ln1: ln1_scale, or "
    "Site.module of the norm)",
    "hook_q_input": "resid_pre (every head reads the same residual stream)",
    "hook_k_input": "resid_pre (every head reads the same residual stream)",
    "hook_v_input": "resid_pre (every head reads the same residual stream)",
    "ln1.hook_normalized": "Site.module({ln1!r}) (the norm's output, its gain applied) or "
    "ln1_scale",
    "ln2.hook_normalized": "Site.module({ln2!r}) (the norm's output, its gain applied) or "
    "ln2_scale",
    "mlp.hook_pre_linear": "Site.module of the MLP's up projection (the MLP is {mlp!r})",
}
BLOCK = re.compile(r"^blocks\.(\d+)\.(.+)$")
#: What the error for an unknown hook lists.
KNOWN = (
    "blocks.L.hook_resid_pre/mid/post, hook_attn_out, hook_mlp_out, attn.hook_z/v/rot_q/rot_k/"
    "q/k/attn_scores/pattern, mlp.hook_pre/post, ln1.hook_scale, ln2.hook_scale, "
    "ln_final.hook_scale, hook_embed"
)


def is_tl_name(name: str) -> bool:
    """Whether ``name`` is a TransformerLens hook name (a part starting with ``hook_``)."""
    return any(part.startswith("hook_") for part in name.split("."))


def rotates_qk(lm: LoadedModel) -> bool:
    """Whether the model rotates (rotary embeddings) or normalises its queries and keys
    before attention, so that TransformerLens' ``hook_q`` / ``hook_k`` are not ``q`` / ``k``."""
    cfg = lm.config
    rope = ("rope_theta", "rope_parameters", "rotary_dim", "rotary_pct", "partial_rotary_factor")
    if any(getattr(cfg, a, None) is not None for a in rope):
        return True
    if any("rotary" in type(m).__name__.lower() for m in lm.model.modules()):
        return True
    attn = lm.layer_part("attn", 0)
    return any(
        ("q_" in n or "k_" in n or "query_" in n) and "norm" in n for n, _ in attn.named_children()
    )


def _layer_path(lm: LoadedModel, layer: int, part: str | None) -> str:
    return f"{lm.card.layers}.{layer}" + (f".{part}" if part else "")


def tl_site(lm: LoadedModel, name: str) -> Site | None:
    """The site TransformerLens' hook ``name`` reads; None when ``name`` is not a hook name
    (a module path, a site name); :class:`~mechscope.errors.SiteError` in one line where
    the hook has no exact counterpart (naming what to use) or is unknown."""
    if not is_tl_name(name):
        return None
    if name == "hook_embed":
        return Site.module(lm.card.embed)
    if name == "ln_final.hook_scale":
        return Site("ln_final_scale")
    if name == "hook_pos_embed":
        raise _no_site(name, "resid_pre at layer 0 (token and position embeddings together)")
    if name == "ln_final.hook_normalized":
        raise _no_site(name, f"Site.module({lm.card.final_norm!r}) or ln_final_scale")
    match = BLOCK.match(name)
    if match is None:
        raise SiteError(f"unknown TransformerLens hook {name!r}: mechscope reads {KNOWN}")
    layer, suffix = int(match.group(1)), match.group(2)
    lm.check_layer(layer)
    if suffix in LAYER_HOOKS:
        return Site(LAYER_HOOKS[suffix], layer)
    if suffix in UNROTATED_HOOKS:
        site = UNROTATED_HOOKS[suffix]
        if not rotates_qk(lm):
            return Site(site, layer)
        raise _no_site(
            name,
            f"{site!r} (TransformerLens' {suffix.replace('hook_', 'hook_rot_')}: after the rotary "
            f"embedding or q/k norm of {lm.spec}, which mechscope reads; the projection's "
            "output before it is a Site.module of the projection)",
        )
    if suffix == "hook_mlp_in":  # TransformerLens' mlp_in is resid_mid (resid_pre if parallel)
        return Site("resid_pre" if lm.parallel else "resid_mid", layer)
    if suffix in NO_SITE:
        card = lm.card
        use = NO_SITE[suffix].format(
            layer=layer,
            ln1=_layer_path(lm, layer, card.ln1),
            ln2=_layer_path(lm, layer, card.ln2),
            mlp=_layer_path(lm, layer, card.mlp_out),
        )
        raise _no_site(name, use)
    raise SiteError(f"unknown TransformerLens hook {name!r}: mechscope reads {KNOWN}")


def _no_site(name: str, use: str) -> SiteError:
    return SiteError(f"TransformerLens' {name} has no exact mechscope site: use {use}")


def tl_names(lm: LoadedModel, layers: range) -> Iterator[tuple[str, Site]]:
    """Every TransformerLens hook name with an exact site on ``lm`` for ``layers`` (and the
    layerless ones), with its site: what a ``names_filter`` predicate is asked about."""
    yield "hook_embed", Site.module(lm.card.embed)
    hooks = dict(LAYER_HOOKS)
    if not rotates_qk(lm):
        hooks.update(UNROTATED_HOOKS)
    for layer in layers:
        for suffix, site in hooks.items():
            yield f"blocks.{layer}.{suffix}", Site(site, layer)
    yield "ln_final.hook_scale", Site("ln_final_scale")
