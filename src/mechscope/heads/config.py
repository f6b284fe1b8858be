"""The configuration of a head-attribution run (what the CLI and the demo set)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, field_validator

from mechscope.heads.ig import PATH_KINDS
from mechscope.heads.quadrature import check_method

ObjectiveKind = Literal["nll", "diffusion", "logit_diff"]


class HeadsConfig(BaseModel):
    """Every knob of ``mechscope heads run``; saved as the run's ``config.yaml``."""

    objective: ObjectiveKind = Field("nll", description="nll | diffusion | logit_diff")
    # per-layer IG meets completeness on real models; joint IG often does not at affordable
    # steps (docs/heads.md, Pitfalls), so it is there to ask for, with the report's caution
    paths: list[str] = Field(default_factory=lambda: ["per_layer"])
    baseline: float = Field(0.0, ge=0.0, lt=1.0, description="gate value at the path start")
    n_steps: int = Field(32, ge=1, description="quadrature nodes for joint / staggered IG")
    method: str = Field("gauss_legendre", description="quadrature rule")
    per_layer_steps: int | None = Field(
        4, ge=1, description="nodes per layer (per-layer paths are smooth); None: n_steps"
    )
    layers: list[int] | None = Field(None, description="layers for per-layer IG (default all)")
    lambdas: list[float] | None = Field(None, description="staggered exponents λ_l (default l/L)")
    random_paths: int = Field(8, ge=1)
    random_window: float = Field(0.5, gt=0.0, le=1.0)
    random_steps: int = Field(64, ge=1)
    internal_batch_size: int | None = Field(None, ge=1)
    refine_rtol: float | None = Field(
        None, ge=0.0, description="double the nodes of paths whose completeness error exceeds this"
    )
    refine_atol: float = Field(0.0, ge=0.0, description="absolute completeness error accepted")
    refine_doublings: int = Field(2, ge=0, description="at most n_steps × 2^k nodes per path")
    refine_paths: list[str] | None = Field(None, description="path families refined (all)")
    n_draws: int = Field(8, ge=1, description="mask draws of the masked-diffusion loss")
    eps: float = Field(1e-3, gt=0.0, lt=1.0)
    postprocess: Literal["signed", "abs", "relu"] = "signed"
    gradient_baseline: bool = True
    thresholds: list[float] = Field(default_factory=lambda: [1e-3, 5e-3])
    prune: bool = True
    prune_by: list[str] = Field(default_factory=lambda: ["per_layer"])
    prune_postprocess: Literal["signed", "abs", "relu"] = Field(
        "abs", description="how IG becomes a pruning ranking (abs: smallest effects first)"
    )
    prune_points: int = Field(11, ge=2)
    prune_max_fraction: float = Field(0.5, gt=0.0, le=1.0)
    prune_random: int = Field(3, ge=0)
    prune_one_per_layer: bool = False
    prune_samples: int | None = Field(None, ge=1)
    shapley_top: int = Field(0, ge=0, description="Shapley values for the top-k heads")
    shapley_permutations: int = Field(32, ge=2)
    shapley_samples: int = Field(2, ge=1)
    seed: int = 0

    @field_validator("paths")
    @classmethod
    def _paths(cls, v: list[str]) -> list[str]:
        bad = [p for p in v if p not in PATH_KINDS]
        if not v or bad:
            raise ValueError(f"paths among {', '.join(PATH_KINDS)}, got {v}")
        return list(dict.fromkeys(v))

    @field_validator("method")
    @classmethod
    def _method(cls, v: str) -> str:
        return check_method(v)


def build_config(**values: object) -> HeadsConfig:
    """A :class:`HeadsConfig`, with the first invalid field reported as one line."""
    from pydantic import ValidationError

    from mechscope.errors import InputError

    try:
        return HeadsConfig(**values)  # type: ignore[arg-type]
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(x) for x in err.get("loc", ())) or None
        msg = str(err.get("msg", "a valid value")).removeprefix("Value error, ")
        raise InputError(f"{msg} (got {err.get('input')!r})", field=field) from None
