"""The pass memory count: its arithmetic against hand sums, and the row fit against a scan.

Whether the count matches real peaks is measured in ``benchmarks/bench_memory.py`` (fresh
processes, resident high-water marks); here the formulas are pinned term by term so a
change to one is deliberate.
"""

from __future__ import annotations

import pytest

from mechscope.engine.analysis.memory_model import (
    FP32,
    Dims,
    Pass,
    cache_bytes,
    fit_rows,
    layer_bytes,
    logits_bytes,
    note,
    pass_bytes,
    recorded,
    saved_bytes,
)

# smollm2-135m's sizes
DIMS = Dims(
    layers=30, d_model=576, d_mlp=1536, heads=9, kv_heads=3, d_head=64, vocab=49152, itemsize=4
)


def test_layer_is_the_larger_of_mlp_and_attention():
    p = Pass(rows=2, tokens=10)
    mlp = 20 * (3 * 576 + 3 * 1536) * 4
    attn = 20 * (2 * 576 + 2 * 9 * 64 + 2 * 3 * 64) * 4
    assert layer_bytes(DIMS, p) == max(mlp, attn) == mlp


def test_explicit_attention_holds_two_fp32_score_blocks_and_masks():
    p = Pass(rows=2, tokens=1000, explicit=True)
    attn = 2000 * (2 * 576 + 2 * 9 * 64 + 2 * 3 * 64) * 4
    blocks = 2 * (2 * 9 * 1000 * 1000 * FP32) + (2 + 1) * 1000 * 1000
    assert layer_bytes(DIMS, p) == attn + blocks  # > the MLP's 2000 * (3d + 3f) * 4
    short = Pass(rows=2, tokens=10, explicit=True)  # short: the MLP is the larger
    assert layer_bytes(DIMS, short) == 20 * (3 * 576 + 3 * 1536) * 4


def test_cache_counts_every_layer_and_the_rows_below_an_expand_once():
    p = Pass(rows=8, tokens=4, keys=16, cache=True, expand_layer=10, input_rows=1)
    kv = 2 * 3 * 64
    assert cache_bytes(DIMS, p) == (10 * 1 + 20 * 8) * 16 * kv * 4
    assert cache_bytes(DIMS, Pass(rows=8, tokens=4)) == 0


def test_rows_joining_higher_up_hold_cache_for_their_own_layers_only():
    """8 rows from layer 10: half join at layer 20 (``Join``), so the cache holds 4 rows ×
    20 layers + 4 rows × 10 layers above the shared layers, not 8 × 20."""
    kv = 2 * 3 * 64
    own = 4 * 20 + 4 * 10
    p = Pass(rows=8, tokens=4, keys=16, cache=True, expand_layer=10, input_rows=1, row_layers=own)
    assert cache_bytes(DIMS, p) == (10 * 1 + own) * 16 * kv * 4


def test_logits_are_fp32_whatever_the_dtype():
    half = Dims(**{**DIMS.__dict__, "itemsize": 2})
    p = Pass(rows=3, tokens=5, logits=5)
    assert logits_bytes(half, p) == 3 * 5 * 49152 * 4 + 2 * 15 * 576 * 2


def test_gradients_save_every_layer_above_the_expand():
    per_token = 2 * 576 + 3 * 9 * 64 + 2 * 3 * 64 + 9 + 3 * 1536  # frozen weights
    assert saved_bytes(DIMS, Pass(rows=2, tokens=8, grad=True)) == 30 * 16 * per_token * 4
    assert saved_bytes(DIMS, Pass(rows=2, tokens=8, grad=True, expand_layer=12)) == (
        18 * 16 * per_token * 4
    )
    assert saved_bytes(DIMS, Pass(rows=2, tokens=8)) == 0


def test_pass_grows_with_rows_tokens_and_keys():
    base = pass_bytes(DIMS, Pass(rows=4, tokens=512))
    assert pass_bytes(DIMS, Pass(rows=5, tokens=512)) > base
    assert pass_bytes(DIMS, Pass(rows=4, tokens=513)) > base
    assert pass_bytes(DIMS, Pass(rows=4, tokens=512, explicit=True)) > base
    assert pass_bytes(DIMS, Pass(rows=4, tokens=512, cache=True)) > base


@pytest.mark.parametrize("budget", [0, 1, 999, 1000, 1001, 12_345, 10**9])
@pytest.mark.parametrize("max_rows", [1, 7, 64])
def test_fit_rows_is_the_largest_fitting_count(budget: int, max_rows: int):
    cost = lambda rows: 100 + 37 * rows * rows  # noqa: E731  (grows with rows)
    fit = fit_rows(cost, budget, max_rows)
    fitting = [r for r in range(1, max_rows + 1) if cost(r) <= budget]
    assert fit.rows == (max(fitting) if fitting else 1)
    assert fit.bytes == cost(fit.rows)


def test_predictions_are_recorded_only_inside_the_block():
    note("outside", 1)
    with recorded() as got:
        note("a", 10)
        with recorded() as inner:
            note("b", 20)
    assert [(p.what, p.bytes) for p in got] == [("a", 10)]
    assert [(p.what, p.bytes) for p in inner] == [("b", 20)]
