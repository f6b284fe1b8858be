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
import torch

from mechscope.runs import RunDir
from mechscope.runs.result import (
    HtmlRepr,
    frame_from_payload,
    frame_to_payload,
    load_result,
)
from mechscope.runs.tensors import TensorFields, array

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
class EvalResult(TensorFields, HtmlRepr):
    """Metrics of each dictionary on held-out tokens (``metrics``: one row per dictionary
    and metric, with its interval), and, where asked, every token's values (``tokens``,
    torch tensors as in every result)."""

    _tensor_fields = ("tokens",)

    metrics: pd.DataFrame  # name, metric, value, low, high, n
    tokens: dict[str, torch.Tensor] = field(default_factory=dict)  # "<name>/<metric>" -> [n]
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
            payload[f"token_{i}"] = array(v)
        return payload

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> EvalResult:
        keys = list(payload.get("token_keys") or [])
        tokens = {k: np.asarray(payload[f"token_{i}"]) for i, k in enumerate(keys)}
        return cls(frame_from_payload(payload["metrics"]), tokens, dict(payload["settings"]))

    @classmethod
    def from_run(cls, run: RunDir | Path | str, part: str = EVAL_PART) -> EvalResult:
        return load_result(run, part, cls)


@dataclass
class ExplainResult(HtmlRepr):
    """Feature dashboards: every feature's frequency and activation (``summary``), and for
    the explained ones their Neuronpedia batch (``dashboards``: one per dictionary)."""

    summary: pd.DataFrame  # name, feature, frequency, max, mean
    dashboards: dict[str, dict[str, Any]] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)

    def _repr_summary(self) -> str:
        n = sum(len(b["features"]) for b in self.dashboards.values())
        return f"{n} feature dashboards over {len(self.dashboards)} dictionaries"

    def to_frame(self) -> pd.DataFrame:
        return self.summary

    def feature(self, name: str, index: int) -> dict[str, Any]:
        """One feature's dashboard (Neuronpedia's feature schema)."""
        for entry in self.dashboards[name]["features"]:
            if entry["feature_index"] == index:
                return entry
        raise KeyError(f"feature {index} of {name} has no dashboard")

    def to_payload(self) -> dict[str, Any]:
        return {
            "summary": frame_to_payload(self.summary),
            "dashboards": self.dashboards,
            "settings": self.settings,
        }

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> ExplainResult:
        return cls(
            frame_from_payload(payload["summary"]),
            dict(payload["dashboards"]),
            dict(payload["settings"]),
        )

    @classmethod
    def from_run(cls, run: RunDir | Path | str, part: str = EXPLAIN_PART) -> ExplainResult:
        return load_result(run, part, cls)
