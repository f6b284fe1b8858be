"""A tiny study end to end: grid, teacher cache reuse, summary (mean, std and 95 % interval
over seeds), report section, CLI, shipped configs, pilot."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from typer.testing import CliRunner

from mechscope.cli.errors import run_app
from mechscope.distill.cli import app
from mechscope.distill.config import load_study_config
from mechscope.distill.method_table import summary_table
from mechscope.distill.report import distill_section
from mechscope.distill.run import expand_trials, run_study
from mechscope.distill.summarize import format_summary, summarize_study
from mechscope.runs import RunDir
from tolerance import assert_fp64_close

CONFIGS = sorted(
    (Path(__file__).resolve().parents[2] / "src" / "mechscope" / "distill" / "configs").glob(
        "*.yaml"
    )
)


@pytest.fixture(scope="module")
def tiny_study(tmp_path_factory, teacher, tiny_raw):
    from mechscope.distill.config import parse_study_config

    cfg = parse_study_config(
        tiny_raw(
            seeds=[0, 1],
            methods=["informed_fitnets"],
            students=[tiny_raw()["students"][1]],
            checkpoints={"k": 3, "mapping": "cka"},
        )
    )
    root = tmp_path_factory.mktemp("study")
    done = []
    study = run_study(cfg, root, teacher=teacher, on_trial=lambda t, df: done.append(t.name))
    return cfg, study, done


def test_grid_runs_every_trial_once(tiny_study):
    cfg, study, done = tiny_study
    assert sorted(done) == sorted(t.name for t in expand_trials(cfg))
    assert len(done) == 2
    assert len(list((study.path / "teacher").iterdir())) == 1  # one cache per task


def test_summary_mean_std_and_interval_match_scipy(tiny_study):
    _, study, _ = tiny_study
    summary, md = summarize_study(study.path)
    trials = pd.concat(
        [pd.read_parquet(p) for p in sorted(study.path.glob("trials/*/tables/metrics.parquet"))]
    )
    for _, row in summary.iterrows():
        sel = trials[(trials.method == row.method) & (trials.student == row.student)]
        # float64 sums over the seeds of values at most 1 (accuracies, correlations)
        n = len(sel)
        assert_fp64_close(row.accuracy_mean, sel.accuracy.mean(), terms=n, scale=1.0)
        want = np.std(sel.consistency, ddof=1)
        assert_fp64_close(row.consistency_std, want, terms=n, scale=1.0, msg="std")
        x = sel.consistency.to_numpy()
        half = stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x))
        got = [row.consistency_ci_low, row.consistency_ci_high]
        want = np.clip([x.mean() - half, x.mean() + half], -1, 1)  # a correlation's range
        assert_fp64_close(got, want, terms=n, scale=max(1.0, half), msg="interval")
        assert row.n_seeds == 2
    assert list(summary.method) == ["informed_fitnets"]
    assert "[" in md and "**teacher**" in md
    assert (study.path / "figures" / "distill-consistency-vs-accuracy.png").is_file()
    teacher = pd.read_parquet(study.path / "tables" / "distill_teacher.parquet")
    assert list(teacher.task) == ["ioi"] and 0 < teacher.accuracy_raw.iloc[0] <= 1


def test_report_section_blocks(tiny_study):
    _, study, _ = tiny_study
    summarize_study(study.path)
    blocks = distill_section(RunDir.open(study.path))
    kinds = [type(b).__name__ for b in blocks]
    assert kinds.count("FigureBlock") >= 1 and "TableBlock" in kinds


def test_margins_without_gradient_logging(tiny_study):
    """Without gradient logging the margins section has the test LDs only: the training
    curve's columns and the cosine table are left out, not shown empty; the report's
    summary disclosure has the same table."""
    _, study, _ = tiny_study
    summary, md = summarize_study(study.path)
    section = md[md.index("### The task's margin") :]
    assert "teacher LD (test)" in section and "student LD (test)" in section
    assert "last training batch" not in section and "cos(" not in section
    assert np.isfinite(summary["student_ld_mean"]).all()
    texts = [
        c.content
        for b in distill_section(RunDir.open(study.path))
        for c in getattr(b, "blocks", [])
        if hasattr(c, "content")
    ]
    assert any("teacher LD (test)" in t for t in texts)


def test_single_seed_has_no_interval():
    df = pd.DataFrame(
        {
            "student": "s",
            "task": "t",
            "method": "rcid",
            "seed": [0],
            "accuracy": [0.5],
            "consistency": [0.1],
            "perplexity": [3.0],
            "ood_degradation": [np.nan],
        }
    )
    s = summary_table(df)
    assert np.isnan(s.accuracy_std.iloc[0]) and np.isnan(s.accuracy_ci_low.iloc[0])
    assert "| 0.500 |" in format_summary(s) and "–" in format_summary(s)
    from mechscope.distill.figures import method_bars

    fig = method_bars(s, "accuracy", "t", "y")  # one seed: no whisker, and the caption says so
    (series,) = fig.spec.series
    assert np.isnan(series.low).all() and np.isnan(series.high).all()
    assert "n = 1 seed per bar, so no interval is drawn" in fig.caption


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_shipped_configs_validate(path):
    cfg = load_study_config(path)
    assert cfg.methods and cfg.seeds


def test_shipped_configs_present():
    stems = {p.stem for p in CONFIGS}
    assert {
        "cpu_study",
        "exp1_mechanism_preservation",
        "exp2_rcid_comparison",
        "exp3_robustness_correlation",
        "exp4_information_purity",
        "exp5_cross_architecture",
        "cpu_sweep",
        "cpu_tasks",
        "cpu_gemma",
        "cpu_long",
        "cpu_seeds",
        "gpu_study",
    } <= stems


def test_cpu_parts_and_gpu_study_grids():
    """The CPU study's three parts and the GPU study have the grids docs/distill.md sizes."""
    from mechscope.distill.config import builtin_config_path

    sizes = {
        "cpu_sweep": (42, 39),
        "cpu_tasks": (18, 15),
        "cpu_gemma": (9, 6),
        "cpu_long": (6, 6),
        "cpu_seeds": (18, 12),
        "gpu_study": (63, 54),
    }
    for name, (n, trained) in sizes.items():
        trials = expand_trials(load_study_config(builtin_config_path(name)))
        assert len(trials) == n, name
        assert sum(t.kind != "untrained" for t in trials) == trained, name


