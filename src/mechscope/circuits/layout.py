"""Circuits on disk in EAP-IG's JSON layout, the one the MIB benchmark's circuit track reads.

    {"cfg": {"n_layers": …, "n_heads": …, "parallel_attn_mlp": …, "d_model": …,
             "n_kv_heads": …},
     "nodes": {"input": {"in_graph": true}, "a0.h1": {"in_graph": false}, …, "logits": …},
     "edges": {"input->a0.h1<q>": {"score": 0.012, "in_graph": false}, …}}

Edge names are EAP-IG's (``a0.h1->a2.h3<q>``, ``m0->logits``). Under grouped-query
attention the key and value receivers are key-value heads (``a2.h1<k>`` is key-value head
1; ``cfg.n_kv_heads`` says how many), where EAP-IG, on TransformerLens, names one per query
head; with ``n_kv_heads == n_heads`` the names are the same.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from mechscope.circuits.graph import EdgeGraph
from mechscope.circuits.select import owned
from mechscope.errors import InputError
from mechscope.runs.atomic import atomic_write_json


def to_json(graph: EdgeGraph, scores: torch.Tensor, circuit: torch.Tensor) -> dict:
    """The layout of the module docstring for ``scores`` and ``circuit``
    (``[senders, receivers]``, fp32 and bool)."""
    circuit = circuit.bool() & graph.real
    own = owned(graph)
    senders = circuit.any(1) | (own & circuit.any(0)[None, :]).any(1)
    nodes = {name: {"in_graph": bool(senders[i])} for i, name in enumerate(graph.sender_names)}
    nodes["logits"] = {"in_graph": bool(circuit[:, graph.logits_receiver].any())}
    rows, cols = graph.real.nonzero(as_tuple=True)
    edges = {
        graph.edge_name(s, r): {"score": float(scores[s, r]), "in_graph": bool(circuit[s, r])}
        for s, r in zip(rows.tolist(), cols.tolist(), strict=True)
    }
    return {"cfg": graph.cfg(), "nodes": nodes, "edges": edges}


def write_json(path: Path, graph: EdgeGraph, scores: torch.Tensor, circuit: torch.Tensor) -> Path:
    """Write :func:`to_json` to ``path`` atomically."""
    return atomic_write_json(Path(path), to_json(graph, scores, circuit), indent=None)


def read_json(path: Path) -> tuple[EdgeGraph, torch.Tensor, torch.Tensor]:
    """``(graph, scores [S, R] fp32, circuit [S, R] bool)`` from a file of this layout;
    one that names an edge the graph of its ``cfg`` does not have is refused in one line."""
    data = json.loads(Path(path).read_text())
    for key in ("cfg", "nodes", "edges"):
        if key not in data:
            raise InputError(f"an EAP-IG circuit file with {key!r}, got none", field=str(path))
    cfg = data["cfg"]
    graph = EdgeGraph(
        n_layers=int(cfg["n_layers"]),
        n_heads=int(cfg["n_heads"]),
        n_kv_heads=int(cfg.get("n_kv_heads", cfg["n_heads"])),
        d_model=int(cfg.get("d_model", 0)),
        parallel=bool(cfg.get("parallel_attn_mlp", False)),
    )
    scores = torch.zeros(graph.n_senders, graph.n_receivers)
    circuit = torch.zeros(graph.n_senders, graph.n_receivers, dtype=torch.bool)
    for name, edge in data["edges"].items():
        if name not in graph.edge_index:
            raise InputError(f"edges of the graph its cfg describes, got {name!r}", field="edges")
        s, r = graph.edge_index[name]
        scores[s, r] = float(edge["score"])
        circuit[s, r] = bool(edge["in_graph"])
    return graph, scores, circuit
