"""Checking a graph's claims: interventions on its nodes, predicted by the graph and measured.

Each checked set of nodes (each of the ``top_k`` most influential features alone, and the
supernodes named by the user: groups of features) is set to ``factor`` times its activation
(0: ablated; ``steer``: steered). For each target (a demeaned logit, or the difference of
two) the graph predicts the change:

- ``predicted_direct``: along the edges from the set straight to the target,
  ``(factor − 1) Σ_s A[target, s]``;
- ``predicted``: along every path through the graph's features: each feature's relative
  change ``u_t = Δa_t / a_t`` is the change of its input over its activation,
  ``u_t = Σ_s A[t, s] u_s / a_t``, the set's ``u = factor − 1`` held, errors and tokens
  fixed; the target moves by ``Σ_s A[target, s] u_s``. That is the exact change of the
  linear model the edges describe. Features the graph did not select (``--max-features``)
  have no edges: a set holding one has no ``predicted``.

The influence of the graph (a share of normalised absolute weights, not a signed change)
chooses the ``top_k`` nodes and is not compared. A target outside the graph's logits gets
its row as the graph computes its logit rows. Measured (:mod:`mechscope.graphs.intervene`):
``measured_frozen`` in the frozen replacement (attention, norms and every feature's on/off
state held), equal to ``predicted`` to rounding: the graph's numbers computed forward
(unequal where the graph left features out); ``switched``: the features the transcoders'
rule would switch on or off there, how far the change leaves the linear regime;
``measured_live`` in the model itself: how far the graph's account holds for the model;
``clean``: the target's value in the model.
"""

from __future__ import annotations

import re
from typing import Any

import pandas as pd
import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from mechscope.engine import Engine
from mechscope.engine.core.frozen import frozen_parameters
from mechscope.errors import InputError
from mechscope.graphs.attribute import attribute
from mechscope.graphs.check_report import TABLE
from mechscope.graphs.config import GraphConfig
from mechscope.graphs.graph import Graph
from mechscope.graphs.influence import logit_weights, propagate
from mechscope.graphs.intervene import Clamps, clean_states, measure_frozen, measure_live
from mechscope.graphs.replacement import (
    attribution_pass,
    collect_nodes,
    hold_errors,
    logit_vectors,
)
from mechscope.graphs.rows import compute_rows
from mechscope.graphs.store import gather_rows
from mechscope.graphs.transcoders import Transcoders
from mechscope.models.loaded import LoadedModel
from mechscope.runs import RunDir
from mechscope.runs.tables import write_table

PART = "graph_check"
NODE_ID = re.compile(r"^(\d+)_(\d+)_(\d+)$")  # layer_feature_position, as the graph file's


