"""What a graph run returns (:class:`GraphResult`), reopened from its run directory without
a model.

The run directory already holds everything (:mod:`mechscope.graphs.run`): the scores in
``graph/summary.json``, the prompt and its tokens in ``graph/graph-metadata.json`` (the
graph file's metadata, so the graph file itself, megabytes on a real model, is not read),
the nodes in ``tables/graph_nodes``, the QK targets in ``graph/qk.json`` and their
``tables/qk_*``, a check's ``tables/graph_interventions``. :meth:`GraphResult.from_run`
reads them, so a run finished before the QK part or the check reopens with what it has,
and a run written before this type existed reopens too. No payload is saved beside those
files (it would copy the tables); ``to_payload`` / ``from_payload`` keep the contract of
:mod:`mechscope.runs.result` for a result saved under a name of its own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from mechscope.errors import InputError
from mechscope.graphs.check_report import TABLE as INTERVENTIONS_TABLE
from mechscope.runs import RunDir
from mechscope.runs.result import (
    HtmlRepr,
    frame_from_payload,
    frame_to_payload,
    optional_frame,
    optional_frame_back,
)
from mechscope.runs.tables import has_table, read_table
from mechscope.runs.tensors import TensorFields, array

#: The run's graph folder, its files and the node table (``tables/<name>.parquet``).
GRAPH_DIR, SUMMARY_FILE, QK_FILE = "graph", "summary.json", "qk.json"
INDEX_FILE, NODES_TABLE = "graph-metadata.json", "graph_nodes"
KINDS = ("feature", "error", "token", "logit")
#: The summary's numbers, as ``graph/summary.json`` names them.
SCORES = ("replacement_score", "completeness_score", "top_logit_prob")
COUNTS = ("n_active_features", "n_features", "n_nodes_kept", "n_nodes_written", "n_links_written")


@dataclass
class GraphResult(TensorFields, HtmlRepr):
    """One prompt's attribution graph as its run wrote it.

    The summary: ``replacement_score`` and ``completeness_score`` (circuit-tracer's),
    ``n_active_features`` (every active feature), ``n_features`` (those the graph
    selected), ``n_nodes_kept`` by pruning, ``n_nodes_written`` / ``n_links_written`` to
    the graph file, ``top_logit`` and its probability; the prompt, its ``tokens`` as the
    tokenizer decodes them and ``token_ids [T]`` (int64, BOS first: what
    :func:`~mechscope.graphs.attribute` takes to compute the graph again). ``graph_file``
    is ``graph/<slug>.json`` (circuit-tracer's and Neuronpedia's schema). ``node_table``:
    every node (``tables/graph_nodes``); ``qk_targets``: each QK target's summary
    (``graph/qk.json``), ``qk_tables`` their node and pair tables by name;
    ``intervention_table``: the check's table, None without a check.
    """

    _tensor_fields = ("token_ids",)

    prompt: str
    tokens: list[str]
    token_ids: torch.Tensor  # [T] int64
    replacement_score: float
    completeness_score: float
    n_active_features: int
    n_features: int
    n_nodes_kept: int
    n_nodes_written: int
    n_links_written: int
    top_logit: str
    top_logit_prob: float
    graph_file: Path
    node_table: pd.DataFrame
    qk_targets: list[dict[str, Any]]
    qk_tables: dict[str, pd.DataFrame]
    intervention_table: pd.DataFrame | None = None

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    def nodes(self, kind: str | None = None, kept: bool = True) -> pd.DataFrame:
        """The nodes, most influential first (``influence``: the cumulative share up to the
        node): only those pruning kept (``kept=False``: every node), of one ``kind``
        (``feature``, ``error``, ``token``, ``logit``; None: all)."""
        frame = self.node_table
        if kind is not None and kind not in KINDS:
            raise InputError(f"a node kind among {list(KINDS)}, got {kind!r}", field="kind")
        keep = pd.Series(True, index=frame.index)
        if kind is not None:
            keep &= frame["kind"] == kind
        if kept:
            keep &= frame["kept"]
        return frame[keep].sort_values("influence", kind="stable").reset_index(drop=True)

    def qk(self, target: int | str | None = None, *, pairs: bool = False) -> pd.DataFrame:
        """The QK targets, one row each (None); or one target's nodes with their parts
        through the query and the key (``via_q``, ``via_k``; the constant last), by its
        place in that table or its name (``qk_L{l}_H{h}_{i}_{j}``); ``pairs``: its largest
        query-node × key-node products instead."""
        if not self.qk_targets:
            raise InputError("a graph run with --qk targets; this one has none", field="qk")
        if target is None:
            return pd.DataFrame(self.qk_targets)
        names = [q["table"] for q in self.qk_targets]
        if isinstance(target, int):
            if not -len(names) <= target < len(names):
                raise InputError(f"a QK target in 0..{len(names) - 1}, got {target}", field="qk")
            target = names[target]
        if target not in names:
            raise InputError(f"a QK target among {names}, got {target!r}", field="qk")
        return self.qk_tables[f"{target}_pairs" if pairs else target]

    def interventions(self) -> pd.DataFrame:
        """The check's table: per checked set, intervention and target, the change the
        graph predicts and the change measured (:mod:`mechscope.graphs.check`)."""
        if self.intervention_table is None:
            raise InputError(
                "a graph run with a check (--check K or --check-node); this one has none",
                field="check",
            )
        return self.intervention_table

    def to_frame(self) -> pd.DataFrame:
        """Every node, in node order (``tables/graph_nodes``)."""
        return self.node_table

    def _repr_frame(self) -> pd.DataFrame:
        return self.nodes()

    def _repr_summary(self) -> str:
        extra = f", {len(self.qk_targets)} QK targets" if self.qk_targets else ""
        extra += ", checked" if self.intervention_table is not None else ""
        return (
            f"{self.n_tokens} tokens → {self.top_logit!r} (p = {self.top_logit_prob:.3f}): "
            f"replacement {self.replacement_score:.3f}, completeness "
            f"{self.completeness_score:.3f}; {self.n_nodes_kept} of {len(self.node_table)} "
            f"nodes kept{extra}"
        )

    def to_payload(self) -> dict[str, Any]:
        return {
            "prompt": self.prompt,
            "tokens": list(self.tokens),
            "token_ids": np.asarray(array(self.token_ids), dtype=np.int64),
            **{name: float(getattr(self, name)) for name in SCORES},
            **{name: int(getattr(self, name)) for name in COUNTS},
            "top_logit": self.top_logit,
            "graph_file": str(self.graph_file),
            "node_table": frame_to_payload(self.node_table),
            "qk_targets": [dict(q) for q in self.qk_targets],
            "qk_tables": {name: frame_to_payload(t) for name, t in self.qk_tables.items()},
            "intervention_table": optional_frame(self.intervention_table),
        }

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> GraphResult:
        return cls(
            prompt=payload["prompt"],
            tokens=list(payload["tokens"]),
            token_ids=np.asarray(payload["token_ids"]),
            **{name: float(payload[name]) for name in SCORES},
            **{name: int(payload[name]) for name in COUNTS},
            top_logit=payload["top_logit"],
            graph_file=Path(payload["graph_file"]),
            node_table=frame_from_payload(payload["node_table"]),
            qk_targets=[dict(q) for q in payload["qk_targets"]],
            qk_tables={name: frame_from_payload(t) for name, t in payload["qk_tables"].items()},
            intervention_table=optional_frame_back(payload["intervention_table"]),
        )

    @classmethod
    def from_run(cls, run: RunDir | Path | str) -> GraphResult:
        """The graph of a run directory (module docstring), without a model;
        :class:`~mechscope.errors.InputError` before its graph is written."""
        run = run if isinstance(run, RunDir) else RunDir.open(run)
        folder = run.path / GRAPH_DIR
        if not (folder / SUMMARY_FILE).is_file():
            raise InputError(
                f"a graph run with {GRAPH_DIR}/{SUMMARY_FILE}; none in {run.path}", field="run"
            )
        summary = json.loads((folder / SUMMARY_FILE).read_text())
        meta = _metadata(folder, run.config.get("graph", {}).get("slug"))
        nodes = read_table(run, NODES_TABLE)
        tokens = nodes[nodes["kind"] == "token"].sort_values("position")
        qk_path = folder / QK_FILE
        qk_targets = json.loads(qk_path.read_text()) if qk_path.is_file() else []
        qk_tables = {
            name: read_table(run, name)
            for q in qk_targets
            for name in (q["table"], f"{q['table']}_pairs")
        }
        checked = has_table(run, INTERVENTIONS_TABLE)
        return cls(
            prompt=meta["prompt"],
            tokens=list(meta["prompt_tokens"]),
            token_ids=torch.tensor(tokens["feature"].to_numpy(), dtype=torch.int64),
            **{name: float(summary[name]) for name in SCORES},
            **{name: int(summary[name]) for name in COUNTS},
            top_logit=summary["top_logit"],
            graph_file=folder / f"{meta['slug']}.json",
            node_table=nodes,
            qk_targets=qk_targets,
            qk_tables=qk_tables,
            intervention_table=read_table(run, INTERVENTIONS_TABLE) if checked else None,
        )


def _metadata(folder: Path, slug: str | None) -> dict[str, Any]:
    """The graph's metadata in the folder's index: the one named ``slug`` (None: the last
    written; a run writes one)."""
    graphs = json.loads((folder / INDEX_FILE).read_text())["graphs"]
    found = [g for g in graphs if slug is None or g["slug"] == slug]
    if not found:
        raise InputError(f"graph {slug!r} in {folder / INDEX_FILE}; it lists none", field="run")
    return found[-1]
