"""circuit-tracer: a transcoder set or a cross-layer transcoder, described by ``config.yaml``.

``config.yaml`` holds ``model_kind`` (``transcoder_set`` or ``cross_layer_transcoder``),
``model_name``, ``feature_input_hook`` and ``feature_output_hook`` (TransformerLens hook
suffixes: ``hook_resid_mid``, ``mlp.hook_in``, ``ln2.hook_normalized``,
``hook_mlp_out``, ``mlp.hook_out``), optionally ``activation`` (``relu``, ``topk`` with
``k``; JumpReLU when the weights hold a threshold) and ``transcoders`` (the per-layer files,
in layer order). The weights, as ``to_safetensors`` writes them:

- a set: ``layer_{i}.safetensors`` with ``W_enc [d_sae, d_in]`` (``F.linear``'s layout),
  ``W_dec [d_sae, d_out]``, ``b_enc``, ``b_dec``, and optionally
  ``activation_function.threshold [d_sae]``, ``k`` and ``W_skip [d_out, d_in]`` (applied
  as ``x @ W_skip.T``);
- a cross-layer transcoder: ``W_enc_{i}.safetensors`` with ``W_enc_{i} [d_sae, d_in]``,
  ``b_enc_{i}``, ``b_dec_{i}`` and optionally ``threshold_{i}``, and
  ``W_dec_{i}.safetensors`` with ``W_dec_{i} [d_sae, L - i, d_out]``.

circuit-tracer's JumpReLU keeps ``pre`` where ``pre > threshold`` without a ReLU, and its
TopK keeps the ``k`` largest without one; both equal mechscope's rules wherever the
threshold is non-negative, or the ``k`` largest pre-activations are (every published set).
"""

from __future__ import annotations

import re
from pathlib import Path

import torch

from mechscope.dictionaries.crosslayer import CrossLayerTranscoder
from mechscope.dictionaries.dictionary import Dictionary, DictionaryConfig
from mechscope.dictionaries.hooks import from_tl
from mechscope.dictionaries.layouts.files import need, read_safetensors
from mechscope.dictionaries.sets import DictionarySet
from mechscope.errors import InputError


def read_config(folder: Path) -> dict:
    import yaml

    path = folder / "config.yaml"
    if not path.exists():
        return {}
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise InputError(f"a readable YAML file, got {err}", field=str(path)) from None
    return data if isinstance(data, dict) else {}


def _hooks(cfg: dict, layer: int):
    model = cfg.get("model_name")
    hook_in = from_tl(cfg.get("feature_input_hook", "hook_resid_mid"), layer, model)
    hook_out = from_tl(cfg.get("feature_output_hook", "hook_mlp_out"), layer, model)
    return hook_in, hook_out


def _numbered(folder: Path, pattern: str) -> list[Path]:
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := re.fullmatch(pattern, p.name))]
    return [p for _, p in sorted(found)]


def read(folder: Path) -> DictionarySet | CrossLayerTranscoder:
    cfg = read_config(folder)
    kind = cfg.get("model_kind")
    if kind == "cross_layer_transcoder" or (
        kind is None and (folder / "W_enc_0.safetensors").exists()
    ):
        return read_clt(folder, cfg)
    files = [folder / p for p in cfg["transcoders"]] if cfg.get("transcoders") else []
    if not files or not all(f.exists() for f in files):
        files = _numbered(folder, r"layer_(\d+)\.safetensors")
    if not files:
        raise InputError("layer_<i>.safetensors files (a transcoder set)", field=str(folder))
    return DictionarySet({i: read_layer(f, i, cfg) for i, f in enumerate(files)}, "circuit_tracer")


def read_layer(path: Path, layer: int, cfg: dict) -> Dictionary:
    t = read_safetensors(path)
    w_enc, w_dec, b_enc, b_dec = need(t, "W_enc", "W_dec", "b_enc", "b_dec", where=path)
    threshold = t.get("activation_function.threshold")
    rule = cfg.get("activation") or ("jumprelu" if threshold is not None else "relu")
    if rule == "jump_relu":
        rule = "jumprelu"
    k = cfg.get("k") or (int(t["k"]) if "k" in t else None)
    w_skip = t.get("W_skip")
    hook_in, hook_out = _hooks(cfg, layer)
    config = DictionaryConfig(
        activation=rule,
        kind="skip_transcoder" if w_skip is not None else "transcoder",
        k=k,
        hook_in=hook_in,
        hook_out=hook_out,
        source="circuit_tracer",
        extra={k_: v for k_, v in cfg.items() if k_ != "transcoders"},
    )
    return Dictionary(
        w_enc.T.contiguous(),
        b_enc,
        w_dec,
        b_dec,
        config,
        threshold=threshold if rule == "jumprelu" else None,
        w_skip=None if w_skip is None else w_skip.T.contiguous(),
    )


def read_clt(folder: Path, cfg: dict) -> CrossLayerTranscoder:
    enc = _numbered(folder, r"W_enc_(\d+)\.safetensors")
    if not enc:
        raise InputError(
            "W_enc_<i>.safetensors files (a cross-layer transcoder)", field=str(folder)
        )
    w_enc, b_enc, b_dec, thresholds, w_dec = [], [], [], [], []
    for i, path in enumerate(enc):
        t = read_safetensors(path)
        w, be, bd = need(t, f"W_enc_{i}", f"b_enc_{i}", f"b_dec_{i}", where=path)
        w_enc.append(w.T)
        b_enc.append(be)
        b_dec.append(bd)
        if f"threshold_{i}" in t:
            thresholds.append(t[f"threshold_{i}"].reshape(-1))
        dec_path = folder / f"W_dec_{i}.safetensors"
        (wd,) = need(read_safetensors(dec_path), f"W_dec_{i}", where=dec_path)
        w_dec.append(wd)
    hook_in, hook_out = _hooks(cfg, 0)
    config = DictionaryConfig(
        activation=cfg.get("activation") or ("jumprelu" if thresholds else "relu"),
        kind="cross_layer_transcoder",
        k=cfg.get("k"),
        hook_in=hook_in,
        hook_out=hook_out,
        source="circuit_tracer",
        extra=dict(cfg),
    )
    return CrossLayerTranscoder(
        torch.stack(w_enc),
        torch.stack(b_enc),
        w_dec,
        torch.stack(b_dec),
        config,
        threshold=torch.stack(thresholds) if thresholds else None,
    )
