"""What a features run does: train dictionaries, evaluate them, explain their features.

One settings model per command (what ``config.yaml`` records), each a pydantic model, so a
rerun with other settings is refused and a resumed one continues the same work.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from mechscope.features.sites import SITES, Where

Kind = Literal["sae", "transcoder", "skip_transcoder"]
TrainActivation = Literal["topk", "batchtopk", "jumprelu"]


class CorpusConfig(BaseModel):
    """The token contexts: ``corpus`` files (none: the built-in one), ``context`` tokens
    each (the first the BOS), the first ``n_eval`` of the seeded order held out."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    corpus: tuple[str, ...] = ()
    context: int = Field(default=128, ge=2)
    n_eval: int = Field(default=64, ge=1)
    seed: int = 0


class TrainConfig(BaseModel):
    """Dictionaries trained on activations streamed from the model.

    ``site`` (and ``site_out`` for a transcoder: the MLP's input to its output by default)
    at each of ``layers``; one forward pass feeds every layer's dictionary. ``width``
    features; TopK keeps ``k`` per token (BatchTopK ``k`` per token on average over a batch,
    with a threshold estimated for inference), JumpReLU learns a threshold per feature with
    an L0 penalty ``l0_coef`` (straight-through estimator of width ``bandwidth``).
    ``tokens`` training tokens in steps of ``batch``; activations are gathered
    ``buffer`` tokens at a time, shuffled, and each buffer is used ``passes`` times (1: every
    token once, as streamed). Adam at ``lr`` (None: sparsify's ``2e-4 / √(width / 2¹⁴)``)
    with a linear decay over the last ``decay`` fraction; TopK's dead features get the
    auxiliary loss of Gao et al. (``aux_coef``, a feature is dead after ``dead_tokens``
    tokens without firing). Inputs are scaled so that their mean squared norm is ``d_in``
    (SAELens's ``expected_average_only_in``), the scale kept in the dictionary.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Kind = "sae"
    activation: TrainActivation = "topk"
    site: str = "resid_post"
    site_out: str | None = None
    layers: tuple[int, ...] = (0,)
    width: int = Field(default=4096, ge=2)
    k: int = Field(default=32, ge=1)
    tokens: int = Field(default=1_000_000, ge=1)
    batch: int = Field(default=4096, ge=1)
    buffer: int = Field(default=65_536, ge=1)
    passes: int = Field(default=1, ge=1)
    forward_batch: int = Field(default=16, ge=1)
    lr: float | None = Field(default=None, gt=0)
    decay: float = Field(default=0.2, ge=0, le=1)
    aux_coef: float = Field(default=1 / 32, ge=0)
    dead_tokens: int = Field(default=200_000, ge=1)
    l0_coef: float = Field(default=5.0, ge=0)
    bandwidth: float = Field(default=0.001, gt=0)
    init_threshold: float = Field(default=0.001, gt=0)
    checkpoint_every: int = Field(default=50, ge=1)
    corpus: CorpusConfig = CorpusConfig()

    @model_validator(mode="after")
    def _check(self) -> TrainConfig:
        out = self.output_site
        if self.site not in SITES or out not in SITES:
            raise ValueError(f"sites among {', '.join(SITES)}, got {self.site!r} → {out!r}")
        if self.kind == "sae" and out != self.site:
            raise ValueError("an SAE writes the site it reads: give site_out only to a transcoder")
        if self.kind != "sae" and out == self.site:
            raise ValueError(f"a {self.kind} writes another site than it reads, got {out!r}")
        if not self.layers or len(set(self.layers)) != len(self.layers):
            raise ValueError(f"distinct layers, got {list(self.layers)}")
        if self.activation != "jumprelu" and self.k > self.width:
            raise ValueError(f"k ≤ width, got k {self.k} and width {self.width}")
        return self

    @property
    def output_site(self) -> str:
        if self.site_out is not None:
            return self.site_out
        if self.kind != "sae" and self.site == "mlp_in":
            return "mlp_out"
        return self.site if self.kind == "sae" else "mlp_out"

    @property
    def wheres(self) -> list[Where]:
        return [Where(layer, self.site, self.output_site) for layer in self.layers]

    @property
    def steps(self) -> int:
        return math.ceil(self.tokens / self.batch)

    @property
    def learning_rate(self) -> float:
        return self.lr if self.lr is not None else 2e-4 / math.sqrt(self.width / 2**14)


class EvalConfig(BaseModel):
    """Evaluation on the held-out contexts: every metric of :mod:`mechscope.features.metrics`
    over the first ``contexts`` of them (None: all ``n_eval``) in passes of
    ``forward_batch``; ``per_token`` keeps every token's values; intervals from
    ``n_resamples`` bootstrap resamples of contexts."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    contexts: int | None = Field(default=None, ge=1)
    forward_batch: int = Field(default=8, ge=1)
    per_token: bool = False
    dense_threshold: float = Field(default=0.1, gt=0, le=1)
    n_resamples: int = Field(default=1000, ge=10)
    corpus: CorpusConfig = CorpusConfig()


class ExplainConfig(BaseModel):
    """Feature dashboards from the first ``contexts`` contexts (the held-out ones first):
    the ``top`` contexts of each of ``features`` (None: ``n_features`` features that fire,
    drawn with the corpus's seed), ``per_quantile`` contexts from each of ``quantiles``
    activation bands, a window of ``window`` tokens around the activation, ``logits`` top
    and bottom tokens of the decoder row through the unembedding."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    contexts: int = Field(default=256, ge=1)
    features: tuple[int, ...] | None = None
    n_features: int = Field(default=48, ge=1)
    top: int = Field(default=20, ge=1)
    quantiles: int = Field(default=5, ge=1)
    per_quantile: int = Field(default=5, ge=0)
    window: int = Field(default=24, ge=2)
    logits: int = Field(default=10, ge=1)
    bins: int = Field(default=40, ge=2)
    forward_batch: int = Field(default=8, ge=1)
    corpus: CorpusConfig = CorpusConfig()
