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


def _open_bytes(path: Path):
    """Open plain or gzip-compressed bytes (HumanEval ships as ``.jsonl.gz``)."""
    if path.suffix == ".gz":
        return gzip.open(path, "rb")
    return path.open("rb")


def _decode(data: bytes, where: str) -> str:
    """``data`` as UTF-8, or a one-line error naming the first byte that is not."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(
            f"expected UTF-8 text; byte 0x{data[exc.start]:02x} at line {line} is not "
            "(save the file as UTF-8)",
            sample=where,
        ) from None


def read_text(path: str | Path) -> str:
    """A text file's content as UTF-8 (plain or ``.gz``); a file in another encoding is a
    one-line :class:`InputError` naming the file and line, not a ``UnicodeDecodeError``."""
    path = Path(path)
    _check_exists(path)
    with _open_bytes(path) as fh:
        return _decode(fh.read(), path.name)


def lone_surrogate(value: Any, field: str = "") -> str | None:
    """The field (dotted path) of the first string in ``value`` holding a lone surrogate
    (JSON's ``"\\ud800"`` without its pair): no tokenizer can encode one. ``None`` if
    there is none."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return field or "text"
        return None
    if isinstance(value, dict | list | tuple):  # numbers, booleans, None hold no text
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            found = lone_surrogate(item, f"{field}.{key}" if field else str(key))
            if found is not None:
                return found
    return None


def check_text(record: Any, where: str) -> None:
    """Refuse a record holding a lone surrogate, naming the sample and the field."""
    if (field := lone_surrogate(record)) is not None:
        raise InputError(
            "expected text (a lone surrogate escape such as \\ud800 is not a character)",
            sample=where,
            field=field,
        )


def _check_exists(path: Path) -> None:
    if not path.is_file():
        raise InputError(f"expected an existing file, got {str(path)!r}", field="path")


def iter_jsonl(path: str | Path, *, required: Sequence[str] = ()) -> Iterator[tuple[int, dict]]:
    """Yield ``(line_number, record)`` for every non-blank line (1-based line numbers).

    Raises :class:`InputError` naming the line (as the sample) and, where known, the field.
    """
    path = Path(path)
    _check_exists(path)
    with _open_bytes(path) as fh:
        for lineno, raw in enumerate(fh, start=1):
            where = f"{path.name} line {lineno}"
            line = _decode(raw, where)
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"expected valid JSON ({exc.msg})", sample=where) from None
            if not isinstance(record, dict):
                raise InputError(
                    f"expected a JSON object, got {type(record).__name__}", sample=where
                )
            check_text(record, where)
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
    try:
        data = json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise InputError(
            f"expected valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})",
            sample=Path(path).name,
        ) from None
    check_text(data, Path(path).name)
    return data


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
