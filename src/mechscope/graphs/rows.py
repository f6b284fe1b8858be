"""Adjacency rows from batched backward passes through the frozen replacement.

Row ``r`` of a batch belongs to one target node: a feature (its pre-activation is
``direction · x_in`` at its layer and position) or a logit (its demeaned logit is
``vector · h`` at the final norm's input, last position). One ``autograd.grad`` call per
batch, vectorised over its targets (``is_grads_batched``: each target's vector one entry of
the backward, through the graph of one pass over one copy of the prompt), reads the
gradients at every layer's MLP output and at the token embeddings; a source's edge to the target is
that gradient dotted with what the source writes there (``a_s · W_dec`` for a feature,
summed over the layers a cross-layer feature writes to; the error vector; the embedding).
Since the pass is linear in those writes, this is the exact direct effect.

:func:`node_columns` is that second step alone, for any target's gradients (the queries
and keys of :mod:`mechscope.graphs.qk`).

Columns: every active feature (in :class:`~mechscope.graphs.replacement.Nodes` order),
then the error nodes (layer-major, ``L × T``), then the token nodes (``T``); ``width``
leaves zero columns after them (the logits' in the graph's layout). A source layer's
gradients at its features' positions are gathered :data:`GATHER_ELEMENTS` at a time, so a
long prompt's thousands of features per layer never make one ``[n, m, d]`` block.
"""

from __future__ import annotations

import torch

from mechscope.graphs.freeze import PassState
from mechscope.graphs.replacement import Nodes

#: Elements of the gathered gradients ``[n, m, d]`` one einsum reads (64 MiB of fp32).
GATHER_ELEMENTS = 2**24


def n_columns(nodes: Nodes) -> int:
    """Features, errors and tokens: the sources a row has a weight for."""
    n_layers, n_pos = nodes.errors.shape[:2]
    return nodes.n_features + (n_layers + 1) * n_pos


def feature_offsets(nodes: Nodes) -> dict[int, int]:
    """The first column of each source layer's active features."""
    layers = nodes.active[:, 0]
    return {int(layer): int((layers < layer).sum()) for layer in nodes.decoders}


def source_tensors(state: PassState, n_layers: int) -> list[torch.Tensor]:
    """Where the nodes write in the pass's graph: every layer's MLP output, then the token
    embeddings (the inputs a row's gradients are taken at)."""
    return [state.out[layer] for layer in range(n_layers)] + [state.embed]  # type: ignore[list-item]


def compute_rows(
    state: PassState,
    nodes: Nodes,
    layers: torch.Tensor,  # [n]: the target's layer; n_layers for a logit
    positions: torch.Tensor,  # [n]
    vectors: torch.Tensor,  # [n, d]: direction (feature) or logit vector
    *,
    last: bool = False,
    width: int | None = None,
) -> torch.Tensor:
    """``[n, width]`` fp32 (default ``n_columns``): the direct effect of every source on
    each target. ``last``: free the pass's graph after this batch."""
    n = int(layers.shape[0])
    n_layers = int(nodes.errors.shape[0])
    outputs, grads = [], []
    for layer in layers.unique().tolist():
        target = state.final if layer == n_layers else state.x_in[int(layer)]  # [B, T, d]
        g = torch.zeros(n, *target.shape, dtype=target.dtype, device=target.device)
        which = (layers == layer).nonzero(as_tuple=True)[0]
        g[which.to(g.device), 0, positions[which].to(g.device)] = vectors[which].to(g)
        outputs.append(target)
        grads.append(g)  # [n, B, T, d]: row 0 of the pass, one target per batch entry
    found = torch.autograd.grad(
        outputs,
        source_tensors(state, n_layers),
        grads,
        retain_graph=not last,
        allow_unused=True,
        materialize_grads=False,
        is_grads_batched=True,
    )
    found = tuple(None if f is None else f[:, 0] for f in found)  # [n, T, d] each
    return node_columns(found, nodes, n, width)


def node_columns(
    found: tuple[torch.Tensor | None, ...], nodes: Nodes, n: int, width: int | None = None
) -> torch.Tensor:
    """``[n, width]`` fp32 (default ``n_columns``): each of the first ``n`` rows' gradients
    at the MLP outputs and the embeddings (``found``: one ``[B, T, d]`` or None per layer,
    then the embeddings') dotted with what every node writes there."""
    n_layers, n_pos = nodes.errors.shape[:2]
    rows = torch.zeros(n, width or n_columns(nodes))
    offsets = feature_offsets(nodes)
    active_pos = nodes.active[:, 1]
    for source, writes in nodes.decoders.items():
        start = offsets[source]
        count = writes[0][1].shape[0]
        pos = active_pos[start : start + count]
        total = rows[:, start : start + count]
        for target_layer, rows_w in writes:
            g = found[target_layer]
            if g is None:
                continue
            step = max(1, GATHER_ELEMENTS // (n * g.shape[-1]))
            for a in range(0, count, step):
                sub = g[:n, pos[a : a + step].to(g.device)].float()  # [n, m, d]
                w = rows_w[a : a + step].to(g.device)
                total[:, a : a + step] += torch.einsum("nmd,md->nm", sub, w).cpu()
    base = nodes.n_features
    for layer in range(n_layers):
        g = found[layer]
        if g is not None:
            err = nodes.errors[layer].to(g.device)
            block = torch.einsum("ntd,td->nt", g[:n].float(), err).cpu()
            rows[:, base + layer * n_pos : base + (layer + 1) * n_pos] = block
    g = found[-1]
    if g is not None:
        tokens = torch.einsum("ntd,td->nt", g[:n].float(), nodes.embeds.to(g.device)).cpu()
        rows[:, base + n_layers * n_pos : base + (n_layers + 1) * n_pos] = tokens
    return rows
