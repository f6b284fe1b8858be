"""Continue a pass from a cached prefix instead of recomputing it.

In a causal decoder nothing at a position before ``start`` depends on what happens at or
after ``start``: an edit whose earliest touched position is ``start`` leaves every layer's
keys and values of positions ``< start`` as they were in an unedited pass. So a batch of
variants that all edit positions ``>= start`` needs the forward only for the tail
``start … seq-1``, attending to the unedited pass's key/value cache for the prefix. Patching
sweeps and attention-suppression sweeps spend most of their time recomputing such
prefixes; this is what lets them skip it.

Coordinates stay absolute for the caller: patch masks and values cover the whole sequence,
site positions and logits positions are sequence positions. :func:`tail_plan` checks that
nothing edits the prefix (an edit there would be silently lost) and translates the
interventions to the tail. Reads return the tail only (their positions must lie in it), and
``ReduceAttention`` functions see ``[batch, heads, tail queries, all keys]`` blocks.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from transformers import DynamicCache

from mechscope.engine.core.sites import Site
from mechscope.engine.core.spans import attention_span
from mechscope.engine.interventions.join import RowLayout
from mechscope.engine.interventions.values import (
    Ablate,
    Edit,
    Gate,
    Intervention,
    Patch,
    Read,
    ReduceAttention,
    Steer,
    SuppressAttention,
)
from mechscope.errors import SiteError, UnsupportedInterventionError
from mechscope.models.loaded import LoadedModel
from mechscope.runs.summary import SummaryRepr


@dataclass(frozen=True)
class KVCache(SummaryRepr):
    """Keys and values of every layer from one pass: ``layers[l] = (keys, values)``, each
    ``[batch, kv_heads, seq, d_head]``. Immutable: a resumed pass builds its own cache."""

    layers: tuple[tuple[torch.Tensor, torch.Tensor], ...]

    @classmethod
    def from_dynamic(cls, cache: DynamicCache) -> KVCache:
        return cls(tuple((layer.keys, layer.values) for layer in cache.layers))

    @property
    def length(self) -> int:
        return int(self.layers[0][0].shape[-2])

    @property
    def batch(self) -> int:
        return int(self.layers[0][0].shape[0])

    def row(self, i: int) -> KVCache:
        """Row ``i`` of a batched pass's cache (batch 1)."""
        return KVCache(tuple((k[i : i + 1], v[i : i + 1]) for k, v in self.layers))

    @classmethod
    def stack(cls, caches: Sequence[KVCache]) -> KVCache:
        """One batched cache from caches of equal length (rows in order)."""
        layers = zip(*(c.layers for c in caches), strict=True)
        return cls(
            tuple((torch.cat([k for k, _ in kv]), torch.cat([v for _, v in kv])) for kv in layers)
        )


@dataclass(frozen=True)
class Resume(SummaryRepr):
    """Continue from ``cache`` (an unedited pass over the same tokens) at position ``start``.

    ``row_starts [rows]``: each row of the final batch edits nothing before its own start
    (``>= start``), so its positions before it are the cache's: they are not computed
    (:mod:`mechscope.engine.interventions.live`)."""

    cache: KVCache
    start: int
    row_starts: torch.Tensor | None = None


