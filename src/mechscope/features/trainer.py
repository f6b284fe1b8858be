"""Training a group of dictionaries on one activation stream, resumable step by step.

Every dictionary of a group learns from the same forward passes (:mod:`.stream`): buffer
``b`` holds the activations of a seeded block of training contexts, shuffled once per pass,
and step ``s`` is batch ``s`` of that sequence. Each dictionary has its own optimizer
(Adam), learning-rate schedule (constant, then a linear decay), dead-feature counter and
log, and is checkpointed with them every ``checkpoint_every`` steps (atomically, one file
per dictionary). A run killed at any point resumes from the last checkpoints: it recomputes
the buffer it was in, skips the steps already taken, and ends with the same weights as an
uninterrupted run (the forward passes and the optimizer's state are the same), bit for bit.
"""

from __future__ import annotations

import math
import pickle
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from mechscope.dictionaries import Dictionary, Hook
from mechscope.errors import NonFiniteError
from mechscope.features import objectives
from mechscope.features.config import TrainConfig
from mechscope.features.sites import Where, sites_of
from mechscope.features.stream import activations, buffer_contexts, token_order
from mechscope.models.loaded import LoadedModel
from mechscope.progress import make_progress
from mechscope.runs import atomic_path
from mechscope.runs.integrity import first_line

LOG_KEYS = ("step", "tokens", "loss", "fvu", "aux", "l0", "dead", "lr", "seconds")


@dataclass
class Learner:
    """One dictionary in training: its weights, optimizer and counters."""

    where: Where
    dictionary: Dictionary
    optimizer: torch.optim.Optimizer
    step: int = 0
    since_fired: torch.Tensor | None = None  # [d_sae] int64: tokens since it last fired
    threshold_sum: float = 0.0  # BatchTopK: Σ of each batch's smallest kept activation
    threshold_count: int = 0
    log: list[dict[str, float]] = field(default_factory=list)
    seconds: float = 0.0  # this dictionary's own step time (the forward passes not counted)
    output_scale: float = 1.0  # the target's scale (an SAE's is its input scale)

    def state(self) -> dict[str, Any]:
        return {
            "params": {k: v.detach().clone() for k, v in self.dictionary.state_dict().items()},
            "input_scale": self.dictionary.config.input_scale,
            "optimizer": self.optimizer.state_dict(),
            "step": self.step,
            "since_fired": self.since_fired,
            "threshold": (self.threshold_sum, self.threshold_count),
            "log": self.log,
            "seconds": self.seconds,
            "output_scale": self.output_scale,
        }


def learning_rate(config: TrainConfig, step: int) -> float:
    """Constant, then a linear decay to 0 over the last ``decay`` fraction of the steps."""
    total, base = config.steps, config.learning_rate
    tail = config.decay * total
    return base if tail <= 0 else base * min(1.0, (total - step) / tail)


def new_learner(
    config: TrainConfig, where: Where, x: torch.Tensor, y: torch.Tensor, model: str, seed: int
) -> Learner:
    """A fresh dictionary for ``where``, its input and output scales and ``b_dec`` from
    the first buffer's activations ``x [n, d_in]``, ``y [n, d_out]``: each scaled so that
    its mean squared norm is its width (a transcoder's output apart from its input)."""
    scale = math.sqrt(x.shape[1] / float(x.pow(2).sum(-1).mean()))
    out_scale = (
        scale
        if where.site == where.site_out
        else math.sqrt(y.shape[1] / float(y.pow(2).sum(-1).mean()))
    )
    hook_in = Hook(where.site, where.layer, model, where.hook_name)
    hook_out = Hook(where.site_out, where.layer, model, where.hook_name_out)
    d = objectives.init_dictionary(
        config, x.shape[1], y.shape[1], input_scale=scale, b_dec=y.mean(0) * out_scale,
        seed=seed, hook_in=hook_in, hook_out=hook_out if config.kind != "sae" else None,
    )  # fmt: skip
    learner = _learner(config, where, d)
    learner.output_scale = out_scale
    return learner


