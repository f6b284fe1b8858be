"""``attribute``: the attribution graph of one prompt, circuit-tracer's algorithm.

1. One frozen pass over one copy of the prompt
   (:func:`~mechscope.graphs.replacement.attribution_pass`), kept for the backward passes
   (each vectorised over its targets, not over copies of the pass).
2. The nodes and the logit targets, read off that pass
   (:func:`~mechscope.graphs.replacement.collect_nodes`); with their number known, the
   memory model (:mod:`mechscope.graphs.memory`) sizes the rest of the run: the rows per
   backward pass, and whether the adjacency rows stay in memory or go to a file.
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
from mechscope.graphs.prefixes import prefix_lengths
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
    before the backward passes run."""
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
        state, logits = _pass(engine, tc, ids)
        nodes = collect_nodes(
            engine, tc, state, logits, zero_positions=zero_positions,
            max_n_logits=max_n_logits, desired_logit_prob=desired_logit_prob,
        )  # fmt: skip
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
        with make_progress(progress) as bar:
            task = bar.add_task("attribution rows", total=None, unit="nodes")
            advance = lambda n: bar.advance(task, n)  # noqa: E731
            if plan.n_selected == nodes.n_features:
                rows, order, selected = _every_row(engine, tc, ids, state, nodes, plan, advance)
            else:
                rows, order, selected = _greedy_rows(state, nodes, plan, update_interval, advance)
        del state
    return _assemble(engine, tc, ids, nodes, rows, order, selected, plan)


def _pass(engine: Engine, tc: Transcoders, ids: torch.Tensor) -> tuple[Any, torch.Tensor]:
    """The pass kept for the backward and its last logits; what it froze is not kept (the
    graph of the pass holds what the gradients need)."""
    state, _frozen, logits = attribution_pass(engine, tc, ids, 1)
    return state, logits


class _Writer:
    """Rows into the adjacency: each batch's rows from one backward pass, written from row
    ``at`` on, with the node each row is."""

    def __init__(self, nodes: Nodes, plan: GraphPlan, advance: Any) -> None:
        n_layers, n_pos = nodes.errors.shape[:2]
        self.nodes, self.advance = nodes, advance
        self.n_logits = int(nodes.logit_ids.shape[0])
        self.n_cols = nodes.n_features + (n_layers + 1) * n_pos
        n_rows = plan.n_selected + self.n_logits
        self.rows = new_rows(n_rows, self.n_cols + self.n_logits, plan.folder, plan.on_disk)
        self.row_nodes = torch.zeros(n_rows, dtype=torch.long)

    def features(self, state: Any, idx: torch.Tensor, at: int | None, last: bool) -> None:
        """The rows of features ``idx``, from row ``at`` on, or (None) each at its own
        index (``idx`` ascending)."""
        nodes = self.nodes
        got = self._rows(state, nodes.active[idx, 0], nodes.active[idx, 1],
                         nodes.directions[idx], last)  # fmt: skip
        if at is not None:
            self._put(at, got, idx)
            return
        breaks = (idx.diff() != 1).nonzero(as_tuple=True)[0] + 1
        for piece in torch.tensor_split(torch.arange(len(idx)), breaks):
            self._put(int(idx[piece[0]]), got[piece], idx[piece])

    def logits(self, state: Any, at: int, batch: int, last: bool) -> None:
        """Every logit target's row, from row ``at`` on."""
        n_layers, n_pos = self.nodes.errors.shape[:2]
        for start in range(0, self.n_logits, batch):
            k = torch.arange(start, min(start + batch, self.n_logits))
            done = last and start + batch >= self.n_logits
            layers, positions = torch.full((len(k),), n_layers), torch.full((len(k),), n_pos - 1)
            got = self._rows(state, layers, positions, self.nodes.logit_vectors[k], done)
            self._put(at + start, got, self.n_cols + k)

    def _rows(self, state, layers, positions, vectors, last: bool) -> torch.Tensor:
        return compute_rows(state, self.nodes, layers, positions, vectors, last=last,
                            width=self.n_cols + self.n_logits)  # fmt: skip

    def _put(self, at: int, got: torch.Tensor, node_ids: torch.Tensor) -> None:
        write_rows(self.rows, at, got)
        self.row_nodes[at : at + got.shape[0]] = node_ids
        self.advance(got.shape[0])


def _every_row(
    engine: Engine, tc: Transcoders, ids: torch.Tensor, state: Any, nodes: Nodes,
    plan: GraphPlan, advance: Any,
) -> tuple[Rows, torch.Tensor, torch.Tensor]:  # fmt: skip
    """Every feature's row and the logits' rows, in the graph's own order (feature ``i`` is
    row ``i``, logit ``k`` row ``n_features + k``): the logits' and the last positions'
    features' through the whole prompt's pass ``state`` (then freed), the other features'
    through passes over prefixes of the prompt (:mod:`mechscope.graphs.prefixes`)."""
    n_layers, n_pos = nodes.errors.shape[:2]
    out = _Writer(nodes, plan, advance)
    *shorter, whole = prefix_lengths(nodes.active, n_layers, n_pos, plan.batch)
    out.logits(state, nodes.n_features, plan.batch, last=not whole.batches)
    for prefix in (whole, *shorter):
        if prefix is not whole:
            state = attribution_pass(engine, tc, ids[: prefix.tokens], 1, layers=prefix.layers)[0]
        for i, idx in enumerate(prefix.batches):
            out.features(state, idx, None, last=i == len(prefix.batches) - 1)
        state.release()  # the pass's graph went with its last backward
    return out.rows, out.row_nodes, torch.arange(nodes.n_features)


def _greedy_rows(
    state: Any, nodes: Nodes, plan: GraphPlan, update_interval: int, advance: Any
) -> tuple[Rows, torch.Tensor, torch.Tensor]:
    """The logit rows, then the rows of the ``plan.n_selected`` features chosen greedily
    (module docstring, step 4), all through the whole prompt's pass: ``rows [R, n_columns +
    K]`` (the last ``K`` columns, the logits', zero), the node each row is (logits as
    ``n_columns + k``), and the features visited ``[n_selected]`` (sorted)."""
    out = _Writer(nodes, plan, advance)
    n_feat, batch, budget = nodes.n_features, plan.batch, plan.n_selected
    total_batches = -(-budget // batch)
    out.logits(state, 0, batch, last=False)
    filled, done_batches = out.n_logits, 0
    visited = torch.zeros(n_feat, dtype=torch.bool)
    weights = torch.zeros(out.n_cols + out.n_logits)
    weights[out.n_cols :] = nodes.logit_probs.float()
    while int(visited.sum()) < budget:  # circuit-tracer's compute_partial_influences
        influence = propagate(
            out.rows, out.row_nodes, weights, clamp=1e-8, stop=filled, max_iter=127
        )
        rank = influence[:n_feat].argsort(descending=True)
        queue = min(update_interval * batch, budget - int(visited.sum()))
        pending = rank[~visited[rank]][:queue]
        for start in range(0, len(pending), batch):
            idx = pending[start : start + batch]
            done_batches += 1
            out.features(state, idx, filled, last=done_batches == total_batches)
            visited[idx] = True
            filled += len(idx)
    return out.rows, out.row_nodes, visited.nonzero(as_tuple=True)[0]


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
