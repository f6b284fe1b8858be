"""``run_circuits`` end to end on a tiny model: the result reopens from the run directory
as it was computed, its circuit file is the circuit, its tables are written, and a run
killed after some shards resumes to the same numbers."""

from __future__ import annotations

import shutil

import torch

from circuit_fixtures import random_batch
from mechscope.circuits.config import CircuitConfig
from mechscope.circuits.layout import read_json
from mechscope.circuits.result import CIRCUIT_FILE, CircuitResult
from mechscope.circuits.run import run_circuits
from mechscope.models import load_model
from mechscope.runs import RunDir, has_table

CFG = CircuitConfig(method="EAP-IG-inputs", steps=3, shares=(0.05, 0.2, 1.0), n_resamples=100)


def _data():
    return [random_batch(rows=2, seed=s) for s in range(2)]


def test_a_run_reopens_as_computed_and_resumes(tmp_path):
    lm = load_model("tiny:llama")
    run = RunDir.create(tmp_path, "c", {"config": CFG.model_dump(mode="json")})
    result = run_circuits(run, lm, _data(), CFG)
    again = CircuitResult.from_run(run)
    for name in ("scores", "circuit", "values", "clean", "corrupt", "input_total"):
        assert torch.equal(getattr(again, name), getattr(result, name)), name
    assert again.curve.equals(result.curve) and again.areas.equals(result.areas)
    graph, scores, circuit = read_json(run.path / CIRCUIT_FILE)
    assert graph == result.graph and torch.equal(circuit, result.circuit)
    assert torch.equal(scores, result.scores * graph.real)
    for table in ("circuits_curve", "circuits_areas", "circuits_edges"):
        assert has_table(run, table), table
    assert result.curve["faithfulness"].iloc[-1] == 1.0  # the whole graph: the clean run
    assert int(result.circuit.sum()) <= result.kept[-1]
    # killed after the scores and one size: the rest recomputed, the numbers the same
    shutil.rmtree(run.path / "shards" / "results")
    shards = list((run.path / "shards" / "circuits-curve").glob("share-0200000ppm.*"))
    assert shards
    for f in shards:
        f.unlink()
    resumed = run_circuits(run, lm, _data(), CFG)
    assert torch.equal(resumed.values, result.values)
    assert torch.equal(resumed.scores, result.scores)
    assert resumed.edges(5)["edge"].tolist() == result.edges(5)["edge"].tolist()
