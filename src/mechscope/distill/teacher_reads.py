"""The teacher's forward passes over a task: filter pairs it gets wrong, read its residuals.

Kept apart from the cache bookkeeping (:mod:`mechscope.distill.teacher_cache`): these are
the only places the teacher model runs on training pairs.
"""

from __future__ import annotations

from typing import Any

import torch

from mechscope.data.pairs import ContrastivePair, tokenize_pair
from mechscope.distill.pairset import PairSet, build_pairset
from mechscope.distill.passes import answer_logits, clean_logit_diffs, read_resid
from mechscope.distill.purity import purity_labels
from mechscope.engine import Engine
from mechscope.errors import InputError


def filter_by_teacher(
    eng: Engine, pairs: list[ContrastivePair], n: int, task: str, batch_size: int
) -> tuple[PairSet | None, dict[str, Any]]:
    """Tokenize candidates and keep the first ``n`` the teacher gets right."""
    tok = eng.lm.tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    text, tokd, untokenizable = [], [], 0
    for p in pairs:
        try:
            tokd.append(tokenize_pair(p, tok))
            text.append(p)
        except InputError:
            untokenizable += 1
    kept_t, kept_p, wrong, seen = [], [], 0, 0
    for start in range(0, len(tokd), batch_size):
        if len(kept_t) >= n:
            break
        chunk = build_pairset(tokd[start : start + batch_size], pad)
        for i, ld in enumerate(clean_logit_diffs(eng, chunk, batch_size).tolist()):
            seen += 1
            if ld > 0 and len(kept_t) < n:
                kept_t.append(tokd[start + i])
                kept_p.append(text[start + i])
            elif ld <= 0:
                wrong += 1
    counts = {
        "candidates": len(pairs),
        "untokenizable": untokenizable,
        "evaluated": seen,
        "teacher_wrong": wrong,
        "kept": len(kept_t),
        "teacher_accuracy_raw": (seen - wrong) / seen if seen else float("nan"),
    }
    if not kept_t:
        return None, counts
    return build_pairset(kept_t, pad, labels=purity_labels(task, kept_p)), counts


@torch.no_grad()
def train_reads(eng: Engine, data: PairSet, batch_size: int) -> dict[str, torch.Tensor]:
    lm = eng.lm
    layers = list(range(lm.n_layers))
    n, t, p = len(data), data.clean.shape[1], len(data.names)
    full = torch.zeros(lm.n_layers, n, t, lm.d_model, dtype=torch.float16)  # [L, N, T, d]
    keys: dict[str, list[torch.Tensor]] = {"key_clean": [], "key_corrupt": []}
    logits: list[torch.Tensor] = []
    for start in range(0, n, batch_size):
        idx = list(range(start, min(start + batch_size, n)))
        b = data.subset(idx)
        both = []
        for col, (ids, mask) in enumerate(((b.clean, b.clean_mask), (b.corrupt, b.corrupt_mask))):
            h = read_resid(eng, ids, mask, layers)
            stack = torch.stack([h[layer] for layer in layers], 1).float().cpu()  # [b, L, s, d]
            at = b.positions[:, :, col]  # [b, P]
            rows = torch.arange(len(idx))[:, None].expand(-1, p)
            keys["key_clean" if col == 0 else "key_corrupt"].append(
                stack[rows, :, at].transpose(1, 2)
            )  # [b, L, P, d]
            both.append(answer_logits(eng, h[layers[-1]], b.answer[:, col]).cpu())
            if col == 0:
                full[:, idx, : ids.shape[1]] = stack.transpose(0, 1).half()
        logits.append(torch.stack(both, 1))  # [b, 2, V]
    return {
        "key_clean": torch.cat(keys["key_clean"]),
        "key_corrupt": torch.cat(keys["key_corrupt"]),
        "answer_logits": torch.cat(logits),
        "full_clean": full,
    }
