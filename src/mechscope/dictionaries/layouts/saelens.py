"""SAELens: ``cfg.json`` + ``sae_weights.safetensors`` (+ ``sparsity.safetensors``), read
and written.

SAELens 6 (``SAE.save_model``) writes ``cfg.json`` with ``architecture``, ``d_in``,
``d_sae`` (``d_out`` for transcoders), ``dtype``, ``apply_b_dec_to_input``,
``normalize_activations``, ``reshape_activations`` (``hook_z``: the input is the heads'
``z`` flattened), ``k`` and ``rescale_acts_by_decoder_norm`` (TopK) and a ``metadata``
object (``model_name``, ``hook_name``, ``hook_name_out``, ``sae_lens_version``…). Before
6.0 the config was flat: ``hook_point`` / ``hook_name``, ``activation_fn_str``,
``activation_fn_kwargs.k``, ``model_name`` at the top; a config without a version ≥ 6 is
read that way (as SAELens' own ``handle_pre_6_0_config`` does).

Weights: ``W_enc [d_in, d_sae]``, ``b_enc``, ``W_dec [d_sae, d_out]``, ``b_dec``, and
``threshold`` (JumpReLU; ``log_threshold`` in older training saves), ``b_gate``, ``r_mag``,
``b_mag`` (gated; no ``b_enc``), ``W_skip [d_out, d_in]`` (skip transcoders, applied as
``x @ W_skip.T``), ``topk_threshold`` (a BatchTopK training save), ``scaling_factor``
(the pre-6 fine-tuning scale of the features, folded into ``W_dec``).
``sparsity.safetensors`` holds ``sparsity [d_sae]``, each feature's log10 firing rate.

The writer writes the 6.x inference layout SAELens' ``SAE.load_from_disk`` and
Neuronpedia's uploads read, with any ``input_scale`` folded into the weights (as
``fold_activation_norm_scaling_factor`` does) and a thresholded BatchTopK as the JumpReLU
it is at inference (as SAELens itself saves one).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from mechscope.dictionaries.dictionary import Dictionary, DictionaryConfig, Hook
from mechscope.dictionaries.hooks import from_tl, to_tl
from mechscope.dictionaries.layouts.files import need, read_json, read_safetensors
from mechscope.errors import InputError

CFG, WEIGHTS, SPARSITY = "cfg.json", "sae_weights.safetensors", "sparsity.safetensors"
#: SAELens' architecture -> (mechscope kind, activation).
ARCHITECTURES = {
    "standard": ("sae", "relu"),
    "jumprelu": ("sae", "jumprelu"),
    "topk": ("sae", "topk"),
    "batchtopk": ("sae", "batchtopk"),
    "matryoshka_batchtopk": ("sae", "batchtopk"),
    "gated": ("sae", "gated"),
    "transcoder": ("transcoder", "relu"),
    "skip_transcoder": ("skip_transcoder", "relu"),
    "jumprelu_transcoder": ("transcoder", "jumprelu"),
    "jumprelu_skip_transcoder": ("skip_transcoder", "jumprelu"),
}
#: SAELens' normalisations mechscope computes: none, and the dataset-wide constant of
#: ``expected_average_only_in``, which SAELens folds into the weights before saving.
NORMALISATIONS = ("none", "expected_average_only_in")
#: What mechscope writes as the SAELens version of the layout (the 6.x format).
LAYOUT_VERSION = "6.0.0"


def is_v6(cfg: dict[str, Any]) -> bool:
    version = cfg.get("sae_lens_version") or cfg.get("metadata", {}).get("sae_lens_version")
    if not version:
        return False
    try:
        return int(str(version).split(".")[0]) >= 6
    except ValueError:
        return False


def read(folder: Path) -> Dictionary:
    cfg = read_json(folder / CFG)
    flat = not is_v6(cfg)
    meta = cfg if flat else cfg.get("metadata", {})
    arch = cfg.get("architecture", "standard")
    rule = cfg.get("activation_fn_str", cfg.get("activation_fn", "relu")) if flat else None
    k = cfg.get("k") or (cfg.get("activation_fn_kwargs") or {}).get("k")
    if flat and rule == "topk" and k is not None:
        arch = "topk"
    if arch not in ARCHITECTURES:
        raise InputError(
            f"an architecture among {', '.join(ARCHITECTURES)}, got {arch!r}",
            field=str(folder / CFG),
        )
    norm = cfg.get("normalize_activations", "none")
    norm = {True: "expected_average_only_in", False: "none", None: "none"}.get(norm, norm)
    if norm not in NORMALISATIONS:
        raise InputError(
            f"normalize_activations none (mechscope does not compute {norm!r})",
            field=str(folder / CFG),
        )
    kind, activation = ARCHITECTURES[arch]
    t = read_safetensors(folder / WEIGHTS)
    if arch == "topk" and "d_out" in cfg:  # a TopK transcoder (SAELens 6.54 has none)
        kind = "skip_transcoder" if "W_skip" in t else "transcoder"
    w_enc, w_dec, b_dec = need(t, "W_enc", "W_dec", "b_dec", where=folder / WEIGHTS)
    threshold = t.get("threshold")
    if threshold is None and "log_threshold" in t:
        threshold = t["log_threshold"].exp()
    if threshold is None and "topk_threshold" in t:
        threshold = torch.full((w_enc.shape[1],), float(t["topk_threshold"]), dtype=w_enc.dtype)
    if "scaling_factor" in t:  # pre-6 fine-tuning scale: f * s @ W_dec
        w_dec = t["scaling_factor"][:, None] * w_dec
    if cfg.get("rescale_acts_by_decoder_norm"):  # TopK on f * |W_dec|, decoded by W_dec / |W_dec|
        norms = w_dec.norm(dim=-1)
        w_enc, w_dec = w_enc * norms, w_dec / norms[:, None]
        t["b_enc"] = t["b_enc"] * norms
    b_enc = t.get("b_enc", torch.zeros(w_enc.shape[1], dtype=w_enc.dtype))
    hook_name = meta.get("hook_name") or meta.get("hook_point")
    model = meta.get("model_name")
    hook_in = _hook(hook_name, meta.get("hook_layer") or meta.get("hook_point_layer"), model)
    out_name = meta.get("hook_name_out")
    hook_out = _hook(out_name, None, model) if out_name else None
    extra = {k_: v for k_, v in cfg.items() if k_ != "metadata"} | dict(meta)
    if (folder / SPARSITY).exists():
        extra["log_sparsity"] = read_safetensors(folder / SPARSITY).get("sparsity")
    config = DictionaryConfig(
        activation=activation,  # type: ignore[arg-type]
        kind=kind,  # type: ignore[arg-type]
        k=None if k is None else int(k),
        apply_b_dec_to_input=bool(cfg.get("apply_b_dec_to_input", kind == "sae")),
        hook_in=hook_in,
        hook_out=hook_out,
        source="saelens",
        extra=extra,
    )
    w_skip = t.get("W_skip")
    return Dictionary(
        w_enc,
        b_enc,
        w_dec,
        b_dec,
        config,
        threshold=threshold if activation in ("jumprelu", "batchtopk") else None,
        w_skip=None if w_skip is None else w_skip.T.contiguous(),
        b_gate=t.get("b_gate"),
        r_mag=t.get("r_mag"),
        b_mag=t.get("b_mag"),
    )


def _hook(name: str | None, layer: Any, model: str | None) -> Hook | None:
    if not name:
        return None
    try:
        return from_tl(name, None if layer is None else int(layer), model)
    except InputError:
        return Hook("unknown", None if layer is None else int(layer), model, name)


def architecture(d: Dictionary) -> str:
    """SAELens' name for what ``d`` computes at inference (refused where it has none)."""
    c = d.config
    rule = "jumprelu" if c.activation == "batchtopk" and d.threshold is not None else c.activation
    if rule == "batchtopk":
        rule = "topk"  # per-token top-k: what BatchTopK computes without a threshold
    if c.kind == "sae":
        return {"relu": "standard"}.get(rule, rule)
    if rule not in ("relu", "jumprelu", "topk"):
        raise InputError(
            f"a relu, jumprelu or topk transcoder for SAELens' layout, got {rule}",
            field="activation",
        )
    if rule == "topk":  # read back by mechscope, not by SAELens 6.54
        return "topk"
    skip = "skip_" if d.w_skip is not None else ""
    return f"{'jumprelu_' if rule == 'jumprelu' else ''}{skip}transcoder"