class CheckConfig(BaseModel):
    """What to check (module docstring): the ``top_k`` most influential features, one at a
    time; ``nodes``, each ``NAME=ID,ID…`` or ``ID,ID…`` (ids as the graph file names
    features, ``layer_feature_position``), one supernode each; ``steer``: each set also
    steered to that factor of its activations; ``targets``: tokens (``A|B``: a logit
    difference), default the top logit."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    top_k: int = Field(default=0, ge=0)
    nodes: tuple[str, ...] = ()
    steer: float | None = Field(default=None, ge=-100.0, le=100.0)
    targets: tuple[str, ...] = ()

    @field_validator("nodes")
    @classmethod
    def _ids(cls, nodes: tuple[str, ...]) -> tuple[str, ...]:
        for spec in nodes:
            for node in spec.rpartition("=")[2].split(","):
                if not NODE_ID.match(node.strip()):
                    raise ValueError(
                        f"node ids layer_feature_position (NAME=ID,ID… for a supernode), "
                        f"got {node.strip()!r} in {spec!r}"
                    )
        return nodes

    @model_validator(mode="after")
    def _some_nodes(self) -> CheckConfig:
        if self.top_k == 0 and not self.nodes:
            raise ValueError("nodes to check: --check K (the K most influential) or --check-node")
        return self


def parse_set(spec: str) -> tuple[str, list[tuple[int, int, int]]]:
    """A ``--check-node`` value: its label and its features ``(layer, position, feature)``."""
    name, _, ids = spec.rpartition("=")
    feats = []
    for node in ids.split(","):
        layer, feat, pos = (int(v) for v in NODE_ID.match(node.strip()).groups())  # type: ignore[union-attr]
        feats.append((layer, pos, feat))
    return name or ids, feats


def target_tokens(lm: LoadedModel, check: CheckConfig) -> list[tuple[int, int | None]]:
    """Each target's token and the token it is compared with (None: a logit alone);
    refused in one line where a text is not one token."""
    out = []
    for spec in check.targets:
        pair = []
        for text in spec.split("|") if "|" in spec else [spec]:
            ids = lm.tokenizer.encode(text, add_special_tokens=False)
            if len(ids) != 1:
                raise InputError(
                    f"a target of one token, got {text!r} ({len(ids)} tokens)", field="check_target"
                )
            pair.append(int(ids[0]))
        out.append((pair[0], pair[1] if len(pair) > 1 else None))
    return out


def check_nodes(lm: LoadedModel, tset: Any, ids: torch.Tensor, check: CheckConfig) -> None:
    """Refuse, in one line, a target that is not one token or a node that is not an active
    feature of the prompt (after its first position), before any run exists."""
    target_tokens(lm, check)
    if not check.nodes:
        return
    tc = Transcoders(tset, lm.n_layers)
    with torch.no_grad():
        state, _, _ = attribution_pass(Engine.of(lm), tc, ids, 1, grad=False)
        for spec in check.nodes:
            for layer, pos, feat in parse_set(spec)[1]:
                ok = layer < lm.n_layers and 0 < pos < ids.numel() and feat < tc.d_sae
                if not ok or float(tc.encode(layer, state.x_in[layer][0, pos])[feat]) == 0:
                    raise InputError(
                        f"a node active on the prompt, got {layer}_{feat}_{pos} (in {spec!r})",
                        field="check_node",
                    )


def node_sets(graph: Graph, check: CheckConfig) -> list[tuple[str, list[tuple[int, int, int]]]]:
    """The checked sets: the ``top_k`` features by the graph's influence, then the user's."""
    lay = graph.layout
    weights = logit_weights(lay, graph.logit_probs)
    influence = propagate(graph.rows, graph.row_nodes, weights)[: lay.n_features]
    top = influence.argsort(descending=True)[: check.top_k].tolist()
    sets = []
    for i in top:
        layer, pos, feat = (int(v) for v in graph.active[i])
        sets.append((f"{layer}_{feat}_{pos}", [(layer, pos, feat)]))
    return sets + [parse_set(spec) for spec in check.nodes]


def linear_effects(
    graph: Graph, sets: list[list[int]], factors: list[float], target_rows: torch.Tensor
) -> torch.Tensor:
    """``[P, K]`` float64: each set's predicted change of each target through the graph's
    features (module docstring). ``sets``: graph feature indices; ``target_rows [K, n]``:
    the targets' direct effects from the graph's features."""
    n = graph.layout.n_features
    if not torch.equal(graph.row_nodes[:n], torch.arange(n)):
        raise ValueError("the graph's feature rows are not first, in node order")
    rows = gather_rows(graph.rows, torch.arange(n))[:, :n]  # [n, n] (rows in memory or a file)
    relative = rows.double() / graph.activations.double()[:, None]  # [n, n]
    start = torch.zeros(n, len(sets), dtype=torch.float64)  # u of the held features
    held = torch.zeros(n, len(sets), dtype=torch.bool)
    for p, (members, factor) in enumerate(zip(sets, factors, strict=True)):
        start[members, p], held[members, p] = factor - 1.0, True
    u = start
    for _ in range(graph.n_layers):  # a path crosses each layer once: exact after L steps
        u = torch.where(held, start, relative @ u)
    return (target_rows.double() @ u).T


def check_graph(engine: Engine, tset: Any, ids: torch.Tensor, graph: Graph,
                check: CheckConfig) -> pd.DataFrame:  # fmt: skip
    """The table of the module docstring: one row per set, intervention and target."""
    lm = engine.lm
    tc = Transcoders(tset, lm.n_layers)
    pairs = target_tokens(lm, check) or [(int(graph.logit_ids[0]), None)]
    tokens = sorted({t for pair in pairs for t in pair if t is not None})
    sets = node_sets(graph, check)
    factors = [0.0] + ([check.steer] if check.steer is not None else [])
    runs = [(label, feats, f) for label, feats in sets for f in factors]
    n_layers, n_pos = lm.n_layers, int(ids.numel())
    with frozen_parameters(lm.model, tc.source):
        state, frozen, logits = attribution_pass(engine, tc, ids, 1)
        with torch.no_grad():
            hold_errors(tc, state, frozen, 1)
        on = clean_states(tc, state)
        nodes = collect_nodes(engine, tc, state, logits, max_n_logits=1)
        vectors = logit_vectors(engine, state, torch.tensor(tokens))
        k = len(tokens)
        rows = compute_rows(state, nodes, torch.full((k,), n_layers),
                            torch.full((k,), n_pos - 1), vectors, last=True)  # fmt: skip
    index = {tuple(v.tolist()): i for i, v in enumerate(nodes.active)}
    in_graph = {tuple(v.tolist()): i for i, v in enumerate(graph.active)}
    where, values, members = [], [], []
    for r, (_, feats, factor) in enumerate(runs, start=1):
        for feat in feats:
            where.append((r, *feat))
            values.append(factor * float(nodes.activations[index[feat]]))
        members.append([in_graph.get(f, -1) for f in feats])
    clamps = Clamps(torch.tensor(where, dtype=torch.long), torch.tensor(values))
    inside = [all(m >= 0 for m in ms) for ms in members]
    graph_cols = [index[tuple(v.tolist())] for v in graph.active]
    total = linear_effects(graph, [[m for m in ms if m >= 0] for ms in members],
                           [f for _, _, f in runs], rows[:, graph_cols])  # fmt: skip
    frozen_values, switched = measure_frozen(engine, tc, ids, frozen, on, clamps,
                                             len(runs) + 1, vectors)  # fmt: skip
    live_values = measure_live(engine, tset, ids, clamps, len(runs) + 1, torch.tensor(tokens))
    decode = lm.tokenizer.decode
    table = []
    for a, b in pairs:
        w = torch.zeros(len(tokens), dtype=torch.float64)  # the target as a mix of tokens
        w[tokens.index(a)] = 1.0
        if b is not None:
            w[tokens.index(b)] = -1.0
        direct = w @ rows.double()  # [n_columns]
        frozen_t, live_t = frozen_values.double() @ w, live_values.double() @ w  # [rows]
        predicted = total @ w  # [P]
        target = repr(decode(a)) + ("" if b is None else f" − {decode(b)!r}")
        for r, (label, feats, factor) in enumerate(runs):
            cols = [index[f] for f in feats]
            table.append({
                "label": label,
                "nodes": ",".join(f"{lyr}_{ft}_{p}" for lyr, p, ft in feats),
                "intervention": "ablate" if factor == 0 else f"× {factor:g}",
                "factor": factor,
                "target": target,
                "predicted_direct": (factor - 1.0) * float(direct[cols].sum()),
                "predicted": float(predicted[r]) if inside[r] else float("nan"),
                "measured_frozen": float(frozen_t[r + 1] - frozen_t[0]),
                "measured_live": float(live_t[r + 1] - live_t[0]),
                "clean": float(live_t[0]),
                "switched": int(switched[r + 1]),
            })  # fmt: skip
    return pd.DataFrame(table)


def run_check(
    run: RunDir, lm: LoadedModel, config: GraphConfig, tset: Any, ids: torch.Tensor,
    check: CheckConfig, graph: Graph | None,
) -> None:  # fmt: skip
    """The check part of a graph run: ``tables/graph_interventions``, computed once. A graph
    read back from its files has no rows, so ``graph=None`` computes it again (as the
    graph part does)."""
    if run.part_done(PART):
        return
    with run.timed(PART):
        engine = Engine.of(lm)
        if graph is None:
            graph = attribute(
                engine, tset, ids, max_n_logits=config.max_n_logits,
                desired_logit_prob=config.desired_logit_prob, batch_size=config.batch_size,
                max_feature_nodes=config.max_feature_nodes,
            )  # fmt: skip
        write_table(run, TABLE, check_graph(engine, tset, ids, graph, check))
    run.record_part(PART, 0.0, done=True)
