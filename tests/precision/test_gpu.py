"""Every workflow on CUDA, in bf16 and fp32, against the same model in fp32 on the CPU.

Run by ``make test-gpu`` (marker ``gpu``); without a CUDA device every test skips and
says so. The model and inputs are those of ``test_workflows_bf16.py`` (stories260K), and
so are the checks; only the unit roundoff ``u`` of the forward differs:

- **bf16 on CUDA**: ``u = U = 2^-8``, the bounds of ``test_workflows_bf16.py`` as they
  are (its module docstring derives them). cuBLAS and the fused attention kernels
  accumulate in fp32, like the CPU kernels, so the bf16 roundings of the stored
  activations are still the whole error budget.
- **fp32 on CUDA**: the CPU and the GPU compute the same fp32 products in another order.
  A sum of ``K`` terms reordered moves by ``≈ √K · 2^-24`` of its size (``K ≤ 2,048``
  here: ``≈ 3e-6``); over the ``2L = 10`` sublayer adds a random walk of those reaches
  ``≈ 1e-5`` of the residual stream. ``u = U32 = 2^-16 ≈ 1.5e-5`` covers it. TF32 is off
  (PyTorch's default for fp32 matmuls); with it on, matmuls round inputs to 10 bits and
  these bounds fail, as they should.

Each test also checks that the result with its axes mixed up fails the same check.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from precision_helpers import (
    TRACE_TEXT,
    consistency_numbers,
    ig_numbers,
    ioi_pairs,
    lens_numbers,
    patching_numbers,
    receiver_numbers,
    suppression_numbers,
)
from test_workflows_bf16 import (
    U,
    attribution_ok,
    divergence_bound,
    kurtosis_sensitivity,
    logit_ok,
    logit_scale,
)

from mechscope.models import LoadedModel, load_model

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(),
        reason="no CUDA device (these run with make test-gpu on a machine with one)",
    ),
]

U32 = 2.0**-16
UNIT = {"float32": U32, "bfloat16": U}


@pytest.fixture(scope="module")
def cpu_fp32(stories_path) -> LoadedModel:
    return load_model(str(stories_path))


@pytest.fixture(scope="module", params=["float32", "bfloat16"])
def on_gpu(request, stories_path) -> tuple[LoadedModel, float]:
    """The model on CUDA in one dtype, with that dtype's unit roundoff."""
    lm = load_model(str(stories_path), dtype=request.param, device="cuda")
    assert lm.device.type == "cuda"
    return lm, UNIT[request.param]


def test_lens(cpu_fp32, on_gpu):
    from precision_helpers import LENS_SAMPLE

    lm, u = on_gpu
    ref, got = lens_numbers(cpu_fp32), lens_numbers(lm)
    conds = LENS_SAMPLE["conditions"]
    scale = logit_scale(
        cpu_fp32, [c["prompt"] + LENS_SAMPLE["continuation"] for c in conds.values()]
    )
    assert logit_ok(got["dnll"], ref["dnll"], scale, u)
    bound = divergence_bound(ref["js"], scale, js=True, u=u)
    assert np.all(np.abs(got["js"] - ref["js"]) <= bound)
    assert not logit_ok(-got["dnll"], ref["dnll"], scale, u)  # conditions swapped


def test_patching(cpu_fp32, on_gpu):
    lm, u = on_gpu
    ref, got = patching_numbers(cpu_fp32), patching_numbers(lm)
    scale = logit_scale(cpu_fp32, [t for p in ioi_pairs() for t in (p.clean, p.corrupt)])
    for key in ("logit_diff", "clean", "corrupt"):
        assert logit_ok(got[key], ref[key], scale, u)
    assert not logit_ok(-got["logit_diff"], ref["logit_diff"], scale, u)


def test_ig(cpu_fp32, on_gpu):
    lm, u = on_gpu
    ref, got = ig_numbers(cpu_fp32), ig_numbers(lm)
    f_size = float(np.abs(ref["ends"]).max())
    for key in ("joint", "per_layer"):
        assert attribution_ok(got[key], ref[key], f_size, u)
    assert not attribution_ok(got["joint"][::-1], ref["joint"], f_size, u)  # layers reversed


def test_receivers(cpu_fp32, on_gpu):
    lm, u = on_gpu
    ref, got = receiver_numbers(cpu_fp32), receiver_numbers(lm)
    bound = 16 * u * kurtosis_sensitivity(ref["vertical"])  # [L, H]
    assert np.all(np.abs(got["kurtosis"] - ref["kurtosis"]) <= bound)
    shifted = np.roll(got["kurtosis"], 1, axis=1)
    assert not np.all(np.abs(shifted - ref["kurtosis"]) <= bound)


def test_suppression(cpu_fp32, on_gpu):
    lm, u = on_gpu
    ref, got = suppression_numbers(cpu_fp32), suppression_numbers(lm)
    scale = logit_scale(cpu_fp32, [TRACE_TEXT])
    keep = ~np.isnan(ref["token_kl"])
    bound = divergence_bound(ref["token_kl"], scale, js=False, u=u)  # [sources, seq]
    assert np.all(np.abs(got["token_kl"] - ref["token_kl"])[keep] <= bound[keep])


def test_distill_consistency(cpu_fp32, on_gpu):
    lm, u = on_gpu
    ref, got = consistency_numbers(cpu_fp32), consistency_numbers(lm)
    scale = logit_scale(cpu_fp32, [t for p in ioi_pairs() for t in (p.clean, p.corrupt)])
    assert logit_ok(got["delta"], ref["delta"], scale, u)
    assert logit_ok(got["clean"], ref["clean"], scale, u)
    assert not logit_ok(got["delta"][::-1], ref["delta"], scale, u)  # sites reversed
