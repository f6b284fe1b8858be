"""A tiny study with loss-weight variants and gradient logging, end to end: trial names and
weights, the logged steps, the sweep, gradient and robustness tables, figures, report."""

from __future__ import annotations

import numpy as np
import pytest

from mechscope.distill.config import parse_study_config
from mechscope.distill.report import distill_section
from mechscope.distill.run import expand_trials, run_study
from mechscope.distill.summarize import summarize_study
from mechscope.runs import RunDir, has_table, read_table
from tolerance import assert_fp64_close, assert_rounding_close, pass_depth

VARIANT = {"method": "rcid", "lambda_method": 0.1}


@pytest.fixture(scope="module")
def sweep_study(tmp_path_factory, teacher, tiny_raw):
    raw = tiny_raw(
        seeds=[0, 1],
        methods=["standard_kd", "rcid", VARIANT],
        students=[tiny_raw()["students"][1]],
        train={"steps": 4, "batch_size": 4, "checkpoint_every": 2, "grad_log_every": 2},
    )
    cfg = parse_study_config(raw)
    return cfg, run_study(cfg, tmp_path_factory.mktemp("sweep"), teacher=teacher)


def test_variants_are_trials_of_their_own(sweep_study):
    cfg, study = sweep_study
    names = [t.name for t in expand_trials(cfg)]
    assert names[:3] == ["nar-ioi-standard_kd-s0", "nar-ioi-rcid-s0", "nar-ioi-rcid-lm0.1-s0"]
    rows = study.trials.set_index("trial")
    assert rows.loc["nar-ioi-rcid-lm0.1-s1", "lambda_method"] == 0.1
    assert rows.loc["nar-ioi-rcid-lm0.1-s1", "base_method"] == "rcid"
    assert rows.loc["nar-ioi-rcid-s1", "lambda_method"] == 1.0
    folder = study.path / "trials" / "nar-ioi-rcid-lm0.1-s0"
    assert RunDir.open(folder).config["loss"]["lambda_method"] == 0.1


def test_gradients_logged_on_the_scheduled_steps(sweep_study):
    _, study = sweep_study
    log = read_table(study.path / "trials" / "nar-ioi-rcid-lm0.1-s0", "train_log")
    logged = log[log["grad_norm_kl"].notna()]
    assert list(logged["step"]) == [1, 3, 4]  # steps 0 and 2 (0-based) and the last
    # the method term's gradient scales with its weight: λ 0.1 vs 1 on one batch and weights,
    # the product by 0.1 rounded at every node of the student's backward pass
    full = read_table(study.path / "trials" / "nar-ioi-rcid-s0", "train_log")
    got, want = logged["grad_norm_method"].iloc[0], 0.1 * full["grad_norm_method"].iloc[0]
    n_layers = int(study.trials.set_index("trial").loc["nar-ioi-rcid-s0", "student_layers"])
    depth = 2 * pass_depth(n_layers)  # forward and back
    assert_rounding_close(got, want, depth=depth, msg="λ-scaled gradient norm")
    row = study.trials.set_index("trial").loc["nar-ioi-rcid-s0"]
    assert np.isfinite(row["grad_cos_mean"]) and row["grad_ratio_median"] > 0


def test_summary_has_the_sweep_gradients_and_robustness(sweep_study):
    _, study = sweep_study
    _, md = summarize_study(study.path)
    run = RunDir.open(study.path)
    for name in ("distill_sweep", "distill_gradients", "distill_robustness"):
        assert has_table(run, name), name
    sweep = read_table(run, "distill_sweep")
    assert list(sweep["method"]) == ["standard_kd", "rcid-lm0.1", "rcid"]
    contrasts = read_table(run, "distill_contrasts")
    assert ((contrasts["method"] == "rcid-lm0.1") & (contrasts["reference"] == "standard_kd")).any()
    # the trials kept their per-pair results: accuracy and consistency differences get the
    # seed × pair interval, every tested contrast its adjusted p-values
    paired = contrasts[contrasts["metric"].isin(["accuracy", "consistency"])]
    assert (
        np.isfinite(paired["boot_low"]).all() and (paired["boot_low"] <= paired["boot_high"]).all()
    )
    tested = contrasts[contrasts["p_value"].notna()]
    assert (tested["p_holm"] >= tested["p_value"]).all() and tested["p_bh"].notna().all()
    summary = read_table(run, "distill_summary")
    assert summary["consistency_shuffled_mean"].notna().all()
    assert "mapping shuffled" in md and "p (Holm)" in md and "cluster bootstrap" in md
    assert "### Loss weights against KD" in md and "rcid-lm0.1" in md
    assert "Fisher" in md  # experiment 3's table
    figures = ("lambda-sweep", "gradient-cosine", "gradient-ratio", "gradient-adam-ratio",
               "gradient-margin-cosine", "gradient-adam-margin-cosine")  # fmt: skip
    for stem in (*figures, "consistency-vs-ood"):
        assert (run.figures_dir / f"distill-{stem}.png").is_file(), stem
    texts = " ".join(getattr(b, "content", "") for b in distill_section(run))
    assert "Loss weights" in texts and "Experiment 3" in texts


