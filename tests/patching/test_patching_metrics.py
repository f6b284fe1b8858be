"""Readout metrics against float64 numpy/scipy, with and without a candidate set."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from patching_reference import metric_scale, ref_metrics

from mechscope.patching import Reference, normalized_effect, readout_metrics
from mechscope.patching.plan import chunk_cost, plan_chunks
from tolerance import assert_rounding_close


@pytest.mark.parametrize("candidates", [None, (3, 7, 11, 2)])
def test_readout_metrics_match_scipy(candidates):
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 13, generator=gen) * 3  # [rows, vocab]
    base = torch.randn(13, generator=gen) * 3
    ref = Reference(base, correct_id=3, wrong_id=7, target_id=7, candidate_ids=candidates)
    got = readout_metrics(logits, ref)
    scale = float(torch.cat([logits.ravel(), base]).abs().max())
    for r in range(6):
        expected = ref_metrics(
            logits[r].numpy(), base.numpy(), 3, 7, 7, list(candidates) if candidates else None
        )
        for name, value in expected.items():  # fp32 against float64: one stage of rounding
            metric = metric_scale(name, scale, logits.shape[-1])
            assert_rounding_close(float(got[name][r]), value, depth=1, scale=metric, msg=name)


def test_flips_follow_argmax():
    base = torch.tensor([0.0, 5.0, 1.0])  # base predicts token 1
    logits = torch.tensor([[9.0, 0.0, 0.0], [0.0, 9.0, 0.0], [0.0, 0.0, 9.0]])
    got = readout_metrics(logits, Reference(base, correct_id=2, wrong_id=1, target_id=2))
    assert got["flip_to_target"].tolist() == [0.0, 0.0, 1.0]
    assert got["flip_from_base"].tolist() == [1.0, 0.0, 1.0]
    # restricted to {1, 2}, row 0's prediction is a tie broken to the first candidate
    got = readout_metrics(logits, Reference(base, 2, 1, 2, candidate_ids=(1, 2)))
    assert got["flip_to_target"].tolist() == [0.0, 0.0, 1.0]


def test_normalized_effect():
    assert normalized_effect(3.0, clean=5.0, corrupt=1.0) == 0.5  # 2/4: exact in binary
    assert normalized_effect(np.array([1.0, 5.0]), 5.0, 1.0).tolist() == [0.0, 1.0]
    assert np.isnan(normalized_effect(2.0, 1.0, 1.0))


def _cost(chunks, layers, n_layers, overhead):
    total = 0.0
    for chunk in chunks:
        a = min(layers[i] for i in chunk)
        total += n_layers * overhead + a + (n_layers - a) * len(chunk)
    return total


@pytest.mark.parametrize("seed", range(5))
def test_plan_chunks_is_an_optimal_partition(seed):
    rng = np.random.default_rng(seed)
    layers = rng.integers(0, 5, size=7).tolist()
    max_rows = int(rng.integers(2, 5))
    chunks = plan_chunks(layers, 5, max_rows, overhead_rows=2.0)
    assert sorted(i for c in chunks for i in c) == list(range(7))
    assert all(len(c) <= max_rows for c in chunks)
    # brute force over contiguous partitions of the layer-sorted rows
    order = sorted(range(7), key=lambda i: (layers[i], i))
    best = float("inf")
    for cuts in itertools.product([0, 1], repeat=6):
        parts, cur = [], [order[0]]
        for cut, i in zip(cuts, order[1:], strict=True):
            if cut:
                parts.append(cur)
                cur = []
            cur.append(i)
        parts.append(cur)
        if all(len(p) <= max_rows for p in parts):
            best = min(best, _cost(parts, layers, 5, 2.0))
    assert _cost(chunks, layers, 5, 2.0) == best  # sums of whole numbers: exact


def _cost2(chunks, layers, starts, n_layers, seq, overhead, joins=False, dead=1.0):
    return sum(
        chunk_cost(
            [layers[i] for i in c], [starts[i] for i in c], n_layers, seq, overhead, joins, dead
        )
        for c in chunks
    )


def _best_contiguous(
    order, layers, starts, n_layers, seq, max_rows, overhead, joins=False, dead=1.0
):
    best = float("inf")
    for cuts in itertools.product([0, 1], repeat=len(order) - 1):
        parts, cur = [], [order[0]]
        for cut, i in zip(cuts, order[1:], strict=True):
            if cut:
                parts.append(cur)
                cur = []
            cur.append(i)
        parts.append(cur)
        if all(len(p) <= max_rows for p in parts):
            best = min(best, _cost2(parts, layers, starts, n_layers, seq, overhead, joins, dead))
    return best


@pytest.mark.parametrize("dead", [1.0, 0.25])
@pytest.mark.parametrize("joins", [False, True])
@pytest.mark.parametrize("seed", range(5))
def test_plan_chunks_with_prefix_reuse_is_the_best_of_both_orders(seed, joins, dead):
    """The planner's partition costs what the best contiguous partition of either order
    costs (brute force), with rows that begin at the chunk's lowest layer or (``joins``)
    at their own, and positions before a row's own start computed (``dead`` 1) or not
    (a quarter of the cost: every cost is a sum of quarters, exact in floating point)."""
    rng = np.random.default_rng(seed)
    n, n_layers, seq = 7, 5, 9
    layers = rng.integers(0, n_layers, size=n).tolist()
    starts = rng.integers(0, seq, size=n).tolist()
    max_rows = int(rng.integers(2, 5))
    chunks = plan_chunks(
        layers,
        n_layers,
        max_rows,
        row_starts=starts,
        seq=seq,
        overhead_rows=1.0,
        joins=joins,
        dead=dead,
    )
    assert sorted(i for c in chunks for i in c) == list(range(n))
    assert all(len(c) <= max_rows for c in chunks)
    orders = [
        sorted(range(n), key=lambda i: (layers[i], starts[i], i)),
        sorted(range(n), key=lambda i: (starts[i], layers[i], i)),
    ]
    best = min(
        _best_contiguous(o, layers, starts, n_layers, seq, max_rows, 1.0, joins, dead)
        for o in orders
    )
    assert _cost2(chunks, layers, starts, n_layers, seq, 1.0, joins, dead) == best
    if dead == 1.0:  # reusing prefixes never costs more than ignoring them (with dead
        # positions cheaper, a partition of another order can win: the planner searches two)
        plain = plan_chunks(layers, n_layers, max_rows, seq=seq, overhead_rows=1.0, joins=joins)
        assert best <= _cost2(plain, layers, starts, n_layers, seq, 1.0, joins) + 1e-9


def test_joined_rows_pay_for_their_own_layers_only():
    """A chunk of rows at layers 0 and 3 of 5: without joins both pay 5 layers; joined, the
    layer-3 row pays 2 (and the chunk's fixed cost is the same)."""
    plain = chunk_cost([0, 3], [0, 0], 5, 4, 1.0)
    joined = chunk_cost([0, 3], [0, 0], 5, 4, 1.0, joins=True)
    fixed = 5 * 1.0 * 4
    assert plain - fixed == 4 * (0 + 5 * 2)
    assert joined - fixed == 4 * (0 + 5 + 2)


def test_positions_before_a_rows_own_start_cost_the_dead_fraction():
    """Rows from positions 0 and 3 of 5 in one chunk (lowest layer 0 of 5): computed in
    full, both pay 5 positions a layer; resumed at their own starts the second pays its 2
    and a quarter of the 3 before them."""
    fixed = 5 * 1.0 * 5
    full = chunk_cost([0, 0], [0, 3], 5, 5, 1.0)
    live = chunk_cost([0, 0], [0, 3], 5, 5, 1.0, dead=0.25)
    assert full - fixed == 5 * (5 + 5)
    assert live - fixed == 5 * (5 + 2 + 0.25 * 3)
