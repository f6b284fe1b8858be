"""One contract for every workflow's result: a long table, and a payload that round-trips.

A result implements :class:`Result`:

- ``to_frame()``: the workflow's main long table (what its Parquet table and report show);
- ``to_payload()``: everything the result holds, as a payload of
  :mod:`mechscope.runs.payload` (numpy arrays only as top-level values, everything else
  plain JSON);
- ``from_payload(payload)`` (classmethod): the same result back, arrays equal exactly.

:func:`save_result` / :func:`load_result` keep a payload in the run directory with the
machinery of the per-sample shards (``shards/results/<name>.json`` plus one ``.npz``,
atomic, no pickle). The helpers below bring nested values to that flat form: a mapping of
arrays or a list of payloads becomes dotted keys (``attributions.0``, ``samples.3.metrics``)
with the names and key order in JSON, and a DataFrame becomes
``to_dict(orient="list")`` plus its column order and dtypes.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, Self, TypeVar, runtime_checkable

import numpy as np
import pandas as pd

from mechscope.errors import InputError
from mechscope.runs.rundir import RunDir, check_name
from mechscope.runs.shards import ShardStore, shard_stem
from mechscope.runs.summary import SummaryRepr
from mechscope.runs.tables import write_table

#: The part of the run directory that holds saved results (``shards/results/``).
R = TypeVar("R")

RESULTS_PART = "results"
_TYPE_KEY = "_result_type"

#: Every workflow's main result type, as ``module:class`` (imported on demand by
#: :func:`result_types`, so this module does not import the workflows).
RESULT_TYPES = (
    "mechscope.lens.result:DiffResult",
    "mechscope.lens.result:CandidateResult",
    "mechscope.studies.humaneval.result:StudyResult",
    "mechscope.patching.result:PatchingResult",
    "mechscope.patching.path_result:PathResult",
    "mechscope.steering.result:SteeringResult",
    "mechscope.heads.result:HeadsResult",
    "mechscope.anchors.result:ResamplingResult",
    "mechscope.anchors.adaptive.result:AdaptiveResult",
    "mechscope.anchors.result:ReceiverResult",
    "mechscope.anchors.result:SuppressionResult",
    "mechscope.distill.result:DistillResult",
    "mechscope.features.result:TrainingResult",
    "mechscope.features.result:EvalResult",
    "mechscope.features.result:ExplainResult",
    "mechscope.circuits.result:CircuitResult",
    "mechscope.graphs.result:GraphResult",
)


class HtmlRepr(SummaryRepr):
    """Jupyter rendering shared by results: a title, a summary line and the head of the
    result's main table. A class provides ``to_frame()`` (or overrides ``_repr_frame``) and
    may add a one-line ``_repr_summary``; notebooks then show the object as a table, and
    ``repr`` is a few lines (:class:`~mechscope.runs.summary.SummaryRepr`)."""

    _repr_rows = 12

    def _repr_frame(self) -> pd.DataFrame:
        return self.to_frame()  # type: ignore[attr-defined]

    def _repr_summary(self) -> str:
        return ""

    def _repr_html_(self) -> str:
        import html

        frame = self._repr_frame()
        shown = frame.head(self._repr_rows)
        more = len(frame) - len(shown)
        parts = [f"<div><strong>{html.escape(type(self).__name__)}</strong>"]
        summary = self._repr_summary()
        if summary:
            parts.append(f" &mdash; {html.escape(summary)}")
        parts.append(shown.to_html(index=False, float_format=lambda x: f"{x:.4g}", border=0))
        if more > 0:
            parts.append(f"<p>… {more} more rows of {len(frame)} (<code>to_frame()</code>)</p>")
        parts.append("</div>")
        return "".join(parts)


@runtime_checkable
class Result(Protocol):
    """What every workflow's main result provides (see the module docstring)."""

    def to_frame(self) -> pd.DataFrame: ...

    def to_payload(self) -> dict[str, Any]: ...

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> Self: ...


def result_types() -> list[type]:
    """The classes named in :data:`RESULT_TYPES`."""
    out = []
    for spec in RESULT_TYPES:
        module, name = spec.split(":")
        out.append(getattr(importlib.import_module(module), name))
    return out


def _type_name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def save_result(
    run: RunDir | Path | str,
    name: str,
    result: Result,
    tables: Mapping[str, pd.DataFrame] | None = None,
) -> None:
    """Store ``result``'s payload as ``name`` in ``run`` (atomic; replaces one of that name),
    after writing ``tables`` (``tables/<key>.parquet``). The saved result is what marks a
    part finished (:func:`has_result`), so it is written last: a run stopped between the
    writes recomputes the part instead of reusing a result whose tables never came."""
    check_name(name, field="result")
    payload = result.to_payload()
    if _TYPE_KEY in payload:
        raise InputError(f"payload keys other than {_TYPE_KEY!r}", field=name)
    for table, frame in (tables or {}).items():
        write_table(run, table, frame)
    ShardStore(run, RESULTS_PART).write(name, {_TYPE_KEY: _type_name(type(result)), **payload})


