"""Path patching written independently of the engine: plain forward hooks on transformers'
modules, one (sender group, receiver group) at a time, as the IOI paper's code and ARENA's
exercise do it.

- step 1: the clean and the corrupt run, every layer's ``o_proj`` input (``z``) and MLP
  output recorded by hooks;
- step 2: the clean run with ``o_proj``'s input rewritten head by head (senders from the
  corrupt run, every other head above the lowest sender frozen at its clean value, MLPs
  frozen with ``freeze_mlps``); the receivers' ``q_proj`` / ``k_proj`` / ``v_proj``
  outputs recorded (before any q/k norm and rotary embedding, which are fixed functions
  of them, so patching there is the same edit as patching the engine's post-rotary site);
- step 3: the clean run with only those projections' receiver-head slices replaced.

Never touches mechscope's engine: it runs an independent copy of the model.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
from engine_tiny import eager_copy

Head = tuple[int, int]


def independent_copy(lm) -> torch.nn.Module:
    """A copy of ``lm``'s model on transformers' own SDPA attention, without the engine's
    marks: what the reference runs."""
    return eager_copy(lm, "sdpa")


def _layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    return model.get_decoder().layers  # a multimodal wrapper's language model too


def _z_shape(model: torch.nn.Module) -> tuple[int, int]:
    cfg = model.config.get_text_config()
    d_head = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return cfg.num_attention_heads, d_head


@torch.no_grad()
def _run(model, ids: torch.Tensor, hooks: list) -> torch.Tensor:
    try:
        return model(input_ids=ids).logits[:, -1].float()  # [P, vocab]
    finally:
        for h in hooks:
            h.remove()


def cache_run(model, ids: torch.Tensor, mlp_name: str = "mlp"):
    """Every layer's ``o_proj`` input and MLP output, and the last position's logits."""
    zs, mlps, hooks = {}, {}, []
    for layer, block in enumerate(_layers(model)):
        hooks.append(
            block.self_attn.o_proj.register_forward_pre_hook(
                lambda m, args, layer=layer: zs.__setitem__(layer, args[0].detach().clone())
            )
        )
        hooks.append(
            block.get_submodule(mlp_name).register_forward_hook(
                lambda m, a, out, layer=layer: mlps.__setitem__(layer, out.detach().clone())
            )
        )
    logits = _run(model, ids, hooks)
    return zs, mlps, logits


def step_one(model, clean: torch.Tensor, corrupt: torch.Tensor, mlp_name: str = "mlp"):
    """Step 1, shared by every (sender, receiver) cell of the same pairs: the clean run's
    ``z`` and MLP outputs, the corrupt run's ``z``."""
    z_clean, mlp_clean, _ = cache_run(model, clean, mlp_name)
    z_corrupt, _, _ = cache_run(model, corrupt, mlp_name)
    return z_clean, mlp_clean, z_corrupt


def path_patch_reference(
    model,
    clean: torch.Tensor,  # [P, T]
    corrupt: torch.Tensor,
    senders: Sequence[Head],
    receivers: Sequence[Head],
    receiver_input: str,
    *,
    freeze_mlps: bool = False,
    mlp_name: str = "mlp",
    cached: tuple | None = None,
) -> torch.Tensor:
    """``[P, vocab]`` last-position logits of the path-patched clean run. ``cached``: what
    :func:`step_one` returned for these pairs (computed here when None)."""
    n_heads, d_head = _z_shape(model)
    z_clean, mlp_clean, z_corrupt = cached or step_one(model, clean, corrupt, mlp_name)
    low = min(layer for layer, _ in senders)
    blocks = _layers(model)

    def z_hook(layer: int):
        def hook(module, args):
            z = args[0].clone().unflatten(-1, (n_heads, d_head))  # [P, T, H, d]
            clean_z = z_clean[layer].unflatten(-1, (n_heads, d_head))
            corrupt_z = z_corrupt[layer].unflatten(-1, (n_heads, d_head))
            for head in range(n_heads):
                if (layer, head) in senders:
                    z[:, :, head] = corrupt_z[:, :, head]
                elif layer > low:
                    z[:, :, head] = clean_z[:, :, head]
            return (z.flatten(-2),)

        return hook

    hooks = [blocks[layer].self_attn.o_proj.register_forward_pre_hook(z_hook(layer))
             for layer in range(low, len(blocks))]  # fmt: skip
    if freeze_mlps:
        for layer in range(low, len(blocks)):
            mlp = blocks[layer].get_submodule(mlp_name)
            hooks.append(mlp.register_forward_hook(lambda m, a, out, layer=layer: mlp_clean[layer]))
    if receiver_input == "resid_final":
        return _run(model, clean, hooks)
    proj = f"{receiver_input}_proj"
    kept = {}
    targets = [(layer, head) for layer, head in receivers if layer > low]
    for layer in sorted({layer for layer, _ in targets}):
        module = getattr(blocks[layer].self_attn, proj)
        hooks.append(
            module.register_forward_hook(
                lambda m, a, out, layer=layer: kept.__setitem__(layer, out.detach().clone())
            )
        )
    _run(model, clean, hooks)

    def patch_hook(layer: int):
        heads = [h for lay, h in targets if lay == layer]

        def hook(module, args, out):
            new = out.clone().unflatten(-1, (-1, d_head))  # [P, T, heads of this proj, d]
            old = kept[layer].unflatten(-1, (-1, d_head))
            for h in heads:
                new[:, :, h] = old[:, :, h]
            return new.flatten(-2)

        return hook

    patch = [getattr(blocks[layer].self_attn, proj).register_forward_hook(patch_hook(layer))
             for layer in sorted(kept)]  # fmt: skip
    return _run(model, clean, patch)
