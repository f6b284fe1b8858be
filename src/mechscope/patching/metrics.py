"""Readout metrics of patched runs, all from the logits at the base's readout position.

Everything is computed in fp32 from ``[rows, vocab]`` logits, one row per patched variant,
against a :class:`Reference` holding the unpatched base run. With a candidate set (K-way
tasks) probabilities, predictions and divergences are taken over the candidates only
(softmax renormalised over them); logit differences are raw logits either way.

A sweep that needs only a few tokens' logits (:func:`readout_tokens`) reads out just those
columns and computes its metrics against :meth:`Reference.narrow`, the same reference in
the columns' coordinates: the formulas below do not change.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from mechscope.engine.core.unembed import logit_diff
from mechscope.patching.config import METRICS, TOKEN_METRICS
from mechscope.stats import js_from_logp, kl_from_logp

#: The metrics read off a patched pass's logits: all but ``normalized_effect``, which is
#: computed from them and the baselines afterwards.
READOUT_METRICS = tuple(m for m in METRICS if m != "normalized_effect")


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

    def narrow(self, ids: Sequence[int]) -> Reference:
        """This reference over the logit columns ``ids`` only (which hold every token it
        names): its token ids become indices into ``ids``."""
        at = {t: i for i, t in enumerate(ids)}
        cand = None if self.candidate_ids is None else tuple(at[c] for c in self.candidate_ids)
        base = self.base_logits[..., torch.tensor(list(ids), device=self.base_logits.device)]
        return Reference(base, at[self.correct_id], at[self.wrong_id], at[self.target_id], cand)

    @property
    def base_prediction(self) -> int:
        return int(self.to_vocab(self.view(self.base_logits).argmax(-1)))


def readout_tokens(refs: Sequence[Reference], names: Sequence[str]) -> list[int] | None:
    """The token ids whose logits give ``names`` for every reference (sorted), or None when
    some metric needs the whole vocabulary. With candidates every metric is over them."""
    ids: set[int] = set()
    for ref in refs:
        ids |= {ref.correct_id, ref.wrong_id, ref.target_id}
        if ref.candidate_ids is not None:
            ids |= set(ref.candidate_ids)
        elif not set(names) <= set(TOKEN_METRICS):
            return None
    return sorted(ids)


def readout_metrics(
    logits: torch.Tensor, ref: Reference, names: Sequence[str] = READOUT_METRICS
) -> dict[str, torch.Tensor]:
    """The per-variant metrics ``names`` (of :data:`READOUT_METRICS`; the normalised effect
    needs the clean and corrupt runs): each ``[rows]`` fp32.

    ``kl_to_base`` is KL(patched ‖ base) and ``js_to_base`` the Jensen-Shannon divergence,
    both in nats over the (candidate-restricted) distribution.
    """
    x = logits.float()  # [rows, vocab]
    base = ref.base_logits.float().to(x.device)  # [vocab]
    out = {
        "logit_diff": lambda: logit_diff(x, ref.correct_id, ref.wrong_id),
        "delta_logit": lambda: x[:, ref.target_id] - base[ref.target_id],
        "target_logit": lambda: x[:, ref.target_id],
    }
    if not set(names) <= set(out):  # the distribution's metrics share one log-softmax
        view = ref.view(x)  # [rows, K]
        logp = torch.log_softmax(view, dim=-1)  # [rows, K]
        base_logp = torch.log_softmax(ref.view(base), dim=-1).expand_as(logp)  # [rows, K]
        t = _index_in_view(ref, ref.target_id)
        pred = ref.to_vocab(view.argmax(dim=-1))  # [rows]
        base_pred = ref.to_vocab(ref.view(base).argmax(dim=-1))  # []: on the device, no sync
        out.update(
            target_prob=lambda: logp[:, t].exp(),
            target_logprob=lambda: logp[:, t],
            flip_to_target=lambda: (pred == ref.target_id).float(),
            flip_from_base=lambda: (pred != base_pred).float(),
            kl_to_base=lambda: kl_from_logp(logp, base_logp),
            js_to_base=lambda: js_from_logp(logp, base_logp),
        )
    return {name: out[name]() for name in names}


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
