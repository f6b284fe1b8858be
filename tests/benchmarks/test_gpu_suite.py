"""The GPU suite cannot rot: every case runs at tiny shapes on the CPU (``--smoke``) and
agrees with its peers; a budget too small skips cases with the reason in their rows."""

from __future__ import annotations

import json

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
    ("dtype", "layers", "rel"),
    [(torch.float32, 32, 1e-5), (torch.bfloat16, 32, 4 * 32**0.5 / 256)],
)
def test_tolerance_is_the_dtype_rounding_times_the_scale(dtype, layers, rel):
    atol, words = gpu_common.tolerance(dtype, 3.0, layers)
    assert atol == pytest.approx(3.0 * rel)
    assert "scale 3" in words
