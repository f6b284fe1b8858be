"""Derive a model card from the loaded module tree, its config and one traced forward pass.

A researcher's model may belong to a family no built-in card names. Instead of asking them to
write a card, mechscope reads the structure off the model: the decoder layer list is the
module list beside the input embedding, the unembedding is ``get_output_embeddings()``, and
the questions names cannot answer are asked of the model itself on a short input
(:mod:`mechscope.models.trace`): the final norm is the one that makes the last layer's lens
equal the logits; ``attn_out`` and ``mlp_out`` are the two modules whose outputs add up to
what each layer writes to the residual; the output projection is the attention's last
operation; the MLP is parallel when its input does not see the attention's output. Anything
that cannot be found this way raises :class:`CardDerivationError` naming what is missing.
The engine's conformance probe then checks the result before any workflow runs.
"""

from __future__ import annotations

import re
from typing import Any

import torch
from torch import nn

from mechscope.errors import UnsupportedFamilyError
from mechscope.models.card import ModelCard
from mechscope.models.derive_layer import close, layer_parts
from mechscope.models.trace import Trace, probe_ids, trace_forward

#: Config attribute names of the same quantity across families, first match wins.
N_LAYERS = ["num_hidden_layers", "n_layer", "num_layers", "n_layers"]
N_HEADS = ["num_attention_heads", "n_head", "num_heads", "n_heads"]
N_KV_HEADS = ["num_key_value_heads", "num_kv_heads", "n_head_kv", "multi_query_group_num"]
D_MODEL = ["hidden_size", "n_embd", "d_model", "dim"]
HEAD_DIM = ["head_dim", "v_head_dim"]
#: Config attributes with a fixed meaning wherever they appear.
SCALARS = {
    "logit_softcap": "final_logit_softcapping",
    "logit_scale": "logit_scale",
    "logit_divisor": "logits_scaling",
    "residual_scale": "residual_multiplier",
}
_NORM = re.compile(r"norm|ln", re.IGNORECASE)


class CardDerivationError(UnsupportedFamilyError):
    """No card could be derived for a model: the message names the part that is missing."""


def derive_card(model: nn.Module, family: str | None = None) -> ModelCard:
    """A card for ``model`` (a loaded transformers model), found on its module tree and on
    one traced forward pass of a short seeded input."""
    config = model.config
    model_type = str(getattr(config, "model_type", family or "unknown"))
    family = family or model_type
    text_name = _text_config_name(config)
    cfg = getattr(config, text_name) if text_name else config

    def fail(what: str) -> CardDerivationError:
        return CardDerivationError(f"cannot derive a model card for {family!r}: {what}")

    n_layers = _first(cfg, N_LAYERS)
    if n_layers is None:
        raise fail("its config names no layer count")
    paths = {m: p for p, m in model.named_modules()}
    embed = model.get_input_embeddings()
    if embed is None or embed not in paths:
        raise fail("it has no input embedding (get_input_embeddings)")
    head = model.get_output_embeddings()
    if head is None or head not in paths:
        raise fail("it has no output embedding (get_output_embeddings): not a language model")
    layers_path = _layer_list(model, paths[embed], int(n_layers))
    if layers_path is None:
        raise fail(f"no list of {n_layers} decoder layers beside the input embedding")
    layers = model.get_submodule(layers_path)
    d_model = int(_first(cfg, D_MODEL) or embed.weight.shape[1])
    ids = probe_ids(int(head.weight.shape[0]))
    dtype = head.weight.dtype  # the model's own rounding
    try:
        trace = trace_forward(model, ids)
    except Exception as exc:  # the family's own code: say so in one line, keep the cause
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise fail(f"its forward fails on a short input ({type(exc).__name__}: {first})") from exc
    if trace.logits is None:
        raise fail("its forward returns no logits")
    scalars = {key: attr for key, attr in SCALARS.items() if getattr(cfg, attr, None) is not None}
    residual_scale = (
        float(getattr(cfg, scalars["residual_scale"])) if "residual_scale" in scalars else 1.0
    )
    parts = [
        layer_parts(layer, f"{layers_path}.{i}", trace, d_model, residual_scale, dtype)
        for i, layer in enumerate(layers)
    ]
    first = parts[0]
    if isinstance(first, str):
        raise fail(first)
    for i, part in enumerate(parts):
        if isinstance(part, str):
            raise fail(f"layer {i}: {part}")
        for role in ("attn", "o_proj", "attn_out", "mlp_out"):
            if part[role] != first[role]:
                raise fail(f"layer {i} keeps {role} at {part[role]!r}, layer 0 at {first[role]!r}")
    final_norm, tried = _final_norm(
        model, layers_path, paths[embed], trace, head, cfg, scalars, dtype
    )
    if final_norm is None:
        raise fail(f"no norm after the last layer makes its lens equal the logits ({tried})")
    mlp_down = _common(parts, "mlp_down")
    experts = _common(parts, "experts")
    ln1, ln2, mlp_act = (_every(parts, role) for role in ("ln1", "ln2", "mlp_act"))
    return ModelCard(
        family=family,
        model_types=[model_type],
        embed=paths[embed],
        layers=layers_path,
        attn=first["attn"],
        o_proj=first["o_proj"],
        attn_out=first["attn_out"],
        mlp_out=first["mlp_out"],
        mlp_down=mlp_down,
        experts=experts,
        mlp_act=mlp_act,
        ln1=ln1,
        ln2=ln2,
        parallel=any(p["parallel"] for p in parts),  # type: ignore[index]
        final_norm=final_norm,
        unembed=[paths[head]],
        n_heads=_names(cfg, N_HEADS),
        n_kv_heads=_names(cfg, N_KV_HEADS) or _names(cfg, N_HEADS),
        n_layers=_names(cfg, N_LAYERS),
        d_model=_names(cfg, D_MODEL) or ["hidden_size"],
        head_dim=_names(cfg, HEAD_DIM) or ["head_dim"],
        text_config=text_name,
        **scalars,
    )


