"""The adaptive rules by question (``target``) against hand-computed cases.

Counts of 10 rollouts per position. Wilson (95 %, z = 1.959964): 10/10 -> [0.722467, 1],
0/10 -> [0, 0.277533]. Newcombe's interval of 10/10 - 0/10 is ``[1 - √2·0.277533, 1] =
[0.60751, 1]``; of 10/10 - 10/10 ``[-0.277533, 0.277533]``.

Posteriors (``Beta(c + 1, u - c + 1)``): 0/10 has mean 1/12, 10/10 mean 11/12, both the
variance ``(1/12)(11/12)/13 = 11/1872``; a difference of two has the standard deviation
``√(22/1872) = 0.108406``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from mechscope.anchors.adaptive.rule import (
    ABOVE,
    BELOW,
    CAP,
    NARROW,
    NEGLIGIBLE,
    OPEN,
    decide,
    decide_rows,
    decision_confidence,
    max_looks,
)
from mechscope.anchors.adaptive.targets import STATUSES, boundary, posterior_difference
from mechscope.anchors.config import AdaptiveSettings
from mechscope.errors import InputError
from tolerance import assert_decimal, assert_exact, assert_fp64_close

TEN = np.array([10, 10, 10, 10])
CORRECT = np.array([0, 10, 10, 10])  # I = (1, 0, 0)


def _rule(**kw) -> AdaptiveSettings:
    base = {"n_min": 10, "step": 10, "width": 0.5, "correction": "none", "k": 1}
    return AdaptiveSettings(**(base | kw))


def test_boundary_is_the_midpoint_of_the_kth_and_next_largest():
    size = np.array([[0.1, 0.9, 0.4, 0.6], [0.0, 0.0, 0.2, np.nan]])
    # row 0 sorted: 0.9, 0.6, 0.4, 0.1; row 1 (NaN as 0): 0.2, 0, 0, 0
    assert_fp64_close(boundary(size, 2)[:, 0], np.array([0.5, 0.0]), terms=2)
    assert_fp64_close(boundary(size, 1)[:, 0], np.array([0.75, 0.1]), terms=2)
    assert (boundary(size, 4) == -np.inf).all()  # k chunks or fewer: every chunk is above


def test_topk_interval_rule_by_hand():
    d = decide(TEN, TEN, CORRECT, 20, _rule(target="topk"))
    assert_decimal(d.low, ["0.60751", "-0.277533", "-0.277533"])
    # k = 1: boundary (1 + 0) / 2 = 0.5; |I_0| in [0.607506, 1] is above it, |I_1|, |I_2| in
    # [0, 0.277533] below: every chunk settled, sampling is over
    assert d.chunk_status.tolist() == [ABOVE, BELOW, BELOW] and d.done
    # k = 2: boundary (0 + 0) / 2 = 0: chunk 0 above, chunks 1 and 2 (|I| from 0) open, and
    # 0.555 wide, wider than 0.5; positions 1-3 enter them and get a step
    d = decide(TEN, TEN, CORRECT, 20, _rule(target="topk", k=2))
    assert d.chunk_status.tolist() == [ABOVE, OPEN, OPEN]
    assert d.add.tolist() == [0, 10, 10, 10]
    # a width of 0.6 settles them as narrow
    d = decide(TEN, TEN, CORRECT, 20, _rule(target="topk", k=2, width=0.6))
    assert d.chunk_status.tolist() == [ABOVE, NARROW, NARROW] and d.done


def test_topk_bayes_rule_by_hand():
    mean, sd = posterior_difference(TEN, CORRECT)
    assert_fp64_close(mean, np.array([10 / 12, 0.0, 0.0]), terms=2)
    assert_fp64_close(sd, np.full(3, math.sqrt(22 / 1872)), terms=3)
    # k = 1: boundary 5/12; P(|I_0| > 5/12) = Φ((5/12) / 0.108406) + Φ(-(15/12) / 0.108406)
    # = Φ(3.8437) = 0.999939 >= 0.95; chunks 1, 2: 2 Φ(-3.8437) = 0.000121 <= 0.05
    d = decide(TEN, TEN, CORRECT, 20, _rule(target="topk-bayes"))
    assert d.chunk_status.tolist() == [ABOVE, BELOW, BELOW] and d.done
    # at the level 0.9999 chunk 0 (0.999939) is still above, chunks 1 and 2 (0.000121 above
    # 0.0001) are open, and not narrow (0.555 wide)
    d = decide(TEN, TEN, CORRECT, 20, _rule(target="topk-bayes", confidence=0.9999))
    assert d.chunk_status.tolist() == [ABOVE, OPEN, OPEN] and d.add.tolist() == [0, 10, 10, 10]
    # no chunk has moved (10/10 everywhere): the boundary is 0 and P(|I| > 0) = 1, but no
    # posterior mean is above 0, so none is above it; 0.555 wide, every chunk stays open
    d = decide(TEN, TEN, TEN, 20, _rule(target="topk-bayes"))
    assert d.chunk_status.tolist() == [OPEN, OPEN, OPEN] and d.add.tolist() == [10, 10, 10, 10]


def test_ranking_settles_only_narrow_chunks():
    # 0/20 vs 0/20 is inside ±0.2 (negligible for the threshold rule) but 0.322 wide
    drawn, zero = np.array([20, 20]), np.array([0, 0])
    rule = _rule(threshold=0.2, width=0.3)
    assert decide(drawn, drawn, zero, 100, rule).chunk_status[0] == NEGLIGIBLE
    d = decide(drawn, drawn, zero, 100, _rule(target="ranking", threshold=0.2, width=0.3))
    assert d.chunk_status.tolist() == [OPEN] and d.add.tolist() == [10, 10]


def test_a_cap_above_n_lets_contested_positions_go_on():
    # fixed design 25 per position, cap 30; 20/20 - 20/20 is 0.322 wide: open at 0.3
    rule = _rule(target="topk", k=2, cap=30, width=0.3)
    drawn = np.array([10, 20, 20, 20])
    d = decide(drawn, drawn, 2 * CORRECT, 25, rule)  # budget 100 - 70 drawn = 30 left
    assert d.chunk_status.tolist() == [ABOVE, OPEN, OPEN] and d.add.tolist() == [0, 10, 10, 10]
    full = np.array([10, 30, 30, 30])  # past the fixed design's 25, at the cap
    d = decide(full, full, 3 * CORRECT, 25, _rule(target="topk", k=2, cap=30, width=0.2))
    assert d.chunk_status.tolist() == [ABOVE, OPEN, OPEN] and d.done
    assert d.position_status().tolist() == ["resolved", CAP, CAP, CAP]
    # the budget stays a share of the fixed design's rollouts: 0.9 · 25 · 4 = 90, 20 left,
    # to the widest first (chunks 1 and 2 tie: positions in order)
    rule = _rule(target="topk", k=2, cap=30, width=0.3, budget=0.9)
    d = decide(drawn, drawn, 2 * CORRECT, 25, rule)
    assert d.budget_left == 20 and d.add.tolist() == [0, 10, 10, 0]
    # the looks correction counts the sizes up to the cap: K = 1 + (30 - 10) / 10
    corrected = AdaptiveSettings(n_min=10, step=10, cap=30)
    assert max_looks(corrected, 25) == 5
    assert_fp64_close(decision_confidence(corrected, 25), 1 - 0.05 / 5, terms=2)


def test_rows_decide_as_each_run_alone():
    rng = np.random.default_rng(7)
    drawn = rng.choice([10, 20, 30], size=(6, 9))
    correct = rng.binomial(drawn, rng.random(9))
    prior = rng.random(9)
    for target in ("threshold", "ranking", "topk", "topk-bayes"):
        rule = AdaptiveSettings(target=target, cap=40, budget=0.9, k=3)
        rows = decide_rows(drawn, drawn, correct, 30, rule, prior)
        for r in range(drawn.shape[0]):
            one = decide(drawn[r], drawn[r], correct[r], 30, rule, prior)
            assert_exact(rows.add[r], one.add, msg=target)
            assert STATUSES[rows.status[r]].tolist() == one.chunk_status.tolist()


@pytest.mark.parametrize("bad", [{"target": "anchors"}, {"k": 0}, {"cap": 5}], ids=str)
def test_bad_target_settings_are_refused(bad):
    with pytest.raises(InputError):
        AdaptiveSettings(**bad)
