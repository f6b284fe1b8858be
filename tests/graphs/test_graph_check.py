"""Checking a graph's claims on tiny models: the change the graph predicts for an
intervention on its nodes, against the change measured forward.

In the frozen replacement model (attention scores, norm scales and every feature's on/off
state held, every MLP its transcoder plus the clean error), an intervention moves the target
exactly as the graph's paths predict: the same linear model, computed by backward passes
and by a forward pass; a graph that left features out misses their paths. In the model
itself the change differs (attention, norms and MLPs live) and stays finite. Then the
command: ``--check``, ``--check-node``, ``--steer`` and ``--check-target`` write the run's
table and report, resume, and refuse bad input in one line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transcoder_sets import cross_layer, transcoder_set
from typer.testing import CliRunner

from mechscope.cli.main import app
from mechscope.engine import Engine
from mechscope.graphs import attribute
from mechscope.graphs.check import CheckConfig, check_graph
from mechscope.models import load_model
from mechscope.runs import RunDir
from mechscope.runs.tables import read_table
from refusals import assert_refused
from tolerance import (
    assert_beyond_rounding,
    assert_exact,
    assert_rounding_close,
    depth_of,
    scale_of,
)

IDS = torch.tensor([1, 17, 42, 9, 28, 5, 61, 12])
PROMPT = "The cat sat on the"


CASES = {
    "llama-relu": ("llama", "saelens", None),
    "gemma3-jumprelu": ("gemma3_text", "gemma_scope_2", None),
    "llama-topk": ("llama", "saelens", 12),
    "llama-cross-layer": ("llama", "cross_layer", None),
}


@pytest.fixture(scope="module", params=list(CASES))
def checked(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    family, layout, k = CASES[request.param]
    eng = Engine.of(load_model(f"tiny:{family}"))
    if layout == "cross_layer":
        tset = cross_layer(eng.lm)
    else:
        tset = transcoder_set(eng.lm, tmp_path_factory.mktemp(family), layout=layout)
    if k is not None:  # the same transcoders with a top-k rule, as the ones trained here
        for d in tset:
            d.config.activation, d.config.k = "topk", k
    graph = attribute(eng, tset, IDS, batch_size=64, max_n_logits=3)
    last = [(int(a[0]), int(a[2])) for a in graph.active if int(a[1]) == len(IDS) - 1]
    pair = [next(f for f in last if f[0] == layer) for layer in (0, 1)]  # a two-layer supernode
    check = CheckConfig(
        top_k=graph.layout.n_features, steer=2.0, targets=("A", "A|B"),
        nodes=("pair=" + ",".join(f"{lyr}_{f}_{len(IDS) - 1}" for lyr, f in pair),),
    )  # fmt: skip
    return eng, tset, check_graph(eng, tset, IDS, graph, check)


def test_the_frozen_replacement_moves_as_the_graph_predicts(checked) -> None:
    eng, _, table = checked
    assert set(table["intervention"]) == {"ablate", "× 2"}
    predicted = torch.tensor(table["predicted"].to_numpy())
    measured = torch.tensor(table["measured_frozen"].to_numpy())
    # measured: a difference of two target values (demeaned logits); predicted: their paths
    scale = scale_of(torch.tensor(table["clean"].to_numpy()), predicted)
    assert_rounding_close(measured, predicted, scale=scale, depth=depth_of(eng.lm),
                          msg="measured in the frozen replacement vs predicted")  # fmt: skip
    direct = torch.tensor(table["predicted_direct"].to_numpy())
    assert_beyond_rounding(predicted, direct, scale=scale, depth=depth_of(eng.lm),
                           msg="paths through other features count")  # fmt: skip
    assert bool((table["switched"] > 0).any()), "some changes leave the linear regime"


def test_a_graph_that_left_features_out_misses_their_paths(tmp_path) -> None:
    eng = Engine.of(load_model("tiny:llama"))
    tset = transcoder_set(eng.lm, tmp_path, layout="saelens")
    graph = attribute(eng, tset, IDS, batch_size=16, max_n_logits=3, max_feature_nodes=32)
    table = check_graph(eng, tset, IDS, graph, CheckConfig(top_k=8, targets=("A",)))
    predicted = torch.tensor(table["predicted"].to_numpy())
    scale = scale_of(torch.tensor(table["clean"].to_numpy()), predicted)
    measured = torch.tensor(table["measured_frozen"].to_numpy())
    assert_beyond_rounding(predicted, measured, scale=scale, depth=depth_of(eng.lm),
                           msg="a graph of 32 features")  # fmt: skip


def test_the_model_differs_and_stays_finite(checked) -> None:
    eng, _, table = checked
    live = torch.tensor(table["measured_live"].to_numpy())
    assert bool(torch.isfinite(live).all())
    frozen = torch.tensor(table["measured_frozen"].to_numpy())
    scale = scale_of(torch.tensor(table["clean"].to_numpy()), frozen)
    assert_beyond_rounding(live, frozen, scale=scale, depth=depth_of(eng.lm),
                           msg="the model is not its frozen replacement")  # fmt: skip
    pair = table[table["label"] == "pair"]
    assert len(pair) == 4 and pair["nodes"].str.count(",").eq(1).all()


@pytest.fixture(scope="module")
def transcoders(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tc") / "set"
    transcoder_set(load_model("tiny:llama"), folder, layout="circuit_tracer")
    return folder


def test_a_checked_graph_run_writes_its_table_and_resumes(transcoders, tmp_path) -> None:
    base = ["graph", PROMPT, "-m", "tiny:llama", "--transcoders", str(transcoders),
            "--max-logits", "3"]  # fmt: skip
    assert CliRunner().invoke(app, [*base, "--out", str(tmp_path / "plain")]).exit_code == 0
    nodes = json.loads((tmp_path / "plain" / "graph" / "graph.json").read_text())["nodes"]
    ids = [n["node_id"] for n in nodes if n["feature_type"] == "cross layer transcoder"][:2]
    argv = [*base, "--out", str(tmp_path / "checked"), "--check", "3", "--steer", "2",
            "--check-node", "both=" + ",".join(ids), "--check-target", " the",
            "--check-target", " the|A"]  # fmt: skip
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    run = RunDir.open(tmp_path / "checked")
    table = read_table(run, "graph_interventions")
    assert len(table) == (3 + 1) * 2 * 2  # sets × (ablate, steer) × targets
    assert list(table["label"].unique())[-1] == "both"
    assert set(table["target"]) == {"' the'", "' the' − 'A'"}
    html = (run.path / "report.html").read_text(encoding="utf-8")
    assert "Checking the graph" in html
    assert CliRunner().invoke(app, argv).exit_code == 0
    assert read_table(run, "graph_interventions").equals(table), "read back as written"
    manifest = json.loads((run.path / "manifest.json").read_text())
    manifest["parts"]["graph_check"]["done"] = False  # a check left undone: graph recomputed
    (run.path / "manifest.json").write_text(json.dumps(manifest))
    (run.path / "tables" / "graph_interventions.parquet").unlink()
    assert CliRunner().invoke(app, argv).exit_code == 0
    again = read_table(run, "graph_interventions")
    for column in ("predicted", "measured_frozen", "measured_live"):  # the same computation
        assert_exact(again[column].to_numpy(), table[column].to_numpy(), msg=column)


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--steer", "2"], "nodes to check"),
        (["--check-node", "1_2"], "node ids layer_feature_position"),
        (["--check-node", "2_47_0"], "a node active on the prompt"),
        (["--check", "2", "--check-target", " cat"], "a target of one token"),
    ],
)
def test_bad_check_input_is_refused_before_the_run(
    transcoders, tmp_path, monkeypatch, capsys, extra, expected
) -> None:
    monkeypatch.chdir(tmp_path)
    argv = ["graph", PROMPT, "-m", "tiny:llama", "--transcoders", str(transcoders),
            "--out", str(tmp_path / "run"), *extra]  # fmt: skip
    assert_refused(argv, expected, tmp_path, capsys)
