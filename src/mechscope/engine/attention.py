"""The engine's attention function, registered with transformers' ``AttentionInterface``.

Layers with no attention work delegate to transformers' SDPA kernel, so the model keeps its
fast path. Layers that must see or edit probabilities (pattern reads, reductions,
suppression) compute attention explicitly, one layer at a time, in fp32: the
``[layers × heads × T × T]`` tensor is never stored.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

ATTN_NAME = "mechscope"


@dataclass
class AttentionWork:
    """What one layer's attention must do in the current pass."""

    suppress: list[tuple[torch.Tensor, torch.Tensor | None]] = field(default_factory=list)
    """(span ``[batch|1, 2]``, head mask ``[heads]`` or None) pairs."""
    reducers: list[Any] = field(default_factory=list)
    """Callables ``fn(probs)`` receiving ``[batch, heads, q, k]`` fp32 probabilities."""

    def needs_explicit(self) -> bool:
        return bool(self.suppress or self.reducers)


@dataclass
class PassState:
    """Attention-side state of the pass in flight (set by the engine, read here)."""

    work: dict[int, AttentionWork]
    padding_mask: torch.Tensor | None  # [batch, seq] 1 = token, 0 = pad
    cache: dict[Any, Any] = field(default_factory=dict)
    """Masks shared by every layer of the pass (built at the first layer that needs them)."""
    rows: torch.Tensor | None = None
    """``expand=(layer, index)``: the input row each expanded row continues."""

    def fit_rows(self, mask: torch.Tensor | None, batch: int) -> torch.Tensor | None:
        """A per-input-row mask ``[B, ...]`` for the ``batch`` rows of a gathered layer."""
        if mask is None or mask.shape[0] in (1, batch) or self.rows is None:
            return mask
        return mask.index_select(0, self.rows.to(mask.device))


ACTIVE: ContextVar[PassState | None] = ContextVar("mechscope_pass", default=None)


