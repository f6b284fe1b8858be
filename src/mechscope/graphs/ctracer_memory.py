"""circuit-tracer's dense layout, counted as :mod:`mechscope.graphs.memory` counts the
graph's own, so the two can be stated side by side for a shape neither can run here
(``scripts/graph_memory.py`` prints them for a Gemma-2-2B-shaped model).

circuit-tracer 0.5 (``attribution/attribute.py``, ``graph.py``) holds, in the sizes of
:class:`~mechscope.graphs.memory.GraphShape`:

- **the edge matrix** ``[S + K, C]`` fp32, every kept row over every active feature,
  zeros first, for the whole attribution;
- **packaging**: with fewer features kept than active, the selected columns
  ``[S + K, N]`` beside it, then those rows sorted (another ``[S + K, N]``), then the
  square adjacency ``[N, N]`` fp32 beside the sorted rows;
- **pruning** (``prune_graph``, on the GPU where there is one): the adjacency, its pruned
  clone, the edge scores, and the sort of the ``N²`` scores (fp32 values, int64 indices):
  ``24·N²`` bytes at the sort;
- **the features' vectors**: encoder and decoder rows of every active feature ``[n, d]``
  each in the model's type, as mechscope's nodes hold them;
- **the pass** over ``batch`` copies of the prompt (its command's default 256): every
  layer's attention pattern, detached and saved by ``pattern @ v``, ``L·B·H·T²·e``, as
  in mechscope's pass.
"""

from __future__ import annotations

from mechscope.engine.analysis.memory_model import FP32, Dims
from mechscope.graphs.memory import GraphShape

#: circuit-tracer's command-line defaults (``circuit_tracer/__main__.py``).
CTRACER_BATCH = 256
CTRACER_MAX_FEATURES = 7500
#: Bytes per entry of ``prune_graph``'s peak: the adjacency, its pruned clone and the edge
#: scores (fp32), the sorted scores (fp32) and their int64 indices.
PRUNE_BYTES_PER_ENTRY = 4 + 4 + 4 + 4 + 8


def circuit_tracer_terms(shape: GraphShape, batch: int = CTRACER_BATCH) -> dict[str, int]:
    """circuit-tracer's buffers for ``shape`` (module docstring) in bytes, the largest of
    its adjacency's phases (``adjacency_peak``) and the run's ``peak``: the attribution
    holds the edge matrix, the vectors and the pass at once, the packaging its matrices and
    the vectors, the pruning (later) its ``N²`` tensors."""
    m, T, n = shape.dims, shape.tokens, shape.features
    R, C, N = shape.rows, shape.columns, shape.nodes
    t = {
        "edge_matrix": R * C * FP32,
        "packaging": max(
            (R * C + R * N) * FP32 if shape.selected < n else 0,
            2 * R * N * FP32,
            (R * N + N * N) * FP32,
        ),
        "square_adjacency": N * N * FP32,
        "pruning": PRUNE_BYTES_PER_ENTRY * N * N,
        "vectors": 2 * n * m.d_model * m.itemsize,
        "pass_patterns": m.layers * batch * m.heads * T * T * m.itemsize,
    }
    t["adjacency_peak"] = max(t["edge_matrix"], t["packaging"], t["pruning"])
    attribution = t["edge_matrix"] + t["vectors"] + t["pass_patterns"]
    t["peak"] = max(attribution, t["packaging"] + t["vectors"], t["pruning"])
    return t


#: Gemma 2 2B (``google/gemma-2-2b``'s config), fp32 as circuit-tracer's command loads it.
GEMMA2_2B = Dims(
    layers=26, d_model=2304, d_mlp=9216, heads=8, kv_heads=4, d_head=256, vocab=256000,
    itemsize=4,
)  # fmt: skip


def gemma2_2b(
    tokens: int = 1000,
    l0: int = 64,
    max_feature_nodes: int | None = CTRACER_MAX_FEATURES,
    logits: int = 10,
    d_sae: int = 16384,
) -> GraphShape:
    """A Gemma-2-2B-shaped graph: per-layer transcoders ``d_sae`` wide with ``l0`` active
    features per layer and position (the first position, the BOS, has none), ``logits``
    targets, at most ``max_feature_nodes`` features kept (None: every active one)."""
    per_layer = (tokens - 1) * l0
    n = GEMMA2_2B.layers * per_layer
    selected = min(max_feature_nodes or n, n)
    return GraphShape(GEMMA2_2B, tokens, d_sae, n, logits, selected, per_layer)
