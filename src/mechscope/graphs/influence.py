"""Influence, pruning and the graph's scores, as circuit-tracer defines them.

The adjacency is kept as its rows only (``rows [R, N]``: the rows of the selected
features and the logits; ``row_nodes [R]``: which node each row is): the rows of error
and token nodes are zero and never stored. Every quantity is circuit-tracer's
(``graph.py``: ``normalize_matrix``, ``compute_influence``, ``prune_graph``,
``compute_graph_scores``), computed on those rows:

- the normalised adjacency divides each row's absolute values by their sum;
- a node's influence is what flows to it from the logits, weighted by their
  probabilities, along every path: ``w A + w A² + …`` (the series ends: the graph is
  acyclic);
- pruning keeps the nodes whose influence makes the first ``node_threshold`` of the total
  (tokens and logits always), then the edges whose score (normalised weight times the
  influence of the target plus its logit weight) makes the first ``edge_threshold``, then
  drops, until nothing changes, features and errors left with no outgoing edge and
  features with no incoming one;
- the replacement score is the tokens' share of the influence that reaches tokens or
  errors; the completeness score is the share of each node's normalised input that does
  not come from errors, weighted by the node's influence plus its logit weight.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Layout:
    """Where each kind of node sits among ``N = features + errors + tokens + logits``."""

    n_features: int
    n_errors: int
    n_tokens: int
    n_logits: int

    @property
    def n_nodes(self) -> int:
        return self.n_features + self.n_errors + self.n_tokens + self.n_logits

    @property
    def errors(self) -> slice:
        return slice(self.n_features, self.n_features + self.n_errors)

    @property
    def tokens(self) -> slice:
        start = self.n_features + self.n_errors
        return slice(start, start + self.n_tokens)

    @property
    def logits(self) -> slice:
        return slice(self.n_nodes - self.n_logits, self.n_nodes)


def normalize(rows: torch.Tensor) -> torch.Tensor:
    """``|rows|`` over each row's sum (a zero row stays zero)."""
    a = rows.abs()
    return a / a.sum(1, keepdim=True).clamp(min=1e-10)


def propagate(
    normalized: torch.Tensor, row_nodes: torch.Tensor, weights: torch.Tensor, max_iter: int = 1000
) -> torch.Tensor:
    """``w A + w A² + …`` over the nodes ``[N]`` for the stored rows of ``A``."""
    current = weights[row_nodes] @ normalized
    total = current.clone()
    for _ in range(max_iter):
        if not current.any():
            return total
        current = current[row_nodes] @ normalized
        total += current
    raise RuntimeError(f"influence did not converge in {max_iter} iterations (a cycle?)")


def logit_weights(layout: Layout, probs: torch.Tensor) -> torch.Tensor:
    """``[N]``: each logit's probability, zero elsewhere."""
    w = torch.zeros(layout.n_nodes)
    w[layout.logits] = probs.float()
    return w


def find_threshold(scores: torch.Tensor, threshold: float) -> torch.Tensor:
    """The score at which the largest scores first make ``threshold`` of their total."""
    ordered = scores.sort(descending=True).values
    cumulative = ordered.cumsum(0) / ordered.sum()
    index = int(torch.searchsorted(cumulative, torch.tensor(threshold, dtype=cumulative.dtype)))
    return ordered[min(index, len(ordered) - 1)]


@dataclass
class Pruned:
    """``node_mask [N]``, ``edge_mask [R, N]`` (over the stored rows), and each node's
    cumulative influence ``[N]`` (its rank's share of the total, as circuit-tracer's
    ``cumulative_scores``)."""

    node_mask: torch.Tensor
    edge_mask: torch.Tensor
    cumulative: torch.Tensor


def prune(
    rows: torch.Tensor,
    row_nodes: torch.Tensor,
    layout: Layout,
    probs: torch.Tensor,
    node_threshold: float = 0.8,
    edge_threshold: float = 0.98,
) -> Pruned:
    """circuit-tracer's ``prune_graph`` (module docstring) on the stored rows."""
    for name, value in (("node_threshold", node_threshold), ("edge_threshold", edge_threshold)):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must be between 0 and 1, got {value}")
    weights = logit_weights(layout, probs)
    influence = propagate(normalize(rows), row_nodes, weights)
    node_mask = influence >= find_threshold(influence, node_threshold)
    node_mask[layout.tokens.start :] = True
    pruned = rows.clone()
    pruned[~node_mask[row_nodes]] = 0
    pruned[:, ~node_mask] = 0
    normalized = normalize(pruned)
    target_influence = propagate(normalized, row_nodes, weights) + weights
    scores = normalized * target_influence[row_nodes][:, None]
    edge_mask = scores >= find_threshold(scores.flatten(), edge_threshold)
    sources = slice(0, layout.tokens.start)  # features and errors
    is_feature_row = row_nodes < layout.n_features

    def drop_loose_nodes() -> None:
        """Features and errors without an outgoing edge; features without an incoming one."""
        node_mask[sources] &= edge_mask[:, sources].any(0)
        incoming = torch.zeros(layout.n_nodes, dtype=torch.bool)
        incoming[row_nodes[is_feature_row]] = edge_mask[is_feature_row].any(1)
        node_mask[: layout.n_features] &= incoming[: layout.n_features]

    before = node_mask.clone()
    drop_loose_nodes()
    while not torch.equal(before, node_mask):  # each drop may leave others loose
        before = node_mask.clone()
        edge_mask[~node_mask[row_nodes]] = False
        edge_mask[:, ~node_mask] = False
        drop_loose_nodes()
    ordered, order = influence.sort(descending=True)
    cumulative = torch.zeros_like(influence)
    cumulative[order] = ordered.cumsum(0) / ordered.sum()
    return Pruned(node_mask, edge_mask, cumulative)


def graph_scores(
    rows: torch.Tensor, row_nodes: torch.Tensor, layout: Layout, probs: torch.Tensor
) -> tuple[float, float]:
    """circuit-tracer's ``compute_graph_scores``: (replacement, completeness)."""
    weights = logit_weights(layout, probs)
    normalized = normalize(rows)
    influence = propagate(normalized, row_nodes, weights)
    token = influence[layout.tokens].sum()
    error = influence[layout.errors].sum()
    replacement = token / (token + error)
    output = influence + weights
    non_error = torch.ones(layout.n_nodes)  # rows not stored are zero: no error input
    non_error[row_nodes] = 1 - normalized[:, layout.errors].sum(-1)
    completeness = (non_error * output).sum() / output.sum()
    return float(replacement), float(completeness)


def dense(rows: torch.Tensor, row_nodes: torch.Tensor, n_nodes: int) -> torch.Tensor:
    """The square adjacency ``[N, N]`` (target rows, source columns), circuit-tracer's."""
    full = torch.zeros(n_nodes, n_nodes)
    full[row_nodes] = rows
    return full
