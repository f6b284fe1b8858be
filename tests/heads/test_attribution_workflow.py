"""The workflow end to end on a tiny model: tables, resume, report section, CLI, refinement."""

from __future__ import annotations

import json

import numpy as np
import pytest
from attribution_helpers import COMPLETION, PROMPT
from typer.testing import CliRunner

from mechscope.errors import InputError
from mechscope.heads.cli import app
from mechscope.heads.config import build_config
from mechscope.heads.ig import joint_ig, per_layer_ig
from mechscope.heads.prepare import prepare
from mechscope.heads.report import attribution_section, completeness_summary
from mechscope.heads.result import HeadsResult
from mechscope.heads.run import run_heads
from mechscope.heads.samples import HeadSample, load_samples
from mechscope.report import DetailsBlock, FigureBlock, FindingBlock, TableBlock
from mechscope.runs import RunDir, read_arrays, read_table
from payload_checks import assert_same
from tolerance import assert_fp64_close

SAMPLES = [
    HeadSample("s0", "ioi", PROMPT, COMPLETION, " Mary", " John"),
    HeadSample("s1", "story", "Once upon a time, there was a little girl", " named Lily"),
    HeadSample("s2", "code", "def add(a, b):\n    return", " a + b"),
]


def _cfg(**kw):
    base = dict(
        paths=["joint", "per_layer", "staggered", "random"],
        n_steps=8,
        random_paths=2,
        random_steps=16,
        prune_points=4,
        prune_by=["joint", "per_layer"],
        shapley_top=3,
        shapley_permutations=4,
    )
    return build_config(**(base | kw))


def test_run_heads_writes_everything_and_resumes(tiny_llama, tmp_path) -> None:
    cfg = _cfg()
    run = RunDir.create(tmp_path, "r", cfg)
    res = run_heads(run, tiny_llama, SAMPLES, cfg)
    arrays = read_arrays(run, "heads_attributions")
    for kind in cfg.paths:
        assert arrays[kind].shape == (3, tiny_llama.n_layers, tiny_llama.n_heads)
        np.testing.assert_array_equal(arrays[kind], res.attributions[kind])
    assert list(arrays["sample_ids"]) == ["s0", "s1", "s2"]
    # importance: mean of per-sample IG oriented so that positive helps (NLL: negated)
    want = -arrays["joint"].mean(axis=0)
    scale = float(np.abs(arrays["joint"]).max())
    assert_fp64_close(arrays["importance_joint"], want, terms=3, scale=scale, msg="importance")
    comp = read_table(run, "heads_completeness")
    assert set(comp["path"]) == set(cfg.paths)
    assert comp[comp["path"] == "joint"]["rel_delta"].max() < 0.01
    assert len(comp[comp["path"] == "per_layer"]) == 3 * tiny_llama.n_layers
    diag = read_table(run, "heads_diagnostics")
    assert {"joint", "per_layer", "gradient", "joint vs per_layer"} <= set(diag["method"])
    prune = read_table(run, "heads_pruning")
    assert {"joint/least_first", "per_layer/most_first", "random_2"} <= set(prune["order"])
    orders = read_arrays(run, "heads_pruning_orders")
    mean_abs = np.abs(arrays["joint"]).mean(axis=0).reshape(-1)  # prune_postprocess="abs"
    np.testing.assert_array_equal(orders["joint__least_first"], np.argsort(mean_abs, kind="stable"))
    shap = read_table(run, "heads_shapley")
    assert len(shap) == 2 * 3 and "ig_joint" in shap  # 2 samples x top 3 heads
    # a rerun with the same config reuses the shards and returns identical results
    again = run_heads(RunDir.create(tmp_path, "r", cfg), tiny_llama, SAMPLES, cfg)
    np.testing.assert_array_equal(again.attributions["random"], res.attributions["random"])
    # the run directory reopens as the result the driver returned
    assert_same(HeadsResult.from_run(run), res)
    blocks = attribution_section(run)
    assert isinstance(blocks[0], FindingBlock) and "per_layer IG ranks head" in blocks[0].content
    key = blocks[1]  # the lead path's map, right after the finding
    assert isinstance(key, FigureBlock) and key.figure.title == "Head importance: per_layer IG"
    assert key.figure.spec.marks is not None  # heads whose interval excludes 0 get a dot
    inside = [b for d in blocks if isinstance(d, DetailsBlock) for b in d.blocks]
    figures = [key] + [b for b in inside if isinstance(b, FigureBlock)]
    assert len(figures) >= 8 and any(isinstance(b, TableBlock) for b in blocks)
    pruning = next(f.figure for f in figures if f.name == "attribution-pruning-objective")
    assert [t for t, _ in pruning.spec.panels] == ["ranked by per_layer", "ranked by joint"]
    for block in figures:
        assert block.figure.to_plotly().data  # every figure renders


def test_logit_difference_and_missing_answers(tiny_llama) -> None:
    cfg = build_config(objective="logit_diff")
    fs = prepare(tiny_llama, SAMPLES[:1], cfg)
    assert fs[0].higher_is_better
    with pytest.raises(InputError, match="sample 's1'"):
        prepare(tiny_llama, SAMPLES, cfg)
    with pytest.raises(InputError, match="mask token"):
        prepare(tiny_llama, SAMPLES, build_config(objective="diffusion"))
    with pytest.raises(InputError, match="field 'prune_by'"):
        prepare(tiny_llama, SAMPLES, build_config(prune_by=["staggered"]))


