"""One read pass per prompt: the site's activation at every swept layer, the readout
logits and (where the model allows prefix reuse) the key/value cache. Both directions of a
pair reuse the same two caches (the clean run is the source when denoising and the base
when noising).

A pair's prompts usually differ in a token or two: an IOI corruption changes one name
near the end. Where the model allows prefix reuse, a prompt that shares at least half of
its tokens with one read before it (:data:`SHARED_FRACTION`) is read on top of that one's
key/value cache: only its positions from the first differing token on are computed, and
its activations before them are the other prompt's (a causal model computes the same
values there).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch

from mechscope.data.modal_prompt import stack_inputs
from mechscope.data.tokens import common_prefix
from mechscope.engine import Engine, Read, Site
from mechscope.engine.interventions.prefix import KVCache, Resume, can_resume

#: Least fraction of a prompt's tokens it must share (as a prefix) with a prompt read
#: before it, to be read on top of that one's cache rather than from its first token.
SHARED_FRACTION = 0.5


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
    sites = [at(layer) for layer in layers]
    out: list[RunCache | None] = [None] * len(prompts)
    by_len: dict[int, list[int]] = {}
    for i, ids in enumerate(prompts):
        by_len.setdefault(len(ids), []).append(i)
    for length, idx in by_len.items():
        keep_kv = can_resume(eng.lm, length)
        media = [inputs[i] for i in idx] if inputs is not None else []
        roots, followers = idx, []
        if keep_kv and not any(media):
            roots, followers = shared_prefixes(prompts, idx)
        mine = [inputs[i] for i in roots] if inputs is not None else []
        extra = stack_inputs(mine) if mine and all(mine) else None  # type: ignore[arg-type]
        _read(eng, prompts, roots, sites, layers, out, keep_kv=keep_kv, model_inputs=extra)
        if followers:
            start = min(d for _, _, d in followers)
            stacked = KVCache.stack([out[r].kv for _, r, _ in followers])  # type: ignore[union-attr, misc]
            _read(
                eng, prompts, [i for i, _, _ in followers], sites, layers, out, keep_kv=True,
                resume=Resume(stacked, start), prefix=[out[r] for _, r, _ in followers],
            )  # fmt: skip
    return out  # type: ignore[return-value]


def shared_prefixes(
    prompts: Sequence[Sequence[int]], idx: Sequence[int]
) -> tuple[list[int], list[tuple[int, int, int]]]:
    """Split prompts of one length into those read from their first token and those read
    on top of one of them: ``(roots, [(prompt, root, shared positions)])``. A prompt
    follows the root it shares the longest prefix with, if that is at least
    :data:`SHARED_FRACTION` of it (and never the whole: its last token is read out)."""
    roots: list[int] = []
    followers: list[tuple[int, int, int]] = []
    for i in idx:
        ids = prompts[i]
        best, root = 0, -1
        for r in roots:
            d = common_prefix(ids, prompts[r])
            if d > best:
                best, root = d, r
        best = min(best, len(ids) - 1)
        if root >= 0 and best >= max(1, SHARED_FRACTION * len(ids)):
            followers.append((i, root, best))
        else:
            roots.append(i)
    return roots, followers


def _read(
    eng: Engine,
    prompts: Sequence[Sequence[int]],
    idx: Sequence[int],
    sites: Sequence[Site],
    layers: Sequence[int],
    out: list[RunCache | None],
    *,
    keep_kv: bool,
    model_inputs: Mapping[str, torch.Tensor] | None = None,
    resume: Resume | None = None,
    prefix: Sequence[RunCache | None] = (),
) -> None:
    """One batched read pass over ``prompts[idx]`` (equal lengths) into ``out``; resumed,
    each row's activations before the start are its ``prefix`` cache's."""
    length = len(prompts[idx[0]])
    batch = torch.tensor([list(prompts[i]) for i in idx], dtype=torch.long)  # [b, seq]
    res = eng.run(
        batch,
        [Read(s) for s in sites],
        logits=torch.tensor([length - 1]),
        cache=keep_kv,
        resume=resume,
        model_inputs=model_inputs,
    )
    logits = res.logits[:, 0].float()  # [b, vocab]
    for row, i in enumerate(idx):
        acts = {}
        for layer, s in zip(layers, sites, strict=True):
            act = res.reads[s][row : row + 1].detach()  # [1, seq | tail, ...]
            if resume is not None:  # the shared positions: the other prompt's values
                head = prefix[row].acts[layer][:, : resume.start]  # type: ignore[union-attr]
                act = torch.cat([head, act], dim=1)
            acts[layer] = act
        kv = res.cache.row(row) if res.cache is not None else None
        out[i] = RunCache(tuple(prompts[i]), acts, logits[row].detach(), kv)
