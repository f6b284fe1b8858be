"""The stacked clean+corrupt pass reads what two separate passes read."""

from __future__ import annotations

import dataclasses

import torch

from mechscope.distill.passes import read_both, read_resid
from mechscope.engine import Engine
from tolerance import assert_rounding_close, depth_of


def test_read_both_equals_separate_passes(teacher, ioi_task):
    data = ioi_task.train
    order = torch.argsort(data.clean_mask.sum(1))
    long, short = data.subset(order[-2:]), data.subset(order[:2])
    # a corrupt side narrower than the clean side (and rows of unequal length on both), so
    # the stacked batch pads one side to the other's width
    b = dataclasses.replace(long, corrupt=short.corrupt, corrupt_mask=short.corrupt_mask)
    assert b.corrupt.shape[1] < b.clean.shape[1]
    eng = Engine.of(teacher)
    hc, hk = read_both(eng, b, [0, 2], [1, 2])
    ref_c = read_resid(eng, b.clean, b.clean_mask, [0, 2])
    ref_k = read_resid(eng, b.corrupt, b.corrupt_mask, [1, 2])
    assert sorted(hc) == [0, 2] and sorted(hk) == [1, 2]
    for got, ref, mask in ((hc, ref_c, b.clean_mask), (hk, ref_k, b.corrupt_mask)):
        for layer in ref:
            assert got[layer].shape == ref[layer].shape
            keep = mask.bool()  # padded positions may differ; tokens must not
            depth = depth_of(teacher, layer)  # a batch of another shape: another sum order
            assert_rounding_close(got[layer][keep], ref[layer][keep], depth=depth, msg=f"{layer}")
