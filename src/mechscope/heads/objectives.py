"""Objectives: the scalar a head gate is attributed to, for one sample.

An objective owns its sample's token rows and says which logit positions it needs, so the
engine computes the vocabulary projection only there (never ``[rows, seq, vocab]``). It
turns those logits into one fp32 value per gate vector, and a task accuracy for pruning
checks. ``rows`` input rows belong to each gate vector (1, or the mask draws of the
masked-diffusion loss), laid out gate-major: row ``b * rows + j``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch

from mechscope.data.tokens import answer_token_ids, encode
from mechscope.errors import InputError


class Objective(Protocol):
    """What :class:`~mechscope.heads.gatefn.GateFunction` needs from an objective."""

    name: str
    sample_id: str
    higher_is_better: bool
    input_ids: torch.Tensor  # [rows, seq]
    positions: torch.Tensor  # [k] logit positions kept

    @property
    def rows(self) -> int: ...

    def value(self, logits: torch.Tensor, n_gates: int) -> torch.Tensor: ...

    def accuracy(self, logits: torch.Tensor, n_gates: int) -> torch.Tensor: ...


def _log_probs(logits: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(logits.float(), dim=-1)  # fp32, [rows, k, vocab]


@dataclass(frozen=True, eq=False)
class CompletionNLL:
    """Causal-LM mean negative log-likelihood of chosen completion tokens (lower is better).

    ``positions[i]`` is the position whose logits predict ``targets[i]`` (one before it).
    """

    sample_id: str
    input_ids: torch.Tensor  # [1, seq]
    positions: torch.Tensor  # [k]
    targets: torch.Tensor  # [k]
    name: str = "nll"
    higher_is_better: bool = False

    @property
    def rows(self) -> int:
        return 1

    @classmethod
    def from_mask(
        cls, input_ids: torch.Tensor, completion_mask: torch.Tensor, sample_id: str
    ) -> CompletionNLL:
        """Score the tokens where ``completion_mask [seq]`` is True (position 0 has no
        prediction and cannot be scored)."""
        ids = input_ids.reshape(1, -1).long()  # [1, seq]
        mask = completion_mask.reshape(-1).bool()  # [seq]
        if mask.shape[0] != ids.shape[1]:
            raise InputError(
                f"a completion mask of length {ids.shape[1]}, got {mask.shape[0]}",
                sample=sample_id,
                field="completion",
            )
        where = torch.nonzero(mask[1:]).flatten() + 1  # [k] scored token positions
        if where.numel() == 0:
            raise InputError(
                "completion tokens after the first position; the selection is empty",
                sample=sample_id,
                field="completion",
            )
        return cls(sample_id, ids, where - 1, ids[0, where])

    def value(self, logits: torch.Tensor, n_gates: int) -> torch.Tensor:
        lp = _log_probs(logits)  # [n_gates, k, vocab]
        nll = -lp.gather(-1, self.targets.to(lp.device)[None, :, None].expand(n_gates, -1, 1))
        return nll[..., 0].mean(dim=-1)  # [n_gates]

    def accuracy(self, logits: torch.Tensor, n_gates: int) -> torch.Tensor:
        hit = logits.argmax(dim=-1) == self.targets.to(logits.device)[None]  # [n_gates, k]
        return hit.float().mean(dim=-1)


@dataclass(frozen=True, eq=False)
class LogitDifference:
    """``logit[correct] − logit[wrong]`` at the last position (higher is better)."""

    sample_id: str
    input_ids: torch.Tensor  # [1, seq]
    correct_id: int
    wrong_id: int
    name: str = "logit_diff"
    higher_is_better: bool = True

    @property
    def rows(self) -> int:
        return 1

    @property
    def positions(self) -> torch.Tensor:
        return torch.tensor([self.input_ids.shape[1] - 1])

    def value(self, logits: torch.Tensor, n_gates: int) -> torch.Tensor:
        last = logits[:, -1].float()  # [n_gates, vocab]
        return last[:, self.correct_id] - last[:, self.wrong_id]

    def accuracy(self, logits: torch.Tensor, n_gates: int) -> torch.Tensor:
        return (self.value(logits, n_gates) > 0).float()


def nll_objective(tokenizer: Any, prompt: str, completion: str, *, sample_id: str) -> CompletionNLL:
    """NLL of ``completion``'s tokens after ``prompt`` (tokenized in context)."""
    if not completion:
        raise InputError(
            "a non-empty completion; the selection is empty", sample=sample_id, field="completion"
        )
    p = encode(tokenizer, prompt, sample=sample_id)
    comp = answer_token_ids(tokenizer, prompt, completion, sample=sample_id, field="completion")
    ids = torch.tensor([p.ids + comp])  # [1, seq]
    mask = torch.zeros(ids.shape[1], dtype=torch.bool)
    mask[len(p.ids) :] = True
    return CompletionNLL.from_mask(ids, mask, sample_id)


def logit_diff_objective(
    tokenizer: Any, prompt: str, correct: str, wrong: str, *, sample_id: str
) -> LogitDifference:
    """Logit difference between the first tokens of ``correct`` and ``wrong`` after ``prompt``."""
    p = encode(tokenizer, prompt, sample=sample_id)
    c = answer_token_ids(tokenizer, prompt, correct, sample=sample_id, field="correct")[0]
    w = answer_token_ids(tokenizer, prompt, wrong, sample=sample_id, field="wrong")[0]
    if c == w:
        raise InputError(
            f"answers whose first tokens differ, both start with token {c}",
            sample=sample_id,
            field="wrong",
        )
    return LogitDifference(sample_id, torch.tensor([p.ids]), int(c), int(w))
