"""A trained dictionary on disk in SAELens's layout, and back: ``cfg.json`` and
``sae_weights.safetensors`` with SAELens 6's names (``W_enc [d_in, d_sae]``, ``b_enc``,
``W_dec [d_sae, d_out]``, ``b_dec``, ``threshold``; a skip transcoder's ``W_skip
[d_out, d_in]``), so what mechscope trains opens in SAELens and Neuronpedia.

The input scale a dictionary was trained with is folded into its weights before writing
(SAELens's ``fold_activation_norm_scaling_factor``: ``W_enc · s``, ``W_dec / s``,
``b_dec / s``; the pre-activations, hence the thresholds and the TopK choice, are
unchanged), so the file needs no normalisation at run time. A BatchTopK dictionary is
written as SAELens writes one for inference: a JumpReLU with its threshold. SAELens 6.54
has no TopK transcoder; one is written with ``architecture: "topk"`` and ``d_out``, which
mechscope reads back and SAELens does not.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from mechscope.dictionaries import Dictionary, DictionaryConfig, Hook
from mechscope.errors import InputError
from mechscope.runs import atomic_path, atomic_write_text

CFG = "cfg.json"
WEIGHTS = "sae_weights.safetensors"

#: (kind, activation written) -> SAELens 6 architecture
ARCHITECTURES = {
    ("sae", "topk"): "topk",
    ("sae", "jumprelu"): "jumprelu",
    ("sae", "relu"): "standard",
    ("transcoder", "relu"): "transcoder",
    ("skip_transcoder", "relu"): "skip_transcoder",
    ("transcoder", "jumprelu"): "jumprelu_transcoder",
    ("skip_transcoder", "jumprelu"): "jumprelu_skip_transcoder",
    ("transcoder", "topk"): "topk",
    ("skip_transcoder", "topk"): "topk",
}


@torch.no_grad()
def folded(d: Dictionary) -> Dictionary:
    """``d`` with its input scale folded into the weights (module docstring); a BatchTopK
    with a threshold becomes the JumpReLU it computes at inference."""
    c = d.config
    s = c.input_scale or 1.0
    activation = "jumprelu" if c.activation == "batchtopk" and d.threshold is not None else None
    config = DictionaryConfig(
        activation=activation or c.activation, kind=c.kind, k=None if activation else c.k,
        apply_b_dec_to_input=c.apply_b_dec_to_input, input_scale=None, hook_in=c.hook_in,
        hook_out=c.hook_out, source=c.source, extra=dict(c.extra),
    )  # fmt: skip
    t = {n: getattr(d, n) for n in ("threshold", "w_skip", "b_skip")}
    return Dictionary(
        (d.w_enc * s).detach().clone(), d.b_enc.detach().clone(), (d.w_dec / s).detach().clone(),
        (d.b_dec / s).detach().clone(), config,
        **{n: None if v is None else v.detach().clone() for n, v in t.items()},
    )  # fmt: skip


def save_saelens(
    d: Dictionary, folder: str | Path, *, metadata: dict[str, Any] | None = None
) -> Path:
    """Write ``d`` to ``folder`` in SAELens's layout (atomically, file by file)."""
    f = folded(d)
    c = f.config
    arch = ARCHITECTURES.get((c.kind, c.activation))
    if arch is None or c.activation == "gated":
        raise InputError(f"a dictionary SAELens's layout holds, got {c.kind} {c.activation}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    weights = {"W_enc": f.w_enc, "b_enc": f.b_enc, "W_dec": f.w_dec, "b_dec": f.b_dec}
    if f.threshold is not None:
        weights["threshold"] = f.threshold
    if f.w_skip is not None:
        weights["W_skip"] = f.w_skip.T  # SAELens: [d_out, d_in]
    meta: dict[str, Any] = {
        "hook_name": c.hook_in.original if c.hook_in else None,
        "model_name": c.hook_in.model if c.hook_in else None,
        "hook_head_index": None,
        "prepend_bos": True,
        "exclude_special_tokens": True,
    }
    if c.kind != "sae" and c.hook_out is not None:
        meta["hook_name_out"] = c.hook_out.original
    meta.update(metadata or {})
    cfg: dict[str, Any] = {
        "architecture": arch,
        "d_in": f.d_in,
        "d_sae": f.d_sae,
        "dtype": "float32",
        "device": "cpu",
        "apply_b_dec_to_input": c.apply_b_dec_to_input,
        "normalize_activations": "none",
        "reshape_activations": "none",
        "metadata": meta,
    }
    if c.kind != "sae":
        cfg["d_out"] = f.d_out
    if c.activation == "topk":
        cfg["k"] = c.k
        cfg["rescale_acts_by_decoder_norm"] = False
    with atomic_path(folder / WEIGHTS) as tmp:
        save_file({k: v.float().contiguous() for k, v in weights.items()}, str(tmp))
    atomic_write_text(folder / CFG, json.dumps(cfg, indent=2))
    return folder


def load_saelens(folder: str | Path, *, site_of=None) -> Dictionary:
    """A dictionary written by :func:`save_saelens` (or SAELens 6 itself, for the
    architectures above). ``site_of(hook_name) -> Hook``: the hooks' mechscope sites."""
    folder = Path(folder)
    if not (folder / CFG).is_file() or not (folder / WEIGHTS).is_file():
        raise InputError(f"{CFG} and {WEIGHTS} in {str(folder)!r}", field="dictionary")
    cfg = json.loads((folder / CFG).read_text())
    w = load_file(str(folder / WEIGHTS))
    arch = cfg["architecture"]
    kinds = {v: k for k, v in ARCHITECTURES.items() if k[0] == "sae" or v != "topk"}
    kind, activation = kinds.get(arch, ("sae", arch))
    if arch == "topk" and "d_out" in cfg:
        kind = "skip_transcoder" if "W_skip" in w else "transcoder"
    meta = cfg.get("metadata") or {}
    hook_in = _hook(meta.get("hook_name"), meta.get("model_name"), site_of)
    hook_out = _hook(meta.get("hook_name_out"), meta.get("model_name"), site_of)
    config = DictionaryConfig(
        activation=activation, kind=kind, k=cfg.get("k"),
        apply_b_dec_to_input=bool(cfg.get("apply_b_dec_to_input", False)),
        hook_in=hook_in, hook_out=hook_out if kind != "sae" else None, source="saelens",
        extra={"metadata": meta},
    )  # fmt: skip
    skip = w.get("W_skip")
    return Dictionary(
        w["W_enc"], w["b_enc"], w["W_dec"], w["b_dec"], config,
        threshold=w.get("threshold"), w_skip=None if skip is None else skip.T.contiguous(),
    )  # fmt: skip


def _hook(name: str | None, model: str | None, site_of) -> Hook | None:
    if name is None:
        return None
    if site_of is not None:
        return site_of(name, model)
    parts = name.split(".")
    layer = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None
    return Hook(site=parts[-1].removeprefix("hook_"), layer=layer, model=model, original=name)
