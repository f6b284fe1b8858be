"""Figures of a circuit result (never of the model): the faithfulness curve with its
intervals, and the circuit drawn layer by layer."""

from __future__ import annotations

import numpy as np
import torch

from mechscope.circuits.result import CircuitResult
from mechscope.circuits.select import owned
from mechscope.report import Edge, Figure, Node, Series, curves, graph


def faithfulness_figure(result: CircuitResult) -> Figure:
    """Faithfulness F against the share of edges kept, with the 95 % interval over pairs."""
    t = result.curve
    shares = [f"{100 * s:g}%" for s in t["share"]]
    series = [Series("faithfulness", t["faithfulness"], t["low"], t["high"])]
    return curves(
        shares,
        series,
        f"faithfulness of {result.method} circuits ({result.rule}) by size",
        "edges kept (share of the graph)",
        "faithfulness F",
        hline=result.target,
        caption=(
            "F = (m̄(circuit) − m̄(corrupt)) / (m̄(clean) − m̄(corrupt)) of the mean "
            f"{result.metric} over {len(result.pair_ids)} pairs; every edge outside the "
            "circuit is patched from the corrupt run, exactly. Shaded: 95% bootstrap interval "
            f"resampling pairs; dashed: F = {result.target:g}."
        ),
    )


def _positions(result: CircuitResult, names: list[str]) -> dict[str, tuple[float, float]]:
    """Input at the bottom, logits at the top, each layer's heads in a row with its MLP
    at the right end."""
    h = result.graph.n_heads
    pos = {}
    for name in names:
        if name == "input":
            pos[name] = (h / 2, -1.0)
        elif name == "logits":
            pos[name] = (h / 2, float(result.graph.n_layers))
        elif name.startswith("m"):
            pos[name] = (float(h + 1), int(name[1:]) + 0.5)
        else:
            layer, head = name[1:].split(".h")
            pos[name] = (float(head), float(layer))
    return pos


def circuit_figure(result: CircuitResult, max_edges: int = 200) -> Figure:
    """The circuit's edges (its ``max_edges`` largest when it has more) between its nodes,
    laid out by layer; width and colour show each edge's score."""
    g = result.graph
    edges = result.edges()
    edges = edges[edges["in_circuit"]].head(max_edges)
    own = owned(g)
    receivers = {name: i for i, name in enumerate(g.receiver_names)}
    links = []
    for sender, receiver, score in zip(
        edges["sender"], edges["receiver"], edges["score"], strict=True
    ):
        r = receivers[receiver]
        readers = (
            ["logits"]
            if r == g.logits_receiver
            else [g.sender_names[s] for s in torch.nonzero(own[:, r]).flatten().tolist()]
        )
        links += [Edge(sender, reader, float(score)) for reader in readers]
    names = list(
        dict.fromkeys(["input", *(e.src for e in links), *(e.dst for e in links), "logits"])
    )
    group = {n: ("mlp" if n[0] == "m" else "head" if n[0] == "a" else "ends") for n in names}
    weight = np.abs(edges["score"]).groupby(edges["sender"]).sum()
    top = max(float(weight.max()) if len(weight) else 0.0, 1e-12)
    nodes = [
        Node(n, n, size=1 + float(weight.get(n, 0.0)) / top, color_group=group[n]) for n in names
    ]
    shown = len(edges)
    total = int(result.circuit.sum())
    return graph(
        nodes,
        links,
        f"the circuit: {total} edges of {result.graph.n_edges}",
        layout=_positions(result, names),
        caption=(
            f"{'All' if shown == total else f'The {shown} largest of the'} {total} edges of "
            "the circuit, from the input (bottom) through each layer's heads (a row, the MLP "
            "at its right) to the logits (top); width shows the score's size, blue positive "
            "and red negative. An edge into a key or value head ends at every query head of "
            "its group."
        ),
    )
