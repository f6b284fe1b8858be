"""Activations streamed from the model: one forward pass feeds every dictionary.

A pass reads every site the dictionaries need (``Read``) and stops after the highest layer
among them (``stop_at_layer``: no logits, no layer above); the BOS position is dropped, and
the rest are kept in fp32 on the host. Nothing is written to disk: a training buffer is the
activations of a block of contexts, shuffled, used for the steps of that block and dropped.

Which contexts and which order make up buffer ``b`` is a pure function of the seed and
``b``, so a run resumed from a checkpoint recomputes exactly the buffer it was killed in.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from mechscope.engine import Engine, Read, Site
from mechscope.models.loaded import LoadedModel


def site_layer(site: Site) -> int:
    """The layer a site lives in (a module site's from its path ``…layers.L.…``)."""
    if site.layer is not None:
        return site.layer
    parts = str(site.path).split(".")
    return next(int(p) for p in parts if p.isdigit())


@torch.no_grad()
def activations(
    lm: LoadedModel,
    ids: torch.Tensor,  # [n, context]
    sites: Sequence[Site],
    *,
    forward_batch: int,
    keep_bos: bool = False,
) -> dict[Site, torch.Tensor]:
    """Each site's activations at every token of ``ids`` but the BOS: ``[n · (context −
    1), d]`` fp32 on the host, in row-major order of (context, position)."""
    eng = Engine.of(lm)
    unique = list(dict.fromkeys(sites))
    stop = max(site_layer(s) for s in unique) + 1
    start = 0 if keep_bos else 1
    out: dict[Site, list[torch.Tensor]] = {s: [] for s in unique}
    for i in range(0, ids.shape[0], forward_batch):
        chunk = ids[i : i + forward_batch]
        run = eng.run(chunk, [Read(s) for s in unique], logits=False, stop_at_layer=stop)
        for s in unique:
            act = run[s][:, start:]  # [b, T', d]
            out[s].append(act.reshape(-1, act.shape[-1]).float().cpu())
    return {s: torch.cat(v) for s, v in out.items()}


def buffer_contexts(n_train: int, per_buffer: int, buffer_index: int, seed: int) -> torch.Tensor:
    """The training-context indices of buffer ``buffer_index``: consecutive blocks of an
    epoch's seeded permutation (a new permutation each epoch, when the corpus runs out)."""
    first = buffer_index * per_buffer
    idx = []
    for j in range(first, first + per_buffer):
        epoch, pos = divmod(j, n_train)
        perm = _epoch_order(n_train, seed, epoch)
        idx.append(int(perm[pos]))
    return torch.tensor(idx, dtype=torch.long)


_ORDERS: dict[tuple[int, int, int], torch.Tensor] = {}


def _epoch_order(n: int, seed: int, epoch: int) -> torch.Tensor:
    key = (n, seed, epoch)
    if key not in _ORDERS:
        gen = torch.Generator().manual_seed(seed * 7919 + epoch)
        _ORDERS[key] = torch.randperm(n, generator=gen)
    return _ORDERS[key]


def token_order(n_tokens: int, seed: int, buffer_index: int, pass_index: int) -> torch.Tensor:
    """The shuffled order of a buffer's tokens in one of its passes."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + buffer_index * 101 + pass_index)
    return torch.randperm(n_tokens, generator=gen)
