"""The ``mechscope`` command line: models, inspect, card, demo, report, and one group per
workflow.

Errors a user can fix print one line and exit with code 2; ``--debug`` shows the traceback.
The workflows' groups are mounted from the registry without importing them
(:mod:`mechscope.cli.mount`), and no module here imports torch: ``--help`` answers at once.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console

from mechscope.cli import model_commands
from mechscope.cli.errors import run_app
from mechscope.cli.help import App
from mechscope.cli.model_options import model_options
from mechscope.cli.mount import mount_workflows
from mechscope.models.options import ModelOptions

app = App(
    name="mechscope",
    help="Causal and attributional analysis of transformer language models.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()


@app.callback()
def main(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors."),
) -> None:
    """mechscope: run causal analyses on your Hugging Face model."""


app.command()(model_commands.models)
app.command()(model_commands.inspect)
app.command()(model_commands.card)


@app.command()
@model_options
def demo(
    out: Path = typer.Option(Path("runs/demo"), "--out", help="Run directory."),
    quick: bool = typer.Option(False, "--quick", help="A smaller version of every part."),
    only: list[str] = typer.Option([], "--only", help="Run only these parts (repeatable)."),
    opts: ModelOptions = ModelOptions(),
) -> None:
    """The main job: every workflow on the demo model, one run directory, one report."""
    from mechscope.demo import run_demo

    report = run_demo(out, model=opts, quick=quick, only=only or None, argv=sys.argv)
    console.print(f"report: {report}")


@app.command()
def report(run_dir: Path = typer.Argument(..., help="A run directory.")) -> None:
    """Rebuild report.html from a run's saved results (no model is loaded)."""
    from mechscope.report.html import build_report
    from mechscope.runs import RunDir

    path = build_report(RunDir.open(run_dir))
    console.print(f"report: {path}")


mount_workflows(app)


def entry() -> None:
    """Console-script entry point."""
    run_app(app)


if __name__ == "__main__":
    entry()
