"""What an edge-circuit run does: how edges are scored, how circuits are chosen and judged."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from mechscope.circuits.attribute import METHODS
from mechscope.circuits.faithfulness import SHARES
from mechscope.circuits.metrics import METRICS


class CircuitConfig(BaseModel):
    """One run of ``mechscope circuit run``; saved as the run's ``config.yaml``.

    ``method`` scores every edge (:data:`~mechscope.circuits.attribute.METHODS`, with
    ``steps`` passes for the EAP-IG variants) on ``metric``; circuits of each share of the
    graph's edges (``shares``, MIB's grid by default) are chosen by ``rule`` (``topn`` or
    ``greedy``, by score in size unless ``signed``) and patched exactly to draw the
    faithfulness curve, with ``n_resamples`` bootstrap resamples of the examples for its
    intervals. The circuit written out (``circuit.json``) has ``edges`` edges, or, by
    default, is the smallest on the grid whose faithfulness reaches ``target``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    method: str = "EAP-IG-inputs"
    steps: int = Field(default=5, ge=1)
    metric: str = "logit_diff"
    rule: Literal["topn", "greedy"] = "topn"
    signed: bool = False
    shares: tuple[float, ...] = SHARES
    edges: int | None = Field(default=None, ge=1)
    target: float = Field(default=0.8, gt=0, le=1)
    batch: int = Field(default=8, ge=1)
    n_resamples: int = Field(default=2000, ge=1)
    seed: int = 0

    @field_validator("method")
    @classmethod
    def _method(cls, v: str) -> str:
        if v not in METHODS:
            raise ValueError(f"one of {', '.join(METHODS)}, got {v!r}")
        return v

    @field_validator("metric")
    @classmethod
    def _metric(cls, v: str) -> str:
        if v not in METRICS:
            raise ValueError(f"one of {', '.join(METRICS)}, got {v!r}")
        return v

    @field_validator("shares")
    @classmethod
    def _shares(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        if not v or any(not 0 < s <= 1 for s in v) or list(v) != sorted(set(v)):
            raise ValueError(f"increasing shares in (0, 1], got {list(v)}")
        return v
