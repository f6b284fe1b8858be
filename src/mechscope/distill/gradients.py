"""The two losses' gradients on the student, logged apart: why a method weight stops learning.

Every method trains ``lambda_kl * KL + lambda_method * L_method``. When the method term's
gradient on the student's parameters is much larger than the KL term's, or points against
it, the step that clipping and AdamW take follows the method term and the output barely
moves. :func:`term_gradients` measures both on the steps it is asked to: one backward pass
per term (``torch.autograd.grad`` with the graph kept), beside the sum's own backward that
the trainer runs as on every other step, so logging leaves the step bit for bit as it was
(adding the two terms' gradients at the end instead would round differently, and AdamW turns
a rounding difference in a near-zero gradient into a step of ±lr). It returns

- ``grad_norm_kl``, ``grad_norm_method``: the L2 norm of each *weighted* term's gradient
  over the student's trainable parameters (what the optimizer sees, before clipping);
- ``grad_cos``: the cosine between the two gradients over those parameters (NaN when a
  term has no gradient there, e.g. ``standard_kd``'s method term);
- ``adam_norm_kl``, ``adam_norm_method``, ``adam_cos``: the same after AdamW's per-parameter
  scaling, each term's gradient divided by ``sqrt(v̂) + eps`` with the optimizer's second
  moment ``v̂`` before the step (NaN on the first step, which has none). The global norms
  above can hide a term that is small overall but large where the other term's gradient
  history is small: AdamW's step follows these scaled gradients, not the raw ones.

With the task's ``margin`` (the student's mean clean logit difference on the training batch,
:meth:`~mechscope.distill.objective.Objective.terms`), also whether each term's step raises
it:

- ``margin``: its value on the batch;
- ``margin_cos_kl``, ``margin_cos_method``: the cosine between the step each weighted term
  asks for, ``−∇ term``, and the margin's gradient ``∇ margin``. Negative: descending that
  term lowers the margin to first order, the term works against the task;
- ``adam_margin_cos_kl``, ``adam_margin_cos_method``: the same with the term's step after
  AdamW's scaling, ``−∇ term / (sqrt(v̂) + eps)``, against the unscaled ``∇ margin``: the
  margin moves by ``∇ margin · Δθ``, so it is the step that is scaled, not the margin's
  gradient (NaN on the first step, as the other ``adam_*`` columns).

The objective's own parameters (FitNets projections) are left out: only the KL-free
method term moves them, so they say nothing about the two losses pulling one student.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from mechscope.distill.intervals import mean_ci
from mechscope.distill.plateau import END_WINDOW, plateau_step
from mechscope.report import Figure, Series, curves
from mechscope.runs import has_table, read_table


def term_gradients(
    terms: Mapping[str, torch.Tensor],
    params: Sequence[torch.nn.Parameter],
    n_shared: int,
    scale: float = 1.0,
    opt: torch.optim.Optimizer | None = None,
    margin: torch.Tensor | None = None,
) -> dict[str, float]:
    """The norms and cosines of the module docstring for ``d(scale * term) / d params``, term
    by term; ``.grad`` is left alone and the graph kept for the sum's backward.

    ``terms``: ``{"kl": weighted KL, "method": weighted method loss}`` (scalars);
    ``params[:n_shared]`` are the student's trainable parameters, the rest the objective's.
    ``scale`` is the loss scaler's factor (the returned norms are unscaled); ``opt`` the
    Adam-family optimizer whose second moments give the ``adam_*`` columns; ``margin`` (a
    scalar of the same graph) adds the ``margin*`` columns.
    """
    names = list(terms)
    live = [n for n in names if terms[n].requires_grad]
    flat = {n: _gradient(terms[n], params[:n_shared], scale) for n in live}
    out = {f"grad_norm_{n}": float(flat[n].norm()) if n in flat else 0.0 for n in names}
    out["grad_cos"] = _cosine(*(flat[n] for n in live)) if len(live) == 2 else float("nan")
    precond = _adam_scale(opt, params[:n_shared]) if opt is not None else None
    nan = float("nan")
    adam = {n: flat[n] / precond for n in live} if precond is not None else {}
    out |= {f"adam_norm_{n}": float(adam[n].norm()) if n in adam else nan for n in names}
    out["adam_cos"] = _cosine(*(adam[n] for n in live)) if len(adam) == 2 else nan
    if margin is None:
        return out
    out["margin"] = float(margin.detach())
    up = _gradient(margin, params[:n_shared], scale) if margin.requires_grad else None
    for n in names:
        raw, scaled = flat.get(n), adam.get(n)
        out[f"margin_cos_{n}"] = _cosine(-raw, up) if raw is not None and up is not None else nan
        fits = scaled is not None and up is not None
        out[f"adam_margin_cos_{n}"] = _cosine(-scaled, up) if fits else nan
    return out


def _gradient(
    value: torch.Tensor, params: Sequence[torch.nn.Parameter], scale: float
) -> torch.Tensor:
    """``d value / d params`` as one fp64 vector, ``[n_params]``: differentiated at the loss
    scaler's ``scale`` (so an fp16 gradient does not underflow) and divided back, the graph
    kept for the sum's own backward."""
    grads = torch.autograd.grad(value * scale, params, retain_graph=True, allow_unused=True)
    return _flat(grads, params) / scale


