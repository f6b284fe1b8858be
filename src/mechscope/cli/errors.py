"""Turn user-fixable errors into one line on stderr and exit code 2."""

from __future__ import annotations

import sys

import typer
from pydantic_core import ValidationError  # pydantic's, without importing pydantic
from rich.console import Console

from mechscope.errors import DiskFullError, MechscopeError, ResumableError
from mechscope.progress import command_line, drop_warnings, hold_warnings, release_warnings
from mechscope.runs import interrupt
from mechscope.runs.executor import ARGV, WorkerDone

USER_ERRORS: tuple[type[BaseException], ...] = (MechscopeError, FileNotFoundError)
INTERRUPTED = 130  # the shell's exit code for a process ended by Ctrl-C (128 + SIGINT)
USAGE = 2  # click's exit code for a mistake on the command line


def parser_errors() -> tuple[type[Exception], ...]:
    """The exceptions the command-line parser raises for a mistake on the command line.

    typer 0.27 and later parse with a copy of click inside typer, whose exceptions derive
    from ``typer.TyperException``, not from ``click.ClickException``; earlier typers raise
    click's own. Both are caught, through the names each package exports, so neither an
    upgrade nor a downgrade of typer turns a usage error back into a traceback.
    """
    found: list[type[Exception]] = []
    base = getattr(typer, "TyperException", None)
    if isinstance(base, type) and issubclass(base, Exception):
        found.append(base)
    try:
        import click
    except ImportError:  # pragma: no cover - typer without click
        pass
    else:
        found.append(click.ClickException)
    return tuple(found)


def usage_error(exc: Exception, stderr: Console) -> int:
    """Print a parser error as ``error: <one line>`` and return its exit code. A group called
    without a command shows its help instead."""
    message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
    code = getattr(exc, "exit_code", USAGE)
    if not message.strip():  # a group given no command: typer has printed its help
        return code
    if "\n" in message.strip():  # the same where the help is the message
        exc.show()  # type: ignore[attr-defined]
        return code
    ctx = getattr(exc, "ctx", None)
    path = getattr(ctx, "command_path", None)
    hint = f" (see {path} --help)" if path else ""
    stderr.print(f"error: {message.strip()}{hint}", soft_wrap=True, markup=False)
    return USAGE if code in (None, 0, 1) else code


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


def _runs_mark() -> tuple[int, int]:
    """:func:`mechscope.runs.rundir.runs_mark`; ``(0, 0)`` while that module is not imported
    (no run directory was made yet), so that ``--help`` does not import it (pydantic, yaml)."""
    rundir = sys.modules.get("mechscope.runs.rundir")
    return rundir.runs_mark() if rundir is not None else (0, 0)


def run_app(app: typer.Typer, argv: list[str] | None = None) -> None:
    """Run ``app``; a :class:`MechscopeError` prints ``error: <one line>`` and exits 2."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    args = [a for a in args if a != "--debug"]  # accepted anywhere on the line
    interrupt.install()
    ARGV.set(args)  # what executor workers rerun
    mark = _runs_mark()  # only what this command did to run directories is taken back
    hold_warnings()  # until the run opens: a refusal before it prints alone
    try:
        # Outside standalone mode typer turns Ctrl-C (and typer.Exit) into a returned code.
        with command_line():  # the command line's display, not the Python API's bars
            code = app(args=args, standalone_mode=False, prog_name="mechscope")
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        sys.exit(INTERRUPTED)
    except WorkerDone:  # a worker's share is done; its command does the rest
        return None
    except KeyboardInterrupt:
        code = INTERRUPTED
    except (*USER_ERRORS, ValidationError, OSError) as exc:
        from mechscope.runs.rundir import undo_runs

        if isinstance(exc, OSError) and not isinstance(exc, USER_ERRORS):
            if exc.errno not in DiskFullError.ERRNOS:
                raise
            exc = DiskFullError.of(exc)  # a full disk outside the atomic writes
        # a refused command changes nothing on disk; a resumable failure keeps finished work
        undo_runs(since=mark, keep_work=isinstance(exc, ResumableError))
        drop_warnings()
        if debug:
            raise
        message = one_line(exc)
        Console(stderr=True, highlight=False).print(f"error: {message}", soft_wrap=True)
        sys.exit(2)
    except parser_errors() as exc:  # before anything ran, so nothing to discard
        drop_warnings()
        if debug:
            raise
        sys.exit(usage_error(exc, Console(stderr=True, highlight=False)))
    finally:
        release_warnings()  # a command that opens no run: its warnings at its end
    if isinstance(code, int) and not isinstance(code, bool) and code:
        if code == INTERRUPTED:
            Console(stderr=True).print("interrupted; rerun the same command to resume")
        sys.exit(code)
