"""Per-layer readouts through the model's own final norm and unembedding (logit lens).

The paired analysis needs, for every layer and continuation token, the NLL of the true
token under two conditions plus JS and both KLs between the two next-token distributions.
A dense ``[layers × tokens × vocab]`` tensor would need > 12 GB for a 2,048-token
continuation on a 30-layer, 49k-vocabulary model, so the work is done one layer at a
time, in token chunks: the unembedding runs on ``chunk`` tokens of both conditions at
once (one large matrix product), and the divergences on sub-chunks of ``sub`` rows that
fit in cache. Everything after the unembedding is fp32 and in log space.

The divergences share their element-wise work. With ``d = log p - log q``,
``a = softplus(d) - ln 2`` and ``b = softplus(-d) - ln 2`` (so that ``log p - log m = -b``
and ``log q - log m = -a`` for the mixture ``m = (p + q) / 2``, and ``a - b = d``)::

    KL(p‖q) = Σ p a - Σ p b      KL(q‖p) = Σ q b - Σ q a      JS = -½ (Σ p b + Σ q a)

and the four sums come from one batched matrix product of ``[p; q]`` with ``[a; b]``.
Computing ``b`` from ``-d`` (not as ``a - d``) keeps every summed term small where its
weight is large, so JS and KL are symmetric under swapping the conditions and accurate to
about 1e-7 (JS) and 1e-6 (KL) in fp32, also for near-disjoint distributions.
"""

from __future__ import annotations

import math

import torch

from mechscope.engine import Engine

LN2 = math.log(2.0)
#: The largest fp32 value not above ln 2 (fp32(ln 2) rounds up), so a clamped JS <= ln 2.
JS_MAX = float(torch.nextafter(torch.tensor(LN2), torch.tensor(0.0)))
STATS = ("nll_a", "nll_b", "js", "kl_ab", "kl_ba")
#: Bytes of element-wise work per sub-chunk: small enough to stay in a CPU's last-level cache.
SUB_CHUNK_BYTES = 16 * 2**20
#: Bytes of fp32 logits per unembedding call (both conditions).
CHUNK_BYTES = 128 * 2**20


def chunk_sizes(vocab: int, n_tokens: int, chunk_tokens: int | None = None) -> tuple[int, int]:
    """``(chunk, sub)``: tokens per unembedding call and rows per divergence sub-chunk."""
    sub = max(1, SUB_CHUNK_BYTES // (3 * 2 * vocab * 4))
    chunk = chunk_tokens or max(sub, CHUNK_BYTES // (2 * vocab * 4))
    return max(1, min(chunk, n_tokens)), max(1, min(sub, chunk))


def paired_stats(z: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """NLL of ``targets`` under both rows, JS and both KLs from paired logits.

    ``z [rows, 2, vocab]`` holds condition A's and B's logits for the same rows;
    ``targets [rows]``. Returns ``[5, rows]`` fp32 in the order of :data:`STATS`, in nats.
    """
    lp = torch.log_softmax(z.float(), dim=-1)  # [r, 2, V]
    idx = targets.to(lp.device).long()[:, None, None].expand(-1, 2, 1)  # [r, 2, 1]
    nll = -lp.gather(-1, idx)[..., 0]  # [r, 2]
    p = lp.exp()  # [r, 2, V]
    ab = torch.empty_like(lp)  # [r, 2, V]: a, then b
    torch.sub(lp[:, 0], lp[:, 1], out=ab[:, 0])  # d
    torch.sub(lp[:, 1], lp[:, 0], out=ab[:, 1])  # -d
    torch.logaddexp(ab, torch.zeros((), device=lp.device), out=ab)  # softplus(±d)
    ab.sub_(LN2)
    g = torch.bmm(p, ab.transpose(1, 2))  # [r, 2 (p, q), 2 (a, b)]
    kl_ab = (g[:, 0, 0] - g[:, 0, 1]).clamp_min(0.0)
    kl_ba = (g[:, 1, 1] - g[:, 1, 0]).clamp_min(0.0)
    js = (-0.5 * (g[:, 0, 1] + g[:, 1, 0])).clamp(0.0, JS_MAX)
    return torch.stack([nll[:, 0], nll[:, 1], js, kl_ab, kl_ba])  # [5, r]


@torch.inference_mode()
def paired_layer_readout(
    engine: Engine,
    h: torch.Tensor,  # [2, tokens, d_model]: condition A and B at the prediction positions
    targets: torch.Tensor,  # [tokens]
    *,
    chunk: int,
    sub: int,
) -> torch.Tensor:
    """:func:`paired_stats` for every token of one layer: ``[5, tokens]`` fp32 (CPU)."""
    n = h.shape[1]
    out = torch.empty(5, n, dtype=torch.float32)
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        z = engine.unembed(h[:, start:stop].transpose(0, 1))  # [c, 2, V] fp32
        for s in range(0, stop - start, sub):
            e = min(s + sub, stop - start)
            out[:, start + s : start + e] = paired_stats(z[s:e], targets[start + s : start + e])
        del z
    return out


@torch.inference_mode()
def lens_logprobs(engine: Engine, h: torch.Tensor, *, chunk: int = 64) -> torch.Tensor:
    """Log-probabilities of every vocabulary item read from ``h [n, d_model]``: ``[n, vocab]``
    fp32, unembedded ``chunk`` rows at a time (for readouts at a few positions)."""
    parts = [
        torch.log_softmax(engine.unembed(h[i : i + chunk]), dim=-1) for i in range(0, len(h), chunk)
    ]
    return torch.cat(parts)  # [n, V]
