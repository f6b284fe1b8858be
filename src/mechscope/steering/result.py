"""The result of an alpha sweep: prompt × alpha, metrics in fp32 and greedy continuations."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from mechscope.runs import RunDir
from mechscope.runs.result import HtmlRepr, load_result
from mechscope.runs.tensors import TensorFields, array

PART = "steering"
METRICS = ("logit_diff", "target_logprob", "target_prob")


@dataclass
class SteeringResult(TensorFields, HtmlRepr):
    """``metrics[name]`` is ``[prompts, alphas]`` (NaN where a prompt has no target, or no
    ``versus`` for the logit difference); ``generations[i][a]`` is prompt ``i``'s greedy
    continuation at ``alphas[a]`` (empty without generation). Arrays are CPU torch
    tensors."""

    _tensor_fields = ("alphas", "metrics", "vector")

    site: str
    layer: int
    head: int | None
    mode: str
    alphas: torch.Tensor  # [alphas] float64, sorted, with 0
    prompt_ids: list[str]
    prompts: list[str]
    metrics: dict[str, torch.Tensor]
    generations: list[list[str]] = field(default_factory=list)
    vector: torch.Tensor | None = None  # [d] the direction used (after any normalisation)
    feature: int | None = None  # the steered feature (its decoder row, or clamped)

    @property
    def unsteered(self) -> int:
        """The index of alpha 0."""
        return int((self.alphas == 0).nonzero()[0, 0])

    def change(self, metric: str = "logit_diff") -> torch.Tensor:
        """``[prompts, alphas]``: the metric minus its unsteered value."""
        values = self.metrics[metric]
        return values - values[:, [self.unsteered]]

    def _repr_summary(self) -> str:
        where = self.site + (f".{self.head}" if self.head is not None else "")
        if self.feature is not None:
            where = f"feature {self.feature} ({where})"
        n_p, n_a = len(self.prompt_ids), len(self.alphas)
        return f"{self.mode} at {where} {self.layer}: {n_p} prompts × {n_a} alphas"

    def to_frame(self) -> pd.DataFrame:
        """Long format: one row per (prompt, alpha) with every metric and the continuation."""
        n_p, n_a = len(self.prompt_ids), len(self.alphas)
        p, a = (x.ravel() for x in np.meshgrid(np.arange(n_p), np.arange(n_a), indexing="ij"))
        df = pd.DataFrame(
            {
                "prompt_id": np.asarray(self.prompt_ids, dtype=object)[p],
                "alpha": array(self.alphas)[a],
                **{k: array(self.metrics[k]).ravel() for k in METRICS if k in self.metrics},
            }
        )
        if self.generations:
            df["generation"] = [self.generations[i][j] for i, j in zip(p, a, strict=True)]
        return df

    def generations_frame(self) -> pd.DataFrame:
        """Prompts as rows, one column of continuations per alpha."""
        cols = {
            f"alpha {x:g}": [g[j] for g in self.generations]
            for j, x in enumerate(self.alphas.tolist())
        }
        return pd.DataFrame({"prompt": self.prompts, **cols})

    def to_payload(self) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "site": self.site,
            "layer": self.layer,
            "head": self.head,
            "mode": self.mode,
            "alphas": np.asarray(array(self.alphas), dtype=np.float64),
            "prompt_ids": list(self.prompt_ids),
            "prompts": list(self.prompts),
            "generations": [list(g) for g in self.generations],
            "metric_names": sorted(self.metrics),
            "feature": self.feature,
        }
        payload.update(
            {f"m_{k}": np.asarray(array(v), dtype=np.float32) for k, v in self.metrics.items()}
        )
        if self.vector is not None:
            payload["vector"] = np.asarray(array(self.vector), dtype=np.float32)
        return payload

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> SteeringResult:
        return cls(
            site=payload["site"],
            layer=int(payload["layer"]),
            head=None if payload["head"] is None else int(payload["head"]),
            mode=payload["mode"],
            alphas=np.asarray(payload["alphas"]),
            prompt_ids=list(payload["prompt_ids"]),
            prompts=list(payload["prompts"]),
            metrics={k: np.asarray(payload[f"m_{k}"]) for k in payload["metric_names"]},
            generations=[list(g) for g in payload["generations"]],
            vector=None if payload.get("vector") is None else np.asarray(payload["vector"]),
            feature=None if payload.get("feature") is None else int(payload["feature"]),
        )

    @classmethod
    def from_run(cls, run: RunDir | Path | str, part: str = PART) -> SteeringResult:
        """The sweep ``part`` of a finished run, without a model."""
        return load_result(run, part, cls)
