"""What a patching sweep does: the site, the grid, the directions and the readout.

A sweep is described once, as a value, so the same description drives the exact sweep,
attribution patching, the CLI and the run directory's ``config.yaml`` (resuming a run
requires the same spec).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from mechscope.errors import first_problem

PATCH_SITES = (
    "resid_pre",
    "resid_mid",
    "resid_post",
    "attn_out",
    "mlp_out",
    "mlp_post",
    "z",
    "q",
    "k",
    "v",
    "feature",
)
#: Sites patched one head at a time (``k`` and ``v`` count key/value heads).
PER_HEAD_SITES = ("z", "q", "k", "v")
#: Features a ``feature`` sweep patches when none are named: the most active on the clean
#: prompts (:func:`mechscope.patching.features.choose_features`).
DEFAULT_TOP_FEATURES = 10
Direction = Literal["denoising", "noising"]
Granularity = Literal["position", "span", "all"]
#: What a span sweep does when a span has more tokens in one prompt than in the other
#: (audio clips of different durations): ``error`` refuses; ``pad`` pads the shorter audio
#: with silence (an image with black) before the processor, so both spans have as many
#: tokens; ``truncate`` patches the first ``min`` positions of both; ``pool`` writes the
#: source span, average-pooled to the base span's length, over the whole base span.
SpanPolicy = Literal["error", "pad", "truncate", "pool"]

#: Metric columns of every result, in table order.
METRICS = (
    "logit_diff",
    "delta_logit",
    "target_logit",
    "target_prob",
    "target_logprob",
    "flip_to_target",
    "flip_from_base",
    "kl_to_base",
    "js_to_base",
    "normalized_effect",
)
#: Metrics attribution patching can estimate (scalar functions of the readout logits).
ATTRIBUTION_METRICS = ("logit_diff", "target_logit", "target_logprob")
#: Metrics read off the answer tokens' logits alone (correct, wrong, target): a sweep that
#: asks for no others unembeds those few tokens only, not the whole vocabulary.
TOKEN_METRICS = ("logit_diff", "delta_logit", "target_logit", "normalized_effect")


class PatchSpec(BaseModel):
    """One activation-patching sweep.

    ``direction``: *denoising* patches the clean run's activation into the corrupt run
    (is this activation sufficient to restore the answer?); *noising* patches the corrupt
    activation into the clean run (is it necessary?). In both, ``base`` is the run that is
    edited, ``source`` the run the value comes from, and the *target* token is the
    source's answer (``correct`` when denoising, ``wrong`` when noising).

    ``granularity``: ``position`` patches one token position at a time (base and source
    must have the same length); ``span`` patches each named span (aligned by name, so
    lengths may differ as long as each span has the same number of tokens on both sides, or
    ``span_policy`` says how to align spans of different lengths);
    ``all`` patches every position at once. Sites ``z``, ``q``, ``k`` and ``v`` are patched
    one head at a time (``k`` / ``v``: key/value heads under grouped-query attention).

    ``metrics``: the metric columns to compute (default: all of :data:`METRICS`).
    ``logit_diff`` and ``normalized_effect`` are always among them (the baselines, the
    report's heatmaps and its strongest cell are made of them), and so is
    ``attribution_metric`` with ``attribution``. A sweep whose metrics
    are all :data:`TOKEN_METRICS`, or that has ``candidates`` (then every metric is over
    them), reads out only the tokens they need: the unembedding's product shrinks from
    the whole vocabulary to a few rows.

    ``site="feature"`` patches a sparse dictionary's features one at a time
    (:meth:`~mechscope.engine.Site.feature`: spliced with its error term, so a patch changes
    only that feature's decoder contribution): ``dictionary`` is its folder (any layout
    :func:`~mechscope.dictionaries.load_dictionary` reads; a set or cross-layer transcoder
    with one ``layers`` entry naming the member), or the loaded object is given to
    :func:`~mechscope.patching.patch_pairs` (``dictionary=``). ``features`` names the
    feature indices; ``top_features=k`` takes the ``k`` most active on the clean prompts
    (the default, with ``k`` = :data:`DEFAULT_TOP_FEATURES`). The feature axis is the grid's
    head axis: results and figures label it by feature.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    site: str = "resid_pre"
    granularity: Granularity = "position"
    directions: tuple[Direction, ...] = ("denoising",)
    layers: tuple[int, ...] | None = None
    positions: tuple[int, ...] | None = None
    spans: tuple[str, ...] | None = None
    heads: tuple[int, ...] | None = None
    candidates: tuple[str, ...] | None = None
    policy: Literal["error", "first"] = "error"
    span_policy: SpanPolicy = "error"
    skip_identical: bool = True
    budget_bytes: int | None = Field(default=None, gt=0)
    attribution: bool = False
    attribution_metric: Literal["logit_diff", "target_logit", "target_logprob"] = "logit_diff"
    exact: bool = True
    top_k: int = Field(default=20, gt=0)
    dictionary: str | None = None
    features: tuple[int, ...] | None = None
    top_features: int | None = Field(default=None, gt=0)
    metrics: tuple[str, ...] | None = None
    _dictionary: Any = PrivateAttr(default=None)  # the loaded object (with_dictionary)

    @field_validator("site")
    @classmethod
    def _site(cls, value: str) -> str:
        if value not in PATCH_SITES:
            raise ValueError(f"expected one of {', '.join(PATCH_SITES)}, got {value!r}")
        return value

    @field_validator("directions")
    @classmethod
    def _directions(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value or len(set(value)) != len(value):
            raise ValueError("expected one or both of 'denoising', 'noising', without repeats")
        return value

    @field_validator("metrics")
    @classmethod
    def _metrics(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is None:
            return None
        unknown = [m for m in value if m not in METRICS]
        if unknown or not value:
            raise ValueError(f"expected metrics among {', '.join(METRICS)}, got {unknown or value}")
        always = ("logit_diff", "normalized_effect")
        return tuple(m for m in METRICS if m in value or m in always)

    @property
    def metric_names(self) -> tuple[str, ...]:
        """The metric columns this sweep computes, in :data:`METRICS` order."""
        if self.metrics is None:
            return METRICS
        extra = {self.attribution_metric} if self.attribution else set()
        return tuple(m for m in METRICS if m in self.metrics or m in extra)

    @model_validator(mode="after")
    def _feature_axis(self) -> PatchSpec:
        named = [
            f for f in ("dictionary", "features", "top_features") if getattr(self, f) is not None
        ]
        if self.site != "feature" and named:
            raise ValueError(f"{named[0]} with site 'feature' only, got site {self.site!r}")
        if self.features is not None and self.top_features is not None:
            raise ValueError("features or top_features, not both")
        if self.features is not None and (
            not self.features or len(set(self.features)) != len(self.features)
        ):
            raise ValueError("expected at least one feature index, without repeats")
        if self.site == "feature" and self.heads is not None:
            raise ValueError("features=… for a feature sweep, not heads")
        return self

    @property
    def per_head(self) -> bool:
        """Whether the grid's head axis is swept (heads, or a feature site's features)."""
        return self.site in PER_HEAD_SITES or self.site == "feature"

    def with_dictionary(self, dictionary: Any) -> PatchSpec:
        """This spec with a loaded dictionary for ``site="feature"`` (used instead of
        loading ``dictionary``'s folder; not written to a run's config)."""
        out = self.model_copy()
        out._dictionary = dictionary
        return out


Head = tuple[int, int]
"""``(layer, head)``; a key/value head where the receivers' input is ``k`` or ``v``."""
ReceiverInput = Literal["q", "k", "v", "resid_final"]


class PathSpec(BaseModel):
    """One path-patching sweep (:mod:`mechscope.patching.path_core`).

    ``senders`` and ``receivers`` are groups of heads: each sender group is patched from the
    corrupt run on its own, each receiver group has its inputs patched together, and every
    (sender group, receiver group) is one cell. One head per group is the senders ×
    receivers sweep; one receiver group of several heads (the IOI paper's name movers) is
    its per-sender figure. ``receiver_input``: the receivers' queries, keys or values
    (``k``/``v``: key/value heads), or ``resid_final`` (the logits: no receivers).
    ``freeze_mlps``: MLPs frozen at their clean outputs in the sender pass (default:
    recomputed, as in the IOI paper's code and ARENA).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    senders: tuple[tuple[Head, ...], ...]
    receivers: tuple[tuple[Head, ...], ...] = ()
    receiver_input: ReceiverInput = "q"
    freeze_mlps: bool = False
    policy: Literal["error", "first"] = "error"
    budget_bytes: int | None = Field(default=None, gt=0)

    def __init__(self, **values: Any) -> None:
        """Checked as it is made: a bad value is one :class:`InputError` line naming the
        field (pydantic's error runs over several)."""
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise first_problem(exc) from None

    @field_validator("senders")
    @classmethod
    def _senders(cls, value: tuple) -> tuple:
        if not value or not all(value):
            raise ValueError("expected at least one sender head in every group")
        return value


def head_label(group: tuple[Head, ...]) -> str:
    """``9.6`` for one head, ``9.6+9.9`` for a group (the IOI paper's layer.head)."""
    return "+".join(f"{layer}.{head}" for layer, head in group)
