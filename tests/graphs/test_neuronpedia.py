"""The graph file in circuit-tracer's / Neuronpedia's schema.

The published JSON schema (``fixtures/neuronpedia-graph-schema.json``, Neuronpedia's
attribution-graph schema) validates a written file; the nodes and links say what the
pruned graph says. With ``MECHSCOPE_CTRACER_PYTHON`` set to circuit-tracer's own
environment's python, circuit-tracer's frontend models (``graph_models.Model``) read the
file in a child process and write it back unchanged.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import jsonschema
import pytest
import torch
from transcoder_sets import transcoder_set

from mechscope.engine import Engine
from mechscope.graphs import attribute
from mechscope.graphs.neuronpedia import cantor, graph_json, write_graph_files
from mechscope.models import load_model
from tolerance import assert_exact

SCHEMA = Path(__file__).with_name("fixtures") / "neuronpedia-graph-schema.json"
IDS = torch.tensor([1, 17, 42, 9, 28, 5, 61, 12])
CTRACER = os.environ.get("MECHSCOPE_CTRACER_PYTHON")


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory):
    lm = load_model("tiny:llama")
    folder = tmp_path_factory.mktemp("graph")
    graph = attribute(Engine.of(lm), transcoder_set(lm, folder / "tc"), IDS, max_n_logits=4)
    data = graph_json(graph, "tiny-graph", "tiny:llama", decode=lm.tokenizer.decode)
    return graph, write_graph_files(data, folder / "graphs")


def test_the_file_validates_against_the_published_schema(written) -> None:
    _, path = written
    data = json.loads(path.read_text())
    jsonschema.validate(data, json.loads(SCHEMA.read_text()))
    assert set(data) == {"metadata", "qParams", "nodes", "links"}
    index = json.loads((path.parent / "graph-metadata.json").read_text())
    assert index == {"graphs": [data["metadata"]]}


def test_nodes_and_links_are_the_pruned_graph(written) -> None:
    graph, path = written
    data = json.loads(path.read_text())
    nodes, links = data["nodes"], data["links"]
    ids = [n["node_id"] for n in nodes]
    assert len(set(ids)) == len(ids), "node ids are unique"
    by_kind: dict[str, list] = {}
    for n in nodes:
        by_kind.setdefault(n["feature_type"], []).append(n)
    lay = graph.layout
    tokens = by_kind["embedding"]
    assert [n["ctx_idx"] for n in tokens] == list(range(lay.n_tokens))
    assert [n["node_id"] for n in tokens] == [f"E_{int(t)}_{p}" for p, t in enumerate(IDS)]
    logits = by_kind["logit"]
    assert [n["feature"] for n in logits] == graph.logit_ids.tolist()
    assert [n["is_target_logit"] for n in logits] == [True] + [False] * (len(logits) - 1)
    assert {n["layer"] for n in logits} == {str(graph.n_layers + 1)}
    assert by_kind["cross layer transcoder"], "some features are kept"
    for n in by_kind["cross layer transcoder"]:
        layer, feat, pos = (int(v) for v in n["node_id"].split("_"))
        assert n["feature"] == cantor(layer, feat) and n["ctx_idx"] == pos
        assert n["activation"] > 0 and 0 < n["influence"] <= 1
    # every link is an edge of the graph, its weight the adjacency's entry read back
    index = {}
    table = graph.node_table()
    for i, row in table.iterrows():
        kind, layer, pos, feat = row["kind"], row["layer"], row["position"], row["feature"]
        key = {
            "feature": f"{layer}_{feat}_{pos}",
            "error": f"0_{layer}_{pos}",
            "token": f"E_{feat}_{pos}",
            "logit": f"{graph.n_layers + 1}_{feat}_{pos}",
        }[kind]
        index[key] = i
    adjacency = graph.adjacency()
    assert links, "some edges are kept"
    got = torch.tensor([link["weight"] for link in links], dtype=torch.float64)
    want = torch.stack([adjacency[index[x["target"]], index[x["source"]]] for x in links])
    assert_exact(got, want.double())  # fp32 values written as Python floats and read back
    pruned = graph.prune()
    kept = {index[i] for i in ids}
    assert kept <= set(pruned.node_mask.nonzero(as_tuple=True)[0].tolist())
    assert len(links) == sum(
        1
        for r, s in pruned.edge_mask.nonzero().tolist()
        if bool(pruned.node_mask[s]) and bool(pruned.node_mask[graph.row_nodes[r]])
    )


def test_a_slug_written_again_replaces_its_entry(written, tmp_path) -> None:
    _, path = written
    data = json.loads(path.read_text())
    write_graph_files(data, tmp_path)
    write_graph_files({**data, "metadata": {**data["metadata"], "slug": "other"}}, tmp_path)
    write_graph_files(data, tmp_path)
    index = json.loads((tmp_path / "graph-metadata.json").read_text())
    assert [g["slug"] for g in index["graphs"]] == ["other", "tiny-graph"]


CHILD = """
import json, sys
from circuit_tracer.frontend.graph_models import Model
text = open(sys.argv[1]).read()
model = Model.model_validate_json(text)
print(json.dumps(json.loads(model.model_dump_json()) == json.loads(text)))
"""


@pytest.mark.skipif(
    not CTRACER or not Path(CTRACER).exists(), reason="MECHSCOPE_CTRACER_PYTHON is not set"
)
def test_circuit_tracer_reads_the_file_unchanged(written) -> None:
    _, path = written
    proc = subprocess.run(
        [CTRACER, "-c", CHILD, str(path)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "true", "circuit-tracer's models change it"
