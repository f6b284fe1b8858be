"""Layer mapping: proportional depth and linear CKA (against the HSIC Gram formula)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mechscope.distill.mapping import (
    cka_map,
    kept_map,
    linear_cka,
    proportional_layer,
    proportional_map,
)
from mechscope.errors import InputError
from tolerance import assert_fp64_close


def test_proportional_ends_and_monotone():
    m = proportional_map(list(range(30)), 30, 6)
    assert m[29] == 5 and m[0] == 0 and m[4] == 0 and m[9] == 1 and m[14] == 2
    assert all(m[i] <= m[i + 1] for i in range(29))
    assert proportional_layer(3, 4, 4) == 3  # same depth: identity
    with pytest.raises(InputError):
        proportional_layer(30, 30, 6)


def _cka_gram(x: np.ndarray, y: np.ndarray) -> float:
    n = x.shape[0]
    h = np.eye(n) - np.ones((n, n)) / n
    k, l_ = x @ x.T, y @ y.T
    hsic = lambda a, b: np.trace(a @ h @ b @ h)  # noqa: E731
    return hsic(k, l_) / np.sqrt(hsic(k, k) * hsic(l_, l_))


def test_linear_cka_matches_gram_formula():
    g = np.random.default_rng(0)
    x, y = g.normal(size=(30, 7)), g.normal(size=(30, 4))
    # CKA is a ratio of float64 sums normalised to [0, 1]: the Gram form sums n × n products
    got = linear_cka(torch.tensor(x), torch.tensor(y))
    assert_fp64_close(got, _cka_gram(x, y), terms=30 * 30, scale=1.0, msg="CKA")


def test_linear_cka_invariant_to_rotation_and_scale():
    g = np.random.default_rng(1)
    x = g.normal(size=(40, 6))
    q, _ = np.linalg.qr(g.normal(size=(6, 6)))
    got = linear_cka(torch.tensor(x), torch.tensor(3.0 * x @ q))
    assert_fp64_close(got, 1.0, terms=40 * 6, scale=1.0, msg="rotated and scaled")


def test_cka_map_picks_matching_layer():
    g = torch.Generator().manual_seed(2)
    base = [torch.randn(50, 8, generator=g, dtype=torch.float64) for _ in range(3)]
    q, _ = torch.linalg.qr(torch.randn(8, 8, generator=g, dtype=torch.float64))
    teacher = {0: base[0], 1: base[1], 2: base[2]}
    student = {0: base[2] @ q, 1: base[0] @ q}  # student 0 ~ teacher 2, student 1 ~ teacher 0
    mapping, matrix = cka_map(teacher, student)
    assert mapping == {0: 1, 1: mapping[1], 2: 0}
    assert matrix.shape == (3, 2)


def test_keep_causal_moves_deep_checkpoints_off_the_last_student_layer():
    from mechscope.distill.alignment import keep_causal

    m = proportional_map([10, 27, 29], 30, 6)
    assert m == {10: 1, 27: 5, 29: 5}
    assert keep_causal(m, 30, 6) == {10: 1, 27: 4, 29: 5}
    assert keep_causal({0: 0}, 3, 1) == {0: 0}


def test_kept_map_stops_before_the_copies_of_later_layers():
    from mechscope.distill.students import keep_every

    kept = keep_every(30, 5)
    assert kept == [0, 6, 12, 17, 23, 29]
    m = kept_map(list(range(30)), kept)
    for t in range(30):  # brute force: the student layer holding the deepest kept layer <= t
        assert kept[m[t]] == max(k for k in kept if k <= t)
    assert m[22] == 3 and m[23] == 4 and m[29] == 5  # by depth, 22 would map to 4 (= layer 23)
    assert proportional_layer(22, 30, 6) == 4
    with pytest.raises(InputError, match="increasing"):
        kept_map([1], [3, 1])


def test_kept_mapping_of_a_subset_student(teacher, ioi_task):
    from mechscope.distill.alignment import layer_maps
    from mechscope.distill.students import layer_subset_student

    student = layer_subset_student(teacher, [0, 2])
    ckpt, fit, cka = layer_maps("kept", ioi_task, student, kept=[0, 2])
    assert fit == {0: 0, 1: 2} and cka is None
    assert all(ckpt[c.layer] == (1 if c.layer == 2 else 0) for c in ioi_task.checkpoints)
    with pytest.raises(InputError, match="layer_subset"):
        layer_maps("kept", ioi_task, student)
