"""The designs ``anchors simulate`` and ``anchors plan`` compare, one or more per question.

For a fixed design of ``n`` rollouts per position:

- ``fixed N``: ``N`` rollouts at every position (``N`` in :data:`FIXED_SHARES` of ``n``);
- ``threshold``: the first adaptive design (width 0.2, τ = 0.25, levels corrected for the
  looks, cap ``n``): every interval it stops with covers at 95 %;
- ``ranking``: every chunk's interval to width 0.3 (corrected, cap ``n``);
- ``topk @L`` / ``topk-bayes @L``: the top-5 rules at a nominal level ``L`` per look, width
  0.1, cap ``n``: they find the fixed design's top 5 for fewer rollouts;
- ``… cap C @L``: the same rules letting contested positions go on to ``C`` (``2n``, ``3n``)
  rollouts: they find more of the top 5 than the fixed design;
- ``topk-bayes cap 2n, corrected``: the Bayesian rule at 95 % split over the looks (what a
  level guaranteed under optional stopping costs).

The levels of the top-k rules are tuning knobs, not coverage claims: what they buy is
measured by the simulation (:mod:`mechscope.anchors.adaptive.simulate`), whose intervals
are all scored at the same level.
"""

from __future__ import annotations

from dataclasses import replace

from mechscope.anchors.config import AdaptiveSettings

#: the fixed designs' rollouts per position, as shares of ``n``
FIXED_SHARES = (0.1, 0.2, 0.3, 0.5, 0.7, 1.0)
#: (target, cap as a multiple of ``n``, nominal per-look level) of the top-k designs
TOPK = (
    ("topk", 1, 0.95),
    ("topk-bayes", 1, 0.9),
    ("topk-bayes", 2, 0.8),
    ("topk-bayes", 2, 0.9),
    ("topk", 3, 0.8),
)
#: interval width at which the top-k rules settle a chunk whatever the boundary
TOPK_WIDTH = 0.1


def fixed_designs(n: int) -> dict[str, int]:
    """``fixed N`` for the shares of :data:`FIXED_SHARES` (at least 1 rollout)."""
    return {f"fixed {max(1, round(s * n))}": max(1, round(s * n)) for s in FIXED_SHARES}


def adaptive_designs(n: int, base: AdaptiveSettings | None = None) -> dict[str, AdaptiveSettings]:
    """The adaptive designs of the module doc; ``base`` gives ``n_min``, ``step``, ``k``,
    ``budget`` and ``count_no_answer`` (default settings otherwise)."""
    base = base or AdaptiveSettings()
    common = {"n_min": base.n_min, "step": base.step, "k": base.k, "budget": base.budget,
              "count_no_answer": base.count_no_answer, "prior": "none"}  # fmt: skip
    make = lambda **kw: AdaptiveSettings(**(common | kw))  # noqa: E731
    out = {
        "threshold": make(),
        "ranking": make(target="ranking", width=0.3, threshold=None),
    }
    for target, times, level in TOPK:
        cap = "" if times == 1 else f" cap {times * n}"
        out[f"{target}{cap} @{level:g}"] = make(
            target=target, width=TOPK_WIDTH, correction="none", confidence=level,
            cap=None if times == 1 else times * n,
        )  # fmt: skip
    out[f"topk-bayes cap {2 * n}, corrected"] = make(
        target="topk-bayes", width=TOPK_WIDTH, cap=2 * n
    )
    return out


def standard_designs(n: int, rule: AdaptiveSettings | None = None) -> dict:
    """Fixed designs, the adaptive ones, and ``rule`` (named ``rule``) when it is none of
    them."""
    designs: dict = dict(fixed_designs(n)) | adaptive_designs(n, rule)
    if rule is not None and rule not in designs.values():
        designs["rule"] = replace(rule)
    return designs
