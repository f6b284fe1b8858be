"""Shared fixtures for the distill tests: a tiny Llama teacher and a tiny IOI study config.

The tiny tokenizer has only two capitalised single-token names, so the IOI pool used here
adds two other single-token words; what matters for these tests is the mechanics, not
whether the words are names.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from mechscope.distill.config import StudyConfig, parse_study_config
from mechscope.models import LoadedModel, load_model

TINY_NAMES = ["Mary", "John", "trophy", "step"]
SHARED = Path(__file__).resolve().parents[2].parent / "shared"


def tiny_raw(**over: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "name": "tiny",
        "teacher": "tiny:llama",
        "students": [
            {"name": "sub", "kind": "layer_subset", "layers": [0, 2]},
            {
                "name": "nar",
                "kind": "narrow",
                "hidden": 32,
                "n_layers": 2,
                "n_heads": 2,
                "n_kv_heads": 1,
                "lr": 1e-3,
            },
        ],
        "tasks": [
            {
                "name": "ioi",
                "n_train": 12,
                "n_test": 8,
                "n_ood": 4,
                "names": TINY_NAMES,
                "ood": ["new_templates"],
                "oversample": 3.0,
            }
        ],
        "methods": ["standard_kd", "rcid"],
        "seeds": [0],
        "checkpoints": {"k": 3},
        "train": {"steps": 4, "batch_size": 4, "checkpoint_every": 2},
        "eval": {"batch_size": 8, "purity": False},
    }
    raw.update(over)
    return raw


def tiny_cfg(**over: Any) -> StudyConfig:
    return parse_study_config(tiny_raw(**over))


@pytest.fixture(name="tiny_cfg", scope="session")
def tiny_cfg_fixture():
    """Factory: ``tiny_cfg(**overrides) -> StudyConfig`` for the tiny IOI study."""
    return tiny_cfg


@pytest.fixture(name="tiny_raw", scope="session")
def tiny_raw_fixture():
    """Factory: ``tiny_raw(**overrides) -> dict`` (the unvalidated config)."""
    return tiny_raw


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.skip(f"shared folder not found at {SHARED}")
    return SHARED


@pytest.fixture(scope="session")
def teacher() -> LoadedModel:
    return load_model("tiny:llama")


@pytest.fixture(scope="session")
def ioi_task(teacher):
    """The tiny teacher's side of the tiny IOI task (computed once per session)."""
    from mechscope.distill.teacher_cache import prepare_teacher_task

    cfg = tiny_cfg()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return prepare_teacher_task(teacher, cfg.tasks[0], cfg.checkpoints, cfg.eval)


def _reference_effect(lm, pair, layer: int, name: str, clean: float) -> float:
    """One pair, one site, with raw forward hooks and unpadded single-row inputs."""
    block = lm.layer_module(layer)
    pc, pk = pair.positions[name]
    store = {}

    def grab(_m, _i, out):
        store["h"] = out[0][0, pk].clone() if isinstance(out, tuple) else out[0, pk].clone()

    def put(_m, _i, out):
        h = (out[0] if isinstance(out, tuple) else out).clone()
        h[0, pc] = store["h"]
        return (h, *out[1:]) if isinstance(out, tuple) else h

    def ld(ids) -> float:
        with torch.no_grad():
            logits = lm.model(torch.tensor([ids])).logits[0, -1].double()
        return float(logits[pair.correct_id] - logits[pair.wrong_id])

    handle = block.register_forward_hook(grab)
    try:
        ld(pair.corrupt_ids)
    finally:
        handle.remove()
    handle = block.register_forward_hook(put)
    try:
        patched = ld(pair.clean_ids)
    finally:
        handle.remove()
    return clean - patched


@pytest.fixture(name="reference_effect", scope="session")
def reference_effect_fixture():
    """``reference_effect(lm, pair, layer, name, clean_ld) -> Δ``: one pair, one site, with
    raw forward hooks (no engine), the independent computation effects are checked against."""
    return _reference_effect