def _cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    """The cosine of two vectors; NaN unless both are non-zero."""
    na, nb = a.norm(), b.norm()
    return float(torch.dot(a, b) / (na * nb)) if na > 0 and nb > 0 else float("nan")


def _adam_scale(
    opt: torch.optim.Optimizer, params: Sequence[torch.nn.Parameter]
) -> torch.Tensor | None:
    """AdamW's per-parameter divisor ``sqrt(v / (1 - beta2^t)) + eps`` before this step, as
    one fp64 vector over ``params`` (``[n_params]``); None before the first step."""
    parts = []
    for p in params:
        state = opt.state.get(p, {})
        if "exp_avg_sq" not in state:
            return None
        group = next(g for g in opt.param_groups if any(q is p for q in g["params"]))
        beta2, eps, t = group["betas"][1], group["eps"], float(state["step"])
        v = state["exp_avg_sq"].detach().double().reshape(-1) / (1 - beta2**t)
        parts.append(v.sqrt() + eps)
    return torch.cat(parts)


def _flat(
    grads: Sequence[torch.Tensor | None], params: Sequence[torch.nn.Parameter]
) -> torch.Tensor:
    """One fp64 vector of ``grads`` (zeros where a parameter got no gradient): ``[n_params]``."""
    return torch.cat(
        [
            (g if g is not None else torch.zeros_like(p)).detach().double().reshape(-1)
            for g, p in zip(grads, params, strict=True)
        ]
    )


#: The cosines of each term's step with the task's margin (:func:`term_gradients`), whose
#: means over the logged steps :func:`train_summary` returns as ``<column>_mean``.
MARGIN_COSINES = ("margin_cos_kl", "margin_cos_method", "adam_margin_cos_kl",
                  "adam_margin_cos_method")  # fmt: skip


