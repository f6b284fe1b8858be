"""The options of the anchors steps, in one place: what a run was made with.

Every class checks itself when made, before any trace is read or written:
:class:`RolloutSettings` (how rollouts are sampled, ``anchors resample``),
:class:`AdaptiveSettings` (when the adaptive design stops sampling a position, ``anchors
resample --adaptive``, see :mod:`mechscope.anchors.adaptive.rule`),
:class:`KLOptions` and :class:`MetricOptions` (how chunk metrics compare rollout sets,
``anchors analyze``; see :mod:`mechscope.anchors.resampling.distributions` and
:mod:`mechscope.anchors.resampling.metrics`), :class:`ReceiverOptions` (``anchors receivers``, see
:mod:`mechscope.anchors.attention.receivers`) and :class:`SuppressionOptions` (``anchors suppress``,
see :mod:`mechscope.anchors.attention.suppression`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from mechscope.errors import InputError

Alignment = Literal["next_token", "same_position"]
Correction = Literal["looks", "none"]
Prior = Literal["none", "receivers", "suppression"]
Target = Literal["threshold", "ranking", "topk", "topk-bayes"]
TARGETS: tuple[str, ...] = ("threshold", "ranking", "topk", "topk-bayes")

#: Cosine at which two sentences are the same idea (the published analysis, all-MiniLM-L6-v2).
DEFAULT_THRESHOLD = 0.8


def check_generation_args(
    prompts: Sequence[str], n: int, temperature: float, top_p: float, max_new_tokens: int
) -> None:
    """The arguments of a sampling call, checked before any rollout (one line each)."""
    if any(not isinstance(p, str) or not p for p in prompts):
        raise InputError("non-empty prompt strings", field="prompts")
    if n < 1:
        raise InputError(f"n >= 1, got {n}", field="n")
    if temperature < 0:
        raise InputError(f"temperature >= 0, got {temperature}", field="temperature")
    if not 0 < top_p <= 1:
        raise InputError(f"0 < top_p <= 1, got {top_p}", field="top_p")
    if max_new_tokens < 1:
        raise InputError(f"max_new_tokens >= 1, got {max_new_tokens}", field="max_new_tokens")


@dataclass(frozen=True)
class RolloutSettings:
    """Sampling settings (the published run: 100 rollouts, T = 0.6, top-p = 0.95)."""

    n: int = 100
    n_forced: int = 0
    temperature: float = 0.6
    top_p: float = 0.95
    max_new_tokens: int = 4096
    forced_max_new_tokens: int = 32
    seed: int = 0

    def __post_init__(self) -> None:
        """Checked when the settings are made, before any trace is read or written."""
        check_generation_args(["-"], self.n, self.temperature, self.top_p, self.max_new_tokens)
        if self.n_forced < 0:
            raise InputError(f"n_forced >= 0, got {self.n_forced}", field="n_forced")
        if self.forced_max_new_tokens < 1:
            raise InputError(
                f"forced_max_new_tokens >= 1, got {self.forced_max_new_tokens}",
                field="forced_max_new_tokens",
            )


@dataclass(frozen=True)
class AdaptiveSettings:
    """The adaptive design's stopping rule (in full in :mod:`mechscope.anchors.adaptive.rule`).

    Every position first gets ``n_min`` rollouts, then ``step`` more per round while a chunk
    it enters is not yet settled for the ``target`` question, up to ``cap`` rollouts per
    position (default: the fixed design's ``n``; above it, contested positions may go past
    the fixed design) and, over a trace, ``budget`` times the fixed design's rollouts.

    ``target`` is the question the rule answers (:mod:`mechscope.anchors.adaptive.targets`):
    ``"threshold"`` (a chunk settles when its interval is at most ``width`` wide or surely
    inside ``(-threshold, threshold)``), ``"ranking"`` (only ``width``: every chunk to the
    same precision), ``"topk"`` (a chunk settles when its ``|importance|`` interval lies
    wholly above or below the boundary between the ``k``-th and ``k+1``-th largest
    estimates, or is ``width`` narrow) and ``"topk-bayes"`` (the same boundary, settled when
    the posterior probability of being above it is beyond ``confidence`` either way).
    Intervals are Newcombe's at ``confidence``, per look (``correction="none"``) or
    Bonferroni-split over the looks a chunk can get (``"looks"``, so the interval it stops
    with covers at ``confidence``). ``count_no_answer`` counts rollouts without an answer as
    wrong (as ``anchors analyze --count-no-answer``); by default they leave the
    denominators. ``prior`` orders positions by a white-box score (receiver score or
    suppression effect of their chunks).
    """

    n_min: int = 10
    step: int = 10
    width: float = 0.2
    threshold: float | None = 0.25
    confidence: float = 0.95
    correction: Correction = "looks"
    budget: float = 1.0
    count_no_answer: bool = False
    prior: Prior = "none"
    target: Target = "threshold"
    k: int = 5
    cap: int | None = None

    def __post_init__(self) -> None:
        if self.n_min < 1:
            raise InputError(f"n_min >= 1, got {self.n_min}", field="n_min")
        if self.step < 1:
            raise InputError(f"step >= 1, got {self.step}", field="step")
        if not 0 < self.width <= 2:
            raise InputError(f"0 < width <= 2 (an interval of a difference of rates), got "
                             f"{self.width}", field="width")  # fmt: skip
        if self.threshold is not None and not 0 < self.threshold <= 1:
            raise InputError(f"0 < threshold <= 1, got {self.threshold}", field="threshold")
        if not 0 < self.confidence < 1:
            raise InputError(f"0 < confidence < 1, got {self.confidence}", field="confidence")
        if self.correction not in ("looks", "none"):
            raise InputError(f"'looks' or 'none', got {self.correction!r}", field="correction")
        if not 0 < self.budget <= 1:
            raise InputError(
                f"0 < budget <= 1 (a share of the fixed design), got {self.budget}", field="budget"
            )
        if self.prior not in ("none", "receivers", "suppression"):
            raise InputError(
                f"'none', 'receivers' or 'suppression', got {self.prior!r}", field="prior"
            )
        if self.target not in TARGETS:
            raise InputError(f"one of {', '.join(TARGETS)}, got {self.target!r}", field="target")
        if self.k < 1:
            raise InputError(f"k >= 1, got {self.k}", field="k")
        if self.cap is not None and self.cap < self.n_min:
            raise InputError(f"cap >= n_min ({self.n_min}), got {self.cap}", field="cap")

    def cap_for(self, n: int) -> int:
        """The most rollouts a position may draw: ``cap``, else the fixed design's ``n``."""
        return n if self.cap is None else self.cap

    def check_against(self, n: int) -> None:
        """The rule against the fixed design's ``n`` rollouts per position (its cap)."""
        if self.n_min > self.cap_for(n):
            raise InputError(f"n_min <= the cap per position ({self.cap_for(n)}), got "
                             f"{self.n_min}", field="n_min")  # fmt: skip
        if self.budget * n < self.n_min:
            raise InputError(
                f"budget >= n_min / n = {self.n_min / n:g} (every position's first round), "
                f"got {self.budget}",
                field="budget",
            )


