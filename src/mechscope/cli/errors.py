"""Turn user-fixable errors into one line on stderr and exit code 2."""

from __future__ import annotations

import sys

import typer
from pydantic import ValidationError
from rich.console import Console

from mechscope.errors import DiskFullError, MechscopeError
from mechscope.runs import interrupt
from mechscope.runs.executor import ARGV, WorkerDone
from mechscope.runs.rundir import created_runs, discard_unused_runs

USER_ERRORS: tuple[type[BaseException], ...] = (MechscopeError, FileNotFoundError)
INTERRUPTED = 130  # the shell's exit code for a process ended by Ctrl-C (128 + SIGINT)


def one_line(exc: BaseException) -> str:
    """The message of a user error on one line; a pydantic error as its first problem: the
    :class:`~mechscope.errors.InputError` a validator raised, or ``field 'x': message``."""
    if isinstance(exc, ValidationError) and exc.errors():
        first = exc.errors()[0]
        cause = (first.get("ctx") or {}).get("error")
        if isinstance(cause, MechscopeError):
            return str(cause).splitlines()[0]
        where = ".".join(str(x) for x in first.get("loc", ()))
        what = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
        return f"field {where!r}: {what}" if where else what
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def run_app(app: typer.Typer, argv: list[str] | None = None) -> None:
    """Run ``app``; a :class:`MechscopeError` prints ``error: <one line>`` and exits 2."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    args = [a for a in args if a != "--debug"]  # accepted anywhere on the line
    interrupt.install()
    ARGV.set(args)  # what executor workers rerun
    mark = created_runs()  # only this command's run directories may be discarded
    try:
        # Outside standalone mode typer turns Ctrl-C (and typer.Exit) into a returned code.
        code = app(args=args, standalone_mode=False)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        sys.exit(INTERRUPTED)
    except WorkerDone:  # a worker's share is done; its command does the rest
        return None
    except KeyboardInterrupt:
        code = INTERRUPTED
    except (*USER_ERRORS, ValidationError, OSError) as exc:
        if isinstance(exc, OSError) and not isinstance(exc, USER_ERRORS):
            if exc.errno not in DiskFullError.ERRNOS:
                raise
            exc = DiskFullError.of(exc)  # a full disk outside the atomic writes
        discard_unused_runs(since=mark)  # a run directory made before the refusal, no work
        if debug:
            raise
        message = one_line(exc)
        Console(stderr=True, highlight=False).print(f"error: {message}", soft_wrap=True)
        sys.exit(2)
    except Exception as exc:  # click usage errors carry their own exit code
        import click

        if isinstance(exc, click.ClickException):
            exc.show()
            sys.exit(2 if isinstance(exc, click.UsageError) else exc.exit_code)
        raise
    if isinstance(code, int) and not isinstance(code, bool) and code:
        if code == INTERRUPTED:
            Console(stderr=True).print("interrupted; rerun the same command to resume")
        sys.exit(code)
