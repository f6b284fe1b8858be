"""What the paired lens holds, and how many tokens each unembedding call of its readout gets.

One sample is two forwards (one per condition), then the readout. A forward holds the
pass (:func:`~mechscope.engine.analysis.memory_model.pass_bytes`; every layer on the explicit
fp32 attention path when attention masses are reduced), the ``resid_post`` reads of every
layer at the continuation's prediction positions and, at its end, their stacked copy; the
second forward runs beside the first's stacked hidden states. The readout holds both
conditions' hidden states and, in each worker, one chunk: the two conditions' hidden rows
and their final-norm temporaries, and their fp32 logits (``2 × vocab × 4`` bytes per token;
with a head that is not fp32, also one vocabulary chunk of the unembedding cast to fp32).

The chunk is what the budget sizes: the tokens whose logits fit in what the budget leaves
beside the hidden states, in every worker at once. On the CPU it is also capped where a
bigger product stops running faster (:data:`CHUNK_BYTES`); elsewhere (a GPU) the budget
alone decides, so a 128k vocabulary is not read out 64 tokens at a time. Without a cap the
chunk would be dense ``[layers × tokens × vocab]`` at worst: > 12 GB for a 2,048-token
continuation on a 30-layer, 49k-vocabulary model.
"""

from __future__ import annotations

import torch

from mechscope.engine.analysis.memory_model import FP32, Dims, Fit, Pass, fit_rows, note, pass_bytes
from mechscope.engine.core.unembed import UNEMBED_CHUNK_BYTES, head_is_fp32
from mechscope.models.loaded import LoadedModel

#: Bytes of fp32 logits per unembedding call (both conditions): 256 tokens at a 49k
#: vocabulary. Each call streams the whole output embedding from memory (113 MB for
#: smollm2), so a call needs a few hundred rows for that to cost little beside the product
#: (64 tokens ran 8 % slower on one core). Each worker writes its chunks into one reused
#: buffer (:mod:`mechscope.lens.readout`), so a large chunk costs no page faults, and the
#: divergence kernel reads each row while it is in the core's cache.
CHUNK_BYTES = 96 * 2**20
#: Fewest tokens per unembedding call (below this the product is bound by reading the
#: output embedding, not by arithmetic).
MIN_CHUNK_TOKENS = 64
#: fp32 ``[tokens, 2, d_model]`` tensors of a chunk besides its logits: the stacked hidden
#: rows and the final norm's temporaries (square, normalised, scaled).
NORM_TEMPS = 4


def chunk_tokens(vocab: int, n_tokens: int, chunk: int | None = None) -> int:
    """Tokens per unembedding call: ``chunk`` if given, else sized by :data:`CHUNK_BYTES`."""
    size = chunk or max(MIN_CHUNK_TOKENS, CHUNK_BYTES // (2 * vocab * 4))
    return max(1, min(size, n_tokens))


def hidden_bytes(lm: LoadedModel, n_tokens: int) -> int:
    """One condition's ``resid_post`` of every layer at ``n_tokens`` positions."""
    dims = Dims.of(lm)
    return dims.layers * n_tokens * dims.d_model * dims.itemsize


def forward_bytes(lm: LoadedModel, seq: int, n_tokens: int, attention: bool) -> int:
    """Peak of one condition's forward over ``seq`` positions: the pass beside its reads,
    or the reads beside their stacked copy."""
    dims = Dims.of(lm)
    p = Pass(rows=1, tokens=seq, logits=1, explicit=attention)
    reads = hidden_bytes(lm, n_tokens)
    return max(reads + pass_bytes(dims, p), 2 * reads)


def chunk_bytes(lm: LoadedModel, tokens: int) -> int:
    """One worker's chunk of ``tokens`` continuation tokens (both conditions)."""
    dims = Dims.of(lm)
    per_token = 2 * (dims.vocab + NORM_TEMPS * dims.d_model) * FP32
    cast = 0 if head_is_fp32(lm) else UNEMBED_CHUNK_BYTES
    return tokens * per_token + cast


def readout_bytes(lm: LoadedModel, n_tokens: int, tokens: int, workers: int) -> int:
    """The readout: both hidden states, the output, and ``workers`` chunks at once."""
    held = 2 * hidden_bytes(lm, n_tokens) + 5 * Dims.of(lm).layers * n_tokens * FP32
    return held + workers * chunk_bytes(lm, tokens)


def readout_chunk(
    lm: LoadedModel,
    n_tokens: int,
    seqs: tuple[int, int],
    *,
    attention: bool,
    workers: int,
    device: torch.device,
    chunk: int | None = None,
) -> Fit:
    """Tokens per unembedding call (``chunk`` if given) and the sample's predicted peak:
    the larger of its two forwards (over ``seqs`` positions) and its readout."""

    def nbytes(tokens: int) -> int:
        return readout_bytes(lm, n_tokens, tokens, workers)

    if chunk is not None:
        size = max(1, min(chunk, n_tokens))
        fit = Fit(size, nbytes(size))
    else:
        cap = chunk_tokens(lm.vocab_size, n_tokens) if device.type == "cpu" else n_tokens
        fit = fit_rows(nbytes, lm.memory_budget, cap)
    first = forward_bytes(lm, seqs[0], n_tokens, attention)
    second = hidden_bytes(lm, n_tokens) + forward_bytes(lm, seqs[1], n_tokens, attention)
    peak = max(first, second, fit.bytes)
    note("lens sample", peak)
    return Fit(fit.rows, peak)


def shared_chunk(
    lm: LoadedModel,
    n_tokens: int,
    passes: int,
    *,
    held: int,
    device: torch.device,
    chunk: int | None = None,
) -> int:
    """Tokens per unembedding call of a readout shared by ``passes`` distinct forwards
    (:mod:`mechscope.studies.humaneval.readout`): each pass's fp32 logits of the chunk at once,
    plus one pair stacked for its divergences, beside ``held`` bytes of hidden states. On
    the CPU capped like the paired readout (the same bytes of logits per call)."""
    if chunk is not None:
        return max(1, min(chunk, n_tokens))
    dims = Dims.of(lm)
    per_token = ((passes + 2) * dims.vocab + passes * NORM_TEMPS * dims.d_model) * FP32
    cast = 0 if head_is_fp32(lm) else UNEMBED_CHUNK_BYTES
    cap = n_tokens
    if device.type == "cpu":
        cap = max(MIN_CHUNK_TOKENS, CHUNK_BYTES // (passes * dims.vocab * FP32))
    fit = fit_rows(lambda t: held + cast + t * per_token, lm.memory_budget, min(cap, n_tokens))
    return fit.rows
