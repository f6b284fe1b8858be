"""The ``lens_study`` part of ``mechscope demo``: the HumanEval tool-response study, limited.

Quick: the first task, completions capped at 160 new tokens; full: the first 8 tasks with
the study's own settings. Both keep every variant and both modes, so the section shows
every figure the full study has (quadrant figures only for quadrants that occur). A model
whose context is too short for HumanEval (the tiny test models' 512 tokens) gets a note
instead of the part.
"""

from __future__ import annotations

from rich.console import Console

from mechscope.errors import InputError
from mechscope.models.loaded import LoadedModel
from mechscope.runs import RunDir
from mechscope.studies.humaneval.config import StudyConfig
from mechscope.studies.humaneval.run import run_study
from mechscope.studies.humaneval.samples import plan_study

N_TASKS, N_TASKS_QUICK = 8, 1


def demo(run: RunDir, lm: LoadedModel, quick: bool) -> None:
    """The study on the first tasks into ``run`` (finished shards are reused on a rerun)."""
    config = StudyConfig(
        max_new_tokens=160 if quick else 384,
        n_resamples=500 if quick else 2000,
        tasks_per_batch=N_TASKS_QUICK if quick else N_TASKS,
    )
    try:
        plan = plan_study(lm, config, limit=N_TASKS_QUICK if quick else N_TASKS)
    except InputError as exc:
        if "context" not in str(exc):
            raise
        Console(stderr=True).print(f"lens_study skipped: {exc}")
        return
    run_study(run, lm, config, plan=plan)
