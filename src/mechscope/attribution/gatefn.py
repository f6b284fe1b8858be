"""``f(α)``: one sample's objective as a function of per-row head gates.

Each gate vector ``α [layers, heads]`` scales every head's ``z`` through the engine's
differentiable :class:`~mechscope.engine.Gate`. A batch of gate vectors becomes a batch of
rows of the same sample, so the steps of an integrated-gradients chunk share one forward
and one backward pass.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch

from mechscope.attribution.objectives import Objective
from mechscope.engine import Engine, Gate
from mechscope.engine.sweep import DEFAULT_BUDGET, bytes_per_row
from mechscope.errors import InputError
from mechscope.models.loaded import LoadedModel


@contextmanager
def frozen_parameters(lm: LoadedModel) -> Iterator[None]:
    """Turn off parameter gradients for the duration (restored after): attribution needs
    gradients with respect to the gates only, and the autograd graph stays smaller."""
    params = list(lm.model.parameters())
    before = [p.requires_grad for p in params]
    try:
        for p in params:
            p.requires_grad_(False)
        yield
    finally:
        for p, flag in zip(params, before, strict=True):
            p.requires_grad_(flag)


def grad_rows(lm: LoadedModel, seq_len: int, rows_per_gate: int, logits_positions: int) -> int:
    """Gate vectors per chunk whose forward+backward fits the memory budget (an estimate:
    a backward keeps every layer's activations, an inference forward only one layer's)."""
    per_row = bytes_per_row(lm, seq_len, logits_positions=logits_positions) * (lm.n_layers + 1)
    return max(1, min(256, DEFAULT_BUDGET // (per_row * rows_per_gate)))


class GateFunction:
    """``alpha [n, layers, heads]`` -> objective ``[n]`` (fp32) for one sample."""

    def __init__(self, lm: LoadedModel, objective: Objective, *, default_batch: int | None = None):
        self.lm = lm
        self.engine = Engine.of(lm)
        self.objective = objective
        self.shape: tuple[int, int] = (lm.n_layers, lm.n_heads)
        seq = int(objective.input_ids.shape[1])
        if lm.max_context is not None and seq > lm.max_context:
            raise InputError(
                f"at most {lm.max_context} tokens, got {seq}",
                sample=objective.sample_id,
                field="prompt",
            )
        k = int(objective.positions.numel())
        self.default_batch = default_batch or grad_rows(lm, seq, objective.rows, k)

    @property
    def sample_id(self) -> str:
        return self.objective.sample_id

    @property
    def higher_is_better(self) -> bool:
        return self.objective.higher_is_better

    def logits(self, alpha: torch.Tensor) -> torch.Tensor:
        """Logits at the objective's positions for every gate row: ``[n * rows, k, vocab]``."""
        if alpha.dim() != 3 or tuple(alpha.shape[1:]) != self.shape:
            raise InputError(
                f"gates of shape [n, {self.shape[0]}, {self.shape[1]}], got {tuple(alpha.shape)}",
                sample=self.sample_id,
                field="alpha",
            )
        m = self.objective.rows
        ids = self.objective.input_ids.repeat(alpha.shape[0], 1)  # [n * m, seq]
        gates = alpha.repeat_interleave(m, dim=0) if m > 1 else alpha  # [n * m, L, H]
        with frozen_parameters(self.lm):
            out = self.engine.run(
                ids,
                [Gate(gates.to(self.lm.device))],
                logits=self.objective.positions,
                grad=torch.is_grad_enabled() and alpha.requires_grad,
            )
        return out.logits  # [n * m, k, vocab]

    def __call__(self, alpha: torch.Tensor) -> torch.Tensor:
        return self.objective.value(self.logits(alpha), alpha.shape[0]).float()  # [n]

    def metrics(
        self, alpha: torch.Tensor, batch: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Objective and task accuracy at each gate row, without gradients (float64 ``[n]``)."""
        size = batch or max(1, self.default_batch * 3)
        values, accs = [], []
        with torch.no_grad():
            for start in range(0, alpha.shape[0], size):
                chunk = alpha[start : start + size].float()
                logits = self.logits(chunk)
                values.append(self.objective.value(logits, chunk.shape[0]).double().cpu())
                accs.append(self.objective.accuracy(logits, chunk.shape[0]).double().cpu())
        return torch.cat(values).numpy(), torch.cat(accs).numpy()
