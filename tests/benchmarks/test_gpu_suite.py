"""The GPU suite cannot rot: every case runs at tiny shapes on the CPU (``--smoke``) and
agrees with its peers; a budget too small skips cases with the reason in their rows."""

from __future__ import annotations

import json
import math

import gpu_common
import gpu_suite
import pytest
import torch


def test_every_case_runs_and_agrees_at_smoke_shapes(tmp_path):
    assert gpu_suite.main(["--smoke", "--out-dir", str(tmp_path)]) == 0
    text = (tmp_path / "RESULTS-gpu.md").read_text()
    assert "(complete)" in text and "| device | CPU |" in text and "| transformers |" in text
    raw = json.loads((tmp_path / "results-gpu.json").read_text())
    assert [p["status"] for p in raw["plan"]] == ["ok"] * len(gpu_suite.PLANS)
    names = {r["bench"] for r in raw["records"]}
    assert names == {p.name for p in gpu_suite.PLANS}
    for record in raw["records"]:
        for case in record["result"]["cases"]:
            # a peer that is not installed here, or device memory on the CPU: said in the row
            assert case["agree"] or case["unavailable"], case
            if case["unavailable"]:
                assert "Error" in case["unavailable"] or "no CUDA" in case["unavailable"]


def test_a_budget_too_small_skips_every_case_with_its_reason(tmp_path):
    assert gpu_suite.main(["--device", "cpu", "--budget", "1", "--out-dir", str(tmp_path)]) == 0
    raw = json.loads((tmp_path / "results-gpu.json").read_text())
    assert {p["status"] for p in raw["plan"]} == {"skipped"}
    notes = [c["unavailable"] for r in raw["records"] for c in r["result"]["cases"]]
    assert len(notes) == len(gpu_suite.PLANS)
    assert all(n.startswith("skipped: ") and "s of the budget left" in n for n in notes)


@pytest.mark.parametrize(
    ("dtype", "k", "eps"), [(torch.float32, 32, 2.0**-23), (torch.bfloat16, 4, 2.0**-7)]
)
def test_tolerance_is_the_dtype_rounding_times_the_scale(dtype, k, eps):
    """K · eps · scale · √depth, depth the 32 layers and the head (the same product in the
    same order as mechscope.tolerance: exact)."""
    atol, words = gpu_common.tolerance(dtype, 3.0, 32)
    assert atol == k * eps * 3.0 * math.sqrt(33)
    assert "scale 3" in words and "depth 33" in words
