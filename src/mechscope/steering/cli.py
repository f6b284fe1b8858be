"""``mechscope steer``: steering vectors swept over alpha from the command line."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from mechscope.cli.common import OUT_HELP, checked_run, finish, parse_list, validated, workflow_app
from mechscope.cli.model_options import model_options
from mechscope.cli.options import SEED_OPTION, number
from mechscope.errors import InputError
from mechscope.models.options import ModelOptions

app = workflow_app()
console = Console(stderr=True)


@app.callback()
def main() -> None:
    """Steering vectors: add a direction (or project it out) and sweep its scale."""


@app.command()
@model_options
def sweep(
    pairs: Path | None = typer.Option(
        None, "--pairs", help="JSONL of contrastive pairs (positive/negative): the CAA vector."
    ),
    vector: Path | None = typer.Option(None, "--vector", help="A steering vector (.npy or .pt)."),
    task: str | None = typer.Option(None, "--task", help="Built-in pairs and prompts: sentiment."),
    prompts: Path | None = typer.Option(
        None, "--prompts", help="JSONL of prompts to steer (prompt, target, versus)."
    ),
    n: int = number(64, "--n", min=1, help="Number of built-in contrastive pairs."),
    out: Path = typer.Option(..., "--out", help=OUT_HELP),
    site: str | None = typer.Option(
        None, "--site", help="resid_pre (default), resid_post, mlp_out, z, ..."
    ),
    layer: int | None = number(
        None, "--layer", min=0, help="The layer of the site (with --feature: of a set)."
    ),
    head: int | None = number(None, "--head", min=0, help="One head of z, q, k or v."),
    mode: str = typer.Option(
        "add", "--mode", help="add (h + αv), project (h − α(h·d)d) or clamp (a feature to α)."
    ),
    dictionary: Path | None = typer.Option(
        None, "--dictionary", help="Folder of an SAE or transcoder, for --feature."
    ),
    feature: int | None = number(
        None,
        "--feature",
        min=0,
        help="Steer this feature of --dictionary: its decoder row is the vector (clamp: the "
        "feature set to α).",
    ),
    alphas: str = typer.Option("-8,-4,-2,0,2,4,8", "--alphas", help="Scales to sweep."),
    normalize: bool = typer.Option(False, "--normalize", help="Scale the vector to unit length."),
    max_new_tokens: int = number(24, "--max-new-tokens", min=0, help="Greedy tokens (0: none)."),
    policy: str = typer.Option("error", "--policy", help="Multi-token answers: error or first."),
    seed: int = SEED_OPTION,
    opts: ModelOptions = ModelOptions(),
) -> None:
    """Sweep a steering vector's scale: the metric per α and greedy continuations."""
    from mechscope.steering import samples
    from mechscope.steering.run import (
        prepare_prompts,
        run_steering,
        steer_site,
        steering_vector,
        sweep_target,
    )
    from mechscope.steering.vectors import caa_vector

    if feature is not None:
        if pairs is not None or vector is not None:
            flag = "--pairs" if pairs is not None else "--vector"
            raise InputError(
                f"expected no {flag} with --feature (its decoder row is the vector)", field=flag
            )
    elif sum(x is not None for x in (pairs, vector, task)) != 1:
        raise InputError("expected exactly one of --pairs, --vector or --task", field="--pairs")
    elif layer is None:
        raise InputError("expected --layer L (the layer of the site)", field="--layer")
    if task is None and prompts is None:
        raise InputError("expected --prompts FILE (or a --task with prompts)", field="--prompts")
    parsed = parse_list(
        alphas, "--alphas", what="comma-separated numbers", cast=float, required=True
    )
    from mechscope.steering.config import SteerConfig

    given_where = {"site": site, "head": head, "layer": layer}
    config = validated(
        SteerConfig,
        **{k: v for k, v in given_where.items() if v is not None}, mode=mode,
        alphas=parsed, normalize=normalize, max_new_tokens=max_new_tokens, policy=policy,
        feature=feature, dictionary=None if dictionary is None else str(dictionary.resolve()),
    )  # fmt: skip
    record = {
        "steer": config.model_dump(mode="json"),
        **{
            k: str(v.resolve()) if v else None
            for k, v in (("pairs", pairs), ("vector", vector), ("prompts", prompts))
        },
        "task": task,
        "n": n,
        "seed": seed,
        **opts.config(),
    }

    def check(lm):
        where = sweep_target(lm, None, config)[0] if feature is not None else steer_site(lm, config)
        contrasts, todo = [], []
        if task is not None:
            contrasts, todo = samples.task_inputs(task, n, seed=seed)
        if pairs is not None:
            contrasts = samples.load_contrasts(pairs)
        if prompts is not None:
            todo = samples.load_prompts(prompts)
        given = samples.load_vector(vector) if vector is not None else None
        if given is not None:
            steering_vector(lm, given, where, config)
        prepare_prompts(lm, todo, config)
        return where, contrasts, todo, given

    lm, (where, contrasts, todo, given), rd = checked_run(out, record, opts, check, seed=seed)
    direction = given
    if feature is None and given is None:
        direction = caa_vector(lm, contrasts, where)
    result = run_steering(rd, lm, direction, todo, config)
    report = finish(rd)
    change = result.change("logit_diff")[:, [0, -1]]
    console.print(
        f"{len(todo)} prompts × {len(result.alphas)} alphas; mean Δ metric at the ends "
        f"{float(change.mean(0)[0]):+.3f} / {float(change.mean(0)[1]):+.3f}; report: {report}"
    )
