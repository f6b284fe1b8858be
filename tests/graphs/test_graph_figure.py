"""The graph drawn in the report: pins and supernodes in the graph file's ``qParams``, a
resumed run with other pins redrawing without recomputing, the figure's nodes and links
read back from the report's HTML, and a node's size its influence on the logits, checked
against circuit-tracer's influence computed again in float64 from the graph's rows."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import torch
from transcoder_sets import transcoder_set
from typer.testing import CliRunner

from mechscope.cli.main import app
from mechscope.dictionaries import load_dictionary
from mechscope.engine import Engine
from mechscope.graphs import attribute
from mechscope.graphs.figure import MAX_EDGES, MAX_NODES, drawn_graph
from mechscope.graphs.influence import logit_weights, propagate
from mechscope.graphs.neuronpedia import FEATURE_TYPES, graph_json
from mechscope.graphs.store import to_tensor
from mechscope.graphs.view import PIN_INPUTS, dashboards, top_context
from mechscope.models import load_model
from mechscope.report.render_graph import RING_WIDTH
from refusals import assert_refused
from tolerance import assert_rounding_close

PROMPT = "The cat sat on the"
FEATURE = FEATURE_TYPES["feature"]
SCHEMA = Path(__file__).with_name("fixtures") / "neuronpedia-graph-schema.json"
STAGES = 4  # a node's size: two cumulative shares, their difference, times the total


@pytest.fixture(scope="module")
def transcoders(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tc") / "set"
    transcoder_set(load_model("tiny:llama"), folder, layout="circuit_tracer")
    return folder


def graph_traces(html: str) -> list[dict]:
    """The plotly traces of the graph section's figure, as the report's script draws them."""
    start = html.index('"fig-graphs-01",')  # Plotly.newPlot's first argument
    traces, _ = json.JSONDecoder().raw_decode(html, html.index("[", start))
    return traces


def test_the_report_draws_pins_and_a_supernode_without_recomputing(transcoders, tmp_path):
    out = tmp_path / "run"
    argv = ["graph", PROMPT, "-m", "tiny:llama", "--transcoders", str(transcoders),
            "--out", str(out), "--max-logits", "3"]  # fmt: skip
    first = CliRunner().invoke(app, argv)
    assert first.exit_code == 0, first.output
    path = out / "graph" / "graph.json"
    data = json.loads(path.read_text())
    top = next(n["node_id"] for n in data["nodes"] if n["is_target_logit"])
    inputs = [x for x in data["links"] if x["target"] == top]
    inputs.sort(key=lambda x: -abs(x["weight"]))
    assert data["qParams"]["pinnedIds"] == [top, *(x["source"] for x in inputs[:PIN_INPUTS])]
    features = [n["node_id"] for n in data["nodes"] if n["feature_type"] == FEATURE]
    members, pin = features[:3], features[5]
    computed = json.loads((out / "manifest.json").read_text())["timings"]
    again = CliRunner().invoke(
        app, [*argv, "--pin", pin, "--pin", "99_1_1", "--supernode", f"grp={','.join(members)}"]
    )
    assert again.exit_code == 0, again.output
    assert "not in the pruned graph, not drawn: 99_1_1" in again.output
    redrawn = json.loads(path.read_text())
    assert redrawn["nodes"] == data["nodes"] and redrawn["links"] == data["links"]
    assert redrawn["qParams"]["pinnedIds"] == [pin]
    assert redrawn["qParams"]["supernodes"] == [["grp", *members]]
    jsonschema.validate(redrawn, json.loads(SCHEMA.read_text()))  # still Neuronpedia's schema
    timings = json.loads((out / "manifest.json").read_text())["timings"]
    assert timings["graph"] == computed["graph"]  # the graph was read back, not computed

    traces = graph_traces((out / "report.html").read_text(encoding="utf-8"))
    nodes = [t for t in traces if t["mode"] == "markers+text"]
    kinds = {FEATURE_TYPES[k] for k in ("feature", "error")}
    assert sum(n["feature_type"] in kinds for n in data["nodes"]) <= MAX_NODES  # all drawn
    assert sum(len(t["x"]) for t in nodes) == len(data["nodes"]) - len(members) + 1
    group = {m: "grp" for m in members}
    shared = {n["node_id"] for n in data["nodes"]}
    shared = {i for i in shared if sum(n["node_id"] == i for n in data["nodes"]) > 1}
    pairs = {
        (group.get(x["source"], x["source"]), group.get(x["target"], x["target"]))
        for x in data["links"]
        if x["source"] not in shared
    }
    pairs = {(s, t) for s, t in pairs if s != t}
    edges = next(t for t in traces if t.get("name") == "edges")
    assert len(edges["hovertext"]) == min(MAX_EDGES, len(pairs))
    (supernode,) = [t for t in nodes if t["name"] == "supernode"]
    assert supernode["text"] == ["grp"] and all(m in supernode["hovertext"][0] for m in members)
    rings = [(t["name"], i) for t in nodes for i, w in enumerate(t["marker"]["line"]["width"])
             if w == RING_WIDTH]  # fmt: skip
    assert len(rings) == 1 and rings[0][0] == "feature"
    layer, index, _ = pin.split("_")
    feature_trace = next(t for t in nodes if t["name"] == "feature")
    assert f"feature {index} of layer {layer}" in feature_trace["hovertext"][rings[0][1]]
    assert "promotes" in feature_trace["hovertext"][rings[0][1]]

    rebuilt = CliRunner().invoke(app, ["report", str(out)])  # no model: from the run's files
    assert rebuilt.exit_code == 0, rebuilt.output
    assert graph_traces((out / "report.html").read_text(encoding="utf-8")) == traces


def test_sizes_are_influence_and_a_supernode_sums_its_members(transcoders):
    lm = load_model("tiny:llama")
    ids = lm.to_tokens(PROMPT, prepend_bos=True).ids[0].cpu()
    graph = attribute(Engine.of(lm), load_dictionary(transcoders), ids, max_n_logits=3)
    pruned = graph.prune()
    data = graph_json(graph, "cat", "tiny:llama")
    features = [n["node_id"] for n in data["nodes"] if n["feature_type"] == FEATURE]
    members = features[:3]
    data["qParams"]["supernodes"] = [["grp", *members]]
    drawn = drawn_graph(data, graph.node_table(pruned), {})

    # circuit-tracer's influence again, in float64 from the same rows
    weights = logit_weights(graph.layout, graph.logit_probs).double()
    influence = propagate(to_tensor(graph.rows).double(), graph.row_nodes, weights)  # [N]
    lay, n_pos = graph.layout, graph.n_pos
    index = {
        "feature": {f"{lyr}_{f}_{p}": i for i, (lyr, p, f) in enumerate(graph.active.tolist())},
        "token": {f"E_{int(v)}_{p}": lay.tokens.start + p for p, v in enumerate(graph.tokens)},
        "error": {},  # an error's id may be a layer-0 feature's too (circuit-tracer's naming)
    }
    for i in range(lay.n_errors):
        index["error"][f"0_{i // n_pos}_{i % n_pos}"] = lay.n_features + i
        index["error"][f"0_{i // n_pos}_{i % n_pos}/error"] = lay.n_features + i
    shown = [n for n in drawn.nodes if n.color_group in index]
    assert {n.color_group for n in shown} == set(index)
    got = torch.tensor([n.size for n in shown], dtype=torch.float64)
    want = influence[[index[n.color_group][n.id] for n in shown]]
    # A size is the difference of two cumulative shares (each a float32 rounding of a
    # partial sum over the total; torch's CPU cumsum accumulates in double), times the total
    # influence: rounding at the total's scale, over those four stages (each member's, summed).
    total = float(influence.sum())
    assert_rounding_close(got, want, depth=STAGES, scale=total, msg="node sizes")
    (group,) = [x for x in drawn.nodes if x.id == "grp"]
    want_sum = sum(float(influence[index["feature"][m]]) for m in members)
    depth = STAGES * len(members)
    assert_rounding_close(group.size, want_sum, depth=depth, scale=total, msg="supernode")


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--pin", "Dallas"], "a node id like 12_345_7"),
        (["--supernode", "grp"], "NAME=ID,ID"),
        (["--supernode", "1_2_3=1_2_4"], "a name, not an id"),
        (["--supernode", "a=1_2_3", "--supernode", "a=1_2_4"], "a name of its own"),
    ],
)
def test_bad_pins_and_supernodes_are_refused_before_the_run(
    transcoders, tmp_path, monkeypatch, capsys, extra, expected
) -> None:
    monkeypatch.chdir(tmp_path)
    argv = ["graph", PROMPT, "-m", "tiny:llama", "--transcoders", str(transcoders),
            "--out", str(tmp_path / "run"), *extra]  # fmt: skip
    assert_refused(argv, expected, tmp_path, capsys)


def test_a_features_runs_dashboards_are_found_beside_its_dictionaries(tmp_path):
    (tmp_path / "dictionaries" / "mlp_in-mlp_out.3").mkdir(parents=True)
    (tmp_path / "neuronpedia").mkdir()
    top = {"tokens": ["a", " cat", " sat", "\n", "x"], "values": [0.0, 0.5, 2.0, 0.1, 0.0]}
    entry = {"feature_index": 7, "frac_nonzero": 0.01,
             "activations": [{"tokens": ["b"], "values": [1.0]}, top]}  # fmt: skip
    batch = {"model_id": "m", "layer": 3, "sae_set": "mlp_in-mlp_out.3", "features": [entry]}
    (tmp_path / "neuronpedia" / "mlp_in-mlp_out.3.json").write_text(json.dumps(batch))
    found = dashboards(tmp_path / "dictionaries")
    assert list(found) == [(3, 7)] and found[(3, 7)]["frac_nonzero"] == 0.01
    assert top_context(found[(3, 7)]) == "a cat⟦ sat⟧↵x"
    assert dashboards(tmp_path / "neuronpedia") == {}  # not a features run's dictionaries
