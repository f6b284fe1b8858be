"""``mechscope distill``: run a study, summarize it, run the pilot checks."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.table import Table

from mechscope.cli.common import workflow_app
from mechscope.cli.executor_options import executor_options
from mechscope.cli.model_options import model_options
from mechscope.cli.options import number
from mechscope.errors import InputError
from mechscope.models.options import ModelOptions
from mechscope.runs.options import ExecutorOptions

app = workflow_app(help="RCID distillation: keep the teacher's causal mechanism.")
console = Console()


def _overrides(items: list[str] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InputError(f"expected KEY=VALUE, got {item!r}", field="--set")
        out[key.strip()] = yaml.safe_load(value)
    return out


def _load(config: str, sets: list[str] | None, quick: bool):
    from mechscope.distill.config import load_study_config, resolve_config_path

    path = resolve_config_path(config)
    cfg = load_study_config(path, _overrides(sets))
    if quick:
        from mechscope.distill.demo import quick_overrides

        cfg = cfg.model_validate({**cfg.model_dump(), **quick_overrides(cfg)})
    return cfg


@app.command()
@executor_options
def run(
    config: str = typer.Argument(..., help="YAML config file or built-in name (cpu_study)"),
    root: Path = typer.Option(Path("runs"), "--root", help="Folder for study run directories"),
    set_: list[str] | None = typer.Option(None, "--set", help="Override KEY=VALUE"),
    quick: bool = typer.Option(False, "--quick/--no-quick", help="1 seed, few steps, small data"),
    ex: ExecutorOptions = ExecutorOptions(),
) -> None:
    """Run the grid students × tasks × methods × seeds (resumes an interrupted study)."""
    # options as defaults, not Annotated hints: executor_options rewrites the signature,
    # and string hints would not be resolved there
    from mechscope.distill.run import run_study
    from mechscope.distill.summarize import summarize_study

    cfg = _load(config, set_, quick)
    result = run_study(
        cfg,
        root,
        ex=ex,
        on_trial=lambda t, df: console.print(
            f"[green]done[/] {t.name}: accuracy {df['accuracy'].iloc[0]:.3f}, "
            f"consistency {df['consistency'].iloc[0]:.3f}"
        ),
    )
    _, table = summarize_study(result.path)
    console.print(table)
    console.print(f"study: {result.path}")


@app.command()
def check(
    config: Annotated[str, typer.Argument(help="YAML config file or built-in name")],
    set_: Annotated[list[str] | None, typer.Option("--set", help="Override KEY=VALUE")] = None,
) -> None:
    """Validate a config (tasks, data files, models, students against the teacher) without
    training: it refuses exactly what 'distill run' refuses before its first trial."""
    from mechscope.distill.run import expand_trials, load_teacher, validate_study

    cfg = _load(config, set_, False)
    validate_study(cfg)  # what needs no model, before loading one
    validate_study(cfg, load_teacher(cfg))
    console.print(f"ok: {len(expand_trials(cfg))} trials")


@app.command()
def summarize(
    study: Annotated[Path, typer.Argument(help="A study folder (runs/<name>)")],
) -> None:
    """Tables (mean ± std over seeds) and figures of a study's finished trials."""
    from mechscope.distill.summarize import summarize_study

    _, table = summarize_study(study)
    console.print(table)


@app.command()
@model_options
def pilot(
    # options as defaults, not Annotated hints: model_options rewrites the signature,
    # and string hints would not be resolved there
    config: str | None = typer.Option(
        None,
        "--config",
        help="Take the teacher (instead of --model) and first student from a config",
    ),
    n_accuracy: int = number(100, "--n-accuracy", min=1, help="IOI pairs for the accuracy check"),
    opts: ModelOptions = ModelOptions(),
) -> None:
    """The pilot validation checks (teacher accuracy, names, norms, patching, student) on
    the teacher (--model, or the teacher of --config)."""
    from mechscope.distill.pilot import run_pilot
    from mechscope.distill.students import build_student

    student = None
    if config is not None:
        cfg = _load(config, None, False)
        dtype = cfg.teacher_dtype or opts.dtype
        lm = replace(opts, model=cfg.teacher, dtype=dtype).load()
        student = build_student(cfg.students[0], lm, seed=cfg.seeds[0])
    else:
        lm = opts.load()
    checks = run_pilot(lm, student, n_accuracy=n_accuracy)
    table = Table("check", "result", "value", "expected")
    for c in checks:
        mark = "info" if c.passed is None else ("[green]pass[/]" if c.passed else "[red]FAIL[/]")
        table.add_row(c.name, mark, c.value, c.expected)
    console.print(table)
    if any(c.passed is False for c in checks):
        raise typer.Exit(1)


@app.command("configs")
def list_configs() -> None:
    """List the built-in study configs."""
    folder = Path(__file__).parent / "configs"
    for path in sorted(folder.glob("*.yaml")):
        first = yaml.safe_load(path.read_text(encoding="utf-8")).get("description", "")
        console.print(f"[bold]{path.stem}[/]: {first}")
