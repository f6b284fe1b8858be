"""The result of a path-patching sweep: pair × sender group × receiver group.

``logit_diff[p, s, r]`` is the clean run's logit difference (correct − wrong) at the
readout after the path from sender group ``s`` to receiver group ``r`` was patched from
the corrupt run; NaN where no receiver of ``r`` lies above ``s`` (no path). The *path
effect* is ``(patched − clean) / (clean − corrupt)``: 0 when the path carries nothing,
−1 when it alone carries the whole clean → corrupt drop (ARENA's IOI metric minus one).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from mechscope.runs import RunDir, ShardStore, read_table
from mechscope.runs.result import HtmlRepr
from mechscope.runs.tensors import TensorFields, array


@dataclass
class PathResult(TensorFields, HtmlRepr):
    """Every pair of one path-patching sweep; arrays are CPU torch tensors."""

    pair_ids: list[str]
    senders: list[str]  # group labels, e.g. "9.6" or "9.6+9.9"
    receivers: list[str]  # group labels, or ["logits"] for resid_final
    receiver_input: str  # q, k, v or resid_final
    freeze_mlps: bool
    logit_diff: torch.Tensor  # [pairs, senders, receivers] fp32, NaN: no path
    clean_logit_diff: torch.Tensor  # [pairs]
    corrupt_logit_diff: torch.Tensor  # [pairs]
    metric: torch.Tensor | None = None  # [pairs, senders, receivers]: a custom metric
    clean_metric: torch.Tensor | None = None  # [pairs]
    corrupt_metric: torch.Tensor | None = None  # [pairs]
    forward_rows: torch.Tensor | None = None  # [pairs]: batch rows each pair's cells took

    _ARRAYS = (
        "logit_diff",
        "clean_logit_diff",
        "corrupt_logit_diff",
        "metric",
        "clean_metric",
        "corrupt_metric",
        "forward_rows",
    )
    _tensor_fields = _ARRAYS

    def path_effect(self) -> torch.Tensor:
        """``[pairs, senders, receivers]`` fp32: (patched − clean) / (clean − corrupt); NaN
        where there is no path or clean and corrupt do not differ."""
        clean = self.clean_logit_diff[:, None, None].double()
        gap = clean - self.corrupt_logit_diff[:, None, None]
        gap = torch.where(gap.abs() < 1e-9, torch.nan, gap)
        return ((self.logit_diff - clean) / gap).float()

    def mean_effect(self) -> torch.Tensor:
        """``[senders, receivers]``: the path effect averaged over pairs (NaN: no path)."""
        return self.path_effect().nanmean(0)

    def top_paths(self, k: int = 10) -> pd.DataFrame:
        """The ``k`` paths with the largest mean |path effect| (signed, sorted)."""
        mean = self.mean_effect()
        rows = [
            {"sender": s, "receiver": r, "path_effect": float(mean[i, j])}
            for i, s in enumerate(self.senders)
            for j, r in enumerate(self.receivers)
            if not math.isnan(float(mean[i, j]))
        ]
        df = pd.DataFrame(rows, columns=["sender", "receiver", "path_effect"])
        order = df["path_effect"].abs().sort_values(ascending=False).index
        return df.loc[order].head(k).reset_index(drop=True)

    def _repr_summary(self) -> str:
        n_p, n_s, n_r = self.logit_diff.shape
        into = "logits" if self.receiver_input == "resid_final" else self.receiver_input
        return f"{n_p} pairs, {n_s} sender × {n_r} receiver groups, into {into}"

    def to_frame(self) -> pd.DataFrame:
        """Long format: one row per (pair, sender, receiver) with a path."""
        n_p, n_s, n_r = self.logit_diff.shape
        p, s, r = (a.ravel() for a in np.meshgrid(*map(np.arange, (n_p, n_s, n_r)), indexing="ij"))
        ld = array(self.logit_diff)
        df = pd.DataFrame(
            {
                "pair": np.asarray(self.pair_ids, dtype=object)[p],
                "sender": np.asarray(self.senders, dtype=object)[s],
                "receiver": np.asarray(self.receivers, dtype=object)[r],
                "receiver_input": self.receiver_input,
                "logit_diff": ld.ravel(),
                "delta_logit_diff": (ld - array(self.clean_logit_diff)[:, None, None]).ravel(),
                "path_effect": array(self.path_effect()).ravel(),
            }
        )
        if self.metric is not None:
            df["metric"] = array(self.metric).ravel()
        return df[~np.isnan(ld.ravel())].reset_index(drop=True)

    def baselines(self) -> pd.DataFrame:
        """One row per pair: the unpatched clean and corrupt runs."""
        df = pd.DataFrame(
            {
                "pair": self.pair_ids,
                "clean_logit_diff": array(self.clean_logit_diff),
                "corrupt_logit_diff": array(self.corrupt_logit_diff),
            }
        )
        if self.clean_metric is not None and self.corrupt_metric is not None:
            df["clean_metric"] = array(self.clean_metric)
            df["corrupt_metric"] = array(self.corrupt_metric)
        return df

    def pair(self, i: int) -> PathResult:
        """Pair ``i`` alone (its shard in a run directory)."""
        cut = slice(i, i + 1)
        return PathResult(
            [self.pair_ids[i]], self.senders, self.receivers, self.receiver_input,
            self.freeze_mlps, self.logit_diff[cut], self.clean_logit_diff[cut],
            self.corrupt_logit_diff[cut],
            None if self.metric is None else self.metric[cut],
            None if self.clean_metric is None else self.clean_metric[cut],
            None if self.corrupt_metric is None else self.corrupt_metric[cut],
            None if self.forward_rows is None else self.forward_rows[cut],
        )  # fmt: skip

    @classmethod
    def concat(cls, parts: list[PathResult]) -> PathResult:
        """Pairs of several results of the same sweep, in order."""
        first = parts[0]

        def cat(name: str) -> torch.Tensor | None:
            values = [getattr(p, name) for p in parts]
            return None if any(a is None for a in values) else torch.cat(values)

        return cls(
            [i for p in parts for i in p.pair_ids], first.senders, first.receivers,
            first.receiver_input, first.freeze_mlps, cat("logit_diff"),  # type: ignore[arg-type]
            cat("clean_logit_diff"), cat("corrupt_logit_diff"),  # type: ignore[arg-type]
            cat("metric"), cat("clean_metric"), cat("corrupt_metric"), cat("forward_rows"),
        )  # fmt: skip

    def to_payload(self) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "pair_ids": list(self.pair_ids),
            "senders": list(self.senders),
            "receivers": list(self.receivers),
            "receiver_input": self.receiver_input,
            "freeze_mlps": self.freeze_mlps,
        }
        for name in self._ARRAYS:
            value = getattr(self, name)
            if value is not None:
                dtype = np.int64 if name == "forward_rows" else np.float32
                payload[name] = np.asarray(array(value), dtype=dtype)
        return payload

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> PathResult:
        arrays = {name: payload.get(name) for name in cls._ARRAYS}
        return cls(
            pair_ids=list(payload["pair_ids"]),
            senders=list(payload["senders"]),
            receivers=list(payload["receivers"]),
            receiver_input=str(payload["receiver_input"]),
            freeze_mlps=bool(payload["freeze_mlps"]),
            **{k: None if v is None else np.asarray(v) for k, v in arrays.items()},
        )

    @classmethod
    def from_run(cls, run: RunDir | Path | str, part: str = "path_patching") -> PathResult:
        """The sweep ``part`` of a finished run, rebuilt from its shards without a model:
        the pairs of its baselines table, in its order."""
        store = ShardStore(run, part)
        ids = [str(x) for x in read_table(run, f"{part}_baselines")["pair"]]
        return cls.concat([cls.from_payload(store.read(pid)) for pid in ids])
