"""``attribute``: the attribution graph of one prompt, circuit-tracer's algorithm.

1. One frozen pass over ``batch_size`` copies of the prompt
   (:func:`~mechscope.graphs.replacement.attribution_pass`), its nodes and logit targets.
2. The logit rows, ``batch_size`` targets per backward pass.
3. The feature rows: every active feature, or (``max_feature_nodes``) the most influential
   ones, chosen greedily as circuit-tracer does: after each ``update_interval`` batches the
   features not yet visited are ranked by their influence on the logits through the rows
   computed so far, and the next batches take the top of that ranking.
4. The rows sorted into node order, the columns of features left out dropped, and one
   zero column per logit appended: ``rows [R, N]`` over ``N = features + L·T errors + T
   tokens + K logits``, the layout circuit-tracer's dense matrix has (its error and token
   rows, all zero, are not stored).
"""

from __future__ import annotations

from typing import Any

import torch

from mechscope.dictionaries.crosslayer import CrossLayerTranscoder
from mechscope.dictionaries.sets import DictionarySet
from mechscope.engine import Engine
from mechscope.errors import InputError
from mechscope.graphs.graph import Graph
from mechscope.graphs.influence import Layout
from mechscope.graphs.replacement import Nodes, replacement_context
from mechscope.graphs.rows import compute_rows
from mechscope.graphs.transcoders import Transcoders
from mechscope.progress import make_progress


def attribute(
    engine: Engine,
    transcoders: DictionarySet | CrossLayerTranscoder,
    ids: torch.Tensor,
    *,
    max_n_logits: int = 10,
    desired_logit_prob: float = 0.95,
    batch_size: int = 64,
    max_feature_nodes: int | None = None,
    zero_positions: int = 1,
    update_interval: int = 4,
    progress: bool = False,
) -> Graph:
    """The graph of ``ids [T]`` (module docstring). ``zero_positions``: leading positions
    (the BOS) whose features and errors are no nodes."""
    ids = torch.as_tensor(ids).reshape(-1)
    if ids.numel() <= zero_positions:
        raise InputError(
            f"a prompt longer than its {zero_positions} leading position(s) left out, got "
            f"{ids.numel()} token(s)",
            field="prompt",
        )
    if batch_size < 1:
        raise InputError(f"a batch size of at least 1, got {batch_size}", field="batch_size")
    with replacement_context(
        engine, transcoders, ids, batch_size, zero_positions=zero_positions,
        max_n_logits=max_n_logits, desired_logit_prob=desired_logit_prob,
    ) as rep, make_progress(progress) as bar:  # fmt: skip
        task = bar.add_task("attribution rows", total=None, unit="nodes")
        rows, order, selected = _all_rows(
            rep.state, rep.nodes, batch_size, max_feature_nodes, update_interval,
            lambda n: bar.advance(task, n),
        )  # fmt: skip
    return _assemble(engine, rep.tc, ids, rep.nodes, rows, order, selected)


