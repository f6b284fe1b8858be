"""``run_heads``: attribution, baselines, diagnostics and pruning for a set of samples.

Per-sample IG vectors are written as resumable shards (one per sample and path family) and
collected into ``arrays/heads_attributions.npz``; everything derived from them (completeness,
diagnostics, pruning curves, Shapley values) goes to Parquet tables that the report reads.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import pandas as pd

from mechscope.engine.analysis.finite import first_nonfinite_layer
from mechscope.errors import InputError, NonFiniteError
from mechscope.heads.baselines import gate_gradients, head_mask_importance
from mechscope.heads.config import HeadsConfig
from mechscope.heads.diagnostics import agreement, sample_diagnostics
from mechscope.heads.gatefn import GateFunction
from mechscope.heads.ig import HeadAttribution, head_ig
from mechscope.heads.postprocess import aggregate
from mechscope.heads.prepare import path_options, prepare
from mechscope.heads.pruning import curve_bands, pruning_auc, pruning_curves, pruning_orders
from mechscope.heads.result import HeadsResult
from mechscope.heads.samples import HeadSample
from mechscope.heads.shapley import shapley_sampled
from mechscope.models.loaded import LoadedModel
from mechscope.runs import RunDir, ShardStore, run_sharded, write_arrays, write_table
from mechscope.runs.content_key import content_key
from mechscope.runs.executor import shared_work_done
from mechscope.runs.tensors import array, arrays
from mechscope.stats.finite import HINT, require_finite


def require_finite_ig(res: HeadAttribution, f: GateFunction) -> None:
    """Refuse IG whose attributions, or whose objective at the path ends (when computed), are
    not finite: naming the sample and the first layer whose output is not finite on its
    prompt, else (the pass is finite, its gradient is not) the attribution's first layer."""
    ends = np.stack([res.segments.f_start, res.segments.f_end])  # [2, paths]
    computed = not np.isnan(ends).all()  # NaN throughout: completeness was skipped
    if np.isfinite(res.attributions).all() and (not computed or np.isfinite(ends).all()):
        return
    what = f"{res.kind} IG of the {f.objective.name} objective"
    layer = first_nonfinite_layer(f.engine, f.objective.input_ids)
    if layer is not None:
        raise NonFiniteError(f"{what} is not finite; {HINT}", sample=f.sample_id, layer=layer)
    if computed:
        require_finite(
            ends, f"{what}: the objective at the path ends", sample=f.sample_id, layer_axis=None
        )
    require_finite(res.attributions, f"{what}: the attribution", sample=f.sample_id)


def _payload(res: HeadAttribution, seconds: float) -> dict:
    return {
        "attributions": res.attributions.astype(np.float64),
        "completeness": res.completeness_frame().to_dict(orient="list"),
        "seconds": float(seconds),
    }


def _attribute_all(run: RunDir, fs: list[GateFunction], kind: str, cfg: HeadsConfig) -> list[dict]:
    opts = path_options(kind, cfg)
    by_id = {f.sample_id: f for f in fs}

    def one(sample_id: str) -> dict:
        start = time.perf_counter()
        res = head_ig(by_id[sample_id], kind, **opts)
        require_finite_ig(res, by_id[sample_id])
        return _payload(res, time.perf_counter() - start)

    store = ShardStore(run, f"heads-{kind}")
    with run.timed(f"heads-{kind}"):
        return run_sharded(
            store,
            [(f.sample_id, f.sample_id) for f in fs],
            one,
            description=f"IG ({kind})",
            key=lambda sid: content_key(by_id[sid].objective),  # an edited sample reruns
        )


