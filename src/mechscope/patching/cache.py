"""One read pass per prompt: the site's activation at every swept layer and the readout
logits. Both directions of a pair reuse the same two caches (the clean run is the source
when denoising and the base when noising)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from mechscope.engine import Engine, Read, Site


@dataclass(frozen=True)
class RunCache:
    """A prompt's activations at one site: ``acts[layer]`` is ``[1, seq, d_model]`` (or
    ``[1, seq, heads, d_head]`` for ``z``); ``logits`` ``[vocab]`` fp32 at its last token."""

    ids: tuple[int, ...]
    acts: dict[int, torch.Tensor]
    logits: torch.Tensor


def read_caches(
    eng: Engine, prompts: Sequence[Sequence[int]], site: str, layers: Sequence[int]
) -> list[RunCache]:
    """Caches for ``prompts``; prompts of equal length share one batched forward."""
    out: list[RunCache | None] = [None] * len(prompts)
    by_len: dict[int, list[int]] = {}
    for i, ids in enumerate(prompts):
        by_len.setdefault(len(ids), []).append(i)
    for length, idx in by_len.items():
        batch = torch.tensor([list(prompts[i]) for i in idx], dtype=torch.long)  # [b, seq]
        sites = [Site(site, layer) for layer in layers]
        res = eng.run(batch, [Read(s) for s in sites], logits=torch.tensor([length - 1]))
        logits = res.logits[:, 0].float()  # [b, vocab]
        for row, i in enumerate(idx):
            acts = {s.layer: res.reads[s][row : row + 1].detach() for s in sites}
            out[i] = RunCache(tuple(prompts[i]), acts, logits[row].detach())  # type: ignore[arg-type]
    return out  # type: ignore[return-value]
