"""Random transcoder sets for the graph tests, written in a published layout and read back.

The decoders are scaled so a layer's reconstruction is of the size of the tiny models' MLP
outputs (a hundredth of a unit): reconstruction and error are then of the same size, as
with trained transcoders, and the error does not cancel a reconstruction a thousand times
the MLP's output (which would only measure that cancellation's rounding).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import yaml
from safetensors.torch import save_file

from mechscope.dictionaries import (
    CrossLayerTranscoder,
    Dictionary,
    DictionaryConfig,
    DictionarySet,
    Hook,
    load_dictionary,
    save_saelens,
)

N_FEATURES = 48


def random_transcoder(d: int, layer: int, *, skip: bool, jumprelu: bool, seed: int) -> Dictionary:
    g = torch.Generator().manual_seed(seed * 1000 + layer)
    threshold = torch.rand(N_FEATURES, generator=g) * 0.1 if jumprelu else None
    kind = "skip_transcoder" if skip else "transcoder"
    return Dictionary(
        torch.randn(d, N_FEATURES, generator=g) / d**0.5,
        torch.randn(N_FEATURES, generator=g) * 0.3,
        torch.randn(N_FEATURES, d, generator=g) * 0.003,
        torch.randn(d, generator=g) * 0.001,
        DictionaryConfig(
            "jumprelu" if jumprelu else "relu",
            kind=kind,
            hook_in=Hook("mlp_in", layer),
            hook_out=Hook("mlp_out", layer),
        ),
        threshold=threshold,
        w_skip=torch.randn(d, d, generator=g) * 0.002 if skip else None,
    )


def _gemma_scope_2(d: Dictionary, folder: Path, layer: int) -> Path:
    """``d`` as Gemma Scope 2 writes a transcoder: ``params.safetensors`` and a
    ``config.json`` naming the transformers points it reads and writes."""
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {
        "w_enc": d.w_enc,
        "w_dec": d.w_dec,
        "b_enc": d.b_enc,
        "b_dec": d.b_dec,
        "threshold": d.threshold,
    }
    if d.w_skip is not None:
        tensors["affine_skip_connection"] = d.w_skip
    save_file(
        {k: v.detach().contiguous() for k, v in tensors.items()}, str(folder / "params.safetensors")
    )
    point = f"model.layers.{layer}"
    (folder / "config.json").write_text(
        json.dumps(
            {
                "architecture": "jump_relu",
                "hf_hook_point_in": f"{point}.pre_feedforward_layernorm.output",
                "hf_hook_point_out": f"{point}.post_feedforward_layernorm.output",
            }
        )
    )
    return folder


def write_circuit_tracer(
    members: list[Dictionary],
    folder: Path,
    *,
    model_name: str,
    hook_in: str = "mlp.hook_in",
    hook_out: str = "hook_mlp_out",
) -> Path:
    """``members`` (one per layer) as circuit-tracer's ``TranscoderSet.to_safetensors``
    writes them (``layer_{i}.safetensors``: ``W_enc [d_sae, d_in]``, ``W_dec``, ``b_enc``,
    ``b_dec``, ``activation_function.threshold``, ``W_skip [d_out, d_in]``) and the
    ``config.yaml`` its loader reads (TransformerLens hook names)."""
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for layer, d in enumerate(members):
        tensors = {"W_enc": d.w_enc.T, "W_dec": d.w_dec, "b_enc": d.b_enc, "b_dec": d.b_dec}
        if d.threshold is not None:
            tensors["activation_function.threshold"] = d.threshold
        if d.w_skip is not None:
            tensors["W_skip"] = d.w_skip.T
        names.append(f"layer_{layer}.safetensors")
        save_file({k: v.detach().contiguous() for k, v in tensors.items()}, str(folder / names[-1]))
    (folder / "config.yaml").write_text(
        yaml.safe_dump(
            {
                "model_kind": "transcoder_set",
                "model_name": model_name,
                "feature_input_hook": hook_in,
                "feature_output_hook": hook_out,
                "transcoders": names,
            }
        )
    )
    return folder


def transcoder_set(
    lm, folder: Path, *, layout: str = "saelens", skip: bool = True, seed: int = 0
) -> DictionarySet:
    """A random transcoder per layer of ``lm``, written in ``layout`` (``saelens``,
    ``gemma_scope_2`` or ``circuit_tracer``) under ``folder`` and read back with
    ``load_dictionary``."""
    jumprelu = layout != "saelens"
    if layout == "circuit_tracer":
        members = [
            random_transcoder(lm.d_model, layer, skip=skip, jumprelu=jumprelu, seed=seed)
            for layer in range(lm.n_layers)
        ]
        write_circuit_tracer(members, folder, model_name=lm.spec)
        return load_dictionary(folder).requires_grad_(False)
    members = {}
    for layer in range(lm.n_layers):
        d = random_transcoder(lm.d_model, layer, skip=skip, jumprelu=jumprelu, seed=seed)
        where = folder / f"layer_{layer}"
        if layout == "saelens":
            save_saelens(d, where)
        else:
            _gemma_scope_2(d, where, layer)
        members[layer] = load_dictionary(where).requires_grad_(False)
    return DictionarySet(members, layout)


def cross_layer(lm, seed: int = 3) -> CrossLayerTranscoder:
    """A random ReLU cross-layer transcoder on the MLPs' inputs, of the tiny MLPs' size."""
    n, d, width = lm.n_layers, lm.d_model, 48
    g = torch.Generator().manual_seed(seed)
    return CrossLayerTranscoder(
        torch.randn(n, d, width, generator=g) / d**0.5,
        torch.randn(n, width, generator=g) * 0.3,
        [torch.randn(width, n - i, d, generator=g) * 0.003 for i in range(n)],
        torch.zeros(n, d),
        DictionaryConfig("relu", kind="cross_layer_transcoder", hook_in=Hook("mlp_in", None),
                         hook_out=Hook("mlp_out", None)),
    ).requires_grad_(False)  # fmt: skip
