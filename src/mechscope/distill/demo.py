"""The distill part of ``mechscope demo``: one seed of the CPU study.

Both modes take the shipped ``cpu_study`` config (a layer subset of the teacher, IOI) with
the demo's model as teacher and the study's first seed, on two processes (this one and one
worker of ``--executor local``: the demo writes its config beside the study, and the worker
runs ``mechscope distill run`` on it):

- full: the study's data sizes and steps, with the three methods its question needs
  (``untrained``, the reference; ``standard_kd``, outputs only; ``rcid``), so the demo's
  rows are one seed of the study's rows;
- ``--quick``: every method on small data with a few steps, a smoke test of the whole
  pipeline (teacher cache, effect screen, Procrustes, the four losses, consistency,
  summary and figures); its students do not learn anything.

A test model (``tiny:``, under 10 layers) keeps every second layer instead of every fifth,
and every checkpoint candidate: its patch effects are a few percent of its logit
difference, below the study's effect screen.
"""

from __future__ import annotations

from typing import Any

import yaml

from mechscope.distill.config import StudyConfig, builtin_config_path, load_study_config
from mechscope.distill.run import run_study
from mechscope.distill.summarize import summarize_study
from mechscope.models import LoadedModel
from mechscope.runs import RunDir, atomic_write_text
from mechscope.runs.executor import ARGV
from mechscope.runs.options import ExecutorOptions

DEMO_METHODS = ("untrained", "standard_kd", "rcid")
QUICK_STEPS = 4
#: Worker processes beside the demo's own: two processes, one per core of a small machine.
DEMO_WORKERS = 1
QUICK_SIZES = {"n_train": 16, "n_test": 16, "n_ood": 8}  # pairs kept per task (at most)


def quick_overrides(cfg: StudyConfig) -> dict[str, Any]:
    """1 seed, a few steps, small task sizes: a smoke-scale version of any study.

    The student is checkpointed once, at the end of training: a student's checkpoint with
    its optimizer state is a few hundred MB, as long to write as a few steps.
    """
    tasks = [
        {**t.model_dump(), **{k: min(getattr(t, k), n) for k, n in QUICK_SIZES.items()}}
        for t in cfg.tasks
    ]
    steps = min(cfg.train.steps, QUICK_STEPS)
    train = {**cfg.train.model_dump(), "steps": steps, "checkpoint_every": steps}
    students = [
        {**s.model_dump(), "steps": min(s.steps, steps) if s.steps else None} for s in cfg.students
    ]
    return {"seeds": cfg.seeds[:1], "tasks": tasks, "train": train, "students": students}


def demo_config(lm: LoadedModel, quick: bool) -> StudyConfig:
    """The demo's study for teacher ``lm`` (see the module docstring)."""
    base = load_study_config(builtin_config_path("cpu_study"))
    raw = base.model_dump(mode="json")
    raw.update(
        name="distill-demo" + ("-quick" if quick else ""),
        description="RCID demo: one seed of the CPU study" + (", quick" if quick else ""),
        teacher=lm.spec,
        seeds=base.seeds[:1],
    )
    if not quick:
        raw["methods"] = [m for m in raw["methods"] if m in DEMO_METHODS]
    if lm.spec.startswith("tiny:") or lm.n_layers < 10:  # a test model, random or nearly
        raw["students"] = [{**s, "every": 2} for s in raw["students"]]
        raw["checkpoints"]["min_effect"] = 0.0  # its patch effects are a few % of its LD
    cfg = StudyConfig.model_validate(raw)
    if quick:
        cfg = StudyConfig.model_validate({**cfg.model_dump(), **quick_overrides(cfg)})
    return cfg


def demo(run: RunDir, lm: LoadedModel, quick: bool) -> None:
    """Run the demo study under ``run/distill`` and write its summary into ``run``."""
    cfg = demo_config(lm, quick)
    root = run.path / "distill"
    config = root / f"{cfg.name}.yaml"
    root.mkdir(parents=True, exist_ok=True)
    atomic_write_text(config, yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    token = ARGV.set(["distill", "run", str(config), "--root", str(root)])  # what workers run
    try:
        ex = ExecutorOptions("local", DEMO_WORKERS)
        result = run_study(cfg, root, ex=ex, teacher=lm)
    finally:
        ARGV.reset(token)
    _, table = summarize_study(result.path, out=run)
    atomic_write_text(run.path / "distill_summary.md", table + "\n")
