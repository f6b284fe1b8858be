"""The steering part of ``mechscope demo``: a sentiment direction (CAA over generated
pairs) added to smollm2's residual stream, swept over α."""

from __future__ import annotations

from mechscope.runs import RunDir
from mechscope.steering.config import SteerConfig
from mechscope.steering.run import run_steering, steer_site
from mechscope.steering.samples import task_inputs
from mechscope.steering.vectors import caa_vector


def demo(run: RunDir, lm, quick: bool) -> None:
    pairs, prompts = task_inputs("sentiment", 16 if quick else 64)
    layer = min(lm.n_layers - 1, lm.n_layers // 3)
    alphas = (-4.0, 0.0, 4.0) if quick else (-8.0, -4.0, -2.0, 0.0, 2.0, 4.0, 8.0)
    config = SteerConfig(layer=layer, alphas=alphas, max_new_tokens=8 if quick else 24)
    vector = caa_vector(lm, pairs, steer_site(lm, config))
    run_steering(run, lm, vector, prompts[: 4 if quick else None], config)
