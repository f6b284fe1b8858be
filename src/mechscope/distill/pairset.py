"""Tokenized contrastive pairs as tensors, with named key positions and purity labels.

Distillation addresses positions by *name* (``S2``, ``end``, ``subject``), not by token index:
prompts of one task have different lengths, but every pair has an ``end`` token, and the
index of that token in the clean and in the corrupt prompt is stored per pair. Whether a
position is *modified* (its token differs between clean and corrupt) is kept per pair.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from mechscope.data.batch import collate_pairs
from mechscope.data.pairs import TokenizedPair
from mechscope.errors import InputError


@dataclass
class PairSet:
    """``N`` pairs, right-padded. Index tensors hold ``(clean, corrupt)`` columns."""

    pairs: list[TokenizedPair]
    names: list[str]  # key position names, in a fixed order
    clean: torch.Tensor  # [N, T] token ids
    clean_mask: torch.Tensor  # [N, T] 1 = token
    corrupt: torch.Tensor  # [N, T']
    corrupt_mask: torch.Tensor  # [N, T']
    answer: torch.Tensor  # [N, 2] index of the last prompt token
    correct: torch.Tensor  # [N]
    wrong: torch.Tensor  # [N]
    positions: torch.Tensor  # [N, P, 2] key position indices
    modified: torch.Tensor  # [N, P] bool
    labels: dict[str, np.ndarray] = field(default_factory=dict)  # name -> [N] ints

    def __len__(self) -> int:
        return len(self.pairs)

    @property
    def ids(self) -> list[str]:
        return [p.id for p in self.pairs]

    def modified_fraction(self) -> np.ndarray:
        """Share of pairs in which each key position is modified: ``[P]``."""
        return self.modified.float().mean(0).numpy()

    def subset(self, idx: Sequence[int] | torch.Tensor) -> PairSet:
        """Rows ``idx``, with padding trimmed to the longest selected prompt."""
        idx = torch.as_tensor(idx, dtype=torch.long)
        c_len = int(self.clean_mask[idx].sum(1).max())
        k_len = int(self.corrupt_mask[idx].sum(1).max())
        return PairSet(
            pairs=[self.pairs[int(i)] for i in idx],
            names=self.names,
            clean=self.clean[idx, :c_len],
            clean_mask=self.clean_mask[idx, :c_len],
            corrupt=self.corrupt[idx, :k_len],
            corrupt_mask=self.corrupt_mask[idx, :k_len],
            answer=self.answer[idx],
            correct=self.correct[idx],
            wrong=self.wrong[idx],
            positions=self.positions[idx],
            modified=self.modified[idx],
            labels={k: v[idx.numpy()] for k, v in self.labels.items()},
        )

    def to_records(self) -> dict[str, Any]:
        """JSON-ready form (pairs and labels); :meth:`from_records` rebuilds the set."""
        return {
            "pairs": [asdict(p) for p in self.pairs],
            "names": self.names,
            "labels": {k: v.tolist() for k, v in self.labels.items()},
        }

    @classmethod
    def from_records(cls, rec: dict[str, Any], pad_id: int) -> PairSet:
        pairs = []
        for p in rec["pairs"]:
            p = dict(p)
            p["answer_pos"] = tuple(p["answer_pos"])
            p["positions"] = {k: tuple(v) for k, v in p["positions"].items()}
            p["warnings"] = tuple(p.get("warnings", ()))
            pairs.append(TokenizedPair(**p))
        labels = {k: np.asarray(v, dtype=np.int64) for k, v in rec.get("labels", {}).items()}
        return build_pairset(pairs, pad_id, labels=labels, names=rec["names"])


def build_pairset(
    pairs: Sequence[TokenizedPair],
    pad_id: int,
    *,
    labels: dict[str, np.ndarray] | None = None,
    names: list[str] | None = None,
) -> PairSet:
    """Stack tokenized pairs. Key positions are the span names every pair shares."""
    if not pairs:
        raise InputError("expected at least one pair", field="pairs")
    batch = collate_pairs(list(pairs), pad_id=pad_id)
    shared = [n for n in pairs[0].positions if all(n in p.positions for p in pairs)]
    names = list(names) if names is not None else shared
    missing = [n for n in names if n not in shared]
    if missing:
        raise InputError(f"expected every pair to have positions {missing}", field="positions")
    pos = torch.stack([batch["positions"][n] for n in names], dim=1)  # [N, P, 2]
    mod = torch.tensor([[bool(p.modified.get(n, False)) for n in names] for p in pairs])
    return PairSet(
        pairs=list(pairs),
        names=names,
        clean=batch["clean_ids"],
        clean_mask=batch["clean_mask"],
        corrupt=batch["corrupt_ids"],
        corrupt_mask=batch["corrupt_mask"],
        answer=batch["answer_pos"],
        correct=batch["correct_id"],
        wrong=batch["wrong_id"],
        positions=pos,
        modified=mod,
        labels=dict(labels or {}),
    )


def key_tokens(data: PairSet, columns: Sequence[int]) -> np.ndarray:
    """``[N, len(columns)]`` the clean token at each chosen key position: the word type a
    probe at that position reads (the Hewitt–Liang control task labels types)."""
    at = data.positions[:, list(columns), 0]  # [N, P'] clean index of each position
    return data.clean.gather(1, at).numpy()
