"""Attention suppression: how much does each later sentence need each earlier one?

For a source sentence ``i`` with tokens ``[s_i, e_i)``, every query at or after ``e_i``
is kept from attending to those tokens, in all layers and heads, before the softmax
(:class:`~mechscope.engine.SuppressAttention`). One batched forward handles many source
sentences: batch row ``r`` suppresses sentence ``r`` (``rows_per_chunk`` rows per forward,
rows ordered by span end). Nothing before a span's end can change, so by default a chunk of
rows continues from the base pass's key/value cache at its earliest span end
(``Engine.run(resume=…)``, :mod:`mechscope.engine.interventions.prefix`) instead of
recomputing the prefix.

Formulas (``P_p``, ``Q_p``: next-token distributions at logits position ``p`` without and
with the suppression, ``softmax(logits / temperature)``):

- ``KL_i(p) = KL(P_p ‖ Q_p) = Σ_v P(v) (log P(v) − log Q(v))`` in nats over the full
  vocabulary, from fp32 logits (the engine's fp32 readout whatever the model's dtype) in a
  form without cancellation, reduced in fp32 on the model's device and finished in fp64
  on the host (the textbook formula in fp32 leaves ~1e-7 nats of noise, see
  :func:`_kl_parts`);
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

import numpy as np
import torch

from mechscope.anchors.attention.suppression_memory import fit_sentences
from mechscope.anchors.attention.trace_tokens import TraceTokens
from mechscope.anchors.config import SuppressionOptions
from mechscope.anchors.result import SuppressionResult
from mechscope.engine import Engine, SuppressAttention
from mechscope.engine.analysis.finite import refuse_nonfinite
from mechscope.engine.analysis.sweep import run_chunks
from mechscope.engine.interventions.prefix import Resume, can_resume
from mechscope.errors import InputError
from mechscope.stats.finite import require_finite

_KL_BLOCK_BYTES = 256 * 2**20  # about eight fp32 [rows, block, vocab] temporaries

#: Below this |ε| the series of ``e^-ε − 1 + ε`` is used (its first left-out term is
#: ``(1/4)^5 / 2520 ≈ 4e-7`` of the sum at the bound; above it the direct formula loses at
#: most ``1.2e-7 / |ε| ≤ 5e-7`` to cancellation).
_SERIES_BOUND = 0.25


def _exp_excess(eps: torch.Tensor) -> torch.Tensor:
    """``e^-ε − 1 + ε ≥ 0`` to fp32's relative precision, also where ``|ε|`` is tiny and
    the direct formula cancels. Overflows to inf for ``ε < -88`` (handled by the caller)."""
    # ε² (1/2 − ε (1/6 − ε (1/24 − ε (1/120 − ε (1/720 − ε/5040))))), in place (Horner)
    series = eps * (-1 / 5040)
    for c in (1 / 720, 1 / 120, 1 / 24, 1 / 6):
        series.add_(c).mul_(eps).neg_()
    series.add_(0.5).mul_(eps).mul_(eps)
    direct = torch.expm1(-eps).add_(eps)
    return torch.where(eps.abs() < _SERIES_BOUND, series, direct, out=series)


def _kl_parts(base: torch.Tensor, sup: torch.Tensor, temperature: float) -> torch.Tensor:
    """The three fp32 reductions :func:`kl_from_parts` turns into ``KL(base ‖ sup)``.

    ``base [pos, vocab]`` and ``sup [rows, pos, vocab]`` are logits (any dtype, any device)
    → ``[3, rows, pos]`` fp32 on their device: ``E_p[ε]``, ``E_p[e^-ε − 1 + ε]`` and
    ``log E_p[e^-ε]``, with ``δ = (z_p − z_q) / T`` and ``ε = δ − E_p[δ]``.

    Why not ``Σ p (log p − log q)``: two nearly equal distributions give a KL that is a
    small difference of large terms, and fp32 log-probabilities leave ~1e-7 nats of
    rounding noise, the size of the distant effects the log scale is there to show. The
    identity ``KL = E_p[δ] + log E_p[e^-δ]`` (``q ∝ p e^-δ``) holds for any shift of ``δ``,
    so with ``ε`` centred ``KL = a + log1p(b − a)``, ``a = E_p[ε] ≈ 0``, ``b = E_p[e^-ε −
    1 + ε] ≥ 0``: no large terms cancel, ``δ`` is a difference of nearly equal logits (exact
    in fp32), and every term of ``b`` has full relative precision. The last part,
    ``log E_p[e^-ε]`` (a log-sum-exp, never overflowing), serves rows where ``e^-ε``
    overflows fp32 (a token over 88 nats less likely under ``p`` than under ``q``); there
    the KL is large and its absolute rounding does not matter.
    """
    rows, n_pos, vocab = sup.shape
    step = max(1, _KL_BLOCK_BYTES // (4 * 8 * vocab * (rows + 1)))
    out = torch.empty(3, rows, n_pos, dtype=torch.float32, device=sup.device)
    for start in range(0, n_pos, step):
        stop = min(n_pos, start + step)
        zp = base[start:stop].to(sup.device).float()  # [b, vocab]
        lp = torch.log_softmax(zp / temperature, dim=-1)  # [b, vocab]
        p = lp.exp()  # [b, vocab]
        eps = (zp - sup[:, start:stop].float()) / temperature  # [r, b, vocab]: δ
        eps -= (p * eps).sum(-1, keepdim=True)  # ε: δ centred under p
        out[0, :, start:stop] = (p * eps).sum(-1)
        out[1, :, start:stop] = (p * _exp_excess(eps)).sum(-1)
        out[2, :, start:stop] = torch.logsumexp(lp - eps, dim=-1)
    return out


def kl_from_parts(parts: np.ndarray) -> np.ndarray:
    """``[3, rows, pos]`` reductions of :func:`_kl_parts` (on the host) → ``KL [rows, pos]``
    float64, ``≥ 0``: ``a + log1p(b − a)``, or ``a + log E_p[e^-ε]`` where ``b`` overflowed."""
    a, b, log_mean = (np.asarray(x, dtype=np.float64) for x in parts)
    with np.errstate(invalid="ignore", over="ignore"):
        small = a + np.log1p(b - a)
    kl = np.where(np.isfinite(b), small, a + log_mean)
    return np.maximum(kl, 0.0)


def _default_rows(eng: Engine, seq: int, spans: torch.Tensor, reuse: bool) -> int:
    """Rows per forward: what the memory budget allows for the chunk that starts earliest
    (:mod:`mechscope.anchors.attention.suppression_memory`); with prefix reuse also at most
    ``ceil(n_rows / 8)``, so the chunks (rows ordered by span end) start late enough for the
    reuse to pay (compute ∝ Σ rows × (seq − first) over chunks)."""
    n_rows = int(spans.shape[0])
    most = max(1, -(-n_rows // 8)) if reuse else max(1, n_rows)
    first = int(spans[:, 1].min()) if n_rows else 0
    block = _KL_BLOCK_BYTES
    return fit_sentences(eng.lm, seq, first, reuse=reuse, block_bytes=block, most=most).rows


def position_kl(
    eng: Engine,
    input_ids: torch.Tensor,  # [1, seq]
    spans: torch.Tensor,  # [n_rows, 2] (start, end) per suppressed span
    options: SuppressionOptions | None = None,
    *,
    sample: str | None = None,
) -> np.ndarray:
    """``KL(base ‖ suppressed)`` of the next-token distribution at every logits position.

    → ``[n_rows, seq]`` float64; entry ``[r, p]`` compares the predictions made at position
    ``p`` (of token ``p + 1``). Positions before the earliest span end of a row's forward
    chunk are not computed (NaN): no suppression can reach them. A computed KL that is not
    finite is refused, naming ``sample`` (the unsuppressed pass's first non-finite layer,
    where it is that pass that is not finite).
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
    if not bool(torch.isfinite(base).all()):
        refuse_nonfinite(eng, input_ids, "the unsuppressed pass's logits", sample=sample)
    size = opts.rows_per_chunk or _default_rows(eng, seq, spans, reuse)

    def run(rows: Sequence[int]) -> tuple[list[int], np.ndarray]:
        chunk = spans[list(rows)]  # [c, 2]
        first = max(0, min(int(chunk[:, 1].min()), seq - 1))  # earliest reachable position
        ids = input_ids.expand(len(rows), -1)  # [c, seq]
        resume = Resume(base_out.cache, first) if reuse else None
        suppress = [SuppressAttention(chunk, layers, heads)]
        out = eng.run(ids, suppress, logits=torch.arange(first, seq), resume=resume)
        logits = out.logits  # [c, seq - first, vocab]
        parts = _kl_parts(base[first:], logits, opts.temperature).cpu()  # [3, c, seq - first]
        full = np.full((len(rows), seq), np.nan)
        full[:, first:] = kl_from_parts(parts.numpy())
        for r, values in zip(rows, full[:, first:], strict=True):
            require_finite(values, f"KL of suppressing span {r}", sample=sample, layer_axis=None)
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


def suppression_matrix(
    eng: Engine, tokens: TraceTokens, options: SuppressionOptions | None = None
) -> SuppressionResult:
    """Suppress every sentence of a trace in turn (batched) and build ``M`` and its rows view."""
    opts = options or SuppressionOptions()
    if tokens.n_sentences == 0:
        raise InputError("a trace with at least one sentence", sample=tokens.trace_id)
    kl = position_kl(eng, tokens.input_ids, tokens.spans(), opts, sample=tokens.trace_id)
    matrix = sentence_matrix_from_kl(kl, tokens.ranges, opts)
    return SuppressionResult(tokens.trace_id, matrix, row_normalized(matrix), kl, opts)
