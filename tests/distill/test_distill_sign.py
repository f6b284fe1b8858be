"""The sign of causal consistency, pinned through the study's own code path.

A student that *is* the teacher must score +1. A student whose unembedding is the teacher's
negated has every logit difference negated, on clean and on patched runs alike, so each of
its patch effects is exactly the teacher's negated and it must score −1. Both students go
through ``run_study`` → ``run_trial`` → ``evaluate_student`` with the method ``untrained``
(evaluated as built, no training), the path every trial of a study takes. A sign flip on
either side, the teacher's corrupt value used for the student, or a mis-mapped layer or
position breaks one of the two.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from mechscope.distill.config import parse_study_config
from mechscope.distill.run import run_study
from mechscope.models import LoadedModel
from mechscope.runs import read_table
from tolerance import assert_fp64_close


def check_correlations(metrics: pd.Series, per_ckpt: pd.DataFrame, want: float) -> None:
    """Identical (or exactly negated) models run the same passes: their effects are equal
    (or negated) bit for bit, and a correlation of equal vectors is ±1 up to float64's
    rounding of sums over the test pairs (pooled: over every checkpoint's)."""
    n = int(metrics["n_test"])
    assert_fp64_close(metrics["consistency"], want, terms=n * len(per_ckpt), scale=1.0)
    assert_fp64_close(per_ckpt["consistency"], want, terms=n, scale=1.0, msg="per checkpoint")


def save_negated(teacher: LoadedModel, folder: Path) -> None:
    """The teacher with its output embedding negated (exact in floating point), as a model
    folder. A tied head (SmolLM2) is untied first: the input embedding must stay as it is."""
    model = copy.deepcopy(teacher.model)
    head = model.get_output_embeddings()
    head.weight = torch.nn.Parameter(-head.weight.detach().clone())
    model.config.tie_word_embeddings = False
    model.save_pretrained(folder)
    teacher.tokenizer.save_pretrained(folder)


def run_sign_study(teacher: LoadedModel, root: Path, raw: dict) -> dict:
    """Run the two untrained students through ``run_study``; ``{student: (metrics, per ckpt)}``."""
    save_negated(teacher, root / "negated")
    raw = {
        **raw,
        "teacher": teacher.spec,
        "students": [
            {"name": "same", "kind": "layer_subset", "layers": list(range(teacher.n_layers))},
            {"name": "negated", "kind": "pretrained", "model": str(root / "negated")},
        ],
        "methods": ["untrained"],
    }
    study = run_study(parse_study_config(raw), root, teacher=teacher)
    out = {}
    for trial in sorted((study.path / "trials").iterdir()):
        metrics = read_table(trial, "metrics").iloc[0]
        out[metrics["student"]] = (metrics, read_table(trial, "consistency"))
    return out


def check_plus_one(result: tuple[pd.Series, pd.DataFrame]) -> None:
    metrics, per_ckpt = result
    check_correlations(metrics, per_ckpt, 1.0)
    np.testing.assert_array_equal(per_ckpt["mean_delta_student"], per_ckpt["mean_delta_teacher"])
    assert (per_ckpt["student_layer"] == per_ckpt["teacher_layer"]).all()
    assert metrics["accuracy"] == 1.0 and metrics["steps"] == 0


def check_minus_one(result: tuple[pd.Series, pd.DataFrame]) -> None:
    metrics, per_ckpt = result
    check_correlations(metrics, per_ckpt, -1.0)
    np.testing.assert_array_equal(per_ckpt["mean_delta_student"], -per_ckpt["mean_delta_teacher"])
    assert metrics["accuracy"] == 0.0  # every kept pair is one the teacher gets right
    assert (per_ckpt["mean_delta_teacher"].abs() > 1e-3).all()  # the effects are not all ≈ 0


@pytest.fixture(scope="module")
def sign_study(tmp_path_factory, teacher, tiny_raw) -> dict:
    return run_sign_study(teacher, tmp_path_factory.mktemp("sign"), tiny_raw())


def test_student_that_is_the_teacher_scores_plus_one(sign_study):
    check_plus_one(sign_study["same"])


def test_student_with_negated_effects_scores_minus_one(sign_study):
    check_minus_one(sign_study["negated"])


@pytest.mark.slow
def test_sign_on_the_demo_model(tmp_path):
    """The same two students of SmolLM2-135M, on IOI pairs of another seed than the study's,
    with the study's effect screen: the teacher against itself is +1, negated −1."""
    from mechscope.errors import ModelSpecError
    from mechscope.models import load_model

    try:
        smollm = load_model("smollm2-135m")
    except ModelSpecError as exc:
        pytest.skip(f"smollm2-135m not available: {exc}")
    raw = {
        "name": "sign",
        "tasks": [{"name": "ioi", "n_train": 16, "n_test": 16, "n_ood": 0, "seed": 1}],
        "seeds": [0],
        "checkpoints": {"k": 4, "min_effect": 0.1},
        "eval": {"batch_size": 16, "purity": False},
    }
    result = run_sign_study(smollm, tmp_path, raw)
    check_plus_one(result["same"])
    check_minus_one(result["negated"])
