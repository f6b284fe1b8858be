"""Steering vectors from activations: contrastive activation addition (CAA, Rimsky et al.
2023): the mean over pairs of the activation difference, positive − negative, at the last
token of a site (ActAdd, Turner et al. 2023, is the one-pair case).

Prompts of one token length share a forward; the mean is taken in fp32 whatever the model's
dtype.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from mechscope.engine import Engine, Read, Site
from mechscope.errors import InputError
from mechscope.models.loaded import LoadedModel
from mechscope.steering.samples import Contrast

#: Prompts per forward of :func:`mean_activation`.
BATCH = 32


def mean_activation(lm: LoadedModel, texts: Sequence[str], site: Site) -> torch.Tensor:
    """The mean of ``site``'s activation at each text's last token, fp32: the site's
    per-position shape (``[d_model]``; ``[d_head]`` for one head)."""
    if not texts:
        raise InputError("expected at least one text", field="texts")
    ids = [lm.tokenizer(t)["input_ids"] for t in texts]
    by_len: dict[int, list[list[int]]] = {}
    for row in ids:
        by_len.setdefault(len(row), []).append(row)
    eng, total = Engine.of(lm), None
    for rows in by_len.values():
        for i in range(0, len(rows), BATCH):
            batch = torch.tensor(rows[i : i + BATCH])  # [b, T]
            out = eng.run(batch, [Read(site)], logits=False)
            last = out[site][:, -1].float().sum(0)  # [*shape]: the last token's, summed
            total = last if total is None else total + last
    return total / len(texts)  # type: ignore[operator]


def caa_vector(lm: LoadedModel, pairs: Sequence[Contrast], site: Site) -> torch.Tensor:
    """Mean(positive) − mean(negative) at ``site`` (positions ignored: the last token)."""
    if not pairs:
        raise InputError("expected at least one contrastive pair", field="pairs")
    whole = Site(site.name, site.layer, head=site.head)
    positive = mean_activation(lm, [p.positive for p in pairs], whole)
    return positive - mean_activation(lm, [p.negative for p in pairs], whole)
