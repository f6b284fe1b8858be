"""Read any published dictionary from its folder, the layout detected from the files.

=====================  ================================================================
layout                 the files that say so
=====================  ================================================================
``saelens``            ``cfg.json`` + ``sae_weights.safetensors`` (6.x or the flat pre-6)
``gemma_scope``        ``params.npz`` (Gemma Scope 1)
``gemma_scope_2``      ``params.safetensors`` (Gemma Scope 2), or
                       ``params_layer_<i>.safetensors`` (its cross-layer transcoders)
``sparsify``           ``cfg.json`` + ``sae.safetensors``
``dictionary_learning`` ``ae.pt`` + ``config.json``
``circuit_tracer``     ``config.yaml``, ``layer_<i>.safetensors`` (a transcoder set) or
                       ``W_enc_<i>.safetensors`` + ``W_dec_<i>.safetensors`` (cross-layer)
``folders``            none of these, and subfolders that each hold one dictionary of any
                       of them at its own layer (a SAELens release, a ``features train``
                       run's ``dictionaries/``): read as one set
=====================  ================================================================

:func:`load_dictionary` returns a :class:`~mechscope.dictionaries.Dictionary`, a
:class:`~mechscope.dictionaries.DictionarySet` (one per layer) or a
:class:`~mechscope.dictionaries.CrossLayerTranscoder`; :func:`describe` says what was found.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from mechscope.dictionaries.crosslayer import CrossLayerTranscoder
from mechscope.dictionaries.dictionary import Dictionary, Hook
from mechscope.dictionaries.sets import DictionarySet
from mechscope.errors import InputError

Loaded = Dictionary | DictionarySet | CrossLayerTranscoder
LAYOUTS = (
    "saelens",
    "gemma_scope",
    "gemma_scope_2",
    "sparsify",
    "dictionary_learning",
    "circuit_tracer",
    "folders",
)


def detect(folder: Path) -> str:
    """The layout of ``folder`` (module docstring), or one line naming what was found."""
    if not folder.is_dir():
        raise InputError(f"a folder holding a dictionary, got {str(folder)!r}", field="path")
    names = {p.name for p in folder.iterdir()}
    shown = sorted(names)[:6] + (["…"] if len(names) > 6 else [])
    if {"cfg.json", "sae_weights.safetensors"} <= names:
        return "saelens"
    if "params.npz" in names:
        return "gemma_scope"
    if "params.safetensors" in names or any(n.startswith("params_layer_") for n in names):
        return "gemma_scope_2"
    if {"cfg.json", "sae.safetensors"} <= names:
        return "sparsify"
    if {"ae.pt", "config.json"} <= names:
        return "dictionary_learning"
    if "config.yaml" in names or any(
        n.startswith(("layer_", "W_enc_")) and n.endswith(".safetensors") for n in names
    ):
        return "circuit_tracer"
    subs = sorted(p for p in folder.iterdir() if p.is_dir())
    if subs and all(_holds_one(p) for p in subs):
        return "folders"
    raise InputError(
        "the files of one layout (SAELens cfg.json + sae_weights.safetensors, Gemma Scope "
        "params.npz / params.safetensors, sparsify cfg.json + sae.safetensors, "
        "dictionary_learning ae.pt + config.json, circuit-tracer config.yaml / "
        f"layer_<i>.safetensors), or subfolders holding one each, got "
        f"{', '.join(shown) or 'an empty folder'}",
        field=str(folder),
    )


def _holds_one(folder: Path) -> bool:
    """Whether ``folder`` holds a dictionary of a layout with files of its own."""
    try:
        return detect(folder) != "folders"
    except InputError:
        return False


def read_folders(folder: Path) -> DictionarySet:
    """One dictionary from each subfolder, keyed by the layer its hook names: a set, or one
    line naming the subfolder that does not fit (no layer, a set of its own, a layer taken)."""
    members: dict[int, Dictionary] = {}
    for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
        d = load_dictionary(sub)
        hook = d.config.hook_in if isinstance(d, Dictionary) else None
        if hook is None or hook.layer is None:
            raise InputError(
                "subfolders each holding one dictionary whose hook names its layer", field=sub.name
            )
        if hook.layer in members:
            raise InputError(
                f"one dictionary per layer, got a second at layer {hook.layer}", field=sub.name
            )
        members[hook.layer] = d
    return DictionarySet(members, source=str(folder))


def load_dictionary(
    path: str | Path, *, hook: Hook | None = None, model: str | None = None
) -> Loaded:
    """The dictionary (or set, or cross-layer transcoder) in ``path``, in fp32 as stored.

    ``hook``: where it sits when the layout does not say (a single dictionary only);
    ``model``: the model it was trained on, when the layout does not say."""
    from mechscope.dictionaries.layouts import (
        circuit_tracer,
        dictionary_learning,
        gemma_scope,
        saelens,
        sparsify,
    )

    folder = Path(path).expanduser()
    layout = detect(folder)
    if layout == "gemma_scope_2" and not (folder / "params.safetensors").exists():
        loaded: Loaded = gemma_scope.read_v2_clt(folder)
    elif layout == "folders":
        loaded = read_folders(folder)
    else:
        readers = {
            "saelens": saelens.read,
            "gemma_scope": gemma_scope.read_v1,
            "gemma_scope_2": gemma_scope.read_v2,
            "sparsify": sparsify.read,
            "dictionary_learning": dictionary_learning.read,
            "circuit_tracer": circuit_tracer.read,
        }
        loaded = readers[layout](folder)
    if hook is not None or model is not None:
        members = list(loaded) if isinstance(loaded, DictionarySet) else [loaded]
        if hook is not None and len(members) > 1:
            raise InputError("a hook for a single dictionary (a set names its own)", field="hook")
        for d in members:
            c = d.config
            if hook is not None:
                c.hook_in = hook
            if model is not None:
                c.hook_in = (
                    replace(c.hook_in, model=model) if c.hook_in else Hook("unknown", None, model)
                )
                c.hook_out = None if c.hook_out is None else replace(c.hook_out, model=model)
    return loaded


def describe(loaded: Loaded) -> dict[str, Any]:
    """What ``mechscope features inspect`` prints: layout, kind, activation, widths, hooks,
    model, dtype (and layers for a set or a cross-layer transcoder)."""
    first = next(iter(loaded)) if isinstance(loaded, DictionarySet) else loaded
    c = first.config
    out: dict[str, Any] = {
        "layout": c.source,
        "kind": c.kind,
        "activation": c.activation + (f" (k={c.k})" if c.k else ""),
        "d_in": first.d_in,
        "d_sae": first.d_sae,
        "d_out": first.d_out,
        "hook_in": _hook_text(c.hook_in, loaded),
        "hook_out": _hook_text(c.hook_out or c.hook_in, loaded),
        "model": (c.hook_in.model if c.hook_in else None) or "unknown",
        "dtype": str(first.w_enc.dtype).removeprefix("torch."),
        "apply_b_dec_to_input": c.apply_b_dec_to_input,
        "skip": first.w_skip is not None,
    }
    if isinstance(loaded, DictionarySet):
        out["layers"] = f"{len(loaded)} ({loaded.layers[0]}..{loaded.layers[-1]})"
    if isinstance(loaded, CrossLayerTranscoder):
        out["layers"] = (
            f"{loaded.n_layers} (0..{loaded.n_layers - 1}), each writing to every later one"
        )
    return out


def _hook_text(hook: Hook | None, loaded: Loaded) -> str:
    if hook is None:
        return "unknown"
    if isinstance(loaded, DictionarySet | CrossLayerTranscoder):
        where = "each layer"
    else:
        where = "no layer" if hook.layer is None else f"layer {hook.layer}"
    named = f" ({hook.original})" if hook.original and hook.original != hook.site else ""
    return f"{hook.site}, {where}{named}"
