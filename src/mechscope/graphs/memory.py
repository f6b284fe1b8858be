"""What an attribution graph's run holds, counted from what the code keeps, so it is sized
before the heavy passes start: the rows per backward pass, and whether the adjacency rows
stay in memory or go to a file (:mod:`mechscope.graphs.store`).

The sizes (:class:`GraphShape`): the model's ``L`` layers of width ``d``, ``H`` query
heads, vocabulary ``V`` and element size ``e``; the prompt's ``T`` tokens; the
transcoders' width ``W`` and decoder rows per feature ``w`` (1; a cross-layer transcoder's
feature of layer ``l`` writes to the ``L - l`` layers from its own on); the ``n`` active
features (known after the first pass), the ``K`` logit targets, the ``S`` features whose
rows are kept and ``B`` rows per backward pass. While the rows are computed they have
``C = n + (L + 1)·T + K`` columns; the graph's ``N = S + (L + 1)·T + K``; ``R = S + K``.

The run holds, in bytes (fp32 is 4):

- **nodes** (:class:`~mechscope.graphs.replacement.Nodes`), to the end of the rows: each
  active feature's encoder direction and scaled decoder rows, ``n·d·4·(1 + w)``, its
  indices and activation ``n·28``; the error nodes ``L·T·d·4``; the embeddings ``T·d·4``;
  the logit targets' vectors ``K·d·4`` and the last position's logits ``V·4``;
- **the nodes read from the pass** (below): every layer's features ``L·T·W·4`` at once;
- **the pass kept for the backward** (one copy of the prompt: the backward is batched
  over its targets, not the pass; the nodes are read from it): every layer's attention
  probabilities, which
  ``probs @ v`` saves, ``L·H·T²·e``; the transcoder inputs and replaced outputs
  ``2·L·T·d·e``, the embeddings and the final norm's input ``2·T·d·e``. While it runs,
  the frozen scores of every layer (``L·H·T²·4``), and in the layer that runs the
  softmax's fp32 input ``H·T²·4`` (and its output, where the model is not fp32 and keeps
  a copy in its own type) and the MLP's gate, up projection and product ``3·T·f·e``;
- **one backward pass**, vectorised over its ``B`` targets: the injected gradients, one
  ``[B, T, d]`` per target layer in the batch (at most ``min(B, L + 1)``), the gradients
  it returns, ``(L + 1)·B·T·d·e``, :data:`BACKWARD_STREAMS` ``[B, T, d]`` of its own and
  the attention probabilities' gradient ``B·H·T²·4``; the new rows ``B·C·4``, and one
  block of a layer's feature columns (:mod:`mechscope.graphs.rows`): the gradients
  gathered at its positions and the padded decoder rows, ``2·4·min(GATHER_ELEMENTS,
  B·m·d)`` (``m``: the most active features of one layer);
- **the rows**: ``R·C·4`` in memory, nothing on a file; with fewer features kept than
  active (``S < n``), the rows sorted into the graph's order ``R·N·4`` beside them;
- **influence and pruning**, a block of ``BLOCK_ELEMENTS`` rows' entries at a time (and
  the block read, on a file): the bool edge mask ``R·N`` and :data:`PRUNE_BLOCKS` blocks
  (pruned, normalised, scored; the scores' bit patterns, shifted, and their float64
  copy); the greedy selection's influence, :data:`INFLUENCE_BLOCKS` (absolute,
  normalised).

The phases (:func:`graph_terms`), the peak the largest: the pass running; the pass kept
with the nodes being read from it; the rows, with the nodes, the pass kept and the larger
of one backward pass and one influence step; with every feature kept, a pass over a prefix
of the prompt running beside the nodes and the rows (:mod:`mechscope.graphs.prefixes`;
the whole prompt's pass bounds it, and is freed before); the sorting, both copies of the
rows with the nodes and a block; the pruning, the graph's rows with the mask and the
blocks. Checked
against the peak resident memory of fresh processes (``benchmarks/bench_memory.py``).
Not counted: the model's and the transcoders' weights, and the written graph's Python
objects (its links).
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mechscope.engine.analysis.memory_model import FP32, Dims, fit_rows
from mechscope.errors import InputError
from mechscope.graphs.rows import GATHER_ELEMENTS
from mechscope.graphs.store import BLOCK_ELEMENTS
from mechscope.models.loaded import LoadedModel

#: ``[B, T, d]`` tensors the backward holds besides the gradients it returns.
BACKWARD_STREAMS = 4
#: fp32 blocks one step of pruning holds at its largest, the threshold's bucket sums: the
#: scores, their bit patterns and the shifted patterns (int32), the float64 copy (two).
PRUNE_BLOCKS = 5
#: fp32 blocks one step of the greedy selection's influence holds (absolute, normalised).
INFLUENCE_BLOCKS = 2


@dataclass(frozen=True)
class GraphShape:
    """The sizes a graph run's memory depends on (module docstring)."""

    dims: Dims
    tokens: int  # T
    d_sae: int  # W
    features: int  # n: active features
    logits: int  # K
    selected: int  # S: features whose rows are kept
    layer_features: int  # m: the most active features of one layer
    writes: float = 1.0  # w: decoder rows per feature

    @property
    def columns(self) -> int:
        """``C``: the rows' width while they are computed."""
        return self.features + (self.dims.layers + 1) * self.tokens + self.logits

    @property
    def nodes(self) -> int:
        """``N``: the graph's nodes."""
        return self.selected + (self.dims.layers + 1) * self.tokens + self.logits

    @property
    def rows(self) -> int:
        """``R``: the rows kept."""
        return self.selected + self.logits