def _all_rows(
    state: Any,
    nodes: Nodes,
    batch_size: int,
    max_feature_nodes: int | None,
    update_interval: int,
    advance: Any,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Logit rows then feature rows: ``rows [R, n_columns]``, the node each row is (logits
    as ``n_columns + k``), and the features visited ``[n_selected]`` (sorted)."""
    n_layers, n_pos = nodes.errors.shape[:2]
    n_feat = nodes.n_features
    n_cols = n_feat + (n_layers + 1) * n_pos
    n_logits = int(nodes.logit_ids.shape[0])
    budget = min(max_feature_nodes if max_feature_nodes is not None else n_feat, n_feat)
    rows = torch.zeros(budget + n_logits, n_cols)
    row_nodes = torch.zeros(budget + n_logits, dtype=torch.long)
    total_batches = -(-n_logits // batch_size) + -(-budget // batch_size)
    done_batches = 0

    def run(layers, positions, vectors, at: int, node_ids) -> None:
        nonlocal done_batches
        done_batches += 1
        got = compute_rows(
            state, nodes, layers, positions, vectors, last=done_batches == total_batches
        )
        rows[at : at + got.shape[0]] = got
        row_nodes[at : at + got.shape[0]] = node_ids
        advance(got.shape[0])

    for start in range(0, n_logits, batch_size):
        k = torch.arange(start, min(start + batch_size, n_logits))
        run(
            torch.full((len(k),), n_layers),
            torch.full((len(k),), n_pos - 1),
            nodes.logit_vectors[k],
            start,
            n_cols + k,
        )
    filled = n_logits
    visited = torch.zeros(n_feat, dtype=torch.bool)
    logit_probs = nodes.logit_probs.float()
    while int(visited.sum()) < budget:
        if budget == n_feat:
            pending = torch.arange(n_feat)
        else:
            influence = _partial_influence(rows[:filled], row_nodes[:filled], logit_probs, n_cols)
            rank = influence[:n_feat].argsort(descending=True)
            queue = min(update_interval * batch_size, budget - int(visited.sum()))
            pending = rank[~visited[rank]][:queue]
        for start in range(0, len(pending), batch_size):
            idx = pending[start : start + batch_size]
            run(
                nodes.active[idx, 0],
                nodes.active[idx, 1],
                nodes.directions[idx],
                filled,
                idx,
            )
            visited[idx] = True
            filled += len(idx)
    return rows, row_nodes, visited.nonzero(as_tuple=True)[0]


def _partial_influence(
    rows: torch.Tensor, row_nodes: torch.Tensor, logit_probs: torch.Tensor, n_cols: int
) -> torch.Tensor:
    """circuit-tracer's ``compute_partial_influences``: influence over ``n_cols + K`` nodes
    from the rows computed so far (at most 128 steps)."""
    normalized = rows.abs()
    normalized = normalized / normalized.sum(1, keepdim=True).clamp(min=1e-8)
    k = logit_probs.shape[0]
    prod = torch.zeros(n_cols + k)
    prod[n_cols:] = logit_probs
    influence = torch.zeros(n_cols + k)
    padded = torch.cat([normalized, torch.zeros(rows.shape[0], k)], 1)
    for _ in range(128):
        prod = prod[row_nodes] @ padded
        if not prod.any():
            return influence
        influence += prod
    raise RuntimeError("partial influence did not converge in 128 steps")


def _assemble(
    engine: Engine,
    tc: Transcoders,
    ids: torch.Tensor,
    nodes: Nodes,
    rows: torch.Tensor,
    row_nodes: torch.Tensor,
    selected: torch.Tensor,
) -> Graph:
    """Rows in node order over ``N`` columns (module docstring, step 4)."""
    n_feat, n_sel = nodes.n_features, int(selected.numel())
    n_layers, n_pos = nodes.errors.shape[:2]
    n_logits = int(nodes.logit_ids.shape[0])
    layout = Layout(n_sel, n_layers * n_pos, n_pos, n_logits)
    keep = torch.cat([selected, torch.arange(n_feat, rows.shape[1])])
    new_index = torch.full((n_feat,), -1, dtype=torch.long)
    new_index[selected] = torch.arange(n_sel)
    is_logit = row_nodes >= rows.shape[1]
    target = torch.empty_like(row_nodes)
    target[is_logit] = row_nodes[is_logit] - rows.shape[1] + layout.logits.start
    target[~is_logit] = new_index[row_nodes[~is_logit]]
    order = target.argsort()
    stored = torch.cat([rows[:, keep], torch.zeros(rows.shape[0], n_logits)], 1)[order]
    lm = engine.lm
    return Graph(
        prompt=lm.tokenizer.decode(ids) if lm.tokenizer is not None else "",
        tokens=ids.cpu(),
        active=nodes.active[selected],
        activations=nodes.activations[selected],
        rows=stored,
        row_nodes=target[order],
        layout=layout,
        logit_ids=nodes.logit_ids,
        logit_probs=nodes.logit_probs,
        n_active=n_feat,
        model=lm.spec,
        transcoders=tc.describe(),
        d_sae=tc.d_sae,
    )
