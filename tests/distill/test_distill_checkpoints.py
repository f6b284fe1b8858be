"""Checkpoint search: scores match a loop; selection honours the diversity constraint."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mechscope.distill.checkpoints import contrast_scores, inert_mask, select_checkpoints
from mechscope.errors import InputError
from tolerance import assert_rounding_close

NAMES = ["IO", "S2", "end"]
MODIFIED = [False, True, False]


def test_contrast_scores_match_loop():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(4, 3, 2, 5, generator=g), torch.randn(4, 3, 2, 5, generator=g)
    got = contrast_scores(a, b).numpy()
    ref = np.zeros((3, 2))
    for layer in range(3):
        for p in range(2):
            ref[layer, p] = np.mean(
                [np.linalg.norm((a[n, layer, p] - b[n, layer, p]).numpy()) for n in range(4)]
            )
    # The differences are the same fp32 subtraction on both sides; the norms (5 squares) and
    # the mean over 4 pairs are rounded in fp32 against float64 here.
    assert_rounding_close(got, ref, depth=5 + 4, msg="contrast scores")


def test_diversity_reserves_unmodified_slot():
    # The modified position S2 dominates every layer: plain top-3 would be all S2.
    scores = np.array([[0.0, 5.0, 0.1], [0.0, 6.0, 0.2], [0.0, 7.0, 0.3], [0.0, 8.0, 0.4]])
    chosen = select_checkpoints(scores, NAMES, MODIFIED, k=3)
    assert len(chosen) == 3
    assert any(c.modified for c in chosen) and any(not c.modified for c in chosen)
    assert (chosen[-1].layer, chosen[-1].position) == (3, "end")  # best unmodified
    assert [(c.layer, c.position) for c in chosen[:2]] == [(3, "S2"), (2, "S2")]
    assert all(c.position != "IO" for c in chosen)  # zero difference: never chosen


def test_unconstrained_top_k_when_both_kinds_already_present():
    scores = np.array([[0.0, 1.0, 9.0], [0.0, 2.0, 8.0]])
    chosen = select_checkpoints(scores, NAMES, MODIFIED, k=3)
    assert [(c.layer, c.position) for c in chosen] == [(0, "end"), (1, "end"), (1, "S2")]


def test_min_counts_respected():
    scores = np.array([[0.0, 5.0, 0.1], [0.0, 6.0, 0.2], [0.0, 7.0, 0.3]])
    chosen = select_checkpoints(scores, NAMES, MODIFIED, k=4, min_modified=1, min_unmodified=2)
    assert sum(not c.modified for c in chosen) >= 2 and sum(c.modified for c in chosen) >= 1


def test_impossible_constraint_raises():
    scores = np.array([[0.0, 5.0, 0.0], [0.0, 6.0, 0.0]])  # no unmodified signal at all
    with pytest.raises(InputError, match="unmodified"):
        select_checkpoints(scores, NAMES, MODIFIED, k=2)
    with pytest.raises(InputError, match="k >="):
        select_checkpoints(scores, NAMES, MODIFIED, k=1)


def test_teacher_task_checkpoints_are_diverse(ioi_task):
    kinds = {c.modified for c in ioi_task.checkpoints}
    assert kinds == {True, False}
    assert len(ioi_task.checkpoints) == 3
    # IO and S1 precede the modified S2 token: a causal model's difference there is exactly 0
    io = ioi_task.names.index("IO")
    assert float(ioi_task.scores[:, io].abs().max()) == 0.0


def test_inert_last_layer_sites_are_excluded(ioi_task):
    mask = inert_mask(3, [False, True])
    assert mask.tolist() == [[False, False], [False, False], [True, False]]
    last = ioi_task.key_clean.shape[1] - 1
    assert all(c.layer < last or c.position == "end" for c in ioi_task.checkpoints)