def mechscope_attention(
    module: torch.nn.Module,
    query: torch.Tensor,  # [batch, heads, q, d_head]
    key: torch.Tensor,  # [batch, kv_heads, k, d_head]
    value: torch.Tensor,  # [batch, kv_heads, k, d_head]
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    state = ACTIVE.get()
    layer: int | None = getattr(module, "_mechscope_layer", None)
    work = state.work.get(layer) if state is not None and layer is not None else None
    bidirectional = getattr(module, "_mechscope_bidirectional", False)
    if bidirectional:
        attention_mask = _padding_only_mask(state, query)
        kwargs["is_causal"] = False
    if state is not None:
        attention_mask = state.fit_rows(attention_mask, query.shape[0])
    if work is None or not work.needs_explicit():
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    return _explicit_attention(
        module, query, key, value, attention_mask, work, scaling, bidirectional, **kwargs
    )


def _padding_only_mask(state: PassState | None, query: torch.Tensor) -> torch.Tensor | None:
    if state is None or state.padding_mask is None:
        return None
    return state.padding_mask.to(device=query.device, dtype=torch.bool)[:, None, None, :]


def _explicit_attention(
    module: torch.nn.Module,
    query: torch.Tensor,  # [batch, heads, q, d_head]
    key: torch.Tensor,  # [batch, kv_heads, k, d_head]
    value: torch.Tensor,  # [batch, kv_heads, k, d_head]
    attention_mask: torch.Tensor | None,
    work: AttentionWork,
    scaling: float | None,
    bidirectional: bool,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Attention with the probabilities materialised for one layer.

    The score block is edited in place (scale folded into the query, masks filled in place),
    and grouped-query heads share their key/value head through a reshape of the query rather
    than copies of keys and values: at most two ``[b, h, q, k]`` blocks exist at once (scores
    and probabilities, during the softmax).
    """
    batch, n_heads, q_len, d_head = query.shape
    kv_heads, k_len = key.shape[1], key.shape[2]
    groups = n_heads // kv_heads
    scale = scaling if scaling is not None else d_head**-0.5
    # query heads j*groups .. j*groups+groups-1 read kv head j (repeat_interleave order)
    q = (query.float() * scale).reshape(batch, kv_heads, groups * q_len, d_head)
    scores = torch.matmul(q, key.float().transpose(-1, -2))  # [b, kv, groups*q, k]
    scores = scores.view(batch, n_heads, q_len, k_len)  # [b, h, q, k]
    softcap = kwargs.get("softcap")
    if softcap is not None:
        if torch.is_grad_enabled():
            scores = torch.tanh(scores / softcap) * softcap
        else:
            scores.div_(softcap).tanh_().mul_(softcap)
    neg = torch.finfo(scores.dtype).min
    state = ACTIVE.get()
    cache = state.cache if state is not None else {}
    if attention_mask is not None and attention_mask.dtype != torch.bool:
        scores.add_(attention_mask.to(scores.dtype))  # additive mask, broadcast in place
    else:
        blocked = _blocked(attention_mask, q_len, k_len, query.device, module, bidirectional, cache)
        if blocked is not None:
            scores.masked_fill_(blocked, neg)
    for span, heads in work.suppress:
        block = _suppression_block(span, heads, n_heads, q_len, k_len, query.device)
        scores.masked_fill_(block, neg)  # [b, 1|h, q, k] broadcast
    probs = torch.softmax(scores, dim=-1)  # [b, h, q, k] fp32
    del scores
    for reducer in work.reducers:
        reducer(probs)
    p = probs.to(value.dtype).view(batch, kv_heads, groups * q_len, k_len)
    out = torch.matmul(p, value)  # [b, kv, groups*q, d_head]
    out = out.view(batch, n_heads, q_len, d_head)
    return out.transpose(1, 2).contiguous(), None  # [b, q, h, d_head]


def _blocked(
    mask: torch.Tensor | None,  # bool [b|1, 1, q, k], True = may attend
    q_len: int,
    k_len: int,
    device: torch.device,
    module: torch.nn.Module,
    bidirectional: bool,
    cache: dict[Any, Any],
) -> torch.Tensor | None:
    """Where attention is not allowed: the inverse of the bool mask transformers built, or the
    causal mask SDPA would have applied through ``is_causal`` when none was built. Computed
    once per pass and shape (every layer passes the same mask object)."""
    if mask is not None:
        hit = cache.get("mask")
        if hit is not None and hit[0] is mask:
            return hit[1]
        blocked = ~mask
        cache["mask"] = (mask, blocked)  # holding `mask` keeps its identity unique
        return blocked
    causal = getattr(module, "is_causal", True) and not bidirectional
    if not causal or q_len == 1:
        return None
    key = ("causal", q_len, k_len, device)
    if key not in cache:
        offset = k_len - q_len  # queries are the last q_len positions when a cache is in use
        q_idx = torch.arange(q_len, device=device)[:, None] + offset
        k_idx = torch.arange(k_len, device=device)[None, :]
        cache[key] = (k_idx > q_idx)[None, None]  # [1, 1, q, k]
    return cache[key]


def _suppression_block(
    span: torch.Tensor,  # [batch|1, 2]
    heads: torch.Tensor | None,  # [heads] bool
    n_heads: int,
    q_len: int,
    k_len: int,
    device: torch.device,
) -> torch.Tensor:
    """True where a query after the span would attend to a key inside it: ``[b, h, q, k]``."""
    start, end = span[:, 0].to(device), span[:, 1].to(device)  # [b]
    k_idx = torch.arange(k_len, device=device)
    q_idx = torch.arange(k_len - q_len, k_len, device=device)
    in_span = (k_idx[None] >= start[:, None]) & (k_idx[None] < end[:, None])  # [b, k]
    after = q_idx[None] >= end[:, None]  # [b, q]
    block = after[:, None, :, None] & in_span[:, None, None, :]  # [b, 1, q, k]
    if heads is not None:
        block = block & heads.to(device)[None, :, None, None]
    return block


def register() -> None:
    """Make ``attn_implementation="mechscope"`` known to transformers (idempotent)."""
    AttentionInterface.register(ATTN_NAME, mechscope_attention)
    AttentionMaskInterface.register(ATTN_NAME, sdpa_mask)
