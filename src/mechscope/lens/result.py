"""What the lens drivers return: :class:`DiffResult` and :class:`CandidateResult`.

Both implement :class:`mechscope.runs.result.Result` (``to_frame()`` in long format, a
payload that round-trips). :class:`SampleDiff` is one sample of the paired analysis (named
dimensions: metric × layer × token, and condition → layer × head × token × segment for
attention). It round-trips through a run directory shard (:meth:`to_payload` /
:meth:`from_payload`), so a resumed run aggregates exactly what an uninterrupted one would.
Both results reopen from a finished run directory without a model (``from_run``): the
report draws the same result object the driver returned.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Self

import numpy as np
import pandas as pd
import torch

from mechscope.lens.layout import (
    CANDIDATES_CURVES,
    CANDIDATES_MULTI_TOKEN,
    CANDIDATES_PART,
    CANDIDATES_TABLE,
    CURVES_RUN_COLUMNS,
    DIFF_PART,
    TABLES,
)
from mechscope.runs import RunDir, ShardStore, has_table, read_table
from mechscope.runs.result import (
    HtmlRepr,
    frame_from_payload,
    frame_to_payload,
    get_payloads,
    put_payloads,
)
from mechscope.runs.summary import SummaryRepr
from mechscope.runs.tensors import TensorFields, array
from mechscope.stats.finite import require_finite

#: Metric axis of :attr:`SampleDiff.metrics`: NLL under A and B, ΔNLL = A - B, JS, KL both ways.
METRICS = ("nll_a", "nll_b", "dnll", "js", "kl_ab", "kl_ba")


@dataclass
class SampleDiff(TensorFields, SummaryRepr):
    """The paired teacher-forced analysis of one sample (arrays: CPU torch tensors)."""

    _tensor_fields = ("offsets", "semantic", "metrics", "attention")

    sample_id: str
    group: str | None
    contrast: tuple[str, str]
    continuation: str
    tokens: list[str]  # [T] text of each continuation token
    offsets: torch.Tensor  # [T, 2] character span of each token in the continuation
    semantic: torch.Tensor  # [T] bool: not whitespace only
    classes: list[str]  # [T] code token class
    metrics: torch.Tensor  # [metric, layer, T] float32, metrics in METRICS order
    attention: dict[str, torch.Tensor] = field(default_factory=dict)  # cond -> [L, H, T, S]
    segments: dict[str, list[str]] = field(default_factory=dict)  # cond -> segment names
    position_ids: dict[str, int] = field(default_factory=dict)  # cond -> pos id of 1st semantic
    cont_start: dict[str, int] = field(default_factory=dict)
    joint_tokenization_matches: bool = True

    @property
    def n_layers(self) -> int:
        return int(self.metrics.shape[1])

    def metric(self, name: str) -> torch.Tensor:
        """``[layer, T]`` values of one metric."""
        return self.metrics[METRICS.index(name)]

    def require_finite(self, *, semantic_only: bool = False) -> None:
        """:class:`~mechscope.errors.NonFiniteError` naming this sample, the first layer and
        the metrics (or attention masses) that are NaN or infinite there. Checked over every
        token before the sample is stored, and over its semantic tokens (all that curves,
        heatmaps and correlations read) before samples are aggregated: a readout that covers
        semantic tokens only marks the others NaN (the HumanEval study)."""
        keep = array(self.semantic) if semantic_only else slice(None)
        sid = self.sample_id
        metrics = array(self.metrics)[..., keep]
        require_finite(metrics, "metrics", sample=sid, layer_axis=1, names=METRICS)
        for cond, mass in self.attention.items():
            require_finite(array(mass)[:, :, keep], f"attention mass of {cond}", sample=sid)

    # --- shards ---------------------------------------------------------------------------
    def to_payload(self) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "sample_id": self.sample_id,
            "group": self.group,
            "contrast": list(self.contrast),
            "continuation": self.continuation,
            "tokens": list(self.tokens),
            "classes": list(self.classes),
            "offsets": np.asarray(array(self.offsets), dtype=np.int64),
            "semantic": np.asarray(array(self.semantic), dtype=bool),
            "metrics": np.asarray(array(self.metrics), dtype=np.float32),
            "segments": {k: list(v) for k, v in self.segments.items()},
            "position_ids": dict(self.position_ids),
            "cont_start": dict(self.cont_start),
            "joint_tokenization_matches": bool(self.joint_tokenization_matches),
            "attention_conditions": list(self.attention),
        }
        for i, cond in enumerate(self.attention):
            payload[f"attention_{i}"] = np.asarray(array(self.attention[cond]), dtype=np.float32)
        return payload

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> SampleDiff:
        conds = list(payload.get("attention_conditions", []))
        return cls(
            sample_id=payload["sample_id"],
            group=payload["group"],
            contrast=(payload["contrast"][0], payload["contrast"][1]),
            continuation=payload["continuation"],
            tokens=list(payload["tokens"]),
            offsets=np.asarray(payload["offsets"]),
            semantic=np.asarray(payload["semantic"], dtype=bool),
            classes=list(payload["classes"]),
            metrics=np.asarray(payload["metrics"]),
            attention={c: np.asarray(payload[f"attention_{i}"]) for i, c in enumerate(conds)},
            segments={k: list(v) for k, v in payload["segments"].items()},
            position_ids={k: int(v) for k, v in payload["position_ids"].items()},
            cont_start={k: int(v) for k, v in payload["cont_start"].items()},
            joint_tokenization_matches=bool(payload["joint_tokenization_matches"]),
        )

    # --- frames ---------------------------------------------------------------------------
    def to_frame(self) -> pd.DataFrame:
        """Long format: one row per (metric, layer, token)."""
        n_m, n_l, n_t = self.metrics.shape
        m, layer, tok = np.meshgrid(np.arange(n_m), np.arange(n_l), np.arange(n_t), indexing="ij")
        tokens = np.asarray(self.tokens, dtype=object)
        classes = np.asarray(self.classes, dtype=object)
        return pd.DataFrame(
            {
                "sample": self.sample_id,
                "group": self.group,
                "metric": np.asarray(METRICS, dtype=object)[m.ravel()],
                "layer": layer.ravel(),
                "token": tok.ravel(),
                "token_text": tokens[tok.ravel()],
                "semantic": array(self.semantic)[tok.ravel()],
                "token_class": classes[tok.ravel()],
                "value": array(self.metrics).reshape(-1).astype(np.float64),
            }
        )

    def attention_frame(self) -> pd.DataFrame:
        """Long format of head-averaged attention mass: (condition, segment, layer, token)."""
        frames = []
        for cond, mass in self.attention.items():
            avg = array(mass).mean(axis=1)  # [L, T, S]
            n_l, n_t, n_s = avg.shape
            layer, tok, seg = np.meshgrid(
                np.arange(n_l), np.arange(n_t), np.arange(n_s), indexing="ij"
            )
            frames.append(
                pd.DataFrame(
                    {
                        "sample": self.sample_id,
                        "group": self.group,
                        "condition": cond,
                        "segment": np.asarray(self.segments[cond], dtype=object)[seg.ravel()],
                        "layer": layer.ravel(),
                        "token": tok.ravel(),
                        "semantic": array(self.semantic)[tok.ravel()],
                        "mass": avg.reshape(-1).astype(np.float64),
                    }
                )
            )
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


@dataclass
class DiffResult(HtmlRepr):
    """All samples of a paired analysis plus the aggregated tables (curves with CIs ...)."""

    contrast: tuple[str, str]
    samples: list[SampleDiff]
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)

    def to_frame(self) -> pd.DataFrame:
        """Per-token metrics of every sample, long format."""
        return pd.concat([s.to_frame() for s in self.samples], ignore_index=True)

    def attention_frame(self) -> pd.DataFrame:
        frames = [s.attention_frame() for s in self.samples if s.attention]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def to_payload(self) -> dict[str, Any]:
        """Every sample's shard payload under ``samples.<i>.``, the tables as plain JSON."""
        payload: dict[str, Any] = {
            "contrast": list(self.contrast),
            "tables": {k: frame_to_payload(v) for k, v in self.tables.items()},
        }
        put_payloads(payload, "samples", [s.to_payload() for s in self.samples])
        return payload

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> DiffResult:
        return cls(
            contrast=(payload["contrast"][0], payload["contrast"][1]),
            samples=[SampleDiff.from_payload(p) for p in get_payloads(payload, "samples")],
            tables={k: frame_from_payload(v) for k, v in payload["tables"].items()},
        )

    @classmethod
    def from_run(cls, run: RunDir) -> Self:
        """The result rebuilt from a finished run directory (its shards and tables), without
        a model: the samples in the order of the samples table (shards of samples no longer
        in the input are left out, as the driver leaves them out), every table as written.
        A table the driver skipped because it was empty (no attention) is an empty frame,
        as the driver returned it."""
        order = read_table(run, TABLES["samples"])["sample"].astype(str).tolist()
        store = ShardStore(run, DIFF_PART)
        samples = [SampleDiff.from_payload(store.read(sample_id)) for sample_id in order]
        tables = {
            key: read_table(run, name) if has_table(run, name) else pd.DataFrame()
            for key, name in TABLES.items()
        }
        return cls(samples[0].contrast, samples, tables)


