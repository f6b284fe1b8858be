"""What a command's options become: its config, made by :func:`config_from` from the option
values, so that no command copies its options into its config one by one; and the options
that several commands declare alike.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import typer

C = TypeVar("C")

#: Bootstrap resamples of a command's confidence intervals (its config's ``n_resamples``).
RESAMPLES_OPTION = typer.Option(2000, "--resamples", help="Bootstrap resamples.")


def config_from(
    kind: type[C],
    options: Mapping[str, Any],
    /,
    *,
    renamed: Mapping[str, str] | None = None,
    build: Callable[..., C] | None = None,
    **given: Any,
) -> C:
    """``kind`` (a pydantic model or a dataclass) made from a command's option values
    (its ``locals()``, taken before anything else is assigned).

    Each field of ``kind`` named like an option takes that option's value; ``renamed`` maps
    a field to the option that gives it under another name (``{"n_resamples": "resamples"}``);
    ``given`` are fields whose value is an option turned into something else first (they win
    over an option of the same name). Fields that no option gives keep their defaults.
    ``build``: what makes ``kind`` from the fields when that is not ``kind`` itself (a
    builder that reports a bad field in one line).
    """
    if dataclasses.is_dataclass(kind):
        names = [f.name for f in dataclasses.fields(kind) if f.init]
    else:
        names = list(kind.model_fields)  # type: ignore[attr-defined]
    values = {name: options[name] for name in names if name in options}
    values |= {name: options[option] for name, option in (renamed or {}).items()}
    return (build or kind)(**(values | given))
