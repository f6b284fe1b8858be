"""``mechscope circuit``: edge circuits (EAP, EAP-IG, exact edge patching) from the command
line."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from mechscope.cli.common import (
    OUT_HELP,
    checked_run,
    computing,
    finish,
    parse_list,
    validated,
    workflow_app,
)
from mechscope.cli.executor_options import executor_options
from mechscope.cli.model_options import model_options
from mechscope.cli.options import RESAMPLES_OPTION, SEED_OPTION, number
from mechscope.models.options import ModelOptions
from mechscope.runs.options import ExecutorOptions

app = workflow_app()
console = Console(stderr=True)


@app.callback()
def main() -> None:
    """Edge circuits: score every edge, choose circuits, judge them by exact patching."""


@app.command()
@model_options
@executor_options
def run(
    pairs: Path | None = typer.Option(
        None, "--pairs", help="JSONL of pairs (clean/corrupt of one token length)."
    ),
    task: str | None = typer.Option(None, "--task", help="Built-in pairs: ioi, ioi-json, facts."),
    n: int = number(16, "--n", min=2, help="Number of built-in pairs."),
    out: Path = typer.Option(..., "--out", help=OUT_HELP),
    method: str = typer.Option(
        "EAP-IG-inputs",
        "--method",
        help="EAP, EAP-IG-inputs, EAP-IG-activations or clean-corrupted.",
    ),
    steps: int = number(5, "--steps", min=1, help="Passes of the EAP-IG variants."),
    metric: str = typer.Option("logit_diff", "--metric", help="logit_diff, prob_diff or kl."),
    rule: str = typer.Option("topn", "--rule", help="Circuit selection: topn or greedy."),
    signed: bool = typer.Option(False, "--signed", help="Rank edges by score, not its size."),
    shares: str | None = typer.Option(
        None, "--shares", help="Circuit sizes as shares of the edges (default: MIB's grid)."
    ),
    edges: int | None = number(
        None, "--edges", min=1, help="Edges of the circuit written (default: the target's)."
    ),
    target: float = number(
        0.8, "--target", above=0.0, max=1.0, help="Faithfulness the written circuit reaches."
    ),
    batch: int = number(8, "--batch", min=1, help="Pairs per pass."),
    resamples: int = RESAMPLES_OPTION,
    seed: int = SEED_OPTION,
    ex: ExecutorOptions = ExecutorOptions(),
    opts: ModelOptions = ModelOptions(),
) -> None:
    """Score every edge, draw the faithfulness curve and write the circuit (EAP-IG's JSON)."""
    from mechscope.circuits.config import CircuitConfig
    from mechscope.circuits.run import run_circuits
    from mechscope.circuits.samples import load_circuit_pairs, pair_batches

    grid = parse_list(shares, "--shares", what="comma-separated shares in (0, 1]", cast=float)
    extra = {"shares": grid} if grid else {}
    cfg = validated(
        CircuitConfig, method=method, steps=steps, metric=metric, rule=rule, signed=signed,
        edges=edges, target=target, batch=batch, n_resamples=resamples, seed=seed, **extra,
    )  # fmt: skip
    config = {
        "circuit": cfg.model_dump(mode="json"),
        "pairs": str(pairs.resolve()) if pairs else None,
        "task": task,
        "n": n,
        **opts.config(),
    }

    def check(lm):
        items = load_circuit_pairs(pairs, task, n, lm.tokenizer, seed=seed)
        return pair_batches(items, lm.tokenizer, cfg.batch)

    lm, data, rd = checked_run(out, config, opts, check, seed=seed)
    with computing(rd, "circuits", ex, units=len(data)):
        result = run_circuits(rd, lm, data, cfg)
    console.print(result._repr_summary())
    console.print(f"report: {finish(rd)}")
