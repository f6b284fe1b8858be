"""Pruning orders, gates, curves (against direct evaluations) and areas."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mechscope.errors import InputError
from mechscope.heads.pruning import (
    curve_bands,
    keep_one_per_layer,
    pruning_auc,
    pruning_curves,
    pruning_orders,
    removal_gates,
)
from tolerance import assert_rounding_close, depth_of


def test_orders_follow_importance() -> None:
    imp = np.array([[0.3, -1.0, 2.0], [0.0, 5.0, 0.1]])
    orders = pruning_orders(imp, n_random=3, seed=0)
    assert list(orders["least_first"]) == [1, 3, 5, 0, 2, 4]
    assert list(orders["most_first"]) == [4, 2, 0, 5, 3, 1]
    assert sorted(orders) == ["least_first", "most_first", "random_0", "random_1", "random_2"]
    for k in ("random_0", "random_1", "random_2"):
        assert sorted(orders[k]) == list(range(6))
    assert not np.array_equal(orders["random_0"], orders["random_1"])


def test_one_head_per_layer_is_always_kept() -> None:
    imp = np.arange(12, dtype=float).reshape(3, 4)
    orders = pruning_orders(imp, n_random=2, one_per_layer=True)
    for order in orders.values():
        assert len(order) == 12 - 3
        layers_left = {layer: 4 for layer in range(3)}
        for idx in order:
            layers_left[int(idx) // 4] -= 1
        assert all(v >= 1 for v in layers_left.values())
    # least first keeps each layer's most important head
    assert set(range(12)) - set(orders["least_first"]) == {3, 7, 11}
    np.testing.assert_array_equal(keep_one_per_layer(np.array([0, 1, 4, 5]), 4), [0, 4])


def test_removal_gates() -> None:
    gates = removal_gates((2, 3), np.array([4, 0, 2]), [0, 1, 3])
    assert torch.all(gates[0] == 1)
    assert gates[1].view(-1).tolist() == [1, 1, 1, 1, 0, 1]
    assert gates[2].view(-1).tolist() == [0, 1, 0, 1, 0, 1]


def test_curves_match_direct_evaluation(tiny_f) -> None:
    L, H = tiny_f.shape
    imp = np.random.default_rng(0).normal(size=(L, H))
    orders = pruning_orders(imp, n_random=3)
    curves = pruning_curves([tiny_f], orders, n_points=4, max_fraction=0.5)
    assert sorted(curves["n_removed"].unique()) == [0, 2, 4, 6]
    row = curves[(curves["order"] == "most_first") & (curves["n_removed"] == 4)].iloc[0]
    gate = torch.ones(1, L * H)
    gate[0, orders["most_first"][:4]] = 0
    value, acc = tiny_f.metrics(gate.view(1, L, H))  # the same gates in another batch
    assert_rounding_close(row["objective"], value[0], depth=depth_of(tiny_f.lm), msg="objective")
    assert row["accuracy"] == acc[0]  # the same hits over the same tokens, in fp32 alike
    assert row["fraction"] == 4 / (L * H)  # the count over all heads, as the curve divides
    base = curves[curves["n_removed"] == 0]["objective"]
    assert base.nunique() == 1  # nothing removed: the same value for every order


def test_auc_is_the_curve_average_and_bands_pool_random_orders() -> None:
    rows = []
    for sid, shift in (("a", 0.0), ("b", 1.0)):
        for order in ("least_first", "most_first", "random_0", "random_1"):
            for frac, val in zip([0.0, 0.25, 0.5], [1.0, 2.0, 4.0], strict=True):
                bump = 1.0 if order == "most_first" else 0.0
                rows.append(
                    {
                        "sample_id": sid,
                        "order": order,
                        "kind": "random" if order.startswith("random") else order,
                        "n_removed": int(frac * 8),
                        "fraction": frac,
                        "objective": val + shift + bump,
                        "accuracy": 1 - frac,
                    }
                )
    import pandas as pd

    df = pd.DataFrame(rows)
    auc = pruning_auc(df).set_index("order")
    # mean curve over samples: [1.5, 2.5, 4.5]; trapezoid over [0, 0.5] / 0.5. Every value,
    # mean and area here is a small binary fraction: exact
    want = np.trapezoid([1.5, 2.5, 4.5], [0.0, 0.25, 0.5]) / 0.5
    assert auc.loc["least_first", "auc_objective"] == want
    assert auc.loc["most_first", "auc_objective"] == want + 1.0
    bands = curve_bands(df)
    assert set(bands["kind"]) == {"least_first", "most_first", "random"}
    r = bands[(bands["kind"] == "random") & (bands["metric"] == "objective")]
    np.testing.assert_array_equal(r["mean"], [1.5, 2.5, 4.5])
    assert np.all(r["low"] <= r["mean"]) and np.all(r["high"] >= r["mean"])


def test_bad_pruning_input(tiny_f) -> None:
    with pytest.raises(InputError, match="importance"):
        pruning_orders(np.ones(5))
    with pytest.raises(InputError, match="n_points"):
        pruning_curves([tiny_f], {"a": np.arange(3)}, n_points=1)
    with pytest.raises(InputError, match="max_fraction"):
        pruning_curves([tiny_f], {"a": np.arange(3)}, max_fraction=0.0)
