"""What one chunk of head-gate integrated gradients holds: a forward kept for its backward.

An IG chunk runs ``gates × rows_per_gate`` rows forward with gradients and then backward,
so autograd keeps every layer's saved activations until the backward
(:func:`~mechscope.engine.analysis.memory_model.saved_bytes`: about 32 kB per token and layer on
smollm2-135m, against 25 kB for the single layer an inference forward holds at a time).
On top of them the objective holds fp32 ``[rows, positions, vocab]`` tensors: the logits,
the log-softmax autograd saves, and the two gradients of the backward's first steps.
"""

from __future__ import annotations

from mechscope.engine.analysis.memory_model import FP32, Dims, Fit, Pass, fit_rows, note, pass_bytes
from mechscope.models.loaded import LoadedModel

#: fp32 ``[rows, positions, vocab]`` tensors of the objective beside the pass's logits:
#: the saved log-softmax, and the gradients with respect to it and to the logits.
OBJECTIVE_ROWS = 3
#: Most gate rows of one chunk.
MAX_GATES = 256


def ig_chunk_bytes(
    lm: LoadedModel, gates: int, rows_per_gate: int, seq: int, positions: int
) -> int:
    """Peak bytes beyond the weights of one forward+backward over ``gates`` gate vectors."""
    dims = Dims.of(lm)
    rows = gates * rows_per_gate
    p = Pass(rows=rows, tokens=seq, logits=positions, grad=True)
    objective = OBJECTIVE_ROWS * rows * positions * dims.vocab * FP32
    return pass_bytes(dims, p) + objective


def fit_gates(
    lm: LoadedModel, seq: int, rows_per_gate: int, positions: int, budget: int | None = None
) -> Fit:
    """Gate vectors per chunk whose forward+backward fits ``budget`` (default: the
    model's)."""

    def nbytes(gates: int) -> int:
        return ig_chunk_bytes(lm, gates, rows_per_gate, seq, positions)

    return fit_rows(nbytes, budget or lm.memory_budget, MAX_GATES)


def note_chunk(lm: LoadedModel, gates: int, rows_per_gate: int, seq: int, positions: int) -> None:
    """Record the predicted peak of a gradient chunk as it runs (its real number of gate
    vectors, often fewer than the budget allows: 32 steps of joint IG in one chunk)."""
    note("attribution gradient chunk", ig_chunk_bytes(lm, gates, rows_per_gate, seq, positions))
