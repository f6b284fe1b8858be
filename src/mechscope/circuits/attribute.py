"""Edge scores: EAP, EAP-IG (on inputs, on activations) and clean-corrupted.

Every method estimates, for each edge ``s → r``, what corrupting that edge alone does to
the metric: ``(corrupt_s − clean_s) · ḡ_r``, summed over positions and the residual width,
averaged over examples, where ``ḡ_r`` is a mean of ``∂metric/∂x_r`` (the gradient at the
receiver's own input, :mod:`mechscope.circuits.edge_pass`) over some passes on the clean
prompt. The methods differ only in those passes, as EAP-IG's ``attribute.py`` runs them:

- ``EAP`` (Syed et al. 2023): one pass, the clean run;
- ``EAP-IG-inputs`` (Hanna et al. 2024): ``steps`` passes whose input embeddings are
  ``corrupt + k/steps · (clean − corrupt)``, ``k = 0 … steps−1``, several steps stacked
  as copies of the batch in one pass where that pays (``circuits.memory.fit_copies``);
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

from dataclasses import dataclass

import torch

from mechscope.circuits.data import EdgeBatch
from mechscope.circuits.edge_pass import EdgePass, Group, Probe, Wiring, groups, run_pass
from mechscope.circuits.graph import EdgeGraph
from mechscope.circuits.memory import fit_chunk, fit_copies, note_chunk
from mechscope.circuits.metrics import Metric, resolve
from mechscope.engine import Engine
from mechscope.engine.core.frozen import frozen_parameters
from mechscope.errors import InputError

METHODS = ("EAP", "EAP-IG-inputs", "EAP-IG-activations", "clean-corrupted")


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
    method: str,
    steps: int,
    batch: EdgeBatch,
    clean: EdgePass,
    corrupt: EdgePass,
    graph: EdgeGraph,
    copies: int = 1,
) -> list[tuple[torch.Tensor, dict[Group, torch.Tensor], int]]:
    """The passes of ``method``: token ids, the group outputs they replace, and how many
    copies of the batch the pass stacks. ``EAP-IG-inputs`` runs its ``steps`` in passes of
    ``copies`` steps each (:func:`~mechscope.circuits.memory.fit_copies`)."""
    if method == "EAP":
        return [(batch.clean, {}, 1)]
    if method == "clean-corrupted":
        return [(batch.clean, {}, 1), (batch.corrupt, {}, 1)]
    if method == "EAP-IG-inputs":
        a, b = corrupt.written[("input", 0)], clean.written[("input", 0)]
        plans = []
        for first in range(0, steps, copies):
            ks = range(first, min(first + copies, steps))
            path = torch.cat([a + (k / steps) * (b - a) for k in ks])  # [len(ks)·b, p, d]
            ids = batch.clean.repeat(len(ks), 1) if len(ks) > 1 else batch.clean
            plans.append((ids, {("input", 0): path}, len(ks)))
        return plans
    plans = []
    for group, _ in groups(graph):
        a, b = corrupt.written[group], clean.written[group]
        for k in range(1, steps + 1):
            alpha = k / steps
            plans.append((batch.clean, {group: alpha * b + (1 - alpha) * a}, 1))
    return plans


def _gradients(
    eng: Engine,
    wiring: Wiring,
    batch: EdgeBatch,
    ids: torch.Tensor,
    replace: dict[Group, torch.Tensor],
    clean_logits: torch.Tensor | None,
    metric: Metric,
    copies: int = 1,
) -> tuple[torch.Tensor, EdgePass, torch.Tensor]:
    """``∂ Σ metric / ∂x_r`` ``[receivers, b, p, d]`` fp32 of one pass, summed over its
    ``copies`` of the batch (``ids [copies·b, p]``), the pass (what its senders wrote) and
    its logits ``[copies·b, vocab]``. ``clean_logits`` None: the pass is the clean run
    itself, and its own logits (detached) are the metric's reference."""
    g, lm = wiring.graph, wiring.lm
    probe = Probe.zeros(g, *ids.shape, lm.device)
    p = EdgePass(wiring, probe=probe, replace=replace)
    mask = batch.mask.repeat(copies, 1) if copies > 1 else batch.mask  # [copies·b, p]
    with torch.enable_grad(), frozen_parameters(lm.model):
        logits = run_pass(eng, ids, mask, p, grad=True)  # [copies·b, vocab]
        ref = logits.detach() if clean_logits is None else clean_logits
        values = [metric(part, ref, batch.labels) for part in logits.split(len(batch))]
        grad = probe.grad(torch.cat(values).sum())  # [receivers, copies·b, p, d]
    if copies > 1:
        grad = grad.view(grad.shape[0], copies, len(batch), *grad.shape[2:]).sum(1)
    return grad, p, logits.detach()


