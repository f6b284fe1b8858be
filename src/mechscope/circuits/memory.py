"""What one chunk of edge attribution holds, so its rows fit the memory budget.

A chunk of ``rows`` pairs of ``seq`` positions (``T = rows × seq`` tokens) runs the
corrupt and the clean prompt without gradients, then each pass of its method forward with
gradients and back (:mod:`mechscope.circuits.attribute`). Its tensors, with ``S`` senders,
``R`` receivers, ``A = H + 2G`` attention receivers per layer (``H`` query and ``G``
key-value heads of size ``h``), ``P`` projections feeding them per layer, ``L`` layers of
width ``d``; edge tensors are fp32 (``F = 4`` bytes) whatever the model's dtype:

- **a pass's sender outputs** (:attr:`EdgePass.outputs`): each group's write, ``T·S·d·F``,
  and each group's whole write (:attr:`EdgePass.written`), ``T·(1 + 2L)·d·F`` (in an fp32
  model the input's and the MLPs' are the outputs' own storage: only the attention sums,
  ``T·L·d·F``, are new);
- **held through the gradient passes**: the corrupt pass's outputs and, except in EAP
  (whose one gradient pass is the clean run), the clean pass's, the gradient sum ``gsum``
  (``T·R·d·F``; EAP's is its pass's gradient), the group outputs EAP-IG swaps in
  (``T·d·F`` per pass, all made up front: ``steps`` on inputs, ``(1 + 2L)·steps`` on
  activations), the per-edge accumulator (``S·R·F``) and the runs' logits
  (``rows·vocab·F`` each);
- **a gradient pass when its backward starts** (on inputs, a pass may stack ``copies``
  of the chunk, one per step, as far as the budget allows: ``T`` and ``rows`` below are
  then ``copies`` times the chunk's, :func:`fit_copies`): the probe
  leaves (``T·R·d·F``), the pass's own sender outputs, the model's saved activations,
  logits and metric (:func:`~mechscope.engine.analysis.memory_model.pass_bytes` with
  frozen weights, and :data:`METRIC_ROWS` fp32 ``[rows, vocab]`` temporaries), and what
  autograd keeps of the receivers' probes (:func:`edit_saved_bytes`: once per layer the
  receivers' weight rows in fp32, ``L·A·h·d·F``, and in a model not in fp32 an fp32
  copy of the layer input per projection);
- **when the backward ends** (:meth:`Probe.grad`): in place of the saved activations, the
  leaves' gradients and their concatenation, ``2·T·R·d·F``, and with stacked copies
  their sum over the copies (the chunk's ``T·R·d·F``).

The peak is what is held plus the pass's leaves and outputs plus the larger of the last two
(the scoring after the passes makes one sender group's difference at a time beside both
runs' outputs and ``gsum``: less than a pass holds). The probes' term is exact on five tiny
families in fp32 and bf16 (``tests/circuits/test_circuits_memory.py``); the whole is
checked against the peak resident memory of fresh processes on smollm2-135m
(``benchmarks/bench_memory.py``). The weights are not counted.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mechscope.circuits.edge_pass import Wiring
from mechscope.circuits.graph import EdgeGraph
from mechscope.engine.analysis.memory_model import FP32, Dims, Fit, Pass, fit_rows, note, pass_bytes

INT64 = 8
#: fp32 ``[rows, vocab]`` temporaries of the metric and its backward (KL: both
#: log-probabilities, their difference and the gradient).
METRIC_ROWS = 4
#: Most rows of one chunk.
MAX_ROWS = 4096
#: On a CPU, EAP-IG on inputs stacks steps into one pass only while the pass stays under
#: this many multiply-adds (about 20 ms on one core), where its fixed cost is a large share.
CPU_STACK_MACS = 10**9


@dataclass(frozen=True)
class EdgeDims:
    """The sizes an attribution chunk's memory depends on."""

    dims: Dims
    graph: EdgeGraph
    projections: int  #: P: linear modules feeding one layer's attention receivers

    @classmethod
    def of(cls, wiring: Wiring) -> EdgeDims:
        return cls(Dims.of(wiring.lm), wiring.graph, len(wiring.layers[0].projections))

    @property
    def attn_receivers(self) -> int:
        """A: the query, key and value receivers of one layer."""
        return self.graph.n_heads + 2 * self.graph.n_kv_heads


def swapped_outputs(method: str, steps: int, n_groups: int) -> int:
    """Group outputs EAP-IG swaps in per chunk, ``T·d`` each (``attribute._plans``)."""
    if not method.startswith("EAP-IG"):
        return 0
    return steps if method == "EAP-IG-inputs" else n_groups * steps


def pass_rows(method: str, rows: int, copies: int) -> int:
    """Rows of one gradient pass: ``EAP-IG-inputs`` stacks ``copies`` of its steps' copies
    of the chunk into one pass; every other method runs the chunk's rows."""
    return rows * copies if method == "EAP-IG-inputs" else rows


def outputs_bytes(e: EdgeDims, tokens: int) -> int:
    """One pass's sender outputs and its groups' whole writes."""
    g = e.graph
    new = g.n_layers if e.dims.itemsize == FP32 else 1 + 2 * g.n_layers
    return tokens * (g.n_senders + new) * g.d_model * FP32


