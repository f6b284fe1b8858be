"""A study: the grid students × tasks × methods × seeds, run locally or on Ray.

The study folder is itself a run directory (its config is the study config)::

    <root>/<study name>/
      config.yaml, manifest.json
      teacher/<task>-<hash>/     the teacher's side of each task, computed once
      trials/<trial>/            one resumable run directory per trial
      tables/, figures/          written by ``mechscope distill summarize``

Everything that can be checked without training is checked first (config, tasks and data
files, model specs, student tokenizers), then the teacher caches are built, then trials
run. With Ray (``executor: ray``, or ``auto`` when ``ray`` is importable and a cluster is
configured) each trial is one task on a worker, with one GPU each where GPUs exist.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from mechscope.distill.config import StudyConfig
from mechscope.distill.students import (
    check_model_spec,
    check_student_spec,
    check_student_tokenizer,
    load_tokenizer,
)
from mechscope.distill.tasks import check_task
from mechscope.distill.teacher_cache import forget_teacher_tasks, prepare_teacher_task
from mechscope.distill.trial import Trial, is_finished_dir, run_trial
from mechscope.errors import InputError
from mechscope.models import LoadedModel, load_model
from mechscope.runs import RunDir

TrialDone = Callable[[Trial, pd.DataFrame], None]


def expand_trials(cfg: StudyConfig) -> list[Trial]:
    """Every trial of the grid, tasks and students outermost (teacher caches stay warm)."""
    return [
        Trial(s, t, m, seed)
        for t in cfg.tasks
        for s in cfg.students
        for m in cfg.methods
        for seed in cfg.seeds
    ]


def validate_study(cfg: StudyConfig, teacher_tokenizer: object | None = None) -> None:
    """Check everything checkable without training; raises a one-line :class:`InputError`."""
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
    if any(s.kind == "pretrained" for s in cfg.students):
        tok = teacher_tokenizer if teacher_tokenizer is not None else load_tokenizer(cfg.teacher)
        for student in cfg.students:
            check_student_tokenizer(student, tok)


def resolve_executor(requested: str) -> str:
    """``local`` or ``ray``; ``auto`` picks Ray only when installed and a cluster is named."""
    has_ray = importlib.util.find_spec("ray") is not None
    if requested == "ray" and not has_ray:
        raise InputError(
            "expected the 'ray' package for executor 'ray' (pip install "
            "'mechscope[ray]'), or use executor 'local'",
            field="executor",
        )
    if requested == "auto":
        return "ray" if has_ray and os.environ.get("RAY_ADDRESS") else "local"
    return requested


def open_study(cfg: StudyConfig, root: Path | str) -> RunDir:
    """Create (or resume) the study's run directory under ``root``."""
    identity = cfg.model_dump(
        mode="json",
        exclude={"executor": True, "workers": True, "train": {"device", "wandb_project"}},
    )
    return RunDir.create(Path(root), cfg.name, config=identity, model_spec=cfg.teacher)


def run_study(
    cfg: StudyConfig,
    root: Path | str,
    *,
    executor: str | None = None,
    workers: int | None = None,
    teacher: LoadedModel | None = None,
    on_trial: TrialDone | None = None,
) -> RunDir:
    """Validate, build teacher caches, run every trial; returns the study's run directory.

    ``workers`` (default ``cfg.workers``) > 1 runs local trials in that many processes
    (:mod:`mechscope.distill.workers`); finished trials are skipped before any starts.
    """
    validate_study(cfg, teacher.tokenizer if teacher is not None else None)
    mode = resolve_executor(executor or cfg.executor)
    study = open_study(cfg, root)
    own_teacher = teacher is None
    if teacher is None:
        teacher = load_model(cfg.teacher, dtype=cfg.teacher_dtype, device=cfg.train.device)
    with study.timed("teacher"):
        for task in cfg.tasks:
            prepare_teacher_task(
                teacher, task, cfg.checkpoints, cfg.eval, cache_root=study.path / "teacher"
            )
    trials = [] if cfg.teacher_only else expand_trials(cfg)
    with study.timed("trials"):
        n_workers = workers or cfg.workers
        if mode == "ray":
            _run_ray(cfg, trials, study.path, on_trial)
        elif n_workers > 1:
            if own_teacher:  # workers load their own; free the parent's copy and caches
                del teacher
                forget_teacher_tasks()
            _run_workers(cfg, trials, study.path, n_workers, on_trial)
        else:
            for trial in trials:
                df = run_trial(cfg, trial, study.path, teacher=teacher)
                if on_trial is not None:
                    on_trial(trial, df)
    study.finish()
    return study


def _run_workers(
    cfg: StudyConfig,
    trials: list[Trial],
    root: Path,
    n_workers: int,
    on_trial: TrialDone | None,
) -> None:
    """Finished trials are read back here; the rest go to worker processes."""
    from mechscope.distill.workers import run_parallel

    todo: list[tuple[int, Trial]] = []
    for i, trial in enumerate(trials):
        if is_finished_dir(root / "trials" / trial.name):
            df = run_trial(cfg, trial, root)  # reads the results back, loads no model
            if on_trial is not None:
                on_trial(trial, df)
        else:
            todo.append((i, trial))
    if not todo:
        return
    threads = max(1, (os.cpu_count() or 1) // n_workers)
    run_parallel(
        cfg,
        [t for _, t in todo],
        [i for i, _ in todo],
        root,
        min(n_workers, len(todo)),
        threads,
        on_trial,
    )


def _run_ray(cfg: StudyConfig, trials: list[Trial], root: Path, on_trial: TrialDone | None) -> None:
    import ray
    import torch

    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS"))
    gpus = 1 if torch.cuda.is_available() or ray.cluster_resources().get("GPU", 0) else 0

    @ray.remote(num_gpus=gpus, num_cpus=1, max_retries=2)
    def one(raw: dict, index: int, folder: str) -> pd.DataFrame:
        from mechscope.distill.config import StudyConfig as _Cfg
        from mechscope.distill.study import expand_trials as _expand
        from mechscope.distill.trial import run_trial as _run

        c = _Cfg.model_validate(raw)
        return _run(c, _expand(c)[index], Path(folder))

    raw = cfg.model_dump(mode="json")
    pending = {one.remote(raw, i, str(root)): t for i, t in enumerate(trials)}
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        trial = pending.pop(done[0])
        df = ray.get(done[0])  # a failed trial re-raises here (after Ray's retries)
        if on_trial is not None:
            on_trial(trial, df)
