"""QK attribution: which nodes of the graph make one head attend from a query to a key.

In the replacement model (attention patterns and norm scales frozen, the MLPs as
transcoders plus errors) the query ``q_i`` and the key ``k_j`` of layer ``L`` are affine
in what the nodes write (:mod:`mechscope.graphs.qk_sites`):
``q_i = Σ_a q_a + q_c``, ``k_j = Σ_b k_b + k_c``, over the active features, the error
nodes and the token embeddings, with ``q_c`` / ``k_c`` what no node writes (biases, the
BOS position's constant MLP output, position embeddings). Each node's part ``q_a`` is the
gradient of ``q_i`` at the node's write times the write (one backward pass per component
of ``q_i``, the machinery of the graph's rows, :func:`~mechscope.graphs.rows.node_columns`);
the constants come from a forward pass of the frozen model with every node's write taken
away. The pre-softmax score ``s = α · q_i · k_j`` then splits three ways, each exactly:

- through the query: ``α · q_a · k_j`` per node, plus ``α · q_c · k_j``;
- through the key: ``α · q_i · k_b`` per node, plus ``α · q_i · k_c``;
- by pairs: ``α · q_a · k_b``, whose sum over every pair (constants included) is ``s``.

With a soft-cap (Gemma 2) the split is of the score before it, which is what is bilinear.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch

from mechscope.errors import InputError, UnsupportedInterventionError
from mechscope.graphs.freeze import PassState, freeze_edits
from mechscope.graphs.qk_sites import WHAT, qk_edits, score_scaling
from mechscope.graphs.qk_targets import QKTarget, check_targets, check_unmasked_score
from mechscope.graphs.replacement import Nodes, Replacement
from mechscope.graphs.rows import feature_offsets, node_columns, source_tensors
from mechscope.models.loaded import LoadedModel
from mechscope.tolerance import rounding_tolerance


@dataclass
class QKAttribution:
    """One score split over the nodes (module docstring). Node ``n`` is column ``n`` of
    the graph's rows over every active feature (:func:`~mechscope.graphs.rows.n_columns`);
    the last row, ``n_columns``, is the constant. ``q_parts [N+1, d_qk]`` and
    ``k_parts [N+1, d_qk]`` fp64: each node's part of ``q_i`` and ``k_j``; ``pairs
    [P, 2]``: the (query-side, key-side) nodes of the largest products, ``pair_values
    [P]`` those products."""

    target: QKTarget
    kv_head: int
    scaling: float
    softcap: float | None
    q: torch.Tensor  # [d_qk] fp64: q_i as the model computed it
    k: torch.Tensor  # [d_qk] fp64: k_j
    model_score: float  # the score the model's softmax saw (after any soft-cap)
    q_parts: torch.Tensor
    k_parts: torch.Tensor
    pairs: torch.Tensor
    pair_values: torch.Tensor
    nodes: pd.DataFrame  # [N+1 rows]: kind, layer, position, feature, activation

    @property
    def score(self) -> float:
        """``α · q_i · k_j``: the score before any soft-cap."""
        return self.scaling * float(self.q @ self.k)

    @property
    def via_q(self) -> torch.Tensor:
        """``[N+1]``: each node's contribution through the query, ``α · q_a · k_j``."""
        return self.scaling * (self.q_parts @ self.k)

    @property
    def via_k(self) -> torch.Tensor:
        """``[N+1]``: each node's contribution through the key, ``α · q_i · k_b``."""
        return self.scaling * (self.k_parts @ self.q)

    def table(self) -> pd.DataFrame:
        """Every node with a contribution on either side, and the constant (the last row)."""
        frame = self.nodes.assign(via_q=self.via_q.numpy(), via_k=self.via_k.numpy())
        keep = (frame["via_q"] != 0) | (frame["via_k"] != 0) | (frame["kind"] == "constant")
        return frame[keep].reset_index(drop=True)

    def pairs_table(self) -> pd.DataFrame:
        """The largest pairwise products, largest magnitude first."""
        q_side = self.nodes.iloc[self.pairs[:, 0].numpy()].reset_index(drop=True)
        k_side = self.nodes.iloc[self.pairs[:, 1].numpy()].reset_index(drop=True)
        return pd.concat(
            [q_side.add_prefix("q_"), k_side.add_prefix("k_"),
             pd.DataFrame({"product": self.pair_values.numpy()})], axis=1,
        )  # fmt: skip

    def summary(self) -> dict[str, Any]:
        """The score, its scaling, the constants and what each side leaves unexplained."""
        t, via_q, via_k = self.target, self.via_q, self.via_k
        return {
            "layer": t.layer, "head": t.head, "query": t.query, "key": t.key,
            "kv_head": self.kv_head, "score": self.score, "model_score": self.model_score,
            "scaling": self.scaling, "softcap": self.softcap,
            "constant_q": float(via_q[-1]), "constant_k": float(via_k[-1]),
            "unexplained_q": self.score - float(via_q.sum()),
            "unexplained_k": self.score - float(via_k.sum()), "table": t.name,
        }  # fmt: skip


