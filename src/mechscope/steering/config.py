"""What a steering sweep does: where, along what, how hard, and what it reads off."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from mechscope.engine.interventions.values import STEER_HEAD_SITES, STEER_SITES
from mechscope.errors import first_problem

DEFAULT_ALPHAS = (-8.0, -4.0, -2.0, 0.0, 2.0, 4.0, 8.0)


class SteerConfig(BaseModel):
    """One alpha sweep.

    ``site`` / ``layer`` / ``head``: where the direction is added (``head`` for
    ``z``/``q``/``k``/``v``). ``mode``: ``add`` (``h + alpha * v``) or ``project``
    (``h - alpha * (h · d) d``, ``d = v / |v|``: alpha 1 removes the direction). The
    vector is the contrastive pairs' mean difference (positive − negative) at the last
    token of ``site`` (CAA), unless a vector is given; ``normalize`` scales it to unit
    length first, so alpha is a length in activation units. Every position is steered,
    and every generated token. ``alphas`` always include 0, the unsteered run.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    site: str = "resid_pre"
    layer: int = Field(default=0, ge=0)
    head: int | None = Field(default=None, ge=0)
    mode: Literal["add", "project"] = "add"
    alphas: tuple[float, ...] = DEFAULT_ALPHAS
    normalize: bool = False
    max_new_tokens: int = Field(default=24, ge=0)
    policy: Literal["error", "first"] = "error"
    budget_bytes: int | None = Field(default=None, gt=0)

    def __init__(self, **values: Any) -> None:
        """Checked as it is made: a bad value is one :class:`InputError` line naming the
        field (pydantic's error runs over several)."""
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise first_problem(exc) from None

    @field_validator("site")
    @classmethod
    def _site(cls, value: str) -> str:
        known = STEER_SITES + STEER_HEAD_SITES
        if value not in known:
            raise ValueError(f"expected one of {', '.join(known)}, got {value!r}")
        return value

    @field_validator("alphas")
    @classmethod
    def _alphas(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        if not value:
            raise ValueError("expected at least one alpha")
        bad = [a for a in value if not math.isfinite(a)]
        if bad:
            raise ValueError(f"expected finite alphas, got {bad[0]}")
        return tuple(sorted(set(value) | {0.0}))
