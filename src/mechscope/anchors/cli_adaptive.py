"""The adaptive design's options, declared once for ``resample``, ``plan`` and ``simulate``.

A command declares ``rule: AdaptiveSettings`` and is decorated with :func:`adaptive_options`,
which adds ``--n-min``, ``--step``, ``--width``, ``--threshold`` (0: off), ``--confidence``,
``--correction``, ``--budget`` and ``--prior`` to its signature and passes the settings,
already checked (one line, exit 2, before any work), as ``rule``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

import typer

from mechscope.anchors.config import AdaptiveSettings
from mechscope.errors import InputError

F = TypeVar("F", bound=Callable[..., Any])

#: name -> (flag, type, default, help)
OPTIONS: dict[str, tuple[str, Any, Any, str]] = {
    "n_min": ("--n-min", int, 10, "Adaptive: rollouts of every position first."),
    "step": ("--step", int, 10, "Adaptive: rollouts added to an open position per round."),
    "width": ("--width", float, 0.2, "Adaptive: stop a chunk at this interval width."),
    "threshold": (
        "--threshold",
        float,
        0.25,
        "Adaptive: stop a chunk whose |importance| is surely below this (0: off).",
    ),
    "confidence": ("--confidence", float, 0.95, "Adaptive: interval level."),
    "correction": (
        "--correction",
        str,
        "looks",
        "Adaptive: looks (level split over a chunk's looks) or none (each look nominal).",
    ),
    "budget": (
        "--budget",
        float,
        1.0,
        "Adaptive: most rollouts per trace, as a share of the fixed design's.",
    ),
    "prior": ("--prior", str, "none", "Adaptive: order positions by none|receivers|suppression."),
}


def build_rule(values: dict[str, Any]) -> AdaptiveSettings:
    """The settings from the option values (``--threshold 0`` is no threshold)."""
    if values["threshold"] < 0:
        raise InputError(f">= 0 (0: off), got {values['threshold']}", field="--threshold")
    return AdaptiveSettings(**(values | {"threshold": values["threshold"] or None}))


def adaptive_options(fn: F) -> F:
    """Give a typer command the adaptive options; ``fn`` takes ``rule: AdaptiveSettings``."""
    signature = inspect.signature(fn)
    if "rule" not in signature.parameters:
        raise TypeError(f"{fn.__name__} must take rule: AdaptiveSettings")
    own = [p for p in signature.parameters.values() if p.name != "rule"]

    @functools.wraps(fn)
    def command(*args: Any, **kwargs: Any) -> Any:
        rule = build_rule({name: kwargs.pop(name) for name in OPTIONS})
        return fn(*args, rule=rule, **kwargs)

    extra = [
        inspect.Parameter(
            name,
            inspect.Parameter.KEYWORD_ONLY,
            default=typer.Option(default, flag, help=text),
            annotation=kind,
        )
        for name, (flag, kind, default, text) in OPTIONS.items()
    ]
    command.__signature__ = signature.replace(parameters=own + extra)  # type: ignore[attr-defined]
    return command  # type: ignore[return-value]
