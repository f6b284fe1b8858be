"""Head importance by integrated gradients over head gates, with the checks that validate it.

``f(α)`` is one sample's objective with every head's output scaled by a gate α
(:class:`GateFunction`); IG integrates its gradient along a path of gates (joint, per-layer,
layer-staggered, random-threshold) with a chosen quadrature rule, batching all steps of a
chunk into one forward and backward. Completeness, data-specificity diagnostics,
gradient × activation and Shapley baselines, and pruning curves tell whether a ranking is
about the data or only about the model.
"""

from typing import TYPE_CHECKING

from mechscope.lazy import lazy_package

if TYPE_CHECKING:  # the exports, each imported on first use (mechscope.lazy)
    from mechscope.heads.baselines import gate_gradients, head_mask_importance, normalize_layers
    from mechscope.heads.config import HeadsConfig, build_config
    from mechscope.heads.diagnostics import agreement, sample_diagnostics, similarity_matrix
    from mechscope.heads.diffusion import MaskedDiffusionLoss, diffusion_objective
    from mechscope.heads.gatefn import GateFunction
    from mechscope.heads.ig import (
        HeadAttribution,
        head_ig,
        joint_ig,
        per_layer_ig,
        random_threshold_ig,
        staggered_ig,
    )
    from mechscope.heads.integrate import PathIntegrals, evaluate, gradients, integrate
    from mechscope.heads.objectives import (
        CompletionNLL,
        LogitDifference,
        logit_diff_objective,
        nll_objective,
    )
    from mechscope.heads.paths import (
        joint_path,
        layer_path,
        random_threshold_paths,
        staggered_path,
    )
    from mechscope.heads.postprocess import aggregate, orient, postprocess
    from mechscope.heads.prepare import build_objective, prepare
    from mechscope.heads.pruning import pruning_auc, pruning_curves, pruning_orders
    from mechscope.heads.quadrature import quadrature
    from mechscope.heads.result import HeadsResult
    from mechscope.heads.run import run_heads
    from mechscope.heads.samples import HeadSample, load_samples, mixed_prompt_set
    from mechscope.heads.shapley import ShapleyResult, shapley_exact, shapley_sampled

__all__ = [
    "CompletionNLL",
    "GateFunction",
    "HeadAttribution",
    "HeadSample",
    "HeadsConfig",
    "HeadsResult",
    "LogitDifference",
    "MaskedDiffusionLoss",
    "PathIntegrals",
    "ShapleyResult",
    "aggregate",
    "agreement",
    "build_config",
    "build_objective",
    "diffusion_objective",
    "evaluate",
    "gate_gradients",
    "gradients",
    "head_ig",
    "head_mask_importance",
    "integrate",
    "joint_ig",
    "joint_path",
    "layer_path",
    "load_samples",
    "logit_diff_objective",
    "mixed_prompt_set",
    "nll_objective",
    "normalize_layers",
    "orient",
    "per_layer_ig",
    "postprocess",
    "prepare",
    "pruning_auc",
    "pruning_curves",
    "pruning_orders",
    "quadrature",
    "random_threshold_ig",
    "random_threshold_paths",
    "run_heads",
    "sample_diagnostics",
    "shapley_exact",
    "shapley_sampled",
    "similarity_matrix",
    "staggered_ig",
    "staggered_path",
]

lazy_package(__name__)
