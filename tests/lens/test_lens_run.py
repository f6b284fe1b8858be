"""End to end on the tiny model: shards, resume, tables, report section."""

from __future__ import annotations

import numpy as np
import pytest
from lens_helpers import sample_record

from mechscope.errors import InputError
from mechscope.lens.config import DiffConfig, parse_contrast
from mechscope.lens.layout import TABLES
from mechscope.lens.report import lens_section
from mechscope.lens.run import run_diff
from mechscope.lens.samples import parse_sample
from mechscope.report import FigureBlock, FindingBlock, walk
from mechscope.runs import RunDir, ShardStore, read_table
from tolerance import assert_rounding_close, scale_of


def _samples():
    recs = [sample_record(f"s{i}") for i in range(6)]
    for i, r in enumerate(recs):
        r["group"] = "G10" if i < 3 else "G01"
        r["continuation"] = f"def f{i}(x):\n    return x + {i}\n"
    return [parse_sample(r, "t") for r in recs]


def test_run_writes_tables_and_resumes_identically(tiny, tmp_path):
    config = DiffConfig(contrast=("a", "b"), n_resamples=100, n_bins=5, group_diff=("G10", "G01"))
    run = RunDir.create(tmp_path, "r", config)
    samples = _samples()
    first = run_diff(run, tiny, [samples[i] for i in (0, 1, 3, 4)], config, progress=False)
    assert len(ShardStore(run, "lens_diff")) == 4
    full = run_diff(run, tiny, samples, config, progress=False)  # resumes s0, s1, s3, s4
    again = run_diff(run, tiny, _samples(), config, progress=False)
    np.testing.assert_array_equal(first.samples[0].metrics, full.samples[0].metrics)
    for a, b in zip(full.samples, again.samples, strict=True):
        np.testing.assert_array_equal(a.metrics, b.metrics)
        np.testing.assert_array_equal(a.attention["a"], b.attention["a"])
    tokens = read_table(run, TABLES["tokens"])
    assert set(tokens.metric) == {"nll_a", "nll_b", "dnll", "js", "kl_ab", "kl_ba"}
    assert len(tokens) == sum(6 * tiny.n_layers * len(s.tokens) for s in full.samples)
    dnll = tokens[tokens.metric == "dnll"].value.to_numpy()
    nll_a = tokens[tokens.metric == "nll_a"].value.to_numpy()
    nll_b = tokens[tokens.metric == "nll_b"].value.to_numpy()
    scale = scale_of(nll_a, nll_b)  # the same fp32 numbers subtracted: one rounding
    assert_rounding_close(dnll, nll_a - nll_b, depth=1, scale=scale, msg="dnll")
    curves = read_table(run, TABLES["curves"])
    assert {"all", "G10", "G01", "G10 - G01"} <= set(curves.group)
    for key in ("aligned", "attention", "correlation", "samples", "classes"):
        assert not read_table(run, TABLES[key]).empty


def test_report_section_builds_figures(tiny, tmp_path):
    config = DiffConfig(contrast=("a", "b"), n_resamples=50, n_bins=5)
    run = RunDir.create(tmp_path, "r", config)
    run_diff(run, tiny, _samples()[:3], config, progress=False)
    blocks = lens_section(run)
    assert isinstance(blocks[0], FindingBlock) and isinstance(blocks[1], FigureBlock)
    figures = [b for b in walk(blocks) if isinstance(b, FigureBlock)]
    assert len(figures) >= 6
    for block in figures:
        block.figure.to_plotly()


def test_parse_contrast():
    assert parse_contrast("a-b") == ("a", "b")
    assert parse_contrast("tool-x-plain", ["tool-x", "plain"]) == ("tool-x", "plain")
    with pytest.raises(InputError, match="A-B"):
        parse_contrast("abc")


@pytest.mark.slow
def test_cli_end_to_end(tmp_path):
    """Both commands from the command line, reports included (static figures: slow)."""
    import json

    from mechscope.cli.errors import run_app
    from mechscope.lens.cli import app

    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(sample_record(f"s{i}")) + "\n" for i in range(2)))
    out = tmp_path / "runs" / "r"
    run_app(
        app,
        [
            "diff",
            str(path),
            "--contrast",
            "a-b",
            "--out",
            str(out),
            "--model",
            "tiny:llama",
            "--resamples",
            "50",
            "--bins",
            "4",
        ],
    )
    assert (out / "report.html").is_file()
    assert "<th>status</th><td>finished</td>" in (out / "report.html").read_text()
    assert len(ShardStore(RunDir.open(out), "lens_diff")) == 2
    cands = tmp_path / "c.jsonl"
    cands.write_text(
        json.dumps(
            {
                "id": "e1",
                "prompt": "The speaker sounds",
                "candidates": ["happy", "sad"],
                "semantic_label": "happy",
                "prosody_label": "sad",
            }
        )
        + "\n"
    )
    with pytest.warns(UserWarning, match="not a single token"):
        run_app(
            app,
            [
                "candidates",
                str(cands),
                "--out",
                str(tmp_path / "runs" / "c"),
                "--model",
                "tiny:llama",
                "--resamples",
                "50",
            ],
        )
        curves = read_table(RunDir.open(tmp_path / "runs" / "c"), "lens_candidates_curves")
        assert set(curves.metric) >= {"win_a", "win_b", "margin"}
