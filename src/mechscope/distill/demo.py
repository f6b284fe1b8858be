"""The distill part of ``mechscope demo``: the CPU study, smaller.

Both modes take the shipped ``cpu_study`` config (two students, IOI and factual probing, the
four methods) with the demo's model as teacher and one seed, run on two worker processes:

- full: the study's own data sizes and steps (one of its three seeds);
- ``--quick``: IOI only (both students, the four methods) on small data with a few steps:
  a smoke test of the whole pipeline that fits in well under a minute on 2 CPU cores (its
  students do not have time to learn anything).

A model the study is not sized for (a teacher no wider than the narrow student, a tiny
test model) keeps only the layer-subset student and IOI.
"""

from __future__ import annotations

from typing import Any

from mechscope.distill.config import StudyConfig, builtin_config_path, load_study_config
from mechscope.distill.study import run_study
from mechscope.distill.summarize import summarize_study
from mechscope.distill.tasks import default_facts_path
from mechscope.models import LoadedModel
from mechscope.runs import RunDir, atomic_write_text

QUICK_STEPS = 4
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
        workers=2,
        executor="local",
    )
    real = not lm.spec.startswith("tiny:") and lm.n_layers >= 10
    if quick or not real or default_facts_path() is None:
        raw["tasks"] = [t for t in raw["tasks"] if t["name"] == "ioi"]
    students = []
    for s in raw["students"]:
        if s["kind"] == "narrow" and (not real or s["hidden"] >= lm.d_model):
            continue
        if s["kind"] == "layer_subset" and not real:
            s = {**s, "every": 2}
        students.append(s)
    raw["students"] = students
    cfg = StudyConfig.model_validate(raw)
    if quick:
        cfg = StudyConfig.model_validate({**cfg.model_dump(), **quick_overrides(cfg)})
    return cfg


def demo(run: RunDir, lm: LoadedModel, quick: bool) -> None:
    """Run the demo study under ``run/distill`` and write its summary into ``run``."""
    cfg = demo_config(lm, quick)
    study = run_study(cfg, run.path / "distill", executor="local", teacher=lm)
    _, table = summarize_study(study.path, out=run)
    atomic_write_text(run.path / "distill_summary.md", table + "\n")
