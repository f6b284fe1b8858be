"""An attribution graph: its nodes, its adjacency rows, and what pruning keeps.

Nodes, in circuit-tracer's order: the selected features (``active [n, 3]``: layer,
position, feature; sorted), the error nodes (layer-major: node ``n + l·T + t``), the token
nodes (``T``) and the logit targets (``K``, most probable first). ``rows [R, N]`` are the
adjacency rows of the features and the logits (``row_nodes [R]`` says which node each
is; target rows, source columns: ``rows[r, s]`` is the direct effect of node ``s`` on the
pre-activation of node ``row_nodes[r]``). Error and token nodes have no inputs, so their
rows are zero and not stored; :meth:`adjacency` gives the square matrix. The rows are a
tensor, or a :class:`~mechscope.graphs.store.RowFile` where the run's memory model found
they would not fit in memory (every method reads either the same way).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import torch

from mechscope.graphs.influence import Layout, Pruned, dense, graph_scores, prune
from mechscope.graphs.store import Rows


@dataclass
class Graph:
    """The graph of one prompt (module docstring). ``n_active``: every active feature
    (``active`` holds the selected ones); ``transcoders``: what they were."""

    prompt: str
    tokens: torch.Tensor  # [T] token ids
    active: torch.Tensor  # [n, 3] (layer, position, feature)
    activations: torch.Tensor  # [n]
    rows: Rows  # [R, N] fp32
    row_nodes: torch.Tensor  # [R]
    layout: Layout
    logit_ids: torch.Tensor  # [K]
    logit_probs: torch.Tensor  # [K]
    n_active: int
    model: str
    transcoders: dict[str, Any] = field(default_factory=dict)
    d_sae: int = 0

    @property
    def n_layers(self) -> int:
        return self.layout.n_errors // max(self.layout.n_tokens, 1)

    @property
    def n_pos(self) -> int:
        return self.layout.n_tokens

    def adjacency(self) -> torch.Tensor:
        """``[N, N]``: circuit-tracer's dense adjacency (target rows, source columns)."""
        return dense(self.rows, self.row_nodes, self.layout.n_nodes)

    def prune(self, node_threshold: float = 0.8, edge_threshold: float = 0.98) -> Pruned:
        """The nodes and edges kept by cumulative influence (circuit-tracer's defaults)."""
        return prune(
            self.rows, self.row_nodes, self.layout, self.logit_probs, node_threshold, edge_threshold
        )

    def scores(self) -> tuple[float, float]:
        """(replacement score, completeness score)."""
        return graph_scores(self.rows, self.row_nodes, self.layout, self.logit_probs)

    def node_kind(self, node: int) -> str:
        """``feature``, ``error``, ``token`` or ``logit``."""
        lay = self.layout
        if node < lay.n_features:
            return "feature"
        if node < lay.tokens.start:
            return "error"
        return "token" if node < lay.logits.start else "logit"

    def node_table(self, pruned: Pruned | None = None) -> pd.DataFrame:
        """One row per node: ``node``, ``kind``, ``layer`` (``E`` tokens and logits as
        circuit-tracer numbers them: tokens -1, logits ``n_layers``), ``position``,
        ``feature`` (the feature index, a token or logit's vocabulary id, -1 for an error),
        ``activation``, ``influence`` (cumulative) and ``kept`` when ``pruned`` is given."""
        lay, n_pos = self.layout, self.n_pos
        n = lay.n_nodes
        kind, layer, pos, feat, act = [], [], [], [], []
        for i in range(n):
            k = self.node_kind(i)
            kind.append(k)
            if k == "feature":
                lyr, p, f = (int(v) for v in self.active[i])
                layer.append(lyr), pos.append(p), feat.append(f)
                act.append(float(self.activations[i]))
            elif k == "error":
                lyr, p = divmod(i - lay.n_features, n_pos)
                layer.append(lyr), pos.append(p), feat.append(-1), act.append(float("nan"))
            elif k == "token":
                p = i - lay.tokens.start
                layer.append(-1), pos.append(p), feat.append(int(self.tokens[p]))
                act.append(float("nan"))
            else:
                j = i - lay.logits.start
                layer.append(self.n_layers), pos.append(n_pos - 1)
                feat.append(int(self.logit_ids[j])), act.append(float(self.logit_probs[j]))
        frame = pd.DataFrame(
            {"node": range(n), "kind": kind, "layer": layer, "position": pos, "feature": feat,
             "activation": act}
        )  # fmt: skip
        if pruned is not None:
            frame["influence"] = pruned.cumulative.numpy()
            frame["kept"] = pruned.node_mask.numpy()
        return frame