def graph_terms(shape: GraphShape, batch: int, on_disk: bool) -> dict[str, int]:
    """Each term of the module docstring in bytes, and the phases they make (``*_phase``)
    with the ``peak`` among them, for ``batch`` rows per backward pass."""
    m, T, n, b = shape.dims, shape.tokens, shape.features, batch
    e, d, L, H = m.itemsize, m.d_model, m.layers, m.heads
    stream = b * T * d * e  # one [B, T, d] activation of the backward
    one = T * d * e  # one [1, T, d] activation of the pass
    scores = H * T * T  # one [1, H, T, T] block's elements
    read = 1 if on_disk else 0  # the block read from the file
    block = min(BLOCK_ELEMENTS, shape.rows * shape.nodes) * FP32
    gathered = min(GATHER_ELEMENTS, b * shape.layer_features * d)
    t = {
        "nodes": int(n * d * FP32 * (1 + shape.writes))
        + n * 28
        + ((L + 1) * T + shape.logits) * d * FP32
        + m.vocab * FP32,
        "reading": L * T * shape.d_sae * FP32,
        "pass_kept": L * scores * e + 2 * L * one + 2 * one,
        "pass_running": L * H * T * T * FP32
        + scores * FP32 * (1 if e == FP32 else 2)
        + 3 * T * m.d_mlp * e,
        "backward": (min(b, L + 1) + L + 1 + BACKWARD_STREAMS) * stream
        + b * scores * FP32
        + b * shape.columns * FP32
        + 2 * gathered * FP32,
        "rows": 0 if on_disk else shape.rows * shape.columns * FP32,
        "sorted_rows": 0 if on_disk or shape.selected == n else shape.rows * shape.nodes * FP32,
        "edge_mask": shape.rows * shape.nodes,
        "prune_blocks": (PRUNE_BLOCKS + read) * block,
        "influence_blocks": (INFLUENCE_BLOCKS + read) * block if shape.selected < n else 0,
    }
    t["pass_phase"] = t["pass_kept"] + t["pass_running"]
    t["nodes_phase"] = t["nodes"] + t["pass_kept"] + t["reading"]
    step = max(t["backward"], t["influence_blocks"])
    t["rows_phase"] = t["nodes"] + t["pass_kept"] + t["rows"] + step
    t["sort_phase"] = t["nodes"] + t["rows"] + t["sorted_rows"] + (1 + read) * block
    every = shape.selected == n  # passes over prefixes may run beside the rows
    t["prefix_phase"] = t["nodes"] + t["rows"] + t["pass_phase"] if every else 0
    final_rows = t["sorted_rows"] if shape.selected < n else t["rows"]
    t["prune_phase"] = final_rows + t["edge_mask"] + t["prune_blocks"]
    phases = ("pass_phase", "nodes_phase", "rows_phase", "prefix_phase", "sort_phase")
    phases += ("prune_phase",)
    t["peak"] = max(t[p] for p in phases)
    return t


