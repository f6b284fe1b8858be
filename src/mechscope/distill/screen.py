"""Is a checkpoint candidate causal? The teacher's own patch effect there, on training pairs.

The checkpoint search ranks (layer, key position) by the norm of the contrastive difference
``d``. A large ``d`` says the clean and corrupt runs differ there, not that anything later
reads the difference: at a modified position the changed token's difference persists up to
the last layer. Consistency at such a site compares the student with a teacher that does
not respond (Δ_T ≈ 0, noise), and RCID would match directions that carry nothing.

:class:`EffectScreen` accepts a candidate when patching it in the teacher (clean run, the
teacher's corrupt value, the same Δ as :mod:`mechscope.distill.consistency`) moves the
logit difference by at least ``min_effect`` times its mean clean value, averaged over the
first ``SCREEN_PAIRS`` training pairs (never the test pairs consistency is measured on).
The clean and corrupt passes (every layer read) run once; each candidate then costs one
patched pass per batch, and only the candidates the selection reaches are tested
(:func:`mechscope.distill.checkpoints.select_checkpoints` calls it lazily).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from mechscope.distill.pairset import PairSet
from mechscope.distill.passes import answer_logits, patched_logit_diffs, read_resid
from mechscope.engine import Engine
from mechscope.engine.core.unembed import logit_diff

SCREEN_PAIRS = 32


@dataclass
class EffectScreen:
    """``screen(layer, position index) -> bool``; ``effects`` records every tested site.

    ``effects[(layer, p)]`` is the mean Δ over the screening pairs divided by their mean clean
    logit difference (1 = the patch removes the whole preference on average, 0 = no effect).
    """

    eng: Engine
    data: PairSet
    min_effect: float
    batch_size: int = 16
    effects: dict[tuple[int, int], float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.data = self.data.subset(range(min(SCREEN_PAIRS, len(self.data))))
        self._batches: list[tuple[PairSet, torch.Tensor, dict[int, torch.Tensor]]] = []

    @torch.no_grad()
    def _prepare(self) -> None:
        """Clean logit differences and every layer of the corrupt run, per batch, once."""
        last, every = self.eng.lm.n_layers - 1, range(self.eng.lm.n_layers)
        for start in range(0, len(self.data), self.batch_size):
            b = self.data.subset(range(start, min(start + self.batch_size, len(self.data))))
            hc = read_resid(self.eng, b.clean, b.clean_mask, [last])[last]
            ld = logit_diff(answer_logits(self.eng, hc, b.answer[:, 0]), b.correct, b.wrong)
            hk = read_resid(self.eng, b.corrupt, b.corrupt_mask, every)
            self._batches.append((b, ld.cpu(), hk))

    def relative_effect(self, layer: int, pos: int) -> float:
        """Mean Δ at ``(layer, pos)`` over mean clean logit difference (pairs kept by the
        teacher filter have a positive clean difference, so the ratio's sign is Δ's)."""
        if (layer, pos) not in self.effects:
            if not self._batches:
                self._prepare()
            delta = torch.cat(
                [
                    ld - patched_logit_diffs(self.eng, b, [(layer, pos)], hk)[0]
                    for b, ld, hk in self._batches
                ]
            )
            clean = torch.cat([ld for _, ld, _ in self._batches])
            self.effects[layer, pos] = float(delta.double().mean() / clean.double().mean())
        return self.effects[layer, pos]

    def __call__(self, layer: int, pos: int) -> bool:
        return abs(self.relative_effect(layer, pos)) >= self.min_effect

    def table(self, names: list[str]) -> list[dict[str, float | int | str]]:
        """Every tested site as ``{"layer", "position", "relative_effect"}`` (JSON-ready)."""
        return [
            {"layer": layer, "position": names[p], "relative_effect": r}
            for (layer, p), r in sorted(self.effects.items())
        ]
