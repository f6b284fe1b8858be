"""``attribute``: the attribution graph of one prompt, circuit-tracer's algorithm.

1. One pass over the prompt (no gradient) gives the nodes and the logit targets
   (:func:`~mechscope.graphs.replacement.collect_nodes`); with their number known, the
   memory model (:mod:`mechscope.graphs.memory`) sizes the rest of the run: the rows per
   backward pass, and whether the adjacency rows stay in memory or go to a file.
2. One frozen pass over that many copies of the prompt
   (:func:`~mechscope.graphs.replacement.attribution_pass`), kept for the backward passes.
3. The logit rows, one batch of targets per backward pass.
4. The feature rows: every active feature, or (``max_feature_nodes``) the most influential
   ones, chosen greedily as circuit-tracer does: after each ``update_interval`` batches the
   features not yet visited are ranked by their influence on the logits through the rows
   computed so far, and the next batches take the top of that ranking.
5. The rows in node order over ``N = features + L·T errors + T tokens + K logits``
   columns (the logits' columns zero), the layout circuit-tracer's dense matrix has (its
   error and token rows, all zero, are not stored). With every feature kept, each row is
   written where it ends up; otherwise the columns of the features left out are dropped
   and the rows sorted, a block at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from mechscope.dictionaries.crosslayer import CrossLayerTranscoder
from mechscope.dictionaries.sets import DictionarySet
from mechscope.engine import Engine
from mechscope.engine.analysis.memory_model import note
from mechscope.engine.core.frozen import frozen_parameters
from mechscope.errors import InputError
from mechscope.graphs.graph import Graph
from mechscope.graphs.influence import Layout, propagate
from mechscope.graphs.memory import GraphPlan, plan_graph
from mechscope.graphs.replacement import Nodes, attribution_pass, collect_nodes
from mechscope.graphs.rows import compute_rows
from mechscope.graphs.store import Rows, block_rows, gather_rows, new_rows, write_rows
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
    folder: Path | str | None = None,
    on_plan: Callable[[GraphPlan], None] | None = None,
    progress: bool = False,
) -> Graph:
    """The graph of ``ids [T]`` (module docstring). ``zero_positions``: leading positions
    (the BOS) whose features and errors are no nodes. ``batch_size``: the most rows per
    backward pass (fewer where the model's memory budget says so). ``folder``: where the
    adjacency rows go when they do not fit in memory (default: the system's temporary
    folder; an unnamed file, gone with the graph). ``on_plan``: called with the memory plan
    before the heavy passes run."""
    lm = engine.lm
    ids = torch.as_tensor(ids).reshape(-1)
    if ids.numel() <= zero_positions:
        raise InputError(
            f"a prompt longer than its {zero_positions} leading position(s) left out, got "
            f"{ids.numel()} token(s)",
            field="prompt",
        )
    if batch_size < 1:
        raise InputError(f"a batch size of at least 1, got {batch_size}", field="batch_size")
    tc = Transcoders(transcoders, lm.n_layers)
    with frozen_parameters(lm.model, tc.source):
        nodes = _nodes(engine, tc, ids, zero_positions, max_n_logits, desired_logit_prob)
        per_layer = torch.bincount(nodes.active[:, 0], minlength=lm.n_layers)
        plan = plan_graph(
            lm, tc, int(ids.numel()), nodes.n_features, int(nodes.logit_ids.shape[0]),
            per_layer.tolist(), max_feature_nodes=max_feature_nodes, batch_size=batch_size,
            folder=folder,
        )  # fmt: skip
        where = "a file" if plan.on_disk else "memory"
        note(f"attribution graph, batch {plan.batch}, rows in {where}", plan.peak)
        if on_plan is not None:
            on_plan(plan)
        state = attribution_pass(engine, tc, ids, 1)[0]  # the backward is batched, not the pass
        with make_progress(progress) as bar:
            task = bar.add_task("attribution rows", total=None, unit="nodes")
            rows, order, selected = _all_rows(
                state, nodes, plan, update_interval, lambda n: bar.advance(task, n)
            )
        del state  # the pass's graph is freed by the last backward, its tensors here
    return _assemble(engine, tc, ids, nodes, rows, order, selected, plan)


def _nodes(
    engine: Engine,
    tc: Transcoders,
    ids: torch.Tensor,
    zero_positions: int,
    max_n: int,
    desired: float,
) -> Nodes:
    """The nodes, from one pass over the prompt without gradients (step 1), nothing of the
    pass kept."""
    with torch.no_grad():
        first, _, logits = attribution_pass(engine, tc, ids, 1, grad=False)
        return collect_nodes(
            engine, tc, first, logits, zero_positions=zero_positions, max_n_logits=max_n,
            desired_logit_prob=desired,
        )  # fmt: skip


def _all_rows(
    state: Any, nodes: Nodes, plan: GraphPlan, update_interval: int, advance: Any
) -> tuple[Rows, torch.Tensor, torch.Tensor]:
    """Logit rows then feature rows: ``rows [R, n_columns + K]`` (the last ``K`` columns,
    the logits', zero), the node each row is (logits as ``n_columns + k``), and the
    features visited ``[n_selected]`` (sorted). With every feature visited, feature ``i``
    is row ``i`` and logit ``k`` row ``n_features + k``: the graph's own order."""
    n_layers, n_pos = nodes.errors.shape[:2]
    n_feat, batch = nodes.n_features, plan.batch
    n_cols = n_feat + (n_layers + 1) * n_pos
    n_logits = int(nodes.logit_ids.shape[0])
    budget = plan.n_selected
    everything = budget == n_feat
    rows = new_rows(budget + n_logits, n_cols + n_logits, plan.folder, plan.on_disk)
    row_nodes = torch.zeros(budget + n_logits, dtype=torch.long)
    total_batches = -(-n_logits // batch) + -(-budget // batch)
    done_batches = 0

    def run(layers, positions, vectors, at: int, node_ids) -> None:
        nonlocal done_batches
        done_batches += 1
        got = compute_rows(
            state, nodes, layers, positions, vectors, last=done_batches == total_batches,
            width=n_cols + n_logits,
        )  # fmt: skip
        write_rows(rows, at, got)
        row_nodes[at : at + got.shape[0]] = node_ids
        advance(got.shape[0])

    logit_at = n_feat if everything else 0
    for start in range(0, n_logits, batch):
        k = torch.arange(start, min(start + batch, n_logits))
        run(
            torch.full((len(k),), n_layers),
            torch.full((len(k),), n_pos - 1),
            nodes.logit_vectors[k],
            logit_at + start,
            n_cols + k,
        )
    filled = 0 if everything else n_logits
    visited = torch.zeros(n_feat, dtype=torch.bool)
    weights = torch.zeros(n_cols + n_logits)
    weights[n_cols:] = nodes.logit_probs.float()
    while int(visited.sum()) < budget:
        if everything:
            pending = torch.arange(n_feat)
        else:  # circuit-tracer's compute_partial_influences (at most 128 steps)
            influence = propagate(rows, row_nodes, weights, clamp=1e-8, stop=filled, max_iter=127)
            rank = influence[:n_feat].argsort(descending=True)
            queue = min(update_interval * batch, budget - int(visited.sum()))
            pending = rank[~visited[rank]][:queue]
        for start in range(0, len(pending), batch):
            idx = pending[start : start + batch]
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


def _assemble(
    engine: Engine,
    tc: Transcoders,
    ids: torch.Tensor,
    nodes: Nodes,
    rows: Rows,
    row_nodes: torch.Tensor,
    selected: torch.Tensor,
    plan: GraphPlan,
) -> Graph:
    """Rows in node order over ``N`` columns (module docstring, step 5)."""
    n_feat, n_sel = nodes.n_features, int(selected.numel())
    n_layers, n_pos = nodes.errors.shape[:2]
    n_logits = int(nodes.logit_ids.shape[0])
    layout = Layout(n_sel, n_layers * n_pos, n_pos, n_logits)
    if n_sel == n_feat:  # written in node order already
        stored, target = rows, row_nodes
    else:
        n_cols = rows.shape[1] - n_logits
        keep = torch.cat([selected, torch.arange(n_feat, rows.shape[1])])
        new_index = torch.full((n_feat,), -1, dtype=torch.long)
        new_index[selected] = torch.arange(n_sel)
        is_logit = row_nodes >= n_cols
        node = torch.empty_like(row_nodes)
        node[is_logit] = row_nodes[is_logit] - n_cols + layout.logits.start
        node[~is_logit] = new_index[row_nodes[~is_logit]]
        order = node.argsort()
        stored = new_rows(rows.shape[0], layout.n_nodes, plan.folder, plan.on_disk)
        step = block_rows(rows.shape[1])
        for start in range(0, rows.shape[0], step):
            block = gather_rows(rows, order[start : start + step])[:, keep]
            write_rows(stored, start, block)
        target = node[order]
        del rows
    lm = engine.lm
    return Graph(
        prompt=lm.tokenizer.decode(ids) if lm.tokenizer is not None else "",
        tokens=ids.cpu(),
        active=nodes.active[selected],
        activations=nodes.activations[selected],
        rows=stored,
        row_nodes=target,
        layout=layout,
        logit_ids=nodes.logit_ids,
        logit_probs=nodes.logit_probs,
        n_active=n_feat,
        model=lm.spec,
        transcoders=tc.describe(),
        d_sae=tc.d_sae,
    )
