"""The attribution graph drawn in the report, laid out as circuit-tracer's frontend lays it
out: one column per prompt position, the tokens at the bottom, a row per layer, the logits
on top; the nodes of one (position, layer) cell side by side, most influential first.

Everything comes from the run directory (the graph file, the node table, the feature notes
of :mod:`mechscope.graphs.view`), so the report is rebuilt without recomputing the graph.
A node's size is its influence on the logits (:func:`influences`, read back from the node
table), a logit's its probability: the weight circuit-tracer's influence starts from. Only
the most influential features and errors are drawn (beside every token, logit, pinned node
and supernode member), and of the pruned graph's links between them the largest by
circuit-tracer's edge score (the link's share of its target's kept input times the
target's influence); the caption says how many. A supernode is drawn as one node where its
members' mean position is, its influence their sum, its links the sums of its members'
links (links among its members left out).
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from mechscope.graphs.neuronpedia import FEATURE_TYPES
from mechscope.report import Edge, Figure, Node, graph
from mechscope.runs import RunDir
from mechscope.runs.tables import has_table, read_table

MAX_NODES = 120  # features and errors drawn at most, besides pinned ones and supernodes
MAX_EDGES = 250  # links drawn at most
SLOTS = (3, 10)  # node widths a position's column spans, at least and at most
ASPECT = 1.8  # the plot's width over its height (x and y share one scale)
HEIGHT = 680  # px
NODE_PX = (5.0, 18.0)  # node diameters: a cell's neighbours are about a node apart
KIND = {v: k for k, v in FEATURE_TYPES.items()}  # the file's feature_type -> node kind
ORDER = ("token", "feature", "error", "logit", "supernode")  # colour groups, in this order


@dataclass
class Drawn:
    """What the figure draws, and how many nodes and links the pruned graph has."""

    nodes: list[Node]
    edges: list[Edge]
    positions: dict[str, tuple[float, float]]
    pinned: list[str]
    labelled: list[str]
    n_nodes: int  # nodes of the pruned graph
    n_links: int  # links of the pruned graph


def node_id(kind: str, layer: int, position: int, feature: int, n_layers: int) -> str:
    """The graph file's id of a node-table row (:mod:`mechscope.graphs.neuronpedia`)."""
    if kind == "feature":
        return f"{layer}_{feature}_{position}"
    if kind == "error":
        return f"0_{layer}_{position}"
    if kind == "token":
        return f"E_{feature}_{position}"
    return f"{n_layers + 1}_{feature}_{position}"


def influences(table: pd.DataFrame, n_layers: int) -> dict[tuple[str, str], float]:
    """Each node's influence on the logits by (kind, node id), as circuit-tracer computes it
    (in units of the logits' probability), from the node table's cumulative shares.

    Sorted by its cumulative share, a node's own share is the difference from the node
    ranked before it. Every feature passes on all the influence it receives (its input row
    is normalised), so the total influence ``R`` is the logits' probability mass ``P`` plus
    the features' part of ``R``: ``R = P / (share of tokens and errors)``."""
    ordered = table.sort_values("influence", kind="stable")
    own = np.diff(ordered["influence"].to_numpy(np.float64), prepend=0.0)  # [N] shares
    terminal = own[ordered["kind"].isin(["token", "error"]).to_numpy()].sum()
    mass = float(table.loc[table["kind"] == "logit", "activation"].sum())  # a logit's: its p
    keys = [
        (k, node_id(k, int(lyr), int(p), int(f), n_layers))
        for k, lyr, p, f in zip(ordered["kind"], ordered["layer"], ordered["position"],
                                ordered["feature"], strict=True)
    ]  # fmt: skip
    return dict(zip(keys, (own * mass / max(terminal, 1e-12)).tolist(), strict=True))


def hover(n: dict[str, Any], kind: str, influence: float, tokens: list[str], note: dict) -> str:
    """A node's hover label: what it is, where, its activation and influence, and for a
    feature the tokens it promotes and its dashboard's frequency and top context."""
    pos, where = n["ctx_idx"], f"position {n['ctx_idx']} ({tokens[n['ctx_idx']]!r})"
    if kind == "logit":
        return n["clerp"]
    lines = {
        "feature": f"feature {n['node_id'].split('_')[1]} of layer {n['layer']} at {where}",
        "error": f"error node of layer {n['layer']} at {where}",
        "token": f"token {tokens[pos]!r} at position {pos}",
    }[kind]
    out = [lines]
    if n.get("activation") is not None:
        out.append(f"activation {n['activation']:.4g}")
    out.append(f"influence {influence:.4g} (cumulative share {n['influence']:.3f})")
    if note.get("promotes"):
        out.append("promotes " + ", ".join(repr(t) for t in note["promotes"]))
    if note.get("frequency") is not None:
        out.append(f"fires on {100 * note['frequency']:.3g}% of tokens")
    if note.get("context"):
        out.append(f"top context: {note['context']}")
    return "\n".join(out)


