"""Information purity: is the contrastive difference d a cleaner carrier of the task than h?

At *unmodified* key positions (same token in clean and corrupt), logistic-regression probes
read a task label and a control label from either the clean representation ``h`` or the
difference ``d = h_clean - h_corrupt``; accuracies are cross-validated (5 folds, each pair
held out once). Selectivity (Hewitt & Liang, 2019) is task accuracy minus control
accuracy: a representation that encodes the task but not incidental facts (which template
was used) has high selectivity. Labels: IOI task = name order (ABBA = 1),
facts task = the most frequent relation vs the rest, WinoGrande task = which option is the
answer, math task = the operation; control = template parity (IOI, math), a hash of the
subject (facts), or of the pair id (otherwise).

That control is a real attribute of the pair, which the representation may well carry, so
it says little about the probe's own capacity. Hewitt & Liang's **control task** does:
each word type gets one fixed random label (:func:`type_control_labels`), a labelling only
a probe that memorises types can fit; ``hl_selectivity`` = task accuracy − control-task
accuracy. The type of a sample is the clean token at the probed position, except where
that token is the same in (nearly) every pair (IOI's ``end``): there it is the clean token
of the first key position whose token varies (IOI's ``IO``, a name), the word the state at
the probed position must carry to do the task (:func:`control_types`; the row's
``hl_type_position`` names it). Where no key position varies the control task has one
class and is undefined (NaN).
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Hashable, Sequence

import numpy as np
import pandas as pd
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold, cross_val_predict
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from mechscope.data.pairs import ContrastivePair
from mechscope.distill.intervals import mean_ci
from mechscope.errors import InputError

#: Cross-validation folds of every probe: each sample is held out once.
FOLDS = 5

#: A key position whose most frequent clean token is held by at least this share of the
#: pairs counts as constant: the control task on its types has (nearly) one class.
CONSTANT_SHARE = 0.9


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


def type_control_labels(
    types: Sequence[Hashable] | np.ndarray, *, share: float = 0.5, seed: int = 0
) -> np.ndarray:
    """Hewitt & Liang's (2019) control task: ``[N]`` binary labels, one fixed random label
    per distinct type (label 1 with probability ``share``, the task's share of 1s, so the
    two tasks have the same balance in expectation).

    Types are labelled in sorted order from one generator seeded with ``seed``, so the same
    types get the same labels in every call, whatever order the samples come in.
    """
    values = np.asarray(types)
    distinct = sorted(set(values.tolist()))
    draw = np.random.default_rng(seed).random(len(distinct)) < share
    label = dict(zip(distinct, draw.astype(np.int64).tolist(), strict=True))
    return np.array([label[v] for v in values.tolist()], dtype=np.int64)


def varies(tokens: np.ndarray, *, max_share: float = CONSTANT_SHARE) -> bool:
    """Whether ``tokens`` ``[N]`` hold more than one type, the most frequent on fewer than
    ``max_share`` of the samples."""
    values = np.asarray(tokens)
    if values.size == 0:
        return False
    _, counts = np.unique(values, return_counts=True)
    return counts.size > 1 and counts.max() < max_share * values.size


def control_types(key_types: np.ndarray, probed: Sequence[int]) -> tuple[np.ndarray, list[int]]:
    """The types the control task labels at each probed position: ``[N, P']``, and for each
    probed position the key position whose tokens they are.

    ``key_types``: ``[N, K]`` the clean token at every key position; ``probed``: the key
    positions (columns) probed. A probed position whose token :func:`varies` is typed by
    its own tokens, as in Hewitt & Liang. One whose token is (nearly) constant (IOI's
    ``end``) would give the control task a single class, so it is typed by the first key
    position whose token varies: the word (IOI's ``IO`` name) the state there must carry
    from earlier in the prompt, whose memorisation is what the control task measures.
    Where no key position varies the probed position keeps its own constant tokens (the
    control task stays undefined).
    """
    key_types = np.asarray(key_types)
    first = next((k for k in range(key_types.shape[1]) if varies(key_types[:, k])), None)
    source = [p if varies(key_types[:, p]) or first is None else first for p in probed]
    return key_types[:, source], source


def probe_correct(x: np.ndarray, y: np.ndarray, *, seed: int = 0) -> np.ndarray | None:
    """Whether a standardised logistic-regression probe gets each sample right when it is
    held out: ``[N]`` bool, from ``FOLDS``-fold stratified cross-validation (every sample
    is predicted once, by a probe fitted on the other folds).

    ``None`` when the label has a single class (nothing to learn) or a class has fewer
    samples than folds.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y)
    if x.ndim != 2 or y.shape != (x.shape[0],):
        raise InputError(f"expected x [N, d] and y [N], got {x.shape} and {y.shape}", field="y")
    counts = np.bincount(y) if y.size else np.array([])
    if (counts > 0).sum() < 2 or counts[counts > 0].min() < FOLDS:
        return None
    probe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
    folds = StratifiedKFold(FOLDS, shuffle=True, random_state=seed)
    return cross_val_predict(probe, x, y, cv=folds) == y


def probe_accuracy(x: np.ndarray, y: np.ndarray, *, seed: int = 0) -> float:
    """Held-out accuracy of the probe (:func:`probe_correct`); NaN where it is ``None``."""
    correct = probe_correct(x, y, seed=seed)
    return float("nan") if correct is None else float(correct.mean())


def selectivity(
    x: np.ndarray, task: np.ndarray, control: np.ndarray, *, seed: int = 0
) -> tuple[dict[str, float], np.ndarray | None]:
    """Task accuracy, control accuracy, their difference and its 95 % interval for one
    representation, and the per-sample difference ``[N]`` (task right − control right).

    The interval is Student-t over samples of that per-sample difference
    (:func:`~mechscope.distill.intervals.mean_ci`): how the selectivity would move with
    other pairs of the task, the probes' fits held fixed.
    """
    ct, cc = probe_correct(x, task, seed=seed), probe_correct(x, control, seed=seed)
    nan = float("nan")
    acc_t = nan if ct is None else float(ct.mean())
    acc_c = nan if cc is None else float(cc.mean())
    per = None if ct is None or cc is None else ct.astype(float) - cc.astype(float)
    low, high = mean_ci(per) if per is not None else (nan, nan)
    row = {"task_acc": acc_t, "control_acc": acc_c, "selectivity": acc_t - acc_c}
    return {**row, "ci_low": low, "ci_high": high}, per


def information_purity(
    h_clean: np.ndarray,
    h_corrupt: np.ndarray,
    labels: dict[str, np.ndarray],
    layers: Sequence[int],
    positions: Sequence[str],
    *,
    types: np.ndarray | None = None,
    type_positions: Sequence[str] | None = None,
    seed: int = 0,
) -> pd.DataFrame:
    """Probe ``h`` and ``d`` at each (layer, position).

    ``types``: ``[N, P]`` the word type of each sample at each position (see
    :func:`control_types`); given, each row also holds the control-task accuracy
    (:func:`type_control_labels`, one labelling per position), ``hl_selectivity`` = task −
    control task and its interval (``hl_ci_low``/``_high``), and ``hl_type_position``, the
    key position whose tokens are the types (``type_positions``, default the position).

    ``h_clean``/``h_corrupt``: ``[N, L, P, d]`` for the chosen ``layers`` and ``positions``
    (in that order). One row per (layer, position, representation); the ``d`` row also
    holds ``d_minus_h``, selectivity(d) − selectivity(h), with its 95 % interval paired over
    samples (the plan's expectation is that it is positive).
    """
    rows = []
    typed_by = list(positions if type_positions is None else type_positions)
    for li, layer in enumerate(layers):
        for pi, pos in enumerate(positions):
            h = h_clean[:, li, pi]  # [N, d]
            d = h - h_corrupt[:, li, pi]
            per: dict[str, np.ndarray | None] = {}
            hl = None
            if types is not None:
                share = float(np.mean(labels["task"])) if len(labels["task"]) else 0.5
                hl = type_control_labels(types[:, pi], share=share, seed=seed)
            for rep, x in (("h", h), ("d", d)):
                stats, per[rep] = selectivity(x, labels["task"], labels["control"], seed=seed)
                row = {"layer": int(layer), "position": pos, "representation": rep, **stats}
                if hl is not None:
                    ctl, _ = selectivity(x, labels["task"], hl, seed=seed)
                    row.update(
                        hl_control_acc=ctl["control_acc"],
                        hl_selectivity=ctl["selectivity"],
                        hl_ci_low=ctl["ci_low"],
                        hl_ci_high=ctl["ci_high"],
                        hl_type_position=typed_by[pi],
                    )
                row["n"] = int(x.shape[0])
                rows.append(row)
            both = per["h"] is not None and per["d"] is not None
            diff = per["d"] - per["h"] if both else None
            low, high = mean_ci(diff) if diff is not None else (float("nan"),) * 2
            rows[-1].update(
                d_minus_h=float(diff.mean()) if diff is not None else float("nan"),
                d_minus_h_ci_low=low,
                d_minus_h_ci_high=high,
            )
    return pd.DataFrame(rows)
