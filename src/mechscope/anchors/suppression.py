"""Attention suppression: how much does each later sentence need each earlier one?

For a source sentence ``i`` with tokens ``[s_i, e_i)``, every query at or after ``e_i``
is kept from attending to those tokens, in all layers and heads, before the softmax
(:class:`~mechscope.engine.SuppressAttention`). One batched forward handles many source
sentences: batch row ``r`` suppresses sentence ``r`` (``rows_per_chunk`` rows per forward,
rows ordered by span end). Nothing before a span's end can change, so by default a chunk of
rows continues from the base pass's key/value cache at its earliest span end
(``Engine.run(resume=…)``, :mod:`mechscope.engine.prefix`) instead of recomputing the prefix.

Formulas (``P_p``, ``Q_p``: next-token distributions at logits position ``p`` without and
with the suppression, ``softmax(logits / temperature)``):

- ``KL_i(p) = KL(P_p ‖ Q_p) = Σ_v P(v) (log P(v) − log Q(v))`` in nats over the full
  vocabulary, from log-softmax in fp64 (fp32 rounding alone is ~1e-7 nats, see
  :func:`_kl_fp64`);
- a target token ``t`` of sentence ``j`` is scored by the distribution that *predicts* it:
  position ``p = t - 1`` (``alignment="next_token"``, default). The published code scores
  it by the distribution at ``p = t`` (the prediction of token ``t + 1``);
  ``alignment="same_position"`` reproduces that;
- only positions the suppression can reach count: ``p ≥ e_i`` (a query before the end of
  the span is not masked, so its prediction is unchanged and its KL is 0 up to rounding);
- ``M[j, i] = mean over counted tokens t of sentence j of log(KL_i(p(t)) + ε)``, with
  ``ε = 1e-9`` (published); ``first_tokens`` keeps only the first tokens of each target;
  entries without a counted token are NaN, so ``M`` is strictly lower-triangular;
- the row-normalised view subtracts each row's mean (over its defined entries):
  ``N[j, i] = M[j, i] − mean_i' M[j, i']``, "which earlier sentence matters most for
  target ``j``", as in the published figures.

Rows are targets and columns are suppressed sources, as in the published matrix. The
published code also truncates both distributions to a 0.9999 nucleus and uses
temperature 0.6; here the full vocabulary is used and ``temperature`` defaults to 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Literal

import numpy as np
import pandas as pd
import torch

from mechscope.anchors.trace_tokens import TraceTokens
from mechscope.engine import Engine, SuppressAttention
from mechscope.engine.prefix import Resume, can_resume
from mechscope.engine.sweep import rows_per_chunk, run_chunks
from mechscope.errors import InputError

Alignment = Literal["next_token", "same_position"]


@dataclass(frozen=True)
class SuppressionOptions:
    """Choices of the suppression analysis (see the module docstring)."""

    epsilon: float = 1e-9
    temperature: float = 1.0
    alignment: Alignment = "next_token"
    first_tokens: int | None = None
    rows_per_chunk: int | None = None  # None: sized by the engine's memory budget
    reuse_prefix: bool = True  # continue from the base key/value cache (causal models)
    layers: tuple[int, ...] | None = None  # None: all layers
    heads: tuple[int, ...] | None = None  # None: all heads

    def __post_init__(self) -> None:
        if not self.epsilon > 0:
            raise InputError(f"epsilon > 0, got {self.epsilon}", field="epsilon")
        if not self.temperature > 0:
            raise InputError(f"temperature > 0, got {self.temperature}", field="temperature")
        if self.alignment not in ("next_token", "same_position"):
            raise InputError(
                f"'next_token' or 'same_position', got {self.alignment!r}", field="alignment"
            )
        if self.first_tokens is not None and self.first_tokens < 1:
            raise InputError(f"first_tokens >= 1, got {self.first_tokens}", field="first_tokens")
        if self.rows_per_chunk is not None and self.rows_per_chunk < 1:
            raise InputError(
                f"rows_per_chunk >= 1, got {self.rows_per_chunk}", field="rows_per_chunk"
            )


_KL_BLOCK_BYTES = 256 * 2**20  # fp64 temporaries of one block of positions


def _kl_fp64(base: torch.Tensor, sup: torch.Tensor, temperature: float) -> torch.Tensor:
    """``KL(base ‖ sup)`` per row and position, in fp64, a block of positions at a time.

    ``base [pos, vocab]`` and ``sup [rows, pos, vocab]`` are logits → ``[rows, pos]``.
    Two nearly equal distributions give a KL that is a small difference of large terms:
    fp32 log-probabilities leave about 1e-7 nats of rounding noise, the size of the distant
    effects the log scale is there to show. fp64 (from the model's own logits) removes it.
    """
    rows, n_pos, vocab = sup.shape
    step = max(1, _KL_BLOCK_BYTES // (4 * 8 * vocab * (rows + 1)))
    out = torch.empty(rows, n_pos, dtype=torch.float64)
    for start in range(0, n_pos, step):
        stop = min(n_pos, start + step)
        lp = torch.log_softmax(base[start:stop].double() / temperature, dim=-1)  # [b, vocab]
        lq = torch.log_softmax(sup[:, start:stop].double() / temperature, dim=-1)  # [r, b, V]
        # Σ p (log p − log q): p once per block, not per row; log-softmax of finite logits
        # is finite, so p = 0 terms are exactly 0 (kl_from_logp's general case not needed).
        kl = ((lp - lq) * lp.exp()).sum(dim=-1)  # [r, b]
        out[:, start:stop] = kl.clamp_min(0.0).cpu()
    return out


def _default_rows(eng: Engine, seq: int, n_rows: int, reuse: bool) -> int:
    """Rows per forward: what the memory budget allows; with prefix reuse also at most
    ``ceil(n_rows / 8)``, so the chunks (rows ordered by span end) start late enough for the
    reuse to pay (compute ∝ Σ rows × (seq − first) over chunks)."""
    budget = rows_per_chunk(eng.lm, seq, logits_positions=seq)
    return min(budget, max(1, -(-n_rows // 8))) if reuse else budget


def position_kl(
    eng: Engine,
    input_ids: torch.Tensor,  # [1, seq]
    spans: torch.Tensor,  # [n_rows, 2] (start, end) per suppressed span
    options: SuppressionOptions | None = None,
) -> np.ndarray:
    """``KL(base ‖ suppressed)`` of the next-token distribution at every logits position.

    → ``[n_rows, seq]`` float64; entry ``[r, p]`` compares the predictions made at position
    ``p`` (of token ``p + 1``). Positions before the earliest span end of a row's forward
    chunk are not computed (NaN): no suppression can reach them.
    """
    opts = options or SuppressionOptions()
    seq = int(input_ids.shape[1])
    spans = spans.reshape(-1, 2).long()
    layers, heads = opts.layers, opts.heads
    reuse = opts.reuse_prefix and can_resume(eng.lm, seq)
    # The same explicit attention path as the suppressed rows (an empty span blocks
    # nothing), so base and suppressed rows differ only by the suppression.
    base_out = eng.run(input_ids, [SuppressAttention((0, 0), layers, heads)], cache=reuse)
    base = base_out.logits[0]  # [seq, vocab]
    size = opts.rows_per_chunk or _default_rows(eng, seq, spans.shape[0], reuse)

    def run(rows: Sequence[int]) -> tuple[list[int], np.ndarray]:
        chunk = spans[list(rows)]  # [c, 2]
        first = max(0, min(int(chunk[:, 1].min()), seq - 1))  # earliest reachable position
        ids = input_ids.expand(len(rows), -1)  # [c, seq]
        resume = Resume(base_out.cache, first) if reuse else None
        suppress = [SuppressAttention(chunk, layers, heads)]
        out = eng.run(ids, suppress, logits=torch.arange(first, seq), resume=resume)
        logits = out.logits  # [c, seq - first, vocab]
        kl = _kl_fp64(base[first:], logits, opts.temperature)  # [c, seq - first]
        full = np.full((len(rows), seq), np.nan)
        full[:, first:] = kl.numpy()
        return list(rows), full

    order = sorted(range(spans.shape[0]), key=lambda r: int(spans[r, 1]))  # similar ends
    result = np.full((spans.shape[0], seq), np.nan)
    for rows, values in run_chunks(order, run, size=size, description="suppression"):
        result[rows] = values
    return result


def sentence_matrix_from_kl(
    kl: np.ndarray,  # [n_sent, seq]: row i = source sentence i suppressed
    ranges: Sequence[tuple[int, int]],
    options: SuppressionOptions | None = None,
) -> np.ndarray:
    """``M[target, source]`` = mean log(KL + ε) over the target's counted tokens (NaN if none)."""
    opts = options or SuppressionOptions()
    n, seq = len(ranges), kl.shape[1]
    if kl.shape[0] != n:
        raise InputError(f"{n} rows of KL (one per sentence), got {kl.shape[0]}", field="kl")
    shift = 1 if opts.alignment == "next_token" else 0
    with np.errstate(invalid="ignore"):
        log_kl = np.log(kl + opts.epsilon)  # [n_source, seq]
    ends = np.array([end for _, end in ranges])  # [n_source]
    out = np.full((n, n), np.nan)
    for j, (start, end) in enumerate(ranges):
        if opts.first_tokens is not None:
            end = min(end, start + opts.first_tokens)
        pos = np.arange(start, end) - shift  # logits positions scoring target tokens
        pos = pos[(pos >= 0) & (pos < seq)]
        if pos.size == 0:
            continue
        counted = pos[None, :] >= ends[:, None]  # [n_source, n_pos]
        values = np.where(counted, log_kl[:, pos], np.nan)  # [n_source, n_pos]
        n_counted = counted.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[j] = np.where(n_counted > 0, np.nansum(values, axis=1) / n_counted, np.nan)
    out[:, [end <= start for start, end in ranges]] = np.nan  # a source with no token
    return out


def row_normalized(matrix: np.ndarray) -> np.ndarray:
    """Each row minus its mean over defined entries (rows with no entry stay NaN)."""
    m = np.asarray(matrix, dtype=np.float64)
    count = np.sum(~np.isnan(m), axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(count > 0, np.nansum(m, axis=1, keepdims=True) / count, np.nan)
    return m - mean


@dataclass
class SuppressionResult:
    """The suppression matrix of one trace (rows: target sentences, columns: sources)."""

    trace_id: str
    matrix: np.ndarray  # [n_sent, n_sent] mean log(KL + ε)
    normalized: np.ndarray  # [n_sent, n_sent] row-centred
    token_kl: np.ndarray  # [n_sent, seq] KL at each logits position, per suppressed source
    options: SuppressionOptions = field(default_factory=SuppressionOptions)

    def to_frame(self) -> pd.DataFrame:
        """Long format: one row per defined (source, target) pair."""
        targets, sources = np.nonzero(~np.isnan(self.matrix))
        return pd.DataFrame(
            {
                "trace": self.trace_id,
                "source": sources.astype(int),
                "target": targets.astype(int),
                "mean_log_kl": self.matrix[targets, sources],
                "normalized": self.normalized[targets, sources],
            }
        )

    def options_dict(self) -> dict:
        return asdict(self.options)


def suppression_matrix(
    eng: Engine, tokens: TraceTokens, options: SuppressionOptions | None = None
) -> SuppressionResult:
    """Suppress every sentence of a trace in turn (batched) and build ``M`` and its rows view."""
    opts = options or SuppressionOptions()
    if tokens.n_sentences == 0:
        raise InputError("a trace with at least one sentence", sample=tokens.trace_id)
    kl = position_kl(eng, tokens.input_ids, tokens.spans(), opts)  # [n_sent, seq]
    matrix = sentence_matrix_from_kl(kl, tokens.ranges, opts)
    return SuppressionResult(tokens.trace_id, matrix, row_normalized(matrix), kl, opts)