def _learner(config: TrainConfig, where: Where, d: Dictionary) -> Learner:
    params = [p for p in d.parameters() if p is not None]
    opt = torch.optim.Adam(params, lr=config.learning_rate, betas=(0.9, 0.999), fused=True)
    return Learner(where, d, opt, since_fired=torch.zeros(d.d_sae, dtype=torch.long))


def restore(config: TrainConfig, where: Where, state: dict[str, Any], model: str) -> Learner:
    """A learner from its checkpoint ``state``."""
    p = state["params"]
    hook_in = Hook(where.site, where.layer, model, where.hook_name)
    hook_out = Hook(where.site_out, where.layer, model, where.hook_name_out)
    d = objectives.init_dictionary(
        config, p["w_enc"].shape[0], p["w_dec"].shape[1], input_scale=state["input_scale"],
        b_dec=p["b_dec"], seed=0, hook_in=hook_in,
        hook_out=hook_out if config.kind != "sae" else None,
    )  # fmt: skip
    d.load_state_dict(p)
    learner = _learner(config, where, d)
    learner.optimizer.load_state_dict(state["optimizer"])
    learner.step, learner.since_fired = int(state["step"]), state["since_fired"]
    learner.threshold_sum, learner.threshold_count = state["threshold"]
    learner.log, learner.seconds = list(state["log"]), float(state["seconds"])
    learner.output_scale = float(state.get("output_scale", state["input_scale"]))
    return learner


def train_step(learner: Learner, x: torch.Tensor, y: torch.Tensor, config: TrainConfig) -> None:
    """One optimizer step of ``learner`` on a batch ``x [B, d_in]`` → ``y [B, d_out]``
    (unscaled activations)."""
    t0 = time.perf_counter()
    d = learner.dictionary
    x, y = x * (d.config.input_scale or 1.0), y * learner.output_scale
    assert learner.since_fired is not None
    lr = learning_rate(config, learner.step)
    for group in learner.optimizer.param_groups:
        group["lr"] = lr
    if config.activation == "topk":
        dead = learner.since_fired >= config.dead_tokens
        out = objectives.topk_step(d, x, y, dead, config)
    elif config.activation == "batchtopk":
        out = objectives.batchtopk_step(d, x, y, config)
    else:
        out = objectives.jumprelu_step(d, x, y, config)
    if not math.isfinite(float(out.loss.detach())):
        raise NonFiniteError(
            f"the training loss of {learner.where.name} is not finite at step "
            f"{learner.step + 1}; {NonFiniteError.HINT}",
            sample=learner.where.name,
        )
    learner.optimizer.zero_grad(set_to_none=True)
    out.loss.backward()
    objectives.drop_parallel_grad(d)
    learner.optimizer.step()
    objectives.unit_decoder(d)
    if d.threshold is not None and config.activation == "jumprelu":
        with torch.no_grad():
            d.threshold.clamp_(min=1e-6)
    learner.since_fired += x.shape[0]
    learner.since_fired[out.fired] = 0
    if out.kept_min is not None:
        learner.threshold_sum += out.kept_min
        learner.threshold_count += 1
    learner.step += 1
    learner.seconds += time.perf_counter() - t0
    dead_frac = float((learner.since_fired >= config.dead_tokens).float().mean())
    row = [learner.step, learner.step * x.shape[0], float(out.loss.detach()), out.fvu, out.aux]
    row.append(out.l0)
    learner.log.append(dict(zip(LOG_KEYS, [*row, dead_frac, lr, learner.seconds], strict=True)))


def finished(learner: Learner) -> Dictionary:
    """The trained dictionary: its decoder brought from the output's scale to the input's
    (which :class:`Dictionary` divides by); a BatchTopK one gets its inference threshold
    (the mean of the smallest kept activation over the batches), the same for every
    feature."""
    d = learner.dictionary
    ratio = (d.config.input_scale or 1.0) / learner.output_scale
    if ratio != 1.0:
        with torch.no_grad():
            for t in (d.w_dec, d.b_dec, d.w_skip, d.b_skip):
                if t is not None:
                    t *= ratio
    if d.config.activation == "batchtopk" and learner.threshold_count:
        t = learner.threshold_sum / learner.threshold_count
        d.threshold = torch.nn.Parameter(torch.full((d.d_sae,), t))
    return d