def qk_attribution(
    rep: Replacement, target: QKTarget | str, *, top_pairs: int = 50
) -> QKAttribution:
    """The score ``target`` (a :class:`QKTarget` or ``"LAYER.HEAD:QPOS,KPOS"``) split over
    the nodes of ``rep``, a :func:`~mechscope.graphs.replacement.replacement_context` made
    with the target's layer among its ``qk_layers``."""
    lm, state = rep.engine.lm, rep.state
    if isinstance(target, str):
        target = check_targets(lm, [target], int(rep.ids.numel()))[0]
    t = target
    if t.layer not in state.q:
        raise InputError(
            f"a replacement context made with layer {t.layer} among its qk_layers "
            f"(it has {sorted(state.q)})",
            field="qk_layers",
        )
    q_all, k_all = state.q[t.layer], state.k[t.layer]  # [B, T, H, d], [B, T, KV, d]
    kv_head = t.head // (q_all.shape[2] // k_all.shape[2])
    q = q_all[0, t.query, t.head].detach().double().cpu()
    k = k_all[0, t.key, kv_head].detach().double().cpu()
    alpha, cap = score_scaling(lm, t.layer, int(q.shape[0]))
    model_score = rep.frozen.values[("attn_scores", t.layer)][0, t.head, t.query, t.key]
    check_unmasked_score(model_score, t)
    _check_score(lm, t, alpha, cap, q, k, float(model_score))
    parts = _parts(state, rep.nodes, q_all, k_all, t, kv_head, rep.batch)  # [2d, N] fp64
    q_c, k_c = _constants(rep, t, kv_head)
    d = q.shape[0]
    q_parts = torch.cat([parts[:d].T, q_c[None]])  # [N+1, d]
    k_parts = torch.cat([parts[d:].T, k_c[None]])
    pairs, values = _top_pairs(q_parts, k_parts, alpha, top_pairs)
    return QKAttribution(
        t, kv_head, alpha, cap, q, k, float(model_score), q_parts, k_parts, pairs, values,
        node_frame(rep.nodes, rep.ids),
    )  # fmt: skip


def _check_score(
    lm: LoadedModel, t: QKTarget, alpha: float, cap: float | None,
    q: torch.Tensor, k: torch.Tensor, model: float,
) -> None:  # fmt: skip
    """Refuse unless the model's score is ``α · q_i · k_j`` (soft-capped where it is):
    nothing else (a position bias, another scaling) reaches it."""
    s = alpha * float(q @ k)
    want = cap * math.tanh(s / cap) if cap else s
    scale = alpha * float((q * k).abs().sum()) + (cap or 0.0)
    tol = rounding_tolerance(scale, int(q.shape[0]))
    if abs(model - want) > tol:
        raise UnsupportedInterventionError(
            f"{WHAT} of {lm.spec}: layer {t.layer}'s score is not α·q·k with α = {alpha:.4g} "
            f"(the model's {model:.6g}, α·q·k {want:.6g})"
        )


def _parts(
    state: PassState, nodes: Nodes, q_all: torch.Tensor, k_all: torch.Tensor,
    t: QKTarget, kv_head: int, batch: int,
) -> torch.Tensor:  # fmt: skip
    """``[2·d, N]`` fp64: row ``c`` every node's part of ``q_i[c]``, row ``d + c`` of
    ``k_j[c]``; one backward pass per ``batch`` rows, each a one-hot of its own entry of
    the vectorised backward (``is_grads_batched``) through the pass's row 0."""
    d = q_all.shape[-1]
    inputs = source_tensors(state, int(nodes.errors.shape[0]))
    blocks = []
    for start in range(0, 2 * d, batch):
        rows = range(start, min(start + batch, 2 * d))
        gq = q_all.new_zeros(len(rows), *q_all.shape)  # [n, B, T, H, d]
        gk = k_all.new_zeros(len(rows), *k_all.shape)  # [n, B, T, KV, d]
        for r, c in enumerate(rows):
            if c < d:
                gq[r, 0, t.query, t.head, c] = 1
            else:
                gk[r, 0, t.key, kv_head, c - d] = 1
        found = torch.autograd.grad(
            [q_all, k_all], inputs, [gq, gk], retain_graph=True, allow_unused=True,
            materialize_grads=False, is_grads_batched=True,
        )  # fmt: skip
        found = tuple(None if f is None else f[:, 0] for f in found)  # [n, T, d] each
        blocks.append(node_columns(found, nodes, len(rows)))
    return torch.cat(blocks).double()


