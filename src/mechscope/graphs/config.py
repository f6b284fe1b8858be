"""What a graph run computes: one prompt's attribution graph and its pruning.

A pydantic model (what ``config.yaml`` records), so a rerun with other settings is
refused and a resumed one returns the same graph.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator


class GraphConfig(BaseModel):
    """``prompt`` (a BOS put first, as circuit-tracer does), the transcoders' folder, the
    logit targets (the most probable up to ``max_n_logits`` or ``desired_logit_prob`` of
    the mass), ``batch_size`` rows per backward pass, at most ``max_feature_nodes``
    features chosen by influence (None: every active one), the pruning thresholds of
    the written graph (circuit-tracer's defaults), and the attention scores ``qk`` to
    split over the nodes (``LAYER.HEAD:QPOS,KPOS``, :mod:`mechscope.graphs.qk`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt: str = Field(min_length=1)
    transcoders: str
    max_n_logits: int = Field(default=10, ge=1)
    desired_logit_prob: float = Field(default=0.95, gt=0.0, le=1.0)
    batch_size: int = Field(default=64, ge=1)
    max_feature_nodes: int | None = Field(default=None, ge=1)
    node_threshold: float = Field(default=0.8, ge=0.0, le=1.0)
    edge_threshold: float = Field(default=0.98, ge=0.0, le=1.0)
    slug: str = Field(default="graph", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
    qk: tuple[str, ...] = ()

    @field_validator("qk")
    @classmethod
    def _scores(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        from mechscope.errors import InputError
        from mechscope.graphs.qk_targets import parse_target

        for text in value:
            try:
                parse_target(text)
            except InputError as exc:
                raise ValueError(exc.expected) from None
        return value
