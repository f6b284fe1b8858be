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

import inspect
import re
from typing import Any

import torch
from torch import nn

from mechscope.errors import UnsupportedFamilyError
from mechscope.models.card import ModelCard
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
_ATTN = re.compile(r"attn|attention", re.IGNORECASE)
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
        _layer_parts(layer, f"{layers_path}.{i}", trace, d_model, residual_scale)
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
    final_norm = _final_norm(model, layers_path, paths[embed], trace, head, cfg, scalars)
    if final_norm is None:
        raise fail("no norm after the last layer makes its lens equal the logits")
    mlp_down = _common(parts, "mlp_down")
    experts = _common(parts, "experts")
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


def _out_dim(module: nn.Module) -> tuple[int, int] | None:
    """(in, out) features of a linear map (nn.Linear or GPT-2's Conv1D)."""
    if isinstance(module, nn.Linear):
        return module.in_features, module.out_features
    weight = getattr(module, "weight", None)
    if type(module).__name__ == "Conv1D" and isinstance(weight, torch.Tensor):
        return int(weight.shape[0]), int(weight.shape[1])
    return None


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape:
        return False
    a, b = a.double(), b.double()
    tol = 1e-4 if a.dtype == torch.float32 else 3e-2
    scale = max(float(b.abs().max()), 1.0)
    return bool((a - b).abs().max() <= tol * scale)


