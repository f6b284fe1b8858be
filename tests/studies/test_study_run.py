"""The whole study on the tiny model, with scripted completions so every quadrant occurs:
tables, quadrant curves and their difference, resume, extending a limited run, report, CLI."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from study_helpers import more_mini_problems, solution, wrong

from mechscope.engine.generation.generate import Completion
from mechscope.errors import InputError
from mechscope.report import FigureBlock, FindingBlock, walk
from mechscope.runs import RunDir, ShardStore, read_table
from mechscope.studies.humaneval import task_run
from mechscope.studies.humaneval.config import StudyConfig
from mechscope.studies.humaneval.layout import PART, TABLES, TESTS_PART
from mechscope.studies.humaneval.report import study_section
from mechscope.studies.humaneval.result import StudyResult
from mechscope.studies.humaneval.run import run_study
from payload_checks import assert_same
from tolerance import assert_exact

#: Arms whose completion passes, per task index mod 4 (tests: G11, G10, G01, G00).
PASSING = {
    0: {"assisted", "tests", "spec"},
    1: {"tests", "spec"},
    2: {"assisted", "spec"},
    3: {"spec"},
}
CONFIG = StudyConfig(max_new_tokens=4, n_resamples=50, n_bins=5, first_k=8, tasks_per_batch=3)


def scripted(problems, calls):
    """A ``complete`` that answers from :data:`PASSING` (prompts are known by their seed)."""
    by_seed = {
        task_run.row_seed(CONFIG.seed, tid, arm): (tid, arm)
        for tid in problems
        for arm in ("assisted", "tests", "spec", "other_tests", "empty")
    }

    def decode(engine, prompts, options):
        out = []
        for prompt in prompts:
            tid, arm = by_seed[prompt.seeds[0]]
            calls.append(tid)
            good = arm in PASSING[int(tid.split("/")[1]) % 4]
            p = problems[tid]
            out.append(Completion((1, 2, 3), solution(p) if good else wrong(p), "stop_string"))
        return out

    return decode


@pytest.fixture(scope="module")
def study(tiny, tmp_path_factory):
    problems = more_mini_problems()
    calls: list[str] = []
    mp = pytest.MonkeyPatch()
    mp.setattr(task_run, "complete", scripted(problems, calls))
    run = RunDir.create(tmp_path_factory.mktemp("study"), "r", CONFIG)
    first = run_study(run, tiny, CONFIG, limit=4, problems=problems, progress=False, jobs=2)
    n_first = len(calls)
    full = run_study(run, tiny, CONFIG, problems=problems, progress=False, jobs=2)
    yield {
        "run": run,
        "first": first,
        "full": full,
        "calls": calls,
        "n_first": n_first,
        "problems": problems,
        "mp": mp,
    }
    mp.undo()


def test_quadrants_and_pass_rates_follow_the_outcomes(study):
    quads = read_table(study["run"], TABLES["quadrants"]).set_index("variant")
    assert quads.loc["tests", ["G11", "G10", "G01", "G00"]].tolist() == [2, 2, 2, 2]
    assert quads.loc["spec", ["G11", "G10", "G01", "G00"]].tolist() == [4, 4, 0, 0]
    assert quads.loc["other_tests", "G00"] == 4 and quads.loc["other_tests", "G01"] == 4
    rates = read_table(study["run"], TABLES["pass_rates"]).set_index("arm")
    assert rates.loc["canonical", "rate"] == 1.0  # the sandbox passes reference solutions
    assert rates.loc["assisted", "passed"] == 4 and rates.loc["spec", "passed"] == 8
    outcomes = read_table(study["run"], TABLES["outcomes"])
    failed = outcomes[(outcomes.arm == "empty") & ~outcomes.passed]
    assert (
        set(failed.reason) == {"assertion"} and failed.stderr.str.contains("AssertionError").all()
    )


def test_lens_curves_per_quadrant_with_the_difference(study):
    curves = read_table(study["run"], TABLES["curves"])
    for mode in task_run.MODES:
        part = curves[(curves.variant == "tests") & (curves["mode"] == mode)]
        assert {"all", "G11", "G10", "G01", "G00", "G10 - G01"} <= set(part.group)
        diff = part[(part.kind == "difference") & (part.metric == "dnll")].sort_values("layer")
        g10 = part[(part.group == "G10") & (part.metric == "dnll")].sort_values("layer")
        g01 = part[(part.group == "G01") & (part.metric == "dnll")].sort_values("layer")
        # the difference row subtracts the same two group means the group rows show
        assert_exact(diff["mean"].to_numpy(), g10["mean"].to_numpy() - g01["mean"].to_numpy())
    att = read_table(study["run"], TABLES["attention"])
    tool = att[(att.segment == "tool_response") & (att.condition == "agentic")]
    assert set(tool.variant) == {"tests", "spec", "other_tests"}  # empty has no tokens
    aligned = read_table(study["run"], TABLES["aligned"])
    assert {"all", "G11", "G10", "G01", "G00"} <= set(aligned.group)
    controls = read_table(study["run"], TABLES["controls"])
    empty = controls[(controls.variant == "empty") & (controls.quantity == "tool_mass")]
    assert (empty["mean"] == 0).all()
    assert len(controls) == 4 * 2 * 4  # variants × modes × quantities
    gap = read_table(study["run"], TABLES["mode_gap"])
    assert len(gap) == 4 * 2 and (gap["max_abs"] < 1e-3).all()  # rotary: only rounding


def test_a_limited_run_extends_and_a_rerun_resumes(study, tiny):
    problems = study["problems"]
    assert study["n_first"] == 4 * 5 and len(study["calls"]) == 8 * 5  # each row decoded once
    first, full = study["first"], study["full"]
    for tid in first.payloads:
        np.testing.assert_array_equal(
            first.payloads[tid]["tests.as_run.metrics"], full.payloads[tid]["tests.as_run.metrics"]
        )
    assert len(ShardStore(study["run"], PART)) == len(problems)
    assert len(ShardStore(study["run"], TESTS_PART)) == len(problems)
    before = read_table(study["run"], TABLES["curves"])
    study["mp"].setattr(task_run, "complete", lambda *a, **k: pytest.fail("no model work"))
    again = run_study(study["run"], tiny, CONFIG, problems=problems, progress=False)
    assert again.tables["curves"].equals(before)


def test_from_run_rebuilds_the_result_the_driver_returned(study):
    back = StudyResult.from_run(study["run"])
    assert_same(back.to_payload(), study["full"].to_payload())


def test_from_run_leaves_out_tasks_a_rerun_dropped(study, tiny, tmp_path):
    run = RunDir.open(shutil.copytree(study["run"].path, tmp_path / "r"))
    fewer = run_study(run, tiny, CONFIG, limit=4, problems=study["problems"], progress=False)
    assert len(fewer.payloads) == 4 and len(ShardStore(run, PART)) == len(study["problems"])
    assert_same(StudyResult.from_run(run).to_payload(), fewer.to_payload())


def test_test_shards_keep_programs_and_stderr(study):
    store = ShardStore(study["run"], TESTS_PART)
    shard = store.read("Mini/3")
    assert set(shard["programs"]) == {
        "assisted",
        "tests",
        "spec",
        "other_tests",
        "empty",
        "canonical",
    }
    assert shard["programs"]["tests"].endswith("check(is_even)\n")
    assert shard["results"]["tests"]["reason"] == "assertion"


def test_report_section_has_the_three_figures_per_quadrant(study):
    blocks = study_section(study["run"])
    assert isinstance(blocks[0], FindingBlock) and isinstance(blocks[1], FigureBlock)
    blocks = list(walk(blocks))
    names = [b.name for b in blocks if isinstance(b, FigureBlock)]
    for mode in ("as-run", "position-matched"):
        assert {f"lens-study-heat-{mode}-{g}" for g in ("G11", "G10", "G01", "G00")} <= set(names)
        assert {
            f"lens-study-curve-{mode}-dnll",
            f"lens-study-diff-{mode}",
            f"lens-study-mass-{mode}",
        } <= set(names)
    assert "lens-study-control-mass" in names and "lens-study-pass-rates" in names
    for block in blocks:
        if isinstance(block, FigureBlock):
            block.figure.to_plotly()


def test_bad_options_fail_before_anything_is_written(tmp_path):
    from mechscope.cli.errors import run_app
    from mechscope.cli.main import app

    out = tmp_path / "runs" / "r"
    for args in (["--variants", "spec"], ["--limit", "0"], ["--temperature", "-1"]):
        with pytest.raises(SystemExit) as exc:
            run_app(
                app, ["lens", "study", "humaneval", "--out", str(out), "-m", "tiny:llama", *args]
            )
        assert exc.value.code == 2
        assert not out.exists()
    with pytest.raises(InputError, match="variants"):
        StudyConfig.build(variants=("tests", "tests"))
