"""The executor options of every sharded command, defined once (like the model options).

``--executor inline|local|ray``, ``--workers N``, ``--address A`` and ``--worker-gpus G``
say which processes compute a command's samples, and on which GPUs
(:mod:`mechscope.runs.executor`). A command declares ``ex:``
:class:`~mechscope.runs.options.ExecutorOptions` and is decorated with
:func:`executor_options`, which adds the options to its signature and checks them
(:meth:`ExecutorOptions.check`) before the command runs, so before any model work; the
command computes inside ``with ex.alongside():`` (or :func:`mechscope.cli.common.computing`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

import typer

from mechscope.cli.options import number
from mechscope.runs.executor import MAX_WORKERS
from mechscope.runs.options import ExecutorOptions

F = TypeVar("F", bound=Callable[..., Any])


#: name -> (flag, type, help, range of a number)
OPTIONS: dict[str, tuple[str, Any, str, dict[str, float]]] = {
    "executor": (
        "--executor",
        str,
        "inline | local | ray: where samples are computed (several processes fill one run).",
        {},
    ),
    "workers": (
        "--workers",
        int,
        f"Processes besides this one (local, ray), at most {MAX_WORKERS} and one fewer than "
        "the command's units of work.",
        {"min": 0, "max": MAX_WORKERS},
    ),
    "address": (
        "--address",
        str | None,
        "Ray cluster address (default: a local cluster on 127.0.0.1).",
        {},
    ),
    "worker_gpus": (
        "--worker-gpus",
        float,
        "GPUs per worker: local 1 (its own GPU), ray any (fractions share one).",
        {"min": 0.0},
    ),
}


def executor_options(fn: F) -> F:
    """Give a typer command the executor options: ``fn`` declares ``ex: ExecutorOptions``
    and receives them as one value, already checked."""
    signature = inspect.signature(fn)
    if "ex" not in signature.parameters:
        raise TypeError(f"{fn.__name__} must take ex: ExecutorOptions")
    own = [p for p in signature.parameters.values() if p.name != "ex"]

    @functools.wraps(fn)
    def command(*args: Any, **kwargs: Any) -> Any:
        ex = ExecutorOptions(**{name: kwargs.pop(name) for name in OPTIONS})
        ex.check()
        return fn(*args, ex=ex, **kwargs)

    defaults = ExecutorOptions()
    extra = [
        inspect.Parameter(
            name,
            inspect.Parameter.KEYWORD_ONLY,
            default=(
                number(getattr(defaults, name), flag, help=text, **bounds)
                if bounds
                else typer.Option(getattr(defaults, name), flag, help=text)
            ),
            annotation=kind,
        )
        for name, (flag, kind, text, bounds) in OPTIONS.items()
    ]
    command.__signature__ = signature.replace(parameters=own + extra)  # type: ignore[attr-defined]
    return command  # type: ignore[return-value]
