"""Per-layer IG runs the layers below a chunk's lowest moving layer once (``shared_below``).

Every check compares against the plain pass that runs all layers for every row: values,
gradients, attributions, and the work the model actually did (rows × layers, counted with
hooks on the decoder layers).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from attribution_helpers import COMPLETION, PROMPT

from mechscope.engine import Engine, Gate
from mechscope.heads.diffusion import diffusion_objective
from mechscope.heads.gatefn import GateFunction
from mechscope.heads.ig import joint_ig, per_layer_ig
from mechscope.heads.integrate import first_moving_layer, gradients, shared_layers
from mechscope.heads.objectives import nll_objective
from tolerance import assert_beyond_rounding, assert_rounding_close, depth_of, scale_of


def close(got, want, lm, msg: str) -> None:
    """Equal up to the rounding of a forward (and backward) pass through every layer: the
    shared and the full passes run matmuls of other batch sizes, which may sum in another
    order (tests/tolerance.py)."""
    assert_rounding_close(got, want, depth=depth_of(lm), msg=msg)


class Plain:
    """The same gate function without ``shares_prefix``: every row runs every layer."""

    def __init__(self, f: GateFunction):
        self.f, self.shape, self.default_batch = f, f.shape, f.default_batch

    def __call__(self, alpha: torch.Tensor) -> torch.Tensor:
        return self.f(alpha)


def layer_rows(lm) -> tuple[list[int], list]:
    """Hooks that add up the batch rows each decoder layer puts out (its output, not its
    input: the expansion itself is a pre-hook on the first per-row layer)."""
    seen = [0] * lm.n_layers
    handles = []
    for layer in range(lm.n_layers):

        def hook(module, args, output, layer=layer):
            hidden = output[0] if isinstance(output, tuple) else output
            seen[layer] += int(hidden.shape[0])

        handles.append(lm.layer_module(layer).register_forward_hook(hook))
    return seen, handles


def random_gates(shape, n, k, seed=0, prefix=1.0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    alpha = torch.rand((n, *shape), generator=gen)  # [n, L, H]
    alpha[:, :k] = prefix
    return alpha


@pytest.mark.parametrize("prefix", [1.0, 0.5])
def test_shared_values_and_gradients_equal_the_full_pass(tiny_f, prefix) -> None:
    layers = tiny_f.shape[0]
    for k in range(1, layers):
        alpha = random_gates(tiny_f.shape, 5, k, seed=k, prefix=prefix)
        full = alpha.clone().requires_grad_(True)
        shared = alpha.clone().requires_grad_(True)
        y_full, y_shared = tiny_f(full), tiny_f(shared, shared_below=k)
        close(y_shared, y_full, tiny_f.lm, f"values, {k} shared")
        (g_full,) = torch.autograd.grad(y_full.sum(), full)
        (g_shared,) = torch.autograd.grad(y_shared.sum(), shared)
        close(g_shared[:, k:], g_full[:, k:], tiny_f.lm, f"gradients, {k} shared")
        assert torch.all(g_shared[:, :k] == 0)  # not computed below k
        assert torch.any(g_full[:, :k] != 0)  # ... where the full pass has a gradient


def test_shared_prefix_with_a_multi_row_objective(tiny_llada) -> None:
    """The masked-diffusion objective has one input row per mask draw: after the shared
    layers, gate row ``j`` continues draw ``j % rows`` (a gathered expansion)."""
    lm = tiny_llada
    obj = diffusion_objective(
        lm.tokenizer, lm.mask_token_id, PROMPT, COMPLETION, sample_id="d", n_draws=3, seed=1
    )
    assert obj.rows == 3 and not torch.equal(obj.input_ids[0], obj.input_ids[1])
    f = GateFunction(lm, obj)
    alpha = random_gates(f.shape, 4, 1, seed=3, prefix=0.25)
    full = alpha.clone().requires_grad_(True)
    shared = alpha.clone().requires_grad_(True)
    y_full, y_shared = f(full), f(shared, shared_below=1)
    close(y_shared, y_full, lm, "values")
    (g_full,) = torch.autograd.grad(y_full.sum(), full)
    (g_shared,) = torch.autograd.grad(y_shared.sum(), shared)
    close(g_shared[:, 1:], g_full[:, 1:], lm, "gradients")


def test_rows_that_differ_below_the_shared_layers_are_refused(tiny_f) -> None:
    alpha = random_gates(tiny_f.shape, 3, 0)
    with pytest.raises(ValueError, match="differ below layer 1"):
        tiny_f(alpha, shared_below=1)
    with pytest.raises(ValueError, match="shared_below"):
        tiny_f(alpha, shared_below=tiny_f.shape[0])


def test_shared_layers_and_first_moving_layer_against_loops() -> None:
    gen = torch.Generator().manual_seed(0)
    for trial in range(50):
        rows, layers, heads = 4, 6, 3
        alpha = torch.ones(rows, layers, heads)
        first_diff = int(torch.randint(0, layers + 1, (1,), generator=gen))
        if first_diff < layers:
            alpha[1, first_diff, int(torch.randint(0, heads, (1,), generator=gen))] = 0.3
        needed = int(torch.randint(0, layers + 1, (1,), generator=gen))
        want = 0
        while want < layers - 1 and want < needed and want < first_diff:
            want += 1
        assert shared_layers(alpha, needed) == want, trial
    velocity = torch.zeros(5, 4, 2)
    velocity[0, 2, 1] = 1.0
    velocity[1, 0, 0] = -0.5
    velocity[2, 3] = 2.0
    velocity[4, 1:] = 1.0
    expected = []
    for row in velocity:
        moving = [layer for layer in range(4) if bool((row[layer] != 0).any())]
        expected.append(moving[0] if moving else 4)
    assert first_moving_layer(velocity).tolist() == expected == [2, 0, 3, 4, 1]


def test_per_layer_ig_equals_the_full_pass_and_does_less_work(tiny_f) -> None:
    lm = tiny_f.lm
    layers, steps, batch = tiny_f.shape[0], 4, 6
    seen, handles = layer_rows(lm)
    try:
        shared = per_layer_ig(tiny_f, n_steps=steps, internal_batch_size=batch, completeness=False)
        work_shared = list(seen)
        seen[:] = [0] * layers
        full = per_layer_ig(
            Plain(tiny_f), n_steps=steps, internal_batch_size=batch, completeness=False
        )
        work_full = list(seen)
    finally:
        for h in handles:
            h.remove()
    close(shared.attributions, full.attributions, lm, "attributions")
    zero = np.zeros_like(full.attributions)  # far from zero: the comparison is not vacuous
    depth, scale = depth_of(lm), scale_of(full.attributions)
    assert_beyond_rounding(full.attributions, zero, depth=depth, scale=scale, msg="size")
    # expected work, from the chunking alone: rows sorted by moving layer, chunks of `batch`;
    # a chunk whose lowest moving layer is k runs layers < k for one row, the rest per row
    moving = np.repeat(np.arange(layers), steps)
    expected = [0] * layers
    for start in range(0, moving.size, batch):
        chunk = moving[start : start + batch]
        k = min(int(chunk.min()), layers - 1)
        for layer in range(layers):
            expected[layer] += 1 if layer < k else chunk.size
    assert work_shared == expected
    assert work_full == [layers * steps] * layers
    assert sum(work_shared) < sum(work_full)


def test_joint_ig_is_untouched(tiny_f) -> None:
    """The joint path moves every layer: nothing is shared, the result is the plain one."""
    a = joint_ig(tiny_f, n_steps=4, completeness=False).attributions
    b = joint_ig(Plain(tiny_f), n_steps=4, completeness=False).attributions
    np.testing.assert_array_equal(a, b)


def test_gradients_without_needed_layers_are_full(tiny_f) -> None:
    alpha = random_gates(tiny_f.shape, 3, 0, seed=5)
    g = gradients(tiny_f, alpha)
    assert torch.all(g.abs().sum(dim=(0, 2)) > 0)  # every layer has a gradient


def test_gate_limited_to_layers(tiny_llama) -> None:
    """``Gate(alpha, layers=...)`` gates only those layers: equal to a full gate that is 1
    elsewhere, different from gating every layer."""
    eng = Engine.of(tiny_llama)
    ids = nll_objective(tiny_llama.tokenizer, PROMPT, COMPLETION, sample_id="g").input_ids
    alpha = torch.full((tiny_llama.n_layers, tiny_llama.n_heads), 0.3)
    only = torch.ones_like(alpha)
    only[1] = alpha[1]
    with torch.no_grad():
        limited = eng.run(ids, [Gate(alpha, layers=[1])]).logits
        explicit = eng.run(ids, [Gate(only)]).logits
        everywhere = eng.run(ids, [Gate(alpha)]).logits
    torch.testing.assert_close(limited, explicit, atol=0, rtol=0)
    depth, scale = depth_of(tiny_llama), scale_of(explicit)
    assert_beyond_rounding(limited, everywhere, depth=depth, scale=scale, msg="other layers")
    with pytest.raises(Exception, match="layer"):
        eng.run(ids, [Gate(alpha, layers=[tiny_llama.n_layers])])


def test_evaluation_without_gradients_shares_the_rows_common_bottom_layers(tiny_f) -> None:
    """Forward-only rows that agree below layer 2 run layers 0 and 1 once, with the same
    values as row-by-row passes; rows that differ at layer 0 share nothing."""
    lm, layers = tiny_f.lm, tiny_f.shape[0]
    agree = random_gates(tiny_f.shape, 4, 2, seed=7, prefix=0.7)
    differ = random_gates(tiny_f.shape, 4, 0, seed=8)
    seen, handles = layer_rows(lm)
    try:
        with torch.no_grad():
            shared = tiny_f(agree)
            work_agree = list(seen)
            seen[:] = [0] * layers
            tiny_f(differ)
            work_differ = list(seen)
            one_by_one = torch.cat([tiny_f(agree[i : i + 1]) for i in range(4)])
    finally:
        for h in handles:
            h.remove()
    close(shared, one_by_one, lm, "shared rows vs one by one")
    assert work_agree == [1, 1] + [4] * (layers - 2)
    assert work_differ == [4] * layers
