"""The steering part of ``mechscope demo``: a sentiment direction (CAA over generated
pairs) added to smollm2's residual stream, swept over α."""

from __future__ import annotations

import dataclasses

from mechscope.errors import InputError
from mechscope.runs import RunDir
from mechscope.steering.config import SteerConfig
from mechscope.steering.run import prepare_prompts, run_steering, steer_site
from mechscope.steering.samples import task_inputs
from mechscope.steering.vectors import caa_vector


def demo(run: RunDir, lm, quick: bool) -> None:
    pairs, prompts = task_inputs("sentiment", 16 if quick else 64)
    prompts = prompts[: 4 if quick else None]
    layer = min(lm.n_layers - 1, lm.n_layers // 3)
    alphas = (-4.0, 0.0, 4.0) if quick else (-8.0, -4.0, -2.0, 0.0, 2.0, 4.0, 8.0)
    config = SteerConfig(
        layer=layer, alphas=alphas, max_new_tokens=8 if quick else 24, policy="first"
    )
    try:
        prepare_prompts(lm, prompts, config)
    except InputError:  # a small vocabulary spells " good" and " bad" alike: text only
        prompts = [dataclasses.replace(p, target=None, versus=None) for p in prompts]
    vector = caa_vector(lm, pairs, steer_site(lm, config))
    run_steering(run, lm, vector, prompts, config)
