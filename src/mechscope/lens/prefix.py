"""The prompt tokens a sample's two conditions share, run once.

Two conditions often open the same way: a chat template's system turn, or one condition's
whole prompt followed in the other by more (an agentic transcript after the assisted
request). A causal model computes the same keys and values at those positions in both, so
the shared prefix runs once (:func:`prefix_cache`) and each condition's forward resumes on
top of its cache (:func:`shared_prefix`). Both conditions resume from the same cache, so
they are computed the same way and swapping them swaps their numbers.

It applies only where it is exact: both conditions as run (no padding, default positions)
and a model whose resumed pass is exact at that length
(:func:`mechscope.engine.interventions.prefix.can_resume`); and only where it saves at
least :data:`MIN_SHARED` positions.
"""

from __future__ import annotations

import torch

from mechscope.data.tokens import common_prefix
from mechscope.engine import Engine
from mechscope.engine.interventions.prefix import KVCache, can_resume
from mechscope.lens.positions import ForwardInput
from mechscope.lens.prepare import TokenizedCondition

#: Fewest shared positions worth a separate prefix pass.
MIN_SHARED = 16


def prefix_cache(engine: Engine, ids: list[int]) -> KVCache | None:
    """The key/value cache of ``ids`` (None for no ids)."""
    if not ids:
        return None
    return engine.run(torch.tensor([ids]), logits=False, cache=True).cache


def shared_prefix(
    engine: Engine,
    conditions: tuple[TokenizedCondition, TokenizedCondition],
    inputs: tuple[ForwardInput, ForwardInput],
) -> KVCache | None:
    """The cache of the positions both conditions share before their first read (the
    prediction of the first continuation token, at ``cont_start - 1``), or None where
    sharing is not exact or saves fewer than :data:`MIN_SHARED` positions."""
    plain = all(i.pad == 0 and i.position_ids is None and i.attention_mask is None for i in inputs)
    if not plain or not can_resume(engine.lm, max(i.length for i in inputs)):
        return None
    a, b = conditions
    start = min(common_prefix(a.ids, b.ids), a.cont_start - 1, b.cont_start - 1)
    if start < MIN_SHARED:
        return None
    with torch.inference_mode():
        return prefix_cache(engine, a.ids[:start])
