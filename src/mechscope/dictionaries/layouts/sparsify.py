"""EleutherAI sparsify: ``cfg.json`` + ``sae.safetensors`` in a folder named by its hookpoint.

As ``sparsify.SparseCoder`` saves itself (``save_to_disk``): ``cfg.json`` holds the
``SparseCoderConfig`` fields (``activation`` topk, ``k``, ``num_latents`` or
``expansion_factor``, ``skip_connection``, ``transcode``…) and ``d_in``;
``sae.safetensors`` holds ``encoder.weight [d_sae, d_in]``, ``encoder.bias``,
``W_dec [d_sae, d_in]``, ``b_dec [d_in]`` and, with a skip connection,
``W_skip [d_in, d_in]`` (applied as ``x @ W_skip.T``). An SAE subtracts ``b_dec`` from its
input; a transcoder does not. The folder's name is the hookpoint, a module path below the
base model (``layers.6``, ``layers.6.mlp``), and a ``config.json`` one level up may name
the model.
"""

from __future__ import annotations

from pathlib import Path

from mechscope.dictionaries.dictionary import Dictionary, DictionaryConfig
from mechscope.dictionaries.hooks import from_module_path
from mechscope.dictionaries.layouts.files import need, read_json, read_safetensors
from mechscope.errors import InputError


def read(folder: Path) -> Dictionary:
    cfg = read_json(folder / "cfg.json")
    tensors = read_safetensors(folder / "sae.safetensors")
    w_enc, b_enc, w_dec, b_dec = need(
        tensors, "encoder.weight", "encoder.bias", "W_dec", "b_dec", where=folder
    )
    if cfg.get("activation", "topk") != "topk":
        raise InputError(
            f"a topk sparse coder (mechscope has no {cfg['activation']!r} rule)",
            field=str(folder / "cfg.json"),
        )
    transcode = bool(cfg.get("transcode", False))
    w_skip = tensors.get("W_skip")
    parent = folder.parent / "config.json"
    model = read_json(parent).get("model") if parent.exists() else None
    try:
        hook_in, hook_out = from_module_path(folder.name, model)
    except InputError:
        hook_in = hook_out = None
    kind = "skip_transcoder" if w_skip is not None else "transcoder" if transcode else "sae"
    config = DictionaryConfig(
        activation="topk",
        kind=kind,  # type: ignore[arg-type]
        k=int(cfg["k"]),
        apply_b_dec_to_input=not transcode,
        hook_in=hook_in,
        hook_out=hook_out if transcode else None,
        source="sparsify",
        extra={k: v for k, v in cfg.items() if k != "d_in"},
    )
    return Dictionary(
        w_enc.T.contiguous(),
        b_enc,
        w_dec,
        b_dec,
        config,
        w_skip=None if w_skip is None else w_skip.T.contiguous(),
    )