def _diagnostics(res: HeadsResult, cfg: HeadsConfig) -> pd.DataFrame:
    parts = [
        sample_diagnostics(array(v), method=k, thresholds=cfg.thresholds)
        for k, v in res.attributions.items()
    ]
    gradients = array(res.gradients)
    if gradients is not None:
        parts.append(sample_diagnostics(gradients, method="gradient", thresholds=cfg.thresholds))
    names = list(res.attributions)
    if len(res.sample_ids) >= 1:
        first = array(res.attributions[names[0]])
        for other in names[1:]:
            parts.append(
                agreement(first, array(res.attributions[other]), name_a=names[0], name_b=other)
            )
        if gradients is not None:
            parts.append(agreement(first, gradients, name_a=names[0], name_b="gradient"))
    return pd.concat(parts, ignore_index=True)


def _shapley(
    fs: list[GateFunction], importance: np.ndarray, res: HeadsResult, cfg: HeadsConfig
) -> pd.DataFrame:
    flat = np.argsort(-importance.reshape(-1), kind="stable")[: cfg.shapley_top]
    heads = [(int(i) // importance.shape[1], int(i) % importance.shape[1]) for i in flat]
    frames = []
    for f in fs[: cfg.shapley_samples]:
        n_perm = cfg.shapley_permutations + cfg.shapley_permutations % 2  # antithetic pairs
        sh = shapley_sampled(
            f,
            heads,
            n_permutations=n_perm,
            baseline=cfg.baseline,
            seed=cfg.seed,
            internal_batch_size=cfg.internal_batch_size,
        )
        layers = [layer for layer, _ in heads]
        require_finite(sh.values, "Shapley value", sample=f.sample_id, layers=layers)
        df = sh.frame()
        df.insert(0, "sample_id", f.sample_id)
        i = res.sample_ids.index(f.sample_id)
        for kind, attr in arrays(res.attributions).items():
            df[f"ig_{kind}"] = [attr[i, layer, head] for layer, head in heads]
        frames.append(df)
    return pd.concat(frames, ignore_index=True)


def run_heads(
    run: RunDir,
    lm: LoadedModel,
    samples: Sequence[HeadSample],
    cfg: HeadsConfig,
    *,
    fs: list[GateFunction] | None = None,
) -> HeadsResult:
    """Head attribution for ``samples`` into ``run`` (resumable per sample and path)."""
    fs = fs if fs is not None else prepare(lm, samples, cfg)
    ids, tasks = [s.id for s in samples], [s.task for s in samples]
    attributions, completeness = {}, []
    for kind in cfg.paths:
        payloads = _attribute_all(run, fs, kind, cfg)
        attributions[kind] = np.stack([p["attributions"] for p in payloads])  # [n, L, H]
        for sid, x in zip(ids, attributions[kind], strict=True):  # also what shards held
            require_finite(x, f"{kind} IG attribution", sample=sid)
        for sid, task, p in zip(ids, tasks, payloads, strict=True):
            frame = pd.DataFrame(p["completeness"])
            frame.insert(0, "task", task)
            frame.insert(0, "sample_id", sid)
            frame["seconds"] = p["seconds"]
            completeness.append(frame)
    shared_work_done()  # a worker ends here: this command does the rest once
    hib = fs[0].higher_is_better
    gradients, importance = None, {}
    if cfg.gradient_baseline:
        with run.timed("heads-gradient"):
            gradients = gate_gradients(fs)
        for sid, x in zip(ids, gradients, strict=True):
            require_finite(x, "gate gradient", sample=sid)
        importance["gradient"] = head_mask_importance(gradients)
    for kind, x in attributions.items():
        importance[kind] = aggregate(x, mode=cfg.postprocess, higher_is_better=hib)
    completeness_frame = pd.concat(completeness, ignore_index=True)
    res = HeadsResult(
        ids, tasks, attributions, completeness_frame, pd.DataFrame(), hib, gradients, importance
    )
    res.diagnostics = _diagnostics(res, cfg)
    saved = {k: v for k, v in attributions.items()} | {
        f"importance_{k}": v for k, v in importance.items()
    }
    if gradients is not None:
        saved["gradient"] = gradients
    saved |= {"sample_ids": np.array(ids), "tasks": np.array(tasks)}
    write_arrays(run, "heads_attributions", saved)
    write_table(run, "heads_completeness", res.completeness)
    write_table(run, "heads_diagnostics", res.diagnostics)
    if cfg.prune:
        _prune(run, fs, res, cfg)
    if cfg.shapley_top > 0:
        with run.timed("heads-shapley"):
            res.shapley = _shapley(fs, _ranking(res, cfg.prune_by[0], cfg), res, cfg)
        write_table(run, "heads_shapley", res.shapley)
    write_table(run, "heads_meta", _meta(lm, res, cfg))
    return res


def _ranking(res: HeadsResult, name: str, cfg: HeadsConfig) -> np.ndarray:
    """The ``[L, H]`` score that orders pruning and picks Shapley heads: IG aggregated with
    ``cfg.prune_postprocess`` (default ``abs``: the smallest effects go first, whatever their
    sign, the usual pruning criterion), or Michel et al.'s gradient importance."""
    if name == "gradient" and "gradient" in res.importance:
        return array(res.importance["gradient"])
    if name not in res.attributions:
        known = ", ".join([*res.attributions, *(["gradient"] if res.gradients is not None else [])])
        raise InputError(f"prune_by among {known}, got {name!r}", field="prune_by")
    x = array(res.attributions[name])
    return aggregate(x, mode=cfg.prune_postprocess, higher_is_better=res.higher_is_better)


def _prune(run: RunDir, fs: list[GateFunction], res: HeadsResult, cfg: HeadsConfig) -> None:
    orders: dict[str, np.ndarray] = {}
    for k, name in enumerate(cfg.prune_by):
        made = pruning_orders(
            _ranking(res, name, cfg),
            n_random=cfg.prune_random if k == 0 else 0,
            seed=cfg.seed,
            one_per_layer=cfg.prune_one_per_layer,
        )
        orders |= {(o if o.startswith("random") else f"{name}/{o}"): v for o, v in made.items()}
    with run.timed("heads-pruning"):
        curves = pruning_curves(
            fs[: cfg.prune_samples],
            orders,
            n_points=cfg.prune_points,
            max_fraction=cfg.prune_max_fraction,
        )
    res.pruning, res.pruning_auc = curves, pruning_auc(curves)
    res.pruning_bands = curve_bands(curves, seed=cfg.seed)
    write_table(run, "heads_pruning", curves)
    write_table(run, "heads_pruning_auc", res.pruning_auc)
    write_table(run, "heads_pruning_bands", res.pruning_bands)
    write_arrays(run, "heads_pruning_orders", {k.replace("/", "__"): v for k, v in orders.items()})


def _meta(lm: LoadedModel, res: HeadsResult, cfg: HeadsConfig) -> pd.DataFrame:
    items = {
        "model": lm.spec,
        "layers x heads": f"{lm.n_layers} x {lm.n_heads}",
        "objective": cfg.objective,
        "higher is better": str(res.higher_is_better),
        "samples": str(len(res.sample_ids)),
        "tasks": ", ".join(sorted(set(res.tasks))),
        "paths": ", ".join(cfg.paths),
        "quadrature": f"{cfg.method}, {cfg.n_steps} steps (per-layer "
        f"{cfg.per_layer_steps or cfg.n_steps})"
        + (
            f"; steps doubled (at most {cfg.refine_doublings} times) where the completeness "
            f"error exceeds max({cfg.refine_rtol} x gap, {cfg.refine_atol})"
            + (f" ({', '.join(cfg.refine_paths)})" if cfg.refine_paths is not None else "")
            if cfg.refine_rtol is not None
            else ""
        ),
        "baseline": str(cfg.baseline),
        "postprocess": cfg.postprocess,
        "prune by": f"{', '.join(cfg.prune_by)} ({cfg.prune_postprocess})" if cfg.prune else "-",
    }
    return pd.DataFrame({"key": list(items), "value": list(items.values())})