def _record_path(run: RunDir | Path | str, name: str) -> Path:
    base = run.path if isinstance(run, RunDir) else Path(run)
    return base / "shards" / RESULTS_PART / f"{shard_stem(check_name(name, field='result'))}.json"


def has_result(run: RunDir | Path | str, name: str) -> bool:
    """Whether an intact result ``name`` was saved in ``run`` (creates nothing). A damaged
    one (truncated, edited) is removed here with a line on stderr, as a damaged shard is,
    so the command that saved it computes it again instead of refusing every rerun."""
    return _record_path(run, name).is_file() and ShardStore(run, RESULTS_PART).done(name)


def load_result(run: RunDir | Path | str, name: str, cls: type[R]) -> R:
    """The result saved as ``name``, rebuilt with ``cls.from_payload``; :class:`InputError`
    when there is none or it was saved from another type."""
    if not has_result(run, name):
        where = _record_path(run, name).parent
        raise InputError(f"a saved result {name!r} in {where}; there is none", field=name)
    payload = ShardStore(run, RESULTS_PART).read(name)
    saved = payload.pop(_TYPE_KEY, None)
    if saved != _type_name(cls):
        raise InputError(f"a {_type_name(cls)} in result {name!r}, it holds {saved}", field=name)
    return cls.from_payload(payload)  # type: ignore[attr-defined]


# ------------------------------------------------------------------ flattening helpers
def put_arrays(payload: dict[str, Any], prefix: str, arrays: Mapping[str, Any]) -> None:
    """Store a mapping of arrays as ``payload[prefix]`` = its names (in order) and
    ``payload[f"{prefix}.{i}"]`` = the ``i``-th array (names may hold any character)."""
    payload[prefix] = list(arrays)
    for i, value in enumerate(arrays.values()):
        payload[f"{prefix}.{i}"] = np.asarray(value)


def get_arrays(payload: Mapping[str, Any], prefix: str) -> dict[str, np.ndarray]:
    """Inverse of :func:`put_arrays`."""
    return {name: np.asarray(payload[f"{prefix}.{i}"]) for i, name in enumerate(payload[prefix])}


def put_payloads(payload: dict[str, Any], prefix: str, items: Sequence[Mapping[str, Any]]) -> None:
    """Store a list of payloads (dicts whose arrays sit at their top level) as
    ``payload[prefix]`` = each one's keys and ``payload[f"{prefix}.{i}.{key}"]`` = its values."""
    payload[prefix] = [list(item) for item in items]
    for i, item in enumerate(items):
        for key, value in item.items():
            payload[f"{prefix}.{i}.{key}"] = value


def get_payloads(payload: Mapping[str, Any], prefix: str) -> list[dict[str, Any]]:
    """Inverse of :func:`put_payloads`."""
    return [
        {key: payload[f"{prefix}.{i}.{key}"] for key in keys}
        for i, keys in enumerate(payload[prefix])
    ]


def frame_to_payload(df: pd.DataFrame) -> dict[str, Any]:
    """A DataFrame as plain JSON: its columns as lists (``to_dict(orient="list")``) plus
    column order and dtypes (categories with their levels); a non-default index is kept
    as a list."""
    columns = [str(c) for c in df.columns]
    if columns != list(df.columns) or len(set(columns)) != len(columns):
        raise InputError(f"distinct string column names, got {list(df.columns)}", field="frame")
    dtypes: list[Any] = []
    for c in columns:
        dtype = df[c].dtype
        if isinstance(dtype, pd.CategoricalDtype):
            dtypes.append({"categories": dtype.categories.tolist(), "ordered": bool(dtype.ordered)})
        else:
            dtypes.append(str(dtype))
    out: dict[str, Any] = {
        "columns": columns,
        "dtypes": dtypes,
        "data": {c: df[c].tolist() for c in columns},
    }
    if not df.index.equals(pd.RangeIndex(len(df))):
        out["index"] = df.index.tolist()
    return out


def frame_from_payload(value: Mapping[str, Any]) -> pd.DataFrame:
    """Inverse of :func:`frame_to_payload`."""
    columns = list(value["columns"])
    df = pd.DataFrame({c: value["data"][c] for c in columns}, columns=columns)
    for c, dtype in zip(columns, value["dtypes"], strict=True):
        if isinstance(dtype, dict):
            df[c] = pd.Categorical(df[c], categories=dtype["categories"], ordered=dtype["ordered"])
        elif str(df[c].dtype) != dtype:
            df[c] = df[c].astype(dtype)
    if "index" in value:
        df.index = pd.Index(value["index"])
    return df


def optional_frame(df: pd.DataFrame | None) -> dict[str, Any] | None:
    return None if df is None else frame_to_payload(df)


def optional_frame_back(value: Mapping[str, Any] | None) -> pd.DataFrame | None:
    return None if value is None else frame_from_payload(value)
