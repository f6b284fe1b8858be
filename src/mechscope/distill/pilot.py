"""Pilot validation (run before any distillation): is this teacher/tokenizer usable for RCID?

The five checks of the plan, each reported with its value and expectation:

1. the teacher solves IOI (accuracy above ``min_accuracy``);
2. the tokenizer has enough single-token names for IOI (at least ``min_names``);
3. on a few IOI pairs the contrastive difference norms grow with depth (upper half of the
   layers above the lower half) and are not all ≈ 0;
4. patching one checkpoint (the strongest unmodified position) changes the logit
   difference (mean effect > 0, one-sided t-test p < 0.05);
5. the undistilled student's baseline IOI accuracy (capacity; informational).
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
from scipy import stats

from mechscope.data.ioi_pools import NAMES
from mechscope.data.tokens import filter_single_token_names
from mechscope.distill.alignment import key_reads
from mechscope.distill.checkpoints import contrast_scores
from mechscope.distill.config import TaskSpec
from mechscope.distill.consistency import causal_effects
from mechscope.distill.evaluate import task_accuracy
from mechscope.distill.pairset import build_pairset
from mechscope.distill.samples import build_task
from mechscope.engine import Engine
from mechscope.models import LoadedModel


@dataclass
class PilotCheck:
    name: str
    passed: bool | None  # None: informational
    value: str
    expected: str


def _ioi_set(lm: LoadedModel, n: int, seed: int, names: list[str] | None):
    from mechscope.data.pairs import tokenize_pairs

    spec = TaskSpec(
        name="ioi", n_train=max(n, 4), n_test=4, n_ood=0, seed=seed, oversample=1.0, names=names
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pairs = build_task(spec, lm.tokenizer).train[:n]
    pad = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else 0
    return build_pairset(tokenize_pairs(pairs, lm.tokenizer), pad)


def run_pilot(
    teacher: LoadedModel,
    student: LoadedModel | None = None,
    *,
    n_accuracy: int = 100,
    n_pairs: int = 10,
    min_accuracy: float = 0.95,
    min_names: int = 20,
    seed: int = 0,
    names: list[str] | None = None,
    batch_size: int = 16,
) -> list[PilotCheck]:
    """Run the five pilot checks; nothing is trained."""
    checks: list[PilotCheck] = []
    eng = Engine.of(teacher)
    acc_set = _ioi_set(teacher, n_accuracy, seed, names)
    acc = task_accuracy(eng, acc_set, batch_size)
    checks.append(
        PilotCheck(
            "teacher IOI accuracy",
            acc > min_accuracy,
            f"{acc:.3f}",
            f"> {min_accuracy} on {len(acc_set)} pairs",
        )
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pool, _ = filter_single_token_names(names or NAMES, teacher.tokenizer)
    checks.append(
        PilotCheck(
            "single-token names",
            len(pool) >= min_names,
            f"{len(pool)} of {len(names or NAMES)}",
            f">= {min_names}",
        )
    )
    small = acc_set.subset(range(min(n_pairs, len(acc_set))))
    layers = list(range(teacher.n_layers))
    hc, hk = key_reads(teacher, small, layers, batch_size=batch_size)
    scores = contrast_scores(hc, hk).numpy()  # [L, P]
    per_layer = scores.max(1)  # [L]
    half = teacher.n_layers // 2
    low, high = float(per_layer[:half].mean()), float(per_layer[half:].mean())
    nonzero = bool(per_layer.max() > 1e-3)
    checks.append(
        PilotCheck(
            "difference norms grow with depth",
            nonzero and high > low,
            f"lower half {low:.3g}, upper half {high:.3g}",
            "upper > lower, not all ≈ 0",
        )
    )
    mods = small.modified_fraction()
    unmod = [p for p in range(len(small.names)) if mods[p] <= 0.5]
    cand = unmod if unmod and scores[:, unmod].max() > 1e-6 else list(range(len(small.names)))
    layer, p = np.unravel_index(np.argmax(scores[:, cand]), (scores.shape[0], len(cand)))
    site = (int(layer), int(cand[p]))
    delta, _ = causal_effects(eng, small, [site], batch_size=batch_size)
    d = delta[0].double().numpy()
    pval = float(stats.ttest_1samp(d, 0.0, alternative="greater").pvalue) if d.std() > 0 else 1.0
    checks.append(
        PilotCheck(
            f"patching L{site[0]}:{small.names[site[1]]} has an effect",
            bool(d.mean() > 0 and pval < 0.05),
            f"mean Δ {d.mean():.3f}, p = {pval:.3g}",
            "mean Δ > 0, p < 0.05",
        )
    )
    if student is not None:
        s_acc = task_accuracy(Engine.of(student), acc_set, batch_size)
        checks.append(
            PilotCheck(
                "student baseline IOI accuracy (undistilled)",
                None,
                f"{s_acc:.3f}",
                "informational: the student's capacity",
            )
        )
    return checks


def pilot_table(checks: list[PilotCheck]) -> pd.DataFrame:
    return pd.DataFrame([asdict(c) for c in checks])
