"""``mechscope features``: sparse dictionaries from the command line."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from mechscope.cli.common import workflow_app

app = workflow_app()
console = Console()


@app.callback()
def main() -> None:
    """Sparse dictionaries (SAEs, transcoders): read any published layout, inspect it."""


@app.command()
def inspect(
    path: Path = typer.Argument(..., help="A dictionary's folder, in any published layout."),
) -> None:
    """What a dictionary folder holds: layout, kind, activation, widths, hooks, model, dtype."""
    from mechscope.dictionaries import describe, load_dictionary

    info = describe(load_dictionary(path))
    table = Table(title=str(path), show_header=False, title_justify="left")
    table.add_column("field", style="bold")
    table.add_column("value")
    for key, value in info.items():
        table.add_row(key, str(value))
    console.print(table)
