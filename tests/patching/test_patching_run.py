"""Run directory, resume, JSONL input, CLI, figures and the report section."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from patching_reference import ioi_like

from mechscope.cli.errors import run_app
from mechscope.patching import METRICS, PatchSpec, patch_pairs, run_patching
from mechscope.patching.cli import app
from mechscope.patching.figures import (
    attribution_scatter,
    head_heatmap,
    layer_curves,
    position_heatmap,
)
from mechscope.patching.report import patching_section
from mechscope.patching.result import PatchingResult
from mechscope.patching.samples import load_pairs_jsonl
from mechscope.report import FigureBlock, FindingBlock, walk
from mechscope.runs import RunDir, ShardStore, read_table
from mechscope.stats import curve_ci
from tolerance import assert_rounding_close


@pytest.fixture(scope="module")
def pairs():
    return [
        ioi_like(f"p{i}", io, s, io, "store")  # corrupt: S2 := IO
        for i, (io, s) in enumerate([("Mary", "John"), ("John", "Mary"), ("Mary", "John")])
    ]


def test_run_dir_tables_and_resume(lm, pairs, tmp_path):
    spec = PatchSpec(
        site="resid_pre",
        granularity="span",
        directions=("denoising", "noising"),
        attribution=True,
        spans=("S2",),
    )
    run = RunDir.create(tmp_path, "r", {"spec": spec.model_dump(mode="json")})
    first = run_patching(run, lm, pairs, spec)
    table = read_table(run, "patching")
    assert len(table) == 3 * 2 * lm.n_layers * 1
    pd.testing.assert_frame_equal(table, first.to_frame())
    assert set(read_table(run, "patching_agreement")["direction"]) == {"denoising", "noising"}
    # a resumed run reads the shards back and returns the same numbers
    again = run_patching(
        RunDir.create(tmp_path, "r", {"spec": spec.model_dump(mode="json")}), lm, pairs, spec
    )
    pd.testing.assert_frame_equal(again.to_frame(), table)
    loaded = PatchingResult.from_run(run, "patching")
    pd.testing.assert_frame_equal(loaded.to_frame(), first.to_frame())  # the run reopened
    assert {p.pair_id for p in loaded.pairs} == {p.id for p in pairs}
    by_key = {(p.pair_id, p.direction): p for p in loaded.pairs}
    for p in first.pairs:
        assert by_key[(p.pair_id, p.direction)].roles == p.roles == ["S2"]
    blocks = patching_section(run)
    assert isinstance(blocks[0], FindingBlock) and isinstance(blocks[1], FigureBlock)
    assert sum(isinstance(b, FigureBlock) for b in walk(blocks)) >= 4


def test_a_reopened_run_holds_only_the_pairs_of_its_table(lm, pairs, tmp_path):
    spec = PatchSpec(site="resid_pre", directions=("denoising",), spans=("S2",))
    run = RunDir.create(tmp_path, "r", {"spec": spec.model_dump(mode="json")})
    run_patching(run, lm, pairs, spec)
    fewer = run_patching(run, lm, pairs[:2], spec)
    assert "p2" in ShardStore(run, "patching").read_all()  # its shard stays on disk
    reopened = PatchingResult.from_run(run, "patching")
    assert [p.pair_id for p in reopened.pairs] == ["p0", "p1"]
    pd.testing.assert_frame_equal(reopened.to_frame(), fewer.to_frame())


def test_figures_are_functions_of_the_result(lm, pairs):
    spec = PatchSpec(site="resid_pre", directions=("denoising",), attribution=True)
    result = patch_pairs(lm, pairs, spec, progress=False)
    fig = position_heatmap(result, "normalized_effect")
    arr = np.stack([p.metrics["normalized_effect"][:, :, 0] for p in result.pairs])
    assert_rounding_close(fig.spec.z, arr.mean(0), depth=1, msg="mean over pairs")
    assert fig.spec.x_labels[14].startswith("14 S2")
    curve = layer_curves(result, ("flip_to_target",), units=[14], n_resamples=200)
    ci = curve_ci(
        np.stack([p.metrics["flip_to_target"][:, 14, 0] for p in result.pairs]),
        n_resamples=200,
        seed=0,
    )
    # the same bootstrap (seed 0) of the same values (one head: its mean is itself)
    np.testing.assert_array_equal(curve.spec.series[0].low, ci.low)
    np.testing.assert_array_equal(curve.spec.series[0].high, ci.high)
    sc = attribution_scatter(result)
    assert sc.spec.x.size == sum(p.attribution.numel() for p in result.pairs)
    heads = patch_pairs(lm, pairs[:2], PatchSpec(site="z", granularity="all"), progress=False)
    hm = head_heatmap(heads)
    assert hm.spec.z.shape == (lm.n_heads, lm.n_layers)


def test_jsonl_forms(tmp_path, pairs):
    p = pairs[0]
    path = tmp_path / "pairs.jsonl"
    base_form = {
        "id": "b1",
        "base": p.corrupt,
        "source": p.clean,
        "target": p.correct,
        "wrong": p.wrong,
        "base_spans": p.corrupt_spans,
        "source_spans": p.spans,
    }
    path.write_text(json.dumps(p.to_dict()) + "\n" + json.dumps(base_form) + "\n")
    a, b = load_pairs_jsonl(path)
    assert (a.clean, a.corrupt, a.spans) == (p.clean, p.corrupt, p.spans)
    assert (b.id, b.clean, b.corrupt, b.correct) == ("b1", p.clean, p.corrupt, p.correct)


def test_cli_run_and_one_line_errors(tmp_path, pairs, capsys):
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(p.to_dict()) + "\n" for p in pairs[:2]))
    out = tmp_path / "runs" / "cli"
    run_app(
        app,
        [
            "run",
            "--pairs",
            str(path),
            "--model",
            "tiny:llama",
            "--site",
            "mlp_out",
            "--granularity",
            "span",
            "--out",
            str(out),
        ],
    )
    assert len(read_table(RunDir.open(out), "patching")) == 2 * 3 * 3
    assert (out / "report.html").is_file()
    assert "<th>status</th><td>finished</td>" in (out / "report.html").read_text()
    figures = sorted(p.stem for p in (out / "figures").glob("patching*.png"))
    assert figures == [  # named by what they show, not patching-04 … -08
        "patching-denoising-delta-logit",
        "patching-denoising-flips",
        "patching-denoising-positions",
    ], figures
    capsys.readouterr()
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(pairs[0].to_dict() | {"correct": " drink"}) + "\n")
    with pytest.raises(SystemExit) as exc:
        run_app(
            app,
            [
                "run",
                "--pairs",
                str(bad),
                "--model",
                "tiny:llama",
                "--out",
                str(tmp_path / "runs" / "bad"),
            ],
        )
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "sample 'p0'" in err and "field 'correct'" in err
    with pytest.raises(SystemExit) as exc:
        run_app(
            app,
            [
                "run",
                "--task",
                "ioi",
                "--site",
                "pattern",
                "--model",
                "tiny:llama",
                "--out",
                str(tmp_path / "runs" / "bad2"),
            ],
        )
    assert exc.value.code == 2


def test_cli_metrics_choose_the_columns(tmp_path, pairs, capsys):
    """``--metrics``: the table holds those columns (with logit_diff and normalized_effect)
    and the figures those metrics can draw; an unknown name exits 2 in one line, before
    the run directory exists."""
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(p.to_dict()) + "\n" for p in pairs[:2]))
    out = tmp_path / "runs" / "few"
    args = ["run", "--pairs", str(path), "--model", "tiny:llama", "--granularity", "span"]
    run_app(app, [*args, "--metrics", "delta_logit", "--out", str(out)])
    table = read_table(RunDir.open(out), "patching")
    shown = [c for c in table.columns if c in METRICS]
    assert shown == ["logit_diff", "delta_logit", "normalized_effect"]
    figures = sorted(p.stem for p in (out / "figures").glob("patching*.png"))
    assert figures == ["patching-denoising-delta-logit", "patching-denoising-positions"]
    capsys.readouterr()
    bad = tmp_path / "runs" / "bad-metric"
    with pytest.raises(SystemExit) as exc:
        run_app(app, [*args, "--metrics", "logit_diff,recall", "--out", str(bad)])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "metrics" in err and "recall" in err
    assert not bad.exists()


def test_spec_metrics_always_hold_the_logit_difference():
    spec = PatchSpec(metrics=("kl_to_base", "target_logit"))
    assert spec.metrics == ("logit_diff", "target_logit", "kl_to_base", "normalized_effect")
    assert PatchSpec().metric_names == METRICS
    with_attr = PatchSpec(
        metrics=("delta_logit",), attribution=True, attribution_metric="target_logprob"
    )
    assert "target_logprob" in with_attr.metric_names
    with pytest.raises(ValueError, match="expected metrics among"):
        PatchSpec(metrics=("accuracy",))