def _as_tokens(t: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor | None:
    """``t`` as ``[batch, seq, d]`` when it is the same activation flattened over tokens."""
    if t is None:
        return None
    if t.shape == like.shape:
        return t.float()
    if t.dim() == 2 and t.shape[0] == like.shape[0] * like.shape[1] and t.shape[1] == like.shape[2]:
        return t.reshape(like.shape).float()
    return None


def _layer_parts(
    layer: nn.Module, prefix: str, trace: Trace, d_model: int, residual_scale: float
) -> dict[str, Any] | str:
    """Where the sites of one layer live, relative to the layer; or why they cannot be found."""
    call = trace.calls.get(prefix)
    resid_pre, resid_post = (None, None) if call is None else (call.inp, call.out)
    if resid_pre is None or resid_post is None or resid_pre.shape != resid_post.shape:
        return "its input and output are not residual streams of the same shape"
    delta = (resid_post.double() - resid_pre.double()).float()  # [batch, seq, d_model]
    rel = {path: m for path, m in layer.named_modules() if path and path.count(".") < 3}
    outs: dict[str, torch.Tensor] = {}
    for path in rel:
        t = _as_tokens(trace.out(f"{prefix}.{path}"), delta)
        if t is not None:
            outs[path] = t
    order = {p: trace.calls[f"{prefix}.{p}"].order for p in outs}
    o_proj = _o_proj(rel, outs, order, d_model)
    if o_proj is None:
        return (
            "no attention output projection (a linear map into the residual inside a module "
            "named like attention)"
        )
    attn = o_proj.rsplit(".", 1)[0]
    pair = _contribution_pair(outs, order, delta, residual_scale)
    if pair is None:
        return (
            "no two modules' outputs add up to what the layer writes to the residual "
            "(post-norm residual stream or an unknown scale?)"
        )
    attn_out, mlp_out = pair
    experts = next((p for p, m in rel.items() if _is_experts(m)), None)
    mlp_down = None if experts else _mlp_down(rel, outs, attn, mlp_out, d_model)
    mlp_root = (experts or mlp_down or mlp_out).split(".")[0]
    parallel = _is_parallel(trace, prefix, attn.split(".")[0], mlp_root, resid_pre)
    return {
        "attn": attn,
        "o_proj": o_proj,
        "attn_out": attn_out,
        "mlp_out": mlp_out,
        "mlp_down": mlp_down,
        "experts": experts,
        "parallel": parallel,
    }


def _o_proj(
    rel: dict[str, nn.Module], outs: dict[str, torch.Tensor], order: dict[str, int], d_model: int
) -> str | None:
    """The attention block's output projection: the linear map into the residual inside a
    module named like attention whose output is that module's output, or else the last such
    map to run (Bloom's attention adds the residual itself)."""
    found: list[tuple[bool, int, str]] = []
    for path, module in rel.items():
        dims = _out_dim(module)
        if dims is None or dims[1] != d_model or "." not in path or path not in outs:
            continue
        parent = path.rsplit(".", 1)[0]
        named = _ATTN.search(parent.rsplit(".", 1)[-1]) or _ATTN.search(type(rel[parent]).__name__)
        if not named:
            continue
        last = parent in outs and torch.equal(outs[path], outs[parent])
        found.append((last, order[path], path))
    return max(found)[2] if found else None


def _contribution_pair(
    outs: dict[str, torch.Tensor], order: dict[str, int], delta: torch.Tensor, scale: float
) -> tuple[str, str] | None:
    """The two modules (attention side first) whose outputs sum to the layer's residual write.

    Among modules with equal outputs (an attention block and its own output projection) the
    one nearest the layer wins, so sites hook the block, as the built-in cards do.
    """
    if float(delta.abs().max()) == 0:
        return None
    paths = sorted(outs, key=lambda p: (p.count("."), order[p]))
    for i, a in enumerate(paths):
        for b in paths[i + 1 :]:
            if a.startswith(b + ".") or b.startswith(a + "."):
                continue
            if _close((outs[a] + outs[b]) * scale, delta):
                return (a, b) if order[a] < order[b] else (b, a)
    return None


def _is_experts(module: nn.Module) -> bool:
    """A mixture-of-experts bank called as ``experts(hidden, top_k_index, top_k_weights)``."""
    if not type(module).__name__.endswith("Experts"):
        return False
    params = [p for p in inspect.signature(module.forward).parameters if p != "self"]
    return len(params) == 3 and any(p.dim() == 3 for p in module.parameters(recurse=False))


def _mlp_down(
    rel: dict[str, nn.Module], outs: dict[str, torch.Tensor], attn: str, mlp_out: str, d_model: int
) -> str | None:
    """The MLP's down projection: a linear map from a wider space into the residual whose
    output is its parent MLP block's whole output (so its input is every neuron), or the
    ``mlp_out`` module itself when that is such a map (OPT's fc2, Bloom's dense_4h_to_h)."""
    dims = _out_dim(rel[mlp_out])
    if dims is not None and dims[1] == d_model and dims[0] > d_model:
        return mlp_out
    for path, module in rel.items():
        dims = _out_dim(module)
        if dims is None or dims[1] != d_model or dims[0] <= d_model or path.startswith(attn + "."):
            continue
        parent = path.rsplit(".", 1)[0] if "." in path else ""
        if "." in parent:  # inside a part of the MLP block (a shared expert), not all of it
            continue
        if path in outs and parent in outs and torch.equal(outs[path], outs[parent]):
            return path
    return None


def _is_parallel(
    trace: Trace, prefix: str, attn_root: str, mlp_root: str, resid_pre: torch.Tensor
) -> bool:
    """True when the MLP block ran before attention finished, or reads the same normed input
    as the attention block (parallel attention and MLP)."""
    attn_call = trace.calls.get(f"{prefix}.{attn_root}")
    mlp_call = trace.calls.get(f"{prefix}.{mlp_root}")
    if attn_call is None or mlp_call is None or attn_call.inp is None or mlp_call.inp is None:
        return False
    if mlp_call.order < attn_call.order:
        return True
    a = _as_tokens(attn_call.inp, resid_pre)
    m = _as_tokens(mlp_call.inp, resid_pre)
    return a is not None and m is not None and torch.equal(a, m)


def _final_norm(
    model: nn.Module,
    layers_path: str,
    embed_path: str,
    trace: Trace,
    head: nn.Module,
    cfg: Any,
    scalars: dict[str, str],
) -> str | None:
    """The norm beside the layer list that maps the last layer's output to the logits."""
    last_path = f"{layers_path}.{len(model.get_submodule(layers_path)) - 1}"
    last = trace.out(last_path)
    if last is None or trace.logits is None:
        return None
    base = layers_path.rsplit(".", 1)[0] if "." in layers_path else ""
    root = model.get_submodule(base)
    for name, module in root.named_children():
        path = f"{base}.{name}" if base else name
        if path in (layers_path, embed_path) or not _NORM.search(name + type(module).__name__):
            continue
        inp = trace.inp(path)  # it must read the last layer's output (not the embeddings)
        if inp is None or inp.shape != last.shape or not torch.equal(inp, last):
            continue
        with torch.no_grad():
            logits = head(module(last)).float()
        if "logit_scale" in scalars:
            logits = logits * float(getattr(cfg, scalars["logit_scale"]))
        if "logit_divisor" in scalars:
            logits = logits / float(getattr(cfg, scalars["logit_divisor"]))
        if "logit_softcap" in scalars:
            cap = float(getattr(cfg, scalars["logit_softcap"]))
            logits = torch.tanh(logits / cap) * cap
        if _close(logits, trace.logits.float()):
            return path
    return None


def _common(parts: list[Any], role: str) -> str | None:
    """The one path a role has in the layers that have it (None if none does)."""
    found = {p[role] for p in parts if p[role] is not None}
    return found.pop() if len(found) == 1 else None