def save_saelens(
    d: Dictionary,
    folder: str | Path,
    log_sparsity: torch.Tensor | None = None,
    *,
    metadata: dict[str, Any] | None = None,
) -> Path:
    """``d`` in SAELens' 6.x layout in ``folder`` (made if missing): what ``SAE.load_from_disk``
    and Neuronpedia read. ``log_sparsity [d_sae]``: each feature's log10 firing rate, written
    to ``sparsity.safetensors``. ``metadata``: further keys of ``cfg.json``'s ``metadata``
    (read back into ``config.extra``). Each file is written whole or not at all, so a run
    stopped while saving leaves no half-written dictionary. Returns the folder."""
    from safetensors.torch import save_file

    from mechscope.runs import atomic_path, atomic_write_text

    c, extra_metadata = d.config, dict(metadata or {})
    if c.kind == "cross_layer_transcoder":
        raise InputError("a single-layer dictionary (SAELens has no cross-layer layout)")
    if c.hook_in is None:
        raise InputError("a dictionary with a hook (hook_in) to write SAELens' hook_name")
    arch = architecture(d)
    s = 1.0 if c.input_scale is None else float(c.input_scale)
    with torch.no_grad():
        tensors = {
            "W_enc": d.w_enc * s,
            "W_dec": d.w_dec / s,
            "b_dec": d.b_dec / s,
        }
        if c.activation != "gated":
            tensors["b_enc"] = d.b_enc.clone()
        if arch.startswith("jumprelu"):
            tensors["threshold"] = d.threshold.clone()  # type: ignore[union-attr]
        if c.activation == "gated":
            tensors.update(b_gate=d.b_gate.clone(), r_mag=d.r_mag.clone(), b_mag=d.b_mag.clone())  # type: ignore[union-attr]
        if d.w_skip is not None:
            if d.b_skip is not None:  # SAELens has one output bias
                tensors["b_dec"] = (d.b_dec + d.b_skip) / s
            tensors["W_skip"] = d.w_skip.T
        tensors = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
    metadata: dict[str, Any] = {
        k: v
        for k, v in c.extra.items()
        if k
        in (
            "prepend_bos",
            "context_size",
            "dataset_path",
            "neuronpedia_id",
            "seqpos_slice",
            "exclude_special_tokens",
            "model_class_name",
            "model_from_pretrained_kwargs",
        )
        and isinstance(v, (str, int, float, bool, list, dict, type(None)))
    }
    metadata.update(
        sae_lens_version=LAYOUT_VERSION,
        sae_lens_training_version=c.extra.get("sae_lens_training_version", "mechscope"),
        model_name=c.hook_in.model,
        hook_name=to_tl(c.hook_in),
        hook_head_index=None,
    )
    metadata.update(extra_metadata)
    cfg: dict[str, Any] = {
        "d_in": d.d_in,
        "d_sae": d.d_sae,
        "dtype": str(d.w_enc.dtype).removeprefix("torch."),
        "device": "cpu",
        "apply_b_dec_to_input": bool(c.apply_b_dec_to_input),
        "normalize_activations": "none",
        "reshape_activations": "hook_z" if c.hook_in.site == "z" else "none",
        "metadata": metadata,
        "architecture": arch,
    }
    if arch == "topk":
        cfg.update(k=int(c.k), rescale_acts_by_decoder_norm=False)  # type: ignore[arg-type]
    if c.kind != "sae":
        cfg["d_out"] = d.d_out
        if c.hook_out is not None:
            metadata["hook_name_out"] = to_tl(c.hook_out)
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    with atomic_path(out / WEIGHTS) as tmp:
        save_file(tensors, str(tmp))
    if log_sparsity is not None:
        with atomic_path(out / SPARSITY) as tmp:
            save_file({"sparsity": log_sparsity.detach().float().cpu().contiguous()}, str(tmp))
    atomic_write_text(out / CFG, json.dumps(cfg, indent=2))  # last: the folder is complete
    return out
