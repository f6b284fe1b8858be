"""The exact patching sweep of one pair in one direction, packed into few forwards.

Every variant (layer, unit, head) is one batch row. Rows are grouped by
:func:`~mechscope.patching.plan.plan_chunks`; a chunk is one ``Engine.run`` on the base
prompt with ``expand=(lowest layer, rows)``, one ``Patch`` per layer with a per-row mask
(a row's mask is True only at its own layer, positions and head), logits requested at the
readout position only, and — in a causal model — only the positions from the chunk's
earliest patched one on, on top of the base run's key/value cache
(``resume``). Variants that cannot change the readout take the base run's numbers without
a forward: with ``skip_identical``, those whose source value equals the base value
exactly (in a causal model: every position before the first differing token), and, in a
causal model, those that patch only positions after the readout.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from mechscope.engine import Engine, Patch, Site
from mechscope.engine.prefix import Resume
from mechscope.engine.sweep import rows_per_chunk
from mechscope.patching.cache import RunCache
from mechscope.patching.metrics import Reference, logit_diff, normalized_effect, readout_metrics
from mechscope.patching.plan import plan_chunks
from mechscope.patching.prepare import PreparedPair, units
from mechscope.patching.result import PairResult
from mechscope.patching.spec import PatchSpec


def sweep_layers(eng: Engine, spec: PatchSpec) -> list[int]:
    layers = list(spec.layers) if spec.layers is not None else list(range(eng.lm.n_layers))
    for layer in layers:
        eng.lm.check_layer(layer)
    return layers


def sweep_heads(eng: Engine, spec: PatchSpec) -> list[int]:
    if not spec.per_head:
        return [-1]
    heads = list(spec.heads) if spec.heads is not None else list(range(eng.lm.n_heads))
    for head in heads:
        eng.lm.check_head(head)
    return heads


def reference(p: PreparedPair, base: RunCache) -> Reference:
    return Reference(base.logits, p.correct_id, p.wrong_id, p.target_id, p.candidate_ids)


def new_result(
    eng: Engine, p: PreparedPair, spec: PatchSpec, base: RunCache, source: RunCache
) -> PairResult:
    """An empty grid for ``p`` with the unpatched runs' numbers filled in."""
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
        out[u, bp] = src[0, sp]
    return out


def _identical(
    p: PreparedPair,
    spec: PatchSpec,
    base: RunCache,
    values: torch.Tensor,
    layer: int,
    heads: Sequence[int],
) -> np.ndarray:
    """``[units, heads]`` True where the patch would write exactly the base value."""
    _, _, base_pos, _ = units(p, spec)
    act = base.acts[layer]  # [1, seq, ...]
    differs = values != act  # [1|U, seq, d] or [1|U, seq, H, dh]
    differs = differs.flatten(3).any(-1) if spec.per_head else differs.any(-1)[..., None]
    out = np.zeros((len(base_pos), len(heads)), dtype=bool)
    for u, bp in enumerate(base_pos):
        row = differs[u if differs.shape[0] > 1 else 0, bp]  # [positions, H|1]
        per_head = row.any(0)  # [H|1]
        for j, h in enumerate(heads):
            out[u, j] = not bool(per_head[h if h >= 0 else 0])
    return out


