"""What a steering sweep does: where, along what, how hard, and what it reads off."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

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

    ``feature``: steer a dictionary's feature instead (:mod:`mechscope.steering.features`;
    the dictionary is ``dictionary``'s folder, or the object given to the sweep, and
    ``layer`` names the member of a set). With ``add`` / ``project`` the direction is the
    feature's decoder row at the site it writes to (``site`` and ``head`` are the
    dictionary's, not set here), so alpha ``α`` adds what raising the feature by ``α``
    adds; with ``clamp`` the feature's activation is set to ``α`` at every position
    (``α = 0``: the feature off, the reference the sweep's changes are read from).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    site: str = "resid_pre"
    layer: int = Field(default=0, ge=0)
    head: int | None = Field(default=None, ge=0)
    mode: Literal["add", "project", "clamp"] = "add"
    alphas: tuple[float, ...] = DEFAULT_ALPHAS
    normalize: bool = False
    max_new_tokens: int = Field(default=24, ge=0)
    policy: Literal["error", "first"] = "error"
    budget_bytes: int | None = Field(default=None, gt=0)
    dictionary: str | None = None
    feature: int | None = Field(default=None, ge=0)

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

    @model_validator(mode="after")
    def _feature(self) -> SteerConfig:
        if self.feature is None:
            if self.mode == "clamp":
                raise ValueError("mode 'clamp' clamps a feature: feature=… (--feature F)")
            if self.dictionary is not None:
                raise ValueError("dictionary with feature=… only (--feature F)")
            return self
        given = [f for f in ("site", "head") if f in self.model_fields_set]
        if given:
            raise ValueError(f"no {given[0]} with feature=…: the feature's dictionary says where")
        return self
