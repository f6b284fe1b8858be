"""Per-layer readouts through the model's own final norm and unembedding (logit lens).

The paired analysis needs, for every layer and continuation token, the NLL of the true
token under two conditions plus JS and both KLs between the two next-token distributions.
A dense ``[layers × tokens × vocab]`` tensor would need > 12 GB for a 2,048-token
continuation on a 30-layer, 49k-vocabulary model, so the work is done one layer at a
time, in token chunks (:mod:`mechscope.lens.readout`): the unembedding runs on ``chunk``
tokens of both conditions at once (one matrix product large enough to run at full
speed), and the divergences (:mod:`mechscope.lens.divergence`) on cache-sized blocks of
its output. Everything after the unembedding is fp32 and in log space.
"""

from __future__ import annotations

import torch

from mechscope.engine import Engine
from mechscope.lens.divergence import JS_MAX, LN2, STATS, paired_stats

__all__ = [
    "JS_MAX",
    "LN2",
    "STATS",
    "chunk_tokens",
    "lens_logprobs",
    "paired_stats",
]

#: Bytes of fp32 logits per unembedding call (both conditions). 24 MB keeps the output out
#: of the allocator's fresh-mapping path (page faults on every call above ~32 MB) while the
#: product still has enough rows to run at the speed of a large one.
CHUNK_BYTES = 24 * 2**20
#: Fewest tokens per unembedding call (below this the product is bound by reading the
#: output embedding, not by arithmetic).
MIN_CHUNK_TOKENS = 64


def chunk_tokens(vocab: int, n_tokens: int, chunk: int | None = None) -> int:
    """Tokens per unembedding call: ``chunk`` if given, else sized by :data:`CHUNK_BYTES`."""
    size = chunk or max(MIN_CHUNK_TOKENS, CHUNK_BYTES // (2 * vocab * 4))
    return max(1, min(size, n_tokens))


@torch.inference_mode()
def lens_logprobs(engine: Engine, h: torch.Tensor, *, chunk: int = 64) -> torch.Tensor:
    """Log-probabilities of every vocabulary item read from ``h [n, d_model]``: ``[n, vocab]``
    fp32, unembedded ``chunk`` rows at a time (for readouts at a few positions)."""
    parts = [
        torch.log_softmax(engine.unembed(h[i : i + chunk]), dim=-1) for i in range(0, len(h), chunk)
    ]
    return torch.cat(parts)  # [n, V]
