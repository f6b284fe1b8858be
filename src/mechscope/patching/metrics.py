"""Readout metrics of patched runs, all from the logits at the base's readout position.

Everything is computed in fp32 from ``[rows, vocab]`` logits, one row per patched variant,
against a :class:`Reference` holding the unpatched base run. With a candidate set (K-way
tasks) probabilities, predictions and divergences are taken over the candidates only
(softmax renormalised over them); logit differences are raw logits either way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from mechscope.engine.core.unembed import logit_diff
from mechscope.stats import js_from_logp, kl_from_logp


@dataclass(frozen=True)
class Reference:
    """The unpatched base run at the readout and the tokens the metrics are about."""

    base_logits: torch.Tensor  # [vocab] fp32
    correct_id: int
    wrong_id: int
    target_id: int
    candidate_ids: tuple[int, ...] | None = None

    def view(self, logits: torch.Tensor) -> torch.Tensor:
        """Logits restricted to the candidate set (or all of them): ``[..., K | vocab]``."""
        if self.candidate_ids is None:
            return logits
        return logits[..., list(self.candidate_ids)]

    def to_vocab(self, index: torch.Tensor) -> torch.Tensor:
        """Map indices into :meth:`view` back to token ids."""
        if self.candidate_ids is None:
            return index
        ids = torch.tensor(self.candidate_ids, device=index.device)
        return ids[index]

    @property
    def base_prediction(self) -> int:
        return int(self.to_vocab(self.view(self.base_logits).argmax(-1)))


def readout_metrics(logits: torch.Tensor, ref: Reference) -> dict[str, torch.Tensor]:
    """Every per-variant metric of :data:`~mechscope.patching.config.METRICS` except the
    normalised effect (which needs the clean and corrupt runs): each ``[rows]`` fp32.

    ``kl_to_base`` is KL(patched ‖ base) and ``js_to_base`` the Jensen-Shannon divergence,
    both in nats over the (candidate-restricted) distribution.
    """
    x = logits.float()  # [rows, vocab]
    base = ref.base_logits.float().to(x.device)  # [vocab]
    view = ref.view(x)  # [rows, K]
    logp = torch.log_softmax(view, dim=-1)  # [rows, K]
    base_logp = torch.log_softmax(ref.view(base), dim=-1)  # [K]
    t = _index_in_view(ref, ref.target_id)
    pred = ref.to_vocab(view.argmax(dim=-1))  # [rows]
    base_pred = ref.to_vocab(ref.view(base).argmax(dim=-1))  # []: on the device, no sync
    return {
        "logit_diff": logit_diff(x, ref.correct_id, ref.wrong_id),
        "delta_logit": x[:, ref.target_id] - base[ref.target_id],
        "target_logit": x[:, ref.target_id],
        "target_prob": logp[:, t].exp(),
        "target_logprob": logp[:, t],
        "flip_to_target": (pred == ref.target_id).float(),
        "flip_from_base": (pred != base_pred).float(),
        "kl_to_base": kl_from_logp(logp, base_logp.expand_as(logp)),
        "js_to_base": js_from_logp(logp, base_logp.expand_as(logp)),
    }


def scalar_metric(logits: torch.Tensor, ref: Reference, name: str) -> torch.Tensor:
    """One differentiable scalar-per-row metric (for attribution patching): ``[rows]``."""
    x = logits.float()
    if name == "logit_diff":
        return logit_diff(x, ref.correct_id, ref.wrong_id)
    if name == "target_logit":
        return x[..., ref.target_id]
    if name == "target_logprob":
        return torch.log_softmax(ref.view(x), dim=-1)[..., _index_in_view(ref, ref.target_id)]
    raise ValueError(f"unknown metric {name!r}: logit_diff, target_logit or target_logprob")


def normalized_effect(patched: Any, clean: float, corrupt: float) -> Any:
    """``(patched - corrupt) / (clean - corrupt)`` of logit differences (float, array or
    tensor): 1 = the clean behaviour, 0 = the corrupt one; NaN when clean and corrupt do
    not differ."""
    denom = clean - corrupt
    if abs(denom) < 1e-9:
        return patched * float("nan")
    return (patched - corrupt) / denom


def _index_in_view(ref: Reference, token: int) -> int:
    if ref.candidate_ids is None:
        return token
    return ref.candidate_ids.index(token)
