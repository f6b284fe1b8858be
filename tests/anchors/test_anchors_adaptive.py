"""The adaptive design's stopping rule against hand-computed cases.

Wilson (95 %, z = 1.959964): 5/10 -> [0.236593, 0.763407]; 10/10 -> [0.722467, 1];
0/20 -> [0, z² / (20 + z²)] = [0, 0.161125]. Newcombe's interval of p1 - p2 is
``[d - sqrt((p1 - l1)² + (u2 - p2)²), d + sqrt((u1 - p1)² + (p2 - l2)²)]``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from mechscope.anchors.adaptive.rule import (
    BUDGET,
    CAP,
    NARROW,
    NEGLIGIBLE,
    OPEN,
    RESOLVED,
    decide,
    decision_confidence,
    max_looks,
)
from mechscope.anchors.config import AdaptiveSettings
from mechscope.errors import InputError
from tolerance import assert_decimal, assert_fp64_close, assert_within, decimal_bound

#: Hand computation to 6 decimals (see the module docstring): an interval of a difference
#: takes a hypot of two written bounds, each within half a unit of its 6th decimal, with
#: slope at most 1 in each.
HAND = 2 * decimal_bound("0.236593")
W5_10 = (0.236593, 0.763407)
W10_10 = (0.722467, 1.0)


def _rule(**kw) -> AdaptiveSettings:
    base = {"n_min": 10, "step": 10, "width": 0.3, "threshold": 0.2, "correction": "none"}
    return AdaptiveSettings(**(base | kw))


def test_round_zero_gives_every_position_n_min():
    d = decide(np.zeros(4), np.zeros(4), np.zeros(4), 100, _rule())
    assert d.add.tolist() == [10, 10, 10, 10] and not d.done
    assert np.isnan(d.importance).all() and (d.low == -1).all() and (d.high == 1).all()


def test_intervals_and_statuses_of_a_hand_computed_trace():
    drawn = np.array([10, 10, 10])
    correct = np.array([5, 5, 10])
    d = decide(drawn, drawn, correct, 20, _rule())
    # chunk 0: 5/10 - 5/10 = 0, half-width sqrt(2) * (0.5 - 0.236593)
    half0 = math.hypot(0.5 - W5_10[0], W5_10[1] - 0.5)
    assert d.importance[0] == 0.0
    assert_within(d.low[0], -half0, HAND, msg="low 0")
    assert_within(d.high[0], half0, HAND, msg="high 0")
    # chunk 1: 10/10 - 5/10 = 0.5
    assert d.importance[1] == 0.5
    low1 = 0.5 - math.hypot(1.0 - W10_10[0], W5_10[1] - 0.5)
    high1 = 0.5 + math.hypot(1.0 - 1.0, 0.5 - W5_10[0])
    assert_within(d.low[1], low1, HAND, msg="low 1")
    assert_within(d.high[1], high1, HAND, msg="high 1")
    assert d.chunk_status.tolist() == [OPEN, OPEN]  # 0.745 and 0.646 wide, not inside ±0.2
    # every position is open, each gets a step (cap 20 - 10 = 10 left)
    assert d.is_open.tolist() == [True, True, True] and d.add.tolist() == [10, 10, 10]


def test_the_budget_goes_to_the_widest_intervals_first():
    drawn, correct = np.array([10, 10, 10]), np.array([5, 5, 10])
    # budget 2/3 of 20 x 3 = 40: 10 left after round 0; positions 0 and 1 tie on the widest
    # interval (chunk 0, 0.745) and 0 comes first; position 2 (0.646) gets nothing
    d = decide(drawn, drawn, correct, 20, _rule(budget=2 / 3))
    assert d.budget_left == 10 and d.add.tolist() == [10, 0, 0]
    # a prior breaks the tie the other way
    d = decide(drawn, drawn, correct, 20, _rule(budget=2 / 3), prior=np.array([0.0, 1.0, 5.0]))
    assert d.add.tolist() == [0, 10, 0]
    # no budget left: sampling is over and the open positions ended out of budget
    d = decide(drawn, drawn, correct, 20, _rule(budget=0.5))
    assert d.done and d.position_status().tolist() == [BUDGET, BUDGET, BUDGET]


def test_negligible_narrow_and_cap():
    # 0/20 vs 0/20: interval ±0.161125 (0.322 wide > 0.3) inside ±0.2 -> negligible
    drawn = np.array([20, 20])
    d = decide(drawn, drawn, np.array([0, 0]), 100, _rule())
    assert_decimal(d.low[0], "-0.161125")
    assert_decimal(d.high[0], "0.161125")
    assert d.chunk_status.tolist() == [NEGLIGIBLE] and d.done
    assert d.position_status().tolist() == [RESOLVED, RESOLVED]
    # without the threshold it stays open; a width of 0.33 makes it narrow
    assert decide(drawn, drawn, np.array([0, 0]), 100, _rule(threshold=None)).add.tolist() == [
        10,
        10,
    ]
    assert decide(drawn, drawn, np.array([0, 0]), 100, _rule(width=0.33)).chunk_status[0] == NARROW
    # at the cap, an open chunk's positions end at the cap
    d = decide(drawn, drawn, np.array([10, 10]), 20, _rule())
    assert d.chunk_status.tolist() == [OPEN] and d.done
    assert d.position_status().tolist() == [CAP, CAP]


def test_the_looks_correction():
    rule = AdaptiveSettings(n_min=10, step=10, correction="looks", confidence=0.95)
    assert max_looks(rule, 100) == 19  # K = 1 + 90 / 10 = 10 sizes, 2K - 1 looks
    assert_fp64_close(decision_confidence(rule, 100), 1 - 0.05 / 19, terms=3)  # 1 − α / m
    assert max_looks(AdaptiveSettings(n_min=10, step=25), 100) == 2 * (1 + 4) - 1  # ceil(90/25)
    assert decision_confidence(_rule(), 100) == 0.95


@pytest.mark.parametrize(
    "bad",
    [
        {"n_min": 0},
        {"step": 0},
        {"width": 0},
        {"width": -0.1},
        {"threshold": 0},
        {"confidence": 1},
        {"correction": "bonferroni"},
        {"budget": 0},
        {"budget": -1},
        {"budget": 1.5},
        {"prior": "oracle"},
    ],
    ids=str,
)
def test_bad_settings_are_refused(bad):
    with pytest.raises(InputError):
        AdaptiveSettings(**bad)


def test_settings_against_the_cap():
    with pytest.raises(InputError, match="n_min"):
        AdaptiveSettings(n_min=20).check_against(10)
    with pytest.raises(InputError, match="budget"):
        AdaptiveSettings(n_min=10, budget=0.05).check_against(100)
    AdaptiveSettings(n_min=10, budget=0.1).check_against(100)
