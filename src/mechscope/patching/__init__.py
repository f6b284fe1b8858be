"""Activation patching: exact sweeps over layers × positions / spans / heads, attribution
patching, and path patching (sender → receiver heads)."""

from typing import TYPE_CHECKING

from mechscope.lazy import lazy_package

if TYPE_CHECKING:  # the exports, each imported on first use (mechscope.lazy)
    from mechscope.engine.core.unembed import logit_diff
    from mechscope.patching.attribution_patching import (
        Agreement,
        agreement,
        agreement_frame,
        top_k_overlap,
    )
    from mechscope.patching.config import (
        ATTRIBUTION_METRICS,
        METRICS,
        PATCH_SITES,
        PatchSpec,
        PathSpec,
    )
    from mechscope.patching.metrics import Reference, normalized_effect, readout_metrics
    from mechscope.patching.path import path_patch, run_path_patching
    from mechscope.patching.path_result import PathResult
    from mechscope.patching.prepare import PreparedPair, prepare_pair
    from mechscope.patching.result import PairResult, PatchingResult
    from mechscope.patching.run import patch_pair, patch_pairs, run_patching

__all__ = [
    "ATTRIBUTION_METRICS",
    "METRICS",
    "PATCH_SITES",
    "Agreement",
    "PairResult",
    "PatchSpec",
    "PatchingResult",
    "PathResult",
    "PathSpec",
    "PreparedPair",
    "Reference",
    "agreement",
    "agreement_frame",
    "logit_diff",
    "normalized_effect",
    "patch_pair",
    "patch_pairs",
    "path_patch",
    "prepare_pair",
    "readout_metrics",
    "run_patching",
    "run_path_patching",
    "top_k_overlap",
]

lazy_package(__name__)
