"""What an edge-circuit run returns (:class:`CircuitResult`), reopened from its run
directory without a model."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from mechscope.circuits.faithfulness import Curve
from mechscope.circuits.graph import EdgeGraph
from mechscope.runs import RunDir
from mechscope.runs.result import HtmlRepr, frame_from_payload, frame_to_payload, load_result
from mechscope.runs.tensors import TensorFields, array

PART = "circuits"
#: The run's tables (``tables/<name>.parquet``) and the circuit in EAP-IG's layout.
CURVE_TABLE, AREAS_TABLE, EDGES_TABLE = "circuits_curve", "circuits_areas", "circuits_edges"
CIRCUIT_FILE = "circuit.json"


@dataclass
class CircuitResult(TensorFields, HtmlRepr):
    """Edge scores, the faithfulness curve and the circuit chosen from them.

    ``scores [senders, receivers]`` (fp32, 0 where no edge) are the mean over examples of
    each edge's estimated effect; ``circuit`` (bool, same shape) the circuit written out.
    ``values [sizes, examples]`` is the metric with the circuit of each share of the edges,
    ``clean`` / ``corrupt`` ``[examples]`` on the two runs, ``input_total [examples]`` the
    input edges' total (for the completeness gap); ``curve`` and ``areas`` the tables of
    faithfulness and of CPR / CMD with their intervals. Arrays are CPU torch tensors.
    """

    _tensor_fields = ("scores", "circuit", "values", "clean", "corrupt", "input_total")

    cfg: dict[str, Any]  # the graph: n_layers, n_heads, n_kv_heads, d_model, parallel
    method: str
    steps: int
    metric: str
    rule: str
    target: float
    pair_ids: list[str]
    scores: torch.Tensor  # [senders, receivers] fp32
    circuit: torch.Tensor  # [senders, receivers] bool
    shares: list[float]
    requested: list[int]
    kept: list[int]
    values: torch.Tensor  # [sizes, examples] fp64
    clean: torch.Tensor  # [examples] fp64
    corrupt: torch.Tensor  # [examples] fp64
    input_total: torch.Tensor  # [examples] fp64
    curve: pd.DataFrame
    areas: pd.DataFrame

    @property
    def graph(self) -> EdgeGraph:
        c = self.cfg
        return EdgeGraph(
            c["n_layers"], c["n_heads"], c["n_kv_heads"], c["d_model"], c["parallel_attn_mlp"]
        )

    def as_curve(self) -> Curve:
        """The faithfulness curve as :class:`~mechscope.circuits.faithfulness.Curve`."""
        return Curve(
            np.asarray(self.shares, dtype=np.float64),
            np.asarray(self.requested),
            np.asarray(self.kept),
            array(self.values),
            array(self.clean),
            array(self.corrupt),
            self.rule,
        )

    @property
    def completeness_gap(self) -> float:
        """Mean input-edge total minus the mean change corrupt − clean: how far the scores
        are from adding up to the behaviour (EAP-IG on inputs: a convergence measure)."""
        return float(array(self.input_total).mean() - array(self.corrupt - self.clean).mean())

    def edges(self, n: int | None = None) -> pd.DataFrame:
        """The edges by score in size (the top ``n``; all: None): name, sender, receiver,
        score and whether the circuit has it."""
        g = self.graph
        rows, cols = g.real.nonzero(as_tuple=True)
        score = self.scores[rows, cols]
        order = torch.argsort(score.abs(), descending=True, stable=True)[:n]
        rows, cols, score = rows[order], cols[order], score[order]
        return pd.DataFrame(
            {
                "edge": [
                    g.edge_name(s, r) for s, r in zip(rows.tolist(), cols.tolist(), strict=True)
                ],
                "sender": [g.sender_names[s] for s in rows.tolist()],
                "receiver": [g.receiver_names[r] for r in cols.tolist()],
                "score": score.double().numpy(),
                "in_circuit": self.circuit[rows, cols].numpy(),
            }
        )

    def to_frame(self) -> pd.DataFrame:
        """The faithfulness curve, one row per circuit size."""
        return self.curve

    def _repr_summary(self) -> str:
        c = self.as_curve()
        n = c.edges_reaching(self.target)
        reach = f"{n} edges reach F ≥ {self.target:g}" if n is not None else "none reaches"
        return (
            f"{self.method} on {len(self.pair_ids)} pairs ({self.metric}): CPR {c.cpr:.3f}, "
            f"CMD {c.cmd:.3f}; {reach} of {self.graph.n_edges}"
        )

    def to_payload(self) -> dict[str, Any]:
        return {
            "cfg": dict(self.cfg),
            "method": self.method,
            "steps": self.steps,
            "metric": self.metric,
            "rule": self.rule,
            "target": self.target,
            "pair_ids": list(self.pair_ids),
            "scores": np.asarray(array(self.scores), dtype=np.float32),
            "circuit": np.asarray(array(self.circuit), dtype=bool),
            "shares": list(self.shares),
            "requested": list(self.requested),
            "kept": list(self.kept),
            "values": np.asarray(array(self.values), dtype=np.float64),
            "clean": np.asarray(array(self.clean), dtype=np.float64),
            "corrupt": np.asarray(array(self.corrupt), dtype=np.float64),
            "input_total": np.asarray(array(self.input_total), dtype=np.float64),
            "curve": frame_to_payload(self.curve),
            "areas": frame_to_payload(self.areas),
        }

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> CircuitResult:
        return cls(
            cfg=dict(payload["cfg"]),
            method=payload["method"],
            steps=int(payload["steps"]),
            metric=payload["metric"],
            rule=payload["rule"],
            target=float(payload["target"]),
            pair_ids=list(payload["pair_ids"]),
            scores=np.asarray(payload["scores"]),
            circuit=np.asarray(payload["circuit"]),
            shares=[float(s) for s in payload["shares"]],
            requested=[int(n) for n in payload["requested"]],
            kept=[int(n) for n in payload["kept"]],
            values=np.asarray(payload["values"]),
            clean=np.asarray(payload["clean"]),
            corrupt=np.asarray(payload["corrupt"]),
            input_total=np.asarray(payload["input_total"]),
            curve=frame_from_payload(payload["curve"]),
            areas=frame_from_payload(payload["areas"]),
        )

    @classmethod
    def from_run(cls, run: RunDir | Path | str, part: str = PART) -> CircuitResult:
        """The circuit run ``part`` of a finished run directory, without a model."""
        return load_result(run, part, cls)
