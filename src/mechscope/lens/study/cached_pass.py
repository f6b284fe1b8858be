"""The teacher-forced pass of a condition on top of its prompt's key/value cache.

Generation and the teacher-forced analysis read the same prompt. The study runs the prompt
once (:func:`prefill`), teacher-forces the canonical continuation on top of that cache
(:func:`tail_pass`: ``resid_post`` of every layer and attention masses at the prediction
positions, as :func:`mechscope.lens.paired.forward_condition` reads them in a full pass),
crops the cache back and decodes from it. Causal attention makes this exact: nothing
before the cache boundary can depend on what comes after it.

The engine's ``run`` takes no cache, so, as the anchors workflow does, the pass hands its
attention work to the engine's registered attention function (the pass state it reads)
and reads ``resid_post`` with forward hooks on the layer modules the model card names.
"""

from __future__ import annotations

from collections import defaultdict

import torch
from transformers import DynamicCache

from mechscope.engine import Engine
from mechscope.engine import attention as engine_attention
from mechscope.engine.prefix import cache_kwargs
from mechscope.lens.attention_mass import mass_reducer, stack_masses
from mechscope.lens.paired import ConditionPass
from mechscope.models.loaded import LoadedModel


def can_share_cache(lm: LoadedModel) -> bool:
    """Whether a prompt cache is exact for this model: causal, no sliding window."""
    window = getattr(lm.model.config, "sliding_window", None)
    return lm.causal and window is None


def prefill(lm: LoadedModel, ids: list[int]) -> DynamicCache:
    """The key/value cache of ``ids`` (an empty cache for no ids)."""
    cache = DynamicCache(config=lm.model.config)
    extend(lm, cache, ids)
    return cache


def crop(cache: DynamicCache, length: int) -> None:
    """Keep the first ``length`` positions of ``cache``."""
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)


@torch.inference_mode()
def extend(lm: LoadedModel, cache: DynamicCache, ids: list[int]) -> None:
    """Append ``ids`` to ``cache`` (positions continue from the cache's length)."""
    if ids:
        lm.model(
            input_ids=torch.tensor([ids], device=lm.device),
            **cache_kwargs(lm.model, cache),
            use_cache=True,
            logits_to_keep=1,
        )


@torch.inference_mode()
def tail_pass(
    engine: Engine,
    cache: DynamicCache,
    ids: list[int],
    *,
    q_start: int,
    n_queries: int,
    onehot: torch.Tensor | None,
) -> ConditionPass:
    """Run ``ids[cache length:]`` on top of ``cache`` and read the queries ``q_start ..
    q_start + n_queries - 1`` (absolute positions, all inside the tail).

    Returns ``resid_post`` of every layer at those positions ``[layers, n, d_model]`` and,
    with ``onehot [keys, segments]`` (keys = ``len(ids)``), the segment attention masses
    ``[layers, heads, n, segments]``. ``cache`` grows by the tail; crop it to reuse it.
    """
    lm = engine.lm
    start = cache.get_seq_length()
    local = q_start - start
    if local < 0 or q_start + n_queries > len(ids):
        raise ValueError("the queries must lie in the tail, after the cache")
    hidden: dict[int, torch.Tensor] = {}
    masses: dict[int, torch.Tensor] = {}
    work: dict[int, engine_attention.AttentionWork] = defaultdict(engine_attention.AttentionWork)
    if onehot is not None:
        reduce = mass_reducer(local, n_queries, onehot[: len(ids)])
        for layer in range(lm.n_layers):
            work[layer].reducers.append(
                lambda probs, layer=layer: masses.__setitem__(layer, reduce(layer, probs))
            )

    def reader(layer: int):
        def hook(module, args, output):
            act = output[0] if isinstance(output, tuple) else output  # [1, tail, d_model]
            hidden[layer] = act[0, local : local + n_queries].detach().clone()

        return hook

    handles = [lm.layer_module(i).register_forward_hook(reader(i)) for i in range(lm.n_layers)]
    token = engine_attention.ACTIVE.set(engine_attention.PassState(work=work, padding_mask=None))
    try:
        lm.model(
            input_ids=torch.tensor([ids[start:]], device=lm.device),
            **cache_kwargs(lm.model, cache),
            use_cache=True,
            logits_to_keep=1,
        )
    finally:
        engine_attention.ACTIVE.reset(token)
        for handle in handles:
            handle.remove()
    stacked = torch.stack([hidden[i] for i in range(lm.n_layers)])  # [L, n, d_model]
    mass = None
    if onehot is not None:
        mass = stack_masses([masses[i] for i in range(lm.n_layers)])  # [L, H, n, S]
    return ConditionPass(stacked, mass)
