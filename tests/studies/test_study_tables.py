"""The study's own summaries against plain numpy, and the stratified bootstrap's fallback."""

from __future__ import annotations

import numpy as np

from mechscope.lens.aggregate import AggregateOptions, ci_rows
from mechscope.lens.result import METRICS, SampleDiff
from mechscope.studies.humaneval.tables import control_rows, tool_mass
from tolerance import assert_exact, assert_fp64_close, assert_rounding_close, scale_of

OPTS = AggregateOptions(n_resamples=200, seed=0)


def _sample(rng, sid: str, group: str, with_tool: bool = True) -> SampleDiff:
    n_layers, n_tokens = 3, 7
    semantic = np.array([1, 0, 1, 1, 0, 1, 1], dtype=bool)
    metrics = rng.normal(size=(len(METRICS), n_layers, n_tokens)).astype(np.float32)
    metrics[:, :, ~semantic] = np.nan  # the study does not read whitespace tokens
    segs = (["task", "tool_response"] if with_tool else ["task"]) + ["continuation", "rest"]
    mass = rng.dirichlet(np.ones(len(segs)), size=(n_layers, 1, n_tokens)).astype(np.float32)
    return SampleDiff(
        sample_id=sid,
        group=group,
        contrast=("agentic", "assisted"),
        continuation="x" * n_tokens,
        tokens=["x"] * n_tokens,
        offsets=np.stack([np.arange(n_tokens), np.arange(n_tokens) + 1], axis=1),
        semantic=semantic,
        classes=["identifier"] * n_tokens,
        metrics=metrics,
        attention={"agentic": mass, "assisted": mass[..., [0, -2, -1]]},
        segments={"agentic": segs, "assisted": ["task", "continuation", "rest"]},
    )


def test_control_rows_are_means_of_per_task_summaries():
    rng = np.random.default_rng(0)
    samples = [_sample(rng, f"s{i}", "G00" if i % 2 else "G11") for i in range(6)]
    table = control_rows(samples, OPTS, variant="tests", mode="as_run").set_index("quantity")
    sem = samples[0].semantic
    dnll = np.stack([s.metric("dnll")[:, sem].mean(axis=1) for s in samples])  # [n, L]
    js = np.stack([s.metric("js")[:, sem].mean(axis=1) for s in samples])
    mass = [s.attention["agentic"][:, 0, sem, 1].mean() for s in samples]
    # means of float32 inputs taken in two orders: one stage of rounding at the inputs' scale
    inputs = scale_of(*(s.metrics for s in samples))
    for quantity, want, scale in [
        ("dnll_mean", dnll.mean(), inputs),
        ("dnll_final", dnll[:, -1].mean(), inputs),
        ("js_mean", js.mean(), inputs),
        ("tool_mass", np.mean(mass), 1.0),
    ]:
        got = table.loc[quantity, "mean"]
        assert_rounding_close(got, want, depth=1, scale=scale, msg=quantity)
    for q in table.index:
        assert table.loc[q, "low"] <= table.loc[q, "mean"] <= table.loc[q, "high"]
    assert (table["variant"] == "tests").all() and (table["n"] == 6).all()


def test_tool_mass_is_zero_without_a_tool_response():
    rng = np.random.default_rng(1)
    assert (tool_mass(_sample(rng, "e", "G00", with_tool=False)) == 0).all()
    s = _sample(rng, "t", "G00")
    expected = s.attention["agentic"][:, 0][:, s.semantic, 1].mean(axis=1)
    assert_rounding_close(tool_mass(s), expected, depth=1, scale=1.0, msg="mass")  # p ≤ 1


def test_singleton_strata_fall_back_to_a_plain_bootstrap():
    """A few tasks, each in its own quadrant, cannot be resampled within quadrants."""
    rng = np.random.default_rng(2)
    values = rng.normal(size=(3, 4))
    rows = ci_rows(values, OPTS, strata=["G00", "G01", "G11"])
    plain = ci_rows(values, OPTS)
    assert_fp64_close(rows["mean"].to_numpy(), values.mean(axis=0), terms=3, scale=scale_of(values))
    # the fallback is the plain bootstrap's own call: the same bounds, bit for bit
    assert_exact(rows[["low", "high"]].to_numpy(), plain[["low", "high"]].to_numpy())
    assert (rows["low"] < rows["high"]).all()
