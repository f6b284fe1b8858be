"""How every mechscope command renders its help: the typer app, command and group classes.

typer 0.27 and later label each parameter with its Python type (``<bool>`` beside a flag,
``<list[str]>`` for a repeatable option, ``<int range>``) and write a required argument
``{input}`` in the usage line. mechscope's commands show what a command line takes instead,
as click does: ``INTEGER [x>=1]``, ``TEXT``, ``PATH``, nothing beside a flag, and
``INPUT`` / ``[INPUT]`` in the usage line. A workflow gets this by making its app with
:func:`mechscope.cli.common.workflow_app` (an :class:`App`); ``tests/cli/test_help.py``
checks every command's rendered help.
"""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

#: typer's type label (without its angle brackets) -> the label shown
_LABELS = {"int": "INTEGER", "float": "FLOAT", "str": "TEXT", "bool": "BOOLEAN"}


def _label(typer_label: str | None) -> str | None:
    """``<list[int range]>`` -> ``INTEGER``; a choice ``<a|b>`` -> ``[a|b]``."""
    if not typer_label or not typer_label.startswith("<"):
        return typer_label  # a metavar the command chose, or an older typer's label
    text = typer_label.removesuffix("...").strip("<>")
    while text.startswith("list[") and text.endswith("]"):
        text = text[5:-1]
    text = text.removesuffix(" range")
    if "|" in text:
        return f"[{text}]"
    return _LABELS.get(text, text.upper())


class _Option(TyperOption):
    def display_type_rich(self, ctx: Any) -> str | None:
        if self.is_flag and not self.count:
            return None  # --prune/--no-prune says it all
        return _label(super().display_type_rich(ctx))


class _Argument(TyperArgument):
    def display_type_rich(self, ctx: Any) -> str | None:
        return _label(super().display_type_rich(ctx))

    def get_usage_pieces(self, ctx: Any) -> list[str]:
        name = (self.metavar or self.name or "").upper()
        name = name if self.required else f"[{name}]"
        return [name + ("..." if self.nargs != 1 else "")]


_PLAIN: dict[type, type] = {TyperOption: _Option, TyperArgument: _Argument}


class _PlainHelp:
    """Gives a command's parameters the labels above (they parse exactly as before: the
    classes differ only in how they are shown)."""

    def get_params(self, ctx: Any) -> list[Any]:
        params = super().get_params(ctx)  # type: ignore[misc]
        for param in params:
            plain = _PLAIN.get(type(param))
            if plain is not None:
                param.__class__ = plain
        return params

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)  # type: ignore[misc]
        if option is not None and option.default is None:
            # typer >= 0.27 checks a value that is not a bool through a pydantic adapter: an
            # unasked --help of a parent group (None) would import pydantic for every command
            option.default = False
        return option


class Command(_PlainHelp, TyperCommand):
    """A mechscope command."""


class Group(_PlainHelp, TyperGroup):
    """A mechscope command group."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = super().collect_usage_pieces(ctx)
        return pieces if self.commands else pieces[:-1]  # a group that is itself the command


class App(typer.Typer):
    """A typer app whose commands are :class:`Command` and whose group is :class:`Group`."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("cls", Group)
        super().__init__(**kwargs)

    def command(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["cls"] = kwargs.get("cls") or Command
        return super().command(*args, **kwargs)
