"""Is a file of a run directory intact? Checks for shard records, tables and array bundles.

Atomic writes (:mod:`mechscope.runs.atomic`) keep a crash from leaving half a file, but a
disk that fills, a copy cut short or a hand edit can still leave one. Every kind of file a
run reads back is therefore either sealed with a checksum or parsed before it is trusted:

- a shard's JSON record carries the sha256 of its own text (``sha256``) and of its arrays
  file (``arrays_sha256``), checked on every read (:mod:`mechscope.runs.shards`);
- a table is Parquet written with page checksums (``write_page_checksum``), verified on
  read; its footer is parsed when a run resumes;
- an array bundle is a zip (``.npz``) whose members carry CRC-32s, checked on read; its
  directory is parsed when a run resumes.

A damaged table or bundle found when a run resumes is removed (:func:`remove_damaged_results`):
the command that wrote it writes it again from the run's shards. Reading a damaged file
anywhere else raises :class:`~mechscope.errors.DamagedFileError` naming it.
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from mechscope.runs.atomic import is_temp_name

#: The key of a record's own checksum (the sha256 of the record's JSON without it).
SEAL = "sha256"
REBUILD = "rerun the command that made this run: it rebuilds the file from the run's shards"


class Damaged(Exception):
    """Why a file cannot be trusted (one line); the callers turn it into what fits."""


def first_line(exc: BaseException) -> str:
    """An exception's message, first line only (the type's name when it has none)."""
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def seal(record: dict[str, Any]) -> str:
    """``record`` as JSON text that carries its own checksum under :data:`SEAL`. NaN and
    infinities are kept (Python's JSON reads them back), and a parsed record serialises to
    the same text, so :func:`unseal` can recompute the checksum from what it parsed."""
    body = {k: v for k, v in record.items() if k != SEAL}
    return json.dumps({**body, SEAL: sha256(_text(body).encode("utf-8"))}, ensure_ascii=False)


def json_object(data: bytes) -> dict[str, Any]:
    """The JSON object in ``data``; :class:`Damaged` if it is empty, not UTF-8 JSON, or not
    an object."""
    if not data:
        raise Damaged("empty")
    try:
        record = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise Damaged("not UTF-8 text") from None
    except ValueError as exc:
        raise Damaged(f"not JSON: {first_line(exc)}") from None
    if not isinstance(record, dict):
        raise Damaged(f"a JSON {type(record).__name__}, not an object")
    return record


def unseal(data: bytes) -> dict[str, Any]:
    """The record in ``data`` (:func:`seal`'s output); :class:`Damaged` if it is not a JSON
    object or its checksum differs. A record written before checksums existed is trusted
    once it parses."""
    record = json_object(data)
    stored = record.pop(SEAL, None)
    if stored is not None and stored != sha256(_text(record).encode("utf-8")):
        raise Damaged("its checksum differs from its content")
    return record


def _text(record: dict[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False)


_TABLE_ERRORS = (pa.ArrowException, OSError, ValueError)
_ARRAY_ERRORS = (zipfile.BadZipFile, OSError, ValueError, EOFError)


def read_parquet(path: Path) -> pd.DataFrame:
    """The table at ``path``, every page checked against its checksum; :class:`Damaged`
    if it cannot be read back whole."""
    try:
        return pd.read_parquet(path, engine="pyarrow", page_checksum_verification=True)
    except _TABLE_ERRORS as exc:
        raise Damaged(f"not a readable Parquet table: {first_line(exc)}") from None


def load_npz(source: Path | bytes) -> dict[str, np.ndarray]:
    """Every array of an ``.npz`` file (or its bytes), no pickle, each member checked
    against its CRC-32; :class:`Damaged` if it cannot be read back whole."""
    try:
        with np.load(
            io.BytesIO(source) if isinstance(source, bytes) else source, allow_pickle=False
        ) as npz:
            return {key: npz[key] for key in npz.files}
    except _ARRAY_ERRORS as exc:
        raise Damaged(f"not a readable array bundle: {first_line(exc)}") from None


def table_problem(path: Path, *, full: bool = True) -> str | None:
    """Why the Parquet file at ``path`` cannot be read (None: it can). ``full`` reads every
    page and verifies its checksum; otherwise only the footer is parsed (cheap)."""
    try:
        if full:
            read_parquet(path)
        else:
            pq.read_metadata(path)
    except Damaged as why:
        return str(why)
    except _TABLE_ERRORS as exc:
        return f"not a readable Parquet table: {first_line(exc)}"
    return None


def arrays_problem(path: Path, *, full: bool = True) -> str | None:
    """Why the ``.npz`` at ``path`` cannot be read (None: it can). ``full`` reads every
    member and checks its CRC-32; otherwise only the zip directory is parsed."""
    try:
        if full:
            load_npz(path)
        else:
            zipfile.ZipFile(path).close()
    except Damaged as why:
        return str(why)
    except _ARRAY_ERRORS as exc:
        return f"not a readable array bundle: {first_line(exc)}"
    return None


def remove_damaged_results(run_path: Path) -> list[Path]:
    """Remove the tables and array bundles of a resuming run that cannot be read (their
    footer or zip directory does not parse: truncated, emptied, not that format), each with
    a line on stderr; the command that wrote one writes it again from the run's shards.
    Returns the removed paths."""
    removed = []
    for folder, suffix, problem in (
        ("tables", ".parquet", table_problem),
        ("arrays", ".npz", arrays_problem),
    ):
        for path in sorted((run_path / folder).glob(f"*{suffix}")):
            if is_temp_name(path.name):
                continue
            why = problem(path, full=False)
            if why is not None:
                path.unlink(missing_ok=True)
                removed.append(path)
                print(
                    f"{path} was damaged ({why}): removed; the command that wrote it "
                    "writes it again from the run's shards",
                    file=sys.stderr,
                    flush=True,
                )
    return removed
