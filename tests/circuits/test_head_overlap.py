"""The head comparisons of ``scripts/circuits_vs_heads.py`` and ``circuits_vs_paths.py``
against independent computations: the top-k overlap by sorting, its chance level by
enumerating every pair of k-subsets, Spearman's ρ by the rank formula, the bootstrap by
enumerating every resample of three pairs, and a circuit's head weights by reading EAP-IG's
edge names."""

from __future__ import annotations

import itertools
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from mechscope.circuits.graph import EdgeGraph
from tolerance import assert_exact, assert_fp64_close

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import circuits_vs_heads as heads
import circuits_vs_paths as paths


def _top(values, k: int) -> set[int]:
    return set(sorted(range(len(values)), key=lambda i: -abs(values[i]))[:k])


def _share(a, b, k: int) -> float:
    return len(_top(a, k) & _top(b, k)) / k


def _rho(a, b) -> float:
    """Spearman's ρ of ``|a|`` and ``|b|`` without ties: 1 − 6 Σ d² / (n (n² − 1))."""
    ra = {i: r for r, i in enumerate(sorted(range(len(a)), key=lambda i: abs(a[i])))}
    rb = {i: r for r, i in enumerate(sorted(range(len(b)), key=lambda i: abs(b[i])))}
    n = len(a)
    return 1 - 6 * sum((ra[i] - rb[i]) ** 2 for i in range(n)) / (n * (n * n - 1))


def test_overlap_is_the_share_of_one_top_k_in_the_other():
    a = np.array([5.0, -4.0, 3.0, 0.1, 0.2])
    b = np.array([-0.1, 4.0, 0.2, -5.0, 3.0])
    # ratios of small integers, computed the same way on both sides: exact
    assert heads.overlap(a, b, 2) == 0.5  # {0, 1} and {3, 1}: sizes, not signs
    assert heads.overlap(a, b, 3) == 1 / 3  # {0, 1, 2} and {3, 1, 4}
    rng = np.random.default_rng(0)
    for _ in range(20):
        x, y = rng.normal(size=(2, 40))
        for k in (1, 5, 10, 40):
            assert heads.overlap(x, y, k) == _share(x, y, k)


def test_chance_is_the_mean_overlap_of_two_random_top_k():
    n = 7
    for k in range(1, n + 1):
        subsets = list(itertools.combinations(range(n), k))
        mean = sum(Fraction(len(set(a) & set(b)), k) for a in subsets for b in subsets)
        mean /= len(subsets) ** 2
        assert heads.chance(k, n) == float(mean)  # k / n, correctly rounded on both sides


def test_spearman_is_the_rank_formula():
    rng = np.random.default_rng(1)
    for n in (5, 30, 270):
        x, y = rng.normal(size=(2, n))
        y += 0.5 * x
        # Σ d² is exact in integers; ρ is 1 minus a term of at most 2: scale 2
        assert_fp64_close(heads.spearman(x, y), _rho(x, y), terms=n, scale=2.0)


def test_bootstrap_enumerates_to_every_resample_of_the_pairs():
    """Three pairs have 27 resamples: given all of them, each measure's interval is the
    percentiles of the measure over them, both scores taken from the same resampled pairs."""
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(2, 3, 12))  # [pairs, heads]
    b += a
    draws = [np.array(d) for d in itertools.product(range(3), repeat=3)]
    got = heads.measures(lambda i: a[i].mean(0), lambda i: b[i].mean(0), 3, draws)

    def mean(x, idx):
        return [sum(x[p, h] for p in idx) / len(idx) for h in range(x.shape[1])]

    def one(idx):
        ma, mb = mean(a, idx), mean(b, idx)
        return [_share(ma, mb, k) for k in heads.TOPS] + [_rho(ma, mb)]

    every = one((0, 1, 2))
    boot = np.array([one(tuple(d)) for d in draws])  # [27, measures]
    lo, hi = np.percentile(boot, [2.5, 97.5], axis=0)
    ref = np.stack([every, lo, hi], axis=1)  # [measures, 3]
    n_top = len(heads.TOPS)
    assert_exact(got[:n_top], ref[:n_top])  # shares of k: the same rankings give the same
    assert_fp64_close(got[n_top:], ref[n_top:], terms=12, scale=2.0)


def test_identical_scores_agree_in_every_resample():
    rng = np.random.default_rng(3)
    a = rng.normal(size=(5, 30))
    got = heads.measures(lambda i: a[i].mean(0), lambda i: -a[i].mean(0), 5, heads.resamples(5, 50))
    assert_exact(got, np.ones_like(got))  # |−x| ranks as |x|: overlap 1 and ρ 1 everywhere


@pytest.mark.parametrize("n_kv", [1, 2, 4])
def test_circuit_weights_read_from_the_edge_names(n_kv):
    """Each circuit edge's |score| goes to the head that sends it, the head whose query
    reads it, and, shared equally, the query heads of the key-value head that reads it."""
    g = EdgeGraph(3, 4, n_kv, 8)
    rng = np.random.default_rng(n_kv)
    scores = rng.normal(size=(g.n_senders, g.n_receivers))
    circuit = g.real.numpy() & (rng.random(scores.shape) < 0.3)
    rows, cols, w = paths.circuit_weights(g, circuit)
    got = np.abs(scores[rows, cols]) @ w  # [heads]

    ref = np.zeros(g.n_layers * g.n_heads)
    group = g.n_heads // n_kv
    for s, r in zip(*np.nonzero(circuit), strict=True):
        sender, receiver = g.edge_name(s, r).split("->")
        if sender.startswith("a"):
            layer, h = map(int, sender[1:].split(".h"))
            ref[layer * g.n_heads + h] += abs(scores[s, r])
        if "<" in receiver:
            node, kind = receiver[1:-1].split("<")
            layer, h = map(int, node.split(".h"))
            readers = [h] if kind == "q" else range(h * group, (h + 1) * group)
            for q in readers:
                ref[layer * g.n_heads + q] += abs(scores[s, r]) / (1 if kind == "q" else group)
    assert_fp64_close(got, ref, terms=int(circuit.sum()))


def test_movers_are_the_heads_whose_direct_path_lowers_the_logit_difference_most():
    direct = np.array([[0.1, -2.0, 0.5, -0.3, 3.0, -1.0], [0.1, -1.0, 0.5, -0.1, 3.0, -0.4]])
    # means: 0.1, −1.5, 0.5, −0.2, 3.0, −0.7; heads 1, 5, 3 in 2 layers of 3 heads
    assert paths.MOVERS == 3
    assert paths.movers(direct, 3) == [(0, 1), (1, 2), (1, 0)]
