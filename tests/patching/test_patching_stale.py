"""A rerun recomputes exactly the pairs whose content changed under the same id."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest
from patching_reference import assert_results_close, ioi_like, logit_scale

from mechscope.models import load_model
from mechscope.patching import PatchSpec, run_patching
from mechscope.patching import run as driver
from mechscope.runs import RunDir, ShardStore


@pytest.fixture(scope="module")
def lm():
    return load_model("tiny:llama")


def spy(monkeypatch) -> tuple[list[str], list[str]]:
    """(pairs handed to a forward, shards written) during the calls that follow."""
    computed: list[str] = []
    written: list[str] = []
    real_group, real_write = driver.patch_group, ShardStore.write
    monkeypatch.setattr(
        driver,
        "patch_group",
        lambda lm_, g, s: computed.extend(p.id for p in g) or real_group(lm_, g, s),
    )

    def write(self, sample_id, payload, key=None):
        written.append(sample_id)
        return real_write(self, sample_id, payload, key)

    monkeypatch.setattr(ShardStore, "write", write)
    return computed, written


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
    computed, written = spy(monkeypatch)
    resumed = run_patching(RunDir.create(tmp_path, "r", config), lm, edited, spec)
    assert written == ["p1"]  # p1's group runs as in a fresh run; only p1 is replaced
    fresh = run_patching(RunDir.create(tmp_path, "fresh", config), lm, edited, spec)
    # p0 is kept from the first run, where its batch neighbour was the unedited p1: fp32
    # batch roundoff against the fresh run (~3e-8 measured); p1 is bit-identical
    assert_results_close(resumed, fresh, lm, logit_scale(lm, edited))
    p1 = lambda r: r.to_frame().query("pair == 'p1'")  # noqa: E731
    pd.testing.assert_frame_equal(p1(resumed), p1(fresh))
    assert not resumed.to_frame().equals(  # the edit changed p1's numbers
        run_patching(RunDir.create(tmp_path, "old", config), lm, pairs, spec).to_frame()
    )
    computed.clear(), written.clear()
    run_patching(RunDir.create(tmp_path, "r", config), lm, edited, spec)  # nothing changed
    assert computed == [] and written == []


def test_a_group_cut_short_is_rerun_whole_and_matches_exactly(lm, tmp_path, monkeypatch):
    """A kill between two shard writes of one group: the resumed run batches the missing pair
    with the same neighbours, so its numbers are bit-identical to an uninterrupted run's."""
    spec = PatchSpec(site="resid_pre", granularity="position")
    config = {"spec": spec.model_dump(mode="json")}
    pairs = [
        ioi_like(f"p{i}", io, s, io, "store")
        for i, (io, s) in enumerate([("Mary", "John"), ("John", "Mary"), ("Mary", "John")])
    ]
    monkeypatch.setattr(driver, "group_size", lambda *_a: 3)
    whole = run_patching(RunDir.create(tmp_path, "whole", config), lm, pairs, spec)
    run = RunDir.create(tmp_path, "cut", config)
    run_patching(run, lm, pairs, spec)
    store = ShardStore(run, "patching")
    (store.dir / "p1.json").unlink()  # as if killed after writing p0
    computed, written = spy(monkeypatch)
    resumed = run_patching(RunDir.create(tmp_path, "cut", config), lm, pairs, spec)
    assert computed == ["p0", "p1", "p2"] and written == ["p1"]
    pd.testing.assert_frame_equal(resumed.to_frame(), whole.to_frame())  # exact