@dataclass
class CandidateResult(TensorFields, HtmlRepr):
    """Scores ``[sample][layer, K]`` (each sample's ``"scores"``, a CPU torch tensor) and the
    per-layer curves.

    ``label_a`` / ``label_b`` name the sample fields that hold the two labels (the config's
    ``label_a`` / ``label_b``); ``policy`` is how words of several tokens were scored."""

    _tensor_fields = ("samples",)

    label_a: str
    label_b: str
    samples: list[dict]
    curves: pd.DataFrame = field(default_factory=pd.DataFrame)
    multi_token: dict[str, int] = field(default_factory=dict)
    policy: str = "first"

    def to_frame(self) -> pd.DataFrame:
        """Long format: one row per (sample, layer, candidate)."""
        rows = []
        for s in self.samples:
            scores = np.asarray(array(s["scores"]), dtype=np.float64)  # [L, K]
            restricted = scores - np.logaddexp.reduce(scores, axis=1, keepdims=True)
            for layer in range(scores.shape[0]):
                for k, cand in enumerate(s["candidates"]):
                    rows.append(
                        {
                            "sample": s["sample_id"],
                            "group": s["group"],
                            "layer": layer,
                            "candidate": cand,
                            "score": scores[layer, k],
                            "restricted_logp": restricted[layer, k],
                            "is_label_a": k == s["label_a"],
                            "is_label_b": k == s["label_b"],
                            "conflict": s["label_a"] != s["label_b"],
                        }
                    )
        return pd.DataFrame(rows)

    def to_payload(self) -> dict[str, Any]:
        """The samples' shard payloads under ``samples.<i>.``, the curves as plain JSON."""
        payload: dict[str, Any] = {
            "label_a": self.label_a,
            "label_b": self.label_b,
            "curves": frame_to_payload(self.curves),
            "multi_token": dict(self.multi_token),
            "policy": self.policy,
        }
        put_payloads(payload, "samples", self.samples)
        return payload

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> CandidateResult:
        return cls(
            label_a=payload["label_a"],
            label_b=payload["label_b"],
            samples=get_payloads(payload, "samples"),
            curves=frame_from_payload(payload["curves"]),
            multi_token={k: int(v) for k, v in payload["multi_token"].items()},
            policy=payload["policy"],
        )

    @classmethod
    def from_run(cls, run: RunDir) -> Self:
        """The result rebuilt from a finished run directory (its shards and tables), without
        a model: the samples in the order of the long table, the label fields and policy
        from the curves table, whose run columns are dropped again, and the multi-token
        words from their table."""
        table = read_table(run, CANDIDATES_CURVES)
        order = read_table(run, CANDIDATES_TABLE)["sample"].astype(str).unique().tolist()
        store = ShardStore(run, CANDIDATES_PART)
        multi = read_table(run, CANDIDATES_MULTI_TOKEN)
        words, counts = multi["word"].astype(str).tolist(), multi["n_tokens"].astype(int).tolist()
        return cls(
            label_a=str(table["label_a_field"].iloc[0]),
            label_b=str(table["label_b_field"].iloc[0]),
            samples=[store.read(sample_id) for sample_id in order],
            curves=table.drop(columns=list(CURVES_RUN_COLUMNS)),
            multi_token=dict(zip(words, counts, strict=True)),
            policy=str(table["policy"].iloc[0]),
        )
