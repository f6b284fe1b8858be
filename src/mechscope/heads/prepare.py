"""From samples and a config to ready gate functions and per-path options.

Every input check of a run happens here, before anything is written: a bad sample, an
objective the model cannot serve, or an unknown ranking fails in seconds, not after an hour
of gradients.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

from mechscope.errors import InputError
from mechscope.heads.config import HeadsConfig
from mechscope.heads.diffusion import diffusion_objective
from mechscope.heads.gatefn import GateFunction
from mechscope.heads.objectives import Objective, logit_diff_objective, nll_objective
from mechscope.heads.samples import HeadSample
from mechscope.models.loaded import LoadedModel


def build_objective(lm: LoadedModel, sample: HeadSample, cfg: HeadsConfig) -> Objective:
    """The objective ``cfg.objective`` for one sample."""
    tok = lm.tokenizer
    if cfg.objective == "nll":
        return nll_objective(tok, sample.prompt, sample.completion, sample_id=sample.id)
    if cfg.objective == "diffusion":
        seed = (zlib.crc32(sample.id.encode()) + cfg.seed) % 2**31
        return diffusion_objective(
            tok,
            lm.mask_token_id,
            sample.prompt,
            sample.completion,
            sample_id=sample.id,
            n_draws=cfg.n_draws,
            eps=cfg.eps,
            seed=seed,
        )
    if sample.correct is None or sample.wrong is None:
        raise InputError(
            "a correct and a wrong answer for logit_diff", sample=sample.id, field="wrong"
        )
    return logit_diff_objective(
        tok, sample.prompt, sample.correct, sample.wrong, sample_id=sample.id
    )


def path_options(kind: str, cfg: HeadsConfig) -> dict:
    """Keyword arguments of :func:`~mechscope.heads.ig.head_ig` for one path family."""
    refined = cfg.refine_paths is None or kind in cfg.refine_paths
    opts: dict = {
        "baseline": cfg.baseline,
        "internal_batch_size": cfg.internal_batch_size,
        "rtol": cfg.refine_rtol if refined else None,
        "atol": cfg.refine_atol,
    }
    if kind == "random":
        opts |= {
            "n_paths": cfg.random_paths,
            "window": cfg.random_window,
            "seed": cfg.seed,
            "n_steps": cfg.random_steps,
        }
    else:
        opts |= {"method": cfg.method, "n_steps": cfg.n_steps}
    if kind == "per_layer":
        opts |= {"layers": cfg.layers, "n_steps": cfg.per_layer_steps or cfg.n_steps}
    if kind == "staggered":
        opts["lambdas"] = cfg.lambdas
    opts["max_steps"] = opts["n_steps"] * 2**cfg.refine_doublings
    return opts


def prepare(lm: LoadedModel, samples: Sequence[HeadSample], cfg: HeadsConfig) -> list[GateFunction]:
    """One gate function per sample; every input check happens here, before any writing."""
    if not samples:
        raise InputError("at least one sample", field="samples")
    if len({s.id for s in samples}) != len(samples):
        raise InputError("unique sample ids", field="samples")
    known = list(cfg.paths) + (["gradient"] if cfg.gradient_baseline else [])
    for name in cfg.prune_by if cfg.prune or cfg.shapley_top else []:
        if name not in known:
            raise InputError(f"prune_by among {', '.join(known)}, got {name!r}", field="prune_by")
    if cfg.objective == "diffusion" and lm.mask_token_id is None:
        raise InputError(
            f"a model with a mask token for the diffusion objective ({lm.spec})", field="objective"
        )
    return [GateFunction(lm, build_objective(lm, s, cfg)) for s in samples]