def _constants(rep: Replacement, t: QKTarget, kv_head: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``q_c``, ``k_c`` ``[d]`` fp64: the query and key with every node's write taken away."""
    nodes = rep.nodes
    deltas: dict[int | str, torch.Tensor] = {
        layer: -nodes.errors[layer][None].cpu() for layer in range(nodes.errors.shape[0])
    }
    offsets, positions = feature_offsets(nodes), nodes.active[:, 1]
    for source, writes in nodes.decoders.items():
        count = writes[0][1].shape[0]
        pos = positions[offsets[source] : offsets[source] + count]
        for target, w in writes:
            deltas[target][0].index_add_(0, pos, -w.cpu())
    deltas["embed"] = -nodes.embeds[None].cpu()
    q, k = replay_qk(rep, t.layer, deltas)
    return q[0, t.query, t.head].double(), k[0, t.key, kv_head].double()


def replay_qk(
    rep: Replacement, layer: int, deltas: dict[int | str, torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Layer ``layer``'s queries ``[rows, T, heads, d]`` and keys ``[rows, T, kv_heads, d]``
    in a ``replay`` pass of the frozen model (its scales, patterns and MLP constants, the
    norms inside its attention held) with ``deltas [rows, T, d]`` added to MLP outputs
    and embeddings (:func:`~mechscope.graphs.replay.removal_deltas` takes nodes away)."""
    lm, state = rep.engine.lm, PassState()
    rows = int(next(iter(deltas.values())).shape[0])
    edits = freeze_edits(lm, rep.tc, "replay", rep.frozen, state, deltas)
    edits += qk_edits(lm, [layer], "replay", state)
    with torch.no_grad():
        rep.engine.run(rep.ids.reshape(1, -1).expand(rows, -1), edits, logits=False)
    return state.q[layer].cpu(), state.k[layer].cpu()


def _top_pairs(
    q_parts: torch.Tensor, k_parts: torch.Tensor, alpha: float, count: int, chunk: int = 1024
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``count`` largest ``|α · q_a · k_b|`` (``[P, 2]`` indices, ``[P]`` values),
    over the nodes with a part on each side, a block of query-side nodes at a time."""
    qi = q_parts.abs().sum(1).nonzero(as_tuple=True)[0]
    ki = k_parts.abs().sum(1).nonzero(as_tuple=True)[0]
    best_idx, best_val = torch.zeros(0, 2, dtype=torch.long), torch.zeros(0, dtype=torch.float64)
    for start in range(0, len(qi), chunk):
        rows = qi[start : start + chunk]
        block = alpha * q_parts[rows] @ k_parts[ki].T  # [c, n_k]
        top = block.abs().flatten().topk(min(count, block.numel())).indices
        idx = torch.stack([rows[top // len(ki)], ki[top % len(ki)]], 1)
        best_idx, best_val = torch.cat([best_idx, idx]), torch.cat([best_val, block.flatten()[top]])
        keep = best_val.abs().topk(min(count, len(best_val))).indices
        best_idx, best_val = best_idx[keep], best_val[keep]
    return best_idx, best_val


def node_frame(nodes: Nodes, ids: torch.Tensor) -> pd.DataFrame:
    """One row per column of the graph's rows, then the constant: ``node`` (the column;
    the constant ``n_columns``), ``kind``, ``layer`` (tokens -1), ``position``,
    ``feature`` (a token's vocabulary id, -1 for an error or the constant), ``activation``
    (NaN but for features)."""
    n_layers, n_pos = nodes.errors.shape[:2]
    n_feat, n_err = nodes.n_features, n_layers * n_pos
    none = torch.tensor([-1])
    layer = [nodes.active[:, 0], torch.arange(n_layers).repeat_interleave(n_pos)]
    position = [nodes.active[:, 1], torch.arange(n_pos).repeat(n_layers), torch.arange(n_pos)]
    activation = torch.full((n_feat + n_err + n_pos + 1,), float("nan"))
    activation[:n_feat] = nodes.activations.float().cpu()
    return pd.DataFrame(
        {
            "node": range(n_feat + n_err + n_pos + 1),
            "kind": ["feature"] * n_feat + ["error"] * n_err + ["token"] * n_pos + ["constant"],
            "layer": torch.cat([*layer, none.repeat(n_pos + 1)]).numpy(),
            "position": torch.cat([*position, none]).numpy(),
            "feature": torch.cat([nodes.active[:, 2], none.repeat(n_err), ids.cpu(), none]).numpy(),
            "activation": activation.numpy(),
        }
    )
