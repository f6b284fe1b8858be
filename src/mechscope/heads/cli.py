"""``mechscope heads``: head importance by integrated gradients over head gates."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from mechscope.cli.common import OUT_HELP, checked_run, computing, finish, workflow_app
from mechscope.cli.executor_options import executor_options
from mechscope.cli.model_options import model_options
from mechscope.cli.options import SEED_OPTION, config_from, number
from mechscope.errors import InputError
from mechscope.models.options import ModelOptions
from mechscope.runs.options import ExecutorOptions

if TYPE_CHECKING:
    from mechscope.heads.config import HeadsConfig
    from mechscope.heads.gatefn import GateFunction
    from mechscope.heads.samples import HeadSample
    from mechscope.models.loaded import LoadedModel

app = workflow_app()
console = Console(stderr=True)


def _print_frame(df, title: str) -> None:
    table = Table(title=title)
    for col in df.columns:
        table.add_column(str(col), overflow="fold")  # wrap long names, never cut them
    for row in df.itertuples(index=False):
        table.add_row(*[f"{v:.4g}" if isinstance(v, float) else str(v) for v in row])
    Console().print(table)


def _prepared(
    lm: LoadedModel, samples: Path | None, mixed: int, cfg: HeadsConfig
) -> tuple[list[HeadSample], list[GateFunction]]:
    """The samples (from the file, or ``mixed`` per task of the mixed set) and their
    features, every check made before anything is written."""
    from mechscope.heads.prepare import prepare
    from mechscope.heads.samples import load_samples, mixed_prompt_set

    if samples is not None:
        items = load_samples(samples)
    else:
        items, notes = mixed_prompt_set(lm.tokenizer, n_per_task=mixed, seed=cfg.seed)
        for note in notes:
            console.print(note)
    return items, prepare(lm, items, cfg)


@app.command()
@model_options
@executor_options
def run(
    samples: Path | None = typer.Argument(
        None, help="JSONL: id, prompt, completion (and correct/wrong for logit_diff)."
    ),
    out: Path = typer.Option(..., "--out", help=OUT_HELP),
    mixed: int = number(0, "--mixed", min=0, help="Use N samples per task of the mixed set."),
    objective: str = typer.Option("nll", "--objective", help="nll, diffusion or logit_diff."),
    path: list[str] = typer.Option(
        ["per_layer"],
        "--path",
        help="per_layer, joint, staggered, random (repeatable). joint IG often misses "
        "completeness on real models (the report warns when it does).",
    ),
    steps: int = number(32, "--steps", min=1, help="Quadrature nodes (joint, staggered)."),
    per_layer_steps: int | None = number(
        4, "--per-layer-steps", min=1, help="Quadrature nodes per layer (per_layer)."
    ),
    method: str = typer.Option("gauss_legendre", "--method", help="Quadrature rule."),
    baseline: float = number(
        0.0, "--baseline", min=0.0, below=1.0, help="Gate value at the start, in [0, 1)."
    ),
    batch: int | None = number(None, "--batch", min=1, help="Rows per forward+backward."),
    postprocess: str = typer.Option("signed", "--postprocess", help="signed, abs or relu."),
    prune: bool = typer.Option(True, "--prune/--no-prune", help="Pruning validation."),
    prune_by: list[str] = typer.Option(
        ["per_layer"], "--prune-by", help="Importances that order pruning (repeatable)."
    ),
    refine: float | None = number(
        None, "--refine", min=0.0, help="Double steps where completeness error > this."
    ),
    one_per_layer: bool = typer.Option(False, "--one-per-layer", help="Keep >= 1 head per layer."),
    shapley_top: int = number(0, "--shapley-top", min=0, help="Shapley values for top-k heads."),
    n_draws: int = number(8, "--draws", min=1, help="Mask draws (diffusion objective)."),
    seed: int = SEED_OPTION,
    ex: ExecutorOptions = ExecutorOptions(),
    opts: ModelOptions = ModelOptions(),
) -> None:
    """Integrated gradients over head gates, diagnostics and pruning checks."""
    from mechscope.heads.config import HeadsConfig, build_config
    from mechscope.heads.run import run_heads

    cfg = config_from(
        HeadsConfig,
        locals(),
        renamed={
            "paths": "path",
            "n_steps": "steps",
            "internal_batch_size": "batch",
            "prune_one_per_layer": "one_per_layer",
            "refine_rtol": "refine",
        },
        build=build_config,
    )
    if (samples is None) == (mixed <= 0):
        raise InputError("either a samples file or --mixed N (not both)", field="samples")
    source = str(samples.resolve()) if samples is not None else f"mixed:{mixed}"  # as typed or not
    config = cfg.model_dump() | {"samples": source}
    lm, (items, fs), run_dir = checked_run(
        out, config, opts, lambda lm: _prepared(lm, samples, mixed, cfg), seed=seed
    )
    with computing(run_dir, "heads", ex, units=len(items)):
        result = run_heads(run_dir, lm, items, cfg, fs=fs)
    from mechscope.heads.report import (
        completeness_summary,
        completeness_warnings,
        diagnostics_table,
    )

    summary = completeness_summary(result.completeness)
    _print_frame(summary, "completeness")
    for warning in completeness_warnings(summary):  # the report's caution, on the terminal too
        console.print(warning.replace("**", ""), style="yellow")
    _print_frame(diagnostics_table(result.diagnostics), "diagnostics")
    console.print(f"report: {finish(run_dir)}")


@app.command()
def diagnose(
    run_dir: Path = typer.Argument(..., help="A run directory with head attributions."),
) -> None:
    """Print the completeness and diagnostics tables of a finished run (no model loaded)."""
    from mechscope.heads.report import completeness_summary, diagnostics_table
    from mechscope.runs import RunDir, has_table, read_table

    run_ = RunDir.open(run_dir)
    if not has_table(run_, "heads_diagnostics"):
        raise InputError(f"a run with head attributions; {run_dir} has none", field="run")
    _print_frame(completeness_summary(read_table(run_, "heads_completeness")), "completeness")
    _print_frame(diagnostics_table(read_table(run_, "heads_diagnostics")), "diagnostics")
    if has_table(run_, "heads_pruning_auc"):
        _print_frame(read_table(run_, "heads_pruning_auc"), "pruning (average level of curves)")
