"""What both sides of ``bench_graphs.py`` load: the model folder circuit-tracer's
transformers 4.57 reads, and a random JumpReLU skip-transcoder set in Gemma Scope 2's layout.

Why random and not the TopK set trained here (``runs/features-study/gemma3/dictionaries``,
which reads and writes the same points circuit-tracer's Gemma 3 map uses): circuit-tracer's
loaders build JumpReLU or ReLU transcoders only, and its ``TopK`` module (no loader builds
it) keeps the ``k`` largest pre-activations as they are, negative ones too, where SAELens'
and mechscope's TopK pass them through a ReLU: the two sides would not have the same
active features. Gemma Scope 2's layout (``layer_<i>/params.safetensors`` +
``config.json``) is one both read as it is, circuit-tracer through its ``gemma-scope-2``
loader.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from mechscope.dictionaries import Hook
from mechscope.engine import Engine, Read
from mechscope.engine.core.feature_sites import hook_site

#: features per layer (the width of the set trained here)
WIDTH = 1024
#: thresholds in units of a layer's typical pre-activation spread: about 1 % of the
#: features of each layer fire at a token (a trained Gemma Scope 2 transcoder's L0 is of
#: that order), so the graph has about a thousand features on a short prompt
THRESHOLD = 2.5


def model_folder(source: Path, folder: Path) -> Path:
    """``source`` (a folder transformers 5 wrote) as transformers 4.57 reads it: the same
    tokenizer files, linked; the same weights, the tied embedding stored under the name
    4.57 loads (``model.embed_tokens.weight``: 5 keeps only ``lm_head.weight``); the
    config with the rope settings under the names 4.57 reads (``rope_theta``,
    ``rope_local_base_freq``: 5 writes them in ``rope_parameters``, which 4.57 ignores)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        if not (folder / name).exists():
            (folder / name).symlink_to(source / name)
    cfg = json.loads((source / "config.json").read_text())
    weights = load_file(str(source / "model.safetensors"))
    if cfg.get("tie_word_embeddings") and "model.embed_tokens.weight" not in weights:
        weights["model.embed_tokens.weight"] = weights.pop("lm_head.weight")
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    del weights
    rope = cfg.get("rope_parameters") or {}
    if "full_attention" in rope:
        cfg["rope_theta"] = rope["full_attention"]["rope_theta"]
        cfg["rope_local_base_freq"] = rope["sliding_attention"]["rope_theta"]
        cfg["rope_scaling"] = None
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    return folder


def random_set(lm, ids: torch.Tensor, folder: Path, seed: int = 0) -> Path:
    """A random JumpReLU skip transcoder per layer of ``lm``, sized by the prompt's own
    ``mlp_in`` and ``mlp_out`` (positions after the BOS, whose norm is far larger): the
    encoder spreads pre-activations to about unit size, thresholds at :data:`THRESHOLD`
    (± 0.15), the decoder and skip make a reconstruction of the size of the MLP's output
    (so the error nodes are of that size too). Written as ``folder/layer_<i>``."""
    eng = Engine.of(lm)
    sites = {
        (s, layer): hook_site(lm, Hook(s, layer), s)
        for layer in range(lm.n_layers)
        for s in ("mlp_in", "mlp_out")
    }
    read = eng.run(ids.reshape(1, -1), [Read(s) for s in sites.values()], logits=False)
    d, g = lm.d_model, torch.Generator().manual_seed(seed)
    for layer in range(lm.n_layers):
        size_in, size_out = (
            float(read[sites[s, layer]][0, 1:].norm(dim=-1).median()) for s in ("mlp_in", "mlp_out")
        )
        tensors = {
            "w_enc": torch.randn(d, WIDTH, generator=g) / size_in,  # [d_in, width]
            "b_enc": torch.randn(WIDTH, generator=g) * 0.1,
            "threshold": THRESHOLD + (torch.rand(WIDTH, generator=g) - 0.5) * 0.3,
            "w_dec": torch.randn(WIDTH, d, generator=g) * size_out / (10 * d**0.5),
            "b_dec": torch.randn(d, generator=g) * size_out / (100 * d**0.5),
            # [d_in, d_out], applied as x @ A
            "affine_skip_connection": torch.randn(d, d, generator=g)
            * size_out
            / (3 * size_in * d**0.5),
        }
        where = folder / f"layer_{layer}"
        where.mkdir(parents=True, exist_ok=True)
        save_file(
            {k: v.contiguous() for k, v in tensors.items()}, str(where / "params.safetensors")
        )
        point = f"model.layers.{layer}"
        (where / "config.json").write_text(
            json.dumps(
                {
                    "architecture": "jump_relu",
                    "model_name": lm.spec,
                    "hf_hook_point_in": f"{point}.pre_feedforward_layernorm.output",
                    "hf_hook_point_out": f"{point}.post_feedforward_layernorm.output",
                }
            )
        )
    return folder
