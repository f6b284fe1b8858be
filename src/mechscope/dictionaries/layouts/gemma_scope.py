"""Gemma Scope 1 (``params.npz``) and Gemma Scope 2 (``params.safetensors``,
``params_layer_<i>.safetensors``).

Gemma Scope 1 (Gemma 2): ``params.npz`` with ``W_enc [d_in, d_sae]``, ``W_dec [d_sae,
d_in]``, ``b_enc``, ``b_dec``, ``threshold`` (JumpReLU), nothing subtracted from the input.
The hook is in the path: the repository's suffix (``-res``: ``resid_post``, ``-mlp``:
``mlp_out``, ``-att``: the heads' ``z`` flattened, ``-transcoders``: ``mlp_in`` to
``mlp_out``), the layer in ``layer_<L>``, the model in ``gemma-scope-<size>-<pt|it>``.

Gemma Scope 2 (Gemma 3): ``params.safetensors`` with ``w_enc [d_in, d_sae]``, ``w_dec
[d_sae, d_out]``, ``b_enc``, ``b_dec``, ``threshold`` and, for an affine skip transcoder,
``affine_skip_connection [d_in, d_out]`` (applied as ``x @ A``); a ``config.json`` beside it
names the model and the transformers points it reads and writes (``hf_hook_point_in``:
``model.layers.5.output``, ``….pre_feedforward_layernorm.output``,
``….self_attn.o_proj.input``, ``….post_feedforward_layernorm.output``). A cross-layer
transcoder is a folder of ``params_layer_<i>.safetensors``, one per source layer, whose
``w_dec [d_sae, L, d_out]`` holds a decoder to every layer (those below ``i`` unused).
"""

from __future__ import annotations

import re
from pathlib import Path

import torch

from mechscope.dictionaries.crosslayer import CrossLayerTranscoder
from mechscope.dictionaries.dictionary import Dictionary, DictionaryConfig, Hook
from mechscope.dictionaries.layouts.files import need, read_json, read_npz, read_safetensors
from mechscope.errors import InputError

#: Gemma Scope 1's repository suffix -> (input site, output site).
SUFFIXES = {
    "res": ("resid_post", None),
    "mlp": ("mlp_out", None),
    "att": ("z", None),
    "transcoders": ("mlp_in", "mlp_out"),
}
#: Gemma Scope 2's transformers points (``model.layers.L.<part>``) -> site.
HF_POINTS = {
    "output": "resid_post",
    "input": "resid_pre",
    "pre_feedforward_layernorm.output": "mlp_in",
    "pre_feedforward_layernorm.input": "resid_mid",
    "post_feedforward_layernorm.output": "mlp_out",
    "self_attn.o_proj.input": "z",
    "post_attention_layernorm.output": "attn_out",
}


def _layer(path: Path) -> int | None:
    match = re.search(r"layer_(\d+)", str(path))
    return None if match is None else int(match.group(1))


def read_v1(folder: Path) -> Dictionary:
    t = read_npz(folder / "params.npz")
    at = folder / "params.npz"
    w_enc, w_dec, b_enc, b_dec, threshold = need(
        t, "W_enc", "W_dec", "b_enc", "b_dec", "threshold", where=at
    )
    text = folder.as_posix()
    repo = re.search(r"gemma-scope-(\d+b)-(pt|it)-(res|mlp|att|transcoders)", text)
    layer = _layer(folder)
    hook_in = hook_out = None
    model = None
    if repo is not None:
        size, tuned, suffix = repo.groups()
        model = f"gemma-2-{size}" + ("-it" if tuned == "it" else "")
        site_in, site_out = SUFFIXES[suffix]
        hook_in = Hook(site_in, layer, model, text)
        hook_out = None if site_out is None else Hook(site_out, layer, model, text)
    l0 = re.search(r"average_l0_(\d+)", text)
    config = DictionaryConfig(
        activation="jumprelu",
        kind="sae" if hook_out is None else "transcoder",
        hook_in=hook_in,
        hook_out=hook_out,
        source="gemma_scope",
        extra={"l0": int(l0.group(1))} if l0 else {},
    )
    return Dictionary(w_enc, b_enc, w_dec, b_dec, config, threshold=threshold)


