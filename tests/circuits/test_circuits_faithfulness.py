"""The faithfulness curve against what it claims: the whole graph is faithful 1 (the clean
run, bit for bit), CPR and CMD are the trapezoid areas of the curve computed by hand, the
interval holds the point, and the curve of a circuit chosen by EAP-IG scores climbs above
that of random scores early on."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from circuit_fixtures import random_batch
from mechscope.circuits.attribute import attribute
from mechscope.circuits.edge_pass import Wiring
from mechscope.circuits.evaluate import prepare
from mechscope.circuits.faithfulness import Curve, faithfulness_curve
from mechscope.engine import Engine
from mechscope.models import load_model
from tolerance import assert_exact, assert_fp64_close, assert_within

SHARES = (0.05, 0.2, 0.5, 1.0)


@pytest.fixture(scope="module")
def curve_setup():
    lm = load_model("tiny:llama")
    eng, wiring = Engine.of(lm), Wiring.of(lm)
    data = [random_batch(rows=3, seed=s) for s in range(2)]
    prepared = prepare(eng, wiring, data)
    scores = attribute(eng, data, method="EAP-IG-inputs", steps=4, wiring=wiring).scores
    return eng, wiring, prepared, scores


def test_whole_graph_is_faithful_one_and_areas_are_trapezoids(curve_setup):
    eng, wiring, prepared, scores = curve_setup
    curve = faithfulness_curve(eng, wiring, prepared, scores, shares=SHARES)
    f = curve.faithfulness
    assert f[-1] == 1.0, "the whole graph is the clean run bit for bit"
    assert curve.kept[-1] == wiring.graph.n_edges
    assert np.all(curve.kept <= curve.requested)
    pairs = list(enumerate(itertools.pairwise(SHARES)))
    by_hand = sum((b - a) * (f[i] + f[i + 1]) / 2 for i, (a, b) in pairs)
    gap = sum((b - a) * (abs(1 - f[i]) + abs(1 - f[i + 1])) / 2 for i, (a, b) in pairs)
    assert_fp64_close(curve.cpr, by_hand, terms=len(SHARES))  # the same sums, reordered
    assert_fp64_close(curve.cmd, gap, terms=len(SHARES))
    table, areas = curve.summary(n_resamples=200)
    assert list(table["faithfulness"]) == list(f)
    assert list(areas["measure"]) == ["CPR", "CMD"]
    assert list(areas["value"]) == [curve.cpr, curve.cmd]


def test_the_interval_matches_the_delta_method():
    """200 synthetic examples, corrupt metric 0: F = mean(v) / mean(c), whose standard error
    by the delta method is √((Var v − 2F Cov(v, c) + F² Var c) / n) / mean(c); the
    bootstrap's 95 % interval is about ±1.96 of it around F."""
    rng = np.random.default_rng(0)
    n = 200
    clean = rng.normal(3.0, 1.0, n)
    values = np.stack([0.5 * clean + rng.normal(0, 0.5, n), clean])  # [sizes, n]
    c = Curve(np.array([0.5, 1.0]), np.array([1, 2]), np.array([1, 2]), values, clean, np.zeros(n))
    table, _ = c.summary(n_resamples=4000)
    v, f = values[0], c.faithfulness[0]
    cov = np.cov(v, clean)
    se = np.sqrt((cov[0, 0] - 2 * f * cov[0, 1] + f**2 * cov[1, 1]) / n) / clean.mean()
    width = table["high"][0] - table["low"][0]
    assert table["low"][0] < f < table["high"][0]
    # the delta method is first order and 4,000 draws place each percentile to about 3 % of
    # the width: 15 % covers both, and a wrong pairing (clean and values resampled apart)
    # or a missing covariance term moves the width by far more
    assert_within(width, 2 * 1.96 * se, 0.15 * 2 * 1.96 * se, msg="interval width")


def test_faithfulness_is_the_normalised_mean():
    """Two examples by hand: F = (mean(circuit) − mean(corrupt)) / (mean(clean) − mean(corrupt))."""
    c = Curve(
        shares=np.array([0.5, 1.0]),
        requested=np.array([1, 2]),
        kept=np.array([1, 2]),
        values=np.array([[1.0, 3.0], [4.0, 2.0]]),
        clean=np.array([4.0, 2.0]),
        corrupt=np.array([0.0, 0.0]),
    )
    assert_exact(c.faithfulness, np.array([2 / 3, 1.0]))  # (2 − 0) / (3 − 0): one rounding
    assert c.edges_reaching(0.8) == 2 and c.edges_reaching(0.5) == 1


def test_scores_beat_random_scores(curve_setup):
    eng, wiring, prepared, scores = curve_setup
    shares = (0.02, 0.05, 0.1)
    ours = faithfulness_curve(eng, wiring, prepared, scores, shares=shares)
    rand = torch.rand(scores.shape, generator=torch.Generator().manual_seed(0)) * wiring.graph.real
    other = faithfulness_curve(eng, wiring, prepared, rand, shares=shares)
    assert ours.cpr > other.cpr
