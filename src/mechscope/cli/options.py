"""What a command's options become: its config, made by :func:`config_from` from the option
values, so that no command copies its options into its config one by one; the range of
every number option (:func:`number`); and the options that several commands declare alike.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import typer

C = TypeVar("C")
Number = int | float


def number(
    default: Any,
    *flags: str,
    min: Number | None = None,
    max: Number | None = None,
    above: Number | None = None,
    below: Number | None = None,
    help: str | None = None,
    **kwargs: Any,
) -> Any:
    """An int or float option with its range, checked by the parser, so before the command
    runs: ``min``/``max`` inclusive (typer's own check), ``above``/``below`` exclusive, and
    a float must be finite (NaN passes every comparison, so a range alone lets it through).
    Every number option of every command is made here (tested)."""

    def check(value: Number | None) -> Number | None:
        if value is None:
            return value
        if isinstance(value, float) and not math.isfinite(value):
            raise typer.BadParameter(f"expected a finite number, got {value}")
        if above is not None and not value > above:
            raise typer.BadParameter(f"expected a number above {above}, got {value}")
        if below is not None and not value < below:
            raise typer.BadParameter(f"expected a number below {below}, got {value}")
        return value

    return typer.Option(default, *flags, min=min, max=max, callback=check, help=help, **kwargs)


#: Bootstrap resamples of a command's confidence intervals (its config's ``n_resamples``).
RESAMPLES_OPTION = number(2000, "--resamples", min=1, help="Bootstrap resamples.")
#: A command's random seed: what numpy and torch take (0 .. 2**32 - 1).
SEED_OPTION = number(0, "--seed", min=0, max=2**32 - 1, help="Random seed (numpy and torch).")


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
