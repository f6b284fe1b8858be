"""A graph as circuit-tracer writes it for its local frontend and Neuronpedia.

The file is ``{slug}.json`` (``metadata``, ``qParams``, ``nodes``, ``links``) beside a
``graph-metadata.json`` index listing every graph of the folder, the two files
circuit-tracer's ``create_graph_files`` writes and its ``serve`` opens. Node ids, the
Cantor-paired feature number, the layer names (tokens ``E``, logits ``n_layers + 1``), the
node order (features, errors, tokens, logits, each kept node once), the edges (the kept
edges between kept nodes, target-major) and the nodes left out (a feature or error with no
kept edge) are circuit-tracer 0.5's, so a graph written here opens where one of theirs does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mechscope.graphs.graph import Graph
from mechscope.graphs.influence import Pruned
from mechscope.graphs.store import entries

FEATURE_TYPES = {
    "feature": "cross layer transcoder",  # circuit-tracer names every transcoder feature so
    "error": "mlp reconstruction error",
    "token": "embedding",
    "logit": "logit",
}


def cantor(x: int, y: int) -> int:
    """circuit-tracer's feature number of (layer, feature): one integer for the pair."""
    return (x + y) * (x + y + 1) // 2 + y


def _node(
    node_id: str,
    feature: int,
    layer: str,
    ctx_idx: int,
    kind: str,
    js_node_id: str,
    *,
    influence: float | None = None,
    activation: float | None = None,
    token_prob: float = 0.0,
    is_target_logit: bool = False,
    clerp: str = "",
) -> dict[str, Any]:
    """One node, its fields in circuit-tracer's order."""
    return {
        "node_id": node_id,
        "feature": feature,
        "layer": layer,
        "ctx_idx": ctx_idx,
        "feature_type": FEATURE_TYPES[kind],
        "token_prob": token_prob,
        "is_target_logit": is_target_logit,
        "run_idx": 0,
        "reverse_ctx_idx": 0,
        "jsNodeId": js_node_id,
        "clerp": clerp,
        "influence": influence,
        "activation": activation,
    }


def graph_nodes(graph: Graph, pruned: Pruned, decode: Any) -> dict[int, dict[str, Any]]:
    """The kept nodes by node index (``decode``: token id -> text)."""
    lay, n_pos = graph.layout, graph.n_pos
    cumulative = pruned.cumulative.tolist()
    nodes: dict[int, dict[str, Any]] = {}
    for i in pruned.node_mask.nonzero(as_tuple=True)[0].tolist():
        kind = graph.node_kind(i)
        if kind == "feature":
            layer, pos, feat = (int(v) for v in graph.active[i])
            nodes[i] = _node(
                f"{layer}_{feat}_{pos}", cantor(layer, feat), str(layer), pos, kind,
                f"{layer}_{feat}-0", influence=cumulative[i],
                activation=float(graph.activations[i]),
            )  # fmt: skip
        elif kind == "error":
            layer, pos = divmod(i - lay.n_features, n_pos)
            nodes[i] = _node(
                f"0_{layer}_{pos}", -1, str(layer), pos, kind, f"{layer}_{pos}-0",
                influence=cumulative[i],
            )  # fmt: skip
        elif kind == "token":
            pos = i - lay.tokens.start
            vocab = int(graph.tokens[pos])
            nodes[i] = _node(
                f"E_{vocab}_{pos}", pos, "E", pos, kind, f"E_{vocab}-{pos}",
                influence=cumulative[i],
            )  # fmt: skip
        else:
            j = i - lay.logits.start
            vocab, prob = int(graph.logit_ids[j]), float(graph.logit_probs[j])
            layer = str(graph.n_layers + 1)
            nodes[i] = _node(
                f"{layer}_{vocab}_{n_pos - 1}", vocab, layer, n_pos - 1, kind,
                f"L_{vocab}-{n_pos - 1}", token_prob=prob, is_target_logit=j == 0,
                clerp=f'Output "{decode(vocab)}" (p={prob:.3f})',
            )  # fmt: skip
    return nodes


def graph_links(
    graph: Graph, pruned: Pruned, nodes: dict[int, dict[str, Any]]
) -> list[dict[str, Any]]:
    """The kept edges between kept nodes, target-major as circuit-tracer lists them (its
    ``edge_mask.nonzero()`` over the dense matrix; the stored rows are in node order)."""
    targets, sources = pruned.edge_mask.nonzero(as_tuple=True)
    weights = entries(graph.rows, targets, sources).tolist()
    links = []
    for r, s, w in zip(targets.tolist(), sources.tolist(), weights, strict=True):
        t = int(graph.row_nodes[r])
        if s in nodes and t in nodes:
            links.append(
                {"source": nodes[s]["node_id"], "target": nodes[t]["node_id"], "weight": w}
            )
    return links


def graph_json(
    graph: Graph,
    slug: str,
    scan: str,
    *,
    node_threshold: float = 0.8,
    edge_threshold: float = 0.98,
    decode: Any = None,
) -> dict[str, Any]:
    """The graph pruned at the thresholds, in circuit-tracer's schema (module docstring).
    ``decode``: token id -> text (the model's tokenizer's ``decode``); without it a token
    is written as its id."""
    decode = decode or (lambda i: str(i))
    pruned = graph.prune(node_threshold, edge_threshold)
    nodes = graph_nodes(graph, pruned, decode)
    links = graph_links(graph, pruned, nodes)
    connected = {x for link in links for x in (link["source"], link["target"])}
    always = (FEATURE_TYPES["token"], FEATURE_TYPES["logit"])
    used = [n for n in nodes.values() if n["node_id"] in connected or n["feature_type"] in always]
    metadata = {
        "slug": slug,
        "scan": scan,
        "transcoder_list": [],
        "prompt_tokens": [decode(int(t)) for t in graph.tokens],
        "prompt": graph.prompt,
        "node_threshold": node_threshold,
        "schema_version": 1,
    }
    q_params = {
        "pinnedIds": [],
        "supernodes": [],
        "linkType": "both",
        "clickedId": "",
        "sg_pos": "",
    }
    return {"metadata": metadata, "qParams": q_params, "nodes": used, "links": links}


def write_graph_files(graph_file: dict[str, Any], folder: str | Path) -> Path:
    """``{slug}.json`` in ``folder`` and its entry in ``graph-metadata.json`` (an entry of
    the same slug replaced), as circuit-tracer's frontend reads them. Returns the graph's
    path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    meta = graph_file["metadata"]
    path = folder / f"{meta['slug']}.json"
    path.write_text(json.dumps(graph_file, indent=2))
    index_path = folder / "graph-metadata.json"
    index = json.loads(index_path.read_text()) if index_path.exists() else {"graphs": []}
    index["graphs"] = [g for g in index["graphs"] if g["slug"] != meta["slug"]] + [meta]
    index_path.write_text(json.dumps(index, indent=2))
    return path
