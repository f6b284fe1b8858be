"""The frozen replacement computed forward: what the graph's edges claim, measured.

A ``replay`` pass (:mod:`mechscope.graphs.freeze`) holds every norm scale, attention score
and MLP constant at the clean pass's values and lets the caller take a source node away
(a feature's ``a · W_dec`` at each layer it writes to, an error vector, a token's
embedding), each in its own row. Because the frozen model is linear, the drop of a target's
pre-activation is that source's edge to it, exactly: gradients and patches are two
computations of the same number, which is how the tests check every edge. The same pass is
the linearity check of a family: twice a change must move every target twice as far,
which fails where something on the residual path was left unfrozen.
"""

from __future__ import annotations

import torch

from mechscope.engine import Engine
from mechscope.graphs.freeze import Frozen, PassState, freeze_edits
from mechscope.graphs.replacement import Nodes
from mechscope.graphs.rows import feature_offsets
from mechscope.graphs.transcoders import Transcoders


def removal_deltas(
    nodes: Nodes, sources: list[int], width: int, d_model: int
) -> dict[int | str, torch.Tensor]:
    """Row ``r`` takes node ``sources[r]`` away (node numbers as the columns of
    :func:`~mechscope.graphs.rows.compute_rows`: features, errors, tokens)."""
    n_layers, n_pos = nodes.errors.shape[:2]
    rows = len(sources)
    deltas: dict[int | str, torch.Tensor] = {
        layer: torch.zeros(rows, n_pos, width) for layer in range(n_layers)
    }
    deltas["embed"] = torch.zeros(rows, n_pos, d_model)
    offsets = feature_offsets(nodes)
    for r, node in enumerate(sources):
        if node < nodes.n_features:
            layer, pos, _ = (int(v) for v in nodes.active[node])
            for target, w in nodes.decoders[layer]:
                deltas[target][r, pos] -= w[node - offsets[layer]].cpu()
        elif node < nodes.n_features + n_layers * n_pos:
            layer, pos = divmod(node - nodes.n_features, n_pos)
            deltas[layer][r, pos] -= nodes.errors[layer, pos].cpu()
        else:
            pos = node - nodes.n_features - n_layers * n_pos
            deltas["embed"][r, pos] -= nodes.embeds[pos].cpu()
    return deltas


def replay(
    engine: Engine,
    tc: Transcoders,
    ids: torch.Tensor,
    frozen: Frozen,
    deltas: dict[int | str, torch.Tensor],
) -> PassState:
    """One ``replay`` pass, a row per set of ``deltas [rows, T, d]``."""
    rows = int(next(iter(deltas.values())).shape[0])
    state = PassState()
    edits = freeze_edits(engine.lm, tc, "replay", frozen, state, deltas)
    with torch.no_grad():
        engine.run(ids.reshape(1, -1).expand(rows, -1), edits, logits=False)
    return state


def target_values(state: PassState, nodes: Nodes, targets: list[int]) -> torch.Tensor:
    """``[rows, n]``: the linear part of each target's pre-activation in every row (a
    feature's ``direction · x_in``; a logit's ``vector · h`` at the last position).
    Targets are numbered as :class:`Nodes` features, then ``n_features + k`` for logit
    ``k``."""
    out = []
    for t in targets:
        if t < nodes.n_features:
            layer, pos, _ = (int(v) for v in nodes.active[t])
            x = state.x_in[layer][:, pos].float()
            out.append(x @ nodes.directions[t].to(x.device))
        else:
            h = state.final[:, -1].float()  # type: ignore[index]
            out.append(h @ nodes.logit_vectors[t - nodes.n_features].to(h.device))
    return torch.stack(out, 1).cpu()
