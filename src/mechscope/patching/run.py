"""The patching workflow: pairs in, a typed result (and a run directory) out.

Pairs go in groups (up to :data:`GROUP_PAIRS`): one read pass for all their prompts
(batched by length), then for each direction one exact sweep in which pairs of equal
length share forwards, and/or attribution patching, reusing those caches. In a run
directory each pair is one shard, written as soon as its group is done;
the long table, the per-pair baselines and the attribution agreement are written as
Parquet for the report.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from mechscope.data.pairs import ContrastivePair, TokenizedPair
from mechscope.engine import Engine
from mechscope.engine.interventions.prefix import can_resume
from mechscope.errors import InputError
from mechscope.models.loaded import LoadedModel
from mechscope.patching.attribution_patching import agreement_frame, attribute_pair
from mechscope.patching.cache import read_caches
from mechscope.patching.config import PatchSpec
from mechscope.patching.exact import new_result, sweep_heads, sweep_layers, sweep_pairs
from mechscope.patching.features import choose_features, feature_label, patch_site
from mechscope.patching.memory import fit_group
from mechscope.patching.modal import prepare_any, prompt_length
from mechscope.patching.modal_pairs import ModalPair
from mechscope.patching.prepare import PreparedPair, units
from mechscope.patching.result import (
    PairResult,
    PatchingResult,
    flag_undefined_effects,
    from_shard_payload,
    shard_payload,
)
from mechscope.progress import make_progress
from mechscope.runs import RunDir, ShardStore, write_table
from mechscope.runs.content_key import content_key
from mechscope.runs.executor import shared_work_done
from mechscope.runs.shards import report_reuse
from mechscope.runs.shared_work import claimed_loop

#: A text pair, or a pair of multimodal samples (:mod:`mechscope.patching.modal`).
AnyPair = ContrastivePair | ModalPair | TokenizedPair
PART = "patching"
#: Pairs swept together: equal-length pairs share forwards, which pays for short prompts.
GROUP_PAIRS = 16


def check_pair_ids(pairs: Sequence[AnyPair]) -> None:
    """One line for an empty list or a repeated pair id."""
    if not pairs:
        raise InputError("expected at least one pair", field="pairs")
    seen: set[str] = set()
    for p in pairs:
        if p.id in seen:
            raise InputError("expected unique pair ids", sample=p.id, field="id")
        seen.add(p.id)


def patch_group(
    lm: LoadedModel,
    pairs: Sequence[AnyPair],
    spec: PatchSpec,
    *,
    keep_logits: bool = False,
    advance: Callable[[int], None] | None = None,
) -> list[list[PairResult]]:
    """Every direction of ``spec`` for a few pairs: one read pass over all their prompts,
    then one exact sweep per direction in which pairs of equal length share forwards.
    Returns each pair's results (one per direction), in order; ``advance(n)`` is told of
    each ``n`` patches done (:func:`patch_count`)."""
    eng = Engine.of(lm)
    prepared = [[prepare_any(lm, pair, d, spec) for d in spec.directions] for pair in pairs]
    layers = sweep_layers(eng, spec)
    # a prompt is its ids and, for a multimodal one, its media (same text, other clip)
    prompts = {
        (tuple(ids), key): media
        for ps in prepared
        for ids, key, media in (
            (ps[0].base_ids, ps[0].base_key, ps[0].base_inputs),
            (ps[0].source_ids, ps[0].source_key, ps[0].source_inputs),
        )
    }
    site = partial(patch_site, spec)
    caches = read_caches(eng, [k[0] for k in prompts], site, layers, list(prompts.values()))
    by_ids = dict(zip(prompts, caches, strict=True))
    out: list[list[PairResult]] = [[] for _ in pairs]
    for k in range(len(spec.directions)):
        items = [
            (
                ps[k],
                by_ids[(tuple(ps[k].base_ids), ps[k].base_key)],
                by_ids[(tuple(ps[k].source_ids), ps[k].source_key)],
            )
            for ps in prepared
        ]
        if spec.exact:
            results = sweep_pairs(eng, items, spec, keep_logits=keep_logits, advance=advance)
        else:
            results = [new_result(eng, p, spec, base, source) for p, base, source in items]
        for i, ((p, base, source), res) in enumerate(zip(items, results, strict=True)):
            if spec.attribution:
                attribute_pair(eng, p, spec, base, source, res)
                if advance is not None:
                    advance(len(res.layers) * len(res.units) * len(res.heads))
            res.require_finite()  # refused here, naming the pair and layer: never stored
            out[i].append(res)
    return out


def patch_pair(
    lm: LoadedModel, pair: AnyPair, spec: PatchSpec, *, keep_logits: bool = False
) -> list[PairResult]:
    """Every direction of ``spec`` for one pair (one read pass per prompt)."""
    return patch_group(lm, [pair], spec, keep_logits=keep_logits)[0]


def patch_count(lm: LoadedModel, prepared: Sequence[PreparedPair], spec: PatchSpec) -> int:
    """The patches a sweep makes: for every prepared pair (one per pair and direction), its
    layers × positions (or spans) × heads, once for the exact sweep and once for attribution
    patching: the count its progress bar shows."""
    eng = Engine.of(lm)
    per_unit = len(sweep_layers(eng, spec)) * len(sweep_heads(eng, spec))
    passes = int(spec.exact) + int(spec.attribution)
    return per_unit * passes * sum(len(units(p, spec)[0]) for p in prepared)


def group_size(lm: LoadedModel, pairs: Sequence[AnyPair], spec: PatchSpec) -> int:
    """Pairs per group: up to :data:`GROUP_PAIRS`, fewer when what a group keeps (both
    prompts' reads of every swept layer, key/value caches, readout logits) would pass half
    the memory budget (:func:`~mechscope.patching.memory.fit_group`)."""
    longest = max(prompt_length(lm, p, spec) for p in pairs)
    most = min(GROUP_PAIRS, len(pairs))
    return fit_group(lm, longest, spec, most=most, kv=can_resume(lm, longest)).rows


def _groups(items: Sequence[AnyPair], size: int) -> list[Sequence[AnyPair]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def patch_pairs(
    lm: LoadedModel,
    pairs: Sequence[AnyPair],
    spec: PatchSpec,
    *,
    keep_logits: bool = False,
    progress: bool = True,
    dictionary: Any = None,
) -> PatchingResult:
    """Run the patching sweep ``spec`` on every pair, in memory: a
    :class:`~mechscope.patching.result.PatchingResult` (``to_frame()``, ``figure()``), with
    no run directory (``mechscope patch run`` / :func:`run_patching` write one).

    Pairs are :class:`~mechscope.data.pairs.ContrastivePair` (text),
    :class:`~mechscope.data.pairs.TokenizedPair` (token ids, patched by position as they
    are: :mod:`~mechscope.patching.token_pairs`) or media pairs; every pair is checked
    before the first forward pass, so a bad one is refused in one line naming it. Pairs go
    through in groups sized by the memory budget; ``keep_logits`` keeps each patched run's
    readout logits. ``progress`` shows a bar counting patches (pairs × directions × layers ×
    positions × heads, :func:`patch_count`): a tqdm bar on stderr (a widget in a notebook);
    nothing is printed on stdout.

    ``dictionary``: the loaded dictionary of a ``site="feature"`` sweep (else the one in
    ``spec.dictionary``'s folder); its features are chosen before the first patch
    (:func:`~mechscope.patching.features.choose_features`)."""
    check_pair_ids(pairs)
    if dictionary is not None:
        spec = spec.with_dictionary(dictionary)
    # every pair checked before any forward (a bad one is refused in one line)
    prepared = [prepare_any(lm, p, d, spec) for p in pairs for d in spec.directions]
    spec = choose_features(Engine.of(lm), prepared, spec)
    groups = _groups(pairs, group_size(lm, pairs, spec))
    with make_progress(progress) as bar:
        task = bar.add_task(
            f"patching {feature_label(spec)}",
            total=patch_count(lm, prepared, spec),
            unit="patches",
        )
        results = [
            r
            for g in groups
            for per_pair in patch_group(
                lm, g, spec, keep_logits=keep_logits, advance=lambda n: bar.advance(task, n)
            )
            for r in per_pair
        ]
    result = PatchingResult(results, spec.site, spec.granularity)  # before anything else
    flag_undefined_effects(results)
    return result


def run_patching(
    run: RunDir,
    lm: LoadedModel,
    pairs: Sequence[AnyPair],
    spec: PatchSpec,
    *,
    name: str = PART,
    dictionary: Any = None,
) -> PatchingResult:
    """Sharded (resumable) :func:`patch_pairs` writing ``tables/<name>.parquet``,
    ``tables/<name>_baselines.parquet`` and ``tables/<name>_agreement.parquet``."""
    check_pair_ids(pairs)
    eng = Engine.of(lm)
    if dictionary is not None:
        spec = spec.with_dictionary(dictionary)
    prepared = [prepare_any(lm, p, d, spec) for p in pairs for d in spec.directions]
    spec = choose_features(eng, prepared, spec)  # the same features on every resume
    sweep_layers(eng, spec)  # --layers and --heads checked before any pass
    sweep_heads(eng, spec)
    store = ShardStore(run, name)
    keys = {p.id: content_key(p) for p in pairs}  # an edited pair is recomputed
    todo = [p for p in pairs if not store.done(p.id, keys[p.id])]
    report_reuse(store, f"patching {feature_label(spec)}", list(keys), [p.id for p in todo])
    with run.timed(name), make_progress() as bar:
        task = bar.add_task(
            f"patching {feature_label(spec)}",
            total=len(pairs),
            completed=len(pairs) - len(todo),
            unit="pairs",
        )

        # Groups are cut from *all* pairs, so a resumed run batches each pair with the same
        # neighbours as an uninterrupted one (fp32 results depend on the batch's other rows);
        # a group with a missing pair runs whole, and only its missing pairs are written.
        # Groups are claimed: several processes can fill one run directory.
        def missing(pair: AnyPair) -> bool:
            return not store.done(pair.id, keys[pair.id])

        def one(group: list[AnyPair]) -> None:
            todo_here = [missing(p) for p in group]
            for pair, res, write in zip(
                group, patch_group(lm, group, spec), todo_here, strict=True
            ):
                if write:  # atomic per pair: a kill loses at most the rest
                    store.write(pair.id, shard_payload(res), keys[pair.id])
                    bar.advance(task)

        groups = _groups(pairs, group_size(lm, pairs, spec)) if todo else []
        claimed_loop(
            store, groups, lambda g: f"group-{g[0].id}", lambda g: not any(map(missing, g)), one
        )
    shared_work_done()  # a worker ends here: this command writes the tables
    results = [r for p in pairs for r in from_shard_payload(store.read(p.id))]
    flag_undefined_effects(results)
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
    if spec.site == "feature":
        row.update(feature_site=feature_label(spec))
    return pd.DataFrame([row])
