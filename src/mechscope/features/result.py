"""The results of a features run: training curves, evaluation metrics, feature dashboards.

Each is a :class:`~mechscope.runs.result.Result` kept in the run directory
(``shards/results/``), reopened without a model by ``from_run``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mechscope.runs import RunDir
from mechscope.runs.result import (
    HtmlRepr,
    frame_from_payload,
    frame_to_payload,
    load_result,
)

TRAIN_PART = "features_train"
EVAL_PART = "features_eval"
EXPLAIN_PART = "features_explain"


@dataclass
class TrainingResult(HtmlRepr):
    """Dictionaries trained in one run: each one's curve (``log``: one row per step) and
    where its time went (``timing``: its own step seconds, its group's forward passes)."""

    log: pd.DataFrame  # name, step, tokens, loss, fvu, aux, l0, dead, lr, seconds
    timing: (
        pd.DataFrame
    )  # name, steps, tokens, train_seconds, forward_seconds, forward_tokens, wall_seconds, folder
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        return list(self.timing["name"])

    def _repr_summary(self) -> str:
        return f"{len(self.names)} dictionaries trained: {', '.join(self.names)}"

    def to_frame(self) -> pd.DataFrame:
        return self.log

    def final(self) -> pd.DataFrame:
        """The last logged row of each dictionary."""
        return self.log.groupby("name", sort=False).tail(1).reset_index(drop=True)

    def to_payload(self) -> dict[str, Any]:
        return {
            "log": frame_to_payload(self.log),
            "timing": frame_to_payload(self.timing),
            "settings": self.settings,
        }

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> TrainingResult:
        return cls(
            frame_from_payload(payload["log"]),
            frame_from_payload(payload["timing"]),
            dict(payload.get("settings") or {}),
        )

    @classmethod
    def from_run(cls, run: RunDir | Path | str, part: str = TRAIN_PART) -> TrainingResult:
        return load_result(run, part, cls)


@dataclass
class EvalResult(HtmlRepr):
    """Metrics of each dictionary on held-out tokens (``metrics``: one row per dictionary
    and metric, with its interval), and, where asked, every token's values (``tokens``)."""

    metrics: pd.DataFrame  # name, metric, value, low, high, n
    tokens: dict[str, np.ndarray] = field(default_factory=dict)  # "<name>/<metric>" -> [n]
    settings: dict[str, Any] = field(default_factory=dict)

    def _repr_summary(self) -> str:
        names = list(dict.fromkeys(self.metrics["name"]))
        return f"{len(names)} dictionaries evaluated: {', '.join(names)}"

    def to_frame(self) -> pd.DataFrame:
        return self.metrics

    def value(self, name: str, metric: str) -> float:
        row = self.metrics[(self.metrics["name"] == name) & (self.metrics["metric"] == metric)]
        return float(row["value"].iloc[0])

    def table(self) -> pd.DataFrame:
        """One row per dictionary, one column per metric (the values)."""
        wide = self.metrics.pivot(index="name", columns="metric", values="value")
        order = list(dict.fromkeys(self.metrics["name"]))
        return wide.loc[order].reset_index()

    def to_payload(self) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "metrics": frame_to_payload(self.metrics),
            "settings": self.settings,
            "token_keys": list(self.tokens),
        }
        for i, v in enumerate(self.tokens.values()):
            payload[f"token_{i}"] = np.asarray(v)
        return payload

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> EvalResult:
        keys = list(payload.get("token_keys") or [])
        tokens = {k: np.asarray(payload[f"token_{i}"]) for i, k in enumerate(keys)}
        return cls(frame_from_payload(payload["metrics"]), tokens, dict(payload["settings"]))

    @classmethod
    def from_run(cls, run: RunDir | Path | str, part: str = EVAL_PART) -> EvalResult:
        return load_result(run, part, cls)