@functools.cache
def _cache_name(model_class: type) -> str:
    params = inspect.signature(model_class.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def cache_kwargs(model: torch.nn.Module, cache: Any) -> dict[str, Any]:
    """The keyword a model's forward takes its key/value cache by: ``cache`` where its
    signature has it (transformers 5.24 renamed it and warns on the old name every call),
    else ``past_key_values``."""
    return {_cache_name(type(model)): cache}


def can_resume(lm: LoadedModel, seq: int) -> bool:
    """Whether a prefix cache is exact for ``seq`` tokens: a causal model whose resumed pass
    passed the conformance probe, and whose every layer sees every earlier position up to
    ``seq``: any sliding window, local window or attention chunk
    (:func:`mechscope.engine.core.spans.attention_span`) is longer than the sequence. Longer by
    one at least: transformers' cache of a window of ``w`` keeps the last ``w - 1``
    positions, so a cached pass of ``w`` tokens has already lost its first."""
    if "resume" in lm.refused or not lm.causal:
        return False
    span = attention_span(lm.config)
    return span is None or seq < span


def dynamic_cache(
    lm: LoadedModel,
    resume: Resume,
    batch: int,
    expand: tuple[int, int | torch.Tensor] | None,
    layout: RowLayout | None = None,
) -> DynamicCache:
    """A fresh cache holding the prefix ``[0, start)`` with each layer's rows: the input's
    ``batch`` rows below an ``expand`` layer, the expanded (or gathered) rows from it on,
    and with ``layout`` (rows joining higher up) the rows present at each layer."""
    cache, start = resume.cache, resume.start
    if cache.batch not in (1, batch):
        raise ValueError(f"cache of {cache.batch} rows cannot continue a {batch}-row input")
    data = []
    for layer, (k, v) in enumerate(cache.layers):
        k, v = k[:, :, :start], v[:, :, :start]  # [1|b, kv, start, d_head]
        if k.shape[0] != batch:
            k, v = k.expand(batch, -1, -1, -1), v.expand(batch, -1, -1, -1)
        if layout is not None:
            index = layout.rows_at(layer)
            if index is not None:
                k, v = k.index_select(0, index.to(k.device)), v.index_select(0, index.to(v.device))
        elif expand is not None and layer >= expand[0]:
            rows = expand[1]
            if isinstance(rows, torch.Tensor):
                k, v = k.index_select(0, rows.to(k.device)), v.index_select(0, rows.to(v.device))
            else:
                k, v = k.expand(rows, -1, -1, -1), v.expand(rows, -1, -1, -1)
        data.append((k, v))
    return DynamicCache(ddp_cache_data=data, config=lm.model.config)


@dataclass
class TailPlan:
    """The arguments of a resumed pass, in tail coordinates."""

    input_ids: torch.Tensor  # [batch, seq - start]
    interventions: list[Intervention]
    logits: bool | int | torch.Tensor
    position_ids: torch.Tensor | None
    read_sites: dict[Site, Site]
    """Tail-coordinate site of each ``Read`` → the site the caller named."""

    def rekey(self, reads: dict[Site, torch.Tensor]) -> dict[Site, torch.Tensor]:
        return {self.read_sites.get(site, site): value for site, value in reads.items()}


def tail_plan(
    lm: LoadedModel,
    resume: Resume,
    input_ids: torch.Tensor,  # [batch, seq]
    interventions: Sequence[Intervention],
    logits: bool | int | torch.Tensor,
    position_ids: torch.Tensor | None,
) -> TailPlan:
    """Check a resumed pass and move its interventions to tail coordinates."""
    seq, start = int(input_ids.shape[1]), resume.start
    if not lm.causal:
        raise ValueError("resuming from a prefix cache needs a causal model")
    if not can_resume(lm, seq):
        why = lm.refused.get("resume") or "a layer's attention is limited to fewer positions"
        raise UnsupportedInterventionError(
            f"resume is not supported for {seq} tokens of {lm.spec}: {why}"
        )
    if not 0 <= start < seq or start > resume.cache.length:
        raise ValueError(
            f"resume start {start} must lie in 0..{min(seq, resume.cache.length + 1) - 1}"
        )
    ivs = [_shift(iv, start, seq) for iv in interventions]
    read_sites = {
        new.site: old.site
        for old, new in zip(interventions, ivs, strict=True)
        if isinstance(old, Read) and isinstance(new, Read)
    }
    if isinstance(logits, torch.Tensor):
        logits = _shift_positions(logits.tolist(), start, "logits")
        logits = torch.tensor(logits, dtype=torch.long)
    return TailPlan(
        input_ids=input_ids[:, start:],
        interventions=ivs,
        logits=logits,
        position_ids=None if position_ids is None else position_ids[:, start:],
        read_sites=read_sites,
    )


def _shift_positions(positions: Sequence[int], start: int, what: str) -> tuple[int, ...]:
    bad = [p for p in positions if 0 <= p < start]
    if bad:
        raise SiteError(f"{what} position {bad[0]} lies in the reused prefix (before {start})")
    return tuple(p - start if p >= 0 else p for p in positions)


def _shift_site(site: Site, start: int) -> Site:
    if site.positions is None:
        return site
    return replace(site, positions=_shift_positions(site.positions, start, str(site)))


def _shift(iv: Intervention, start: int, seq: int) -> Intervention:
    if isinstance(iv, Read):
        return Read(_shift_site(iv.site, start), iv.device)
    if isinstance(iv, Patch):
        return _shift_patch(iv, start, seq)
    if isinstance(iv, SuppressAttention):
        spans = torch.as_tensor(iv.spans).reshape(-1, 2)  # [rows, 2] absolute key positions
        early = (spans[:, 1] < start) & (spans[:, 0] < spans[:, 1])
        if bool(early.any()):
            end = int(spans[early, 1].min())
            raise SiteError(f"a suppressed span ends at {end}, inside the reused prefix ({start})")
        return iv
    if isinstance(iv, Steer):
        if iv.site.positions is None and start > 0:
            raise SiteError(f"steering every position of {iv.site} edits the reused prefix")
        return replace(iv, site=_shift_site(iv.site, start))
    if isinstance(iv, Edit):
        if iv.site.positions is None and start > 0:
            raise SiteError(f"an Edit of every position of {iv.site} edits the reused prefix")
        if any(s.positions is not None for s in iv.reads) and start > 0:
            raise SiteError("an Edit reading sites at given positions cannot resume from a prefix")
        return Edit(_shift_site(iv.site, start), iv.fn, iv.reads)
    if isinstance(iv, Gate | ReduceAttention):
        return iv  # per head / whatever the reducer sees
    if isinstance(iv, Ablate):
        raise ValueError("Ablate cannot resume from a prefix cache; patch its value instead")
    raise TypeError(f"not an intervention: {iv!r}")


def _shift_patch(patch: Patch, start: int, seq: int) -> Patch:
    site, value, mask = patch.site, patch.value, patch.mask
    dim = site.pos_dim  # queries of [b, h, q, k] attn_scores; positions of the others
    if mask is not None:
        if bool(mask.narrow(dim, 0, start).any()):
            raise SiteError(f"a patch of {site} edits the reused prefix (before {start})")
        value, mask = _tail(value, start, seq, dim), _tail(mask, start, seq, dim)
        return Patch(site, value, mask, patch.rows)
    if site.positions is not None:
        return Patch(_shift_site(site, start), value, rows=patch.rows)
    if start > 0:
        raise SiteError(f"a whole-sequence patch of {site} edits the reused prefix")
    return patch


def _tail(value: torch.Tensor, start: int, seq: int, dim: int = 1) -> torch.Tensor:
    """A full-sequence value ``[rows, seq, ...]`` (``[rows, heads, seq, keys]`` with
    ``dim=2``) cut to the tail on ``dim`` (broadcast values kept)."""
    if value.dim() > dim and value.shape[dim] == seq:
        return value.narrow(dim, start, seq - start)
    return value
