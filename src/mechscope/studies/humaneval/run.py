"""``run_study``: the HumanEval tool-response study from tasks to tables, resumable per task.

Steps, each with its own shards and progress bar:

1. ``lens_study`` (model): per task, one completion per arm and the paired lens of every
   (variant, mode) on the canonical solution (:mod:`mechscope.studies.humaneval.task_run`); tasks
   are processed ``tasks_per_batch`` at a time (shortest prompts first) so their
   completions decode in one batch, and each group's readout runs in a worker thread
   beside the next group's forward passes;
2. ``lens_study_tests`` (sandbox): per task, every completion's tests, and the canonical
   solution's (:mod:`mechscope.studies.humaneval.execute`);
3. tables (no model): outcomes, pass rates, quadrants, lens curves per (variant, mode),
   controls (:mod:`mechscope.studies.humaneval.tables`), written as Parquet for the report.

Every task is prepared and checked before any model work or any file is written
(:mod:`mechscope.studies.humaneval.samples`); the result is
:class:`~mechscope.studies.humaneval.result.StudyResult`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import pandas as pd

from mechscope.data.code import CodeProblem
from mechscope.engine import Engine
from mechscope.models.loaded import LoadedModel
from mechscope.progress import make_progress
from mechscope.runs import RunDir, ShardStore, run_sharded, write_table
from mechscope.studies.humaneval.arms import PreparedTask
from mechscope.studies.humaneval.config import StudyConfig
from mechscope.studies.humaneval.execute import execute_task
from mechscope.studies.humaneval.layout import PART, TABLES, TESTS_PART
from mechscope.studies.humaneval.payload import task_payload
from mechscope.studies.humaneval.result import StudyResult
from mechscope.studies.humaneval.samples import StudyPlan, plan_study
from mechscope.studies.humaneval.tables import (
    head_frame,
    lens_frames,
    mode_gap_frame,
    outcome_frame,
    pass_rate_frame,
    quadrant_frames,
    task_frame,
)
from mechscope.studies.humaneval.task_run import TaskWork, model_work


def run_model_step(
    run: RunDir, engine: Engine, tasks: Sequence[PreparedTask], config: StudyConfig, progress: bool
) -> dict[str, dict]:
    """Step 1 over all tasks, skipping finished shards; payloads in task order.

    Groups of tasks go through their forward passes and decoding in this thread while a
    worker thread reads out the previous group (unembedding, divergences) and writes its
    shards: on two cores the readout, a third of the work, costs almost no wall time.
    The worker only runs the final norm and the unembedding, which no hook touches.
    """
    store = ShardStore(run, PART)
    todo = [t for t in tasks if not store.done(t.task_id)]
    # Similar prompt lengths decode together: less left padding in each batch.
    todo.sort(key=lambda t: max(len(a.gen_ids) for a in t.arms.values()))
    bar = make_progress() if progress and todo else None
    job = None
    if bar is not None:
        bar.start()
        job = bar.add_task("lens study: generate + lens", total=len(tasks))
        bar.advance(job, len(tasks) - len(todo))

    def finish(work: TaskWork) -> None:
        store.write(work.task.task_id, task_payload(engine, work))
        if bar is not None:
            bar.advance(job)

    try:
        with ThreadPoolExecutor(max_workers=1) as worker:
            queued: list[Future] = []
            size = config.tasks_per_batch
            for start in range(0, len(todo), size):
                works = model_work(engine, todo[start : start + size], config.generation())
                for future in queued:  # the previous group is read out (errors surface)
                    future.result()
                queued = [worker.submit(finish, w) for w in works]
            for future in queued:
                future.result()
    finally:
        if bar is not None:
            bar.stop()
    return {t.task_id: store.read(t.task_id) for t in tasks}


def run_study(
    run: RunDir,
    lm: LoadedModel,
    config: StudyConfig,
    *,
    plan: StudyPlan | None = None,
    limit: int | None = None,
    jobs: int = 2,
    problems: Mapping[str, CodeProblem] | None = None,
    progress: bool = True,
) -> StudyResult:
    """All steps into ``run`` (finished shards are reused), then the tables."""
    plan = plan if plan is not None else plan_study(lm, config, limit=limit, problems=problems)
    engine = Engine.of(lm)
    payloads = run_model_step(run, engine, plan.tasks, config, progress)
    by_id = {t.task_id: t for t in plan.tasks}
    tests = {
        p["task_id"]: p
        for p in run_sharded(
            ShardStore(run, TESTS_PART),
            [(tid, payloads[tid]) for tid in payloads],
            lambda pay: execute_task(
                pay, by_id[pay["task_id"]].problem, config.gen_prefix, config.limits(), jobs
            ),
            progress=progress,
            description="lens study: tests",
        )
    }
    tables = study_tables(payloads, tests, config)
    tables["skipped"] = pd.DataFrame(plan.skipped, columns=["task", "reason"])
    tables["settings"] = settings_frame(lm, config)
    tables = {key: tables[key] for key in TABLES}  # the order StudyResult.from_run reads
    for key, df in tables.items():
        write_table(run, TABLES[key], df)
    return StudyResult(payloads, tests, tables)


def settings_frame(lm: LoadedModel, config: StudyConfig) -> pd.DataFrame:
    """What was run, as one row (the report reads it; a demo run's config is the demo's)."""
    values = config.model_dump()
    values["variants"] = ",".join(config.variants)
    return pd.DataFrame([{"model": lm.spec, **{k: str(v) for k, v in values.items()}}])


def study_tables(
    payloads: Mapping[str, dict], tests: Mapping[str, dict], config: StudyConfig
) -> dict[str, pd.DataFrame]:
    """Every table of the study from the two steps' payloads (no model)."""
    outcomes = outcome_frame(payloads, tests)
    groups, quadrants = quadrant_frames(outcomes, config.variants)
    tables = {
        "outcomes": outcomes,
        "pass_rates": pass_rate_frame(outcomes, config.confidence),
        "quadrants": quadrants,
        "groups": groups,
        "heads": head_frame(payloads, config.variants),
        "tasks": task_frame(payloads, config.variants),
        "mode_gap": mode_gap_frame(payloads, config.variants),
    }
    tables |= lens_frames(payloads, groups, config.variants, config.aggregate_options())
    return tables
