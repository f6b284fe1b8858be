"""The workflows' command groups, mounted from the registry without importing them.

``mechscope --help`` lists every workflow's group with the help line of
:data:`mechscope.workflows.WORKFLOWS`; a group's ``cli`` module (and whatever it imports)
is imported only when that group is used: ``mechscope lens …`` imports
``mechscope.lens.cli``, nothing of the other workflows. Each group is mounted as a
placeholder typer app whose click group, a :class:`LazyGroup`, hands everything past its
name and help line to the real group, built on first use.
"""

from __future__ import annotations

import importlib
from typing import Any, ClassVar

import typer

from mechscope.cli.help import Group
from mechscope.workflows import Workflow, installed, workflows


class LazyGroup(Group):
    """A workflow's command group as the registry describes it (name, help line); its
    module is imported, and the real group built, when the group is used."""

    workflow: ClassVar[Workflow]
    _real: Any = None

    def real(self) -> Any:
        """The group built from the workflow's typer app (imported now if it is not yet)."""
        if self._real is None:
            holder = typer.Typer()
            holder.add_typer(workflow_typer(self.workflow), name=self.name, help=self.help)
            self._real = typer.main.get_group(holder).commands[str(self.name)]
        return self._real

    @property  # type: ignore[override]
    def commands(self) -> Any:
        """The real group's commands (a reader walking ``.commands`` gets the workflow's)."""
        return self.real().commands

    @commands.setter
    def commands(self, value: Any) -> None:  # a placeholder is built with none
        pass

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra):
        return self.real().make_context(info_name, args, parent=parent, **extra)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        return self.real().get_command(ctx, cmd_name)

    def list_commands(self, ctx: Any) -> list[str]:
        return self.real().list_commands(ctx)


def workflow_typer(workflow: Workflow) -> typer.Typer:
    """The workflow's typer app, its module imported, with the registry's groups that
    belong inside it (``lens study`` inside ``lens``) mounted."""
    app = importlib.import_module(workflow.module("cli")).app
    return mount_workflows(app, under=workflow.command or "")


def typer_of(app: typer.Typer) -> typer.Typer:
    """``app`` itself, or for a mounted placeholder the workflow's own typer app (what a
    walk over every command's typer declarations needs)."""
    workflow = getattr(app.info.cls, "workflow", None)
    return app if workflow is None else workflow_typer(workflow)


def mount_workflows(root: typer.Typer, under: str = "") -> typer.Typer:
    """Add each installed workflow's group whose command sits in the group ``under`` (the
    top level by default; ``"lens"`` for ``lens study``) to ``root``, as a placeholder:
    nothing of the workflow is imported until its group is used."""
    mounted = {group.name for group in root.registered_groups}
    for workflow in workflows():
        if workflow.command is None or workflow.cli is None:
            continue
        *parents, name = workflow.command.split()
        if " ".join(parents) != under or name in mounted or not installed(workflow.package):
            continue
        lazy = type(f"Lazy_{workflow.name}", (LazyGroup,), {"workflow": workflow})
        root.add_typer(typer.Typer(cls=lazy), name=name, help=workflow.help)
        mounted.add(name)
    return root