def test_margins_summarised_over_seeds(sweep_study):
    """The margin columns of the summary are the mean over seeds of the trials' own, which
    are their training logs' (the means of the logged cosines, the last logged margin); the
    teacher's test LD is one number for every method (the same pairs); the section shows
    both margin tables."""
    _, study = sweep_study
    summary, md = summarize_study(study.path)
    trials = study.trials
    for method in ("standard_kd", "rcid", "rcid-lm0.1"):
        rows = trials[trials["method"] == method]
        got = summary.set_index("method").loc[method]
        cols = ("student_ld", "teacher_ld", "train_margin_end", "margin_plateau_step")
        for col in (*cols, "margin_cos_kl_mean"):
            assert_fp64_close(got[f"{col}_mean"], rows[col].mean(), terms=len(rows), msg=col)
        for name in rows["trial"]:
            log = read_table(study.path / "trials" / name, "train_log")
            logged = log[log["grad_norm_kl"].notna()]
            row = rows.set_index("trial").loc[name]
            assert row["train_margin_end"] == logged["margin"].iloc[-1]
            want = logged["margin_cos_kl"].mean()
            assert_fp64_close(row["margin_cos_kl_mean"], want, terms=len(logged), msg=name)
    assert summary["teacher_ld_mean"].nunique() == 1 and summary["teacher_ld_mean"].iloc[0] > 0
    kd = summary.set_index("method").loc["standard_kd"]
    assert np.isnan(kd["margin_cos_method_mean_mean"])  # no method term
    assert np.isfinite(summary.set_index("method").loc["rcid", "margin_cos_method_mean_mean"])
    assert "### The task's margin" in md and "cos(−∇ method, ∇ LD)" in md
    assert "teacher LD (test)" in md


def load_docs_script():
    """``scripts/distill_docs.py`` as a module (the scripts folder is not a package)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "scripts" / "distill_docs.py"
    spec = importlib.util.spec_from_file_location("distill_docs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_script_fills_the_study_block(sweep_study, tmp_path):
    """scripts/distill_docs.py replaces only its study's block, copies the figures the page
    shows (only those), and --check then reports no difference."""
    docs_script = load_docs_script()
    _, study = sweep_study
    name = study.path.name
    page = tmp_path / "page.md"
    shown = f"![sweep](img/distill-{name}-lambda-sweep.png)\n"
    page.write_text(
        f"before\n<!-- distill: {name}: begin -->\nold\n<!-- distill: {name}: end -->\n{shown}"
    )
    img = tmp_path / "img"
    img.mkdir()
    args = [str(study.path), "--docs", str(page), "--img", str(img)]
    assert docs_script.main(args) == 0
    text = page.read_text()
    assert text.startswith("before\n") and text.endswith(f"\n{shown}") and "\nold\n" not in text
    n = len(expand_trials(sweep_study[0]))
    assert f"*{n} of {n} trials finished" in text and "rcid-lm0.1" in text
    assert (img / f"distill-{name}-lambda-sweep.png").is_file()
    assert not (img / f"distill-{name}-gradient-cosine.png").exists()  # the page does not show it
    assert docs_script.main([*args, "--check"]) == 0
    page.write_text("no block here\n")
    assert docs_script.main(args) == 2


def test_docs_script_keeps_only_the_sections_asked_for(sweep_study, tmp_path):
    """``--sections summary margins``: the block holds those two sections and no other."""
    from mechscope.distill.summarize import SECTIONS

    docs_script = load_docs_script()
    _, study = sweep_study
    name = study.path.name
    page = tmp_path / "page.md"
    page.write_text(f"<!-- distill: {name}: begin -->\n<!-- distill: {name}: end -->\n")
    args = [str(study.path), "--docs", str(page), "--img", str(tmp_path)]
    assert docs_script.main([*args, "--sections", "summary", "margins"]) == 0
    text = page.read_text()
    assert f"#### {SECTIONS['summary']}" in text and f"#### {SECTIONS['margins']}" in text
    assert all(
        f"#### {SECTIONS[k]}" not in text for k in SECTIONS if k not in ("summary", "margins")
    )
