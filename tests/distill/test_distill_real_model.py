"""Pilot checks on the real demo model (slow): SmolLM2-135M must pass the §9 validation."""

from __future__ import annotations

import pytest

from mechscope.errors import ModelSpecError


@pytest.fixture(scope="module")
def smollm():
    from mechscope.models import load_model

    try:
        return load_model("smollm2-135m")
    except ModelSpecError as exc:
        pytest.skip(f"smollm2-135m not available: {exc}")


@pytest.mark.slow
def test_pilot_passes_on_smollm2(smollm):
    from mechscope.distill.pilot import run_pilot

    checks = run_pilot(smollm, None, n_accuracy=24, n_pairs=8, min_accuracy=0.85)
    by_name = {c.name.split(" has")[0]: c for c in checks}
    assert by_name["teacher IOI accuracy"].passed, by_name["teacher IOI accuracy"].value
    assert by_name["single-token names"].passed
    assert by_name["difference norms grow with depth"].passed
    assert all(c.passed for c in checks), [(c.name, c.value) for c in checks]
