"""Every command of the ``mechscope`` app and its options, read off the typer app (what typer
itself reads), so that a test over "every command" covers a new command without a word."""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from typing import Any

import typer
from typer.models import ArgumentInfo, OptionInfo
from typer.utils import get_params_from_function

from mechscope.cli.main import app
from mechscope.cli.mount import typer_of


@dataclass(frozen=True)
class Param:
    name: str
    flag: str | None  # None for an argument
    kind: type | None  # int, float, or None for anything else
    required: bool
    info: Any


@dataclass(frozen=True)
class Command:
    path: tuple[str, ...]
    params: tuple[Param, ...]

    def option(self, kind: type) -> Param | None:
        return next((p for p in self.params if p.flag and p.kind is kind), None)


def _number_kind(annotation: Any) -> type | None:
    args = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else ()
    kinds = {a for a in (args or (annotation,)) if a is not type(None)}
    return next(iter(kinds)) if len(kinds) == 1 and kinds <= {int, float} else None


def _params(callback) -> tuple[Param, ...]:
    out = []
    for name, meta in get_params_from_function(callback).items():
        info = meta.default
        kind = _number_kind(meta.annotation)
        if isinstance(info, ArgumentInfo):
            out.append(Param(name, None, kind, info.default is ..., info))
        elif isinstance(info, OptionInfo):
            flag = next(iter(info.param_decls or ()), f"--{name.replace('_', '-')}")
            out.append(Param(name, flag.split("/")[0], kind, info.default is ..., info))
        else:  # a plain default: typer makes it an option
            out.append(Param(name, f"--{name.replace('_', '-')}", kind, False, None))
    return tuple(out)


def commands(root: typer.Typer = app, path: tuple[str, ...] = ()) -> list[Command]:
    found = []
    for info in root.registered_commands:
        name = info.name or info.callback.__name__.replace("_", "-")
        found.append(Command((*path, name), _params(info.callback)))
    callback = root.registered_callback
    if path and callback is not None and root.info.invoke_without_command:
        found.append(Command(path, _params(callback.callback)))  # a group that is a command
    for group in root.registered_groups:  # a workflow's group: its module imported here
        found += commands(typer_of(group.typer_instance), (*path, group.name))
    return found