def _edge_products(
    graph: EdgeGraph,
    corrupt: list[torch.Tensor],
    clean: list[torch.Tensor],
    real: torch.Tensor,
    grad: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``[senders, receivers]``: ``Σ_{b,p,d} diff[b,p,s,d] · grad[r,b,p,d]`` on the edges
    (0 elsewhere), with ``diff = (corrupt − clean) · real`` of each sender group's outputs
    (``[b, p, k, d]`` each, ``real [b, p, 1, 1]``); and ``[b]`` each example's total over
    the input node's edges. A sender is read by a suffix of the receivers, so each group
    is multiplied by that suffix alone (about half of the dense product's work), and the
    differences are made a group at a time, never all ``[b, p, S, d]`` at once."""
    n_r = grad.shape[0]
    g = grad.reshape(n_r, -1)  # [R, b·p·d]: a view of the receiver-major gradient
    out = torch.zeros(graph.n_senders, n_r, device=grad.device)
    reads = torch.tensor([graph.reads(r) for r in range(n_r)])  # [R] nondecreasing
    totals = torch.zeros(0)
    start = 0
    for c, o in zip(corrupt, clean, strict=True):
        k = c.shape[2]
        diff = (c.to(grad.device) - o) * real  # [b, p, k, d]
        if start == 0:  # the input node
            totals = torch.einsum("bpd,rbpd->b", diff[:, :, 0], grad)
        first = int(torch.searchsorted(reads, start, right=True))  # first receiver reading it
        lhs = diff.permute(2, 0, 1, 3).reshape(k, -1)  # [k, b·p·d]
        out[start : start + k, first:] = lhs @ g[first:].T
        start += k
    return out, totals


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
        copies = fit_copies(wiring, len(batch), batch.clean.shape[1], method, steps)
        note_chunk(wiring, len(batch), batch.clean.shape[1], method, steps, copies)
        with torch.no_grad():
            rc = EdgePass(wiring)
            lc = run_pass(eng, batch.corrupt, batch.mask, rc)
        if method == "EAP":  # its one pass is the clean run: the clean outputs come with it
            gsum, r0, l0 = _gradients(eng, wiring, batch, batch.clean, {}, None, fn)
        else:
            with torch.no_grad():
                r0 = EdgePass(wiring)
                l0 = run_pass(eng, batch.clean, batch.mask, r0)
            plans = _plans(method, steps, batch, r0, rc, g, copies)
            gsum = torch.zeros(g.n_receivers, *batch.clean.shape, g.d_model, device=device)
            for ids, replace, n in plans:
                gsum += _gradients(eng, wiring, batch, ids, replace, l0, fn, n)[0]
            gsum /= steps if method == "EAP-IG-inputs" else len(plans)
        real = batch.mask.to(device)[:, :, None, None].float()  # [b, p, 1, 1]
        products, input_totals = _edge_products(g, rc.outputs, r0.outputs, real, gsum)
        total += products
        inputs.append(input_totals.cpu())
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
