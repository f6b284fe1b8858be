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
features are taken a block of positions at a time, one product per position (the features
at a position share its gradients), each block's gathered gradients ``[q, n, d]`` and
padded decoder rows ``[q, m_q, d]`` at most :data:`GATHER_ELEMENTS` elements, so a long
prompt's thousands of features per layer never make one large block.
"""

from __future__ import annotations

import torch

from mechscope.graphs.freeze import PassState
from mechscope.graphs.replacement import Nodes

#: Elements of a block's gathered gradients or padded decoder rows (64 MiB of fp32 each).
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
    n_pos = int(nodes.errors.shape[1])  # a prefix's pass has no gradient after its end
    found = tuple(None if f is None else _padded(f[:, 0], n_pos) for f in found)  # [n, T, d]
    return node_columns(found, nodes, n, width)


def _padded(g: torch.Tensor, n_pos: int) -> torch.Tensor:
    """``g [n, t, d]`` with zeros after its ``t`` positions, to ``[n, n_pos, d]``."""
    if g.shape[1] == n_pos:
        return g
    return torch.nn.functional.pad(g, (0, 0, 0, n_pos - g.shape[1]))


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
            if g is not None:
                total += _feature_block(g, pos, rows_w, n)
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


def _feature_block(
    g: torch.Tensor,  # [B', T, d]: the rows' gradients at one layer's output
    pos: torch.Tensor,  # [m]: each feature's position, ascending
    w: torch.Tensor,  # [m, d]: what each feature writes there
    n: int,
) -> torch.Tensor:
    """``[n, m]`` fp32: each row's gradient at a feature's position dotted with what the
    feature writes. Features sharing a position share that position's gradients, so each
    position is one product ``[n, d] @ [d, m_q]`` (batched over positions, the decoder rows
    padded to the most features at one position), where gathering every feature's own copy
    of the gradients would read ``n·m·d`` elements one product at a time."""
    m, d = w.shape
    out = torch.empty(n, m)
    if m == 0:
        return out
    positions, counts = torch.unique_consecutive(pos, return_counts=True)  # [Q], [Q]
    first = counts.cumsum(0) - counts  # [Q]: each position's first feature
    which = torch.repeat_interleave(torch.arange(len(positions)), counts)  # [m]
    slot = torch.arange(m) - first[which]  # [m]: the feature's place at its position
    width = int(counts.max())
    step = max(1, GATHER_ELEMENTS // (max(n, width) * d))
    for a in range(0, len(positions), step):
        b = min(a + step, len(positions))
        lo, hi = int(first[a]), int(first[b - 1] + counts[b - 1])
        at, place = (which[lo:hi] - a).to(g.device), slot[lo:hi].to(g.device)
        pad = torch.zeros(b - a, width, d, device=g.device)  # [q, width, d]
        pad[at, place] = w[lo:hi].to(g.device, torch.float32)
        grads = g[:n, positions[a:b].to(g.device)].float().transpose(0, 1)  # [q, n, d]
        prod = torch.bmm(grads, pad.transpose(1, 2))  # [q, n, width]
        out[:, lo:hi] = prod[at, :, place].T.cpu()
    return out
