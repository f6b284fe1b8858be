"""The distillation training loop: AdamW, cosine schedule with warm-up, clipping, resume.

Batches are a pure function of ``(seed, step)``, so a run killed after step ``k`` and resumed
from its last checkpoint sees exactly the batches it would have seen, and ends with the same
weights as an uninterrupted run. Only trainable parameters (and the optimizer, schedule and
loss scaler) are checkpointed: everything frozen is rebuilt deterministically from the
config. Mixed precision (bf16, or fp16 with loss scaling) is used on CUDA only; CPU runs
are fp32.
"""

from __future__ import annotations

import contextlib
import math
import pickle
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mechscope.distill.config import TrainSpec
from mechscope.distill.gradients import term_gradients
from mechscope.errors import NonFiniteError
from mechscope.models import LoadedModel
from mechscope.progress import track
from mechscope.runs import atomic_path
from mechscope.runs.integrity import first_line

StepHook = Callable[[int, dict[str, float]], None]


@dataclass
class TrainResult:
    steps: int
    resumed_from: int
    seconds: float
    log: list[dict[str, Any]] = field(default_factory=list)
    cpu_seconds: float = 0.0  # this process's CPU time: what an idle single core would take


def lr_multiplier(step: int, total: int, warmup: int) -> float:
    """Linear warm-up to 1 over ``warmup`` steps, then cosine decay to 0 at ``total``."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def batch_indices(n_items: int, batch_size: int, seed: int, step: int) -> torch.Tensor:
    """The training rows of ``step``: a seeded random draw without replacement, ``[b]``."""
    gen = torch.Generator().manual_seed(int(seed) * 1_000_003 + int(step))
    return torch.randperm(n_items, generator=gen)[: min(batch_size, n_items)]


def logs_gradients(spec: TrainSpec, step: int) -> bool:
    """Whether step ``step`` (0-based) logs the two loss terms' gradients apart: every
    ``grad_log_every`` steps from the first, and the last step."""
    every = spec.grad_log_every
    return every > 0 and (step % every == 0 or step == spec.steps - 1)


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """bf16/fp16 autocast on CUDA; ``None`` (fp32) on CPU or when ``precision="fp32"``."""
    if device.type != "cuda" or precision == "fp32":
        return None
    if precision == "auto":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.bfloat16 if precision == "bf16" else torch.float16


def can_fuse(params: list[nn.Parameter]) -> bool:
    """Whether AdamW's fused kernel applies: float parameters, all on one CPU or CUDA device.

    The fused step is one pass over each tensor instead of a dozen elementwise ops: on one
    CPU thread it updates a 19M-parameter embedding in 0.03 s instead of 0.18 s, which for
    a small student is a third of the whole step.
    """
    devices = {p.device.type for p in params}
    return (
        bool(params)
        and len(devices) == 1
        and devices <= {"cpu", "cuda"}
        and all(p.is_floating_point() for p in params)
    )


def trainable_state(student: nn.Module, objective: nn.Module) -> dict[str, torch.Tensor]:
    state = {f"student.{k}": p.detach() for k, p in student.named_parameters() if p.requires_grad}
    state.update({f"objective.{k}": v.detach() for k, v in objective.state_dict().items()})
    return state


def load_trainable_state(
    student: nn.Module, objective: nn.Module, state: dict[str, torch.Tensor]
) -> None:
    params = dict(student.named_parameters())
    with torch.no_grad():
        for key, value in state.items():
            if key.startswith("student."):
                params[key.removeprefix("student.")].copy_(value)
    objective.load_state_dict(
        {k.removeprefix("objective."): v for k, v in state.items() if k.startswith("objective.")}
    )


class WandbLogger:
    """Logs to Weights & Biases when a project is given and ``wandb`` is installed."""

    def __init__(self, project: str | None, name: str, config: dict[str, Any]):
        self.run = None
        if not project:
            return
        try:
            import wandb
        except ImportError:
            warnings.warn(
                "wandb_project is set but wandb is not installed; not logging to W&B",
                UserWarning,
                stacklevel=2,
            )
            return
        self.run = wandb.init(project=project, name=name, id=name, resume="allow", config=config)

    def log(self, row: dict[str, Any]) -> None:
        if self.run is not None:
            self.run.log(row, step=int(row["step"]))

    def finish(self) -> None:
        if self.run is not None:
            self.run.finish()


def train(
    student: LoadedModel,
    objective: nn.Module,
    n_items: int,
    spec: TrainSpec,
    *,
    seed: int,
    checkpoint: Path | None = None,
    on_step: StepHook | None = None,
    logger: WandbLogger | None = None,
    description: str = "distill",
) -> TrainResult:
    """Train ``student`` (and the objective's own parameters) for ``spec.steps`` steps.

    ``objective(idx) -> (loss, parts)``; with ``spec.grad_log_every``, on those steps
    ``objective.terms(idx, margin=True)`` and the gradients of its terms and of the task's
    margin apart (:mod:`.gradients`). With
    ``checkpoint``, state is saved there every
    ``spec.checkpoint_every`` steps and at the end, and a run finding a checkpoint resumes
    from it. ``on_step(step, parts)`` is called after each step (and its checkpoint).
    """
    model = student.model
    torch.manual_seed(seed)
    params = [p for p in model.parameters() if p.requires_grad]
    n_student = len(params)  # the parameters both loss terms move (gradients.py)
    params += [p for p in objective.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(
        params, lr=spec.lr, weight_decay=spec.weight_decay, fused=can_fuse(params)
    )
    warmup = round(spec.warmup * spec.steps)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_multiplier(s, spec.steps, warmup))
    amp = autocast_dtype(spec.precision, student.device)
    scaler = torch.amp.GradScaler("cuda", enabled=amp == torch.float16)
    start, log = 0, []
    state = _read_checkpoint(checkpoint, student.device) if checkpoint is not None else None
    if state is not None:
        load_trainable_state(model, objective, state["trainable"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        scaler.load_state_dict(state["scaler"])
        start, log = int(state["step"]), list(state["log"])
    resumed_from, t0, cpu0 = start, time.perf_counter(), time.process_time()
    model.train()
    try:
        for step in track(range(start, spec.steps), description, total=spec.steps - start):
            idx = batch_indices(n_items, spec.batch_size, seed, step)
            ctx = torch.autocast("cuda", dtype=amp) if amp is not None else contextlib.nullcontext()
            opt.zero_grad(set_to_none=True)
            if logs_gradients(spec, step) and hasattr(objective, "terms"):
                with ctx:
                    terms, parts = objective.terms(idx, margin=True)
                    margin = terms.pop("margin")
                    loss = objective.total(terms)
                _check_finite(parts, step, description)
                scale = float(scaler.get_scale()) if scaler.is_enabled() else 1.0
                grads = term_gradients(terms, params, n_student, scale, opt, margin)
                parts = {"loss": float(loss.detach()), **parts, **grads}
            else:
                with ctx:
                    loss, parts = objective(idx)
                _check_finite(parts, step, description)
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, spec.grad_clip))
            scaler.step(opt)
            scaler.update()
            row = {
                "step": step + 1,
                **parts,
                "lr": opt.param_groups[0]["lr"],
                "grad_norm": grad_norm,
            }
            sched.step()
            log.append(row)
            if logger is not None:
                logger.log(row)
            done = step + 1
            if checkpoint is not None and (done % spec.checkpoint_every == 0 or done == spec.steps):
                _save(checkpoint, model, objective, opt, sched, scaler, done, log)
            if on_step is not None:
                on_step(done, parts)
    finally:
        model.eval()
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return TrainResult(spec.steps, resumed_from, wall, log, cpu)


def _check_finite(parts: dict[str, float], step: int, description: str) -> None:
    """Refuse a step whose loss terms are not finite (``parts`` are floats: no extra sync)."""
    if not all(math.isfinite(v) for v in parts.values()):
        raise NonFiniteError(
            f"the training loss is not finite at step {step + 1} ({_shown(parts)}); "
            f"{NonFiniteError.HINT}",
            sample=description,
        )


def _shown(parts: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.4g}" for k, v in parts.items())


def _read_checkpoint(path: Path, device: torch.device) -> dict[str, Any] | None:
    """The training state saved at ``path``, or None: none saved, or one that cannot be read
    back (removed, with a line on stderr; training starts again from its first step)."""
    if not path.is_file():
        return None
    try:
        return torch.load(path, map_location=device, weights_only=True)
    except (OSError, RuntimeError, EOFError, ValueError, pickle.UnpicklingError) as exc:
        print(
            f"{path} was damaged ({first_line(exc)}): removed; training starts again",
            file=sys.stderr,
            flush=True,
        )
        path.unlink(missing_ok=True)
        return None


def _save(
    path: Path,
    model: nn.Module,
    objective: nn.Module,
    opt: Any,
    sched: Any,
    scaler: Any,
    step: int,
    log: list[dict[str, Any]],
) -> None:
    state = {
        "trainable": trainable_state(model, objective),
        "optimizer": opt.state_dict(),
        "scheduler": sched.state_dict(),
        "scaler": scaler.state_dict(),
        "step": step,
        "log": log,
    }
    with atomic_path(path) as tmp:
        torch.save(state, tmp)
