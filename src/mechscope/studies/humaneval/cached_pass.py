"""The teacher-forced pass of a condition on top of its prompt's key/value cache.

Generation and the teacher-forced analysis read the same prompt. The study runs the common
prefix once (:func:`prefix_cache`), teacher-forces the canonical continuation on top of it
(:func:`tail_pass`: ``resid_post`` of every layer and attention masses at the prediction
positions, as :func:`mechscope.lens.paired.forward_condition` reads them in a full pass),
and the same prefix starts the arm's generation
(:class:`mechscope.engine.generation.generate.Prompt` ``prefix``). Causal attention makes
this exact: nothing before the cache boundary depends on what comes after it;
:func:`mechscope.engine.interventions.prefix.can_resume` says where it holds.
"""

from __future__ import annotations

import torch

from mechscope.engine import Engine, Read, ReduceAttention, Site
from mechscope.engine.interventions.prefix import KVCache, Resume
from mechscope.lens.attention_mass import mass_reducer, stack_masses
from mechscope.lens.paired import ConditionPass


def prefix_cache(engine: Engine, ids: list[int]) -> KVCache | None:
    """The key/value cache of ``ids`` (None for no ids)."""
    if not ids:
        return None
    return engine.run(torch.tensor([ids]), logits=False, cache=True).cache


@torch.inference_mode()
def tail_pass(
    engine: Engine,
    prefix: KVCache | None,
    ids: list[int],
    *,
    q_start: int,
    n_queries: int,
    onehot: torch.Tensor | None,
) -> ConditionPass:
    """Run ``ids`` on top of ``prefix`` (its first positions) and read the queries
    ``q_start .. q_start + n_queries - 1`` (absolute positions, all after the prefix).

    Returns ``resid_post`` of every layer at those positions ``[layers, n, d_model]`` and,
    with ``onehot [keys, segments]`` (keys = ``len(ids)``), the segment attention masses
    ``[layers, heads, n, segments]``.
    """
    lm = engine.lm
    start = 0 if prefix is None else prefix.length
    if q_start < start or q_start + n_queries > len(ids):
        raise ValueError("the queries must lie in the tail, after the cache")
    positions = tuple(range(q_start, q_start + n_queries))
    reads = [Read(Site("resid_post", layer, positions=positions)) for layer in range(lm.n_layers)]
    extra = []
    if onehot is not None:
        extra.append(ReduceAttention(mass_reducer(q_start - start, n_queries, onehot[: len(ids)])))
    resume = Resume(prefix, start) if prefix is not None else None
    out = engine.run(torch.tensor([ids]), [*reads, *extra], logits=False, resume=resume)
    hidden = torch.stack([out[r.site][0] for r in reads])  # [L, n, d_model]
    mass = None
    if onehot is not None:
        mass = stack_masses([out.reductions[layer][0] for layer in range(lm.n_layers)])
    return ConditionPass(hidden, mass)