@dataclass(frozen=True)
class KLOptions:
    """How two rollout sets are compared (see :mod:`mechscope.anchors.resampling.distributions`)."""

    alpha: float = 1.0
    weighting: Literal["unsmoothed", "smoothed"] = "unsmoothed"
    distribution: Literal["answers", "correctness"] = "answers"
    count_no_answer: bool = False

    def __post_init__(self) -> None:
        if not self.alpha > 0:
            raise InputError(f"alpha > 0, got {self.alpha}", field="alpha")
        if self.weighting not in ("unsmoothed", "smoothed"):
            raise InputError(f"weighting 'unsmoothed' or 'smoothed', got {self.weighting!r}")
        if self.distribution not in ("answers", "correctness"):
            raise InputError(f"distribution 'answers' or 'correctness', got {self.distribution!r}")


@dataclass(frozen=True)
class MetricOptions:
    """Choices for :func:`chunk_metrics` (defaults follow the published analysis)."""

    kl: KLOptions = field(default_factory=KLOptions)
    similarity_threshold: float = DEFAULT_THRESHOLD
    cf_reference: Literal["kept_and_similar", "kept"] = "kept_and_similar"

    def __post_init__(self) -> None:
        if self.cf_reference not in ("kept_and_similar", "kept"):
            raise InputError(
                f"cf_reference 'kept_and_similar' or 'kept', got {self.cf_reference!r}",
                field="cf_reference",
            )
        if not -1.0 <= self.similarity_threshold <= 1.0:
            raise InputError(
                f"a cosine threshold in [-1, 1], got {self.similarity_threshold}",
                field="similarity_threshold",
            )

    @property
    def count_no_answer(self) -> bool:
        return self.kl.count_no_answer


@dataclass(frozen=True)
class ReceiverOptions:
    """Choices of the receiver-head analysis (defaults follow the published analysis)."""

    proximity: int = 4
    top_k: int = 16
    exclude_layers: tuple[int, ...] = (0,)
    control_depth: bool = False
    n_splits: int = 100
    seed: int = 0

    def __post_init__(self) -> None:
        if self.proximity < 0:
            raise InputError(f"proximity >= 0, got {self.proximity}", field="proximity")
        if self.top_k < 1:
            raise InputError(f"top_k >= 1, got {self.top_k}", field="top_k")


@dataclass(frozen=True)
class SuppressionOptions:
    """Choices of the suppression analysis (see :mod:`mechscope.anchors.attention.suppression`)."""

    epsilon: float = 1e-9
    temperature: float = 1.0
    alignment: Alignment = "next_token"
    first_tokens: int | None = None
    rows_per_chunk: int | None = None  # None: sized by the engine's memory budget
    reuse_prefix: bool = True  # continue from the base key/value cache (causal models)
    layers: tuple[int, ...] | None = None  # None: all layers
    heads: tuple[int, ...] | None = None  # None: all heads

    def __post_init__(self) -> None:
        if not self.epsilon > 0:
            raise InputError(f"epsilon > 0, got {self.epsilon}", field="epsilon")
        if not self.temperature > 0:
            raise InputError(f"temperature > 0, got {self.temperature}", field="temperature")
        if self.alignment not in ("next_token", "same_position"):
            raise InputError(
                f"'next_token' or 'same_position', got {self.alignment!r}", field="alignment"
            )
        if self.first_tokens is not None and self.first_tokens < 1:
            raise InputError(f"first_tokens >= 1, got {self.first_tokens}", field="first_tokens")
        if self.rows_per_chunk is not None and self.rows_per_chunk < 1:
            raise InputError(
                f"rows_per_chunk >= 1, got {self.rows_per_chunk}", field="rows_per_chunk"
            )
