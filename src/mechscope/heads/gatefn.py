"""``f(α)``: one sample's objective as a function of per-row head gates.

Each gate vector ``α [layers, heads]`` scales every head's ``z`` through the engine's
differentiable :class:`~mechscope.engine.Gate`. A batch of gate vectors becomes a batch of
rows of the same sample, so the steps of an integrated-gradients chunk share one forward
and one backward pass.

In a causal model the tokens after the last scored position reach nothing the objective
reads, so the gate function runs the sample only up to that position (:func:`needed_ids`):
a completion's last token is a target, never an input, and a one-token completion after a
14-token prompt costs 14 positions, not 15.
"""

from __future__ import annotations

import numpy as np
import torch

from mechscope.engine import Engine, Gate
from mechscope.engine.core.frozen import frozen_parameters
from mechscope.errors import InputError
from mechscope.heads.integrate import shared_layers
from mechscope.heads.memory import fit_gates, note_chunk
from mechscope.heads.objectives import Objective
from mechscope.models.loaded import LoadedModel


def grad_rows(lm: LoadedModel, seq_len: int, rows_per_gate: int, logits_positions: int) -> int:
    """Gate vectors per chunk whose forward+backward fits the memory budget: a backward
    keeps every layer's saved activations (:mod:`mechscope.heads.memory`)."""
    return fit_gates(lm, seq_len, rows_per_gate, logits_positions).rows


def needed_ids(lm: LoadedModel, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """``ids [m, seq]`` cut after the last of ``positions [k]`` (counted from the start), the
    positions whose logits are read: ``[m, last + 1]`` where the model is a causal LM; whole
    otherwise (a bidirectional model's later tokens reach every position)."""
    if lm.card.auto_class != "AutoModelForCausalLM" or not lm.causal:
        return ids
    return ids[:, : int(positions.max()) + 1]


def read_positions(objective: Objective) -> torch.Tensor:
    """The objective's positions counted from the start (``[k]``): a negative one would
    point elsewhere once the tail is cut."""
    return objective.positions.reshape(-1).long() % objective.input_ids.shape[1]


class GateFunction:
    """``alpha [n, layers, heads]`` -> objective ``[n]`` (fp32) for one sample."""

    def __init__(self, lm: LoadedModel, objective: Objective, *, default_batch: int | None = None):
        self.lm = lm
        self.engine = Engine.of(lm)
        self.objective = objective
        self.shape: tuple[int, int] = (lm.n_layers, lm.n_heads)
        given = int(objective.input_ids.shape[1])
        if lm.max_context is not None and given > lm.max_context:
            raise InputError(
                f"at most {lm.max_context} tokens, got {given}",
                sample=objective.sample_id,
                field="prompt",
            )
        self.positions = read_positions(objective)  # [k]
        self.input_ids = needed_ids(lm, objective.input_ids, self.positions)  # [m, seq]
        seq, k = int(self.input_ids.shape[1]), int(self.positions.numel())
        self.default_batch = default_batch or grad_rows(lm, seq, objective.rows, k)

    def note_chunk(self, gates: int) -> None:
        """Record the predicted peak of a gradient chunk of ``gates`` gate vectors."""
        seq, k = int(self.input_ids.shape[1]), int(self.positions.numel())
        note_chunk(self.lm, gates, self.objective.rows, seq, k)

    @property
    def sample_id(self) -> str:
        return self.objective.sample_id

    @property
    def higher_is_better(self) -> bool:
        return self.objective.higher_is_better

    shares_prefix = True
    """``f(alpha, shared_below=k)`` is supported (see :meth:`logits`)."""

    def logits(self, alpha: torch.Tensor, *, shared_below: int = 0) -> torch.Tensor:
        """Logits at the objective's positions for every gate row: ``[n * rows, k, vocab]``.

        ``shared_below=k``: every row has the same gates in layers ``< k``, and no gradient
        is wanted there. Layers ``< k`` then run once for the sample (with row 0's gates,
        outside the autograd graph) and the batch is expanded at ``resid_pre[k]``, so a chunk
        of per-layer IG steps whose moving layers are ``>= k`` pays for ``L - k`` layers
        forward and backward instead of ``L``. Gradients with respect to ``alpha[:, :k]``
        come back as zeros. Without gradients, rows that agree on their bottom layers share
        them anyway (Shapley coalitions, pruning curves and path ends often do).
        """
        n_layers = self.shape[0]
        if alpha.dim() != 3 or tuple(alpha.shape[1:]) != self.shape:
            raise InputError(
                f"gates of shape [n, {n_layers}, {self.shape[1]}], got {tuple(alpha.shape)}",
                sample=self.sample_id,
                field="alpha",
            )
        k = int(shared_below)
        if not 0 <= k < n_layers:
            raise ValueError(f"shared_below must lie in 0..{n_layers - 1}, got {k}")
        if k and not bool((alpha[:, :k] == alpha[:1, :k]).all()):
            raise ValueError(f"shared_below={k}: the rows' gates differ below layer {k}")
        m, n = self.objective.rows, alpha.shape[0]
        grad = torch.is_grad_enabled() and alpha.requires_grad
        if not grad and n > 1:
            k = max(k, shared_layers(alpha, n_layers))
        device = self.lm.device
        gates = alpha.repeat_interleave(m, dim=0) if m > 1 else alpha  # [n * m, L, H]
        if k == 0:
            ids = self.input_ids.repeat(n, 1)  # [n * m, seq]
            interventions = [Gate(gates.to(device))]
            expand = None
        else:
            ids = self.input_ids  # [m, seq]: layers < k run once per prompt row
            interventions = [Gate(gates.to(device), layers=range(k, n_layers))]
            prefix = alpha[0, :k].detach()  # [k, H]
            if not bool((prefix == 1).all()):
                shared = torch.ones(self.shape, dtype=prefix.dtype)
                shared[:k] = prefix
                interventions.insert(0, Gate(shared.to(device), layers=range(k)))
            rows = torch.arange(n * m) % m  # expanded row j continues prompt row j % m
            expand = (k, n) if m == 1 else (k, rows)
        with frozen_parameters(self.lm.model):
            out = self.engine.run(
                ids,
                interventions,
                logits=self.positions,
                expand=expand,
                grad=grad,
            )
        return out.logits  # [n * m, k, vocab]

    def __call__(self, alpha: torch.Tensor, *, shared_below: int = 0) -> torch.Tensor:
        logits = self.logits(alpha, shared_below=shared_below)
        return self.objective.value(logits, alpha.shape[0]).float()  # [n]

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
