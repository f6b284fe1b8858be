"""A graph run: the inputs checked against the model, then the graph computed once and
written in the run directory (resumed: read back).

``graph/<slug>.json`` and ``graph/graph-metadata.json`` are circuit-tracer's frontend
files (:mod:`mechscope.graphs.neuronpedia`); ``tables/graph_nodes`` has every node with its
influence and whether pruning kept it; ``graph/summary.json`` the scores and counts. Each
QK target adds ``tables/qk_L{l}_H{h}_{i}_{j}`` (every node's contribution through the
query and through the key), ``tables/qk_L{l}_H{h}_{i}_{j}_pairs`` (the largest products)
and its entry in ``graph/qk.json`` (:mod:`mechscope.graphs.qk`).
With a check (:mod:`mechscope.graphs.check`, its own part), ``tables/graph_interventions``.
The manifest's ``memory`` is the plan the memory model made before the heavy passes
(:mod:`mechscope.graphs.memory`: predicted peak, rows per backward pass, where the rows
went).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from mechscope.dictionaries import load_dictionary
from mechscope.engine import Engine
from mechscope.errors import InputError
from mechscope.graphs.attribute import attribute
from mechscope.graphs.check import CheckConfig, check_nodes, run_check
from mechscope.graphs.config import GraphConfig
from mechscope.graphs.freeze import check_freezable
from mechscope.graphs.neuronpedia import graph_json, write_graph_files
from mechscope.graphs.qk import qk_attribution
from mechscope.graphs.qk_targets import QKTarget, check_targets, check_unmasked
from mechscope.graphs.replacement import replacement_context
from mechscope.graphs.result import GraphResult
from mechscope.graphs.transcoders import Transcoders
from mechscope.models.loaded import LoadedModel
from mechscope.runs import RunDir
from mechscope.runs.atomic import atomic_write_json
from mechscope.runs.tables import write_table

PART = "graph"
QK_PART = "qk"


def prepare(
    lm: LoadedModel, config: GraphConfig, check: CheckConfig | None = None
) -> tuple[Any, torch.Tensor]:
    """The transcoders read from their folder and the prompt's ids ``[T]`` (BOS first),
    each refused in one line where it does not fit the model: before any run exists."""
    tset = load_dictionary(Path(config.transcoders))
    tc = Transcoders(tset, lm.n_layers)
    width = int(tc.directions(0, torch.tensor([0])).shape[-1])
    if width != lm.d_model:
        raise InputError(
            f"transcoders reading the model's width {lm.d_model}, got {width}",
            field="transcoders",
        )
    check_freezable(lm, tc)
    ids = lm.to_tokens(config.prompt, prepend_bos=True).ids[0].cpu()
    if ids.numel() < 2:
        raise InputError(
            f"a prompt of at least one token after the BOS, got {config.prompt!r}", field="prompt"
        )
    if check is not None:
        check_nodes(lm, tset, ids, check)
    return tset, ids


def run_graph(
    run: RunDir, lm: LoadedModel, config: GraphConfig, tset: Any, ids: torch.Tensor, *,
    scan: str, progress: bool = False, check: CheckConfig | None = None,
) -> GraphResult:  # fmt: skip
    """The graph of ``ids`` in ``run`` (module docstring), checked where ``check`` says;
    the run's :class:`GraphResult` (a finished graph is read back, not recomputed)."""
    folder = run.path / "graph"
    if run.part_done(PART):
        if check is not None:
            run_check(run, lm, config, tset, ids, check, None)
        return GraphResult.from_run(run)
    with run.timed(PART):
        folder.mkdir(parents=True, exist_ok=True)  # rows that do not fit in memory go here
        graph = attribute(
            Engine.of(lm), tset, ids, max_n_logits=config.max_n_logits,
            desired_logit_prob=config.desired_logit_prob, batch_size=config.batch_size,
            max_feature_nodes=config.max_feature_nodes, progress=progress, folder=folder,
            on_plan=lambda plan: run.record("memory", plan.record()),
        )  # fmt: skip
        graph.prompt = config.prompt
        data = graph_json(
            graph, config.slug, scan, node_threshold=config.node_threshold,
            edge_threshold=config.edge_threshold, decode=lm.tokenizer.decode,
        )  # fmt: skip
        pruned = graph.prune(config.node_threshold, config.edge_threshold)
        write_table(run, "graph_nodes", graph.node_table(pruned))
        write_graph_files(data, folder)
        replacement, completeness = graph.scores()
        summary = {
            "replacement_score": replacement,
            "completeness_score": completeness,
            "n_tokens": int(ids.numel()),
            "n_active_features": graph.n_active,
            "n_features": graph.layout.n_features,
            "n_nodes_kept": int(pruned.node_mask.sum()),
            "n_nodes_written": len(data["nodes"]),
            "n_links_written": len(data["links"]),
            "top_logit": lm.tokenizer.decode(int(graph.logit_ids[0])),
            "top_logit_prob": float(graph.logit_probs[0]),
        }
        atomic_write_json(folder / "summary.json", summary)
    run.record_part(PART, 0.0, done=True)
    if check is not None:
        run_check(run, lm, config, tset, ids, check, graph)
    return GraphResult.from_run(run)


def prepare_qk(lm: LoadedModel, config: GraphConfig, ids: torch.Tensor) -> list[QKTarget]:
    """The QK targets checked against the model and the prompt ``ids [T]`` (one pass when
    there are any, for the layers' masks): before any run exists."""
    targets = check_targets(lm, list(config.qk), int(ids.numel()))
    if targets:
        check_unmasked(Engine.of(lm), ids, targets)
    return targets


def run_qk(
    run: RunDir, lm: LoadedModel, config: GraphConfig, tset: Any, ids: torch.Tensor,
    targets: list[QKTarget],
) -> list[dict[str, Any]]:  # fmt: skip
    """Each target's score split over the nodes, in ``run`` (module docstring); their
    summaries (read back when done)."""
    path = run.path / "graph" / "qk.json"
    if not targets:
        return []
    if run.part_done(QK_PART):
        return json.loads(path.read_text())
    with run.timed(QK_PART):
        layers, decode = sorted({t.layer for t in targets}), lm.tokenizer.decode
        summaries = []
        with replacement_context(
            Engine.of(lm), tset, ids, config.batch_size, qk_layers=layers,
            max_n_logits=config.max_n_logits, desired_logit_prob=config.desired_logit_prob,
        ) as rep:  # fmt: skip
            for t in targets:
                result = qk_attribution(rep, t)
                write_table(run, t.name, result.table())
                write_table(run, f"{t.name}_pairs", result.pairs_table())
                tokens = {"query_token": decode(int(ids[t.query])),
                          "key_token": decode(int(ids[t.key]))}  # fmt: skip
                summaries.append({**result.summary(), **tokens})
        atomic_write_json(path, summaries)
    run.record_part(QK_PART, 0.0, done=True)
    return summaries
