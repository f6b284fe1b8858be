"""What the anchors steps return, each implementing :class:`mechscope.runs.result.Result`.

- :class:`ResamplingResult` (``anchors analyze``): the ``anchors_chunks`` table (one row
  per analysed chunk: text, category, every metric and the counts behind it) and the
  resampling sentence → sentence matrix of each trace;
- :class:`ReceiverResult` (``anchors receivers``): receiver heads chosen over a set of
  traces and every trace's receiver scores;
- :class:`SuppressionResult` (``anchors suppress``): one trace's suppression matrix.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from mechscope.anchors.config import ReceiverOptions, SuppressionOptions
from mechscope.anchors.layout import CHUNKS_TABLE, RESAMPLING_MATRIX
from mechscope.runs import RunDir, has_arrays, read_arrays, read_table
from mechscope.runs.result import (
    HtmlRepr,
    frame_from_payload,
    frame_to_payload,
    get_arrays,
    put_arrays,
)
from mechscope.runs.tensors import TensorFields, array, arrays
from mechscope.stats import SplitHalf


@dataclass
class ResamplingResult(TensorFields, HtmlRepr):
    """Chunk metrics of every resampled trace, and their resampling sentence matrices (CPU
    torch tensors)."""

    _tensor_fields = ("matrices",)

    chunks: pd.DataFrame  # one row per analysed chunk (the ``anchors_chunks`` table)
    matrices: dict[str, torch.Tensor] = field(default_factory=dict)  # trace id → [n, n]

    def to_frame(self) -> pd.DataFrame:
        """The main table: :attr:`chunks`."""
        return self.chunks

    def to_payload(self) -> dict[str, Any]:
        """The table as plain JSON, the matrices under ``matrices.<i>`` (trace ids in JSON)."""
        payload: dict[str, Any] = {"chunks": frame_to_payload(self.chunks)}
        put_arrays(payload, "matrices", arrays(self.matrices))
        return payload

    @classmethod
    def from_run(cls, run: RunDir | Path | str) -> ResamplingResult:
        """The analysis of a run reopened without a model: its ``anchors_chunks`` table and
        resampling matrices (none when it was analysed without an embedder). An
        :class:`~mechscope.errors.InputError` before ``anchors analyze`` has run."""
        matrices = read_arrays(run, RESAMPLING_MATRIX) if has_arrays(run, RESAMPLING_MATRIX) else {}
        return cls(read_table(run, CHUNKS_TABLE), matrices)

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> ResamplingResult:
        return cls(
            chunks=frame_from_payload(payload["chunks"]),
            matrices=get_arrays(payload, "matrices"),
        )


@dataclass
class ReceiverResult(TensorFields, HtmlRepr):
    """Receiver heads chosen over a set of traces, and every trace's receiver scores (CPU
    torch tensors; the reliability's ``split_r`` too)."""

    _tensor_fields = ("kurtosis", "mean_kurtosis", "scores", "reliability")

    trace_ids: list[str]
    kurtosis: torch.Tensor  # [n_traces, layers, heads]
    mean_kurtosis: torch.Tensor  # [layers, heads], excluded layers NaN
    heads: list[tuple[int, int]]  # receiver heads, highest mean kurtosis first
    scores: dict[str, torch.Tensor]  # trace id → [n_sent] receiver score
    reliability: SplitHalf | None  # None with fewer than 2 traces
    options: ReceiverOptions = field(default_factory=ReceiverOptions)

    def heads_frame(self) -> pd.DataFrame:
        """One row per head: layer, head, mean kurtosis, rank among receivers (or NaN)."""
        rank = {h: r for r, h in enumerate(self.heads)}
        rows = []
        n_layers, n_heads = self.mean_kurtosis.shape
        for layer in range(n_layers):
            for head in range(n_heads):
                rows.append(
                    {
                        "layer": layer,
                        "head": head,
                        "mean_kurtosis": float(self.mean_kurtosis[layer, head]),
                        "receiver_rank": rank.get((layer, head), -1),
                        "is_receiver": (layer, head) in rank,
                    }
                )
        return pd.DataFrame(rows)

    def scores_frame(self) -> pd.DataFrame:
        """One row per (trace, sentence) with its receiver score."""
        rows = [
            {"trace": tid, "sentence": j, "receiver_score": float(v)}
            for tid, values in self.scores.items()
            for j, v in enumerate(values.tolist())
        ]
        return pd.DataFrame(rows, columns=["trace", "sentence", "receiver_score"])

    def summary_frame(self, n_traces: int) -> pd.DataFrame:
        """One row: the options, the number of traces, the head list and the split-half
        reliability (the ``anchors_receiver_summary`` table)."""
        rel = self.reliability
        options = asdict(self.options)
        row = {
            **{k: (str(v) if isinstance(v, tuple) else v) for k, v in options.items()},
            "n_traces": n_traces,
            "heads": " ".join(f"L{layer}H{head}" for layer, head in self.heads),
            "split_half_reliability": np.nan if rel is None else rel.reliability,
            "split_half_mean_r": np.nan if rel is None else rel.mean_r,
        }
        return pd.DataFrame([row])

    def to_frame(self) -> pd.DataFrame:
        """The main table: :meth:`heads_frame` (one row per head, receivers ranked)."""
        return self.heads_frame()

    def to_payload(self) -> dict[str, Any]:
        """Arrays at the top level, the scores under ``scores.<i>`` (trace ids in JSON)."""
        rel = self.reliability
        payload: dict[str, Any] = {
            "trace_ids": list(self.trace_ids),
            "kurtosis": array(self.kurtosis),
            "mean_kurtosis": array(self.mean_kurtosis),
            "heads": [[int(layer), int(head)] for layer, head in self.heads],
            "options": asdict(self.options),
            "reliability": None
            if rel is None
            else {"reliability": float(rel.reliability), "mean_r": float(rel.mean_r)},
        }
        if rel is not None:
            payload["reliability_split_r"] = array(rel.split_r)
        put_arrays(payload, "scores", arrays(self.scores))
        return payload

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> ReceiverResult:
        rel = payload["reliability"]
        opts = dict(payload["options"])
        opts["exclude_layers"] = tuple(opts["exclude_layers"])
        return cls(
            trace_ids=list(payload["trace_ids"]),
            kurtosis=np.asarray(payload["kurtosis"]),
            mean_kurtosis=np.asarray(payload["mean_kurtosis"]),
            heads=[(int(layer), int(head)) for layer, head in payload["heads"]],
            scores=get_arrays(payload, "scores"),
            reliability=None
            if rel is None
            else SplitHalf(rel["reliability"], rel["mean_r"], payload["reliability_split_r"]),
            options=ReceiverOptions(**opts),
        )


