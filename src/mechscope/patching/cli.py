"""``mechscope patch``: activation patching sweeps from the command line."""

from __future__ import annotations

from pathlib import Path

import typer
from pydantic import ValidationError
from rich.console import Console

from mechscope.cli.common import OUT_HELP, checked_run, finish, parse_list, workflow_app
from mechscope.cli.executor_options import ExecutorOptions, executor_options
from mechscope.cli.model_options import ModelOptions, model_options
from mechscope.cli.options import SEED_OPTION, number
from mechscope.errors import InputError

app = workflow_app()
console = Console(stderr=True)
INTEGERS = "comma-separated integers"


@app.callback()
def main() -> None:
    """Activation patching across layers, positions, spans and heads."""


def _spec(**kwargs):
    from mechscope.patching.config import PatchSpec

    try:
        return PatchSpec(**kwargs)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "spec"
        raise InputError(err["msg"].removeprefix("Value error, "), field=field) from None


@app.command()
@model_options
@executor_options
def run(
    pairs: Path | None = typer.Option(
        None,
        "--pairs",
        help="JSONL: clean/corrupt/correct/wrong(/spans) or base/source/target/wrong lines.",
    ),
    task: str | None = typer.Option(None, "--task", help="Built-in pairs: ioi, ioi-json, facts."),
    n: int = number(16, "--n", min=1, help="Number of built-in pairs."),
    out: Path = typer.Option(..., "--out", help=OUT_HELP),
    site: str = typer.Option(
        "resid_pre",
        "--site",
        help="resid_pre, resid_mid, resid_post, attn_out, mlp_out, mlp_post, or per head "
        "z, q, k, v.",
    ),
    granularity: str = typer.Option("position", "--granularity", help="position, span or all."),
    direction: list[str] = typer.Option(
        ["denoising"], "--direction", help="denoising and/or noising (repeatable)."
    ),
    layers: str | None = typer.Option(None, "--layers", help="e.g. 0,5,10 (default: all)."),
    positions: str | None = typer.Option(None, "--positions", help="e.g. 3,-1 (default: all)."),
    spans: str | None = typer.Option(
        None, "--spans", "--span", help="Span names, e.g. IO,S2 (audio / image: the media span)."
    ),
    span_policy: str = typer.Option(
        "error",
        "--span-policy",
        help="Spans of different lengths: error, pad (media), truncate or pool.",
    ),
    heads: str | None = typer.Option(None, "--heads", help="Heads for z, q, k, v (default: all)."),
    candidates: str | None = typer.Option(
        None, "--candidates", help="Comma-separated answer words (K-way tasks)."
    ),
    policy: str = typer.Option(
        "error", "--policy", help="Answers longer than one token: error or first."
    ),
    attribution: bool = typer.Option(
        False, "--attribution/--no-attribution", help="Also run attribution patching and compare."
    ),
    seed: int = SEED_OPTION,
    ex: ExecutorOptions = ExecutorOptions(),
    opts: ModelOptions = ModelOptions(),
) -> None:
    """Patch every layer × position / span / head and save tables, figures and a report."""
    from mechscope.patching.run import run_patching
    from mechscope.patching.samples import load_pairs_jsonl, task_pairs

    if (pairs is None) == (task is None):
        raise InputError("expected exactly one of --pairs FILE or --task NAME", field="pairs")
    spec = _spec(
        site=site,
        granularity=granularity,
        directions=tuple(direction),
        layers=parse_list(layers, "--layers", what=INTEGERS, cast=int),
        positions=parse_list(positions, "--positions", what=INTEGERS, cast=int),
        spans=parse_list(spans, "--spans", what="comma-separated span names"),
        heads=parse_list(heads, "--heads", what=INTEGERS, cast=int),
        candidates=parse_list(candidates, "--candidates", what="comma-separated answer words"),
        policy=policy,
        span_policy=span_policy,
        attribution=attribution,
    )
    config = {
        "spec": spec.model_dump(mode="json"),
        "pairs": str(pairs.resolve()) if pairs else None,  # relative or absolute: one path
        "task": task,
        "n": n,
        "seed": seed,
        **opts.config(),
    }
    lm, data, rd = checked_run(
        out,
        config,
        opts,
        lambda lm: (
            load_pairs_jsonl(pairs)
            if pairs is not None
            else task_pairs(task, n, lm.tokenizer, seed=seed)
        ),
        seed=seed,
    )
    with ex.alongside(units=len(data)):  # units are groups of pairs: at most one per pair
        result = run_patching(rd, lm, data, spec)
    report = finish(rd)
    console.print(
        f"{len(result.pairs)} pair-directions patched; tables in {rd.tables_dir}; report: {report}"
    )
