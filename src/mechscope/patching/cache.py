"""One read pass per prompt: the site's activation at every swept layer, the readout
logits and (where the model allows prefix reuse) the key/value cache. Both directions of a
pair reuse the same two caches (the clean run is the source when denoising and the base
when noising)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch

from mechscope.data.modal_prompt import stack_inputs
from mechscope.engine import Engine, Read, Site
from mechscope.engine.interventions.prefix import KVCache, can_resume


@dataclass(frozen=True)
class RunCache:
    """A prompt's activations at one site: ``acts[layer]`` is ``[1, seq, d_model]`` (or
    ``[1, seq, heads, d_head]`` for ``z``, ``[1, seq, d_sae]`` for a feature site);
    ``logits`` ``[vocab]`` fp32 at its last token; ``kv``: the unedited pass's keys and
    values (None where prefixes cannot be reused)."""

    ids: tuple[int, ...]
    acts: dict[int, torch.Tensor]
    logits: torch.Tensor
    kv: KVCache | None = None


def read_caches(
    eng: Engine,
    prompts: Sequence[Sequence[int]],
    site: str | Callable[[int], Site],
    layers: Sequence[int],
    inputs: Sequence[Mapping[str, torch.Tensor] | None] | None = None,
) -> list[RunCache]:
    """Caches for ``prompts``; prompts of equal length share one batched forward.
    ``site``: a site name, or the site read at each layer (a feature sweep's);
    ``inputs``: each prompt's encoder inputs (a multimodal model's), or None."""
    at = (lambda layer: Site(site, layer)) if isinstance(site, str) else site
    out: list[RunCache | None] = [None] * len(prompts)
    by_len: dict[int, list[int]] = {}
    for i, ids in enumerate(prompts):
        by_len.setdefault(len(ids), []).append(i)
    for length, idx in by_len.items():
        batch = torch.tensor([list(prompts[i]) for i in idx], dtype=torch.long)  # [b, seq]
        sites = [at(layer) for layer in layers]
        keep_kv = can_resume(eng.lm, length)
        media = [inputs[i] for i in idx] if inputs is not None else []
        res = eng.run(
            batch,
            [Read(s) for s in sites],
            logits=torch.tensor([length - 1]),
            cache=keep_kv,
            model_inputs=stack_inputs(media) if media and all(media) else None,  # type: ignore[arg-type]
        )
        logits = res.logits[:, 0].float()  # [b, vocab]
        for row, i in enumerate(idx):
            acts = {
                layer: res.reads[s][row : row + 1].detach()
                for layer, s in zip(layers, sites, strict=True)
            }
            kv = res.cache.row(row) if res.cache is not None else None
            out[i] = RunCache(tuple(prompts[i]), acts, logits[row].detach(), kv)  # type: ignore[arg-type]
    return out  # type: ignore[return-value]
