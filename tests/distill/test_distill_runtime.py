"""Optional integrations are guarded (Ray, W&B) and the demo config is a valid quick study."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from mechscope.distill.demo import demo_config, quick_overrides
from mechscope.distill.study import resolve_executor
from mechscope.distill.trainer import WandbLogger
from mechscope.errors import InputError


def test_executor_guard_without_ray(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(InputError, match="ray"):
        resolve_executor("ray")
    assert resolve_executor("auto") == "local"
    assert resolve_executor("local") == "local"


def test_wandb_guard(monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb -> ImportError
    with pytest.warns(UserWarning, match="wandb is not installed"):
        logger = WandbLogger("proj", "trial", {})
    assert logger.run is None
    logger.log({"step": 1, "loss": 0.5})  # no-op
    logger.finish()
    assert WandbLogger(None, "trial", {}).run is None


def test_demo_config_is_a_quick_study():
    cfg = demo_config("smollm2-135m", quick=True, n_layers=30)
    assert cfg.seeds == [0] and len(cfg.methods) == 4 and cfg.train.steps <= 10
    assert [t.name for t in cfg.tasks] == ["ioi"]
    assert cfg.students[0].kind == "layer_subset" and cfg.students[0].every == 5
    full = demo_config("smollm2-135m", quick=False, n_layers=30)
    assert len(full.seeds) == 3
    over = quick_overrides(full)
    assert over["seeds"] == [0] and over["train"]["steps"] <= 6
    assert all(t["n_train"] <= 32 for t in over["tasks"])


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
