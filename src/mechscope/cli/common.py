"""What every workflow's command line shares: its typer group, the run directory it opens and
finishes, and the parsing of list options.

A command checks every input first, then opens its run (:func:`open_run`, or
:func:`checked_run` for the sequence load, check, open), computes its part inside
:func:`computing`, and ends with :func:`finish` (the run is marked finished, then its report
is built, so that the report says "finished"). Its config comes from its options by
:func:`mechscope.cli.options.config_from`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import typer

from mechscope.cli.help import App
from mechscope.errors import InputError

if TYPE_CHECKING:
    from pydantic import BaseModel

    from mechscope.models.loaded import LoadedModel
    from mechscope.models.options import ModelOptions
    from mechscope.runs import RunDir
    from mechscope.runs.options import ExecutorOptions

T = TypeVar("T")

OUT_HELP = "Run directory (resumed if it exists)."


def workflow_app(**kwargs: Any) -> typer.Typer:
    """A workflow's typer group (mounted by :mod:`mechscope.cli`, its help rendered by
    :mod:`mechscope.cli.help`); ``kwargs`` override the defaults (a group that is itself the
    command takes ``invoke_without_command=True, no_args_is_help=False``)."""
    defaults = {"no_args_is_help": True, "add_completion": False}
    return App(**(defaults | kwargs), pretty_exceptions_enable=False)


def open_run(
    out: Path,
    config: BaseModel | dict[str, Any],
    lm: LoadedModel,
    model_spec: str,
    *,
    seed: int = 0,
) -> RunDir:
    """Create (or resume) the run directory ``out`` for ``lm``, after every input check."""
    from mechscope.runs import RunDir

    return RunDir.for_model(out, config, lm.model, model_spec=model_spec, seed=seed)


def checked_run(
    out: Path,
    config: BaseModel | dict[str, Any],
    opts: ModelOptions,
    check: Callable[[LoadedModel], T],
    *,
    seed: int = 0,
) -> tuple[LoadedModel, T, RunDir]:
    """The model of ``opts`` loaded, the inputs checked against it (``check``, whose result
    comes back: prepared samples, a plan …), and only then the run ``out`` opened, so that
    inputs that fail leave no run directory behind."""
    lm = opts.load()
    checked = check(lm)
    return lm, checked, open_run(out, config, lm, opts.model, seed=seed)


@contextmanager
def computing(
    run: RunDir, part: str, ex: ExecutorOptions | None = None, units: int | None = None
) -> Iterator[None]:
    """The block computes the run's ``part``: timed under that name in the run, with the
    executor's workers computing alongside when ``ex`` is given (no more than ``units``
    of work need, when known)."""
    with run.timed(part), ex.alongside(units) if ex is not None else nullcontext():
        yield


def finish(run: RunDir, *, report: bool = True) -> Path | None:
    """Mark ``run`` finished, then build its report (so that it says "finished"); the report's
    path, or ``None`` without one. (An executor's worker never gets here: it ends where its
    driver's shared work ends, :func:`mechscope.runs.executor.shared_work_done`.)"""
    run.finish()
    if not report:
        return None
    from mechscope.report import build_report

    return build_report(run)


def parse_list(
    text: str | None,
    field: str,
    *,
    what: str,
    cast: Callable[[str], T] = str,  # type: ignore[assignment]
    sep: str = ",",
    size: int | None = None,
    required: bool = False,
) -> tuple[T, ...] | None:
    """The items of a ``sep``-separated option, stripped, blanks dropped, each through
    ``cast``; ``None`` for an absent or empty option unless ``required``.

    ``size``: exactly that many non-blank items. A bad value is an :class:`InputError`
    ``expected <what>, got <text>`` on ``field``.
    """
    if not text and not required:
        return None
    pieces = (text or "").split(sep)
    wrong = InputError(f"expected {what}, got {text!r}", field=field)
    try:
        items = tuple(cast(x.strip()) for x in pieces if x.strip())
    except ValueError:
        raise wrong from None
    if (required and not items) or (size is not None and (len(pieces), len(items)) != (size, size)):
        raise wrong
    return items


def validated(model: type[BaseModel], **kwargs: Any) -> Any:
    """``model(**kwargs)`` (a pydantic config), its first validation error as one
    :class:`InputError` line naming the field."""
    from pydantic import ValidationError

    try:
        return model(**kwargs)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "config"
        raise InputError(err["msg"].removeprefix("Value error, "), field=field) from None
