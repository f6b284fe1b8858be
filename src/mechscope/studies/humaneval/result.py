"""``StudyResult``: what a HumanEval study computed, as one ``runs.result.Result``.

Its main table is the outcomes (one row per task and arm); its payload keeps both steps'
shard payloads and every table, so a study reopened from its run directory is the study
that was run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from mechscope.runs.result import (
    frame_from_payload,
    frame_to_payload,
    get_payloads,
    put_payloads,
)


@dataclass
class StudyResult:
    """Shard payloads of both steps and the tables written to the run directory."""

    payloads: dict[str, dict]
    tests: dict[str, dict]
    tables: dict[str, pd.DataFrame]

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
