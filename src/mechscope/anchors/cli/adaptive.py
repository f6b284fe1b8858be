"""The adaptive design's options, declared once for ``resample``, ``plan`` and ``simulate``.

A command declares ``rule: AdaptiveSettings`` and is decorated with :func:`adaptive_options`,
which adds ``--n-min``, ``--step``, ``--width``, ``--threshold`` (0: off), ``--confidence``,
``--correction``, ``--budget``, ``--prior``, ``--target``, ``--k`` and ``--cap`` to its
signature and passes the settings, already checked (one line, exit 2, before any work),
as ``rule``. Each number option carries its range (:func:`mechscope.cli.options.number`),
so the parser refuses a value outside it before the command runs.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

import typer

from mechscope.anchors.config import AdaptiveSettings
from mechscope.cli.options import number

F = TypeVar("F", bound=Callable[..., Any])

#: name -> (flag, type, default, help, range of a number option: number()'s min/max/above/below)
OPTIONS: dict[str, tuple[str, Any, Any, str, dict[str, float]]] = {
    "n_min": ("--n-min", int, 10, "Adaptive: rollouts of every position first.", {"min": 1}),
    "step": (
        "--step",
        int,
        10,
        "Adaptive: rollouts added to an open position per round.",
        {"min": 1},
    ),
    "width": (
        "--width",
        float,
        0.2,
        "Adaptive: stop a chunk at this interval width.",
        {"min": 0.0, "above": 0.0, "max": 2.0},  # an interval of a difference of rates
    ),
    "threshold": (
        "--threshold",
        float,
        0.25,
        "Adaptive: stop a chunk whose |importance| is surely below this (0: off).",
        {"min": 0.0, "max": 1.0},
    ),
    "confidence": (
        "--confidence",
        float,
        0.95,
        "Adaptive: interval level.",
        {"min": 0.0, "above": 0.0, "max": 1.0, "below": 1.0},
    ),
    "correction": (
        "--correction",
        str,
        "looks",
        "Adaptive: looks (level split over a chunk's looks) or none (each look nominal).",
        {},
    ),
    "budget": (
        "--budget",
        float,
        1.0,
        "Adaptive: most rollouts per trace, as a share of the fixed design's.",
        {"min": 0.0, "above": 0.0, "max": 1.0},
    ),
    "prior": (
        "--prior",
        str,
        "none",
        "Adaptive: order positions by none|receivers|suppression.",
        {},
    ),
    "target": (
        "--target",
        str,
        "threshold",
        "Adaptive: the question the rule answers: threshold|ranking|topk|topk-bayes.",
        {},
    ),
    "k": ("--k", int, 5, "Adaptive, --target topk*: how many anchors to find.", {"min": 1}),
    "cap": (
        "--cap",
        int,
        None,
        "Adaptive: most rollouts per position (default --n; above it contested ones go on).",
        {"min": 1},
    ),
}


def build_rule(values: dict[str, Any]) -> AdaptiveSettings:
    """The settings from the option values (``--threshold 0`` is no threshold)."""
    return AdaptiveSettings(**(values | {"threshold": values["threshold"] or None}))


def _option(flag: str, kind: Any, default: Any, text: str, bounds: dict[str, float]) -> Any:
    if kind in (int, float):
        return number(default, flag, help=text, **bounds)
    return typer.Option(default, flag, help=text)


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
            default=_option(*spec),
            annotation=spec[1] if spec[2] is not None else spec[1] | None,
        )
        for name, spec in OPTIONS.items()
    ]
    command.__signature__ = signature.replace(parameters=own + extra)  # type: ignore[attr-defined]
    return command  # type: ignore[return-value]


def given_flags() -> list[str]:
    """The adaptive flags given on this command line (as ``run_app`` recorded it), for a
    command that refuses them without ``--adaptive`` rather than ignoring them."""
    from mechscope.runs.executor import ARGV

    args = ARGV.get() or []
    flags = [spec[0] for spec in OPTIONS.values()]
    return [f for f in flags if any(a == f or a.startswith(f + "=") for a in args)]
