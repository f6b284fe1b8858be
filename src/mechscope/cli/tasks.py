"""``mechscope tasks``: the built-in tasks, the workflows that take them, their files."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from mechscope.cli.common import workflow_app

app = workflow_app(invoke_without_command=True, no_args_is_help=False)


@app.callback()
def main() -> None:
    """List the built-in tasks: what each is, which workflows take it, and its dataset file
    (and whether it is found: $MECHSCOPE_DATASETS, a shared/datasets folder)."""
    from mechscope.data.tasks import TASKS

    table = Table("task", "what", "workflows", "dataset file")
    for task in TASKS.values():
        if task.dataset is None:
            where = "-"
        else:
            found = task.dataset_file()
            where = f"{task.dataset}: {found}" if found else f"{task.dataset}: not found"
        table.add_row(task.name, task.about, ", ".join(task.workflows), where)
    Console().print(table)
