"""Information purity: is the contrastive difference d a cleaner carrier of the task than h?

At *unmodified* key positions (same token in clean and corrupt), logistic-regression probes
read a task label and a control label from either the clean representation ``h`` or the
difference ``d = h_clean - h_corrupt``. Selectivity (Hewitt & Liang, 2019) is task accuracy
minus control accuracy: a representation that encodes the task but not incidental facts
(which template was used) has high selectivity. Labels: IOI task = name order (ABBA = 1),
facts task = the most frequent relation vs the rest, WinoGrande task = which option is the
answer, math task = the operation; control = template parity (IOI, math), a hash of the
subject (facts), or of the pair id (otherwise).
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Sequence

import numpy as np
import pandas as pd
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from mechscope.data.pairs import ContrastivePair
from mechscope.errors import InputError


def _hash_bit(text: str) -> int:
    return zlib.crc32(text.encode("utf-8")) & 1


def purity_labels(task: str, pairs: Sequence[ContrastivePair]) -> dict[str, np.ndarray]:
    """``{"task": [N], "control": [N]}`` binary labels for the pairs of ``task``."""
    meta = [p.metadata for p in pairs]
    if task == "ioi":
        t = [int(m.get("order") == "ABBA") for m in meta]
        c = [
            int(m.get("template_index", _hash_bit(p.id))) % 2
            for m, p in zip(meta, pairs, strict=True)
        ]
    elif task == "facts":
        top = Counter(m.get("relation_id") for m in meta).most_common(1)[0][0] if meta else None
        t = [int(m.get("relation_id") == top) for m in meta]
        c = [_hash_bit(str(m.get("subject", p.id))) for m, p in zip(meta, pairs, strict=True)]
    elif task == "winogrande":
        t = [int(m.get("answer") == 1) for m in meta]
        c = [_hash_bit(p.id) for p in pairs]
    elif task == "math":
        t = [int(m.get("op") == "+") for m in meta]
        c = [int(m.get("template_index", 0)) % 2 for m in meta]
    else:
        t = [0] * len(pairs)
        c = [_hash_bit(p.id) for p in pairs]
    return {"task": np.asarray(t, dtype=np.int64), "control": np.asarray(c, dtype=np.int64)}


def probe_accuracy(x: np.ndarray, y: np.ndarray, *, seed: int = 0, test_size: float = 0.2) -> float:
    """Held-out accuracy of a standardised logistic-regression probe (80/20 split).

    NaN when the label has a single class (nothing to learn) or too few samples per class
    for a stratified split.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y)
    if x.ndim != 2 or y.shape != (x.shape[0],):
        raise InputError(f"expected x [N, d] and y [N], got {x.shape} and {y.shape}", field="y")
    counts = np.bincount(y) if y.size else np.array([])
    if (counts > 0).sum() < 2 or counts[counts > 0].min() < 2:
        return float("nan")
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=test_size, random_state=seed, stratify=y)
    probe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
    probe.fit(xtr, ytr)
    return float(np.mean(probe.predict(xte) == yte))


def selectivity(
    x: np.ndarray, task: np.ndarray, control: np.ndarray, *, seed: int = 0
) -> dict[str, float]:
    """Task accuracy, control accuracy and their difference for one representation."""
    acc_t = probe_accuracy(x, task, seed=seed)
    acc_c = probe_accuracy(x, control, seed=seed)
    return {"task_acc": acc_t, "control_acc": acc_c, "selectivity": acc_t - acc_c}


def information_purity(
    h_clean: np.ndarray,
    h_corrupt: np.ndarray,
    labels: dict[str, np.ndarray],
    layers: Sequence[int],
    positions: Sequence[str],
    *,
    seed: int = 0,
) -> pd.DataFrame:
    """Probe ``h`` and ``d`` at each (layer, position).

    ``h_clean``/``h_corrupt``: ``[N, L, P, d]`` for the chosen ``layers`` and ``positions``
    (in that order). One row per (layer, position, representation).
    """
    rows = []
    for li, layer in enumerate(layers):
        for pi, pos in enumerate(positions):
            h = h_clean[:, li, pi]  # [N, d]
            d = h - h_corrupt[:, li, pi]
            for rep, x in (("h", h), ("d", d)):
                rows.append(
                    {
                        "layer": int(layer),
                        "position": pos,
                        "representation": rep,
                        **selectivity(x, labels["task"], labels["control"], seed=seed),
                    }
                )
    return pd.DataFrame(rows)
