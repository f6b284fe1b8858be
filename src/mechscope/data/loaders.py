"""Read JSON / JSONL files and fail early with the line and field that are wrong.

Datasets come from many places (the shared folder, a user's own file, the official
WinoGrande release). One bad line in 10,000 must be reported as ``line 4312: field
'answer': expected ...`` instead of a ``KeyError`` deep inside a workflow.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from mechscope.errors import InputError


def _open_text(path: Path):
    """Open plain or gzip-compressed text (HumanEval ships as ``.jsonl.gz``)."""
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return path.open("r", encoding="utf-8")


def _check_exists(path: Path) -> None:
    if not path.is_file():
        raise InputError(f"expected an existing file, got {str(path)!r}", field="path")


def iter_jsonl(path: str | Path, *, required: Sequence[str] = ()) -> Iterator[tuple[int, dict]]:
    """Yield ``(line_number, record)`` for every non-blank line (1-based line numbers).

    Raises :class:`InputError` naming the line (as the sample) and, where known, the field.
    """
    path = Path(path)
    _check_exists(path)
    with _open_text(path) as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            where = f"{path.name} line {lineno}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"expected valid JSON ({exc.msg})", sample=where) from None
            if not isinstance(record, dict):
                raise InputError(
                    f"expected a JSON object, got {type(record).__name__}", sample=where
                )
            for name in required:
                if name not in record:
                    raise InputError("expected this field to be present", sample=where, field=name)
            yield lineno, record


def read_jsonl(path: str | Path, *, required: Sequence[str] = ()) -> list[dict]:
    """Read a JSONL (or ``.jsonl.gz``) file into a list of dicts; blank lines are skipped.

    ``required`` names fields every record must have; a missing one raises
    :class:`InputError` with the line number as the sample and the field name.
    """
    return [record for _, record in iter_jsonl(path, required=required)]


def read_json(path: str | Path) -> Any:
    """Read one JSON document, reporting syntax errors with line and column."""
    path = Path(path)
    _check_exists(path)
    with _open_text(path) as fh:
        try:
            return json.load(fh)
        except json.JSONDecodeError as exc:
            raise InputError(
                f"expected valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})",
                sample=path.name,
            ) from None


def require_str(record: dict, field: str, sample: str, *, allow_empty: bool = False) -> str:
    """Return ``record[field]`` if it is a (non-empty) string, else raise :class:`InputError`."""
    if field not in record:
        raise InputError("expected this field to be present", sample=sample, field=field)
    value = record[field]
    if not isinstance(value, str):
        raise InputError(
            f"expected a string, got {type(value).__name__}", sample=sample, field=field
        )
    if not allow_empty and not value.strip():
        raise InputError("expected a non-empty string", sample=sample, field=field)
    return value
