"""What a head-attribution run returns (:class:`HeadsResult`), and its result contract."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch

from mechscope.runs import RunDir, has_table, read_arrays, read_table
from mechscope.runs.result import (
    HtmlRepr,
    frame_from_payload,
    frame_to_payload,
    get_arrays,
    optional_frame,
    optional_frame_back,
    put_arrays,
)
from mechscope.runs.tensors import TensorFields, array, arrays

#: In ``arrays/heads_attributions.npz``: the prefix of the importance maps and the keys that
#: are not a path's per-sample attributions.
_IMPORTANCE = "importance_"
_NOT_PATHS = frozenset({"sample_ids", "tasks", "gradient"})


@dataclass
class HeadsResult(TensorFields, HtmlRepr):
    """What :func:`run_heads` computed (also saved in the run directory); arrays are CPU
    torch tensors."""

    _tensor_fields = ("attributions", "gradients", "importance")

    sample_ids: list[str]
    tasks: list[str]
    attributions: dict[str, torch.Tensor]  # path -> [n, layers, heads] raw IG
    completeness: pd.DataFrame
    diagnostics: pd.DataFrame
    higher_is_better: bool
    gradients: torch.Tensor | None = None  # [n, layers, heads] gate gradients at α = 1
    importance: dict[str, torch.Tensor] = field(default_factory=dict)  # [layers, heads]
    pruning: pd.DataFrame | None = None
    pruning_auc: pd.DataFrame | None = None
    pruning_bands: pd.DataFrame | None = None  # mean and bootstrap band per order and fraction
    shapley: pd.DataFrame | None = None

    @classmethod
    def from_run(cls, run: RunDir) -> HeadsResult:
        """The result rebuilt from a finished run directory (its arrays and tables), without a
        model: the report and any later analysis read one object, not loose files.

        ``heads_attributions`` holds the per-sample IG of every path (in path order), the
        ``importance_<kind>`` maps, the gate ``gradient`` and the sample ids and tasks;
        ``higher_is_better`` comes from ``heads_meta``; the pruning and Shapley tables are
        read when the run computed them.
        """
        saved = read_arrays(run, "heads_attributions")
        ids = [str(s) for s in saved["sample_ids"]]
        meta = read_table(run, "heads_meta")
        meta_values = dict(zip(meta["key"], meta["value"], strict=True))

        def table(name: str) -> pd.DataFrame | None:
            return read_table(run, name) if has_table(run, name) else None

        return cls(
            sample_ids=ids,
            tasks=[str(t) for t in saved["tasks"]] if "tasks" in saved else list(ids),
            attributions={
                k: v
                for k, v in saved.items()
                if k not in _NOT_PATHS and not k.startswith(_IMPORTANCE)
            },
            completeness=read_table(run, "heads_completeness"),
            diagnostics=read_table(run, "heads_diagnostics"),
            higher_is_better=meta_values["higher is better"] == "True",
            gradients=saved.get("gradient"),
            importance={
                k.removeprefix(_IMPORTANCE): v
                for k, v in saved.items()
                if k.startswith(_IMPORTANCE)
            },
            pruning=table("heads_pruning"),
            pruning_auc=table("heads_pruning_auc"),
            pruning_bands=table("heads_pruning_bands"),
            shapley=table("heads_shapley"),
        )

    def to_frame(self) -> pd.DataFrame:
        """Long format of the raw IG: one row per (path, sample, layer, head)."""
        frames = []
        ids = np.asarray(self.sample_ids, dtype=object)
        tasks = np.asarray(self.tasks, dtype=object)
        for path, attr in arrays(self.attributions).items():
            n, n_l, n_h = attr.shape
            i, layer, head = np.meshgrid(
                np.arange(n), np.arange(n_l), np.arange(n_h), indexing="ij"
            )
            frames.append(
                pd.DataFrame(
                    {
                        "path": path,
                        "sample_id": ids[i.ravel()],
                        "task": tasks[i.ravel()],
                        "layer": layer.ravel(),
                        "head": head.ravel(),
                        "attribution": attr.reshape(-1).astype(np.float64),
                    }
                )
            )
        columns = ["path", "sample_id", "task", "layer", "head", "attribution"]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)

    def to_payload(self) -> dict[str, Any]:
        """Arrays under ``attributions.<i>`` / ``importance.<i>`` (names in JSON), tables as
        plain JSON."""
        payload: dict[str, Any] = {
            "sample_ids": list(self.sample_ids),
            "tasks": list(self.tasks),
            "higher_is_better": bool(self.higher_is_better),
            "completeness": frame_to_payload(self.completeness),
            "diagnostics": frame_to_payload(self.diagnostics),
            "pruning": optional_frame(self.pruning),
            "pruning_auc": optional_frame(self.pruning_auc),
            "pruning_bands": optional_frame(self.pruning_bands),
            "shapley": optional_frame(self.shapley),
            "gradients": array(self.gradients),
        }
        put_arrays(payload, "attributions", arrays(self.attributions))
        put_arrays(payload, "importance", arrays(self.importance))
        return payload

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> HeadsResult:
        grads = payload["gradients"]
        return cls(
            sample_ids=list(payload["sample_ids"]),
            tasks=list(payload["tasks"]),
            attributions=get_arrays(payload, "attributions"),
            completeness=frame_from_payload(payload["completeness"]),
            diagnostics=frame_from_payload(payload["diagnostics"]),
            higher_is_better=bool(payload["higher_is_better"]),
            gradients=None if grads is None else np.asarray(grads),
            importance=get_arrays(payload, "importance"),
            pruning=optional_frame_back(payload["pruning"]),
            pruning_auc=optional_frame_back(payload["pruning_auc"]),
            pruning_bands=optional_frame_back(payload["pruning_bands"]),
            shapley=optional_frame_back(payload["shapley"]),
        )
