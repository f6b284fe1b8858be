"""The exact patching sweep of one pair in one direction, packed into few forwards.

Every variant (layer, unit, head) is one batch row. Rows are grouped by
:func:`~mechscope.patching.plan.plan_chunks`; a chunk is one ``Engine.run`` on the base
prompt with ``expand=(lowest layer, rows)`` (rows of higher layers joining at their own:
:mod:`~mechscope.patching.chunk_rows`), one ``Patch`` per layer with a per-row mask
(a row's mask is True only at its own layer, positions and head), logits requested at the
readout position only, and — in a causal model — only the positions from the chunk's
earliest patched one on, on top of the base run's key/value cache
(``resume``). Variants that cannot change the readout take the base run's numbers without
a forward: with ``skip_identical``, those whose source value equals the base value
exactly (in a causal model: every position before the first differing token), and, in a
causal model, those that patch only positions after the readout.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from mechscope.data.modal_prompt import stack_inputs
from mechscope.engine import Engine
from mechscope.engine.analysis.finite import refuse_nonfinite
from mechscope.engine.core.unembed import logit_diff
from mechscope.engine.interventions.prefix import KVCache, Resume
from mechscope.errors import SiteError
from mechscope.patching.cache import RunCache
from mechscope.patching.chunk_rows import PairGrid, can_join, chunk_patches, joined_rows
from mechscope.patching.config import PatchSpec
from mechscope.patching.features import check_features, feature_layer, sweep_dictionary
from mechscope.patching.memory import held_bytes, plan_sweep
from mechscope.patching.metrics import (
    READOUT_METRICS,
    Reference,
    normalized_effect,
    readout_metrics,
    readout_tokens,
)
from mechscope.patching.prepare import PreparedPair, units
from mechscope.patching.result import PairResult


def sweep_layers(eng: Engine, spec: PatchSpec) -> list[int]:
    """The swept layers (a feature sweep: its dictionary's one layer)."""
    if spec.site == "feature":
        layer = feature_layer(sweep_dictionary(spec))
        eng.lm.check_layer(layer)
        return [layer]
    layers = list(spec.layers) if spec.layers is not None else list(range(eng.lm.n_layers))
    for layer in layers:
        eng.lm.check_layer(layer)
    return layers


def sweep_heads(eng: Engine, spec: PatchSpec) -> list[int]:
    """The swept heads ([-1]: none; a feature sweep: its features)."""
    if spec.site == "feature":
        return check_features(spec)
    if not spec.per_head:
        return [-1]
    lm = eng.lm
    n = lm.n_kv_heads if spec.site in ("k", "v") else lm.n_heads  # k/v: key/value heads
    heads = list(spec.heads) if spec.heads is not None else list(range(n))
    for head in heads:
        if not 0 <= head < n:
            raise SiteError(f"head {head} out of range: valid heads are 0..{n - 1}")
    return heads


def reference(p: PreparedPair, base: RunCache) -> Reference:
    return Reference(base.logits, p.correct_id, p.wrong_id, p.target_id, p.candidate_ids)


def new_result(
    eng: Engine, p: PreparedPair, spec: PatchSpec, base: RunCache, source: RunCache
) -> PairResult:
    """An empty grid for ``p`` with the unpatched runs' numbers filled in; a base or source
    run whose logits are not finite is refused, naming the pair and the first layer whose
    output is not finite."""
    for name, cache, ids, inputs in (
        ("base", base, p.base_ids, p.base_inputs),
        ("source", source, p.source_ids, p.source_inputs),
    ):
        if not bool(torch.isfinite(cache.logits).all()):
            refuse_nonfinite(
                eng,
                torch.tensor([ids]),
                f"the {name} run's logits",
                sample=p.id,
                model_inputs=inputs,
            )
    labels, positions, _, _ = units(p, spec)
    ref = reference(p, base)
    base_m = {k: float(v[0]) for k, v in readout_metrics(base.logits[None], ref).items()}
    src_ld = float(logit_diff(source.logits, p.correct_id, p.wrong_id))
    clean_ld, corrupt_ld = (src_ld, base_m["logit_diff"])
    if p.direction == "noising":
        clean_ld, corrupt_ld = corrupt_ld, clean_ld
    baseline = {
        f"base_{k}": v
        for k, v in base_m.items()
        if k in ("logit_diff", "target_logit", "target_prob", "target_logprob")
    }
    baseline.update(
        source_logit_diff=src_ld,
        clean_logit_diff=clean_ld,
        corrupt_logit_diff=corrupt_ld,
        base_prediction=float(ref.base_prediction),
        source_prediction=float(ref.to_vocab(ref.view(source.logits).argmax(-1))),
        target_id=float(p.target_id),
        correct_id=float(p.correct_id),
        wrong_id=float(p.wrong_id),
        readout=float(p.readout),
    )
    return PairResult(
        pair_id=p.id,
        direction=p.direction,
        site=spec.site,
        granularity=spec.granularity,
        layers=sweep_layers(eng, spec),
        units=labels,
        positions=positions,
        heads=sweep_heads(eng, spec),
        baseline=baseline,
        tokens=list(p.base_tokens),
        roles=_roles(p, labels, positions),
    )


def _roles(p: PreparedPair, labels: list[str], positions: list[int]) -> list[str]:
    """Per unit, the named span whose last base token it is (span units: their name)."""
    ends = {rng[0][1] - 1: name for name, rng in p.spans.items()}
    return [
        ends.get(q, "") if q >= 0 else label for label, q in zip(labels, positions, strict=True)
    ]


def aligned_values(
    p: PreparedPair, spec: PatchSpec, base: RunCache, source: RunCache, layer: int
) -> torch.Tensor:
    """The value each unit writes, in base coordinates.

    Same-length grids (position, all): the source activation itself ``[1, seq, ...]``.
    Span grids: ``[units, seq, ...]``, the base activation with each unit's span replaced
    by the source's aligned span (a row only reads its own unit's positions).
    """
    src = source.acts[layer]
    if spec.granularity != "span":
        return src
    _, _, base_pos, src_pos = units(p, spec)
    out = base.acts[layer].repeat(len(base_pos), *([1] * (src.dim() - 1)))  # [U, seq, ...]
    for u, (bp, sp) in enumerate(zip(base_pos, src_pos, strict=True)):
        out[u, bp] = src[0, sp] if len(bp) == len(sp) else pool_positions(src[0, sp], len(bp))
    return out


def pool_positions(x: torch.Tensor, n: int) -> torch.Tensor:
    """``x [m, ...]`` average-pooled along its first axis to ``[n, ...]`` (adaptive pooling:
    position ``i`` averages the source positions its ``1/n`` share of the span covers); the
    ``pool`` span policy for spans of different lengths."""
    flat = x.reshape(x.shape[0], -1).T[None].float()  # [1, features, m]
    pooled = torch.nn.functional.adaptive_avg_pool1d(flat, n)  # [1, features, n]
    return pooled[0].T.reshape(n, *x.shape[1:]).to(x.dtype)


def unit_positions(base_pos: Sequence[Sequence[int]], seq: int) -> torch.Tensor:
    """``[units, seq]`` bool: which base positions each unit patches (built on the host)."""
    member = torch.zeros(len(base_pos), seq, dtype=torch.bool)
    for u, bp in enumerate(base_pos):
        member[u, list(bp)] = True
    return member


def _identical(
    p: PreparedPair,
    spec: PatchSpec,
    base: RunCache,
    values: dict[int, torch.Tensor],
    layers: Sequence[int],
    heads: Sequence[int],
) -> np.ndarray:
    """``[layers, units, heads]`` True where the patch would write exactly the base value.

    Computed on the activations' device for every layer, then moved to the host once.
    """
    _, _, base_pos, _ = units(p, spec)
    act0 = base.acts[layers[0]]  # [1, seq, ...]
    member = unit_positions(base_pos, act0.shape[1]).to(act0.device)  # [U, seq]
    head_index = torch.tensor([h if h >= 0 else 0 for h in heads], device=act0.device)
    same = []
    for layer in layers:
        differs = values[layer] != base.acts[layer]  # [1|U, seq, d] or [1|U, seq, H, dh]
        if spec.site != "feature":  # a feature site's last axis is its head axis
            differs = differs.flatten(3).any(-1) if spec.per_head else differs.any(-1)[..., None]
        hit = (member[:, :, None] & differs).any(1)  # [U, H|1]: any own position differs
        same.append(~hit[:, head_index])  # [U, heads]
    return torch.stack(same).cpu().numpy()  # [layers, U, heads]


def _grid(
    eng: Engine, spec: PatchSpec, p: PreparedPair, base: RunCache, source: RunCache, keep: bool
) -> PairGrid:
    res = new_result(eng, p, spec, base, source)
    ref = reference(p, base)
    n_l, n_u, n_h = res.shape
    _, _, base_pos, _ = units(p, spec)
    values = {layer: aligned_values(p, spec, base, source, layer) for layer in res.layers}
    skip = np.zeros((n_l, n_u, n_h), dtype=bool)
    if spec.skip_identical:
        skip[:] = _identical(p, spec, base, values, res.layers, res.heads)
    starts = [min(pos) for pos in base_pos]
    if eng.lm.causal:  # a patch after the readout cannot reach it
        skip |= np.asarray([s > p.readout for s in starts])[None, :, None]
    names = readout_names(spec)
    metrics = {k: np.empty((n_l, n_u, n_h), dtype=np.float32) for k in names}
    base_row = readout_metrics(base.logits[None], ref, names)
    for k in names:
        metrics[k][skip] = float(base_row[k][0])
    kept = None
    if keep:
        row = base.logits.float().cpu().numpy()  # [vocab]
        kept = np.broadcast_to(row, (n_l, n_u, n_h, row.size)).copy()
    return PairGrid(p, res, ref, base, values, base_pos, starts, skip, metrics, kept)


def sweep_pairs(
    eng: Engine,
    items: Sequence[tuple[PreparedPair, RunCache, RunCache]],
    spec: PatchSpec,
    *,
    keep_logits: bool = False,
    advance: Callable[[int], None] | None = None,
) -> list[PairResult]:
    """Exact patching of several pairs; pairs whose base prompts have the same length share
    forwards (a chunk gathers the rows of every pair it holds: ``expand=(layer, index)``),
    so short prompts fill the batch instead of paying a forward's fixed cost each.
    ``advance(n)`` is told of each ``n`` grid cells done (skipped ones at once)."""
    grids = [_grid(eng, spec, p, base, source, keep_logits) for p, base, source in items]
    if advance is not None:
        advance(int(sum(g.skip.sum() for g in grids)))
    by_len: dict[tuple[int, int], list[int]] = {}  # a family whose attention runs in its own
    for j, g in enumerate(grids):  # code cannot gather rows of several pairs: one pair a sweep
        by_len.setdefault((len(g.p.base_ids), 0 if eng.attention_reached else j), []).append(j)
    held = _held(eng, spec, grids)
    for (seq, _), members in by_len.items():
        _sweep_same_length(eng, spec, [grids[j] for j in members], seq, held, advance)
    out = []
    for g in grids:
        clean, corrupt = g.res.baseline["clean_logit_diff"], g.res.baseline["corrupt_logit_diff"]
        if "normalized_effect" in spec.metric_names:
            g.metrics["normalized_effect"] = np.asarray(
                normalized_effect(g.metrics["logit_diff"].astype(np.float64), clean, corrupt),
                dtype=np.float32,
            )
        g.res.metrics, g.res.logits = g.metrics, g.kept
        g.res.baseline.update(forward_rows=float((~g.skip).sum()), skipped=float(g.skip.sum()))
        out.append(g.res)
    return out


def _held(eng: Engine, spec: PatchSpec, grids: list[PairGrid]) -> int:
    """Bytes the group's read caches and kept logits hold while the sweep runs."""
    prompts = {tuple(ids) for g in grids for ids in (g.p.base_ids, g.p.source_ids)}
    seqs = [len(ids) for ids in prompts]
    kv = all(g.base.kv is not None for g in grids)
    kept = sum(g.kept.nbytes for g in grids if g.kept is not None)
    return held_bytes(eng.lm, seqs, spec, kv=kv) + kept


def _sweep_same_length(
    eng: Engine,
    spec: PatchSpec,
    grids: list[PairGrid],
    seq: int,
    held: int,
    advance: Callable[[int], None] | None = None,
) -> None:
    """Fill the grids of pairs whose base prompts have ``seq`` tokens (readout: the last);
    ``held``: bytes the group holds meanwhile (chunks are sized beside them)."""
    variants = [
        (j, *v) for j, g in enumerate(grids) for v in np.ndindex(g.skip.shape) if not g.skip[v]
    ]  # (pair, layer index, unit, head)
    if not variants:
        return
    reuse = all(g.base.kv is not None for g in grids)
    row_layers = [grids[j].res.layers[li] for j, li, _, _ in variants]
    row_starts = [grids[j].starts[u] for j, _, u, _ in variants] if reuse else None
    row_pairs = [j for j, *_ in variants]
    kept = any(g.kept is not None for g in grids)
    readout = torch.tensor([seq - 1])
    names = readout_names(spec)
    tokens = None if kept else readout_tokens([g.ref for g in grids], names)
    vocab = None if tokens is None else torch.tensor(tokens)  # [ids]: a few columns
    refs = [g.ref if tokens is None else g.ref.narrow(tokens) for g in grids]
    joins = can_join(spec, grids)
    live = reuse and eng.attention_reached  # rows resume at their own starts
    chunks = plan_sweep(
        eng.lm,
        spec,
        seq,
        row_layers,
        row_pairs,
        row_starts,
        held=held,
        keep_logits=kept,
        joins=joins,
        live=live,
        readout=None if tokens is None else len(tokens),
    )
    for chunk in chunks:
        chunk = sorted(chunk, key=lambda i: row_layers[i])  # joined rows follow, layer by layer
        rows = [variants[i] for i in chunk]
        pairs = sorted({j for j, *_ in rows})
        slot = {j: k for k, j in enumerate(pairs)}
        ids = torch.tensor([grids[j].p.base_ids for j in pairs], dtype=torch.long)  # [B, seq]
        index = torch.tensor([slot[j] for j, *_ in rows])  # [rows]: each row's input row
        low = min(row_layers[i] for i in chunk)
        expand, join = (low, index), []
        if joins:
            expand, join = joined_rows(rows, grids, slot, low)
        resume = None
        if reuse:
            first = min(grids[j].starts[u] for j, _, u, _ in rows)
            own = torch.tensor([grids[j].starts[u] for j, _, u, _ in rows]) if live else None
            resume = Resume(KVCache.stack([grids[j].base.kv for j in pairs]), first, own)
        patches = chunk_patches(spec, rows, grids, seq, joined=joins)
        media = [grids[j].p.base_inputs for j in pairs]  # multimodal: each input row's own
        extra = stack_inputs(media) if all(media) else None  # type: ignore[arg-type]
        out = eng.run(
            ids,
            patches,
            logits=readout,
            expand=expand,
            join=join,
            resume=resume,
            model_inputs=extra,
            vocab=vocab,
        )
        logits = out.logits[:, 0].float()  # [rows, vocab | ids]
        keep = any(grids[j].kept is not None for j in pairs)
        mine = {j: [r for r, row in enumerate(rows) if row[0] == j] for j in pairs}
        parts = [  # [rows of j, metrics] per pair, all on the device
            torch.stack(list(readout_metrics(logits[mine[j]], refs[j], names).values()), dim=1)
            for j in pairs
        ]
        order = [r for j in pairs for r in mine[j]]
        block = torch.cat(parts)  # [rows, metrics] in ``order``
        if keep:
            block = torch.cat([block, logits[order]], dim=1)  # [rows, metrics + vocab]
        host = block.cpu().numpy()  # the chunk's one transfer
        at = 0
        for j in pairs:
            n_mine, cells = len(mine[j]), tuple(np.array([rows[r][1:] for r in mine[j]]).T)
            for i, k in enumerate(names):
                grids[j].metrics[k][cells] = host[at : at + n_mine, i]
            if grids[j].kept is not None:
                grids[j].kept[cells] = host[at : at + n_mine, len(names) :]
            at += n_mine
        if advance is not None:
            advance(len(rows))


def readout_names(spec: PatchSpec) -> tuple[str, ...]:
    """The metrics a sweep reads off each patched pass's logits (:data:`READOUT_METRICS`
    it asks for)."""
    return tuple(m for m in READOUT_METRICS if m in spec.metric_names)
