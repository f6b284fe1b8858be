"""Circuit selection and pruning against independent computations: pruning keeps exactly
the edges on some input → logits path (networkx on the same graph), top-n the n largest
scores, greedy grows from the logits; EAP-IG's JSON layout round-trips and names the edges
as EAP-IG's own graph does."""

from __future__ import annotations

import networkx as nx
import pytest
import torch

from mechscope.circuits.graph import EdgeGraph
from mechscope.circuits.layout import read_json, to_json, write_json
from mechscope.circuits.select import greedy, owned, prune, select, top_n

GRAPHS = [EdgeGraph(3, 4, 4, 8), EdgeGraph(3, 4, 2, 8), EdgeGraph(2, 2, 2, 8, parallel=True)]


def _node_of_receiver(g: EdgeGraph, r: int) -> list[str]:
    """The nodes reading through receiver ``r`` (a key-value head: every head of its group)."""
    own = owned(g)
    if r == g.logits_receiver:
        return ["logits"]
    return [g.sender_names[s] for s in torch.nonzero(own[:, r]).flatten().tolist()]


def _on_paths(g: EdgeGraph, mask: torch.Tensor) -> torch.Tensor:
    """Edges of ``mask`` on some input → logits path, by networkx reachability."""
    dg = nx.DiGraph()
    edges = {}
    for s, r in mask.nonzero().tolist():
        for node in _node_of_receiver(g, r):
            dg.add_edge(g.sender_names[s], node)
            edges.setdefault((s, r), []).append(node)
    ok = torch.zeros_like(mask)
    if "input" not in dg or "logits" not in dg:
        return ok
    from_input = nx.descendants(dg, "input") | {"input"}
    to_logits = nx.ancestors(dg, "logits") | {"logits"}
    for (s, r), nodes in edges.items():
        src = g.sender_names[s]
        ok[s, r] = src in from_input and any(n in to_logits for n in nodes)
    return ok


@pytest.mark.parametrize("g", GRAPHS, ids=["mha", "gqa", "parallel"])
@pytest.mark.parametrize("density", [0.05, 0.2, 0.5])
def test_pruning_keeps_exactly_the_edges_on_input_to_logits_paths(g: EdgeGraph, density):
    gen = torch.Generator().manual_seed(int(density * 100) + g.n_kv_heads)
    for _ in range(5):
        mask = (torch.rand(g.n_senders, g.n_receivers, generator=gen) < density) & g.real
        assert torch.equal(prune(mask, g), _on_paths(g, mask))


def test_top_n_takes_the_largest_scores_in_size():
    g = GRAPHS[0]
    scores = torch.randn(g.n_senders, g.n_receivers, generator=torch.Generator().manual_seed(1))
    mask = top_n(scores, g, 10)
    assert int(mask.sum()) == 10 and bool((mask <= g.real).all())
    picked = scores.abs()[mask]
    rest = scores.abs()[g.real & ~mask]
    assert float(picked.min()) >= float(rest.max())


@pytest.mark.parametrize("g", GRAPHS[:2], ids=["mha", "gqa"])
def test_greedy_grows_from_the_logits(g: EdgeGraph):
    scores = torch.randn(g.n_senders, g.n_receivers, generator=torch.Generator().manual_seed(2))
    key = scores.abs().masked_fill(~g.real, -1)
    mask = greedy(scores, g, 12)
    assert int(mask.sum()) == 12
    first = int(key[:, g.logits_receiver].argmax())
    assert bool(mask[first, g.logits_receiver]), "the best edge into the logits comes first"
    senders = set(mask.any(1).nonzero().flatten().tolist())
    for _, r in mask.nonzero().tolist():  # each edge reads into the logits or a chosen node
        readers = torch.nonzero(owned(g)[:, r]).flatten().tolist()
        assert r == g.logits_receiver or senders & set(readers)


def test_the_whole_graph_survives_pruning():
    for g in GRAPHS:
        assert torch.equal(select(torch.ones(g.n_senders, g.n_receivers), g, n=g.n_edges), g.real)


def _eap_ig_edge_names(n_layers: int, n_heads: int, parallel: bool) -> set[str]:
    """EAP-IG's ``Graph.from_model`` edge names, by its construction rules."""
    names, stream = set(), ["input"]
    for layer in range(n_layers):
        heads = [f"a{layer}.h{h}" for h in range(n_heads)]
        mlp = f"m{layer}"
        for node in stream:
            names |= {f"{node}->{h}<{x}>" for h in heads for x in "qkv"}
        if parallel:
            names |= {f"{node}->{mlp}" for node in stream}
            stream += [*heads, mlp]
        else:
            stream += heads
            names |= {f"{node}->{mlp}" for node in stream}
            stream.append(mlp)
    return names | {f"{node}->logits" for node in stream}


@pytest.mark.parametrize("g", [GRAPHS[0], GRAPHS[2]], ids=["sequential", "parallel"])
def test_edge_names_are_eap_igs(g: EdgeGraph):
    assert set(g.edge_index) == _eap_ig_edge_names(g.n_layers, g.n_heads, g.parallel)


def test_the_json_layout_round_trips(tmp_path):
    g = GRAPHS[1]
    scores = torch.randn(g.n_senders, g.n_receivers, generator=torch.Generator().manual_seed(3))
    scores = scores * g.real
    circuit = select(scores, g, n=20)
    data = to_json(g, scores, circuit)
    assert set(data) == {"cfg", "nodes", "edges"} and len(data["edges"]) == g.n_edges
    assert sum(e["in_graph"] for e in data["edges"].values()) == int(circuit.sum())
    graph, back, again = read_json(write_json(tmp_path / "c.json", g, scores, circuit))
    assert graph == g
    assert torch.equal(again, circuit)
    assert torch.equal(back, scores)  # fp32 → JSON float → fp32 is exact