def edit_saved_bytes(e: EdgeDims, tokens: int) -> int:
    """What autograd keeps of the receivers' probes in one gradient pass beyond what the
    model saves itself (:func:`~mechscope.circuits.wiring.probe_gradient`): per layer, the
    receivers' weight rows in fp32, ``A·h·d``, whatever the rows; per token, in a model not
    in fp32 an fp32 copy of the layer input per projection, ``L·P·d``; in an fp32 model
    the layer input itself, which the norm before attention saves from layer 1 on, so
    only layer 0's, ``d`` (the input node's output: counted twice here, a little over)."""
    a, h, d, layers = e.attn_receivers, e.dims.d_head, e.graph.d_model, e.graph.n_layers
    per_token = d if e.dims.itemsize == FP32 else layers * e.projections * d
    return (tokens * per_token + layers * a * h * d) * FP32


def held_bytes(e: EdgeDims, rows: int, seq: int, method: str, steps: int) -> int:
    """What a chunk holds through its gradient passes (module docstring)."""
    g, tokens = e.graph, rows * seq
    n_groups = 1 + 2 * g.n_layers
    swapped = swapped_outputs(method, steps, n_groups)
    runs = 1 if method == "EAP" else 2  # EAP's clean run is its gradient pass
    out = runs * outputs_bytes(e, tokens)
    gsum = 0 if method == "EAP" else g.n_receivers
    out += tokens * (gsum + swapped) * g.d_model * FP32
    return out + g.n_senders * g.n_receivers * FP32 + runs * rows * e.dims.vocab * FP32


def chunk_bytes(e: EdgeDims, rows: int, seq: int, method: str, steps: int, copies: int = 1) -> int:
    """Peak bytes beyond the weights of one chunk of ``rows`` pairs of ``seq`` tokens whose
    gradient passes stack ``copies`` steps each (EAP-IG on inputs)."""
    stacked = pass_rows(method, rows, copies)  # rows of each gradient pass
    tokens = stacked * seq
    receivers = tokens * e.graph.n_receivers * e.graph.d_model * FP32  # [b, p, R, d] fp32
    own = receivers + outputs_bytes(e, tokens)  # the probe leaves, the pass's outputs
    model = pass_bytes(e.dims, Pass(rows=stacked, tokens=seq, logits=1, grad=True))
    model += METRIC_ROWS * stacked * e.dims.vocab * FP32
    forward = model + edit_saved_bytes(e, tokens)
    backward_end = 2 * receivers
    if stacked > rows:  # the copies' gradients summed into one chunk's
        backward_end += rows * seq * e.graph.n_receivers * e.graph.d_model * FP32
    return held_bytes(e, rows, seq, method, steps) + own + max(forward, backward_end)


def fit_chunk(wiring: Wiring, rows: int, seq: int, method: str, steps: int) -> Fit:
    """Rows per chunk (at most ``rows``) whose passes fit the model's memory budget."""
    e = EdgeDims.of(wiring)

    def nbytes(n: int) -> int:
        return chunk_bytes(e, n, seq, method, steps)

    return fit_rows(nbytes, wiring.lm.memory_budget, min(rows, MAX_ROWS))


def pass_macs(e: EdgeDims, rows: int, seq: int) -> int:
    """Multiply-adds of one forward pass of ``rows × seq`` tokens, roughly: each layer's
    q/k/v/o projections and a gated MLP per token, and the head on the last position."""
    d = e.dims
    attn = d.d_model * d.d_head * (2 * d.heads + 2 * d.kv_heads)
    per_token = d.layers * (attn + 3 * d.d_model * d.d_mlp)
    return rows * seq * per_token + rows * d.d_model * d.vocab


def fit_copies(wiring: Wiring, rows: int, seq: int, method: str, steps: int) -> int:
    """Steps of EAP-IG on inputs stacked into one gradient pass of a chunk of ``rows``
    (1 for every other method): as many as the budget leaves room for beside the chunk,
    and on a CPU only while the stacked pass stays under :data:`CPU_STACK_MACS`.

    A pass has a fixed cost: it reads every weight once (the whole ``[d, vocab]``
    unembedding too, for a few rows) and runs the same operations whatever their size. On
    a small pass that is most of the time, and one pass of five copies costs far less
    than five passes; on a pass large enough to keep a CPU core busy, stacking only adds
    memory (measured on smollm2-135m, 8 pairs: three copies a pass 7 % slower than one).
    A GPU keeps gaining from larger passes, so there the budget alone decides. The chunk's
    rows are sized first, so stacking never makes a chunk smaller."""
    if method != "EAP-IG-inputs" or steps == 1:
        return 1
    e = EdgeDims.of(wiring)
    most = steps
    if torch.device(wiring.lm.device).type == "cpu":
        most = max(1, min(steps, CPU_STACK_MACS // max(1, pass_macs(e, rows, seq))))

    def nbytes(n: int) -> int:
        return chunk_bytes(e, rows, seq, method, steps, n)

    return fit_rows(nbytes, wiring.lm.memory_budget, most).rows


def note_chunk(
    wiring: Wiring, rows: int, seq: int, method: str, steps: int, copies: int = 1
) -> None:
    """Record the predicted peak of a chunk as it runs (its own rows: a batch's last
    chunk, or a batch smaller than the budget allows, has fewer)."""
    e = EdgeDims.of(wiring)
    note("circuits attribution chunk", chunk_bytes(e, rows, seq, method, steps, copies))
