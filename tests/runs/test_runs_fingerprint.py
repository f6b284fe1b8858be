"""Weights fingerprint: sensitive to names, shapes, dtypes and sampled values."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from mechscope.runs import weights_fingerprint

SHARED = Path(__file__).resolve().parents[3] / "shared"
TINY = SHARED / "models" / "stories260K"


def _weights() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "small.weight": torch.randn(4, 3, generator=g),  # 48 bytes: hashed in full
        "big.weight": torch.randn(1000, 100, generator=g),  # 400 kB: sampled
    }


def test_deterministic_and_order_free():
    w = _weights()
    fp = weights_fingerprint(w)
    assert len(fp) == 64 and int(fp, 16) >= 0
    assert weights_fingerprint(dict(reversed(list(w.items())))) == fp
    assert weights_fingerprint({k: v.clone() for k, v in w.items()}) == fp


def test_any_change_in_a_small_tensor_changes_it():
    w = _weights()
    fp = weights_fingerprint(w)
    for idx in [(0, 0), (2, 1), (3, 2)]:
        changed = {k: v.clone() for k, v in w.items()}
        changed["small.weight"][idx] += 1e-3
        assert weights_fingerprint(changed) != fp


def test_sampled_elements_of_a_large_tensor_are_seen_and_others_need_full_mode():
    w = _weights()
    n_bytes = 4096  # 1024 float32 elements of 100,000: indices k * 99999 // 1023
    fp = weights_fingerprint(w, n_bytes)
    flat_first_last_and_sampled = [0, 99_999, 7 * 99_999 // 1023]
    for flat_idx in flat_first_last_and_sampled:
        changed = {k: v.clone() for k, v in w.items()}
        changed["big.weight"].view(-1)[flat_idx] += 1.0
        assert weights_fingerprint(changed, n_bytes) != fp
    # Element 1 lies between samples 0 and 97: the documented blind spot of a sample ...
    changed = {k: v.clone() for k, v in w.items()}
    changed["big.weight"].view(-1)[1] += 1.0
    assert weights_fingerprint(changed, n_bytes) == fp
    # ... which the full hash closes.
    assert weights_fingerprint(changed, None) != weights_fingerprint(w, None)


def test_names_shapes_and_dtypes_count():
    w = _weights()
    fp = weights_fingerprint(w)
    assert weights_fingerprint({"renamed": w["small.weight"], "big.weight": w["big.weight"]}) != fp
    reshaped = {"small.weight": w["small.weight"].reshape(3, 4), "big.weight": w["big.weight"]}
    assert weights_fingerprint(reshaped) != fp
    as_bf16 = {k: v.to(torch.bfloat16) for k, v in w.items()}
    assert weights_fingerprint(as_bf16) != fp


def test_numpy_and_torch_inputs_agree():
    w = _weights()
    as_numpy = {k: v.numpy() for k, v in w.items()}
    assert weights_fingerprint(as_numpy) == weights_fingerprint(w)
    assert weights_fingerprint(as_numpy, None) == weights_fingerprint(w, None)
    assert weights_fingerprint({"x": np.zeros(3)}) != weights_fingerprint({"x": np.zeros(4)})


def test_module_and_its_state_dict_agree():
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    assert weights_fingerprint(model) == weights_fingerprint(model.state_dict())
    with pytest.raises(ValueError):
        weights_fingerprint(model, 0)


@pytest.mark.slow
@pytest.mark.skipif(not TINY.is_dir(), reason=f"shared tiny model not found at {TINY}")
def test_real_model_one_weight_changes_it():
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(TINY, local_files_only=True)
    fp = weights_fingerprint(model)
    assert weights_fingerprint(model) == fp
    name, param = next(iter(model.named_parameters()))
    with torch.no_grad():
        param.view(-1)[0] += 0.5  # first element: always in the sample
    assert weights_fingerprint(model) != fp, name
