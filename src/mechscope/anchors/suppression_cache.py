"""Suppression rows that reuse the unsuppressed prefix instead of recomputing it.

Hiding sentence ``i`` from the queries at or after its end ``e_i`` cannot change anything
before ``e_i``: the residual stream there — hence its keys and values in every layer — is
the unsuppressed one. So a batch of rows whose earliest span end is ``f`` needs the forward
only for positions ``f … T-1``, on top of the base pass's key/value cache cropped to ``f``.
On average that halves the work of a whole-trace suppression sweep.

The engine's ``run`` has no cache argument, so the pass here hands the same attention work
to the engine's registered attention function (the pass state it reads) and calls the
model with ``past_key_values``: the masking code is the engine's, the positions before
the cache boundary are simply not recomputed. Only for causal decoders whose cache keeps
every position (no sliding window shorter than the trace, :func:`can_reuse`); others take
the plain path.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import torch
from transformers import DynamicCache

from mechscope.engine import Engine
from mechscope.engine import attention as engine_attention


def can_reuse(eng: Engine, seq: int) -> bool:
    """Whether the prefix cache is exact: a causal model whose cache keeps every position."""
    window = getattr(eng.lm.model.config, "sliding_window", None)
    return eng.lm.causal and (window is None or window >= seq)


def _work(
    eng: Engine,
    spans: torch.Tensor,  # [rows, 2]
    layers: Sequence[int] | None,
    heads: Sequence[int] | None,
) -> dict[int, engine_attention.AttentionWork]:
    lm = eng.lm
    head_mask = None
    if heads is not None:
        head_mask = torch.zeros(lm.n_heads, dtype=torch.bool)
        for h in heads:
            lm.check_head(h)
            head_mask[h] = True
    work: dict[int, engine_attention.AttentionWork] = defaultdict(engine_attention.AttentionWork)
    for layer in range(lm.n_layers) if layers is None else layers:
        lm.check_layer(layer)
        work[layer].suppress.append((spans.reshape(-1, 2).long(), head_mask))
    return work


def _forward(eng: Engine, work: dict, **kwargs: Any) -> Any:
    """One model call with ``work`` visible to the engine's attention function."""
    token = engine_attention.ACTIVE.set(engine_attention.PassState(work=work, padding_mask=None))
    try:
        with torch.no_grad():
            return eng.lm.model(**kwargs)
    finally:
        engine_attention.ACTIVE.reset(token)


def base_pass(
    eng: Engine,
    input_ids: torch.Tensor,  # [1, seq]
    layers: Sequence[int] | None,
    heads: Sequence[int] | None,
) -> tuple[torch.Tensor, DynamicCache]:
    """Unsuppressed logits ``[seq, vocab]`` and key/value cache, on the explicit attention
    path (an empty span) so suppressed rows continue from identical arithmetic."""
    cache = DynamicCache(config=eng.lm.model.config)
    work = _work(eng, torch.tensor([[0, 0]]), layers, heads)
    out = _forward(
        eng, work, input_ids=input_ids.to(eng.lm.device), past_key_values=cache, use_cache=True
    )
    return out.logits[0], cache


def suppressed_tail_logits(
    eng: Engine,
    input_ids: torch.Tensor,  # [1, seq]
    cache: DynamicCache,
    spans: torch.Tensor,  # [rows, 2]
    first: int,
    layers: Sequence[int] | None,
    heads: Sequence[int] | None,
) -> torch.Tensor:
    """Logits at positions ``first … seq-1`` of every suppressed row: ``[rows, seq-first, V]``.

    ``first`` must not exceed any row's span end (nothing before it may change).
    """
    rows = spans.shape[0]
    if int(spans[:, 1].min()) < first:
        raise ValueError("the cache boundary must not pass a suppressed span's end")
    prefix = copy.deepcopy(cache)
    extra = prefix.get_seq_length() - first
    if extra > 0:
        prefix.crop(-extra)  # keep positions 0 … first-1
    prefix.batch_repeat_interleave(rows)
    tail = input_ids[:, first:].to(eng.lm.device).expand(rows, -1)  # [rows, seq - first]
    out = _forward(
        eng, _work(eng, spans, layers, heads), input_ids=tail, past_key_values=prefix,
        use_cache=True,
    )  # fmt: skip
    return out.logits  # [rows, seq - first, vocab]
