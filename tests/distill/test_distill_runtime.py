"""Optional integrations are guarded (Ray, W&B) and the demo config is a valid quick study."""

from __future__ import annotations

import importlib.util
import sys
from types import SimpleNamespace

import pytest

from mechscope.distill.config import parse_study_config
from mechscope.distill.demo import demo_config, quick_overrides
from mechscope.distill.trainer import WandbLogger
from mechscope.errors import InputError
from mechscope.runs.options import ExecutorOptions


def test_executor_guard_without_ray(monkeypatch, tiny_raw):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(InputError, match="ray"):
        ExecutorOptions("ray").check()
    ExecutorOptions("local").check()
    for field in ("executor", "workers"):  # command-line options now: refused in one line
        with pytest.raises(InputError, match=f"--{field}") as err:
            parse_study_config(tiny_raw(**{field: "local" if field == "executor" else 2}))
        assert "\n" not in str(err.value)


def test_wandb_guard(monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb -> ImportError
    with pytest.warns(UserWarning, match="wandb is not installed"):
        logger = WandbLogger("proj", "trial", {})
    assert logger.run is None
    logger.log({"step": 1, "loss": 0.5})  # no-op
    logger.finish()
    assert WandbLogger(None, "trial", {}).run is None


def test_demo_config_is_one_seed_of_the_cpu_study():
    from mechscope.distill.config import builtin_config_path, load_study_config
    from mechscope.distill.demo import DEMO_METHODS

    study = load_study_config(builtin_config_path("cpu_study"))
    smollm = SimpleNamespace(spec="smollm2-135m", n_layers=30, d_model=576)
    full = demo_config(smollm, quick=False)
    assert full.seeds == study.seeds[:1]
    assert full.methods == [m for m in study.methods if m in DEMO_METHODS]
    assert full.methods == ["untrained", "standard_kd", "rcid"]
    assert [s.model_dump() for s in full.students] == [s.model_dump() for s in study.students]
    assert [t.model_dump() for t in full.tasks] == [t.model_dump() for t in study.tasks]
    assert full.train == study.train and full.checkpoints == study.checkpoints
    quick = demo_config(smollm, quick=True)
    assert quick.seeds == [0] and quick.methods == study.methods  # every loss, smoke-tested
    assert quick.train.steps <= 10 and all((s.steps or 0) <= 10 for s in quick.students)
    assert quick.train.checkpoint_every == quick.train.steps  # one save, at the end
    assert all(t.n_train <= 16 and t.n_test <= 16 and t.n_ood <= 8 for t in quick.tasks)
    # a test model: every second layer, and no effect screen (its effects are a few %)
    tiny = demo_config(SimpleNamespace(spec="tiny:llama", n_layers=3, d_model=64), quick=True)
    assert [(s.kind, s.every) for s in tiny.students] == [("layer_subset", 2)]
    assert tiny.checkpoints.min_effect == 0.0 and study.checkpoints.min_effect > 0
    over = quick_overrides(study)
    assert over["seeds"] == [0] and over["train"]["steps"] <= 10


@pytest.mark.slow
def test_demo_writes_summary_into_the_run(tmp_path, monkeypatch, teacher, tiny_cfg, tiny_raw):
    from mechscope.distill import demo as demo_mod
    from mechscope.distill.report import distill_section
    from mechscope.runs import RunDir, has_table

    cfg = tiny_cfg(methods=["rcid"], students=[tiny_raw()["students"][0]])
    monkeypatch.setattr(demo_mod, "demo_config", lambda *_a, **_k: cfg)
    run = RunDir.create(tmp_path, "demo", {"x": 1})
    demo_mod.demo(run, teacher, quick=True)
    assert has_table(run, "distill_summary") and has_table(run, "distill_checkpoints")
    assert (run.path / "distill_summary.md").read_text().count("|") > 10
    assert distill_section(run)
