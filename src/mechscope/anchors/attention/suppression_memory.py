"""What attention suppression holds in memory, so its chunks of sentences fit the budget.

Suppression is the sweep whose pass is heaviest per row: every layer takes the explicit
fp32 attention path (scores and probabilities, two ``[rows, heads, tail, seq]`` blocks
during the softmax), and every position from the chunk's earliest span end on returns
fp32 logits, which the KL then reads in blocks of positions. The whole time, the base
pass's logits of every position and (with prefix reuse) its key/value cache are held.

A chunk's peak is the larger of its resumed pass
(:func:`~mechscope.engine.analysis.memory_model.pass_bytes`: the rebuilt cache of every layer and
row, a layer's two attention blocks, then the logits) and its KL: the logits plus
:data:`KL_ROW_TEMPS` fp32 ``[rows, block, vocab]`` and :data:`KL_BASE_TEMPS`
``[block, vocab]`` temporaries of one block of positions.
"""

from __future__ import annotations

from mechscope.engine.analysis.memory_model import FP32, Dims, Fit, Pass, fit_rows, note, pass_bytes
from mechscope.models.loaded import LoadedModel

#: ``[rows, block, vocab]`` tensors the KL of a block holds at once, in fp32 units: five
#: fp32 (the logit difference, its centred copy, the series' intermediates) and one bool
#: (where the series applies), and ``[block, vocab]`` fp32 ones (log p and p). Measured on
#: ``[1 | 3 | 8 | 20, block, 49152]`` logits: ``(5.25 rows + 2) × block × vocab × 4``
#: bytes within 1%.
KL_ROW_TEMPS = 5.25
KL_BASE_TEMPS = 2
#: Most sentences of one forward.
MAX_ROWS = 512


def base_pass(seq: int, reuse: bool) -> Pass:
    """The unsuppressed pass: one row, every position's logits, explicit attention."""
    return Pass(rows=1, tokens=seq, logits=seq, explicit=True, cache=reuse)


def held_bytes(lm: LoadedModel, seq: int, reuse: bool) -> int:
    """The base pass's fp32 logits of every position and its key/value cache."""
    dims = Dims.of(lm)
    cache = dims.layers * seq * dims.kv_width * dims.itemsize if reuse else 0
    return seq * dims.vocab * FP32 + cache


def kl_bytes(lm: LoadedModel, rows: int, tail: int, block_bytes: int) -> int:
    """The KL's temporaries for one block of positions; the block is sized as the KL
    sizes it, from ``block_bytes`` (eight fp32 ``[rows + 1, block, vocab]`` tensors)."""
    vocab = Dims.of(lm).vocab
    block = min(tail, max(1, block_bytes // (4 * 8 * vocab * (rows + 1))))
    return int((KL_ROW_TEMPS * rows + KL_BASE_TEMPS) * block * vocab * FP32)


def chunk_bytes(
    lm: LoadedModel, rows: int, seq: int, first: int, *, reuse: bool, block_bytes: int
) -> int:
    """Peak bytes beyond the weights of one chunk of ``rows`` suppressed sentences whose
    earliest span ends at ``first`` (logits from there on; computed from there with
    ``reuse``), with the base pass's outputs held."""
    dims = Dims.of(lm)
    tail = seq - first
    p = Pass(
        rows=rows,
        tokens=tail if reuse else seq,
        keys=seq,
        logits=tail,
        explicit=True,
        cache=reuse,
    )
    logits = rows * tail * dims.vocab * FP32
    kl = logits + kl_bytes(lm, rows, tail, block_bytes)
    return held_bytes(lm, seq, reuse) + max(pass_bytes(dims, p), kl)


def fit_sentences(
    lm: LoadedModel, seq: int, first: int, *, reuse: bool, block_bytes: int, most: int
) -> Fit:
    """Sentences per forward (at most ``most``) within the model's budget, sized for the
    chunk that starts earliest; records its prediction and the base pass's."""
    dims = Dims.of(lm)
    first = max(0, min(first, seq - 1))

    def nbytes(rows: int) -> int:
        return chunk_bytes(lm, rows, seq, first, reuse=reuse, block_bytes=block_bytes)

    fit = fit_rows(nbytes, lm.memory_budget, min(most, MAX_ROWS))
    note("suppression base pass", pass_bytes(dims, base_pass(seq, reuse)))
    note("suppression chunk", fit.bytes)
    return fit
