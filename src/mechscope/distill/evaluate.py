"""Behavioural evaluation of a model on contrastive pairs and held-out text.

Accuracy is binary on the clean prompt: the model prefers the correct answer token to the
wrong one (logit difference > 0), the usual IOI/facts criterion. OOD degradation is the
accuracy lost from the in-distribution test set to an OOD variant (in points of accuracy;
positive = worse OOD). Perplexity is ``exp`` of the mean next-token NLL over every token
of the held-out passages, in fp32 log space.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from mechscope.distill.pairset import PairSet
from mechscope.distill.passes import clean_logit_diffs
from mechscope.engine import Engine
from mechscope.engine.analysis.finite import refuse_nonfinite
from mechscope.errors import InputError
from mechscope.stats import nll_of_targets
from mechscope.stats.finite import require_finite


def accuracy(ld: torch.Tensor | np.ndarray) -> float:
    """Share of pairs with a positive logit difference (NaN for no pairs); a logit
    difference that is NaN or infinite is refused, naming the pair (NaN > 0 is False,
    which would count it as wrong)."""
    arr = np.asarray(ld, dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        require_finite(arr, "the logit difference", sample=f"pair {bad[0]}", layer_axis=None)
    return float(np.mean(arr > 0)) if arr.size else float("nan")


def task_accuracy(eng: Engine, data: PairSet, batch_size: int = 16) -> float:
    return accuracy(clean_logit_diffs(eng, data, batch_size))


def ood_degradation(test_acc: float, ood_acc: Mapping[str, float]) -> dict[str, float]:
    """``test_acc - ood_acc`` per OOD variant, plus ``"mean"`` over variants."""
    out = {k: test_acc - v for k, v in ood_acc.items() if np.isfinite(v)}
    out["mean"] = float(np.mean(list(out.values()))) if out else float("nan")
    return out


@torch.no_grad()
def perplexity(
    eng: Engine, texts: Sequence[str], *, batch_size: int = 8, max_tokens: int = 256
) -> float:
    """Perplexity of the model on ``texts`` (tokens after the first of each text are scored;
    texts are truncated to ``max_tokens``)."""
    if not texts:
        raise InputError("expected at least one text", field="texts")
    tok = eng.lm.tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    total, count = 0.0, 0
    for start in range(0, len(texts), batch_size):
        rows = [
            tok(t, add_special_tokens=True)["input_ids"][:max_tokens]
            for t in texts[start : start + batch_size]
        ]
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), pad, dtype=torch.long)  # [b, s]
        mask = torch.zeros((len(rows), width), dtype=torch.long)  # [b, s]
        for i, r in enumerate(rows):
            ids[i, : len(r)] = torch.tensor(r)
            mask[i, : len(r)] = 1
        logits = eng.run(ids, attention_mask=mask, logits=True).logits  # [b, s, V]
        logp = F.log_softmax(logits[:, :-1].float(), dim=-1)  # [b, s-1, V]
        targets = torch.where(mask[:, 1:].bool(), ids[:, 1:], -100).to(logp.device)
        nll = nll_of_targets(logp, targets, ignore_index=-100)  # [b, s-1], NaN at pads
        keep = (targets != -100).to(nll.device)  # a NaN of the model is no pad: refused
        rows_bad = (~torch.isfinite(nll) & keep).any(dim=1).nonzero().flatten().tolist()
        if rows_bad:
            i = rows_bad[0]
            refuse_nonfinite(
                eng,
                ids[i : i + 1],
                "the log-likelihood",
                sample=f"text {start + i}",
                attention_mask=mask[i : i + 1],
            )
        total += float(nll[keep].double().sum())
        count += int(keep.sum())
    if count == 0:
        raise InputError("expected texts with at least two tokens", field="texts")
    return float(np.exp(total / count))
