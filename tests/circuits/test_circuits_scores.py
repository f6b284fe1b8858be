"""EAP against the first-order change worked out independently, and EAP-IG against exact
patching as its steps grow (tiny seeded Llama with grouped-query attention)."""

from __future__ import annotations

import importlib

import pytest
import torch

from mechscope.circuits.attribute import attribute
from mechscope.circuits.edge_ig import edge_ig, riemann_bound
from mechscope.circuits.edge_pass import EdgePass, Wiring
from mechscope.circuits.evaluate import patched_logits, prepare
from mechscope.circuits.metrics import logit_diff
from mechscope.engine import Engine, Read, Site
from mechscope.models import load_model
from mechscope.tolerance import rounding_tolerance, scale_of
from tolerance import assert_rounding_close, assert_within, depth_of


@pytest.fixture(scope="module")
def setup(batch):
    lm = load_model("tiny:llama")
    eng = Engine.of(lm)
    wiring = Wiring.of(lm)
    prep = prepare(eng, wiring, [batch])[0]
    eap = attribute(eng, [batch], method="EAP", wiring=wiring)
    return lm, eng, wiring, prep, eap


def test_eap_into_logits_by_hand(setup, batch):
    """For an edge into the logits the gradient is the final RMS norm's and the
    unembedding's, written out: ``m = u·(g ⊙ x / s)``, ``s = √(mean x² + ε)``, so
    ``∂m/∂x = (g ⊙ u)/s − x (x·(g ⊙ u)) / (d s³)`` at the last position. The score of
    ``s → logits`` is ``mean over rows of (corrupt_s − clean_s)·∂m/∂x``."""
    lm, eng, wiring, _, eap = setup
    g = wiring.graph
    site = Site("resid_post", lm.n_layers - 1)
    clean, corrupt = EdgePass(wiring), EdgePass(wiring)
    for ids, p in ((batch.clean, clean), (batch.corrupt, corrupt)):
        out = eng.run(ids, [*p.edits(), Read(site)], attention_mask=batch.mask, logits=False)
        if p is clean:
            x = out[site][:, -1].double()  # [b, d]
    norm = lm.final_norm()
    gain, eps = norm.weight.detach().double(), float(norm.variance_epsilon)
    w_u = lm.unembed_modules()[-1].weight.detach().double()  # [vocab, d]
    u = w_u[batch.labels[:, 0]] - w_u[batch.labels[:, 1]]  # [b, d]
    s = (x.pow(2).mean(-1, keepdim=True) + eps).sqrt()  # [b, 1]
    gu = gain * u
    grad = gu / s - x * (x * gu).sum(-1, keepdim=True) / (lm.d_model * s**3)  # [b, d]
    diff = (torch.cat(corrupt.outputs, 2) - torch.cat(clean.outputs, 2))[:, -1].double()
    want = torch.einsum("bsd,bd->s", diff, grad) / len(batch)  # [senders]
    got = eap.scores[:, g.logits_receiver]
    scale = float((diff.abs() * grad.abs()[:, None]).sum(-1).max())
    assert_rounding_close(got, want, depth=depth_of(lm), scale=scale, msg="EAP into logits")


def _central(eng, wiring, prep, batch, edge, eps):
    """``(f(ε) − f(−ε)) / 2ε``, ``f(α)`` the metric with the edge patched a fraction α."""
    mask = torch.zeros(wiring.graph.n_senders, wiring.graph.n_receivers)
    vals = []
    for a in (eps, -eps):
        mask[edge] = a
        vals.append(logit_diff(patched_logits(eng, wiring, prep, mask), None, batch.labels))
    return float(((vals[0] - vals[1]) / (2 * eps)).mean())


def test_eap_is_the_first_order_change(setup, batch):
    """Every 5th edge: the EAP score equals ``f'(0)`` of exact fractional patching, read off
    central differences at ε, 2ε, 4ε and Richardson-extrapolated (``R = D(ε) + (D(ε) −
    D(2ε))/3``, error O(ε⁴)). Bound: the extrapolation's own error ``|R(ε) − R(2ε)|/15``
    plus rounding of the two metrics, ``2·tol/ε`` (tol: the logits' rounding)."""
    lm, eng, wiring, prep, eap = setup
    tol = 2 * rounding_tolerance(scale_of(prep.clean_logits, prep.corrupt_logits), depth_of(lm))
    eps = 0.05
    edges = list(wiring.graph.edge_index.values())[::5]
    got, want, bound = [], [], []
    for edge in edges:
        d1, d2, d4 = (_central(eng, wiring, prep, batch, edge, e) for e in (eps, 2 * eps, 4 * eps))
        r1, r2 = d1 + (d1 - d2) / 3, d2 + (d2 - d4) / 3
        got.append(float(eap.scores[edge]))
        want.append(r1)
        bound.append(abs(r2 - r1) / 15 + 2 * tol / eps)
    assert max(abs(w) for w in want) > 20 * max(bound)  # the check is not vacuous
    assert_within(got, want, bound, msg="EAP vs central differences")


