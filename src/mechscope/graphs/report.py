"""The report section of graphs: reads the run directory, never the model.

It opens with the graph's scores and size, then the graph drawn
(:mod:`mechscope.graphs.figure`), then the kept nodes by influence (features with their
layer, position and activation, error nodes, tokens and logits); the method and the
settings follow behind a disclosure. The graph itself is in ``graph/<slug>.json``, which
circuit-tracer's frontend and Neuronpedia open. Each QK target (``graph/qk.json``) adds its
score and the nodes contributing most through the query, through the key and by pairs.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from mechscope.graphs.check_report import check_blocks
from mechscope.graphs.figure import graph_figure
from mechscope.report import (
    Block,
    DetailsBlock,
    FigureBlock,
    FindingBlock,
    KeyValueBlock,
    TableBlock,
    TextBlock,
    register_section,
)
from mechscope.runs import RunDir
from mechscope.runs.tables import has_table, read_table

INTRO = (
    "Each MLP is replaced by its transcoder plus an error node (what the transcoder misses); "
    "attention patterns and norm scales are frozen at the prompt's pass, so every edge is "
    "a direct linear effect of its source on its target's pre-activation (a feature) or "
    "logit. A node's influence is what flows from the logits (weighted by their "
    "probabilities) back to it along every path of the normalised absolute adjacency; "
    "pruning keeps the nodes making the first share of the total influence, then the edges. "
    "The replacement score is the share of the influence reaching tokens rather than error "
    "nodes; the completeness score the share of every node's input not coming from errors "
    "(circuit-tracer's definitions)."
)


@register_section("graphs", "Attribution graph")
def graphs_section(run: RunDir) -> list[Block] | None:
    summary_path = run.path / "graph" / "summary.json"
    if not summary_path.is_file() or not has_table(run, "graph_nodes"):
        return None
    s = json.loads(summary_path.read_text())
    finding = (
        f"Replacement score **{s['replacement_score']:.3f}**, completeness "
        f"**{s['completeness_score']:.3f}**: {s['n_nodes_written']} nodes and "
        f"{s['n_links_written']} links kept of {s['n_features']} features "
        f"({s['n_active_features']} active), for the top logit {s['top_logit']!r} "
        f"(p = {s['top_logit_prob']:.3f})."
    )
    nodes = read_table(run, "graph_nodes")
    kept = nodes[nodes["kept"]].sort_values("influence")
    settings = dict(run.config.get("graph", {}))
    figure = graph_figure(run)
    blocks: list[Block] = [
        FindingBlock(finding),
        *([FigureBlock(figure, name="graph")] if figure is not None else []),
        TableBlock(
            kept[["kind", "layer", "position", "feature", "activation", "influence"]],
            "The kept nodes, most influential first (influence: the cumulative share up to "
            "the node). Feature: its index; token and logit: the vocabulary id.",
            source="tables/graph_nodes.parquet",
        ),
        *check_blocks(run, s["n_active_features"]),
        DetailsBlock(
            "How the graph is computed, and the settings",
            [TextBlock(INTRO), KeyValueBlock(settings, caption="graph settings")],
        ),
    ]
    qk_path = run.path / "graph" / "qk.json"
    for entry in json.loads(qk_path.read_text()) if qk_path.is_file() else []:
        blocks += qk_blocks(run, entry)
    return blocks


QK_COLUMNS = ["node", "kind", "layer", "position", "feature", "activation"]


def qk_blocks(run: RunDir, q: dict[str, Any]) -> list[Block]:
    """One QK target: its score, then the top nodes through the query, through the key,
    and the largest pairwise products."""
    name = q["table"]
    cap = f" before the soft-cap at {q['softcap']:g}" if q["softcap"] else ""
    text = (
        f"**QK attribution**, layer {q['layer']} head {q['head']}: query {q['query']} "
        f"({q['query_token']!r}) to key {q['key']} ({q['key_token']!r}), score "
        f"{q['score']:.4g}{cap} (α = {q['scaling']:.4g}). Through the query the nodes give "
        f"{q['score'] - q['constant_q']:.4g} and the constant {q['constant_q']:.4g}; through "
        f"the key {q['score'] - q['constant_k']:.4g} and {q['constant_k']:.4g}."
    )
    nodes = read_table(run, name)
    blocks: list[Block] = [TextBlock(text)]
    where = f"layer {q['layer']} head {q['head']}, {q['query']} → {q['key']}"
    for side, what in (("via_q", "query"), ("via_k", "key")):
        order = nodes[side].abs().sort_values(ascending=False).index
        blocks.append(TableBlock(
            nodes.loc[order, [*QK_COLUMNS, side]].reset_index(drop=True),
            f"The nodes contributing most through the {what}, largest magnitude first (node: "
            "the graph's column over every active feature; the constant: what no node writes).",
            max_rows=10, title=f"QK {where}: through the {what}", source=f"tables/{name}.parquet",
        ))  # fmt: skip
    pairs: pd.DataFrame = read_table(run, f"{name}_pairs")
    blocks.append(TableBlock(
        pairs, "The largest products of a query-side node's part of the query and a key-side "
        "node's part of the key, times α.", max_rows=10, title=f"QK {where}: by pairs",
        source=f"tables/{name}_pairs.parquet",
    ))  # fmt: skip
    return blocks
