"""Attention with the scores and probabilities materialised, one layer at a time, in fp32.

The engine's attention function (:mod:`mechscope.engine.core.attention`) comes here for layers
that read or edit ``attn_scores``, read ``pattern``, reduce probabilities or suppress keys.
Everything a family passes that changes the math is reproduced as its eager attention does
it: soft-capping before the mask (Gemma 2), attention sinks as an extra softmax column that
is dropped afterwards (gpt-oss), a value head size other than the query's (multi-head
latent attention), an additive position bias; sliding windows and padding arrive in the
mask transformers built.
"""

from __future__ import annotations

from typing import Any

import torch


def explicit_attention(
    module: torch.nn.Module,
    query: torch.Tensor,  # [batch, heads, q, d_qk]
    key: torch.Tensor,  # [batch, kv_heads, k, d_qk]
    value: torch.Tensor,  # [batch, kv_heads, k, d_v]
    attention_mask: torch.Tensor | None,  # bool [b|1, 1, q, k] (True = attend) or additive
    work: Any,  # AttentionWork
    scaling: float | None,
    bidirectional: bool,
    cache: dict[Any, Any],
    values: bool = True,
    **kwargs: Any,
) -> tuple[torch.Tensor | None, None]:
    """Attention with the probabilities materialised for one layer: ``[b, q, heads, d_v]``
    (None with ``values=False``: the probabilities only went to the layer's reads).

    The score block is edited in place where no gradient is needed (scale folded into the
    query, masks filled in place), and grouped-query heads share their key/value head through
    a reshape of the query rather than copies of keys and values: at most two
    ``[b, h, q, k]`` blocks exist at once (scores and probabilities, during the softmax).
    """
    batch, n_heads, q_len, d_qk = query.shape
    kv_heads, k_len, d_v = key.shape[1], key.shape[2], value.shape[-1]
    groups = n_heads // kv_heads
    scale = scaling if scaling is not None else d_qk**-0.5
    inplace = not torch.is_grad_enabled()
    # query heads j*groups .. j*groups+groups-1 read kv head j (repeat_interleave order)
    q = (query.float() * scale).reshape(batch, kv_heads, groups * q_len, d_qk)
    scores = torch.matmul(q, key.float().transpose(-1, -2))  # [b, kv, groups*q, k]
    scores = scores.view(batch, n_heads, q_len, k_len)  # [b, h, q, k]
    softcap = kwargs.get("softcap")
    if softcap is not None:
        if inplace:
            scores.div_(softcap).tanh_().mul_(softcap)
        else:
            scores = torch.tanh(scores / softcap) * softcap
    bias = kwargs.get("position_bias")
    if bias is not None:
        scores = scores.add_(bias.float()) if inplace else scores + bias.float()
    blocked = blocked_mask(attention_mask, q_len, k_len, query.device, module, bidirectional, cache)
    neg = torch.finfo(scores.dtype).min
    if attention_mask is not None and attention_mask.dtype != torch.bool:
        add = attention_mask.to(scores.dtype)  # an additive mask is added, as eager does
        scores = scores.add_(add) if inplace else scores + add
    elif blocked is not None:
        scores = scores.masked_fill_(blocked, neg) if inplace else scores.masked_fill(blocked, neg)
    if work.scores is not None:
        edited = work.scores(scores)  # [b, h, q, k] fp32: read / patch attn_scores
        if edited is not scores and blocked is not None:
            edited = edited.masked_fill(blocked, neg)  # an edit never unmasks a key
        scores, inplace = edited, False  # a read may hold this very tensor
    for span, heads in work.suppress:
        block = suppression_block(span, heads, n_heads, q_len, k_len, query.device)
        scores = scores.masked_fill_(block, neg) if inplace else scores.masked_fill(block, neg)
    sinks = kwargs.get("s_aux")
    probs = _softmax(scores, sinks, inplace)  # [b, h, q, k] fp32
    del scores
    for reducer in work.reducers:
        reducer(probs)
    if not values:
        return None, None
    p = probs.to(value.dtype).view(batch, kv_heads, groups * q_len, k_len)
    out = torch.matmul(p, value)  # [b, kv, groups*q, d_v]
    out = out.view(batch, n_heads, q_len, d_v)
    return out.transpose(1, 2).contiguous(), None  # [b, q, h, d_v]


def _softmax(scores: torch.Tensor, sinks: torch.Tensor | None, inplace: bool) -> torch.Tensor:
    """Softmax over keys; with attention sinks (``[heads]`` logits), gpt-oss' softmax over the
    keys and one sink column, the sink's probability dropped (rows then sum to < 1)."""
    if sinks is None:
        return torch.softmax(scores, dim=-1)
    sink = sinks.float().view(1, -1, 1, 1)  # [1, h, 1, 1]
    top = torch.maximum(scores.amax(-1, keepdim=True), sink)  # [b, h, q, 1]
    e = scores.sub_(top).exp_() if inplace else torch.exp(scores - top)
    denom = e.sum(-1, keepdim=True) + torch.exp(sink - top)  # [b, h, q, 1]
    return e.div_(denom) if inplace else e / denom


def blocked_mask(
    mask: torch.Tensor | None,  # bool [b, 1, q, k], True = may attend, or additive float
    q_len: int,
    k_len: int,
    device: torch.device,
    module: torch.nn.Module,
    bidirectional: bool,
    cache: dict[Any, Any],
) -> torch.Tensor | None:
    """Where attention is not allowed: the inverse of the bool mask transformers built (the
    blocked entries of an additive one), or the causal mask SDPA would have applied through
    ``is_causal`` when none was built. Computed once per pass and shape (every layer of one
    kind passes the same mask object)."""
    if mask is not None:
        hit = cache.get("mask")
        if hit is not None and hit[0] is mask:
            return hit[1]
        is_bool = mask.dtype == torch.bool
        blocked = ~mask if is_bool else mask <= torch.finfo(mask.dtype).min / 2
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


def additive_mask(
    mask: torch.Tensor | None,
    query: torch.Tensor,  # [b, h, q, d]
    k_len: int,
    module: torch.nn.Module,
    bidirectional: bool,
    cache: dict[Any, Any],
) -> torch.Tensor | None:
    """The mask as a family's eager attention adds it: 0 where allowed, the dtype's minimum
    where blocked (the engine's masks are bool, which eager code would add as 0/1)."""
    if mask is not None and mask.dtype != torch.bool:
        return mask
    blocked = blocked_mask(mask, query.shape[2], k_len, query.device, module, bidirectional, cache)
    if blocked is None:
        return None
    key = ("additive", query.dtype)
    hit = cache.get(key)
    if hit is None or hit[0] is not blocked:
        add = torch.zeros(blocked.shape, dtype=query.dtype, device=query.device)
        hit = cache[key] = (blocked, add.masked_fill_(blocked, torch.finfo(query.dtype).min))
    return hit[1]


def suppression_block(
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