@dataclass(frozen=True)
class GraphPlan:
    """What the memory model chose for one run: ``batch`` rows per backward pass, the
    rows ``on_disk`` (in ``folder``) or in memory, and the predicted ``peak`` bytes
    (beyond the weights) with its ``terms``, under ``budget``."""

    shape: GraphShape
    batch: int
    on_disk: bool
    peak: int
    budget: int
    terms: dict[str, int]
    folder: str | None = None

    @property
    def n_selected(self) -> int:
        return self.shape.selected

    def record(self) -> dict[str, Any]:
        """What a run's manifest records of the plan."""
        sizes = {k: v for k, v in asdict(self.shape).items() if k != "dims"}
        return {
            "predicted_peak_bytes": self.peak,
            "budget_bytes": self.budget,
            "batch": self.batch,
            "rows": "file" if self.on_disk else "memory",
            "rows_bytes": self.shape.rows * self.shape.columns * FP32,
            **sizes,
            "terms": {k: v for k, v in self.terms.items() if k != "peak"},
        }


def choose(shape: GraphShape, budget: int, batch_size: int) -> tuple[int, bool, dict[str, int]]:
    """The rows per backward pass and where the rows go: the store that allows the larger
    batch within ``budget`` (memory on a tie; the file, with one row, when neither fits),
    at most ``batch_size`` rows, and never more than one batch of targets needs."""
    most = max(1, min(batch_size, max(shape.selected, shape.logits)))
    fits = {}
    for on_disk in (False, True):
        fit = fit_rows(lambda b, disk=on_disk: graph_terms(shape, b, disk)["peak"], budget, most)
        fits[on_disk] = fit.rows if fit.bytes <= budget else 0
    on_disk = fits[True] > fits[False] or not fits[False]
    batch = max(1, fits[on_disk])
    return batch, on_disk, graph_terms(shape, batch, on_disk)


def plan_graph(
    lm: LoadedModel,
    tc: Any,
    tokens: int,
    features: int,
    logits: int,
    per_layer: list[int],
    *,
    max_feature_nodes: int | None,
    batch_size: int,
    folder: Path | str | None,
    budget: int | None = None,
) -> GraphPlan:
    """The plan of one run (:func:`choose` under ``budget``, default the model's) for
    ``per_layer`` active features in each layer; a file the rows would not fit in is
    refused in one line before the heavy passes."""
    selected = min(max_feature_nodes or features, features)
    writes = 1.0
    if tc.cross_layer and features:
        writes = sum(c * (lm.n_layers - layer) for layer, c in enumerate(per_layer)) / features
    layer_features = max(per_layer, default=0)
    shape = GraphShape(
        Dims.of(lm), tokens, tc.d_sae, features, logits, selected, layer_features, writes
    )
    budget = budget or lm.memory_budget
    batch, on_disk, terms = choose(shape, budget, batch_size)
    where = str(folder) if folder is not None else tempfile.gettempdir()
    if on_disk:
        need = shape.rows * shape.columns * FP32 * (2 if selected < features else 1)
        free = shutil.disk_usage(where).free
        if need > free:
            raise InputError(
                f"the adjacency rows of {shape.rows:,} nodes over {shape.columns:,} need "
                f"{need / 2**30:.1f} GiB on disk beside {where}, {free / 2**30:.1f} GiB free: "
                f"fewer features (--max-features) or a shorter prompt",
                field="max_feature_nodes",
            )
    return GraphPlan(shape, batch, on_disk, terms["peak"], budget, terms, where)
