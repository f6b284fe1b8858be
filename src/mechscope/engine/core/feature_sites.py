"""Where a dictionary's features live in the pass: its hooks as sites, checked against the
model.

A dictionary names its hooks in mechscope's site vocabulary
(:mod:`mechscope.dictionaries.hooks`): the engine's sites, plus ``mlp_in`` (the MLP's
input after its norm: the output of the card's ``ln2``) and ``embed`` (the token
embedding's output), both module sites here. A dictionary whose width, hook or model does
not fit the loaded model is refused in one line naming the mismatch, before any forward
work.
"""

from __future__ import annotations

import re
from typing import Any

from mechscope.engine.core.sites import LAYER_SITES, Site
from mechscope.errors import UnsupportedInterventionError
from mechscope.models.loaded import LoadedModel

#: The sites a dictionary may read or write, beyond the engine's own layer sites.
MODULE_HOOKS = ("mlp_in", "embed")


def hook_site(lm: LoadedModel, hook: Any, what: str) -> Site:
    """The site of a dictionary's ``hook`` (``what``: which end, for the refusal)."""
    if hook is None:
        raise UnsupportedInterventionError(
            f"the dictionary names no {what} hook: load it with hook=Hook(site, layer)"
        )
    if hook.site == "embed":
        return Site.module(lm.card.embed)
    if hook.layer is None or not 0 <= hook.layer < lm.n_layers:
        raise UnsupportedInterventionError(
            f"the dictionary's {what} hook is at layer {hook.layer}, and {lm.spec} has "
            f"layers 0..{lm.n_layers - 1}"
        )
    if hook.site == "mlp_in":
        if lm.card.ln2 is None:
            raise UnsupportedInterventionError(
                f"the dictionary reads the MLP's normalised input, and the {lm.card.family} "
                "card names no norm before the MLP (ln2)"
            )
        return Site.module(f"{lm.card.layers}.{hook.layer}.{lm.card.ln2}")
    if hook.site in LAYER_SITES:
        return Site(hook.site, hook.layer)
    raise UnsupportedInterventionError(
        f"the dictionary's {what} hook {hook.original or hook.site!r} has no mechscope site"
    )


def site_width(lm: LoadedModel, site: str) -> int:
    """The width a dictionary at ``site`` reads or writes (``z``: every head's flattened)."""
    if site == "z":
        return lm.n_heads * lm.d_head
    if site in ("mlp_pre", "mlp_post"):
        cfg = lm.config
        return int(getattr(cfg, "intermediate_size", None) or getattr(cfg, "n_inner", None) or 0)
    return lm.d_model


def _name(text: str | None) -> str:
    """A model name for comparison: its last path part, lower case, without ``-pt``."""
    last = (text or "").rstrip("/").split("/")[-1].lower()
    return re.sub(r"-(pt|base|hf)$", "", last)


def check_fits(lm: LoadedModel, dictionary: Any) -> None:
    """Refuse, in one line naming the mismatch, a dictionary that does not fit ``lm``: its
    input or output width against its sites', its hooks, its model's name against the
    loaded model's (when both are known)."""
    c = dictionary.config
    hook_in = c.hook_in
    hook_site(lm, hook_in, "input")
    if dictionary.d_in != site_width(lm, hook_in.site):
        raise UnsupportedInterventionError(
            f"the dictionary's input width is {dictionary.d_in}, and {hook_in.site} of "
            f"{lm.spec} is {site_width(lm, hook_in.site)} wide"
        )
    for hook, w_dec in dictionary.writes():
        hook_site(lm, hook, "output")
        if w_dec.shape[-1] != site_width(lm, hook.site):
            raise UnsupportedInterventionError(
                f"the dictionary's output width is {w_dec.shape[-1]}, and {hook.site} of "
                f"{lm.spec} is {site_width(lm, hook.site)} wide"
            )
    want = _name(hook_in.model if hook_in else None)
    names = {_name(lm.spec), _name(getattr(lm.config, "_name_or_path", None))} - {""}
    if want and want != "unknown" and names and not any(want in n or n in want for n in names):
        raise UnsupportedInterventionError(
            f"the dictionary was trained on {hook_in.model!r}, and the loaded model is "
            f"{lm.spec!r} (load it with model=... if they are the same)"
        )
