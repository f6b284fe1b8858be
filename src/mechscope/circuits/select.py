"""Which edges make a circuit: top-n, threshold or greedy selection, then pruning.

The three rules are EAP-IG's (``Graph.apply_topn``, ``apply_threshold``, ``apply_greedy``):

- **top-n**: the ``n`` edges of largest score (in size, ``absolute=True``);
- **threshold**: every edge whose score (in size) is at least ``t``;
- **greedy**: grown from the logits up: of the edges into a node already in the circuit
  (at first only the logits), the one of largest score joins, and its sender's own incoming
  edges become candidates; ``n`` times.

Pruning then keeps only what is connected: a node stays when it has an edge in and an edge
out (the input needs no edge in, the logits no edge out), an edge when both its ends stay,
repeated until nothing changes. An edge cut off from the logits or from the input cannot
carry the clean run anywhere, so it is not counted in the circuit's size.

A node *owns* its receivers (:func:`owned`): a query head its query; a key or value
receiver (a key-value head under grouped-query attention) belongs to every query head of
its group, so an edge into it keeps all of them reachable.
"""

from __future__ import annotations

import heapq

import torch

from mechscope.circuits.graph import EdgeGraph
from mechscope.errors import InputError

RULES = ("topn", "threshold", "greedy")


def owned(graph: EdgeGraph) -> torch.Tensor:
    """``[senders, receivers]`` bool: the receivers through which each sender's node reads
    (EAP-IG's ``forward_to_backward``); the input owns none, the logits receiver no sender."""
    out = torch.zeros(graph.n_senders, graph.n_receivers, dtype=torch.bool)
    group = graph.n_heads // graph.n_kv_heads
    for layer in range(graph.n_layers):
        for h in range(graph.n_heads):
            s = graph.head_sender(layer, h)
            out[s, graph.qkv_receiver(layer, "q", h)] = True
            out[s, graph.qkv_receiver(layer, "k", h // group)] = True
            out[s, graph.qkv_receiver(layer, "v", h // group)] = True
        out[graph.mlp_sender(layer), graph.mlp_receiver(layer)] = True
    return out


def _ranked(scores: torch.Tensor, graph: EdgeGraph, absolute: bool) -> torch.Tensor:
    """``[senders, receivers]`` fp32: the ranking key, ``-inf`` where no edge exists."""
    key = scores.float().abs() if absolute else scores.float()
    return key.masked_fill(~graph.real, float("-inf"))


def prune(mask: torch.Tensor, graph: EdgeGraph) -> torch.Tensor:
    """``mask [senders, receivers]`` bool with every edge that is not connected removed
    (module docstring)."""
    own = owned(graph)
    mask = mask.bool() & graph.real
    while True:
        has_out = mask.any(1)  # [senders]
        has_in = (own & mask.any(0)[None, :]).any(1)  # [senders]: an edge into its receivers
        has_in[0] = True  # the input
        nodes = has_out & has_in
        readers = (own & nodes[:, None]).any(0)  # [receivers] whose node stays
        readers[graph.logits_receiver] = True
        new = mask & nodes[:, None] & readers[None, :]
        if torch.equal(new, mask):
            return mask
        mask = new


def top_n(scores: torch.Tensor, graph: EdgeGraph, n: int, *, absolute: bool = True):
    """``[senders, receivers]`` bool: the ``n`` edges of largest score, before pruning."""
    if not 0 <= n <= graph.n_edges:
        raise InputError(f"expected 0 to {graph.n_edges} edges, got {n}", field="edges")
    flat = _ranked(scores, graph, absolute).flatten()
    mask = torch.zeros(flat.numel(), dtype=torch.bool)
    mask[torch.argsort(flat, descending=True, stable=True)[:n]] = True
    return mask.view(graph.n_senders, graph.n_receivers)


def threshold(scores: torch.Tensor, graph: EdgeGraph, t: float, *, absolute: bool = True):
    """``[senders, receivers]`` bool: every edge whose score is at least ``t``."""
    return _ranked(scores, graph, absolute) >= float(t)


def greedy(scores: torch.Tensor, graph: EdgeGraph, n: int, *, absolute: bool = True):
    """``[senders, receivers]`` bool: ``n`` edges grown from the logits up (module
    docstring), before pruning."""
    if not 0 <= n <= graph.n_edges:
        raise InputError(f"expected 0 to {graph.n_edges} edges, got {n}", field="edges")
    key = _ranked(scores, graph, absolute)
    own = owned(graph)
    mask = torch.zeros_like(graph.real)
    heap: list[tuple[float, int, int]] = []
    opened: set[int] = set()

    def open_receiver(r: int) -> None:
        if r in opened:
            return
        opened.add(r)
        for s in torch.nonzero(graph.real[:, r]).flatten().tolist():
            heapq.heappush(heap, (-float(key[s, r]), s, r))

    open_receiver(graph.logits_receiver)
    in_circuit = {graph.logits_receiver}
    while n > 0 and heap:
        _, s, r = heapq.heappop(heap)
        mask[s, r] = True
        n -= 1
        if s not in in_circuit:
            in_circuit.add(s)
            for r2 in torch.nonzero(own[s]).flatten().tolist():
                open_receiver(r2)
    return mask


def select(
    scores: torch.Tensor,
    graph: EdgeGraph,
    *,
    rule: str = "topn",
    n: int | None = None,
    t: float | None = None,
    absolute: bool = True,
) -> torch.Tensor:
    """The pruned circuit ``[senders, receivers]`` bool of ``rule`` (:data:`RULES`): ``n``
    edges for ``topn`` and ``greedy``, the score ``t`` for ``threshold``."""
    if rule not in RULES:
        raise InputError(f"expected one of {', '.join(RULES)}, got {rule!r}", field="rule")
    if rule == "threshold":
        if t is None:
            raise InputError("a threshold t for rule 'threshold', got none", field="threshold")
        return prune(threshold(scores, graph, t, absolute=absolute), graph)
    if n is None:
        raise InputError(f"a number of edges n for rule {rule!r}, got none", field="edges")
    pick = top_n if rule == "topn" else greedy
    return prune(pick(scores, graph, n, absolute=absolute), graph)
