"""RCID distillation: transfer a teacher's causal mechanism, and measure whether it was kept.

Python API (imported lazily, so reading results does not import torch)::

    from mechscope.distill import load_study_config, run_study, summarize_study
    cfg = load_study_config("src/mechscope/distill/configs/cpu_study.yaml")
    result = run_study(cfg, "runs")  # a DistillResult: one metrics row per trial
    summary, markdown = summarize_study(result.path)

Building blocks: :func:`select_checkpoints`, :func:`procrustes_align`, :func:`linear_cka`,
:class:`RCIDLoss` and the baselines, :func:`causal_effects` / :func:`causal_consistency`,
:func:`train`, :func:`run_trial`, :func:`run_pilot`.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "METHODS": "config",
    "StudyConfig": "config",
    "TaskSpec": "config",
    "StudentSpec": "config",
    "load_study_config": "config",
    "parse_study_config": "config",
    "build_task": "samples",
    "BUILDERS": "samples",
    "PairSet": "pairset",
    "build_pairset": "pairset",
    "Checkpoint": "checkpoints",
    "contrast_scores": "checkpoints",
    "select_checkpoints": "checkpoints",
    "EffectScreen": "screen",
    "proportional_map": "mapping",
    "kept_map": "mapping",
    "linear_cka": "mapping",
    "cka_map": "mapping",
    "procrustes_align": "procrustes",
    "fit_alignments": "procrustes",
    "kd_loss": "losses",
    "RCIDLoss": "losses",
    "InformedFitNetsLoss": "losses",
    "FitNetsLoss": "losses",
    "build_student": "students",
    "layer_subset_student": "students",
    "narrow_student": "students",
    "TeacherTask": "teacher_cache",
    "prepare_teacher_task": "teacher_cache",
    "causal_effects": "consistency",
    "causal_consistency": "consistency",
    "shuffled_consistency": "consistency",
    "split_half_ceiling": "consistency",
    "accuracy": "evaluate",
    "perplexity": "evaluate",
    "ood_degradation": "evaluate",
    "information_purity": "purity",
    "selectivity": "purity",
    "type_control_labels": "purity",
    "train": "trainer",
    "Objective": "objective",
    "Trial": "trial",
    "run_trial": "trial",
    "evaluate_student": "trial",
    "run_study": "run",
    "expand_trials": "run",
    "validate_study": "run",
    "DistillResult": "result",
    "summarize_study": "summarize",
    "summary_table": "method_table",
    "mean_ci": "intervals",
    "method_contrasts": "intervals",
    "adjust_p_values": "intervals",
    "with_pair_intervals": "pair_effects",
    "run_pilot": "pilot",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'mechscope.distill' has no attribute {name!r}")
    return getattr(importlib.import_module(f"mechscope.distill.{_EXPORTS[name]}"), name)