def _keys(nodes: list[dict[str, Any]]) -> tuple[list[str], set[str]]:
    """A drawn key per node, in order (its id; an error node named like a layer-0 feature,
    as circuit-tracer names both, gets ``/error``), and the ids two nodes share: a link from
    one of those could come from either and is not drawn."""
    count: dict[str, int] = defaultdict(int)
    for n in nodes:
        count[n["node_id"]] += 1
    shared = {i for i, c in count.items() if c > 1}
    keys = [
        n["node_id"]
        + ("/error" if KIND[n["feature_type"]] == "error" and n["node_id"] in shared else "")
        for n in nodes
    ]
    return keys, shared


def _cells(chosen: list[str], nodes: dict[str, dict[str, Any]], influence: dict[str, float],
           n_layers: int, n_pos: int) -> dict[str, tuple[float, float]]:  # fmt: skip
    """(x, y) of every chosen node. A position's column is as wide as its most crowded cell
    (:data:`SLOTS` node widths at least and at most; a cell with more nodes than that puts
    them on several lines of its row), the nodes of a cell side by side, the most influential
    first; a row per layer (tokens at the bottom, the logits on top, the top logit at the
    last position and the others to its left), rows as far apart as makes the plot
    :data:`ASPECT` times as wide as tall."""
    cells: dict[tuple[int, int], list[str]] = defaultdict(list)
    for k in chosen:
        layer = nodes[k]["layer"]
        cells[(0 if layer == "E" else int(layer) + 1, nodes[k]["ctx_idx"])].append(k)
    slots = [SLOTS[0]] * n_pos
    for (row, ctx), members in cells.items():
        if row <= n_layers:
            slots[ctx] = min(SLOTS[1], max(slots[ctx], len(members)))
    centre = np.cumsum(slots) - np.asarray(slots) / 2  # [T] in node widths
    row_height = sum(slots) / ASPECT / (n_layers + 2)
    pos = {}
    for (row, ctx), members in sorted(cells.items()):
        members.sort(key=lambda k: (-influence[k], k))
        if row > n_layers:  # the logits: the top one at the last position, the others left
            pos |= {m: (float(centre[ctx] - j), row * row_height) for j, m in enumerate(members)}
            continue
        width, k = slots[ctx], len(members)
        lines = -(-k // width)
        gap = min(0.35, 0.7 / max(lines - 1, 1))  # of a row, between a cell's lines
        for j, m in enumerate(members):
            line, col = divmod(j, width)
            in_line = min(width, k - line * width)
            y = row + (line - (lines - 1) / 2) * gap
            pos[m] = (float(centre[ctx] + col - (in_line - 1) / 2), y * row_height)
    return pos


def _links(data: dict[str, Any], where: dict[str, str], influence: dict[str, float],
           shared: set[str], max_edges: int) -> list[Edge]:  # fmt: skip
    """The links between drawn nodes (a supernode's: the sums of its members'), the
    ``max_edges`` largest by their share of the target's kept input times the target's
    influence (a logit's: its probability)."""
    inputs: dict[str, float] = defaultdict(float)  # each target's kept |input|
    for link in data["links"]:
        inputs[link["target"]] += abs(link["weight"])
    weight: dict[tuple[str, str], float] = defaultdict(float)
    score: dict[tuple[str, str], float] = defaultdict(float)
    for link in data["links"]:
        src, dst = link["source"], link["target"]  # a target is never an error node
        if src in shared or src not in where or dst not in where or where[src] == where[dst]:
            continue
        pair = (where[src], where[dst])
        weight[pair] += link["weight"]
        score[pair] += abs(link["weight"]) / inputs[dst] * influence[dst]
    top = sorted(score, key=lambda p: (-score[p], p))[:max_edges]
    return [Edge(s, d, weight[(s, d)]) for s, d in top]


def drawn_graph(
    data: dict[str, Any], table: pd.DataFrame, notes: dict[str, dict[str, Any]], *,
    max_nodes: int = MAX_NODES, max_edges: int = MAX_EDGES,
) -> Drawn:  # fmt: skip
    """What to draw of the graph file ``data`` (module docstring): pins and supernodes from
    its ``qParams``, sizes from the node ``table``, hover details from ``notes``."""
    logits = [n for n in data["nodes"] if n["feature_type"] == FEATURE_TYPES["logit"]]
    n_layers = int(logits[0]["layer"]) - 1
    tokens = data["metadata"]["prompt_tokens"]
    keys, shared = _keys(data["nodes"])
    nodes = dict(zip(keys, data["nodes"], strict=True))
    kind = {k: KIND[n["feature_type"]] for k, n in nodes.items()}
    raw = influences(table, n_layers)
    influence = {  # a logit's: its probability, the weight circuit-tracer gives it
        k: n["token_prob"] if kind[k] == "logit" else raw[(kind[k], n["node_id"])]
        for k, n in nodes.items()
    }
    params = data.get("qParams") or {}
    groups: dict[str, list[str]] = {}
    for name, *ids in params.get("supernodes") or []:
        if any(i in nodes for i in ids):
            groups[name] = [i for i in dict.fromkeys(ids) if i in nodes]
    member_of = {i: name for name, ids in groups.items() for i in ids}
    pinned = [i for i in dict.fromkeys(params.get("pinnedIds") or []) if i in nodes]
    always = [k for k in nodes if kind[k] in ("token", "logit") or k in pinned or k in member_of]
    rest = sorted((k for k in nodes if k not in always), key=lambda k: (-influence[k], k))
    chosen = always + rest[:max_nodes]
    pos = _cells(chosen, nodes, influence, n_layers, len(tokens))
    drawn = [
        Node(k, _label(nodes[k], kind[k], tokens), influence[k], kind[k],
             hover(nodes[k], kind[k], influence[k], tokens, notes.get(k, {})))
        for k in sorted(chosen, key=lambda k: ORDER.index(kind[k]))
        if k not in member_of
    ]  # fmt: skip
    for name, ids in groups.items():
        total = sum(influence[i] for i in ids)
        text = f"supernode {name!r}: {len(ids)} nodes, influence {total:.4g} (summed)\n"
        drawn.append(Node(name, name, total, "supernode", text + ", ".join(ids)))
        xs, ys = zip(*(pos.pop(i) for i in ids), strict=True)
        pos[name] = (float(np.mean(xs)), float(np.mean(ys)))
    where = {k: member_of.get(k, k) for k in chosen}  # a member is drawn as its supernode
    edges = _links(data, where, influence, shared, max_edges)
    shown_pins = list(dict.fromkeys(member_of.get(k, k) for k in pinned))
    top = [k for k in chosen if nodes[k]["is_target_logit"]]
    names = [k for k in chosen if kind[k] == "token"] + top + shown_pins + list(groups)
    return Drawn(drawn, edges, pos, shown_pins, list(dict.fromkeys(names)), len(nodes),
                 len(data["links"]))  # fmt: skip


def _label(n: dict[str, Any], kind: str, tokens: list[str]) -> str:
    """A node's written label: a token's text, a logit's output, a feature or error by layer."""
    if kind == "token":
        return tokens[n["ctx_idx"]]
    if kind == "logit":
        return n["clerp"].removeprefix("Output ")
    index = n["node_id"].split("_")[1]
    return f"L{n['layer']} #{index}" if kind == "feature" else f"L{n['layer']} error"


def figure_of(d: Drawn, prompt: str) -> Figure:
    """The report's figure of ``d``."""
    n_feat = sum(n.color_group in ("feature", "error") for n in d.nodes)
    caption = (
        f"The graph of {prompt!r}: tokens at the bottom, a row per layer, the logits on top, "
        "a column per position. Nodes are sized by their influence on the logits (in units "
        "of probability; a logit's is its probability) and coloured by kind; ringed nodes "
        "are pinned (the top logit and its strongest inputs unless --pin names others); a "
        "supernode stands for its members (their summed influence and links). Links run "
        "from source to target (arrowhead), blue positive, red negative, wider for larger "
        "|weight|. Hover a node for its activation, influence and the tokens it promotes. "
        f"Drawn: {len(d.nodes)} of the pruned graph's {d.n_nodes} nodes ({n_feat} features "
        f"and errors, the most influential) and {len(d.edges)} of its {d.n_links} links (the "
        "largest by influence)."
    )
    title = f"attribution graph: {len(d.nodes)} nodes, {len(d.edges)} links"
    fig = graph(
        d.nodes, d.edges, title, layout=d.positions, caption=caption,
        labelled=d.labelled, highlighted=d.pinned, node_px=NODE_PX,
    )  # fmt: skip
    return dataclasses.replace(fig, height=HEIGHT)


def graph_figure(run: RunDir) -> Figure | None:
    """The figure of the run's graph (None before the graph is written)."""
    slug = run.config.get("graph", {}).get("slug", "graph")
    path = run.path / "graph" / f"{slug}.json"
    if not path.is_file() or not has_table(run, "graph_nodes"):
        return None
    notes_path = run.path / "graph" / "features.json"
    notes = json.loads(notes_path.read_text()) if notes_path.is_file() else {}
    data = json.loads(path.read_text())
    return figure_of(
        drawn_graph(data, read_table(run, "graph_nodes"), notes), data["metadata"]["prompt"]
    )
