"""Logit lens over a few prompts: how early does each layer already predict the model's answer?

For every prompt the engine reads ``resid_post`` at the last position of every layer in one
forward; each is unembedded with the model's own final norm and output embedding. Per layer
we keep the probability and rank of the token the full model predicts, and the layer's own
top-1 token.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch

from mechscope.engine import Engine, Read, Site
from mechscope.errors import InputError
from mechscope.models.loaded import LoadedModel
from mechscope.stats.finite import require_finite

DEFAULT_PROMPTS = [
    "The Eiffel Tower is located in the city of",
    "When Mary and John went to the store, John gave a drink to",
    "The capital of Japan is",
    "def add(a, b):\n    return a",
    "Two plus three equals",
    "The opposite of hot is",
]


def logit_lens_last_token(lm: LoadedModel, prompts: Sequence[str]) -> pd.DataFrame:
    """One row per (prompt, layer): probability and rank of the final prediction, top-1 token.

    Columns: ``prompt_id, prompt, layer, target, target_prob, target_rank, top_token,
    top_prob``. The last layer's row equals the model's own output (tested).
    """
    engine = Engine.of(lm)
    rows = []
    for i, prompt in enumerate(prompts):
        if not prompt.strip():
            raise InputError("a non-empty prompt", sample=f"prompt-{i}", field="prompt")
        ids = lm.tokenizer(prompt, return_tensors="pt").input_ids  # [1, seq]
        sites = [Site("resid_post", layer, positions=(-1,)) for layer in range(lm.n_layers)]
        out = engine.run(ids, [Read(s) for s in sites], logits=1)
        with torch.no_grad():
            stacked = torch.cat([out[s][:, 0] for s in sites])  # [layers, d_model]
            logp = engine.unembed(stacked).log_softmax(-1)  # [layers, vocab] fp32
        top_logp, top_ids = logp.max(-1)  # [layers]
        require_finite(  # a NaN layer would have no rank and an arbitrary top token
            torch.stack([top_logp, logp.logsumexp(-1)], 1).cpu().numpy(),
            "logit-lens log-probability",
            sample=f"prompt-{i}",
        )
        target = int(out.logits[0, -1].argmax())
        target_logp = logp[:, target]  # [layers]
        ranks = (logp > target_logp[:, None]).sum(-1)  # [layers]
        for layer in range(lm.n_layers):
            rows.append(
                {
                    "prompt_id": i,
                    "prompt": prompt,
                    "layer": layer,
                    "target": lm.tokenizer.decode([target]),
                    "target_prob": float(target_logp[layer].exp()),
                    "target_rank": int(ranks[layer]),
                    "top_token": lm.tokenizer.decode([int(top_ids[layer])]),
                    "top_prob": float(top_logp[layer].exp()),
                }
            )
    return pd.DataFrame(rows)


def probability_matrix(df: pd.DataFrame) -> tuple[np.ndarray, list[str], list[int]]:
    """``[prompts, layers]`` probability of the final prediction, with labels."""
    table = df.pivot(index="prompt_id", columns="layer", values="target_prob").sort_index()
    prompts = df.drop_duplicates("prompt_id").sort_values("prompt_id")
    labels = [f"{p[-28:]!r} → {t!r}" for p, t in zip(prompts.prompt, prompts.target, strict=True)]
    return table.to_numpy(), labels, list(table.columns)
