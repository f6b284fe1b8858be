"""``run_with_cache``: one pass that keeps the sites asked for, sized before it runs.

TransformerLens' name, so its users find it: text or ids in, a
:class:`~mechscope.engine.analysis.cache.Cache` out. Sites are chosen by name (a list, one name or a
predicate over :data:`~mechscope.engine.core.sites.SITE_NAMES`; by default every cheap site the
model supports) plus any :class:`~mechscope.engine.core.sites.Site` given (module sites, heads);
``stop_at_layer`` ends the pass early, ``positions`` keeps only some positions, ``device``
moves every read as it is taken. Before any forward work, what the pass and the cache will
hold is counted (:mod:`mechscope.engine.analysis.memory_model`, and one tensor per cached site) and
compared with the memory free on each device: a cache that would not fit is refused in one
line naming what to cut.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import torch

from mechscope.engine.analysis.cache import Cache
from mechscope.engine.analysis.memory_model import FP32, Dims, Pass, pass_bytes
from mechscope.engine.core.inputs import TextOrIds, to_tokens
from mechscope.engine.core.sites import (
    ATTENTION_SITES,
    LAYER_SITES,
    SCALE_SITES,
    SCORE_SITES,
    SITE_NAMES,
    Site,
)
from mechscope.engine.core.tl_names import is_tl_name, tl_names, tl_site
from mechscope.engine.interventions.checks import layer_refusal
from mechscope.engine.interventions.forward import Forward
from mechscope.engine.interventions.values import Intervention, Read
from mechscope.errors import MemoryBudgetError, SiteError
from mechscope.models.loaded import LoadedModel
from mechscope.models.memory import free_bytes, human_bytes, memory_budget
from mechscope.models.placement import check_device

#: What a cache holds by default: every site at a module boundary, cheap to keep. Attention
#: internals (q, k, v, scores, patterns: the explicit fp32 path) and mixture-of-experts sites
#: are cached when named.
DEFAULT_NAMES = tuple(
    n for n in SITE_NAMES if n not in (*ATTENTION_SITES, "router", "expert_out", "logits", "module")
)
#: Share of the free memory a cache may plan to use when no ``memory`` is given.
FREE_SHARE = 0.9
NamesFilter = str | Sequence[str] | Callable[[str], bool] | None


def chosen_names(engine: Forward, names_filter: NamesFilter) -> list[str]:
    """Site names to cache: the defaults the model supports, the names given (each checked
    when the pass runs: a refused one raises), or those a predicate accepts and the model
    supports. TransformerLens' hook names are :func:`hook_sites`'."""
    refused = {**engine.refusals, **engine.lm.refused}
    if names_filter is None:
        return [n for n in DEFAULT_NAMES if n not in refused]
    if callable(names_filter):
        names = [n for n in SITE_NAMES if n not in ("logits", "module") and names_filter(n)]
        return [n for n in names if n not in refused]
    names = [names_filter] if isinstance(names_filter, str) else list(names_filter)
    names = [n for n in names if not (isinstance(n, str) and is_tl_name(n))]
    for name in names:
        if name not in SITE_NAMES or name in ("logits", "module"):
            raise SiteError(
                f"unknown site {name!r} in names_filter: expected one of "
                f"{', '.join(n for n in SITE_NAMES if n not in ('logits', 'module'))}"
            )
    return names


def hook_sites(engine: Forward, names_filter: NamesFilter, stop_at_layer: int | None) -> list[Site]:
    """The sites of the TransformerLens hook names in ``names_filter`` (one layer each:
    ``"blocks.3.hook_resid_post"`` is ``resid_post`` of layer 3), below ``stop_at_layer``; a
    hook name without a counterpart is refused in one line. A predicate that accepts no
    mechscope site name speaks TransformerLens' names (``lambda n: n.endswith("hook_z")``):
    it is asked about every hook name with an exact site
    (:mod:`mechscope.engine.core.tl_names`) instead."""
    lm = engine.lm
    stop = lm.n_layers if stop_at_layer is None else stop_at_layer
    if names_filter is None:
        return []
    if callable(names_filter):
        if any(names_filter(n) for n in SITE_NAMES if n not in ("logits", "module")):
            return []  # a predicate over mechscope's names
        refused = {**engine.refusals, **lm.refused}
        top = range(min(stop + 1, lm.n_layers))
        picked = [s for n, s in tl_names(lm, top) if s.name not in refused and names_filter(n)]
    else:
        names = [names_filter] if isinstance(names_filter, str) else list(names_filter)
        picked = [tl_site(lm, n) for n in names if isinstance(n, str) and is_tl_name(n)]
    return [
        s
        for s in picked
        if s is not None
        and (s.layer is None or s.layer < stop or (s.name == "resid_pre" and s.layer == stop))
        and (s.name != "ln_final_scale" or stop == lm.n_layers)
    ]


def cache_sites(
    n_layers: int, names: Sequence[str], stop_at_layer: int | None, positions: Any
) -> list[Site]:
    """One site per (name, layer) the pass reaches (``resid_pre`` of the stop layer too)."""
    stop = n_layers if stop_at_layer is None else stop_at_layer
    sites = []
    for name in names:
        if name in LAYER_SITES:
            top = stop + 1 if name == "resid_pre" and stop < n_layers else stop
            sites += [Site(name, layer, positions=positions) for layer in range(top)]
        elif stop == n_layers:  # ln_final_scale: after the last layer
            sites.append(Site(name, positions=positions))
    return sites


def supported_per_layer(
    lm: LoadedModel, sites: Sequence[Site]
) -> tuple[list[Site], dict[tuple[str, int | None], str]]:
    """The sites a layer supports, and why each other one is left out. A model mixing dense
    and mixture-of-experts layers has ``mlp_post`` on its dense layers only: the default
    cache keeps it there and says once, in one line, where it is not."""
    kept, left_out = [], {}
    for site in sites:
        why = None if site.layer is None else layer_refusal(lm, site.name, site.layer)
        if why is None:
            kept.append(site)
        else:
            left_out[site.key] = why
    if left_out:
        warnings.warn(_left_out_line(lm, left_out), stacklevel=3)
    return kept, left_out


def _left_out_line(lm: LoadedModel, left_out: dict[tuple[str, int | None], str]) -> str:
    layers: dict[str, list[int]] = {}
    for name, layer in left_out:
        layers.setdefault(name, []).append(int(layer))  # type: ignore[arg-type]
    parts = [f"{name} at layers {', '.join(map(str, ls))}" for name, ls in layers.items()]
    return (
        f"run_with_cache leaves out {'; '.join(parts)} of {lm.spec}: those layers have no "
        "module for it (a model mixing dense and mixture-of-experts layers)"
    )


def site_bytes(dims: Dims, name: str, rows: int, kept: int, seq: int, n_experts: int = 0) -> int:
    """Bytes one cached read of site ``name`` holds (``kept`` positions of ``seq``)."""
    e, d, h, g, k = dims.itemsize, dims.d_model, dims.heads, dims.kv_heads, dims.d_head
    per_token = {
        "z": h * k * e,
        "q": h * k * e,
        "k": g * k * e,
        "v": g * k * e,
        "mlp_pre": dims.d_mlp * e,
        "mlp_post": dims.d_mlp * e,
        "router": max(n_experts, 1) * e,
    }
    if name in SCORE_SITES:
        return rows * h * kept * seq * FP32
    if name in SCALE_SITES:
        return rows * kept * FP32
    return rows * kept * per_token.get(name, d * e)


def feature_bytes(site: Site, rows: int, kept: int, itemsize: int) -> tuple[int, int]:
    """(cache, pass) bytes of a feature site: the cache keeps its activations sparse, a COO
    entry (three int64 indices and a value) per active feature, sized by the features a
    token keeps (``k`` of a top-k rule, the ``l0`` a layout states; the dense width where
    neither is known); the pass holds the dense ``[rows, seq, d_sae]`` activations, their
    edited copy and their change at once."""
    d = site.dictionary
    c = d.config
    width = (
        len(site.index)
        if isinstance(site.index, tuple)
        else 1
        if site.index is not None
        else d.d_sae
    )
    per_token = min(width, int(c.k or c.extra.get("l0") or width))
    cache = rows * kept * per_token * (3 * 8 + itemsize)
    return cache, 3 * rows * kept * d.d_sae * itemsize


def check_memory(
    engine: Forward,
    sites: Sequence[Site],
    rows: int,
    seq: int,
    logits: bool,
    device: torch.device | str | None,
    memory: int | str | None,
) -> dict[str, int]:
    """Predicted bytes of the pass and of the cache; raise when they do not fit."""
    lm = engine.lm
    dims = Dims.of(lm)
    explicit = any(s.name in SCORE_SITES for s in sites)
    kept = lambda s: seq if s.positions is None else len(s.positions)  # noqa: E731
    plain = [s for s in sites if s.name not in ("module", "feature")]
    cache = sum(site_bytes(dims, s.name, rows, kept(s), seq) for s in plain)
    features = [feature_bytes(s, rows, seq, dims.itemsize) for s in sites if s.name == "feature"]
    cache += sum(c for c, _ in features)
    if logits:  # the final norm's input the logits are read out from on access
        cache += site_bytes(dims, "resid_post", rows, seq, seq)
    run = pass_bytes(dims, Pass(rows=rows, tokens=seq, logits=0, explicit=explicit))
    run += max((p for _, p in features), default=0)  # one dictionary encodes at a time
    model_dev = lm.device
    cache_dev = model_dev if device is None else torch.device(device)
    plan = {"pass": run, "cache": cache}
    same = cache_dev.type == model_dev.type and (cache_dev.index or 0) == (model_dev.index or 0)
    needs = (
        [(model_dev, run + cache, "the pass and the cache")]
        if same
        else [
            (model_dev, run, "the pass"),
            (cache_dev, cache, "the cache"),
        ]
    )
    for dev, nbytes, what in needs:
        limit = (
            memory_budget(str(memory), dev)
            if memory is not None
            else int(FREE_SHARE * free_bytes(dev))
        )
        if nbytes > limit:
            raise MemoryBudgetError(
                f"run_with_cache would hold {human_bytes(nbytes)} on {dev} for {what} "
                f"(cache {human_bytes(cache)}, pass {human_bytes(run)}), over the "
                f"{human_bytes(limit)} it may use: cache fewer sites (names_filter), fewer "
                "positions (positions=), stop_at_layer, device='cpu', or "
                "give memory="
            )
    return plan


def run_with_cache(
    engine: Forward,
    inputs: TextOrIds,
    names_filter: NamesFilter = None,
    *,
    sites: Sequence[Site] = (),
    interventions: Sequence[Intervention] = (),
    stop_at_layer: int | None = None,
    positions: Sequence[int] | None = None,
    device: torch.device | str | None = None,
    logits: bool = True,
    attention_mask: torch.Tensor | None = None,
    memory: int | str | None = None,
) -> Cache:
    """Run once and keep the sites asked for (module docstring).

    ``inputs``: a prompt, prompts (left-padded into one batch,
    :mod:`mechscope.engine.core.inputs`) or ids ``[batch, seq]`` (with their
    ``attention_mask``). ``names_filter``: None (every cheap site the model supports:
    :data:`DEFAULT_NAMES`), a site name, a list of names, or a predicate ``fn(name) ->
    bool``; TransformerLens' hook names are read as their sites, one layer each
    (``"blocks.3.attn.hook_pattern"``; a predicate that accepts no site name is asked about
    TransformerLens' names: :func:`hook_sites`). ``sites``: more sites to keep
    (``Site.module(...)``, one head, ...). ``interventions``: edits of the same pass
    (patches, ablations, gates, steers, ``Edit``), applied
    before the cache's reads, which then see the edited values. ``stop_at_layer``: stop at
    the input of that layer (its ``resid_pre`` is kept; no logits). ``positions``: keep only
    these positions of every site (query positions of patterns). ``device``: where reads are
    kept. ``logits``: keep the ``[batch, seq, vocab]`` fp32 logits. ``memory``: what the
    pass and the cache may hold (bytes, ``"8GiB"``, or a share of free memory like ``0.5``;
    default 0.9 of the free memory of each device); a cache over it is refused before any
    forward work (:class:`~mechscope.errors.MemoryBudgetError`). Module sites are not
    counted (their shapes are the module's). Feature sites (``Site.feature(sae)`` in
    ``sites``) are kept as sparse COO tensors ``[batch, seq, d_sae]`` (``cache[site]``;
    ``.to_dense()`` for the dense one), counted by :func:`feature_bytes`.
    """
    lm = engine.lm
    if device is not None:
        check_device(device)
    tokens = to_tokens(lm, inputs, attention_mask)
    pos = None if positions is None else tuple(int(p) for p in positions)
    names = chosen_names(engine, names_filter)
    wanted = cache_sites(lm.n_layers, names, stop_at_layer, pos)
    left_out: dict[tuple[str, int | None], str] = {}
    if names_filter is None or callable(names_filter):  # what the model supports, per layer
        wanted, left_out = supported_per_layer(lm, wanted)
    wanted += [_whole(s, pos) for s in [*hook_sites(engine, names_filter, stop_at_layer), *sites]]
    wanted = list(dict.fromkeys(wanted))  # a site named twice is read once
    rows, seq = (int(n) for n in tokens.ids.shape)
    keep_logits = logits and stop_at_layer in (None, lm.n_layers)
    check_memory(engine, wanted, rows, seq, keep_logits, device, memory)
    final = Read(final_norm_input(lm)) if keep_logits else None  # the logits, on access
    out = engine.run(
        tokens.ids,
        [
            *interventions,
            *(Read(s, device, sparse=s.name == "feature") for s in wanted),
            *([final] if final else []),
        ],
        attention_mask=tokens.attention_mask,
        position_ids=tokens.position_ids,
        logits=False,
        stop_at_layer=stop_at_layer,
    )
    reads = {s.key: out.reads[s] for s in [*wanted, *_user_reads(interventions)] if s in out.reads}
    hidden = None if final is None else out.reads[final.site]  # [batch, seq, d_model]
    return Cache(lm, reads, tokens, hidden, pos, stop_at_layer, device, left_out=left_out)


def final_norm_input(lm: LoadedModel) -> Site:
    """The final norm's input as a module site: what the logits are read out from."""
    norm = lm.final_norm()
    path = next(p for p, m in lm.model.named_modules() if m is norm)
    return Site.module(path, "input")


def _whole(site: Site, positions: tuple[int, ...] | None) -> Site:
    """A site as the cache keeps it: every head (the cache indexes heads), at the cache's
    positions unless the site names its own."""
    keep = site.positions if site.positions is not None else positions
    return replace(site, head=None, index=None, positions=keep)


def _user_reads(interventions: Sequence[Intervention]) -> list[Site]:
    return [iv.site for iv in interventions if isinstance(iv, Read)]
