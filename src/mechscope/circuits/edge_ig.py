"""Integrated gradients along one edge's own path: the check that links scores to patching.

Patch a single edge ``s → r`` a fraction ``α`` of the way (``x_r += α (corrupt_s −
clean_s)``) and call the metric ``f(α)``. Nothing upstream of ``r`` moves, so
``f'(α) = (corrupt_s − clean_s) · ∂metric/∂x_r`` at that point, and

- ``f'(0)`` is the edge's EAP score (the first-order change);
- ``f(1) − f(0)`` is exact patching of the edge;
- the left Riemann sum ``(1/N) Σ_{k<N} f'(k/N)`` errs from it by at most
  ``max|f''| / (2N)`` (each step's error is ``∫ (f'(t) − f'(t_k)) dt ≤ max|f''| h² / 2``).

So the estimate approaches exact single-edge patching as ``1/N``, with a bound read off the
samples themselves; EAP-IG's scores are the same sums along a path that moves every edge
at once.
"""

from __future__ import annotations

import torch

from mechscope.circuits.edge_pass import EdgePass, Probe, Wiring, run_pass
from mechscope.circuits.evaluate import Prepared
from mechscope.circuits.metrics import Metric, resolve
from mechscope.engine import Engine


def edge_derivatives(
    eng: Engine,
    wiring: Wiring,
    prep: Prepared,
    edge: tuple[int, int],
    alphas: list[float],
    metric: str | Metric = "logit_diff",
) -> torch.Tensor:
    """``[len(alphas), examples]``: ``f'(α)`` of the edge ``(sender, receiver)`` at each α."""
    _, fn = resolve(metric)
    g, lm = wiring.graph, eng.lm
    s, r = edge
    batch = prep.batch
    real = batch.mask.to(lm.device).float()[:, :, None]  # [b, p, 1]
    out = []
    for alpha in alphas:
        mask = torch.zeros(g.n_senders, g.n_receivers)
        mask[s, r] = alpha
        probe = Probe.zeros(g, *batch.clean.shape, lm.device)
        p = EdgePass(wiring, mask=mask, other=prep.corrupt_outputs, probe=probe)
        with torch.enable_grad():
            logits = run_pass(eng, batch.clean, batch.mask, p, grad=True)  # [b, vocab]
            values = fn(logits, prep.clean_logits, batch.labels)  # [b]
            grad = probe.grad(values.sum())  # [receivers, b, p, d]
        current = torch.cat(p.outputs, 2)[:, :, s].detach()  # [b, p, d]
        other = torch.cat(prep.corrupt_outputs, 2)[:, :, s].to(lm.device)  # [b, p, d]
        out.append(torch.einsum("bpd,bpd->b", (other - current) * real, grad[r]).cpu())
    return torch.stack(out)


def edge_ig(
    eng: Engine,
    wiring: Wiring,
    prep: Prepared,
    edge: tuple[int, int],
    steps: int,
    metric: str | Metric = "logit_diff",
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(estimate [examples], f' samples [steps, examples])``: the left Riemann sum of
    ``f'`` at ``α = k/steps``, ``k = 0 … steps−1``."""
    fp = edge_derivatives(eng, wiring, prep, edge, [k / steps for k in range(steps)], metric)
    return fp.mean(0), fp


def riemann_bound(fprime: torch.Tensor) -> torch.Tensor:
    """``[examples]``: ``max|f''| / (2N)`` for samples ``f'(k/N)`` ``[N, examples]``, with
    ``f''`` estimated by the differences of neighbouring samples (``N ≥ 2``)."""
    n = fprime.shape[0]
    second = (fprime[1:] - fprime[:-1]).abs().amax(0) * n  # [examples]
    return second / (2 * n)
