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
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    work: AttentionWork,
    scaling: float | None,
    bidirectional: bool,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    n_heads, q_len, k_len = query.shape[1], query.shape[2], key.shape[2]
    groups = n_heads // key.shape[1]
    if groups > 1:  # grouped-query attention: each kv head serves `groups` query heads
        key = key.repeat_interleave(groups, dim=1)
        value = value.repeat_interleave(groups, dim=1)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    scores = torch.matmul(query.float(), key.float().transpose(-1, -2)) * scale  # [b, h, q, k]
    softcap = kwargs.get("softcap")
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    neg = torch.finfo(scores.dtype).min
    allowed = _allowed(attention_mask, q_len, k_len, query.device, module, bidirectional)
    if allowed is not None and allowed.dtype != torch.bool:
        scores = scores + allowed.float()
        allowed = None
    for span, heads in work.suppress:
        blocked = _suppression_block(span, heads, n_heads, q_len, k_len, query.device)
        scores = scores.masked_fill(blocked, neg)
    if allowed is not None:
        scores = scores.masked_fill(~allowed, neg)
    probs = torch.softmax(scores, dim=-1)  # [b, h, q, k] fp32
    for reducer in work.reducers:
        reducer(probs)
    out = torch.matmul(probs.to(value.dtype), value)  # [b, h, q, d_head]
    return out.transpose(1, 2).contiguous(), None


def _allowed(
    mask: torch.Tensor | None,
    q_len: int,
    k_len: int,
    device: torch.device,
    module: torch.nn.Module,
    bidirectional: bool,
) -> torch.Tensor | None:
    """The mask as given (bool: True = may attend; float: additive), or the causal mask that
    SDPA would have applied through ``is_causal`` when transformers skipped building one."""
    if mask is not None:
        return mask
    causal = getattr(module, "is_causal", True) and not bidirectional
    if not causal or q_len == 1:
        return None
    offset = k_len - q_len  # queries are the last q_len positions when a cache is in use
    q_idx = torch.arange(q_len, device=device)[:, None] + offset
    k_idx = torch.arange(k_len, device=device)[None, :]
    return (k_idx <= q_idx)[None, None]  # [1, 1, q, k]


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
