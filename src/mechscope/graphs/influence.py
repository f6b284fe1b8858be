"""Influence, pruning and the graph's scores, as circuit-tracer defines them.

The adjacency is kept as its rows only (``rows [R, N]``: the rows of the selected
features and the logits; ``row_nodes [R]``: which node each row is): the rows of error
and token nodes are zero and never stored. The rows are read a block at a time
(:mod:`mechscope.graphs.store`: a tensor or a file give the same blocks), so nothing here
holds more than the rows, a bool edge mask ``[R, N]`` and a few blocks. Every quantity is
circuit-tracer's
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

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from mechscope.graphs.store import Rows, blocks


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


def normalize(rows: torch.Tensor, clamp: float = 1e-10) -> torch.Tensor:
    """``|rows|`` over each row's sum (a zero row stays zero)."""
    a = rows.abs()
    return a / a.sum(1, keepdim=True).clamp(min=clamp)


def propagate(
    rows: Rows,
    row_nodes: torch.Tensor,
    weights: torch.Tensor,
    *,
    keep: tuple[torch.Tensor, torch.Tensor] | None = None,
    clamp: float = 1e-10,
    stop: int | None = None,
    max_iter: int = 1000,
) -> torch.Tensor:
    """``w A + w A² + …`` over the nodes for the normalised stored rows of ``A`` (the first
    ``stop``; ``keep``: (rows, columns) bool masks, zero elsewhere before normalising)."""

    def step(current: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(rows.shape[1], dtype=weights.dtype)  # fp64 weights: all in fp64
        for span, block in blocks(rows, stop):
            out += current[row_nodes[span]] @ normalized(block, span, keep, clamp)
        return out

    current = step(weights)
    total = current.clone()
    for _ in range(max_iter):
        if not current.any():
            return total
        current = step(current)
        total += current
    raise RuntimeError(f"influence did not converge in {max_iter} iterations (a cycle?)")


def normalized(
    block: torch.Tensor,
    span: slice,
    keep: tuple[torch.Tensor, torch.Tensor] | None,
    clamp: float = 1e-10,
) -> torch.Tensor:
    """One block of the normalised rows, the pruned ones first zeroed (``keep``)."""
    if keep is not None:
        block = block.clone()
        block[~keep[0][span]] = 0
        block[:, ~keep[1]] = 0
    return normalize(block, clamp)


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


def streamed_threshold(score_blocks: Callable[[], Iterator[torch.Tensor]], threshold: float):
    """:func:`find_threshold` of scores (``>= 0``) that come in blocks, without sorting
    them all: the largest score ``u`` whose scores ``>= u`` make ``threshold`` of the total,
    found by two passes over the blocks that sum the scores by the high, then the low 16
    bits of their fp32 pattern (ordered as the values are; sums in float64)."""

    def buckets(key) -> tuple[torch.Tensor, torch.Tensor]:
        sums = torch.zeros(2**16, dtype=torch.float64)
        counts = torch.zeros(2**16, dtype=torch.long)
        for s in score_blocks():
            bits = s.reshape(-1).view(torch.int32) & 0x7FFFFFFF  # -0.0 as 0.0
            index, values = key(bits, s.reshape(-1))
            sums += torch.bincount(index, values.double(), minlength=2**16)
            counts += torch.bincount(index, minlength=2**16)
        return sums, counts

    def top(sums: torch.Tensor, counts: torch.Tensor, above: float, target: float) -> int:
        """The highest non-empty bucket whose sum with every one above reaches ``target``."""
        reached = (above + sums.flip(0).cumsum(0).flip(0) >= target) & (counts > 0)
        found = reached.nonzero()
        return int(found.max()) if len(found) else int((counts > 0).nonzero().min())

    sums, counts = buckets(lambda bits, s: (bits >> 16, s))
    target = threshold * float(sums.sum())
    hi = top(sums, counts, 0.0, target)
    above = float(sums[hi + 1 :].sum())

    def low(bits: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        inside = (bits >> 16) == hi
        return bits[inside] & 0xFFFF, s[inside]

    lo = top(*buckets(low), above, target)
    return torch.tensor([(hi << 16) | lo], dtype=torch.int32).view(torch.float32)[0]


@dataclass
class Pruned:
    """``node_mask [N]``, ``edge_mask [R, N]`` (over the stored rows), and each node's
    cumulative influence ``[N]`` (its rank's share of the total, as circuit-tracer's
    ``cumulative_scores``)."""

    node_mask: torch.Tensor
    edge_mask: torch.Tensor
    cumulative: torch.Tensor


def prune(
    rows: Rows,
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
    influence = propagate(rows, row_nodes, weights)
    node_mask = influence >= find_threshold(influence, node_threshold)
    node_mask[layout.tokens.start :] = True
    keep = (node_mask[row_nodes], node_mask.clone())
    target_influence = propagate(rows, row_nodes, weights, keep=keep) + weights

    def score_blocks():
        for span, block in blocks(rows):
            scale = target_influence[row_nodes[span]][:, None]
            yield normalized(block, span, keep) * scale

    cut = streamed_threshold(score_blocks, edge_threshold)
    edge_mask = torch.zeros(rows.shape, dtype=torch.bool)
    start = 0
    for scores in score_blocks():
        edge_mask[start : start + scores.shape[0]] = scores >= cut
        start += scores.shape[0]
    sources = slice(0, layout.tokens.start)  # features and errors
    is_feature_row = row_nodes < layout.n_features

    def drop_loose_nodes() -> None:
        """Features and errors without an outgoing edge; features without an incoming one."""
        node_mask[sources] &= edge_mask[:, sources].any(0)
        incoming = torch.zeros(layout.n_nodes, dtype=torch.bool)
        incoming[row_nodes[is_feature_row]] = edge_mask.any(1)[is_feature_row]
        node_mask[: layout.n_features] &= incoming[: layout.n_features]

    before = node_mask.clone()
    drop_loose_nodes()
    while not torch.equal(before, node_mask):  # each drop may leave others loose
        before = node_mask.clone()
        edge_mask &= node_mask[row_nodes][:, None]
        edge_mask &= node_mask[None, :]
        drop_loose_nodes()
    ordered, order = influence.sort(descending=True)
    cumulative = torch.zeros_like(influence)
    cumulative[order] = ordered.cumsum(0) / ordered.sum()
    return Pruned(node_mask, edge_mask, cumulative)


def graph_scores(
    rows: Rows, row_nodes: torch.Tensor, layout: Layout, probs: torch.Tensor
) -> tuple[float, float]:
    """circuit-tracer's ``compute_graph_scores``: (replacement, completeness)."""
    weights = logit_weights(layout, probs)
    influence = propagate(rows, row_nodes, weights)
    token = influence[layout.tokens].sum()
    error = influence[layout.errors].sum()
    replacement = token / (token + error)
    output = influence + weights
    non_error = torch.ones(layout.n_nodes)  # rows not stored are zero: no error input
    for span, block in blocks(rows):
        non_error[row_nodes[span]] = 1 - normalize(block)[:, layout.errors].sum(-1)
    completeness = (non_error * output).sum() / output.sum()
    return float(replacement), float(completeness)


def dense(rows: Rows, row_nodes: torch.Tensor, n_nodes: int) -> torch.Tensor:
    """The square adjacency ``[N, N]`` (target rows, source columns), circuit-tracer's."""
    full = torch.zeros(n_nodes, n_nodes)
    for span, block in blocks(rows):
        full[row_nodes[span]] = block
    return full
