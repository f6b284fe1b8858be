"""The feature axis of a patching sweep: which dictionary, which features, which site.

A ``site="feature"`` sweep patches one feature of one dictionary at a time (the grid's
head axis holds feature indices; its one layer is the dictionary's). The features are
named, or the ``k`` most active on the clean prompts: each feature's largest activation
over the patched positions of a pair's clean prompt, averaged over pairs, ties to the
lower index. The choice is made once over all pairs, before any patch, so every pair and
every group of a run (and a resumed run) sweeps the same features.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

import torch

from mechscope.engine import Engine, Read, Site
from mechscope.errors import InputError, UnsupportedInterventionError
from mechscope.patching.config import DEFAULT_TOP_FEATURES, PatchSpec
from mechscope.patching.prepare import PreparedPair, units


@cache
def _load(path: str) -> Any:
    from mechscope.dictionaries import load_dictionary

    return load_dictionary(path)


def one_layer(loaded: Any, layers: Sequence[int] | None, field: str = "layers") -> Any:
    """The single-layer dictionary of ``loaded``: itself, or the member of a set (the
    source layer of a cross-layer transcoder) that ``layers`` names (one entry)."""
    from mechscope.dictionaries import CrossLayerTranscoder, DictionarySet

    if not isinstance(loaded, DictionarySet | CrossLayerTranscoder):
        return loaded
    if layers is None or len(layers) != 1:
        what = "set" if isinstance(loaded, DictionarySet) else "cross-layer transcoder"
        raise InputError(
            f"one layer to take from the dictionary {what} (e.g. --layers 6), got "
            f"{'none' if layers is None else list(layers)}",
            field=field,
        )
    return loaded[layers[0]] if isinstance(loaded, DictionarySet) else loaded.source(layers[0])


def sweep_dictionary(spec: PatchSpec) -> Any:
    """The dictionary a ``feature`` sweep patches: the one given to the spec
    (:meth:`PatchSpec.with_dictionary`), else the one in its ``dictionary`` folder; kept
    on the spec, so every site the sweep builds holds the same object (a feature site's
    hooks are keyed by its dictionary)."""
    loaded = spec._dictionary
    if loaded is None:
        if spec.dictionary is None:
            raise InputError(
                "a dictionary for site 'feature': its folder (--dictionary DIR) or the "
                "loaded object (patch_pairs(..., dictionary=d))",
                field="dictionary",
            )
        loaded = _load(spec.dictionary)
    d = one_layer(loaded, spec.layers)
    spec._dictionary = d
    return d


def _to_device(d: Any, device: torch.device) -> None:
    """Move ``d`` (or the cross-layer transcoder a source belongs to) to the model's
    device, where the splice encodes and decodes."""
    module = getattr(d, "clt", d)
    if isinstance(module, torch.nn.Module):
        first = next(module.parameters(), None)
        if first is not None and first.device != device:
            module.to(device)


def feature_layer(dictionary: Any) -> int:
    """The layer a feature site sits at (its dictionary's input layer)."""
    hook = dictionary.config.hook_in
    if hook is None or hook.layer is None:
        where = "no hook" if hook is None else f"the {hook.site} hook, which has no layer"
        raise UnsupportedInterventionError(
            f"a patching sweep needs a dictionary at a layer; this one names {where}"
        )
    return int(hook.layer)


def patch_site(spec: PatchSpec, layer: int) -> Site:
    """The site a sweep reads and patches at ``layer`` (a feature site: every feature of
    the dictionary, ``[batch, seq, d_sae]``)."""
    if spec.site == "feature":
        return Site.feature(sweep_dictionary(spec))
    return Site(spec.site, layer)


def check_features(spec: PatchSpec) -> list[int]:
    """The swept features, checked against the dictionary's width."""
    n = sweep_dictionary(spec).d_sae
    features = list(spec.features or ())
    bad = [f for f in features if not 0 <= f < n]
    if bad or not features:
        got = f"feature {bad[0]}" if bad else "none"
        raise InputError(f"feature indices in 0..{n - 1}, got {got}", field="features")
    return features


def clean_ids(p: PreparedPair) -> list[int]:
    """The clean prompt of a prepared pair (the source when denoising, else the base)."""
    return list(p.source_ids if p.direction == "denoising" else p.base_ids)


def clean_positions(p: PreparedPair, spec: PatchSpec) -> list[int]:
    """The clean prompt's positions the sweep patches (its own side of every unit)."""
    _, _, base_pos, src_pos = units(p, spec)
    side = src_pos if p.direction == "denoising" else base_pos
    return sorted({q for pos in side for q in pos})


def choose_features(eng: Engine, prepared: Sequence[PreparedPair], spec: PatchSpec) -> PatchSpec:
    """``spec`` with its ``features`` named: as given, or the ``top_features`` (default
    :data:`~mechscope.patching.config.DEFAULT_TOP_FEATURES`) most active on the clean
    prompts (module docstring). Other sites: ``spec`` itself."""
    if spec.site != "feature":
        return spec
    d = sweep_dictionary(spec)
    eng.lm.check_layer(feature_layer(d))
    _to_device(d, eng.lm.device)
    if spec.features is not None:
        check_features(spec)
        return spec
    k = min(spec.top_features or DEFAULT_TOP_FEATURES, d.d_sae)
    site = Site.feature(d)
    clean = {}  # one row per clean prompt: its largest activation per feature
    for p in prepared:
        key = tuple(clean_ids(p))
        if key in clean:
            continue
        out = eng.run(torch.tensor([list(key)]), [Read(site)], logits=False)
        acts = out[site][0, clean_positions(p, spec)].float()  # [positions, d_sae]
        clean[key] = acts.max(0).values.cpu()  # [d_sae]
    score = torch.stack(list(clean.values())).mean(0)  # [d_sae]
    order = sorted(range(d.d_sae), key=lambda f: (-float(score[f]), f))[:k]
    out_spec = spec.model_copy(update={"features": tuple(order), "top_features": None})
    out_spec._dictionary = d
    return out_spec


def feature_label(spec: PatchSpec) -> str:
    """What the sweep patches, in words: ``feature[resid_post.6]`` or the site name."""
    if spec.site != "feature":
        return spec.site
    return str(Site.feature(sweep_dictionary(spec)))
