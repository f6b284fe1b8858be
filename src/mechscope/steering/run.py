"""The alpha sweep: a direction's effect on a metric and on greedy generations.

Metrics: every (prompt, alpha) is one batch row of one forward per prompt length, with one
steering scale per row (``Steer(alpha=tensor)``) and the layers below the steered one run
once per prompt (``expand``); the logits at the last prompt token are read in fp32.
Generations: one :meth:`Engine.generate` per alpha (greedy), the steer applied at the
prompt pass and at every new token.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from mechscope.data.tokens import answer_token_ids
from mechscope.engine import Edit, Engine, Site, Steer
from mechscope.engine.analysis.sweep import rows_per_chunk
from mechscope.engine.core.feature_sites import check_fits
from mechscope.engine.generation.generate import Prompt
from mechscope.engine.generation.sampling import Sampling
from mechscope.engine.interventions.checks import check_steer
from mechscope.engine.interventions.feature_edits import clamp_edit, feature_direction
from mechscope.errors import InputError, UnsupportedInterventionError
from mechscope.models.loaded import LoadedModel
from mechscope.progress import track
from mechscope.runs import RunDir
from mechscope.runs.result import save_result
from mechscope.steering.config import SteerConfig
from mechscope.steering.features import steer_dictionary
from mechscope.steering.result import PART, SteeringResult
from mechscope.steering.samples import SteerPrompt, check_ids


def steer_site(lm: LoadedModel, config: SteerConfig) -> Site:
    """The configured site, checked against the model (layer, head) and against the
    generations asked for (before the metric sweep, not after it)."""
    lm.check_layer(config.layer)
    if config.max_new_tokens > 0 and config.site in ("k", "v"):
        raise UnsupportedInterventionError(
            f"steering {config.site} while generating: the key/value cache would keep the "
            "unsteered keys and values of every earlier token; use --max-new-tokens 0 "
            "(metrics only) or another site"
        )
    head = config.head
    if head is not None:
        if config.site not in ("z", "q", "k", "v"):
            raise InputError(f"expected no head for site {config.site!r}", field="head")
        n = lm.n_kv_heads if config.site in ("k", "v") else lm.n_heads
        if head >= n:
            raise InputError(f"expected head 0..{n - 1}, got {head}", field="head")
    return Site(config.site, config.layer, head=head)


def vector_shape(lm: LoadedModel, site: Site) -> tuple[int, ...]:
    """The per-position shape of ``site``'s activation: what a steering vector must have."""
    from mechscope.engine.analysis.memory_model import Dims

    dims = Dims.of(lm)
    if site.name == "mlp_post":
        return (dims.d_mlp,)
    if site.name in ("z", "q", "k", "v"):
        heads = dims.kv_heads if site.name in ("k", "v") else dims.heads
        return (dims.d_head,) if site.head is not None else (heads, dims.d_head)
    return (dims.d_model,)


def check_vector(lm: LoadedModel, vector: torch.Tensor, site: Site) -> None:
    want = vector_shape(lm, site)
    if tuple(vector.shape) != want:
        raise InputError(
            f"expected a vector of shape {list(want)} for {site}, got {list(vector.shape)}",
            field="vector",
        )


def steering_vector(
    lm: LoadedModel, vector: torch.Tensor, site: Site, config: SteerConfig
) -> torch.Tensor:
    """The fp32 vector the sweep adds (unit length with ``normalize``), refused in one line
    before any pass: the wrong shape, a zero vector to normalise, or an alpha at which the
    steered value overflows the model's norms (``|alpha| · max|v|`` past their range)."""
    check_vector(lm, vector, site)
    vec = vector.float()
    if config.normalize:
        norm = float(vec.norm())
        if norm == 0.0:
            raise InputError(
                "a vector of non-zero length to normalize, got one of length 0", field="vector"
            )
        vec = vec / norm
    alphas = torch.tensor(config.alphas, dtype=torch.float32)
    check_steer(lm, Steer(site, vec, alphas, config.mode))  # every alpha, before any pass
    return vec


def _answer(lm: LoadedModel, p: SteerPrompt, text: str | None, policy: str, what: str) -> int:
    if text is None:
        return -1
    ids = answer_token_ids(lm.tokenizer, p.prompt, text, sample=p.id, field=what)
    if len(ids) > 1 and policy == "error":
        raise InputError(
            f"expected {text!r} to be one token, got {len(ids)} (policy 'first' keeps the first)",
            sample=p.id,
            field=what,
        )
    return ids[0]


def prepare_prompts(lm: LoadedModel, prompts: Sequence[SteerPrompt], config: SteerConfig):
    """Each prompt's ids and its target / versus token (-1 where absent)."""
    check_ids(list(prompts), "prompt")
    out = []
    for p in prompts:
        ids = lm.tokenizer(p.prompt)["input_ids"]
        target = _answer(lm, p, p.target, config.policy, "target")
        versus = _answer(lm, p, p.versus, config.policy, "versus")
        if target >= 0 and target == versus:
            raise InputError("expected target and versus to differ", sample=p.id, field="versus")
        out.append((ids, target, versus))
    return out


