"""Where a dictionary reads and writes, from the names each layout gives it.

Layouts name their hook in their own library's vocabulary: TransformerLens' hook names
(SAELens, circuit-tracer: ``blocks.6.hook_resid_post``, ``blocks.6.ln2.hook_normalized``,
``mlp.hook_in``), module paths of the transformers model (sparsify: ``layers.6``,
``layers.6.mlp``), submodule names (dictionary_learning: ``resid_post_layer_3``,
``mlp_2``), or a folder name (Gemma Scope: ``res``, ``mlp``, ``att``). Each is read into a
:class:`~mechscope.dictionaries.dictionary.Hook` naming a mechscope site, and written back
as a TransformerLens hook name for SAELens' layout.

The sites are the engine's (:mod:`mechscope.engine.core.sites`) plus two the engine
resolves on the model's card: ``mlp_in``, the MLP's input after its norm (the output of
the card's ``ln2``: TransformerLens' ``ln2.hook_normalized``, circuit-tracer's
``mlp.hook_in``), and ``embed``, the token embedding's output (``hook_embed``). A name with
no exact counterpart is refused in one line, never read as a near site.
"""

from __future__ import annotations

import re

from mechscope.dictionaries.dictionary import Hook
from mechscope.errors import InputError

#: TransformerLens' ``blocks.L.<suffix>`` -> the site a dictionary there reads or writes.
TL_SUFFIXES = {
    "hook_resid_pre": "resid_pre",
    "hook_resid_mid": "resid_mid",
    "hook_resid_post": "resid_post",
    "hook_attn_out": "attn_out",
    "hook_mlp_out": "mlp_out",
    "attn.hook_z": "z",
    "mlp.hook_pre": "mlp_pre",
    "mlp.hook_post": "mlp_post",
    "ln2.hook_normalized": "mlp_in",
    "mlp.hook_in": "mlp_in",
    "mlp.hook_out": "mlp_out",
}
#: A site's TransformerLens name when written (the first suffix above that names it).
TL_OF_SITE = {site: suffix for suffix, site in reversed(TL_SUFFIXES.items())}
#: Every site a dictionary may sit at.
DICTIONARY_SITES = (*dict.fromkeys(TL_SUFFIXES.values()), "embed")
_BLOCK = re.compile(r"^blocks\.(\d+)\.(.+)$")


def from_tl(name: str, layer: int | None = None, model: str | None = None) -> Hook:
    """A TransformerLens hook name (``blocks.6.hook_resid_post``; ``hook_embed``), or a
    suffix of one with its ``layer`` given apart (circuit-tracer's ``hook_resid_mid``)."""
    if name == "hook_embed":
        return Hook("embed", None, model, name)
    match = _BLOCK.match(name)
    suffix = name
    if match is not None:
        layer, suffix = int(match.group(1)), match.group(2)
    if suffix not in TL_SUFFIXES:
        known = ", ".join(f"blocks.L.{s}" for s in TL_SUFFIXES)
        raise InputError(
            f"a hook a dictionary can sit at ({known}, hook_embed), got {name!r}", field="hook"
        )
    if layer is None:
        raise InputError(f"a layer for the hook {name!r}", field="hook")
    return Hook(TL_SUFFIXES[suffix], layer, model, name)


def to_tl(hook: Hook) -> str:
    """The TransformerLens hook name of ``hook`` (what SAELens' ``hook_name`` holds)."""
    if hook.site == "embed":
        return "hook_embed"
    if hook.site not in TL_OF_SITE or hook.layer is None:
        raise InputError(f"a site with a TransformerLens name, got {hook.site!r}", field="hook")
    return f"blocks.{hook.layer}.{TL_OF_SITE[hook.site]}"


def from_module_path(path: str, model: str | None = None) -> tuple[Hook, Hook]:
    """sparsify's hookpoint, a module path below the base model (``layers.6``,
    ``layers.6.mlp``, ``embed_tokens``, ``h.3``, ``gpt_neox.layers.2.mlp``): the (input,
    output) hooks of a dictionary on that module's output, or on its input and output for a
    transcoder (the caller picks). A layer's output is its ``resid_post``; an MLP's input
    and output are ``mlp_in`` and ``mlp_out``; an attention block's output is ``attn_out``."""
    if path in ("embed_tokens", "embed_in", "wte"):
        hook = Hook("embed", None, model, path)
        return hook, hook
    match = re.search(r"(?:^|\.)(?:layers|h|blocks)\.(\d+)(?:\.(\w+))?$", path)
    if match is None:
        raise InputError(f"a layer's module path (layers.6, layers.6.mlp), got {path!r}")
    layer, part = int(match.group(1)), match.group(2)
    if part is None:
        hook = Hook("resid_post", layer, model, path)
        return hook, hook
    if part == "mlp":
        return Hook("mlp_in", layer, model, path), Hook("mlp_out", layer, model, path)
    if part in ("self_attn", "attn", "attention"):
        hook = Hook("attn_out", layer, model, path)
        return hook, hook
    raise InputError(
        f"a layer, its mlp or its attention (layers.6, layers.6.mlp, layers.6.self_attn), "
        f"got {path!r}",
        field="hookpoint",
    )


def from_submodule(name: str, layer: int | None, model: str | None = None) -> Hook:
    """dictionary_learning's submodule name (``resid_post_layer_3``, ``resid_3``,
    ``mlp_2``, ``attn_1``, ``embed``)."""
    if name == "embed":
        return Hook("embed", None, model, name)
    for pattern, site in (
        (r"^resid_post_layer_(\d+)$", "resid_post"),
        (r"^resid_(\d+)$", "resid_post"),
        (r"^mlp_out_layer_(\d+)$", "mlp_out"),
        (r"^mlp_(\d+)$", "mlp_out"),
        (r"^attn_out_layer_(\d+)$", "attn_out"),
        (r"^attn_(\d+)$", "attn_out"),
    ):
        match = re.match(pattern, name)
        if match is not None:
            return Hook(site, int(match.group(1)), model, name)
    if name.startswith(("resid", "mlp", "attn")) and layer is not None:
        site = {"resid": "resid_post", "mlp": "mlp_out", "attn": "attn_out"}[
            re.match(r"^(resid|mlp|attn)", name).group(1)  # type: ignore[union-attr]
        ]
        return Hook(site, layer, model, name)
    raise InputError(
        f"a submodule name (resid_post_layer_3, mlp_2, attn_1, embed), got {name!r}",
        field="submodule_name",
    )
