"""Sentence × sentence attention of every head, reduced while attention is computed.

For head ``h`` and sentences ``i`` (queries) and ``j`` (keys), the block mean is

    A_h[i, j] = mean over query tokens q ∈ i and key tokens k ∈ j of P_h[q, k],

the mean of the whole token block (masked future keys count as 0, as in the reference
``avg_matrix_by_chunk``). With the assignment matrix ``S [n_sent, seq]``,
``S[i, t] = 1 / |i|`` for the tokens ``t`` of sentence ``i`` (0 elsewhere), this is
``S P_h Sᵀ``: two matrix products applied to each ``[batch, heads, q, k]`` block inside
the engine's attention function (:class:`~mechscope.engine.ReduceAttention`). Only the
``[heads, n_sent, n_sent]`` result of each layer is kept, never the ``T × T`` attention
of all layers.

A sentence with no tokens (a chunk the tokenizer merged away) gives NaN rows and columns
(the reference writes 0 there).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from mechscope.anchors.attention.trace_tokens import TraceTokens
from mechscope.engine import Engine, ReduceAttention
from mechscope.stats.finite import require_finite


def assignment_matrix(
    ranges: Sequence[tuple[int, int]], seq_len: int, *, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """``S [n_sent, seq]``: row ``i`` averages the tokens of sentence ``i`` (zeros if empty)."""
    out = torch.zeros(len(ranges), seq_len, dtype=dtype)
    for i, (start, end) in enumerate(ranges):
        if end > start:
            out[i, start:end] = 1.0 / (end - start)
    return out


def block_means(probs: torch.Tensor, assign: torch.Tensor) -> torch.Tensor:
    """Token-block means of attention: ``[b, h, q, k]`` → ``[b, h, n_sent, n_sent]``."""
    rows = torch.matmul(assign, probs)  # [b, h, n_sent, k]
    return torch.matmul(rows, assign.transpose(0, 1))  # [b, h, n_sent, n_sent]


def empty_sentences(ranges: Sequence[tuple[int, int]]) -> np.ndarray:
    """Which sentences have no token. → [n_sent] bool"""
    return np.array([end <= start for start, end in ranges], dtype=bool)


def sentence_attention(
    eng: Engine, tokens: TraceTokens, *, layers: Sequence[int] | None = None
) -> np.ndarray:
    """Block-mean attention of every head of ``layers`` (default all) over one trace.

    → ``[len(layers), heads, n_sent, n_sent]`` float32, row = attending sentence, column =
    attended sentence.
    """
    lm = eng.lm
    layer_list = list(range(lm.n_layers)) if layers is None else list(layers)
    assign = {lm.device: assignment_matrix(tokens.ranges, tokens.seq_len).to(lm.device)}

    def reduce(layer: int, probs: torch.Tensor) -> torch.Tensor:  # probs [1, h, q, k] fp32
        if probs.device not in assign:  # a model sharded over devices (device_map)
            assign[probs.device] = next(iter(assign.values())).to(probs.device)
        return block_means(probs, assign[probs.device])[0]  # [h, n, n], on the device

    out = eng.run(tokens.input_ids, [ReduceAttention(reduce, layer_list)], logits=False)
    first = out.reductions[layer_list[0]][0].device
    # [L, h, n, n]: one transfer after the pass, not one per layer inside it
    stacked = torch.stack([out.reductions[layer][0].to(first) for layer in layer_list])
    result = stacked.cpu().numpy().astype(np.float32)
    require_finite(result, "sentence attention", sample=tokens.trace_id, layers=layer_list)
    empty = empty_sentences(tokens.ranges)  # NaN below marks "no such sentence", not a fault
    if empty.any():
        result[..., empty, :] = np.nan
        result[..., :, empty] = np.nan
    return result