def train_summary(log: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Per trial, from its training log: the mean KL and method loss over the last
    ``END_WINDOW`` of the steps (on training batches), and over the steps whose gradients
    were logged, the mean cosine and the median ratio of the method term's gradient norm to
    the KL term's, raw and after AdamW's scaling (``adam_*``), the mean of each
    :data:`MARGIN_COSINES` and the margin at the last logged step (``train_margin_end``:
    the last step, :func:`~mechscope.distill.trainer.logs_gradients`); the steps until the
    KL's and the margin's curves plateau (``kl_plateau_step``, ``margin_plateau_step``:
    :func:`~mechscope.distill.plateau.plateau_step`). NaN where the log has none
    (``untrained``, no gradient logging, or a log from before those columns)."""
    nan = float("nan")
    out = {"train_kl_end": nan, "train_method_end": nan, "grad_cos_mean": nan}
    out |= {"grad_ratio_median": nan, "adam_cos_mean": nan, "adam_ratio_median": nan}
    out |= {"train_margin_end": nan} | {f"{c}_mean": nan for c in MARGIN_COSINES}
    out |= {"kl_plateau_step": nan, "margin_plateau_step": nan}
    if not log:
        return out
    tail = log[-max(1, math.ceil(END_WINDOW * len(log))) :]
    out["train_kl_end"] = float(np.mean([r["kl"] for r in tail]))
    out["kl_plateau_step"] = plateau_step([r["step"] for r in log], [r["kl"] for r in log])
    out["train_method_end"] = float(np.mean([r["method"] for r in tail]))
    logged = [r for r in log if "grad_norm_kl" in r and np.isfinite(r["grad_norm_kl"])]
    cos = [r["grad_cos"] for r in logged if np.isfinite(r["grad_cos"])]
    if cos:
        out["grad_cos_mean"] = float(np.mean(cos))
    ratio = [r["grad_norm_method"] / r["grad_norm_kl"] for r in logged if r["grad_norm_kl"] > 0]
    if ratio:
        out["grad_ratio_median"] = float(np.median(ratio))
    scaled = [r for r in logged if np.isfinite(r.get("adam_cos", np.nan))]
    if scaled:
        out["adam_cos_mean"] = float(np.mean([r["adam_cos"] for r in scaled]))
        out["adam_ratio_median"] = float(
            np.median([r["adam_norm_method"] / r["adam_norm_kl"] for r in scaled])
        )
    margins = [r for r in logged if np.isfinite(r.get("margin", nan))]
    if margins:
        out["train_margin_end"] = float(margins[-1]["margin"])
        steps, values = [r["step"] for r in margins], [r["margin"] for r in margins]
        out["margin_plateau_step"] = plateau_step(steps, values)
    for c in MARGIN_COSINES:
        x = [r[c] for r in logged if np.isfinite(r.get(c, nan))]
        if x:
            out[f"{c}_mean"] = float(np.mean(x))
    return out


#: Columns of a train log that :func:`gradient_table` keeps.
GRAD_COLUMNS = (
    "step", "kl", "method", "grad_norm", "grad_norm_kl", "grad_norm_method", "grad_cos",
    "adam_norm_kl", "adam_norm_method", "adam_cos", "margin", *MARGIN_COSINES,
)  # fmt: skip


def gradient_table(study: Path) -> pd.DataFrame:
    """The logged steps of every finished trial's training log, with its student, task,
    method and seed: one row per (trial, logged step). Empty when nothing was logged."""
    frames = []
    for d in sorted((Path(study) / "trials").glob("*")):
        if not (has_table(d, "metrics") and has_table(d, "train_log")):
            continue
        log = read_table(d, "train_log")
        if "grad_cos" not in log:
            continue
        m = read_table(d, "metrics").iloc[0]
        log = log[log["grad_norm_kl"].notna()][[c for c in GRAD_COLUMNS if c in log]]
        frames.append(log.assign(**{k: m[k] for k in ("student", "task", "method", "seed")}))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def gradient_figures(table: pd.DataFrame) -> dict[str, Figure]:
    """Over training, per method (first student × task): the cosine between the KL term's
    and the method term's gradients, log10 of their norm ratio and, where the log has them,
    the same ratio after AdamW's per-parameter scaling and the cosine of the method term's
    step with the margin's gradient, raw and scaled; means over seeds with 95 % intervals."""
    table = table[table["grad_norm_method"] > 0]
    if table.empty:
        return {}
    first = table[["student", "task"]].iloc[0]
    t = table[(table["student"] == first["student"]) & (table["task"] == first["task"])].copy()
    t["log_ratio"] = np.log10(t["grad_norm_method"] / t["grad_norm_kl"])
    panels = [
        ("grad_cos", "gradient-cosine", "cos(∇ λ_KL·KL, ∇ λ_method·L_method)", 0.0),
        ("log_ratio", "gradient-ratio", "log10 ‖∇ λ_method·L_method‖ / ‖∇ λ_KL·KL‖", 0.0),
    ]
    if "adam_norm_kl" in t and t["adam_norm_kl"].notna().any():
        t["adam_log_ratio"] = np.log10(t["adam_norm_method"] / t["adam_norm_kl"])
        y_title = "log10 of that ratio after AdamW scaling"
        panels.append(("adam_log_ratio", "gradient-adam-ratio", y_title, 0.0))
    for col, stem, y_title in (
        ("margin_cos_method", "gradient-margin-cosine", "cos(−∇ λ_method·L_method, ∇ LD)"),
        ("adam_margin_cos_method", "gradient-adam-margin-cosine", "the same after AdamW scaling"),
    ):
        if col in t and t[col].notna().any():
            panels.append((col, stem, y_title, 0.0))
    steps = sorted(t["step"].unique())
    figs = {}
    for col, stem, y_title, hline in panels:
        series = []
        for method, g in t[t[col].notna()].groupby("method", sort=False):
            by = g.groupby("step")[col]
            mean = by.mean().reindex(steps).to_numpy(float)
            cis = [mean_ci(x) for _, x in by] if len(g) else []
            ci = pd.DataFrame(cis, index=list(by.groups), columns=["lo", "hi"]).reindex(steps)
            lo, hi = ci["lo"].to_numpy(float), ci["hi"].to_numpy(float)
            series.append(Series(method, mean, np.where(np.isnan(lo), mean, lo),
                                 np.where(np.isnan(hi), mean, hi)))  # fmt: skip
        figs[stem] = curves(
            [float(s) for s in steps],
            series,
            f"{first['student']} · {first['task']}: the two loss terms' gradients on the student",
            "training step",
            y_title,
            hline=hline,
            caption="How to read this: gradients of the weighted KL and method terms on the "
            "student's parameters, logged every few steps; lines are means over seeds, bands "
            "95 % intervals. A cosine below 0 means the method term pulls against the KL "
            "term; a norm ratio above 0 means the method term dominates the clipped step. "
            "After AdamW's scaling, each gradient is divided by the optimizer's √v̂, as AdamW "
            "divides the step: the share of the step each term sets. Against the margin LD "
            "(the student's mean logit difference on the batch), a cosine below 0 means the "
            "method term's step lowers it: the term works against the task.",
        )
    return figs
