"""``StudyResult``: what a HumanEval study computed, as one ``runs.result.Result``.

Its main table is the outcomes (one row per task and arm); its payload keeps both steps'
shard payloads and every table. :meth:`StudyResult.from_run` reopens a finished run
directory as the study that was run, from the shards and tables the driver wrote.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from mechscope.runs import RunDir, ShardStore, has_table, read_table
from mechscope.runs.result import (
    HtmlRepr,
    frame_from_payload,
    frame_to_payload,
    get_payloads,
    put_payloads,
)
from mechscope.runs.tensors import TensorFields
from mechscope.studies.humaneval.layout import PART, TABLES, TESTS_PART


@dataclass
class StudyResult(TensorFields, HtmlRepr):
    """Shard payloads of both steps (their arrays as CPU torch tensors) and the tables
    written to the run directory."""

    _tensor_fields = ("payloads", "tests")

    payloads: dict[str, dict]
    tests: dict[str, dict]
    tables: dict[str, pd.DataFrame]

    @classmethod
    def from_run(cls, run: RunDir) -> StudyResult:
        """The result rebuilt from a finished run directory (its shards and tables), without
        a model.

        The tasks are those of the outcomes table, in its order (the driver's task order):
        a rerun on fewer tasks leaves the other tasks' shards in place, and they are not
        part of its result. A run without the study's tables gives an empty result, read
        without creating the shard folders.
        """
        tables = {
            key: read_table(run, name) for key, name in TABLES.items() if has_table(run, name)
        }
        outcomes = tables.get("outcomes", pd.DataFrame(columns=["task"]))
        task_ids = [str(t) for t in outcomes["task"].drop_duplicates()]
        if not task_ids:
            return cls({}, {}, tables)
        payloads, tests = ShardStore(run, PART), ShardStore(run, TESTS_PART)
        return cls(
            payloads={t: payloads.read(t) for t in task_ids},
            tests={t: tests.read(t) for t in task_ids},
            tables=tables,
        )

    def table(self, key: str) -> pd.DataFrame:
        """Table ``key`` (a key of ``TABLES``), empty when the run did not write it."""
        return self.tables.get(key, pd.DataFrame())

    def to_frame(self) -> pd.DataFrame:
        """The main table: the outcomes, one row per task and arm."""
        return self.tables["outcomes"]

    def to_payload(self) -> dict[str, Any]:
        """Both steps' shard payloads under ``payloads.<i>.`` / ``tests.<i>.`` (task ids in
        JSON), the tables as plain JSON."""
        payload: dict[str, Any] = {
            "payload_ids": list(self.payloads),
            "test_ids": list(self.tests),
            "tables": {k: frame_to_payload(v) for k, v in self.tables.items()},
        }
        put_payloads(payload, "payloads", list(self.payloads.values()))
        put_payloads(payload, "tests", list(self.tests.values()))
        return payload

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> StudyResult:
        return cls(
            payloads=dict(
                zip(payload["payload_ids"], get_payloads(payload, "payloads"), strict=True)
            ),
            tests=dict(zip(payload["test_ids"], get_payloads(payload, "tests"), strict=True)),
            tables={k: frame_from_payload(v) for k, v in payload["tables"].items()},
        )
