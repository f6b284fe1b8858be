"""The distill part of ``mechscope demo``: a small RCID study on the demo model.

Quick mode (1 seed, a few steps, small data, IOI only) fits in a few minutes on 2 CPU cores;
the full mode adds factual probing (when the facts file is available) and three seeds. The
student keeps every fifth layer of the teacher.
"""

from __future__ import annotations

from typing import Any

from mechscope.distill.config import StudyConfig, parse_study_config
from mechscope.distill.study import run_study
from mechscope.distill.summarize import summarize_study
from mechscope.distill.tasks import default_facts_path
from mechscope.models import LoadedModel
from mechscope.runs import RunDir, atomic_write_text


def quick_overrides(cfg: StudyConfig) -> dict[str, Any]:
    """1 seed, 6 steps, small task sizes: a smoke-scale version of any study."""
    tasks = [
        {
            **t.model_dump(),
            "n_train": min(t.n_train, 32),
            "n_test": min(t.n_test, 24),
            "n_ood": min(t.n_ood, 12),
        }
        for t in cfg.tasks
    ]
    train = {**cfg.train.model_dump(), "steps": min(cfg.train.steps, 6), "checkpoint_every": 3}
    return {"seeds": cfg.seeds[:1], "tasks": tasks, "train": train}


def demo_config(teacher_spec: str, quick: bool, n_layers: int) -> StudyConfig:
    tasks: list[dict[str, Any]] = [
        {
            "name": "ioi",
            "n_train": 24 if quick else 96,
            "n_test": 16 if quick else 48,
            "n_ood": 8 if quick else 24,
            "ood": ["unseen_names", "new_templates"],
        }
    ]
    if not quick and default_facts_path() is not None:
        tasks.append({"name": "facts", "n_train": 96, "n_test": 48, "n_ood": 24})
    every = 5 if n_layers >= 10 else 2
    raw = {
        "name": "distill-demo" + ("-quick" if quick else ""),
        "description": "RCID demo: layer-subset student of the demo model",
        "teacher": teacher_spec,
        "students": [{"name": f"every{every}", "kind": "layer_subset", "every": every}],
        "tasks": tasks,
        "methods": ["standard_kd", "fitnets", "informed_fitnets", "rcid"],
        "seeds": [0] if quick else [0, 1, 2],
        "checkpoints": {"k": 4},
        "train": {
            "steps": 8 if quick else 40,
            "batch_size": 8,
            "lr": 2e-4,
            "checkpoint_every": 4 if quick else 20,
        },
        "eval": {"batch_size": 16, "purity": True},
        "executor": "local",
    }
    return parse_study_config(raw, source="demo")


def demo(run: RunDir, lm: LoadedModel, quick: bool) -> None:
    """Run the demo study under ``run/distill`` and write its summary into ``run``."""
    cfg = demo_config(lm.spec, quick, lm.n_layers)
    study = run_study(cfg, run.path / "distill", executor="local", teacher=lm)
    _, table = summarize_study(study.path, out=run)
    atomic_write_text(run.path / "distill_summary.md", table + "\n")