def test_cpu_seeds_shares_its_first_seeds_with_cpu_sweep():
    """cpu_seeds' trials of seeds 0-2 are cpu_sweep's, setting for setting, so they can be
    copied from a cpu_sweep study folder and a resumed cpu_seeds run trains seeds 3-5 only."""
    from mechscope.distill.config import builtin_config_path
    from mechscope.distill.trial import trial_config

    sweep = load_study_config(builtin_config_path("cpu_sweep"))
    seeds = load_study_config(builtin_config_path("cpu_seeds"))
    swept = {t.name: trial_config(sweep, t) for t in expand_trials(sweep)}
    shared = [t for t in expand_trials(seeds) if t.seed < 3]
    assert len(shared) == 9
    for t in shared:
        assert trial_config(seeds, t) == swept[t.name], t.name


def test_cli_check_reports_one_line_error(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: x\nteacher: tiny:llama\nstudents: [{name: s, kind: narrow, hidden: 8, "
        "n_layers: 1, n_heads: 1}]\ntasks: [{name: ioi}]\nmethods: [telepathy]\n"
        "seeds: [0]\n"
    )
    with pytest.raises(SystemExit) as code:
        run_app(app, ["check", str(bad)])
    assert code.value.code == 2
    output = capsys.readouterr().err
    assert "telepathy" in output and output.strip().count("\n") == 0
    listed = CliRunner().invoke(app, ["configs"])
    assert listed.exit_code == 0 and "cpu_study" in listed.output


def test_pilot_reports_each_check(teacher):
    from mechscope.distill.pilot import pilot_table, run_pilot
    from mechscope.distill.students import layer_subset_student

    names = ["Mary", "John", "trophy", "step"]
    checks = run_pilot(
        teacher,
        layer_subset_student(teacher, [0]),
        n_accuracy=12,
        n_pairs=6,
        names=names,
        min_names=3,
    )
    table = pilot_table(checks)
    assert len(table) == 5 and list(table.columns) == ["name", "passed", "value", "expected"]
    assert checks[1].passed is True and checks[1].value == "4 of 4"
    assert checks[4].passed is None  # the student's baseline is informational
    strict = run_pilot(teacher, None, n_accuracy=12, n_pairs=6, names=names, min_names=20)
    assert len(strict) == 4 and strict[1].passed is False


def test_summary_orders_methods_as_in_the_note():
    df = pd.DataFrame(
        {
            "student": "s",
            "task": "t",
            "method": ["rcid", "standard_kd", "fitnets"],
            "seed": 0,
            "accuracy": 0.5,
            "consistency": 0.1,
            "perplexity": 3.0,
            "ood_degradation": 0.0,
        }
    )
    assert list(summary_table(df).method) == ["standard_kd", "fitnets", "rcid"]
    df.loc[len(df)] = {**df.iloc[0].to_dict(), "method": "untrained"}
    assert summary_table(df).method.iloc[0] == "untrained"  # the reference first


def test_method_bars_show_mean_and_interval_over_seeds():
    from mechscope.distill.figures import method_bars

    rng = np.random.default_rng(0)
    df = pd.DataFrame(
        [
            {
                "student": s,
                "task": t,
                "method": m,
                "seed": seed,
                "accuracy": rng.uniform(),
                "consistency": rng.uniform(-1, 1),
                "perplexity": 3.0,
                "ood_degradation": 0.0,
            }
            for s in ("a", "b")
            for t in ("ioi", "facts")
            for m in ("rcid", "standard_kd")
            for seed in range(3)
        ]
    )
    fig = method_bars(summary_table(df), "accuracy", "t", "y")
    spec = fig.spec
    assert [x.name for x in spec.series] == ["standard_kd", "rcid"]  # the note's order
    for series in spec.series:
        for cat, mean, low, high in zip(
            spec.categories, series.mean, series.low, series.high, strict=True
        ):
            student, task = cat.split(" · ")
            sel = df[(df.student == student) & (df.task == task) & (df.method == series.name)]
            ci = stats.t.interval(0.95, 2, loc=sel.accuracy.mean(), scale=stats.sem(sel.accuracy))
            assert_fp64_close(mean, sel.accuracy.mean(), terms=3, scale=1.0, msg=cat)
            want = np.clip(ci, 0, 1)  # accuracy's range
            assert_fp64_close([low, high], want, terms=3, scale=1.0, msg=f"{cat} interval")


def test_no_raw_symbols_in_axis_titles(tiny_study):
    _, study, _ = tiny_study
    summarize_study(study.path)
    from mechscope.distill.figures import summary_figures
    from mechscope.distill.result import DistillResult

    for fig in summary_figures(DistillResult.from_run(RunDir.open(study.path))).values():
        for title in (fig.spec.x_title, fig.spec.y_title):
            assert "Δ_" not in title and "_T" not in title and "_S" not in title, title
