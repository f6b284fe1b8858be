"""Logit-lens statistics for many condition pairs that share forward passes.

A task's pairs (agentic variant × as-run/position-matched, each against assisted) use a
handful of distinct forwards: one assisted pass serves every as-run pair, each agentic pass
serves its as-run and its position-matched pair. Unembedding is the expensive part of the
readout (``tokens × d_model × vocab`` per layer and pass), so each distinct pass is
unembedded once per layer and token chunk, and every pair's NLLs, JS and KLs come from
those logits through :func:`mechscope.lens.divergence.paired_stats` — the same arithmetic
as the paired analysis, so the numbers are the same.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from mechscope.engine import Engine
from mechscope.lens.divergence import paired_stats
from mechscope.lens.readout_memory import shared_chunk


@torch.inference_mode()
def shared_pair_readout(
    engine: Engine,
    hidden: Sequence[torch.Tensor],  # each [layers, T, d_model]: a distinct forward pass
    pairs: Sequence[tuple[int, int]],  # (index of A, index of B) into ``hidden``
    targets: torch.Tensor,  # [T] continuation token ids
    *,
    chunk_tokens: int | None = None,
) -> torch.Tensor:
    """``[pairs, 6, layers, T]`` fp32: NLL under A, under B, ΔNLL = A − B, JS, KL(A‖B),
    KL(B‖A) — the metric order of :data:`mechscope.lens.result.METRICS`."""
    lm = engine.lm
    n_layers, n = int(hidden[0].shape[0]), int(hidden[0].shape[1])
    used = sorted({i for pair in pairs for i in pair})
    held = sum(h.numel() * h.element_size() for h in {id(h): h for h in hidden}.values())
    held += len(pairs) * 5 * n_layers * n * 4  # the stats filled meanwhile (fp32)
    device = hidden[0].device
    chunk = shared_chunk(lm, n, len(used), held=held, device=device, chunk=chunk_tokens)
    stats = torch.empty(len(pairs), 5, n_layers, n, dtype=torch.float32)
    # one reused buffer per pass and one for a stacked pair (no fresh mapping per chunk)
    size, vocab = min(chunk, n), lm.vocab_size
    logits = {i: torch.empty(size, vocab, device=device) for i in used}  # [c, V] fp32 each
    pair = torch.empty(size, 2, vocab, device=device)  # [c, 2, V]
    for layer in range(n_layers):
        for start in range(0, n, chunk):
            stop = min(start + chunk, n)
            c = stop - start
            z = {i: engine.unembed(hidden[i][layer, start:stop], out=logits[i][:c]) for i in used}
            for p, (a, b) in enumerate(pairs):
                both = torch.stack([z[a], z[b]], dim=1, out=pair[:c])  # [c, 2, V]
                stats[p, :, layer, start:stop] = paired_stats(both, targets[start:stop])
    nll_a, nll_b = stats[:, 0], stats[:, 1]
    return torch.stack(
        [nll_a, nll_b, nll_a - nll_b, stats[:, 2], stats[:, 3], stats[:, 4]], dim=1
    )  # [pairs, 6, L, T]