def _hf_hook(point: str | None, model: str | None) -> Hook | None:
    if not point:
        return None
    match = re.match(r"^(?:model\.)?(?:language_model\.)?layers\.(\d+)\.(.+)$", point)
    if match is None or match.group(2) not in HF_POINTS:
        raise InputError(
            f"a point model.layers.L.<{'|'.join(HF_POINTS)}>, got {point!r}", field="hf_hook_point"
        )
    return Hook(HF_POINTS[match.group(2)], int(match.group(1)), model, point)


def _v2_config(folder: Path) -> tuple[Hook | None, Hook | None, dict]:
    cfg = read_json(folder / "config.json") if (folder / "config.json").exists() else {}
    model = cfg.get("model_name")
    if cfg.get("architecture", "jump_relu") != "jump_relu":
        raise InputError(
            f"architecture jump_relu, got {cfg['architecture']!r}",
            field=str(folder / "config.json"),
        )
    hook_in = _hf_hook(cfg.get("hf_hook_point_in"), model)
    hook_out = _hf_hook(cfg.get("hf_hook_point_out"), model)
    if hook_in is None:  # no config: the folder names the site (as SAELens infers it)
        text, layer = folder.as_posix(), _layer(folder)
        for key, (site_in, site_out) in (
            ("resid_post", ("resid_post", None)),
            ("attn_out", ("z", None)),
            ("mlp_out", ("mlp_out", None)),
            ("transcoder", ("mlp_in", "mlp_out")),
            ("clt", ("mlp_in", "mlp_out")),
        ):
            if key in text:
                hook_in = Hook(site_in, layer, model, text)
                hook_out = None if site_out is None else Hook(site_out, layer, model, text)
                break
    if hook_out is not None and hook_in is not None and hook_out.site == hook_in.site:
        hook_out = None
    return hook_in, hook_out, cfg


def read_v2(folder: Path) -> Dictionary:
    at = folder / "params.safetensors"
    t = read_safetensors(at)
    w_enc, w_dec, b_enc, b_dec, threshold = need(
        t, "w_enc", "w_dec", "b_enc", "b_dec", "threshold", where=at
    )
    hook_in, hook_out, cfg = _v2_config(folder)
    skip = t.get("affine_skip_connection")
    kind = "sae" if hook_out is None else "skip_transcoder" if skip is not None else "transcoder"
    config = DictionaryConfig(
        activation="jumprelu",
        kind=kind,  # type: ignore[arg-type]
        hook_in=hook_in,
        hook_out=hook_out,
        source="gemma_scope_2",
        extra=cfg,
    )
    return Dictionary(w_enc, b_enc, w_dec, b_dec, config, threshold=threshold, w_skip=skip)


def read_v2_clt(folder: Path) -> CrossLayerTranscoder:
    files = sorted(
        (
            (int(m.group(1)), p)
            for p in folder.iterdir()
            if (m := re.fullmatch(r"params_layer_(\d+)\.safetensors", p.name))
        ),
    )
    if [i for i, _ in files] != list(range(len(files))):
        raise InputError("params_layer_0 … params_layer_<L-1>.safetensors", field=str(folder))
    n = len(files)
    parts = []
    for _, path in files:
        t = read_safetensors(path)
        tensors = need(t, "w_enc", "w_dec", "b_enc", "b_dec", "threshold", where=path)
        parts.append([*tensors, t.get("affine_skip_connection")])
        if parts[-1][1].dim() != 3 or parts[-1][1].shape[1] != n:
            raise InputError(
                f"w_dec [d_sae, {n}, d_out], got {list(parts[-1][1].shape)}", field=str(path)
            )
    hook_in, hook_out, cfg = _v2_config(folder)
    config = DictionaryConfig(
        activation="jumprelu",
        kind="cross_layer_transcoder",
        hook_in=hook_in or Hook("mlp_in", None),
        hook_out=hook_out or Hook("mlp_out", None),
        source="gemma_scope_2",
        extra=cfg,
    )
    skips = [p[5] for p in parts]
    return CrossLayerTranscoder(
        torch.stack([p[0] for p in parts]),
        torch.stack([p[2] for p in parts]),
        [p[1][:, i:] for i, p in enumerate(parts)],
        torch.stack([p[3] for p in parts]),
        config,
        threshold=torch.stack([p[4] for p in parts]),
        w_skip=torch.stack(skips) if all(s is not None for s in skips) else None,  # type: ignore[misc]
    )
