"""Atomic file writes: a reader sees the old file or the new one, never half of one.

Every file mechscope writes into a run directory goes through here. A crash, a
Ctrl-C or an exception in the writer leaves the previous content (or nothing) in
place, so a resumed run can trust any file it finds. The recipe is the classic
one: write to a temporary file in the *same directory* (so the rename cannot cross
file systems), flush and fsync it, ``os.replace`` it onto the final name, then
fsync the directory so the rename itself survives a power cut.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mechscope.errors import DiskFullError
from mechscope.runs import interrupt

TEMP_MARKER = ".tmp-"
"""Substring of every temporary name, so listings can skip unfinished writes."""


def is_temp_name(name: str) -> bool:
    """True for the name of a temporary file made by :func:`atomic_path`."""
    return name.startswith(".") and TEMP_MARKER in name


def temp_writer_alive(name: str) -> bool:
    """Whether the process that is writing temporary file ``name`` still runs (its pid
    follows the marker); False for a name without one."""
    head = name.split(TEMP_MARKER, 1)[-1].split("-", 1)[0]
    if not head.isdigit():
        return False
    try:
        os.kill(int(head), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(directory: Path) -> None:
    """Persist a rename; some platforms (Windows) cannot open directories, which is fine."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def disk_full_named(path: Path | str) -> Iterator[None]:
    """Turn a full disk (ENOSPC, EDQUOT) inside the block into a one-line
    :class:`~mechscope.errors.DiskFullError` naming ``path``; other errors pass unchanged."""
    try:
        yield
    except OSError as exc:
        if exc.errno in DiskFullError.ERRNOS:
            raise DiskFullError.of(exc, path) from exc
        raise


@contextmanager
def atomic_path(final: Path | str) -> Iterator[Path]:
    """Yield a temporary path beside ``final``; rename it onto ``final`` when the block succeeds.

    The temporary name keeps ``final``'s suffix, so writers that pick a format from the
    suffix (``np.savez``, ``savefig``) behave as they would on the final name. On any
    exception (``KeyboardInterrupt`` included) the temporary file is deleted and the
    exception propagates; ``final`` is untouched. A full disk (ENOSPC, EDQUOT) becomes a
    one-line :class:`~mechscope.errors.DiskFullError` naming ``final``. After the rename, a
    Ctrl-C whose exception was lost (:mod:`mechscope.runs.interrupt`) is raised.

    >>> with atomic_path(out_dir / "table.parquet") as tmp:  # doctest: +SKIP
    ...     df.to_parquet(tmp)
    """
    final = Path(final)
    with disk_full_named(final):
        final.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(  # the writer's pid: a resuming process spares live writes
            prefix=f".{final.stem}{TEMP_MARKER}{os.getpid()}-",
            suffix=final.suffix,
            dir=final.parent,
        )
    os.close(fd)
    tmp = Path(name)
    try:
        with disk_full_named(final):
            yield tmp
            _fsync_file(tmp)
            os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(final.parent)
    interrupt.check()  # a Ctrl-C dropped inside a finaliser stops the run here


def atomic_write_bytes(path: Path | str, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically; returns the final path."""
    path = Path(path)
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return path


def atomic_write_text(path: Path | str, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically; returns the final path."""
    return atomic_write_bytes(path, text.encode(encoding))


def json_default(obj: Any) -> Any:
    """Make numpy scalars, paths and datetimes JSON-serialisable; refuse anything else."""
    if hasattr(obj, "item") and getattr(obj, "shape", None) == ():  # numpy / torch scalar
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, _dt.datetime | _dt.date):
        return obj.isoformat()
    if isinstance(obj, set | frozenset):
        return sorted(obj)
    raise TypeError(f"cannot write a {type(obj).__name__} as JSON")


def atomic_write_json(path: Path | str, obj: Any, *, indent: int | None = 2) -> Path:
    """Write ``obj`` as UTF-8 JSON to ``path`` atomically (numpy scalars become numbers)."""
    text = json.dumps(obj, indent=indent, ensure_ascii=False, default=json_default)
    return atomic_write_text(path, text + "\n")