def read_state(path: Path) -> dict[str, Any] | None:
    """A checkpoint, or None: none saved, or one that cannot be read (removed, with a line
    on stderr; that dictionary starts again)."""
    if not path.is_file():
        return None
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, EOFError, ValueError, pickle.UnpicklingError) as exc:
        print(f"{path} was damaged ({first_line(exc)}): removed", file=sys.stderr, flush=True)
        path.unlink(missing_ok=True)
        return None


def save_state(path: Path, learner: Learner) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        torch.save(learner.state(), tmp)


@dataclass
class GroupTiming:
    """Where a group's time went: forward passes, and each dictionary's steps."""

    forward_seconds: float = 0.0
    forward_tokens: int = 0
    wall_seconds: float = 0.0


def train_group(
    lm: LoadedModel,
    train_ids: torch.Tensor,  # [n_train, context]
    wheres: Sequence[Where],
    config: TrainConfig,
    checkpoints: Path,
    *,
    model_name: str,
    on_step: Callable[[int], None] | None = None,
) -> tuple[list[Learner], GroupTiming]:
    """Train one dictionary per ``where`` for ``config.steps`` steps on one stream
    (module docstring); checkpoints in ``checkpoints/<where.name>.pt``."""
    t_start = time.perf_counter()
    timing = GroupTiming()
    n_tok = train_ids.shape[1] - 1
    per_buffer = max(1, math.ceil(config.buffer / n_tok))
    buffer_tokens = per_buffer * n_tok
    batches = max(1, buffer_tokens // config.batch)
    steps_per_buffer = batches * config.passes
    sites = {w: sites_of(lm, w) for w in wheres}
    states = {w: read_state(checkpoints / f"{w.name}.pt") for w in wheres}
    learners: dict[Where, Learner] = {
        w: restore(config, w, s, model_name) for w, s in states.items() if s is not None
    }
    start = min(learners[w].step if w in learners else 0 for w in wheres)
    if start >= config.steps:
        return [learners[w] for w in wheres], timing
    bar = make_progress()
    bar.start()
    names = ", ".join(w.name for w in wheres[:3]) + (
        f" and {len(wheres) - 3} more" if len(wheres) > 3 else ""
    )
    task = bar.add_task(f"features: training {names}", total=config.steps, completed=start)
    try:
        for b in range(start // steps_per_buffer, math.ceil(config.steps / steps_per_buffer)):
            t0 = time.perf_counter()
            ids = train_ids[buffer_contexts(train_ids.shape[0], per_buffer, b, config.corpus.seed)]
            wanted = [s for w in wheres for s in sites[w]]
            acts = activations(lm, ids, wanted, forward_batch=config.forward_batch)
            timing.forward_seconds += time.perf_counter() - t0
            timing.forward_tokens += ids.numel() - ids.shape[0]
            for w in wheres:
                if w not in learners:
                    x, y = acts[sites[w][0]], acts[sites[w][1]]
                    seed = config.corpus.seed * 1000 + w.layer
                    learners[w] = new_learner(config, w, x, y, model_name, seed)
            for p in range(config.passes):
                order = token_order(buffer_tokens, config.corpus.seed, b, p)
                for j in range(batches):
                    step = b * steps_per_buffer + p * batches + j
                    if step >= config.steps:
                        break
                    idx = order[j * config.batch : (j + 1) * config.batch]
                    for w in wheres:
                        lrn = learners[w]
                        if lrn.step != step:
                            continue
                        train_step(lrn, acts[sites[w][0]][idx], acts[sites[w][1]][idx], config)
                        done = lrn.step
                        if done % config.checkpoint_every == 0 or done == config.steps:
                            save_state(checkpoints / f"{w.name}.pt", lrn)
                    bar.update(task, completed=step + 1)
                    if on_step is not None:
                        on_step(step + 1)
    finally:
        bar.stop()
    timing.wall_seconds = time.perf_counter() - t_start
    return [learners[w] for w in wheres], timing