def sweep_pair(
    eng: Engine,
    p: PreparedPair,
    spec: PatchSpec,
    base: RunCache,
    source: RunCache,
    *,
    keep_logits: bool = False,
) -> PairResult:
    """Exact patching of ``p`` on ``spec``'s grid (``base`` / ``source``: their caches)."""
    res = new_result(eng, p, spec, base, source)
    ref = reference(p, base)
    n_l, n_u, n_h = res.shape
    _, _, base_pos, _ = units(p, spec)
    values = {layer: aligned_values(p, spec, base, source, layer) for layer in res.layers}
    skip = np.zeros((n_l, n_u, n_h), dtype=bool)
    if spec.skip_identical:
        for i, layer in enumerate(res.layers):
            skip[i] = _identical(p, spec, base, values[layer], layer, res.heads)
    starts = [min(pos) for pos in base_pos]  # earliest patched position of each unit
    if eng.lm.causal:  # a patch after the readout cannot reach it
        skip |= np.asarray([s > p.readout for s in starts])[None, :, None]
    variants = [v for v in np.ndindex(n_l, n_u, n_h) if not skip[v]]
    metrics = {k: np.empty((n_l, n_u, n_h), dtype=np.float32) for k in _METRIC_KEYS}
    base_row = readout_metrics(base.logits[None], ref)
    for k in _METRIC_KEYS:
        metrics[k][skip] = float(base_row[k][0])
    kept = None
    if keep_logits:
        kept = base.logits.float().expand(n_l, n_u, n_h, -1).clone().numpy()
    seq = len(p.base_ids)
    max_rows = rows_per_chunk(eng.lm, seq, budget_bytes=spec.budget_bytes)
    row_layers = [res.layers[v[0]] for v in variants]
    row_starts = [starts[v[1]] for v in variants] if base.kv is not None else None
    ids = torch.tensor([p.base_ids], dtype=torch.long)  # [1, seq]
    readout = torch.tensor([p.readout])
    chunks = plan_chunks(row_layers, eng.lm.n_layers, max_rows, row_starts=row_starts, seq=seq)
    for chunk in chunks:
        rows = [variants[i] for i in chunk]
        patches = _chunk_patches(spec, rows, res, base_pos, values, seq)
        low = min(res.layers[v[0]] for v in rows)
        resume = None
        if base.kv is not None:
            resume = Resume(base.kv, min(starts[v[1]] for v in rows))
        out = eng.run(ids, patches, logits=readout, expand=(low, len(rows)), resume=resume)
        logits = out.logits[:, 0].float()  # [rows, vocab]
        got = readout_metrics(logits, ref)
        index = tuple(np.array(rows).T)
        for k in _METRIC_KEYS:
            metrics[k][index] = got[k].cpu().numpy()
        if kept is not None:
            kept[index] = logits.cpu().numpy()
    clean, corrupt = res.baseline["clean_logit_diff"], res.baseline["corrupt_logit_diff"]
    metrics["normalized_effect"] = np.asarray(
        normalized_effect(metrics["logit_diff"].astype(np.float64), clean, corrupt),
        dtype=np.float32,
    )
    res.metrics = metrics
    res.logits = kept
    res.baseline.update(forward_rows=float(len(variants)), skipped=float(skip.sum()))
    return res


_METRIC_KEYS = (
    "logit_diff",
    "delta_logit",
    "target_logit",
    "target_prob",
    "target_logprob",
    "flip_to_target",
    "flip_from_base",
    "kl_to_base",
    "js_to_base",
)


def _chunk_patches(
    spec: PatchSpec,
    rows: list[tuple[int, int, int]],
    res: PairResult,
    base_pos: list[list[int]],
    values: dict[int, torch.Tensor],
    seq: int,
) -> list[Patch]:
    """One masked ``Patch`` per layer present in the chunk."""
    n = len(rows)
    by_layer: dict[int, list[int]] = {}
    for r, (li, _, _) in enumerate(rows):
        by_layer.setdefault(li, []).append(r)
    patches = []
    for li, members in by_layer.items():
        layer = res.layers[li]
        shape = (n, seq, values[layer].shape[2]) if spec.per_head else (n, seq)
        mask = torch.zeros(shape, dtype=torch.bool)
        for r in members:
            _, ui, hi = rows[r]
            pos = base_pos[ui]
            if spec.per_head:
                mask[r, pos, res.heads[hi]] = True
            else:
                mask[r, pos] = True
        value = values[layer]
        if value.shape[0] > 1:  # span grid: each row takes its own unit's value
            unit_of_row = torch.tensor([rows[r][1] for r in range(n)])
            value = value[unit_of_row]  # [rows, seq, ...]
        patches.append(Patch(Site(spec.site, layer), value, mask=mask))
    return patches
