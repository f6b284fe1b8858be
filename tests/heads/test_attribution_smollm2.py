"""Real-model checks on SmolLM2-135M (30 layers × 9 heads, grouped-query attention)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mechscope.heads.baselines import gate_gradients
from mechscope.heads.gatefn import GateFunction
from mechscope.heads.ig import joint_ig, per_layer_ig
from mechscope.heads.objectives import nll_objective
from tolerance import assert_fp64_close, assert_rounding_close, depth_of

pytestmark = pytest.mark.slow

PROMPT = "The Eiffel Tower is located in the city of"


@pytest.fixture(scope="module")
def f(smollm2) -> GateFunction:
    return GateFunction(smollm2, nll_objective(smollm2.tokenizer, PROMPT, " Paris", sample_id="e"))


def test_shapes_and_gradient_at_all_gates_on(f) -> None:
    assert f.shape == (30, 9)
    g = gate_gradients([f])[0]
    # identical gate rows give identical values: batch rows never mix
    assert np.isfinite(g).all() and np.abs(g).max() > 0
    with torch.no_grad():
        v = f(torch.ones((2, 30, 9)))
    assert_rounding_close(v[0], v[1], depth=depth_of(f.lm), msg="identical rows")


def test_per_layer_ig_is_complete_and_joint_reports_its_error(f) -> None:
    rtol, atol = 0.05, 0.05  # the refinement's own acceptance criterion
    layers = per_layer_ig(f, n_steps=2, layers=[0, 14, 29], rtol=rtol, atol=atol, max_steps=8)
    s = layers.segments
    ok = np.abs(s.delta) <= np.maximum(rtol * np.abs(s.f_end - s.f_start), atol)
    assert np.all(ok | (s.n_steps == 8))  # passes, or refinement ran out and says so
    assert ok[1:].all()  # mid and last layers: smooth in their own gates
    joint = joint_ig(f, n_steps=8)
    # whatever the quadrature error, it is measured: Σ attributions − (f(1) − f(0))
    seg = joint.segments
    want = joint.attributions.sum() - (seg.f_end[0] - seg.f_start[0])
    scale = np.abs(joint.attributions).sum() + abs(seg.f_end[0]) + abs(seg.f_start[0])
    assert_fp64_close(seg.delta[0], want, terms=joint.attributions.size, scale=scale)
