"""Attention mass on named segments, reduced while each layer's attention exists.

For a continuation token ``t`` the query is the position that predicts it
(``cont_start + t - 1``). Its attention probabilities over keys are summed per segment:
the user's named segments (e.g. a tool response, the spec), ``continuation`` (the
continuation so far: keys from ``cont_start`` up to the query) and ``rest`` (everything
else, pads included, which get probability 0). Every key belongs to exactly one segment,
so for each layer, head and token the masses sum to 1. The reduction is one
``[heads, T, keys] @ [keys, segments]`` product per layer inside the forward (a
``ReduceAttention``), so the ``[layers × heads × T × T]`` pattern is never stored.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from mechscope.lens.prepare import TokenizedCondition

CONTINUATION = "continuation"
REST = "rest"


def segment_names(cond: TokenizedCondition) -> list[str]:
    """The segments of a condition, in column order: user segments, continuation, rest."""
    return [*cond.segments, CONTINUATION, REST]


def key_onehot(cond: TokenizedCondition, pad: int) -> torch.Tensor:
    """``[keys, segments]`` fp32 one-hot of each key position's segment (``pad`` left pads)."""
    names = segment_names(cond)
    n_keys = pad + cond.length
    owner = np.full(n_keys, names.index(REST), dtype=np.int64)
    for k, name in enumerate(cond.segments):
        owner[cond.segments[name] + pad] = k
    owner[pad + cond.cont_start :] = names.index(CONTINUATION)
    onehot = torch.zeros(n_keys, len(names), dtype=torch.float32)
    onehot[torch.arange(n_keys), torch.from_numpy(owner)] = 1.0
    return onehot  # [keys, segments]


def mass_reducer(
    q_start: int, n_queries: int, onehot: torch.Tensor
) -> Callable[[int, torch.Tensor], torch.Tensor]:
    """A ``ReduceAttention`` function: per head, query ``q_start .. q_start+n-1`` and
    segment, the summed attention probability -> ``[heads, n, segments]`` fp32, left on
    the attention's device (a copy to the host per layer would wait for the GPU inside the
    forward); :func:`stack_masses` moves all layers at once."""
    on_device: dict[torch.device, torch.Tensor] = {}

    def reduce(layer: int, probs: torch.Tensor) -> torch.Tensor:  # probs [b, h, q, k]
        rows = probs[0, :, q_start : q_start + n_queries]  # [h, n, k]
        if rows.device not in on_device:  # once per device (layers may be spread out)
            on_device[rows.device] = onehot.to(rows.device)
        return rows @ on_device[rows.device]  # [h, n, segments]

    return reduce


def stack_masses(per_layer: Sequence[torch.Tensor]) -> np.ndarray:
    """Each layer's ``[heads, n, segments]`` masses -> ``[layers, heads, n, segments]``
    float32 on the host, in one transfer (layers on other devices join the first's)."""
    first = per_layer[0].device
    return torch.stack([m.to(first) for m in per_layer]).cpu().numpy()
