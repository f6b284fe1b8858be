"""Steering: a direction at a site — a user vector, or the mean activation difference of
contrastive pairs (contrastive activation addition) — added with a scale alpha or projected
out, swept over alpha with its effect on a metric and on greedy generations."""

from typing import TYPE_CHECKING

from mechscope.lazy import lazy_package

if TYPE_CHECKING:  # the exports, each imported on first use (mechscope.lazy)
    from mechscope.steering.config import SteerConfig
    from mechscope.steering.result import SteeringResult
    from mechscope.steering.run import run_steering, steer_sweep
    from mechscope.steering.samples import Contrast, SteerPrompt
    from mechscope.steering.vectors import caa_vector, mean_activation

__all__ = [
    "Contrast",
    "SteerConfig",
    "SteerPrompt",
    "SteeringResult",
    "caa_vector",
    "mean_activation",
    "run_steering",
    "steer_sweep",
]

lazy_package(__name__)
