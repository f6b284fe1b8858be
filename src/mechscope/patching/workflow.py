"""The patching workflow: pairs in, a typed result (and a run directory) out.

Per pair: one read pass for the clean and the corrupt prompt (batched together when they
have the same length), then for each direction the exact sweep and/or attribution
patching, reusing those two caches. In a run directory each pair is one resumable shard;
the long table, the per-pair baselines and the attribution agreement are written as
Parquet for the report.
"""

from __future__ import annotations

from collections.abc import Sequence

from mechscope.data.pairs import ContrastivePair
from mechscope.engine import Engine
from mechscope.errors import InputError
from mechscope.models.loaded import LoadedModel
from mechscope.patching.attribution import agreement_frame, attribute_pair
from mechscope.patching.cache import read_caches
from mechscope.patching.exact import new_result, sweep_layers, sweep_pair
from mechscope.patching.prepare import prepare_pair
from mechscope.patching.result import (
    PairResult,
    PatchingResult,
    from_shard_payload,
    shard_payload,
)
from mechscope.patching.spec import PatchSpec
from mechscope.progress import track
from mechscope.runs import RunDir, ShardStore, run_sharded, write_table

PART = "patching"


def _check_ids(pairs: Sequence[ContrastivePair]) -> None:
    if not pairs:
        raise InputError("expected at least one pair", field="pairs")
    seen: set[str] = set()
    for p in pairs:
        if p.id in seen:
            raise InputError("expected unique pair ids", sample=p.id, field="id")
        seen.add(p.id)


def patch_pair(
    lm: LoadedModel, pair: ContrastivePair, spec: PatchSpec, *, keep_logits: bool = False
) -> list[PairResult]:
    """Every direction of ``spec`` for one pair (one read pass per prompt)."""
    eng = Engine.of(lm)
    prepared = [prepare_pair(pair, lm.tokenizer, d, spec) for d in spec.directions]
    layers = sweep_layers(eng, spec)
    first = prepared[0]
    caches = read_caches(eng, [first.base_ids, first.source_ids], spec.site, layers)
    by_ids = {c.ids: c for c in caches}
    out = []
    for p in prepared:
        base, source = by_ids[tuple(p.base_ids)], by_ids[tuple(p.source_ids)]
        if spec.exact:
            res = sweep_pair(eng, p, spec, base, source, keep_logits=keep_logits)
        else:
            res = new_result(eng, p, spec, base, source)
        if spec.attribution:
            attribute_pair(eng, p, spec, base, source, res)
        out.append(res)
    return out


def patch_pairs(
    lm: LoadedModel,
    pairs: Sequence[ContrastivePair],
    spec: PatchSpec,
    *,
    keep_logits: bool = False,
    progress: bool = True,
) -> PatchingResult:
    """Run ``spec`` on every pair in memory (no run directory)."""
    _check_ids(pairs)
    for p in pairs:  # fail before any forward on a bad pair
        for d in spec.directions:
            prepare_pair(p, lm.tokenizer, d, spec)
    it = track(pairs, "patching") if progress else pairs
    results = [r for p in it for r in patch_pair(lm, p, spec, keep_logits=keep_logits)]
    return PatchingResult(results, spec.site, spec.granularity)


def run_patching(
    run: RunDir,
    lm: LoadedModel,
    pairs: Sequence[ContrastivePair],
    spec: PatchSpec,
    *,
    name: str = PART,
) -> PatchingResult:
    """Sharded (resumable) :func:`patch_pairs` writing ``tables/<name>.parquet``,
    ``tables/<name>_baselines.parquet`` and ``tables/<name>_agreement.parquet``."""
    _check_ids(pairs)
    for p in pairs:
        for d in spec.directions:
            prepare_pair(p, lm.tokenizer, d, spec)
    store = ShardStore(run, name)

    def one(pair: ContrastivePair) -> dict:
        return shard_payload(patch_pair(lm, pair, spec))

    with run.timed(name):
        payloads = run_sharded(
            store, [(p.id, p) for p in pairs], one, description=f"patching {spec.site}"
        )
    results = [r for payload in payloads for r in from_shard_payload(payload)]
    result = PatchingResult(results, spec.site, spec.granularity)
    write_table(run, name, result.to_frame())
    write_table(run, f"{name}_baselines", result.baselines())
    write_table(run, f"{name}_spec", _spec_frame(spec, lm))
    if spec.attribution and spec.exact:
        write_table(run, f"{name}_agreement", agreement_frame(result, spec.top_k))
    return result


def _spec_frame(spec: PatchSpec, lm: LoadedModel):
    import pandas as pd

    row = {
        k: (str(v) if isinstance(v, tuple | list) or v is None else v)
        for k, v in spec.model_dump().items()
    }
    row.update(model=lm.spec, n_layers=lm.n_layers, n_heads=lm.n_heads)
    return pd.DataFrame([row])
