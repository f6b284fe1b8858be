"""What a circuit is scored on: one number per example from the answer position's logits.

A metric is ``metric(logits [b, vocab] fp32, clean [b, vocab] fp32, labels [b, 2]) -> [b]``:
the logits of the pass, those of the clean run (for a divergence), and each example's
``(correct, wrong)`` token ids. Attribution differentiates the sum over examples and divides
by their number, so every score is a mean over examples of a per-example change.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from mechscope.errors import InputError

Metric = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def logit_diff(logits: torch.Tensor, clean: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``logit[correct] − logit[wrong]`` per example ``[b]``."""
    picked = logits.gather(-1, labels.to(logits.device))  # [b, 2]
    return picked[:, 0] - picked[:, 1]


def prob_diff(logits: torch.Tensor, clean: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``p[correct] − p[wrong]`` per example ``[b]`` (softmax over the vocabulary)."""
    picked = logits.float().softmax(-1).gather(-1, labels.to(logits.device))  # [b, 2]
    return picked[:, 0] - picked[:, 1]


def kl(logits: torch.Tensor, clean: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``KL(clean ‖ pass)`` over the vocabulary per example ``[b]``: 0 on the clean run."""
    lp = clean.float().log_softmax(-1).to(logits.device)
    lq = logits.float().log_softmax(-1)
    return (lp.exp() * (lp - lq)).sum(-1)


METRICS: dict[str, Metric] = {"logit_diff": logit_diff, "prob_diff": prob_diff, "kl": kl}


def resolve(metric: str | Metric) -> tuple[str, Metric]:
    """``(name, function)`` of a metric given by name or as a function (named ``custom``)."""
    if callable(metric):
        return getattr(metric, "__name__", "custom"), metric
    if metric not in METRICS:
        raise InputError(f"expected one of {', '.join(METRICS)}, got {metric!r}", field="metric")
    return metric, METRICS[metric]
