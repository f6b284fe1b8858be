"""Edge scores: EAP, EAP-IG (on inputs, on activations) and clean-corrupted.

Every method estimates, for each edge ``s → r``, what corrupting that edge alone does to
the metric: ``(corrupt_s − clean_s) · ḡ_r``, summed over positions and the residual width,
averaged over examples, where ``ḡ_r`` is a mean of ``∂metric/∂x_r`` (the gradient at the
receiver's own input, :mod:`mechscope.circuits.edge_pass`) over some passes on the clean
prompt. The methods differ only in those passes, as EAP-IG's ``attribute.py`` runs them:

- ``EAP`` (Syed et al. 2023): one pass, the clean run;
- ``EAP-IG-inputs`` (Hanna et al. 2024): ``steps`` passes whose input embeddings are
  ``corrupt + k/steps · (clean − corrupt)``, ``k = 0 … steps−1``;
- ``EAP-IG-activations``: for each sender group in turn (the input, each layer's attention,
  each MLP) ``steps`` passes with that group's output at ``α · clean + (1 − α) · corrupt``,
  ``α = k/steps``, ``k = 1 … steps``; the gradients of all ``groups × steps`` passes are
  averaged (EAP-IG divides by their total count);
- ``clean-corrupted``: two passes, the clean run and the corrupt run.

Completeness: with ``input → r`` the edges from the input node, ``Σ_r score(input → r)``
is the integrated-gradients sum of the embeddings' path from corrupt to clean, which tends
to ``metric(corrupt) − metric(clean)`` as the steps grow (the left Riemann sum of a
derivative ``f'`` along the path errs by at most ``max|f''| / (2·steps)``). The difference
is reported as :attr:`Scores.completeness_gap` for every method; it is a convergence
measure for ``EAP-IG-inputs`` and only a first-order check for the others.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from mechscope.circuits.data import EdgeBatch
from mechscope.circuits.edge_pass import EdgePass, Group, Probe, Wiring, groups, run_pass
from mechscope.circuits.graph import EdgeGraph
from mechscope.circuits.memory import fit_chunk, note_chunk
from mechscope.circuits.metrics import Metric, resolve
from mechscope.engine import Engine
from mechscope.engine.core.frozen import frozen_parameters
from mechscope.errors import InputError

METHODS = ("EAP", "EAP-IG-inputs", "EAP-IG-activations", "clean-corrupted")
#: Receiver bands of :func:`_edge_products`.
CHUNKS = 8


@dataclass
class Scores:
    """Edge scores and what they were computed from."""

    graph: EdgeGraph
    scores: torch.Tensor  # [senders, receivers] fp32, 0 where no edge
    method: str
    steps: int
    metric: str
    clean: torch.Tensor  # [examples] the metric on the clean run
    corrupt: torch.Tensor  # [examples] on the corrupt run
    input_total: torch.Tensor  # [examples] Σ_r score(input → r) of each example

    @property
    def n_examples(self) -> int:
        return int(self.clean.shape[0])

    @property
    def completeness_gap(self) -> float:
        """``mean Σ_r score(input → r) − mean (metric(corrupt) − metric(clean))``."""
        return float(self.input_total.mean() - (self.corrupt - self.clean).mean())

    def edge(self, name: str) -> float:
        """The score of the edge named ``name`` (``a0.h1->a2.h3<q>``)."""
        return float(self.scores[self.graph.edge_index[name]])


def _plans(
    method: str, steps: int, batch: EdgeBatch, clean: EdgePass, corrupt: EdgePass, graph: EdgeGraph
) -> list[tuple[torch.Tensor, dict[Group, torch.Tensor]]]:
    """The passes of ``method``: token ids and the group outputs they replace."""
    if method == "EAP":
        return [(batch.clean, {})]
    if method == "clean-corrupted":
        return [(batch.clean, {}), (batch.corrupt, {})]
    if method == "EAP-IG-inputs":
        a, b = corrupt.written[("input", 0)], clean.written[("input", 0)]
        return [(batch.clean, {("input", 0): a + (k / steps) * (b - a)}) for k in range(steps)]
    plans = []
    for group, _ in groups(graph):
        a, b = corrupt.written[group], clean.written[group]
        for k in range(1, steps + 1):
            alpha = k / steps
            plans.append((batch.clean, {group: alpha * b + (1 - alpha) * a}))
    return plans


def _gradients(
    eng: Engine,
    wiring: Wiring,
    batch: EdgeBatch,
    ids: torch.Tensor,
    replace: dict[Group, torch.Tensor],
    clean_logits: torch.Tensor | None,
    metric: Metric,
) -> tuple[torch.Tensor, EdgePass, torch.Tensor]:
    """``∂ Σ metric / ∂x_r`` ``[b, p, receivers, d]`` fp32 of one pass, the pass (what its
    senders wrote) and its logits ``[b, vocab]``. ``clean_logits`` None: the pass is the
    clean run itself, and its own logits (detached) are the metric's reference."""
    g, lm = wiring.graph, wiring.lm
    probe = Probe.zeros(g, *ids.shape, lm.device)
    p = EdgePass(wiring, probe=probe, replace=replace)
    with torch.enable_grad(), frozen_parameters(lm.model):
        logits = run_pass(eng, ids, batch.mask, p, grad=True)  # [b, vocab]
        ref = logits.detach() if clean_logits is None else clean_logits
        values = metric(logits, ref, batch.labels)  # [b]
        grad = probe.grad(values.sum())  # [b, p, receivers, d]
    return grad, p, logits.detach()