def _metrics(logits: torch.Tensor, target: int, versus: int) -> dict[str, torch.Tensor]:
    """Per-row metrics of ``logits [rows, vocab]`` fp32 (NaN where undefined)."""
    nan = torch.full((logits.shape[0],), float("nan"))
    if target < 0:
        return {"logit_diff": nan, "target_logprob": nan, "target_prob": nan}
    logp = torch.log_softmax(logits, dim=-1)[:, target]
    diff = logits[:, target] - logits[:, versus] if versus >= 0 else nan
    return {"logit_diff": diff, "target_logprob": logp, "target_prob": logp.exp()}


def steer_sweep(
    lm: LoadedModel,
    vector: torch.Tensor | None,
    prompts: Sequence[SteerPrompt],
    config: SteerConfig,
    *,
    progress: bool = True,
    dictionary: Any = None,
) -> SteeringResult:
    """Every alpha of ``config`` on every prompt: metrics and greedy continuations.

    With ``config.feature`` the vector is None: the feature's decoder row is the direction
    (``add`` / ``project``) or the feature is clamped (``clamp``); ``dictionary`` is the
    loaded dictionary (else the one in ``config.dictionary``'s folder)."""
    site, vec, clamp = sweep_target(lm, vector, config, dictionary)
    prepared = prepare_prompts(lm, prompts, config)
    eng = Engine.of(lm)
    alphas = torch.tensor(config.alphas, dtype=torch.float32)  # [A]
    n_a = len(alphas)
    metrics = {
        k: np.full((len(prompts), n_a), np.nan, np.float32)
        for k in _metrics(torch.zeros(1, 1), -1, -1)
    }
    items = range(len(prompts))
    for i in track(items, "steering: metrics", unit="prompts", enabled=progress):
        ids, target, versus = prepared[i]
        chunk = max(1, rows_per_chunk(lm, len(ids), budget_bytes=config.budget_bytes))
        for start in range(0, n_a, chunk):
            a = alphas[start : start + chunk]
            steer = clamp(a) if clamp else Steer(site, vec, a, config.mode)
            out = eng.run(torch.tensor([ids]), [steer], logits=1, expand=(site.layer, len(a)))
            for k, v in _metrics(out.logits[:, -1].float().cpu(), target, versus).items():
                metrics[k][i, start : start + len(a)] = v.numpy()
    generations: list[list[str]] = [[] for _ in prompts]
    if config.max_new_tokens > 0:
        todo = [Prompt(ids, seeds=[0]) for ids, _, _ in prepared]
        sampling = Sampling(config.max_new_tokens)
        for alpha in track(config.alphas, "steering: generations", unit="α", enabled=progress):
            steer = clamp(float(alpha)) if clamp else Steer(site, vec, float(alpha), config.mode)
            done = eng.generate(todo, sampling, slots=len(todo), interventions=[steer])
            for i, rollouts in enumerate(done):
                generations[i].append(rollouts[0].text)
    return SteeringResult(
        site=site.name, layer=int(site.layer), head=site.head, mode=config.mode,  # type: ignore[arg-type]
        alphas=alphas.double(), prompt_ids=[p.id for p in prompts],
        prompts=[p.prompt for p in prompts], metrics=metrics,
        generations=generations if config.max_new_tokens > 0 else [],
        vector=None if vec is None else vec.cpu(), feature=config.feature,
    )  # fmt: skip


def sweep_target(
    lm: LoadedModel, vector: torch.Tensor | None, config: SteerConfig, dictionary: Any = None
) -> tuple[Site, torch.Tensor | None, Callable[[Any], Edit] | None]:
    """What the sweep steers, checked before any pass: the site and the fp32 vector, or,
    for a clamped feature, its site and the ``Edit`` of each alpha (a number or ``[rows]``)."""
    if config.feature is None:
        if vector is None:
            raise InputError("a steering vector (or feature=… of a dictionary)", field="vector")
        site = steer_site(lm, config)
        return site, steering_vector(lm, vector, site, config), None
    if vector is not None:
        raise InputError(
            "no vector with feature=…: the feature's decoder row is the direction", field="vector"
        )
    d = steer_dictionary(lm, config, dictionary)
    if config.mode == "clamp":
        site = Site.feature(d, config.feature)
        check_fits(lm, d)
        if site.layer is None:
            raise UnsupportedInterventionError("clamping a feature needs a dictionary at a layer")
        return site, None, lambda alpha: clamp_edit(d, config.feature, alpha)  # type: ignore[arg-type]
    site, row = feature_direction(lm, d, config.feature)
    free = config.model_copy(update={"site": site.name, "layer": site.layer})
    steer_site(lm, free)  # k/v while generating refused, as for any vector
    return site, steering_vector(lm, row, site, free), None


def run_steering(
    run: RunDir,
    lm: LoadedModel,
    vector: torch.Tensor | None,
    prompts: Sequence[SteerPrompt],
    config: SteerConfig,
    *,
    name: str = PART,
    dictionary: Any = None,
) -> SteeringResult:
    """:func:`steer_sweep` into ``run``: the result (reopened by ``SteeringResult.from_run``)
    and ``tables/<name>.parquet``; a finished sweep is reused."""
    from mechscope.runs.result import has_result

    if has_result(run, name):
        return SteeringResult.from_run(run, name)
    with run.timed(name):
        result = steer_sweep(lm, vector, prompts, config, dictionary=dictionary)
    save_result(run, name, result, tables={name: result.to_frame()})
    return result
