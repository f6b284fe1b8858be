"""Typed results with named dimensions: pair × direction × layer × unit × head.

A *unit* is what one patch covers: a token position, a named span, or all positions.
Per-pair grids are kept apart (pairs may differ in length); :meth:`PatchingResult.to_frame`
gives the long table written to Parquet, and :meth:`PairResult.to_payload` /
:meth:`PairResult.from_payload` round-trip a pair through a resumable shard.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from mechscope.errors import InputError
from mechscope.patching.config import METRICS
from mechscope.runs import RunDir, ShardStore, read_table
from mechscope.runs.result import HtmlRepr, get_payloads, put_payloads
from mechscope.runs.summary import Plain, SummaryRepr
from mechscope.runs.tensors import TensorFields, array
from mechscope.stats.finite import require_finite


@dataclass
class PairResult(TensorFields, SummaryRepr):
    """One pair in one direction. ``metrics[name]`` is ``[layers, units, heads]`` (heads is
    1 with label -1 for sites without heads; a feature sweep's heads are its features, and
    its long table calls that column ``feature``); ``attribution`` holds the gradient estimate
    of the change in ``attribution_metric`` on the same grid, when it was run. Arrays are
    CPU torch tensors (:mod:`mechscope.runs.tensors`)."""

    _tensor_fields = ("metrics", "attribution", "logits")

    pair_id: str
    direction: str
    site: str
    granularity: str
    layers: list[int]
    units: list[str]
    positions: list[int]
    heads: list[int]
    metrics: dict[str, torch.Tensor] = field(default_factory=dict)
    baseline: dict[str, float] = field(default_factory=dict)
    attribution: torch.Tensor | None = None  # [layers, units, heads]
    attribution_metric: str | None = None
    tokens: list[str] = field(default_factory=list)
    roles: list[str] = field(default_factory=list)  # per unit: the span it ends, or ""
    logits: torch.Tensor | None = None  # [layers, units, heads, vocab], only when kept

    @property
    def shape(self) -> tuple[int, int, int]:
        return len(self.layers), len(self.units), len(self.heads)

    def require_finite(self) -> None:
        """:class:`~mechscope.errors.NonFiniteError` naming the pair and the first swept
        layer where a metric or the attribution is NaN or infinite, or the unpatched runs'
        numbers are. The normalised effect is exempt: it is NaN by definition where the
        clean and corrupt logit differences are equal (:func:`undefined_effects`)."""
        where = f"{self.pair_id} ({self.direction})"
        require_finite(
            np.array(list(self.baseline.values()), dtype=np.float64),
            "the unpatched runs' numbers",
            sample=where,
            layer_axis=None,
        )
        for name, values in self.metrics.items():
            if name != "normalized_effect":
                require_finite(array(values), name, sample=where, layers=self.layers)
        if self.attribution is not None:
            require_finite(array(self.attribution), "attribution", sample=where, layers=self.layers)

    def exact_change(self, metric: str) -> torch.Tensor:
        """``metric(patched) - metric(base)`` on the grid (what attribution estimates)."""
        key = {
            "logit_diff": "logit_diff",
            "target_logit": "target_logit",
            "target_logprob": "target_logprob",
        }[metric]
        return self.metrics[key] - self.baseline[f"base_{key}"]

    def to_frame(self) -> pd.DataFrame:
        """Long format: one row per (layer, unit, head) with every metric as a column."""
        n_l, n_u, n_h = self.shape
        li, ui, hi = np.meshgrid(np.arange(n_l), np.arange(n_u), np.arange(n_h), indexing="ij")
        li, ui, hi = li.ravel(), ui.ravel(), hi.ravel()
        df = pd.DataFrame(
            {
                "pair": self.pair_id,
                "direction": self.direction,
                "site": self.site,
                "granularity": self.granularity,
                "layer": np.asarray(self.layers, dtype=np.int64)[li],
                "unit": np.asarray(self.units, dtype=object)[ui],
                "position": np.asarray(self.positions, dtype=np.int64)[ui],
                "head": np.asarray(self.heads, dtype=np.int64)[hi],
            }
        )
        if self.site == "feature":  # the head axis holds feature indices
            df = df.rename(columns={"head": "feature"})
        for name in METRICS:
            if name in self.metrics:
                df[name] = array(self.metrics[name]).ravel()
        if self.attribution is not None:
            df["attribution"] = array(self.attribution).ravel()
            df["attribution_metric"] = self.attribution_metric
        return df

    def to_payload(self) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "pair_id": self.pair_id,
            "direction": self.direction,
            "site": self.site,
            "granularity": self.granularity,
            "layers": list(self.layers),
            "units": list(self.units),
            "positions": list(self.positions),
            "heads": list(self.heads),
            "baseline": dict(self.baseline),
            "tokens": list(self.tokens),
            "roles": list(self.roles),
            "attribution_metric": self.attribution_metric,
        }
        for name, arr in self.metrics.items():
            payload[f"m_{name}"] = np.asarray(array(arr), dtype=np.float32)
        if self.attribution is not None:
            payload["attribution"] = np.asarray(array(self.attribution), dtype=np.float32)
        return payload

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> PairResult:
        metrics = {k[2:]: np.asarray(v) for k, v in payload.items() if k.startswith("m_")}
        att = payload.get("attribution")
        return cls(
            pair_id=payload["pair_id"],
            direction=payload["direction"],
            site=payload["site"],
            granularity=payload["granularity"],
            layers=list(payload["layers"]),
            units=list(payload["units"]),
            positions=list(payload["positions"]),
            heads=list(payload["heads"]),
            metrics=metrics,
            baseline=dict(payload["baseline"]),
            attribution=None if att is None else np.asarray(att),
            attribution_metric=payload.get("attribution_metric"),
            tokens=list(payload.get("tokens", [])),
            roles=list(payload.get("roles", [])),
        )


def flag_undefined_effects(pairs: list[PairResult]) -> list[str]:
    """Warn, in one line, of the pairs whose normalised effect is undefined (NaN on their
    whole grid: their clean and corrupt logit differences are equal); their rows are NaN and
    every mean or curve of the normalised effect leaves them out. Returns their ids."""
    ids = [
        f"{p.pair_id} ({p.direction})"
        for p in pairs
        if "normalized_effect" in p.metrics and bool(p.metrics["normalized_effect"].isnan().all())
    ]
    if ids:
        shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
        warnings.warn(
            f"normalized_effect is undefined for {len(ids)} pair(s), whose clean and corrupt "
            f"logit differences are equal: {shown}; their rows are NaN and left out of its "
            "means and curves",
            UserWarning,
            stacklevel=2,
        )
    return ids


@dataclass
class PatchingResult(HtmlRepr):
    """All pairs of one sweep (one site, one granularity, one or two directions)."""

    pairs: list[PairResult]
    site: str
    granularity: str

    def _repr_fields(self) -> dict[str, Any]:
        shapes = sorted({p.shape for p in self.pairs})
        metrics = list(self.pairs[0].metrics) if self.pairs else []
        return {
            "site": self.site,
            "granularity": self.granularity,
            "directions": self.directions,
            "pairs": self.pairs,
            "grids": Plain(f"[layers, units, heads] {', '.join(map(str, shapes))}"),
            "metrics": metrics,
        }

    def direction(self, direction: str) -> list[PairResult]:
        return [p for p in self.pairs if p.direction == direction]

    @property
    def directions(self) -> list[str]:
        return list(dict.fromkeys(p.direction for p in self.pairs))

    def to_frame(self) -> pd.DataFrame:
        """Every pair's long table stacked (columns: pair, direction, site, granularity,
        layer, unit, position, head (``feature`` for a feature sweep), metrics...)."""
        if not self.pairs:
            return pd.DataFrame(
                columns=[
                    "pair",
                    "direction",
                    "site",
                    "granularity",
                    "layer",
                    "unit",
                    "position",
                    "head",
                    *METRICS,
                ]
            )
        return pd.concat([p.to_frame() for p in self.pairs], ignore_index=True)

    def to_payload(self) -> dict[str, Any]:
        """Every pair's :meth:`PairResult.to_payload` under ``pairs.<i>.`` (with its kept
        logits, when there are any)."""
        items = []
        for p in self.pairs:
            item = p.to_payload()
            if p.logits is not None:
                item["logits"] = array(p.logits)
            items.append(item)
        payload: dict[str, Any] = {"site": self.site, "granularity": self.granularity}
        put_payloads(payload, "pairs", items)
        return payload

    @classmethod
    def from_run(cls, run: RunDir | Path | str, part: str = "patching") -> PatchingResult:
        """The sweep ``part`` of a finished run rebuilt from its shards, without a model: the
        pairs of its table, in its order (shards of pairs no longer in the input are left
        out, as the table leaves them out)."""
        spec = read_table(run, f"{part}_spec").iloc[0]
        store = ShardStore(run, part)
        ids = dict.fromkeys(read_table(run, part)["pair"].astype(str))
        pairs = [r for pid in ids for r in from_shard_payload(store.read(pid))]
        return cls(pairs, str(spec["site"]), str(spec["granularity"]))

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> PatchingResult:
        pairs = []
        for item in get_payloads(payload, "pairs"):
            logits = item.pop("logits", None)
            pair = PairResult.from_payload(item)
            pair.logits = logits
            pairs.append(pair)
        return cls(pairs, payload["site"], payload["granularity"])

    def baselines(self) -> pd.DataFrame:
        """One row per pair and direction: the unpatched runs' numbers."""
        rows = [{"pair": p.pair_id, "direction": p.direction, **p.baseline} for p in self.pairs]
        return pd.DataFrame(rows)

    def modal_shape(self) -> PatchingResult:
        """The pairs whose grid has the most common shape (e.g. the most common prompt
        length of a position grid), so they can be averaged cell by cell."""
        counts: dict[tuple, int] = {}
        for p in self.pairs:
            counts[p.shape] = counts.get(p.shape, 0) + 1
        if len(counts) <= 1:
            return self
        shape = max(counts, key=lambda k: (counts[k], k))
        return PatchingResult(
            [p for p in self.pairs if p.shape == shape], self.site, self.granularity
        )

    def stack(self, metric: str, direction: str) -> torch.Tensor:
        """``[pairs, layers, units, heads]`` (a CPU tensor) for pairs whose grids have the
        same shape."""
        items = self.direction(direction)
        if not items:
            raise InputError(f"expected results for direction {direction!r}", field="direction")
        shapes = {p.shape for p in items}
        if len(shapes) != 1:
            raise InputError(
                f"expected pairs with one grid shape to stack, got {sorted(shapes)}"
                "; use granularity 'span' or same-length prompts",
                field=metric,
            )
        if metric == "attribution":
            return torch.stack([p.attribution for p in items])  # type: ignore[misc]
        return torch.stack([p.metrics[metric] for p in items])


def shard_payload(results: list[PairResult]) -> dict[str, Any]:
    """One pair's results (one per direction) as a shard payload: arrays must sit at the
    top level, so each direction's keys get an ``r<i>_`` prefix."""
    out: dict[str, Any] = {"n": len(results)}
    for i, res in enumerate(results):
        out.update({f"r{i}_{k}": v for k, v in res.to_payload().items()})
    return out


def from_shard_payload(payload: dict[str, Any]) -> list[PairResult]:
    """Inverse of :func:`shard_payload`."""
    out = []
    for i in range(int(payload["n"])):
        prefix = f"r{i}_"
        out.append(
            PairResult.from_payload(
                {k[len(prefix) :]: v for k, v in payload.items() if k.startswith(prefix)}
            )
        )
    return out