def _edge_products(graph: EdgeGraph, diff: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """``[senders, receivers]``: ``Σ_{b,p,d} diff[b,p,s,d] · grad[b,p,r,d]`` on the edges,
    0 elsewhere. A receiver reads a prefix of the senders that grows with its index, so
    the product is taken over :data:`CHUNKS` bands of receivers, each against only the
    senders its last receiver reads: a little over half of the dense product's work."""
    b, p, n_s, d = diff.shape
    n_r = grad.shape[2]
    out = torch.zeros(n_s, n_r, device=diff.device)
    reads = [graph.reads(r) for r in range(n_r)]
    bounds = [round(i * n_r / CHUNKS) for i in range(CHUNKS + 1)]
    lhs = diff.permute(2, 0, 1, 3).reshape(n_s, b * p * d)  # [S, b·p·d]
    for lo, hi in itertools.pairwise(bounds):
        if hi > lo:
            top = max(reads[lo:hi])
            rhs = grad[:, :, lo:hi].permute(0, 1, 3, 2).reshape(b * p * d, hi - lo)
            out[:top, lo:hi] = lhs[:top] @ rhs
    return out


def chunks(wiring: Wiring, data: list[EdgeBatch], method: str, steps: int) -> list[EdgeBatch]:
    """Each batch in chunks of as many rows as fit the model's memory budget
    (:mod:`mechscope.circuits.memory`): a batch's sums are the sums of its chunks."""
    out = []
    for batch in data:
        size = fit_chunk(wiring, len(batch), batch.clean.shape[1], method, steps).rows
        out += [batch.rows(i, i + size) for i in range(0, len(batch), size)]
    return out


def attribute(
    eng: Engine,
    data: list[EdgeBatch],
    *,
    metric: str | Metric = "logit_diff",
    method: str = "EAP-IG-inputs",
    steps: int = 5,
    wiring: Wiring | None = None,
) -> Scores:
    """Score every edge of ``eng``'s model on ``data`` with ``method`` (:data:`METHODS`),
    each batch in chunks of pairs that fit the model's memory budget (:func:`chunks`)."""
    if method not in METHODS:
        raise InputError(f"expected one of {', '.join(METHODS)}, got {method!r}", field="method")
    if steps < 1:
        raise InputError(f"expected steps >= 1, got {steps}", field="steps")
    name, fn = resolve(metric)
    wiring = wiring or Wiring.of(eng.lm)
    g = wiring.graph
    device = eng.lm.device
    total = torch.zeros(g.n_senders, g.n_receivers, device=device)
    cleans, corrupts, inputs = [], [], []
    for batch in chunks(wiring, data, method, steps):
        note_chunk(wiring, len(batch), batch.clean.shape[1], method, steps)
        with torch.no_grad():
            rc = EdgePass(wiring)
            lc = run_pass(eng, batch.corrupt, batch.mask, rc)
        if method == "EAP":  # its one pass is the clean run: the clean outputs come with it
            gsum, r0, l0 = _gradients(eng, wiring, batch, batch.clean, {}, None, fn)
        else:
            with torch.no_grad():
                r0 = EdgePass(wiring)
                l0 = run_pass(eng, batch.clean, batch.mask, r0)
            plans = _plans(method, steps, batch, r0, rc, g)
            gsum = torch.zeros(*batch.clean.shape, g.n_receivers, g.d_model, device=device)
            for ids, replace in plans:
                gsum += _gradients(eng, wiring, batch, ids, replace, l0, fn)[0]
            gsum /= len(plans)
        real = batch.mask.to(device)[:, :, None, None].float()  # [b, p, 1, 1]
        diff = (torch.cat(rc.outputs, 2) - torch.cat(r0.outputs, 2)) * real  # [b, p, S, d]
        total += _edge_products(g, diff, gsum)
        inputs.append(torch.einsum("bpd,bprd->b", diff[:, :, 0], gsum).cpu())
        cleans.append(fn(l0, l0, batch.labels).cpu())
        corrupts.append(fn(lc, l0, batch.labels).cpu())
    n = sum(len(b) for b in data)
    scores = (total / n).cpu() * g.real
    return Scores(
        g,
        scores,
        method,
        1 if method == "EAP" else (2 if method == "clean-corrupted" else steps),
        name,
        torch.cat(cleans),
        torch.cat(corrupts),
        torch.cat(inputs),
    )