def test_config_errors_are_one_line() -> None:
    for kwargs, field in [
        (dict(baseline=1.0), "baseline"),
        (dict(n_steps=0), "n_steps"),
        (dict(paths=["diagonal"]), "paths"),
        (dict(method="simpson"), "method"),
    ]:
        with pytest.raises(InputError) as exc:
            build_config(**kwargs)
        assert f"field '{field}'" in str(exc.value) and "\n" not in str(exc.value)


def test_refinement_doubles_steps_only_where_completeness_fails(stories_f) -> None:
    coarse = joint_ig(stories_f, n_steps=2)
    assert coarse.segments.rel_delta[0] > 0.01
    fine = joint_ig(stories_f, n_steps=2, rtol=0.01, max_steps=64)
    assert fine.segments.rel_delta[0] <= 0.01 and fine.segments.n_steps[0] > 2
    plain = per_layer_ig(stories_f, n_steps=1).segments
    layers = per_layer_ig(stories_f, n_steps=1, rtol=0.02, atol=1e-3, max_steps=16).segments
    tol = np.maximum(0.02 * np.abs(layers.f_end - layers.f_start), 1e-3)
    assert np.any(np.abs(plain.delta) > tol)  # refinement had work to do
    assert np.all((np.abs(layers.delta) <= tol) | (layers.n_steps == 16))
    # each layer stops doubling as soon as it passes: the step counts differ between layers
    assert len(set(layers.n_steps.tolist())) > 1


def test_load_samples_and_bad_files(tmp_path) -> None:
    good = tmp_path / "s.jsonl"
    good.write_text(
        json.dumps({"id": "a", "prompt": "Hi", "completion": " there"})
        + "\n"
        + json.dumps({"id": "b", "prompt": "Yo", "correct": " x", "wrong": " y"})
        + "\n"
    )
    items = load_samples(good)
    assert [s.completion for s in items] == [" there", " x"] and items[1].wrong == " y"
    bad = tmp_path / "b.jsonl"
    bad.write_text(json.dumps({"id": "a", "prompt": "Hi", "completion": ""}) + "\n")
    with pytest.raises(InputError, match="sample 'a': field 'completion'"):
        load_samples(bad)


def test_cli_run_and_diagnose(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("MECHSCOPE_PROGRESS", "0")
    monkeypatch.setenv("COLUMNS", "300")  # wide tables: no truncated metric names
    samples = tmp_path / "s.jsonl"
    rows = [{"id": s.id, "prompt": s.prompt, "completion": s.completion} for s in SAMPLES]
    samples.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "runs" / "cli"
    built = []  # the HTML report is the report module's job (tested there); record the call
    import mechscope.report

    def build(run):  # the report is built once the run is marked finished
        built.append((run, run.manifest["status"]))
        return "x"

    monkeypatch.setattr(mechscope.report, "build_report", build)
    runner = CliRunner()
    result = runner.invoke(
        app,
        [
            "run",
            str(samples),
            "--out",
            str(out),
            "--model",
            "tiny:llama",
            "--steps",
            "4",
            "--per-layer-steps",
            "2",
        ],
    )
    assert result.exit_code == 0, result.output
    assert len(built) == 1 and built[0][0].path == out and built[0][1] == "finished"
    summary = completeness_summary(read_table(RunDir.open(out), "heads_completeness"))
    assert set(summary["path"]) == {"per_layer"}  # the default: per-layer IG only
    result = runner.invoke(app, ["diagnose", str(out)])
    assert result.exit_code == 0 and "pairwise_pearson_mean" in result.output
    bad = runner.invoke(
        app,
        [
            "run",
            str(samples),
            "--out",
            str(tmp_path / "x"),
            "--model",
            "tiny:llama",
            "--baseline",
            "1.5",
        ],
    )
    assert bad.exit_code == 2 and "--baseline" in bad.output  # refused by the option's range
    assert not (tmp_path / "x").exists()  # nothing written before the checks


def test_per_layer_ig_ranks_and_prunes_by_default() -> None:
    import inspect

    from mechscope.heads.cli import run as run_command

    cfg = build_config()
    assert cfg.paths == ["per_layer"] and cfg.prune_by == ["per_layer"]
    assert cfg.per_layer_steps == 4  # per-layer paths are smooth; 32 nodes a layer would waste
    options = inspect.signature(run_command).parameters
    assert options["path"].default.default == ["per_layer"]
    assert options["prune_by"].default.default == ["per_layer"]
    assert build_config(paths=["joint"], prune_by=["joint"]).paths == ["joint"]  # still there


@pytest.mark.parametrize(("mode", "drawn"), [("signed", True), ("abs", False), ("relu", False)])
def test_heatmap_intervals_only_for_the_signed_mean(mode: str, drawn: bool) -> None:
    """The heatmap draws the samples' intervals where the importance is their signed mean
    (the same operations on the same numbers, so equal bit for bit), not where abs or relu
    changed some sample."""
    import pandas as pd

    from mechscope.heads.figures import attribution_figures
    from mechscope.heads.postprocess import aggregate

    x = np.random.default_rng(0).normal(size=(4, 2, 3))  # [samples, layers, heads]
    result = HeadsResult(
        sample_ids=[f"s{i}" for i in range(4)],
        tasks=["t"] * 4,
        attributions={"joint": x},
        completeness=pd.DataFrame(),
        diagnostics=pd.DataFrame(),
        higher_is_better=False,
        importance={"joint": aggregate(x, mode=mode, higher_is_better=False)},
    )
    heatmap = dict(attribution_figures(result))["attribution-heatmap-joint"]
    assert (heatmap.spec.marks is not None) == drawn
