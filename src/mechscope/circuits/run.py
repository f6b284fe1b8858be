"""``run_circuits``: score every edge, draw the faithfulness curve, write the circuit.

Both stages are resumable shards of the run directory: one per batch of pairs for the
scores (each batch's mean scores, weighted by its size when batches are combined), one per
circuit size for the curve (every example's metric with that circuit patched in exactly).
Then the result, its tables and the circuit in EAP-IG's JSON layout are written.
"""

from __future__ import annotations

import numpy as np
import torch

from mechscope.circuits.attribute import attribute
from mechscope.circuits.config import CircuitConfig
from mechscope.circuits.data import EdgeBatch
from mechscope.circuits.edge_pass import Wiring
from mechscope.circuits.evaluate import prepare
from mechscope.circuits.faithfulness import Curve, curve_of, curve_point
from mechscope.circuits.layout import write_json
from mechscope.circuits.result import (
    AREAS_TABLE,
    CIRCUIT_FILE,
    CURVE_TABLE,
    EDGES_TABLE,
    PART,
    CircuitResult,
)
from mechscope.circuits.select import select
from mechscope.engine import Engine
from mechscope.models.loaded import LoadedModel
from mechscope.runs import RunDir, ShardStore, run_sharded
from mechscope.runs.result import has_result, save_result


def _scores(run: RunDir, eng: Engine, wiring: Wiring, data: list[EdgeBatch], cfg: CircuitConfig):
    """``(scores [S, R] fp32, clean, corrupt, input_total [examples] fp64)`` over every
    batch, each batch one shard."""

    def one(i: int) -> dict:
        s = attribute(
            eng, [data[i]], metric=cfg.metric, method=cfg.method, steps=cfg.steps, wiring=wiring
        )
        return {
            "scores": s.scores.double().numpy() * len(data[i]),  # a sum over the batch
            "clean": s.clean.double().numpy(),
            "corrupt": s.corrupt.double().numpy(),
            "input_total": s.input_total.double().numpy(),
        }

    done = run_sharded(
        ShardStore(run, f"{PART}-scores"),
        [(f"batch-{i:05d}", i) for i in range(len(data))],
        one,
        description=f"edge scores ({cfg.method})",
        key=None,
    )
    n = sum(len(b) for b in data)
    total = sum(np.asarray(d["scores"]) for d in done) / n
    cat = {k: np.concatenate([np.asarray(d[k]) for d in done]) for k in ("clean", "corrupt")}
    inputs = np.concatenate([np.asarray(d["input_total"]) for d in done])
    return torch.from_numpy(total).float(), cat["clean"], cat["corrupt"], inputs


def _curve(
    run: RunDir,
    eng: Engine,
    wiring: Wiring,
    data: list[EdgeBatch],
    scores: torch.Tensor,
    cfg: CircuitConfig,
    clean: np.ndarray,
    corrupt: np.ndarray,
) -> Curve:
    """The metric of every example with the circuit of each share, one shard per share."""
    prepared = prepare(eng, wiring, data)

    def one(share: float) -> dict:
        return curve_point(
            eng, wiring, prepared, scores, share,
            metric=cfg.metric, rule=cfg.rule, absolute=not cfg.signed,
        )  # fmt: skip

    done = run_sharded(
        ShardStore(run, f"{PART}-curve"),
        [(f"share-{round(s * 1e6):07d}ppm", s) for s in cfg.shares],
        one,
        description="faithfulness curve",
        key=None,
    )
    return curve_of(done, cfg.shares, clean, corrupt, cfg.rule)


def chosen_edges(curve: Curve, cfg: CircuitConfig) -> int:
    """The edges asked of the circuit written out: ``cfg.edges``, or the request of the
    smallest circuit on the grid that reaches ``cfg.target`` (the largest when none does)."""
    if cfg.edges is not None:
        return cfg.edges
    hits = np.nonzero(curve.faithfulness >= cfg.target)[0]
    return int(curve.requested[hits[0] if hits.size else -1])


def run_circuits(
    run: RunDir, lm: LoadedModel, data: list[EdgeBatch], cfg: CircuitConfig
) -> CircuitResult:
    """Score, draw the curve, choose and write the circuit (module docstring); a finished
    run is reopened, not recomputed."""
    if has_result(run, PART):
        return CircuitResult.from_run(run)
    eng, wiring = Engine.of(lm), Wiring.of(lm)
    g = wiring.graph
    with run.timed(f"{PART}-scores"):
        scores, clean, corrupt, inputs = _scores(run, eng, wiring, data, cfg)
    with run.timed(f"{PART}-curve"):
        curve = _curve(run, eng, wiring, data, scores, cfg, clean, corrupt)
    table, areas = curve.summary(n_resamples=cfg.n_resamples, seed=cfg.seed)
    circuit = select(scores, g, rule=cfg.rule, n=chosen_edges(curve, cfg), absolute=not cfg.signed)
    result = CircuitResult(
        cfg=g.cfg(), method=cfg.method, steps=cfg.steps, metric=cfg.metric, rule=cfg.rule,
        target=cfg.target, pair_ids=[i for b in data for i in b.ids], scores=scores,
        circuit=circuit, shares=list(cfg.shares), requested=curve.requested.tolist(),
        kept=curve.kept.tolist(), values=curve.values, clean=clean, corrupt=corrupt,
        input_total=inputs, curve=table, areas=areas,
    )  # fmt: skip
    write_json(run.path / CIRCUIT_FILE, g, scores, circuit)
    tables = {CURVE_TABLE: table, AREAS_TABLE: areas, EDGES_TABLE: result.edges()}
    save_result(run, PART, result, tables=tables)
    return result
