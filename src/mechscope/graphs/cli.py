"""``mechscope graph PROMPT -m MODEL --transcoders DIR``: one prompt's attribution graph."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import typer
from rich.console import Console

from mechscope.cli.common import checked_run, finish, validated, workflow_app
from mechscope.cli.model_options import model_options
from mechscope.cli.options import number
from mechscope.models.options import ModelOptions

# the group is the command: its options may follow the prompt
app = workflow_app(
    invoke_without_command=True,
    no_args_is_help=False,
    context_settings={"allow_interspersed_args": True},
)
console = Console(stderr=True)


@app.callback()
@model_options
def graph(
    prompt: str = typer.Argument(..., help="The prompt (a BOS is put first)."),
    transcoders: Path = typer.Option(
        ..., "--transcoders", help="A transcoder set's folder (any published layout)."
    ),
    out: Path | None = typer.Option(
        None, "--out", help="Run directory (resumed if it exists; default: runs/graph-<hash>)."
    ),
    max_n_logits: int = number(10, "--max-logits", min=1, help="Logit targets at most."),
    desired_logit_prob: float = number(
        0.95, "--logit-prob", above=0.0, max=1.0, help="Probability mass the targets cover."
    ),
    batch_size: int = number(64, "--batch", min=1, help="Rows per backward pass."),
    max_feature_nodes: int | None = number(
        None, "--max-features", min=1, help="Features kept by influence (default: all active)."
    ),
    node_threshold: float = number(0.8, "--node-threshold", min=0.0, max=1.0,
                                   help="Cumulative node influence kept."),
    edge_threshold: float = number(0.98, "--edge-threshold", min=0.0, max=1.0,
                                   help="Cumulative edge influence kept."),
    slug: str = typer.Option("graph", "--slug", help="The graph's name in its JSON file."),
    qk: list[str] = typer.Option(
        [], "--qk", help="An attention score to split over the nodes, LAYER.HEAD:QPOS,KPOS "
        "(positions from 0 with the BOS, negative from the end); repeatable.",
    ),
    pin: list[str] = typer.Option([], "--pin", help="A node id to pin (repeatable; default: "
                                  "the top logit and its strongest inputs)."),
    supernode: list[str] = typer.Option([], "--supernode", help="NAME=ID,ID,...: nodes drawn "
                                        "as one (repeatable)."),
    check_top: int = number(0, "--check", min=0,
                            help="Check the K most influential features: predicted vs measured."),
    check_node: list[str] = typer.Option([], "--check-node",
        help="A node or supernode to check, NAME=ID,ID… (ids layer_feature_position)."),
    steer: float | None = number(None, "--steer", min=-100.0, max=100.0,
                                 help="Also steer each checked set: × FACTOR."),
    check_target: list[str] = typer.Option([], "--check-target",
        help="A checked token's logit, or A|B their difference (default: the top logit)."),
    opts: ModelOptions = ModelOptions(),
) -> None:  # fmt: skip
    """Attribution graph of one prompt: transcoders replace the MLPs, direct effects between
    features, errors, tokens and logits, pruned; written as circuit-tracer's graph JSON."""
    from mechscope.graphs.config import GraphConfig
    from mechscope.graphs.run import prepare, prepare_qk, run_graph, run_qk
    from mechscope.graphs.view import parse_pins, parse_supernodes, write_view

    config = validated(
        GraphConfig, prompt=prompt, transcoders=str(transcoders.expanduser().resolve()),
        max_n_logits=max_n_logits, desired_logit_prob=desired_logit_prob,
        batch_size=batch_size, max_feature_nodes=max_feature_nodes,
        node_threshold=node_threshold, edge_threshold=edge_threshold, slug=slug, qk=tuple(qk),
    )  # fmt: skip
    pins, groups = parse_pins(pin), parse_supernodes(supernode)  # what is drawn, not computed
    check = None
    if check_top or check_node or steer is not None or check_target:
        from mechscope.graphs.check import CheckConfig

        check = validated(
            CheckConfig,
            top_k=check_top,
            nodes=tuple(check_node),
            steer=steer,
            targets=tuple(check_target),
        )
    # without QK targets or a check the config reads as before they existed: such runs resume
    graph_record = config.model_dump(mode="json", exclude=None if config.qk else {"qk"})
    record = {"graph": graph_record, **opts.config()}
    if check is not None:
        record["check"] = check.model_dump(mode="json")
    if out is None:
        key = hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:10]
        out = Path("runs") / f"graph-{key}"

    def prepared(lm):
        tset, ids = prepare(lm, config, check)
        return tset, ids, prepare_qk(lm, config, ids)

    lm, (tset, ids, targets), run = checked_run(out, record, opts, prepared)
    result = run_graph(run, lm, config, tset, ids, scan=opts.model, check=check)
    absent = write_view(run, lm, tset, Path(config.transcoders), slug, pins=pins, supernodes=groups)
    if absent:
        console.print(f"not in the pruned graph, not drawn: {', '.join(absent)}")
    console.print(
        f"replacement {result.replacement_score:.3f}, completeness "
        f"{result.completeness_score:.3f}; {result.n_nodes_written} nodes, "
        f"{result.n_links_written} links: {result.graph_file}"
    )
    for q in run_qk(run, lm, config, tset, ids, targets):
        console.print(
            f"layer {q['layer']} head {q['head']}, query {q['query']} → key {q['key']}: score "
            f"{q['score']:.4g}: {run.path / 'tables' / (q['table'] + '.parquet')}"
        )
    console.print(f"report: {finish(run)}")
