"""A rerun recomputes exactly the pairs whose content changed under the same id."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest
from patching_reference import ioi_like

from mechscope.models import load_model
from mechscope.patching import PatchSpec, run_patching, workflow
from mechscope.runs import RunDir, ShardStore


@pytest.fixture(scope="module")
def lm():
    return load_model("tiny:llama")


def test_edited_pair_is_recomputed_and_nothing_else(lm, tmp_path, monkeypatch):
    spec = PatchSpec(site="resid_pre", granularity="position")
    config = {"spec": spec.model_dump(mode="json")}
    pairs = [
        ioi_like(f"p{i}", io, s, io, "store")
        for i, (io, s) in enumerate([("Mary", "John"), ("John", "Mary")])
    ]
    run_patching(RunDir.create(tmp_path, "r", config), lm, pairs, spec)
    # the corrupt prompt of p1 edited: another place word, same token length
    edited = [
        pairs[0],
        dataclasses.replace(pairs[1], corrupt=pairs[1].corrupt.replace("store", "house")),
    ]
    computed: list[str] = []
    real = workflow.patch_group
    monkeypatch.setattr(
        workflow,
        "patch_group",
        lambda lm_, g, s: computed.extend(p.id for p in g) or real(lm_, g, s),
    )
    resumed = run_patching(RunDir.create(tmp_path, "r", config), lm, edited, spec)
    assert computed == ["p1"]
    fresh = run_patching(RunDir.create(tmp_path, "fresh", config), lm, edited, spec)
    # p1 ran alone here and beside p0 in the fresh run: fp32 batch roundoff, ~3e-8 measured
    pd.testing.assert_frame_equal(resumed.to_frame(), fresh.to_frame(), rtol=0, atol=1e-6)
    assert not resumed.to_frame().equals(  # the edit changed p1's numbers
        run_patching(RunDir.create(tmp_path, "old", config), lm, pairs, spec).to_frame()
    )
    computed.clear()
    run_patching(RunDir.create(tmp_path, "r", config), lm, edited, spec)  # nothing changed
    assert computed == []
    assert ShardStore(RunDir.open(tmp_path / "r"), "patching").done("p1")