@dataclass
class SuppressionResult(TensorFields, HtmlRepr):
    """The suppression matrix of one trace (rows: target sentences, columns: sources), as
    CPU torch tensors."""

    _tensor_fields = ("matrix", "normalized", "token_kl")

    trace_id: str
    matrix: torch.Tensor  # [n_sent, n_sent] mean log(KL + ε)
    normalized: torch.Tensor  # [n_sent, n_sent] row-centred
    token_kl: torch.Tensor  # [n_sent, seq] KL at each logits position, per suppressed source
    options: SuppressionOptions = field(default_factory=SuppressionOptions)

    def to_frame(self) -> pd.DataFrame:
        """Long format: one row per defined (source, target) pair."""
        matrix, normalized = array(self.matrix), array(self.normalized)
        targets, sources = np.nonzero(~np.isnan(matrix))
        return pd.DataFrame(
            {
                "trace": self.trace_id,
                "source": sources.astype(int),
                "target": targets.astype(int),
                "mean_log_kl": matrix[targets, sources],
                "normalized": normalized[targets, sources],
            }
        )

    def options_dict(self) -> dict:
        return asdict(self.options)

    def to_payload(self) -> dict[str, Any]:
        return {
            "trace_id": self.trace_id,
            "matrix": array(self.matrix),
            "normalized": array(self.normalized),
            "token_kl": array(self.token_kl),
            "options": self.options_dict(),
        }

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> SuppressionResult:
        opts = dict(payload["options"])
        for key in ("layers", "heads"):
            if opts.get(key) is not None:
                opts[key] = tuple(opts[key])
        return cls(
            trace_id=payload["trace_id"],
            matrix=np.asarray(payload["matrix"]),
            normalized=np.asarray(payload["normalized"]),
            token_kl=np.asarray(payload["token_kl"]),
            options=SuppressionOptions(**opts),
        )
