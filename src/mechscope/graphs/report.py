"""The report section of graphs: reads the run directory, never the model.

It opens with the graph's scores and size, then the kept nodes by influence (features with
their layer, position and activation, error nodes, tokens and logits); the method and the
settings follow behind a disclosure. The graph itself is in ``graph/<slug>.json``, which
circuit-tracer's frontend and Neuronpedia open.
"""

from __future__ import annotations

import json

from mechscope.graphs.check_report import check_blocks
from mechscope.report import (
    Block,
    DetailsBlock,
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
    return [
        FindingBlock(finding),
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