def test_edge_ig_converges_to_exact_patching(setup, batch):
    """Integrated gradients along one edge's path: one step is its EAP score; N steps reach
    exact patching of that edge within ``max|f''|/(2N)`` (``f''`` read off the N = 64
    samples, doubled for what lies between them), and the error falls as 1/N."""
    lm, eng, wiring, prep, eap = setup
    top = eap.scores.abs().flatten().argsort(descending=True)[:3].tolist()
    edges = [divmod(t, wiring.graph.n_receivers) for t in top]
    clean = logit_diff(prep.clean_logits, None, batch.labels)
    for edge in edges:
        mask = torch.zeros(wiring.graph.n_senders, wiring.graph.n_receivers)
        mask[edge] = 1
        exact = logit_diff(patched_logits(eng, wiring, prep, mask), None, batch.labels) - clean
        one, _ = edge_ig(eng, wiring, prep, edge, 1)
        assert_rounding_close(one.mean(), eap.scores[edge], depth=depth_of(lm), msg="1 step")
        errors = {}
        _, fine = edge_ig(eng, wiring, prep, edge, 64)
        second = 2 * riemann_bound(fine) * 2 * 64  # [rows] 2·max|f''|
        for n in (4, 16, 64):
            est, _ = edge_ig(eng, wiring, prep, edge, n)
            errors[n] = float((est - exact).abs().max())
            assert_within(est, exact, second / (2 * n), msg=f"{n} steps")
        assert errors[64] < errors[4] / 8, errors


def test_eap_ig_inputs_completeness_gap_falls_as_one_over_n(setup, batch):
    """EAP-IG on inputs: the input edges' total is the left Riemann sum of the embeddings'
    path, whose error tends to ``(F'(1) − F'(0)) / (2N)``. ``F'(1)`` is minus EAP's input
    total, and clean-corrupted averages ``F'(0)`` and ``F'(1)``, so ``N · gap → CC − EAP``
    (input totals), with a remainder O(1/N)."""
    _, eng, wiring, _, eap = setup
    cc = attribute(eng, [batch], method="clean-corrupted", wiring=wiring)
    lead = float((cc.input_total - eap.input_total).mean())
    gaps = {}
    for n in (8, 32):
        s = attribute(eng, [batch], method="EAP-IG-inputs", steps=n, wiring=wiring)
        gaps[n] = s.completeness_gap
    # remainder of N·gap is a/N + O(1/N²): a quarter of its value at N = 8 by N = 32 only
    # as far as the 1/N² term allows (here 0.27, within a 1e-8 of rounding of the quarter
    # on some kernels), so it is asked to fall at least twofold; a gap that did not fall
    # as 1/N would leave N·gap growing with N instead
    r8, r32 = abs(8 * gaps[8] - lead), abs(32 * gaps[32] - lead)
    assert abs(lead) > 0 and r32 <= r8 / 2, (gaps, lead)
    # and so N·gap is within a few per cent of its limit at N = 32 (the remainder's size here)
    assert_within(32 * gaps[32], lead, 0.05 * abs(lead), msg=f"N·gap at 32 steps, {gaps}")


def test_eap_ig_inputs_one_stacked_pass_is_its_steps_one_by_one(setup, batch):
    """EAP-IG on inputs runs its steps as one pass of ``steps`` copies of the batch: the
    scores are those of one pass per step (the gradients summed step by step), to the
    rounding of the forward and backward through every layer."""
    A = importlib.import_module("mechscope.circuits.attribute")

    lm, eng, wiring, _, _ = setup
    steps, g = 4, wiring.graph
    got = attribute(eng, [batch], method="EAP-IG-inputs", steps=steps, wiring=wiring)
    fn = A.resolve("logit_diff")[1]
    with torch.no_grad():
        rc, r0 = EdgePass(wiring), EdgePass(wiring)
        A.run_pass(eng, batch.corrupt, batch.mask, rc)
        l0 = A.run_pass(eng, batch.clean, batch.mask, r0)
    a, b = rc.written[("input", 0)], r0.written[("input", 0)]
    grads = [
        A._gradients(eng, wiring, batch, batch.clean, {("input", 0): a + (k / steps) * (b - a)},
                     l0, fn)[0]
        for k in range(steps)
    ]  # fmt: skip
    gsum = torch.stack(grads).sum(0) / steps  # [R, b, p, d]
    real = batch.mask[:, :, None, None].float()
    want, _ = A._edge_products(g, rc.outputs, r0.outputs, real, gsum)
    want = want / len(batch) * g.real
    magnitude, _ = A._edge_products(
        g, [o.abs() for o in rc.outputs], [-o.abs() for o in r0.outputs], real, gsum.abs()
    )
    assert_rounding_close(
        got.scores, want, scale=float(magnitude.max()) / len(batch), depth=2 * depth_of(lm)
    )
