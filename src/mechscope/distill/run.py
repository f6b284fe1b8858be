"""The distill workflow's driver: the grid students × tasks × methods × seeds, one trial each.

The study folder is itself a run directory (its config is the study config)::

    <root>/<study name>/
      config.yaml, manifest.json
      teacher/<task>-<hash>/     the teacher's side of each task, computed once
      trials/<trial>/            one resumable run directory per trial
      shards/trials/             the claims of the trials being trained
      tables/, figures/          written by ``mechscope distill summarize``

Everything that can be checked without training is checked first (config, tasks and data
files, model specs, student tokenizers), then the teacher caches are built, then trials
run. Trials are the units of :func:`~mechscope.runs.shared_work.claimed_loop`: each is
claimed before it is trained, so the workers of ``--executor local|ray``
(:mod:`mechscope.runs.executor`, started once the teacher caches exist) and this process
share the grid, and every trial is trained once; a worker killed mid-trial leaves its
claim, which is taken over, and the trial resumes from its checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pandas as pd

from mechscope.distill.config import StudyConfig
from mechscope.distill.result import DistillResult
from mechscope.distill.samples import check_task
from mechscope.distill.students import check_model_spec, check_student_fits, check_student_spec
from mechscope.distill.teacher_cache import prepare_teacher_task
from mechscope.distill.trial import NOT_IDENTITY, Trial, is_finished_dir, read_trial, run_trial
from mechscope.errors import InputError
from mechscope.models import LoadedModel, load_model
from mechscope.runs import RunDir, ShardStore
from mechscope.runs.executor import shared_work_done
from mechscope.runs.options import ExecutorOptions
from mechscope.runs.shared_work import claimed_loop

TrialDone = Callable[[Trial, pd.DataFrame], None]
#: The shard part whose folder holds the trials' claims.
PART = "trials"


def expand_trials(cfg: StudyConfig) -> list[Trial]:
    """Every trial of the grid, tasks and students outermost (teacher caches stay warm), then
    seeds, then methods in the config's order: a study stopped part-way has every method
    at its first seeds rather than every seed of its first methods."""
    return [
        Trial(s, t, v.label, seed, base=v.method, loss=v.loss)
        for t in cfg.tasks
        for s in cfg.students
        for seed in cfg.seeds
        for v in cfg.variants()
    ]


def validate_study(cfg: StudyConfig, teacher: LoadedModel | None = None) -> None:
    """Check everything checkable without training; raises a one-line :class:`InputError`.

    With the loaded ``teacher``, also every student against it (its layers, its shape, a
    pretrained student's tokenizer): what building the students would refuse. ``distill
    check`` and :func:`run_study` both call it with the teacher, so they refuse the same.
    """
    check_model_spec(cfg.teacher, field="teacher")
    names = [s.name for s in cfg.students]
    if len(set(names)) != len(names):
        raise InputError(f"expected distinct student names, got {names}", field="students")
    tasks = [t.name for t in cfg.tasks]
    if len(set(tasks)) != len(tasks):
        raise InputError(f"expected each task once, got {tasks}", field="tasks")
    for task in cfg.tasks:
        check_task(task)
    for student in cfg.students:
        check_student_spec(student)
        if cfg.checkpoints.mapping == "kept" and student.kind != "layer_subset":
            raise InputError(
                f"expected only layer_subset students with mapping 'kept', got {student.kind!r}",
                sample=f"students.{student.name}",
                field="checkpoints.mapping",
            )
    if teacher is not None:
        for student in cfg.students:
            check_student_fits(student, teacher)


def load_teacher(cfg: StudyConfig) -> LoadedModel:
    """The study's teacher, loaded as its trials use it."""
    return load_model(cfg.teacher, dtype=cfg.teacher_dtype, device=cfg.train.device)


def open_study(cfg: StudyConfig, root: Path | str) -> RunDir:
    """Create (or resume) the study's run directory under ``root``."""
    identity = cfg.model_dump(mode="json", exclude={"train": NOT_IDENTITY})
    return RunDir.create(Path(root), cfg.name, config=identity, model_spec=cfg.teacher)


def run_study(
    cfg: StudyConfig,
    root: Path | str,
    *,
    teacher: LoadedModel | None = None,
    on_trial: TrialDone | None = None,
    ex: ExecutorOptions | None = None,
) -> DistillResult:
    """Validate, build the teacher caches, run every trial; returns the finished trials.

    ``ex`` (default: this process only) starts workers of the same command line for the
    trials (:mod:`mechscope.runs.executor`). ``on_trial`` sees every trial's metrics row:
    trials this process trained as they finish, the others (finished before, or by a
    worker) once all are done. A worker leaves closing the study to its command.
    """
    ex = ex if ex is not None else ExecutorOptions()
    ex.check()
    validate_study(cfg)  # what needs no model, before loading one
    teacher = teacher if teacher is not None else load_teacher(cfg)
    validate_study(cfg, teacher)
    study = open_study(cfg, root)
    with study.timed("teacher"):
        for task in cfg.tasks:
            prepare_teacher_task(
                teacher, task, cfg.checkpoints, cfg.eval, cache_root=study.path / "teacher"
            )
    trials = [] if cfg.teacher_only else expand_trials(cfg)
    reported: set[str] = set()

    def one(trial: Trial) -> None:
        df = run_trial(cfg, trial, study.path, teacher=teacher)
        reported.add(trial.name)
        if on_trial is not None:
            on_trial(trial, df)

    def done(trial: Trial) -> bool:
        return is_finished_dir(study.path / "trials" / trial.name)

    if all(done(t) for t in trials):  # no worker loads a teacher for a finished study
        ex = replace(ex, workers=0)
    with study.timed("trials"), ex.alongside(units=len(trials)):
        claimed_loop(ShardStore(study, PART), trials, lambda t: t.name, done, one)
        shared_work_done()  # a worker ends here: this command reads and summarizes
    rows = []
    for trial in trials:  # every worker has ended: the trials' folders are settled
        df = read_trial(cfg, trial, study.path)
        if on_trial is not None and trial.name not in reported:
            on_trial(trial, df)
        rows.append(df)
    study.finish()
    trials_df = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()
    return DistillResult(trials_df, study.path)