# --- the pieces ------------------------------------------------------------------------------
def _text_config_name(config: Any) -> str | None:
    text = getattr(config, "text_config", None)
    return "text_config" if text is not None and hasattr(text, "to_dict") else None


def _first(cfg: Any, names: list[str]) -> Any:
    for name in names:
        value = getattr(cfg, name, None)
        if value is not None:
            return value
    return None


def _names(cfg: Any, names: list[str]) -> list[str]:
    return [n for n in names if getattr(cfg, n, None) is not None]


def _layer_list(model: nn.Module, embed_path: str, n_layers: int) -> str | None:
    """The module list of ``n_layers`` identical blocks closest to the input embedding."""
    parent = embed_path.rsplit(".", 1)[0] if "." in embed_path else ""
    found: list[tuple[int, str]] = []
    for path, module in model.named_modules():
        if not isinstance(module, nn.ModuleList) or len(module) != n_layers:
            continue
        if len({type(m).__name__ for m in module}) != 1:
            continue
        sibling = path.rsplit(".", 1)[0] if "." in path else ""
        distance = 0 if sibling == parent else 1 + path.count(".")
        found.append((distance, path))
    return min(found)[1] if found else None


def _final_norm(
    model: nn.Module,
    layers_path: str,
    embed_path: str,
    trace: Trace,
    head: nn.Module,
    cfg: Any,
    scalars: dict[str, str],
    dtype: torch.dtype,
) -> tuple[str | None, str]:
    """The norm beside the layer list that maps the last layer's output to the logits, or
    None and what each candidate did instead."""
    last_path = f"{layers_path}.{len(model.get_submodule(layers_path)) - 1}"
    last = trace.out(last_path)
    if last is None or trace.logits is None:
        return None, "the last layer or the logits were not seen"
    base = layers_path.rsplit(".", 1)[0] if "." in layers_path else ""
    tried: list[str] = []
    for name, module in model.get_submodule(base).named_children():
        path = f"{base}.{name}" if base else name
        if path in (layers_path, embed_path) or not _NORM.search(name + type(module).__name__):
            continue
        inp = trace.inp(path)  # it must read the last layer's output (not the embeddings)
        if inp is None or inp.shape != last.shape or not torch.equal(inp, last):
            tried.append(f"{path} reads something else")
            continue
        with torch.no_grad():
            logits = _scaled(head(module(last)).float(), cfg, scalars)
        if close(logits, trace.logits.float(), dtype):
            return path, ""
        tried.append(f"{path} is off by {float((logits - trace.logits.float()).abs().max()):.3g}")
    return None, "; ".join(tried) or "no module named like a norm"


def _scaled(logits: torch.Tensor, cfg: Any, scalars: dict[str, str]) -> torch.Tensor:
    """What the model does to its logits after the unembedding (scale, divisor, soft-cap)."""
    if "logit_scale" in scalars:
        logits = logits * float(getattr(cfg, scalars["logit_scale"]))
    if "logit_divisor" in scalars:
        logits = logits / float(getattr(cfg, scalars["logit_divisor"]))
    if "logit_softcap" in scalars:
        cap = float(getattr(cfg, scalars["logit_softcap"]))
        logits = torch.tanh(logits / cap) * cap
    return logits


def _every(parts: list[Any], role: str) -> str | None:
    """The path a role has in every layer (None when a layer lacks it or they differ)."""
    found = {p[role] for p in parts}
    return found.pop() if len(found) == 1 else None


def _common(parts: list[Any], role: str) -> str | None:
    """The one path a role has in the layers that have it (None if none does)."""
    found = {p[role] for p in parts if p[role] is not None}
    return found.pop() if len(found) == 1 else None
